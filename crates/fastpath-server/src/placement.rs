//! Where a connection's thread runs: off the CPU its caller runs on.
//!
//! Left to the scheduler, a caller and its own thread often end up on one CPU (a wake-up
//! or a yield hands the CPU from one to the other), where they run strictly one after the
//! other: the thread's apply of an answer given early never overlaps the caller's next
//! call, and every answer waits for a context switch. On the 2-core VM, `tar x` of the
//! bench tree switched 7.5k times between `tar` and its thread on one CPU
//! (`perf record -e sched:sched_switch`). Two threads creating 100-byte files ran at
//! 48-50k files/s with each caller and its thread on one CPU, 55-68k with both callers on
//! one CPU and both threads on the other, 100k and more with each CPU running one caller
//! and the other caller's thread.
//!
//! So the thread keeps off the CPU its caller says it runs on (a word of the shared page,
//! written with each request), moving at most once per `SETTLE` when the scheduler moves
//! the caller. While callers and threads take turns for the CPUs (`activity`), medians of
//! 6 alternating runs against the scheduler's placement: two threads' 100-byte creates
//! 65.6k -> 80.3k files/s, empty files 93.9k -> 124k; fsync'd 4 KiB creates with 8
//! threads, medians of 3, 7.6k -> 8.6k. With one busy caller: `tar x` + sync 957 -> 901 ms,
//! `cp -a` 1578 -> 1430, warm `find` 35.4 -> 34.2, `du -s` 38.5 -> 37.2 (medians of 6, 3,
//! 21, 21); one-thread creates, `rm -rf` and `git clone` unchanged
//! (`docs/bench/fastpath/2core/thirty-first/placement-ab.txt`).
//!
//! The caller's word is a hint it could fake: at worst its own connection's thread runs
//! on another of the CPUs the daemon may use.

use std::time::{Duration, Instant};

use shoal_sys::cpu::{allowed_cpus, set_allowed_cpus};

/// The least time between two moves of a thread: a caller the scheduler moves back and
/// forth costs a system call and a migration a millisecond at most.
const SETTLE: Duration = Duration::from_millis(1);

/// The CPUs a connection's thread may use, and the one it keeps off now.
pub(crate) struct Placement {
    /// The thread's own affinity when the connection began (the daemon's, `taskset` or a
    /// cpuset included): never widened.
    allowed: Vec<usize>,
    avoided: Option<usize>,
    moved_at: Option<Instant>,
}

impl Placement {
    /// The calling thread's placement, as the scheduler has it now.
    pub(crate) fn of_this_thread() -> Placement {
        Placement {
            allowed: allowed_cpus().unwrap_or_default(),
            avoided: None,
            moved_at: None,
        }
    }

    /// Keeps the thread off `caller_cpu` (every CPU it was allowed, for a caller that did
    /// not say). A system call only when that changes, at most once per `SETTLE`; whether
    /// it was made and taken.
    pub(crate) fn follow(&mut self, caller_cpu: Option<usize>, now: Instant) -> bool {
        if caller_cpu == self.avoided {
            // Every request of a caller that stays where it was: nothing to look up.
            return false;
        }
        let wanted = caller_cpu.filter(|cpu| self.may_avoid(*cpu));
        if wanted == self.avoided
            || self
                .moved_at
                .is_some_and(|at| now.saturating_duration_since(at) < SETTLE)
        {
            return false;
        }
        let cpus: Vec<usize> = self
            .allowed
            .iter()
            .copied()
            .filter(|&cpu| Some(cpu) != wanted)
            .collect();
        let moved = set_allowed_cpus(&cpus);
        if let Err(error) = &moved {
            tracing::debug!(%error, ?wanted, "fast path: thread placement unchanged");
        }
        // Recorded even when refused (a cpuset changed since): not asked again each request.
        self.avoided = wanted;
        self.moved_at = Some(now);
        moved.is_ok()
    }

    /// Whether the thread may keep off `cpu`: one of its CPUs, and not its only one.
    fn may_avoid(&self, cpu: usize) -> bool {
        self.allowed.len() > 1 && self.allowed.contains(&cpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_off_its_callers_cpu_and_moves_at_most_once_per_settle() {
        std::thread::spawn(|| {
            let mut placement = Placement::of_this_thread();
            let all = allowed_cpus().unwrap();
            assert_eq!(placement.allowed, all);
            let without = |cpu: usize| -> Vec<usize> {
                if all.len() > 1 {
                    all.iter().copied().filter(|&c| c != cpu).collect()
                } else {
                    all.clone()
                }
            };
            let mut now = Instant::now();
            assert_eq!(placement.follow(Some(all[0]), now), all.len() > 1);
            assert_eq!(
                allowed_cpus().unwrap(),
                without(all[0]),
                "off the caller's CPU"
            );
            if let Some(&second) = all.get(1) {
                assert!(!placement.follow(Some(second), now));
                assert_eq!(
                    allowed_cpus().unwrap(),
                    without(all[0]),
                    "a caller moved within SETTLE: not followed yet"
                );
                now += SETTLE;
                assert!(placement.follow(Some(second), now));
                assert_eq!(
                    allowed_cpus().unwrap(),
                    without(second),
                    "followed after it"
                );
            }
            for bogus in [None, Some(libc::CPU_SETSIZE as usize), Some(usize::MAX)] {
                now += SETTLE;
                let _ = placement.follow(bogus, now);
                assert_eq!(allowed_cpus().unwrap(), all, "every CPU again: {bogus:?}");
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_with_one_cpu_stays_on_it() {
        std::thread::spawn(|| {
            let all = allowed_cpus().unwrap();
            shoal_sys::cpu::pin_to_cpu(all[0]).unwrap();
            let mut placement = Placement::of_this_thread();
            assert!(!placement.follow(Some(all[0]), Instant::now()));
            assert_eq!(allowed_cpus().unwrap(), vec![all[0]]);
        })
        .join()
        .unwrap();
    }
}
