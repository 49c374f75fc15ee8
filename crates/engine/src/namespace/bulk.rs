//! Bulk loading (`shoal import`): a whole tree built in large batches out of sight, then
//! named in one batch.
//!
//! `stage_tree` makes a directory with no name, recorded under a reclaim key as a tree
//! `detach_tree` took out is (see `reclaim`), but held by this process so the reclaimer
//! leaves it alone. `apply` then runs many creations, writes, links, xattrs and attribute
//! changes as one batch, each step writing what the single operation would (recursive
//! usage, usage counters, link parents), so `fsck` is clean between any two batches.
//! `attach_tree` gives the finished tree its name (the reverse of `detach_tree`);
//! `abandon_tree` hands a failed one to the reclaimer. After a crash nobody holds the tree
//! any more, and the next read-write open deletes it like any detached tree: a half-built
//! tree is never visible.
//!
//! The caller chooses the batch size: the batch is built in memory, and the writer lock
//! is held while it is applied. File data given in pieces of `bulk_piece_bytes` at
//! offsets that are multiples of it moves into the store as it is (no copy), and a
//! name made in a directory made by the same batch is checked against that batch only
//! (no store read): a bulk load costs little more than building its keys.

use std::collections::HashSet;
use std::sync::Arc;

use crate::engine::tree_usage::TreeDelta;
use crate::engine::{check_name, Caller, Engine, Txn};
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::limits::{MAX_FILE_BYTES, SYMLINK_MAX_BYTES, XATTR_VALUE_MAX_BYTES};
use crate::namespace::data::write_inline;
use crate::namespace::rename::check_project_move;
use crate::namespace::xattr::check_xattr_name;
use crate::namespace::NewInode;
use crate::records::inode::{Content, FileKind, Inode, Timestamp};
use crate::store::{SharedBytes, Space};

/// An inode a bulk operation works on: known, made by an earlier operation of the same
/// `apply` (by its index), or made by the batch applied before it (by its index there; see
/// `apply_after`), for a caller that builds a batch while the one before is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRef {
    Ino(u64),
    New(usize),
    Earlier(usize),
}

/// The attributes an imported inode is given, as `tar xf` run by root restores them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkAttrs {
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub atime: Timestamp,
    pub mtime: Timestamp,
}

/// One step of a bulk load.
#[derive(Clone, Debug)]
pub enum BulkOp {
    /// Creates `parent/name` (of any kind but a hard link) with `attrs`. An existing
    /// non-directory of that name is replaced, as `tar xf` replaces it; an existing
    /// directory made again as a directory is kept and takes the new attributes.
    Make {
        parent: NodeRef,
        name: Vec<u8>,
        kind: FileKind,
        rdev: u32,
        /// Symlink target; empty for other kinds.
        target: Vec<u8>,
        attrs: BulkAttrs,
    },
    /// Adds the name `parent/name` to the non-directory named `target_dir/target_name`.
    Link {
        parent: NodeRef,
        name: Vec<u8>,
        target_dir: NodeRef,
        target_name: Vec<u8>,
    },
    /// Writes file bytes; the file's times are left as `Make` set them. A piece of
    /// `Engine::bulk_piece_bytes` (or the end of the file) at a multiple of that offset,
    /// appended, becomes a chunk without being copied, here or in the store.
    Write {
        file: NodeRef,
        offset: u64,
        data: SharedBytes,
    },
    Xattr {
        node: NodeRef,
        name: Vec<u8>,
        value: Vec<u8>,
    },
    /// Sets permissions, owners and times (directories get their times last, once
    /// nothing is added to them any more).
    Attrs { node: NodeRef, attrs: BulkAttrs },
}

impl BulkOp {
    /// Bytes this operation holds in memory (for the caller's batch bound).
    pub fn bytes(&self) -> usize {
        let payload = match self {
            BulkOp::Make { name, target, .. } => name.len() + target.len(),
            BulkOp::Link {
                name, target_name, ..
            } => name.len() + target_name.len(),
            BulkOp::Write { data, .. } => data.len(),
            BulkOp::Xattr { name, value, .. } => name.len() + value.len(),
            BulkOp::Attrs { .. } => 0,
        };
        payload + std::mem::size_of::<BulkOp>()
    }
}

/// Why an `apply` failed: the operation (by index) and its error. Nothing of the batch
/// was written.
#[derive(Debug, thiserror::Error)]
#[error("operation {op} of the batch: {error}")]
pub struct BulkFailure {
    pub op: usize,
    pub error: FsError,
}

impl Engine {
    /// A new directory with no name, owned and moded by `attrs`, in the project of
    /// `project_of` (the directory it will be named in), to build a tree in.
    pub fn stage_tree(&self, project_of: u64, attrs: &BulkAttrs) -> FsResult<u64> {
        let mut txn = self.begin()?;
        let template = txn.directory(project_of)?;
        let new = NewInode {
            kind: FileKind::Directory,
            perm: attrs.perm,
            rdev: 0,
            target: &[],
        };
        let caller = Caller {
            uid: attrs.uid,
            gid: attrs.gid,
        };
        let mut inode = txn.new_inode(&template, &new, caller);
        set_attrs(&mut inode, attrs);
        // Not below anything: a detached tree (see `reclaim`).
        inode.parent = 0;
        txn.put_inode(&inode);
        txn.put(Space::Meta, keys::reclaim_key(inode.ino), Vec::new());
        txn.charge(&inode, 1, 0);
        // Held before the reclaim key is visible, so the reclaimer never sees it unheld.
        self.reclaim_signal().hold(inode.ino);
        if let Err(error) = txn.commit() {
            self.reclaim_signal().release(inode.ino);
            return Err(error);
        }
        Ok(inode.ino)
    }

    /// The size of file data pieces that `apply` stores without copying them (see
    /// `BulkOp::Write`).
    pub fn bulk_piece_bytes(&self) -> usize {
        self.chunk_bytes() as usize
    }

    /// Runs `ops` as one batch (their data moves into it); returns the inode each `Make`
    /// made (0 for other operations), in order.
    pub fn apply(&self, ops: Vec<BulkOp>) -> Result<Vec<u64>, BulkFailure> {
        self.apply_after(ops, &[])
    }

    /// `apply`, with `NodeRef::Earlier` resolved through `earlier`: what the `apply` before
    /// this one returned.
    pub fn apply_after(&self, ops: Vec<BulkOp>, earlier: &[u64]) -> Result<Vec<u64>, BulkFailure> {
        let failed = |op, error| BulkFailure { op, error };
        let count = ops.len();
        let mut txn = self.begin().map_err(|error| failed(0, error))?;
        let mut made = Vec::with_capacity(count);
        let mut fresh = FreshDirs::default();
        for (index, op) in ops.into_iter().enumerate() {
            let ino = txn
                .bulk_op(op, [&made, earlier], &mut fresh)
                .map_err(|error| failed(index, error))?;
            made.push(ino);
        }
        txn.commit()
            .map_err(|error| failed(count.saturating_sub(1), error))?;
        self.finish_purges();
        Ok(made)
    }

    /// Names the staged tree `root` as `parent/name`, in one batch: it and its recursive
    /// usage appear at once.
    pub fn attach_tree(&self, root: u64, parent: u64, name: &[u8]) -> FsResult<()> {
        check_name(name)?;
        let mut txn = self.begin()?;
        let mut parent_inode = txn.directory(parent)?;
        if parent_inode.nlink == 0 {
            return Err(FsError::NotFound);
        }
        if txn.entry(parent, name)?.is_some() {
            return Err(FsError::Exists);
        }
        let mut dir = txn.directory(root)?;
        if dir.parent != 0 {
            return Err(FsError::Invalid("the tree to attach already has a name"));
        }
        check_project_move(dir.project, parent_inode.project)?;
        let delta = txn.subtree_delta(&dir)?;
        dir.parent = parent;
        txn.put_inode(&dir);
        txn.dir_moved(root);
        txn.put_entry(parent, name, root, FileKind::Directory);
        txn.touch_parent(&mut parent_inode, 1, 1);
        txn.name_added(parent, delta);
        txn.delete(Space::Meta, keys::reclaim_key(root));
        txn.commit()?;
        self.reclaim_signal().release(root);
        Ok(())
    }

    /// Gives up the staged tree `root`: the reclaimer deletes it (on an unmounted store,
    /// follow with `reclaim_all`).
    pub fn abandon_tree(self: &Arc<Self>, root: u64) {
        self.reclaim_signal().release(root);
        self.start_reclaim();
    }
}

/// Directories this batch created (not ones it found and kept): every name in them is in
/// the batch, so looking one up needs no store read.
#[derive(Default)]
struct FreshDirs(HashSet<u64>);

impl FreshDirs {
    fn contains(&self, dir: u64) -> bool {
        self.0.contains(&dir)
    }
}

fn set_attrs(inode: &mut Inode, attrs: &BulkAttrs) {
    inode.perm = attrs.perm & 0o7777;
    inode.uid = attrs.uid;
    inode.gid = attrs.gid;
    inode.atime = attrs.atime;
    inode.mtime = attrs.mtime;
}

impl Txn<'_> {
    /// Runs one operation; `[made, earlier]`: the inodes this batch and the one before
    /// it made, for `NodeRef::New` and `NodeRef::Earlier`.
    fn bulk_op(
        &mut self,
        op: BulkOp,
        [made, earlier]: [&[u64]; 2],
        fresh: &mut FreshDirs,
    ) -> FsResult<u64> {
        let resolve = |node: &NodeRef| -> FsResult<u64> {
            let (inodes, index) = match *node {
                NodeRef::Ino(ino) => return Ok(ino),
                NodeRef::New(index) => (made, index),
                NodeRef::Earlier(index) => (earlier, index),
            };
            inodes
                .get(index)
                .copied()
                .filter(|&ino| ino != 0)
                .ok_or(FsError::Invalid("bulk operation refers to no new inode"))
        };
        match op {
            BulkOp::Make {
                parent,
                name,
                kind,
                rdev,
                target,
                attrs,
            } => {
                let new = NewInode {
                    kind,
                    perm: attrs.perm,
                    rdev,
                    target: &target,
                };
                self.bulk_make(resolve(&parent)?, &name, &new, &attrs, fresh)
            }
            BulkOp::Link {
                parent,
                name,
                target_dir,
                target_name,
            } => {
                self.bulk_link(
                    resolve(&parent)?,
                    &name,
                    resolve(&target_dir)?,
                    &target_name,
                )?;
                Ok(0)
            }
            BulkOp::Write { file, offset, data } => {
                self.bulk_write(resolve(&file)?, offset, data)?;
                Ok(0)
            }
            BulkOp::Xattr { node, name, value } => {
                self.bulk_xattr(resolve(&node)?, &name, value)?;
                Ok(0)
            }
            BulkOp::Attrs { node, attrs } => {
                self.bulk_attrs(resolve(&node)?, &attrs)?;
                Ok(0)
            }
        }
    }

    fn bulk_make(
        &mut self,
        parent: u64,
        name: &[u8],
        new: &NewInode<'_>,
        attrs: &BulkAttrs,
        fresh: &mut FreshDirs,
    ) -> FsResult<u64> {
        check_name(name)?;
        if new.kind == FileKind::Symlink && new.target.len() > SYMLINK_MAX_BYTES {
            return Err(FsError::NameTooLong);
        }
        let mut parent_inode = self.directory(parent)?;
        let existing = if fresh.contains(parent) {
            self.batch_entry(parent, name)?
        } else {
            self.entry(parent, name)?
        };
        if let Some((existing, kind)) = existing {
            if kind == FileKind::Directory && new.kind == FileKind::Directory {
                self.bulk_attrs(existing, attrs)?;
                return Ok(existing);
            }
            self.replace_name(&mut parent_inode, name, existing, kind)?;
        }
        let caller = Caller {
            uid: attrs.uid,
            gid: attrs.gid,
        };
        let mut inode = self.new_inode(&parent_inode, new, caller);
        set_attrs(&mut inode, attrs);
        let is_dir = new.kind == FileKind::Directory;
        self.put_inode(&inode);
        self.put_entry(parent, name, inode.ino, new.kind);
        self.touch_parent(&mut parent_inode, 1, i32::from(is_dir));
        self.name_added(parent, TreeDelta::one_name(&inode));
        self.charge(&inode, 1, 0);
        if is_dir {
            fresh.0.insert(inode.ino);
        }
        Ok(inode.ino)
    }

    /// Removes the non-directory `parent/name` that a new entry replaces.
    fn replace_name(
        &mut self,
        parent_inode: &mut Inode,
        name: &[u8],
        existing: u64,
        kind: FileKind,
    ) -> FsResult<()> {
        if kind == FileKind::Directory {
            return Err(FsError::IsDir);
        }
        let old = self.inode(existing)?;
        let parent = parent_inode.ino;
        self.delete_entry(parent, name);
        self.touch_parent(parent_inode, -1, 0);
        self.name_removed(parent, TreeDelta::one_name(&old));
        self.drop_link(old, parent)
    }

    fn bulk_link(
        &mut self,
        parent: u64,
        name: &[u8],
        target_dir: u64,
        target_name: &[u8],
    ) -> FsResult<()> {
        check_name(name)?;
        let (target, kind) = self
            .entry(target_dir, target_name)?
            .ok_or(FsError::NotFound)?;
        if kind == FileKind::Directory {
            return Err(FsError::NotPermitted("hard link to a directory"));
        }
        let mut parent_inode = self.directory(parent)?;
        if let Some((existing, existing_kind)) = self.entry(parent, name)? {
            if existing == target {
                return Ok(());
            }
            self.replace_name(&mut parent_inode, name, existing, existing_kind)?;
        }
        let mut inode = self.inode(target)?;
        self.link_added(&mut inode, parent)?;
        inode.nlink += 1;
        inode.ctime = self.now;
        self.put_inode(&inode);
        self.put_entry(parent, name, target, kind);
        self.touch_parent(&mut parent_inode, 1, 0);
        self.name_added(parent, TreeDelta::one_name(&inode));
        self.inode_changed(&inode, inode.size)
    }

    fn bulk_write(&mut self, file: u64, offset: u64, data: SharedBytes) -> FsResult<()> {
        if data.is_empty() {
            return Ok(());
        }
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(FsError::FileTooBig)?;
        if end > MAX_FILE_BYTES {
            return Err(FsError::FileTooBig);
        }
        let mut inode = self.inode(file)?;
        if inode.kind != FileKind::Regular {
            return Err(FsError::Invalid("write to a special file"));
        }
        let allocated_before = inode.allocated_bytes;
        let size_before = inode.size;
        let inline_max = self.engine.inline_max_bytes();
        match &mut inode.content {
            // A new small file's bytes become its inline content as they are.
            Content::Inline(bytes) if bytes.is_empty() && offset == 0 && end <= inline_max => {
                *bytes = data.to_vec();
                inode.size = end;
                inode.allocated_bytes = end;
            }
            Content::Inline(_) if end <= inline_max => write_inline(&mut inode, offset, &data),
            _ => {
                self.make_chunked(&mut inode);
                self.append_chunk(&mut inode, offset, data)?;
                inode.size = inode.size.max(end);
            }
        }
        self.charge(
            &inode,
            0,
            inode.allocated_bytes as i64 - allocated_before as i64,
        );
        self.put_inode(&inode);
        self.inode_changed(&inode, size_before)
    }

    fn bulk_xattr(&mut self, node: u64, name: &[u8], value: Vec<u8>) -> FsResult<()> {
        check_xattr_name(name)?;
        if value.len() > XATTR_VALUE_MAX_BYTES {
            return Err(FsError::Range);
        }
        let mut inode = self.inode(node)?;
        if crate::namespace::acl::is_acl_name(name) {
            self.set_acl(&mut inode, name, &value)?;
        } else {
            self.put(Space::Meta, keys::xattr_key(node, name), value);
            inode.may_have_xattrs = true;
        }
        self.put_inode(&inode);
        Ok(())
    }

    fn bulk_attrs(&mut self, node: u64, attrs: &BulkAttrs) -> FsResult<()> {
        let mut inode = self.inode(node)?;
        if inode.uid != attrs.uid || inode.gid != attrs.gid {
            // Usage moves with ownership, as in setattr; never refused.
            self.force_quota();
            self.charge(&inode, -1, -(inode.allocated_bytes as i64));
            inode.uid = attrs.uid;
            inode.gid = attrs.gid;
            self.charge(&inode, 1, inode.allocated_bytes as i64);
        }
        let perm_changed = inode.perm != attrs.perm & 0o7777;
        set_attrs(&mut inode, attrs);
        if perm_changed && inode.may_have_xattrs {
            self.chmod_acl(&inode)?;
        }
        self.put_inode(&inode);
        Ok(())
    }
}
