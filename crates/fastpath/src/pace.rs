//! How long one side of a channel spins for the other before it sleeps on the futex,
//! learned from how long the other side has taken lately.
//!
//! Spinning saves the futex wake-up (several microseconds on a VM) only when the answer
//! comes within a few microseconds and the peer has a CPU to compute it on. On a machine
//! whose CPUs are all busy (other programs, builds, the engine's own flushes) the peer is
//! often not running: the answers come late, the running average rises past the cut-off,
//! and the waiter sleeps at once instead of taking the CPU the peer needs. Measured on two
//! cores with ten runnable threads, a fixed 200 µs spin made `du -s` of 22k entries take
//! 11-12 s against 0.09 s through the kernel door.

use std::time::Duration;

/// Spinning stops paying once the typical wait is above this share of the ceiling.
const CUT_OFF_SHARE: u32 = 4;
/// A spin, when it happens, lasts this many typical waits (most answers fall inside it).
const TYPICAL_WAITS_PER_SPIN: u32 = 4;
/// The shortest spin worth starting: a few futex wake-ups' worth.
const MIN_SPIN: Duration = Duration::from_micros(20);
/// One wait counts at most this many ceilings: an idle minute between two commands must
/// not keep a connection asleep for the hundreds of requests that follow it.
const LONGEST_COUNTED_CEILINGS: u32 = 2;
/// Weight of the newest wait in the running average: 1/8.
const AVERAGE_SHIFT: u32 = 3;

#[derive(Debug, Clone, Copy)]
pub struct Pace {
    ceiling: Duration,
    /// Running average of recent waits, in nanoseconds.
    typical_ns: u64,
}

impl Pace {
    /// A pace that spins at most `ceiling` at a time, starting hopeful (spinning).
    pub const fn new(ceiling: Duration) -> Pace {
        Pace {
            ceiling,
            typical_ns: 0,
        }
    }

    /// How long to spin before sleeping for the next answer: zero when answers have
    /// been slow lately.
    pub fn spin(&self) -> Duration {
        let typical = Duration::from_nanos(self.typical_ns);
        if typical > self.ceiling / CUT_OFF_SHARE {
            return Duration::ZERO;
        }
        (typical * TYPICAL_WAITS_PER_SPIN).clamp(MIN_SPIN.min(self.ceiling), self.ceiling)
    }

    /// Records how long the last wait took, spun or slept.
    pub fn observe(&mut self, waited: Duration) {
        let longest = self.ceiling * LONGEST_COUNTED_CEILINGS;
        let waited_ns = u64::try_from(waited.min(longest).as_nanos()).unwrap_or(u64::MAX);
        // typical += (waited - typical) / 8, in integers that cannot overflow.
        self.typical_ns =
            self.typical_ns - (self.typical_ns >> AVERAGE_SHIFT) + (waited_ns >> AVERAGE_SHIFT);
    }

    /// The running average of recent waits (for statistics and tests).
    pub fn typical(&self) -> Duration {
        Duration::from_nanos(self.typical_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CEILING: Duration = Duration::from_micros(200);

    #[test]
    fn quick_answers_keep_it_spinning() {
        let mut pace = Pace::new(CEILING);
        assert_eq!(pace.spin(), MIN_SPIN, "a new connection spins");
        for _ in 0..100 {
            pace.observe(Duration::from_micros(3));
        }
        assert_eq!(pace.spin(), MIN_SPIN);
        for _ in 0..100 {
            pace.observe(Duration::from_micros(30));
        }
        let spin = pace.spin();
        assert!(
            spin > Duration::from_micros(115) && spin <= Duration::from_micros(120),
            "{spin:?}"
        );
    }

    #[test]
    fn late_answers_stop_the_spinning_and_quick_ones_bring_it_back() {
        let mut pace = Pace::new(CEILING);
        for _ in 0..20 {
            pace.observe(Duration::from_millis(2));
        }
        assert_eq!(pace.spin(), Duration::ZERO, "a busy machine: sleep at once");
        assert!(pace.typical() <= CEILING * LONGEST_COUNTED_CEILINGS);
        let mut quick = 0;
        while pace.spin().is_zero() {
            pace.observe(Duration::from_micros(8));
            quick += 1;
            assert!(quick < 40, "quick answers must bring spinning back");
        }
        assert!(quick > 3, "one quick answer is not a trend ({quick})");
    }

    #[test]
    fn one_idle_gap_costs_a_few_sleeps_not_the_session() {
        let mut pace = Pace::new(CEILING);
        for _ in 0..50 {
            pace.observe(Duration::from_micros(3));
        }
        pace.observe(Duration::from_secs(60));
        let mut sleeps = 0;
        while pace.spin().is_zero() {
            pace.observe(Duration::from_micros(10));
            sleeps += 1;
        }
        assert!(sleeps <= 6, "{sleeps} sleeps after one idle minute");
    }
}
