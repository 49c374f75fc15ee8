//! `shoal mount`: checks, then (unless --foreground) a daemon that reports back through a
//! pipe once the mount is live, so the command returns only when the filesystem is usable.

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::FromRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use shoal_engine::store_dir::{self, StoreDirError};
use shoal_engine::{defaults, Engine, EngineConfig, FjallTuning, OpenError};
use shoal_fuse::{FuseStats, MountConfig};
use shoal_sys::signals::BlockedSignals;

use crate::control::{self, ControlHandler, ControlRequest, RequestContext};
use crate::log_file::{self, RotatingLog};
use crate::metrics_http;
use crate::mount_options::{self, MountOptions};
use crate::mounts;
use crate::stats_report::StatsSource;

/// How long a mount waits for a previous daemon of the same store to let go of it (a plain
/// `umount` returns before the daemon has finished its final sync).
const LOCK_WAIT: Duration = Duration::from_secs(5);

struct MountRequest {
    store: Option<PathBuf>,
    mountpoint: PathBuf,
    options: MountOptions,
}

pub fn run(
    paths: &[PathBuf],
    memory: bool,
    options: &[String],
    foreground: bool,
) -> Result<ExitCode> {
    let (store, mountpoint) = match (memory, paths) {
        (true, [mountpoint]) => (None, mountpoint),
        (false, [store, mountpoint]) => (Some(mounts::absolute(store)), mountpoint),
        (true, _) => {
            bail!("with --memory give only MOUNTPOINT (usage: shoal mount --memory MOUNTPOINT)")
        }
        (false, _) => bail!("missing MOUNTPOINT (usage: shoal mount STORE_DIR MOUNTPOINT)"),
    };
    // Before the log file and the store's files are created (`store_dir::access`).
    crate::mkfs_cmd::set_private_umask();
    let request = MountRequest {
        store,
        mountpoint: mounts::absolute(mountpoint),
        options: mount_options::parse(options)?,
    };
    crate::fuse_access::check()?;
    check_mountpoint(&request.mountpoint)?;
    if let Some(store) = &request.store {
        store_dir::read_format(store)?;
        if let Some(warning) = shoal_engine::store_dir::access::warn_if_exposed(store) {
            eprintln!("shoal: warning: {warning}");
        }
    }
    if foreground {
        init_logging(None);
        serve(&request, &mut None)?;
        return Ok(ExitCode::SUCCESS);
    }
    daemonize(&request)
}

fn check_mountpoint(mountpoint: &Path) -> Result<()> {
    match std::fs::metadata(mountpoint) {
        Err(error) if error.raw_os_error() == Some(libc::ENOTCONN) => bail!(
            "{}: a dead FUSE mount is there (its daemon died); run `shoal umount {}` first",
            mountpoint.display(),
            mountpoint.display()
        ),
        Err(error) => {
            return Err(error).with_context(|| format!("mountpoint {}", mountpoint.display()))
        }
        Ok(meta) if !meta.is_dir() => {
            bail!("mountpoint {} is not a directory", mountpoint.display())
        }
        Ok(_) => {}
    }
    if let Some(existing) = mounts::mount_at(mountpoint) {
        bail!(
            "mountpoint {} is busy: {} ({}) is already mounted there",
            mountpoint.display(),
            existing.source,
            existing.fstype
        );
    }
    Ok(())
}

fn daemonize(request: &MountRequest) -> Result<ExitCode> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2(2) into a two-element array. CLOEXEC: a helper the daemon runs
    // (fusermount3) must not hold the write end and keep the parent waiting.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe");
    }
    // SAFETY: no other threads exist yet, so the child inherits a consistent process.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    // SAFETY: each side owns one end of the pipe from here on.
    let (mut read_end, write_end) =
        unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    if pid > 0 {
        drop(write_end);
        let bar = crate::progress_bar::opening(request.store.as_deref());
        let mut answer = String::new();
        let waited = read_end.read_to_string(&mut answer);
        bar.finish_and_clear();
        waited.context("waiting for the daemon")?;
        return match answer.strip_prefix("ok") {
            Some(_) => Ok(ExitCode::SUCCESS),
            None if answer.is_empty() => bail!("the daemon exited before the mount was live"),
            None => bail!("{}", answer.trim_end()),
        };
    }
    drop(read_end);
    // SAFETY: a new session so the daemon outlives the terminal it was started from.
    unsafe { libc::setsid() };
    let log = request
        .store
        .as_ref()
        .map(|store| store_dir::log_path(store));
    init_logging(log.as_deref());
    redirect_stdio_to_null();
    crate::exit_report::record(None);
    let mut ready = Some(write_end);
    let code = match serve(request, &mut ready) {
        Ok(()) => {
            crate::exit_report::record(None);
            0
        }
        Err(error) => {
            tracing::error!("{error:#}");
            match ready.take() {
                // Failed before the mount was live: the waiting parent says it.
                Some(mut pipe) => {
                    let _ = writeln!(pipe, "{error:#}");
                }
                // Failed while serving or at unmount: for `shoal umount`.
                None => crate::exit_report::record(Some(&format!("{error:#}"))),
            }
            1
        }
    };
    std::process::exit(code);
}

fn redirect_stdio_to_null() {
    let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    else {
        return;
    };
    use std::os::fd::AsRawFd;
    for fd in 0..3 {
        // SAFETY: dup2 onto the standard descriptors.
        unsafe { libc::dup2(null.as_raw_fd(), fd) };
    }
}

fn init_logging(file: Option<&Path>) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SHOAL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false);
    let log_file = file.and_then(|path| {
        RotatingLog::open(path, log_file::LOG_ROTATE_BYTES, log_file::LOG_KEPT_FILES).ok()
    });
    match log_file {
        Some(log_file) => {
            let _ = builder
                .with_writer(std::sync::Mutex::new(log_file))
                .try_init();
        }
        None => {
            let _ = builder.with_writer(std::io::stderr).try_init();
        }
    }
}

fn engine_config(options: &MountOptions) -> EngineConfig {
    EngineConfig {
        read_only: options.read_only,
        commit_interval: (!options.commit.is_zero()).then_some(options.commit),
        tuning: FjallTuning {
            cache_bytes: options.cache_bytes,
            memtable_bytes: options.memtable_bytes,
            worker_threads: options.compaction_threads,
            journal_bytes: options.journal_bytes,
            // The store exists: mkfs chose whether its data is compressed.
            compress_new_data: false,
        },
        checkpoint_bytes: options.checkpoint_bytes,
        read_cache_bytes: within_memory(defaults::READ_CACHE_BYTES, options.memory_bytes),
        listing_cache_bytes: within_memory(defaults::LISTING_CACHE_BYTES, options.memory_bytes),
    }
}

/// A cache's size within `-o memory=`: its default (the read cache's and the listing
/// cache's: 32 MiB each), or an eighth of a smaller budget.
fn within_memory(default_bytes: usize, memory_bytes: u64) -> usize {
    let share = usize::try_from(memory_bytes / 8).unwrap_or(usize::MAX);
    default_bytes.min(share)
}

fn open_engine(request: &MountRequest) -> Result<Arc<Engine>> {
    let config = engine_config(&request.options);
    let Some(store) = &request.store else {
        return Ok(Engine::open_memory(config)?);
    };
    let started = Instant::now();
    loop {
        match Engine::open(store, config.clone()) {
            Ok(engine) => return Ok(engine),
            Err(OpenError::StoreDir(StoreDirError::Locked(..)))
                if started.elapsed() < LOCK_WAIT =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Answers `shoal stats` (and later commands) about this mount.
struct DaemonControl {
    stats: Arc<StatsSource>,
    /// None for a RAM filesystem.
    store: Option<PathBuf>,
    /// Tells the kernel about names removed behind its back (rmtree).
    invalidator: Option<shoal_fuse::EntryInvalidator>,
}

impl ControlHandler for DaemonControl {
    fn handle(
        &self,
        request: &ControlRequest,
        _context: &RequestContext,
    ) -> Result<serde_json::Value, String> {
        match request {
            ControlRequest::Stats | ControlRequest::HeapStats => {
                match self.stats.report(request == &ControlRequest::HeapStats) {
                    Some(report) => serde_json::to_value(report).map_err(|error| error.to_string()),
                    None => Err("the filesystem is unmounting".into()),
                }
            }
            ControlRequest::Info => match self.stats.engine.upgrade() {
                Some(engine) => crate::info_cmd::answer(&engine, self.store.clone())
                    .and_then(|info| serde_json::to_value(info).map_err(|e| e.to_string())),
                None => Err("the filesystem is unmounting".into()),
            },
            ControlRequest::Backup { path } => match self.stats.engine.upgrade() {
                Some(engine) => {
                    crate::backup_cmd::serve_backup(&engine, self.store.as_deref(), path)
                        .and_then(|answer| serde_json::to_value(answer).map_err(|e| e.to_string()))
                }
                None => Err("the filesystem is unmounting".into()),
            },
            ControlRequest::Quota(quota) => match self.stats.engine.upgrade() {
                Some(engine) => crate::quota_protocol::execute(&engine, quota),
                None => Err("the filesystem is unmounting".into()),
            },
            ControlRequest::Rmtree { path } => match self.stats.engine.upgrade() {
                Some(engine) => crate::rmtree_cmd::serve(&engine, self.invalidator.as_ref(), path),
                None => Err("the filesystem is unmounting".into()),
            },
            ControlRequest::ReclaimStatus => match self.stats.engine.upgrade() {
                Some(engine) => crate::rmtree_cmd::serve_status(&engine),
                None => Err("the filesystem is unmounting".into()),
            },
            ControlRequest::Import { .. }
            | ControlRequest::Export { .. }
            | ControlRequest::BackupStream => Err("a streaming request needs its stream".into()),
        }
    }

    fn handle_stream(
        &self,
        request: &ControlRequest,
        context: &RequestContext,
        input: &mut dyn std::io::Read,
        output: &mut dyn std::io::Write,
    ) -> Result<serde_json::Value, String> {
        let Some(engine) = self.stats.engine.upgrade() else {
            return Err("the filesystem is unmounting".into());
        };
        match request {
            ControlRequest::Import { path } => crate::import_cmd::serve_import(
                &engine,
                self.invalidator.as_ref(),
                path,
                context.peer,
                input,
            ),
            ControlRequest::Export { path } => {
                crate::import_cmd::serve_export(&engine, path, output)
            }
            ControlRequest::BackupStream => {
                crate::backup_cmd::serve_backup_stream(&engine, self.store.as_deref(), output)
                    .and_then(|answer| serde_json::to_value(answer).map_err(|e| e.to_string()))
            }
            other => self.handle(other, context),
        }
    }
}

/// Binds the metrics address now, so a taken port fails the mount with a message instead
/// of leaving a mount without its endpoint.
fn bind_metrics(options: &MountOptions) -> Result<Option<TcpListener>> {
    let Some(address) = options.metrics else {
        return Ok(None);
    };
    let listener =
        TcpListener::bind(address).with_context(|| format!("cannot serve metrics on {address}"))?;
    Ok(Some(listener))
}

/// The control socket and the metrics endpoint, both reading `stats`.
fn start_reporting(
    stats: Arc<StatsSource>,
    metrics: Option<TcpListener>,
    store: Option<PathBuf>,
    invalidator: shoal_fuse::EntryInvalidator,
) -> Result<()> {
    control::serve(Arc::new(DaemonControl {
        stats: stats.clone(),
        store,
        invalidator: Some(invalidator),
    }))
    .context("cannot open the control socket")?;
    if let Some(listener) = metrics {
        let address = listener.local_addr().ok();
        metrics_http::serve(listener, Arc::new(move || stats.report(false)))
            .context("cannot start the metrics endpoint")?;
        tracing::info!("serving Prometheus metrics on http://{address:?}/metrics");
    }
    Ok(())
}

/// The mount's source in /proc/mounts: `fsname=`, else the store's path (so tools that
/// find mounts by source tell stores apart), else "shoal" for a memory store.
fn mount_source(request: &MountRequest) -> String {
    match (&request.options.fsname, &request.store) {
        (Some(name), _) => name.clone(),
        (None, Some(store)) => store.display().to_string(),
        (None, None) => "shoal".into(),
    }
}

/// How the FUSE session is set up, from the mount options.
fn mount_config(request: &MountRequest) -> MountConfig {
    MountConfig {
        threads: request.options.threads,
        read_only: request.options.read_only,
        allow_other: request.options.allow_other,
        fsname: mount_source(request),
        subtype: request.options.subtype.clone(),
        kernel_flags: request.options.kernel_flags.clone(),
        capacity_path: request.store.clone(),
        memory_budget_bytes: Some(request.options.memory_bytes),
        writeback_cache: request.options.writeback,
        io_uring: request.options.uring,
        busy_wait: shoal_fuse::BusyWait::decide(shoal_fuse::BusyWaitAsked {
            spin_window: request.options.spin,
            follow: request.options.follow,
        }),
    }
}

/// Who may use the fast path: the mount's owner, everyone with allow_other.
fn fast_path_access(request: &MountRequest) -> shoal_fastpath_server::Access {
    shoal_fastpath_server::Access {
        allow_other: request.options.allow_other,
        owner_uid: shoal_sys::identity::effective_uid(),
        owner_gid: shoal_sys::identity::effective_gid(),
    }
}

/// The store's uuid for `shoal stats`; empty for a memory store or an unreadable identity.
fn store_uuid(request: &MountRequest) -> String {
    request
        .store
        .as_deref()
        .and_then(|store| {
            shoal_engine::store_dir::identity::read(store)
                .ok()
                .flatten()
        })
        .map(|identity| identity.uuid)
        .unwrap_or_default()
}

/// The store's path for the log, "memory" for a memory store.
fn store_name(request: &MountRequest) -> String {
    let store = request.store.as_ref();
    store.map_or("memory".into(), |store| store.display().to_string())
}

/// `report_ready` on a thread of its own: it waits for the mount to answer, which needs
/// this thread to go on and serve.
fn spawn_ready_thread(request: &MountRequest, pipe: Option<File>) -> Result<()> {
    let mountpoint = request.mountpoint.clone();
    let read_only = request.options.read_only;
    std::thread::Builder::new()
        .name("shoal-ready".into())
        .spawn(move || report_ready(pipe, &mountpoint, read_only))
        .context("cannot start the readiness thread")?;
    Ok(())
}

/// How the session talks to the kernel, for `shoal stats` and the log; says so when
/// io_uring was asked for and the kernel has it off.
fn transport_name(io_uring: bool, request: &MountRequest) -> &'static str {
    if io_uring {
        return "io_uring";
    }
    if request.options.uring {
        tracing::info!(
            "FUSE over io_uring is off in the kernel (fuse module parameter enable_uring=N)"
        );
    }
    "/dev/fuse"
}

/// Opens the engine, mounts, reports readiness, and serves until unmounted.
/// `ready` is taken (written and closed) once the mount is live.
fn serve(request: &MountRequest, ready: &mut Option<File>) -> Result<()> {
    let signals = block_termination_signals()?;
    if !shoal_fuse::release_heap_in_background() {
        tracing::warn!("the allocator refused background threads: free pages return late");
    }
    let metrics = bind_metrics(&request.options)?;
    let engine = open_engine(request)?;
    let fuse_stats = Arc::new(FuseStats::default());
    let config = mount_config(request);
    let session = shoal_fuse::mount(
        engine.clone(),
        &request.mountpoint,
        &config,
        fuse_stats.clone(),
    )
    .with_context(|| format!("cannot mount on {}", request.mountpoint.display()))?;
    shoal_fuse::start_memory_budget(&session, &engine, &config, fuse_stats.clone())
        .context("cannot start the memory budget")?;
    let transport = transport_name(session.uses_io_uring(), request);
    let fast_path = if request.options.fastpath {
        let changes = shoal_fuse::OtherDoorChanges::new(&session, &fuse_stats);
        start_fast_path(
            &engine,
            changes,
            &request.mountpoint,
            fast_path_access(request),
        )
    } else {
        None
    };
    if let Some(handle) = &fast_path {
        shoal_fuse::yield_to_other_door(handle.busy_probe());
    }
    let stats = Arc::new(StatsSource {
        engine: Arc::downgrade(&engine),
        fuse_stats,
        started: Instant::now(),
        memory_budget_bytes: request.options.memory_bytes,
        fuse_transport: transport,
        busy_wait: config.busy_wait.clone(),
        fast_path: fast_path.as_ref().map(|handle| handle.stats().clone()),
        uuid: store_uuid(request),
        mountpoint: request.mountpoint.display().to_string(),
        store: request.store.clone(),
    });
    start_reporting(
        stats,
        metrics,
        request.store.clone(),
        shoal_fuse::EntryInvalidator::new(&session, &engine)
            .context("cannot start the kernel cache invalidator")?,
    )?;
    spawn_signal_thread(signals, request.mountpoint.clone());
    tracing::info!(
        "mounted {} on {} over {transport}, {} ({:?})",
        store_name(request),
        request.mountpoint.display(),
        config.busy_wait,
        request.options
    );
    // Held open for the mount's life: it tells, at the end, whether the store's directory
    // was deleted meanwhile (and perhaps a new store made at its path).
    let store_directory = request
        .store
        .as_ref()
        .and_then(|store| File::open(store).ok());
    spawn_ready_thread(request, ready.take())?;
    shoal_fuse::run(session).context("serving FUSE requests")?;
    drop(fast_path);
    finish(request, engine, store_directory.as_ref())
}

/// After the session: the final sync and the clean-close record, unless the store's
/// directory was deleted while mounted. Then its files are gone with it, and what the sync
/// and the record write by path would land in whatever is there now (`rm -rf` and `mkfs`
/// of a new store while this one was still unmounting made the new store look damaged).
fn finish(
    request: &MountRequest,
    engine: Arc<Engine>,
    store_directory: Option<&File>,
) -> Result<()> {
    if store_directory.is_some_and(deleted) {
        let unsynced = engine.unsynced_batches();
        drop(engine);
        bail!(
            "the store's directory was deleted while mounted: nothing was synced or recorded \
             at its path; {unsynced} operation(s) acknowledged since the last successful sync \
             are not durable"
        );
    }
    final_sync(&engine)?;
    drop(engine);
    // Read-only too: fjall may have flushed or compacted what it recovered.
    if let Some(store) = request.store.as_ref() {
        shoal_engine::store_dir::open::record_clean_close(store);
    }
    tracing::info!("unmounted {}; store synced", request.mountpoint.display());
    Ok(())
}

/// Whether the directory open as `directory` has been removed (no name links to it now).
fn deleted(directory: &File) -> bool {
    directory
        .metadata()
        .is_ok_and(|metadata| metadata.nlink() == 0)
}

/// The fast path for `shoal run` processes; what it changes is told to the kernel through
/// the FUSE session's notifications.
/// It listens on an address named by the mount's device number; a mount that cannot
/// (the address taken) serves the kernel alone, and says so.
fn start_fast_path(
    engine: &Arc<Engine>,
    changes: shoal_fuse::OtherDoorChanges,
    mountpoint: &Path,
    access: shoal_fastpath_server::Access,
) -> Option<shoal_fastpath_server::FastPathHandle> {
    let Some(mount) = shoal_sys::mounts::mount_at(mountpoint) else {
        tracing::warn!("no fast path: the mount is not in /proc/self/mountinfo");
        return None;
    };
    let kernel: Arc<dyn shoal_fastpath_server::KernelCache> = Arc::new(KernelMount(changes));
    let mut attempts = 0;
    loop {
        match shoal_fastpath_server::start(engine.clone(), kernel.clone(), mount.device, access) {
            Ok(handle) => return Some(handle),
            // The kernel hands out a device number again as soon as a mount goes; the daemon
            // of the mount that had it may still be finishing its final sync, name held.
            Err(error)
                if error.kind() == std::io::ErrorKind::AddrInUse && attempts < ADDRESS_RETRIES =>
            {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(error) => {
                tracing::warn!(%error, "no fast path for `shoal run` on this mount");
                return None;
            }
        }
    }
}

/// Tries for the fast path's address (50 ms apart) before a mount goes without it.
const ADDRESS_RETRIES: u32 = 60;

/// The kernel mount, as the fast path sees it: a cache to keep true.
struct KernelMount(shoal_fuse::OtherDoorChanges);

impl shoal_fastpath_server::KernelCache for KernelMount {
    fn name_added(&self, parent: u64, name: &[u8]) {
        self.0.name_added(parent, name);
    }

    fn name_removed(&self, parent: u64, name: &[u8], ino: u64) {
        self.0.name_removed(parent, name, ino);
    }

    fn renamed(&self, ino: u64, parent: u64, name: &[u8]) {
        self.0.renamed(ino, parent, name);
    }

    fn inode_changed(&self, ino: u64, data: bool) {
        self.0.inode_changed(ino, data);
    }

    fn holds(&self, ino: u64) -> bool {
        self.0.kernel_holds(ino)
    }
}

/// Runs once the mount serves: lets the kernel skip opens from the start (writable
/// mounts), then tells the waiting parent the mount is live. A mount that stopped
/// serving meanwhile reports nothing: the parent then says the daemon exited.
fn report_ready(pipe: Option<File>, mountpoint: &Path, read_only: bool) {
    if !read_only {
        if let Err(error) = shoal_fuse::skip_opens_from_the_start(mountpoint) {
            if error.raw_os_error() == Some(libc::ENOTCONN) {
                return;
            }
            tracing::info!("the kernel sends OPEN and RELEASE until a file is opened: {error}");
        }
    }
    if let Some(mut pipe) = pipe {
        if let Err(error) = pipe.write_all(b"ok\n") {
            tracing::warn!("cannot report readiness: {error}");
        }
    }
}

/// The sync at unmount; on failure the error says how much acknowledged work is not
/// durable (and `shoal umount` prints it).
fn final_sync(engine: &Engine) -> Result<()> {
    let Err(error) = engine.sync() else {
        return Ok(());
    };
    let unsynced = engine.unsynced_batches();
    let staged = engine.stats_snapshot().1.staged_bytes;
    bail!(
        "final sync failed: {error}; {unsynced} operation(s) acknowledged since the last \
         successful sync are not durable ({staged} bytes of them still only in memory, \
         lost now)"
    )
}

/// Blocks SIGTERM, SIGINT and SIGHUP in this thread and every thread started after it, so
/// only the signal thread sees them.
fn block_termination_signals() -> Result<BlockedSignals> {
    BlockedSignals::block(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
        .context("cannot block the termination signals")
}

/// On a termination signal, unmount: the session then ends and the store is synced, as at
/// any unmount.
fn spawn_signal_thread(signals: BlockedSignals, mountpoint: PathBuf) {
    let spawned = std::thread::Builder::new()
        .name("shoal-signals".into())
        .spawn(move || loop {
            let Ok(signal) = signals.wait() else {
                return;
            };
            tracing::info!("signal {signal}: unmounting {}", mountpoint.display());
            if let Err(error) = crate::umount_cmd::unmount(&mountpoint, true) {
                tracing::error!("unmount on signal failed: {error:#}");
            }
        });
    if let Err(error) = spawned {
        tracing::error!("cannot start the signal thread: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_take_their_default_or_an_eighth_of_a_smaller_memory_budget() {
        let budget: u64 = 96 << 20;
        assert_eq!(within_memory(32 << 20, budget), 12 << 20);
        assert_eq!(within_memory(32 << 20, 1 << 30), 32 << 20);
        assert_eq!(within_memory(32 << 20, u64::MAX), 32 << 20);
    }
}
