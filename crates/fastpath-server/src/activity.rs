//! How many connections are busy right now, to decide whether waiting by spinning pays
//! and whether answering early does.
//!
//! A spinning wait saves the futex wake-up (15-30 µs for a halted vCPU of the 2-core VM)
//! only while both sides of a connection have a CPU. One busy caller and its connection
//! thread take two: on two CPUs 100-byte creates run at 71k/s spinning against 5.8k/s on
//! the futex alone. Two busy callers and their threads are four spinners on two CPUs,
//! each waiting for a peer that has no CPU to answer on: 24k creates/s spinning against
//! 36k/s not at all (`shoal bench --make shoal-run --threads 2 --files 20000 --file-size
//! 100 create`). So nobody spins, on either side, while the busy connections need more
//! CPUs than the machine has: both take turns instead (`Patience::TakeTurns`).
//!
//! The same count says whether a request may be answered before it is applied
//! (`answered_early`): only while its connection is the only busy one, since every other
//! request waits for that apply.
//!
//! Busy: served a request within the last `BUSY_WINDOW`. Connections share `SLOTS` slots
//! by their number, so many connections may count as fewer (spinning then goes on a
//! little longer than it should, as before this module).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const SLOTS: usize = 64;
/// A connection whose caller has not asked for this long is waiting on something else
/// (its own computing, another file, the user).
const BUSY_WINDOW_US: u64 = 1000;

pub struct Activity {
    started: Instant,
    /// Per slot, when a connection there last served a request, in µs since `started`
    /// plus one (0: never).
    last_served_us: [AtomicU64; SLOTS],
    /// When any connection last served a request, the same way (see `any_busy`).
    any_served_us: AtomicU64,
    cpus: usize,
}

impl Activity {
    pub fn new(cpus: usize) -> Activity {
        Activity {
            started: Instant::now(),
            last_served_us: [const { AtomicU64::new(0) }; SLOTS],
            any_served_us: AtomicU64::new(0),
            cpus: cpus.max(1),
        }
    }

    fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.started).as_micros()).unwrap_or(u64::MAX)
            + 1
    }

    /// Connection `id` served a request at `at`.
    pub fn served(&self, id: u64, at: Instant) {
        let micros = self.micros(at);
        self.last_served_us[(id as usize) % SLOTS].store(micros, Ordering::Relaxed);
        self.any_served_us.store(micros, Ordering::Relaxed);
    }

    /// Whether some connection is busy (one load and a clock read: cheap enough for a
    /// poll loop of the kernel door's to ask between spins).
    pub fn any_busy(&self, now: Instant) -> bool {
        busy_at(self.any_served_us.load(Ordering::Relaxed), self.micros(now))
    }

    /// How many connections are busy at `now` (a connection that just served counts).
    pub fn busy(&self, now: Instant) -> usize {
        let now = self.micros(now);
        self.last_served_us
            .iter()
            .filter(|slot| busy_at(slot.load(Ordering::Relaxed), now))
            .count()
    }

    /// Whether `busy` connections, caller and thread each, can have a CPU to spin on.
    pub fn spinning_pays(&self, busy: usize) -> bool {
        busy * 2 <= self.cpus
    }
}

/// Whether what last served at `last` (microseconds, 0: never) is busy at `now`.
fn busy_at(last: u64, now: u64) -> bool {
    last != 0 && now.saturating_sub(last) <= BUSY_WINDOW_US
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_busy_connection_per_two_cpus_may_spin() {
        let activity = Activity::new(2);
        let now = Instant::now();
        assert!(activity.spinning_pays(activity.busy(now)), "nobody busy");
        activity.served(1, now);
        assert!(
            activity.spinning_pays(activity.busy(now)),
            "one caller and its thread: two CPUs"
        );
        activity.served(2, now);
        assert!(
            !activity.spinning_pays(activity.busy(now)),
            "two callers and their threads: four"
        );
        let later = now + Duration::from_millis(5);
        activity.served(2, later);
        assert!(
            activity.spinning_pays(activity.busy(later)),
            "the first went quiet"
        );
    }

    #[test]
    fn busy_while_any_connection_served_within_the_window() {
        let activity = Activity::new(2);
        let now = Instant::now();
        assert!(!activity.any_busy(now), "nobody served yet");
        activity.served(7, now);
        assert!(activity.any_busy(now));
        let later = now + Duration::from_micros(BUSY_WINDOW_US + 1);
        assert!(!activity.any_busy(later), "quiet for the whole window");
    }

    #[test]
    fn sixteen_cpus_let_eight_connections_spin() {
        let activity = Activity::new(16);
        let now = Instant::now();
        for id in 0..8 {
            activity.served(id, now);
        }
        assert!(activity.spinning_pays(activity.busy(now)));
        activity.served(8, now);
        assert!(!activity.spinning_pays(activity.busy(now)));
    }
}
