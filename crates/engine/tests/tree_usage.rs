//! Recursive usage on disk: exact after reopen, verified by fsck. (A store written in
//! format 1 gets it when first opened read-write: `format_1_store`.)

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use common::*;
use shoal_engine::internals::keys;
use shoal_engine::internals::store::{Batch, FjallStore, FjallTuning, Space, Store};
use shoal_engine::store_dir;

/// `/d/f` (5 bytes), `/d/e/g` (100,000 bytes) with a second name `/h`, `/d/s` symlink.
fn populated() -> (Closed, u64, u64) {
    let fs = disk_with(no_thread());
    let d = mkdir(&fs, ROOT_INO, b"d");
    mkfile_with(&fs, d.ino, b"f", b"small");
    let e = mkdir(&fs, d.ino, b"e");
    let g = mkfile_with(&fs, e.ino, b"g", &vec![1u8; 100_000]);
    fs.link(g.ino, ROOT_INO, b"h").unwrap();
    fs.symlink(d.ino, b"s", b"f", ME).unwrap();
    assert_consistent(&fs, &[]);
    (fs.close(), d.ino, e.ino)
}

fn counts(usage: TreeUsage) -> (u64, u64, u64) {
    (usage.entries, usage.files, usage.bytes)
}

fn expect_populated(fs: &Engine, d: u64, e: u64) {
    assert_eq!(counts(fs.tree_usage(ROOT_INO).unwrap()), (6, 3, 200_005));
    assert_eq!(counts(fs.tree_usage(d).unwrap()), (4, 2, 100_005));
    assert_eq!(counts(fs.tree_usage(e).unwrap()), (1, 1, 100_000));
}

#[test]
fn tree_usage_survives_reopen_and_fsck_verifies_it() {
    let (closed, d, e) = populated();
    let fs = closed.open();
    expect_populated(&fs, d, e);
    assert_eq!(
        fs.getxattr(d, shoal_engine::XATTR_RBYTES).unwrap(),
        b"100005".to_vec()
    );
    drop(fs);
    assert_fsck_clean(&closed.store);

    let kv = FjallStore::open(&store_dir::kv_path(&closed.store), &FjallTuning::default()).unwrap();
    let mut batch = Batch::default();
    let wrong = TreeUsage {
        entries: 3,
        ..TreeUsage::default()
    };
    batch.put(
        Space::Meta,
        keys::tree_usage_key(e),
        keys::encode_tree_usage(&wrong),
    );
    kv.write(batch).unwrap();
    kv.sync().unwrap();
    drop(kv);
    let report = fsck_store_dir(&closed.store).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&format!("directory {e}: tree usage says 3 entries"))),
        "fsck missed a wrong tree usage record:\n{}",
        report.summary()
    );
}

/// A chmod, chown or utimes changes only the newest ctime of the directories above: in the
/// clock tick of the create before it nothing (the walk up stops at the first directory
/// already that new), in a later tick every directory up to the root.
#[test]
fn a_setattr_carries_its_ctime_up_to_the_root_only_when_it_is_newer() {
    let fs = disk_with(no_thread());
    let a = mkdir(&fs, ROOT_INO, b"a");
    let b = mkdir(&fs, a.ino, b"b");
    let f = mkfile(&fs, b.ino, b"f");
    let chmod = |perm| SetAttr {
        perm: Some(perm),
        ..sattr()
    };
    fs.setattr(f.ino, &chmod(0o600)).unwrap();
    assert_consistent(&fs, &[]);
    // The coarse clock ticks every 1-10 ms.
    std::thread::sleep(std::time::Duration::from_millis(25));
    let changed = fs.setattr(f.ino, &chmod(0o640)).unwrap();
    assert!(changed.ctime > f.ctime, "the clock did not move");
    for (dir, entries) in [(b.ino, 1), (a.ino, 2), (ROOT_INO, 3)] {
        let usage = fs.tree_usage(dir).unwrap();
        assert_eq!(usage.rctime, changed.ctime, "rctime of directory {dir}");
        assert_eq!(counts(usage), (entries, 1, 0), "counts of directory {dir}");
    }
    assert_consistent(&fs, &[]);
    // A directory with nothing below it has no record: its rctime is its own ctime, new
    // already when the walk starts, and must still reach the root.
    let c = mkdir(&fs, a.ino, b"c");
    std::thread::sleep(std::time::Duration::from_millis(25));
    let changed = fs.setattr(c.ino, &chmod(0o700)).unwrap();
    assert!(changed.ctime > c.ctime, "the clock did not move");
    assert_eq!(fs.tree_usage(ROOT_INO).unwrap().rctime, changed.ctime);
    assert_consistent(&fs, &[]);
}
