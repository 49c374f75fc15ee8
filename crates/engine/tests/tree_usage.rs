//! Recursive usage on disk: exact after reopen, verified by fsck, and computed for a store
//! written in format 1 when it is first opened read-write.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;
use shoal_engine::internals::keys;
use shoal_engine::internals::store::{
    Batch, FjallStore, FjallTuning, Scan, Space, Store, StoreView,
};
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

/// Every key of the meta space in `[start, end)`.
fn keys_in(kv: &FjallStore, (start, end): (Vec<u8>, Vec<u8>)) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut found = Vec::new();
    kv.scan(Space::Meta, &start, &end, &mut |key, value| {
        found.push((key.to_vec(), value.to_vec()));
        Scan::Continue
    })
    .unwrap();
    found
}

/// Rewrites a closed store as format 1 had it: no recursive usage or link parent keys, no
/// parent in non-directory inodes, version 1 in the superblock and the FORMAT file.
fn downgrade_to_format_1(store: &Path) {
    let kv = FjallStore::open(&store_dir::kv_path(store), &FjallTuning::default()).unwrap();
    let mut batch = Batch::default();
    for (key, _) in keys_in(&kv, keys::all_tree_usage_range())
        .into_iter()
        .chain(keys_in(&kv, keys::all_link_parents_range()))
    {
        batch.delete(Space::Meta, key);
    }
    for (key, value) in keys_in(&kv, keys::all_inodes_range()) {
        let ino = keys::decode_inode_key(&key).unwrap();
        let mut inode = keys::decode_inode(ino, &value).unwrap();
        if inode.kind != FileKind::Directory {
            inode.parent = 0;
            batch.put(Space::Meta, key, keys::encode_inode(&inode));
        }
    }
    let superblock_value = kv.get(Space::Meta, &keys::superblock_key()).unwrap();
    let mut superblock = keys::decode_superblock(&superblock_value.unwrap()).unwrap();
    superblock.format_version = 1;
    batch.put(
        Space::Meta,
        keys::superblock_key(),
        keys::encode_superblock(&superblock),
    );
    kv.write(batch).unwrap();
    kv.sync().unwrap();
    drop(kv);
    std::fs::write(store.join("FORMAT"), "shoal-store 1\n").unwrap();
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

#[test]
fn a_format_1_store_is_upgraded_on_its_first_read_write_open() {
    let (closed, d, e) = populated();
    downgrade_to_format_1(&closed.store);
    let report = fsck_store_dir(&closed.store).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("format version 1")),
        "{}",
        report.summary()
    );
    let read_only = EngineConfig {
        read_only: true,
        ..no_thread()
    };
    let refused = open_err(&closed.store, read_only).to_string();
    assert!(refused.contains("open it read-write once"), "{refused}");

    // As a store made under umask 022 by a build before stores were private.
    for (path, mode) in [
        (closed.store.join("FORMAT"), 0o644),
        (store_dir::kv_path(&closed.store), 0o755),
    ] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let fs = closed.open();
    // The upgrade rewrote the store: every file of it private, as mkfs makes them.
    let exposed = store_dir::access::exposure(&closed.store, 10).unwrap();
    assert!(exposed.is_empty(), "after the upgrade: {exposed:?}");
    expect_populated(&fs, d, e);
    // The upgraded links work as if written by format 2: the second name goes, the file
    // stays with its one parent, and a write reaches its directory.
    fs.unlink(ROOT_INO, b"h").unwrap();
    let g = fs.lookup(e, b"g").unwrap();
    fs.write(g.ino, 100_000, b"xyz").unwrap();
    assert_eq!(counts(fs.tree_usage(d).unwrap()), (4, 2, 100_008));
    assert_consistent(&fs, &[]);
    drop(fs);
    assert_eq!(
        std::fs::read_to_string(closed.store.join("FORMAT")).unwrap(),
        format!("shoal-store {}\n", keys::FORMAT_VERSION)
    );
    assert_fsck_clean(&closed.store);
}
