//! fsyncs that wait for the journal without holding a request thread.
//!
//! A handler that syncs in place keeps its thread from serving requests until the store
//! sync returns (a millisecond or more on a disk): over /dev/fuse, with `threads=2`, two
//! fsyncs in flight stop the whole mount; over io_uring, a queue's few threads (2-4) stop
//! serving their CPU's callers. The writes and fsyncs of other callers then queue behind
//! them instead of joining the next sync. So an fsync is queued here and its thread goes
//! back to serving; one syncing thread takes every fsync queued, runs one store sync (which
//! covers every operation completed before it starts, so before each queued fsync arrived)
//! and answers them all (over io_uring, the queue thread commits the answer when told:
//! `ReplyEmpty::can_reply_later`, vendor/fuser).

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
    stopped: bool,
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

    /// Queues `reply` for the next sync; gives it back if it must be answered now (its
    /// transport cannot take a late reply, or the thread has stopped).
    pub(crate) fn defer(&self, reply: ReplyEmpty, op: FuseOp) -> Result<(), ReplyEmpty> {
        if !reply.can_reply_later() {
            return Err(reply);
        }
        let mut queue = self.shared.lock();
        if queue.stopped {
            return Err(reply);
        }
        queue.waiting.push(Waiter {
            reply,
            op,
            arrived: Instant::now(),
            _blocked: BlockedWait::begin(),
        });
        drop(queue);
        self.shared.wake.notify_one();
        Ok(())
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
                while queue.waiting.is_empty() && !queue.stopped {
                    queue = self
                        .wake
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                (std::mem::take(&mut queue.waiting), queue.stopped)
            };
            if !waiting.is_empty() {
                answer(waiting, engine, stats);
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
