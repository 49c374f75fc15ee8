//! `shoal backup` and `shoal restore` through real mounts: a live backup taken while files
//! are being created restores to a consistent filesystem holding a prefix of the creates.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;

fn restore(file: &Path, store: &Path) -> CmdOutput {
    shoal(&[OsStr::new("restore"), file.as_os_str(), store.as_os_str()])
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "a writer, a backup taken under it and the restore checked against the writer's log: one scenario"
)]
fn live_backup_restores_a_consistent_prefix_while_writes_go_on() {
    let mut m = Mounted::new();
    gen_tree(&m.path("tree"), 500);
    let expected = read_tree(&m.path("tree")).unwrap();
    fs::create_dir(m.path("live")).unwrap();

    // A writer creating files one after the other while the backup runs.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, live) = (stop.clone(), m.path("live"));
        std::thread::spawn(move || {
            let mut created = 0u64;
            while !stop.load(Ordering::Relaxed) {
                fs::write(live.join(created.to_string()), b"x").unwrap();
                created += 1;
            }
            created
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let backup = m.dir.path().join("fs.backup");
    let out = shoal(&[OsStr::new("backup"), m.mnt.as_os_str(), backup.as_os_str()]);
    stop.store(true, Ordering::Relaxed);
    let created = writer.join().unwrap();
    assert!(out.success(), "{}", out.describe());
    assert!(!m.dir.path().join("fs.backup.partial").exists());

    // Never overwrites.
    let again = shoal(&[OsStr::new("backup"), m.mnt.as_os_str(), backup.as_os_str()]);
    assert!(
        !again.success() && again.stderr.contains("exists"),
        "{}",
        again.describe()
    );

    let restored = m.dir.path().join("restored");
    let out = restore(&backup, &restored);
    assert!(out.success(), "{}", out.describe());
    let fsck = shoal(&[OsStr::new("fsck"), restored.as_os_str()]);
    assert!(
        fsck.success(),
        "restored store not clean: {}",
        fsck.describe()
    );

    let restored_mnt = m.dir.path().join("restored-mnt");
    fs::create_dir(&restored_mnt).unwrap();
    let _guard = MountGuard {
        store: Some(restored.clone()),
        mnt: restored_mnt.clone(),
    };
    shoal_ok(&[
        OsStr::new("mount"),
        restored.as_os_str(),
        restored_mnt.as_os_str(),
    ]);
    assert_eq!(read_tree(&restored_mnt.join("tree")).unwrap(), expected);
    // A snapshot is a prefix of the history: creates 0..k, none missing before the last.
    let mut names: Vec<u64> = fs::read_dir(restored_mnt.join("live"))
        .unwrap()
        .map(|entry| {
            entry
                .unwrap()
                .file_name()
                .to_string_lossy()
                .parse()
                .unwrap()
        })
        .collect();
    names.sort_unstable();
    let count = names.len() as u64;
    assert_eq!(
        names,
        (0..count).collect::<Vec<_>>(),
        "a gap in the creates"
    );
    assert!(count <= created, "{count} restored, {created} created");
    shoal_ok(&[OsStr::new("umount"), restored_mnt.as_os_str()]);

    // The source is untouched by all this.
    m.umount();
    m.fsck_clean();
}

#[test]
fn offline_backup_and_restore_refuse_what_they_must() {
    let m = Mounted::new();
    fs::write(m.path("file"), b"offline").unwrap();
    let mut m = m;
    m.umount();
    let backup = m.dir.path().join("offline.backup");
    shoal_ok(&[
        OsStr::new("backup"),
        m.store.as_os_str(),
        backup.as_os_str(),
    ]);
    // Into a directory that is not empty: refused, nothing touched.
    let busy = m.dir.path().join("busy");
    fs::create_dir(&busy).unwrap();
    fs::write(busy.join("keep"), b"mine").unwrap();
    let out = restore(&backup, &busy);
    assert!(!out.success(), "{}", out.describe());
    assert_eq!(fs::read(busy.join("keep")).unwrap(), b"mine");
    // A damaged backup: refused before the target is touched, even with --force.
    let damaged = m.dir.path().join("damaged.backup");
    let mut bytes = fs::read(&backup).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    fs::write(&damaged, bytes).unwrap();
    let out = shoal(&[
        OsStr::new("restore"),
        OsStr::new("--force"),
        damaged.as_os_str(),
        busy.as_os_str(),
    ]);
    assert!(
        !out.success() && out.stderr.contains("damaged"),
        "{}",
        out.describe()
    );
    assert_eq!(fs::read(busy.join("keep")).unwrap(), b"mine");
    // A good one restores, and the file is there.
    let restored = m.dir.path().join("restored");
    let out = restore(&backup, &restored);
    assert!(out.success(), "{}", out.describe());
    m.store = restored;
    m.mount();
    assert_eq!(fs::read(m.path("file")).unwrap(), b"offline");
    m.finish();
}

/// Runs a shell pipeline (bash, for pipefail) with `$SHOAL` set; its output.
fn pipeline(script: &str) -> CmdOutput {
    run(
        std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("set -o pipefail; {script}"))
            .env("SHOAL", SHOAL),
        SHOAL_TIMEOUT,
    )
}

/// `shoal backup SOURCE -` writes to standard output (a live mount through its daemon, an
/// unmounted store here) and `shoal restore - DIR` reads standard input, also straight
/// through a pipe; each restores the same tree.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "backup to a pipe, restore from one and compare trees: one scenario on one store"
)]
fn backup_and_restore_stream_through_standard_output_and_input() {
    let mut m = Mounted::new();
    gen_tree(&m.path("tree"), 300);
    let expected = read_tree(&m.mnt).unwrap();
    let dir = m.dir.path().to_path_buf();
    let live = dir.join("live.backup");
    let out = pipeline(&format!(
        "\"$SHOAL\" backup {} - > {}",
        m.mnt.display(),
        live.display()
    ));
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("to standard output") && !dir.join("-").exists(),
        "{}",
        out.describe()
    );
    m.umount();
    let offline = dir.join("offline.backup");
    let out = pipeline(&format!(
        "\"$SHOAL\" backup {} - > {}",
        m.store.display(),
        offline.display()
    ));
    assert!(out.success(), "{}", out.describe());
    // Both are whole backups of the same tree: restore each from standard input.
    for (name, script) in [
        (
            "from-live",
            format!("\"$SHOAL\" restore - DIR < {}", live.display()),
        ),
        (
            "from-offline",
            format!("\"$SHOAL\" restore - DIR < {}", offline.display()),
        ),
        (
            "piped",
            format!(
                "\"$SHOAL\" backup {} - | \"$SHOAL\" restore - DIR",
                m.store.display()
            ),
        ),
    ] {
        let restored = dir.join(name);
        let out = pipeline(&script.replace("DIR", &restored.display().to_string()));
        assert!(out.success(), "{name}: {}", out.describe());
        assert!(out.stdout.contains("standard input"), "{}", out.describe());
        let restored_mnt = dir.join(format!("{name}-mnt"));
        fs::create_dir(&restored_mnt).unwrap();
        let _guard = MountGuard {
            store: Some(restored.clone()),
            mnt: restored_mnt.clone(),
        };
        shoal_ok(&[
            OsStr::new("mount"),
            restored.as_os_str(),
            restored_mnt.as_os_str(),
        ]);
        assert_eq!(read_tree(&restored_mnt).unwrap(), expected, "{name}");
        shoal_ok(&[OsStr::new("umount"), restored_mnt.as_os_str()]);
    }
    // A cut stream is refused before anything is written.
    let cut = dir.join("cut");
    let out = pipeline(&format!(
        "head -c 1000 {} | \"$SHOAL\" restore - {}",
        live.display(),
        cut.display()
    ));
    assert!(!out.success(), "{}", out.describe());
    assert!(
        fs::read_dir(&cut).map_or(true, |mut entries| entries.next().is_none()),
        "a cut backup left files in {}",
        cut.display()
    );
    m.mount();
    m.finish();
}
