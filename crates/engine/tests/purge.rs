//! Purging a file with more chunks than one batch may hold: several bounded commits, the
//! inode an orphan until the last, counters right and fsck clean between any two, and a
//! crash part way finished by the next open.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::stores::FaultyStore;
use common::*;
use shoal_engine::defaults::BATCH_OPS;
use shoal_engine::internals::store::MemoryStore;

/// Chunks of the test file: two full purge batches and a few more for the last one.
const CHUNKS: u64 = 2 * BATCH_OPS as u64 + 10;

/// A sparse file of `CHUNKS` one-byte chunks (a large chunk count in little memory).
fn many_chunk_file(fs: &Engine, name: &[u8]) -> u64 {
    let ino = mkfile(fs, ROOT_INO, name).ino;
    for chunk in 0..CHUNKS {
        fs.write(ino, chunk * CHUNK, b"x").unwrap();
    }
    ino
}

both_backends! {
    fn a_file_with_more_chunks_than_a_batch_is_purged_in_several_commits(fs) {
        let before = total(fs);
        let ino = many_chunk_file(fs, b"big");
        assert_eq!(total(fs).bytes, before.bytes + CHUNKS);
        let batches = fs.stats().snapshot().batches;
        fs.unlink(ROOT_INO, b"big").unwrap();
        // The unlink (which keeps the inode as an orphan), two batches of BATCH_OPS
        // chunks, then the last ten chunks with the inode.
        assert_eq!(fs.stats().snapshot().batches - batches, 4);
        assert_err!(fs.getattr(ino), FsError::NotFound);
        assert_eq!(total(fs), before);
        assert_consistent(fs, &[]);
    }
}

#[test]
fn the_purge_is_fsck_clean_on_disk() {
    let fs = disk_with(no_thread());
    many_chunk_file(&fs, b"big");
    fs.unlink(ROOT_INO, b"big").unwrap();
    let closed = fs.close();
    let report = assert_fsck_clean(&closed.store);
    assert_eq!(report.orphans, 0);
}

#[test]
fn a_purge_cut_short_leaves_a_clean_orphan_that_the_next_open_finishes() {
    let inner = Arc::new(MemoryStore::new());
    // Writes left before every write fails (a crash: nothing after it reaches the store).
    let writes_left = Arc::new(AtomicU64::new(u64::MAX));
    let store = FaultyStore::failing_after(inner.clone(), writes_left.clone());
    let fs = Engine::open_with_store(Box::new(store), no_thread()).unwrap();
    let before = total(&fs);
    let ino = many_chunk_file(&fs, b"big");
    // The unlink and the first batch of chunks are written; the second fails.
    writes_left.store(2, Ordering::SeqCst);
    fs.unlink(ROOT_INO, b"big").unwrap();
    assert_eq!(fs.getattr(ino).unwrap().nlink, 0);
    assert_eq!(
        total(&fs).bytes,
        before.bytes + CHUNKS - BATCH_OPS as u64,
        "the first batch's bytes are credited, the rest still counted"
    );
    drop(fs);

    let report = shoal_engine::fsck::check(&FaultyStore::plain(inner.clone())).unwrap();
    assert!(report.is_clean(), "{}", report.summary());
    assert_eq!(report.orphans, 1);

    let reopened =
        Engine::open_with_store(Box::new(FaultyStore::plain(inner.clone())), no_thread()).unwrap();
    assert_err!(reopened.getattr(ino), FsError::NotFound);
    assert_eq!(total(&reopened), before);
    drop(reopened);
    let report = shoal_engine::fsck::check(&FaultyStore::plain(inner)).unwrap();
    assert!(report.is_clean(), "{}", report.summary());
    assert_eq!(report.orphans, 0);
}

/// Deleting a file of more chunks than a blind delete covers lists its chunks with their
/// lengths from the tables alone: with every blob file of its data damaged, the unlink
/// still succeeds and frees its bytes (the list had read each chunk's value, so it failed
/// with EIO and the damaged file could not even be removed).
#[test]
fn a_large_file_is_deleted_without_reading_its_data() {
    use shoal_engine::internals::store::{FjallStore, FjallTuning, Store};
    let fs = disk_with(no_thread());
    let chunks = 80u64;
    let ino = mkfile(&fs, ROOT_INO, b"big").ino;
    for chunk in 0..chunks {
        fs.write(ino, chunk * CHUNK, &vec![chunk as u8 + 1; CHUNK as usize])
            .unwrap();
    }
    let closed = fs.close();
    let kv = shoal_engine::store_dir::kv_path(&closed.store);
    let store = FjallStore::open(&kv, &FjallTuning::default()).unwrap();
    // Into blob files, then every blob's bytes damaged.
    store.release_space().unwrap();
    let mut damaged = 0;
    for keyspace in std::fs::read_dir(kv.join("keyspaces")).unwrap() {
        let Ok(blobs) = std::fs::read_dir(keyspace.unwrap().path().join("blobs")) else {
            continue;
        };
        for file in blobs {
            let path = file.unwrap().path();
            let mut bytes = std::fs::read(&path).unwrap();
            for byte in bytes.iter_mut().skip(64).step_by(512) {
                *byte ^= 0x5a;
            }
            std::fs::write(&path, bytes).unwrap();
            damaged += 1;
        }
    }
    assert!(damaged > 0, "the data is in no blob file");
    let fs = Engine::open_with_store(Box::new(store), no_thread()).unwrap();
    assert!(fs.read(ino, 0, 16).is_err(), "the damaged data read back");
    let before = total(&fs);
    fs.unlink(ROOT_INO, b"big").unwrap();
    assert_err!(fs.getattr(ino), FsError::NotFound);
    assert_eq!(total(&fs).bytes, before.bytes - chunks * CHUNK);
}
