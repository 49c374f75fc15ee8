//! What the fast path served: per request kind, how many were done, failed with an errno
//! (as the kernel would fail them), or fell back to the kernel.

use std::sync::atomic::{AtomicU64, Ordering};

use shoal_fastpath::{Reply, Request};

use crate::refusal::{Refusal, Served, Why};

/// Request kinds, in the order `snapshot` lists them.
pub const REQUEST_KINDS: [&str; 25] = [
    "hello",
    "stat",
    "access",
    "open",
    "close",
    "read",
    "write",
    "fstat",
    "fsync",
    "readdir",
    "mkdir",
    "unlink",
    "rename",
    "link",
    "symlink",
    "readlink",
    "setattr",
    "getxattr",
    "listxattr",
    "sync",
    "resolve",
    "copy_range",
    "set_acl_mode",
    "removexattr",
    "open_dir",
];

fn kind_index(request: &Request) -> usize {
    match request {
        Request::Hello { .. } => 0,
        Request::Stat { .. } => 1,
        Request::Access { .. } => 2,
        Request::Open { .. } => 3,
        Request::Close { .. } => 4,
        Request::Read { .. } => 5,
        Request::Write { .. } => 6,
        Request::Fstat { .. } => 7,
        Request::Fsync { .. } => 8,
        Request::ReadDir { .. } => 9,
        Request::Mkdir { .. } => 10,
        Request::Unlink { .. } => 11,
        Request::Rename { .. } => 12,
        Request::Link { .. } => 13,
        Request::Symlink { .. } => 14,
        Request::Readlink { .. } => 15,
        Request::SetAttr { .. } => 16,
        Request::GetXattr { .. } => 17,
        Request::ListXattr { .. } => 18,
        Request::Sync => 19,
        Request::Resolve { .. } => 20,
        Request::CopyRange { .. } => 21,
        Request::SetAccessAclMode { .. } => 22,
        Request::RemoveXattr { .. } => 23,
        Request::OpenDir { .. } => 24,
    }
}

#[derive(Default)]
struct Counts {
    served: AtomicU64,
    failed: AtomicU64,
    fell_back: AtomicU64,
}

#[derive(Default)]
pub struct FastPathStats {
    kinds: [Counts; REQUEST_KINDS.len()],
    /// Fallbacks by reason, in `Why::ALL` order.
    reasons: [AtomicU64; Why::ALL.len()],
    connections: AtomicU64,
    /// `opendir`s answered ahead of their request (`server::Speculation`): sent, dropped.
    answered_ahead: AtomicU64,
    dropped_ahead: AtomicU64,
    /// Walk steps (a name looked up in a directory) taken from the kept directories
    /// (`walk_cache`), and those read from the engine while versions are followed.
    kept_steps: AtomicU64,
    read_steps: AtomicU64,
    /// Requests answered before they were applied: writes and attribute changes, and
    /// creates, mkdirs, unlinks and rmdirs once decided (`answered_early`).
    answered_early: AtomicU64,
    /// Writes answered early that went on with a held one and were applied with it
    /// (`held_change`).
    joined_writes: AtomicU64,
    /// Attribute changes answered early that went on with held ones of the same file and
    /// were applied with them (`held_change`).
    joined_attr_changes: AtomicU64,
    /// Unlinks answered early that joined a held removal and were written in its batch
    /// (`answered_early::join_removal`).
    joined_unlinks: AtomicU64,
    /// Times a connection's thread changed the CPUs it may run on (`placement`).
    thread_moves: AtomicU64,
}

/// One request kind's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KindCounts {
    pub kind: &'static str,
    pub served: u64,
    pub failed: u64,
    pub fell_back: u64,
}

impl FastPathStats {
    pub(crate) fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record(&self, request: &Request, result: &Served<Reply>) {
        let counts = &self.kinds[kind_index(request)];
        let counter = match result {
            // An errno with what the client needs to give it itself next time.
            Ok(Reply::Exists { .. }) => &counts.failed,
            Ok(_) => &counts.served,
            Err(Refusal::Errno(_)) => &counts.failed,
            Err(Refusal::Fallback(why)) => {
                let index = Why::ALL.iter().position(|w| w == why).unwrap_or(0);
                self.reasons[index].fetch_add(1, Ordering::Relaxed);
                &counts.fell_back
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// An answer made ahead was sent (`used`) or dropped.
    pub(crate) fn ahead(&self, used: bool) {
        let counter = if used {
            &self.answered_ahead
        } else {
            &self.dropped_ahead
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A walk step was taken from the kept directories (`kept`), or read from the engine.
    pub(crate) fn walk_step(&self, kept: bool) {
        let counter = if kept {
            &self.kept_steps
        } else {
            &self.read_steps
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Walk steps taken from the kept directories, and those read from the engine.
    pub fn walk_steps(&self) -> (u64, u64) {
        (
            self.kept_steps.load(Ordering::Relaxed),
            self.read_steps.load(Ordering::Relaxed),
        )
    }

    /// `opendir`s answered ahead of their request and sent, and those dropped (another
    /// request came, or the mount changed).
    pub(crate) fn count_answered_early(&self) {
        self.answered_early.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests answered before they were applied (see the field).
    pub fn answered_early(&self) -> u64 {
        self.answered_early.load(Ordering::Relaxed)
    }

    pub(crate) fn count_joined_write(&self) {
        self.joined_writes.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes applied with the held write they went on with (see the field).
    pub fn joined_writes(&self) -> u64 {
        self.joined_writes.load(Ordering::Relaxed)
    }

    pub(crate) fn count_joined_attr_change(&self) {
        self.joined_attr_changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Attribute changes applied with the held ones they went on with (see the field).
    pub fn joined_attr_changes(&self) -> u64 {
        self.joined_attr_changes.load(Ordering::Relaxed)
    }

    pub(crate) fn count_joined_unlink(&self) {
        self.joined_unlinks.fetch_add(1, Ordering::Relaxed);
    }

    /// Unlinks written in the batch of the removal they joined (see the field).
    pub fn joined_unlinks(&self) -> u64 {
        self.joined_unlinks.load(Ordering::Relaxed)
    }

    pub(crate) fn count_thread_move(&self) {
        self.thread_moves.fetch_add(1, Ordering::Relaxed);
    }

    /// Changes of a connection's thread's CPUs (see the field).
    pub fn thread_moves(&self) -> u64 {
        self.thread_moves.load(Ordering::Relaxed)
    }

    pub fn answered_ahead(&self) -> (u64, u64) {
        (
            self.answered_ahead.load(Ordering::Relaxed),
            self.dropped_ahead.load(Ordering::Relaxed),
        )
    }

    /// Connections accepted since the mount (one per client thread).
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Fallbacks so far by reason name (`Why::name`).
    pub fn fallback_reasons(&self) -> Vec<(&'static str, u64)> {
        Why::ALL
            .iter()
            .zip(&self.reasons)
            .map(|(why, count)| (why.name(), count.load(Ordering::Relaxed)))
            .collect()
    }

    /// Every request kind's counts, in `REQUEST_KINDS` order.
    pub fn snapshot(&self) -> Vec<KindCounts> {
        REQUEST_KINDS
            .iter()
            .zip(&self.kinds)
            .map(|(&kind, counts)| KindCounts {
                kind,
                served: counts.served.load(Ordering::Relaxed),
                failed: counts.failed.load(Ordering::Relaxed),
                fell_back: counts.fell_back.load(Ordering::Relaxed),
            })
            .collect()
    }
}
