//! The statistics of a live mount as one serializable report: what the daemon answers to a
//! `Stats` control request, what `shoal stats --json` prints, and what the Prometheus
//! endpoint renders. One type for all three, so they cannot disagree.

use std::sync::{Arc, Weak};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use shoal_engine::histogram::HistogramSnapshot;
use shoal_engine::{Engine, StoreMetrics};
use shoal_fuse::FuseStats;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StatsReport {
    /// Daemon process id and how long it has served, so a client can tell a restarted
    /// daemon (counters back at zero) and compute rates over exact intervals.
    pub daemon_pid: u32,
    pub uptime_ns: u64,
    /// How requests reach the daemon: "io_uring" or "/dev/fuse".
    pub fuse_transport: String,
    /// Every FUSE request type, counted and timed from the handler's entry to its reply.
    pub ops: Vec<OpReport>,
    pub engine: EngineReport,
    pub store: StoreReport,
    pub memory: MemoryReport,
    /// CPU time of the keep-awake spinners (`-o spin=`): idle time kept from halting, not
    /// work on requests.
    #[serde(default)]
    pub spin_cpu_ns: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct OpReport {
    pub op: String,
    pub count: u64,
    pub latency: LatencyReport,
}

/// A latency histogram: quantiles for people and scripts, the non-empty buckets
/// (`shoal_engine::histogram` indexes) for clients that compute their own (per interval).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencyReport {
    pub count: u64,
    pub sum_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub buckets: Vec<(usize, u64)>,
}

impl LatencyReport {
    pub fn from_snapshot(snapshot: &HistogramSnapshot) -> Self {
        Self {
            count: snapshot.count,
            sum_ns: snapshot.sum_ns,
            p50_ns: snapshot.quantile(0.5),
            p99_ns: snapshot.quantile(0.99),
            p999_ns: snapshot.quantile(0.999),
            max_ns: snapshot.max_ns,
            buckets: snapshot.sparse_buckets(),
        }
    }

    pub fn histogram(&self) -> HistogramSnapshot {
        HistogramSnapshot::from_sparse(self.sum_ns, self.max_ns, &self.buckets)
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct EngineReport {
    /// Atomic batches written (one per mutating operation).
    pub batches: u64,
    /// Key and value bytes of those batches: what went to the journal.
    pub log_bytes: u64,
    /// Sync requests (fsync, fsyncdir, unmount); concurrent ones share one commit.
    pub syncs: u64,
    /// Store syncs performed (group commits), and how many of them the commit timer did.
    pub commits: u64,
    pub interval_commits: u64,
    pub commit_latency: LatencyReport,
    pub batch_write_latency: LatencyReport,
    /// Batch writes slower than `SLOW_BATCH_WRITE` (fjall slowing or halting writers
    /// while flushes and compactions catch up), and the time they took.
    pub write_slowdowns: u64,
    pub write_slowdown_ns: u64,
    /// Background writes (checkpoints, interval commits) that failed, and the newest
    /// failure; each is also returned to the next fsync.
    #[serde(default)]
    pub write_errors: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_write_error: Option<String>,
    /// Trees taken out by `shoal rmtree` and still being deleted in the background, with
    /// the names and bytes left in them.
    #[serde(default)]
    pub reclaim_trees: u64,
    #[serde(default)]
    pub reclaim_entries: u64,
    #[serde(default)]
    pub reclaim_bytes: u64,
    /// What the files hold (the usage counters' total): bytes stored and inodes, against
    /// which the store's bytes on disk are the overhead.
    #[serde(default)]
    pub live_bytes: u64,
    #[serde(default)]
    pub live_inodes: u64,
}

/// `shoal_engine::StoreMetrics`, field for field.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StoreReport {
    pub write_buffer_bytes: u64,
    pub sealed_memtables: u64,
    pub pending_flushes: u64,
    pub journal_count: u64,
    pub journal_bytes: u64,
    pub disk_bytes: u64,
    pub table_count: u64,
    pub l0_table_count: u64,
    pub blob_file_count: u64,
    pub active_compactions: u64,
    pub compactions_completed: u64,
    pub compaction_time_us: u64,
    pub cache_capacity_bytes: u64,
    pub cache_used_bytes: u64,
    pub block_cache_hits: u64,
    pub block_cache_misses: u64,
    /// Operations staged in memory and not yet checkpointed to the store, and checkpoints.
    #[serde(default)]
    pub staged_bytes: u64,
    #[serde(default)]
    pub checkpoints: u64,
    /// Time checkpoints spent writing into the store, in all and at most once.
    #[serde(default)]
    pub checkpoint_write_ns: u64,
    #[serde(default)]
    pub checkpoint_write_max_ns: u64,
    /// Writes that waited for a held-up checkpoint at twice `checkpoint=`, and how long.
    #[serde(default)]
    pub held_writes: u64,
    #[serde(default)]
    pub held_write_ns: u64,
    #[serde(default)]
    pub held_write_max_ns: u64,
    /// Deleted file data not yet returned to the device (estimate), and the reclaims
    /// that return it (`blob_reclaim`).
    #[serde(default)]
    pub reclaimable_bytes: u64,
    #[serde(default)]
    pub reclaims: u64,
    #[serde(default)]
    pub reclaimed_bytes: u64,
}

impl From<StoreMetrics> for StoreReport {
    fn from(metrics: StoreMetrics) -> Self {
        Self {
            write_buffer_bytes: metrics.write_buffer_bytes,
            sealed_memtables: metrics.sealed_memtables,
            pending_flushes: metrics.pending_flushes,
            journal_count: metrics.journal_count,
            journal_bytes: metrics.journal_bytes,
            disk_bytes: metrics.disk_bytes,
            table_count: metrics.table_count,
            l0_table_count: metrics.l0_table_count,
            blob_file_count: metrics.blob_file_count,
            active_compactions: metrics.active_compactions,
            compactions_completed: metrics.compactions_completed,
            compaction_time_us: metrics.compaction_time_us,
            cache_capacity_bytes: metrics.cache_capacity_bytes,
            cache_used_bytes: metrics.cache_used_bytes,
            block_cache_hits: metrics.block_cache_hits,
            block_cache_misses: metrics.block_cache_misses,
            staged_bytes: metrics.staged_bytes,
            checkpoints: metrics.checkpoints,
            checkpoint_write_ns: metrics.checkpoint_write_ns,
            checkpoint_write_max_ns: metrics.checkpoint_write_max_ns,
            held_writes: metrics.held_writes,
            held_write_ns: metrics.held_write_ns,
            held_write_max_ns: metrics.held_write_max_ns,
            reclaimable_bytes: metrics.reclaimable_bytes,
            reclaims: metrics.reclaims,
            reclaimed_bytes: metrics.reclaimed_bytes,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct MemoryReport {
    /// Resident set of the daemon (/proc/self/statm).
    pub rss_bytes: u64,
    /// The allocator's heap: bytes in use, and bytes resident but not in use (free pages
    /// not yet returned, fragmentation, metadata); only when asked for (`shoal stats
    /// --heap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heap_in_use_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heap_free_bytes: Option<u64>,
    /// Inodes the kernel holds references to, and the daemon's table of them.
    pub referenced_inodes: u64,
    pub lookup_table_bytes: u64,
    pub lookup_table_bytes_per_inode: u64,
    /// `-o memory=`: bound on the lookup table plus the block cache, and the names the
    /// daemon asked the kernel to drop to stay within it (failed: the kernel had no such
    /// name any more).
    pub budget_bytes: u64,
    pub evictions: u64,
    pub failed_evictions: u64,
    /// Free heap pages handed back to the system near the budget, and how long it took.
    #[serde(default)]
    pub heap_trims: u64,
    #[serde(default)]
    pub heap_trim_ns: u64,
    #[serde(default)]
    pub heap_trim_max_ns: u64,
}

/// What the daemon reports from: shared with the FUSE session and the engine.
pub struct StatsSource {
    /// Weak: reporting threads must not keep the engine (and its store lock) alive after
    /// unmount, when the daemon drops it to close the store.
    pub engine: Weak<Engine>,
    pub fuse_stats: Arc<FuseStats>,
    pub started: Instant,
    pub memory_budget_bytes: u64,
    pub fuse_transport: &'static str,
}

impl StatsSource {
    /// `None` once the filesystem is unmounting and the engine is gone. `heap` also reads
    /// the allocator's heap figures (see `ControlRequest::HeapStats`).
    pub fn report(&self, heap: bool) -> Option<StatsReport> {
        let live = self.engine.upgrade()?;
        let errors = live.write_errors();
        let (engine, store) = live.stats_snapshot();
        let reclaim = live.reclaim_backlog().unwrap_or_default();
        let used = live.fs_stats().map(|stats| stats.used).unwrap_or_default();
        drop(live);
        let fuse = self.fuse_stats.snapshot();
        let heap = heap.then(shoal_fuse::heap_bytes);
        Some(StatsReport {
            daemon_pid: std::process::id(),
            uptime_ns: u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            fuse_transport: self.fuse_transport.to_string(),
            ops: fuse
                .ops
                .iter()
                .map(|(op, histogram)| OpReport {
                    op: (*op).to_string(),
                    count: histogram.count,
                    latency: LatencyReport::from_snapshot(histogram),
                })
                .collect(),
            engine: EngineReport {
                batches: engine.batches,
                log_bytes: engine.log_bytes,
                syncs: engine.sync_requests,
                commits: engine.commits,
                interval_commits: engine.interval_commits,
                commit_latency: LatencyReport::from_snapshot(&engine.commit_latency),
                batch_write_latency: LatencyReport::from_snapshot(&engine.batch_write_latency),
                write_slowdowns: engine.slow_batch_writes,
                write_slowdown_ns: engine.slow_batch_write_ns,
                write_errors: errors.count,
                last_write_error: errors.last,
                reclaim_trees: reclaim.trees,
                reclaim_entries: reclaim.entries,
                reclaim_bytes: reclaim.bytes,
                live_bytes: used.bytes,
                live_inodes: used.inodes,
            },
            store: store.into(),
            memory: MemoryReport {
                rss_bytes: shoal_fuse::resident_bytes().unwrap_or(0),
                heap_in_use_bytes: heap.map(|heap| heap.in_use),
                heap_free_bytes: heap.map(|heap| heap.free),
                referenced_inodes: fuse.referenced_inodes,
                lookup_table_bytes: fuse.lookup_table_bytes,
                lookup_table_bytes_per_inode: fuse
                    .lookup_table_bytes
                    .checked_div(fuse.referenced_inodes)
                    .unwrap_or(0),
                budget_bytes: self.memory_budget_bytes,
                evictions: fuse.evictions,
                failed_evictions: fuse.failed_evictions,
                heap_trims: fuse.heap_trims,
                heap_trim_ns: fuse.heap_trim_ns,
                heap_trim_max_ns: fuse.heap_trim_max_ns,
            },
            spin_cpu_ns: fuse.spin_cpu_ns,
        })
    }
}

impl StatsReport {
    pub fn op(&self, name: &str) -> Option<&OpReport> {
        self.ops.iter().find(|op| op.op == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_survives_json_and_keeps_its_histograms() {
        let engine = Engine::open_memory(shoal_engine::EngineConfig::default()).unwrap();
        let source = StatsSource {
            engine: Arc::downgrade(&engine),
            fuse_stats: Arc::new(FuseStats::default()),
            started: Instant::now(),
            memory_budget_bytes: 1 << 30,
            fuse_transport: "io_uring",
        };
        let report = source.report(false).unwrap();
        assert!(report.memory.rss_bytes > 0);
        assert_eq!(
            report.memory.heap_in_use_bytes, None,
            "read only on request"
        );
        let with_heap = source.report(true).unwrap();
        assert!(with_heap
            .memory
            .heap_in_use_bytes
            .is_some_and(|bytes| bytes > 0));
        assert_eq!(report.ops.len(), shoal_fuse::FUSE_OPS.len());
        let json = serde_json::to_string(&report).unwrap();
        let back: StatsReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back, report);
        drop(engine);
        assert!(source.report(false).is_none());
    }
}
