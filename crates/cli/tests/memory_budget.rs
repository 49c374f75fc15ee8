//! `-o memory=`: with many more files than the budget has room for, the daemon's table of
//! kernel-referenced inodes stays bounded (the kernel is asked to drop old names and
//! forgets their inodes), and every file stays reachable.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::ffi::OsStr;
use std::fs::{self, File};
use std::path::Path;
use std::time::Duration;

use common::{poll, shoal_ok, Mounted};
use serde_json::Value;

const DIRS: usize = 100;
const FILES: usize = 100_000;

fn memory(mnt: &Path) -> Value {
    let out = shoal_ok(&[OsStr::new("stats"), OsStr::new("--json"), mnt.as_os_str()]);
    let stats: Value = serde_json::from_str(&out.stdout).expect("stats JSON");
    stats["memory"].clone()
}

fn field(memory: &Value, name: &str) -> u64 {
    memory[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} in {memory}"))
}

fn path(mnt: &Path, file: usize) -> std::path::PathBuf {
    mnt.join(format!("d{}/f{file}", file % DIRS))
}

#[test]
fn referenced_inodes_stay_within_a_small_budget() {
    // 4 MiB for the table and a 1 MiB block cache, nothing staged besides: room
    // for a few tens of thousands of references, a fraction of the files.
    let m = Mounted::with_options(&["cache=1M", "memtable=1M", "checkpoint=0", "memory=4M"]);
    for dir in 0..DIRS {
        fs::create_dir(m.path(format!("d{dir}"))).unwrap();
    }
    let mut most_referenced = 0;
    for file in 0..FILES {
        File::create(path(&m.mnt, file)).unwrap();
        if file % 20_000 == 19_999 {
            most_referenced = most_referenced.max(field(&memory(&m.mnt), "referenced_inodes"));
        }
    }
    // Every file looked up again, by name, after most were evicted.
    for file in 0..FILES {
        assert!(fs::metadata(path(&m.mnt, file)).unwrap().is_file());
    }
    let budget_bytes = 4u64 << 20;
    let settled = poll(Duration::from_secs(10), || {
        let now = memory(&m.mnt);
        most_referenced = most_referenced.max(field(&now, "referenced_inodes"));
        field(&now, "lookup_table_bytes") <= budget_bytes
    });
    let last = memory(&m.mnt);
    assert!(settled, "lookup table over budget: {last}");
    assert!(field(&last, "evictions") > 0, "{last}");
    assert!(
        most_referenced < FILES as u64 / 2,
        "{most_referenced} of {FILES} inodes referenced at once: {last}"
    );
    assert!(
        field(&last, "rss_bytes") < 256 << 20,
        "daemon resident set: {last}"
    );
    let names: usize = (0..DIRS)
        .map(|dir| fs::read_dir(m.path(format!("d{dir}"))).unwrap().count())
        .sum();
    assert_eq!(names, FILES);
    m.finish();
}

#[test]
fn resident_set_stays_near_a_small_budget() {
    // 24 MiB for everything: 2 MiB of block cache, 2 MiB memtables, up to 8 MiB of staged
    // operations (checkpoint=1), the lookup table, and what the daemon needs besides
    // (program, stacks, allocator slack: about 15 MB). 100k creates hold about 70 MB of
    // memtable and 10 MB of references if nothing were sealed or evicted.
    let budget_bytes = 24u64 << 20;
    let m = Mounted::with_options(&["cache=2M", "memtable=2M", "checkpoint=1M", "memory=24M"]);
    for dir in 0..DIRS {
        fs::create_dir(m.path(format!("d{dir}"))).unwrap();
    }
    let mut samples = Vec::new();
    for file in 0..FILES {
        File::create(path(&m.mnt, file)).unwrap();
        if file % 5_000 == 4_999 {
            samples.push(field(&memory(&m.mnt), "rss_bytes"));
        }
    }
    // The budget is checked every 100 ms and the resident set read every second, so a
    // sample may catch it before the daemon has caught up: half over is allowed (without
    // memtable sealing at the configured size this reached 68 MiB).
    let highest = samples.iter().copied().max().unwrap_or(0);
    println!(
        "daemon resident set every 5000 creates, MiB: {:?}",
        samples.iter().map(|rss| rss >> 20).collect::<Vec<_>>()
    );
    assert!(
        highest < budget_bytes + budget_bytes / 2,
        "daemon resident set {} MiB with a {} MiB budget (samples in MiB: {:?})",
        highest >> 20,
        budget_bytes >> 20,
        samples.iter().map(|rss| rss >> 20).collect::<Vec<_>>()
    );
    let last = memory(&m.mnt);
    assert!(field(&last, "evictions") > 0, "{last}");
    // Over 85% of the budget the daemon hands free heap back to the system, and counts it.
    if highest > budget_bytes * 85 / 100 {
        assert!(field(&last, "heap_trims") > 0, "{last}");
    }
    m.finish();
}
