//! File handles (name_to_handle_at, NFS export): the kernel names an inode by its number
//! alone and asks for it, and for a directory's parent, without a path. Inode numbers are
//! never handed out twice (see `keys::next_ino_key`), so a number with generation 0 names
//! one inode forever.

use crate::engine::Engine;
use crate::error::{FsError, FsResult};
use crate::records::inode::{FileKind, Inode};

impl Engine {
    /// The inode a handle names, if it still has a name somewhere. An inode removed but
    /// still open is not reachable by handle (the handle is stale), as on local
    /// filesystems.
    pub fn inode_by_handle(&self, ino: u64) -> FsResult<Inode> {
        let inode = self.read_inode(ino)?;
        if inode.nlink == 0 {
            return Err(FsError::NotFound);
        }
        Ok(inode)
    }

    /// The directory holding directory `dir` (the root is its own parent).
    pub fn parent_of(&self, dir: u64) -> FsResult<Inode> {
        let inode = self.read_inode(dir)?;
        if inode.kind != FileKind::Directory {
            return Err(FsError::NotDir);
        }
        self.read_inode(inode.parent)
    }
}
