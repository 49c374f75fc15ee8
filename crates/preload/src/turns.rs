//! One thread of the process at a time asks the daemon what a `stat` missed in the kept
//! listings. `git status` stats its index from up to 20 threads, each starting in another
//! part of the tree: they all miss at once, each connects and lists its own directory and
//! the 64 after it, most of them listed a moment later by another thread's reply too
//! (9k stats from 18 threads: 18 connections and 48 listings, against one and 23 from a
//! single thread). A thread that finds another asking waits for it, then looks again: the
//! reply it waited for mostly answers it, and one that still misses is in a storm of
//! stats, so it lists its directory at once (`calls::stat::listed`).
//!
//! The wait is bounded and never on the thread itself (a signal handler that stats while
//! its thread holds the turn goes on without it), so a turn left taken (a fork child's
//! copy of another thread's, before `forget_inherited`) costs time, never a hang.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use shoal_fastpath::futex;

/// The holder's `thread_id`, 0 when none.
static HOLDER: AtomicU32 = AtomicU32::new(0);
/// Threads asleep on `HOLDER`: a release wakes them only when there are some.
static SLEEPERS: AtomicU32 = AtomicU32::new(0);
static NEXT_THREAD_ID: AtomicU32 = AtomicU32::new(1);

thread_local! {
    static THREAD_ID: Cell<u32> = const { Cell::new(0) };
}

/// A listing round trip takes well under a millisecond; one that takes longer (a daemon
/// busy with a sync) is waited for no longer than this before asking alongside it.
const LONGEST_WAIT: Duration = Duration::from_millis(20);
const SLEEP_SLICE: Duration = Duration::from_millis(2);

/// This thread's turn to ask, while it lives (or none: held by this thread already, or
/// waiting for it ran out).
pub struct Turn {
    held: bool,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.held {
            HOLDER.store(0, Ordering::Release);
            if SLEEPERS.load(Ordering::Acquire) > 0 {
                // All of them: each looks at the listings again, and most go on without
                // the turn (the reply just kept answers them).
                futex::wake(&HOLDER, i32::MAX, futex::Scope::Private);
            }
        }
    }
}

/// A thread's wait for the turn, from its first try.
pub struct Waiting {
    started: Option<Instant>,
}

impl Waiting {
    pub fn new() -> Waiting {
        Waiting { started: None }
    }

    /// Whether this thread has waited for another's turn: its stat is one of many at once.
    pub fn waited(&self) -> bool {
        self.started.is_some()
    }

    /// The turn, if no other thread holds it; else `None` once the holder let it go (or a
    /// slice passed): the caller looks at the listings again, then tries again.
    pub fn take(&mut self) -> Option<Turn> {
        let Some(me) = thread_id() else {
            return Some(Turn { held: false });
        };
        let holder = match HOLDER.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(Turn { held: true }),
            Err(holder) => holder,
        };
        if holder == me {
            return Some(Turn { held: false });
        }
        let started = *self.started.get_or_insert_with(Instant::now);
        if started.elapsed() >= LONGEST_WAIT {
            return Some(Turn { held: false });
        }
        SLEEPERS.fetch_add(1, Ordering::AcqRel);
        // Returns at once when the holder changed since it was read: no wake is lost.
        futex::wait(&HOLDER, holder, SLEEP_SLICE, futex::Scope::Private);
        SLEEPERS.fetch_sub(1, Ordering::AcqRel);
        None
    }
}

/// A number for this thread, unique in the process (`None` while thread-locals are gone,
/// at thread exit).
fn thread_id() -> Option<u32> {
    THREAD_ID
        .try_with(|id| {
            if id.get() == 0 {
                id.set(NEXT_THREAD_ID.fetch_add(1, Ordering::Relaxed).max(1));
            }
            id.get()
        })
        .ok()
}

/// In a fork child: the thread that held the turn in the parent is not here.
pub fn forget_inherited() {
    HOLDER.store(0, Ordering::Release);
    SLEEPERS.store(0, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// Takes the turn as a stat does: waiting while another thread holds it.
    fn turn() -> (Turn, bool) {
        let mut waiting = Waiting::new();
        loop {
            if let Some(turn) = waiting.take() {
                return (turn, waiting.waited());
            }
        }
    }

    /// One test: the turn is process-wide, so two tests would share it.
    #[test]
    fn one_thread_at_a_time_holds_the_turn_and_its_holder_never_waits_on_itself() {
        let (first, waited) = turn();
        assert!(first.held && !waited);
        let started = Instant::now();
        let (again, waited) = turn();
        assert!(!again.held && !waited);
        assert!(started.elapsed() < LONGEST_WAIT);
        drop(again);
        drop(first);
        assert_eq!(HOLDER.load(Ordering::Acquire), 0);

        let inside = Arc::new(AtomicUsize::new(0));
        let waits = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (inside, waits) = (Arc::clone(&inside), Arc::clone(&waits));
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let (turn, waited) = turn();
                        // A wait that ran out goes on without the turn (a slow machine).
                        if turn.held {
                            assert_eq!(inside.fetch_add(1, Ordering::AcqRel), 0);
                            std::thread::sleep(Duration::from_micros(50));
                            inside.fetch_sub(1, Ordering::AcqRel);
                        }
                        if waited {
                            waits.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("a thread panicked");
        }
        assert!(waits.load(Ordering::Relaxed) > 0);
        assert_eq!(HOLDER.load(Ordering::Acquire), 0);
    }
}
