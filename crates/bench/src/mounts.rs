//! What the kernel says is mounted (/proc/self/mountinfo), and which `shoal mount` process
//! serves a mountpoint: `shoal_sys::mounts`, shared with the CLI and the tests (the bench
//! library depends on neither the CLI nor the engine).

pub use shoal_sys::mounts::{
    daemon_pids as shoal_daemon_pids, is_mountpoint, mount_of, mount_table, MountInfo,
};
