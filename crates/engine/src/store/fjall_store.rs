use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fjall::{
    AbstractTree, CompressionType, Database, Keyspace, KeyspaceCreateOptions, KvSeparationOptions,
    PersistMode, Readable,
};

use super::blob_reclaim::BlobReclaimer;
use super::journal_sync::sync_journal;
use super::{Batch, Scan, SharedBytes, Space, Store, StoreError, StoreMetrics, StoreView, Value};
use crate::{defaults, keys, limits};

/// What a deleted chunk may have held, for the reclaimer's estimate: the chunk size of
/// new stores, an upper bound.
const DELETED_CHUNK_BYTES: u64 = limits::DEFAULT_CHUNK_BYTES as u64;

/// The longest key and value fjall takes (keys carry a u16 length, values a u32 one);
/// the format's largest must fit.
const FJALL_MAX_KEY_BYTES: usize = u16::MAX as usize;
const FJALL_MAX_VALUE_BYTES: usize = u32::MAX as usize;
const _: () = assert!(keys::MAX_KEY_BYTES <= FJALL_MAX_KEY_BYTES);
const _: () = assert!(keys::MAX_VALUE_BYTES <= FJALL_MAX_VALUE_BYTES);

/// fjall refuses (panics on) a journal limit below this.
pub const MIN_JOURNAL_BYTES: u64 = 64 * 1024 * 1024;

/// Resident memory of a memtable, in percent of what fjall counts for it (keys, values and
/// a fixed part per entry): skiplist towers and per-record allocations add about a third
/// for shoal's small records (`examples/memtable_footprint` measures 1.33).
pub const MEMTABLE_MEMORY_PERCENT: u64 = 135;

/// Memory of memtables that fjall counts as `counted` bytes.
pub fn memtable_memory_bytes(counted: u64) -> u64 {
    counted.saturating_mul(MEMTABLE_MEMORY_PERCENT) / 100
}

/// The memtable size given to fjall for new keyspaces: above any configured size, so
/// fjall's own rotation (by the size stored at creation) never comes first.
const FJALL_MEMTABLE_CEILING: u64 = 4 << 30;

/// The data keyspace's key-value separation, fixed when fjall creates it (mkfs). Blobs are
/// compressed only when asked (`FjallTuning::compress_new_data`): lz4 of every flushed
/// chunk and of every cold read was a tenth of `tar x`'s and `cp -a`'s time on two CPUs
/// (compression took two thirds of fjall's flush thread), which XFS and ext4 never pay.
fn blob_options(compress: bool) -> KvSeparationOptions {
    let compression = if compress {
        CompressionType::Lz4
    } else {
        CompressionType::None
    };
    KvSeparationOptions::default()
        .compression(compression)
        .file_target_size(defaults::BLOB_FILE_BYTES)
        .separation_threshold(defaults::BLOB_MIN_BYTES)
        .staleness_threshold(defaults::BLOB_STALE_RATIO)
        // Every stale blob file a compaction sees is rewritten, not only the oldest
        // quarter of them (fjall's 0.25).
        .age_cutoff(1.0)
}

/// Sizes handed to fjall; mount options set them.
#[derive(Clone, Debug)]
pub struct FjallTuning {
    pub cache_bytes: u64,
    /// Memory one keyspace's active memtable may take before it is sealed and flushed.
    pub memtable_bytes: u64,
    /// fjall's background workers: memtable flushes and compactions.
    pub worker_threads: usize,
    /// Journal size at which fjall flushes memtables so old journals can be dropped; at
    /// least `MIN_JOURNAL_BYTES`.
    pub journal_bytes: u64,
    /// Whether a store this open creates keeps file data lz4-compressed. fjall keeps a
    /// keyspace's options from its creation, so only mkfs decides; each blob file records
    /// its own compression, so either kind of store reads the other's files.
    pub compress_new_data: bool,
}

impl Default for FjallTuning {
    fn default() -> Self {
        Self {
            cache_bytes: defaults::CACHE_BYTES,
            memtable_bytes: defaults::MEMTABLE_BYTES,
            worker_threads: defaults::WORKER_THREADS,
            journal_bytes: defaults::JOURNAL_BYTES,
            compress_new_data: false,
        }
    }
}

/// The on-disk store: one fjall database with a keyspace per `Space`.
pub struct FjallStore {
    db: Database,
    /// Where fjall keeps its journals (`journal_sync`).
    folder: PathBuf,
    meta: Keyspace,
    data: Keyspace,
    /// `FjallTuning::memtable_bytes` in fjall's count (see `MEMTABLE_MEMORY_PERCENT`).
    memtable_limit: u64,
    sealer: Sealer,
    /// `None` only while dropping (stopped before the database closes).
    reclaimer: Option<BlobReclaimer>,
}

/// Seals full memtables on its own thread, as fjall does for the size it knows: sealing
/// takes 5-25 ms here (version and journal upkeep), too long for the request that filled
/// the memtable to wait. The flush fjall starts for a sealed memtable fsyncs the journal
/// (or rotates it, which fsyncs too) under fjall's journal lock: the journal is made
/// durable just before the seal, outside that lock, so that fsync finds little to write
/// and batch writes are not held up behind it.
struct Sealer {
    /// `None` once the store is being dropped, which ends the thread.
    requests: Option<SyncSender<Space>>,
    /// Per space: a seal is requested and not yet done.
    pending: Arc<[AtomicBool; 2]>,
    thread: Option<JoinHandle<()>>,
}

impl Sealer {
    fn start(
        db: Database,
        folder: PathBuf,
        meta: Keyspace,
        data: Keyspace,
    ) -> Result<Self, StoreError> {
        let (requests, received) = sync_channel::<Space>(2);
        let pending: Arc<[AtomicBool; 2]> = Arc::default();
        let done = pending.clone();
        let thread = std::thread::Builder::new()
            .name("shoal-sealer".into())
            .spawn(move || {
                for space in received {
                    let keyspace = match space {
                        Space::Meta => &meta,
                        Space::Data => &data,
                    };
                    if let Err(error) = sync_journal(&db, &folder) {
                        tracing::warn!(%error, "syncing the journal before a seal failed");
                    }
                    if let Err(error) = keyspace.rotate_memtable() {
                        tracing::warn!(?space, %error, "sealing a full memtable failed");
                    }
                    done[space as usize].store(false, Ordering::Release);
                }
            })
            .map_err(StoreError::Io)?;
        Ok(Self {
            requests: Some(requests),
            pending,
            thread: Some(thread),
        })
    }

    /// Asks for `space`'s memtable to be sealed, unless that is already under way.
    fn request(&self, space: Space) {
        if self.pending[space as usize].swap(true, Ordering::AcqRel) {
            return;
        }
        let sent = self
            .requests
            .as_ref()
            .is_some_and(|requests| requests.try_send(space).is_ok());
        if !sent {
            self.pending[space as usize].store(false, Ordering::Release);
        }
    }
}

impl Drop for FjallStore {
    fn drop(&mut self) {
        // The threads hold keyspace handles: they must be gone before the database closes.
        drop(self.reclaimer.take());
        drop(self.sealer.requests.take());
        if let Some(thread) = self.sealer.thread.take() {
            let _ = thread.join();
        }
    }
}

impl From<fjall::Error> for StoreError {
    fn from(error: fjall::Error) -> Self {
        match error {
            fjall::Error::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => {
                StoreError::NoSpace
            }
            fjall::Error::Io(io) => StoreError::Io(io),
            other => StoreError::Engine(other.to_string()),
        }
    }
}

impl FjallStore {
    pub fn open(path: &Path, tuning: &FjallTuning) -> Result<Self, StoreError> {
        super::seqno_recovery::ensure_a_journal(path)?;
        let db = Database::builder(path)
            .cache_size(tuning.cache_bytes)
            .worker_threads(tuning.worker_threads.max(1))
            .max_journaling_size(tuning.journal_bytes.max(MIN_JOURNAL_BYTES))
            // The journal holds file data only until the next flush, which writes it to
            // blob files compressed. Compressing it on the way in too cost the checkpoint
            // thread over half its CPU (lz4 on every chunk: 12 µs of the daemon's 41 µs
            // per entry of `shoal import`), for bytes deleted a few seconds later.
            .journal_compression(CompressionType::None)
            .open()?;
        // fjall stores a keyspace's memtable size when it creates it (at mkfs) and never
        // reads the option again; `seal_if_full` applies the configured size instead.
        let meta = db.keyspace("meta", || {
            KeyspaceCreateOptions::default().max_memtable_size(FJALL_MEMTABLE_CEILING)
        })?;
        // File chunks go to blob files (key-value separation): compaction then moves
        // only their small index entries, not the bytes. fjall keeps these options from
        // the keyspace's creation (mkfs); `defaults` says why these sizes, and
        // `blob_reclaim` how stale blob files are rewritten.
        let data = db.keyspace("data", || {
            KeyspaceCreateOptions::default()
                .max_memtable_size(FJALL_MEMTABLE_CEILING)
                .with_kv_separation(Some(blob_options(tuning.compress_new_data)))
        })?;
        let folder = path.to_path_buf();
        let sealer = Sealer::start(db.clone(), folder.clone(), meta.clone(), data.clone())?;
        let reclaimer = BlobReclaimer::start(db.clone(), meta.clone(), data.clone())?;
        Ok(Self {
            db,
            folder,
            meta,
            data,
            memtable_limit: (tuning.memtable_bytes * 100 / MEMTABLE_MEMORY_PERCENT).max(1),
            sealer,
            reclaimer: Some(reclaimer),
        })
    }

    /// Has a keyspace's memtable sealed once it passes the configured size, so a flush
    /// writes it out.
    fn seal_if_full(&self, space: Space) {
        if self.keyspace(space).tree.active_memtable().size() > self.memtable_limit {
            self.sealer.request(space);
        }
    }

    pub(super) fn keyspace(&self, space: Space) -> &Keyspace {
        match space {
            Space::Meta => &self.meta,
            Space::Data => &self.data,
        }
    }
}

impl StoreView for FjallStore {
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
    ) -> Result<(), StoreError> {
        visit_all(self.keyspace(space).range(start..end), visit)
    }

    fn scan_lengths(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], u64) -> Scan,
    ) -> Result<(), StoreError> {
        visit_lengths(self.keyspace(space).range(start..end), visit)
    }

    fn last_key(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        last_key_of(self.keyspace(space).range(start..end))
    }
}

impl Store for FjallStore {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.keyspace(space).get(key)?.map(|value| value.to_vec()))
    }

    fn get_shared(&self, space: Space, key: &[u8]) -> Result<Option<SharedBytes>, StoreError> {
        Ok(self.keyspace(space).get(key)?)
    }

    fn write(&self, batch: Batch) -> Result<(), StoreError> {
        self.write_borrowed(&batch)
    }

    fn write_borrowed(&self, batch: &Batch) -> Result<(), StoreError> {
        // Buffer: the journal reaches the OS before we reply, so kill -9 loses nothing
        // acknowledged; the fsync (group commit) happens in `sync`.
        let mut fjall_batch = self.db.batch().durability(Some(PersistMode::Buffer));
        let mut touched = [false; 2];
        let mut deleted_chunks = 0u64;
        for (space, key, value) in batch.items() {
            let keyspace = self.keyspace(space);
            touched[space as usize] = true;
            match value {
                // Shared bytes are fjall's own buffers: handed over, not copied.
                Some(Value::Shared(value)) => fjall_batch.insert(keyspace, key, value.clone()),
                Some(Value::Owned(value)) => fjall_batch.insert(keyspace, key, value.as_slice()),
                None => {
                    deleted_chunks += u64::from(space == Space::Data);
                    fjall_batch.remove(keyspace, key);
                }
            }
        }
        fjall_batch.commit()?;
        for space in [Space::Meta, Space::Data] {
            if touched[space as usize] {
                self.seal_if_full(space);
            }
        }
        // Last: it may wait for the reclaimer (a writer far ahead of it).
        if let Some(reclaimer) = &self.reclaimer {
            reclaimer.note_data(
                batch.replaced_data_bytes(),
                deleted_chunks * DELETED_CHUNK_BYTES,
            );
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), StoreError> {
        sync_journal(&self.db, &self.folder)
    }

    fn disk_bytes(&self) -> u64 {
        self.db.disk_space().unwrap_or(0)
    }

    /// The data keyspace's options as fjall keeps them from its creation.
    fn data_compressed(&self) -> Option<bool> {
        let options = self.data.tree.tree_config().kv_separation_opts.as_ref()?;
        Some(options.compression != CompressionType::None)
    }

    fn memory_bytes(&self) -> u64 {
        self.db.cache_size() + memtable_memory_bytes(self.db.write_buffer_size())
    }

    fn snapshot(&self) -> Box<dyn StoreView> {
        Box::new(FjallSnapshot {
            snapshot: self.db.snapshot(),
            meta: self.meta.clone(),
            data: self.data.clone(),
        })
    }

    fn pending_bytes(&self) -> u64 {
        self.db.write_buffer_size()
    }

    fn release_space(&self) -> Result<(), StoreError> {
        for keyspace in [&self.meta, &self.data] {
            write_out_memtables(keyspace)?;
        }
        if let Some(reclaimer) = &self.reclaimer {
            if reclaimer.counters.deleted_bytes.load(Ordering::Relaxed) > 0 {
                reclaimer.reclaim_now()?;
            }
        }
        Ok(())
    }

    fn compact(&self) -> Result<(), StoreError> {
        for keyspace in [&self.meta, &self.data] {
            write_out_memtables(keyspace)?;
            keyspace.major_compact()?;
        }
        Ok(())
    }

    fn poisoned(&self) -> Result<(), StoreError> {
        self.reclaimer
            .as_ref()
            .map_or(Ok(()), BlobReclaimer::poisoned)
    }

    fn metrics(&self) -> StoreMetrics {
        let keyspaces = [&self.meta, &self.data];
        let sum = |count: &dyn Fn(&Keyspace) -> usize| {
            keyspaces.iter().map(|k| count(k) as u64).sum::<u64>()
        };
        StoreMetrics {
            write_buffer_bytes: memtable_memory_bytes(self.db.write_buffer_size()),
            write_buffer_counted_bytes: self.db.write_buffer_size(),
            sealed_memtables: sum(&Keyspace::sealed_memtable_count),
            pending_flushes: self.db.outstanding_flushes() as u64,
            journal_count: self.db.journal_count() as u64,
            journal_bytes: self.db.journal_disk_space().unwrap_or(0),
            disk_bytes: self.disk_bytes(),
            table_count: sum(&Keyspace::table_count),
            l0_table_count: sum(&Keyspace::l0_table_count),
            blob_file_count: sum(&Keyspace::blob_file_count),
            active_compactions: self.db.active_compactions() as u64,
            compactions_completed: self.db.compactions_completed() as u64,
            compaction_time_us: u64::try_from(self.db.time_compacting().as_micros())
                .unwrap_or(u64::MAX),
            cache_capacity_bytes: self.db.cache_capacity(),
            cache_used_bytes: self.db.cache_size(),
            block_cache_hits: sum(&|k| k.metrics().block_load_cached_count()),
            block_cache_misses: sum(&|k| k.metrics().block_load_io_count()),
            reclaimable_bytes: self.reclaimer.as_ref().map_or(0, |reclaimer| {
                reclaimer.counters.deleted_bytes.load(Ordering::Relaxed)
            }),
            reclaims: self.reclaimer.as_ref().map_or(0, |reclaimer| {
                reclaimer.counters.reclaims.load(Ordering::Relaxed)
            }),
            reclaimed_bytes: self.reclaimer.as_ref().map_or(0, |reclaimer| {
                reclaimer.counters.reclaimed_bytes.load(Ordering::Relaxed)
            }),
            ..StoreMetrics::default()
        }
    }
}

/// A fjall cross-keyspace snapshot (MVCC: it pins a sequence number, copies nothing).
struct FjallSnapshot {
    snapshot: fjall::Snapshot,
    meta: Keyspace,
    data: Keyspace,
}

impl FjallSnapshot {
    fn keyspace(&self, space: Space) -> &Keyspace {
        match space {
            Space::Meta => &self.meta,
            Space::Data => &self.data,
        }
    }
}

impl StoreView for FjallSnapshot {
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
    ) -> Result<(), StoreError> {
        visit_all(self.snapshot.range(self.keyspace(space), start..end), visit)
    }

    fn scan_lengths(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], u64) -> Scan,
    ) -> Result<(), StoreError> {
        visit_lengths(self.snapshot.range(self.keyspace(space), start..end), visit)
    }

    fn last_key(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        last_key_of(self.snapshot.range(self.keyspace(space), start..end))
    }
}

/// Visits a range, live or in a snapshot, until `visit` says stop.
fn visit_all(
    range: fjall::Iter,
    visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
) -> Result<(), StoreError> {
    for guard in range {
        let (key, value) = guard.into_inner()?;
        if visit(&key, &value) == Scan::Stop {
            break;
        }
    }
    Ok(())
}

/// `visit_all` with each value's length, read from its blob indirection when it has one.
fn visit_lengths(
    range: fjall::Iter,
    visit: &mut dyn FnMut(&[u8], u64) -> Scan,
) -> Result<(), StoreError> {
    for guard in range {
        let (key, length) = guard.key_and_size()?;
        if visit(&key, u64::from(length)) == Scan::Stop {
            break;
        }
    }
    Ok(())
}

fn last_key_of(mut range: fjall::Iter) -> Result<Option<Vec<u8>>, StoreError> {
    match range.next_back() {
        Some(guard) => Ok(Some(guard.key()?.to_vec())),
        None => Ok(None),
    }
}

/// Longest wait for a keyspace's memtables to be written out as tables. A flush of a full
/// memtable takes well under a second; one that has not happened by then is failing (the
/// store's directory gone, the device broken) and is retried by fjall for ever, so waiting
/// on (as fjall's `rotate_memtable_and_wait` does) would hang the caller: an fsync, a
/// commit that wants space, a reclaim, an unmount.
const MEMTABLE_WRITE_OUT_LIMIT: Duration = Duration::from_secs(10);

/// Seals the active memtable and waits, bounded, until no sealed memtable is left.
pub(crate) fn write_out_memtables(keyspace: &Keyspace) -> Result<(), StoreError> {
    Ok(write_out_memtables_unless(keyspace, &|| false)?)
}

/// `write_out_memtables` for a caller that may be told to stop while it waits (the blob
/// reclaimer at unmount): gives up as soon as `stopping()` says so, or after
/// `MEMTABLE_WRITE_OUT_LIMIT`, with a `TimedOut` error.
pub(crate) fn write_out_memtables_unless(
    keyspace: &Keyspace,
    stopping: &dyn Fn() -> bool,
) -> Result<(), fjall::Error> {
    keyspace.rotate_memtable()?;
    let deadline = Instant::now() + MEMTABLE_WRITE_OUT_LIMIT;
    while keyspace.sealed_memtable_count() > 0 {
        if stopping() || Instant::now() >= deadline {
            return Err(fjall::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "memtables not written out (stopping, or not within {} s: the store's \
                     flushes are failing)",
                    MEMTABLE_WRITE_OUT_LIMIT.as_secs()
                ),
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Batch, Scan};
    use std::sync::mpsc;

    #[test]
    fn a_full_device_is_no_space_and_other_io_errors_stay_io() {
        let full = fjall::Error::Io(std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(matches!(StoreError::from(full), StoreError::NoSpace));
        let denied = fjall::Error::Io(std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(matches!(StoreError::from(denied), StoreError::Io(_)));
    }
    use std::time::Duration;

    /// Flushes and compactions hold lsm-tree's version history lock while they persist a
    /// new version (fsyncs) or delete old version files; the vendored lsm-tree publishes
    /// the latest version outside that lock (vendor/lsm-tree/README.vendor.md), so gets and scans
    /// must complete while it is held.
    #[test]
    fn reads_do_not_wait_for_the_version_history_lock() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path(), &FjallTuning::default()).unwrap();
        let mut batch = Batch::default();
        batch.put(Space::Meta, b"key".to_vec(), b"value".to_vec());
        store.write(batch).unwrap();
        let held = store.keyspace(Space::Meta).tree.get_version_history_lock();
        let (sender, received) = mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let got = store.get(Space::Meta, b"key").ok().flatten();
                let mut scanned = Vec::new();
                let scan = store.scan(Space::Meta, b"", b"\xff", &mut |key, _| {
                    scanned.push(key.to_vec());
                    Scan::Continue
                });
                let _ = sender.send((got, scan.is_ok(), scanned));
            });
            let read = received.recv_timeout(Duration::from_secs(10));
            drop(held);
            let (got, scanned_ok, scanned) = read.expect("the read waited for the lock");
            assert_eq!(got.as_deref(), Some(&b"value"[..]));
            assert!(scanned_ok);
            assert_eq!(scanned, vec![b"key".to_vec()]);
        });
    }

    /// The same for the checkpointer's batch writes (inserts, the memtable-size and
    /// write-stall checks after them) and for statistics: none may wait for a flush's
    /// fsyncs.
    #[test]
    fn writes_and_metrics_do_not_wait_for_the_version_history_lock() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path(), &FjallTuning::default()).unwrap();
        let held = store.keyspace(Space::Meta).tree.get_version_history_lock();
        let (sender, received) = mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut batch = Batch::default();
                batch.put(Space::Meta, b"key".to_vec(), b"value".to_vec());
                batch.put(Space::Data, b"chunk".to_vec(), vec![7; 4096]);
                let written = store.write(batch).is_ok();
                let metrics = store.metrics();
                let _ = sender.send((written, metrics.write_buffer_counted_bytes));
            });
            let outcome = received.recv_timeout(Duration::from_secs(10));
            drop(held);
            let (written, buffered) = outcome.expect("a write or a report waited for the lock");
            assert!(written);
            assert!(buffered > 0);
        });
        assert_eq!(
            store.get(Space::Meta, b"key").unwrap().as_deref(),
            Some(&b"value"[..])
        );
    }

    /// File data is stored as written unless the store was made to compress it: a
    /// compressible 8 MiB takes its whole size on disk once flushed, or a small part of it.
    #[test]
    fn file_data_is_compressed_only_in_a_store_made_to_compress_it() {
        let text: Vec<u8> = b"fn main() { println!(\"a line of a source file\"); }\n"
            .iter()
            .copied()
            .cycle()
            .take(64 * 1024)
            .collect();
        let disk_bytes_flushed = |compress: bool| {
            let dir = tempfile::tempdir().unwrap();
            let tuning = FjallTuning {
                compress_new_data: compress,
                ..FjallTuning::default()
            };
            let store = FjallStore::open(dir.path(), &tuning).unwrap();
            for chunk in 0u32..128 {
                let mut batch = Batch::default();
                batch.put(Space::Data, chunk.to_be_bytes().to_vec(), text.clone());
                store.write(batch).unwrap();
            }
            store.release_space().unwrap();
            let bytes = store.disk_bytes();
            assert_eq!(
                store
                    .get(Space::Data, &7u32.to_be_bytes())
                    .unwrap()
                    .as_deref(),
                Some(&text[..])
            );
            bytes
        };
        let (plain, compressed) = (disk_bytes_flushed(false), disk_bytes_flushed(true));
        assert!(
            plain > compressed + (4 << 20),
            "uncompressed store {plain} bytes, compressed {compressed}"
        );
    }

    /// A scan for lengths reads each value's length from the table, never the value from
    /// its blob file: it still answers, exactly, with every blob file's bytes damaged,
    /// where a scan of the values fails (a delete of a large file had read all of it).
    #[test]
    fn lengths_are_scanned_without_reading_blob_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path(), &FjallTuning::default()).unwrap();
        let mut batch = Batch::default();
        for chunk in 0u32..8 {
            let value = vec![chunk as u8; 64 * 1024 - chunk as usize];
            batch.put(Space::Data, chunk.to_be_bytes().to_vec(), value);
        }
        batch.put(Space::Data, 8u32.to_be_bytes().to_vec(), vec![1; 10]);
        store.write(batch).unwrap();
        store.release_space().unwrap();
        let blobs = dir.path().join("keyspaces/2/blobs");
        let mut damaged = 0;
        for file in std::fs::read_dir(&blobs).unwrap() {
            let path = file.unwrap().path();
            let mut bytes = std::fs::read(&path).unwrap();
            for byte in bytes.iter_mut().skip(64).step_by(512) {
                *byte ^= 0x5a;
            }
            std::fs::write(&path, bytes).unwrap();
            damaged += 1;
        }
        assert!(damaged > 0, "no blob file in {}", blobs.display());
        let mut lengths = Vec::new();
        store
            .scan_lengths(Space::Data, &[], &[0xff; 8], &mut |key, length| {
                lengths.push((key.to_vec(), length));
                Scan::Continue
            })
            .unwrap();
        let expected: Vec<_> = (0u32..8)
            .map(|chunk| (chunk.to_be_bytes().to_vec(), 64 * 1024 - u64::from(chunk)))
            .chain([(8u32.to_be_bytes().to_vec(), 10)])
            .collect();
        assert_eq!(lengths, expected);
        let read = store.scan(Space::Data, &[], &[0xff; 8], &mut |_, _| Scan::Continue);
        assert!(read.is_err(), "the damaged blob files read back");
    }

    /// With the store's directory gone every flush fails, and fjall retries it for ever:
    /// writing out memtables for space (and compacting) gives up with an error instead of
    /// waiting for ever (an fsync that wanted space hung the daemon).
    #[test]
    fn writing_out_memtables_gives_up_when_flushes_keep_failing() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path(), &FjallTuning::default()).unwrap();
        let mut batch = Batch::default();
        batch.put(Space::Meta, b"key".to_vec(), b"value".to_vec());
        store.write(batch).unwrap();
        std::fs::remove_dir_all(dir.path()).unwrap();
        let started = std::time::Instant::now();
        let (done, outcome) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(store.release_space());
        });
        let result = outcome
            .recv_timeout(MEMTABLE_WRITE_OUT_LIMIT * 3)
            .expect("release_space returned");
        assert!(
            result.is_err(),
            "flushes into a deleted directory succeeded"
        );
        assert!(started.elapsed() < MEMTABLE_WRITE_OUT_LIMIT * 3);
    }

    /// `journal_sync` fsyncs the newest `<id>.jnl` in the database folder: that must be the
    /// file fjall writes batches to, before and after fjall rotates the journal (at a
    /// flush, once it holds 16 MB: vendor/fjall).
    #[test]
    fn sync_finds_the_journal_fjall_writes_to() {
        use crate::store::journal_sync::active_journal;
        let dir = tempfile::tempdir().unwrap();
        let tuning = FjallTuning {
            memtable_bytes: 1 << 20,
            ..FjallTuning::default()
        };
        let store = FjallStore::open(dir.path(), &tuning).unwrap();
        let journal_holding = |value: &[u8]| {
            let mut batch = Batch::default();
            batch.put(Space::Meta, b"probe".to_vec(), value.to_vec());
            store.write(batch).unwrap();
            store.sync().unwrap();
            let path = active_journal(dir.path()).unwrap().expect("a journal file");
            let bytes = std::fs::read(&path).unwrap();
            assert!(
                bytes.windows(value.len()).any(|window| window == value),
                "{} lacks the batch just synced",
                path.display()
            );
            path
        };
        let first = journal_holding(b"first-value-written-to-the-journal");
        // Incompressible, as fjall may compress its journal.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let filler: Vec<u8> = (0..1 << 20)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        for round in 0u32.. {
            let active = active_journal(dir.path()).unwrap();
            if active.as_ref() != Some(&first) {
                break;
            }
            assert!(round < 1000, "fjall never rotated its journal");
            let mut batch = Batch::default();
            batch.put(Space::Meta, round.to_be_bytes().to_vec(), filler.clone());
            store.write(batch).unwrap();
            if round >= 64 {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let second = journal_holding(b"second-value-written-after-a-seal");
        assert_ne!(first, second, "a seal starts a new journal");
    }
}
