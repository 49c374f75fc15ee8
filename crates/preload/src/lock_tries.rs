//! Taking a lock the library shares between threads without waiting for good: a thread
//! that finds it taken tries again a few times, letting the holder run (20 threads on 2
//! CPUs: the holder is often preempted), then does without. Never blocking also means a
//! fork child whose parent had another thread inside (the lock copied held) cannot hang.

/// Tries to take the lock this many times, yielding the CPU between tries.
const LOCK_TRIES: usize = 8;

/// What `take` gave at one of `LOCK_TRIES` tries; `None` if every try found the lock taken.
pub(crate) fn with_retries<G>(mut take: impl FnMut() -> Result<G, ()>) -> Option<G> {
    for _ in 1..LOCK_TRIES {
        if let Ok(guard) = take() {
            return Some(guard);
        }
        std::thread::yield_now();
    }
    take().ok()
}
