//! shoal's FUSE adapter: kernel requests in, engine calls out. It owns the caching policy
//! (timeouts, writeback cache, readdirplus) and the kernel's lookup counts; it never sees a
//! store key.

mod attr;
mod dir_cursor;
mod errno;
mod filesystem;
mod fuse_stats;
mod heap;
mod invalidate;
mod lookup_counts;
mod memory_budget;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use shoal_engine::Engine;

pub use errno::errno;
pub use filesystem::ShoalFs;
pub use fuse_stats::{FuseOp, FuseStats, FuseStatsSnapshot, FUSE_OPS};
pub use heap::{heap_bytes, release_heap_in_background, HeapBytes};
pub use invalidate::EntryInvalidator;
pub use memory_budget::resident_bytes;

/// How a filesystem is presented to the kernel.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Threads reading `/dev/fuse` (each with its own cloned fd).
    pub threads: usize,
    pub read_only: bool,
    pub allow_other: bool,
    /// Shown as the mount's source in /proc/mounts.
    pub fsname: String,
    /// Where `statfs` reads capacity from (the store's directory); `None`: RAM.
    pub capacity_path: Option<PathBuf>,
    /// Bound on the kernel-reference table plus the engine's block cache; `None`: no bound.
    pub memory_budget_bytes: Option<u64>,
    /// Ask for the kernel's writeback cache (writes gathered in the page cache, times kept
    /// by the kernel).
    pub writeback_cache: bool,
    /// Offer FUSE over io_uring: requests handed over on the caller's CPU (Linux 6.14+, with
    /// the fuse module's `enable_uring` set; otherwise /dev/fuse is used).
    pub io_uring: bool,
}

impl Default for MountConfig {
    fn default() -> Self {
        Self {
            threads: 2,
            read_only: false,
            allow_other: false,
            fsname: "shoal".into(),
            capacity_path: None,
            memory_budget_bytes: None,
            writeback_cache: true,
            io_uring: true,
        }
    }
}

/// Mounts `engine` at `mountpoint`. The mount is live (the kernel handshake is done) when
/// this returns; `run` then serves requests until unmount. Request counts and latencies go
/// to `stats`.
pub fn mount(
    engine: Arc<Engine>,
    mountpoint: &Path,
    config: &MountConfig,
    stats: Arc<FuseStats>,
) -> io::Result<fuser::Session<ShoalFs>> {
    let mut options = vec![
        fuser::MountOption::FSName(config.fsname.clone()),
        fuser::MountOption::Subtype("shoal".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoAtime,
    ];
    if config.read_only {
        options.push(fuser::MountOption::RO);
    }
    let mut fuse_config = fuser::Config::default();
    fuse_config.mount_options = options;
    fuse_config.n_threads = Some(config.threads.max(1));
    fuse_config.clone_fd = true;
    if config.allow_other {
        fuse_config.acl = fuser::SessionACL::All;
    }
    let filesystem = ShoalFs::new(engine, config.capacity_path.clone(), stats)
        .with_writeback_cache(config.writeback_cache)
        .with_io_uring(config.io_uring);
    fuser::Session::new(filesystem, mountpoint, &fuse_config)
}

/// Starts enforcing `config.memory_budget_bytes` (if set) on a mounted session.
pub fn start_memory_budget(
    session: &fuser::Session<ShoalFs>,
    engine: &Arc<Engine>,
    config: &MountConfig,
    stats: Arc<FuseStats>,
) -> io::Result<()> {
    match config.memory_budget_bytes {
        Some(budget_bytes) => memory_budget::spawn(
            budget_bytes,
            Arc::downgrade(engine),
            stats,
            session.notifier(),
        ),
        None => Ok(()),
    }
}

/// Serves requests until the filesystem is unmounted; the engine is synced on the way out.
pub fn run(session: fuser::Session<ShoalFs>) -> io::Result<()> {
    session.run()
}
