//! Inodes that lost their last name while the kernel still holds them.
//!
//! The kernel may send requests for any inode it has looked up and not yet forgotten: the
//! writeback cache's SETATTR with a written file's times after `rm`, `fstat` on an open
//! directory that `rmdir` or `rename` removed. Those must succeed, with a link count of 0,
//! until the kernel forgets the inode (FUSE FORGET).
//!
//! An open regular file stays in the store as an orphan until its last release (see
//! `engine::OpenFiles`): it still has data to read and write. Any other unlinked inode
//! leaves the store at once, as before, and only its attributes stay here, in memory, until
//! the forget: one map entry instead of a second store batch per unlink, and nothing for a
//! crash to leave behind. Reads of its data or xattrs find nothing, as for a deleted file.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::engine::Engine;
use crate::error::{FsError, FsResult};
use crate::namespace::data::SetAttr;
use crate::namespace::inode::{Content, Inode, Timestamp};

/// Answers whether the kernel still holds an inode (its lookup count is above zero).
pub type ReferenceProbe = Box<dyn Fn(u64) -> bool + Send + Sync>;

#[derive(Default)]
pub(crate) struct Unlinked {
    probe: OnceLock<ReferenceProbe>,
    /// Attributes of removed inodes the kernel still holds, by inode number.
    inodes: Mutex<HashMap<u64, Inode>>,
    /// `inodes.len()`, read without the lock: most forgets are of linked inodes.
    count: AtomicUsize,
}

impl Unlinked {
    pub(crate) fn referenced(&self, ino: u64) -> bool {
        self.probe.get().is_some_and(|probe| probe(ino))
    }

    /// Keeps `inode`'s attributes, with no links, if the kernel still holds it. The probe
    /// is read under the map's lock: a forget lowers the count before it takes the lock
    /// (`forgotten`), so either the probe sees the count at zero or the forget finds the
    /// entry to remove.
    pub(crate) fn removed(&self, mut inode: Inode, now: Timestamp) {
        let mut inodes = self.inodes.lock();
        if !self.referenced(inode.ino) {
            return;
        }
        inode.nlink = 0;
        inode.ctime = inode.ctime.max(now);
        inode.size = if inode.kind == crate::namespace::inode::FileKind::Directory {
            0
        } else {
            inode.size
        };
        // Its bytes are gone from the store; keep only attributes.
        inode.content = Content::Inline(Vec::new());
        inode.allocated_bytes = 0;
        inodes.insert(inode.ino, inode);
        self.count.store(inodes.len(), Ordering::Release);
    }

    fn get(&self, ino: u64) -> Option<Inode> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.inodes.lock().get(&ino).cloned()
    }
}

impl Engine {
    /// Tells the engine how to ask whether the kernel still holds an inode; the FUSE adapter
    /// installs its lookup counts here once. Without it (library use) nothing is kept.
    pub fn set_reference_probe(&self, probe: ReferenceProbe) {
        if self.unlinked().probe.set(probe).is_err() {
            tracing::warn!("reference probe installed twice; keeping the first");
        }
    }

    /// The kernel forgot `ino` (its lookup count reached zero): a removed inode's
    /// attributes go, and with untracked opens an orphan is deleted (its last close).
    /// Call after the count is lowered.
    pub fn forgotten(&self, ino: u64) {
        self.forgotten_all(&[ino]);
    }

    /// `forgotten` for the inodes of one batch of forgets: their orphans go in one batch.
    pub fn forgotten_all(&self, inos: &[u64]) {
        let orphans = self.closed_by_forget(inos);
        if let Err(error) = self.purge_orphans_now(&orphans) {
            // The orphan records stay; the next read-write open purges them.
            tracing::warn!(count = orphans.len(), %error, "deleting forgotten orphans failed");
        }
        let unlinked = self.unlinked();
        if unlinked.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut inodes = unlinked.inodes.lock();
        for ino in inos {
            inodes.remove(ino);
        }
        unlinked.count.store(inodes.len(), Ordering::Release);
    }

    /// Removed inodes the kernel still holds (for stats and tests).
    pub fn unlinked_inodes(&self) -> usize {
        self.unlinked().count.load(Ordering::Acquire)
    }

    /// The attributes of `ino`: from the store, or of a removed inode the kernel holds.
    pub(crate) fn attributes(&self, ino: u64) -> FsResult<Inode> {
        match self.read_inode(ino) {
            Err(FsError::NotFound) => self.unlinked().get(ino).ok_or(FsError::NotFound),
            result => result,
        }
    }

    /// Whether `ino` is a removed inode the kernel still holds.
    pub(crate) fn is_unlinked(&self, ino: u64) -> bool {
        self.unlinked().get(ino).is_some()
    }

    /// A setattr on a removed inode: nothing reaches the store (there is nothing left to
    /// change there); the kernel's copy gets what it asked for.
    pub(crate) fn setattr_unlinked(&self, ino: u64, change: &SetAttr) -> FsResult<Inode> {
        let unlinked = self.unlinked();
        let mut inodes = unlinked.inodes.lock();
        let inode = inodes.get_mut(&ino).ok_or(FsError::NotFound)?;
        let now = Timestamp::now();
        if let Some(perm) = change.perm {
            inode.perm = perm & 0o7777;
        }
        inode.uid = change.uid.unwrap_or(inode.uid);
        inode.gid = change.gid.unwrap_or(inode.gid);
        if let Some(size) = change.size {
            inode.size = size;
        }
        if let Some(atime) = change.atime {
            inode.atime = crate::namespace::data::resolve(atime, now);
        }
        if let Some(mtime) = change.mtime {
            inode.mtime = crate::namespace::data::resolve(mtime, now);
        }
        inode.ctime = change.ctime.unwrap_or(now);
        Ok(inode.clone())
    }
}
