//! rename(2) and renameat2(2): plain, RENAME_NOREPLACE and RENAME_EXCHANGE, as one batch.

use crate::engine::tree_usage::TreeDelta;
use crate::engine::{check_name, Engine, Txn};
use crate::error::{FsError, FsResult};
use crate::records::inode::{FileKind, ROOT_INO};
use crate::stats::Op;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenameMode {
    /// Replace an existing target (an empty directory with a directory).
    Replace,
    /// Fail with `Exists` if the target exists.
    NoReplace,
    /// Swap source and target atomically; both must exist.
    Exchange,
}

/// Bound on directory depth when walking up; deeper means a cycle, i.e. corruption.
const MAX_DEPTH: usize = 1 << 20;

/// Net changes to one directory: entries (its size) and subdirectories (its links).
#[derive(Default, Clone, Copy)]
struct DirDelta {
    entries: i64,
    subdirs: i32,
}

/// What a rename put where, for callers that track names (the FUSE adapter's table of
/// kernel references).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renamed {
    /// The inode now at the new name.
    pub moved: u64,
    /// With `RenameMode::Exchange`: the inode now at the old name.
    pub exchanged: Option<u64>,
}

impl Engine {
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        mode: RenameMode,
    ) -> FsResult<Renamed> {
        self.stats().count(Op::Rename);
        check_name(newname)?;
        let mut txn = self.begin()?;
        let from_project = txn.directory(parent)?.project;
        let to_project = txn.directory(newparent)?.project;
        let (src_ino, src_kind) = txn.entry(parent, name)?.ok_or(FsError::NotFound)?;
        let dst = txn.entry(newparent, newname)?;
        if src_kind == FileKind::Directory {
            txn.refuse_move_into_itself(src_ino, newparent)?;
        }
        let (mut from, mut to) = (DirDelta::default(), DirDelta::default());
        let mut renamed = Renamed {
            moved: src_ino,
            exchanged: None,
        };
        match (mode, dst) {
            (RenameMode::Exchange, None) => return Err(FsError::NotFound),
            (RenameMode::Exchange, Some((dst_ino, dst_kind))) => {
                if dst_kind == FileKind::Directory {
                    txn.refuse_move_into_itself(dst_ino, parent)?;
                }
                let src_dir = i32::from(src_kind == FileKind::Directory);
                let dst_dir = i32::from(dst_kind == FileKind::Directory);
                txn.put_entry(parent, name, dst_ino, dst_kind);
                txn.put_entry(newparent, newname, src_ino, src_kind);
                let (src_delta, dst_delta) = (txn.name_delta(src_ino)?, txn.name_delta(dst_ino)?);
                txn.name_removed(parent, src_delta);
                txn.name_added(newparent, src_delta);
                txn.name_removed(newparent, dst_delta);
                txn.name_added(parent, dst_delta);
                let crosses = parent != newparent;
                txn.reparent(dst_ino, newparent, parent, crosses.then_some(from_project))?;
                txn.reparent(src_ino, parent, newparent, crosses.then_some(to_project))?;
                from.subdirs += dst_dir - src_dir;
                to.subdirs += src_dir - dst_dir;
                renamed.exchanged = Some(dst_ino);
            }
            (RenameMode::NoReplace, Some(_)) => return Err(FsError::Exists),
            (_, dst) => {
                if let Some((dst_ino, dst_kind)) = dst {
                    if dst_ino == src_ino {
                        // Two links to one inode: POSIX says do nothing.
                        return Ok(renamed);
                    }
                    txn.remove_rename_target(newparent, dst_ino, dst_kind, src_kind)?;
                    to.entries -= 1;
                    to.subdirs -= i32::from(dst_kind == FileKind::Directory);
                }
                txn.delete_entry(parent, name);
                txn.put_entry(newparent, newname, src_ino, src_kind);
                let delta = txn.name_delta(src_ino)?;
                txn.name_removed(parent, delta);
                txn.name_added(newparent, delta);
                let crosses = parent != newparent;
                txn.reparent(src_ino, parent, newparent, crosses.then_some(to_project))?;
                let src_dir = i32::from(src_kind == FileKind::Directory);
                from.entries -= 1;
                from.subdirs -= src_dir;
                to.entries += 1;
                to.subdirs += src_dir;
            }
        }
        txn.apply_dir_deltas(parent, from, newparent, to)?;
        txn.commit()?;
        self.finish_purges();
        Ok(renamed)
    }
}

/// XFS's rule: a directory tagged with a project (inheriting it to new children) admits
/// only inodes of that project; anything else must be copied in (EXDEV), so that usage is
/// accounted to the project it ends up in.
pub(crate) fn check_project_move(inode_project: u32, dir_project: u32) -> FsResult<()> {
    if dir_project != 0 && inode_project != dir_project {
        return Err(FsError::CrossProject);
    }
    Ok(())
}

impl Txn<'_> {
    /// EINVAL when `dir` would become its own descendant by moving into `new_parent`.
    fn refuse_move_into_itself(&self, dir: u64, new_parent: u64) -> FsResult<()> {
        let mut current = new_parent;
        for _ in 0..MAX_DEPTH {
            if current == dir {
                return Err(FsError::Invalid("cannot move a directory into itself"));
            }
            if current == ROOT_INO {
                return Ok(());
            }
            current = self.inode(current)?.parent;
        }
        Err(FsError::Corrupt(format!(
            "directory cycle above inode {new_parent}"
        )))
    }

    /// Moves an inode's parent pointer (or link parent record) from `old_parent` to
    /// `new_parent`; stamps ctime on any moved inode. When it moves to another directory,
    /// that directory's project must admit it.
    fn reparent(
        &mut self,
        ino: u64,
        old_parent: u64,
        new_parent: u64,
        new_project: Option<u32>,
    ) -> FsResult<()> {
        let mut inode = self.inode(ino)?;
        if let Some(project) = new_project {
            check_project_move(inode.project, project)?;
        }
        if inode.kind == FileKind::Directory {
            if inode.parent != new_parent {
                inode.parent = new_parent;
                self.dir_moved(ino);
            }
        } else {
            self.link_moved(&mut inode, old_parent, new_parent)?;
        }
        inode.ctime = self.now;
        self.put_inode(&inode);
        self.inode_changed(&inode, inode.size)
    }

    /// What the name of `ino` carries from one directory to another: itself, and its
    /// subtree if it is a directory.
    fn name_delta(&self, ino: u64) -> FsResult<TreeDelta> {
        let inode = self.inode(ino)?;
        if inode.kind == FileKind::Directory {
            self.subtree_delta(&inode)
        } else {
            Ok(TreeDelta::one_name(&inode))
        }
    }

    /// Removes the inode a rename replaces, after the type checks rename(2) requires.
    fn remove_rename_target(
        &mut self,
        parent: u64,
        ino: u64,
        kind: FileKind,
        src_kind: FileKind,
    ) -> FsResult<()> {
        let target = self.inode(ino)?;
        match (src_kind == FileKind::Directory, kind == FileKind::Directory) {
            (true, false) => Err(FsError::NotDir),
            (false, true) => Err(FsError::IsDir),
            (true, true) => {
                if target.size > 0 {
                    return Err(FsError::NotEmpty);
                }
                debug_assert_eq!(target.parent, parent);
                self.name_removed(parent, TreeDelta::one_name(&target));
                self.purge_inode(ino)
            }
            (false, false) => {
                self.name_removed(parent, TreeDelta::one_name(&target));
                self.drop_link(target, parent)
            }
        }
    }

    fn apply_dir_deltas(
        &mut self,
        parent: u64,
        from: DirDelta,
        newparent: u64,
        to: DirDelta,
    ) -> FsResult<()> {
        if parent == newparent {
            let both = DirDelta {
                entries: from.entries + to.entries,
                subdirs: from.subdirs + to.subdirs,
            };
            let mut dir = self.inode(parent)?;
            self.touch_parent(&mut dir, both.entries, both.subdirs);
            return Ok(());
        }
        let mut from_dir = self.inode(parent)?;
        self.touch_parent(&mut from_dir, from.entries, from.subdirs);
        let mut to_dir = self.inode(newparent)?;
        self.touch_parent(&mut to_dir, to.entries, to.subdirs);
        Ok(())
    }
}
