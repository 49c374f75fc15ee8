//! Opens without round trips: the kernel can open and close regular files without asking
//! the daemon (FUSE's `no_open`, set when an OPEN is answered with ENOSYS). From then on an
//! open of an existing file costs no OPEN, and no close of any file, created ones
//! included, costs a RELEASE: `cp -a` sends about three requests per file fewer, a read
//! two, a create one.
//!
//! What per-open requests gave, and how it is kept without them:
//! - unlink while open: the engine counts every inode the kernel still holds as open and
//!   takes its FORGET as the last close (`Engine::opens_untracked`);
//! - O_TRUNC: done by the kernel's own SETATTR, since FUSE_ATOMIC_O_TRUNC is not offered
//!   (with it, a skipped OPEN would skip the truncation too);
//! - byte quotas: a file whose owner has a byte limit is opened with FOPEN_DIRECT_IO, so
//!   EDQUOT reaches the `write` that exceeds it. CREATE is always answered, so new files
//!   keep that. OPEN is answered with ENOSYS only while no byte limit exists, and the
//!   kernel then stops sending opens until unmount: byte limits set after that apply at
//!   `write` to new files, and when the kernel writes back to files that existed (`close`
//!   and `fsync` report EDQUOT) until the next mount.

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
