//! rmtree in the engine: a tree leaves the namespace in one batch, is deleted in the
//! background with files open inside still working and files also named outside kept,
//! fsck is clean in the middle of it, and a reopened store finishes the work.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;

/// `/t` with `dirs` subdirectories of `files` files each (64 bytes each), `/t/d0/f0` also
/// named `/keep`, and `/t/d0/big` chunked (300,000 bytes).
fn build_tree(fs: &Engine, dirs: u32, files: u32) -> (u64, u64, u64) {
    let t = mkdir(fs, ROOT_INO, b"t");
    let mut shared = 0;
    for d in 0..dirs {
        let dir = mkdir(fs, t.ino, format!("d{d}").as_bytes());
        let nested = mkdir(fs, dir.ino, b"nested");
        mkfile_with(fs, nested.ino, b"deep", b"deep");
        for f in 0..files {
            let file = mkfile_with(fs, dir.ino, format!("f{f}").as_bytes(), &[7u8; 64]);
            if d == 0 && f == 0 {
                shared = file.ino;
            }
        }
    }
    fs.link(shared, ROOT_INO, b"keep").unwrap();
    let d0 = fs.lookup(t.ino, b"d0").unwrap();
    let big = mkfile_with(fs, d0.ino, b"big", &vec![3u8; 300_000]);
    (t.ino, shared, big.ino)
}

fn wait_reclaimed(fs: &Engine) {
    let done = poll(Duration::from_secs(60), || {
        fs.reclaim_backlog().unwrap().trees == 0
    });
    assert!(done, "reclaim did not finish: {:?}", fs.reclaim_backlog());
}

fn poll(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    while started.elapsed() < timeout {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

#[test]
fn a_detached_tree_is_gone_at_once_and_reclaimed_with_open_files_working() {
    let fs = memory();
    let (t, shared, big) = build_tree(&fs, 20, 100);
    let before = fs.tree_usage(ROOT_INO).unwrap();
    let root_usage_of_t = fs.tree_usage(t).unwrap();
    fs.open_file(big);
    let engine: &Arc<Engine> = &fs.engine;
    let detached = engine.detach_tree(ROOT_INO, b"t").unwrap();
    assert_eq!(detached.ino, t);
    assert_eq!(detached.usage.entries, root_usage_of_t.entries);
    assert_err!(fs.lookup(ROOT_INO, b"t"), FsError::NotFound);
    let after = fs.tree_usage(ROOT_INO).unwrap();
    assert_eq!(after.entries, before.entries - 1 - root_usage_of_t.entries);
    assert_eq!(after.bytes, before.bytes - root_usage_of_t.bytes);

    // The open file keeps working while its tree goes, and after.
    fs.write(big, 0, b"still here").unwrap();
    wait_reclaimed(&fs);
    assert_eq!(&fs.read(big, 0, 10).unwrap(), b"still here");
    // The file also named outside the tree keeps that name and its data.
    let kept = fs.lookup(ROOT_INO, b"keep").unwrap();
    assert_eq!((kept.ino, kept.nlink, kept.parent), (shared, 1, ROOT_INO));
    assert_eq!(read_all(&fs, shared), vec![7u8; 64]);
    assert_consistent(&fs, &[big]);
    fs.release_file(big).unwrap();
    assert_consistent(&fs, &[]);
    assert_eq!(fs.usage(UsageOwner::Total).unwrap().inodes, 2);
}

#[test]
fn fsck_is_clean_mid_reclaim_and_a_reopen_finishes_it() {
    let fs = disk_with(no_thread());
    build_tree(&fs, 40, 150);
    let engine: Arc<Engine> = Arc::clone(&fs.engine);
    engine.detach_tree(ROOT_INO, b"t").unwrap();
    drop(engine);
    // Closing the engine stops the reclaimer between two batches.
    let closed = fs.close();
    let report = wait_for_fsck(&closed.store);
    assert!(report.is_clean(), "{}", report.summary());
    let read_only = EngineConfig {
        read_only: true,
        ..no_thread()
    };
    let stopped = Engine::open(&closed.store, read_only).unwrap();
    let backlog = stopped.reclaim_backlog().unwrap();
    assert_eq!(backlog.trees, 1, "the reclaim was not stopped midway");
    assert!(backlog.entries > 0);
    drop(stopped);
    let fs = closed.open();
    wait_reclaimed(&fs);
    assert_consistent(&fs, &[]);
    drop(fs);
    let report = wait_for_fsck(&closed.store);
    assert!(report.is_clean(), "{}", report.summary());
}

/// fsck once the last engine handle (perhaps the reclaimer's, for one batch) is gone.
fn wait_for_fsck(store: &std::path::Path) -> FsckReport {
    let started = std::time::Instant::now();
    loop {
        match fsck_store_dir(store) {
            Ok(report) => return report,
            Err(error) if started.elapsed() < Duration::from_secs(10) => {
                let _ = error;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) => panic!("fsck: {error}"),
        }
    }
}

#[test]
fn reclaim_all_deletes_every_detached_tree_in_the_caller() {
    let fs = memory();
    build_tree(&fs, 3, 10);
    let other = mkdir(&fs, ROOT_INO, b"other");
    mkfile(&fs, other.ino, b"x");
    let engine: &Arc<Engine> = &fs.engine;
    engine.detach_tree(ROOT_INO, b"other").unwrap();
    engine.detach_tree(ROOT_INO, b"t").unwrap();
    let mut last = 0;
    fs.reclaim_all(|deleted| last = deleted).unwrap();
    assert_eq!(fs.reclaim_backlog().unwrap(), Default::default());
    assert!(last > 0);
    assert_consistent(&fs, &[]);
}
