//! What the kernel says about mounts and filesystems, read in one place for every shoal
//! crate (the engine, the FUSE adapter, the CLI, the bench harness and the tests):
//! `/proc/self/mountinfo`, the `shoal mount` processes serving a mountpoint, statvfs and
//! the coarse clock. The unsafe calls into libc live here, so the engine has none.
//! It depends on nothing of shoal, so the bench harness can use it and still look at the
//! system only from outside.

pub mod clock;
pub mod mounts;
pub mod peer;
pub mod statvfs;
