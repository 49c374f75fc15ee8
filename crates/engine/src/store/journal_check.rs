//! Reads fjall's journals without changing them, and tells a torn tail from damage.
//!
//! fjall's own recovery truncates a journal at the first batch it cannot read, wherever
//! that is: a crash mid-append (a torn tail, normal) and a flipped byte in the middle of
//! the journal (every later batch lost) look the same to it, and it changes the file. This
//! module parses the same format read-only (fjall 3.1's `journal/entry.rs`: per batch a
//! Start entry (tag 1, item count u32, seqno u64), that many Item (tag 2) or Clear (tag 4)
//! entries, and an End entry (tag 3, xxh3 of the item entries u64, magic `FJL\x03`); all
//! little-endian) and classifies where it stops:
//!
//! - the end of the newest journal inside an incomplete last batch: a torn tail;
//! - anything else (a checksum mismatch, a bad entry, a sequence number not above the one
//!   before it, any stop in an older journal, a stop followed by more readable batches):
//!   damage, with the bytes that would be lost.
//!
//! The checksum covers a batch's items but not its sequence number. fjall takes a batch's
//! number under the journal's lock (`Batch::commit`) and recovery sets its counter above
//! every number it replays, so the numbers rise through each journal and from one journal
//! to the next; one that does not was damaged, and fjall would replay it as it reads (a
//! number flipped higher lets the batch shadow every later write of its keys; lower, and
//! recovery may skip it as already flushed). What the order cannot show: the newest batch's
//! number flipped higher (harmless: it is the newest write either way, fjall only counts
//! on from there), and the oldest batch's flipped lower, with no batch before it.

use std::fmt;
use std::path::{Path, PathBuf};

use super::journal_sync::journal_files;

const TAG_START: u8 = 1;
const TAG_ITEM: u8 = 2;
const TAG_END: u8 = 3;
const TAG_CLEAR: u8 = 4;
const END_MAGIC: &[u8; 4] = b"FJL\x03";
/// lsm-tree's value types, as an item entry stores them.
const VALUE: u8 = 0;
const TOMBSTONE: u8 = 1;
const WEAK_TOMBSTONE: u8 = 2;

/// Item entry: tag, value type, compression, keyspace id u64, key len u16, value len
/// u32, on-disk value len u32.
const ITEM_HEADER_BYTES: usize = 1 + 1 + 1 + 8 + 2 + 4 + 4;
const START_BYTES: usize = 1 + 4 + 8;
const CLEAR_BYTES: usize = 1 + 8;
const END_BYTES: usize = 1 + 8 + END_MAGIC.len();

/// Why a batch could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Unreadable {
    /// The bytes end inside it.
    Truncated,
    /// Its bytes are wrong (a reason for the report).
    Invalid(&'static str),
}

/// One journal file as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalFile {
    pub path: PathBuf,
    pub bytes: u64,
    /// Complete batches from the start, and where the last of them ends.
    pub batches: u64,
    pub valid_bytes: u64,
    pub last_seqno: Option<u64>,
    pub damage: Option<JournalDamage>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalDamage {
    /// The newest journal ends inside a batch: a write cut short by a crash. The batch
    /// was never acknowledged as durable; recovery drops it.
    TornTail { bytes: u64 },
    /// Unreadable bytes where more should follow: recovery would drop everything from
    /// `offset` on, `later_batches` readable batches among it.
    Corrupt {
        offset: u64,
        reason: String,
        later_batches: u64,
    },
}

impl JournalFile {
    pub fn is_damaged(&self) -> bool {
        matches!(self.damage, Some(JournalDamage::Corrupt { .. }))
    }
}

impl fmt::Display for JournalFile {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.path.display();
        match &self.damage {
            None => write!(out, "{name}: {} batches, clean", self.batches),
            Some(JournalDamage::TornTail { bytes }) => write!(
                out,
                "{name}: torn tail of {bytes} bytes after {} complete batches (a write cut \
                 short by a crash: normal, never acknowledged as durable)",
                self.batches
            ),
            Some(JournalDamage::Corrupt {
                offset,
                reason,
                later_batches,
            }) => write!(
                out,
                "{name}: damaged at byte {offset} of {} ({reason}); recovery would drop the \
                 {} bytes from there on, {later_batches} readable batches among them",
                self.bytes,
                self.bytes.saturating_sub(*offset)
            ),
        }
    }
}

/// Reads every journal in `folder` (oldest first) without changing any.
pub fn check_journals(folder: &Path) -> std::io::Result<Vec<JournalFile>> {
    let paths = journal_files(folder)?;
    let newest = paths.len().saturating_sub(1);
    let mut files: Vec<JournalFile> = Vec::with_capacity(paths.len());
    for (index, path) in paths.into_iter().enumerate() {
        let bytes = std::fs::read(&path)?;
        let after = files.iter().rev().find_map(|file| file.last_seqno);
        files.push(check_journal(path, &bytes, index == newest, after));
    }
    Ok(files)
}

/// Classifies one journal's bytes; `newest`: the journal appends went to last; `after`:
/// the last sequence number of the journals before it.
pub fn check_journal(path: PathBuf, bytes: &[u8], newest: bool, after: Option<u64>) -> JournalFile {
    let file_bytes = bytes.len() as u64;
    // fjall preallocates journals (64 MiB of zeros): what follows the last non-zero byte
    // was never written. A complete batch ends in its magic, never in a zero.
    let written = bytes
        .iter()
        .rposition(|&byte| byte != 0)
        .map_or(0, |last| last + 1);
    let bytes = &bytes[..written];
    let mut batches = 0u64;
    let read = read_batches(bytes, after, &mut |_, _| batches += 1);
    let (position, last_seqno) = (read.end, read.last_seqno);
    let damage = read.stop.map(|why| {
        let later_batches = count_later_batches(&bytes[position..]);
        let torn = newest && why == Unreadable::Truncated && later_batches == 0;
        if torn {
            JournalDamage::TornTail {
                bytes: (bytes.len() - position) as u64,
            }
        } else {
            JournalDamage::Corrupt {
                offset: position as u64,
                reason: match why {
                    Unreadable::Truncated if !newest => {
                        "an older journal ends inside a batch".to_string()
                    }
                    Unreadable::Truncated => "an incomplete batch".to_string(),
                    Unreadable::Invalid(reason) => reason.to_string(),
                },
                later_batches,
            }
        }
    });
    JournalFile {
        path,
        bytes: file_bytes,
        batches,
        valid_bytes: position as u64,
        last_seqno,
        damage,
    }
}

/// Where a run of whole batches from the start of some bytes ended.
struct BatchesRead {
    /// The end of the last whole batch in order.
    end: usize,
    last_seqno: Option<u64>,
    /// Why the next batch was not read; `None` when the bytes ended after a whole batch.
    stop: Option<Unreadable>,
}

/// Visits (batch bytes, sequence number) for each whole batch from the start of `bytes`
/// whose number is above `after` and the batch before it, and says where that stopped.
fn read_batches(
    bytes: &[u8],
    after: Option<u64>,
    visit: &mut dyn FnMut(&[u8], u64),
) -> BatchesRead {
    let mut read = BatchesRead {
        end: 0,
        last_seqno: after,
        stop: None,
    };
    while read.end < bytes.len() {
        let rest = &bytes[read.end..];
        match read_batch(rest) {
            Ok((_, seqno)) if read.last_seqno.is_some_and(|last| seqno <= last) => {
                read.stop = Some(Unreadable::Invalid(
                    "a batch's sequence number is not above the one before it",
                ));
                break;
            }
            Ok((length, seqno)) => {
                visit(&rest[..length], seqno);
                read.end += length;
                read.last_seqno = Some(seqno);
            }
            Err(why) => {
                read.stop = Some(why);
                break;
            }
        }
    }
    if read.end == 0 {
        // No batch of this journal read: its own last number is none.
        read.last_seqno = None;
    }
    read
}

/// Readable batches anywhere after the first byte of `rest` (resynchronising on each
/// byte that could start one).
fn count_later_batches(rest: &[u8]) -> u64 {
    let mut count = 0;
    let mut position = 1;
    while position < rest.len() {
        if rest[position] == TAG_START {
            if let Ok((length, _)) = read_batch(&rest[position..]) {
                count += 1;
                position += length;
                continue;
            }
        }
        position += 1;
    }
    count
}

/// One whole batch at the start of `bytes`: its length and sequence number.
fn read_batch(bytes: &[u8]) -> Result<(usize, u64), Unreadable> {
    let start = take(bytes, 0, START_BYTES)?;
    if start[0] != TAG_START {
        return Err(Unreadable::Invalid(
            "a batch does not begin with a start entry",
        ));
    }
    let item_count = u32::from_le_bytes(start[1..5].try_into().unwrap_or_default());
    let seqno = u64::from_le_bytes(start[5..13].try_into().unwrap_or_default());
    let mut position = START_BYTES;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for _ in 0..item_count {
        let tag = *take(bytes, position, 1)?.first().unwrap_or(&0);
        let length = match tag {
            TAG_ITEM => item_length(&bytes[position..])?,
            TAG_CLEAR => CLEAR_BYTES,
            _ => {
                return Err(Unreadable::Invalid(
                    "an entry of unknown kind inside a batch",
                ))
            }
        };
        hasher.update(take(bytes, position, length)?);
        position += length;
    }
    let end = take(bytes, position, END_BYTES)?;
    if end[0] != TAG_END {
        return Err(Unreadable::Invalid(
            "a batch holds more entries than it says",
        ));
    }
    if &end[9..] != END_MAGIC {
        return Err(Unreadable::Invalid("a batch's end marker is damaged"));
    }
    let expected = u64::from_le_bytes(end[1..9].try_into().unwrap_or_default());
    if hasher.digest() != expected {
        return Err(Unreadable::Invalid(
            "a batch's checksum does not match its bytes",
        ));
    }
    Ok((position + END_BYTES, seqno))
}

/// One write of a journal batch, as a salvage replays it: `value` `None` is a delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalRecord {
    pub keyspace_id: u64,
    pub seqno: u64,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// Visits the records of the complete batches from the start of a journal's `bytes`, up
/// to the first batch that does not read (`check_journal` tells what that is). A record
/// that does not decode (an lz4 value that fails) is reported, never visited.
pub fn journal_records(bytes: &[u8], visit: &mut dyn FnMut(JournalRecord)) -> Result<(), String> {
    let mut failed = Ok(());
    read_batches(bytes, None, &mut |batch, seqno| {
        if failed.is_ok() {
            failed = batch_records(batch, seqno, visit);
        }
    });
    failed
}

/// The item entries of one batch `read_batch` accepted.
fn batch_records(
    batch: &[u8],
    seqno: u64,
    visit: &mut dyn FnMut(JournalRecord),
) -> Result<(), String> {
    let mut position = START_BYTES;
    while let Some(&tag) = batch.get(position) {
        if tag == TAG_END {
            break;
        }
        if tag == TAG_CLEAR {
            return Err("a batch clears a keyspace, which shoal never does".into());
        }
        let truncated = |_| "a batch ends inside an entry".to_string();
        let length = item_length(&batch[position..]).map_err(truncated)?;
        let entry = take(batch, position, length).map_err(truncated)?;
        visit(item_record(entry, seqno)?);
        position += length;
    }
    Ok(())
}

/// An item entry (`ITEM_HEADER_BYTES`, key, value) as a record.
fn item_record(entry: &[u8], seqno: u64) -> Result<JournalRecord, String> {
    let (header, rest) = entry.split_at(ITEM_HEADER_BYTES);
    let value_type = header[1];
    let compression = header[2];
    let keyspace_id = u64::from_le_bytes(header[3..11].try_into().unwrap_or_default());
    let key_len = u16::from_le_bytes([header[11], header[12]]) as usize;
    let value_len = u32::from_le_bytes(header[13..17].try_into().unwrap_or_default()) as usize;
    let (key, stored) = rest.split_at(key_len.min(rest.len()));
    let value = match (value_type, compression) {
        (VALUE, 0) => Some(stored.to_vec()),
        (VALUE, _) => Some(
            lz4_flex::decompress(stored, value_len)
                .map_err(|error| format!("a journal value does not decompress: {error}"))?,
        ),
        (TOMBSTONE | WEAK_TOMBSTONE, _) => None,
        (other, _) => return Err(format!("a journal entry of unknown value type {other}")),
    };
    Ok(JournalRecord {
        keyspace_id,
        seqno,
        key: key.to_vec(),
        value,
    })
}

fn item_length(bytes: &[u8]) -> Result<usize, Unreadable> {
    let header = take(bytes, 0, ITEM_HEADER_BYTES)?;
    if header[2] > 1 {
        return Err(Unreadable::Invalid("an entry names an unknown compression"));
    }
    let key_len = u16::from_le_bytes([header[11], header[12]]) as usize;
    let on_disk_len = u32::from_le_bytes(header[17..21].try_into().unwrap_or_default()) as usize;
    Ok(ITEM_HEADER_BYTES + key_len + on_disk_len)
}

/// `bytes[from..from + length]`, or `Truncated` when they end first.
fn take(bytes: &[u8], from: usize, length: usize) -> Result<&[u8], Unreadable> {
    bytes
        .get(from..from.saturating_add(length))
        .ok_or(Unreadable::Truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a batch's sequence number starts, after its tag and item count.
    const SEQNO_OFFSET: usize = 1 + 4;

    /// Where each batch of a clean journal starts.
    fn batch_starts(bytes: &[u8]) -> Vec<usize> {
        let mut starts = Vec::new();
        let mut position = 0;
        read_batches(bytes, None, &mut |batch, _| {
            starts.push(position);
            position += batch.len();
        });
        starts
    }
    use crate::store::{Batch, FjallStore, FjallTuning, Space, Store};

    /// A journal fjall itself wrote: `batches` batches of a few keys each.
    fn written_journal(batches: u32) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path(), &FjallTuning::default()).unwrap();
        for round in 0..batches {
            let mut batch = Batch::default();
            batch.put(Space::Meta, round.to_be_bytes().to_vec(), vec![7; 100]);
            batch.put(Space::Data, round.to_be_bytes().to_vec(), vec![9; 3000]);
            batch.delete(Space::Meta, b"gone".to_vec());
            store.write(batch).unwrap();
        }
        store.sync().unwrap();
        drop(store);
        let path = journal_files(dir.path()).unwrap().pop().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        (dir, path, bytes)
    }

    #[test]
    fn a_journal_fjall_wrote_reads_clean() {
        let (_dir, path, bytes) = written_journal(20);
        let file = check_journal(path, &bytes, true, None);
        assert_eq!(file.damage, None, "{file}");
        assert!(file.batches >= 20, "{file}");
        assert!(bytes[file.valid_bytes as usize..].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_cut_in_the_last_batch_is_a_torn_tail_and_elsewhere_damage() {
        let (_dir, path, bytes) = written_journal(20);
        let written = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
        let bytes = bytes[..written].to_vec();
        let cut = &bytes[..bytes.len() - 10];
        let file = check_journal(path.clone(), cut, true, None);
        assert!(
            matches!(file.damage, Some(JournalDamage::TornTail { .. })),
            "{file}"
        );
        // The same cut in an older journal is damage.
        assert!(check_journal(path.clone(), cut, false, None).is_damaged());
        // Cut to half: the tail ends in the middle of a batch, and the journal looks
        // torn; the seqno recorded at open and close catches that (store_dir::state).
        let half = check_journal(path.clone(), &bytes[..bytes.len() / 2], true, None);
        assert!(half.batches < 20);
        // A flipped byte at the start, in the middle and near the end: damage, never a
        // torn tail, and the later batches are counted.
        for at in [0, bytes.len() / 2, bytes.len() - 40] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x55;
            let file = check_journal(path.clone(), &flipped, true, None);
            assert!(file.is_damaged(), "flip at {at}: {file}");
        }
        let mut flipped = bytes.clone();
        flipped[bytes.len() / 2] ^= 0x55;
        match check_journal(path, &flipped, true, None).damage {
            Some(JournalDamage::Corrupt { later_batches, .. }) => assert!(later_batches > 0),
            other => panic!("{other:?}"),
        }
    }

    /// The checksum does not cover a batch's sequence number: a flip of any of its bytes
    /// in a batch before the last breaks the order and is damage, and a salvage reads the
    /// same batches a check does.
    #[test]
    fn a_sequence_number_out_of_order_is_damage() {
        let (_dir, path, bytes) = written_journal(20);
        let starts = batch_starts(&bytes);
        let middle = starts[starts.len() / 2];
        for byte in 0..8 {
            let mut flipped = bytes.clone();
            flipped[middle + SEQNO_OFFSET + byte] ^= 0x5a;
            let file = check_journal(path.clone(), &flipped, true, None);
            assert!(file.is_damaged(), "seqno byte {byte}: {file}");
            let mut records = 0;
            journal_records(&flipped, &mut |_| records += 1).unwrap();
            let mut clean_records = 0;
            journal_records(&bytes[..file.valid_bytes as usize], &mut |_| {
                clean_records += 1
            })
            .unwrap();
            assert_eq!(records, clean_records, "seqno byte {byte}");
        }
        // The newest batch: lower is out of order; higher is the newest write either way.
        let last = *starts.last().unwrap() + SEQNO_OFFSET;
        let number = |bytes: &[u8]| u64::from_le_bytes(bytes[last..last + 8].try_into().unwrap());
        for byte in 0..8 {
            let mut flipped = bytes.clone();
            flipped[last + byte] ^= 0x5a;
            let lower = number(&flipped) < number(&bytes);
            let file = check_journal(path.clone(), &flipped, true, None);
            assert_eq!(file.is_damaged(), lower, "last seqno byte {byte}: {file}");
        }
        // Across journals: a newer journal's first batch must come after the older's last.
        let clean = check_journal(path.clone(), &bytes, true, None);
        let last = clean.last_seqno.unwrap();
        assert!(check_journal(path.clone(), &bytes, true, Some(last)).is_damaged());
        let first = check_journal(path.clone(), &bytes[..starts[1]], true, None);
        let before_first = first.last_seqno.unwrap() - 1;
        assert_eq!(
            check_journal(path, &bytes, true, Some(before_first)).damage,
            None
        );
    }

    #[test]
    fn no_bytes_make_the_reader_panic() {
        let mut state = 0x1234_5678_9abc_def0u64;
        for round in 0..2000 {
            let len = (round * 7) % 300;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    // Mostly small values, so tags and lengths are often plausible.
                    (state % 6) as u8
                })
                .collect();
            let _ = check_journal(PathBuf::from("x"), &bytes, round % 2 == 0, None);
        }
    }
}
