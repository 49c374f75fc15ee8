//! Faults other than crashes: a store readable by others, a foreign directory given to
//! mkfs, a full disk, a failed final sync, a damaged store. Each must be reported (an
//! errno, a message, a non-zero exit) and never lose acknowledged data silently.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::{incompressible, shoal, shoal_ok, test_dir, Mounted};

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

/// Every file under `root` with its inode number and length: a file rewritten (renamed
/// over) or grown shows.
fn files_with_inodes(root: &Path) -> Vec<(PathBuf, u64, u64)> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let metadata = fs::symlink_metadata(&path).unwrap();
        if metadata.is_dir() {
            for entry in fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        } else {
            found.push((path, metadata.ino(), metadata.len()));
        }
    }
    found.sort();
    found
}

/// A store deleted while mounted and a new one made at its path before the old mount ends
/// (`umount -l`, `rm -rf`, `mkfs`): the old daemon says what was lost and writes nothing
/// there at its end (its clean-close record made the new store look damaged), and the new
/// store mounts empty and checks clean.
#[test]
fn a_store_deleted_while_mounted_leaves_a_new_one_at_its_path_alone() {
    let m = Mounted::new();
    fs::write(m.path("old"), b"in the deleted store").unwrap();
    fs::remove_dir_all(&m.store).unwrap();
    shoal_ok(&[OsStr::new("mkfs"), os(&m.store)]);
    let made = files_with_inodes(&m.store);
    let out = shoal(&[OsStr::new("umount"), os(&m.mnt)]);
    assert!(!out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("deleted while mounted") && out.stderr.contains("not durable"),
        "{}",
        out.describe()
    );
    assert!(!common::is_mounted(&m.mnt));
    assert_eq!(
        files_with_inodes(&m.store),
        made,
        "the old daemon wrote into the new store"
    );
    let again = m.dir.path().join("again");
    fs::create_dir(&again).unwrap();
    shoal_ok(&[OsStr::new("mount"), os(&m.store), os(&again)]);
    let listed = fs::read_dir(&again).unwrap().count();
    shoal_ok(&[OsStr::new("umount"), os(&again)]);
    assert_eq!(listed, 0, "the new store is not empty");
    let out = shoal(&[OsStr::new("fsck"), os(&m.store)]);
    assert!(
        out.success() && out.stdout.contains("clean"),
        "{}",
        out.describe()
    );
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
    // Commands that open the unmounted store themselves write to it too.
    shoal_ok(&[OsStr::new("compact"), os(&m.store)]);
    shoal_ok(&[
        OsStr::new("quota"),
        OsStr::new("set"),
        OsStr::new("-u"),
        OsStr::new("60001"),
        OsStr::new("--ihard"),
        OsStr::new("10"),
        os(&m.store),
    ]);
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

/// A small filesystem on a loop device (an image file), mounted on a fresh directory and
/// unmounted on drop: a store on it runs out of space quickly.
struct LoopFs {
    mountpoint: PathBuf,
    // Last: removed after the unmount in Drop.
    _dir: tempfile::TempDir,
}

impl LoopFs {
    fn new(size_mib: u64, fstype: &str) -> LoopFs {
        let dir = test_dir();
        let image = dir.path().join("image");
        let mountpoint = dir.path().join("fs");
        fs::create_dir(&mountpoint).unwrap();
        let file = fs::File::create(&image).unwrap();
        file.set_len(size_mib << 20).unwrap();
        drop(file);
        let mkfs = format!("mkfs.{fstype}");
        common::run_ok(
            std::process::Command::new(&mkfs).arg("-q").arg(&image),
            common::SHOAL_TIMEOUT,
        );
        common::run_ok(
            std::process::Command::new("mount")
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
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.mountpoint)
            .status();
    }
}

/// A shoal store on `disk`, mounted on a fresh directory; unmounted on drop.
struct StoreOn {
    store: PathBuf,
    mnt: PathBuf,
    options: String,
    _dir: tempfile::TempDir,
}

impl StoreOn {
    fn new(disk: &LoopFs, options: &str) -> StoreOn {
        let dir = test_dir();
        let store = disk.mountpoint.join("store");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        shoal_ok(&[OsStr::new("mkfs"), os(&store)]);
        let mounted = StoreOn {
            store,
            mnt,
            options: options.to_string(),
            _dir: dir,
        };
        mounted.mount();
        mounted
    }

    fn mount(&self) {
        let out = shoal(&[
            OsStr::new("mount"),
            os(&self.store),
            os(&self.mnt),
            OsStr::new("-o"),
            OsStr::new(&self.options),
        ]);
        assert!(out.success(), "{}", out.describe());
    }

    fn umount(&self) -> common::CmdOutput {
        shoal(&[OsStr::new("umount"), os(&self.mnt)])
    }

    fn path(&self, name: &str) -> PathBuf {
        self.mnt.join(name)
    }

    fn fsck(&self) -> common::CmdOutput {
        common::run(
            std::process::Command::new(common::SHOAL)
                .arg("fsck")
                .arg(&self.store),
            common::FSCK_TIMEOUT,
        )
    }
}

impl Drop for StoreOn {
    fn drop(&mut self) {
        if common::is_mounted(&self.mnt) {
            common::force_unmount(Some(&self.store), &self.mnt);
        }
    }
}

/// Writes `bytes` to a new file and fsyncs it; the first error of any step.
fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// A full device is ENOSPC from the operation that needs the space, never EIO, and the
/// mount lives on: reads, unlink, rename, truncate and rmdir go on working, every fsync'd
/// file survives, and the store unmounts clean.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "fill a small device, check every way a write fails, free space, and check the mount recovers: one scenario"
)]
fn a_full_disk_is_enospc_and_the_mount_lives_on() {
    let disk = LoopFs::new(128, "ext4");
    let m = StoreOn::new(&disk, "commit=1");
    fs::create_dir(m.path("dir")).unwrap();
    let keep = incompressible(1, 300_000);
    write_file(&m.path("keep"), &keep).unwrap();
    let mut written = Vec::new();
    let mut refused = None;
    for index in 0..400u64 {
        let name = format!("dir/f{index}");
        match write_file(&m.path(&name), &incompressible(index + 10, 1 << 20)) {
            Ok(()) => written.push((name, index + 10)),
            Err(error) => {
                refused = Some((error, name));
                break;
            }
        }
    }
    let (refused, partial) = refused.expect("128 MiB never filled up");
    assert_eq!(
        refused.raw_os_error(),
        Some(libc::ENOSPC),
        "the write that needs space gets ENOSPC, got {refused} after {} files",
        written.len()
    );
    assert!(written.len() > 10, "only {} MiB fit", written.len());
    // Small creates and mkdir are refused the same way, not with EIO.
    for attempt in [
        write_file(&m.path("small"), b"x"),
        fs::create_dir(m.path("newdir")),
    ] {
        if let Err(error) = attempt {
            assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
        }
    }
    // The mount lives on: reads, renames, truncates, unlinks and rmdir all work.
    assert_eq!(fs::read(m.path("keep")).unwrap(), keep);
    let (first, seed) = written[0].clone();
    assert_eq!(
        fs::read(m.path(&first)).unwrap(),
        incompressible(seed, 1 << 20)
    );
    fs::rename(m.path(&first), m.path("moved")).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(m.path("moved"))
        .unwrap()
        .set_len(0)
        .unwrap();
    fs::remove_file(m.path("moved")).unwrap();
    // The file whose write was refused is there (created before the space ran out).
    fs::remove_file(m.path(&partial)).unwrap();
    fs::create_dir(m.path("dir/sub")).ok();
    let _ = fs::remove_dir(m.path("dir/sub"));
    // Most of the files go: a blob file's space comes back by copying its live rest
    // elsewhere, which needs that much free space (see docs/durability.md).
    for (name, _) in written.drain(1..written.len() - 2) {
        fs::remove_file(m.path(&name)).unwrap();
    }
    let listing = fs::read_dir(m.path("dir")).unwrap().count();
    assert_eq!(listing, written.len() - 1);
    // The deleted files' space comes back: new writes fit again, without a remount.
    let started = std::time::Instant::now();
    let after = common::poll(std::time::Duration::from_secs(60), || {
        write_file(&m.path("after"), &incompressible(99, 1 << 20)).is_ok()
    });
    assert!(after, "no write fit after deleting most files");
    eprintln!(
        "a write fit again {:?} after the deletions",
        started.elapsed()
    );
    // The round that returns the deleted files' blob space ends within a minute (the
    // write above may fit while it is still running).
    let stats = || {
        let out = shoal(&[OsStr::new("stats"), os(&m.mnt), OsStr::new("--json")]);
        serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap()
    };
    let reclaimed = |report: &serde_json::Value| {
        report["store"]["reclaims"].as_u64().unwrap_or(0) > 0
            && report["store"]["reclaimed_bytes"].as_u64().unwrap_or(0) > 10 << 20
    };
    common::poll(std::time::Duration::from_secs(60), || reclaimed(&stats()));
    let report = stats();
    assert!(reclaimed(&report), "{report}");
    // df shows shoal's own bytes as used (the reserve is neither used nor available).
    let df = common::run_ok(
        std::process::Command::new("df")
            .args(["-B1", "--output=used"])
            .arg(&m.mnt),
        common::SHOAL_TIMEOUT,
    );
    let used: u64 = df
        .stdout
        .split_whitespace()
        .find_map(|word| word.parse().ok())
        .unwrap();
    let store_bytes = report["store"]["disk_bytes"].as_u64().unwrap();
    assert!(
        used.abs_diff(store_bytes) < 4 << 20,
        "df used {used} for a store of {store_bytes} bytes"
    );
    let out = m.umount();
    assert!(out.success(), "{}", out.describe());
    let out = m.fsck();
    assert!(out.success(), "{}", out.describe());
    m.mount();
    assert_eq!(fs::read(m.path("keep")).unwrap(), keep);
    for (name, seed) in &written[1..] {
        assert_eq!(
            fs::read(m.path(name)).unwrap(),
            incompressible(*seed, 1 << 20),
            "{name}"
        );
    }
    assert_eq!(
        fs::read(m.path("after")).unwrap(),
        incompressible(99, 1 << 20)
    );
    let out = m.umount();
    assert!(out.success(), "{}", out.describe());
}

/// The device under the store fails (shut down, as a dying disk or a forced unmount of
/// the store's filesystem does): fsync fails rather than pretending, the failed interval
/// commit shows in `shoal stats`, and `shoal umount` exits 1 saying what was lost.
#[test]
fn a_failed_device_is_reported_by_fsync_stats_and_umount() {
    let disk = LoopFs::new(128, "ext4");
    let m = StoreOn::new(&disk, "commit=1");
    let durable = incompressible(7, 100_000);
    write_file(&m.path("durable"), &durable).unwrap();
    fs::write(m.path("unsynced"), b"acknowledged, never synced").unwrap();
    common::run_ok(
        std::process::Command::new("xfs_io")
            .args(["-x", "-c", "shutdown"])
            .arg(&disk.mountpoint),
        common::SHOAL_TIMEOUT,
    );
    let synced = write_file(&m.path("after"), b"after the device died");
    assert!(synced.is_err(), "fsync on a dead device succeeded");
    // Reads of what the daemon holds still work.
    assert_eq!(fs::read(m.path("durable")).unwrap(), durable);
    let reported = common::poll(std::time::Duration::from_secs(10), || {
        let out = shoal(&[OsStr::new("stats"), os(&m.mnt), OsStr::new("--json")]);
        let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
        report["engine"]["write_errors"].as_u64().unwrap_or(0) > 0
            && report["engine"]["last_write_error"].is_string()
    });
    assert!(
        reported,
        "the failed background commit is not in `shoal stats`"
    );
    let out = m.umount();
    assert!(
        !out.success(),
        "umount exited 0 after a failed final sync\n{}",
        out.describe()
    );
    assert!(
        out.stderr.contains("final sync failed") && out.stderr.contains("not durable"),
        "{}",
        out.describe()
    );
    assert!(!common::is_mounted(&m.mnt));
}

/// A store with tables, blob files and a journal: small memtables make flushes happen.
fn template_store(dir: &Path) -> PathBuf {
    let mnt = dir.join("template-mnt");
    let store = dir.join("template");
    fs::create_dir(&mnt).unwrap();
    shoal_ok(&[OsStr::new("mkfs"), os(&store)]);
    shoal_ok(&[
        OsStr::new("mount"),
        os(&store),
        os(&mnt),
        OsStr::new("-o"),
        OsStr::new("memtable=1M,checkpoint=0"),
    ]);
    let _guard = common::MountGuard {
        store: Some(store.clone()),
        mnt: mnt.clone(),
    };
    for round in 0..6u64 {
        write_file(
            &mnt.join(format!("big{round}")),
            &incompressible(round, 700_000),
        )
        .unwrap();
        fs::create_dir(mnt.join(format!("d{round}"))).unwrap();
        for index in 0..150 {
            fs::write(mnt.join(format!("d{round}/small{index}")), b"small file").unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    shoal_ok(&[OsStr::new("umount"), os(&mnt)]);
    store
}

/// Each kind of file in a store, picked in `store`.
fn store_files(store: &Path) -> Vec<(&'static str, PathBuf)> {
    let kv = store.join("kv");
    let newest_journal = fs::read_dir(&kv)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jnl"))
        .max()
        .expect("a journal");
    let largest_in = |folder: &str| -> PathBuf {
        let mut found = Vec::new();
        for keyspace in fs::read_dir(kv.join("keyspaces")).unwrap() {
            let dir = keyspace.unwrap().path().join(folder);
            if let Ok(entries) = fs::read_dir(&dir) {
                for entry in entries {
                    let path = entry.unwrap().path();
                    found.push((fs::metadata(&path).unwrap().len(), path));
                }
            }
        }
        found
            .into_iter()
            .max()
            .unwrap_or_else(|| panic!("no {folder}"))
            .1
    };
    let meta_keyspace = kv.join("keyspaces/1");
    let current = meta_keyspace.join("current");
    let manifest = fs::read_dir(&meta_keyspace)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with('v') && name[1..].parse::<u64>().is_ok())
        })
        .max()
        .expect("a version file");
    vec![
        ("journal", newest_journal),
        ("table", largest_in("tables")),
        ("blob", largest_in("blobs")),
        ("manifest", manifest),
        ("current", current),
    ]
}

/// Bytes that were written: a journal is preallocated with zeros past its last batch.
fn written_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rposition(|&byte| byte != 0)
        .map_or(0, |last| last + 1)
}

/// Each way a store file is damaged in the matrix.
const DAMAGE: [&str; 5] = [
    "deleted",
    "truncated",
    "flip-start",
    "flip-middle",
    "flip-end",
];

fn damage(path: &Path, how: &str) {
    let mut bytes = fs::read(path).unwrap();
    let written = written_len(&bytes).max(1);
    match how {
        "deleted" => return fs::remove_file(path).unwrap(),
        "truncated" => bytes.truncate(written / 2),
        "flip-start" => bytes[0] ^= 0x5a,
        "flip-middle" => bytes[written / 2] ^= 0x5a,
        "flip-end" => bytes[written - 1] ^= 0x5a,
        other => panic!("{other}"),
    }
    fs::write(path, bytes).unwrap();
}

/// Every file's bytes under `dir`, to prove fsck changed nothing.
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found: Vec<_> = modes_under(dir)
        .into_iter()
        .filter(|(path, _)| path.is_file())
        .map(|(path, _)| {
            let bytes = fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    found.sort();
    found
}

/// Damage is never "clean": each kind of store file deleted, cut to half, or with a byte
/// flipped at its start, middle or end makes fsck exit 1 naming it, without changing the
/// store; a mount refuses damaged journals and key-value files naming `fsck --repair`,
/// which then makes the store mount again.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "each kind of damage applied to a fresh store and checked in turn, sharing the set-up"
)]
fn damaged_stores_are_never_clean() {
    let dir = test_dir();
    let template = template_store(dir.path());
    let out = shoal(&[OsStr::new("fsck"), os(&template)]);
    assert!(out.success(), "the undamaged store: {}", out.describe());
    let reference = reference_contents(dir.path(), &template);
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut missed = Vec::new();
    for (kind, _) in store_files(&template) {
        for how in DAMAGE {
            let store = dir.path().join(format!("{kind}-{how}"));
            common::run_ok(
                std::process::Command::new("cp")
                    .arg("-a")
                    .arg(&template)
                    .arg(&store),
                common::SHOAL_TIMEOUT,
            );
            let target = store_files(&store)
                .into_iter()
                .find(|(name, _)| *name == kind)
                .unwrap()
                .1;
            damage(&target, how);
            let before = contents(&store);
            let out = shoal(&[OsStr::new("fsck"), os(&store)]);
            assert_eq!(contents(&store), before, "fsck changed {kind} {how}");
            if out.code != Some(1) {
                missed.push(format!("{kind} {how}: {}", out.describe()));
                continue;
            }
            assert!(out.stdout.contains("--repair"), "{}", out.describe());
            // Journals and the files fjall opens are checked at mount.
            if matches!(kind, "journal" | "manifest" | "current") {
                let mounted = shoal(&[OsStr::new("mount"), os(&store), os(&mnt)]);
                let _guard = common::MountGuard {
                    store: Some(store.clone()),
                    mnt: mnt.clone(),
                };
                if mounted.success() || !mounted.stderr.contains("fsck --repair") {
                    missed.push(format!("mount of {kind} {how}: {}", mounted.describe()));
                }
            }
        }
    }
    // lsm-tree checksums neither the last bytes of a table, blob or version file nor the
    // `current` file; the seals recorded at the clean unmount (`store_seal`) catch those.
    assert!(
        missed.is_empty(),
        "not reported as damage:\n{}",
        missed.join("\n")
    );

    // Repair: what is readable stays, the rest is dropped and named, and the store is
    // clean and mounts again; writes, overwrites and deletes made after the repair take
    // effect and last (fjall's sequence numbers continue above the tables'). Every cell.
    for (kind, _) in store_files(&template) {
        for how in DAMAGE {
            let case = format!("{kind}-{how}");
            let store = dir.path().join(&case);
            let repaired = shoal(&[OsStr::new("fsck"), OsStr::new("--repair"), os(&store)]);
            let said: &[&str] = match case.as_str() {
                _ if kind == "journal" => &["dropped"],
                // Damage that fjall reads past: repair records the files as they are now.
                "table-flip-end"
                | "blob-flip-end"
                | "manifest-flip-end"
                | "current-truncated"
                | "current-flip-middle"
                | "current-flip-end" => &["recorded as it is now"],
                // Blocks and blobs that fail their checksums, files gone or cut short: the
                // store is salvaged into a new one around them.
                _ => &["salvaged:", "kv.damaged-"],
            };
            assert!(
                repaired.success() && said.iter().all(|text| repaired.stdout.contains(text)),
                "{case}: {}",
                repaired.describe()
            );
            let out = shoal(&[OsStr::new("fsck"), os(&store)]);
            assert!(out.success(), "{case} after --repair: {}", out.describe());
            if said[0] == "salvaged:" {
                untouched_files_read_back(&case, &store, &mnt, &reference, &repaired.stdout);
            }
            writes_after_repair_take_effect(&case, &store, &mnt);
        }
    }
    data_table_damage_is_salvaged(dir.path(), &template, &mnt, &reference);
}

/// A damaged block of a data table loses the chunks it indexed: the files they belonged
/// to are named, keep their sizes and read zeros there; every other file reads back.
fn data_table_damage_is_salvaged(
    dir: &Path,
    template: &Path,
    mnt: &Path,
    reference: &HashMap<u64, Vec<u8>>,
) {
    let case = "data-table-flip-start";
    let store = dir.join(case);
    common::run_ok(
        std::process::Command::new("cp")
            .arg("-a")
            .arg(template)
            .arg(&store),
        common::SHOAL_TIMEOUT,
    );
    // fjall numbers keyspaces in creation order: 1 is meta, 2 is data (`store_files`).
    let tables = store.join("kv/keyspaces/2/tables");
    let table = fs::read_dir(&tables)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .max_by_key(|path| fs::metadata(path).unwrap().len())
        .expect("a data table");
    damage(&table, "flip-start");
    let repaired = shoal(&[OsStr::new("fsck"), OsStr::new("--repair"), os(&store)]);
    assert!(
        repaired.success()
            && repaired.stdout.contains("salvaged:")
            && repaired.stdout.contains("chunks of these files"),
        "{case}: {}",
        repaired.describe()
    );
    let out = shoal(&[OsStr::new("fsck"), os(&store)]);
    assert!(out.success(), "{case} after --repair: {}", out.describe());
    untouched_files_read_back(case, &store, mnt, reference, &repaired.stdout);
    writes_after_repair_take_effect(case, &store, mnt);
}

/// Every regular file under `root`: (inode number, path).
fn files_under(root: &Path) -> Vec<(u64, PathBuf)> {
    use std::os::unix::fs::MetadataExt;
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() {
                found.push((meta.ino(), path));
            }
        }
    }
    found.sort();
    found
}

/// The bytes of every file of a copy of `template`, by inode number (a repair keeps
/// inode numbers, also of files it reconnects into /lost+found).
fn reference_contents(dir: &Path, template: &Path) -> HashMap<u64, Vec<u8>> {
    let store = dir.join("reference");
    let mnt = dir.join("reference-mnt");
    fs::create_dir(&mnt).unwrap();
    common::run_ok(
        std::process::Command::new("cp")
            .arg("-a")
            .arg(template)
            .arg(&store),
        common::SHOAL_TIMEOUT,
    );
    shoal_ok(&[OsStr::new("mount"), os(&store), os(&mnt)]);
    let _guard = common::MountGuard {
        store: Some(store.clone()),
        mnt: mnt.clone(),
    };
    let contents = files_under(&mnt)
        .into_iter()
        .map(|(ino, path)| (ino, fs::read(path).unwrap()))
        .collect();
    shoal_ok(&[OsStr::new("umount"), os(&mnt)]);
    contents
}

/// After a salvage, each file the repair's report does not name reads back as it was
/// before the damage; and most files are there.
fn untouched_files_read_back(
    case: &str,
    store: &Path,
    mnt: &Path,
    reference: &HashMap<u64, Vec<u8>>,
    report: &str,
) {
    shoal_ok(&[OsStr::new("mount"), os(store), os(mnt)]);
    let _guard = common::MountGuard {
        store: Some(store.to_path_buf()),
        mnt: mnt.to_path_buf(),
    };
    let mut identical = 0;
    for (ino, path) in files_under(mnt) {
        let named = [format!("inode {ino} ("), format!("inode {ino})")]
            .iter()
            .any(|text| report.contains(text.as_str()));
        let Some(before) = reference.get(&ino) else {
            panic!(
                "{case}: {} (inode {ino}) was not in the store",
                path.display()
            );
        };
        let now = fs::read(&path).unwrap();
        if named {
            assert_eq!(now.len(), before.len(), "{case}: {} size", path.display());
        } else {
            assert!(now == *before, "{case}: {} changed", path.display());
            identical += 1;
        }
    }
    assert!(
        identical * 2 > reference.len(),
        "{case}: only {identical} of {} files kept",
        reference.len()
    );
    shoal_ok(&[OsStr::new("umount"), os(mnt)]);
}

/// Mounts a repaired store, deletes, overwrites and creates files, and checks after a
/// remount that each change is there and fsck is clean.
fn writes_after_repair_take_effect(case: &str, store: &Path, mnt: &Path) {
    let mount = || shoal_ok(&[OsStr::new("mount"), os(store), os(mnt)]);
    mount();
    let _guard = common::MountGuard {
        store: Some(store.to_path_buf()),
        mnt: mnt.to_path_buf(),
    };
    let files_at_root = || -> Vec<PathBuf> {
        fs::read_dir(mnt)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.is_file())
            .collect()
    };
    let mut kept = files_at_root();
    if kept.len() < 2 {
        // The root's entries were lost: take files back from /lost+found (a rename).
        for (index, (_, file)) in files_under(&mnt.join("lost+found"))
            .iter()
            .take(2)
            .enumerate()
        {
            fs::rename(file, mnt.join(format!("reconnected{index}"))).unwrap();
        }
        kept = files_at_root();
    }
    assert!(kept.len() >= 2, "{case}: nothing kept: {kept:?}");
    fs::remove_file(&kept[0]).unwrap();
    write_file(&kept[1], b"overwritten after the repair").unwrap();
    write_file(&mnt.join("new-after-repair"), b"created after the repair").unwrap();
    for dir in fs::read_dir(mnt)
        .unwrap()
        .map(|entry| entry.unwrap().path())
    {
        if dir.is_dir() {
            fs::remove_dir_all(&dir).unwrap();
        }
    }
    shoal_ok(&[OsStr::new("umount"), os(mnt)]);
    let out = shoal(&[OsStr::new("fsck"), os(store)]);
    assert!(out.success(), "{case} after writes: {}", out.describe());
    mount();
    assert!(!kept[0].exists(), "{case}: a delete after repair was lost");
    assert_eq!(fs::read(&kept[1]).unwrap(), b"overwritten after the repair");
    assert_eq!(
        fs::read(mnt.join("new-after-repair")).unwrap(),
        b"created after the repair"
    );
    let dirs = fs::read_dir(mnt)
        .unwrap()
        .filter(|entry| entry.as_ref().unwrap().path().is_dir())
        .count();
    assert_eq!(dirs, 0, "{case}: removed directories came back");
    shoal_ok(&[OsStr::new("umount"), os(mnt)]);
}

/// A mount replays the journal's batches that are not in tables yet; writing them out
/// needs space. Without it the mount is refused with a message, nothing is written, and
/// once space is freed the store mounts with everything in it.
#[test]
fn a_replay_the_device_has_no_room_for_is_refused() {
    let disk = LoopFs::new(128, "ext4");
    let m = StoreOn::new(&disk, "commit=1");
    // Small files: their data is inline in the metadata records, which stay in the journal
    // (file chunks are flushed to blob files by the reclaimer's rounds every few MiB).
    let data = incompressible(5, 4096);
    let files = (30 << 20) / data.len();
    for index in 0..files {
        fs::write(m.path(&format!("journaled{index}")), &data).unwrap();
    }
    let out = m.umount();
    assert!(out.success(), "{}", out.describe());
    // Someone else fills the device.
    let filler = fill_leaving(&disk, 12 << 20);
    let refused = shoal(&[OsStr::new("mount"), os(&m.store), os(&m.mnt)]);
    assert!(!refused.success(), "{}", refused.describe());
    assert!(
        refused.stderr.contains("not yet in tables") && refused.stderr.contains("free"),
        "{}",
        refused.describe()
    );
    fs::remove_file(&filler).unwrap();
    m.mount();
    for index in 0..files {
        assert_eq!(
            fs::read(m.path(&format!("journaled{index}"))).unwrap(),
            data
        );
    }
    let out = m.umount();
    assert!(out.success(), "{}", out.describe());
}

/// Salvaging a store whose blob fails its checksum copies what reads into a new store
/// beside it: without room for that copy, `fsck --repair` refuses, saying so, and leaves
/// the store as damaged as it was; with room, it salvages.
#[test]
fn a_salvage_the_device_has_no_room_for_is_refused() {
    let disk = LoopFs::new(128, "ext4");
    let m = StoreOn::new(&disk, "memtable=1M,checkpoint=0");
    for index in 0..3u64 {
        write_file(
            &m.path(&format!("file{index}")),
            &incompressible(index, 4 << 20),
        )
        .unwrap();
    }
    let out = m.umount();
    assert!(out.success(), "{}", out.describe());
    let blob = store_files(&m.store)
        .into_iter()
        .find(|(kind, _)| *kind == "blob")
        .unwrap()
        .1;
    damage(&blob, "flip-middle");
    let filler = fill_leaving(&disk, 20 << 20);
    let repair = || shoal(&[OsStr::new("fsck"), OsStr::new("--repair"), os(&m.store)]);
    let refused = repair();
    assert!(!refused.success(), "{}", refused.describe());
    assert!(
        refused.stderr.contains("salvaging") && refused.stderr.contains("free"),
        "{}",
        refused.describe()
    );
    let leftovers: Vec<_> = fs::read_dir(&m.store)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("kv."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(m.fsck().code, Some(1), "still damaged");
    fs::remove_file(&filler).unwrap();
    let salvaged = repair();
    assert!(
        salvaged.success() && salvaged.stdout.contains("salvaged:"),
        "{}",
        salvaged.describe()
    );
    assert!(m.fsck().success());
}

/// fsck needs neither write access nor free space: it checks a store on a full device
/// and on a read-only one, and finds it clean.
#[test]
fn fsck_works_on_a_full_and_on_a_read_only_device() {
    let disk = LoopFs::new(128, "ext4");
    let m = StoreOn::new(&disk, "commit=1");
    for index in 0..20u64 {
        write_file(
            &m.path(&format!("f{index}")),
            &incompressible(index, 200_000),
        )
        .unwrap();
    }
    let out = m.umount();
    assert!(out.success(), "{}", out.describe());
    // Full: a filler takes every byte left.
    let filler = disk.mountpoint.join("filler");
    let _ = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=1M", "status=none"])
        .stderr(std::process::Stdio::null())
        .arg(format!("of={}", filler.display()))
        .status();
    let out = m.fsck();
    assert!(
        out.success() && out.stdout.contains("clean"),
        "{}",
        out.describe()
    );
    fs::remove_file(&filler).unwrap();
    // Read-only.
    common::run_ok(
        std::process::Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&disk.mountpoint),
        common::SHOAL_TIMEOUT,
    );
    let out = m.fsck();
    assert!(
        out.success() && out.stdout.contains("clean"),
        "{}",
        out.describe()
    );
}

/// A store directory deleted under a mount: writes can no longer become durable, so
/// fsync fails and `shoal umount` exits 1 saying what was lost, instead of exiting 0 with
/// the writes gone.
#[test]
fn a_deleted_store_directory_fails_fsync_and_umount() {
    let m = Mounted::new();
    write_file(&m.path("before"), b"synced while the store existed").unwrap();
    fs::remove_dir_all(&m.store).unwrap();
    let synced = write_file(&m.path("after"), b"written after the store was deleted");
    assert!(synced.is_err(), "fsync succeeded on a deleted store");
    let out = shoal(&[OsStr::new("umount"), os(&m.mnt)]);
    assert!(!out.success(), "{}", out.describe());
    assert!(out.stderr.contains("not durable"), "{}", out.describe());
    assert!(!common::is_mounted(&m.mnt));
}

/// Someone else fills `disk` until `leave` bytes are free (as df counts them): returns the
/// file that took the rest.
fn fill_leaving(disk: &LoopFs, leave: u64) -> PathBuf {
    let filler = disk.mountpoint.join("filler");
    let out = common::run_ok(
        std::process::Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(&disk.mountpoint),
        common::SHOAL_TIMEOUT,
    );
    let available = out
        .stdout
        .split_whitespace()
        .find_map(|word| word.parse::<u64>().ok())
        .unwrap();
    write_file(&filler, &vec![1u8; (available - leave) as usize]).unwrap();
    filler
}
