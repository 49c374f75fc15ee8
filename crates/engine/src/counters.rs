//! The usage counters the engine keeps exact in every operation's own batch, and what reads
//! them: per-owner usage and quota limits on it, quota administration, recursive usage of
//! every directory, and the free space held back on the store's device.

pub(crate) mod quota_ops;
pub(crate) mod tree_usage;
