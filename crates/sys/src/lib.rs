//! What the kernel says about mounts and filesystems, read in one place for every shoal
//! crate (the engine, the FUSE adapter, the CLI, the bench harness and the tests):
//! `/proc/self/mountinfo`, the `shoal mount` processes serving a mountpoint, statvfs and
//! the coarse clock, who this process is, users and groups, extended attributes, CPUs,
//! signals, unmount and remount. The unsafe calls into libc live here, behind safe functions, so the crates
//! above call the kernel without `unsafe`.
//! It depends on nothing of shoal, so the bench harness can use it and still look at the
//! system only from outside.

mod c_path;
pub mod clock;
pub mod cpu;
pub mod identity;
pub mod mount_calls;
pub mod mounts;
pub mod peer;
pub mod process;
pub mod signals;
pub mod statvfs;
pub mod users;
pub mod xattr;
