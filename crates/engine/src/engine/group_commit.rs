//! Group commit: one store sync serves every caller that waits for it.
//!
//! A caller whose batches are not synced yet runs the store sync when none runs, or parks
//! until the running one ends; the syncer then wakes every waiter at once, and a waiter
//! whose batches came after that sync started runs (or waits for) the next one. Before,
//! the waiters queued on one mutex held across the sync and were woken one after another,
//! each by the one before it: with 8-32 threads fsyncing, every sync ended in a chain of
//! wake-ups (fsync'd 4 KiB creates under `shoal run`, 8 threads on 2 cores: 0.70x the
//! kernel door's rate, whose fsyncs queue for one syncing thread).

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::Thread;

use parking_lot::Mutex;

use crate::error::FsResult;

#[derive(Default)]
pub(crate) struct Committer {
    /// Batches written to the store (readable) since the engine opened.
    written: AtomicU64,
    /// Of those, how many a store sync has made durable.
    synced: AtomicU64,
    /// Store syncs run through `commit` that have ended (successfully or not).
    rounds: AtomicU64,
    state: Mutex<Round>,
}

#[derive(Default)]
struct Round {
    /// A store sync runs.
    syncing: bool,
    /// Callers parked until it ends.
    waiters: Vec<Thread>,
}

impl Committer {
    /// Counts one more batch written; the count after it.
    pub fn count_written(&self) -> u64 {
        self.written.fetch_add(1, Ordering::AcqRel) + 1
    }

    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    pub fn synced(&self) -> u64 {
        self.synced.load(Ordering::Acquire)
    }

    /// Makes every batch written before the call durable: through a store sync that
    /// started after it (`sync`, run here or by another caller).
    pub fn commit(&self, sync: impl FnOnce() -> FsResult<()>) -> FsResult<()> {
        let target = self.written();
        loop {
            if self.synced() >= target {
                return Ok(());
            }
            let mut state = self.state.lock();
            if self.synced() >= target {
                return Ok(());
            }
            if !state.syncing {
                state.syncing = true;
                break;
            }
            let round = self.rounds.load(Ordering::Acquire);
            state.waiters.push(std::thread::current());
            drop(state);
            // An unpark before this park makes it return at once; a spurious return
            // looks again.
            while self.rounds.load(Ordering::Acquire) == round {
                std::thread::park();
            }
        }
        // Every batch counted by now is in the store, so the sync below covers it.
        let upto = self.written();
        let round = RoundEnd(self);
        let synced = sync();
        if synced.is_ok() {
            self.synced.fetch_max(upto, Ordering::AcqRel);
        }
        drop(round);
        synced
    }
}

/// The end of a round, also when the sync panics: the waiters wake and look again.
struct RoundEnd<'a>(&'a Committer);

impl Drop for RoundEnd<'_> {
    fn drop(&mut self) {
        let waiters = {
            let mut state = self.0.state.lock();
            assert!(state.syncing, "a round ended that had not begun");
            state.syncing = false;
            self.0.rounds.fetch_add(1, Ordering::AcqRel);
            std::mem::take(&mut state.waiters)
        };
        for waiter in waiters {
            waiter.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FsError;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    #[test]
    fn one_sync_serves_every_caller_waiting_for_it() {
        const THREADS: usize = 8;
        let committer = Arc::new(Committer::default());
        let syncs = Arc::new(AtomicUsize::new(0));
        let durable = Arc::new(AtomicU64::new(0));
        let barrier = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (committer, syncs, durable, barrier) = (
                    committer.clone(),
                    syncs.clone(),
                    durable.clone(),
                    barrier.clone(),
                );
                std::thread::spawn(move || {
                    let mine = committer.count_written();
                    barrier.wait();
                    committer
                        .commit(|| {
                            let upto = committer.written();
                            std::thread::sleep(Duration::from_millis(20));
                            syncs.fetch_add(1, Ordering::SeqCst);
                            durable.fetch_max(upto, Ordering::SeqCst);
                            Ok(())
                        })
                        .expect("the sync succeeds");
                    assert!(
                        durable.load(Ordering::SeqCst) >= mine,
                        "commit returned before a sync covered its batch"
                    );
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("a committer panicked");
        }
        assert_eq!(
            syncs.load(Ordering::SeqCst),
            1,
            "every batch was written before the first sync began"
        );
        assert_eq!(committer.synced(), THREADS as u64);
        committer
            .commit(|| panic!("nothing is left to sync"))
            .expect("nothing to do");
    }

    #[test]
    fn a_failed_sync_leaves_the_batches_unsynced_for_the_next_caller() {
        let committer = Committer::default();
        committer.count_written();
        let failed = committer.commit(|| Err(FsError::NoSpace));
        assert!(failed.is_err(), "the caller hears of the failure");
        assert_eq!(committer.synced(), 0);
        let mut retried = false;
        committer
            .commit(|| {
                retried = true;
                Ok(())
            })
            .expect("the retry succeeds");
        assert!(retried, "the next caller syncs again");
        assert_eq!(committer.synced(), 1);
    }
}
