//! fsyncs that wait for the journal without holding a request thread.
//!
//! A handler that syncs in place keeps its thread from serving requests until the store
//! sync returns (a millisecond or more on a disk): over /dev/fuse, with `threads=2`, two
//! fsyncs in flight stop the whole mount; over io_uring, a queue's few threads (2-4) stop
//! serving their CPU's callers, and the writes and fsyncs of other callers queue behind
//! them instead of joining the next sync. So an fsync that comes while a sync runs is
//! queued here and its thread goes back to serving; one syncing thread takes every fsync
//! queued, runs one store sync (which covers every operation completed before it starts,
//! so before each queued fsync arrived) and answers them all (over io_uring, the queue
//! thread commits an answer sent after its dispatch returned: `RingReply`, vendor/fuser).
//!
//! An fsync that comes while no sync runs and none waits syncs in place, on its request
//! thread: a lone fsyncing caller (a database's log writer) pays no hand-over to the
//! syncing thread and back, two wake-ups (on the 2-core VM, 15% of its rate), and holds
//! one request thread at a time.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use fuser::{BlockedWait, ReplyEmpty};
use shoal_engine::Engine;

use crate::errno::errno;
use crate::fuse_stats::{FuseOp, FuseStats};

/// The syncing thread and its queue; dropping it answers what is queued and stops it.
pub(crate) struct SyncWaiters {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiter>,
    /// A store sync for fsyncs runs (in place, or on the syncing thread).
    syncing: bool,
    stopped: bool,
}

/// What to do with an fsync (`SyncWaiters::take`).
pub(crate) enum Fsync<'a> {
    /// Queued: the syncing thread answers it.
    Queued,
    /// To sync in place and answer now; `lead`, when it is the sync that fsyncs coming
    /// meanwhile queue behind: dropped once the sync has returned.
    InPlace {
        reply: ReplyEmpty,
        lead: Option<Lead<'a>>,
    },
}

/// A leading in-place sync; when it ends (dropped, also by a panic), the fsyncs queued
/// meanwhile go to the syncing thread (they came after that sync started).
pub(crate) struct Lead<'a>(&'a Shared);

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.syncing = false;
        let queued = !queue.waiting.is_empty();
        drop(queue);
        if queued {
            self.0.wake.notify_one();
        }
    }
}

struct Waiter {
    reply: ReplyEmpty,
    op: FuseOp,
    arrived: Instant,
    /// Spinners and ring followers stand aside while an fsync waits, as for one waiting
    /// in place.
    _blocked: BlockedWait,
}

impl SyncWaiters {
    /// Starts the syncing thread.
    pub(crate) fn start(engine: Arc<Engine>, stats: Arc<FuseStats>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        });
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name("shoal-fsync".into())
            .spawn(move || serving.answer_until_stopped(&engine, &stats))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Takes an fsync: queued while a sync runs or others wait; else to sync in place,
    /// leading; in place as well, not leading, once the thread has stopped.
    pub(crate) fn take(&self, reply: ReplyEmpty, op: FuseOp) -> Fsync<'_> {
        let mut queue = self.shared.lock();
        if queue.stopped {
            return Fsync::InPlace { reply, lead: None };
        }
        if !queue.syncing && queue.waiting.is_empty() {
            queue.syncing = true;
            return Fsync::InPlace {
                reply,
                lead: Some(Lead(&self.shared)),
            };
        }
        queue.waiting.push(Waiter {
            reply,
            op,
            arrived: Instant::now(),
            _blocked: BlockedWait::begin(),
        });
        Fsync::Queued
    }

    /// Answers what is queued (after a last sync) and stops the thread.
    pub(crate) fn stop(&mut self) {
        self.shared.lock().stopped = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the fsync thread panicked");
            }
        }
    }
}

impl Drop for SyncWaiters {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn answer_until_stopped(&self, engine: &Engine, stats: &FuseStats) {
        loop {
            let (waiting, stopped) = {
                let mut queue = self.lock();
                while (queue.waiting.is_empty() || queue.syncing) && !queue.stopped {
                    queue = self
                        .wake
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                queue.syncing = !queue.waiting.is_empty();
                (std::mem::take(&mut queue.waiting), queue.stopped)
            };
            if !waiting.is_empty() {
                stats.record_queued_fsyncs(waiting.len());
                answer(waiting, engine, stats);
                self.lock().syncing = false;
            }
            if stopped {
                return;
            }
        }
    }
}

/// One store sync for every waiter (all arrived before it starts), then every answer.
fn answer(waiting: Vec<Waiter>, engine: &Engine, stats: &FuseStats) {
    let synced = engine.sync().map_err(|error| errno(&error));
    for waiter in waiting {
        match synced {
            Ok(()) => waiter.reply.ok(),
            Err(error) => waiter.reply.error(error),
        }
        stats.record(waiter.op, waiter.arrived.elapsed());
    }
}
