//! Telling the kernel that names changed behind its back (a whole tree removed by the
//! control socket's `rmtree`, or made by `import`), so it drops its cached dentries,
//! inodes and attributes.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;

use fuser::{INodeNo, Notifier};

use crate::ShoalFs;

/// Sends FUSE_NOTIFY_INVAL_ENTRY for names the kernel may have cached.
pub struct EntryInvalidator {
    notifier: Notifier,
}

impl EntryInvalidator {
    pub fn new(session: &fuser::Session<ShoalFs>) -> Self {
        EntryInvalidator {
            notifier: session.notifier(),
        }
    }

    /// The kernel forgets `parent/name` (and, for a directory, every dentry below it).
    /// A name it had not cached is no error.
    pub fn forget_name(&self, parent: u64, name: &[u8]) -> io::Result<()> {
        match self
            .notifier
            .inval_entry(INodeNo(parent), OsStr::from_bytes(name))
        {
            Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            other => other,
        }
    }

    /// The kernel forgets the attributes it cached for `ino` (a directory whose entries
    /// changed behind its back: its size, link count and times). An inode it does not
    /// hold is no error.
    pub fn forget_attrs(&self, ino: u64) -> io::Result<()> {
        // A negative offset invalidates the attributes only, not cached data.
        match self.notifier.inval_inode(INodeNo(ino), -1, 0) {
            Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            other => other,
        }
    }
}
