//! Open files and inodes that lost their last name: the lifecycle from open, through
//! unlink, to the last close or forget.
//!
//! An open regular file that loses its last name stays in the store as an orphan until its
//! last close: a release, a fast-path unpin, or with untracked opens the kernel's forget
//! (`OpenFiles`). O_TMPFILE inodes are orphans from their start until linked.
//!
//! The kernel may send requests for any inode it has looked up and not yet forgotten: the
//! writeback cache's SETATTR with a written file's times after `rm`, `fstat` on an open
//! directory that `rmdir` or `rename` removed. Those must succeed, with a link count of 0,
//! until the kernel forgets the inode (FUSE FORGET).
//!
//! An open regular file stays in the store as an orphan until its last release (see
//! `OpenFiles`): it still has data to read and write. Any other unlinked inode
//! leaves the store at once, as before, and only its attributes stay here, in memory, until
//! the forget: one map entry instead of a second store batch per unlink, and nothing for a
//! crash to leave behind. Reads of its data or xattrs find nothing, as for a deleted file.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::engine::Engine;
use crate::error::{FsError, FsResult};
use crate::hashing::{FastHashMap, FastHashSet};
use crate::records::inode::{Content, FileKind, Inode, Timestamp};

/// Answers whether the kernel still holds an inode (its lookup count is above zero).
pub type ReferenceProbe = Box<dyn Fn(u64) -> bool + Send + Sync>;

/// Orphans deleted per batch when the kernel forgets many at once: each is a few keys
/// (a large file's chunks go in batches of their own, see `purge`).
const ORPHANS_PER_BATCH: usize = 256;

/// Open regular files and unlinked-while-open inodes.
#[derive(Default)]
pub(super) struct OpenFiles {
    counts: FastHashMap<u64, u32>,
    orphans: FastHashSet<u64>,
    /// Orphans made by O_TMPFILE and not linked yet: the only ones `link` may name.
    tmpfiles: FastHashSet<u64>,
    /// The kernel opens files without telling us (see `opens_untracked`): any inode it
    /// holds may be open, and its forget is the last close.
    untracked: bool,
    /// Opens through the fast path (`shoal run`), which reports every open and close
    /// whatever the kernel does: counted apart, so neither door's last close deletes an
    /// orphan the other still holds.
    pinned: FastHashMap<u64, u32>,
}

#[derive(Default)]
pub(crate) struct Unlinked {
    probe: OnceLock<ReferenceProbe>,
    /// Attributes of removed inodes the kernel still holds, by inode number.
    inodes: Mutex<FastHashMap<u64, Inode>>,
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
        inode.size = if inode.kind == FileKind::Directory {
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

    /// Changes the attributes kept of removed inode `ino`, returning them as changed.
    pub(crate) fn update(&self, ino: u64, change: impl FnOnce(&mut Inode)) -> FsResult<Inode> {
        let mut inodes = self.inodes.lock();
        let inode = inodes.get_mut(&ino).ok_or(FsError::NotFound)?;
        change(inode);
        Ok(inode.clone())
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

    /// Notes that a regular file is open: if it is unlinked now, its inode stays until the
    /// last `release_file`.
    pub fn open_file(&self, ino: u64) {
        let mut open = self.open_files.lock();
        // Untracked: no release will come; the forget is the last close.
        if !open.untracked {
            *open.counts.entry(ino).or_insert(0) += 1;
        }
    }

    pub fn release_file(&self, ino: u64) -> FsResult<()> {
        let purge = {
            let mut open = self.open_files.lock();
            // Untracked: the kernel may hold the file open without telling us (opened
            // after the switch), so only its forget deletes an orphan.
            if open.untracked {
                return Ok(());
            }
            let count = open.counts.entry(ino).or_insert(0);
            debug_assert!(*count > 0, "release of ino {ino} that is not open");
            *count = count.saturating_sub(1);
            if *count > 0 {
                return Ok(());
            }
            open.counts.remove(&ino);
            if open.pinned.contains_key(&ino) {
                return Ok(());
            }
            open.tmpfiles.remove(&ino);
            open.orphans.remove(&ino)
        };
        if purge {
            self.purge_orphans_now(&[ino])?;
        }
        Ok(())
    }

    /// A file opened through the fast path: an unlink keeps it as an orphan until
    /// `unpin_file`, whatever the kernel holds.
    pub fn pin_file(&self, ino: u64) {
        *self.open_files.lock().pinned.entry(ino).or_insert(0) += 1;
    }

    /// The fast path closed `ino`: an orphan nobody else holds is deleted now.
    pub fn unpin_file(&self, ino: u64) -> FsResult<()> {
        let purge = {
            let mut open = self.open_files.lock();
            let Some(count) = open.pinned.get_mut(&ino) else {
                debug_assert!(false, "unpin of ino {ino} that is not pinned");
                return Ok(());
            };
            *count -= 1;
            if *count > 0 {
                return Ok(());
            }
            open.pinned.remove(&ino);
            if !open.orphans.contains(&ino) {
                // Linked: nothing to delete, and no need to ask whether the kernel holds
                // it (with untracked opens a probe of the kernel door's lookup counts, a
                // cache miss or two in a large map: 8% of the daemon's time in a loop of
                // opens, reads and closes of small files).
                return Ok(());
            }
            let kernel_holds = if open.untracked {
                self.unlinked().referenced(ino)
            } else {
                open.counts.get(&ino).copied().unwrap_or(0) > 0
            };
            !kernel_holds && open.orphans.remove(&ino)
        };
        if purge {
            self.purge_orphans_now(&[ino])?;
        }
        Ok(())
    }

    /// A new inode with no name (O_TMPFILE), open once: an orphan until it is linked or
    /// its last release.
    pub(crate) fn open_new_orphan(&self, ino: u64) {
        let mut open = self.open_files.lock();
        *open.counts.entry(ino).or_insert(0) += 1;
        open.orphans.insert(ino);
        open.tmpfiles.insert(ino);
    }

    /// Whether `ino` is an open O_TMPFILE inode that has not had a name yet.
    pub(crate) fn is_unnamed_tmpfile(&self, ino: u64) -> bool {
        let open = self.open_files.lock();
        open.tmpfiles.contains(&ino) && open.orphans.contains(&ino)
    }

    /// An O_TMPFILE got a name (linkat): its last release keeps it.
    pub(crate) fn adopted(&self, ino: u64) {
        let mut open = self.open_files.lock();
        open.orphans.remove(&ino);
        open.tmpfiles.remove(&ino);
    }

    /// From now on the kernel opens and closes files without requests (FUSE's no_open):
    /// every inode it still holds counts as open, and its forget (`forgotten`) as the
    /// last close. Opens counted before stay counted but are closed by the forget too,
    /// since their releases will not come.
    pub fn opens_untracked(&self) {
        self.open_files.lock().untracked = true;
    }

    /// The kernel forgot these inodes: with untracked opens that is their last close, and
    /// the orphans among them are returned, to be deleted.
    pub(crate) fn closed_by_forget(&self, inos: &[u64]) -> Vec<u64> {
        let mut open = self.open_files.lock();
        if !open.untracked {
            return Vec::new();
        }
        inos.iter()
            .copied()
            .filter(|ino| {
                open.counts.remove(ino);
                if open.pinned.contains_key(ino) {
                    return false;
                }
                open.tmpfiles.remove(ino);
                open.orphans.remove(ino)
            })
            .collect()
    }

    /// Deletes orphans, a bounded number per batch, skipping any that got a name
    /// meanwhile (an O_TMPFILE given a name by a linkat racing its close).
    pub(crate) fn purge_orphans_now(&self, orphans: &[u64]) -> FsResult<()> {
        for group in orphans.chunks(ORPHANS_PER_BATCH) {
            let mut txn = self.begin()?;
            for &ino in group {
                if txn.inode(ino).is_ok_and(|inode| inode.nlink == 0) {
                    txn.purge_inode(ino)?;
                }
            }
            txn.commit()?;
            self.finish_purges();
        }
        Ok(())
    }

    /// Takes `inos` out of the orphan set: the transaction that made them orphans never
    /// committed.
    pub(super) fn not_orphans(&self, inos: &[u64]) {
        let mut open = self.open_files.lock();
        for ino in inos {
            open.orphans.remove(ino);
        }
    }

    /// Decides, under the writer lock, whether an inode whose last link went away is
    /// deleted now or kept as an orphan until its last close.
    pub(super) fn keep_as_orphan(&self, ino: u64) -> bool {
        let mut open = self.open_files.lock();
        // The reference probe is read under the lock `closed_by_forget` takes after the
        // count went to zero: either it sees the count or the forget finds the orphan.
        let held = open.untracked && self.unlinked().referenced(ino);
        let counted = open.counts.get(&ino).copied().unwrap_or(0) > 0;
        if held || counted || open.pinned.contains_key(&ino) {
            open.orphans.insert(ino);
            true
        } else {
            false
        }
    }
}
