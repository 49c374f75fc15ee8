//! Recursive usage: for every directory, the names, regular files, bytes and newest ctime of
//! its whole subtree (`TreeUsage`), kept exact in the same batch as each operation.
//!
//! An operation records deltas at the directories whose names changed (`name_added`,
//! `name_removed`) and at the directories naming an inode whose size or ctime changed
//! (`inode_changed`). At commit, each delta is added to its directory and to every ancestor
//! up to the root, and the new absolute values go into the batch, as the usage counters do.
//! Directories' values and parent pointers are cached under the writer lock, so a create at
//! depth d costs d hash lookups and d small puts (which the staged store merges with the
//! previous operation's), and no store read once the path is warm.
//!
//! What a program reads of it (`Engine::tree_usage`, the `shoal.dir.*` attributes) is in
//! `counters::tree_usage`.
//!
//! To find the directories naming a file, a singly linked non-directory keeps its
//! directory in `parent`; a multiply linked one has link parent keys (`B ino dir -> count`).

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::engine::Txn;
use crate::error::{FsError, FsResult};
use crate::hashing::FastHashMap;
use crate::keys;
use crate::records::inode::{FileKind, Inode, Timestamp, TreeUsage, ROOT_INO};
use crate::store::{Scan, Space};

/// Bound on cached directories; past it the cache starts over (it is only a cache).
const CACHE_MAX_DIRS: usize = 1 << 18;
/// Bound on directory depth when walking up; deeper means a cycle, i.e. corruption.
const MAX_DEPTH: usize = 1 << 20;

/// A change to one directory's subtree.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TreeDelta {
    entries: i64,
    files: i64,
    bytes: i64,
    rctime: Timestamp,
}

impl TreeDelta {
    /// What one name of `inode` adds to the directory holding it, not counting what lies
    /// below it if it is a directory (see `Txn::subtree_delta`).
    pub(crate) fn one_name(inode: &Inode) -> Self {
        let regular = inode.kind == FileKind::Regular;
        TreeDelta {
            entries: 1,
            files: i64::from(regular),
            bytes: if regular { inode.size as i64 } else { 0 },
            rctime: inode.ctime,
        }
    }

    fn negated(self) -> Self {
        TreeDelta {
            entries: -self.entries,
            files: -self.files,
            bytes: -self.bytes,
            rctime: self.rctime,
        }
    }

    /// Whether applying this delta would leave `usage` as it is: no counts, and a ctime
    /// no newer than the subtree's newest (timestamps are the coarse clock's ticks).
    fn changes_nothing_in(&self, usage: &TreeUsage) -> bool {
        self.entries == 0 && self.files == 0 && self.bytes == 0 && self.rctime <= usage.rctime
    }

    fn apply(&self, usage: &mut TreeUsage, dir: u64) {
        usage.entries = add_signed(usage.entries, self.entries, dir, "entries");
        usage.files = add_signed(usage.files, self.files, dir, "files");
        usage.bytes = add_signed(usage.bytes, self.bytes, dir, "bytes");
        usage.rctime = usage.rctime.max(self.rctime);
    }
}

fn add_signed(current: u64, delta: i64, dir: u64, what: &str) -> u64 {
    let updated = i128::from(current) + i128::from(delta);
    debug_assert!(
        updated >= 0,
        "tree {what} of directory {dir} would go negative ({current} {delta:+})"
    );
    updated.clamp(0, i128::from(u64::MAX)) as u64
}

/// A directory as the commit walk needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CachedDir {
    parent: u64,
    usage: TreeUsage,
}

/// Directories' recursive usage and parents, as the store has them after the last commit.
#[derive(Default)]
pub(crate) struct TreeCache {
    dirs: FastHashMap<u64, CachedDir>,
}

impl TreeCache {
    /// Takes a commit's new values; called only once they are in the store.
    pub(crate) fn absorb(&mut self, staged: Vec<(u64, CachedDir)>) {
        if self.dirs.len() + staged.len() > CACHE_MAX_DIRS {
            self.dirs.clear();
        }
        self.dirs.extend(staged);
    }

    pub(crate) fn clear(&mut self) {
        self.dirs.clear();
    }
}

/// What one transaction changes in recursive usage, applied at its commit.
#[derive(Default)]
pub(crate) struct TreeChanges {
    deltas: Vec<(u64, TreeDelta)>,
    /// Directories moved or removed: their cached parent is stale.
    forgotten: Vec<u64>,
}

/// An empty subtree: nothing below, newest change the directory's own.
pub(crate) fn empty_usage(dir: &Inode) -> TreeUsage {
    TreeUsage {
        rctime: dir.ctime,
        ..TreeUsage::default()
    }
}

impl Txn<'_> {
    /// `delta` (one name, and what lies below it) now sits in `dir`.
    pub(crate) fn name_added(&mut self, dir: u64, delta: TreeDelta) {
        let rctime = self.now.max(delta.rctime);
        self.tree.deltas.push((dir, TreeDelta { rctime, ..delta }));
    }

    /// `delta` (one name, and what lies below it) left `dir`.
    pub(crate) fn name_removed(&mut self, dir: u64, delta: TreeDelta) {
        let rctime = self.now;
        self.tree.deltas.push((
            dir,
            TreeDelta {
                rctime,
                ..delta.negated()
            },
        ));
    }

    /// What the name of directory `dir` and its whole subtree add to its parent.
    pub(crate) fn subtree_delta(&self, dir: &Inode) -> FsResult<TreeDelta> {
        let mut delta = TreeDelta::one_name(dir);
        let below = self.load_dir(dir.ino)?.usage;
        delta.entries += below.entries as i64;
        delta.files += below.files as i64;
        delta.bytes += below.bytes as i64;
        delta.rctime = delta.rctime.max(below.rctime);
        Ok(delta)
    }

    /// What lies below directory `dir`.
    pub(crate) fn subtree_usage(&self, dir: u64) -> FsResult<TreeUsage> {
        Ok(self.load_dir(dir)?.usage)
    }

    /// `inode` (as written in this batch) changed its ctime, and for a regular file maybe
    /// its size from `size_before`: every directory naming it learns of it.
    pub(crate) fn inode_changed(&mut self, inode: &Inode, size_before: u64) -> FsResult<()> {
        if inode.kind == FileKind::Directory {
            self.tree.deltas.push((
                inode.ino,
                TreeDelta {
                    rctime: inode.ctime,
                    ..TreeDelta::default()
                },
            ));
            return Ok(());
        }
        let bytes = if inode.kind == FileKind::Regular {
            inode.size as i64 - size_before as i64
        } else {
            0
        };
        for (dir, names) in self.link_parents(inode)? {
            let delta = TreeDelta {
                bytes: bytes * i64::from(names),
                rctime: inode.ctime,
                ..TreeDelta::default()
            };
            self.tree.deltas.push((dir, delta));
        }
        Ok(())
    }

    /// Directory `dir` moved to another parent: its cached parent is stale.
    pub(crate) fn dir_moved(&mut self, dir: u64) {
        self.tree.forgotten.push(dir);
    }

    /// Directory `dir` (empty) is being deleted.
    pub(crate) fn dir_removed(&mut self, dir: u64) {
        self.delete(Space::Meta, keys::tree_usage_key(dir));
        self.tree.forgotten.push(dir);
    }

    /// Adds the new values of every changed directory and its ancestors to the batch;
    /// returns them for the cache, which takes them once the batch is written.
    pub(crate) fn stage_tree_usage(&mut self) -> FsResult<Vec<(u64, CachedDir)>> {
        let changes = std::mem::take(&mut self.tree);
        for dir in &changes.forgotten {
            self.tree_cache().dirs.remove(dir);
        }
        let mut staged: FastHashMap<u64, CachedDir> = FastHashMap::default();
        for (dir, delta) in changes.deltas {
            let mut current = dir;
            let mut depth = 0;
            loop {
                let (mut cached, recorded) = match staged.get(&current) {
                    Some(cached) => (*cached, true),
                    None => self.load_dir_recorded(current)?,
                };
                if recorded && delta.changes_nothing_in(&cached.usage) {
                    // A directory's recorded rctime is at least every descendant's: nothing
                    // above changes either. (A chmod in the tick of the last create stops
                    // here.) One without a record has its ctime as rctime, read through
                    // this batch: maybe the very change being carried up.
                    break;
                }
                delta.apply(&mut cached.usage, current);
                staged.insert(current, cached);
                // A detached tree (see `reclaim`) has parent 0: nothing above it counts it.
                if current == ROOT_INO || cached.parent == 0 {
                    break;
                }
                current = cached.parent;
                depth += 1;
                if depth >= MAX_DEPTH {
                    return Err(FsError::Corrupt(format!(
                        "directory cycle above inode {dir}"
                    )));
                }
            }
        }
        let staged: Vec<(u64, CachedDir)> = staged.into_iter().collect();
        for (dir, cached) in &staged {
            self.put(
                Space::Meta,
                keys::tree_usage_key(*dir),
                keys::encode_tree_usage(&cached.usage),
            );
        }
        Ok(staged)
    }

    /// A directory's parent and usage: cached, else read through this batch.
    fn load_dir(&self, dir: u64) -> FsResult<CachedDir> {
        Ok(self.load_dir_recorded(dir)?.0)
    }

    /// `load_dir`, and whether the usage is as committed (cached, or a stored record)
    /// rather than made up from the directory's inode as this batch has it.
    fn load_dir_recorded(&self, dir: u64) -> FsResult<(CachedDir, bool)> {
        if let Some(cached) = self.tree_cache_ref().dirs.get(&dir) {
            return Ok((*cached, true));
        }
        let inode = self.directory(dir)?;
        let key = keys::tree_usage_key(dir);
        let (usage, recorded) = match self.get(Space::Meta, &key)? {
            Some(value) => (keys::decode_tree_usage(&key, &value)?, true),
            None => (empty_usage(&inode), false),
        };
        let cached = CachedDir {
            parent: inode.parent,
            usage,
        };
        Ok((cached, recorded))
    }

    // ---- link parents ----

    /// The directories naming `inode` (a non-directory), with how many names each holds.
    pub(crate) fn link_parents(&self, inode: &Inode) -> FsResult<BTreeMap<u64, u32>> {
        let mut parents = BTreeMap::new();
        match inode.nlink {
            0 => {}
            1 => {
                if inode.parent != 0 {
                    parents.insert(inode.parent, 1);
                }
            }
            _ => {
                let (start, end) = keys::link_parent_range(inode.ino);
                let mut stored = Vec::new();
                self.engine
                    .store()
                    .scan(Space::Meta, &start, &end, &mut |key, value| {
                        stored.push((key.to_vec(), value.to_vec()));
                        Scan::Continue
                    })?;
                let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = stored
                    .into_iter()
                    .map(|(key, value)| (key, Some(value)))
                    .collect();
                for (key, value) in self.batch_range(Bound::Included(&start), &end) {
                    merged.insert(key.to_vec(), value.map(<[u8]>::to_vec));
                }
                for (key, value) in merged {
                    if let Some(value) = value {
                        let (_, dir) = keys::decode_link_parent_key(&key)?;
                        parents.insert(dir, keys::decode_link_count(&key, &value)?);
                    }
                }
            }
        }
        Ok(parents)
    }

    fn link_count(&self, ino: u64, dir: u64) -> FsResult<u32> {
        let key = keys::link_parent_key(ino, dir);
        match self.get(Space::Meta, &key)? {
            Some(value) => keys::decode_link_count(&key, &value),
            None => Ok(0),
        }
    }

    fn put_link_count(&mut self, ino: u64, dir: u64, count: u32) {
        let key = keys::link_parent_key(ino, dir);
        if count == 0 {
            self.delete(Space::Meta, key);
        } else {
            self.put(Space::Meta, key, keys::encode_link_count(count));
        }
    }

    /// A name of `inode` (a non-directory) is being added in `dir`; call before its nlink
    /// grows.
    pub(crate) fn link_added(&mut self, inode: &mut Inode, dir: u64) -> FsResult<()> {
        assert!(inode.kind != FileKind::Directory);
        if inode.nlink == 0 {
            // Its first name (an inode made without one, as O_TMPFILE makes them).
            inode.parent = dir;
            return Ok(());
        }
        if inode.nlink == 1 {
            let first = inode.parent;
            if first == 0 {
                return Err(FsError::Corrupt(format!(
                    "inode {} has one link but no parent",
                    inode.ino
                )));
            }
            self.put_link_count(inode.ino, first, 1);
            inode.parent = 0;
        }
        let count = self.link_count(inode.ino, dir)?;
        self.put_link_count(inode.ino, dir, count + 1);
        Ok(())
    }

    /// A name of `inode` (a non-directory) in `dir` is going away; call before its nlink
    /// drops.
    pub(crate) fn link_removed(&mut self, inode: &mut Inode, dir: u64) -> FsResult<()> {
        assert!(inode.kind != FileKind::Directory && inode.nlink > 0);
        match inode.nlink {
            1 => inode.parent = 0,
            2 => {
                let mut parents = self.link_parents(inode)?;
                for &other in parents.keys() {
                    self.put_link_count(inode.ino, other, 0);
                }
                match parents.get_mut(&dir) {
                    Some(count) => *count -= 1,
                    None => return Err(self.missing_link(inode.ino, dir)),
                }
                parents.retain(|_, count| *count > 0);
                match parents.keys().next() {
                    Some(&remaining) if parents.len() == 1 => inode.parent = remaining,
                    _ => {
                        return Err(FsError::Corrupt(format!(
                            "inode {}: link parents {parents:?} after removing one in {dir}",
                            inode.ino
                        )))
                    }
                }
            }
            _ => {
                let count = self.link_count(inode.ino, dir)?;
                if count == 0 {
                    return Err(self.missing_link(inode.ino, dir));
                }
                self.put_link_count(inode.ino, dir, count - 1);
            }
        }
        Ok(())
    }

    /// A name of `inode` (a non-directory) moves from `from` to `to`.
    pub(crate) fn link_moved(&mut self, inode: &mut Inode, from: u64, to: u64) -> FsResult<()> {
        if from == to {
            return Ok(());
        }
        if inode.nlink == 1 {
            inode.parent = to;
            return Ok(());
        }
        let count = self.link_count(inode.ino, from)?;
        if count == 0 {
            return Err(self.missing_link(inode.ino, from));
        }
        self.put_link_count(inode.ino, from, count - 1);
        let count = self.link_count(inode.ino, to)?;
        self.put_link_count(inode.ino, to, count + 1);
        Ok(())
    }

    fn missing_link(&self, ino: u64, dir: u64) -> FsError {
        FsError::Corrupt(format!("inode {ino} has no link parent record for {dir}"))
    }
}
