//! The storage defaults, in one place: `FjallTuning::default`, `EngineConfig::default`,
//! `shoal mount -o` parsing and its `--help`/man text read these constants, and a test
//! checks docs/cli.md's table of options against them. The batch bounds below are not
//! options: they bound every engine batch that work too large for one is split into.

use std::time::Duration;

/// Group commit at least this often (`commit=`).
pub const COMMIT_INTERVAL: Duration = Duration::from_secs(5);
/// The store's block cache (`cache=`).
pub const CACHE_BYTES: u64 = 256 << 20;
/// Memory one keyspace's active memtable may take before it is sealed and flushed
/// (`memtable=`; docs/tuning.md says why 96 MiB).
pub const MEMTABLE_BYTES: u64 = 96 << 20;
/// fjall's background workers: memtable flushes and compactions (`compaction_threads=`).
pub const WORKER_THREADS: usize = 2;
/// Journal size at which fjall flushes memtables so old journals can go (`journal=`).
pub const JOURNAL_BYTES: u64 = 512 << 20;
/// Directory listings kept while nothing changes (`engine/listing_cache.rs`): about 130k
/// entries with their attributes. Pages used in the last round (half of it) always stay:
/// a 32k-entry clone's `git status` lists 9 MB; at 16 MiB it passed that half and listed
/// 1000 directories from the LSM per run (at 64 MiB, 350). A mount gives it an eighth of a
/// smaller `memory=` budget.
pub const LISTING_CACHE_BYTES: usize = 32 << 20;
/// Point reads of metadata kept (`store/read_cache.rs`): an entry and an inode of each of
/// about 120k files, so the opens of a 30k-file tree read again (`grep -r`, a build) find
/// theirs (8 MiB did not: each pass emptied the shards the next one needed; 459 -> 395-418
/// ms for a warm `grep -r` of the bench tree under `shoal run`). A mount gives it an
/// eighth of a smaller `memory=` budget.
pub const READ_CACHE_BYTES: usize = 32 << 20;
/// Staged key and value bytes at which a write first checkpoints (`checkpoint=`;
/// docs/tuning.md says why 32 MiB: fewer checkpoint threads taking a CPU from callers).
pub const CHECKPOINT_BYTES: u64 = 32 << 20;
/// Changes one batch holds at most where the engine or a tool splits large work into
/// several batches (purging a large file, `shoal import`, fsck repairs): the writer lock
/// is held for one batch at a time, and the batch is built in memory.
pub const BATCH_OPS: usize = 4096;
/// Key and value bytes gathered before such a batch is written (`shoal import`, restore).
pub const BATCH_BYTES: usize = 8 << 20;

// Returning deleted and overwritten file data to the device (`store/blob_reclaim.rs` says
// how; the churn row in BENCHMARKS.md measures it). The goal: a store under churn takes
// at most 1.5x its live bytes, as XFS does on the same workload.

/// Blob files (file chunks, key-value separation) are written up to this size. A blob
/// file's space comes back only whole: when all its values are gone, or when its live
/// values are copied into a new file. 16 MiB instead of fjall's 64 so a partly stale
/// file is rewritten (or dropped) at a finer grain. fjall stores this when it creates
/// the keyspace: it applies to stores made by this version on.
pub const BLOB_FILE_BYTES: u64 = 16 << 20;
/// File chunks this long or longer go to blob files (fjall's own default, stated): a
/// shorter one stays in its table's blocks, and a read of it is a view into a block.
pub const BLOB_MIN_BYTES: u32 = 1024;
/// A blob file whose share of stale (deleted or overwritten) bytes reaches this is
/// rewritten with its live values at the next compaction that sees it, every such file
/// at once (fjall's default rewrote only the oldest quarter of them per compaction, and
/// blob files stayed ~1.8x the live data). Lower: less garbage kept, but each reclaimed
/// byte costs more copying: (1 - ratio) / ratio bytes, 2.3 at 0.3 (at 0.25, 3: the churn
/// run's daemon then wrote 5.4x what the workload did). Stored at creation too.
pub const BLOB_STALE_RATIO: f32 = 0.3;
/// The reclaimer starts a round once the file data overwritten or deleted since the last
/// round reaches 1/`RECLAIM_START_SHARE` of the data keyspace's size (at least
/// `RECLAIM_MIN_BYTES`): overwrites leave garbage as deletes do, and a round is cheap
/// when there is little (the index tables it compacts hold only keys and blob pointers).
pub const RECLAIM_START_SHARE: u64 = 16;
pub const RECLAIM_MIN_BYTES: u64 = 4 << 20;
/// How often the reclaimer looks at the backlog when nothing wakes it.
pub const RECLAIM_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// Writers of file data wait for the reclaimer once the backlog (data written or deleted
/// since the round in progress started; appends and new files leave no garbage and count
/// nothing) reaches 1/`RECLAIM_HOLD_SHARE` of the data
/// keyspace (at least `RECLAIM_HOLD_MIN_BYTES`): a store written faster than it reclaims
/// would otherwise grow without bound (6.6x the live bytes in the churn run, where the
/// live set was rewritten every 2 s). Each wait ends after `RECLAIM_HOLD_MAX` at most.
pub const RECLAIM_HOLD_SHARE: u64 = 8;
pub const RECLAIM_HOLD_MIN_BYTES: u64 = 16 << 20;
pub const RECLAIM_HOLD_MAX: Duration = Duration::from_secs(5);
// Journals: fjall starts a new one at a flush once the current one passes 16 MB (64 MB
// upstream; vendor/fjall/README.vendor.md) and keeps old ones until every memtable
// holding their writes is flushed; a reclaim round flushes the metadata memtable then, so
// journals stay near 16 MB instead of growing to `JOURNAL_BYTES` behind a slowly filling
// metadata memtable.
