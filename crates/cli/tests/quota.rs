//! Quotas through the kernel: `shoal quota report/set/config/project` on a live mount and
//! on an unmounted store, enforced on real users (forked children with setresuid), with
//! XFS-like semantics: hard limits reached but never exceeded (EDQUOT), soft limits with a
//! grace period, root exempt unless enforced, chown moving usage, hard links counted once,
//! allocated bytes (holes are free), projects inherited by new children (EXDEV on a rename
//! across projects, `mv` copying instead), statfs per project, and `fsck --counters` online,
//! offline and after a crash.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{chown, FileExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{
    as_user, assert_errno, errno, errno_name, last_errno, poll, run, run_ok, shoal, shoal_ok,
    CmdOutput, Mounted, FSCK_TIMEOUT, SHOAL, SHOAL_TIMEOUT,
};
use serde::Deserialize;

const USER_A: u32 = 60_001;
const USER_B: u32 = 60_002;
const EDQUOT: i32 = libc::EDQUOT;
const MIB: u64 = 1 << 20;

// ---------------------------------------------------------------------------------------
// Running `shoal quota` and reading its JSON.

/// One line of `shoal quota report --json`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
struct QuotaLine {
    kind: String,
    id: u32,
    bytes_used: u64,
    bytes_soft: u64,
    bytes_hard: u64,
    bytes_grace_ends: Option<i64>,
    inodes_used: u64,
    inodes_soft: u64,
    inodes_hard: u64,
    inodes_grace_ends: Option<i64>,
}

/// `shoal quota ARGS... TARGET`.
fn quota(args: &[&str], target: &Path) -> CmdOutput {
    let mut full: Vec<OsString> = vec!["quota".into()];
    full.extend(args.iter().map(OsString::from));
    full.push(target.into());
    shoal(&full)
}

fn quota_ok(args: &[&str], target: &Path) -> CmdOutput {
    let out = quota(args, target);
    assert!(out.success(), "{}", out.describe());
    out
}

/// `shoal quota report FLAG --json TARGET`; FLAG is -u, -g or -p.
fn report(target: &Path, flag: &str) -> Vec<QuotaLine> {
    let out = quota_ok(&["report", flag, "--json"], target);
    let lines: Vec<QuotaLine> = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("unreadable JSON report ({e}):\n{}", out.describe()));
    let kind = match flag {
        "-u" => "user",
        "-g" => "group",
        "-p" => "project",
        other => panic!("unknown report flag {other}"),
    };
    for line in &lines {
        assert_eq!(line.kind, kind, "report {flag} holds a line {line:?}");
    }
    lines
}

/// The report line of one id, if it has usage or limits.
fn line_of(target: &Path, flag: &str, id: u32) -> Option<QuotaLine> {
    report(target, flag).into_iter().find(|line| line.id == id)
}

/// (inodes, bytes) charged to one id; zero when the report does not list it.
fn usage(target: &Path, flag: &str, id: u32) -> (u64, u64) {
    line_of(target, flag, id)
        .map(|line| (line.inodes_used, line.bytes_used))
        .unwrap_or((0, 0))
}

fn project_set(dir: &Path, project: &str) {
    shoal_ok(&[
        OsStr::new("quota"),
        OsStr::new("project"),
        OsStr::new("set"),
        dir.as_os_str(),
        OsStr::new(project),
    ]);
}

fn project_clear(dir: &Path) {
    shoal_ok(&[
        OsStr::new("quota"),
        OsStr::new("project"),
        OsStr::new("clear"),
        dir.as_os_str(),
    ]);
}

fn fsck_counters(target: &Path) -> CmdOutput {
    run(
        Command::new(SHOAL)
            .arg("fsck")
            .arg("--counters")
            .arg(target),
        FSCK_TIMEOUT,
    )
}

#[track_caller]
fn assert_counters_clean(target: &Path) {
    let out = fsck_counters(target);
    assert!(
        out.success(),
        "fsck --counters {} is not clean:\n{}",
        target.display(),
        out.describe()
    );
    assert!(
        out.stdout.contains("counters clean"),
        "fsck --counters exited 0 without saying \"counters clean\":\n{}",
        out.describe()
    );
}

// ---------------------------------------------------------------------------------------
// Syscalls as another user, in a forked child.

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("path without NUL")
}

/// `write_as` exit codes that are not errnos.
const SHORT_WRITE: i32 = 254;
const CLOSE_FAILED: i32 = 253;

/// Creates a new empty file (O_EXCL); the errno of open, 0 on success.
fn create_as(path: &CString) -> i32 {
    // SAFETY: NUL-terminated path prepared before the fork; the fd is closed.
    unsafe {
        let fd = libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o644 as libc::c_uint,
        );
        if fd < 0 {
            return last_errno();
        }
        libc::close(fd);
        0
    }
}

fn mkdir_as(path: &CString) -> i32 {
    // SAFETY: NUL-terminated path prepared before the fork.
    unsafe {
        if libc::mkdir(path.as_ptr(), 0o755) == 0 {
            0
        } else {
            last_errno()
        }
    }
}

fn unlink_as(path: &CString) -> i32 {
    // SAFETY: NUL-terminated path prepared before the fork.
    unsafe {
        if libc::unlink(path.as_ptr()) == 0 {
            0
        } else {
            last_errno()
        }
    }
}

fn truncate_as(path: &CString, len: i64) -> i32 {
    // SAFETY: NUL-terminated path prepared before the fork.
    unsafe {
        if libc::truncate(path.as_ptr(), len) == 0 {
            0
        } else {
            last_errno()
        }
    }
}

/// Opens (creating if needed) and writes `data` with ONE pwrite at `offset`: the errno of
/// that write, SHORT_WRITE if it wrote less, CLOSE_FAILED if only close failed.
fn write_as(path: &CString, data: &[u8], offset: i64) -> i32 {
    // SAFETY: NUL-terminated path and buffer prepared before the fork; the fd is closed.
    unsafe {
        let fd = libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT,
            0o644 as libc::c_uint,
        );
        if fd < 0 {
            return last_errno();
        }
        let written = libc::pwrite(fd, data.as_ptr().cast(), data.len(), offset);
        let result = if written < 0 {
            last_errno()
        } else if written as usize != data.len() {
            SHORT_WRITE
        } else {
            0
        };
        if libc::close(fd) != 0 && result == 0 {
            return CLOSE_FAILED;
        }
        result
    }
}

#[track_caller]
fn assert_user_op(actual: i32, expected: i32, what: &str) {
    assert_eq!(
        actual,
        expected,
        "{what}: expected {} ({expected}), got {} ({actual})",
        if expected == EDQUOT {
            "EDQUOT"
        } else {
            errno_name(expected)
        },
        if actual == EDQUOT {
            "EDQUOT"
        } else {
            errno_name(actual)
        },
    );
}

/// A directory every test user may create in.
fn open_dir(m: &Mounted, rel: &str) -> PathBuf {
    let dir = m.path(rel);
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, Permissions::from_mode(0o777)).unwrap();
    dir
}

fn statvfs(path: &Path) -> libc::statvfs {
    shoal_sys::statvfs::statvfs(path)
        .unwrap_or_else(|error| panic!("statvfs {}: {error}", path.display()))
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Every inode under `root`, `root` included (hard links would count once; these trees
/// have none), and the sum of the regular files' sizes.
fn count_tree(root: &Path) -> (u64, u64) {
    let (mut inodes, mut bytes) = (1, 0);
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for dirent in fs::read_dir(&dir).unwrap() {
            let path = dirent.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            inodes += 1;
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() {
                bytes += meta.len();
            }
        }
    }
    (inodes, bytes)
}

fn sum_usage(lines: &[QuotaLine]) -> (u64, u64) {
    lines.iter().fold((0, 0), |(inodes, bytes), line| {
        (inodes + line.inodes_used, bytes + line.bytes_used)
    })
}

// ---------------------------------------------------------------------------------------
// Tests.

#[test]
fn hard_inode_limit_stops_a_real_user_at_the_limit() {
    let m = Mounted::with_options(&["allow_other"]);
    let dir = open_dir(&m, "d");
    quota_ok(&["set", "-u", "60001", "--ihard", "5"], &m.mnt);
    let names: Vec<CString> = (0..6).map(|i| cpath(&dir.join(format!("f{i}")))).collect();
    for (i, name) in names.iter().take(5).enumerate() {
        assert_user_op(
            as_user(USER_A, || create_as(name)),
            0,
            &format!("create f{i} (within the limit of 5)"),
        );
    }
    assert_user_op(
        as_user(USER_A, || create_as(&names[5])),
        EDQUOT,
        "create f5 (a 6th inode over ihard 5)",
    );
    assert!(!dir.join("f5").exists(), "a refused create left f5 behind");
    let subdir = cpath(&dir.join("sub"));
    assert_user_op(
        as_user(USER_A, || mkdir_as(&subdir)),
        EDQUOT,
        "mkdir over ihard 5",
    );
    assert!(!dir.join("sub").exists(), "a refused mkdir left sub behind");
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 5, "entries in d");
    let line = line_of(&m.mnt, "-u", USER_A).expect("uid 60001 in the report");
    assert_eq!((line.inodes_used, line.inodes_hard), (5, 5), "{line:?}");

    assert_user_op(as_user(USER_A, || unlink_as(&names[0])), 0, "unlink f0");
    // The kernel sends RELEASE after close(2) has returned: until it comes, f0 is open in
    // the daemon, kept as an orphan and still charged (a busy machine showed 5 here).
    common::wait_for(
        "f0's release to free its inode",
        std::time::Duration::from_secs(10),
        || usage(&m.mnt, "-u", USER_A).0 == 4,
    );
    assert_user_op(
        as_user(USER_A, || create_as(&names[5])),
        0,
        "create f5 after an unlink made room",
    );
    assert_user_op(
        as_user(USER_A, || create_as(&names[0])),
        EDQUOT,
        "create f0 again at the limit",
    );
    assert_eq!(usage(&m.mnt, "-u", USER_A).0, 5);
    assert_counters_clean(&m.mnt);
    m.finish();
}

#[test]
fn hard_byte_limit_is_reached_exactly_and_write_returns_edquot() {
    let mut m = Mounted::with_options(&["allow_other"]);
    let dir = open_dir(&m, "d");
    quota_ok(&["set", "-u", "60001", "--bhard", "20000"], &m.mnt);
    // Mounted with a byte limit, every open reaches the daemon (no `no_open`), so writes
    // to existing files meet the limit at `write` too.
    m.remount();
    let file = dir.join("data");
    let cfile = cpath(&file);
    let content: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let one = [b'!'];

    assert_user_op(
        as_user(USER_A, || write_as(&cfile, &content, 0)),
        0,
        "write 20000 bytes at a bhard of 20000",
    );
    assert_eq!(usage(&m.mnt, "-u", USER_A), (1, 20_000));
    assert_user_op(
        as_user(USER_A, || write_as(&cfile, &one, 20_000)),
        EDQUOT,
        "write() of a 20001st byte",
    );
    assert_user_op(
        as_user(USER_A, || write_as(&cfile, &one, 50_000)),
        EDQUOT,
        "write() of one byte past a hole",
    );
    assert_eq!(
        fs::metadata(&file).unwrap().len(),
        20_000,
        "size after EDQUOT"
    );
    assert!(
        fs::read(&file).unwrap() == content,
        "content changed by a refused write"
    );
    let line = line_of(&m.mnt, "-u", USER_A).unwrap();
    assert_eq!(
        (line.bytes_used, line.bytes_hard),
        (20_000, 20_000),
        "{line:?}"
    );

    // Truncate frees; the freed room can be written again, exactly.
    assert_user_op(
        as_user(USER_A, || truncate_as(&cfile, 10_000)),
        0,
        "truncate to 10000",
    );
    assert_eq!(usage(&m.mnt, "-u", USER_A), (1, 10_000));
    let tail = &content[10_000..];
    assert_user_op(
        as_user(USER_A, || write_as(&cfile, tail, 10_000)),
        0,
        "write 10000 bytes back after the truncate",
    );
    assert_eq!(usage(&m.mnt, "-u", USER_A), (1, 20_000));
    assert!(fs::read(&file).unwrap() == content, "content after rewrite");
    assert_user_op(
        as_user(USER_A, || write_as(&cfile, &one, 20_000)),
        EDQUOT,
        "write() over the limit again",
    );
    assert_counters_clean(&m.mnt);
    m.finish();
}

#[test]
fn soft_inode_limit_grace_expires_and_clears() {
    let m = Mounted::with_options(&["allow_other"]);
    let dir = open_dir(&m, "d");
    let settings = quota_ok(&["config", "--inodes-grace", "2s", "--json"], &m.mnt);
    let settings: serde_json::Value = serde_json::from_str(&settings.stdout).unwrap();
    assert_eq!(settings["inodes_grace_secs"], 2, "{settings}");
    quota_ok(&["set", "-u", "60001", "--isoft", "2"], &m.mnt);
    let names: Vec<CString> = (0..5).map(|i| cpath(&dir.join(format!("f{i}")))).collect();
    for (i, name) in names.iter().take(2).enumerate() {
        assert_user_op(as_user(USER_A, || create_as(name)), 0, &format!("f{i}"));
    }
    let at_soft = line_of(&m.mnt, "-u", USER_A).unwrap();
    assert_eq!(at_soft.inodes_used, 2);
    assert_eq!(
        at_soft.inodes_grace_ends, None,
        "at the soft limit (not over it) no grace runs: {at_soft:?}"
    );
    assert_user_op(
        as_user(USER_A, || create_as(&names[2])),
        0,
        "f2 goes over the soft limit, allowed during grace",
    );
    let over = line_of(&m.mnt, "-u", USER_A).unwrap();
    assert_eq!(over.inodes_used, 3);
    let ends = over
        .inodes_grace_ends
        .unwrap_or_else(|| panic!("over the soft limit but no grace timer: {over:?}"));
    assert_eq!(over.bytes_grace_ends, None, "{over:?}");

    // Wait out the grace period by the clock, with a second to spare.
    while now_secs() <= ends + 1 {
        thread::sleep(Duration::from_millis(200));
    }
    assert_user_op(
        as_user(USER_A, || create_as(&names[3])),
        EDQUOT,
        "create after the grace period expired",
    );
    assert!(!dir.join("f3").exists());
    let expired = line_of(&m.mnt, "-u", USER_A).unwrap();
    assert_eq!(expired.inodes_used, 3);
    assert_eq!(
        expired.inodes_grace_ends,
        Some(ends),
        "a refused create must not move the grace timer"
    );

    fs::remove_file(dir.join("f0")).unwrap();
    fs::remove_file(dir.join("f1")).unwrap();
    // RELEASE of the creates' handles may still be on its way: until it comes, an unlinked
    // file is an open orphan and still charged.
    common::wait_for(
        "the releases of f0 and f1",
        std::time::Duration::from_secs(10),
        || usage(&m.mnt, "-u", USER_A).0 == 1,
    );
    let back = line_of(&m.mnt, "-u", USER_A).unwrap();
    assert_eq!(back.inodes_used, 1);
    assert_eq!(
        back.inodes_grace_ends, None,
        "back under the soft limit clears the grace timer: {back:?}"
    );
    assert_user_op(
        as_user(USER_A, || create_as(&names[3])),
        0,
        "create after dropping under the soft limit",
    );
    assert_eq!(
        line_of(&m.mnt, "-u", USER_A).unwrap().inodes_grace_ends,
        None
    );
    assert_counters_clean(&m.mnt);
    m.finish();
}

#[test]
fn root_is_exempt_unless_enforced() {
    let m = Mounted::new();
    let settings = quota_ok(&["config", "--json"], &m.mnt);
    let settings: serde_json::Value = serde_json::from_str(&settings.stdout).unwrap();
    assert_eq!(settings["enforce_root"], false, "default: {settings}");
    quota_ok(&["set", "-u", "0", "--ihard", "1"], &m.mnt);
    let root_line = line_of(&m.mnt, "-u", 0).expect("uid 0 in the report");
    assert!(
        root_line.inodes_used >= 1,
        "the root directory belongs to uid 0: {root_line:?}"
    );
    assert_eq!(root_line.inodes_hard, 1);

    fs::write(m.path("a"), b"root writes").expect("root creates despite ihard 1");
    fs::create_dir(m.path("dir")).expect("root mkdirs despite ihard 1");
    assert!(usage(&m.mnt, "-u", 0).0 >= 3);

    let settings = quota_ok(&["config", "--enforce-root", "on", "--json"], &m.mnt);
    let settings: serde_json::Value = serde_json::from_str(&settings.stdout).unwrap();
    assert_eq!(settings["enforce_root"], true, "{settings}");
    assert_errno(
        File::create(m.path("b")),
        EDQUOT,
        "root create with --enforce-root on",
    );
    assert_errno(
        fs::create_dir(m.path("dir2")),
        EDQUOT,
        "root mkdir with --enforce-root on",
    );
    assert!(!m.path("b").exists() && !m.path("dir2").exists());
    // Deleting is always allowed.
    fs::remove_file(m.path("a")).unwrap();

    quota_ok(&["config", "--enforce-root", "off"], &m.mnt);
    fs::write(m.path("c"), b"exempt again").expect("root creates after enforce-root off");
    assert_counters_clean(&m.mnt);
    m.finish();
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one project tree through inheritance, limits, statfs and renames: each step needs the last"
)]
fn projects_inherit_limit_statfs_and_refuse_renames_across() {
    let m = Mounted::new();
    fs::create_dir_all(m.path("p/sub")).unwrap();
    fs::write(m.path("p/sub/old"), vec![7u8; 3000]).unwrap();
    fs::write(m.path("outside"), vec![1u8; 1234]).unwrap();
    project_set(&m.path("p"), "42");
    let tagged = line_of(&m.mnt, "-p", 42).expect("project 42 in the report");
    assert_eq!(
        (tagged.inodes_used, tagged.bytes_used),
        (3, 3000),
        "p, p/sub and p/sub/old are tagged: {tagged:?}"
    );
    quota_ok(
        &["set", "-p", "42", "--bhard", "1M", "--ihard", "100"],
        &m.mnt,
    );

    // New children inherit the project.
    fs::write(m.path("p/sub/new"), vec![2u8; 500]).unwrap();
    fs::create_dir(m.path("p/sub/deeper")).unwrap();
    fs::write(m.path("p/sub/deeper/leaf"), b"leaf").unwrap();
    let line = line_of(&m.mnt, "-p", 42).unwrap();
    assert_eq!((line.inodes_used, line.bytes_used), (6, 3504), "{line:?}");
    assert_eq!((line.bytes_hard, line.inodes_hard), (MIB, 100));

    // statfs inside the project shows the project, at the root the whole filesystem.
    let st = statvfs(&m.path("p/sub"));
    let frsize = st.f_frsize;
    assert_eq!(st.f_blocks * frsize, MIB, "project size: {frsize}");
    assert_eq!(st.f_files, 100, "project inode limit");
    assert_eq!(
        st.f_files - st.f_ffree,
        line.inodes_used,
        "project inodes used"
    );
    assert_eq!(
        (st.f_blocks - st.f_bfree) * frsize,
        line.bytes_used.div_ceil(4096) * 4096,
        "project bytes used, in 4 KiB blocks"
    );
    let whole = statvfs(&m.mnt);
    assert_ne!(whole.f_files, 100, "the root is not in project 42");
    assert_ne!(whole.f_blocks * whole.f_frsize, MIB);

    // A rename or link across projects is EXDEV and changes nothing; mv copies instead.
    assert_errno(
        fs::rename(m.path("outside"), m.path("p/outside")),
        libc::EXDEV,
        "rename into another project",
    );
    assert_errno(
        fs::hard_link(m.path("outside"), m.path("p/link")),
        libc::EXDEV,
        "link into another project",
    );
    assert!(m.path("outside").exists() && !m.path("p/outside").exists());
    let project0 = usage(&m.mnt, "-p", 0);
    run_ok(
        Command::new("mv")
            .arg(m.path("outside"))
            .arg(m.path("p/outside")),
        SHOAL_TIMEOUT,
    );
    assert!(!m.path("outside").exists(), "mv left the source");
    assert_eq!(fs::read(m.path("p/outside")).unwrap(), vec![1u8; 1234]);
    assert_eq!(
        usage(&m.mnt, "-p", 42),
        (7, 3504 + 1234),
        "mv charged the copy to project 42"
    );
    assert_eq!(
        usage(&m.mnt, "-p", 0),
        (project0.0 - 1, project0.1 - 1234),
        "mv freed the original in project 0"
    );
    // Within one project a rename is an ordinary rename.
    let ino = fs::metadata(m.path("p/outside")).unwrap().ino();
    fs::rename(m.path("p/outside"), m.path("p/sub/moved")).unwrap();
    assert_eq!(fs::metadata(m.path("p/sub/moved")).unwrap().ino(), ino);

    // The byte limit: a write past 1 MiB fails with EDQUOT from write() itself.
    let mut big = File::create(m.path("p/big")).unwrap();
    assert_errno(
        big.write_all(&vec![9u8; 2 * MIB as usize]),
        EDQUOT,
        "writing 2 MiB in a 1 MiB project",
    );
    drop(big);
    let line = line_of(&m.mnt, "-p", 42).unwrap();
    assert!(line.bytes_used <= MIB, "over the hard limit: {line:?}");
    fs::remove_file(m.path("p/big")).unwrap();
    // RELEASE comes after close(2) returned: until then big is an open orphan and still
    // charged, and the fill below would stop one short (CI saw 99).
    common::wait_for(
        "big's release to free its inode",
        std::time::Duration::from_secs(10),
        || usage(&m.mnt, "-p", 42).0 == 7,
    );

    // The inode limit: fill the project to exactly 100 inodes.
    let mut refused = None;
    for i in 0..200 {
        if let Err(e) = File::create(m.path(format!("p/fill{i}"))) {
            refused = Some(e);
            break;
        }
    }
    let refused = refused.expect("200 creates in a project limited to 100 inodes");
    assert_eq!(errno(&refused), EDQUOT, "filling the project: {refused}");
    let full = line_of(&m.mnt, "-p", 42).unwrap();
    assert_eq!(full.inodes_used, 100, "{full:?}");
    assert_eq!(count_tree(&m.path("p")).0, 100, "inodes in the tree of p");
    let st = statvfs(&m.path("p"));
    assert_eq!(st.f_ffree, 0, "no inode left in the project");

    // Clearing moves everything back to project 0.
    let project0 = usage(&m.mnt, "-p", 0);
    project_clear(&m.path("p"));
    let cleared = line_of(&m.mnt, "-p", 42).expect("project 42 keeps its limits");
    assert_eq!(
        (cleared.inodes_used, cleared.bytes_used),
        (0, 0),
        "{cleared:?}"
    );
    assert_eq!(
        usage(&m.mnt, "-p", 0),
        (project0.0 + full.inodes_used, project0.1 + full.bytes_used)
    );
    File::create(m.path("p/after-clear")).expect("no project limit after clear");
    assert_ne!(statvfs(&m.path("p")).f_files, 100);
    fs::rename(m.path("p/after-clear"), m.path("after-clear")).unwrap();
    assert_counters_clean(&m.mnt);
    m.finish();
}

#[test]
fn chown_and_chgrp_move_usage_and_are_never_refused() {
    let m = Mounted::with_options(&["allow_other"]);
    let dir = open_dir(&m, "d");
    let file = dir.join("f");
    fs::write(&file, vec![5u8; 1000]).unwrap();
    assert_eq!(usage(&m.mnt, "-u", USER_A), (0, 0));
    let root_before = usage(&m.mnt, "-u", 0);

    chown(&file, Some(USER_A), None).unwrap();
    assert_eq!(usage(&m.mnt, "-u", USER_A), (1, 1000), "after chown");
    assert_eq!(
        usage(&m.mnt, "-u", 0),
        (root_before.0 - 1, root_before.1 - 1000)
    );

    let gid0_before = usage(&m.mnt, "-g", 0);
    chown(&file, None, Some(USER_B)).unwrap();
    assert_eq!(usage(&m.mnt, "-g", USER_B), (1, 1000), "after chgrp");
    assert_eq!(
        usage(&m.mnt, "-g", 0),
        (gid0_before.0 - 1, gid0_before.1 - 1000)
    );
    assert_eq!(
        usage(&m.mnt, "-u", USER_A),
        (1, 1000),
        "chgrp keeps the user"
    );

    // chown past the new owner's hard limit is allowed; the owner's creates then fail.
    quota_ok(&["set", "-u", "60001", "--ihard", "1"], &m.mnt);
    quota_ok(&["set", "-g", "60002", "--ihard", "1"], &m.mnt);
    for name in ["g1", "g2"] {
        fs::write(dir.join(name), b"xyz").unwrap();
        chown(dir.join(name), Some(USER_A), Some(USER_B))
            .unwrap_or_else(|e| panic!("chown {name} past the hard limit: {e}"));
    }
    let line = line_of(&m.mnt, "-u", USER_A).unwrap();
    assert_eq!((line.inodes_used, line.bytes_used), (3, 1006), "{line:?}");
    assert_eq!(usage(&m.mnt, "-g", USER_B), (3, 1006));
    let new_file = cpath(&dir.join("mine"));
    assert_user_op(
        as_user(USER_A, || create_as(&new_file)),
        EDQUOT,
        "create by a user over its hard limit after chown",
    );
    // Giving files away moves the usage back.
    chown(dir.join("g1"), Some(0), Some(0)).unwrap();
    chown(dir.join("g2"), Some(0), Some(0)).unwrap();
    assert_eq!(usage(&m.mnt, "-u", USER_A), (1, 1000));
    assert_eq!(usage(&m.mnt, "-g", USER_B), (1, 1000));
    assert_counters_clean(&m.mnt);
    m.finish();
}

/// Sets USER_A's hard byte limit; whether `quota set` noted that files which existed meet
/// it only at close (a mount whose kernel opens files without asking the daemon).
fn set_bhard_notes_old_files(mnt: &Path, bhard: &str) -> bool {
    let set = quota_ok(&["set", "-u", "60001", "--bhard", bhard], mnt);
    set.stderr.contains("mounted without byte limits")
}

/// A mount that started without byte limits lets the kernel open files without asking
/// the daemon (`no_open`). A byte limit set on it then meets new files at `write`, and
/// files that existed at the kernel's writeback: `close` reports EDQUOT and nothing of the
/// refused write is stored. From the next mount every open reaches the daemon again.
#[test]
fn a_byte_limit_set_on_a_live_mount_reaches_old_files_at_close_and_after_a_remount_at_write() {
    let mut m = Mounted::with_options(&["allow_other"]);
    let dir = open_dir(&m, "d");
    let old = cpath(&dir.join("old"));
    let old_bytes = vec![b'o'; 1000];
    assert_user_op(
        as_user(USER_A, || write_as(&old, &old_bytes, 0)),
        0,
        "write old",
    );
    assert!(
        set_bhard_notes_old_files(&m.mnt, "3000"),
        "no note that old files meet the limit at close"
    );

    let new = cpath(&dir.join("new"));
    assert_user_op(
        as_user(USER_A, || write_as(&new, &[b'n'; 5000], 0)),
        EDQUOT,
        "write() of 5000 bytes to a new file at a bhard of 3000",
    );
    assert_user_op(
        as_user(USER_A, || write_as(&old, &[b'x'; 5000], 1000)),
        CLOSE_FAILED,
        "5000 bytes more to an old file: refused at close",
    );
    assert_eq!(usage(&m.mnt, "-u", USER_A), (2, 1000));
    m.remount();
    assert!(
        !set_bhard_notes_old_files(&m.mnt, "3000"),
        "a mount with byte limits said opens skip the daemon"
    );
    assert!(
        fs::read(dir.join("old")).unwrap() == old_bytes,
        "the refused write left nothing behind"
    );
    assert_user_op(
        as_user(USER_A, || write_as(&old, &[b'x'; 5000], 1000)),
        EDQUOT,
        "after a remount: write() to the old file",
    );
    assert_user_op(
        as_user(USER_A, || write_as(&old, &[b'x'; 2000], 1000)),
        0,
        "after a remount: 2000 more bytes fit",
    );
    assert_eq!(usage(&m.mnt, "-u", USER_A), (2, 3000));
    assert_counters_clean(&m.mnt);
    m.finish();
}

#[test]
fn hard_links_count_once_and_bytes_are_allocated_bytes() {
    let mut m = Mounted::new();
    // A byte limit far away, present at mount, makes the daemon open the file with direct
    // I/O, so writes reach it exactly as written (the writeback cache would write whole
    // pages).
    quota_ok(&["set", "-u", "60001", "--bhard", "4g"], &m.mnt);
    m.remount();
    let file = m.path("f");
    fs::write(&file, vec![3u8; 5000]).unwrap();
    chown(&file, Some(USER_A), Some(USER_A)).unwrap();
    assert_eq!(usage(&m.mnt, "-u", USER_A), (1, 5000));
    for i in 0..3 {
        fs::hard_link(&file, m.path(format!("link{i}"))).unwrap();
    }
    assert_eq!(fs::metadata(&file).unwrap().nlink(), 4);
    assert_eq!(usage(&m.mnt, "-u", USER_A), (1, 5000), "4 names, 1 inode");
    assert_eq!(usage(&m.mnt, "-g", USER_A), (1, 5000));
    fs::remove_file(m.path("link0")).unwrap();
    assert_eq!(usage(&m.mnt, "-u", USER_A), (1, 5000), "unlink of one name");

    let handle = OpenOptions::new().write(true).open(&file).unwrap();
    handle.set_len(1 << 30).unwrap();
    assert_eq!(fs::metadata(&file).unwrap().len(), 1 << 30);
    assert_eq!(
        usage(&m.mnt, "-u", USER_A),
        (1, 5000),
        "growing by truncate allocates nothing"
    );
    handle.write_all_at(&[4u8; 100], 512 * MIB).unwrap();
    drop(handle);
    assert_eq!(
        usage(&m.mnt, "-u", USER_A),
        (1, 5100),
        "100 bytes written in the hole"
    );
    let mut probe = vec![0u8; 200];
    File::open(m.path("link1"))
        .unwrap()
        .read_exact_at(&mut probe, 512 * MIB - 50)
        .unwrap();
    assert!(probe[..50].iter().all(|&b| b == 0) && probe[50..150].iter().all(|&b| b == 4));
    assert!(probe[150..].iter().all(|&b| b == 0));

    OpenOptions::new()
        .write(true)
        .open(m.path("link2"))
        .unwrap()
        .set_len(0)
        .unwrap();
    assert_eq!(
        usage(&m.mnt, "-u", USER_A),
        (1, 0),
        "truncate to 0 frees all"
    );
    for name in ["f", "link1", "link2"] {
        fs::remove_file(m.path(name)).unwrap();
    }
    // The last handle's RELEASE may come after the unlink (it is sent after close returned).
    common::wait_for(
        "the last handle's release",
        std::time::Duration::from_secs(10),
        || usage(&m.mnt, "-u", USER_A) == (0, 0),
    );
    assert_counters_clean(&m.mnt);
    m.finish();
}

#[test]
fn offline_report_equals_live_and_limits_persist() {
    let mut m = Mounted::with_options(&["allow_other"]);
    let dir = open_dir(&m, "d");
    fs::create_dir(m.path("proj")).unwrap();
    project_set(&m.path("proj"), "7");
    quota_ok(
        &["set", "-p", "7", "--bsoft", "1m", "--bhard", "2m"],
        &m.mnt,
    );
    quota_ok(
        &["set", "-u", "60001", "--isoft", "50", "--ihard", "100"],
        &m.mnt,
    );
    quota_ok(&["set", "-g", "60002", "--bhard", "10m"], &m.mnt);
    quota_ok(
        &["config", "--bytes-grace", "15m", "--inodes-grace", "7d"],
        &m.mnt,
    );
    fs::write(m.path("proj/a"), vec![1u8; 4321]).unwrap();
    fs::write(dir.join("mine"), vec![2u8; 777]).unwrap();
    chown(dir.join("mine"), Some(USER_A), Some(USER_B)).unwrap();
    let held = cpath(&dir.join("held"));
    assert_user_op(as_user(USER_A, || create_as(&held)), 0, "create held");

    let live: Vec<Vec<QuotaLine>> = ["-u", "-g", "-p"]
        .iter()
        .map(|flag| report(&m.mnt, flag))
        .collect();
    let live_settings = quota_ok(&["config", "--json"], &m.mnt).stdout;
    assert_eq!(
        live[0]
            .iter()
            .find(|l| l.id == USER_A)
            .map(|l| l.inodes_used),
        Some(2)
    );
    m.umount();

    let offline: Vec<Vec<QuotaLine>> = ["-u", "-g", "-p"]
        .iter()
        .map(|flag| report(&m.store, flag))
        .collect();
    assert_eq!(offline, live, "offline report of the store vs live report");
    let offline_settings = quota_ok(&["config", "--json"], &m.store).stdout;
    assert_eq!(offline_settings, live_settings);

    // Offline set, enforced once mounted again.
    quota_ok(&["set", "-u", "60001", "--ihard", "3"], &m.store);
    let offline_line = line_of(&m.store, "-u", USER_A).unwrap();
    assert_eq!((offline_line.inodes_used, offline_line.inodes_hard), (2, 3));
    m.mount();
    let live_line = line_of(&m.mnt, "-u", USER_A).unwrap();
    assert_eq!(live_line, offline_line, "limits survive the mount");
    let names: Vec<CString> = ["n1", "n2"].iter().map(|n| cpath(&dir.join(n))).collect();
    assert_user_op(as_user(USER_A, || create_as(&names[0])), 0, "3rd inode");
    assert_user_op(
        as_user(USER_A, || create_as(&names[1])),
        EDQUOT,
        "4th inode over the offline-set ihard 3",
    );
    // A new file in the project is still charged to it after the remount.
    fs::write(m.path("proj/b"), vec![3u8; 100]).unwrap();
    assert_eq!(usage(&m.mnt, "-p", 7), (3, 4421));
    m.umount();

    assert_counters_clean(&m.store);
    m.fsck_clean();
}

#[test]
fn online_counter_check_while_a_writer_runs() {
    let m = Mounted::new();
    fs::create_dir(m.path("w")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (root, stop, done) = (m.path("w"), stop.clone(), done.clone());
        thread::spawn(move || -> io::Result<()> {
            let mut i = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let path = root.join(format!("f{}", i % 64));
                if path.exists() {
                    fs::remove_file(&path)?;
                } else {
                    fs::write(&path, vec![i as u8; (i * 37) % 9000])?;
                }
                if i.is_multiple_of(16) {
                    let sub = root.join(format!("dir{}", i % 5));
                    if sub.exists() {
                        fs::remove_dir(&sub)?;
                    } else {
                        fs::create_dir(&sub)?;
                    }
                }
                i += 1;
                done.store(i, Ordering::SeqCst);
            }
            Ok(())
        })
    };
    assert!(
        poll(Duration::from_secs(60), || done.load(Ordering::SeqCst) > 50),
        "the writer made no progress"
    );
    let mut results = Vec::new();
    for _ in 0..3 {
        let before = done.load(Ordering::SeqCst);
        results.push((before, fsck_counters(&m.mnt)));
    }
    let ops_during = done.load(Ordering::SeqCst) - results[0].0;
    stop.store(true, Ordering::SeqCst);
    writer
        .join()
        .expect("writer panicked")
        .expect("writer failed");
    for (i, (_, out)) in results.iter().enumerate() {
        assert!(
            out.success() && out.stdout.contains("counters clean"),
            "online fsck --counters run {i} (with {ops_during} writer ops during the 3 runs):\n{}",
            out.describe()
        );
    }
    println!("{ops_during} writer operations during 3 online counter checks");
    // And quiet, the counters equal a walk of the tree.
    assert_eq!(sum_usage(&report(&m.mnt, "-u")), count_tree(&m.mnt));
    assert_counters_clean(&m.mnt);
    m.finish();
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "usage built up, the daemon killed, remounted and every counter compared: one scenario"
)]
fn counters_survive_kill_dash_nine() {
    // Without the writeback cache, so every write the writer saw succeed reached the daemon
    // in order. With it, the kernel sends a truncate before the cached pages below the new
    // size, and a kill in between leaves a file whose size covers bytes never stored (as on
    // XFS): the counters stay exact, but the walk below, which sums sizes, would not be.
    // Checkpoints every MiB (a hundred files or so), so the kill finds some of the files in
    // the store and some staged.
    let mut m = Mounted::with_options(&["writeback=off", "checkpoint=1M"]);
    fs::create_dir(m.path("w")).unwrap();
    quota_ok(&["set", "-u", "60001", "--ihard", "100000"], &m.mnt);
    File::open(&m.mnt).unwrap().sync_all().unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let killing = Arc::new(AtomicBool::new(false));
    let writer = {
        let (root, done, killing) = (m.path("w"), done.clone(), killing.clone());
        thread::spawn(move || -> Result<(), (io::Error, bool)> {
            let fail = |e: io::Error| (e, killing.load(Ordering::SeqCst));
            for i in 0..100_000usize {
                let dir = root.join(format!("d{}", i / 50));
                if i % 50 == 0 {
                    fs::create_dir(&dir).map_err(fail)?;
                }
                let path = dir.join(format!("f{i}"));
                let mut file = File::create(&path).map_err(fail)?;
                let len = (i * 131) % 20_000;
                file.write_all(&vec![i as u8; len]).map_err(fail)?;
                if i % 3 == 0 {
                    chown(&path, Some(USER_A), Some(USER_B)).map_err(fail)?;
                }
                if i % 7 == 0 {
                    // Only shrink: no holes, so allocated bytes equal the sizes.
                    file.set_len((len / 2) as u64).map_err(fail)?;
                }
                drop(file);
                if i % 5 == 0 {
                    fs::remove_file(&path).map_err(fail)?;
                }
                done.store(i + 1, Ordering::SeqCst);
            }
            Ok(())
        })
    };
    assert!(
        poll(Duration::from_secs(120), || done.load(Ordering::SeqCst)
            >= 300
            || writer.is_finished()),
        "the writer made no progress"
    );
    m.kill_daemon(|| killing.store(true, Ordering::SeqCst));
    let outcome = writer.join().expect("writer panicked");
    match outcome {
        Ok(()) => panic!("the writer finished 100000 files before the kill"),
        Err((error, after_kill)) => {
            assert!(after_kill, "writer failed before the kill: {error}");
            let code = errno(&error);
            assert!(
                common::is_dead_connection(code),
                "writer failed with {error} instead of a dead connection"
            );
        }
    }
    println!(
        "killed after {} acknowledged files",
        done.load(Ordering::SeqCst)
    );
    m.detach_dead_mount();

    assert_counters_clean(&m.store);
    m.fsck_clean();
    let offline = report(&m.store, "-u");
    m.mount();
    assert_eq!(report(&m.mnt, "-u"), offline, "report after recovery");
    let (inodes, bytes) = count_tree(&m.mnt);
    assert!(
        inodes > 100,
        "only {inodes} inodes came back: no checkpoint landed"
    );
    for flag in ["-u", "-g", "-p"] {
        assert_eq!(
            sum_usage(&report(&m.mnt, flag)),
            (inodes, bytes),
            "sum of report {flag} vs a walk of the tree (inodes, bytes)"
        );
    }
    // uid 60001 owns exactly the files the walk finds owned by it.
    let mut owned = 0;
    for dirent in fs::read_dir(m.path("w")).unwrap() {
        for file in fs::read_dir(dirent.unwrap().path()).unwrap() {
            owned += u64::from(file.unwrap().metadata().unwrap().uid() == USER_A);
        }
    }
    assert_eq!(usage(&m.mnt, "-u", USER_A).0, owned);
    assert_counters_clean(&m.mnt);
    m.finish();
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "a table of bad quota commands, each with the message it must give"
)]
fn bad_input_is_refused_clearly() {
    let m = Mounted::with_options(&["allow_other"]);
    let refused = |args: &[&str], target: &Path, needle: &str| {
        let out = quota(args, target);
        assert!(!out.success(), "expected a refusal:\n{}", out.describe());
        assert!(
            out.stderr.to_lowercase().contains(needle),
            "stderr should mention {needle:?}:\n{}",
            out.describe()
        );
    };
    refused(
        &["set", "-u", "no-such-user-xq", "--ihard", "5"],
        &m.mnt,
        "no such user",
    );
    refused(
        &["set", "-g", "no-such-group-xq", "--ihard", "5"],
        &m.mnt,
        "no such group",
    );
    refused(&["set", "-u", "60001", "--ihard=-5"], &m.mnt, "-5");
    refused(&["set", "-u", "60001", "--bhard=lots"], &m.mnt, "lots");
    refused(&["set", "-u", "60001", "--bsoft=1.5g"], &m.mnt, "1.5g");
    refused(&["set", "-u", "60001"], &m.mnt, "nothing to set");
    refused(
        &["set", "-u", "60001", "-g", "60002", "--ihard", "1"],
        &m.mnt,
        "",
    );
    refused(&["config", "--inodes-grace", "soon"], &m.mnt, "soon");
    refused(&["config", "--enforce-root", "maybe"], &m.mnt, "maybe");
    let plain = m.dir.path().join("plain");
    fs::create_dir(&plain).unwrap();
    refused(&["report"], &plain, "neither a shoal mountpoint nor");
    refused(&["set", "-u", "1", "--ihard", "1"], &plain, "neither");
    let counters = fsck_counters(&plain);
    assert_eq!(counters.code, Some(2), "{}", counters.describe());
    // Nothing above changed anything.
    assert_eq!(line_of(&m.mnt, "-u", USER_A), None);

    // An ordinary user may look but not change.
    let as_a = |args: &[&str]| {
        run(
            Command::new(SHOAL)
                .arg("quota")
                .args(args)
                .arg(&m.mnt)
                .current_dir("/")
                .uid(USER_A)
                .gid(USER_A),
            SHOAL_TIMEOUT,
        )
    };
    let out = as_a(&["report", "--json"]);
    assert!(out.success(), "report as uid 60001:\n{}", out.describe());
    let lines: Vec<QuotaLine> = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(lines, report(&m.mnt, "-u"));
    let out = as_a(&["set", "-u", "60001", "--ihard", "1000"]);
    assert!(!out.success(), "set as uid 60001:\n{}", out.describe());
    assert!(
        out.stderr.to_lowercase().contains("permission"),
        "{}",
        out.describe()
    );
    let out = as_a(&["config", "--enforce-root", "on"]);
    assert!(!out.success(), "config as uid 60001:\n{}", out.describe());
    assert!(out.stderr.to_lowercase().contains("permission"));
    assert_eq!(
        line_of(&m.mnt, "-u", USER_A),
        None,
        "the refused set changed nothing"
    );
    let settings = quota_ok(&["config", "--json"], &m.mnt);
    let settings: serde_json::Value = serde_json::from_str(&settings.stdout).unwrap();
    assert_eq!(settings["enforce_root"], false);
    m.finish();
}
