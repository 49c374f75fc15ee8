//! Shared helpers for the integration tests: run the `shoal` binary, mount a fresh store,
//! and never leave a mount or a daemon behind, even when a test panics.
#![allow(dead_code)] // every test file uses a different subset

pub mod both_ways;

use std::ffi::OsStr;
use std::fs::{self, File, Permissions};
use std::io::{Read, Seek};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

/// Generous: `shoal mount` may wait a few seconds for an old daemon's lock, and a command
/// that hangs must fail the test rather than hang the suite.
pub const SHOAL_TIMEOUT: Duration = Duration::from_secs(120);
/// fsck reads the whole store, which can hold gigabytes.
pub const FSCK_TIMEOUT: Duration = Duration::from_secs(600);

/// What a finished command printed and how it exited.
#[derive(Debug)]
pub struct CmdOutput {
    pub command: String,
    /// None when killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CmdOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// The whole story, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "`{}` exited with {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command, self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` to completion, killing it after `timeout`. Output goes to anonymous files, not
/// pipes: a daemon that inherits a pipe would hold it open and a reader would wait forever.
pub fn try_run(cmd: &mut Command, timeout: Duration) -> Result<CmdOutput, String> {
    let command = format!("{cmd:?}");
    let mut stdout = tempfile::tempfile().map_err(|e| e.to_string())?;
    let mut stderr = tempfile::tempfile().map_err(|e| e.to_string())?;
    let (out, err) = (
        stdout.try_clone().map_err(|e| e.to_string())?,
        stderr.try_clone().map_err(|e| e.to_string())?,
    );
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("cannot start {command}: {e}"))?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{command} did not finish within {timeout:?}"));
        }
        thread::sleep(Duration::from_millis(5));
    };
    let read_all = |file: &mut File| {
        let mut text = String::new();
        let _ = file.rewind();
        let _ = file.read_to_string(&mut text);
        text
    };
    Ok(CmdOutput {
        command,
        code: status.code(),
        stdout: read_all(&mut stdout),
        stderr: read_all(&mut stderr),
    })
}

pub fn run(cmd: &mut Command, timeout: Duration) -> CmdOutput {
    try_run(cmd, timeout).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `cmd` and panics with its output unless it exits 0.
pub fn run_ok(cmd: &mut Command, timeout: Duration) -> CmdOutput {
    let out = run(cmd, timeout);
    assert!(out.success(), "{}", out.describe());
    out
}

pub fn shoal<S: AsRef<OsStr>>(args: &[S]) -> CmdOutput {
    run(Command::new(SHOAL).args(args), SHOAL_TIMEOUT)
}

pub fn shoal_ok<S: AsRef<OsStr>>(args: &[S]) -> CmdOutput {
    run_ok(Command::new(SHOAL).args(args), SHOAL_TIMEOUT)
}

/// `shoal stats --json` of the mount at `mnt`.
pub fn stats_json(mnt: &Path) -> serde_json::Value {
    let out = shoal_ok(&[OsStr::new("stats"), OsStr::new("--json"), mnt.as_os_str()]);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.describe()))
}

/// `shoal gen-tree DIR --files FILES`: a generated source-like tree.
pub fn gen_tree(dir: &Path, files: u32) {
    shoal_ok(&[
        OsStr::new("gen-tree"),
        dir.as_os_str(),
        OsStr::new("--files"),
        OsStr::new(&files.to_string()),
    ]);
}

/// A fresh directory under /tmp, removed on drop. Mode 0755 so that the test users of the
/// permission tests can reach a mountpoint inside it.
pub fn test_dir() -> TempDir {
    let dir = tempfile::Builder::new()
        .prefix("shoal-test-")
        .tempdir_in("/tmp")
        .expect("create test dir in /tmp");
    fs::set_permissions(dir.path(), Permissions::from_mode(0o755)).expect("chmod test dir");
    dir
}

/// Polls `done` every 10 ms; false if it never held within `timeout`.
pub fn poll(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

pub fn wait_for(what: &str, timeout: Duration, done: impl FnMut() -> bool) {
    assert!(
        poll(timeout, done),
        "timed out after {timeout:?} waiting for {what}"
    );
}

/// Whether something is mounted exactly at `path` (per /proc/self/mountinfo).
pub fn is_mounted(path: &Path) -> bool {
    shoal_sys::mounts::is_mountpoint(path)
}

/// Alive means running or sleeping; a zombie has already released its files and locks,
/// unless only its main thread is one: a killed daemon's main thread turns zombie while
/// its other threads are still exiting (one in the middle of a store write holds the
/// store's lock until it is gone), and `/proc/PID/task` lists those.
pub fn process_alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may itself contain ") ".
        Ok(stat) => {
            let zombie = stat
                .rsplit_once(") ")
                .is_none_or(|(_, rest)| rest.starts_with('Z'));
            let threads = fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count);
            !zombie || threads > 1
        }
        Err(_) => false,
    }
}

/// The pid of the shoal daemon serving `mnt`: the one in `store/lock` when the daemon wrote
/// it there, otherwise the shoal process whose command line names the mountpoint.
pub fn find_daemon_pid(store: Option<&Path>, mnt: &Path) -> Option<i32> {
    let is_shoal = |pid: i32| {
        fs::read_link(format!("/proc/{pid}/exe"))
            .map(|exe| {
                exe.file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with("shoal"))
            })
            .unwrap_or(false)
    };
    if let Some(store) = store {
        if let Ok(text) = fs::read_to_string(store.join("lock")) {
            if let Ok(pid) = text.trim().parse::<i32>() {
                if process_alive(pid) && is_shoal(pid) {
                    return Some(pid);
                }
            }
        }
    }
    let me = std::process::id() as i32;
    let mnt = mnt.as_os_str().as_encoded_bytes();
    let mut found = Vec::new();
    for dirent in fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = dirent
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me || !is_shoal(pid) || !process_alive(pid) {
            continue;
        }
        let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        if args.contains(&b"mount".as_slice()) && args.contains(&mnt) {
            found.push(pid);
        }
    }
    // Several matches would be the short-lived `shoal mount` parent still exiting next to
    // its daemon; the daemon was started last, so it has the higher pid (no wraparound in a
    // test run).
    found.into_iter().max()
}

/// Unmounts `mnt` without panicking (for Drop): `shoal umount`, then a lazy unmount, then
/// kills a daemon that is still alive so no process outlives the test.
pub fn force_unmount(store: Option<&Path>, mnt: &Path) {
    let daemon = find_daemon_pid(store, mnt);
    if is_mounted(mnt) {
        let _ = try_run(
            Command::new(SHOAL).arg("umount").arg(mnt),
            Duration::from_secs(60),
        );
    }
    if is_mounted(mnt) {
        eprintln!("shoal umount {} failed; unmounting lazily", mnt.display());
        let _ = try_run(
            Command::new("umount").arg("-l").arg(mnt),
            Duration::from_secs(30),
        );
    }
    if is_mounted(mnt) {
        let _ = try_run(
            Command::new("fusermount3").arg("-uz").arg(mnt),
            Duration::from_secs(30),
        );
    }
    if let Some(pid) = daemon {
        if !poll(Duration::from_secs(10), || !process_alive(pid)) {
            eprintln!(
                "shoal daemon {pid} for {} still alive; killing it",
                mnt.display()
            );
            // A pid we found serving our own mountpoint; if it exits meanwhile, all the better.
            let _ = shoal_sys::process::send_signal(pid, libc::SIGKILL);
        }
    }
}

/// A store plus a mountpoint in a fresh /tmp directory, mkfs'ed and mounted on creation,
/// unmounted on drop (even when the test panics).
pub struct Mounted {
    pub store: PathBuf,
    pub mnt: PathBuf,
    options: Vec<String>,
    mounted: bool,
    // Last field: dropped after Drop::drop has unmounted.
    pub dir: TempDir,
}

impl Mounted {
    pub fn new() -> Self {
        Self::with_options(&[])
    }

    /// `options` go to `shoal mount -o`, e.g. `["threads=4", "allow_other"]`.
    pub fn with_options(options: &[&str]) -> Self {
        let dir = test_dir();
        let store = dir.path().join("store");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&store).expect("create store dir");
        fs::create_dir(&mnt).expect("create mountpoint");
        shoal_ok(&[OsStr::new("mkfs"), store.as_os_str()]);
        let mut mounted = Mounted {
            store,
            mnt,
            options: options.iter().map(|o| o.to_string()).collect(),
            mounted: false,
            dir,
        };
        mounted.mount();
        mounted
    }

    pub fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.mnt.join(rel)
    }

    pub fn is_mounted(&self) -> bool {
        self.mounted
    }

    pub fn mount(&mut self) {
        assert!(!self.mounted, "already mounted");
        let mut args = vec![
            OsStr::new("mount").to_owned(),
            self.store.clone().into(),
            self.mnt.clone().into(),
        ];
        let options = self.options.join(",");
        if !options.is_empty() {
            args.push("-o".into());
            args.push(options.into());
        }
        let out = shoal(&args);
        // Mark first: if the assertions below fail, Drop still cleans up a half-made mount.
        self.mounted = true;
        assert!(out.success(), "{}", out.describe());
        assert!(
            is_mounted(&self.mnt),
            "`shoal mount` returned before {} was mounted",
            self.mnt.display()
        );
    }

    /// `shoal umount`: everything durable, unmounted, daemon gone.
    pub fn umount(&mut self) {
        assert!(self.mounted, "not mounted");
        let daemon = self.daemon_pid();
        // Another test thread's fork (Command::spawn, until its exec closes them) holds
        // copies of this process's fds for a moment, mount busy: try again briefly.
        let mut out = shoal(&[OsStr::new("umount"), self.mnt.as_os_str()]);
        for _ in 0..20 {
            if out.success() || !out.stderr.contains("is busy") {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            out = shoal(&[OsStr::new("umount"), self.mnt.as_os_str()]);
        }
        assert!(out.success(), "{}", out.describe());
        self.mounted = false;
        assert!(
            !is_mounted(&self.mnt),
            "{} still mounted after `shoal umount`",
            self.mnt.display()
        );
        if let Some(pid) = daemon {
            assert!(
                !process_alive(pid),
                "`shoal umount` returned before daemon {pid} exited"
            );
        }
    }

    /// Options for the next `mount`, e.g. `["ro"]`.
    pub fn set_options(&mut self, options: &[&str]) {
        self.options = options.iter().map(|o| o.to_string()).collect();
    }

    /// Unmounts with another tool (`umount`, `fusermount3 -u`), given as the command line
    /// before the mountpoint, then waits for the daemon to finish its final sync and exit.
    pub fn umount_with(&mut self, command: &[&str]) {
        let daemon = self.daemon_pid();
        self.umount_with_no_wait(command);
        if let Some(pid) = daemon {
            wait_for(
                &format!("daemon {pid} to exit after {command:?}"),
                SHOAL_TIMEOUT,
                || !process_alive(pid),
            );
        }
    }

    /// Like [`Mounted::umount_with`] but returns at once: the daemon may still be syncing
    /// and holding the store.
    pub fn umount_with_no_wait(&mut self, command: &[&str]) {
        assert!(self.mounted, "not mounted");
        run_ok(
            Command::new(command[0]).args(&command[1..]).arg(&self.mnt),
            SHOAL_TIMEOUT,
        );
        self.mounted = false;
        assert!(
            !is_mounted(&self.mnt),
            "{} still mounted after {command:?}",
            self.mnt.display()
        );
    }

    pub fn remount(&mut self) {
        self.umount();
        self.mount();
    }

    /// Runs `shoal fsck` on the (unmounted) store; panics with its report unless clean.
    pub fn fsck_clean(&self) -> String {
        let out = run(
            Command::new(SHOAL).arg("fsck").arg(&self.store),
            FSCK_TIMEOUT,
        );
        assert!(out.success(), "fsck found problems:\n{}", out.describe());
        out.stdout
    }

    /// The normal end of a test: unmount, then prove the store is consistent.
    pub fn finish(mut self) -> String {
        self.umount();
        self.fsck_clean()
    }

    pub fn daemon_pid(&self) -> Option<i32> {
        find_daemon_pid(Some(&self.store), &self.mnt)
    }

    /// Simulates a crash: SIGKILL the daemon and wait until it is gone. The dead mount stays
    /// attached (its users get ENOTCONN) until [`Mounted::detach_dead_mount`]; detaching
    /// earlier would let them fall through to the empty directory below and see ENOENT.
    /// `just_before` runs right before the signal is sent (after the pid lookup).
    pub fn kill_daemon(&mut self, just_before: impl FnOnce()) {
        assert!(self.mounted, "not mounted");
        let pid = self.daemon_pid().expect("find the shoal daemon's pid");
        just_before();
        shoal_sys::process::send_signal(pid, libc::SIGKILL)
            .unwrap_or_else(|error| panic!("kill -9 {pid}: {error}"));
        wait_for("the killed daemon to exit", Duration::from_secs(30), || {
            !process_alive(pid)
        });
    }

    /// Lazily unmounts the mount of a killed daemon, as an administrator would.
    pub fn detach_dead_mount(&mut self) {
        run_ok(
            Command::new("umount").arg("-l").arg(&self.mnt),
            Duration::from_secs(30),
        );
        self.mounted = false;
        assert!(!is_mounted(&self.mnt));
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.mounted || is_mounted(&self.mnt) {
            force_unmount(Some(&self.store), &self.mnt);
        }
    }
}

/// Unmounts an extra mount made by a test (e.g. `shoal mount --memory`) on drop.
pub struct MountGuard {
    pub store: Option<PathBuf>,
    pub mnt: PathBuf,
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            force_unmount(self.store.as_deref(), &self.mnt);
        }
    }
}

/// What a tree holds, as the concurrency and crash tests compare it with their bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeNode {
    Dir,
    File(Vec<u8>),
    Other,
}

/// Every path under `root` (relative, root excluded) with its type and file contents.
pub fn read_tree(root: &Path) -> std::io::Result<std::collections::BTreeMap<PathBuf, TreeNode>> {
    let mut tree = std::collections::BTreeMap::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel_dir) = pending.pop() {
        for dirent in fs::read_dir(root.join(&rel_dir))? {
            let rel = rel_dir.join(dirent?.file_name());
            let file_type = fs::symlink_metadata(root.join(&rel))?.file_type();
            let node = if file_type.is_dir() {
                pending.push(rel.clone());
                TreeNode::Dir
            } else if file_type.is_file() {
                TreeNode::File(fs::read(root.join(&rel))?)
            } else {
                TreeNode::Other
            };
            tree.insert(rel, node);
        }
    }
    Ok(tree)
}

/// Where `path` ends up when `from` (itself or an ancestor of `path`) is renamed to `to`.
pub fn renamed_path(path: &Path, from: &Path, to: &Path) -> PathBuf {
    match path.strip_prefix(from) {
        // `to.join("")` would append a slash, and "file/" names no file (ENOTDIR).
        Ok(rest) if rest.as_os_str().is_empty() => to.to_path_buf(),
        Ok(rest) => to.join(rest),
        Err(_) => path.to_path_buf(),
    }
}

/// The errno of an I/O error (0 if it has none), for `assert_eq!(errno(&e), libc::EEXIST)`.
/// `len` bytes of a seeded xorshift stream: different per seed, and incompressible (so
/// they reach the store's data files as written).
pub fn incompressible(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

pub fn errno(err: &std::io::Error) -> i32 {
    err.raw_os_error().unwrap_or(0)
}

/// Asserts that `result` failed with `expected` errno; `what` names the operation.
#[track_caller]
pub fn assert_errno<T: std::fmt::Debug>(result: std::io::Result<T>, expected: i32, what: &str) {
    match result {
        Ok(value) => panic!(
            "{what}: expected {}, but it succeeded ({value:?})",
            errno_name(expected)
        ),
        Err(err) => assert_eq!(
            errno(&err),
            expected,
            "{what}: expected {}, got {err} ({})",
            errno_name(expected),
            errno_name(errno(&err))
        ),
    }
}

/// How a request fails when the daemon died under it: a new request gets ENOTCONN, the one
/// in flight on /dev/fuse ECONNABORTED, and one the dead daemon's io_uring held ECANCELED
/// (the kernel ends it when the ring's task exits).
pub fn is_dead_connection(errno: i32) -> bool {
    matches!(errno, libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED)
}

pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::ENOENT => "ENOENT",
        libc::EEXIST => "EEXIST",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::EINVAL => "EINVAL",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENODATA => "ENODATA",
        libc::ERANGE => "ERANGE",
        libc::EROFS => "EROFS",
        libc::ENOTCONN => "ENOTCONN",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::ECANCELED => "ECANCELED",
        libc::EXDEV => "EXDEV",
        libc::EBUSY => "EBUSY",
        libc::EIO => "EIO",
        libc::ENOSYS => "ENOSYS",
        _ => "another errno",
    }
}

// ---------------------------------------------------------------------------------------
// Syscalls as another user, in a forked child.

pub fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Runs `op` in a forked child as `uid`/`gid` with no supplementary groups and returns the
/// errno it reports (0 = success). `op` must only make syscalls on data prepared before the
/// fork: the child of a multi-threaded process may not allocate.
pub fn as_user(uid: u32, op: impl FnOnce() -> i32) -> i32 {
    // SAFETY: fork, then in the child only async-signal-safe calls and _exit.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let switched = libc::setgroups(0, std::ptr::null()) == 0
                && libc::setresgid(uid, uid, uid) == 0
                && libc::setresuid(uid, uid, uid) == 0;
            libc::_exit(if switched { op() } else { 255 });
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        assert!(libc::WIFEXITED(status), "child died: status {status:#x}");
        let code = libc::WEXITSTATUS(status);
        assert_ne!(code, 255, "child could not switch to uid {uid}");
        code
    }
}
