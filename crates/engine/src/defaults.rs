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
/// Staged key and value bytes at which a write first checkpoints (`checkpoint=`).
pub const CHECKPOINT_BYTES: u64 = 4 << 20;
/// Changes one batch holds at most where the engine or a tool splits large work into
/// several batches (purging a large file, `shoal import`, fsck repairs): the writer lock
/// is held for one batch at a time, and the batch is built in memory.
pub const BATCH_OPS: usize = 4096;
/// Key and value bytes gathered before such a batch is written (`shoal import`, restore).
pub const BATCH_BYTES: usize = 8 << 20;
