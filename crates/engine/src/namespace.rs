//! The POSIX namespace over the store: inodes and names (lookup, readdir, create, mkdir,
//! symlink, link, unlink, rmdir, here), and in the submodules renames, file data and
//! attributes, extended attributes and ACLs, preallocation, unnamed temporary files, and
//! inodes that outlive their last name while the kernel holds them.

pub(crate) mod acl;
pub(crate) mod bulk;
pub(crate) mod data;
pub(crate) mod fallocate;
pub(crate) mod handles;
pub(crate) mod rename;
pub(crate) mod tmpfile;
pub(crate) mod xattr;

use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::listing_cache::{Page, PageKey, SharedPage};
use crate::engine::tree_usage::TreeDelta;
use crate::engine::{check_name, Caller, Engine, Txn};
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::limits::{NAME_MAX_BYTES, SYMLINK_MAX_BYTES};
use crate::namespace::rename::check_project_move;
use crate::records::inode::{Content, DirEntry, FileKind, Inode, Timestamp};
use crate::stats::Op;
use crate::store::{Scan, Space};

use crate::records::inode::S_ISGID;

/// A page of entries is read with one inode scan when their numbers span at most this many
/// numbers per entry (plus one allocation block): else the scan would read mostly others'.
const SCAN_SPAN_PER_ENTRY: u64 = 4;
const SCAN_MIN_ENTRIES: usize = 4;

fn page_key(dir: u64, after: Option<&[u8]>, with_inodes: bool) -> PageKey {
    PageKey {
        dir,
        after: after.map(Box::from),
        with_inodes,
    }
}

/// `inode` as a listing returns it: attributes, and a symlink's target (tens of bytes, read
/// by `find -ls`, `ls -l` and `tar c` for each symlink they list: the fast path sends it
/// with the listing); a small file's data stays in the store, not in every listing kept.
fn without_content(mut inode: Inode) -> Inode {
    if let (Content::Inline(data), false) = (&mut inode.content, inode.kind == FileKind::Symlink) {
        *data = Vec::new();
    }
    inode
}

/// The range of inode numbers to scan for `entries`, if they are close enough together.
fn dense_inode_span(entries: &[DirEntry]) -> Option<(u64, u64)> {
    if entries.len() < SCAN_MIN_ENTRIES {
        return None;
    }
    let first = entries.iter().map(|entry| entry.ino).min()?;
    let last = entries.iter().map(|entry| entry.ino).max()?;
    let budget = SCAN_SPAN_PER_ENTRY * entries.len() as u64 + crate::engine::INO_RUN_LENGTH;
    (last - first < budget).then_some((first, last))
}

/// A change decided and not yet written: every check passed and its batch is built, under
/// the writer lock, which it holds until `commit` writes it (dropped, it is abandoned).
/// Once decided, only a failure of the store stops it, where the caller has made sure it
/// fits (`Engine::write_surely_fits`): the fast path answers its caller before writing.
#[must_use = "a decided change is abandoned unless committed"]
pub struct Decided<'a> {
    txn: Txn<'a>,
    inode: Inode,
    /// Large orphans the change leaves are purged after it is written (an unlink).
    purges: bool,
    /// A joined unlink that failed half done (`join_unlink`): the batch is not written.
    spoiled: Option<String>,
}

impl Decided<'_> {
    /// The record the change makes, as it will be written (a create), or of the file
    /// whose name it removes, as it was (an unlink).
    pub fn inode(&self) -> &Inode {
        &self.inode
    }

    /// Another unlink decided into this change's batch, to be written with it: `rm -rf`
    /// removes a directory's files one after another, and one batch then rewrites the
    /// directory's record and the usage of every directory above it once, not per file.
    /// `Ok(Some(file))`: joined, with the record of the file whose name goes, as it was;
    /// `Ok(None)`: not joined, nothing changed (a file whose removal reads the store once
    /// begun, `Txn::removal_reads_nothing`: decide it alone once this one is written);
    /// `Err`: the unlink's own error, nothing changed.
    pub fn join_unlink(&mut self, parent: u64, name: &[u8]) -> FsResult<Option<Inode>> {
        let txn = &mut self.txn;
        let mut parent_inode = txn.directory(parent)?;
        let (ino, kind) = txn.entry(parent, name)?.ok_or(FsError::NotFound)?;
        if kind == FileKind::Directory {
            return Err(FsError::IsDir);
        }
        let inode = txn.inode(ino)?;
        if !txn.removal_reads_nothing(&inode) {
            return Ok(None);
        }
        txn.engine.stats().count(Op::Unlink);
        // Each removal at its own time, as if written alone.
        txn.now = Timestamp::now();
        txn.delete_entry(parent, name);
        txn.touch_parent(&mut parent_inode, -1, 0);
        txn.name_removed(parent, TreeDelta::one_name(&inode));
        if let Err(error) = txn.drop_link(inode.clone(), parent) {
            // Cannot happen for such a file; if it does, the batch holds half an unlink.
            let spoiled = format!("a joined unlink of inode {ino} failed half done: {error}");
            tracing::error!("{spoiled}");
            self.spoiled.get_or_insert(spoiled);
            return Err(error);
        }
        Ok(Some(inode))
    }

    /// Writes the change.
    pub fn commit(self) -> FsResult<Inode> {
        if let Some(spoiled) = self.spoiled {
            return Err(FsError::Corrupt(spoiled));
        }
        let engine = self.txn.engine;
        self.txn.commit()?;
        if self.purges {
            engine.finish_purges();
        }
        Ok(self.inode)
    }
}

/// What a new inode is.
#[derive(Clone, Debug)]
pub struct NewInode<'a> {
    pub kind: FileKind,
    /// Permission bits (`mode & 0o7777`), umask already applied.
    pub perm: u16,
    pub rdev: u32,
    /// Symlink target; empty for other kinds.
    pub target: &'a [u8],
}

impl NewInode<'static> {
    /// A regular file with permission bits `perm`.
    pub fn regular(perm: u16) -> Self {
        NewInode {
            kind: FileKind::Regular,
            perm,
            rdev: 0,
            target: b"",
        }
    }
}

impl Engine {
    pub fn lookup(&self, parent: u64, name: &[u8]) -> FsResult<Inode> {
        match self.lookup_child(parent, name) {
            // Distinguish "no such name" from "parent is not a directory".
            Err(FsError::NotFound) if self.read_inode(parent)?.kind != FileKind::Directory => {
                Err(FsError::NotDir)
            }
            result => result,
        }
    }

    /// `lookup` for a caller that knows `parent` is a live directory, as the kernel does (it
    /// looks names up only in directories it holds, and not in removed ones): a missing
    /// name then costs one store read instead of two.
    pub fn lookup_child(&self, parent: u64, name: &[u8]) -> FsResult<Inode> {
        match self.lookup_ino(parent, name)? {
            Some(ino) => self.read_inode(ino),
            None => Err(FsError::NotFound),
        }
    }

    /// `lookup_child`'s first half: the inode number `name` in `parent` names, without
    /// reading the inode (a caller that notes the inode's version before it reads it).
    pub fn lookup_ino(&self, parent: u64, name: &[u8]) -> FsResult<Option<u64>> {
        Ok(self.lookup_entry(parent, name)?.map(|(ino, _)| ino))
    }

    /// What `name` in `parent` names and its kind, as its entry says: no inode read (an
    /// unlink reads its victim's inode once, in the removal itself).
    pub fn lookup_entry(&self, parent: u64, name: &[u8]) -> FsResult<Option<(u64, FileKind)>> {
        self.stats().count(Op::Lookup);
        if name.len() > NAME_MAX_BYTES {
            return Err(FsError::NameTooLong);
        }
        let key = keys::entry_key(parent, name);
        match self.store().get(Space::Meta, &key)? {
            Some(value) => Ok(Some(keys::decode_entry(&key, &value)?)),
            None => Ok(None),
        }
    }

    /// Up to `limit` entries of `dir` in name order, starting after `after`.
    pub fn readdir(&self, dir: u64, after: Option<&[u8]>, limit: usize) -> FsResult<Vec<DirEntry>> {
        self.stats().count(Op::Readdir);
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.kept_page(
            page_key(dir, after, false),
            limit,
            Page::Names,
            |page| match page {
                Page::Names(entries) => Some(entries),
                Page::WithInodes(_) => None,
            },
            || self.scan_entries(dir, after, limit),
        )
        .map(SharedPage::into_vec)
    }

    /// `readdir` from the store, past the listing cache.
    fn scan_entries(
        &self,
        dir: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> FsResult<Vec<DirEntry>> {
        let (start, end) = match after {
            Some(name) => keys::entry_range_after(dir, name),
            None => keys::entry_range(dir),
        };
        let mut entries = Vec::new();
        let mut decode_error = None;
        self.store()
            .scan(Space::Meta, &start, &end, &mut |key, value| {
                let decoded = keys::decode_entry_key(key).and_then(|(_, name)| {
                    let (ino, kind) = keys::decode_entry(key, value)?;
                    Ok(DirEntry {
                        name: name.to_vec(),
                        ino,
                        kind,
                    })
                });
                match decoded {
                    Ok(entry) => entries.push(entry),
                    Err(error) => {
                        decode_error = Some(error);
                        return Scan::Stop;
                    }
                }
                if entries.len() >= limit {
                    Scan::Stop
                } else {
                    Scan::Continue
                }
            })?;
        if let Some(error) = decode_error {
            return Err(error);
        }
        if entries.is_empty() {
            // An empty answer must still fail for a non-directory or a deleted one (but
            // not for a removed directory still open: it lists as empty).
            let inode = self.attributes(dir)?;
            if inode.kind != FileKind::Directory {
                return Err(FsError::NotDir);
            }
        }
        Ok(entries)
    }

    /// `readdir` with each entry's inode, without its inline content (a listing's callers
    /// want attributes; `read` returns data). Sibling inodes were allocated next to each
    /// other, so these reads hit the same store blocks.
    pub fn readdir_plus(
        &self,
        dir: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> FsResult<Vec<(DirEntry, Inode)>> {
        self.readdir_plus_shared(dir, after, limit)
            .map(SharedPage::into_vec)
    }

    /// `readdir_plus`, shared with the listing cache rather than copied out of it: a
    /// caller that only reads the page (to encode it) spares a copy of every entry.
    pub fn readdir_plus_shared(
        &self,
        dir: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> FsResult<SharedPage<(DirEntry, Inode)>> {
        self.stats().count(Op::Readdir);
        if limit == 0 {
            return Ok(SharedPage::new(Arc::default(), 0));
        }
        self.kept_page(
            page_key(dir, after, true),
            limit,
            Page::WithInodes,
            |page| match page {
                Page::WithInodes(entries) => Some(entries),
                Page::Names(_) => None,
            },
            || self.scan_entries_with_inodes(dir, after, limit),
        )
    }

    /// A page of at most `limit` entries from the listing cache while it holds, else from
    /// `scan`, kept for next time (see `listing_cache`: the change count is read before
    /// the scan).
    fn kept_page<T: Clone>(
        &self,
        key: PageKey,
        limit: usize,
        wrap: fn(Arc<Vec<T>>) -> Page,
        unwrap: fn(Page) -> Option<Arc<Vec<T>>>,
        scan: impl FnOnce() -> FsResult<Vec<T>>,
    ) -> FsResult<SharedPage<T>> {
        let read_at = self.changes();
        if let Some(entries) = self.listings().get(&key, limit).and_then(unwrap) {
            return Ok(SharedPage::new(entries, limit));
        }
        let entries = Arc::new(scan()?);
        self.listings()
            .put(key, wrap(entries.clone()), limit, read_at, || {
                self.changes()
            });
        Ok(SharedPage::new(entries, limit))
    }

    /// `readdir_plus` from the store, past the listing cache.
    fn scan_entries_with_inodes(
        &self,
        dir: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> FsResult<Vec<(DirEntry, Inode)>> {
        let entries = self.scan_entries(dir, after, limit)?;
        let mut inodes = match dense_inode_span(&entries) {
            Some((first, last)) => self.scan_inodes(first, last)?,
            None => HashMap::new(),
        };
        let mut with_inodes = Vec::with_capacity(entries.len());
        for entry in entries {
            let inode = match inodes.remove(&entry.ino) {
                Some(inode) => Ok(inode),
                None => self.read_inode(entry.ino),
            };
            match inode {
                Ok(inode) => with_inodes.push((entry, without_content(inode))),
                // Unlinked between the two reads: skip it, as if read a moment later.
                Err(FsError::NotFound) => continue,
                Err(error) => return Err(error),
            }
        }
        Ok(with_inodes)
    }

    /// The inode records numbered `first..=last`, read in one scan. A directory's children
    /// get numbers from the same allocation block, so one scan replaces a point read each.
    fn scan_inodes(&self, first: u64, last: u64) -> FsResult<HashMap<u64, Inode>> {
        let start = keys::inode_key(first);
        let end = keys::inode_key(last.saturating_add(1));
        let mut inodes = HashMap::new();
        let mut decode_error = None;
        self.store()
            .scan(
                Space::Meta,
                &start,
                &end,
                &mut |key, value| match keys::decode_inode_key(key)
                    .and_then(|ino| keys::decode_inode(ino, value))
                {
                    Ok(inode) => {
                        inodes.insert(inode.ino, inode);
                        Scan::Continue
                    }
                    Err(error) => {
                        decode_error = Some(error);
                        Scan::Stop
                    }
                },
            )?;
        match decode_error {
            Some(error) => Err(error),
            None => Ok(inodes),
        }
    }

    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        let inode = self.read_inode(ino)?;
        if inode.kind != FileKind::Symlink {
            return Err(FsError::Invalid("not a symlink"));
        }
        Ok(inode.inline_data().to_vec())
    }

    /// Creates a file, fifo, socket, device node or symlink (`mknod`, `create`, `symlink`).
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        new: &NewInode<'_>,
        caller: Caller,
    ) -> FsResult<Inode> {
        self.create_masked(parent, name, new, 0, caller)
    }

    /// `create` with the caller's umask not yet applied: it applies unless `parent` has a
    /// default ACL, which then decides the permissions (the FUSE adapter asks the kernel
    /// for unmasked modes so that this can be told apart).
    pub fn create_masked(
        &self,
        parent: u64,
        name: &[u8],
        new: &NewInode<'_>,
        umask: u16,
        caller: Caller,
    ) -> FsResult<Inode> {
        self.create_decided(parent, name, new, umask, caller)?
            .commit()
    }

    /// `create_masked` decided but not written (`Decided`): the file's record as it will
    /// be, the writer lock held until it is committed or dropped.
    pub fn create_decided(
        &self,
        parent: u64,
        name: &[u8],
        new: &NewInode<'_>,
        umask: u16,
        caller: Caller,
    ) -> FsResult<Decided<'_>> {
        self.stats().count(Op::Create);
        if new.kind == FileKind::Directory {
            return Err(FsError::Invalid("use mkdir for directories"));
        }
        if new.kind == FileKind::Symlink && new.target.len() > SYMLINK_MAX_BYTES {
            return Err(FsError::NameTooLong);
        }
        let mut txn = self.begin()?;
        let inode = txn.add_child(parent, name, new, umask, caller)?;
        Ok(Decided {
            txn,
            inode,
            purges: false,
            spoiled: None,
        })
    }

    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        caller: Caller,
    ) -> FsResult<Inode> {
        let new = NewInode {
            kind: FileKind::Symlink,
            perm: 0o777,
            rdev: 0,
            target,
        };
        self.create(parent, name, &new, caller)
    }

    pub fn mkdir(&self, parent: u64, name: &[u8], perm: u16, caller: Caller) -> FsResult<Inode> {
        self.mkdir_masked(parent, name, perm, 0, caller)
    }

    /// `mkdir` with the umask not yet applied (see `create_masked`).
    pub fn mkdir_masked(
        &self,
        parent: u64,
        name: &[u8],
        perm: u16,
        umask: u16,
        caller: Caller,
    ) -> FsResult<Inode> {
        self.mkdir_decided(parent, name, perm, umask, caller)?
            .commit()
    }

    /// `mkdir_masked` decided but not written (`Decided`): the directory's record as it
    /// will be.
    pub fn mkdir_decided(
        &self,
        parent: u64,
        name: &[u8],
        perm: u16,
        umask: u16,
        caller: Caller,
    ) -> FsResult<Decided<'_>> {
        self.stats().count(Op::Mkdir);
        let new = NewInode {
            kind: FileKind::Directory,
            perm,
            rdev: 0,
            target: &[],
        };
        let mut txn = self.begin()?;
        let inode = txn.add_child(parent, name, &new, umask, caller)?;
        Ok(Decided {
            txn,
            inode,
            purges: false,
            spoiled: None,
        })
    }

    /// Adds a hard link `newparent/newname` to `ino`.
    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> FsResult<Inode> {
        self.stats().count(Op::Link);
        check_name(newname)?;
        let mut txn = self.begin()?;
        let mut inode = txn.inode(ino)?;
        if inode.kind == FileKind::Directory {
            return Err(FsError::NotPermitted("hard link to a directory"));
        }
        // Only an O_TMPFILE inode gets its first name here (the kernel refuses other
        // unlinked files); it stops being an orphan in this same batch.
        let first_name = inode.nlink == 0;
        if first_name {
            if inode.kind != FileKind::Regular || !self.is_unnamed_tmpfile(ino) {
                return Err(FsError::NotFound);
            }
            txn.delete(Space::Meta, keys::orphan_key(ino));
        }
        let mut parent = txn.directory(newparent)?;
        check_project_move(inode.project, parent.project)?;
        if txn.entry(newparent, newname)?.is_some() {
            return Err(FsError::Exists);
        }
        txn.link_added(&mut inode, newparent)?;
        inode.nlink += 1;
        inode.ctime = txn.now;
        txn.put_inode(&inode);
        txn.put_entry(newparent, newname, ino, inode.kind);
        txn.touch_parent(&mut parent, 1, 0);
        txn.name_added(newparent, TreeDelta::one_name(&inode));
        // The other names' directories see the new ctime.
        txn.inode_changed(&inode, inode.size)?;
        txn.commit()?;
        if first_name {
            self.adopted(ino);
        }
        Ok(inode)
    }

    pub fn unlink(&self, parent: u64, name: &[u8]) -> FsResult<()> {
        self.unlink_decided(parent, name)?.commit().map(drop)
    }

    /// `unlink` decided but not written (`Decided`), with the record of the file whose
    /// name goes, as it was.
    pub fn unlink_decided(&self, parent: u64, name: &[u8]) -> FsResult<Decided<'_>> {
        self.stats().count(Op::Unlink);
        let mut txn = self.begin()?;
        let mut parent_inode = txn.directory(parent)?;
        let (ino, kind) = txn.entry(parent, name)?.ok_or(FsError::NotFound)?;
        if kind == FileKind::Directory {
            return Err(FsError::IsDir);
        }
        let inode = txn.inode(ino)?;
        txn.delete_entry(parent, name);
        txn.touch_parent(&mut parent_inode, -1, 0);
        txn.name_removed(parent, TreeDelta::one_name(&inode));
        txn.drop_link(inode.clone(), parent)?;
        Ok(Decided {
            txn,
            inode,
            purges: true,
            spoiled: None,
        })
    }

    pub fn rmdir(&self, parent: u64, name: &[u8]) -> FsResult<()> {
        self.rmdir_decided(parent, name)?.commit().map(drop)
    }

    /// `rmdir` decided but not written (`Decided`), with the record of the directory that
    /// goes, as it was.
    pub fn rmdir_decided(&self, parent: u64, name: &[u8]) -> FsResult<Decided<'_>> {
        self.stats().count(Op::Rmdir);
        if name == b"." {
            return Err(FsError::Invalid("rmdir of ."));
        }
        if name == b".." {
            return Err(FsError::NotEmpty);
        }
        let mut txn = self.begin()?;
        let mut parent_inode = txn.directory(parent)?;
        let (ino, kind) = txn.entry(parent, name)?.ok_or(FsError::NotFound)?;
        if kind != FileKind::Directory {
            return Err(FsError::NotDir);
        }
        let dir = txn.inode(ino)?;
        if dir.size > 0 {
            return Err(FsError::NotEmpty);
        }
        txn.delete_entry(parent, name);
        txn.touch_parent(&mut parent_inode, -1, -1);
        txn.name_removed(parent, TreeDelta::one_name(&dir));
        txn.purge_inode(dir.ino)?;
        Ok(Decided {
            txn,
            inode: dir,
            purges: false,
            spoiled: None,
        })
    }
}

impl Txn<'_> {
    /// Creates an inode and its entry in `parent`, charging the caller.
    pub(crate) fn add_child(
        &mut self,
        parent: u64,
        name: &[u8],
        new: &NewInode<'_>,
        umask: u16,
        caller: Caller,
    ) -> FsResult<Inode> {
        check_name(name)?;
        let mut parent_inode = self.directory(parent)?;
        if parent_inode.nlink == 0 {
            return Err(FsError::NotFound);
        }
        if self.entry(parent, name)?.is_some() {
            return Err(FsError::Exists);
        }
        let mut inode = self.new_inode(&parent_inode, new, caller);
        self.inherit_acls(&parent_inode, &mut inode, umask)?;
        let is_dir = new.kind == FileKind::Directory;
        self.put_inode(&inode);
        self.put_entry(parent, name, inode.ino, new.kind);
        self.touch_parent(&mut parent_inode, 1, i32::from(is_dir));
        self.name_added(parent, TreeDelta::one_name(&inode));
        self.charge(&inode, 1, 0);
        Ok(inode)
    }

    /// A new inode for a child of `parent_inode`, owned by `caller`, with one link (two for
    /// a directory); not written yet.
    pub(crate) fn new_inode(
        &mut self,
        parent_inode: &Inode,
        new: &NewInode<'_>,
        caller: Caller,
    ) -> Inode {
        let parent = parent_inode.ino;
        let is_dir = new.kind == FileKind::Directory;
        // BSD group semantics of a setgid directory: children take its group, and new
        // subdirectories stay setgid.
        let setgid_parent = parent_inode.perm & S_ISGID != 0;
        let gid = if setgid_parent {
            parent_inode.gid
        } else {
            caller.gid
        };
        let perm = if setgid_parent && is_dir {
            new.perm | S_ISGID
        } else {
            new.perm
        };
        let ino = self.alloc_ino(parent);
        // Only a symlink carries bytes at creation: its target.
        let content = match new.kind {
            FileKind::Symlink => Content::Inline(new.target.to_vec()),
            _ => Content::Inline(Vec::new()),
        };
        Inode {
            ino,
            kind: new.kind,
            perm: perm & 0o7777,
            uid: caller.uid,
            gid,
            nlink: if is_dir { 2 } else { 1 },
            size: if new.kind == FileKind::Symlink {
                new.target.len() as u64
            } else {
                0
            },
            allocated_bytes: 0,
            atime: self.now,
            mtime: self.now,
            ctime: self.now,
            // mknod passes a device number for every kind; only devices have one
            // (`keys::decode_inode` refuses it on the others).
            rdev: if new.kind.is_device() { new.rdev } else { 0 },
            parent,
            project: parent_inode.project,
            content,
            may_have_xattrs: false,
        }
    }

    /// Updates a directory after its entries changed: entry count (its size), subdirectory
    /// links, and times.
    pub(crate) fn touch_parent(&mut self, parent: &mut Inode, entries: i64, subdirs: i32) {
        assert!(parent.kind == FileKind::Directory);
        let size = parent.size as i64 + entries;
        assert!(
            size >= 0,
            "directory {} entry count would go negative",
            parent.ino
        );
        parent.size = size as u64;
        parent.nlink = (parent.nlink as i64 + i64::from(subdirs)) as u32;
        assert!(
            parent.nlink >= 2,
            "directory {} link count below 2",
            parent.ino
        );
        parent.mtime = self.now;
        parent.ctime = self.now;
        self.put_inode(parent);
    }
}
