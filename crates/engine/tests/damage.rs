//! Damage that decodes: an inode record of the right shape whose fields make no sense, and a
//! usage counter lower than the tree it counts. Reads and writes refuse them with EIO, and
//! fsck reports them; neither is passed on or clamped.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::sync::Arc;

use common::stores::FaultyStore;
use common::*;
use shoal_engine::internals::keys;
use shoal_engine::internals::store::{
    Batch, FjallStore, FjallTuning, MemoryStore, Scan, Space, Store, StoreView,
};

fn assert_corrupt(error: FsError, what: &str) {
    assert_eq!(error.errno(), libc::EIO, "{error}");
    match error {
        FsError::Corrupt(problem) => assert!(problem.contains(what), "{problem}"),
        other => panic!("expected Corrupt({what}), got {other:?}"),
    }
}

#[test]
fn an_inode_that_makes_no_sense_is_corrupt_and_fsck_reports_it() {
    let fs = disk();
    let file = mkfile_with(&fs, ROOT_INO, b"file", b"twelve bytes");
    let closed = fs.close();
    // Well shaped, but a regular file of 12 bytes with a device number and a 13th
    // second-fraction: as a bit flip in the store's files would leave it.
    let damaged = Inode {
        rdev: 0x0801,
        mtime: Timestamp {
            secs: file.mtime.secs,
            nanos: 1_000_000_000,
        },
        ..file.clone()
    };
    {
        let store = FjallStore::open(
            &shoal_engine::store_dir::kv_path(&closed.store),
            &FjallTuning::default(),
        )
        .unwrap();
        let mut batch = Batch::default();
        batch.put(
            Space::Meta,
            keys::inode_key(file.ino),
            keys::encode_inode(&damaged),
        );
        store.write(batch).unwrap();
        store.sync().unwrap();
    }
    let report = fsck_store_dir(&closed.store).unwrap();
    assert!(!report.is_clean(), "fsck called a damaged inode clean");
    let summary = report.summary();
    assert!(
        summary.contains(&format!("inode {}", file.ino)) && summary.contains("nanoseconds"),
        "{summary}"
    );
    let fs = closed.open();
    assert_corrupt(fs.getattr(file.ino).unwrap_err(), "nanoseconds");
    assert_corrupt(fs.lookup(ROOT_INO, b"file").unwrap_err(), "nanoseconds");
    // The rest of the tree reads on.
    assert_eq!(names(&fs, ROOT_INO), vec![b"file".to_vec()]);
}

#[test]
fn a_counter_that_would_go_below_zero_is_an_error_recorded_and_reported() {
    let inner = Arc::new(MemoryStore::new());
    let open = || Engine::open_with_store(Box::new(FaultyStore::plain(inner.clone())), no_thread());
    let fs = open().unwrap();
    mkfile_with(&fs, ROOT_INO, b"file", b"twelve bytes");
    fs.sync().unwrap();
    drop(fs);
    // Damage: every usage counter lost (they say nothing is used).
    let (start, end) = keys::all_counters_range();
    let mut batch = Batch::default();
    let mut counters = 0;
    inner
        .scan(Space::Meta, &start, &end, &mut |key, _| {
            batch.delete(Space::Meta, key.to_vec());
            counters += 1;
            Scan::Continue
        })
        .unwrap();
    assert!(counters > 0);
    inner.write(batch).unwrap();
    let fs = open().unwrap();
    assert_eq!(fs.write_errors().count, 0);
    assert_corrupt(fs.unlink(ROOT_INO, b"file").unwrap_err(), "below zero");
    // Refused whole, and recorded: `shoal stats` shows it, the next sync returns it.
    assert!(
        fs.lookup(ROOT_INO, b"file").is_ok(),
        "the refused unlink removed the file"
    );
    assert_eq!(fs.write_errors().count, 1);
    assert!(
        fs.sync().is_err(),
        "the next sync did not report the underflow"
    );
    drop(fs);
    let report = shoal_engine::fsck::check(&FaultyStore::plain(inner)).unwrap();
    assert!(!report.is_clean(), "fsck called damaged counters clean");
    assert!(
        report.summary().contains("usage of"),
        "{}",
        report.summary()
    );
}
