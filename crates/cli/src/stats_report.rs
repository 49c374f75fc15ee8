//! The statistics of a live mount as one serializable report: what the daemon answers to a
//! `Stats` control request, what `shoal stats --json` prints, and what the Prometheus
//! endpoint renders. One type for all three, so they cannot disagree.

use std::sync::{Arc, Weak};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use shoal_engine::histogram::HistogramSnapshot;
use shoal_engine::metric::{exposed, Kind, Metric, Unit};
use shoal_engine::{Engine, QuotaKind, StoreMetrics};
use shoal_fastpath_server::FastPathStats;
use shoal_fuse::{FuseStats, FuseStatsSnapshot, HeapBytes};

/// Its numbers are described once each, in `DAEMON_METRICS`, `ENGINE_METRICS`,
/// `ENGINE_HISTOGRAMS`, `shoal_engine::STORE_METRICS` and `MEMORY_METRICS`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct StatsReport {
    pub daemon_pid: u32,
    pub uptime_ns: u64,
    /// How requests reach the daemon: "io_uring" or "/dev/fuse".
    pub fuse_transport: String,
    /// Threads serving each CPU's queue with io_uring (sized for the machine).
    #[serde(default)]
    pub ring_threads_per_queue: u64,
    /// Busy-waiting for requests: "spin+follow", "spin", "follow" or "off"
    /// (`shoal_fuse::BusyWait`), and why.
    #[serde(default)]
    pub busy_wait: String,
    #[serde(default)]
    pub busy_wait_reason: String,
    /// Every FUSE request type, counted and timed from the handler's entry to its reply.
    pub ops: Vec<OpReport>,
    pub engine: EngineReport,
    /// The store's figures, described in `shoal_engine::STORE_METRICS`.
    pub store: StoreMetrics,
    pub memory: MemoryReport,
    pub spin_cpu_ns: u64,
    #[serde(default)]
    pub opens_without_requests: u64,
    #[serde(default)]
    pub ring_follows: u64,
    #[serde(default)]
    pub ring_follow_step_backs: u64,
    #[serde(default)]
    pub ring_poll_ns: u64,
    #[serde(default)]
    pub queued_fsyncs: u64,
    /// Requests of `shoal run` processes, per kind (empty with `-o fastpath=off`).
    #[serde(default)]
    pub fastpath: Vec<FastPathReport>,
    #[serde(default)]
    pub fastpath_connections: u64,
    #[serde(default)]
    pub fastpath_answered_ahead: u64,
    #[serde(default)]
    pub fastpath_dropped_ahead: u64,
    #[serde(default)]
    pub fastpath_answered_early: u64,
    #[serde(default)]
    pub fastpath_joined_writes: u64,
    pub fastpath_joined_attr_changes: u64,
    pub fastpath_joined_unlinks: u64,
    #[serde(default)]
    pub fastpath_thread_moves: u64,
    #[serde(default)]
    pub fastpath_kept_walk_steps: u64,
    #[serde(default)]
    pub fastpath_read_walk_steps: u64,
    /// Fast-path requests left to the kernel, by reason (`shoal_fastpath_server::Why`).
    #[serde(default)]
    pub fastpath_fallbacks: Vec<(String, u64)>,
    /// The store's UUID (empty for a RAM filesystem or a store made before identities):
    /// with `mountpoint`, the labels that tell one host's mounts apart in Prometheus.
    pub uuid: String,
    pub mountpoint: String,
    /// Bytes new data may still take: the store's device's free space less the reserve
    /// (what df shows as available).
    pub free_bytes: u64,
    /// Free space kept back on the store's device (the space reserve).
    pub reserved_bytes: u64,
    /// Use and limits of every user, group and project that has a limit set.
    pub quotas: Vec<QuotaUse>,
}

/// One fast-path request kind: done by the daemon, failed with the kernel's errno, or left
/// to the kernel (a fallback).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FastPathReport {
    pub kind: String,
    pub served: u64,
    pub failed: u64,
    pub fell_back: u64,
}

/// One quota's use against its limits (0: no such limit), for the metrics endpoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct QuotaUse {
    /// "user", "group" or "project".
    pub kind: String,
    pub id: u32,
    pub used_bytes: u64,
    pub used_inodes: u64,
    pub bytes_soft: u64,
    pub bytes_hard: u64,
    pub inodes_soft: u64,
    pub inodes_hard: u64,
}

impl QuotaUse {
    /// Every limited id's use, from the engine's in-memory totals (no store read).
    pub fn of(engine: &Engine) -> Vec<QuotaUse> {
        QuotaKind::ALL
            .into_iter()
            .flat_map(|kind| engine.quota_report(kind))
            .filter(|entry| !entry.record.limits.is_unlimited())
            .map(|entry| QuotaUse {
                kind: entry.kind.name().to_string(),
                id: entry.id,
                used_bytes: entry.usage.bytes,
                used_inodes: entry.usage.inodes,
                bytes_soft: entry.record.limits.bytes_soft,
                bytes_hard: entry.record.limits.bytes_hard,
                inodes_soft: entry.record.limits.inodes_soft,
                inodes_hard: entry.record.limits.inodes_hard,
            })
            .collect()
    }
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

/// The engine's figures. Each number is described once, in `ENGINE_METRICS` (the
/// histograms in `ENGINE_HISTOGRAMS`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct EngineReport {
    pub batches: u64,
    pub log_bytes: u64,
    pub syncs: u64,
    pub commits: u64,
    pub interval_commits: u64,
    pub commit_latency: LatencyReport,
    pub batch_write_latency: LatencyReport,
    pub write_slowdowns: u64,
    pub write_slowdown_ns: u64,
    pub write_errors: u64,
    /// The newest background write failure (each is also returned to the next fsync).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_write_error: Option<String>,
    pub reclaim_trees: u64,
    pub reclaim_entries: u64,
    pub reclaim_bytes: u64,
    /// What the files hold (the usage counters' total): bytes stored and inodes, against
    /// which the store's bytes on disk are the overhead.
    #[serde(default)]
    pub live_bytes: u64,
    #[serde(default)]
    pub live_inodes: u64,
}

/// The daemon's memory. Each number is described once, in `MEMORY_METRICS`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct MemoryReport {
    pub rss_bytes: u64,
    /// The allocator's heap: bytes in use, and bytes resident but not in use (free pages
    /// not yet returned, fragmentation, metadata); only when asked for (`shoal stats
    /// --heap`), never on a scrape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heap_in_use_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heap_free_bytes: Option<u64>,
    pub referenced_inodes: u64,
    pub lookup_table_bytes: u64,
    pub lookup_table_bytes_per_inode: u64,
    pub budget_bytes: u64,
    pub evictions: u64,
    pub failed_evictions: u64,
    pub heap_trims: u64,
    pub heap_trim_ns: u64,
    pub heap_trim_max_ns: u64,
}

use Kind::{Counter, Gauge};
use Unit::{Bytes, Count, Nanoseconds};

/// Every number of `EngineReport`.
pub const ENGINE_METRICS: &[Metric<EngineReport>] = &[
    // One batch per mutating operation.
    exposed(
        "batches",
        "shoal_batches_total",
        Counter,
        Count,
        "Atomic batches written to the store.",
        |e| e.batches,
    ),
    // What went to the journal.
    exposed(
        "log_bytes",
        "shoal_log_bytes_total",
        Counter,
        Bytes,
        "Key and value bytes of the batches written (logged).",
        |e| e.log_bytes,
    ),
    // Concurrent ones share one commit.
    exposed(
        "syncs",
        "shoal_syncs_total",
        Counter,
        Count,
        "Sync requests (fsync, fsyncdir, unmount).",
        |e| e.syncs,
    ),
    exposed(
        "commits",
        "shoal_commits_total",
        Counter,
        Count,
        "Store syncs performed (group commits).",
        |e| e.commits,
    ),
    exposed(
        "interval_commits",
        "shoal_interval_commits_total",
        Counter,
        Count,
        "Group commits made by the commit= timer.",
        |e| e.interval_commits,
    ),
    // Slower than `SLOW_BATCH_WRITE`: fjall slowing or halting writers while flushes and
    // compactions catch up.
    exposed(
        "write_slowdowns",
        "shoal_write_slowdowns_total",
        Counter,
        Count,
        "Batch writes slowed by the store (over 1 ms).",
        |e| e.write_slowdowns,
    ),
    exposed(
        "write_slowdown_ns",
        "shoal_write_slowdown_seconds_total",
        Counter,
        Nanoseconds,
        "Time spent in slowed batch writes.",
        |e| e.write_slowdown_ns,
    ),
    exposed(
        "write_errors",
        "shoal_write_errors_total",
        Counter,
        Count,
        "Background writes (checkpoints, interval commits) that failed.",
        |e| e.write_errors,
    ),
    exposed(
        "reclaim_trees",
        "shoal_reclaim_trees",
        Gauge,
        Count,
        "Trees taken out by shoal rmtree and still being deleted in the background.",
        |e| e.reclaim_trees,
    ),
    exposed(
        "reclaim_entries",
        "shoal_reclaim_entries",
        Gauge,
        Count,
        "Names left to delete in the trees shoal rmtree took out.",
        |e| e.reclaim_entries,
    ),
    exposed(
        "reclaim_bytes",
        "shoal_reclaim_bytes",
        Gauge,
        Bytes,
        "File bytes left to delete in the trees shoal rmtree took out.",
        |e| e.reclaim_bytes,
    ),
    exposed(
        "live_bytes",
        "shoal_live_bytes",
        Gauge,
        Bytes,
        "Bytes the files hold (the usage counters' total); the store's bytes on disk are these plus overhead.",
        |e| e.live_bytes,
    ),
    exposed(
        "live_inodes",
        "shoal_live_inodes",
        Gauge,
        Count,
        "Inodes in the filesystem (the usage counters' total).",
        |e| e.live_inodes,
    ),
];

/// A latency histogram of `EngineReport`, exposed as a Prometheus histogram.
pub struct HistogramMetric {
    /// Its name in the JSON report; only the tests that match the table to the struct read it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub field: &'static str,
    pub prometheus: &'static str,
    pub help: &'static str,
    pub read: fn(&EngineReport) -> &LatencyReport,
}

pub const ENGINE_HISTOGRAMS: &[HistogramMetric] = &[
    HistogramMetric {
        field: "commit_latency",
        prometheus: "shoal_commit_latency_seconds",
        help: "Duration of group commits (store syncs).",
        read: |e| &e.commit_latency,
    },
    HistogramMetric {
        field: "batch_write_latency",
        prometheus: "shoal_batch_write_latency_seconds",
        help: "Duration of batch writes to the store.",
        read: |e| &e.batch_write_latency,
    },
];

/// Every number of `MemoryReport` (the heap figures aside: on request only).
pub const MEMORY_METRICS: &[Metric<MemoryReport>] = &[
    // /proc/self/statm.
    exposed(
        "rss_bytes",
        "shoal_rss_bytes",
        Gauge,
        Bytes,
        "Resident memory of the daemon.",
        |m| m.rss_bytes,
    ),
    exposed(
        "referenced_inodes",
        "shoal_referenced_inodes",
        Gauge,
        Count,
        "Inodes the kernel holds references to.",
        |m| m.referenced_inodes,
    ),
    exposed(
        "lookup_table_bytes",
        "shoal_lookup_table_bytes",
        Gauge,
        Bytes,
        "Daemon memory for the kernel's inode references.",
        |m| m.lookup_table_bytes,
    ),
    // The quotient of two exposed gauges: a scraper divides them itself.
    Metric {
        field: "lookup_table_bytes_per_inode",
        prometheus: None,
        kind: Gauge,
        unit: Bytes,
        help: "Daemon memory per inode the kernel references.",
        read: |m| m.lookup_table_bytes_per_inode,
    },
    // `-o memory=`: bounds the lookup table plus the block cache.
    exposed(
        "budget_bytes",
        "shoal_memory_budget_bytes",
        Gauge,
        Bytes,
        "Bound on the daemon's resident memory, kept by dropping kernel references (memory=).",
        |m| m.budget_bytes,
    ),
    exposed(
        "evictions",
        "shoal_evictions_total",
        Counter,
        Count,
        "Names the daemon asked the kernel to drop to stay within the memory budget.",
        |m| m.evictions,
    ),
    exposed(
        "failed_evictions",
        "shoal_failed_evictions_total",
        Counter,
        Count,
        "Names the daemon asked the kernel to drop that the kernel no longer had.",
        |m| m.failed_evictions,
    ),
    exposed(
        "heap_trims",
        "shoal_heap_trims_total",
        Counter,
        Count,
        "Times free heap memory was handed back to the system near the memory budget.",
        |m| m.heap_trims,
    ),
    exposed(
        "heap_trim_ns",
        "shoal_heap_trim_seconds_total",
        Counter,
        Nanoseconds,
        "Time spent handing free heap memory back near the memory budget.",
        |m| m.heap_trim_ns,
    ),
    exposed(
        "heap_trim_max_ns",
        "shoal_heap_trim_max_seconds",
        Gauge,
        Nanoseconds,
        "Longest time one hand-back of free heap memory took since mount.",
        |m| m.heap_trim_max_ns,
    ),
];

/// Every number at the top of `StatsReport`.
pub const DAEMON_METRICS: &[Metric<StatsReport>] = &[
    // With uptime, lets a client tell a restarted daemon (counters back at zero).
    Metric {
        field: "daemon_pid",
        prometheus: None,
        kind: Gauge,
        unit: Count,
        help: "Process id of the daemon.",
        read: |r| u64::from(r.daemon_pid),
    },
    exposed(
        "uptime_ns",
        "shoal_uptime_seconds",
        Gauge,
        Nanoseconds,
        "Time since the daemon mounted.",
        |r| r.uptime_ns,
    ),
    exposed(
        "ring_threads_per_queue",
        "shoal_ring_threads_per_queue",
        Gauge,
        Count,
        "Threads serving each CPU's FUSE queue over io_uring, sized for the machine (0: /dev/fuse).",
        |r| r.ring_threads_per_queue,
    ),
    // Idle time kept from halting, not work on requests (`-o spin=`).
    exposed(
        "spin_cpu_ns",
        "shoal_spin_cpu_seconds_total",
        Counter,
        Nanoseconds,
        "CPU time of the keep-awake spinners (idle CPUs kept from halting while requests flow).",
        |r| r.spin_cpu_ns,
    ),
    exposed(
        "opens_without_requests",
        "shoal_opens_without_requests",
        Gauge,
        Count,
        "1 once the kernel opens and closes files without asking the daemon (no OPEN or RELEASE; byte limits set since reach files that existed at close or fsync, see docs/quotas.md).",
        |r| r.opens_without_requests,
    ),
    exposed(
        "ring_follows",
        "shoal_ring_follows_total",
        Counter,
        Count,
        "Times a FUSE ring thread began serving a lone caller's requests from another CPU (follow=).",
        |r| r.ring_follows,
    ),
    exposed(
        "ring_follow_step_backs",
        "shoal_ring_follow_step_backs_total",
        Counter,
        Count,
        "Follows ended because a second caller shared the followed CPU (the queue is then not followed for 50 ms).",
        |r| r.ring_follow_step_backs,
    ),
    exposed(
        "queued_fsyncs",
        "shoal_queued_fsyncs_total",
        Counter,
        Count,
        "fsyncs that came while a store sync ran and were answered by the syncing thread, one sync for all queued, while their request threads went on serving (the others sync in place).",
        |r| r.queued_fsyncs,
    ),
    exposed(
        "fastpath_connections",
        "shoal_fastpath_connections_total",
        Counter,
        Count,
        "Connections of `shoal run` processes to the fast path (one per thread that used the mount).",
        |r| r.fastpath_connections,
    ),
    exposed(
        "fastpath_answered_ahead",
        "shoal_fastpath_answered_ahead_total",
        Counter,
        Count,
        "Directory opens of a walk answered by the daemon ahead of their request, while the program worked on the one before, and sent.",
        |r| r.fastpath_answered_ahead,
    ),
    exposed(
        "fastpath_dropped_ahead",
        "shoal_fastpath_dropped_ahead_total",
        Counter,
        Count,
        "Directory opens answered ahead and dropped: the walk asked for something else, or the mount changed first.",
        |r| r.fastpath_dropped_ahead,
    ),
    exposed(
        "fastpath_answered_early",
        "shoal_fastpath_answered_early_total",
        Counter,
        Count,
        "Requests answered before they were applied: writes and changes of an open file's mode, owner or times (they could not fail), and creates, mkdirs, unlinks and rmdirs once decided (every check passed, the batch built); every other request waited until each was written. Only while one connection is busy.",
        |r| r.fastpath_answered_early,
    ),
    exposed(
        "fastpath_joined_writes",
        "shoal_fastpath_joined_writes_total",
        Counter,
        Count,
        "Writes answered early that began where the connection's last write, held back, ended, and were applied with it as one (`tar x` writes files in 10 KiB records; each applied alone rewrote the chunk so far). Counted also in fastpath_answered_early.",
        |r| r.fastpath_joined_writes,
    ),
    exposed(
        "fastpath_joined_attr_changes",
        "shoal_fastpath_joined_attr_changes_total",
        Counter,
        Count,
        "Changes of an open file's mode, owner or times answered early that came right after others of the same file, held back, and were applied with them as one (`tar x` sets each file's times, then its mode; each applied alone rewrote the inode and the usage of every directory above it). Counted also in fastpath_answered_early.",
        |r| r.fastpath_joined_attr_changes,
    ),
    exposed(
        "fastpath_joined_unlinks",
        "shoal_fastpath_joined_unlinks_total",
        Counter,
        Count,
        "Unlinks answered early that came right after another removal, held back, and were written in its batch (`rm -rf` removes a directory's files one after another; each written alone rewrote the directory's record and the usage of every directory above it). Counted also in fastpath_answered_early.",
        |r| r.fastpath_joined_unlinks,
    ),
    exposed(
        "fastpath_thread_moves",
        "shoal_fastpath_thread_moves_total",
        Counter,
        Count,
        "Times a fast-path connection's daemon thread changed the CPUs it may run on, to keep off the CPU its caller runs on (or, for a caller that did not say, to take them all back): at most once a millisecond per connection.",
        |r| r.fastpath_thread_moves,
    ),
    exposed(
        "fastpath_kept_walk_steps",
        "shoal_fastpath_kept_walk_steps_total",
        Counter,
        Count,
        "Steps of fast-path walks (a name looked up in a directory) taken from the directories the daemon keeps while their versions stay.",
        |r| r.fastpath_kept_walk_steps,
    ),
    exposed(
        "fastpath_read_walk_steps",
        "shoal_fastpath_read_walk_steps_total",
        Counter,
        Count,
        "Steps of fast-path walks read from the store (the name or its directory not kept, or changed since).",
        |r| r.fastpath_read_walk_steps,
    ),
    exposed(
        "free_bytes",
        "shoal_free_bytes",
        Gauge,
        Bytes,
        "Bytes new data may still take: the store's device's free space less the reserve (df's available).",
        |r| r.free_bytes,
    ),
    exposed(
        "reserved_bytes",
        "shoal_reserved_bytes",
        Gauge,
        Bytes,
        "Free space kept back on the store's device so that deletes and unmounts still succeed when it fills.",
        |r| r.reserved_bytes,
    ),
    // Like spin_cpu_ns: idle time spent polling, not work on requests.
    exposed(
        "ring_poll_ns",
        "shoal_ring_poll_seconds_total",
        Counter,
        Nanoseconds,
        "Time FUSE ring threads spent polling for a followed caller's next request (CPU that would otherwise idle).",
        |r| r.ring_poll_ns,
    ),
];

/// What the daemon reports from: shared with the FUSE session and the engine.
pub struct StatsSource {
    /// Weak: reporting threads must not keep the engine (and its store lock) alive after
    /// unmount, when the daemon drops it to close the store.
    pub engine: Weak<Engine>,
    pub fuse_stats: Arc<FuseStats>,
    pub started: Instant,
    pub memory_budget_bytes: u64,
    pub fuse_transport: &'static str,
    /// The busy-waiting chosen at mount, and why.
    pub busy_wait: shoal_fuse::BusyWait,
    /// The fast path's counts (`None`: `-o fastpath=off`, or it could not start).
    pub fast_path: Option<Arc<FastPathStats>>,
    /// The store's UUID ("" if none) and the mountpoint: the report's labels.
    pub uuid: String,
    pub mountpoint: String,
    /// The store directory, whose device's free space is reported; None for RAM.
    pub store: Option<std::path::PathBuf>,
}

impl EngineReport {
    fn of(
        engine: &shoal_engine::stats::StatsSnapshot,
        errors: shoal_engine::WriteErrors,
        reclaim: shoal_engine::ReclaimBacklog,
        used: shoal_engine::Usage,
    ) -> EngineReport {
        EngineReport {
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
        }
    }
}

impl StatsSource {
    /// `None` once the filesystem is unmounting and the engine is gone. `heap` also reads
    /// the allocator's heap figures (see `ControlRequest::HeapStats`).
    pub fn report(&self, heap: bool) -> Option<StatsReport> {
        let live = self.engine.upgrade()?;
        let errors = live.write_errors();
        let (engine, store) = live.stats_snapshot();
        let reclaim = live.reclaim_backlog().unwrap_or_default();
        let fs_stats = live.fs_stats().ok();
        let used = fs_stats
            .as_ref()
            .map(|stats| stats.used)
            .unwrap_or_default();
        let reserved_bytes = fs_stats.map_or(0, |stats| stats.reserved_bytes);
        let quotas = QuotaUse::of(&live);
        drop(live);
        let free_bytes = self
            .store
            .as_deref()
            .and_then(|store| shoal_sys::statvfs::device_space(store).ok())
            .map_or(0, |space| {
                space.available_bytes.saturating_sub(reserved_bytes)
            });
        let fuse = self.fuse_stats.snapshot();
        let heap = heap.then(shoal_fuse::heap_bytes);
        Some(StatsReport {
            daemon_pid: std::process::id(),
            uptime_ns: u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            fuse_transport: self.fuse_transport.to_string(),
            ring_threads_per_queue: match self.fuse_transport {
                "io_uring" => shoal_fuse::ring_threads_per_queue() as u64,
                _ => 0,
            },
            busy_wait: self.busy_wait.mode().to_string(),
            busy_wait_reason: self.busy_wait.reason.clone(),
            ops: fuse
                .ops
                .iter()
                .map(|(op, histogram)| OpReport {
                    op: (*op).to_string(),
                    count: histogram.count,
                    latency: LatencyReport::from_snapshot(histogram),
                })
                .collect(),
            engine: EngineReport::of(&engine, errors, reclaim, used),
            store,
            memory: self.memory_report(&fuse, heap),
            spin_cpu_ns: fuse.spin_cpu_ns,
            opens_without_requests: fuse.opens_without_requests,
            ring_follows: fuse.ring_follows,
            ring_follow_step_backs: fuse.ring_follow_step_backs,
            ring_poll_ns: fuse.ring_poll_ns,
            queued_fsyncs: fuse.queued_fsyncs,
            fastpath: self.fast_path_kinds(),
            fastpath_connections: self.fast_path_connections(),
            fastpath_answered_ahead: self.fast_path_ahead().0,
            fastpath_dropped_ahead: self.fast_path_ahead().1,
            fastpath_answered_early: self.fast_path_count(FastPathStats::answered_early),
            fastpath_joined_writes: self.fast_path_count(FastPathStats::joined_writes),
            fastpath_joined_attr_changes: self.fast_path_count(FastPathStats::joined_attr_changes),
            fastpath_joined_unlinks: self.fast_path_count(FastPathStats::joined_unlinks),
            fastpath_thread_moves: self.fast_path_count(FastPathStats::thread_moves),
            fastpath_kept_walk_steps: self.fast_path_walk_steps().0,
            fastpath_read_walk_steps: self.fast_path_walk_steps().1,
            fastpath_fallbacks: self.fast_path_fallbacks(),
            uuid: self.uuid.clone(),
            mountpoint: self.mountpoint.clone(),
            free_bytes,
            reserved_bytes,
            quotas,
        })
    }

    fn memory_report(&self, fuse: &FuseStatsSnapshot, heap: Option<HeapBytes>) -> MemoryReport {
        MemoryReport {
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
        }
    }

    /// Requests the fast path served, failed and handed to the kernel, by kind.
    fn fast_path_kinds(&self) -> Vec<FastPathReport> {
        self.fast_path.as_ref().map_or_else(Vec::new, |stats| {
            stats
                .snapshot()
                .into_iter()
                .map(|counts| FastPathReport {
                    kind: counts.kind.to_string(),
                    served: counts.served,
                    failed: counts.failed,
                    fell_back: counts.fell_back,
                })
                .collect()
        })
    }

    fn fast_path_connections(&self) -> u64 {
        let connections = self.fast_path.as_ref().map(|stats| stats.connections());
        connections.unwrap_or(0)
    }

    /// A count of the fast path's statistics; 0 without a fast path.
    fn fast_path_count(&self, count: fn(&FastPathStats) -> u64) -> u64 {
        self.fast_path.as_deref().map_or(0, count)
    }

    fn fast_path_ahead(&self) -> (u64, u64) {
        let ahead = self.fast_path.as_ref().map(|stats| stats.answered_ahead());
        ahead.unwrap_or((0, 0))
    }

    fn fast_path_walk_steps(&self) -> (u64, u64) {
        let steps = self.fast_path.as_ref().map(|stats| stats.walk_steps());
        steps.unwrap_or((0, 0))
    }

    fn fast_path_fallbacks(&self) -> Vec<(String, u64)> {
        self.fast_path.as_ref().map_or_else(Vec::new, |stats| {
            stats
                .fallback_reasons()
                .into_iter()
                .map(|(why, count)| (why.to_string(), count))
                .collect()
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

    /// The numeric fields of `T`'s JSON form, and a `T` whose field i holds i + 1.
    fn numbered<T: Serialize + serde::de::DeserializeOwned + Default>() -> (Vec<String>, T) {
        let json = serde_json::to_value(T::default()).unwrap();
        let fields: Vec<String> = json
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, value)| value.is_u64())
            .map(|(field, _)| field.clone())
            .collect();
        let numbered: serde_json::Map<String, serde_json::Value> = fields
            .iter()
            .enumerate()
            .map(|(index, field)| (field.clone(), (index as u64 + 1).into()))
            .collect();
        (fields, serde_json::from_value(numbered.into()).unwrap())
    }

    #[test]
    fn each_table_names_and_reads_every_number_of_its_struct_once() {
        let (fields, engine) = numbered::<EngineReport>();
        shoal_engine::metric::check_table(ENGINE_METRICS, &fields, &engine).unwrap();
        let (fields, memory) = numbered::<MemoryReport>();
        shoal_engine::metric::check_table(MEMORY_METRICS, &fields, &memory).unwrap();
        let (fields, report) = numbered::<StatsReport>();
        shoal_engine::metric::check_table(DAEMON_METRICS, &fields, &report).unwrap();
        let histograms: Vec<&str> = ENGINE_HISTOGRAMS.iter().map(|h| h.field).collect();
        let json = serde_json::to_value(EngineReport::default()).unwrap();
        let objects: Vec<&str> = json
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, value)| value.is_object())
            .map(|(field, _)| field.as_str())
            .collect();
        assert_eq!(histograms.len(), objects.len());
        assert!(histograms.iter().all(|field| objects.contains(field)));
    }

    /// The store's figures reach the JSON report whole: the field the old report dropped
    /// (`write_buffer_counted_bytes`) among them.
    #[test]
    fn the_json_report_carries_every_store_metric() {
        let report = StatsReport::default();
        let json = serde_json::to_value(&report).unwrap();
        for metric in shoal_engine::STORE_METRICS {
            assert!(
                json["store"].get(metric.field).is_some(),
                "{}",
                metric.field
            );
        }
    }

    #[test]
    fn a_report_survives_json_and_keeps_its_histograms() {
        let engine = Engine::open_memory(shoal_engine::EngineConfig::default()).unwrap();
        let source = StatsSource {
            engine: Arc::downgrade(&engine),
            fuse_stats: Arc::new(FuseStats::default()),
            started: Instant::now(),
            memory_budget_bytes: 1 << 30,
            fuse_transport: "io_uring",
            busy_wait: shoal_fuse::BusyWait::off("a test"),
            fast_path: None,
            uuid: String::new(),
            mountpoint: "/mnt".into(),
            store: None,
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
