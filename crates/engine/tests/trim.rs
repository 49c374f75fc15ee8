//! Truncating, and punching a hole in, a file with more chunks than one batch may hold:
//! the operation's batch and further bounded batches under the same writer lock; the size
//! and the zeros are there from the first batch, counters right and fsck clean between any
//! two, a crash part way finished by the next open, and a failed batch finished by the
//! next write before it does anything.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::stores::FaultyStore;
use common::*;
use shoal_engine::defaults::BATCH_OPS;
use shoal_engine::internals::store::MemoryStore;
use shoal_engine::Fallocate;

/// Chunks of the test file: two full batches and a few more for the last one.
const CHUNKS: u64 = 2 * BATCH_OPS as u64 + 10;
/// Truncating to this keeps chunks 0 and 1 and drops `CHUNKS - 2`.
const KEPT: u64 = CHUNK + 10;

/// A sparse file of `CHUNKS` one-byte chunks (a large chunk count in little memory).
fn many_chunk_file(fs: &Engine, name: &[u8]) -> u64 {
    let ino = mkfile(fs, ROOT_INO, name).ino;
    for chunk in 0..CHUNKS {
        fs.write(ino, chunk * CHUNK, b"x").unwrap();
    }
    ino
}

fn truncate(fs: &Engine, ino: u64, size: u64) -> Result<Inode, FsError> {
    fs.setattr(
        ino,
        &SetAttr {
            size: Some(size),
            ..sattr()
        },
    )
}

/// Bytes `[offset, offset + len)` of `ino`.
fn read_at(fs: &Engine, ino: u64, offset: u64, len: u32) -> Vec<u8> {
    fs.read(ino, offset, len).unwrap()
}

both_backends! {
    fn a_truncate_past_a_batch_runs_in_several_commits_and_exposes_nothing(fs) {
        let before = total(fs);
        let ino = many_chunk_file(fs, b"big");
        let batches = fs.stats().snapshot().batches;
        truncate(fs, ino, KEPT).unwrap();
        // The setattr with BATCH_OPS chunks, BATCH_OPS more, then the last eight.
        assert_eq!(fs.stats().snapshot().batches - batches, 3);
        assert_eq!(fs.getattr(ino).unwrap().size, KEPT);
        assert_eq!(total(fs).bytes, before.bytes + 2);
        // Growing the file again shows zeros, not the old bytes.
        truncate(fs, ino, CHUNKS * CHUNK).unwrap();
        let tail = read_at(fs, ino, (CHUNKS - 1) * CHUNK, 16);
        assert_eq!(tail, vec![0u8; 16]);
        assert_eq!(read_at(fs, ino, CHUNK, 2), b"x\0");
        assert_consistent(fs, &[]);
    }

    fn a_truncate_to_an_inline_size_keeps_the_file_chunked_until_the_rest_is_gone(fs) {
        let before = total(fs);
        let ino = many_chunk_file(fs, b"big");
        truncate(fs, ino, 100).unwrap();
        assert_eq!(fs.getattr(ino).unwrap().size, 100);
        assert_eq!(read_all(fs, ino), {
            let mut expected = vec![0u8; 100];
            expected[0] = b'x';
            expected
        });
        assert_eq!(total(fs).bytes, before.bytes + 1);
        assert_consistent(fs, &[]);
    }

    fn a_hole_punched_past_a_batch_runs_in_several_commits_and_reads_zeros(fs) {
        let before = total(fs);
        let ino = many_chunk_file(fs, b"big");
        // From inside chunk 0 to one byte into the last chunk: chunk 0 keeps its byte
        // (before the hole), the last chunk loses its only byte, every chunk between goes.
        let start = CHUNK / 2;
        let stop = (CHUNKS - 1) * CHUNK + 1;
        let batches = fs.stats().snapshot().batches;
        fs.fallocate(ino, start, stop - start, Fallocate::PunchHole).unwrap();
        assert_eq!(fs.stats().snapshot().batches - batches, 3);
        assert_eq!(fs.getattr(ino).unwrap().size, (CHUNKS - 1) * CHUNK + 1);
        assert_eq!(total(fs).bytes, before.bytes + 1);
        for chunk in 1..CHUNKS {
            assert_eq!(read_at(fs, ino, chunk * CHUNK, 1), b"\0", "chunk {chunk}");
        }
        assert_eq!(read_at(fs, ino, 0, 1), b"x");
        assert_consistent(fs, &[]);
    }
}

#[test]
fn truncates_and_punches_are_fsck_clean_on_disk() {
    let fs = disk_with(no_thread());
    let cut = many_chunk_file(&fs, b"cut");
    truncate(&fs, cut, KEPT).unwrap();
    let punched = many_chunk_file(&fs, b"punched");
    fs.fallocate(punched, 0, CHUNKS * CHUNK, Fallocate::PunchHole)
        .unwrap();
    let closed = fs.close();
    let report = assert_fsck_clean(&closed.store);
    assert_eq!(report.trims, 0);
}

/// An engine over `inner` whose store fails every write once `writes_left` runs out.
fn failing_after(inner: &Arc<MemoryStore>, writes_left: &Arc<AtomicU64>) -> Arc<Engine> {
    let store = FaultyStore::failing_after(inner.clone(), writes_left.clone());
    Engine::open_with_store(Box::new(store), no_thread()).unwrap()
}

#[test]
fn a_truncate_cut_short_is_fsck_clean_and_the_next_open_finishes_it() {
    let inner = Arc::new(MemoryStore::new());
    let writes_left = Arc::new(AtomicU64::new(u64::MAX));
    let fs = failing_after(&inner, &writes_left);
    let before = total(&fs);
    let ino = many_chunk_file(&fs, b"big");
    // The setattr and the first further batch are written; the last fails (a crash:
    // nothing after it reaches the store).
    writes_left.store(2, Ordering::SeqCst);
    truncate(&fs, ino, KEPT).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().size, KEPT);
    assert_eq!(
        total(&fs).bytes,
        before.bytes + 2 + (CHUNKS - 2 - 2 * BATCH_OPS as u64),
        "the written batches' bytes are credited, the rest still counted"
    );
    drop(fs);

    let report = shoal_engine::fsck::check(&FaultyStore::plain(inner.clone())).unwrap();
    assert!(report.is_clean(), "{}", report.summary());
    assert_eq!(report.trims, 1);

    let reopened =
        Engine::open_with_store(Box::new(FaultyStore::plain(inner.clone())), no_thread()).unwrap();
    assert_eq!(total(&reopened).bytes, before.bytes + 2);
    truncate(&reopened, ino, CHUNKS * CHUNK).unwrap();
    assert_eq!(read_at(&reopened, ino, (CHUNKS - 1) * CHUNK, 1), b"\0");
    drop(reopened);
    let report = shoal_engine::fsck::check(&FaultyStore::plain(inner)).unwrap();
    assert!(report.is_clean(), "{}", report.summary());
    assert_eq!(report.trims, 0);
}

#[test]
fn a_trim_batch_that_fails_is_finished_by_the_next_write_before_it_runs() {
    let inner = Arc::new(MemoryStore::new());
    let writes_left = Arc::new(AtomicU64::new(u64::MAX));
    let fs = failing_after(&inner, &writes_left);
    let before = total(&fs);
    let ino = many_chunk_file(&fs, b"big");
    writes_left.store(1, Ordering::SeqCst);
    truncate(&fs, ino, KEPT).unwrap();
    // The store works again; the next write (one that grows the file over the range
    // still to delete) first deletes the rest.
    writes_left.store(u64::MAX, Ordering::SeqCst);
    fs.write(ino, (CHUNKS - 1) * CHUNK + 1, b"y").unwrap();
    assert_eq!(read_at(&fs, ino, (CHUNKS - 1) * CHUNK, 2), b"\0y");
    assert_eq!(read_at(&fs, ino, 2 * CHUNK, 1), b"\0");
    assert_eq!(total(&fs).bytes, before.bytes + 2 + 2);
    assert_consistent(&fs, &[]);
    drop(fs);
    let report = shoal_engine::fsck::check(&FaultyStore::plain(inner)).unwrap();
    assert!(report.is_clean(), "{}", report.summary());
    assert_eq!(report.trims, 0);
}
