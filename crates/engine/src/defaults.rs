//! The storage defaults, in one place: `FjallTuning::default`, `EngineConfig::default`,
//! `shoal mount -o` parsing and its `--help`/man text read these constants, and a test
//! checks docs/cli.md's table of options against them.

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
