//! What the kernel says is mounted, and which process serves a shoal mount: read in one
//! place for every crate, `shoal_sys::mounts`.

pub use shoal_sys::mounts::{absolute, daemon_pids, mount_at, mount_table};
