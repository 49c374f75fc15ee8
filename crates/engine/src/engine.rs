//! The engine: opening a store, the state the write transaction (`txn`) works on, usage
//! counters, inode allocation and group commit.

mod group_commit;
pub(crate) mod listing_cache;
mod open_files;
mod purge;
pub(crate) mod quota;
pub(crate) mod reclaim_signal;
pub mod replied_writes;
pub(crate) mod tree_usage;
mod trim;
mod txn;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::error::{FsError, FsResult};
use crate::keys::{self, Superblock, FORMAT_VERSION};
use crate::limits::{DEFAULT_CHUNK_BYTES, DEFAULT_INLINE_MAX_BYTES, NAME_MAX_BYTES};
use crate::records::inode::{Inode, Timestamp, Usage, UsageKey, UsageOwner, ROOT_INO};
use crate::records::quota::{QuotaKind, QuotaRecord, QuotaSettings};
use crate::stats::{Op, Stats, StatsSnapshot};
use crate::store::error_seq::{ErrorSeq, WriteErrors};
use crate::store::poison::{Poison, PoisonChecked};
use crate::store::read_cache::CachedStore;
use crate::store::{
    Batch, FjallStore, FjallTuning, MemoryStore, Scan, Space, StagedStore, Store, StoreMetrics,
};
use crate::store_dir::access;
use crate::store_dir::identity::{self, StoreIdentity};
use crate::store_dir::open::OpenError;
use crate::store_dir::space_reserve::SpaceReserve;
use crate::store_dir::{self, Overwrite, StoreDirError, StoreLock};
use group_commit::Committer;
use listing_cache::ListingCache;
pub use open_files::ReferenceProbe;
use open_files::{OpenFiles, Unlinked};
use quota::QuotaState;
use reclaim_signal::ReclaimSignal;
use replied_writes::RepliedWrites;
use tree_usage::{TreeCache, TreeChanges};
pub(crate) use txn::{Txn, UsageDeltas};

/// Inode numbers a directory reserves at a time, so its children's inodes are adjacent.
pub(crate) const INO_RUN_LENGTH: u64 = 64;
/// Files of up to this many chunks (4 MiB) are deleted without scanning for their chunks.
const BLIND_DELETE_MAX_CHUNKS: u64 = 64;

thread_local! {
    /// Whether this thread holds a transaction, and with it the writer lock (set by
    /// `begin`, cleared when the `Txn` drops): waiting for the lock again would wait on
    /// itself. The fast path holds a decided change across requests (`Decided::join_unlink`).
    pub(crate) static HOLDS_TXN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
/// Bound on remembered per-directory inode runs; past it they are forgotten (gaps only).
const INO_RUNS_MAX: usize = 4096;

/// How an engine is opened.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub read_only: bool,
    /// Group commit at least this often; `None`: only on `sync` and at close.
    pub commit_interval: Option<Duration>,
    pub tuning: FjallTuning,
    /// Operations staged in memory before they are checkpointed to the on-disk store
    /// together (see `store::StagedStore`), in key and value bytes. 0: none are; each
    /// reaches the store's journal (and the OS) before it completes.
    pub checkpoint_bytes: u64,
    /// Point reads of metadata kept in memory (`store::read_cache`).
    pub read_cache_bytes: usize,
    /// Directory listings kept in memory (`engine::listing_cache`).
    pub listing_cache_bytes: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            read_only: false,
            commit_interval: Some(crate::defaults::COMMIT_INTERVAL),
            tuning: FjallTuning::default(),
            checkpoint_bytes: crate::defaults::CHECKPOINT_BYTES,
            read_cache_bytes: crate::defaults::READ_CACHE_BYTES,
            listing_cache_bytes: crate::defaults::LISTING_CACHE_BYTES,
        }
    }
}

/// Who performs an operation: new inodes belong to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
}

impl Caller {
    pub const ROOT: Caller = Caller { uid: 0, gid: 0 };
}

/// State only mutations touch, behind the one writer lock.
pub(crate) struct WriteState {
    /// Next inode number never handed out.
    next_ino: u64,
    /// Per-directory runs of reserved inode numbers: parent -> (next, end).
    ino_runs: HashMap<u64, (u64, u64)>,
    /// Every usage counter, loaded at open (one per owner combination in use), so a
    /// commit writes absolute values without reading the store.
    usage: HashMap<UsageKey, Usage>,
    /// Per-user/group/project totals and limits, checked by every commit.
    pub(crate) quotas: QuotaState,
    /// Directories' recursive usage, as last committed (see `tree_usage`).
    tree_cache: TreeCache,
    /// Large orphans committed but not yet purged (see `purge`).
    purges_due: Vec<u64>,
    /// Files whose recorded trim a failed batch left unfinished: the next transaction
    /// finishes them before anything else (see `trim`).
    trims_unfinished: Vec<u64>,
}

/// Told the engine's change count after every change, once readers can see the change
/// (the fast path publishes it to its clients, whose caches hold while it stays put).
pub trait ChangeObserver: Send + Sync {
    /// A batch is readable: `changes` batches are now written, and this one wrote the
    /// attributes or extended attributes of `inodes` (each once, ascending).
    fn changed(&self, changes: u64, inodes: &[u64]);
}

pub struct Engine {
    store: Box<dyn Store>,
    superblock: Superblock,
    read_only: bool,
    writer: Mutex<WriteState>,
    open_files: Mutex<OpenFiles>,
    committer: Committer,
    stats: Stats,
    commit_stop: Arc<CommitStop>,
    /// Whether any quota record exists: lets `open` skip the quota lookup when none does.
    quota_records_exist: AtomicBool,
    /// Writes a door answered before applying them (`replied_writes`).
    replied_writes: RepliedWrites,
    /// Removed inodes the kernel still holds (see `unlinked`).
    unlinked: Unlinked,
    /// Interval commits that failed (see `error_seq`), and how many background failures
    /// (these and the store's) a `sync` has returned so far.
    errors: ErrorSeq,
    errors_reported: AtomicU64,
    /// Free space kept back on the store's device (none in memory or read-only).
    space: Option<SpaceReserve>,
    /// The background deletion of detached trees (see `reclaim`).
    reclaim: Arc<ReclaimSignal>,
    change_observer: OnceLock<Arc<dyn ChangeObserver>>,
    /// Directory listings kept while nothing changes (see `listing_cache`).
    listings: ListingCache,
    /// Set when the commit or reclaimer thread panics; the store checks it before every
    /// operation (see `poison`).
    poison: Arc<Poison>,
    _lock: Option<StoreLock>,
}

/// Wakes the commit thread early when the engine goes away. Lives outside the engine so the
/// waiting thread holds no reference that would keep the engine (and its lock) alive.
#[derive(Default)]
struct CommitStop {
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// How `Engine::mkfs_with` formats a store.
#[derive(Clone, Debug)]
pub struct MkfsOptions {
    /// What may be deleted to format a directory that is not empty.
    pub overwrite: Overwrite,
    /// Who owns the root directory: the user who ran mkfs, so a user's own filesystem is
    /// writable by them.
    pub root_owner: Caller,
    pub label: Option<String>,
    /// Keep file data lz4-compressed (`FjallTuning::compress_new_data`).
    pub compress_data: bool,
}

/// Filesystem-wide numbers for `statfs`.
#[derive(Clone, Copy, Debug)]
pub struct FsStats {
    pub used: Usage,
    pub store_disk_bytes: u64,
    /// Free space kept back on the store's device (`space_reserve`): not available.
    pub reserved_bytes: u64,
}

impl Engine {
    /// Formats a new, empty filesystem in `dir` (created if missing). Refuses a non-empty
    /// directory, and with `force` re-formats only an existing store.
    pub fn mkfs(dir: &Path, force: bool) -> Result<(), OpenError> {
        let options = MkfsOptions {
            overwrite: if force {
                Overwrite::Store
            } else {
                Overwrite::Nothing
            },
            root_owner: Caller::ROOT,
            label: None,
            compress_data: false,
        };
        Self::mkfs_with(dir, &options).map(drop)
    }

    /// [`Engine::mkfs`] deleting what `overwrite` allows first; returns the names deleted.
    pub fn format(dir: &Path, overwrite: Overwrite) -> Result<Vec<String>, OpenError> {
        let options = MkfsOptions {
            overwrite,
            root_owner: Caller::ROOT,
            label: None,
            compress_data: false,
        };
        Self::mkfs_with(dir, &options).map(|(_, deleted)| deleted)
    }

    /// Formats a new, empty filesystem in `dir`, deleting what `options.overwrite` allows
    /// first, with a label and the owner of the root directory. Returns the new store's
    /// identity and the names of the entries deleted. The store is private to its owner.
    pub fn mkfs_with(
        dir: &Path,
        options: &MkfsOptions,
    ) -> Result<(StoreIdentity, Vec<String>), OpenError> {
        // Before touching the directory: a bad label must not cost an existing store.
        let identity = StoreIdentity::new(options.label.as_deref())?;
        let deleted = store_dir::prepare_new(dir, options.overwrite)?;
        let tuning = FjallTuning {
            compress_new_data: options.compress_data,
            ..FjallTuning::default()
        };
        let store = FjallStore::open(&store_dir::kv_path(dir), &tuning)?;
        initialize(&store, options.root_owner)?;
        store.sync()?;
        drop(store);
        identity::write(dir, &identity)?;
        store_dir::write_format(dir)?;
        access::make_private(dir).map_err(|error| StoreDirError::Io(dir.into(), error))?;
        Ok((identity, deleted))
    }

    /// Opens the store in `dir`, locking it against a second user.
    pub fn open(dir: &Path, config: EngineConfig) -> Result<Arc<Engine>, OpenError> {
        let version = store_dir::read_format(dir)?;
        let lock = StoreLock::acquire(dir)?;
        access::warn_if_exposed(dir);
        let space = if config.read_only {
            None
        } else {
            let reserve =
                SpaceReserve::new(dir).map_err(|error| StoreDirError::Io(dir.into(), error))?;
            Some(reserve)
        };
        let fjall = crate::store_dir::open::open_verified(dir, &config.tuning, space.as_ref())?;
        if version < FORMAT_VERSION {
            crate::store_dir::upgrade::upgrade_store_dir(dir, &fjall, config.read_only)?;
        }
        // The read cache sits under the staged layer: it caches what the LSM holds and is
        // told of changes once per checkpoint, on the checkpointer's thread, not on every
        // operation; what is staged is read from the staged layer, above it.
        let mut store = read_cached(Box::new(fjall), &config);
        if config.checkpoint_bytes > 0 {
            store = Box::new(StagedStore::new(store, config.checkpoint_bytes)?);
        }
        Self::start(store, config, Some(lock), space).map_err(|error| match error {
            OpenError::Damaged(problem) if !problem.contains("--repair") => {
                crate::store_dir::open::damaged(dir, &[problem])
            }
            other => other,
        })
    }

    /// A filesystem kept only in RAM, with the same semantics.
    pub fn open_memory(config: EngineConfig) -> Result<Arc<Engine>, OpenError> {
        let store = MemoryStore::new();
        initialize(&store, Caller::ROOT)?;
        let store = read_cached(Box::new(store), &config);
        Self::start(store, config, None, None)
    }

    /// A filesystem over any store (formatted here if it holds no superblock yet): for
    /// fault injection and stores of a program's own. No lock, no space reserve.
    pub fn open_with_store(
        store: Box<dyn Store>,
        config: EngineConfig,
    ) -> Result<Arc<Engine>, OpenError> {
        if store.get(Space::Meta, &keys::superblock_key())?.is_none() {
            initialize(store.as_ref(), Caller::ROOT)?;
        }
        let store = read_cached(store, &config);
        Self::start(store, config, None, None)
    }

    fn start(
        store: Box<dyn Store>,
        config: EngineConfig,
        lock: Option<StoreLock>,
        space: Option<SpaceReserve>,
    ) -> Result<Arc<Engine>, OpenError> {
        let poison = Arc::new(Poison::default());
        let store: Box<dyn Store> = Box::new(PoisonChecked::new(store, poison.clone()));
        let superblock = match store.get(Space::Meta, &keys::superblock_key())? {
            Some(value) => keys::decode_superblock(&value)?,
            None => return Err(OpenError::Damaged("no superblock".into())),
        };
        if superblock.format_version != FORMAT_VERSION {
            return Err(OpenError::Damaged(format!(
                "superblock format version {} (expected {FORMAT_VERSION})",
                superblock.format_version
            )));
        }
        let root = store.get(Space::Meta, &keys::inode_key(ROOT_INO))?;
        if root.is_none() {
            return Err(OpenError::Damaged("root directory inode is missing".into()));
        }
        let next_ino = next_free_ino(store.as_ref())?;
        let usage = load_all_usage(store.as_ref())?;
        let quotas = QuotaState::new(
            &usage,
            load_quota_records(store.as_ref())?,
            load_quota_settings(store.as_ref())?,
        );
        let quota_records_exist = AtomicBool::new(quotas.has_records());
        let engine = Arc::new(Engine {
            store,
            superblock,
            read_only: config.read_only,
            writer: Mutex::new(WriteState {
                next_ino,
                ino_runs: HashMap::new(),
                usage,
                quotas,
                tree_cache: TreeCache::default(),
                purges_due: Vec::new(),
                trims_unfinished: Vec::new(),
            }),
            open_files: Mutex::new(OpenFiles::default()),
            committer: Committer::default(),
            stats: Stats::default(),
            commit_stop: Arc::new(CommitStop::default()),
            quota_records_exist,
            replied_writes: RepliedWrites::default(),
            unlinked: Unlinked::default(),
            errors: ErrorSeq::default(),
            errors_reported: AtomicU64::new(0),
            space,
            reclaim: Arc::default(),
            change_observer: OnceLock::new(),
            listings: ListingCache::new(config.listing_cache_bytes),
            poison,
            _lock: lock,
        });
        if !engine.read_only {
            engine.finish_recorded_trims()?;
            engine.purge_orphans()?;
            if !engine.reclaim_roots()?.is_empty() {
                engine.start_reclaim();
            }
        }
        if let Some(interval) = config.commit_interval {
            spawn_commit_thread(
                Arc::downgrade(&engine),
                engine.commit_stop.clone(),
                interval,
            );
        }
        Ok(engine)
    }

    pub fn superblock(&self) -> Superblock {
        self.superblock
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Every engine counter and what the store reports about itself (memtables, flushes,
    /// compactions, cache), at one moment.
    pub fn stats_snapshot(&self) -> (StatsSnapshot, StoreMetrics) {
        (self.stats.snapshot(), self.store.metrics())
    }

    /// Memory the store and the engine's caches hold whatever the kernel does (see
    /// `Store::memory_bytes`, `listing_cache`).
    pub fn store_memory_bytes(&self) -> u64 {
        self.store.memory_bytes() + self.listings.bytes()
    }

    /// Makes everything durable, then compacts the store (see `Store::compact`); for
    /// measuring the settled size of a store and for offline maintenance.
    pub fn compact(&self) -> FsResult<()> {
        self.sync()?;
        self.store.compact()?;
        Ok(())
    }

    /// Writes a door answered before applying them: every request of either door waits
    /// for them first (`replied_writes`).
    pub fn replied_writes(&self) -> &RepliedWrites {
        &self.replied_writes
    }

    /// Whether a write of `bytes` would be admitted now with room to spare, so that a door
    /// may answer it before applying it: a writable, healthy store with no quota records
    /// (a limit must be met at the write that crosses it) and a device far from its
    /// reserve. A file's own checks (its handle, its size limit) are the caller's.
    pub fn write_surely_fits(&self, bytes: u64) -> bool {
        !self.read_only
            && !self.poison.is_poisoned()
            && !self.quota_records_exist()
            && self
                .space
                .as_ref()
                .is_none_or(|space| space.has_room_for(bytes))
    }

    /// A change to `inodes` that a door has answered for and applies next (a write answered
    /// before it is applied): the change count moves and the caches of those inodes go now,
    /// as for a written batch, so nothing read afterwards is kept as current (the batch
    /// moves them again when it lands).
    pub fn announce_change(&self, inodes: &[u64]) {
        self.count_change(inodes);
    }

    pub(crate) fn unlinked(&self) -> &Unlinked {
        &self.unlinked
    }

    pub(crate) fn reclaim_signal(&self) -> &Arc<ReclaimSignal> {
        &self.reclaim
    }

    pub(crate) fn poison(&self) -> &Arc<Poison> {
        &self.poison
    }

    pub(crate) fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    pub(crate) fn inline_max_bytes(&self) -> u64 {
        u64::from(self.superblock.inline_max_bytes)
    }

    pub(crate) fn chunk_bytes(&self) -> u64 {
        u64::from(self.superblock.chunk_bytes)
    }

    // ---- reads (no lock: every batch is atomic in the store) ----

    /// An inode's attributes; a removed one the kernel still holds has no links.
    pub fn getattr(&self, ino: u64) -> FsResult<Inode> {
        self.stats.count(Op::Getattr);
        self.attributes(ino)
    }

    pub(crate) fn read_inode(&self, ino: u64) -> FsResult<Inode> {
        match self.store.get(Space::Meta, &keys::inode_key(ino))? {
            Some(value) => keys::decode_inode(ino, &value),
            None => Err(FsError::NotFound),
        }
    }

    /// Total usage and store size, for `statfs`.
    pub fn fs_stats(&self) -> FsResult<FsStats> {
        let used = self.usage(UsageOwner::Total)?;
        Ok(FsStats {
            used,
            store_disk_bytes: self.store.disk_bytes(),
            reserved_bytes: self.space.as_ref().map_or(0, SpaceReserve::floor_bytes),
        })
    }

    /// Whether the store keeps file data compressed (`mkfs --compress`); None in RAM.
    pub fn data_compressed(&self) -> Option<bool> {
        self.store.data_compressed()
    }

    /// The current usage of one owner, exact at all times: a sum over the in-memory
    /// counters of the owner combinations it is part of.
    pub fn usage(&self, owner: UsageOwner) -> FsResult<Usage> {
        let state = self.lock_writer();
        Ok(match owner {
            UsageOwner::Total => state.quotas.total(),
            UsageOwner::User(uid) => state.quotas.usage_of(QuotaKind::User, uid),
            UsageOwner::Group(gid) => state.quotas.usage_of(QuotaKind::Group, gid),
            UsageOwner::Project(project) => state.quotas.usage_of(QuotaKind::Project, project),
        })
    }

    /// The writer state, for reads that must agree with the counters (quota reports).
    pub(crate) fn quota_records_exist(&self) -> bool {
        self.quota_records_exist.load(Ordering::Acquire)
    }

    pub(crate) fn write_state(&self) -> MutexGuard<'_, WriteState> {
        self.lock_writer()
    }

    fn lock_writer(&self) -> MutexGuard<'_, WriteState> {
        assert!(
            !HOLDS_TXN.get(),
            "a thread that holds a transaction waited for the writer lock it holds"
        );
        self.writer.lock()
    }

    // ---- writes ----

    /// Starts the one atomic batch of a mutation.
    pub(crate) fn begin(&self) -> FsResult<Txn<'_>> {
        if self.read_only {
            return Err(FsError::ReadOnly);
        }
        let state = self.lock_writer();
        HOLDS_TXN.set(true);
        let mut txn = Txn {
            engine: self,
            state,
            batch: Batch::default(),
            usage_delta: UsageDeltas::default(),
            quota_forced: false,
            quota_records: Vec::new(),
            quota_settings: None,
            new_orphans: Vec::new(),
            removed: Vec::new(),
            purges_due: Vec::new(),
            trims_due: Vec::new(),
            tree: TreeChanges::default(),
            now: Timestamp::now(),
        };
        if !txn.state.trims_unfinished.is_empty() {
            txn.finish_trims()?;
        }
        Ok(txn)
    }

    /// Makes every completed operation durable. Concurrent callers share one store sync.
    /// A background write that failed since the last sync is returned here once, even if
    /// a retry has since succeeded (as fsync returns a writeback error, errseq).
    pub fn sync(&self) -> FsResult<()> {
        self.stats.record_sync_request();
        let committed = self.commit();
        let errors = self.write_errors();
        let reported = self.errors_reported.swap(errors.count, Ordering::AcqRel);
        committed?;
        if errors.count > reported {
            let last = errors.last.unwrap_or_default();
            return Err(FsError::Store(crate::store::StoreError::Engine(format!(
                "{} background write(s) failed since the last sync; the last: {last}",
                errors.count - reported
            ))));
        }
        Ok(())
    }

    /// Background writes that failed since the store was opened (`shoal stats`).
    pub fn write_errors(&self) -> WriteErrors {
        self.errors
            .snapshot()
            .merged(self.store.background_errors())
    }

    /// The group commit itself: one store sync covering every batch written so far, unless
    /// another caller's sync already did (`group_commit`).
    fn commit(&self) -> FsResult<()> {
        self.committer.commit(|| {
            let started = Instant::now();
            self.store.sync()?;
            self.stats.record_commit(started.elapsed());
            Ok(())
        })
    }

    pub(crate) fn listings(&self) -> &ListingCache {
        &self.listings
    }

    /// How many changes (written batches) the engine has made since it was opened: any
    /// change through either door moves it.
    pub fn changes(&self) -> u64 {
        self.committer.written()
    }

    /// Tells `observer` the change count after every change from now on; one observer
    /// per engine (false if one is already set).
    pub fn observe_changes(&self, observer: Arc<dyn ChangeObserver>) -> bool {
        self.change_observer.set(observer).is_ok()
    }

    /// A batch is in the store and readable: the change count moves on, and only then is
    /// the observer told (readers that take the count before a read and again after
    /// reading what the observer keeps rely on this order: a change the read missed has
    /// moved the count by the time the observer's state shows it).
    pub(crate) fn count_change(&self, inodes: &[u64]) {
        // With the listing cache's lock: the pages of what the batch changed go as the
        // count moves (see `listing_cache`).
        let changes = self
            .listings
            .changed(inodes, || self.committer.count_written());
        if let Some(observer) = self.change_observer.get() {
            observer.changed(changes, inodes);
        }
    }

    /// Batches (operations) written since the last successful sync.
    pub fn unsynced_batches(&self) -> u64 {
        self.committer
            .written()
            .saturating_sub(self.committer.synced())
    }

    fn has_unsynced_batches(&self) -> bool {
        self.committer.synced() < self.committer.written()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.reclaim.stop();
        *self.commit_stop.stopped.lock() = true;
        self.commit_stop.wake.notify_all();
        if !self.read_only {
            if let Err(error) = self.sync() {
                tracing::error!("final sync failed: {error}");
            }
        }
    }
}

/// Writes the superblock, the root directory and zeroed counters of a new filesystem.
fn initialize(store: &dyn Store, root_owner: Caller) -> Result<(), OpenError> {
    let superblock = Superblock {
        format_version: FORMAT_VERSION,
        inline_max_bytes: DEFAULT_INLINE_MAX_BYTES,
        chunk_bytes: DEFAULT_CHUNK_BYTES,
    };
    let now = Timestamp::now();
    let root = Inode::empty_directory(
        ROOT_INO,
        ROOT_INO,
        0o755,
        root_owner.uid,
        root_owner.gid,
        now,
    );
    let one_inode = Usage {
        inodes: 1,
        bytes: 0,
    };
    let mut batch = Batch::default();
    batch.put(
        Space::Meta,
        keys::superblock_key(),
        keys::encode_superblock(&superblock),
    );
    batch.put(
        Space::Meta,
        keys::inode_key(ROOT_INO),
        keys::encode_inode(&root),
    );
    batch.put(
        Space::Meta,
        keys::counter_key(UsageKey::of(&root)),
        keys::encode_usage(one_inode),
    );
    store.write(batch)?;
    Ok(())
}

/// The first inode number of a fresh run never handed out: past the recorded high-water
/// mark and past the greatest inode number in use (stores from before the mark).
fn next_free_ino(store: &dyn Store) -> FsResult<u64> {
    let (start, end) = keys::all_inodes_range();
    let last = match store.last_key(Space::Meta, &start, &end)? {
        Some(key) => keys::decode_inode_key(&key)?,
        None => ROOT_INO,
    };
    let recorded = match store.get(Space::Meta, &keys::next_ino_key())? {
        Some(value) => keys::decode_next_ino(&value)?,
        None => 0,
    };
    Ok((last + 1).max(recorded).next_multiple_of(INO_RUN_LENGTH))
}

/// Path walks through both doors read the same metadata keys again and again: `store` with
/// a read cache in front.
fn read_cached(store: Box<dyn Store>, config: &EngineConfig) -> Box<dyn Store> {
    Box::new(CachedStore::new(store, config.read_cache_bytes))
}

fn load_quota_records(store: &dyn Store) -> FsResult<HashMap<(QuotaKind, u32), QuotaRecord>> {
    load_map(store, keys::all_quota_records_range(), |key, value| {
        Ok((
            keys::decode_quota_record_key(key)?,
            keys::decode_quota_record(key, value)?,
        ))
    })
}

fn load_quota_settings(store: &dyn Store) -> FsResult<QuotaSettings> {
    match store.get(Space::Meta, &keys::quota_settings_key())? {
        Some(value) => keys::decode_quota_settings(&value),
        None => Ok(QuotaSettings::default()),
    }
}

fn load_all_usage(store: &dyn Store) -> FsResult<HashMap<UsageKey, Usage>> {
    load_map(store, keys::all_counters_range(), |key, value| {
        Ok((
            keys::decode_counter_key(key)?,
            keys::decode_usage(key, value)?,
        ))
    })
}

/// Every pair of a key range, decoded; the first undecodable pair fails the load.
fn load_map<K: std::hash::Hash + Eq, V>(
    store: &dyn Store,
    (start, end): (Vec<u8>, Vec<u8>),
    decode: impl Fn(&[u8], &[u8]) -> FsResult<(K, V)>,
) -> FsResult<HashMap<K, V>> {
    let mut map = HashMap::new();
    let mut decode_error = None;
    store.scan(
        Space::Meta,
        &start,
        &end,
        &mut |key, value| match decode(key, value) {
            Ok((k, v)) => {
                map.insert(k, v);
                Scan::Continue
            }
            Err(error) => {
                decode_error = Some(error);
                Scan::Stop
            }
        },
    )?;
    match decode_error {
        Some(error) => Err(error),
        None => Ok(map),
    }
}

/// Group-commits on the interval until the engine is dropped.
fn spawn_commit_thread(engine: Weak<Engine>, stop: Arc<CommitStop>, interval: Duration) {
    let spawned = std::thread::Builder::new()
        .name("shoal-commit".into())
        .spawn(move || commit_loop(&engine, &stop, interval));
    if let Err(error) = spawned {
        tracing::error!("cannot start the commit thread: {error}; syncing only on request");
    }
}

/// Group commit every `interval` until the engine goes away.
fn commit_loop(engine: &Weak<Engine>, stop: &CommitStop, interval: Duration) {
    loop {
        {
            let mut stopped = stop.stopped.lock();
            if !*stopped {
                stop.wake.wait_for(&mut stopped, interval);
            }
            if *stopped {
                return;
            }
        }
        let Some(engine) = engine.upgrade() else {
            return;
        };
        // Dropped before `engine`: if this is the last reference, the engine's final sync
        // finds the poison instead of syncing again. Syncs wait for no thread (each
        // caller syncs the store itself), so there is nothing to wake.
        let _poison_on_panic = engine.poison.guard("commit", || {});
        if engine.has_unsynced_batches() {
            engine.stats.record_interval_commit();
            if let Err(error) = engine.commit() {
                engine.errors.record("interval commit failed", &error);
            }
        }
    }
}

/// Checks a name for the namespace: 1..=255 bytes, no '/' or NUL, not "." or "..".
pub(crate) fn check_name(name: &[u8]) -> FsResult<()> {
    if name.len() > NAME_MAX_BYTES {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(FsError::Invalid("bad file name"));
    }
    Ok(())
}
