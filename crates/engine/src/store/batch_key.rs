//! The key of a batch's ordered maps (and so of the staged layers of delayed logging, which
//! are batches of up to a checkpoint's worth of pairs): bytes ordered as the LSM orders
//! them, compared eight at a time.
//!
//! Keys are a tag byte and one or two big-endian numbers, sometimes a name (9 to ~40
//! bytes), and the keys a staged layer holds share long prefixes (one directory's entries,
//! runs of inode numbers). A B-tree search compares the key with a few dozen others;
//! bytewise `Ord` does each through a `memcmp` call, which made inserts and lookups in a
//! staged layer 10-15% of the daemon's time in creates. A word compare is a load, a byte
//! swap and a compare.
//!
//! A staged layer holds up to a million keys, each in its own heap allocation, and an
//! insert compares the new key with a few dozen of them: reading each one's bytes was a
//! cache miss, and the staged layer's inserts 14% of an in-process create. So a map's key
//! also holds its first 16 bytes as two words, beside the pointer: a comparison reads the
//! other key's bytes only when those agree.

use std::borrow::Borrow;
use std::cmp::Ordering;

use ref_cast::RefCast;

/// Borrowed key bytes, as the maps look them up.
#[derive(RefCast, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct KeyBytes([u8]);

impl KeyBytes {
    pub fn new(bytes: &[u8]) -> &KeyBytes {
        KeyBytes::ref_cast(bytes)
    }
}

impl Ord for KeyBytes {
    fn cmp(&self, other: &KeyBytes) -> Ordering {
        compare(&self.0, &other.0)
    }
}

impl PartialOrd for KeyBytes {
    fn partial_cmp(&self, other: &KeyBytes) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Owned key bytes, as the maps hold them.
#[derive(Clone, Debug)]
pub struct BatchKey {
    /// The first 16 bytes, zero-padded, as two big-endian numbers: keys whose heads
    /// differ order as their heads do (a shorter key pads with zeros, which sort first), so
    /// most comparisons in a large map end here.
    head: [u64; 2],
    bytes: Vec<u8>,
}

impl BatchKey {
    pub fn new(bytes: Vec<u8>) -> BatchKey {
        let mut padded = [0u8; 16];
        let taken = bytes.len().min(16);
        padded[..taken].copy_from_slice(&bytes[..taken]);
        BatchKey {
            head: [word(&padded[..8]), word(&padded[8..])],
            bytes,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl Borrow<KeyBytes> for BatchKey {
    fn borrow(&self) -> &KeyBytes {
        KeyBytes::new(&self.bytes)
    }
}

impl PartialEq for BatchKey {
    fn eq(&self, other: &BatchKey) -> bool {
        self.head == other.head && self.bytes == other.bytes
    }
}

impl Eq for BatchKey {}

impl Ord for BatchKey {
    fn cmp(&self, other: &BatchKey) -> Ordering {
        self.head
            .cmp(&other.head)
            .then_with(|| compare(&self.bytes, &other.bytes))
    }
}

impl PartialOrd for BatchKey {
    fn partial_cmp(&self, other: &BatchKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Bytewise (lexicographic) order, as `<[u8]>::cmp` gives it.
fn compare(a: &[u8], b: &[u8]) -> Ordering {
    let mut a_words = a.chunks_exact(8);
    let mut b_words = b.chunks_exact(8);
    for (a_word, b_word) in a_words.by_ref().zip(b_words.by_ref()) {
        let (a_word, b_word) = (word(a_word), word(b_word));
        if a_word != b_word {
            return a_word.cmp(&b_word);
        }
    }
    // Equal so far: the shorter key's last part is under 8 bytes (or both are).
    let taken = a.len().min(b.len()) / 8 * 8;
    let (a_rest, b_rest) = (&a[taken..], &b[taken..]);
    for (x, y) in a_rest.iter().zip(b_rest) {
        if x != y {
            return x.cmp(y);
        }
    }
    a_rest.len().cmp(&b_rest.len())
}

/// Eight bytes as one big-endian number: numbers order as the bytes do.
fn word(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_be_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_as_bytes_do() {
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            b"E".to_vec(),
            b"E\0\0\0\0\0\0\0\x01".to_vec(),
            b"E\0\0\0\0\0\0\0\x01a".to_vec(),
            b"E\0\0\0\0\0\0\0\x01ab".to_vec(),
            b"E\0\0\0\0\0\0\0\x01abcdefgh".to_vec(),
            b"E\0\0\0\0\0\0\0\x01abcdefghi".to_vec(),
            b"E\0\0\0\0\0\0\0\x01abcdefgz".to_vec(),
            b"E\0\0\0\0\0\0\0\x02".to_vec(),
            b"E\0\0\0\0\0\0\x01\0".to_vec(),
            b"E\xff".to_vec(),
            b"I\0\0\0\0\0\0\0\x01".to_vec(),
            b"I\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\0".to_vec(),
            b"I\0\0\0\0\0\0\0\x01\xff\xff\xff\xff\xff\xff\xff\xff\x00".to_vec(),
            vec![0xff; 17],
        ];
        assert_orders_as_bytes(&keys);
    }

    /// Both ways of comparing, the borrowed one and the held one with its head, against
    /// bytewise order, on every pair.
    fn assert_orders_as_bytes(keys: &[Vec<u8>]) {
        let held: Vec<BatchKey> = keys.iter().cloned().map(BatchKey::new).collect();
        for (a, held_a) in keys.iter().zip(&held) {
            for (b, held_b) in keys.iter().zip(&held) {
                assert_eq!(compare(a, b), a.cmp(b), "{a:?} vs {b:?}");
                assert_eq!(held_a.cmp(held_b), a.cmp(b), "held {a:?} vs {b:?}");
                assert_eq!(held_a == held_b, a == b, "held {a:?} == {b:?}");
            }
        }
    }

    #[test]
    fn orders_random_keys_with_shared_prefixes_as_bytes_do() {
        // A small generator (no dependency): a prefix cut from one of two long keys, then
        // a short tail over a 3-letter alphabet, so keys share prefixes of every length
        // (across the 8-byte words) and are often prefixes of each other.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 33) as usize
        };
        let stems: [&[u8]; 2] = [
            b"E\0\0\0\0\0\0\x04\x01name-of-a-file",
            b"I\0\0\0\0\0\0\x04\x01\xff\0\x80",
        ];
        let keys: Vec<Vec<u8>> = (0..600)
            .map(|_| {
                let stem = stems[next() % 2];
                let mut key = stem[..next() % (stem.len() + 1)].to_vec();
                let tail = next() % 12;
                key.extend((0..tail).map(|_| [0u8, 0x80, 0xff][next() % 3]));
                key
            })
            .collect();
        assert_orders_as_bytes(&keys);
    }

    #[test]
    fn orders_every_short_pair_as_bytes_do() {
        // Every key of up to 2 bytes over a small alphabet, and the same padded past a
        // word, against each other.
        let alphabet = [0u8, 1, 0x7f, 0x80, 0xff];
        let mut keys = vec![vec![]];
        for &x in &alphabet {
            keys.push(vec![x]);
            for &y in &alphabet {
                keys.push(vec![x, y]);
            }
        }
        let padded: Vec<Vec<u8>> = keys
            .iter()
            .map(|key| [b"R1234567".as_slice(), key].concat())
            .collect();
        let long_padded: Vec<Vec<u8>> = keys
            .iter()
            .map(|key| [b"R123456789abcde".as_slice(), key].concat())
            .collect();
        for set in [&keys, &padded, &long_padded] {
            assert_orders_as_bytes(set);
        }
    }
}
