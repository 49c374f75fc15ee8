//! FUSE export support: the kernel resolves a file handle (name_to_handle_at, NFS) whose
//! inode it no longer caches by looking up "." in that inode, and a directory's parent by
//! looking up "..".

use fuser::ReplyEntry;
use shoal_engine::FsResult;
use shoal_engine::Inode;

use super::{file_attr, is_directory, ShoalFs, ENTRY_TTL, GENERATION};
use crate::errno::errno;

impl ShoalFs {
    /// Answers a lookup of "." or ".." in `parent`; `None` for any other name.
    pub(super) fn lookup_dots(&self, parent: u64, name: &[u8]) -> Option<ReplyDots> {
        let result = match name {
            b"." => self.engine.inode_by_handle(parent),
            b".." => self.engine.parent_of(parent),
            _ => return None,
        };
        Some(ReplyDots(result))
    }

    pub(super) fn reply_dots(&self, reply: ReplyEntry, dots: ReplyDots) {
        match dots.0 {
            Ok(inode) => {
                self.lookups.add_unnamed(inode.ino, is_directory(&inode));
                reply.entry(&ENTRY_TTL, &file_attr(&inode), GENERATION);
            }
            // No such inode (any more): the kernel answers ESTALE for the handle.
            Err(error) => reply.error(errno(&error)),
        }
    }
}

pub(super) struct ReplyDots(FsResult<Inode>);
