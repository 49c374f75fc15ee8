//! Returns the space of deleted and overwritten file data to the device.
//!
//! File chunks live in fjall's blob files (key-value separation). A blob file's space
//! comes back only when a compaction of the data keyspace's index tables sees that its
//! values are gone (the file is then dead and deleted) or mostly gone (its live values are
//! relocated into a new file, as the staleness threshold says). fjall's own compactions
//! run when tables pile up from writes; deletions alone never start one, so a store whose
//! files were deleted kept all their blob bytes (410 MB of store for 105 MB of live data).
//!
//! The reclaimer counts deleted chunks, and once the bytes they may have held reach a
//! share of the data keyspace (`RECLAIM_SHARE`) it compacts that keyspace in full: its
//! index tables are small (the bytes are in blob files), and a full compaction sees every
//! dropped value. It checks every `RECLAIM_INTERVAL`, so space comes back within about
//! that long under steady load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fjall::{AbstractTree, Keyspace};

pub const RECLAIM_INTERVAL: Duration = Duration::from_secs(10);

/// Reclaim once deleted bytes reach 1/`RECLAIM_SHARE` of the keyspace's disk space.
const RECLAIM_SHARE: u64 = 8;

/// Below this many deleted bytes a reclaim is not worth its compaction.
const MIN_RECLAIM_BYTES: u64 = 4 << 20;

/// Progress, for `shoal stats`.
#[derive(Default)]
pub struct ReclaimCounters {
    /// Bytes deleted chunks may hold (each counted as a whole chunk), not yet reclaimed.
    pub deleted_bytes: AtomicU64,
    pub reclaims: AtomicU64,
    /// Disk bytes the reclaims gave back (size before minus after).
    pub reclaimed_bytes: AtomicU64,
}

pub struct BlobReclaimer {
    pub counters: Arc<ReclaimCounters>,
    /// Dropped to stop the thread.
    stop: Option<SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl BlobReclaimer {
    pub fn start(data: Keyspace) -> std::io::Result<Self> {
        let counters = Arc::new(ReclaimCounters::default());
        // Deletions before this open were not counted: one reclaim soon after it finds
        // them (cheap when there are none: the index tables are small).
        counters
            .deleted_bytes
            .store(data.disk_space() / RECLAIM_SHARE, Ordering::Relaxed);
        let thread_counters = counters.clone();
        let (stop, stopped) = sync_channel::<()>(0);
        let thread = std::thread::Builder::new()
            .name("shoal-reclaim".into())
            .spawn(move || loop {
                match stopped.recv_timeout(RECLAIM_INTERVAL) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                if is_due(&thread_counters, data.disk_space()) {
                    if let Err(error) = reclaim(&data, &thread_counters) {
                        tracing::warn!(%error, "reclaiming deleted file data failed");
                    }
                }
            })?;
        Ok(Self {
            counters,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Notes deleted chunks that may have held `deleted_bytes`.
    pub fn note_deleted(&self, deleted_bytes: u64) {
        self.counters
            .deleted_bytes
            .fetch_add(deleted_bytes, Ordering::Relaxed);
    }
}

fn is_due(counters: &ReclaimCounters, disk_bytes: u64) -> bool {
    let deleted = counters.deleted_bytes.load(Ordering::Relaxed);
    deleted >= MIN_RECLAIM_BYTES.max(disk_bytes / RECLAIM_SHARE)
}

/// Compacts the data keyspace in full; its dead blob files go, fragmented ones are
/// rewritten with their live values only.
pub fn reclaim(data: &Keyspace, counters: &ReclaimCounters) -> Result<(), fjall::Error> {
    let deleted = counters.deleted_bytes.swap(0, Ordering::Relaxed);
    let before = data.disk_space();
    // The first compaction drops the deleted values and so learns which blob files are
    // stale; blob files are picked for relocation by what is known before a compaction
    // starts, so a second one rewrites (or deletes) them.
    let compacted = data.rotate_memtable_and_wait().and_then(|()| {
        data.major_compact()?;
        if data.tree.stale_blob_bytes() > 0 {
            data.major_compact()?;
        }
        Ok(())
    });
    if let Err(error) = compacted {
        // Counted again, so a later round retries.
        counters.deleted_bytes.fetch_add(deleted, Ordering::Relaxed);
        return Err(error);
    }
    let after = data.disk_space();
    counters.reclaims.fetch_add(1, Ordering::Relaxed);
    counters
        .reclaimed_bytes
        .fetch_add(before.saturating_sub(after), Ordering::Relaxed);
    tracing::info!(before, after, "reclaimed deleted file data");
    Ok(())
}

impl Drop for BlobReclaimer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
