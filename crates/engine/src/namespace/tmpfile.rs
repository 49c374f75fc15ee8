//! O_TMPFILE: a regular file created open and without a name, which `linkat` may later
//! give one (Swift's object server writes every object that way). Until then it is an
//! orphan, as a file unlinked while open: its last release deletes it, and a crash leaves
//! it for the purge at the next mount.

use crate::engine::{Caller, Engine};
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::namespace::NewInode;
use crate::records::inode::{FileKind, Inode};
use crate::stats::Op;
use crate::store::Space;

impl Engine {
    /// Creates an unnamed regular file in directory `parent` (its group, project and
    /// default ACL come from there) and counts it open once: the caller's `release_file`
    /// ends it unless `link` named it first.
    /// `umask` as in `create_masked`.
    pub fn tmpfile(
        &self,
        parent: u64,
        new: &NewInode<'_>,
        umask: u16,
        caller: Caller,
    ) -> FsResult<Inode> {
        self.stats().count(Op::Create);
        if new.kind != FileKind::Regular {
            return Err(FsError::Invalid("O_TMPFILE makes regular files only"));
        }
        let mut txn = self.begin()?;
        let parent_inode = txn.directory(parent)?;
        if parent_inode.nlink == 0 {
            return Err(FsError::NotFound);
        }
        let mut inode = txn.new_inode(&parent_inode, new, caller);
        inode.nlink = 0;
        // No name, so no parent: a file's parent field names its one directory only while
        // it has exactly one name (`link` sets it from the directory it is linked into).
        // fsck checks that, also on the orphan a crash leaves here.
        inode.parent = 0;
        txn.inherit_acls(&parent_inode, &mut inode, umask)?;
        txn.put_inode(&inode);
        txn.put(Space::Meta, keys::orphan_key(inode.ino), Vec::new());
        txn.charge(&inode, 1, 0);
        txn.commit()?;
        // Nobody else knows the number yet: no release can come before this.
        self.open_new_orphan(inode.ino);
        Ok(inode)
    }
}
