//! shoal's engine: a POSIX namespace (inodes, directory entries, file data, extended
//! attributes and usage counters) over an ordered key-value store.
//!
//! Every operation is one atomic batch; nothing is fsynced per operation. `sync` makes all
//! completed operations durable (group commit), and a background thread does so on the
//! commit interval. The engine knows nothing of FUSE: a program can link it directly.
//!
//! ```
//! use shoal_engine::{Caller, Engine, EngineConfig, FileKind, NewInode, RenameMode, ROOT_INO};
//!
//! let fs = Engine::open_memory(EngineConfig::default())?;
//! let me = Caller { uid: 1000, gid: 1000 };
//! let src = fs.mkdir(ROOT_INO, b"src", 0o755, me)?;
//! let file = NewInode { kind: FileKind::Regular, perm: 0o644, rdev: 0, target: b"" };
//! let main = fs.create(src.ino, b"main.c", &file, me)?;
//! fs.write(main.ino, 0, b"int main(void) { return 0; }\n")?;
//! fs.rename(src.ino, b"main.c", ROOT_INO, b"main.c", RenameMode::NoReplace)?;
//!
//! let found = fs.lookup(ROOT_INO, b"main.c")?;
//! assert_eq!(fs.read(found.ino, 0, 3)?, b"int");
//! let names: Vec<_> = fs.readdir(ROOT_INO, None, 100)?.into_iter().map(|e| e.name).collect();
//! assert_eq!(names, vec![b"main.c".to_vec(), b"src".to_vec()]);
//! fs.unlink(ROOT_INO, b"main.c")?;
//! fs.sync()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// The public API: the engine and its types (re-exported below), and the modules tools
// need besides: backups, fsck, statistics, and the store directory on disk. The key layout
// and the key-value store underneath are internal (`internals` lends them to tests).

// Calls into the C library go through `shoal_sys`, where each unsafe block is written once.
#![deny(unsafe_code)]

pub mod backup;
mod counters;
pub mod defaults;
mod engine;
mod error;
pub mod fsck;
pub(crate) mod hashing;
mod keys;
pub mod limits;
pub mod metric;
mod namespace;
mod reclaim;
mod records;
pub mod stats;
mod store;
pub mod store_dir;

pub use counters::quota_ops::ProjectQuota;
pub use counters::tree_usage::{
    format_rctime, XATTR_RBYTES, XATTR_RCTIME, XATTR_RENTRIES, XATTR_RFILES,
};
pub use engine::listing_cache::SharedPage;
pub use engine::replied_writes::{InFlight, RepliedWrites};
pub use engine::ReferenceProbe;
pub use engine::{Caller, ChangeObserver, Engine, EngineConfig, FsStats, MkfsOptions};
pub use error::{FsError, FsResult};
pub use fsck::counters::{verify_counters, verify_counters_store_dir, CountersReport};
pub use keys::FORMAT_VERSION;
pub use limits::{MAX_FILE_BYTES, NAME_MAX_BYTES};
pub use namespace::bulk::{BulkAttrs, BulkFailure, BulkOp, NodeRef};
pub use namespace::data::{perm_without_privileges, set_attributes, SetAttr, SetTime, Written};
pub use namespace::fallocate::Fallocate;
pub use namespace::rename::{RenameMode, Renamed};
pub use namespace::xattr::XattrMode;
pub use namespace::{Decided, NewInode};
pub use reclaim::{DetachedTree, ReclaimBacklog};
pub use records::inode::{
    Content, DirEntry, FileKind, Inode, Timestamp, TreeUsage, Usage, UsageKey, UsageOwner, ROOT_INO,
};
pub use records::quota::{QuotaEntry, QuotaKind, QuotaLimits, QuotaRecord, QuotaSettings};
pub use store::error_seq::WriteErrors;
pub use store::{
    histogram, staged_memory_bound, FjallTuning, SharedBytes, StoreError, StoreMetrics,
    MIN_JOURNAL_BYTES, STORE_METRICS,
};
pub use store_dir::open::OpenError;

/// The key layout and the key-value store, for tests that write or damage a store
/// directly. Not part of the API: anything here may change without notice.
#[doc(hidden)]
pub mod internals {
    pub mod keys {
        pub use crate::keys::*;
    }
    pub mod store {
        pub use crate::store::*;
    }
}
