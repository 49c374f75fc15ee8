//! A store holds every file's bytes, so it is private to its owner: the directory and
//! every directory in it 0700, every file 0600. Every command that writes into a store is
//! run here under the everyday umask 022, and the store checked whole after each.
//! (The format upgrade, which needs a store of an old format, is checked in the engine's
//! tree_usage tests.)

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// `shoal ARGS` under umask 022, as an administrator's shell has it; panics unless it
/// exits 0.
fn shoal_umask_022(args: &[&OsStr]) -> CmdOutput {
    run_ok(
        Command::new("sh")
            .arg("-c")
            .arg("umask 022; exec \"$0\" \"$@\"")
            .arg(SHOAL)
            .args(args),
        SHOAL_TIMEOUT,
    )
}

/// Every path under `dir` (itself included) whose mode is not the private one.
fn shared_paths(dir: &Path, found: &mut Vec<String>) {
    let mode = fs::symlink_metadata(dir).unwrap().permissions().mode() & 0o7777;
    if mode != 0o700 {
        found.push(format!("{} {mode:04o}", dir.display()));
    }
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            shared_paths(&entry.path(), found);
        } else if meta.is_file() && meta.permissions().mode() & 0o7777 != 0o600 {
            let mode = meta.permissions().mode() & 0o7777;
            found.push(format!("{} {mode:04o}", entry.path().display()));
        }
    }
}

#[track_caller]
fn assert_private(store: &Path, after: &str) {
    let mut found = Vec::new();
    shared_paths(store, &mut found);
    assert!(
        found.is_empty(),
        "after {after}, not private:\n{}",
        found.join("\n")
    );
}

#[track_caller]
fn assert_file_private(file: &Path) {
    let mode = fs::metadata(file).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600, "{}", file.display());
}

/// An empty directory as an administrator makes it: 0755.
fn open_dir(path: &Path) -> PathBuf {
    fs::create_dir(path).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    path.to_path_buf()
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "every store-writing command in turn, each checked for the same file modes"
)]
fn every_command_that_writes_a_store_keeps_it_private() {
    let dir = test_dir();
    let store = open_dir(&dir.path().join("store"));
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _guard = MountGuard {
        store: Some(store.clone()),
        mnt: mnt.clone(),
    };
    let os = |path: &Path| path.as_os_str().to_owned();

    shoal_umask_022(&[OsStr::new("mkfs"), &os(&store)]);
    assert_private(&store, "mkfs into an existing 0755 directory");

    // The daemon: tables, journals, its log, a live backup (and its .partial on the way).
    shoal_umask_022(&[OsStr::new("mount"), &os(&store), &os(&mnt)]);
    gen_tree(&mnt.join("tree"), 200);
    fs::create_dir(mnt.join("doomed")).unwrap();
    fs::write(mnt.join("doomed/file"), b"x").unwrap();
    let live = dir.path().join("live.backup");
    shoal_umask_022(&[OsStr::new("backup"), &os(&mnt), &os(&live)]);
    assert_file_private(&live);
    shoal_umask_022(&[OsStr::new("umount"), &os(&mnt)]);
    assert_private(&store, "mount, writes, backup and umount");

    // The offline commands, one after the other on the unmounted store.
    let offline = dir.path().join("offline.backup");
    shoal_umask_022(&[OsStr::new("backup"), &os(&store), &os(&offline)]);
    assert_file_private(&offline);
    assert_private(&store, "an offline backup");
    let source = dir.path().join("source");
    gen_tree(&source, 50);
    let archive = dir.path().join("source.tar");
    run_ok(
        Command::new("tar")
            .arg("-cf")
            .arg(&archive)
            .arg("-C")
            .arg(&source)
            .arg("."),
        SHOAL_TIMEOUT,
    );
    let steps: [(&str, Vec<&OsStr>); 7] = [
        (
            "import",
            vec![
                OsStr::new("import"),
                store.as_os_str(),
                OsStr::new("--path"),
                OsStr::new("/imported"),
                OsStr::new("--from"),
                archive.as_os_str(),
            ],
        ),
        (
            "quota set",
            vec![
                OsStr::new("quota"),
                OsStr::new("set"),
                OsStr::new("-u"),
                OsStr::new("60001"),
                OsStr::new("--ihard"),
                OsStr::new("5"),
                store.as_os_str(),
            ],
        ),
        (
            "rmtree",
            vec![
                OsStr::new("rmtree"),
                store.as_os_str(),
                OsStr::new("--path"),
                OsStr::new("/doomed"),
                OsStr::new("--wait"),
            ],
        ),
        ("compact", vec![OsStr::new("compact"), store.as_os_str()]),
        (
            "fsck --repair",
            vec![
                OsStr::new("fsck"),
                OsStr::new("--repair"),
                store.as_os_str(),
            ],
        ),
        ("fsck", vec![OsStr::new("fsck"), store.as_os_str()]),
        ("info", vec![OsStr::new("info"), store.as_os_str()]),
    ];
    for (what, args) in &steps {
        shoal_umask_022(args);
        assert_private(&store, what);
    }

    // Restore: into a new directory, an existing 0755 one, and from standard input.
    let fresh = dir.path().join("restored");
    shoal_umask_022(&[OsStr::new("restore"), &os(&offline), &os(&fresh)]);
    assert_private(&fresh, "restore into a new directory");
    let existing = open_dir(&dir.path().join("restored-existing"));
    shoal_umask_022(&[OsStr::new("restore"), &os(&live), &os(&existing)]);
    assert_private(&existing, "restore into an existing 0755 directory");
    let piped = dir.path().join("restored-piped");
    run_ok(
        Command::new("sh")
            .arg("-c")
            .arg("umask 022; exec \"$0\" restore - \"$1\" < \"$2\"")
            .arg(SHOAL)
            .arg(&piped)
            .arg(&offline),
        SHOAL_TIMEOUT,
    );
    assert_private(&piped, "restore from standard input");
    // The restored store mounts without the warning about others reading it.
    let out = shoal_umask_022(&[OsStr::new("mount"), &os(&existing), &os(&mnt)]);
    let _restored_guard = MountGuard {
        store: Some(existing.clone()),
        mnt: mnt.clone(),
    };
    assert!(
        !out.stderr.contains("other users can read"),
        "{}",
        out.describe()
    );
    assert!(mnt.join("tree").is_dir());
    shoal_umask_022(&[OsStr::new("umount"), &os(&mnt)]);
    assert_private(&existing, "mounting a restored store");
}
