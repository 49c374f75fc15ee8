//! Per-request statistics of the FUSE adapter: a count and a latency histogram per request
//! type (from the handler's entry to its reply), and the size of the kernel's inode
//! references. Shared with whoever reports them (the daemon's control socket, Prometheus).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_engine::histogram::{Histogram, HistogramSnapshot};

use crate::lookup_counts::LookupCounts;

/// Every FUSE request type shoal answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FuseOp {
    Lookup,
    Forget,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Readdirplus,
    Releasedir,
    Fsyncdir,
    Statfs,
    Setxattr,
    Getxattr,
    Listxattr,
    Removexattr,
    Access,
    Create,
    Fallocate,
    Tmpfile,
    CopyFileRange,
    Ioctl,
}

pub const FUSE_OPS: [FuseOp; 34] = [
    FuseOp::Lookup,
    FuseOp::Forget,
    FuseOp::Getattr,
    FuseOp::Setattr,
    FuseOp::Readlink,
    FuseOp::Mknod,
    FuseOp::Mkdir,
    FuseOp::Unlink,
    FuseOp::Rmdir,
    FuseOp::Symlink,
    FuseOp::Rename,
    FuseOp::Link,
    FuseOp::Open,
    FuseOp::Read,
    FuseOp::Write,
    FuseOp::Flush,
    FuseOp::Release,
    FuseOp::Fsync,
    FuseOp::Opendir,
    FuseOp::Readdir,
    FuseOp::Readdirplus,
    FuseOp::Releasedir,
    FuseOp::Fsyncdir,
    FuseOp::Statfs,
    FuseOp::Setxattr,
    FuseOp::Getxattr,
    FuseOp::Listxattr,
    FuseOp::Removexattr,
    FuseOp::Access,
    FuseOp::Create,
    FuseOp::Fallocate,
    FuseOp::Tmpfile,
    FuseOp::CopyFileRange,
    FuseOp::Ioctl,
];

impl FuseOp {
    /// The request's name as FUSE calls it (lower case): `shoal stats` columns and the
    /// Prometheus `op` label.
    pub fn name(self) -> &'static str {
        match self {
            FuseOp::Lookup => "lookup",
            FuseOp::Forget => "forget",
            FuseOp::Getattr => "getattr",
            FuseOp::Setattr => "setattr",
            FuseOp::Readlink => "readlink",
            FuseOp::Mknod => "mknod",
            FuseOp::Mkdir => "mkdir",
            FuseOp::Unlink => "unlink",
            FuseOp::Rmdir => "rmdir",
            FuseOp::Symlink => "symlink",
            FuseOp::Rename => "rename",
            FuseOp::Link => "link",
            FuseOp::Open => "open",
            FuseOp::Read => "read",
            FuseOp::Write => "write",
            FuseOp::Flush => "flush",
            FuseOp::Release => "release",
            FuseOp::Fsync => "fsync",
            FuseOp::Opendir => "opendir",
            FuseOp::Readdir => "readdir",
            FuseOp::Readdirplus => "readdirplus",
            FuseOp::Releasedir => "releasedir",
            FuseOp::Fsyncdir => "fsyncdir",
            FuseOp::Statfs => "statfs",
            FuseOp::Setxattr => "setxattr",
            FuseOp::Getxattr => "getxattr",
            FuseOp::Listxattr => "listxattr",
            FuseOp::Removexattr => "removexattr",
            FuseOp::Access => "access",
            FuseOp::Create => "create",
            FuseOp::Fallocate => "fallocate",
            FuseOp::Tmpfile => "tmpfile",
            FuseOp::CopyFileRange => "copy_file_range",
            FuseOp::Ioctl => "ioctl",
        }
    }
}

pub struct FuseStats {
    /// One histogram per `FuseOp`; its count is the request count.
    latency: [Histogram; FUSE_OPS.len()],
    pub(crate) lookups: Arc<LookupCounts>,
    /// Names the memory budget asked the kernel to drop, and those it had no longer.
    pub(crate) evictions: AtomicU64,
    pub(crate) failed_evictions: AtomicU64,
    /// Heap purges near the budget (free pages handed back to the system at once rather
    /// than as they age) and how long each took.
    heap_trim_latency: Histogram,
    /// CPU time of the keep-awake spinners (`keep_awake`): not work on any request.
    spin_cpu_ns: AtomicU64,
    /// The kernel opens and closes files without asking (`open_requests`).
    opens_without_requests: AtomicBool,
    /// fsyncs answered by the syncing thread, having come while a sync ran (`sync_waiters`).
    queued_fsyncs: AtomicU64,
}

impl Default for FuseStats {
    fn default() -> Self {
        Self {
            latency: std::array::from_fn(|_| Histogram::default()),
            lookups: Arc::new(LookupCounts::default()),
            evictions: AtomicU64::new(0),
            failed_evictions: AtomicU64::new(0),
            heap_trim_latency: Histogram::default(),
            spin_cpu_ns: AtomicU64::new(0),
            opens_without_requests: AtomicBool::new(false),
            queued_fsyncs: AtomicU64::new(0),
        }
    }
}

/// Records one request's latency when dropped: at the end of the handler, right after its
/// reply went to the kernel.
pub(crate) struct RequestTimer<'a> {
    histogram: &'a Histogram,
    started: Instant,
}

impl Drop for RequestTimer<'_> {
    fn drop(&mut self) {
        self.histogram.record(self.started.elapsed());
    }
}

/// A copy of the adapter's statistics at one moment.
#[derive(Clone, Debug, Default)]
pub struct FuseStatsSnapshot {
    /// Latency of every request type, in `FUSE_OPS` order; `count` is the request count.
    pub ops: Vec<(&'static str, HistogramSnapshot)>,
    /// Inodes the kernel holds references to (each costs the daemon one table entry).
    pub referenced_inodes: u64,
    /// Estimated heap bytes of the table of those references.
    pub lookup_table_bytes: u64,
    pub evictions: u64,
    pub failed_evictions: u64,
    pub heap_trims: u64,
    pub heap_trim_ns: u64,
    pub heap_trim_max_ns: u64,
    /// CPU time the keep-awake spinners used (nanoseconds).
    pub spin_cpu_ns: u64,
    /// 1 once the kernel opens and closes files without asking the daemon (`no_open`).
    pub opens_without_requests: u64,
    /// fsyncs answered by the syncing thread, having come while a sync ran.
    pub queued_fsyncs: u64,
    /// Times a ring thread began serving a lone caller from another CPU (`follow=`).
    pub ring_follows: u64,
    /// Follows ended because a second caller shared the followed CPU.
    pub ring_follow_step_backs: u64,
    /// Time ring threads spent polling for a followed caller's requests (nanoseconds).
    pub ring_poll_ns: u64,
}

impl FuseStats {
    pub(crate) fn record_heap_trim(&self, took: Duration) {
        self.heap_trim_latency.record(took);
    }

    pub(crate) fn record_opens_without_requests(&self) {
        self.opens_without_requests.store(true, Ordering::Relaxed);
    }

    pub(crate) fn record_spin(&self, cpu_ns: u64) {
        self.spin_cpu_ns.fetch_add(cpu_ns, Ordering::Relaxed);
    }

    pub(crate) fn time(&self, op: FuseOp) -> RequestTimer<'_> {
        RequestTimer {
            histogram: &self.latency[op as usize],
            started: Instant::now(),
        }
    }

    /// `count` fsyncs that came while a sync ran are answered by the syncing thread.
    pub(crate) fn record_queued_fsyncs(&self, count: usize) {
        self.queued_fsyncs
            .fetch_add(count as u64, Ordering::Relaxed);
    }

    /// Records a request answered after its handler returned (`sync_waiters`), `took` from
    /// its arrival to its reply.
    pub(crate) fn record(&self, op: FuseOp, took: std::time::Duration) {
        self.latency[op as usize].record(took);
    }

    /// Requests answered so far, of every type.
    pub fn requests_total(&self) -> u64 {
        self.latency.iter().map(Histogram::count).sum()
    }

    pub fn snapshot(&self) -> FuseStatsSnapshot {
        let heap_trims = self.heap_trim_latency.snapshot();
        FuseStatsSnapshot {
            ops: FUSE_OPS
                .iter()
                .map(|&op| (op.name(), self.latency[op as usize].snapshot()))
                .collect(),
            referenced_inodes: self.lookups.referenced_inodes(),
            lookup_table_bytes: self.lookups.table_bytes(),
            evictions: self.evictions.load(Ordering::Relaxed),
            failed_evictions: self.failed_evictions.load(Ordering::Relaxed),
            heap_trims: heap_trims.count,
            heap_trim_ns: heap_trims.sum_ns,
            heap_trim_max_ns: heap_trims.max_ns,
            spin_cpu_ns: self.spin_cpu_ns.load(Ordering::Relaxed),
            opens_without_requests: u64::from(self.opens_without_requests.load(Ordering::Relaxed)),
            queued_fsyncs: self.queued_fsyncs.load(Ordering::Relaxed),
            ring_follows: fuser::ring_follows_started(),
            ring_follow_step_backs: fuser::ring_follow_step_backs(),
            ring_poll_ns: fuser::ring_poll_ns(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_in_enum_order() {
        for (index, op) in FUSE_OPS.iter().enumerate() {
            assert_eq!(*op as usize, index);
        }
        let mut names: Vec<_> = FUSE_OPS.iter().map(|op| op.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FUSE_OPS.len());
    }

    #[test]
    fn a_timer_records_one_request_of_its_type() {
        let stats = FuseStats::default();
        drop(stats.time(FuseOp::Create));
        drop(stats.time(FuseOp::Create));
        drop(stats.time(FuseOp::Unlink));
        let snapshot = stats.snapshot();
        let count = |name| {
            snapshot
                .ops
                .iter()
                .find(|(op, _)| *op == name)
                .map(|(_, histogram)| histogram.count)
        };
        assert_eq!(count("create"), Some(2));
        assert_eq!(count("unlink"), Some(1));
        assert_eq!(count("lookup"), Some(0));
    }
}
