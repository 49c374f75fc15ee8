//! Keeps the CPUs out of their idle halt while requests flow.
//!
//! A FUSE request is a round trip between two threads: the caller sleeps while the daemon
//! answers, and the daemon's ring thread sleeps while the caller works. The scheduler wakes
//! each side on whichever CPU is idle, and on a VM an idle vCPU has halted: waking it costs
//! an IPI and a VM exit, tens of microseconds, several times the daemon's own work on a
//! request. Measured on the 2-core development VM: `tar x` of a 32k-entry tree took 13 s,
//! and 6 s with a low-priority busy loop on the other CPU (XFS: 1.2 s either way).
//!
//! So while requests arrive, one spinner thread per CPU, at `SCHED_IDLE` (it runs only when
//! nothing else wants the CPU, and yields at once to anything that does), keeps each CPU
//! busy instead of halted. After `window` without a request the spinners park, so an idle
//! mount costs nothing; the next request unparks them (a relaxed load on every request, an
//! unpark on the first one after a quiet period). While a request handler is blocked on a
//! slow wait of its own (an fsync waiting for the journal, `fuser::BlockedWait`) the
//! spinners stand aside as well: its answer comes when the sync does, and spinning meanwhile
//! only burns CPUs (on 16 CPUs, 2.6 ms of spinning per fsync'd file).
//!
//! Whether spinners run at all is decided at mount (`busy_wait`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use shoal_sys::cpu;

use crate::fuse_stats::FuseStats;

/// Spin iterations between two looks at the request count (a few microseconds).
const SPINS_PER_CHECK: u32 = 512;
/// A parked spinner looks again at least this often, in case a wake-up raced its parking.
const PARK_TIMEOUT: Duration = Duration::from_secs(1);
/// While a ring thread follows a lone caller, or a handler is blocked in a long wait,
/// spinners sleep and look again this often.
const STAND_ASIDE: Duration = Duration::from_millis(5);

/// The shared state of the spinners: whether they are parked, and what they cost.
#[derive(Default)]
pub struct KeepAwake {
    /// True once a spinner parked; cleared (and the spinners unparked) by the next request.
    parked: AtomicBool,
    stopped: AtomicBool,
    spinners: Mutex<Vec<Thread>>,
}

impl KeepAwake {
    /// Called at the start of every request: wakes the spinners after a quiet period.
    #[inline]
    pub fn notice_request(&self) {
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::AcqRel) {
            for spinner in self.spinners.lock().iter() {
                spinner.unpark();
            }
        }
    }

    /// Stops the spinners (at unmount); they exit at their next look.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        for spinner in self.spinners.lock().iter() {
            spinner.unpark();
        }
    }
}

/// Starts one spinner per online CPU, each spinning while requests arrived within `window`.
/// A zero window starts nothing.
pub fn spawn(
    window: Duration,
    keep_awake: &Arc<KeepAwake>,
    stats: &Arc<FuseStats>,
) -> std::io::Result<()> {
    if window.is_zero() {
        return Ok(());
    }
    for cpu in online_cpus() {
        let shared = Arc::downgrade(keep_awake);
        let stats = Arc::downgrade(stats);
        let handle = thread::Builder::new()
            .name(format!("shoal-spin-{cpu}"))
            .spawn(move || spin(cpu, window, &shared, &stats))?;
        keep_awake.spinners.lock().push(handle.thread().clone());
    }
    Ok(())
}

fn spin(cpu: usize, window: Duration, shared: &Weak<KeepAwake>, stats_weak: &Weak<FuseStats>) {
    pin_to_cpu(cpu);
    make_idle_class();
    loop {
        let (Some(keep_awake), Some(stats)) = (shared.upgrade(), stats_weak.upgrade()) else {
            return;
        };
        if keep_awake.stopped.load(Ordering::Acquire) {
            return;
        }
        if must_stand_aside() {
            drop((keep_awake, stats));
            thread::sleep(STAND_ASIDE);
            continue;
        }
        let started_cpu_ns = thread_cpu_ns();
        let last_seen = spin_while_busy(window, &stats, &keep_awake.stopped);
        stats.record_spin(thread_cpu_ns().saturating_sub(started_cpu_ns));
        if must_stand_aside() {
            continue;
        }
        keep_awake.parked.store(true, Ordering::Release);
        // A request that came between the last look and `parked` saw no parked flag and
        // woke nobody: look once more before sleeping.
        if stats.requests_total() != last_seen {
            keep_awake.parked.store(false, Ordering::Release);
            continue;
        }
        drop((keep_awake, stats));
        park_until_a_request(last_seen, shared, stats_weak);
    }
}

/// Parks until a request arrives after `last_seen` (or the spinners stop). A timed-out park
/// with no new request parks again: an idle mount never spins.
fn park_until_a_request(last_seen: u64, shared: &Weak<KeepAwake>, stats: &Weak<FuseStats>) {
    loop {
        thread::park_timeout(PARK_TIMEOUT);
        let (Some(keep_awake), Some(stats)) = (shared.upgrade(), stats.upgrade()) else {
            return;
        };
        if keep_awake.stopped.load(Ordering::Acquire) || stats.requests_total() != last_seen {
            keep_awake.parked.store(false, Ordering::Release);
            return;
        }
    }
}

/// Spins until no request has arrived for `window`; returns the last request count seen.
fn spin_while_busy(window: Duration, stats: &FuseStats, stopped: &AtomicBool) -> u64 {
    let mut seen = stats.requests_total();
    let mut changed_at = Instant::now();
    loop {
        for _ in 0..SPINS_PER_CHECK {
            std::hint::spin_loop();
        }
        if must_stand_aside() {
            return seen;
        }
        let now_seen = stats.requests_total();
        if now_seen != seen {
            seen = now_seen;
            changed_at = Instant::now();
        } else if changed_at.elapsed() >= window || stopped.load(Ordering::Relaxed) {
            return seen;
        }
    }
}

/// Whether spinning would get in the way or burn CPU for nothing: a ring thread follows a
/// lone caller (the caller's CPU must fall to its polling idle loop, which a spinner would
/// take the place of), a handler waits on the journal (nothing to answer until it ends), or
/// the fast path's callers keep the CPUs busy (`fuser::yield_to_other_work`).
fn must_stand_aside() -> bool {
    fuser::ring_following() || fuser::blocked_waits() > 0 || fuser::other_work_busy()
}

pub(crate) fn online_cpus() -> Vec<usize> {
    cpu::allowed_cpus()
        .unwrap_or_else(|_| (0..thread::available_parallelism().map_or(1, |n| n.get())).collect())
}

pub(crate) fn pin_to_cpu(cpu: usize) {
    if let Err(error) = cpu::pin_to_cpu(cpu) {
        tracing::warn!("spinner {cpu}: cannot pin: {error}");
    }
}

/// SCHED_IDLE: below every nice level, preempted at once by any other thread.
fn make_idle_class() {
    if let Err(error) = cpu::enter_idle_class() {
        tracing::warn!("spinner: cannot enter SCHED_IDLE: {error}");
    }
}

fn thread_cpu_ns() -> u64 {
    cpu::thread_cpu_time().map_or(0, |time| u64::try_from(time.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuse_stats::FuseOp;

    /// The tests look at process-wide state (`fuser::blocked_waits`): one at a time.
    static SERIAL: Mutex<()> = parking_lot::const_mutex(());

    #[test]
    fn spinners_park_when_quiet_and_wake_on_a_request() {
        let _serial = SERIAL.lock();
        let keep_awake = Arc::new(KeepAwake::default());
        let stats = Arc::new(FuseStats::default());
        spawn(Duration::from_millis(5), &keep_awake, &stats).unwrap();
        let parked = |deadline: Duration| {
            let start = Instant::now();
            while start.elapsed() < deadline {
                if keep_awake.parked.load(Ordering::Acquire) {
                    return true;
                }
                thread::sleep(Duration::from_millis(1));
            }
            false
        };
        assert!(parked(Duration::from_secs(5)), "spinners never parked");
        drop(stats.time(FuseOp::Getattr));
        keep_awake.notice_request();
        assert!(
            !keep_awake.parked.load(Ordering::Acquire),
            "a request clears the parked flag"
        );
        assert!(
            parked(Duration::from_secs(5)),
            "spinners never parked again"
        );
        // Every spinner adds its CPU time when it parks: once all have parked, the sum
        // stays put however long the mount stays idle (timed-out parks do not spin).
        let settled = (0..8).any(|_| {
            let spun = stats.snapshot().spin_cpu_ns;
            thread::sleep(PARK_TIMEOUT + PARK_TIMEOUT / 2);
            spun > 0 && stats.snapshot().spin_cpu_ns == spun
        });
        assert!(settled, "parked spinners kept using CPU");
        keep_awake.stop();
    }

    #[test]
    fn spinners_stand_aside_while_a_handler_waits_on_the_journal() {
        let _serial = SERIAL.lock();
        let keep_awake = Arc::new(KeepAwake::default());
        let stats = Arc::new(FuseStats::default());
        let requests = |for_how_long: Duration| {
            let start = Instant::now();
            while start.elapsed() < for_how_long {
                drop(stats.time(FuseOp::Getattr));
                keep_awake.notice_request();
                thread::sleep(Duration::from_millis(1));
            }
        };
        let wait = fuser::BlockedWait::begin();
        spawn(Duration::from_millis(5), &keep_awake, &stats).unwrap();
        // Requests keep coming (other callers), yet nobody spins while the wait lasts.
        requests(Duration::from_millis(300));
        thread::sleep(STAND_ASIDE * 4);
        assert_eq!(
            stats.snapshot().spin_cpu_ns,
            0,
            "spinners spun during a wait"
        );
        drop(wait);
        // The wait over, requests wake them again.
        let spun = (0..50).any(|_| {
            requests(Duration::from_millis(20));
            thread::sleep(STAND_ASIDE * 2);
            stats.snapshot().spin_cpu_ns > 0
        });
        keep_awake.stop();
        assert!(spun, "spinners never spun after the wait");
    }
}
