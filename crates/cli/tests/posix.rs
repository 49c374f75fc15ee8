//! POSIX semantics through the kernel: error numbers, renames, links, special files,
//! attributes, xattrs, big directories, data integrity, permissions. Each test mounts its
//! own store and ends with `shoal umount` + a clean `shoal fsck`.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{
    symlink, FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt,
};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use common::{as_user, assert_errno, last_errno, Mounted};
use shoal_bench::SplitMix64;
use shoal_sys::xattr::{self, SetXattr};

// ---------------------------------------------------------------------------------------
// Thin wrappers over syscalls std does not offer.

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("path without NUL")
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> io::Result<()> {
    let (from, to) = (cpath(from), cpath(to));
    // SAFETY: NUL-terminated paths; renameat2 takes (dirfd, path, dirfd, path, flags).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            flags,
        )
    };
    check(rc as libc::c_int)
}

fn mkfifo(path: &Path) -> io::Result<()> {
    // SAFETY: NUL-terminated path.
    check(unsafe { libc::mkfifo(cpath(path).as_ptr(), 0o640) })
}

/// getxattr into a buffer of exactly `capacity` bytes (to provoke ERANGE).
fn get_xattr_into(path: &Path, name: &str, capacity: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; capacity];
    let len = xattr::get_xattr_into(path, name, &mut buf)?;
    buf.truncate(len);
    Ok(buf)
}

fn xattr_size(path: &Path, name: &str) -> io::Result<usize> {
    xattr::get_xattr_into(path, name, &mut [])
}

fn list_xattrs(path: &Path) -> io::Result<BTreeSet<String>> {
    Ok(xattr::list_xattrs(path)?
        .iter()
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .collect())
}

fn statvfs(path: &Path) -> libc::statvfs {
    shoal_sys::statvfs::statvfs(path).expect("statvfs")
}

fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn nlink_of(path: &Path) -> u64 {
    fs::symlink_metadata(path).unwrap().nlink()
}

/// Compares two byte strings and reports the first differing offset, not two huge dumps.
#[track_caller]
fn assert_same_bytes(actual: &[u8], expected: &[u8], what: &str) {
    if actual == expected {
        return;
    }
    let first = actual
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(actual.len().min(expected.len()));
    panic!(
        "{what}: contents differ: length {} vs expected {}, first difference at offset {first}",
        actual.len(),
        expected.len()
    );
}

fn random_bytes(rng: &mut SplitMix64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    rng.fill_bytes(&mut buf);
    buf
}

// ---------------------------------------------------------------------------------------
// Error numbers.

#[test]
fn missing_paths_give_enoent() {
    let m = Mounted::new();
    let missing = m.path("missing");
    assert_errno(fs::symlink_metadata(&missing), libc::ENOENT, "stat missing");
    assert_errno(File::open(&missing), libc::ENOENT, "open missing");
    assert_errno(fs::remove_file(&missing), libc::ENOENT, "unlink missing");
    assert_errno(fs::remove_dir(&missing), libc::ENOENT, "rmdir missing");
    assert_errno(
        fs::rename(&missing, m.path("other")),
        libc::ENOENT,
        "rename missing",
    );
    assert_errno(fs::read_link(&missing), libc::ENOENT, "readlink missing");
    assert_errno(
        fs::hard_link(&missing, m.path("other")),
        libc::ENOENT,
        "link missing",
    );
    assert_errno(fs::read_dir(&missing), libc::ENOENT, "opendir missing");
    assert_errno(
        fs::create_dir(m.path("missing/sub")),
        libc::ENOENT,
        "mkdir in missing parent",
    );
    assert_errno(
        File::create(m.path("missing/file")),
        libc::ENOENT,
        "create in missing parent",
    );
    assert_errno(
        xattr::get_xattr(&missing, "user.x"),
        libc::ENOENT,
        "getxattr on missing",
    );
    assert!(!m.path("other").exists());
    m.finish();
}

#[test]
fn existing_names_give_eexist() {
    let m = Mounted::new();
    fs::create_dir(m.path("dir")).unwrap();
    fs::write(m.path("file"), b"x").unwrap();
    assert_errno(
        fs::create_dir(m.path("dir")),
        libc::EEXIST,
        "mkdir over dir",
    );
    assert_errno(
        fs::create_dir(m.path("file")),
        libc::EEXIST,
        "mkdir over file",
    );
    assert_errno(
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(m.path("file")),
        libc::EEXIST,
        "O_EXCL create",
    );
    assert_errno(
        symlink("target", m.path("file")),
        libc::EEXIST,
        "symlink over file",
    );
    assert_errno(
        fs::hard_link(m.path("file"), m.path("dir")),
        libc::EEXIST,
        "link over dir",
    );
    assert_errno(mkfifo(&m.path("file")), libc::EEXIST, "mkfifo over file");
    assert_eq!(
        fs::read(m.path("file")).unwrap(),
        b"x",
        "failed creates must not touch the file"
    );
    m.finish();
}

#[test]
fn rmdir_of_non_empty_dir_gives_enotempty() {
    let m = Mounted::new();
    fs::create_dir_all(m.path("a/b")).unwrap();
    fs::write(m.path("a/f"), b"").unwrap();
    assert_errno(
        fs::remove_dir(m.path("a")),
        libc::ENOTEMPTY,
        "rmdir dir with a file and a subdir",
    );
    fs::remove_file(m.path("a/f")).unwrap();
    assert_errno(
        fs::remove_dir(m.path("a")),
        libc::ENOTEMPTY,
        "rmdir dir with a subdir",
    );
    fs::remove_dir(m.path("a/b")).unwrap();
    fs::remove_dir(m.path("a")).unwrap();
    assert!(!m.path("a").exists());
    m.finish();
}

#[test]
fn file_used_as_dir_gives_enotdir() {
    let m = Mounted::new();
    fs::write(m.path("file"), b"x").unwrap();
    fs::create_dir(m.path("dir")).unwrap();
    assert_errno(
        fs::symlink_metadata(m.path("file/x")),
        libc::ENOTDIR,
        "stat file/x",
    );
    assert_errno(
        fs::create_dir(m.path("file/x")),
        libc::ENOTDIR,
        "mkdir file/x",
    );
    assert_errno(fs::remove_dir(m.path("file")), libc::ENOTDIR, "rmdir file");
    assert_errno(fs::read_dir(m.path("file")), libc::ENOTDIR, "opendir file");
    assert_errno(
        fs::rename(m.path("dir"), m.path("file")),
        libc::ENOTDIR,
        "rename dir over file",
    );
    assert!(m.path("dir").is_dir() && m.path("file").is_file());
    m.finish();
}

#[test]
fn dir_used_as_file_gives_eisdir() {
    let m = Mounted::new();
    fs::create_dir(m.path("dir")).unwrap();
    fs::write(m.path("file"), b"x").unwrap();
    assert_errno(
        OpenOptions::new().write(true).open(m.path("dir")),
        libc::EISDIR,
        "open dir for writing",
    );
    assert_errno(fs::remove_file(m.path("dir")), libc::EISDIR, "unlink dir");
    assert_errno(
        fs::rename(m.path("file"), m.path("dir")),
        libc::EISDIR,
        "rename file over dir",
    );
    assert!(m.path("dir").is_dir() && m.path("file").is_file());
    m.finish();
}

#[test]
fn names_longer_than_255_bytes_give_enametoolong() {
    let m = Mounted::new();
    let longest = "n".repeat(255);
    let too_long = "n".repeat(256);
    fs::write(m.path(&longest), b"ok").unwrap();
    fs::create_dir(m.path(format!("d{}", &longest[1..]))).unwrap();
    symlink("target", m.path(format!("s{}", &longest[1..]))).unwrap();
    assert_eq!(fs::read(m.path(&longest)).unwrap(), b"ok");
    assert_errno(
        File::create(m.path(&too_long)),
        libc::ENAMETOOLONG,
        "create 256-byte name",
    );
    assert_errno(
        fs::create_dir(m.path(&too_long)),
        libc::ENAMETOOLONG,
        "mkdir 256-byte name",
    );
    assert_errno(
        symlink("target", m.path(&too_long)),
        libc::ENAMETOOLONG,
        "symlink 256-byte name",
    );
    assert_errno(
        fs::hard_link(m.path(&longest), m.path(&too_long)),
        libc::ENAMETOOLONG,
        "link to 256-byte name",
    );
    assert_errno(
        fs::rename(m.path(&longest), m.path(&too_long)),
        libc::ENAMETOOLONG,
        "rename to 256-byte name",
    );
    assert_errno(
        fs::symlink_metadata(m.path(&too_long)),
        libc::ENAMETOOLONG,
        "stat 256-byte name",
    );
    let names: BTreeSet<String> = fs::read_dir(&m.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names.len(),
        3,
        "only the three 255-byte names exist: {names:?}"
    );
    m.finish();
}

// ---------------------------------------------------------------------------------------
// Renames.

#[test]
fn rename_rules() {
    let m = Mounted::new();
    fs::create_dir_all(m.path("a/b/c")).unwrap();
    assert_errno(
        fs::rename(m.path("a"), m.path("a/b/c/a")),
        libc::EINVAL,
        "rename dir into its own subdir",
    );
    assert_errno(
        fs::rename(m.path("a"), m.path("a/b/a")),
        libc::EINVAL,
        "rename dir into its own child",
    );
    fs::rename(m.path("a"), m.path("a")).expect("rename onto itself is a no-op");

    // Over an empty directory: replaces it.
    fs::create_dir(m.path("empty")).unwrap();
    fs::write(m.path("a/b/c/f"), b"deep").unwrap();
    fs::rename(m.path("a"), m.path("empty")).unwrap();
    assert!(!m.path("a").exists());
    assert_eq!(fs::read(m.path("empty/b/c/f")).unwrap(), b"deep");

    // Over a non-empty directory: refused, both intact.
    fs::create_dir_all(m.path("x/y")).unwrap();
    assert_errno(
        fs::rename(m.path("x"), m.path("empty")),
        libc::ENOTEMPTY,
        "rename dir over non-empty dir",
    );
    assert!(m.path("x/y").is_dir() && m.path("empty/b/c/f").is_file());

    // File over file: the old target loses one link, its other name keeps the data.
    fs::write(m.path("src"), b"new").unwrap();
    fs::write(m.path("dst"), b"old").unwrap();
    fs::hard_link(m.path("dst"), m.path("dst-other-name")).unwrap();
    fs::rename(m.path("src"), m.path("dst")).unwrap();
    assert!(!m.path("src").exists());
    assert_eq!(fs::read(m.path("dst")).unwrap(), b"new");
    assert_eq!(fs::read(m.path("dst-other-name")).unwrap(), b"old");
    assert_eq!(nlink_of(&m.path("dst-other-name")), 1);

    // Across directories, keeping the inode.
    let ino = fs::metadata(m.path("dst")).unwrap().ino();
    fs::rename(m.path("dst"), m.path("x/y/moved")).unwrap();
    assert_eq!(fs::metadata(m.path("x/y/moved")).unwrap().ino(), ino);
    assert!(!m.path("dst").exists());

    // Renaming one hard link onto another name of the same inode is a no-op (POSIX).
    fs::hard_link(m.path("x/y/moved"), m.path("x/same")).unwrap();
    fs::rename(m.path("x/y/moved"), m.path("x/same")).unwrap();
    assert!(m.path("x/y/moved").exists() && m.path("x/same").exists());
    assert_eq!(nlink_of(&m.path("x/same")), 2);
    m.finish();
}

#[test]
fn renameat2_noreplace_and_exchange() {
    let mut m = Mounted::new();
    fs::write(m.path("a"), b"a").unwrap();
    fs::write(m.path("b"), b"b").unwrap();
    assert_errno(
        renameat2(&m.path("a"), &m.path("b"), libc::RENAME_NOREPLACE),
        libc::EEXIST,
        "RENAME_NOREPLACE onto b",
    );
    assert_eq!(fs::read(m.path("b")).unwrap(), b"b");
    renameat2(&m.path("a"), &m.path("c"), libc::RENAME_NOREPLACE)
        .expect("RENAME_NOREPLACE to a free name");
    assert!(!m.path("a").exists());
    assert_eq!(fs::read(m.path("c")).unwrap(), b"a");

    // Exchange a file and a directory in different parents.
    fs::create_dir_all(m.path("p1")).unwrap();
    fs::create_dir_all(m.path("p2/y")).unwrap();
    fs::write(m.path("p1/x"), b"file").unwrap();
    fs::write(m.path("p2/y/child"), b"child").unwrap();
    renameat2(&m.path("p1/x"), &m.path("p2/y"), libc::RENAME_EXCHANGE)
        .expect("RENAME_EXCHANGE file <-> dir");
    assert!(m.path("p1/x").is_dir());
    assert_eq!(fs::read(m.path("p1/x/child")).unwrap(), b"child");
    assert_eq!(fs::read(m.path("p2/y")).unwrap(), b"file");
    assert_errno(
        renameat2(
            &m.path("p1/x"),
            &m.path("p2/missing"),
            libc::RENAME_EXCHANGE,
        ),
        libc::ENOENT,
        "RENAME_EXCHANGE with a missing target",
    );

    m.remount();
    assert_eq!(fs::read(m.path("p1/x/child")).unwrap(), b"child");
    assert_eq!(fs::read(m.path("p2/y")).unwrap(), b"file");
    assert_eq!(fs::read(m.path("c")).unwrap(), b"a");
    m.finish();
}

#[test]
fn directory_nlink_counts_subdirectories() {
    let mut m = Mounted::new();
    fs::create_dir(m.path("d")).unwrap();
    fs::create_dir(m.path("e")).unwrap();
    assert_eq!(nlink_of(&m.path("d")), 2, "empty dir: . and its name");
    fs::create_dir(m.path("d/a")).unwrap();
    fs::create_dir(m.path("d/b")).unwrap();
    fs::write(m.path("d/file"), b"").unwrap();
    assert_eq!(
        nlink_of(&m.path("d")),
        4,
        "two subdirs add a '..' each; files add none"
    );
    fs::remove_dir(m.path("d/a")).unwrap();
    assert_eq!(nlink_of(&m.path("d")), 3);
    fs::rename(m.path("d/b"), m.path("e/b")).unwrap();
    assert_eq!(nlink_of(&m.path("d")), 2, "dir renamed away");
    assert_eq!(nlink_of(&m.path("e")), 3, "dir renamed in");
    renameat2(&m.path("d/file"), &m.path("e/b"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(nlink_of(&m.path("d")), 3, "exchange brought a dir into d");
    assert_eq!(nlink_of(&m.path("e")), 2, "exchange took the dir out of e");
    m.remount();
    assert_eq!(nlink_of(&m.path("d")), 3);
    assert_eq!(nlink_of(&m.path("e")), 2);
    m.finish();
}

// ---------------------------------------------------------------------------------------
// Links and special files.

#[test]
fn hard_links_share_the_inode() {
    let mut m = Mounted::new();
    fs::create_dir(m.path("other")).unwrap();
    fs::write(m.path("f"), b"one").unwrap();
    fs::hard_link(m.path("f"), m.path("g")).unwrap();
    fs::hard_link(m.path("f"), m.path("other/h")).unwrap();
    let ino = fs::metadata(m.path("f")).unwrap().ino();
    for name in ["f", "g", "other/h"] {
        let meta = fs::metadata(m.path(name)).unwrap();
        assert_eq!(meta.ino(), ino, "{name} has the same inode");
        assert_eq!(meta.nlink(), 3, "{name} nlink");
    }
    fs::write(m.path("g"), b"two").unwrap();
    assert_eq!(
        fs::read(m.path("other/h")).unwrap(),
        b"two",
        "a write through one name shows through another"
    );
    assert_errno(
        fs::hard_link(m.path("other"), m.path("dirlink")),
        libc::EPERM,
        "hard link to a directory",
    );
    fs::remove_file(m.path("f")).unwrap();
    assert_eq!(nlink_of(&m.path("g")), 2);

    m.remount();
    assert_eq!(nlink_of(&m.path("g")), 2);
    assert_eq!(
        fs::metadata(m.path("g")).unwrap().ino(),
        ino,
        "inode numbers survive a remount"
    );
    assert_eq!(fs::metadata(m.path("other/h")).unwrap().ino(), ino);
    fs::remove_file(m.path("g")).unwrap();
    assert_eq!(nlink_of(&m.path("other/h")), 1);
    assert_eq!(
        fs::read(m.path("other/h")).unwrap(),
        b"two",
        "the last name keeps the data"
    );
    m.finish();
}

#[test]
fn symlinks() {
    let mut m = Mounted::new();
    fs::create_dir(m.path("dir")).unwrap();
    fs::write(m.path("dir/file"), b"through the link").unwrap();
    symlink("dir/file", m.path("to-file")).unwrap();
    symlink("dir", m.path("to-dir")).unwrap();
    symlink("nowhere/at/all", m.path("dangling")).unwrap();
    let long_target = "x/".repeat(1500) + "end"; // 3003 bytes: well past any inline limit
    symlink(&long_target, m.path("long")).unwrap();

    let check = |m: &Mounted| {
        let meta = fs::symlink_metadata(m.path("to-file")).unwrap();
        assert!(meta.file_type().is_symlink());
        assert_eq!(
            meta.len(),
            "dir/file".len() as u64,
            "a symlink's size is its target's length"
        );
        assert_eq!(
            fs::read_link(m.path("to-file")).unwrap(),
            Path::new("dir/file")
        );
        assert_eq!(fs::read(m.path("to-file")).unwrap(), b"through the link");
        assert_eq!(
            fs::read(m.path("to-dir/file")).unwrap(),
            b"through the link"
        );
        assert_eq!(
            fs::read_link(m.path("dangling")).unwrap(),
            Path::new("nowhere/at/all")
        );
        assert_errno(
            fs::metadata(m.path("dangling")),
            libc::ENOENT,
            "stat through a dangling link",
        );
        assert_eq!(
            fs::read_link(m.path("long")).unwrap(),
            Path::new(&long_target)
        );
        assert_errno(
            fs::read_link(m.path("dir/file")),
            libc::EINVAL,
            "readlink of a regular file",
        );
    };
    check(&m);
    m.remount();
    check(&m);
    m.finish();
}

#[test]
fn fifos_sockets_and_device_nodes() {
    let mut m = Mounted::new();
    mkfifo(&m.path("fifo")).unwrap();
    let listener = UnixListener::bind(m.path("socket")).unwrap();
    let dev = libc::makedev(1, 3);
    // SAFETY: NUL-terminated path.
    check(unsafe { libc::mknod(cpath(&m.path("null")).as_ptr(), libc::S_IFCHR | 0o600, dev) })
        .unwrap();

    assert!(fs::symlink_metadata(m.path("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(mode_of(&m.path("fifo")), 0o640 & !umask());
    assert!(fs::symlink_metadata(m.path("socket"))
        .unwrap()
        .file_type()
        .is_socket());
    let null = fs::symlink_metadata(m.path("null")).unwrap();
    assert!(null.file_type().is_char_device());
    assert_eq!(null.rdev(), dev);

    // The kernel implements pipes and sockets; the node only has to lead there.
    let mut fifo = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(m.path("fifo"))
        .unwrap();
    fifo.write_all(b"ping").unwrap();
    let mut got = [0u8; 4];
    fifo.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ping");
    let mut client = UnixStream::connect(m.path("socket")).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    client.write_all(b"pong").unwrap();
    server.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"pong");
    drop((fifo, client, server, listener));

    m.remount();
    assert!(fs::symlink_metadata(m.path("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(fs::symlink_metadata(m.path("socket"))
        .unwrap()
        .file_type()
        .is_socket());
    assert_eq!(fs::symlink_metadata(m.path("null")).unwrap().rdev(), dev);
    m.finish();
}

/// The process umask, read without changing it (umask(2) would race with other tests).
fn umask() -> u32 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("Umask:"))
        .expect("Umask line in /proc/self/status");
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).unwrap()
}

// ---------------------------------------------------------------------------------------
// Attributes.

#[test]
fn chmod_chown_and_truncate() {
    let mut m = Mounted::new();
    fs::write(m.path("f"), b"0123456789").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    symlink("f", m.path("s")).unwrap();
    fs::set_permissions(m.path("f"), Permissions::from_mode(0o4755)).unwrap();
    fs::set_permissions(m.path("d"), Permissions::from_mode(0o1777)).unwrap();
    assert_eq!(mode_of(&m.path("f")), 0o4755);
    assert_eq!(mode_of(&m.path("d")), 0o1777);
    fs::set_permissions(m.path("f"), Permissions::from_mode(0o600)).unwrap();
    assert_eq!(mode_of(&m.path("f")), 0o600);

    std::os::unix::fs::chown(m.path("f"), Some(1234), Some(5678)).unwrap();
    std::os::unix::fs::chown(m.path("d"), None, Some(42)).unwrap();
    std::os::unix::fs::lchown(m.path("s"), Some(777), Some(888)).unwrap();
    let meta = fs::metadata(m.path("f")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1234, 5678));
    let meta = fs::metadata(m.path("d")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (0, 42),
        "chown with uid -1 keeps the uid"
    );
    let meta = fs::symlink_metadata(m.path("s")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (777, 888),
        "lchown changes the link, not the target"
    );
    assert_eq!(fs::metadata(m.path("f")).unwrap().uid(), 1234);

    let file = OpenOptions::new().write(true).open(m.path("f")).unwrap();
    file.set_len(4).unwrap();
    assert_eq!(fs::read(m.path("f")).unwrap(), b"0123");
    file.set_len(8).unwrap();
    assert_eq!(
        fs::read(m.path("f")).unwrap(),
        b"0123\0\0\0\0",
        "growing by truncate adds zeros"
    );
    drop(file);

    m.remount();
    assert_eq!(mode_of(&m.path("f")), 0o600);
    assert_eq!(mode_of(&m.path("d")), 0o1777);
    let meta = fs::metadata(m.path("f")).unwrap();
    assert_eq!((meta.uid(), meta.gid(), meta.len()), (1234, 5678, 8));
    assert_eq!(fs::read(m.path("f")).unwrap(), b"0123\0\0\0\0");
    m.finish();
}

#[test]
fn timestamps_keep_nanoseconds() {
    let mut m = Mounted::new();
    fs::write(m.path("f"), b"x").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    symlink("f", m.path("s")).unwrap();
    let atime = (1_000_000_000, 111_111_111);
    let mtime = (1_234_567_890, 987_654_321);
    for name in ["f", "d", "s"] {
        xattr::set_times(&m.path(name), atime, mtime).unwrap();
    }
    let check = |m: &Mounted| {
        for name in ["f", "d", "s"] {
            let meta = fs::symlink_metadata(m.path(name)).unwrap();
            assert_eq!((meta.mtime(), meta.mtime_nsec()), mtime, "{name} mtime");
            assert_eq!((meta.atime(), meta.atime_nsec()), atime, "{name} atime");
        }
    };
    check(&m);
    m.remount();
    check(&m);

    // UTIME_OMIT leaves a time alone; UTIME_NOW takes the clock.
    let before_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    xattr::set_times(&m.path("f"), (0, libc::UTIME_OMIT), (0, libc::UTIME_NOW)).unwrap();
    let meta = fs::metadata(m.path("f")).unwrap();
    assert_eq!(
        (meta.atime(), meta.atime_nsec()),
        atime,
        "UTIME_OMIT keeps atime"
    );
    assert!(
        meta.mtime() >= before_now,
        "UTIME_NOW sets mtime to now ({} < {before_now})",
        meta.mtime()
    );

    // tar archives carry pre-1970 times.
    xattr::set_times(&m.path("d"), atime, (-86_400, 5)).unwrap();
    m.remount();
    let meta = fs::metadata(m.path("d")).unwrap();
    assert_eq!(
        (meta.mtime(), meta.mtime_nsec()),
        (-86_400, 5),
        "pre-epoch mtime"
    );
    m.finish();
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "every xattr call and flag on one file, each step checking the state the last one left"
)]
fn xattrs_set_get_list_remove() {
    let mut m = Mounted::new();
    let f = m.path("f");
    fs::write(&f, b"x").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    symlink("f", m.path("s")).unwrap();

    xattr::set_xattr(&f, "user.a", b"1", SetXattr::CreateOrReplace).unwrap();
    assert_eq!(xattr::get_xattr(&f, "user.a").unwrap(), b"1");
    assert_errno(
        xattr::set_xattr(&f, "user.a", b"2", SetXattr::CreateOnly),
        libc::EEXIST,
        "XATTR_CREATE of an existing name",
    );
    assert_errno(
        xattr::set_xattr(&f, "user.b", b"2", SetXattr::ReplaceOnly),
        libc::ENODATA,
        "XATTR_REPLACE of a missing name",
    );
    xattr::set_xattr(&f, "user.a", b"22", SetXattr::ReplaceOnly).unwrap();
    assert_eq!(xattr_size(&f, "user.a").unwrap(), 2);
    assert_errno(
        get_xattr_into(&f, "user.a", 1),
        libc::ERANGE,
        "getxattr into a too small buffer",
    );
    xattr::set_xattr(&f, "user.b", b"new", SetXattr::CreateOnly).unwrap();

    let mut rng = SplitMix64::new(5);
    let binary = random_bytes(&mut rng, 4000); // NULs included
    xattr::set_xattr(&f, "user.binary", &binary, SetXattr::CreateOrReplace).unwrap();
    xattr::set_xattr(&f, "user.empty", b"", SetXattr::CreateOrReplace).unwrap();
    xattr::set_xattr(&f, "trusted.t", b"root only", SetXattr::CreateOrReplace).unwrap();
    xattr::set_xattr(&m.path("d"), "user.on_dir", b"d", SetXattr::CreateOrReplace).unwrap();
    assert_errno(
        xattr::set_xattr(
            &m.path("s"),
            "user.on_link",
            b"s",
            SetXattr::CreateOrReplace,
        ),
        libc::EPERM,
        "user.* xattr on a symlink",
    );
    assert_errno(
        xattr::get_xattr(&f, "user.missing"),
        libc::ENODATA,
        "getxattr of a missing name",
    );

    xattr::remove_xattr(&f, "user.b").unwrap();
    assert_errno(
        xattr::remove_xattr(&f, "user.b"),
        libc::ENODATA,
        "removexattr twice",
    );
    assert_errno(
        xattr::get_xattr(&f, "user.b"),
        libc::ENODATA,
        "getxattr after removexattr",
    );

    let check = |m: &Mounted| {
        let f = m.path("f");
        let names = list_xattrs(&f).unwrap();
        let expected: BTreeSet<String> = ["user.a", "user.binary", "user.empty", "trusted.t"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(names, expected);
        assert_eq!(xattr::get_xattr(&f, "user.a").unwrap(), b"22");
        assert_eq!(xattr::get_xattr(&f, "user.binary").unwrap(), binary);
        assert_eq!(xattr::get_xattr(&f, "user.empty").unwrap(), b"");
        assert_eq!(xattr::get_xattr(&f, "trusted.t").unwrap(), b"root only");
        assert_eq!(xattr::get_xattr(&m.path("d"), "user.on_dir").unwrap(), b"d");
        assert!(list_xattrs(&m.path("s")).unwrap().is_empty());
    };
    check(&m);
    m.remount();
    check(&m);
    m.finish();
}

#[test]
fn statfs_reports_sane_values() {
    let m = Mounted::new();
    fs::write(m.path("f"), vec![7u8; 1 << 20]).unwrap();
    let st = statvfs(&m.mnt);
    assert!(
        st.f_bsize > 0 && st.f_frsize > 0,
        "block sizes {} {}",
        st.f_bsize,
        st.f_frsize
    );
    assert!(st.f_blocks > 0, "a filesystem with no blocks");
    assert!(
        st.f_bfree <= st.f_blocks,
        "free {} > total {}",
        st.f_bfree,
        st.f_blocks
    );
    assert!(
        st.f_bavail <= st.f_bfree,
        "available {} > free {}",
        st.f_bavail,
        st.f_bfree
    );
    assert!(
        st.f_ffree <= st.f_files,
        "free inodes {} > total {}",
        st.f_ffree,
        st.f_files
    );
    assert_eq!(st.f_namemax, 255);
    m.finish();
}

// ---------------------------------------------------------------------------------------
// Directories.

/// Names of varied length so readdir buffers fill at different points.
fn big_dir_name(i: usize) -> String {
    format!("entry-{i:05}-{}", "x".repeat(i % 200))
}

fn list_names(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

#[track_caller]
fn assert_listing(dir: &Path, expected: &BTreeSet<String>) {
    let mut names = list_names(dir);
    let listed = names.len();
    names.sort();
    names.dedup();
    assert_eq!(
        listed,
        names.len(),
        "readdir returned {} duplicate names",
        listed - names.len()
    );
    let names: BTreeSet<String> = names.into_iter().collect();
    let missing: Vec<_> = expected.difference(&names).take(5).collect();
    let extra: Vec<_> = names.difference(expected).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "readdir: missing {missing:?}, unexpected {extra:?}"
    );
}

#[test]
fn large_directory_lists_every_entry_exactly_once() {
    const ENTRIES: usize = 20_000;
    let mut m = Mounted::new();
    let dir = m.path("big");
    fs::create_dir(&dir).unwrap();
    let mut expected = BTreeSet::new();
    for i in 0..ENTRIES {
        let name = big_dir_name(i);
        if i % 10 == 0 {
            fs::create_dir(dir.join(&name)).unwrap();
        } else {
            File::create(dir.join(&name)).unwrap();
        }
        expected.insert(name);
    }
    assert_listing(&dir, &expected);
    assert_eq!(nlink_of(&dir), 2 + (ENTRIES / 10) as u64);

    m.remount();
    assert_listing(&dir, &expected);
    for i in (0..ENTRIES).filter(|i| i % 3 == 0) {
        let name = big_dir_name(i);
        if i % 10 == 0 {
            fs::remove_dir(dir.join(&name)).unwrap();
        } else {
            fs::remove_file(dir.join(&name)).unwrap();
        }
        expected.remove(&name);
    }
    assert_listing(&dir, &expected);

    // rm -rf's pattern: read the directory while deleting from it.
    fs::remove_dir_all(&dir).unwrap();
    assert!(!dir.exists());
    assert!(list_names(&m.mnt).is_empty());
    m.finish();
}

/// The kernel may answer a directory stream from its own cache of an earlier listing, and
/// evict that cache under memory pressure in the middle of the stream: it then asks shoal
/// to continue from an offset shoal handed to another (earlier) open. Deleting while
/// reading (rm -rf) must still see every entry exactly once.
#[test]
fn deleting_while_reading_survives_dropped_kernel_caches() {
    const ENTRIES: usize = 3_000;
    let m = Mounted::new();
    let dir = m.path("d");
    fs::create_dir(&dir).unwrap();
    let mut expected = BTreeSet::new();
    for i in 0..ENTRIES {
        let name = big_dir_name(i);
        File::create(dir.join(&name)).unwrap();
        expected.insert(name);
    }
    // An earlier full listing: the kernel may keep it and serve the next open from it.
    assert_listing(&dir, &expected);
    let mut seen = BTreeSet::new();
    for (index, entry) in fs::read_dir(&dir).unwrap().enumerate() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(seen.insert(name.clone()), "{name} listed twice");
        fs::remove_file(dir.join(&name)).unwrap();
        if index % 500 == 250 {
            drop_kernel_caches();
        }
    }
    let missing: Vec<_> = expected.difference(&seen).take(5).collect();
    assert!(
        missing.is_empty(),
        "{} entries never listed, e.g. {missing:?}",
        expected.len() - seen.len()
    );
    fs::remove_dir(&dir).unwrap();
    m.finish();
}

fn drop_kernel_caches() {
    shoal_sys::process::sync_all();
    fs::write("/proc/sys/vm/drop_caches", b"3").unwrap();
}

// ---------------------------------------------------------------------------------------
// Data.

#[test]
fn odd_sized_writes_across_chunk_boundaries() {
    odd_sized_writes(&[]);
}

/// Without the writeback cache every write() reaches the daemon as it happens.
#[test]
fn odd_sized_writes_without_the_writeback_cache() {
    odd_sized_writes(&["writeback=off"]);
}

/// Over /dev/fuse instead of io_uring (the transport used when the kernel has no ring).
#[test]
fn odd_sized_writes_over_dev_fuse() {
    odd_sized_writes(&["uring=off"]);
}

fn odd_sized_writes(options: &[&str]) {
    let mut m = Mounted::with_options(options);
    let path = m.path("data");
    let mut rng = SplitMix64::new(11);
    let mut reference: Vec<u8> = Vec::new();
    let mut file = File::create(&path).unwrap();
    // Sizes around every plausible inline limit and chunk size (4 KiB .. 1 MiB).
    let piece_sizes = [
        1, 7, 4095, 4096, 4097, 65_535, 65_537, 131_071, 131_073, 1_000_003, 3, 262_147, 1_048_577,
    ];
    for size in piece_sizes {
        let piece = random_bytes(&mut rng, size);
        file.write_all(&piece).unwrap();
        reference.extend_from_slice(&piece);
    }
    // Overwrites at random offsets, some reaching past the end (which leaves a zero gap).
    for _ in 0..200 {
        let offset = rng.below(reference.len() as u64 + 100_000) as usize;
        let len = rng.range(1, 300_000) as usize;
        let piece = random_bytes(&mut rng, len);
        file.write_all_at(&piece, offset as u64).unwrap();
        if reference.len() < offset + len {
            reference.resize(offset + len, 0);
        }
        reference[offset..offset + len].copy_from_slice(&piece);
    }
    drop(file);

    let check = |path: &Path, rng: &mut SplitMix64| {
        assert_same_bytes(&fs::read(path).unwrap(), &reference, "whole file");
        let file = File::open(path).unwrap();
        for _ in 0..200 {
            let offset = rng.below(reference.len() as u64) as usize;
            let len = (rng.range(1, 200_000) as usize).min(reference.len() - offset);
            let mut got = vec![0u8; len];
            file.read_exact_at(&mut got, offset as u64).unwrap();
            assert_same_bytes(
                &got,
                &reference[offset..offset + len],
                &format!("pread({offset}, {len})"),
            );
        }
    };
    check(&path, &mut rng);
    m.remount();
    check(&path, &mut rng);
    m.finish();
}

#[test]
fn overwrite_truncate_and_holes_survive_remount() {
    let mut m = Mounted::new();
    let mut rng = SplitMix64::new(12);
    let mut expected: Vec<(&str, Vec<u8>)> = Vec::new();

    // A small (inline-sized) file that grows into chunks.
    let small = random_bytes(&mut rng, 100);
    fs::write(m.path("grows"), &small).unwrap();
    let tail = random_bytes(&mut rng, 300_000);
    OpenOptions::new()
        .append(true)
        .open(m.path("grows"))
        .unwrap()
        .write_all(&tail)
        .unwrap();
    expected.push(("grows", [small, tail].concat()));

    // A chunked file cut down to a few bytes, then grown again by truncate.
    let big = random_bytes(&mut rng, 500_000);
    fs::write(m.path("shrinks"), &big).unwrap();
    let file = OpenOptions::new()
        .write(true)
        .open(m.path("shrinks"))
        .unwrap();
    file.set_len(10).unwrap();
    file.set_len(200_000).unwrap();
    drop(file); // an open file would make the remount below fail with EBUSY
    let mut shrunk = big[..10].to_vec();
    shrunk.resize(200_000, 0);
    expected.push(("shrinks", shrunk));

    // Overwrite in the middle, cut mid-chunk, then write past the end (a hole in between).
    let mut content = random_bytes(&mut rng, 300 * 1024);
    fs::write(m.path("patched"), &content).unwrap();
    let file = OpenOptions::new()
        .write(true)
        .open(m.path("patched"))
        .unwrap();
    let patch = random_bytes(&mut rng, 50_001);
    file.write_all_at(&patch, 70_000).unwrap();
    content[70_000..120_001].copy_from_slice(&patch);
    file.set_len(100 * 1024 + 1).unwrap();
    content.truncate(100 * 1024 + 1);
    let far = random_bytes(&mut rng, 777);
    file.write_all_at(&far, 200 * 1024).unwrap();
    content.resize(200 * 1024, 0);
    content.extend_from_slice(&far);
    drop(file);
    expected.push(("patched", content));

    // Rewritten from scratch with O_TRUNC.
    fs::write(m.path("replaced"), random_bytes(&mut rng, 90_000)).unwrap();
    let replacement = random_bytes(&mut rng, 5);
    fs::write(m.path("replaced"), &replacement).unwrap();
    expected.push(("replaced", replacement));

    for (name, content) in &expected {
        assert_same_bytes(&fs::read(m.path(name)).unwrap(), content, name);
    }
    m.remount();
    for (name, content) in &expected {
        assert_eq!(
            fs::metadata(m.path(name)).unwrap().len(),
            content.len() as u64,
            "{name} size"
        );
        assert_same_bytes(&fs::read(m.path(name)).unwrap(), content, name);
    }
    m.finish();
}

#[test]
fn sparse_file_reads_zeros() {
    let mut m = Mounted::new();
    let path = m.path("sparse");
    let file = File::create(&path).unwrap();
    let offset = 10 << 20;
    file.write_all_at(b"end", offset).unwrap();
    drop(file);
    let check = |path: &Path| {
        let data = fs::read(path).unwrap();
        assert_eq!(data.len() as u64, offset + 3);
        assert!(
            data[..offset as usize].iter().all(|&b| b == 0),
            "the hole reads as zeros"
        );
        assert_eq!(&data[offset as usize..], b"end");
    };
    check(&path);
    m.remount();
    check(&path);
    m.finish();
}

/// 1 MiB piece `index` of the big file: regenerated, not stored, for the comparison.
fn big_file_piece(index: u64, buf: &mut [u8]) {
    SplitMix64::new(0xB16_F11E ^ index).fill_bytes(buf);
}

#[test]
fn two_gib_file_survives_remount() {
    const PIECE: usize = 1 << 20;
    const PIECES: u64 = 2048;
    let mut m = Mounted::new();
    let path = m.path("big");
    let mut file = File::create(&path).unwrap();
    let mut piece = vec![0u8; PIECE];
    for index in 0..PIECES {
        big_file_piece(index, &mut piece);
        file.write_all(&piece).unwrap();
    }
    drop(file);
    m.remount();

    assert_eq!(fs::metadata(&path).unwrap().len(), PIECES * PIECE as u64);
    let mut file = File::open(&path).unwrap();
    let mut got = vec![0u8; PIECE];
    for index in 0..PIECES {
        big_file_piece(index, &mut piece);
        file.read_exact(&mut got).unwrap();
        assert_same_bytes(&got, &piece, &format!("1 MiB piece {index}"));
    }
    assert_eq!(file.read(&mut got).unwrap(), 0, "nothing past 2 GiB");
    drop(file);
    m.finish();
}

// ---------------------------------------------------------------------------------------
// Permissions, checked by the kernel (default_permissions) for unprivileged users.

const USER_A: u32 = 60_001;
const USER_B: u32 = 60_002;

fn open_as(path: &CString, flags: i32, mode: libc::mode_t) -> i32 {
    // SAFETY: NUL-terminated path; the fd is closed before returning.
    unsafe {
        let fd = libc::open(path.as_ptr(), flags, mode as libc::c_uint);
        if fd < 0 {
            return last_errno();
        }
        libc::close(fd);
        0
    }
}

#[test]
fn non_owner_cannot_write_a_0644_file() {
    let m = Mounted::with_options(&["allow_other"]);
    fs::create_dir(m.path("d")).unwrap();
    fs::set_permissions(m.path("d"), Permissions::from_mode(0o755)).unwrap();
    fs::write(m.path("d/public"), b"x").unwrap();
    fs::set_permissions(m.path("d/public"), Permissions::from_mode(0o644)).unwrap();
    fs::write(m.path("d/private"), b"x").unwrap();
    fs::set_permissions(m.path("d/private"), Permissions::from_mode(0o600)).unwrap();
    let public = cpath(&m.path("d/public"));
    let private = cpath(&m.path("d/private"));
    let new_file = cpath(&m.path("d/new"));

    assert_eq!(
        as_user(USER_A, || open_as(&public, libc::O_RDONLY, 0)),
        0,
        "others may read 0644"
    );
    assert_eq!(
        as_user(USER_A, || open_as(&public, libc::O_WRONLY, 0)),
        libc::EACCES,
        "others may not write 0644"
    );
    assert_eq!(
        as_user(USER_A, || open_as(&private, libc::O_RDONLY, 0)),
        libc::EACCES,
        "others may not read 0600"
    );
    assert_eq!(
        as_user(USER_A, || open_as(
            &new_file,
            libc::O_WRONLY | libc::O_CREAT,
            0o644
        )),
        libc::EACCES,
        "others may not create in a 0755 root-owned dir"
    );
    assert!(!m.path("d/new").exists());
    assert_eq!(fs::read(m.path("d/public")).unwrap(), b"x");
    m.finish();
}

#[test]
fn sticky_dir_protects_other_users_files() {
    let m = Mounted::with_options(&["allow_other"]);
    fs::create_dir(m.path("tmp")).unwrap();
    fs::set_permissions(m.path("tmp"), Permissions::from_mode(0o1777)).unwrap();
    let file = cpath(&m.path("tmp/a-file"));
    let renamed = cpath(&m.path("tmp/b-name"));

    assert_eq!(
        as_user(USER_A, || open_as(
            &file,
            libc::O_WRONLY | libc::O_CREAT,
            0o666
        )),
        0,
        "A creates in 1777"
    );
    let meta = fs::metadata(m.path("tmp/a-file")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (USER_A, USER_A),
        "a new file belongs to its creator"
    );

    // SAFETY: NUL-terminated paths prepared before the fork.
    let unlink = || unsafe {
        if libc::unlink(file.as_ptr()) == 0 {
            0
        } else {
            last_errno()
        }
    };
    // SAFETY: as for `unlink`.
    let rename = || unsafe {
        if libc::rename(file.as_ptr(), renamed.as_ptr()) == 0 {
            0
        } else {
            last_errno()
        }
    };
    let b_unlink = as_user(USER_B, unlink);
    assert!(
        b_unlink == libc::EPERM || b_unlink == libc::EACCES,
        "B unlinks A's file in a sticky dir: errno {b_unlink}"
    );
    let b_rename = as_user(USER_B, rename);
    assert!(
        b_rename == libc::EPERM || b_rename == libc::EACCES,
        "B renames A's file in a sticky dir: errno {b_rename}"
    );
    assert!(m.path("tmp/a-file").exists());
    assert_eq!(as_user(USER_A, unlink), 0, "A may unlink its own file");
    assert!(!m.path("tmp/a-file").exists());
    m.finish();
}

#[test]
fn write_by_non_owner_clears_setuid_and_setgid() {
    write_by_non_owner_clears_set_id(&["allow_other"]);
}

#[test]
fn write_by_non_owner_clears_setuid_and_setgid_without_the_writeback_cache() {
    write_by_non_owner_clears_set_id(&["allow_other", "writeback=off"]);
}

fn write_by_non_owner_clears_set_id(options: &[&str]) {
    let m = Mounted::with_options(options);
    fs::write(m.path("prog"), b"#!/bin/sh\n").unwrap();
    // chown first: chown itself may clear the set-id bits.
    std::os::unix::fs::chown(m.path("prog"), Some(USER_A), Some(USER_A)).unwrap();
    fs::set_permissions(m.path("prog"), Permissions::from_mode(0o6777)).unwrap();
    assert_eq!(mode_of(&m.path("prog")), 0o6777);
    let prog = cpath(&m.path("prog"));
    let append = || {
        // SAFETY: NUL-terminated path prepared before the fork; a static buffer.
        unsafe {
            let fd = libc::open(prog.as_ptr(), libc::O_WRONLY | libc::O_APPEND);
            if fd < 0 {
                return last_errno();
            }
            let written = libc::write(fd, b"x".as_ptr().cast(), 1);
            let errno = if written == 1 { 0 } else { last_errno() };
            libc::close(fd);
            errno
        }
    };
    assert_eq!(as_user(USER_B, append), 0, "B may write a 0777 file");
    assert_eq!(fs::read(m.path("prog")).unwrap(), b"#!/bin/sh\nx");
    let mode = mode_of(&m.path("prog"));
    assert_eq!(
        mode & 0o6000,
        0,
        "a write by a non-owner must clear setuid and setgid: mode {mode:o}"
    );
    assert_eq!(mode & 0o777, 0o777);
    m.finish();
}
