//! Space comes back: after file data is overwritten (in place and by renaming a new file
//! over it) and deleted, the store's blob files shrink to within a bound of the live
//! bytes on their own, under no further load, and every live byte still reads back.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const FILES: u64 = 16;
const FILE_BYTES: u64 = 4 << 20;
/// One blob file being written or not yet full (`defaults::BLOB_FILE_BYTES`) and the
/// index tables.
const SLACK_BYTES: u64 = 24 << 20;

/// Allocated bytes of the blob files under the store (all keyspaces).
fn blob_bytes(store: &Path) -> u64 {
    let keyspaces = store.join("kv/keyspaces");
    let mut total = 0;
    for keyspace in std::fs::read_dir(&keyspaces).unwrap() {
        let blobs = keyspace.unwrap().path().join("blobs");
        let Ok(files) = std::fs::read_dir(&blobs) else {
            continue;
        };
        for file in files.flatten() {
            // fjall deletes blob files as it reclaims them.
            if let Ok(metadata) = file.metadata() {
                total += metadata.blocks() * 512;
            }
        }
    }
    total
}

fn contents(generation: u64, index: u64) -> Vec<u8> {
    Lcg::new(generation * 1000 + index).bytes(FILE_BYTES as usize)
}

#[test]
fn overwritten_and_deleted_data_is_returned_to_within_a_bound_of_the_live_bytes() {
    let fs = disk();
    let store = fs.store.clone().unwrap();
    let dir = mkdir(&fs, ROOT_INO, b"objects");
    let mut inos: Vec<u64> = (0..FILES)
        .map(|index| {
            let name = format!("f{index}");
            mkfile_with(&fs, dir.ino, name.as_bytes(), &contents(0, index)).ino
        })
        .collect();
    // Overwritten in place: the same chunk keys get new values.
    for (index, &ino) in inos.iter().enumerate() {
        assert_eq!(
            fs.write(ino, 0, &contents(1, index as u64)).unwrap() as u64,
            FILE_BYTES
        );
    }
    // Overwritten as an object store does: a new file renamed over the old one.
    for (index, ino) in inos.iter_mut().enumerate() {
        let new = mkfile_with(&fs, dir.ino, b"tmp", &contents(2, index as u64));
        let name = format!("f{index}");
        fs.rename(
            dir.ino,
            b"tmp",
            dir.ino,
            name.as_bytes(),
            RenameMode::Replace,
        )
        .unwrap();
        *ino = new.ino;
    }
    // Half deleted.
    for index in (0..FILES).step_by(2) {
        fs.unlink(dir.ino, format!("f{index}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();

    let live = FILES / 2 * FILE_BYTES;
    let bound = live + live / 2 + SLACK_BYTES;
    let written = 3 * FILES * FILE_BYTES;
    let started = Instant::now();
    let mut blobs = blob_bytes(&store);
    while blobs > bound && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
        blobs = blob_bytes(&store);
    }
    assert!(
        blobs <= bound,
        "blob files hold {blobs} bytes a minute after {written} bytes were written for \
         {live} live bytes (bound {bound})"
    );
    // The reclaim copied live values into new blob files: every byte is still there.
    for index in (1..FILES).step_by(2) {
        let ino = inos[index as usize];
        assert!(
            read_all(&fs, ino) == contents(2, index),
            "f{index} changed after the reclaim"
        );
    }
    let closed = fs.close();
    assert_fsck_clean(&closed.store);
}
