//! Backups: every key-value pair of a consistent snapshot, streamed to one file, and a new
//! store made from such a file. A backup of a live filesystem is taken from the store's
//! snapshot, so it holds a state the filesystem really had (each operation whole or not
//! at all), while writes go on.
//!
//! The file, all integers big-endian:
//! - header: `BACKUP_MAGIC` (8 bytes), backup version:u32, store format version:u32,
//!   label length:u16 and label bytes (the source's label, kept by a restore)
//! - one record per pair: space:u8 (`RECORD_META` or `RECORD_DATA`), key length:u32, key,
//!   value length:u32, value
//! - trailer: `RECORD_END`:u8, pairs:u64, then the XXH3-64 of every byte before it
//!
//! A restore reads the whole file and checks the trailer before it touches the target
//! directory, so a damaged or truncated backup costs nothing.

use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use xxhash_rust::xxh3::Xxh3;

use crate::engine::Engine;
use crate::keys::FORMAT_VERSION;
use crate::store::{Batch, FjallStore, FjallTuning, Scan, Space, Store, StoreError, StoreView};
use crate::store_dir::identity::{self, StoreIdentity};
use crate::store_dir::open::OpenError;
use crate::store_dir::{self, StoreDirError};

const BACKUP_MAGIC: &[u8; 8] = b"shoalbak";
const BACKUP_VERSION: u32 = 1;
const RECORD_META: u8 = 0;
const RECORD_DATA: u8 = 1;
const RECORD_END: u8 = 0xff;
/// Bigger than any key tag, so `[]..[END_KEY]` spans a whole space.
const END_KEY: &[u8] = &[0xff];
/// Keys are short; values are at most a chunk or an inode with inline data. Anything
/// larger is damage, refused before allocating for it.
const MAX_RECORD_PART_BYTES: u32 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("not a shoal backup (bad magic)")]
    NotABackup,
    #[error("backup version {0} is not supported (this shoal reads version {BACKUP_VERSION})")]
    UnsupportedBackup(u32),
    #[error("the backup is of store format {0}; this shoal writes format {FORMAT_VERSION}")]
    UnsupportedFormat(u32),
    #[error("the backup is damaged: {0}")]
    Damaged(String),
}

impl From<StoreDirError> for BackupError {
    fn from(error: StoreDirError) -> Self {
        BackupError::Open(error.into())
    }
}

/// What a backup holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupSummary {
    pub pairs: u64,
    /// Bytes of the backup file.
    pub bytes: u64,
    pub label: Option<String>,
}

/// Counts and hashes what goes through it.
struct Hashing<W> {
    inner: W,
    hasher: Xxh3,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.hasher.update(&buf[..written]);
        self.bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.hasher.update(&buf[..read]);
        self.bytes += read as u64;
        Ok(read)
    }
}

impl Engine {
    /// Writes a backup of a snapshot of this filesystem; writes go on meanwhile.
    /// `progress` is told the bytes written so far, now and then.
    pub fn backup(
        &self,
        label: Option<&str>,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<BackupSummary, BackupError> {
        let snapshot = self.store().snapshot();
        write_backup(snapshot.as_ref(), label, out, progress)
    }
}

/// A backup of the unmounted store in `dir` (locked meanwhile).
pub fn backup_store_dir(
    dir: &Path,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<BackupSummary, BackupError> {
    let label = identity::read(dir)?.and_then(|identity| identity.label);
    let (_lock, store) = crate::store_dir::open::open_offline(dir)?;
    let snapshot = store.snapshot();
    write_backup(snapshot.as_ref(), label.as_deref(), out, progress)
}

fn write_backup(
    view: &dyn StoreView,
    label: Option<&str>,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<BackupSummary, BackupError> {
    let mut out = Hashing {
        inner: BufWriter::new(out),
        hasher: Xxh3::new(),
        bytes: 0,
    };
    let label_bytes = label.unwrap_or("").as_bytes();
    out.write_all(BACKUP_MAGIC)?;
    out.write_all(&BACKUP_VERSION.to_be_bytes())?;
    out.write_all(&FORMAT_VERSION.to_be_bytes())?;
    let label_len = u16::try_from(label_bytes.len())
        .map_err(|_| BackupError::Damaged("label too long".into()))?;
    out.write_all(&label_len.to_be_bytes())?;
    out.write_all(label_bytes)?;
    let mut pairs = 0u64;
    let mut failure = None;
    for (space, tag) in [(Space::Meta, RECORD_META), (Space::Data, RECORD_DATA)] {
        view.scan(space, &[], END_KEY, &mut |key, value| {
            let written = write_record(&mut out, tag, key, value);
            if let Err(error) = written {
                failure = Some(error);
                return Scan::Stop;
            }
            pairs += 1;
            if pairs.is_multiple_of(4096) {
                progress(out.bytes);
            }
            Scan::Continue
        })?;
        if let Some(error) = failure.take() {
            return Err(error.into());
        }
    }
    out.write_all(&[RECORD_END])?;
    out.write_all(&pairs.to_be_bytes())?;
    let checksum = out.hasher.digest();
    out.inner.write_all(&checksum.to_be_bytes())?;
    out.inner.flush()?;
    let bytes = out.bytes + 8;
    progress(bytes);
    Ok(BackupSummary {
        pairs,
        bytes,
        label: label.map(str::to_string),
    })
}

fn write_record(out: &mut dyn Write, tag: u8, key: &[u8], value: &[u8]) -> io::Result<()> {
    let length = |part: &[u8]| {
        u32::try_from(part.len())
            .map(u32::to_be_bytes)
            .map_err(|_| io::Error::other("a key or value over 4 GiB"))
    };
    out.write_all(&[tag])?;
    out.write_all(&length(key)?)?;
    out.write_all(key)?;
    out.write_all(&length(value)?)?;
    out.write_all(value)
}

fn read_array<const N: usize>(input: &mut dyn Read) -> Result<[u8; N], BackupError> {
    let mut bytes = [0u8; N];
    input.read_exact(&mut bytes).map_err(|error| {
        if error.kind() == io::ErrorKind::UnexpectedEof {
            BackupError::Damaged("the file ends early (truncated?)".into())
        } else {
            BackupError::Io(error)
        }
    })?;
    Ok(bytes)
}

fn read_part(input: &mut dyn Read) -> Result<Vec<u8>, BackupError> {
    let len = u32::from_be_bytes(read_array(input)?);
    if len > MAX_RECORD_PART_BYTES {
        return Err(BackupError::Damaged(format!(
            "a record part of {len} bytes"
        )));
    }
    let mut part = vec![0u8; len as usize];
    input
        .read_exact(&mut part)
        .map_err(|_| BackupError::Damaged("the file ends inside a record (truncated?)".into()))?;
    Ok(part)
}

/// Reads a whole backup, handing each pair to `pair`, and checks its trailer.
fn read_backup(
    input: &mut dyn Read,
    pair: &mut dyn FnMut(Space, Vec<u8>, Vec<u8>) -> Result<(), BackupError>,
    progress: &mut dyn FnMut(u64),
) -> Result<BackupSummary, BackupError> {
    let mut input = Hashing {
        inner: BufReader::new(input),
        hasher: Xxh3::new(),
        bytes: 0,
    };
    if &read_array::<8>(&mut input)? != BACKUP_MAGIC {
        return Err(BackupError::NotABackup);
    }
    let version = u32::from_be_bytes(read_array(&mut input)?);
    if version != BACKUP_VERSION {
        return Err(BackupError::UnsupportedBackup(version));
    }
    let format = u32::from_be_bytes(read_array(&mut input)?);
    if format != FORMAT_VERSION {
        return Err(BackupError::UnsupportedFormat(format));
    }
    let label_len = u16::from_be_bytes(read_array(&mut input)?);
    let mut label = vec![0u8; usize::from(label_len)];
    input
        .read_exact(&mut label)
        .map_err(|_| BackupError::Damaged("the file ends in its header".into()))?;
    let label = String::from_utf8(label)
        .map_err(|_| BackupError::Damaged("the label is not UTF-8".into()))?;
    let mut pairs = 0u64;
    loop {
        let [tag] = read_array::<1>(&mut input)?;
        let space = match tag {
            RECORD_META => Space::Meta,
            RECORD_DATA => Space::Data,
            RECORD_END => break,
            other => return Err(BackupError::Damaged(format!("unknown record type {other}"))),
        };
        let key = read_part(&mut input)?;
        let value = read_part(&mut input)?;
        pair(space, key, value)?;
        pairs += 1;
        if pairs.is_multiple_of(4096) {
            progress(input.bytes);
        }
    }
    let counted = u64::from_be_bytes(read_array(&mut input)?);
    let expected = input.hasher.digest();
    let checksum = u64::from_be_bytes(read_array(&mut input.inner)?);
    if counted != pairs || checksum != expected {
        return Err(BackupError::Damaged(
            "the checksum does not match its contents".into(),
        ));
    }
    let mut rest = [0u8; 1];
    if input.inner.read(&mut rest)? != 0 {
        return Err(BackupError::Damaged("bytes after the end".into()));
    }
    let bytes = input.bytes + 8;
    progress(bytes);
    Ok(BackupSummary {
        pairs,
        bytes,
        label: (!label.is_empty()).then_some(label),
    })
}

/// Reads a whole backup and checks it, changing nothing.
pub fn verify_backup(
    input: &mut dyn Read,
    progress: &mut dyn FnMut(u64),
) -> Result<BackupSummary, BackupError> {
    read_backup(input, &mut |_, _, _| Ok(()), progress)
}

/// A new store in `dir` (as mkfs: empty or missing, or an existing store with `force`) holding
/// exactly what the backup holds, with a new UUID and the backup's label. The backup is
/// checked whole first: a bad one leaves `dir` untouched. `progress` counts the bytes of
/// both passes, so it ends at twice the file's size.
pub fn restore_backup<F: Read + Seek>(
    input: &mut F,
    dir: &Path,
    force: bool,
    progress: &mut dyn FnMut(u64),
) -> Result<BackupSummary, BackupError> {
    let start = input.stream_position()?;
    let checked = verify_backup(input, progress)?;
    input.seek(SeekFrom::Start(start))?;
    let identity = StoreIdentity::new(checked.label.as_deref())?;
    let overwrite = if force {
        store_dir::Overwrite::Store
    } else {
        store_dir::Overwrite::Nothing
    };
    store_dir::prepare_new(dir, overwrite)?;
    let store = FjallStore::open(&store_dir::kv_path(dir), &FjallTuning::default())?;
    let mut batch = Batch::default();
    let write = |space, key, value, batch: &mut Batch| -> Result<(), BackupError> {
        batch.put(space, key, value);
        if batch.len() >= crate::defaults::BATCH_OPS
            || batch.bytes() >= crate::defaults::BATCH_BYTES
        {
            store.write(std::mem::take(batch))?;
        }
        Ok(())
    };
    let summary = read_backup(
        input,
        &mut |space, key, value| write(space, key, value, &mut batch),
        &mut |bytes| progress(checked.bytes + bytes),
    )?;
    store.write(batch)?;
    store.sync()?;
    drop(store);
    identity::write(dir, &identity)?;
    // Last, as mkfs: until FORMAT exists the directory is not a store.
    store_dir::write_format(dir)?;
    // Private as mkfs makes it: the directory may have existed (0755), and fjall's files
    // follow the caller's umask.
    store_dir::access::make_private(dir)
        .map_err(|error| store_dir::StoreDirError::Io(dir.into(), error))?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;
    use crate::{Caller, EngineConfig, FileKind, NewInode, ROOT_INO};

    fn sample_filesystem() -> std::sync::Arc<Engine> {
        let fs = Engine::open_memory(EngineConfig::default()).unwrap();
        let me = Caller { uid: 7, gid: 8 };
        let dir = fs.mkdir(ROOT_INO, b"dir", 0o755, me).unwrap();
        let file = NewInode {
            kind: FileKind::Regular,
            perm: 0o644,
            rdev: 0,
            target: b"",
        };
        let small = fs.create(dir.ino, b"small", &file, me).unwrap();
        fs.write(small.ino, 0, b"hello").unwrap();
        let big = fs.create(ROOT_INO, b"big", &file, me).unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        fs.write(big.ino, 0, &data).unwrap();
        fs
    }

    fn backup_bytes(fs: &Engine) -> Vec<u8> {
        let mut bytes = Vec::new();
        let summary = fs.backup(Some("lab"), &mut bytes, &mut |_| {}).unwrap();
        assert_eq!(summary.bytes, bytes.len() as u64);
        bytes
    }

    #[test]
    fn a_restored_store_holds_what_was_backed_up_and_is_consistent() {
        let fs = sample_filesystem();
        let bytes = backup_bytes(&fs);
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("restored");
        let summary = restore_backup(&mut Cursor::new(&bytes), &store, false, &mut |_| {}).unwrap();
        assert_eq!(summary.label.as_deref(), Some("lab"));
        assert!(summary.pairs > 5);
        assert!(crate::fsck::fsck_store_dir(&store).unwrap().is_clean());
        let identity = identity::read(&store).unwrap().unwrap();
        assert_eq!(identity.label.as_deref(), Some("lab"));
        let restored = Engine::open(&store, EngineConfig::default()).unwrap();
        let dir_ino = restored.lookup(ROOT_INO, b"dir").unwrap().ino;
        let small = restored.lookup(dir_ino, b"small").unwrap();
        assert_eq!(restored.read(small.ino, 0, 100).unwrap(), b"hello");
        let big = restored.lookup(ROOT_INO, b"big").unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(restored.read(big.ino, 0, 400_000).unwrap(), data);
        // Backing up the restored store gives the same pairs.
        drop(restored);
        let mut again = Vec::new();
        let second = backup_store_dir(&store, &mut again, &mut |_| {}).unwrap();
        assert_eq!(second.pairs, summary.pairs);
    }

    #[test]
    fn a_damaged_backup_is_refused_and_changes_nothing() {
        let fs = sample_filesystem();
        let bytes = backup_bytes(&fs);
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("existing");
        Engine::mkfs(&store, false).unwrap();
        let before = fs_listing(&store);
        let mut flipped = bytes.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0x40;
        let truncated = bytes[..bytes.len() - 20].to_vec();
        let mut foreign = bytes.clone();
        foreign[0] = b'X';
        for (what, bad) in [
            ("flipped", flipped),
            ("truncated", truncated),
            ("foreign", foreign),
        ] {
            let result = restore_backup(&mut Cursor::new(&bad), &store, true, &mut |_| {});
            assert!(
                matches!(
                    result,
                    Err(BackupError::Damaged(_) | BackupError::NotABackup)
                ),
                "{what}: {result:?}"
            );
            assert_eq!(fs_listing(&store), before, "{what}: the store was touched");
        }
        assert!(crate::fsck::fsck_store_dir(&store).unwrap().is_clean());
    }

    fn fs_listing(dir: &Path) -> Vec<(String, u64)> {
        let mut files = Vec::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(path) = pending.pop() {
            for entry in std::fs::read_dir(&path).unwrap() {
                let entry = entry.unwrap();
                let meta = entry.metadata().unwrap();
                if meta.is_dir() {
                    pending.push(entry.path());
                } else if entry.file_name() != "lock" {
                    files.push((entry.path().display().to_string(), meta.len()));
                }
            }
        }
        files.sort();
        files
    }
}
