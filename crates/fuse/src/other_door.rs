//! Changes made through the other door (the fast path of `shoal run`), told to the kernel
//! so its caches never show what the store no longer holds. Only what the kernel holds is
//! notified (one write to /dev/fuse each): a tree made and used only through the fast path
//! costs no notification at all.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use fuser::{INodeNo, Notifier};
use shoal_engine::ROOT_INO;

use crate::fuse_stats::FuseStats;
use crate::lookup_counts::LookupCounts;
use crate::ShoalFs;

pub struct OtherDoorChanges {
    notifier: Notifier,
    lookups: Arc<LookupCounts>,
}

/// While `busy()` says the other door's callers keep the CPUs busy, the kernel door's ring
/// threads do not poll for its requests, nor do its keep-awake spinners spin (the fast
/// path spins for its own callers; a poller of this door took a CPU from them for the rare
/// request that comes this way, a `mmap` of a file the program opened on the fast path).
pub fn yield_to_other_door(busy: impl Fn() -> bool + Send + Sync + 'static) {
    if !fuser::yield_to_other_work(Box::new(busy)) {
        tracing::debug!("the kernel door already yields to another door of this process");
    }
}

impl OtherDoorChanges {
    pub fn new(session: &fuser::Session<ShoalFs>, stats: &FuseStats) -> Self {
        OtherDoorChanges {
            notifier: session.notifier(),
            lookups: stats.lookups.clone(),
        }
    }

    /// The root is the kernel's from the mount on, without a lookup.
    pub fn kernel_holds(&self, ino: u64) -> bool {
        ino == ROOT_INO || self.lookups.is_referenced(ino)
    }

    /// `name` appeared in `parent`: a cached negative entry and listing must go.
    pub fn name_added(&self, parent: u64, name: &[u8]) {
        if self.kernel_holds(parent) {
            report(
                self.notifier
                    .inval_entry(INodeNo(parent), OsStr::from_bytes(name)),
            );
            report(self.notifier.inval_inode(INodeNo(parent), 0, 0));
        }
    }

    /// `name` in `parent` (naming `ino`) is gone: its dentry, the listing and the link
    /// count the kernel cached must go.
    pub fn name_removed(&self, parent: u64, name: &[u8], ino: u64) {
        self.name_added(parent, name);
        self.inode_changed(ino, false);
    }

    pub fn renamed(&self, ino: u64, parent: u64, name: &[u8]) {
        self.lookups.renamed(ino, parent, name);
        self.inode_changed(ino, false);
    }

    /// `ino`'s attributes changed, and its bytes too when `data` (cached pages go).
    ///
    /// With the writeback cache the kernel keeps a regular file's size and times itself and
    /// never takes them from a GETATTR while it holds the inode (`fuse_get_cache_mask`), and
    /// its owner and mode checks at setattr do not revalidate: so a regular file's name is
    /// dropped too, and an inode no one has open is evicted; the next lookup reads it anew.
    /// A file the kernel has open keeps what it cached until closed (close-to-open).
    pub fn inode_changed(&self, ino: u64, data: bool) {
        if !self.kernel_holds(ino) {
            return;
        }
        let offset = if data { 0 } else { -1 };
        report(self.notifier.inval_inode(INodeNo(ino), offset, 0));
        if let Some((parent, name, false)) = self.lookups.name_of(ino) {
            report(
                self.notifier
                    .inval_entry(INodeNo(parent), OsStr::from_bytes(&name)),
            );
        }
    }
}

/// A name or inode the kernel did not cache is no error; anything else is logged (the
/// kernel then serves stale attributes until they expire).
fn report(result: io::Result<()>) {
    match result {
        Err(error) if error.raw_os_error() != Some(libc::ENOENT) => {
            tracing::warn!(%error, "telling the kernel of a fast-path change failed");
        }
        _ => {}
    }
}
