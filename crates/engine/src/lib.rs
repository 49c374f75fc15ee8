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

mod acl;
pub mod backup;
mod bulk;
mod counters_check;
mod data;
mod engine;
mod error;
pub mod error_seq;
mod fallocate;
pub mod fsck;
pub mod fsck_progress;
mod handles;
pub mod histogram;
mod inode;
pub mod keys;
mod namespace;
pub mod quota;
mod quota_ops;
mod reclaim;
mod rename;
pub mod space_reserve;
pub mod stats;
pub mod store;
pub mod store_access;
pub mod store_dir;
pub mod store_identity;
pub mod store_open;
pub mod store_shadow;
pub mod store_state;
mod tmpfile;
mod tree_usage;
mod tree_usage_check;
mod unlinked;
mod xattr;

pub use bulk::{BulkAttrs, BulkFailure, BulkOp, NodeRef};
pub use counters_check::{verify_counters, verify_counters_store_dir, CountersReport};
pub use data::{SetAttr, SetTime, MAX_FILE_BYTES};
pub use engine::{Caller, Engine, EngineConfig, FsStats, MkfsOptions, OpenError, NAME_MAX_BYTES};
pub use error::{FsError, FsResult};
pub use fallocate::Fallocate;
pub use inode::{
    Content, DirEntry, FileKind, Inode, Timestamp, TreeUsage, Usage, UsageKey, UsageOwner, ROOT_INO,
};
pub use namespace::NewInode;
pub use quota::{QuotaEntry, QuotaKind, QuotaLimits, QuotaRecord, QuotaSettings};
pub use quota_ops::ProjectQuota;
pub use reclaim::{DetachedTree, ReclaimBacklog};
pub use rename::{RenameMode, Renamed};
pub use store::{FjallTuning, StoreMetrics};
pub use tree_usage::{format_rctime, XATTR_RBYTES, XATTR_RCTIME, XATTR_RENTRIES, XATTR_RFILES};
pub use unlinked::ReferenceProbe;
pub use xattr::XattrMode;
