//! Operation counters, cheap enough for every request (relaxed atomics).

use std::sync::atomic::{AtomicU64, Ordering};

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
}

impl Stats {
    pub fn count(&self, op: Op) {
        self.ops[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_batch(&self, bytes: u64) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batch_bytes.fetch_add(bytes, Ordering::Relaxed);
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
