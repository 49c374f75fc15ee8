//! Opens without round trips: the kernel can open and close regular files without asking
//! the daemon (FUSE's `no_open`, set when an OPEN is answered with ENOSYS). From then on an
//! open of an existing file costs no OPEN, and no close of any file, created ones
//! included, costs a RELEASE: `cp -a` sends about three requests per file fewer, a read
//! two, a create one. The mount provokes that first OPEN itself as soon as it serves
//! (`skip_opens_from_the_start`), so a mount that only creates files (fs_mark, bonnie,
//! `tar x` into an empty tree) saves its RELEASEs too.
//!
//! What per-open requests gave, and how it is kept without them:
//! - unlink while open: the engine counts every inode the kernel still holds as open and
//!   takes its FORGET as the last close (`Engine::opens_untracked`);
//! - O_TRUNC: done by the kernel's own SETATTR, since FUSE_ATOMIC_O_TRUNC is not offered
//!   (with it, a skipped OPEN would skip the truncation too);
//! - byte quotas: a file whose owner has a byte limit is opened with FOPEN_DIRECT_IO, so
//!   EDQUOT reaches the `write` that exceeds it. CREATE is always answered, so new files
//!   keep that. OPEN is answered with ENOSYS only while no byte limit exists (a store
//!   mounted with byte limits gets every OPEN), and the kernel then stops sending opens
//!   until unmount: byte limits set on the live mount apply at `write` to new files, and
//!   when the kernel writes back to files that existed (`close` and `fsync` report EDQUOT,
//!   nothing of the refused write is stored) until the next mount.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use shoal_engine::Engine;

#[derive(Default)]
pub struct OpenRequests {
    /// The kernel accepts ENOSYS for OPEN (FUSE_NO_OPEN_SUPPORT at init).
    skippable: bool,
    /// ENOSYS was answered once: the kernel sends no OPEN or RELEASE any more.
    skipped: AtomicBool,
}

impl OpenRequests {
    /// Whether the kernel can do without opens (decided at init).
    pub fn new(skippable: bool) -> Self {
        Self {
            skippable,
            skipped: AtomicBool::new(false),
        }
    }

    /// Whether FUSE_ATOMIC_O_TRUNC may be offered: only while every open reaches us.
    pub fn atomic_truncate(&self) -> bool {
        !self.skippable
    }

    /// Whether to answer this OPEN with ENOSYS (the kernel then sends no other).
    pub fn skip(&self, engine: &Engine) -> bool {
        if self.skipped.load(Ordering::Acquire) {
            return true;
        }
        if !self.skippable || engine.byte_limits_exist() {
            return false;
        }
        // Before the kernel can open anything without us: from here on its references
        // are the open files.
        engine.opens_untracked();
        self.skipped.store(true, Ordering::Release);
        tracing::info!("opens without requests from now on (FUSE no_open)");
        true
    }
}

/// Lets the kernel skip OPEN and RELEASE from the mount's first request on, instead of
/// from the first open of an existing file: it opens an unnamed file (O_TMPFILE) in
/// `mountpoint` and reopens it by its /proc link, an OPEN the daemon answers as above.
/// Without it a mount that only creates files (fs_mark, bonnie, `tar x` into an empty
/// tree) pays a RELEASE per file. The file is gone at its close (its FORGET).
/// Call it from a thread other than the ones serving the mount, once serving started.
pub fn skip_opens_from_the_start(mountpoint: &Path) -> io::Result<()> {
    let unnamed = OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(mountpoint)?;
    let by_link = Path::new("/proc/self/fd").join(unnamed.as_raw_fd().to_string());
    File::open(by_link)?;
    Ok(())
}
