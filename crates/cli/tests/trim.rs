//! kill -9 during a truncate (and its fsync) of a file with more chunks than one batch
//! may hold (the engine deletes them over several batches, see `engine::trim`): wherever
//! the kill lands, the store is fsck-clean, the file has its old size or the new one, and once
//! grown back it reads zeros past the new size, never the old bytes.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::thread;
use std::time::Duration;

use common::Mounted;
use shoal_engine::defaults::BATCH_OPS;

const CHUNK: u64 = 64 * 1024;
/// Three batches of chunks and a few more: the truncate takes four batches.
const CHUNKS: u64 = 3 * BATCH_OPS as u64 + 10;
const KEPT: u64 = CHUNK + 10;
/// When the kill lands after the truncate starts, per round.
const KILL_DELAYS: [Duration; 5] = [
    Duration::ZERO,
    Duration::from_millis(5),
    Duration::from_millis(20),
    Duration::from_millis(80),
    Duration::from_millis(400),
];

#[test]
fn kill_9_during_a_large_truncate_leaves_no_stale_bytes_and_a_clean_store() {
    let mut m = Mounted::new();
    for (round, delay) in KILL_DELAYS.into_iter().enumerate() {
        let path = m.path(format!("big{round}"));
        let file = File::create(&path).unwrap();
        for chunk in 0..CHUNKS {
            file.write_all_at(b"x", chunk * CHUNK).unwrap();
        }
        file.sync_all().unwrap();
        drop(file);
        let full = (CHUNKS - 1) * CHUNK + 1;
        let cut_path = path.clone();
        let mut truncating = None;
        m.kill_daemon(|| {
            truncating = Some(thread::spawn(move || {
                // Fails with a dead connection if the kill comes first.
                let _ = OpenOptions::new()
                    .write(true)
                    .open(&cut_path)
                    .and_then(|file| file.set_len(KEPT).and_then(|()| file.sync_all()));
            }));
            thread::sleep(delay);
        });
        m.detach_dead_mount();
        truncating.unwrap().join().unwrap();
        m.fsck_clean();
        m.mount();

        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let size = file.metadata().unwrap().len();
        assert!(size == full || size == KEPT, "round {round}: size {size}");
        file.set_len(full).unwrap();
        let expected: &[u8] = if size == KEPT { b"\0" } else { b"x" };
        for chunk in [2, BATCH_OPS as u64, 2 * BATCH_OPS as u64 + 1, CHUNKS - 1] {
            let mut byte = [9u8];
            file.read_exact_at(&mut byte, chunk * CHUNK).unwrap();
            assert_eq!(
                &byte, expected,
                "round {round}: chunk {chunk} after size {size}"
            );
        }
        let mut kept = [0u8; 1];
        file.read_exact_at(&mut kept, CHUNK).unwrap();
        assert_eq!(&kept, b"x", "round {round}: a kept byte");
        println!("round {round}: killed {delay:?} into the truncate; size after: {size}");
    }
    m.finish();
}
