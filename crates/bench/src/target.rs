//! Where workloads run: any existing directory (`--target DIR`), or a fresh filesystem that
//! `--make` creates (on a loop device, as a shoal mount, or as a `reference-memfs` process:
//! the minimal fuser in-memory filesystem, the FUSE ceiling) and always tears down again.
//! A `shoal-run` target is a shoal mount whose workloads run under the fast path library
//! (`shoal run`): its tools get LD_PRELOAD from [`Target::tool`], its in-process samples
//! run in a preloaded worker (`crate::worker`); no other target is preloaded.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{BenchError, IoContext, Result};
use crate::mounts::{self, MountInfo};
use crate::tools::{self, run_capture};

/// Filesystems `--make` knows how to create.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MakeKind {
    Xfs,
    Ext4,
    Btrfs,
    Shoal,
    /// A shoal mount made as `shoal` is, measured through the fast path (`shoal run`).
    ShoalRun,
    ShoalMemory,
    ReferenceMemfs,
}

impl MakeKind {
    pub const ALL: [MakeKind; 7] = [
        MakeKind::Xfs,
        MakeKind::Ext4,
        MakeKind::Btrfs,
        MakeKind::Shoal,
        MakeKind::ShoalRun,
        MakeKind::ShoalMemory,
        MakeKind::ReferenceMemfs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MakeKind::Xfs => "xfs",
            MakeKind::Ext4 => "ext4",
            MakeKind::Btrfs => "btrfs",
            MakeKind::Shoal => "shoal",
            MakeKind::ShoalRun => "shoal-run",
            MakeKind::ShoalMemory => "shoal-memory",
            MakeKind::ReferenceMemfs => "reference-memfs",
        }
    }

    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| {
                BenchError::Invalid(format!(
                    "unknown --make filesystem '{name}' (known: {})",
                    Self::ALL.map(MakeKind::name).join(", ")
                ))
            })
    }

    /// The mkfs tool a loop filesystem needs, checked before anything is created.
    fn mkfs_tool(self) -> Option<&'static str> {
        match self {
            MakeKind::Xfs => Some("mkfs.xfs"),
            MakeKind::Ext4 => Some("mkfs.ext4"),
            MakeKind::Btrfs => Some("mkfs.btrfs"),
            MakeKind::Shoal
            | MakeKind::ShoalRun
            | MakeKind::ShoalMemory
            | MakeKind::ReferenceMemfs => None,
        }
    }

    fn is_shoal(self) -> bool {
        matches!(
            self,
            MakeKind::Shoal | MakeKind::ShoalRun | MakeKind::ShoalMemory
        )
    }

    /// Whether the mount has a store directory (made by `shoal mkfs`).
    fn has_store(self) -> bool {
        matches!(self, MakeKind::Shoal | MakeKind::ShoalRun)
    }
}

/// One place workloads run in. It travels as JSON to a worker process (`crate::worker`),
/// all but the teardown, which stays with the process that made the target.
#[derive(Debug, Serialize, Deserialize)]
pub struct Target {
    /// Short name for tables and charts: the --make kind, or the directory.
    pub label: String,
    /// The directory workloads create their `shoal-bench.*` subdirectories in.
    pub path: PathBuf,
    pub mount: Option<MountInfo>,
    /// shoal daemons serving the target: their CPU and memory are part of the cost.
    pub daemon_pids: Vec<u32>,
    /// For shoal targets: the binary, to ask it for its quota report.
    pub shoal_bin: Option<PathBuf>,
    /// The fast path library (`shoal-run`): every tool and sample on this target runs with
    /// it preloaded.
    pub preload: Option<PathBuf>,
    /// The store and mountpoint of a shoal mount `--make` created, for offline steps.
    made_store: Option<MadeStore>,
    #[serde(skip)]
    teardown: Option<Teardown>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct MadeStore {
    store: PathBuf,
    mnt: PathBuf,
}

/// What a shoal daemon has counted so far (see [`Target::daemon_counts`]).
pub struct DaemonCounts {
    pub requests: BTreeMap<String, u64>,
    /// Polling by ring threads that follow a lone caller (`follow=`): idle time, not work.
    pub ring_poll: Duration,
    pub fastpath: FastPathCounts,
}

/// Requests of fast-path (`shoal run`) processes a shoal daemon answered, all kinds
/// together: served, failed with the kernel's errno, or left to the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastPathCounts {
    pub served: u64,
    pub failed: u64,
    pub fell_back: u64,
}

impl FastPathCounts {
    /// The sums over the kinds of `shoal stats --json`'s `fastpath` list (empty on a daemon
    /// without a fast path).
    fn from_stats(stats: &serde_json::Value) -> FastPathCounts {
        let kinds = stats["fastpath"].as_array().map_or(&[][..], Vec::as_slice);
        let sum = |field: &str| kinds.iter().filter_map(|k| k[field].as_u64()).sum();
        FastPathCounts {
            served: sum("served"),
            failed: sum("failed"),
            fell_back: sum("fell_back"),
        }
    }

    /// What was counted after `earlier`.
    pub fn since(&self, earlier: &FastPathCounts) -> FastPathCounts {
        FastPathCounts {
            served: self.served.saturating_sub(earlier.served),
            failed: self.failed.saturating_sub(earlier.failed),
            fell_back: self.fell_back.saturating_sub(earlier.fell_back),
        }
    }
}

/// What the report says about a target.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetInfo {
    pub label: String,
    pub path: PathBuf,
    pub made: bool,
    pub mount: Option<MountInfo>,
    pub shoal: bool,
    pub daemon_pids: Vec<u32>,
    /// The fast path library its workloads ran under (`shoal-run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preload: Option<PathBuf>,
}

impl Target {
    /// A command for one of a workload's tools (tar, cp, find, git ...): on a `shoal-run`
    /// target with the fast path library preloaded, elsewhere as it is.
    pub fn tool(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new(program);
        self.preload_into(&mut command);
        command
    }

    /// Sets what `command` needs to run on the fast path of this target (nothing for other
    /// targets): the library, and its mount as the only one it serves.
    pub fn preload_into(&self, command: &mut Command) {
        let Some(library) = &self.preload else {
            return;
        };
        command.env("LD_PRELOAD", library);
        if let Some(mount) = &self.mount {
            command.env("SHOAL_RUN_MOUNT", &mount.mountpoint);
        }
    }

    /// FUSE requests the shoal daemon serving this target has answered so far, by type,
    /// and the time its ring threads spent polling (`shoal stats --json`); `None` for
    /// other filesystems.
    pub fn daemon_counts(&self) -> Option<DaemonCounts> {
        let mount = self.mount.as_ref().filter(|mount| mount.is_shoal())?;
        let output = std::process::Command::new(self.shoal_bin.as_ref()?)
            .arg("stats")
            .arg("--json")
            .arg(&mount.mountpoint)
            .output()
            .ok()
            .filter(|output| output.status.success())?;
        let stats: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
        let requests = stats["ops"]
            .as_array()?
            .iter()
            .map(|op| Some((op["op"].as_str()?.to_string(), op["count"].as_u64()?)))
            .collect::<Option<_>>()?;
        Some(DaemonCounts {
            requests,
            ring_poll: Duration::from_nanos(stats["ring_poll_ns"].as_u64().unwrap_or(0)),
            fastpath: FastPathCounts::from_stats(&stats),
        })
    }

    /// An existing directory: must exist, be a directory and be writable.
    pub fn existing(dir: &Path, shoal_bin: Option<&Path>) -> Result<Target> {
        let bad = |reason: String| BenchError::BadTarget {
            path: dir.to_path_buf(),
            reason,
        };
        let path = fs::canonicalize(dir).map_err(|e| bad(e.to_string()))?;
        if !path.is_dir() {
            return Err(bad("not a directory".into()));
        }
        let probe = tempfile_in(&path).map_err(|e| bad(format!("not writable: {e}")))?;
        fs::remove_dir(&probe)
            .map_err(|e| bad(format!("cannot remove {}: {e}", probe.display())))?;
        let mount = mounts::mount_of(&path);
        let daemon_pids = match &mount {
            Some(m) if m.is_shoal() => mounts::shoal_daemon_pids(&m.mountpoint),
            _ => Vec::new(),
        };
        Ok(Target {
            label: path.display().to_string(),
            path,
            mount,
            daemon_pids,
            shoal_bin: shoal_bin.map(Path::to_path_buf),
            preload: None,
            made_store: None,
            teardown: None,
        })
    }

    /// For a loop filesystem: the directory holding its sparse image, whose disk must have
    /// room for every block the filesystem writes.
    pub fn backing_dir(&self) -> Option<&Path> {
        let teardown = self.teardown.as_ref()?;
        teardown
            .loop_device
            .as_ref()
            .map(|_| teardown.base.as_path())
    }

    /// For a shoal target: its store directory (made here, or as its daemon says with
    /// `shoal info --json`); `None` for other filesystems and in-memory shoal mounts.
    pub fn shoal_store(&self) -> Option<PathBuf> {
        if let Some(made) = &self.made_store {
            return Some(made.store.clone());
        }
        if self.is_made() {
            return None;
        }
        let mount = self.mount.as_ref().filter(|mount| mount.is_shoal())?;
        let output = Command::new(self.shoal_bin.as_ref()?)
            .args(["info", "--json"])
            .arg(&mount.mountpoint)
            .output()
            .ok()
            .filter(|output| output.status.success())?;
        let info: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
        info["store_dir"].as_str().map(PathBuf::from)
    }

    pub fn is_shoal(&self) -> bool {
        self.mount.as_ref().is_some_and(MountInfo::is_shoal)
    }

    /// For a shoal store made by `--make shoal` or `shoal-run`: unmounts it (`shoal
    /// umount`), runs `f` on the store directory, and mounts it again, for what only works
    /// offline (a whole compaction, offline reports). `None` for every other target. The
    /// daemon serving the target afterwards is a new process: the runner asks for it again
    /// after the sample (`refresh_daemons`), so an offline step goes last in a workload (a
    /// preloaded worker's fast path does not serve the new mount either).
    pub fn while_unmounted<T>(&self, f: impl FnOnce(&Path) -> Result<T>) -> Result<Option<T>> {
        let Some(made) = &self.made_store else {
            return Ok(None);
        };
        let shoal = self
            .shoal_bin
            .as_ref()
            .ok_or_else(|| BenchError::Invalid("no shoal binary".into()))?;
        run_capture(Command::new(shoal).arg("umount").arg(&made.mnt))?;
        let result = f(&made.store);
        // Mounted again whatever `f` did: the target must stay usable for the session.
        run_capture(
            Command::new(shoal)
                .arg("mount")
                .arg(&made.store)
                .arg(&made.mnt),
        )?;
        result.map(Some)
    }

    /// Finds the daemons serving a shoal target again (after `while_unmounted`).
    pub fn refresh_daemons(&mut self) {
        if let Some(mount) = self.mount.as_ref().filter(|mount| mount.is_shoal()) {
            self.daemon_pids = mounts::shoal_daemon_pids(&mount.mountpoint);
        }
    }

    /// Whether `--make` created this target (and `remake` can replace it).
    pub fn is_made(&self) -> bool {
        self.teardown.is_some()
    }

    /// Replaces a made target with a fresh filesystem of the same kind: the old one is
    /// unmounted and destroyed first. Existing directories are left as they are.
    pub fn remake(&mut self, options: &MakeOptions) -> Result<()> {
        let Some(kind) = self.teardown.as_ref().map(|teardown| teardown.kind) else {
            return Ok(());
        };
        self.teardown = None;
        *self = make(kind, options)?;
        Ok(())
    }

    pub fn info(&self) -> TargetInfo {
        TargetInfo {
            label: self.label.clone(),
            path: self.path.clone(),
            made: self.teardown.is_some(),
            mount: self.mount.clone(),
            shoal: self.is_shoal(),
            daemon_pids: self.daemon_pids.clone(),
            preload: self.preload.clone(),
        }
    }
}

/// A fresh subdirectory `shoal-bench.XXXXXX` of `parent`, created with mkdir (atomic).
pub fn tempfile_in(parent: &Path) -> std::io::Result<PathBuf> {
    let mut rng = crate::SplitMix64::new((std::process::id() as u64) << 32 ^ nanos_now());
    loop {
        let name = format!("shoal-bench.{:06x}", rng.below(1 << 24));
        let path = parent.join(name);
        match fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

fn nanos_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// How `--make` builds targets.
#[derive(Clone, Debug)]
pub struct MakeOptions {
    /// Holds images, stores and mountpoints; must be on a disk (not tmpfs) for fairness.
    pub scratch: PathBuf,
    /// Sparse loop image size.
    pub image_bytes: u64,
    /// The `shoal` binary for shoal targets.
    pub shoal_bin: Option<PathBuf>,
    /// The fast path library for `shoal-run` (`libshoal_preload.so`).
    pub preload: Option<PathBuf>,
    /// The `reference-memfs` binary and its `--threads`.
    pub memfs_bin: Option<PathBuf>,
    pub memfs_threads: usize,
}

/// How long a FUSE daemon may take to show its mount.
const MOUNT_WAIT: Duration = Duration::from_secs(30);

/// Checks everything `--make` needs before creating anything, so a missing tool fails fast.
pub fn check_make(kinds: &[MakeKind], options: &MakeOptions) -> Result<()> {
    if kinds.is_empty() {
        return Ok(());
    }
    if !shoal_sys::identity::is_root() {
        return Err(BenchError::Invalid(
            "--make needs root (loop devices, mount, mkfs); use --target DIR instead".into(),
        ));
    }
    for kind in kinds {
        if let Some(tool) = kind.mkfs_tool() {
            if !tools::has_tool(tool) {
                return Err(BenchError::Invalid(format!(
                    "--make {}: {tool} is not installed",
                    kind.name()
                )));
            }
        }
        if kind.is_shoal() && options.shoal_bin.is_none() {
            return Err(BenchError::Invalid(format!(
                "--make {}: no shoal binary given",
                kind.name()
            )));
        }
        if *kind == MakeKind::ReferenceMemfs {
            check_memfs(options)?;
        }
        if *kind == MakeKind::ShoalRun {
            check_preload(options)?;
        }
    }
    Ok(())
}

fn check_preload(options: &MakeOptions) -> Result<()> {
    match &options.preload {
        Some(library) if library.is_file() => Ok(()),
        Some(library) => Err(BenchError::Invalid(format!(
            "--make shoal-run: the fast path library {} does not exist (cargo build \
             --release -p shoal-preload, or set SHOAL_PRELOAD)",
            library.display()
        ))),
        None => Err(BenchError::Invalid(
            "--make shoal-run: no fast path library given".into(),
        )),
    }
}

fn check_memfs(options: &MakeOptions) -> Result<()> {
    match &options.memfs_bin {
        Some(bin) if bin.is_file() => {}
        Some(bin) => {
            return Err(BenchError::Invalid(format!(
                "--make reference-memfs: {} does not exist (cargo build --release -p \
                 reference-memfs, or give --memfs PATH)",
                bin.display()
            )))
        }
        None => {
            return Err(BenchError::Invalid(
                "--make reference-memfs: no reference-memfs binary given".into(),
            ))
        }
    }
    if !tools::has_tool("fusermount3") {
        return Err(BenchError::Invalid(
            "--make reference-memfs: fusermount3 is not installed (package fuse3)".into(),
        ));
    }
    Ok(())
}

/// Creates and mounts a fresh filesystem of `kind` under the scratch directory.
pub fn make(kind: MakeKind, options: &MakeOptions) -> Result<Target> {
    let base = options.scratch.join(kind.name());
    if base.exists() {
        // A leftover of an earlier, killed session: only remove what is not mounted.
        if mounts::mount_table()
            .iter()
            .any(|m| m.mountpoint.starts_with(&base))
        {
            return Err(BenchError::Invalid(format!(
                "{} still has mounts from an earlier run; unmount them first",
                base.display()
            )));
        }
        fs::remove_dir_all(&base).context(|| format!("removing stale {}", base.display()))?;
    }
    let mnt = base.join("mnt");
    fs::create_dir_all(&mnt).context(|| format!("creating {}", mnt.display()))?;
    let mut teardown = Teardown {
        kind,
        base: base.clone(),
        mnt: mnt.clone(),
        loop_device: None,
        shoal_bin: options.shoal_bin.clone(),
        memfs: None,
    };
    // From here on the guard undoes whatever part of the setup succeeded.
    match kind {
        MakeKind::Xfs | MakeKind::Ext4 | MakeKind::Btrfs => {
            make_loop_fs(kind, options, &mut teardown)?
        }
        MakeKind::Shoal | MakeKind::ShoalRun | MakeKind::ShoalMemory => {
            make_shoal(kind, options, &teardown)?
        }
        MakeKind::ReferenceMemfs => make_memfs(options, &mut teardown)?,
    }
    let mount = mounts::mount_of(&mnt);
    let daemon_pids = match (kind, &teardown.memfs) {
        (MakeKind::ReferenceMemfs, Some(child)) => vec![child.id()],
        _ if kind.is_shoal() => mounts::shoal_daemon_pids(&mnt),
        _ => Vec::new(),
    };
    let made_store = kind.has_store().then(|| MadeStore {
        store: base.join("store"),
        mnt: mnt.clone(),
    });
    Ok(Target {
        label: kind.name().to_string(),
        path: mnt,
        mount,
        daemon_pids,
        shoal_bin: options.shoal_bin.clone(),
        preload: (kind == MakeKind::ShoalRun)
            .then(|| options.preload.clone())
            .flatten(),
        made_store,
        teardown: Some(teardown),
    })
}

fn make_loop_fs(kind: MakeKind, options: &MakeOptions, teardown: &mut Teardown) -> Result<()> {
    let image = teardown.base.join(format!("{}.img", kind.name()));
    let file = fs::File::create(&image).context(|| format!("creating {}", image.display()))?;
    file.set_len(options.image_bytes)
        .context(|| format!("sizing {}", image.display()))?;
    drop(file);
    let device = run_capture(Command::new("losetup").args(["-f", "--show"]).arg(&image))?;
    let device = PathBuf::from(device.trim());
    teardown.loop_device = Some(device.clone());
    let mut mkfs = match kind {
        MakeKind::Xfs => {
            let mut c = Command::new("mkfs.xfs");
            c.args(["-q", "-f"]);
            c
        }
        // Inode tables and journal initialised now, so no ext4lazyinit thread runs during
        // the measurements.
        MakeKind::Ext4 => {
            let mut c = Command::new("mkfs.ext4");
            c.args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"]);
            c
        }
        _ => {
            let mut c = Command::new("mkfs.btrfs");
            c.args(["-q", "-f"]);
            c
        }
    };
    run_capture(mkfs.arg(&device))?;
    run_capture(Command::new("mount").arg(&device).arg(&teardown.mnt))?;
    Ok(())
}

fn make_shoal(kind: MakeKind, options: &MakeOptions, teardown: &Teardown) -> Result<()> {
    let shoal = options
        .shoal_bin
        .as_ref()
        .ok_or_else(|| BenchError::Invalid("no shoal binary".into()))?;
    let mut mount = Command::new(shoal);
    mount.arg("mount");
    if kind.has_store() {
        let store = teardown.base.join("store");
        fs::create_dir_all(&store).context(|| format!("creating {}", store.display()))?;
        run_capture(Command::new(shoal).arg("mkfs").arg(&store))?;
        mount.arg(&store);
    } else {
        mount.arg("--memory");
    }
    // `shoal mount` returns once the mount is live, leaving a daemon behind.
    run_capture(mount.arg(&teardown.mnt))?;
    Ok(())
}

/// Starts `reference-memfs MNT --threads N` (it stays in the foreground) and waits for its
/// mount; its output goes to `memfs.log` beside the mountpoint.
fn make_memfs(options: &MakeOptions, teardown: &mut Teardown) -> Result<()> {
    let bin = options
        .memfs_bin
        .as_ref()
        .ok_or_else(|| BenchError::Invalid("no reference-memfs binary".into()))?;
    let log_path = teardown.base.join("memfs.log");
    let log = fs::File::create(&log_path).context(|| format!("creating {}", log_path.display()))?;
    let log_err = log
        .try_clone()
        .context(|| format!("opening {}", log_path.display()))?;
    let child = Command::new(bin)
        .arg(&teardown.mnt)
        .arg("--threads")
        .arg(options.memfs_threads.to_string())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .context(|| format!("starting {}", bin.display()))?;
    let child = teardown.memfs.insert(child);
    let started = Instant::now();
    while !mounts::is_mountpoint(&teardown.mnt) {
        let exited = child
            .try_wait()
            .context(|| format!("waiting for {}", bin.display()))?;
        if exited.is_some() || started.elapsed() > MOUNT_WAIT {
            let log = fs::read_to_string(&log_path).unwrap_or_default();
            return Err(BenchError::Invalid(format!(
                "reference-memfs did not mount {}: {}",
                teardown.mnt.display(),
                log.trim()
            )));
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Undoes a `--make`: unmount, detach the loop device, delete images and stores.
#[derive(Debug)]
struct Teardown {
    kind: MakeKind,
    base: PathBuf,
    mnt: PathBuf,
    loop_device: Option<PathBuf>,
    shoal_bin: Option<PathBuf>,
    /// The reference-memfs process serving the mount.
    memfs: Option<Child>,
}

/// A daemon flushing its memtable at unmount may take a while.
const DAEMON_EXIT_WAIT: Duration = Duration::from_secs(120);

impl Teardown {
    fn unmount(&mut self) {
        if self.kind == MakeKind::ReferenceMemfs {
            self.stop_memfs();
            return;
        }
        if !mounts::is_mountpoint(&self.mnt) {
            return;
        }
        let is_shoal = self.kind.is_shoal();
        let daemons = if is_shoal {
            mounts::shoal_daemon_pids(&self.mnt)
        } else {
            Vec::new()
        };
        if let (true, Some(shoal)) = (is_shoal, &self.shoal_bin) {
            // `shoal umount` syncs, unmounts and waits for the daemon.
            if run_capture(Command::new(shoal).arg("umount").arg(&self.mnt)).is_ok() {
                return;
            }
        }
        for _ in 0..20 {
            if run_capture(Command::new("umount").arg(&self.mnt)).is_ok() {
                break;
            }
            thread::sleep(Duration::from_millis(500));
        }
        if mounts::is_mountpoint(&self.mnt) {
            eprintln!("shoal bench: {} is busy; lazy unmount", self.mnt.display());
            let _ = run_capture(Command::new("umount").arg("-l").arg(&self.mnt));
        }
        let started = Instant::now();
        for pid in daemons {
            while Path::new(&format!("/proc/{pid}")).exists()
                && started.elapsed() < DAEMON_EXIT_WAIT
            {
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Teardown {
    /// `fusermount3 -u` ends reference-memfs; it is killed if it outstays the wait.
    fn stop_memfs(&mut self) {
        if mounts::is_mountpoint(&self.mnt) {
            let unmounted = run_capture(Command::new("fusermount3").arg("-u").arg(&self.mnt))
                .or_else(|_| run_capture(Command::new("fusermount3").arg("-uz").arg(&self.mnt)));
            if let Err(error) = unmounted {
                eprintln!("shoal bench: {error}");
            }
        }
        let Some(mut child) = self.memfs.take() else {
            return;
        };
        let started = Instant::now();
        while matches!(child.try_wait(), Ok(None)) && started.elapsed() < MOUNT_WAIT {
            thread::sleep(Duration::from_millis(20));
        }
        if matches!(child.try_wait(), Ok(None)) {
            eprintln!("shoal bench: reference-memfs outlived its unmount; killing it");
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        self.unmount();
        if let Some(device) = self.loop_device.take() {
            if let Err(error) = run_capture(Command::new("losetup").arg("-d").arg(&device)) {
                eprintln!("shoal bench: {error}");
            }
        }
        if !mounts::is_mountpoint(&self.mnt) {
            if let Err(error) = fs::remove_dir_all(&self.base) {
                eprintln!("shoal bench: removing {}: {error}", self.base.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn make_kinds_round_trip() {
        for kind in MakeKind::ALL {
            assert_eq!(MakeKind::parse(kind.name()).unwrap(), kind);
        }
        assert!(MakeKind::parse("zfs").is_err());
    }

    #[test]
    fn existing_target_rejects_missing_dirs() {
        assert!(Target::existing(Path::new("/nonexistent/shoal-bench"), None).is_err());
        let dir = tempfile::tempdir().unwrap();
        let target = Target::existing(dir.path(), None).unwrap();
        assert!(!target.is_shoal());
        assert!(target.mount.is_some());
    }
}
