//! The command-line contract: help and version, argument errors, mkfs refusals, foreign or
//! unknown stores left untouched, mount/umount edge cases, mount options.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::time::Duration;

use common::{assert_errno, is_mounted, shoal, shoal_ok, test_dir, MountGuard, Mounted};
use shoal_bench::{diff_manifests, manifest};

#[track_caller]
fn assert_refused(out: &common::CmdOutput, what: &str) {
    assert!(
        !out.success(),
        "{what}: expected a non-zero exit\n{}",
        out.describe()
    );
    assert!(
        !out.stderr.trim().is_empty(),
        "{what}: a refusal must say why on stderr\n{}",
        out.describe()
    );
}

#[track_caller]
fn assert_unchanged(
    dir: &Path,
    before: &[shoal_bench::Entry],
    before_mtime: std::time::SystemTime,
    what: &str,
) {
    let diffs = diff_manifests(before, &manifest(dir).unwrap());
    assert!(
        diffs.is_empty(),
        "{what} modified {}: {diffs:#?}",
        dir.display()
    );
    assert_eq!(
        fs::metadata(dir).unwrap().modified().unwrap(),
        before_mtime,
        "{what} touched {}",
        dir.display()
    );
}

fn os(path: &Path) -> &OsStr {
    path.as_os_str()
}

#[test]
fn version_and_help() {
    let out = shoal_ok(&["--version"]);
    assert!(out.stdout.contains("shoal"), "{}", out.describe());
    assert!(
        out.stdout.contains(env!("CARGO_PKG_VERSION")),
        "{}",
        out.describe()
    );
    for args in [&["help"][..], &["--help"][..]] {
        let out = shoal_ok(args);
        for command in ["mkfs", "mount", "umount", "fsck"] {
            assert!(
                out.stdout.contains(command),
                "`shoal {}` does not mention {command}\n{}",
                args[0],
                out.describe()
            );
        }
    }
}

#[test]
fn bad_arguments_are_refused() {
    let dir = test_dir();
    let store = dir.path().join("store");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&store).unwrap();
    fs::create_dir(&mnt).unwrap();
    shoal_ok(&[OsStr::new("mkfs"), os(&store)]);
    let _guard = MountGuard {
        store: Some(store.clone()),
        mnt: mnt.clone(),
    };

    assert_refused(&shoal::<&str>(&[]), "no command");
    assert_refused(&shoal(&["frobnicate"]), "unknown command");
    assert_refused(&shoal(&["mkfs"]), "mkfs without a store");
    assert_refused(&shoal(&["mount"]), "mount without arguments");
    assert_refused(
        &shoal(&[OsStr::new("mount"), os(&store)]),
        "mount without a mountpoint",
    );
    assert_refused(
        &shoal(&[
            OsStr::new("mount"),
            os(&store),
            os(&mnt),
            OsStr::new("extra"),
        ]),
        "mount with an extra argument",
    );
    for options in ["commit=soon", "threads=many", "no_such_option"] {
        let out = shoal(&[
            OsStr::new("mount"),
            os(&store),
            os(&mnt),
            OsStr::new("-o"),
            OsStr::new(options),
        ]);
        assert_refused(&out, &format!("mount -o {options}"));
        assert!(
            !is_mounted(&mnt),
            "a refused mount -o {options} left a mount"
        );
    }
    assert_refused(&shoal(&["fsck"]), "fsck without a store");
}

#[test]
fn mkfs_refuses_non_empty_dirs_and_existing_stores() {
    let dir = test_dir();
    let occupied = dir.path().join("occupied");
    fs::create_dir(&occupied).unwrap();
    fs::write(occupied.join("precious"), b"do not lose me").unwrap();
    let before = manifest(&occupied).unwrap();
    let before_mtime = fs::metadata(&occupied).unwrap().modified().unwrap();
    assert_refused(
        &shoal(&[OsStr::new("mkfs"), os(&occupied)]),
        "mkfs on a non-empty dir",
    );
    assert_unchanged(&occupied, &before, before_mtime, "a refused mkfs");

    let mut m = Mounted::new();
    let format = fs::read_to_string(m.store.join("FORMAT")).expect("mkfs writes STORE/FORMAT");
    assert_eq!(format.lines().next(), Some("shoal-store 2"));
    fs::write(m.path("old-file"), b"old").unwrap();
    m.umount();

    let before = manifest(&m.store).unwrap();
    let before_mtime = fs::metadata(&m.store).unwrap().modified().unwrap();
    assert_refused(
        &shoal(&[OsStr::new("mkfs"), os(&m.store)]),
        "mkfs on an existing store",
    );
    assert_unchanged(&m.store, &before, before_mtime, "a refused mkfs");
    m.mount();
    assert_eq!(
        fs::read(m.path("old-file")).unwrap(),
        b"old",
        "a refused mkfs must keep the data"
    );
    m.umount();

    shoal_ok(&[OsStr::new("mkfs"), os(&m.store), OsStr::new("--force")]);
    m.mount();
    let names: Vec<_> = fs::read_dir(&m.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        names.is_empty(),
        "mkfs --force gives an empty filesystem, found {names:?}"
    );
    m.finish();
}

/// A directory of someone else's files, with a `lock` and a `FORMAT`-like name among them.
fn foreign_dir(parent: &Path) -> std::path::PathBuf {
    let foreign = parent.join("foreign");
    fs::create_dir_all(foreign.join("sub")).unwrap();
    fs::write(foreign.join("notes.txt"), b"my notes").unwrap();
    fs::write(foreign.join("lock"), b"not a pid").unwrap();
    fs::write(foreign.join("format"), b"shoal-store 1\n").unwrap();
    fs::write(foreign.join("sub/data.bin"), [0u8, 1, 2, 3]).unwrap();
    foreign
}

#[test]
fn foreign_dir_is_refused_and_left_untouched() {
    let dir = test_dir();
    let foreign = foreign_dir(dir.path());
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _guard = MountGuard {
        store: Some(foreign.clone()),
        mnt: mnt.clone(),
    };
    let before = manifest(&foreign).unwrap();
    let before_mtime = fs::metadata(&foreign).unwrap().modified().unwrap();

    assert_refused(
        &shoal(&[OsStr::new("mount"), os(&foreign), os(&mnt)]),
        "mount of a foreign dir",
    );
    assert!(!is_mounted(&mnt));
    assert_unchanged(&foreign, &before, before_mtime, "a refused mount");
    assert_refused(
        &shoal(&[OsStr::new("fsck"), os(&foreign)]),
        "fsck of a foreign dir",
    );
    assert_unchanged(&foreign, &before, before_mtime, "a refused fsck");
    assert_refused(
        &shoal(&[OsStr::new("mkfs"), os(&foreign)]),
        "mkfs of a foreign dir",
    );
    assert_unchanged(&foreign, &before, before_mtime, "a refused mkfs");
}

#[test]
fn missing_store_is_refused_and_not_created() {
    let dir = test_dir();
    let missing = dir.path().join("no-such-store");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _guard = MountGuard {
        store: Some(missing.clone()),
        mnt: mnt.clone(),
    };
    assert_refused(
        &shoal(&[OsStr::new("mount"), os(&missing), os(&mnt)]),
        "mount of a missing store",
    );
    assert!(!is_mounted(&mnt));
    assert_refused(
        &shoal(&[OsStr::new("fsck"), os(&missing)]),
        "fsck of a missing store",
    );
    assert!(
        !missing.exists(),
        "mount or fsck created {}",
        missing.display()
    );

    let mut m = Mounted::new();
    m.umount();
    assert_refused(
        &shoal(&[
            OsStr::new("mount"),
            os(&m.store),
            os(&dir.path().join("no-such-mnt")),
        ]),
        "missing mountpoint",
    );
}

#[test]
fn unknown_format_version_is_refused() {
    let mut m = Mounted::new();
    fs::write(m.path("file"), b"kept").unwrap();
    m.umount();
    let format_path = m.store.join("FORMAT");
    let original = fs::read_to_string(&format_path).unwrap();
    let rest: String = original
        .lines()
        .skip(1)
        .map(|line| format!("{line}\n"))
        .collect();
    fs::write(&format_path, format!("shoal-store 999\n{rest}")).unwrap();

    let out = shoal(&[OsStr::new("mount"), os(&m.store), os(&m.mnt)]);
    assert_refused(&out, "mount of a store with an unknown format version");
    assert!(!is_mounted(&m.mnt));
    assert!(
        out.stderr.contains("999") || out.stderr.to_lowercase().contains("version"),
        "the refusal should name the version problem\n{}",
        out.describe()
    );
    assert_refused(
        &shoal(&[OsStr::new("fsck"), os(&m.store)]),
        "fsck of an unknown format version",
    );

    // With the version restored the store is fine: the refusal was about the version alone.
    fs::write(&format_path, original).unwrap();
    m.mount();
    assert_eq!(fs::read(m.path("file")).unwrap(), b"kept");
    m.finish();
}

/// After a plain `umount`, the old daemon exits on its own; it must not unmount the
/// mountpoint again on the way out, which would take down a new mount made there meanwhile.
#[test]
fn a_new_mount_survives_the_old_daemon_exiting() {
    let mut m = Mounted::new();
    fs::write(m.path("file"), b"old").unwrap();
    let old_daemon = m.daemon_pid().expect("the first daemon's pid");
    // Stopped, the old daemon cannot finish before the new mount exists; it runs its exit
    // path afterwards. A lazy unmount detaches the mountpoint without waiting for it.
    shoal_sys::process::send_signal(old_daemon, libc::SIGSTOP).unwrap();
    m.umount_with_no_wait(&["umount", "-l"]);
    let _guard = MountGuard {
        store: None,
        mnt: m.mnt.clone(),
    };
    shoal_ok(&[OsStr::new("mount"), OsStr::new("--memory"), os(&m.mnt)]);
    fs::write(m.path("new"), b"new mount").unwrap();
    shoal_sys::process::send_signal(old_daemon, libc::SIGCONT).unwrap();
    common::wait_for("the first daemon to exit", Duration::from_secs(30), || {
        !common::process_alive(old_daemon)
    });
    assert!(is_mounted(&m.mnt), "the old daemon unmounted the new mount");
    assert_eq!(fs::read(m.path("new")).unwrap(), b"new mount");
    shoal_ok(&[OsStr::new("umount"), os(&m.mnt)]);
    m.fsck_clean();
}

#[test]
fn store_already_mounted_is_refused() {
    let m = Mounted::new();
    fs::write(m.path("file"), b"first mount").unwrap();
    let second_mnt = m.dir.path().join("mnt2");
    fs::create_dir(&second_mnt).unwrap();
    let _guard = MountGuard {
        store: None,
        mnt: second_mnt.clone(),
    };
    assert_refused(
        &shoal(&[OsStr::new("mount"), os(&m.store), os(&second_mnt)]),
        "second mount of one store",
    );
    assert!(!is_mounted(&second_mnt));
    // fsck of the mounted store names the mountpoint, not only the daemon's pid.
    let fsck = shoal(&[OsStr::new("fsck"), os(&m.store)]);
    assert_eq!(fsck.code, Some(2), "{}", fsck.describe());
    assert!(
        fsck.stderr
            .contains(&format!("mounted on {}", m.mnt.display())),
        "{}",
        fsck.describe()
    );
    assert_eq!(
        fs::read(m.path("file")).unwrap(),
        b"first mount",
        "the first mount keeps working"
    );
    m.finish();
}

#[test]
fn busy_mountpoint_is_refused() {
    let m = Mounted::new();
    fs::write(m.path("file"), b"first mount").unwrap();
    let mut other = Mounted::new();
    other.umount();
    assert_refused(
        &shoal(&[OsStr::new("mount"), os(&other.store), os(&m.mnt)]),
        "mount over a live shoal mount",
    );
    assert_eq!(
        fs::read(m.path("file")).unwrap(),
        b"first mount",
        "the first mount keeps working"
    );
    // The refused store is not left locked.
    other.mount();
    other.finish();
    m.finish();
}

#[test]
fn umount_of_a_non_mount_fails() {
    let dir = test_dir();
    assert_refused(
        &shoal(&[OsStr::new("umount"), dir.path().as_os_str()]),
        "umount of a plain dir",
    );
    assert_refused(
        &shoal(&[OsStr::new("umount"), os(&dir.path().join("missing"))]),
        "umount of a missing path",
    );
}

#[test]
fn fsck_prints_a_summary_for_a_clean_store() {
    let mut m = Mounted::new();
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/f"), b"data").unwrap();
    m.umount();
    let summary = m.fsck_clean();
    assert!(!summary.trim().is_empty(), "fsck printed no summary");
}

#[test]
fn memory_mount_works_and_unmounts() {
    let dir = test_dir();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _guard = MountGuard {
        store: None,
        mnt: mnt.clone(),
    };
    shoal_ok(&[OsStr::new("mount"), OsStr::new("--memory"), os(&mnt)]);
    assert!(is_mounted(&mnt));
    fs::create_dir(mnt.join("d")).unwrap();
    fs::write(mnt.join("d/f"), b"in memory").unwrap();
    assert_eq!(fs::read(mnt.join("d/f")).unwrap(), b"in memory");
    let daemon = common::find_daemon_pid(None, &mnt);
    shoal_ok(&[OsStr::new("umount"), os(&mnt)]);
    assert!(!is_mounted(&mnt));
    if let Some(pid) = daemon {
        assert!(
            !common::process_alive(pid),
            "memory daemon {pid} outlived `shoal umount`"
        );
    }
}

/// Some files and directories with data, to check after an unmount by another tool.
fn write_sample(m: &Mounted) {
    fs::create_dir_all(m.path("a/b")).unwrap();
    for i in 0..50 {
        fs::write(m.path(format!("a/b/f{i}")), vec![i as u8; i * 1000]).unwrap();
    }
}

fn check_sample(m: &Mounted) {
    for i in 0..50 {
        assert_eq!(
            fs::read(m.path(format!("a/b/f{i}"))).unwrap(),
            vec![i as u8; i * 1000],
            "a/b/f{i}"
        );
    }
}

#[test]
fn system_umount_leaves_a_clean_store() {
    let mut m = Mounted::new();
    write_sample(&m);
    m.umount_with(&["umount"]);
    m.fsck_clean();
    m.mount();
    check_sample(&m);
    m.finish();
}

#[test]
fn mount_right_after_a_system_umount_waits_for_the_old_daemon() {
    let mut m = Mounted::new();
    write_sample(&m);
    // The old daemon may still be syncing and hold the store's lock: `shoal mount` retries.
    m.umount_with_no_wait(&["umount"]);
    m.mount();
    check_sample(&m);
    m.finish();
}

#[test]
fn fusermount_u_leaves_a_clean_store() {
    let mut m = Mounted::new();
    write_sample(&m);
    m.umount_with(&["fusermount3", "-u"]);
    m.fsck_clean();
    m.mount();
    check_sample(&m);
    m.finish();
}

#[test]
fn read_only_mount_refuses_writes() {
    let mut m = Mounted::new();
    fs::write(m.path("file"), b"before ro").unwrap();
    fs::create_dir(m.path("dir")).unwrap();
    m.umount();
    m.set_options(&["ro"]);
    m.mount();
    assert_eq!(fs::read(m.path("file")).unwrap(), b"before ro");
    assert_errno(
        fs::write(m.path("new"), b"x"),
        libc::EROFS,
        "create on a ro mount",
    );
    assert_errno(
        fs::OpenOptions::new().write(true).open(m.path("file")),
        libc::EROFS,
        "open for write on a ro mount",
    );
    assert_errno(
        fs::create_dir(m.path("dir2")),
        libc::EROFS,
        "mkdir on a ro mount",
    );
    assert_errno(
        fs::remove_file(m.path("file")),
        libc::EROFS,
        "unlink on a ro mount",
    );
    assert_errno(
        fs::rename(m.path("file"), m.path("dir/file")),
        libc::EROFS,
        "rename on a ro mount",
    );
    m.umount();
    m.fsck_clean();
    m.set_options(&[]);
    m.mount();
    assert_eq!(fs::read(m.path("file")).unwrap(), b"before ro");
    assert!(!m.path("new").exists());
    m.finish();
}

#[test]
fn commit_and_threads_options_are_accepted() {
    let mut m = Mounted::with_options(&["commit=1", "threads=2"]);
    fs::write(m.path("file"), b"committed").unwrap();
    m.remount();
    assert_eq!(fs::read(m.path("file")).unwrap(), b"committed");
    m.finish();
}

#[test]
fn mountpoint_is_an_empty_dir_after_umount() {
    let mut m = Mounted::new();
    fs::write(m.path("file"), b"x").unwrap();
    m.umount();
    assert_eq!(fs::read_dir(&m.mnt).unwrap().count(), 0);
    assert_errno(
        fs::read(m.path("file")),
        libc::ENOENT,
        "the file is gone with the mount",
    );
}

/// `-h` is help for every command (it was --human on info and quota report), and a plain
/// size number is bytes everywhere (it was MiB in `-o` options): `-o cache=64` is refused
/// with the hint to write `64M`, and `--bhard 512` is 512 bytes.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "a table of every subcommand's -h and size option, checked in one pass"
)]
fn dash_h_is_help_and_a_plain_size_is_bytes_everywhere() {
    for command in [
        "",
        "mkfs",
        "mount",
        "umount",
        "fsck",
        "info",
        "backup",
        "restore",
        "quota",
        "quota report",
        "quota set",
        "quota config",
        "stats",
        "du",
        "rmtree",
        "import",
        "export",
        "gen-tree",
        "bench",
    ] {
        let mut args: Vec<&str> = command.split_whitespace().collect();
        args.push("-h");
        let out = shoal(&args);
        assert!(
            out.success() && out.stdout.contains("Usage: shoal"),
            "shoal {command} -h: {}",
            out.describe()
        );
    }
    let mut m = Mounted::new();
    m.umount();
    m.set_options(&["cache=64"]);
    let refused = shoal(&[
        OsStr::new("mount"),
        m.store.as_os_str(),
        m.mnt.as_os_str(),
        OsStr::new("-o"),
        OsStr::new("cache=64"),
    ]);
    assert!(!refused.success(), "{}", refused.describe());
    assert!(
        refused
            .stderr
            .contains("a plain number is bytes: 64M is 64 MiB"),
        "{}",
        refused.describe()
    );
    m.set_options(&["cache=67108864"]);
    m.mount();
    shoal_ok(&[
        OsStr::new("quota"),
        OsStr::new("set"),
        OsStr::new("-u"),
        OsStr::new("4242"),
        OsStr::new("--bhard"),
        OsStr::new("512"),
        m.mnt.as_os_str(),
    ]);
    let report = shoal_ok(&[
        OsStr::new("quota"),
        OsStr::new("report"),
        OsStr::new("--json"),
        m.mnt.as_os_str(),
    ]);
    let lines: serde_json::Value = serde_json::from_str(&report.stdout).unwrap();
    let line = lines
        .as_array()
        .unwrap()
        .iter()
        .find(|line| line["id"] == 4242)
        .unwrap_or_else(|| panic!("no id 4242 in {}", report.stdout));
    assert_eq!(line["bytes_hard"], 512, "{line}");
    m.finish();
}
