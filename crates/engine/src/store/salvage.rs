//! Reading a damaged key-value store around its damage, as `fsck --repair` salvages one:
//! a range scan stops at the first table block that fails its checksum, so the scan is
//! restarted past it, and a value kept in a blob file that fails is skipped on its own.
//!
//! Where a scan fails, it is restarted just after the last key read; if that fails at
//! once, start keys further on are probed with growing steps until one reads, and the
//! boundary between the last failing and the first reading start is bisected, so one
//! damaged block costs about the keys it held. Keys are compared as numbers made of their
//! first `KEY_NUMBER_BYTES` bytes (shoal's keys are a tag byte and big-endian numbers:
//! `keys.rs`), which is where the steps and the bisection happen.
//!
//! The bisection finds one boundary between a failing and a reading start: with two
//! damaged stretches close together in key order it may land past the good keys between
//! them. Damage fjall meets when it opens the store (a table's index or metadata, a file
//! gone or cut short) fails the open; there is nothing to read around then.

use fjall::Keyspace;

use super::{FjallStore, Scan, Space, StoreError};

/// Bytes of a key read as the number probes step and bisect over: the tag, an inode
/// number and most of the next number.
const KEY_NUMBER_BYTES: usize = 16;

/// Why a read failed: damage (a checksum, an undecodable block or blob) is skipped; any
/// other error (EIO, a full device) stops the salvage.
#[derive(Debug)]
pub enum ReadFailure {
    Damaged(String),
    Other(StoreError),
}

impl From<fjall::Error> for ReadFailure {
    fn from(error: fjall::Error) -> Self {
        if is_damage(&error) {
            ReadFailure::Damaged(error.to_string())
        } else {
            ReadFailure::Other(error.into())
        }
    }
}

/// Checksums, headers, tags, decompression: the bytes are there but wrong.
fn is_damage(error: &fjall::Error) -> bool {
    use std::io::ErrorKind;
    match error {
        fjall::Error::Storage(fjall::LsmError::Io(io)) | fjall::Error::Io(io) => {
            matches!(io.kind(), ErrorKind::InvalidData | ErrorKind::UnexpectedEof)
        }
        fjall::Error::Storage(_)
        | fjall::Error::Decompress(_)
        | fjall::Error::InvalidTrailer
        | fjall::Error::InvalidTag(_) => true,
        _ => false,
    }
}

/// Keys of a store in order, from a start key, failing where the store's files do.
pub trait KeyReader {
    /// Visits the keys in `[start, end)` of `space` until `visit` says stop or a read
    /// fails; the keys before the failure are visited.
    fn keys(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8]) -> Scan,
    ) -> Result<(), ReadFailure>;
}

impl KeyReader for FjallStore {
    fn keys(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8]) -> Scan,
    ) -> Result<(), ReadFailure> {
        let keyspace: &Keyspace = self.keyspace(space);
        // `key()` reads only the table: a value in a blob file is not resolved.
        for guard in keyspace.range(start..end) {
            if visit(&guard.key()?) == Scan::Stop {
                break;
            }
        }
        Ok(())
    }
}

impl FjallStore {
    /// The value of `key`, or why it cannot be read.
    pub fn salvage_value(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, ReadFailure> {
        Ok(self.keyspace(space).get(key)?.map(|value| value.to_vec()))
    }

    /// The first damage a full read of every key and value meets, if any: whether the
    /// store needs salvaging rather than repair in place.
    pub fn first_damage(&self) -> Result<Option<String>, StoreError> {
        for space in [Space::Meta, Space::Data] {
            for guard in self.keyspace(space).iter() {
                match guard.into_inner().map_err(ReadFailure::from) {
                    Ok(_) => {}
                    Err(ReadFailure::Damaged(what)) => return Ok(Some(what)),
                    Err(ReadFailure::Other(error)) => return Err(error),
                }
            }
        }
        Ok(None)
    }
}

/// Keys lost to damage: every key after `after` and before `before` (`None`: the start or
/// the end of the range scanned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub after: Option<Vec<u8>>,
    pub before: Option<Vec<u8>>,
    pub error: String,
}

/// Visits every key of `[start, end)` in `space` that reads, skipping damaged stretches;
/// returns them. Only errors other than damage stop it.
pub fn salvage_keys(
    reader: &dyn KeyReader,
    space: Space,
    start: &[u8],
    end: &[u8],
    visit: &mut dyn FnMut(&[u8]) -> Scan,
) -> Result<Vec<Skipped>, StoreError> {
    let mut skipped = Vec::new();
    let mut from = start.to_vec();
    let mut last_good: Option<Vec<u8>> = None;
    loop {
        let mut read_any = false;
        let mut stopped = false;
        let outcome = reader.keys(space, &from, end, &mut |key| {
            read_any = true;
            last_good = Some(key.to_vec());
            let next = visit(key);
            stopped = next == Scan::Stop;
            next
        });
        let error = match outcome {
            Ok(()) => return Ok(skipped),
            Err(ReadFailure::Other(error)) => return Err(error),
            Err(ReadFailure::Damaged(_)) if stopped => return Ok(skipped),
            Err(ReadFailure::Damaged(error)) => error,
        };
        if read_any {
            // Restart just after the last key read: the failing block may start there.
            from = successor(last_good.as_deref().unwrap_or(&from));
            continue;
        }
        let resume = next_readable(reader, space, &from, end)?;
        skipped.push(Skipped {
            after: last_good.clone(),
            before: resume.clone(),
            error: format!("a damaged table block: {error}"),
        });
        match resume {
            Some(key) => from = key,
            None => return Ok(skipped),
        }
    }
}

/// The smallest key greater than `key`.
fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

/// Whether a scan from `start` reads its first key (or finds none) without damage.
fn reads_from(
    reader: &dyn KeyReader,
    space: Space,
    start: &[u8],
    end: &[u8],
) -> Result<bool, StoreError> {
    match reader.keys(space, start, end, &mut |_| Scan::Stop) {
        Ok(()) => Ok(true),
        Err(ReadFailure::Damaged(_)) => Ok(false),
        Err(ReadFailure::Other(error)) => Err(error),
    }
}

/// Given that a scan from `failing` fails at once: the first start key past it from which
/// a scan reads, found by growing steps and then bisection; `None` if none before `end`.
fn next_readable(
    reader: &dyn KeyReader,
    space: Space,
    failing: &[u8],
    end: &[u8],
) -> Result<Option<Vec<u8>>, StoreError> {
    let mut low = key_number(failing);
    // The last start before `end`: probes stay inside the range.
    let last = key_number(end).saturating_sub(1);
    let mut step: u128 = 1;
    let high = loop {
        if low >= last {
            return Ok(None);
        }
        let probe = low.saturating_add(step).min(last);
        if reads_from(reader, space, &number_key(probe), end)? {
            break probe;
        }
        low = probe;
        step = step.saturating_mul(2);
    };
    let (mut low, mut high) = (low, high);
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if reads_from(reader, space, &number_key(middle), end)? {
            high = middle;
        } else {
            low = middle;
        }
    }
    Ok(Some(number_key(high)))
}

/// The first `KEY_NUMBER_BYTES` of `key` (zero-padded) as a big-endian number: at most
/// `key` in key order.
fn key_number(key: &[u8]) -> u128 {
    let mut bytes = [0u8; KEY_NUMBER_BYTES];
    let used = key.len().min(KEY_NUMBER_BYTES);
    bytes[..used].copy_from_slice(&key[..used]);
    u128::from_be_bytes(bytes)
}

/// The key of `KEY_NUMBER_BYTES` bytes whose number is `number`.
fn number_key(number: u128) -> Vec<u8> {
    number.to_be_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Keys in memory where reading any key of `damaged` fails, as a scan that reaches a
    /// block that fails its checksum does.
    struct DamagedKeys {
        keys: BTreeSet<Vec<u8>>,
        damaged: Vec<(Vec<u8>, Vec<u8>)>,
    }

    impl KeyReader for DamagedKeys {
        fn keys(
            &self,
            _: Space,
            start: &[u8],
            end: &[u8],
            visit: &mut dyn FnMut(&[u8]) -> Scan,
        ) -> Result<(), ReadFailure> {
            for key in self.keys.range(start.to_vec()..end.to_vec()) {
                let in_damage = self
                    .damaged
                    .iter()
                    .any(|(low, high)| low <= key && key < high);
                if in_damage {
                    return Err(ReadFailure::Damaged("checksum mismatch".into()));
                }
                if visit(key) == Scan::Stop {
                    break;
                }
            }
            Ok(())
        }
    }

    fn inode(ino: u64) -> Vec<u8> {
        crate::keys::inode_key(ino)
    }

    /// Salvages the keys of inodes 1..=1000 with `damaged` stretches; returns the inodes
    /// read and the stretches skipped.
    fn salvage_inodes(damaged: &[(u64, u64)]) -> (Vec<u64>, Vec<Skipped>) {
        let store = DamagedKeys {
            keys: (1..=1000).map(inode).collect(),
            damaged: damaged
                .iter()
                .map(|&(low, high)| (inode(low), inode(high)))
                .collect(),
        };
        let mut read = Vec::new();
        let skipped = salvage_keys(&store, Space::Meta, b"", b"\xff", &mut |key| {
            read.push(crate::keys::decode_inode_key(key).unwrap());
            Scan::Continue
        })
        .unwrap();
        (read, skipped)
    }

    #[test]
    fn a_scan_skips_each_damaged_stretch_and_keeps_every_other_key() {
        let (read, skipped) = salvage_inodes(&[(100, 180), (990, 2000)]);
        let want: Vec<u64> = (1..100).chain(180..990).collect();
        assert_eq!(read, want);
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert_eq!(skipped[0].after, Some(inode(99)));
        assert_eq!(skipped[1].after, Some(inode(989)));
        // The scan resumes just past the damage, before the next good key.
        let resume = skipped[0].before.clone().unwrap();
        assert!(inode(179) < resume && resume <= inode(180), "{resume:?}");
        assert!(skipped[1].before.clone().unwrap() > inode(1000));
    }

    #[test]
    fn damage_at_the_first_key_loses_only_the_damaged_stretch() {
        let (read, skipped) = salvage_inodes(&[(1, 5)]);
        assert_eq!(read, (5..=1000).collect::<Vec<u64>>());
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].after, None);
    }

    #[test]
    fn an_undamaged_range_reads_whole_and_skips_nothing() {
        let store = DamagedKeys {
            keys: (1..=50).map(inode).collect(),
            damaged: Vec::new(),
        };
        let mut count = 0;
        let skipped = salvage_keys(&store, Space::Meta, b"", b"\xff", &mut |_| {
            count += 1;
            Scan::Continue
        })
        .unwrap();
        assert_eq!((count, skipped.len()), (50, 0));
    }
}
