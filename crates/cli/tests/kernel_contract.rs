//! The kernel's contract beyond plain POSIX calls: inode lifetime until FORGET, mount
//! options, file handles, monotonic times under the writeback cache, O_TMPFILE, fallocate
//! and POSIX ACLs. Each test mounts its own store through the kernel and ends with a clean
//! `shoal fsck`.

mod common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{run_ok, Mounted};

const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

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
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
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
    let m = Mounted::new();
    // Alternate changes shoal stamps (create, chmod) with ones the kernel stamps itself
    // (writes through the writeback cache); each must leave mtime and ctime where they
    // were or later.
    for i in 0..200 {
        let path = m.path(format!("f{i}"));
        let mut file = OpenOptions::new()
            .create(true)
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
