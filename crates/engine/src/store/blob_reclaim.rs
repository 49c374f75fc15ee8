//! Returns the space of deleted and overwritten file data to the device.
//!
//! File chunks live in fjall's blob files (key-value separation). A blob file's space
//! comes back only when a compaction of the data keyspace's index tables sees that its
//! values are gone (the file is then dead and deleted) or that enough of them are
//! (`defaults::BLOB_STALE_RATIO`: its live values are copied into a new file). fjall's own
//! compactions run when tables pile up from writes; deletions alone never start one, so a
//! store whose files were deleted kept all their blob bytes (410 MB of store for 105 MB of
//! live data).
//!
//! The reclaimer counts the file data overwritten and deleted since its last round (the
//! backlog: an overwritten chunk leaves its old value as garbage just as a deleted one
//! does; the engine marks a batch's overwritten bytes, since an append or a new file
//! leaves none and must not start rounds or hold writers). Once the backlog reaches a
//! share of the data keyspace it runs a round: it flushes the data memtable (so the
//! deletes and new values reach the index tables), compacts the keyspace in full (its
//! index tables are small: the bytes are in blob files, and a full compaction sees every
//! dropped value), and flushes the metadata memtable too when fjall has started a new
//! journal (an old one is kept until every memtable holding its writes is flushed).
//! Writers that get too far ahead wait for the round (`defaults::RECLAIM_HOLD_SHARE`):
//! space, not speed, is the bound when a store is rewritten faster than it reclaims.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use fjall::{AbstractTree, Database, Keyspace};

use super::fjall_store::write_out_memtables_unless;
use super::poison::Poison;
use super::StoreError;
use crate::defaults::{
    RECLAIM_CHECK_INTERVAL, RECLAIM_HOLD_MAX, RECLAIM_HOLD_MIN_BYTES, RECLAIM_HOLD_SHARE,
    RECLAIM_MIN_BYTES, RECLAIM_START_SHARE,
};

/// Progress, for `shoal stats`.
#[derive(Default)]
pub struct ReclaimCounters {
    /// Bytes deleted chunks may hold (each counted as a whole chunk), not yet reclaimed.
    pub deleted_bytes: AtomicU64,
    pub reclaims: AtomicU64,
    /// Disk bytes the reclaims gave back (size before minus after).
    pub reclaimed_bytes: AtomicU64,
    /// File data overwritten or deleted since the round in progress (or the last) started,
    /// plus that round's own share until it ends.
    backlog_bytes: AtomicU64,
    /// Backlog at which a round starts, and at which writers wait: shares of the data
    /// keyspace's size, refreshed by each round (sizing them per write would walk fjall's
    /// file list every time).
    start_bytes: AtomicU64,
    hold_bytes: AtomicU64,
}

/// The reclaimer's thread and what writers share with it.
struct Shared {
    db: Database,
    meta: Keyspace,
    data: Keyspace,
    counters: Arc<ReclaimCounters>,
    /// Serializes rounds: the thread's and `release_space`'s.
    round: Mutex<()>,
    /// Set by a writer whose write passed the start threshold; cleared by the thread.
    wanted: AtomicBool,
    state: Mutex<State>,
    /// The thread waits on it for a writer's wake-up or a stop.
    wake: Condvar,
    /// Held writers wait on it for the end of a round.
    finished: Condvar,
    /// The thread panicked (possibly in the middle of a compaction of the data keyspace).
    poison: Poison,
}

#[derive(Default)]
struct State {
    stopping: bool,
}

pub struct BlobReclaimer {
    pub counters: Arc<ReclaimCounters>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl BlobReclaimer {
    pub fn start(db: Database, meta: Keyspace, data: Keyspace) -> std::io::Result<Self> {
        let counters = Arc::new(ReclaimCounters::default());
        let shared = Arc::new(Shared {
            db,
            meta,
            data,
            counters: counters.clone(),
            round: Mutex::new(()),
            wanted: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            finished: Condvar::new(),
            poison: Poison::default(),
        });
        shared.resize_thresholds();
        // Deletions before this open were not counted: one round soon after it finds
        // them (cheap when there are none: the index tables are small). None for an empty
        // data keyspace: a round installs a new version of it, and the clean-close seal
        // (`store_dir::open`) may already be written when an unmount leaves the store
        // open a moment longer (a `faults` test saw `v0` go after the seal).
        if shared.data.disk_space() > 0 {
            let start = shared.counters.start_bytes.load(Ordering::Relaxed);
            counters.deleted_bytes.store(start, Ordering::Relaxed);
            counters.backlog_bytes.store(start, Ordering::Relaxed);
        }
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("shoal-reclaim".into())
            .spawn(move || {
                // Held writers wait for the end of a round: woken to go on.
                let _poison_on_panic = thread_shared.poison.guard("blob reclaim", || {
                    drop(thread_shared.state());
                    thread_shared.finished.notify_all();
                });
                thread_shared.serve();
            })?;
        Ok(Self {
            counters,
            shared,
            thread: Some(thread),
        })
    }

    /// Notes stored file data that puts replaced (`replaced_bytes`: overwrites; appends and
    /// new files leave no garbage) and deleted chunks that may have held `deleted_bytes`; wakes the reclaimer when a round is due and waits for it when the
    /// backlog is too large (see the module comment).
    pub fn note_data(&self, replaced_bytes: u64, deleted_bytes: u64) {
        let counters = &self.counters;
        if deleted_bytes > 0 {
            counters
                .deleted_bytes
                .fetch_add(deleted_bytes, Ordering::Relaxed);
        }
        let added = replaced_bytes + deleted_bytes;
        if added == 0 {
            return;
        }
        let backlog = counters.backlog_bytes.fetch_add(added, Ordering::Relaxed) + added;
        if backlog >= counters.start_bytes.load(Ordering::Relaxed)
            && !self.shared.wanted.swap(true, Ordering::AcqRel)
        {
            // Under the lock, so the wake-up cannot fall between the thread's check
            // and its wait.
            drop(self.shared.state());
            self.shared.wake.notify_one();
        }
        if backlog >= counters.hold_bytes.load(Ordering::Relaxed) {
            self.shared.hold_writer();
        }
    }

    /// `Err(StoreError::Poisoned)` once the reclaimer thread panicked.
    pub fn poisoned(&self) -> Result<(), StoreError> {
        self.shared.poison.check()
    }

    /// Runs a round now, in the caller (a full device wants its space back).
    pub fn reclaim_now(&self) -> Result<(), fjall::Error> {
        self.shared.reclaim()
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn serve(&self) {
        loop {
            {
                let state = self.state();
                let (state, _) = self
                    .wake
                    .wait_timeout_while(state, RECLAIM_CHECK_INTERVAL, |state| {
                        !state.stopping && !self.wanted.load(Ordering::Acquire)
                    })
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if state.stopping {
                    return;
                }
            }
            self.wanted.store(false, Ordering::Release);
            if self.is_due() {
                if let Err(error) = self.reclaim() {
                    tracing::warn!(%error, "reclaiming deleted file data failed");
                }
            }
        }
    }

    fn is_due(&self) -> bool {
        let counters = &self.counters;
        counters.backlog_bytes.load(Ordering::Relaxed)
            >= counters.start_bytes.load(Ordering::Relaxed)
    }

    /// Waits until a round brings the backlog under the hold threshold, the reclaimer
    /// stops, or `RECLAIM_HOLD_MAX` passes (a slow round on a large store must not stall
    /// writers for long; the next write waits again).
    fn hold_writer(&self) {
        let deadline = Instant::now() + RECLAIM_HOLD_MAX;
        let mut state = self.state();
        loop {
            let counters = &self.counters;
            let held = counters.backlog_bytes.load(Ordering::Relaxed)
                >= counters.hold_bytes.load(Ordering::Relaxed);
            let now = Instant::now();
            if !held || state.stopping || self.poison.is_poisoned() || now >= deadline {
                return;
            }
            state = self
                .finished
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Sets the start and hold thresholds from the data keyspace's size now.
    fn resize_thresholds(&self) {
        let size = self.data.disk_space();
        let counters = &self.counters;
        counters.start_bytes.store(
            RECLAIM_MIN_BYTES.max(size / RECLAIM_START_SHARE),
            Ordering::Relaxed,
        );
        counters.hold_bytes.store(
            RECLAIM_HOLD_MIN_BYTES.max(size / RECLAIM_HOLD_SHARE),
            Ordering::Relaxed,
        );
    }

    /// One round (see the module comment); held writers go on when it ends, failed or not
    /// (a failed round's deletions are counted again, so a later round retries).
    fn reclaim(&self) -> Result<(), fjall::Error> {
        let _round = self
            .round
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let counters = &self.counters;
        let backlog = counters.backlog_bytes.load(Ordering::Relaxed);
        let deleted = counters.deleted_bytes.swap(0, Ordering::Relaxed);
        let before = self.data.disk_space();
        let outcome = self.compact();
        if outcome.is_err() {
            counters.deleted_bytes.fetch_add(deleted, Ordering::Relaxed);
        }
        // What this round saw is no longer owed; writes during it stay counted.
        let _ = counters
            .backlog_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                Some(now.saturating_sub(backlog))
            });
        self.resize_thresholds();
        drop(self.state());
        self.finished.notify_all();
        outcome?;
        let after = self.data.disk_space();
        counters.reclaims.fetch_add(1, Ordering::Relaxed);
        counters
            .reclaimed_bytes
            .fetch_add(before.saturating_sub(after), Ordering::Relaxed);
        tracing::debug!(before, after, "reclaimed deleted file data");
        Ok(())
    }

    /// Flushes, then compacts the data keyspace in full; its dead blob files go, stale
    /// ones are rewritten with their live values only.
    fn compact(&self) -> Result<(), fjall::Error> {
        self.flush(&self.data)?;
        // fjall starts a new journal at a flush once the current one passes 16 MB, and
        // deletes the old one only when every keyspace has flushed what it holds: the
        // metadata memtable fills slowly and held journals up to `JOURNAL_BYTES`
        // (512 MiB beside 190 MB of files). The data memtable was just flushed, so
        // flushing the metadata one lets every journal but the current one go.
        if self.db.journal_count() > 1 {
            self.flush(&self.meta)?;
        }
        // The first compaction drops the deleted values and so learns which blob files
        // are stale; blob files are picked for rewriting by what is known before a
        // compaction starts, so a second one rewrites (or deletes) them.
        self.compact_and_settle()?;
        if self.data.tree.stale_blob_bytes() > 0 {
            self.compact_and_settle()?;
        }
        Ok(())
    }
}

/// A key the engine never uses (its keys start with a letter), removed to give the data
/// memtable something to flush.
const SETTLE_KEY: &[u8] = b"~reclaim";

impl Shared {
    /// Compacts the data keyspace in full and, when that gave blob files up, deletes them
    /// at once: until then they are on disk beside the copies of their live values (a
    /// round's two compactions left up to 50 MB of them beside 190 MB of live data).
    fn compact_and_settle(&self) -> Result<(), fjall::Error> {
        let before = self.data.disk_space();
        self.data.major_compact()?;
        if self.data.disk_space() < before {
            self.settle()?;
        }
        Ok(())
    }

    /// Deletes the blob files a round gave up once nothing can read them: fjall keeps each
    /// superseded version of a keyspace (and so its files) until a memtable flush moves
    /// the snapshot watermark past it, and an idle store would keep them until its next
    /// write. A tombstone for `SETTLE_KEY` is that write; it is invisible to reads and
    /// compacted away.
    fn settle(&self) -> Result<(), fjall::Error> {
        self.data.remove(SETTLE_KEY)?;
        self.flush(&self.data)
    }

    /// Writes `keyspace`'s memtables out (bounded, see `write_out_memtables_unless`),
    /// giving up when the reclaimer stops: the unmount must not wait on a failed device.
    fn flush(&self, keyspace: &Keyspace) -> Result<(), fjall::Error> {
        write_out_memtables_unless(keyspace, &|| self.state().stopping)
    }
}

impl Drop for BlobReclaimer {
    fn drop(&mut self) {
        self.shared.state().stopping = true;
        self.shared.wake.notify_all();
        self.shared.finished.notify_all();
        if let Some(thread) = self.thread.take() {
            // A panic was logged and poisoned the store when it happened.
            let _ = thread.join();
        }
    }
}
