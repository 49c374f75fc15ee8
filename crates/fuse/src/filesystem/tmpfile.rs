//! FUSE_TMPFILE: `open(O_TMPFILE)` creates an unnamed open file (see the engine's
//! `tmpfile`); `linkat` later names it through the ordinary LINK request.

use fuser::{FileHandle, ReplyCreate, Request};
use shoal_engine::{FileKind, NewInode};

use super::{caller, file_attr, ShoalFs, ENTRY_TTL, GENERATION};
use crate::errno::errno;

impl ShoalFs {
    pub(super) fn create_tmpfile(
        &self,
        req: &Request,
        parent: u64,
        mode: u32,
        umask: u16,
        reply: ReplyCreate,
    ) {
        let new = NewInode {
            kind: FileKind::Regular,
            perm: (mode & 0o7777) as u16,
            rdev: 0,
            target: b"",
        };
        match self.engine.tmpfile(parent, &new, umask, caller(req)) {
            Ok(inode) => {
                // The kernel holds the inode from here; it has no name to evict it by
                // until a link gives it one.
                self.lookups.add_unnamed(inode.ino, false);
                reply.created(
                    &ENTRY_TTL,
                    &file_attr(&inode),
                    GENERATION,
                    FileHandle(0),
                    self.file_open_flags(inode.ino),
                );
            }
            Err(error) => reply.error(errno(&error)),
        }
    }
}
