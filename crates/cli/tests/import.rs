//! `shoal import` and `shoal export` through the kernel: an archive GNU tar wrote (every
//! entry kind, long names, hard links, xattrs, nanosecond times, owners) imports to the
//! same tree `tar xf` makes through the mount, exports to an archive `tar xf` restores
//! the same elsewhere, bad archives leave nothing visible, a kill -9 mid-import leaves a
//! clean store without a partial tree, and both work on an unmounted store.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{gen_tree, poll, run, run_ok, shoal, shoal_ok, MountGuard, Mounted};
use shoal_sys::xattr::{self, SetXattr};

const TAR_TIMEOUT: Duration = Duration::from_secs(300);

fn sh(cmd: &mut Command) -> String {
    run_ok(cmd, TAR_TIMEOUT).stdout
}

/// Sets a file's mtime (and atime) to the nanosecond, not following symlinks.
fn set_mtime(path: &Path, secs: i64, nanos: i64) {
    xattr::set_times(path, (secs, nanos), (secs, nanos))
        .unwrap_or_else(|error| panic!("utimensat {}: {error}", path.display()));
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    xattr::set_xattr(path, name, value, SetXattr::CreateOrReplace)
        .unwrap_or_else(|error| panic!("setxattr {} {name}: {error}", path.display()));
}

/// Every xattr of `path` (not following symlinks), names sorted.
fn xattrs(path: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let names = xattr::list_xattrs(path)
        .unwrap_or_else(|error| panic!("listxattr {}: {error}", path.display()));
    names
        .into_iter()
        .map(|name| {
            let value = xattr::get_xattr(path, &name)
                .unwrap_or_else(|error| panic!("getxattr {}: {error}", path.display()));
            (name, value)
        })
        .collect()
}

/// A tree with every kind tar stores: directories (one setgid, one with odd mode),
/// small, empty, multi-chunk and setuid files, hard links across directories, symlinks,
/// a fifo, devices, long names and a long path, xattrs, owners, nanosecond mtimes.
fn make_source(src: &Path) {
    let long = "n".repeat(150);
    let deep = src.join("deep").join(&long).join(&long);
    fs::create_dir_all(&deep).unwrap();
    fs::write(
        deep.join(format!("{long}.txt")),
        b"at the end of a long path",
    )
    .unwrap();
    fs::create_dir_all(src.join("a/b/c")).unwrap();
    fs::write(src.join("a/small"), b"small file\n").unwrap();
    fs::write(src.join("a/empty"), b"").unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 977) as u8).collect();
    fs::write(src.join("a/b/big"), &big).unwrap();
    fs::write(src.join("a/b/c/setuid"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(src.join("a/b/c/setuid"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::hard_link(src.join("a/small"), src.join("a/b/c/small-link")).unwrap();
    fs::hard_link(src.join("a/small"), src.join("small-link-2")).unwrap();
    fs::hard_link(src.join("a/b/big"), src.join(format!("big-link-{long}"))).unwrap();
    symlink("a/small", src.join("rel-link")).unwrap();
    symlink(
        format!("/nowhere/{long}/{long}"),
        src.join("long-target-link"),
    )
    .unwrap();
    let fifo = CString::new(src.join("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    for (name, kind, major, minor) in [
        ("null-like", libc::S_IFCHR, 1u32, 3u32),
        ("disk-like", libc::S_IFBLK, 259, 70000),
    ] {
        let path = CString::new(src.join(name).as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path; root makes device nodes.
        let rc = unsafe { libc::mknod(path.as_ptr(), kind | 0o600, libc::makedev(major, minor)) };
        assert_eq!(rc, 0, "mknod {name}");
    }
    fs::create_dir(src.join("setgid-dir")).unwrap();
    fs::set_permissions(src.join("setgid-dir"), fs::Permissions::from_mode(0o2770)).unwrap();
    fs::create_dir(src.join("odd-mode")).unwrap();
    fs::set_permissions(src.join("odd-mode"), fs::Permissions::from_mode(0o1703)).unwrap();
    set_xattr(&src.join("a/small"), "user.note", b"hello");
    set_xattr(&src.join("a/b"), "user.dir", b"on a directory");
    set_xattr(
        &src.join("a/b/big"),
        "user.binary",
        &[0, 1, 2, 255, b'\n', b'='],
    );
    let owned = src.join("a/b/c/setuid");
    let c = CString::new(owned.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::lchown(c.as_ptr(), 1234, 5678) }, 0);
    let c = CString::new(src.join("rel-link").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::lchown(c.as_ptr(), 42, 43) }, 0);
    // Times last, deepest first, so creating children does not move them.
    let mut all = vec![];
    collect(src, &mut all);
    all.sort_by_key(|path| std::cmp::Reverse(path.components().count()));
    for (index, path) in all.iter().enumerate() {
        set_mtime(
            path,
            1_600_000_000 + index as i64 * 1000,
            123_456_789 + index as i64,
        );
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if fs::symlink_metadata(&path).unwrap().is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// What must be the same: per relative path, kind and mode, owners, size (but directory
/// sizes only with `dir_sizes`), mtime to the nanosecond, link count, device, xattrs,
/// contents or target, and which names share an inode.
fn listing(root: &Path, dir_sizes: bool) -> Vec<String> {
    let mut paths = vec![];
    collect(root, &mut paths);
    paths.sort();
    let mut first_name: BTreeMap<u64, String> = BTreeMap::new();
    let mut lines = vec![];
    for path in paths {
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let meta = fs::symlink_metadata(&path).unwrap();
        let size = if meta.is_dir() && !dir_sizes {
            0
        } else {
            meta.size()
        };
        let content = if meta.file_type().is_file() {
            let bytes = fs::read(&path).unwrap();
            format!(
                "{:x}",
                bytes
                    .iter()
                    .fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
            )
        } else if meta.file_type().is_symlink() {
            fs::read_link(&path).unwrap().to_string_lossy().into_owned()
        } else {
            String::new()
        };
        let same_as = if !meta.is_dir() && meta.nlink() > 1 {
            first_name
                .entry(meta.ino())
                .or_insert_with(|| rel.clone())
                .clone()
        } else {
            String::new()
        };
        lines.push(format!(
            "{rel:?} mode={:o} owner={}:{} size={size} mtime={}.{:09} nlink={} rdev={:x} xattrs={:?} content={content} same_as={same_as:?}",
            meta.mode(),
            meta.uid(),
            meta.gid(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.nlink(),
            meta.rdev(),
            xattrs(&path),
        ));
    }
    lines
}

fn assert_same(what: &str, expected: &[String], actual: &[String]) {
    let differing: Vec<_> = expected
        .iter()
        .zip(actual)
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("  expected {a}\n  actual   {b}"))
        .collect();
    assert!(
        differing.is_empty() && expected.len() == actual.len(),
        "{what}: {} vs {} entries\n{}",
        expected.len(),
        actual.len(),
        differing.join("\n")
    );
}

/// Archives of the source in the formats GNU tar writes.
fn archives(dir: &Path, src: &Path) -> Vec<(&'static str, PathBuf)> {
    let mut out = vec![];
    for format in ["posix", "gnu"] {
        let archive = dir.join(format!("{format}.tar"));
        let mut tar = Command::new("tar");
        tar.arg(format!("--format={format}"));
        if format == "posix" {
            tar.arg("--xattrs");
        }
        sh(tar.arg("-cf").arg(&archive).arg("-C").arg(src).arg("."));
        out.push((format, archive));
    }
    out
}

fn tar_extract(archive: &Path, into: &Path) {
    fs::create_dir_all(into).unwrap();
    sh(Command::new("tar")
        .args(["--xattrs", "--xattrs-include=*", "-xf"])
        .arg(archive)
        .arg("-C")
        .arg(into));
}

fn tar_compare(archive: &Path, dir: &Path) {
    let out = run(
        Command::new("tar")
            .args(["--xattrs", "-df"])
            .arg(archive)
            .arg("-C")
            .arg(dir),
        TAR_TIMEOUT,
    );
    assert!(out.success(), "tar --compare: {}", out.describe());
}

fn import(archive: &Path, dir: &Path) -> common::CmdOutput {
    shoal(&[
        OsStr::new("import"),
        OsStr::new("--from"),
        archive.as_os_str(),
        dir.as_os_str(),
    ])
}

fn tmpfs(at: &Path) -> MountGuard {
    fs::create_dir_all(at).unwrap();
    sh(Command::new("mount").args(["-t", "tmpfs", "tmpfs"]).arg(at));
    MountGuard {
        store: None,
        mnt: at.to_path_buf(),
    }
}

#[test]
fn import_matches_tar_xf_through_the_mount_and_export_restores_it_elsewhere() {
    let m = Mounted::new();
    let work = m.dir.path().join("work");
    let src = work.join("src");
    make_source(&src);
    let scratch = work.join("tmpfs");
    let _tmpfs = tmpfs(&scratch);
    for (format, archive) in archives(&work, &src) {
        let by_tar = m.path(format!("tar-{format}"));
        tar_extract(&archive, &by_tar);
        let imported = m.path(format!("imported-{format}"));
        let out = import(&archive, &imported);
        assert!(out.success(), "{}", out.describe());
        assert!(out.stdout.contains("imported"), "{}", out.stdout);
        let expected = listing(&by_tar, true);
        assert!(expected.len() > 20, "the source tree is too small");
        assert_same(
            &format!("{format}: import vs tar xf"),
            &expected,
            &listing(&imported, true),
        );
        tar_compare(&archive, &imported);

        // Export, then tar xf on tmpfs: as tar xf of the original archive there.
        let exported = work.join(format!("exported-{format}.tar"));
        shoal_ok(&[
            OsStr::new("export"),
            imported.as_os_str(),
            OsStr::new("--to"),
            exported.as_os_str(),
        ]);
        let original_there = scratch.join(format!("original-{format}"));
        let exported_there = scratch.join(format!("exported-{format}"));
        tar_extract(&archive, &original_there);
        tar_extract(&exported, &exported_there);
        assert_same(
            &format!("{format}: export then tar xf vs tar xf (tmpfs)"),
            &listing(&original_there, true),
            &listing(&exported_there, true),
        );
        tar_compare(&exported, &imported);
    }
    // Standard input and standard output work as files do.
    let (_, posix) = &archives(&work, &src)[0];
    let mut child = Command::new(common::SHOAL)
        .arg("import")
        .arg(m.path("from-stdin"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&fs::read(posix).unwrap())
        .unwrap();
    assert!(child.wait().unwrap().success());
    let piped = Command::new(common::SHOAL)
        .arg("export")
        .arg(m.path("from-stdin"))
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(piped.status.success());
    let streamed = work.join("streamed.tar");
    fs::write(&streamed, &piped.stdout).unwrap();
    tar_compare(&streamed, &m.path("imported-posix"));
    // The name exists: a clear error, nothing changed.
    let again = import(posix, &m.path("imported-posix"));
    assert!(!again.success());
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    let report = m.finish();
    assert!(report.contains("clean"), "{report}");
}

fn reclaim_trees(mnt: &Path) -> u64 {
    let out = shoal_ok(&[OsStr::new("stats"), OsStr::new("--json"), mnt.as_os_str()]);
    let stats: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    stats["engine"]["reclaim_trees"].as_u64().unwrap()
}

fn used_inodes(path: &Path) -> u64 {
    let st = shoal_sys::statvfs::statvfs(path).unwrap();
    st.f_files - st.f_ffree
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn bad_archives_fail_clearly_and_leave_nothing_visible() {
    let m = Mounted::new();
    let work = m.dir.path().join("work");
    let src = work.join("src");
    make_source(&src);
    let (_, good) = archives(&work, &src).remove(0);
    fs::write(m.path("keep"), b"x").unwrap();
    let before = names(&m.mnt);
    let inodes_before = used_inodes(&m.mnt);
    let bytes = fs::read(&good).unwrap();
    let truncated = work.join("truncated.tar");
    // Cut inside the big file's data: the members before it were applied.
    fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let garbage = work.join("garbage.tar");
    let noise: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(&garbage, noise).unwrap();
    // GNU tar strips `../` when it writes; Python's tarfile writes what it is given.
    let escaping = work.join("escaping.tar");
    sh(Command::new("python3").arg("-c").arg(format!(
        "import io, tarfile\n\
         t = tarfile.open({:?}, 'w')\n\
         i = tarfile.TarInfo('ok/../../escape'); i.size = 1\n\
         t.addfile(i, io.BytesIO(b'x')); t.close()",
        escaping.to_str().unwrap()
    )));
    for (archive, expect) in [
        (&truncated, "truncated"),
        (&garbage, "archive"),
        (&escaping, ".."),
    ] {
        let target = m.path("new");
        let out = import(archive, &target);
        assert!(!out.success(), "{}", out.describe());
        assert!(out.stderr.contains(expect), "{}", out.describe());
        assert!(
            out.stderr.lines().count() <= 2,
            "the error is not short: {}",
            out.stderr
        );
        assert!(!target.exists());
        assert_eq!(names(&m.mnt), before);
    }
    assert!(
        poll(Duration::from_secs(60), || reclaim_trees(&m.mnt) == 0
            && used_inodes(&m.mnt) == inodes_before),
        "the abandoned trees were not deleted"
    );
    let report = m.finish();
    assert!(report.contains("clean"), "{report}");
    assert!(report.contains("0 detached trees"), "{report}");
}

#[test]
fn kill_9_during_a_large_import_leaves_a_clean_store_and_no_partial_tree() {
    // Each batch reaches the journal before it completes, so batches survive the kill.
    let mut m = Mounted::with_options(&["checkpoint=0"]);
    let work = m.dir.path().join("work");
    let src = work.join("src");
    gen_tree(&src, 20000);
    let archive = work.join("big.tar");
    sh(Command::new("tar")
        .arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(&src)
        .arg("."));
    fs::write(m.path("keep"), b"x").unwrap();
    let inodes_before = used_inodes(&m.mnt);
    let target = m.path("big");
    let mut child = Command::new(common::SHOAL)
        .arg("import")
        .arg(&target)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let bytes = fs::read(&archive).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Most of the archive, never its end: the import is surely under way, not done.
    stdin.write_all(&bytes[..bytes.len() * 3 / 4]).unwrap();
    assert!(
        poll(Duration::from_secs(60), || used_inodes(&m.mnt)
            > inodes_before + 5000),
        "the import made no progress"
    );
    let daemon = m.daemon_pid().expect("the daemon's pid");
    m.kill_daemon(|| {});
    drop(stdin);
    let _ = child.wait();
    m.detach_dead_mount();
    common::wait_for(
        "the killed daemon's threads",
        Duration::from_secs(30),
        || !Path::new(&format!("/proc/{daemon}")).exists(),
    );
    let report = m.fsck_clean();
    // The kill came with the staged tree in the store (else this test proves less).
    assert!(report.contains(" 1 detached trees"), "{report}");
    m.mount();
    assert!(!target.exists());
    assert_eq!(names(&m.mnt), vec!["keep".to_string()]);
    assert!(
        poll(Duration::from_secs(120), || reclaim_trees(&m.mnt) == 0
            && used_inodes(&m.mnt) == inodes_before),
        "the next mount did not delete the partial tree"
    );
    let report = m.finish();
    assert!(report.contains("clean"), "{report}");
}

#[test]
fn import_and_export_work_on_an_unmounted_store() {
    let mut m = Mounted::new();
    let work = m.dir.path().join("work");
    let src = work.join("src");
    make_source(&src);
    let (_, archive) = archives(&work, &src).remove(0);
    fs::create_dir(m.path("under")).unwrap();
    m.umount();
    shoal_ok(&[
        OsStr::new("import"),
        m.store.as_os_str(),
        OsStr::new("--path"),
        OsStr::new("/under/tree"),
        OsStr::new("--from"),
        archive.as_os_str(),
    ]);
    let truncated = work.join("truncated.tar");
    let bytes = fs::read(&archive).unwrap();
    fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let bad = shoal(&[
        OsStr::new("import"),
        m.store.as_os_str(),
        OsStr::new("--path"),
        OsStr::new("/under/bad"),
        OsStr::new("--from"),
        truncated.as_os_str(),
    ]);
    assert!(!bad.success());
    let report = m.fsck_clean();
    assert!(report.contains("0 detached trees"), "{report}");
    let exported = work.join("offline.tar");
    shoal_ok(&[
        OsStr::new("export"),
        m.store.as_os_str(),
        OsStr::new("--path"),
        OsStr::new("/under/tree"),
        OsStr::new("--to"),
        exported.as_os_str(),
    ]);
    m.mount();
    assert_eq!(names(&m.path("under")), vec!["tree".to_string()]);
    let by_tar = m.path("by-tar");
    tar_extract(&archive, &by_tar);
    assert_same(
        "offline import vs tar xf",
        &listing(&by_tar, true),
        &listing(&m.path("under/tree"), true),
    );
    tar_compare(&exported, &m.path("under/tree"));
    let report = m.finish();
    assert!(report.contains("clean"), "{report}");
}

/// GNU sparse members (`tar -S`) read longer than their header's size, and files of a
/// whole number of chunks end exactly at a piece: both come back byte for byte.
#[test]
fn sparse_members_and_chunk_sized_files_come_back_byte_for_byte() {
    let m = Mounted::new();
    let work = m.dir.path().join("work");
    let src = work.join("src");
    fs::create_dir_all(&src).unwrap();
    let holey = fs::File::create(src.join("holey")).unwrap();
    holey.set_len(1_000_000).unwrap();
    for (at, bytes) in [(300_000u64, &b"middle"[..]), (999_990, b"the end")] {
        std::os::unix::fs::FileExt::write_all_at(&holey, bytes, at).unwrap();
    }
    drop(holey);
    fs::File::create(src.join("all-hole"))
        .unwrap()
        .set_len(131_072)
        .unwrap();
    let chunky: Vec<u8> = (0..2 * 65_536u32).map(|i| (i % 251) as u8).collect();
    fs::write(src.join("two-chunks"), &chunky).unwrap();
    fs::write(src.join("one-past"), &chunky[..65_537]).unwrap();
    fs::write(src.join("empty"), b"").unwrap();
    let archive = work.join("sparse.tar");
    sh(Command::new("tar")
        .args(["--format=gnu", "-S", "-cf"])
        .arg(&archive)
        .arg("-C")
        .arg(&src)
        .arg("."));
    let out = import(&archive, &m.path("tree"));
    assert!(out.success(), "{}", out.describe());
    for name in ["holey", "all-hole", "two-chunks", "one-past", "empty"] {
        let expected = fs::read(src.join(name)).unwrap();
        let imported = fs::read(m.path("tree").join(name)).unwrap();
        assert!(expected == imported, "{name} differs after import");
    }
    tar_compare(&archive, &m.path("tree"));
    let report = m.finish();
    assert!(report.contains("clean"), "{report}");
}

/// An archive of many batches (`BATCH_OPS` and `BATCH_BYTES` both passed several times):
/// names land in directories made one and two batches before, a file's data spans
/// batches and its xattr comes after them, and directory attributes are set last, while
/// the batch before is still being applied. The result is still what `tar xf` makes.
#[test]
fn an_archive_of_many_batches_matches_tar_xf() {
    let m = Mounted::new();
    let work = m.dir.path().join("work");
    let src = work.join("src");
    gen_tree(&src, 5000);
    let late = src.join("zz-late");
    fs::create_dir_all(&late).unwrap();
    let huge: Vec<u8> = (0..20_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    fs::write(late.join("huge"), &huge).unwrap();
    set_xattr(&late.join("huge"), "user.after", b"set after 20 MB of data");
    fs::write(late.join("after"), b"named after the huge file\n").unwrap();
    set_mtime(&late, 1_650_000_000, 5);
    let (_, archive) = archives(&work, &src).remove(0);
    let by_tar = m.path("by-tar");
    tar_extract(&archive, &by_tar);
    let imported = m.path("imported");
    let out = import(&archive, &imported);
    assert!(out.success(), "{}", out.describe());
    let expected = listing(&by_tar, true);
    assert!(expected.len() > 5000, "the source tree is too small");
    assert_same(
        "many batches: import vs tar xf",
        &expected,
        &listing(&imported, true),
    );
    tar_compare(&archive, &imported);
    assert_eq!(
        xattrs(&imported.join("zz-late/huge")).get(&b"user.after"[..]),
        Some(&b"set after 20 MB of data".to_vec())
    );
    let report = m.finish();
    assert!(report.contains("clean"), "{report}");
}

/// `tar czf`, `tar --zstd -cf` and `tar cJf` archives import as the plain one does, from a
/// file and from standard input, told apart by their first bytes (the names here say
/// nothing); a cut compressed stream fails clearly and leaves nothing.
#[test]
fn compressed_archives_import_by_their_magic_bytes() {
    let m = Mounted::new();
    let work = m.dir.path().join("work");
    let src = work.join("src");
    make_source(&src);
    let (_, plain) = archives(&work, &src).remove(0);
    for (kind, flag) in [("gzip", "-z"), ("zstd", "--zstd"), ("xz", "-J")] {
        let archive = work.join(format!("{kind}.archive"));
        sh(Command::new("tar")
            .args(["--format=posix", "--xattrs", flag, "-cf"])
            .arg(&archive)
            .arg("-C")
            .arg(&src)
            .arg("."));
        let from_file = m.path(format!("file-{kind}"));
        let out = import(&archive, &from_file);
        assert!(out.success(), "{kind}: {}", out.describe());
        tar_compare(&plain, &from_file);
        let from_stdin = m.path(format!("stdin-{kind}"));
        let piped = run(
            Command::new("sh")
                .arg("-c")
                .arg("exec \"$0\" import \"$1\" < \"$2\"")
                .arg(common::SHOAL)
                .arg(&from_stdin)
                .arg(&archive),
            TAR_TIMEOUT,
        );
        assert!(piped.success(), "{kind} on stdin: {}", piped.describe());
        tar_compare(&plain, &from_stdin);
        // Cut in the middle: an error, and no directory.
        let bytes = fs::read(&archive).unwrap();
        let cut = work.join(format!("cut-{kind}.archive"));
        fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let bad = import(&cut, &m.path(format!("cut-{kind}")));
        assert!(!bad.success(), "{kind}: {}", bad.describe());
        assert!(!m.path(format!("cut-{kind}")).exists());
    }
    let report = m.finish();
    assert!(report.contains("clean"), "{report}");
}
