//! No bytes make a decoder panic: every decoder in `keys` is fed every key and value of a
//! real store, each cut at every length and with bytes flipped, and seeded random bytes.
//! A damaged store must give a clear error (fsck's report), never a crash. The decoders
//! are reached through `keys::RECORD_KINDS`, the table fsck's repair and salvage use too,
//! and the store the damage starts from holds a record of every kind in it.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use common::*;
use shoal_engine::internals::keys;
use shoal_engine::internals::store::{FjallStore, FjallTuning, Scan, Space, StoreView};
use shoal_engine::{store_dir, QuotaKind, QuotaLimits, QuotaSettings};

/// Calls every decoder on `key` and `value`, through each kind of record; results are
/// ignored, panics are the failure.
fn decode_all(key: &[u8], value: &[u8]) {
    for kind in keys::RECORD_KINDS {
        let _ = (kind.decode)(key, value);
    }
}

/// Every pair of a store holding files, directories, hard links, xattrs, counters, quotas
/// and an orphan, with the records only an operation in progress leaves (a detached tree
/// being deleted, the rest of a large truncate) added as those operations write them.
fn real_pairs() -> Vec<(Space, Vec<u8>, Vec<u8>)> {
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
    fs.link(big.ino, dir.ino, b"second name").unwrap();
    let limits = QuotaLimits {
        inodes_hard: 1000,
        ..QuotaLimits::default()
    };
    fs.set_quota_limits(QuotaKind::User, 1000, limits).unwrap();
    fs.set_quota_settings(QuotaSettings::default()).unwrap();
    let open = mkfile_with(&fs, ROOT_INO, b"open", b"unlinked while open");
    fs.open_file(open.ino);
    fs.unlink(ROOT_INO, b"open").unwrap();
    let closed = fs.close();
    let store =
        FjallStore::open(&store_dir::kv_path(&closed.store), &FjallTuning::default()).unwrap();
    let mut pairs = vec![
        (Space::Meta, keys::reclaim_key(dir.ino), Vec::new()),
        (
            Space::Meta,
            keys::trim_key(big.ino),
            keys::encode_trim(1, 4),
        ),
    ];
    for space in [Space::Meta, Space::Data] {
        store
            .scan(space, b"", &[0xff; 32], &mut |key, value| {
                // Chunk values are plain bytes; a short piece of each is enough.
                let value = &value[..value.len().min(256)];
                pairs.push((space, key.to_vec(), value.to_vec()));
                Scan::Continue
            })
            .unwrap();
    }
    pairs
}

#[test]
fn every_kind_of_record_is_there_and_decodes() {
    let pairs = real_pairs();
    for (space, key, value) in &pairs {
        let kind = keys::record_kind(*space, key)
            .unwrap_or_else(|| panic!("{space:?} key {key:02x?} is of no kind"));
        (kind.decode)(key, value).unwrap();
    }
    for kind in keys::RECORD_KINDS {
        let found = pairs.iter().any(|(space, key, _)| {
            keys::record_kind(*space, key).is_some_and(|of| of.name == kind.name)
        });
        assert!(found, "no {} record to start the damage from", kind.name);
    }
}

#[test]
fn no_damaged_key_or_value_makes_a_decoder_panic() {
    for (_, key, value) in real_pairs() {
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

#[test]
fn the_table_of_record_kinds_calls_every_decoder() {
    let keys_source = include_str!("../src/keys.rs");
    let table_source = include_str!("../src/keys/record_kinds.rs");
    let decoders: Vec<&str> = keys_source
        .split("pub fn ")
        .skip(1)
        .filter_map(|rest| rest.split('(').next())
        .filter(|name| name.starts_with("decode_"))
        .collect();
    assert!(decoders.len() >= 22, "{decoders:?}");
    for decoder in decoders {
        assert!(
            table_source.contains(&format!("{decoder}(")),
            "keys::{decoder} is in no row of keys::RECORD_KINDS, so the fuzz test misses it"
        );
    }
}
