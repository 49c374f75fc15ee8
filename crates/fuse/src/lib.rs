//! shoal's FUSE adapter: kernel requests in, engine calls out. It owns the caching policy
//! (timeouts, writeback cache, readdirplus) and the kernel's lookup counts; it never sees a
//! store key.

mod attr;
mod busy_wait;
mod dir_offsets;
mod errno;
mod filesystem;
mod fuse_stats;
mod heap;
mod invalidate;
mod keep_awake;
mod lookup_counts;
mod memory_budget;
mod open_requests;
mod other_door;
mod sync_waiters;

use shoal_engine::Engine;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use busy_wait::{BusyWait, BusyWaitAsked, SPIN_WINDOW};
pub use errno::errno;
pub use filesystem::ShoalFs;
pub use fuse_stats::{FuseOp, FuseStats, FuseStatsSnapshot, FUSE_OPS};
pub use heap::{heap_bytes, release_heap_in_background, HeapBytes};
pub use invalidate::{ChildNames, EntryInvalidator};
pub use memory_budget::resident_bytes;
pub use open_requests::skip_opens_from_the_start;
pub use other_door::{yield_to_other_door, OtherDoorChanges};

/// How a filesystem is presented to the kernel.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Threads reading `/dev/fuse` (each with its own cloned fd).
    pub threads: usize,
    pub read_only: bool,
    pub allow_other: bool,
    /// Shown as the mount's source in /proc/mounts.
    pub fsname: String,
    /// The mount's type is `fuse.SUBTYPE`.
    pub subtype: String,
    /// Generic flags for the kernel to apply to the mount; a later flag overrides an
    /// earlier opposite one.
    pub kernel_flags: Vec<KernelFlag>,
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
    /// Spinners that keep the CPUs from halting while requests flow (`keep_awake`), and,
    /// with FUSE over io_uring, serving a lone caller's requests from another CPU that
    /// polls for them (vendor/fuser's `ring_follow.rs`; needs `/dev/cpu_dma_latency`,
    /// root): chosen by `BusyWait::decide`.
    pub busy_wait: BusyWait,
}

impl Default for MountConfig {
    fn default() -> Self {
        Self {
            threads: 2,
            read_only: false,
            allow_other: false,
            fsname: "shoal".into(),
            subtype: "shoal".into(),
            kernel_flags: Vec::new(),
            capacity_path: None,
            memory_budget_bytes: None,
            writeback_cache: true,
            io_uring: true,
            busy_wait: BusyWait::off("the default of a library mount"),
        }
    }
}

/// A generic mount flag (mount(8)'s `nosuid`, `noexec`, ...), applied by the kernel.
/// Without `Dev` or `Suid` a FUSE mount is `nodev,nosuid`; without an atime flag shoal mounts
/// `noatime` (FUSE never updates access times anyway).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelFlag {
    Dev,
    NoDev,
    Suid,
    NoSuid,
    Exec,
    NoExec,
    Atime,
    NoAtime,
}

impl KernelFlag {
    fn option(self) -> fuser::MountOption {
        match self {
            KernelFlag::Dev => fuser::MountOption::Dev,
            KernelFlag::NoDev => fuser::MountOption::NoDev,
            KernelFlag::Suid => fuser::MountOption::Suid,
            KernelFlag::NoSuid => fuser::MountOption::NoSuid,
            KernelFlag::Exec => fuser::MountOption::Exec,
            KernelFlag::NoExec => fuser::MountOption::NoExec,
            KernelFlag::Atime => fuser::MountOption::Atime,
            KernelFlag::NoAtime => fuser::MountOption::NoAtime,
        }
    }

    fn opposite(self) -> KernelFlag {
        match self {
            KernelFlag::Dev => KernelFlag::NoDev,
            KernelFlag::NoDev => KernelFlag::Dev,
            KernelFlag::Suid => KernelFlag::NoSuid,
            KernelFlag::NoSuid => KernelFlag::Suid,
            KernelFlag::Exec => KernelFlag::NoExec,
            KernelFlag::NoExec => KernelFlag::Exec,
            KernelFlag::Atime => KernelFlag::NoAtime,
            KernelFlag::NoAtime => KernelFlag::Atime,
        }
    }
}

/// The flags in force: the last of each opposite pair given, and `noatime` by default
/// (fuser refuses a pair as conflicting).
fn effective_flags(given: &[KernelFlag]) -> Vec<KernelFlag> {
    let mut flags: Vec<KernelFlag> = vec![KernelFlag::NoAtime];
    for &flag in given {
        flags.retain(|&kept| kept != flag && kept != flag.opposite());
        flags.push(flag);
    }
    flags
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
        fuser::MountOption::Subtype(config.subtype.clone()),
        fuser::MountOption::DefaultPermissions,
    ];
    options.extend(
        effective_flags(&config.kernel_flags)
            .into_iter()
            .map(KernelFlag::option),
    );
    if config.read_only {
        options.push(fuser::MountOption::RO);
    }
    let mut fuse_config = fuser::Config::default();
    fuse_config.mount_options = options;
    fuse_config.n_threads = Some(config.threads.max(1));
    fuse_config.clone_fd = true;
    fuse_config.ring_follow = config.busy_wait.follow;
    if config.allow_other {
        fuse_config.acl = fuser::SessionACL::All;
    }
    let filesystem = ShoalFs::new(engine, config.capacity_path.clone(), stats.clone())
        .with_writeback_cache(config.writeback_cache)
        .with_io_uring(config.io_uring);
    let keep_awake = filesystem.keep_awake().clone();
    let mode_notifier = filesystem.mode_notifier().clone();
    let session = fuser::Session::new(filesystem, mountpoint, &fuse_config)?;
    // Before any request can be served: `run` has not started yet.
    let _ = mode_notifier.set(session.notifier());
    keep_awake::spawn(config.busy_wait.spin_window, &keep_awake, &stats)?;
    Ok(session)
}

/// Threads serving each CPU's queue with FUSE over io_uring (sized for the machine).
pub fn ring_threads_per_queue() -> usize {
    fuser::ring_threads_per_queue()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_flags_override_opposite_ones() {
        assert_eq!(effective_flags(&[]), [KernelFlag::NoAtime]);
        assert_eq!(
            effective_flags(&[KernelFlag::NoExec, KernelFlag::Atime, KernelFlag::Exec]),
            [KernelFlag::Atime, KernelFlag::Exec]
        );
    }
}
