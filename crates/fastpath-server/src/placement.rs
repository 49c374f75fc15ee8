//! Where a connection's thread runs while callers and threads take turns for the CPUs
//! (`activity`: more busy connections than the CPUs can give a spinner to each side).
//!
//! Left to the scheduler, a caller and its own thread often end up on one CPU, where they
//! run strictly one after the other: the thread's apply of an answer given early never
//! overlaps the caller's next call. Two threads creating 100-byte files on two CPUs
//! (`perf record -e sched:sched_switch`, then `/proc/TID/stat` samples): 48-50k files/s
//! with each caller and its thread on one CPU, 55-68k with both callers on one CPU and
//! both threads on the other, 100k and more with each CPU running one caller and the other
//! caller's thread. So while taking turns a thread keeps off the CPU its caller says it
//! runs on (a word of the shared page), and goes back to every CPU it may use once that
//! ends: the first placement never forms, and the last forms whenever the callers are on
//! different CPUs. Medians of 6 alternating runs: 100-byte files 65.6k -> 80.3k files/s,
//! empty files 93.9k -> 124k; fsync'd 4 KiB creates with 8 threads, medians of 3, 7.6k ->
//! 8.6k (`docs/bench/fastpath/2core/thirty-first/placement-ab.txt`).
//!
//! The caller's word is a hint it could fake: at worst its own connection's thread runs
//! on another of the CPUs the daemon may use.

use shoal_sys::cpu::{allowed_cpus, set_allowed_cpus};

/// The CPUs a connection's thread may use, and the one it keeps off now.
pub(crate) struct Placement {
    /// The thread's own affinity when the connection began (the daemon's, `taskset` or a
    /// cpuset included): never widened.
    allowed: Vec<usize>,
    avoided: Option<usize>,
}

impl Placement {
    /// The calling thread's placement, as the scheduler has it now.
    pub(crate) fn of_this_thread() -> Placement {
        Placement {
            allowed: allowed_cpus().unwrap_or_default(),
            avoided: None,
        }
    }

    /// Keeps the thread off `client_cpu` while `taking_turns`, else lets it run on every
    /// CPU it was allowed. A system call only when that changes.
    pub(crate) fn follow(&mut self, client_cpu: Option<usize>, taking_turns: bool) {
        let wanted = client_cpu.filter(|cpu| taking_turns && self.may_avoid(*cpu));
        if wanted == self.avoided {
            return;
        }
        let cpus: Vec<usize> = self
            .allowed
            .iter()
            .copied()
            .filter(|&cpu| Some(cpu) != wanted)
            .collect();
        if let Err(error) = set_allowed_cpus(&cpus) {
            tracing::debug!(%error, ?wanted, "fast path: thread placement unchanged");
        }
        // Recorded even when refused (a cpuset changed since): not asked again each request.
        self.avoided = wanted;
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
    fn a_thread_keeps_off_its_callers_cpu_only_while_taking_turns() {
        std::thread::spawn(|| {
            let mut placement = Placement::of_this_thread();
            let all = allowed_cpus().unwrap();
            assert_eq!(placement.allowed, all);
            let first = all[0];
            placement.follow(Some(first), true);
            let expected: Vec<usize> = if all.len() > 1 {
                all[1..].to_vec()
            } else {
                all.clone()
            };
            assert_eq!(allowed_cpus().unwrap(), expected, "off the caller's CPU");
            placement.follow(Some(first), false);
            assert_eq!(allowed_cpus().unwrap(), all, "every CPU again");
            for bogus in [libc::CPU_SETSIZE as usize, usize::MAX] {
                placement.follow(Some(bogus), true);
                assert_eq!(
                    allowed_cpus().unwrap(),
                    all,
                    "a CPU it may not use: {bogus}"
                );
            }
            placement.follow(None, true);
            assert_eq!(allowed_cpus().unwrap(), all, "a caller that did not say");
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
            placement.follow(Some(all[0]), true);
            assert_eq!(allowed_cpus().unwrap(), vec![all[0]]);
        })
        .join()
        .unwrap();
    }
}
