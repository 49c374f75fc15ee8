//! The tool tests that must run both ways (issue 34), under `shoal run`: fs_mark, bonnie++'s
//! file tests, and a program that fills the disk under the store. Their results are checked
//! through the kernel door (this test process is not preloaded), `--stats` proves the fast
//! path served the calls that matter, and every store ends clean under `shoal fsck`. The
//! other tools (tar, cp -a, find, du, rm -rf, diff, quota, kill -9) are in fast_path.rs.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use common::both_ways::{fast, kernel, stats_of};

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{incompressible, shoal_ok, test_dir, wait_for, CmdOutput, Mounted, SHOAL};

const FS_MARK: &str = "/usr/bin/fs_mark";
const BONNIE: &str = "/usr/sbin/bonnie++";
/// The system's Python (not a user's shim).
const PYTHON: &str = "/usr/bin/python3";

// ---------------------------------------------------------------------------------------
// Running commands both ways (as in fast_path.rs).

/// Succeeded, and the fast path served at least `min` of each of `calls` (by their system
/// call names, as `--stats` prints them).
#[track_caller]
fn assert_served(out: &CmdOutput, calls: &[(&str, u64)], what: &str) {
    assert!(out.success(), "{what}: {}", out.describe());
    let stats = stats_of(out);
    for &(call, min) in calls {
        let served = stats.get(call).map_or(0, |&(fast, _)| fast);
        assert!(
            served >= min,
            "{what}: the fast path served {served} {call} calls (at least {min} expected):\n{}",
            out.describe()
        );
    }
}

/// A script written into `dir`.
fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Waits until the daemon that mounts the store at `store` has said whether it serves the
/// fast path: true if it does.
fn serves_fast_path(store: &Path) -> bool {
    let mut this_mount = String::new();
    wait_for("the daemon's log", Duration::from_secs(10), || {
        let log = fs::read_to_string(store.join("shoal.log")).unwrap_or_default();
        let start = log.rfind("Mounting").unwrap_or(0);
        this_mount = log[start..].to_string();
        this_mount.contains("shoal::mount_cmd: mounted")
    });
    !this_mount.contains("no fast path")
}

/// The fast path's socket is named after the mount's device number, which the kernel hands
/// out again as soon as a mount goes: while the daemon of a mount that just went still
/// holds the name, a new daemon serves no fast path. `remount` until it does.
fn until_fast_path(store: &Path, mut remount: impl FnMut()) {
    for _ in 0..20 {
        if serves_fast_path(store) {
            return;
        }
        remount();
    }
    panic!("no fast path for {} after 20 mounts", store.display());
}

fn mount_with_fast_path(options: &[&str]) -> Mounted {
    let mut m = Mounted::with_options(options);
    let store = m.store.clone();
    until_fast_path(&store, || {
        m.umount();
        std::thread::sleep(Duration::from_millis(100));
        m.mount();
    });
    m
}

/// Every regular file under `dir`, recursively; panics on anything else but directories.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files.extend(files_under(&entry.path()));
        } else {
            assert!(kind.is_file(), "{}: {kind:?}", entry.path().display());
            files.push(entry.path());
        }
    }
    files
}

/// What each way of listing `dir` finds now, for a failure message: the kernel door again,
/// `ls -f` through it, the fast path's `find`, and the daemon's statistics.
fn listing_report(m: &Mounted, dir: &Path) -> String {
    std::thread::sleep(Duration::from_millis(500));
    let again = files_under(dir).len();
    let dir_arg = dir.to_str().unwrap();
    let ls = kernel(&m.mnt, &["/usr/bin/ls", "-f", dir_arg]);
    let find = fast(&m.mnt, &["/usr/bin/find", dir_arg, "-type", "f"]);
    let stats = Command::new(SHOAL)
        .args(["stats", "--json"])
        .arg(&m.mnt)
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    format!(
        "listed again: {again}; ls -f: {} lines; fast find: {} lines; stats: {stats}",
        ls.stdout.lines().count(),
        find.stdout.lines().count()
    )
}

// ---------------------------------------------------------------------------------------
// fs_mark.

/// The file count of fs_mark's result line, below its "FSUse%  Count ..." header.
fn fs_mark_count(output: &str) -> Option<u64> {
    let mut lines = output
        .lines()
        .skip_while(|line| !line.starts_with("FSUse%"));
    lines.next()?;
    lines.next()?.split_whitespace().nth(1)?.parse().ok()
}

/// fs_mark creates, writes and closes its files, with and without an fsync each (`-S 1`,
/// round robin over subdirectories), through the kernel door and on the fast path; the
/// files it keeps (`-k`, a directory per thread) are all there through the kernel door, 100
/// zero bytes each, as it writes them.
#[test]
fn fs_mark_runs_both_ways() {
    const THREADS: u64 = 2;
    const SIZE: usize = 100;
    let m = mount_with_fast_path(&[]);
    let runs = [("0", 2000, ""), ("1", 300, "-D 4 -N 32")];
    for door in ["kernel", "fast"] {
        for (sync, files_per_thread, subdirs) in runs {
            // Relative to the mount's root, where fs_mark also writes its log (stdio): with
            // subdirectories, a long path overflows fs_mark's name buffers (either door).
            let name = format!("fs_mark-{door}-S{sync}");
            let dir = m.path(&name);
            fs::create_dir(&dir).unwrap();
            // A directory per thread: each of fs_mark's processes seeds its random names
            // with the microseconds of its start, and two that start in the same one
            // make the same names (a run made 2572 files of its 4000 opens, the rest
            // truncated the other thread's).
            let thread_dirs: String = (0..THREADS).map(|t| format!(" -d {name}/t{t}")).collect();
            let args = format!(
                "{FS_MARK}{thread_dirs} -n {files_per_thread} -s {SIZE} -t {THREADS} \
                 -S {sync} -k -L 1 {subdirs}"
            );
            let args: Vec<&str> = args.split_whitespace().collect();
            let created = THREADS * files_per_thread;
            let what = format!("fs_mark -S {sync} ({door})");
            let out = if door == "fast" {
                let out = fast(&m.mnt, &args);
                assert_served(&out, &[("openat", created), ("write", created)], &what);
                if sync == "1" {
                    assert_served(&out, &[("fsync", created)], &what);
                }
                out
            } else {
                kernel(&m.mnt, &args)
            };
            assert!(out.success(), "{what}: {}", out.describe());
            let count = fs_mark_count(&out.stdout);
            assert_eq!(count, Some(created), "{what}: {}", out.describe());
            let files = files_under(&dir);
            if files.len() as u64 != created {
                panic!(
                    "{what}: files kept: {} of {created}; {}",
                    files.len(),
                    listing_report(&m, &dir)
                );
            }
            for file in &files {
                assert_eq!(fs::read(file).unwrap(), [0u8; SIZE], "{}", file.display());
            }
            let log = fs::read_to_string(m.path("fs_log.txt")).unwrap();
            let logged = format!("-d  {name}/t0  -d  {name}/t1  ");
            assert!(log.contains(&logged), "{what}: its log:\n{log}");
        }
    }
    m.finish();
}

// ---------------------------------------------------------------------------------------
// bonnie++.

/// bonnie++'s CSV line: fields 0-3 and 5-25 are the version, machine and test parameters
/// (4 is the random seed, 26 on are rates, CPU use and latencies).
fn bonnie_parameters(output: &str) -> Vec<String> {
    let line = output
        .lines()
        .rev()
        .find(|line| line.starts_with("1.9"))
        .unwrap_or_else(|| panic!("no CSV line in bonnie++'s output:\n{output}"));
    let fields: Vec<&str> = line.split(',').collect();
    assert!(fields.len() > 37, "a short CSV line: {line}");
    fields[..4]
        .iter()
        .chain(&fields[5..26])
        .map(|field| (*field).to_string())
        .collect()
}

/// bonnie++'s file tests (2048 files of 100 B to 4 KiB in 4 directories: created, read and
/// stat'ed, deleted, in sequential then random order) succeed through the kernel door and
/// under `shoal run`, with the same parameters, and leave nothing behind.
#[test]
fn bonnie_file_tests_pass_both_ways() {
    const FILES: u64 = 2048;
    let m = mount_with_fast_path(&[]);
    let mut parameters = Vec::new();
    for door in ["kernel", "fast"] {
        let dir = m.path(format!("bonnie-{door}"));
        fs::create_dir(&dir).unwrap();
        let mut args: Vec<&OsStr> = vec![OsStr::new(BONNIE), OsStr::new("-d"), dir.as_os_str()];
        // `-u root`: bonnie++ refuses to run as root unless told which user to be.
        let rest = "-s 0 -n 2:4096:100:4 -u root -x 1 -q";
        args.extend(rest.split_whitespace().map(OsStr::new));
        let out = if door == "fast" {
            let out = fast(&m.mnt, &args);
            // Each file is created and written, read back and unlinked, in both orders.
            let calls = [
                ("openat", 2 * FILES),
                ("write", 2 * FILES),
                ("read", 2 * FILES),
                ("unlink", 2 * FILES),
            ];
            assert_served(&out, &calls, "bonnie++ under shoal run");
            out
        } else {
            kernel(&m.mnt, &args)
        };
        assert!(out.success(), "bonnie++ ({door}): {}", out.describe());
        parameters.push(bonnie_parameters(&out.stdout));
        assert_eq!(
            files_under(&dir),
            Vec::<PathBuf>::new(),
            "bonnie++ ({door}) left files"
        );
    }
    assert_eq!(parameters[0], parameters[1], "the same tests both ways");
    m.finish();
}

// ---------------------------------------------------------------------------------------
// A full disk (as faults.rs's `a_full_disk_is_enospc_and_the_mount_lives_on`, with the
// writes made under `shoal run`).

/// A small filesystem on a loop device (an image file), mounted on a fresh directory and
/// unmounted on drop: a store on it runs out of space quickly.
struct LoopFs {
    mountpoint: PathBuf,
    // Last: removed after the unmount in Drop.
    _dir: tempfile::TempDir,
}

impl LoopFs {
    fn new(size_mib: u64) -> LoopFs {
        let dir = test_dir();
        let image = dir.path().join("image");
        let mountpoint = dir.path().join("fs");
        fs::create_dir(&mountpoint).unwrap();
        fs::File::create(&image)
            .unwrap()
            .set_len(size_mib << 20)
            .unwrap();
        common::run_ok(
            Command::new("mkfs.ext4").arg("-q").arg(&image),
            common::SHOAL_TIMEOUT,
        );
        common::run_ok(
            Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(&mountpoint),
            common::SHOAL_TIMEOUT,
        );
        LoopFs {
            mountpoint,
            _dir: dir,
        }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // Lazy: a failed test may leave a daemon with files open there.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mountpoint)
            .status();
    }
}

/// A shoal store on `disk`, mounted (serving the fast path) on a fresh directory;
/// unmounted on drop.
struct StoreOn {
    store: PathBuf,
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

impl StoreOn {
    fn new(disk: &LoopFs) -> StoreOn {
        let dir = test_dir();
        let store = disk.mountpoint.join("store");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        shoal_ok(&[OsStr::new("mkfs"), store.as_os_str()]);
        let mounted = StoreOn {
            store,
            mnt,
            _dir: dir,
        };
        mounted.mount();
        until_fast_path(&mounted.store, || {
            mounted.umount();
            std::thread::sleep(Duration::from_millis(100));
            mounted.mount();
        });
        mounted
    }

    fn mount(&self) {
        shoal_ok(&[
            OsStr::new("mount"),
            self.store.as_os_str(),
            self.mnt.as_os_str(),
            OsStr::new("-o"),
            OsStr::new("commit=1"),
        ]);
    }

    fn umount(&self) {
        shoal_ok(&[OsStr::new("umount"), self.mnt.as_os_str()]);
    }

    fn path(&self, name: &str) -> PathBuf {
        self.mnt.join(name)
    }

    fn fsck_clean(&self) {
        common::run_ok(
            Command::new(SHOAL).arg("fsck").arg(&self.store),
            common::FSCK_TIMEOUT,
        );
    }
}

impl Drop for StoreOn {
    fn drop(&mut self) {
        if common::is_mounted(&self.mnt) {
            common::force_unmount(Some(&self.store), &self.mnt);
        }
    }
}

/// Fills the disk with fsync'd 1 MiB files, then checks on the fast path that the mount
/// lives on. Each step that fails prints its name and errno.
const FILL: &str = r#"
import errno, os, sys
mnt, source_path = sys.argv[1], sys.argv[2]
source = open(source_path, "rb").read()

def path(name):
    return os.path.join(mnt, name)

def contents(index):
    return index.to_bytes(8, "little") + source[8:]

def failed(step, error):
    return step + " " + errno.errorcode.get(error.errno, str(error.errno))

def write_file(name, data):
    """Creates, writes and fsyncs: None, or the step that failed and its errno."""
    try:
        fd = os.open(path(name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as e:
        return failed("open", e)
    result = None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError as e:
        result = failed("write" if view else "fsync", e)
    try:
        os.close(fd)
    except OSError as e:
        result = result or failed("close", e)
    return result

def reads_back(name, data):
    with open(path(name), "rb") as f:
        return f.read() == data

os.mkdir(path("dir"))
print("keep", write_file("keep", source[:300000]) or "ok")
written = []
for index in range(400):
    refused = write_file("dir/f%d" % index, contents(index))
    if refused:
        print("refused", refused)
        break
    written.append(index)
print("written", *written)
print("small", write_file("small", b"x") or "ok")
try:
    os.mkdir(path("newdir"))
    print("mkdir ok")
except OSError as e:
    print(failed("mkdir", e))
# The mount lives on: reads, rename, truncate and unlink.
print("read keep", reads_back("keep", source[:300000]))
first = written[0]
print("read first", reads_back("dir/f%d" % first, contents(first)))
os.rename(path("dir/f%d" % first), path("moved"))
fd = os.open(path("moved"), os.O_WRONLY)
os.ftruncate(fd, 0)
os.close(fd)
print("truncated", os.stat(path("moved")).st_size)
os.unlink(path("moved"))
# The file whose write was refused, if its create got through.
if os.path.exists(path("dir/f%d" % len(written))):
    os.unlink(path("dir/f%d" % len(written)))
print("lives on")
"#;

/// Deletes the files named after the source, then writes one more 1 MiB file until it fits
/// (the deleted files' space comes back by reclaim, a background round).
const FREE: &str = r#"
import errno, os, sys, time
mnt, source_path, names = sys.argv[1], sys.argv[2], sys.argv[3:]
source = open(source_path, "rb").read()
for name in names:
    os.unlink(os.path.join(mnt, name))
print("listing", len(os.listdir(os.path.join(mnt, "dir"))))
deadline = time.monotonic() + 60
while True:
    try:
        fd = os.open(os.path.join(mnt, "after"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(source)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        break
    except OSError as e:
        if e.errno != errno.ENOSPC or time.monotonic() > deadline:
            raise
        time.sleep(0.1)
print("after ok")
"#;

/// What file `dir/f{index}` holds: its index, then the source's bytes.
fn file_contents(source: &[u8], index: u64) -> Vec<u8> {
    let mut bytes = source.to_vec();
    bytes[..8].copy_from_slice(&index.to_le_bytes());
    bytes
}

/// The line of `out` that starts with `key` and a space: the rest of it.
#[track_caller]
fn line_after<'a>(out: &'a CmdOutput, key: &str) -> &'a str {
    out.stdout
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no `{key}` line:\n{}", out.describe()))
}

/// A full device under a program on the fast path: ENOSPC from the call that needs the
/// space, never EIO; the mount lives on (reads, rename, truncate, unlink on the fast path,
/// reads through the kernel door); every fsync'd file survives; deleted files' space comes
/// back; the store unmounts clean.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one story: fill the disk, see ENOSPC, live on through both doors, free space, remount"
)]
fn a_full_disk_is_enospc_on_the_fast_path_and_the_mount_lives_on() {
    let disk = LoopFs::new(128);
    let m = StoreOn::new(&disk);
    let programs = test_dir();
    let source_path = programs.path().join("source");
    let source = incompressible(7, 1 << 20);
    fs::write(&source_path, &source).unwrap();
    let fill = script(programs.path(), "fill.py", FILL);
    let args = [
        OsStr::new(PYTHON),
        fill.as_os_str(),
        m.mnt.as_os_str(),
        source_path.as_os_str(),
    ];
    let out = fast(&m.mnt, &args);
    assert!(out.success(), "{}", out.describe());
    let written: Vec<u64> = line_after(&out, "written")
        .split_whitespace()
        .map(|index| index.parse().unwrap())
        .collect();
    assert!(written.len() > 10, "only {} MiB fit", written.len());
    let files = written.len() as u64;
    assert_served(
        &out,
        &[
            ("write", files),
            ("fsync", files),
            // The moved file; the refused one too unless its create was refused.
            ("unlink", 1),
            ("ftruncate", 1),
        ],
        "filling the disk",
    );
    let refused = line_after(&out, "refused");
    assert!(refused.ends_with(" ENOSPC"), "{}", out.describe());
    // Small creates and mkdir are refused the same way if at all, not with EIO.
    for step in ["small", "mkdir"] {
        let result = line_after(&out, step);
        assert!(
            result.ends_with("ok") || result.ends_with("ENOSPC"),
            "{}",
            out.describe()
        );
    }
    for check in [
        "read keep True",
        "read first True",
        "truncated 0",
        "lives on",
    ] {
        assert!(out.stdout.contains(check), "{check}: {}", out.describe());
    }
    // Through the kernel door, still full: every fsync'd file reads back.
    assert_eq!(fs::read(m.path("keep")).unwrap(), source[..300_000]);
    for &index in &written[1..] {
        let name = format!("dir/f{index}");
        assert_eq!(
            fs::read(m.path(&name)).unwrap(),
            file_contents(&source, index),
            "{name}"
        );
    }
    // Most files go (a blob file's space comes back by copying its live rest elsewhere,
    // which needs that much free space: see docs/durability.md), on the fast path.
    let (deleted, kept) = written[1..].split_at(written.len() - 3);
    let free = script(programs.path(), "free.py", FREE);
    let mut args: Vec<&OsStr> = vec![OsStr::new(PYTHON), free.as_os_str(), m.mnt.as_os_str()];
    args.push(source_path.as_os_str());
    let names: Vec<String> = deleted
        .iter()
        .map(|index| format!("dir/f{index}"))
        .collect();
    args.extend(names.iter().map(OsStr::new));
    let out = fast(&m.mnt, &args);
    assert_served(
        &out,
        &[("unlink", deleted.len() as u64), ("write", 1)],
        "freeing space",
    );
    assert_eq!(line_after(&out, "listing"), kept.len().to_string());
    assert!(out.stdout.contains("after ok"), "{}", out.describe());
    // Everything fsync'd is there after an unmount, and the store is clean.
    m.umount();
    m.fsck_clean();
    m.mount();
    assert_eq!(fs::read(m.path("keep")).unwrap(), source[..300_000]);
    for &index in kept {
        let name = format!("dir/f{index}");
        assert_eq!(
            fs::read(m.path(&name)).unwrap(),
            file_contents(&source, index),
            "{name}"
        );
    }
    assert_eq!(fs::read(m.path("after")).unwrap(), source);
    m.umount();
}
