//! The kernel's contract beyond plain POSIX calls: inode lifetime until FORGET, mount
//! options, file handles, monotonic times under the writeback cache, O_TMPFILE, fallocate
//! and POSIX ACLs. Each test mounts its own store through the kernel and ends with a clean
//! `shoal fsck`.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{as_user, run_ok, Mounted};

const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// A test that forks (`as_user`) runs alone: its child inherits every fd the test process
/// holds, and a concurrent test's unmount would find its mount busy while a child lives.
static FORKS: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn no_forks_meanwhile() -> std::sync::RwLockReadGuard<'static, ()> {
    FORKS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    FORKS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("path without NUL")
}

fn fstat(file: &File) -> io::Result<libc::stat> {
    // SAFETY: a zeroed stat buffer filled by fstat on an open fd.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        if libc::fstat(file.as_raw_fd(), &mut stat) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stat)
    }
}

fn open_dir(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// `findmnt`'s view of one column of the mount at `mnt`.
fn findmnt(mnt: &Path, column: &str) -> String {
    let out = run_ok(
        Command::new("findmnt")
            .args(["-n", "-o", column, "--mountpoint"])
            .arg(mnt),
        TOOL_TIMEOUT,
    );
    out.stdout.trim().to_string()
}

// ---------------------------------------------------------------------------------------
// Inode lifetime: requests for an inode the kernel holds succeed until it forgets it.

#[test]
fn syncfs_after_writing_and_removing_a_file_succeeds() {
    let _forks = no_forks_meanwhile();
    let m = Mounted::new();
    // The writeback cache sends the written file's times after `rm`; a failure there is
    // recorded as a writeback error that the next syncfs reports.
    for round in 0..5 {
        let script = format!(
            "echo hello > {0}/f{round} && rm {0}/f{round} && sync -f {0}",
            m.mnt.display()
        );
        run_ok(Command::new("sh").arg("-c").arg(&script), TOOL_TIMEOUT);
    }
    // Files replaced by a rename, as `tar xf` over an existing tree does.
    let script = format!(
        "for i in 1 2 3 4 5 6 7 8; do echo a > {0}/g$i; echo b > {0}/h$i; mv {0}/h$i {0}/g$i; done && sync -f {0}",
        m.mnt.display()
    );
    run_ok(Command::new("sh").arg("-c").arg(&script), TOOL_TIMEOUT);
    assert_eq!(fs::read(m.path("g3")).unwrap(), b"b\n");
    m.finish();
}

#[test]
fn fstat_of_a_removed_open_directory_shows_no_links() {
    let _forks = no_forks_meanwhile();
    let m = Mounted::new();
    fs::create_dir(m.path("gone")).unwrap();
    let gone = open_dir(&m.path("gone"));
    let before = fstat(&gone).unwrap();
    assert_eq!(before.st_nlink, 2);
    fs::remove_dir(m.path("gone")).unwrap();
    let after = fstat(&gone).expect("fstat of a directory removed by rmdir");
    assert_eq!(after.st_nlink, 0, "a removed directory has no links");
    assert_eq!(after.st_ino, before.st_ino);
    assert_eq!(after.st_mode & libc::S_IFMT, libc::S_IFDIR);

    // Replaced by a rename over it.
    fs::create_dir(m.path("old")).unwrap();
    fs::create_dir(m.path("new")).unwrap();
    let replaced = open_dir(&m.path("old"));
    let replaced_ino = fstat(&replaced).unwrap().st_ino;
    fs::rename(m.path("new"), m.path("old")).unwrap();
    let after = fstat(&replaced).expect("fstat of a directory replaced by rename");
    assert_eq!(after.st_nlink, 0);
    assert_eq!(after.st_ino, replaced_ino);
    assert_ne!(fs::metadata(m.path("old")).unwrap().ino(), replaced_ino);

    // A regular file removed while open keeps its data, with no links.
    let mut file = File::create(m.path("file")).unwrap();
    file.write_all(b"kept").unwrap();
    fs::remove_file(m.path("file")).unwrap();
    assert_eq!(fstat(&file).unwrap().st_nlink, 0);
    drop((gone, replaced, file));
    m.finish();
}

// ---------------------------------------------------------------------------------------
// Mount options.

#[test]
fn mount_shows_the_store_as_source_and_fuse_shoal_as_type() {
    let _forks = no_forks_meanwhile();
    let mut m = Mounted::new();
    assert_eq!(findmnt(&m.mnt, "SOURCE"), m.store.display().to_string());
    assert_eq!(findmnt(&m.mnt, "FSTYPE"), "fuse.shoal");
    m.umount();
    m.set_options(&["fsname=objects-a"]);
    m.mount();
    assert_eq!(findmnt(&m.mnt, "SOURCE"), "objects-a");
    // shoal's own commands still find the mount.
    common::shoal_ok(&[
        std::ffi::OsStr::new("stats"),
        m.mnt.as_os_str(),
        "--json".as_ref(),
    ]);
    m.finish();
}

#[test]
fn generic_mount_options_are_accepted_and_applied() {
    let _forks = no_forks_meanwhile();
    let m = Mounted::with_options(&[
        "defaults",
        "nosuid",
        "nodev",
        "noexec",
        "noatime",
        "subtype=shoal",
    ]);
    let options = findmnt(&m.mnt, "VFS-OPTIONS");
    for wanted in ["nosuid", "nodev", "noexec", "noatime"] {
        assert!(
            options.split(',').any(|o| o == wanted),
            "{wanted} not in {options}"
        );
    }
    // noexec is the kernel's to apply.
    let script = m.path("script");
    fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let error = Command::new(&script)
        .status()
        .expect_err("exec on a noexec mount");
    assert_eq!(error.raw_os_error(), Some(libc::EACCES));
    m.finish();

    let m = Mounted::with_options(&["dev", "suid", "exec", "relatime", "atime"]);
    let options = findmnt(&m.mnt, "VFS-OPTIONS");
    for unwanted in ["nosuid", "nodev", "noexec", "noatime"] {
        assert!(
            !options.split(',').any(|o| o == unwanted),
            "{unwanted} in {options}"
        );
    }
    let script = m.path("script");
    fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert!(Command::new(&script).status().unwrap().success());
    m.finish();
}

#[test]
fn remount_read_only_and_back() {
    let _forks = no_forks_meanwhile();
    let m = Mounted::new();
    fs::write(m.path("before"), b"1").unwrap();
    // -i: the kernel's remount itself (mount(8) would run a mount.fuse.shoal helper).
    let remount = |options: &str| {
        run_ok(
            Command::new("mount")
                .args(["-i", "-o", options])
                .arg(&m.mnt),
            TOOL_TIMEOUT,
        )
    };
    remount("remount,ro");
    assert!(findmnt(&m.mnt, "VFS-OPTIONS").starts_with("ro"));
    let error = fs::write(m.path("during"), b"2").expect_err("write on a ro remount");
    assert_eq!(error.raw_os_error(), Some(libc::EROFS));
    assert_eq!(fs::read(m.path("before")).unwrap(), b"1");
    remount("remount,rw");
    assert!(findmnt(&m.mnt, "VFS-OPTIONS").starts_with("rw"));
    fs::write(m.path("after"), b"3").unwrap();
    assert_eq!(fs::read(m.path("after")).unwrap(), b"3");
    m.finish();
}

#[test]
fn bad_mount_names_are_refused() {
    let _forks = no_forks_meanwhile();
    let dir = common::test_dir();
    let store = dir.path().join("store");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    common::shoal_ok(&[std::ffi::OsStr::new("mkfs"), store.as_os_str()]);
    for bad in ["fsname=", "subtype=a b", "noexec=1"] {
        let out = common::shoal(&[
            std::ffi::OsStr::new("mount"),
            store.as_os_str(),
            mnt.as_os_str(),
            "-o".as_ref(),
            bad.as_ref(),
        ]);
        assert!(!out.success(), "{bad} accepted: {}", out.describe());
        assert!(!common::is_mounted(&mnt));
    }
}

// ---------------------------------------------------------------------------------------
// File handles.

/// A `struct file_handle` with room for the largest handle (MAX_HANDLE_SZ).
#[repr(C)]
struct FileHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; 128],
}

fn name_to_handle(path: &Path) -> io::Result<FileHandle> {
    let mut handle = FileHandle {
        handle_bytes: 128,
        handle_type: 0,
        f_handle: [0; 128],
    };
    let mut mount_id: libc::c_int = 0;
    let path = cpath(path);
    // SAFETY: NUL-terminated path, a handle buffer of the size it declares, an int out.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            path.as_ptr(),
            &mut handle as *mut FileHandle,
            &mut mount_id as *mut libc::c_int,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(handle)
}

fn open_by_handle(mount: &File, handle: &FileHandle) -> io::Result<File> {
    // SAFETY: a valid fd on the mount and a handle filled by name_to_handle_at.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount.as_raw_fd(),
            handle as *const FileHandle,
            libc::O_RDONLY,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd this function owns.
    Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) })
}

/// Drops the kernel's dentries and inodes (the kernel FORGETs them), as memory pressure
/// would.
fn drop_dentry_cache() {
    shoal_sys::process::sync_all();
    fs::write("/proc/sys/vm/drop_caches", b"2").expect("drop dentry cache");
}

fn read_by_handle(mnt: &Path, handle: &FileHandle) -> io::Result<Vec<u8>> {
    let mount = open_dir(mnt);
    let mut file = open_by_handle(&mount, handle)?;
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut file, &mut bytes)?;
    Ok(bytes)
}

#[test]
fn files_reopen_by_handle_after_the_dentry_cache_is_dropped() {
    let _forks = no_forks_meanwhile();
    let mut m = Mounted::new();
    fs::create_dir_all(m.path("a/b")).unwrap();
    fs::write(m.path("a/b/file"), b"by handle").unwrap();
    fs::write(m.path("gone"), b"x").unwrap();
    let handle = name_to_handle(&m.path("a/b/file")).expect("name_to_handle_at");
    let dir_handle = name_to_handle(&m.path("a/b")).expect("name_to_handle_at of a dir");
    let gone = name_to_handle(&m.path("gone")).unwrap();
    let gone_ino = fs::metadata(m.path("gone")).unwrap().ino();
    fs::remove_file(m.path("gone")).unwrap();
    drop_dentry_cache();
    assert_eq!(read_by_handle(&m.mnt, &handle).unwrap(), b"by handle");
    // A directory by handle, then its parent (the kernel looks up "..").
    let mount = open_dir(&m.mnt);
    let dir = open_by_handle(&mount, &dir_handle).expect("open_by_handle_at of a dir");
    drop(mount);
    let parent_of_dir = fs::metadata(format!("/proc/self/fd/{}/..", dir.as_raw_fd()));
    drop(dir);
    assert!(parent_of_dir.is_ok(), "{parent_of_dir:?}");
    let error = read_by_handle(&m.mnt, &gone).expect_err("a removed file's handle");
    assert_eq!(error.raw_os_error(), Some(libc::ESTALE), "{error}");

    // Handles outlive the mount, and a removed file's number is never handed out again.
    m.umount();
    m.mount();
    assert_eq!(read_by_handle(&m.mnt, &handle).unwrap(), b"by handle");
    for i in 0..200 {
        let ino = File::create(m.path(format!("new{i}")))
            .unwrap()
            .metadata()
            .unwrap()
            .ino();
        assert_ne!(ino, gone_ino, "inode number reused");
    }
    let error = read_by_handle(&m.mnt, &gone).expect_err("a removed file's handle");
    assert_eq!(error.raw_os_error(), Some(libc::ESTALE), "{error}");
    m.finish();
}

// ---------------------------------------------------------------------------------------
// Times.

fn times_of(file: &File) -> [(i64, i64); 2] {
    let stat = fstat(file).unwrap();
    [
        (stat.st_mtime, stat.st_mtime_nsec),
        (stat.st_ctime, stat.st_ctime_nsec),
    ]
}

#[test]
fn times_never_go_backwards_under_the_writeback_cache() {
    let _forks = no_forks_meanwhile();
    let m = Mounted::new();
    // Alternate changes shoal stamps (create, chmod) with ones the kernel stamps itself
    // (writes through the writeback cache); each must leave mtime and ctime where they
    // were or later.
    for i in 0..200 {
        let path = m.path(format!("f{i}"));
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut last = times_of(&file);
        let mut step = |what: &str, file: &File| {
            let now = times_of(file);
            assert!(
                now[0] >= last[0] && now[1] >= last[1],
                "file {i}: after {what}, (mtime, ctime) went from {last:?} to {now:?}"
            );
            last = now;
        };
        file.write_all(b"x").unwrap();
        step("a write", &file);
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        step("chmod", &file);
        file.write_all(b"y").unwrap();
        step("a second write", &file);
        file.sync_all().unwrap();
        step("fsync", &file);
        drop(file);
        let file = File::open(&path).unwrap();
        step("close and reopen", &file);
    }
    m.finish();
}

// ---------------------------------------------------------------------------------------
// O_TMPFILE and fallocate, each checked against tmpfs.

/// A tmpfs mounted in a fresh directory: the reference for what Linux filesystems do.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn new() -> Self {
        let dir = common::test_dir();
        run_ok(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=64m", "shoal-test-tmpfs"])
                .arg(dir.path()),
            TOOL_TIMEOUT,
        );
        Tmpfs { dir }
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn open_tmpfile(dir: &Path, flags: i32) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o640)
        .custom_flags(libc::O_TMPFILE | flags)
        .open(dir)
}

/// linkat through /proc/self/fd, as Swift's object server does it.
fn link_open_file(file: &File, to: &Path) -> io::Result<()> {
    let from = cpath(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())));
    let to = cpath(to);
    // SAFETY: NUL-terminated paths.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What one O_TMPFILE sequence shows: (nlink while unnamed, nlink after the link, mode,
/// bytes read back by name, the errno of linking an O_EXCL one, names left in the dir).
fn tmpfile_story(dir: &Path) -> (u64, u64, u32, Vec<u8>, Option<i32>, Vec<String>) {
    let mut file = open_tmpfile(dir, 0).expect("open O_TMPFILE");
    file.write_all(b"object body").unwrap();
    let unnamed = fstat(&file).unwrap().st_nlink;
    link_open_file(&file, &dir.join("object")).expect("linkat of an O_TMPFILE");
    let named = fstat(&file).unwrap().st_nlink;
    let mode = fstat(&file).unwrap().st_mode;
    drop(file);
    let body = fs::read(dir.join("object")).unwrap();

    let exclusive = open_tmpfile(dir, libc::O_EXCL).unwrap();
    let excl_error = link_open_file(&exclusive, &dir.join("never"))
        .err()
        .and_then(|e| e.raw_os_error());
    drop(exclusive);
    // Never linked: gone at close.
    let mut dropped = open_tmpfile(dir, 0).unwrap();
    dropped.write_all(&[7; 100_000]).unwrap();
    drop(dropped);
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    (unnamed, named, mode, body, excl_error, names)
}

#[test]
fn o_tmpfile_and_linkat_behave_as_on_tmpfs() {
    let _forks = no_forks_meanwhile();
    let tmpfs = Tmpfs::new();
    let mut m = Mounted::new();
    fs::create_dir(tmpfs.path("d")).unwrap();
    fs::create_dir(m.path("d")).unwrap();
    let used_before = common_inodes_used(&m.mnt);
    let expected = tmpfile_story(&tmpfs.path("d"));
    let actual = tmpfile_story(&m.path("d"));
    assert_eq!(actual, expected);
    assert_eq!((actual.0, actual.1), (0, 1));
    // One inode more: the linked object; the unlinked ones are given back once the kernel
    // forgets them, which it does after close, asynchronously (FORGET has no reply).
    let deadline = Instant::now() + Duration::from_secs(5);
    while common_inodes_used(&m.mnt) != used_before + 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(common_inodes_used(&m.mnt), used_before + 1);
    m.umount();
    m.fsck_clean();
    m.mount();
    assert_eq!(fs::read(m.path("d/object")).unwrap(), b"object body");
    m.finish();
}

/// Inodes in use on the filesystem at `path` (statvfs: total minus free).
fn common_inodes_used(path: &Path) -> u64 {
    let stat = shoal_sys::statvfs::statvfs(path).expect("statvfs");
    stat.f_files - stat.f_ffree
}

fn fallocate(file: &File, mode: i32, offset: u64, length: u64) -> Result<(), i32> {
    // SAFETY: fallocate on an open fd.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset as i64, length as i64) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

const KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
const ZERO_RANGE: i32 = libc::FALLOC_FL_ZERO_RANGE;

/// tmpfs has no ZERO_RANGE; what fallocate(2) says it does, from the modes tmpfs has:
/// the range within the file reads as zeros, and without KEEP_SIZE the size grows to
/// cover it.
fn zero_range_by_hand(file: &File, mode: i32, offset: u64, length: u64) -> Result<(), i32> {
    let size = file.metadata().unwrap().len();
    if offset < size {
        fallocate(file, PUNCH_HOLE, offset, length.min(size - offset))?;
    }
    if mode & KEEP_SIZE == 0 && offset + length > size {
        file.set_len(offset + length).unwrap();
    }
    Ok(())
}

/// Applies each (mode, offset, length) to a file starting as `initial` and returns, after
/// each step, the result, the size and the bytes. `reference`: do ZERO_RANGE by hand.
fn fallocate_story(
    path: &Path,
    initial: &[u8],
    steps: &[(i32, u64, u64)],
    reference: bool,
) -> Vec<(Result<(), i32>, u64, Vec<u8>)> {
    fs::write(path, initial).unwrap();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    steps
        .iter()
        .map(|&(mode, offset, length)| {
            let result = if reference && mode & ZERO_RANGE != 0 {
                zero_range_by_hand(&file, mode, offset, length)
            } else {
                fallocate(&file, mode, offset, length)
            };
            let bytes = fs::read(path).unwrap();
            (result, file.metadata().unwrap().len(), bytes)
        })
        .collect()
}

#[test]
fn fallocate_modes_behave_as_on_tmpfs() {
    let _forks = no_forks_meanwhile();
    let tmpfs = Tmpfs::new();
    let m = Mounted::new();
    let chunk = 64 * 1024;
    let big: Vec<u8> = (0..5 * chunk + 1000).map(|i| (i % 251) as u8 + 1).collect();
    let small: Vec<u8> = (0..3000).map(|i| (i % 13) as u8 + 1).collect();
    let big_steps = [
        (PUNCH_HOLE, 100, 50),                        // inside one chunk
        (PUNCH_HOLE, chunk - 10, 20),                 // across a chunk boundary
        (PUNCH_HOLE, 2 * chunk, 2 * chunk),           // two whole chunks: holes
        (ZERO_RANGE | KEEP_SIZE, 4 * chunk + 5, 300), // zero inside the last chunk
        (ZERO_RANGE, 5 * chunk, 4 * chunk),           // zero past the end: extends
        (0, 12 * chunk, 1000),                        // preallocate past the end
        (KEEP_SIZE, 20 * chunk, 1000),                // preallocate, size kept
        (PUNCH_HOLE, 11 * chunk, 10 * chunk),         // punch past the end: size kept
        (0, 0, 10),                                   // inside the file: nothing
        (libc::FALLOC_FL_COLLAPSE_RANGE, 0, chunk),   // not offered
        (libc::FALLOC_FL_PUNCH_HOLE, 0, 10),          // punch without KEEP_SIZE
    ];
    let small_steps = [
        (PUNCH_HOLE, 10, 100),
        (ZERO_RANGE | KEEP_SIZE, 2990, 100),
        (ZERO_RANGE, 2000, 2000), // extends to 4000: still inline
        (0, 0, 3 * chunk),        // preallocate far past the inline threshold
        (PUNCH_HOLE, 0, 4096),
    ];
    for (name, initial, steps) in [
        ("big", &big, &big_steps[..]),
        ("small", &small, &small_steps[..]),
    ] {
        let expected = fallocate_story(&tmpfs.path(name), initial, steps, true);
        let actual = fallocate_story(&m.path(name), initial, steps, false);
        for (step, (want, got)) in expected.iter().zip(&actual).enumerate() {
            assert_eq!(
                (&got.0, got.1),
                (&want.0, want.1),
                "{name} step {step} {:?}: (result, size)",
                steps[step]
            );
            assert!(
                got.2 == want.2,
                "{name} step {step} {:?}: bytes differ",
                steps[step]
            );
        }
    }
    // Holes hold nothing: the two punched chunks and the zeroed tail are not stored.
    let blocks = fs::metadata(m.path("big")).unwrap().blocks() * 512;
    assert!(
        blocks < 4 * chunk,
        "{blocks} bytes allocated after punching"
    );
    m.finish();
}

// ---------------------------------------------------------------------------------------
// copy_file_range, answered inside the daemon, checked against tmpfs.

fn copy_file_range(
    from: &File,
    from_at: u64,
    to: &File,
    to_at: u64,
    len: usize,
) -> Result<usize, i32> {
    let (mut from_at, mut to_at) = (from_at as i64, to_at as i64);
    // SAFETY: two open fds and offsets owned by this frame.
    let rc = unsafe {
        libc::copy_file_range(
            from.as_raw_fd(),
            &mut from_at,
            to.as_raw_fd(),
            &mut to_at,
            len,
            0,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(rc as usize)
    }
}

/// Copies between two files (`src` starting as `source`, `dst` as `target`) by each
/// (from, to, len) and returns, after each step, the result and the target's bytes.
fn copy_range_story(
    dir: &Path,
    source: &[u8],
    target: &[u8],
    steps: &[(u64, u64, usize)],
) -> Vec<(Result<usize, i32>, Vec<u8>)> {
    fs::write(dir.join("src"), source).unwrap();
    fs::write(dir.join("dst"), target).unwrap();
    let src = File::open(dir.join("src")).unwrap();
    let dst = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("dst"))
        .unwrap();
    steps
        .iter()
        .map(|&(from_at, to_at, len)| {
            let result = copy_file_range(&src, from_at, &dst, to_at, len);
            (result, fs::read(dir.join("dst")).unwrap())
        })
        .collect()
}

#[test]
fn copy_file_range_copies_inside_the_daemon_as_on_tmpfs() {
    let _forks = no_forks_meanwhile();
    let tmpfs = Tmpfs::new();
    let m = Mounted::new();
    let chunk = 64 * 1024;
    let source: Vec<u8> = (0..3 * chunk + 777).map(|i| (i % 251) as u8 + 1).collect();
    let target: Vec<u8> = vec![9; 1000];
    let steps = [
        (0, 0, 10),                          // overwrite the start
        (100, 900, 500),                     // overwrite the end and extend
        (chunk as u64 - 3, 5000, chunk + 6), // across chunk boundaries, past the end
        (0, 0, source.len() + 4096),         // all of it: stops at the source's end
        (source.len() as u64, 0, 100),       // at the source's end: nothing
        (source.len() as u64 + 50, 10, 100), // past it: nothing
        (10, 4 * chunk as u64, 20),          // leaves a hole in the target
    ];
    let expected = copy_range_story(&tmpfs.path(""), &source, &target, &steps);
    let actual = copy_range_story(&m.path(""), &source, &target, &steps);
    for (step, (want, got)) in expected.iter().zip(&actual).enumerate() {
        assert_eq!(got.0, want.0, "step {step} {:?}: result", steps[step]);
        assert!(
            got.1 == want.1,
            "step {step} {:?}: bytes differ",
            steps[step]
        );
    }
    // Not through the page cache: reopened after dropping the kernel's pages, same bytes.
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    assert!(fs::read(m.path("dst")).unwrap() == expected.last().unwrap().1);
    // `cp` uses it and gets the same file.
    run_ok(
        Command::new("cp").arg(m.path("src")).arg(m.path("copy")),
        TOOL_TIMEOUT,
    );
    assert!(fs::read(m.path("copy")).unwrap() == source);
    m.finish();
}

// ---------------------------------------------------------------------------------------
// POSIX ACLs: stored by shoal, enforced by the kernel.

const USER_A: u32 = 60_011;
const USER_B: u32 = 60_012;

fn open_as(path: &CString, flags: i32) -> i32 {
    // SAFETY: NUL-terminated path; the fd is closed before returning.
    unsafe {
        let fd = libc::open(path.as_ptr(), flags, 0o666 as libc::c_uint);
        if fd < 0 {
            return common::last_errno();
        }
        libc::close(fd);
        0
    }
}

fn setfacl(args: &[&str], path: &Path) {
    run_ok(Command::new("setfacl").args(args).arg(path), TOOL_TIMEOUT);
}

fn getfacl(path: &Path) -> String {
    run_ok(
        Command::new("getfacl")
            .args(["--omit-header", "--numeric"])
            .arg(path),
        TOOL_TIMEOUT,
    )
    .stdout
}

/// The same setfacl sequence on a tree under `root`; getfacl of each path after it.
fn acl_story(root: &Path) -> Vec<(String, String, u32)> {
    fs::create_dir(root.join("shared")).unwrap();
    fs::set_permissions(
        root.join("shared"),
        std::os::unix::fs::PermissionsExt::from_mode(0o750),
    )
    .unwrap();
    fs::write(root.join("file"), b"data").unwrap();
    fs::set_permissions(
        root.join("file"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
    setfacl(
        &["-m", &format!("u:{USER_A}:rw,g:{USER_B}:r")],
        &root.join("file"),
    );
    setfacl(
        &["-d", "-m", &format!("u:{USER_A}:rwx")],
        &root.join("shared"),
    );
    setfacl(&["-m", &format!("u:{USER_A}:rwx")], &root.join("shared"));
    // Inherited at create, cut down by the create mode (not the umask).
    File::create(root.join("shared/by-root")).unwrap();
    fs::create_dir(root.join("shared/sub")).unwrap();
    // chmod moves the mask.
    fs::write(root.join("chmodded"), b"").unwrap();
    setfacl(&["-m", &format!("u:{USER_A}:rwx")], &root.join("chmodded"));
    fs::set_permissions(
        root.join("chmodded"),
        std::os::unix::fs::PermissionsExt::from_mode(0o604),
    )
    .unwrap();
    // A minimal ACL is just the mode.
    fs::write(root.join("minimal"), b"").unwrap();
    setfacl(&["--set", "u::rw,g::r,o::-"], &root.join("minimal"));
    // Removed again.
    fs::write(root.join("removed"), b"").unwrap();
    setfacl(&["-m", &format!("u:{USER_A}:r")], &root.join("removed"));
    setfacl(&["-b"], &root.join("removed"));
    [
        "file",
        "shared",
        "shared/by-root",
        "shared/sub",
        "chmodded",
        "minimal",
        "removed",
    ]
    .iter()
    .map(|rel| {
        let path = root.join(rel);
        let mode = fs::metadata(&path).unwrap().mode() & 0o7777;
        (rel.to_string(), getfacl(&path), mode)
    })
    .collect()
}

#[test]
fn acls_round_trip_as_on_tmpfs() {
    let _forks = no_forks_meanwhile();
    let tmpfs = Tmpfs::new();
    let m = Mounted::new();
    let expected = acl_story(tmpfs.dir.path());
    let actual = acl_story(&m.mnt);
    for (want, got) in expected.iter().zip(&actual) {
        assert_eq!(got, want, "getfacl and mode of {}", want.0);
    }
    assert!(actual[0].1.contains(&format!("user:{USER_A}:rw-")));
    m.finish();
}

#[test]
fn acls_grant_and_deny_other_users() {
    let _forks = alone();
    let m = Mounted::with_options(&["allow_other"]);
    let file = m.path("private");
    fs::write(&file, b"secret").unwrap();
    fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let private = cpath(&file);
    assert_eq!(
        as_user(USER_A, || open_as(&private, libc::O_RDONLY)),
        libc::EACCES
    );
    setfacl(&["-m", &format!("u:{USER_A}:r")], &file);
    assert_eq!(as_user(USER_A, || open_as(&private, libc::O_RDONLY)), 0);
    assert_eq!(
        as_user(USER_A, || open_as(&private, libc::O_WRONLY)),
        libc::EACCES
    );
    assert_eq!(
        as_user(USER_B, || open_as(&private, libc::O_RDONLY)),
        libc::EACCES
    );

    // A shared directory: its default ACL lets USER_A into everything made in it.
    let shared = m.path("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o750)).unwrap();
    setfacl(&["-m", &format!("u:{USER_A}:rwx")], &shared);
    setfacl(&["-d", "-m", &format!("u:{USER_A}:rwx")], &shared);
    File::create(shared.join("by-root"))
        .unwrap()
        .write_all(b"x")
        .unwrap();
    fs::create_dir(shared.join("sub")).unwrap();
    let by_root = cpath(&shared.join("by-root"));
    let by_a = cpath(&shared.join("sub/by-a"));
    assert_eq!(as_user(USER_A, || open_as(&by_root, libc::O_WRONLY)), 0);
    assert_eq!(
        as_user(USER_A, || open_as(&by_a, libc::O_WRONLY | libc::O_CREAT)),
        0,
        "USER_A creates in a subdirectory that inherited the default ACL"
    );
    assert_eq!(
        as_user(USER_B, || open_as(&by_root, libc::O_RDONLY)),
        libc::EACCES
    );
    assert_eq!(fs::metadata(shared.join("sub/by-a")).unwrap().uid(), USER_A);

    // Outside a default ACL the umask still applies.
    let umask = {
        // umask(2) can only be read by setting it: set it back at once.
        let old = shoal_sys::process::set_umask(0o022);
        shoal_sys::process::set_umask(old);
        old
    };
    File::create(m.path("plain")).unwrap();
    let mode = fs::metadata(m.path("plain")).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o666 & !umask);
    m.finish();
}

// ---------------------------------------------------------------------------------------
// Set-uid and set-gid, cleared by a user without CAP_FSETID as the kernel clears them on
// tmpfs (the VFS rules XFS follows too).

/// What the test user does to a file or directory made by root.
#[derive(Clone, Copy, Debug)]
enum SetIdOp {
    Write,
    DirectWrite,
    Truncate,
    OpenTruncate,
    /// fchown to the user's own group (a change of group by its owner).
    ChownGroup,
    /// An access ACL naming another user (`setfacl -m u:1:rwx`).
    AccessAcl,
    Chmod(u32),
}

/// One 4 KiB block, aligned for O_DIRECT.
#[repr(C, align(4096))]
struct Block([u8; 4096]);

/// `system.posix_acl_access` for u::rwx,u:1:rwx,g::rwx,m::rwx,o::rwx (the kernel's
/// posix_acl_xattr layout: version 2, then tag, perm, id per entry).
fn acl_value() -> Vec<u8> {
    let mut value = 2u32.to_le_bytes().to_vec();
    for (tag, id) in [
        (0x01u16, u32::MAX),
        (0x02, 1),
        (0x04, u32::MAX),
        (0x10, u32::MAX),
        (0x20, u32::MAX),
    ] {
        value.extend_from_slice(&tag.to_le_bytes());
        value.extend_from_slice(&7u16.to_le_bytes());
        value.extend_from_slice(&id.to_le_bytes());
    }
    value
}

/// In the forked child: `op` on `path`; 0 or the errno.
fn set_id_op(op: SetIdOp, path: &CString, block: &Block, acl: &[u8], gid: u32) -> i32 {
    // SAFETY: syscalls on a NUL-terminated path and buffers made before the fork.
    unsafe {
        let open = |flags: i32| libc::open(path.as_ptr(), flags);
        let rc = match op {
            SetIdOp::Write | SetIdOp::DirectWrite => {
                let direct = if matches!(op, SetIdOp::DirectWrite) {
                    libc::O_DIRECT
                } else {
                    0
                };
                let fd = open(libc::O_WRONLY | direct);
                let written = fd >= 0 && libc::pwrite(fd, block.0.as_ptr().cast(), 4096, 0) == 4096;
                if fd >= 0 {
                    libc::close(fd);
                }
                if written {
                    0
                } else {
                    -1
                }
            }
            SetIdOp::Truncate => {
                let fd = open(libc::O_WRONLY);
                let rc = if fd >= 0 {
                    libc::ftruncate(fd, 100)
                } else {
                    -1
                };
                if fd >= 0 {
                    libc::close(fd);
                }
                rc
            }
            SetIdOp::OpenTruncate => {
                let fd = open(libc::O_WRONLY | libc::O_TRUNC);
                if fd >= 0 {
                    libc::close(fd)
                } else {
                    -1
                }
            }
            SetIdOp::ChownGroup => libc::chown(path.as_ptr(), u32::MAX, gid),
            SetIdOp::AccessAcl => libc::setxattr(
                path.as_ptr(),
                c"system.posix_acl_access".as_ptr(),
                acl.as_ptr().cast(),
                acl.len(),
                0,
            ),
            SetIdOp::Chmod(mode) => libc::chmod(path.as_ptr(), mode),
        };
        if rc == 0 {
            0
        } else {
            common::last_errno()
        }
    }
}

/// The mode as `stat -c %A` reads it: statx asking for the mode alone, which the kernel
/// answers from its cache while the mode is valid there (a plain stat also asks for size
/// and times, which a write invalidates, and so fetches the mode anew).
fn statx_mode(path: &CString) -> u32 {
    // SAFETY: a zeroed statx filled by statx(2) on a NUL-terminated path.
    unsafe {
        let mut stx: libc::statx = std::mem::zeroed();
        let rc = libc::statx(libc::AT_FDCWD, path.as_ptr(), 0, libc::STATX_MODE, &mut stx);
        assert_eq!(rc, 0, "statx: {}", io::Error::last_os_error());
        u32::from(stx.stx_mode) & 0o7777
    }
}

/// Each case on a fresh file (or directory) under `root` made by root with 4 KiB in it,
/// owned by USER_A, of the group given (USER_A's own, or root's: one the user is not in),
/// and `mode`; the mode stat shows right after the user's operation.
fn set_id_story(root: &Path) -> Vec<(String, u32)> {
    let cases: &[(SetIdOp, bool, bool, &[u32])] = &[
        // (operation, directory, in the file's group, modes)
        (
            SetIdOp::Write,
            false,
            true,
            &[0o6644, 0o6754, 0o2754, 0o4755, 0o2644],
        ),
        (
            SetIdOp::DirectWrite,
            false,
            true,
            &[0o6644, 0o6754, 0o2754, 0o4755, 0o2644],
        ),
        (SetIdOp::Truncate, false, true, &[0o6644, 0o6754, 0o2644]),
        (SetIdOp::OpenTruncate, false, true, &[0o6644, 0o6754]),
        (SetIdOp::ChownGroup, false, true, &[0o6755, 0o6745, 0o2755]),
        (SetIdOp::AccessAcl, false, false, &[0o2777, 0o6777]),
        (SetIdOp::AccessAcl, false, true, &[0o2777]),
        (SetIdOp::AccessAcl, true, false, &[0o2777]),
        (SetIdOp::AccessAcl, true, true, &[0o2777]),
        (SetIdOp::Chmod(0o2777), false, false, &[0o0777]),
        (SetIdOp::Chmod(0o2777), true, false, &[0o0777]),
    ];
    let block = Block([7u8; 4096]);
    let acl = acl_value();
    let mut out = Vec::new();
    for (index, &(op, dir, member, modes)) in cases.iter().enumerate() {
        for &mode in modes {
            let name = format!(
                "{index}-{op:?}-{}-{}-{mode:o}",
                if dir { "dir" } else { "file" },
                if member { "member" } else { "outsider" }
            );
            let path = root.join(&name);
            if dir {
                fs::create_dir(&path).unwrap();
            } else {
                fs::write(&path, [1u8; 4096]).unwrap();
            }
            let gid = if member { USER_A } else { 0 };
            std::os::unix::fs::chown(&path, Some(USER_A), Some(gid)).unwrap();
            fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
            let cpath = cpath(&path);
            let errno = as_user(USER_A, || set_id_op(op, &cpath, &block, &acl, USER_A));
            assert_eq!(errno, 0, "{name}: {}", io::Error::from_raw_os_error(errno));
            out.push((name, statx_mode(&cpath)));
        }
    }
    out
}

/// Set-uid always goes on a write, truncate or chown by a user without CAP_FSETID,
/// set-gid too when group-executable (buffered and O_DIRECT writes alike, seen by stat at
/// once, not only once the kernel's cached mode expires); an access ACL set by an owner
/// outside the group clears set-gid, as chmod does. All as on tmpfs.
#[test]
fn set_id_bits_are_cleared_as_on_tmpfs() {
    let _forks = alone();
    let tmpfs = Tmpfs::new();
    let m = Mounted::with_options(&["allow_other"]);
    let expected = set_id_story(tmpfs.dir.path());
    let actual = set_id_story(&m.mnt);
    let differing: Vec<String> = expected
        .iter()
        .zip(&actual)
        .filter(|(want, got)| want != got)
        .map(|((name, want), (_, got))| format!("{name}: tmpfs {want:o}, shoal {got:o}"))
        .collect();
    assert!(
        differing.is_empty(),
        "set-id bits differ:\n{}",
        differing.join("\n")
    );
    // The rules themselves, so that a tmpfs gone wrong cannot pass for right.
    let mode_of = |prefix: &str| {
        actual
            .iter()
            .find(|(name, _)| name.starts_with(prefix))
            .map(|(_, mode)| *mode)
            .unwrap()
    };
    assert_eq!(mode_of("1-DirectWrite-file-member-6644"), 0o2644);
    assert_eq!(mode_of("1-DirectWrite-file-member-6754"), 0o0754);
    assert_eq!(mode_of("5-AccessAcl-file-outsider-2777"), 0o0777);
    assert_eq!(mode_of("6-AccessAcl-file-member-2777"), 0o2777);
    m.finish();
}
