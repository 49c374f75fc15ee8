//! No bytes make a decoder panic: every decoder in `keys` is fed every key and value of a
//! real store, each cut at every length and with bytes flipped, and seeded random bytes.
//! A damaged store must give a clear error (fsck's report), never a crash.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use common::*;
use shoal_engine::internals::keys;
use shoal_engine::internals::store::{FjallStore, FjallTuning, Scan, Space, StoreView};
use shoal_engine::store_dir;

/// Calls every decoder on `key` and `value`; results are ignored, panics are the failure.
fn decode_all(key: &[u8], value: &[u8]) {
    let _ = keys::decode_entry_key(key);
    let _ = keys::decode_entry(key, value);
    let _ = keys::decode_inode_key(key);
    let _ = keys::decode_inode(1, value);
    let _ = keys::decode_xattr_key(key);
    let _ = keys::decode_orphan_key(key);
    let _ = keys::decode_counter_key(key);
    let _ = keys::decode_usage(key, value);
    let _ = keys::decode_inode_usage(1, value);
    let _ = keys::decode_quota_record_key(key);
    let _ = keys::decode_quota_record(key, value);
    let _ = keys::decode_quota_settings(value);
    let _ = keys::decode_chunk_key(key);
    let _ = keys::decode_superblock(value);
}

/// Every pair of a store holding files, directories, xattrs, counters and quotas.
fn real_pairs() -> Vec<(Vec<u8>, Vec<u8>)> {
    let fs = disk_with(no_thread());
    let dir = mkdir(&fs, ROOT_INO, b"dir");
    mkfile_with(&fs, dir.ino, b"inline", b"small file");
    let big = mkfile_with(&fs, ROOT_INO, b"big", &vec![3u8; 200_000]);
    fs.setxattr(
        big.ino,
        b"user.note",
        b"value",
        shoal_engine::XattrMode::Either,
    )
    .unwrap();
    let closed = fs.close();
    let store =
        FjallStore::open(&store_dir::kv_path(&closed.store), &FjallTuning::default()).unwrap();
    let mut pairs = Vec::new();
    for space in [Space::Meta, Space::Data] {
        store
            .scan(space, b"", &[0xff; 32], &mut |key, value| {
                // Chunk values are plain bytes; a short piece of each is enough.
                let value = &value[..value.len().min(256)];
                pairs.push((key.to_vec(), value.to_vec()));
                Scan::Continue
            })
            .unwrap();
    }
    assert!(pairs.len() > 8, "{} pairs", pairs.len());
    pairs
}

#[test]
fn no_damaged_key_or_value_makes_a_decoder_panic() {
    for (key, value) in real_pairs() {
        decode_all(&key, &value);
        for cut in 0..key.len() {
            decode_all(&key[..cut], &value);
        }
        for cut in 0..value.len() {
            decode_all(&key, &value[..cut]);
        }
        for at in 0..key.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut damaged = key.clone();
                damaged[at] ^= flip;
                decode_all(&damaged, &value);
            }
        }
        for at in 0..value.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut damaged = value.clone();
                damaged[at] ^= flip;
                decode_all(&key, &damaged);
            }
        }
        let mut longer = value.clone();
        longer.extend_from_slice(&[0xff; 64]);
        decode_all(&key, &longer);
    }
}

#[test]
fn no_random_bytes_make_a_decoder_panic() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..50_000 {
        let key_len = (next() % 64) as usize;
        let value_len = (next() % 160) as usize;
        // Small byte values half the time: plausible tags, kinds and lengths.
        let small = next() % 2 == 0;
        let mut byte = || {
            let value = next();
            if small {
                (value % 4) as u8
            } else {
                value as u8
            }
        };
        let key: Vec<u8> = (0..key_len).map(|_| byte()).collect();
        let value: Vec<u8> = (0..value_len).map(|_| byte()).collect();
        decode_all(&key, &value);
    }
}
