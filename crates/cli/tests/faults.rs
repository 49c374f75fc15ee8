//! Faults other than crashes: a store readable by others, a foreign directory given to
//! mkfs, a full disk, a failed final sync, a damaged store. Each must be reported (an
//! errno, a message, a non-zero exit) and never lose acknowledged data silently.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::{shoal, shoal_ok, test_dir, Mounted};

fn os(path: &Path) -> &OsStr {
    path.as_os_str()
}

/// Every path under `root` (root included) with its permission bits.
fn modes_under(root: &Path) -> Vec<(PathBuf, u32)> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let metadata = fs::symlink_metadata(&path).unwrap();
        found.push((path.clone(), metadata.permissions().mode() & 0o7777));
        if metadata.is_dir() {
            for entry in fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        }
    }
    found
}

/// The store holds every file's bytes: no other user may read it, whether mkfs or the
/// daemon (fjall's tables, journals and blob files, the lock and the log) made the file.
#[test]
fn a_store_is_private_to_its_owner() {
    let mut m = Mounted::new();
    fs::write(m.path("secret"), vec![b's'; 200_000]).unwrap();
    fs::set_permissions(m.path("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    m.umount();
    // Once more with fjall's flush and compaction files present.
    m.mount();
    m.umount();
    let modes = modes_under(&m.store);
    assert!(modes.len() > 5, "{modes:?}");
    let open: Vec<_> = modes.iter().filter(|(_, mode)| mode & 0o077 != 0).collect();
    assert!(open.is_empty(), "readable by others: {open:?}");
    for name in ["lock", "shoal.log", "FORMAT", "kv"] {
        assert!(m.store.join(name).exists(), "{name} missing");
    }

    // A store opened up by hand: the mount warns on stderr and in the log.
    fs::set_permissions(&m.store, fs::Permissions::from_mode(0o755)).unwrap();
    let out = shoal(&[OsStr::new("mount"), os(&m.store), os(&m.mnt)]);
    assert!(out.success(), "{}", out.describe());
    let _cleanup = common::MountGuard {
        store: Some(m.store.clone()),
        mnt: m.mnt.clone(),
    };
    assert!(
        out.stderr.contains("other users can read") && out.stderr.contains("chmod"),
        "{}",
        out.describe()
    );
    shoal_ok(&[OsStr::new("umount"), os(&m.mnt)]);
    let log = fs::read_to_string(m.store.join("shoal.log")).unwrap();
    assert!(log.contains("other users can read"), "{log}");
}

/// `mkfs --force` re-formats a shoal store and nothing else; `--wipe` deletes a foreign
/// directory's contents and names them.
#[test]
fn mkfs_force_reformats_only_stores_and_wipe_names_what_goes() {
    let dir = test_dir();
    let foreign = dir.path().join("foreign");
    fs::create_dir_all(foreign.join("photos")).unwrap();
    fs::write(foreign.join("thesis.tex"), b"years of work").unwrap();
    fs::write(foreign.join("photos/1.jpg"), b"jpeg").unwrap();

    let out = shoal(&[OsStr::new("mkfs"), os(&foreign), OsStr::new("--force")]);
    assert!(!out.success(), "{}", out.describe());
    for expected in ["photos", "thesis.tex", "--wipe"] {
        assert!(out.stderr.contains(expected), "{}", out.describe());
    }
    assert_eq!(
        fs::read(foreign.join("thesis.tex")).unwrap(),
        b"years of work"
    );

    let help = shoal_ok(&["mkfs", "--help"]);
    assert!(
        help.stdout.contains("--wipe") && help.stdout.contains("never anything else"),
        "{}",
        help.describe()
    );

    let out = shoal_ok(&[OsStr::new("mkfs"), os(&foreign), OsStr::new("--wipe")]);
    assert!(
        out.stdout.contains("deleted") && out.stdout.contains("thesis.tex"),
        "{}",
        out.describe()
    );
    assert!(!foreign.join("photos").exists());
    assert_eq!(
        fs::metadata(&foreign).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // Now a store: --force re-formats it.
    shoal_ok(&[OsStr::new("mkfs"), os(&foreign), OsStr::new("--force")]);
}
