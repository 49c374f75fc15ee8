//! Operation counters and latency histograms, cheap enough for every request (relaxed
//! atomics).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::store::histogram::{Histogram, HistogramSnapshot};

/// A batch write slower than this counts as a write slowdown. A batch normally reaches the
/// journal in microseconds; fjall stalls writers when L0 runs pile up (a busy loop) and halts
/// them in 10-100 ms sleeps while 4+ sealed memtables wait for flushing. fjall does not count
/// those itself, so this is how shoal sees them.
pub const SLOW_BATCH_WRITE: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Lookup,
    Getattr,
    Setattr,
    Create,
    Mkdir,
    Unlink,
    Rmdir,
    Rename,
    Link,
    Read,
    Write,
    Readdir,
    Xattr,
    Fsync,
    StoreSync,
}

pub const OPS: [Op; 15] = [
    Op::Lookup,
    Op::Getattr,
    Op::Setattr,
    Op::Create,
    Op::Mkdir,
    Op::Unlink,
    Op::Rmdir,
    Op::Rename,
    Op::Link,
    Op::Read,
    Op::Write,
    Op::Readdir,
    Op::Xattr,
    Op::Fsync,
    Op::StoreSync,
];

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Lookup => "lookup",
            Op::Getattr => "getattr",
            Op::Setattr => "setattr",
            Op::Create => "create",
            Op::Mkdir => "mkdir",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
            Op::Rename => "rename",
            Op::Link => "link",
            Op::Read => "read",
            Op::Write => "write",
            Op::Readdir => "readdir",
            Op::Xattr => "xattr",
            Op::Fsync => "fsync",
            Op::StoreSync => "store_sync",
        }
    }
}

#[derive(Default)]
pub struct Stats {
    ops: [AtomicU64; OPS.len()],
    batches: AtomicU64,
    batch_bytes: AtomicU64,
    batch_write_latency: Histogram,
    slow_batch_writes: AtomicU64,
    slow_batch_write_ns: AtomicU64,
    sync_requests: AtomicU64,
    interval_commits: AtomicU64,
    /// Store syncs (group commits) actually performed, by duration.
    commit_latency: Histogram,
}

/// A copy of every engine counter at one moment.
#[derive(Clone, Debug, Default)]
pub struct StatsSnapshot {
    /// Engine-level operation counts, by `Op::name`.
    pub ops: Vec<(&'static str, u64)>,
    pub batches: u64,
    /// Keys plus values of every batch written: what went to the journal ("bytes logged").
    pub log_bytes: u64,
    pub batch_write_latency: HistogramSnapshot,
    pub slow_batch_writes: u64,
    pub slow_batch_write_ns: u64,
    /// `Engine::sync` calls (fsync, fsyncdir, unmount, library callers).
    pub sync_requests: u64,
    /// Store syncs performed: requested ones and the commit-interval timer's.
    pub commits: u64,
    pub interval_commits: u64,
    pub commit_latency: HistogramSnapshot,
}

impl Stats {
    pub fn count(&self, op: Op) {
        self.ops[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_batch(&self, bytes: u64, write_time: Duration) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batch_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.batch_write_latency.record(write_time);
        if write_time >= SLOW_BATCH_WRITE {
            self.slow_batch_writes.fetch_add(1, Ordering::Relaxed);
            self.slow_batch_write_ns.fetch_add(
                u64::try_from(write_time.as_nanos()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
    }

    pub(crate) fn record_sync_request(&self) {
        self.sync_requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_commit(&self, sync_time: Duration) {
        self.count(Op::StoreSync);
        self.commit_latency.record(sync_time);
    }

    pub(crate) fn record_interval_commit(&self) {
        self.interval_commits.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            ops: OPS
                .iter()
                .map(|&op| (op.name(), self.op_count(op)))
                .collect(),
            batches: self.batches(),
            log_bytes: self.batch_bytes(),
            batch_write_latency: self.batch_write_latency.snapshot(),
            slow_batch_writes: self.slow_batch_writes.load(Ordering::Relaxed),
            slow_batch_write_ns: self.slow_batch_write_ns.load(Ordering::Relaxed),
            sync_requests: self.sync_requests.load(Ordering::Relaxed),
            commits: self.op_count(Op::StoreSync),
            interval_commits: self.interval_commits.load(Ordering::Relaxed),
            commit_latency: self.commit_latency.snapshot(),
        }
    }

    pub fn op_count(&self, op: Op) -> u64 {
        self.ops[op as usize].load(Ordering::Relaxed)
    }

    /// Atomic batches written to the store (one per mutating operation).
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    pub fn batch_bytes(&self) -> u64 {
        self.batch_bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_commits_and_slowdowns_are_counted() {
        let stats = Stats::default();
        stats.record_batch(100, Duration::from_micros(5));
        stats.record_batch(50, SLOW_BATCH_WRITE * 3);
        stats.record_sync_request();
        stats.record_commit(Duration::from_millis(2));
        stats.count(Op::Create);
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.batches, 2);
        assert_eq!(snapshot.log_bytes, 150);
        assert_eq!(snapshot.batch_write_latency.count, 2);
        assert_eq!(snapshot.slow_batch_writes, 1);
        assert_eq!(snapshot.slow_batch_write_ns, 3_000_000);
        assert_eq!((snapshot.sync_requests, snapshot.commits), (1, 1));
        assert_eq!(snapshot.commit_latency.max_ns, 2_000_000);
        assert!(snapshot.ops.contains(&("create", 1)));
    }
}
