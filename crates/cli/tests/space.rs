//! What a mount says about its space: `df` shows shoal's own bytes and inodes as used,
//! and `shoal stats` shows the live bytes, the reclaimable bytes and the reclaims that
//! return deleted data to the device.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use common::{incompressible, shoal_ok, stats_json, Mounted};

const FILES: u64 = 24;
const FILE_BYTES: u64 = 1 << 20;

/// `df -B1 --output=used,iused`.
fn df_used(mnt: &Path) -> (u64, u64) {
    let out = common::run_ok(
        std::process::Command::new("df")
            .args(["-B1", "--output=used,iused"])
            .arg(mnt),
        common::SHOAL_TIMEOUT,
    );
    let numbers: Vec<u64> = out
        .stdout
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

#[test]
fn df_and_stats_show_shoals_own_space_and_reclaims() {
    // Small memtables: the data reaches blob files, where deleting it leaves garbage.
    let mut m = Mounted::with_options(&["memtable=1M"]);
    for index in 0..FILES {
        let mut file = fs::File::create(m.path(format!("f{index}"))).unwrap();
        file.write_all(&incompressible(index, FILE_BYTES as usize))
            .unwrap();
        file.sync_all().unwrap();
    }
    let stats = stats_json(&m.mnt);
    let live = stats["engine"]["live_bytes"].as_u64().unwrap();
    let inodes = stats["engine"]["live_inodes"].as_u64().unwrap();
    assert_eq!(live, FILES * FILE_BYTES, "{stats}");
    assert_eq!(inodes, FILES + 1, "the files and the root: {stats}");
    // df and the store's size are read one after the other: a background flush between
    // the two moves the store by a memtable or more (4.2 MB once), so they are read again
    // until they agree.
    let (mut used, mut iused, mut disk) = (0, 0, 0);
    let agree = common::poll(Duration::from_secs(10), || {
        (used, iused) = df_used(&m.mnt);
        disk = stats_json(&m.mnt)["store"]["disk_bytes"].as_u64().unwrap();
        used.abs_diff(disk) < 4 << 20 && used >= live
    });
    assert!(agree, "df used {used}, store {disk}, live {live}");
    assert_eq!(iused, inodes, "df's used inodes are shoal's inodes");
    let text = shoal_ok(&[
        OsStr::new("stats"),
        m.mnt.as_os_str(),
        OsStr::new("--count"),
        OsStr::new("1"),
    ]);
    for expected in [
        "live_bytes 24.0MiB",
        "live_inodes 25",
        "disk_bytes",
        "reclaimable_bytes",
        "reclaims/s",
    ] {
        assert!(
            text.stdout.contains(expected),
            "{expected}: {}",
            text.describe()
        );
    }

    // Most files go: their bytes are reclaimable, and a reclaim returns them.
    for index in 0..FILES - 4 {
        fs::remove_file(m.path(format!("f{index}"))).unwrap();
    }
    let reclaimed = common::poll(Duration::from_secs(60), || {
        let stats = stats_json(&m.mnt);
        stats["store"]["reclaims"].as_u64().unwrap_or(0) > 0
            && stats["store"]["reclaimed_bytes"].as_u64().unwrap_or(0) > 8 << 20
    });
    let stats = stats_json(&m.mnt);
    assert!(reclaimed, "no reclaim within a minute: {stats}");
    assert_eq!(stats["engine"]["live_bytes"].as_u64(), Some(4 * FILE_BYTES));
    let (used_after, iused_after) = df_used(&m.mnt);
    assert_eq!(iused_after, 5);
    assert!(
        used_after + (8 << 20) < used,
        "df used {used} before the deletes, {used_after} after the reclaim"
    );
    m.umount();
}
