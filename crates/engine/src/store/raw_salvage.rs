//! Reading a damaged key-value store's files directly, as `fsck --repair` salvages one,
//! whether fjall opens it (blocks or blobs that fail their checksums) or not (a table or
//! blob file gone or cut short, a damaged table index, version file or `current`): block
//! by block (`lsm_tree::salvage`), so damage costs exactly the records it held, and for
//! each key the record with the highest sequence number wins, deletes included, as in
//! fjall.
//!
//! Which tables: those the tree's version file lists, when `current` vouches for it (its
//! checksum), or else the newest version file that reads; stale tables a compaction left
//! behind must not bring deleted keys back. With no readable version file every table file
//! is read and sequence numbers decide (a key whose delete a compaction already dropped
//! could come back then; the report says so). The journals are read after the tables
//! (`journal_check::journal_records`): their batches are the newest writes.
//!
//! Memory: the winning records are held in memory until they are written out, values of
//! the metadata keyspace and blob pointers of the data keyspace (file bytes are read from
//! the blob files one at a time as they are copied): about the tables' size.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use lsm_tree::salvage::{self as raw, VersionFiles};
use lsm_tree::{InternalValue, ValueType};

use super::journal_check::{journal_records, JournalRecord};
use super::journal_sync::journal_files;
use super::salvage::{ReadFailure, Skipped};
use super::{Space, StoreError};

/// fjall numbers keyspaces in creation order, and `FjallStore::open` creates `meta`
/// first, then `data`; 0 is fjall's own.
const KEYSPACES: [(Space, u64); 2] = [(Space::Meta, 1), (Space::Data, 2)];
const KEYSPACES_FOLDER: &str = "keyspaces";
const TABLES_FOLDER: &str = "tables";
const BLOBS_FOLDER: &str = "blobs";

/// The newest record of a key found in the store's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRecord {
    pub seqno: u64,
    pub value: RawValue,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawValue {
    Inline(Vec<u8>),
    /// A pointer into a blob file (lsm-tree's indirection), read when copied.
    Blob(Vec<u8>),
    Deleted,
}

/// What reading a store's files found.
#[derive(Debug, Default)]
pub struct RawStore {
    meta: BTreeMap<Vec<u8>, RawRecord>,
    data: BTreeMap<Vec<u8>, RawRecord>,
    /// Stretches of keys lost in tables that are gone, cut short or damaged.
    pub skipped: Vec<(Space, Skipped)>,
    /// Whole things lost or doubtful, for the report (a version file, a journal).
    pub notes: Vec<String>,
    blob_folders: HashMap<Space, PathBuf>,
    blob_files: parking_lot::Mutex<HashMap<(Space, u64), Option<File>>>,
}

impl RawStore {
    fn records_mut(&mut self, space: Space) -> &mut BTreeMap<Vec<u8>, RawRecord> {
        match space {
            Space::Meta => &mut self.meta,
            Space::Data => &mut self.data,
        }
    }

    /// The surviving records of `space` (deletes excluded), in key order.
    pub fn live(&self, space: Space) -> impl Iterator<Item = (&Vec<u8>, &RawRecord)> {
        let records = match space {
            Space::Meta => &self.meta,
            Space::Data => &self.data,
        };
        records
            .iter()
            .filter(|(_, record)| record.value != RawValue::Deleted)
    }

    /// Keeps `value` for `key` unless a record with a higher sequence number is there.
    /// The same write (same sequence number) found in a table and in a journal is kept
    /// inline, from the journal: its blob file may be gone.
    fn offer(&mut self, space: Space, key: &[u8], seqno: u64, value: RawValue) {
        let records = self.records_mut(space);
        match records.get_mut(key) {
            Some(kept)
                if kept.seqno > seqno
                    || (kept.seqno == seqno && !matches!(kept.value, RawValue::Blob(_))) => {}
            Some(kept) => *kept = RawRecord { seqno, value },
            None => {
                records.insert(key.to_vec(), RawRecord { seqno, value });
            }
        }
    }

    /// The bytes of a surviving record: a blob is read from its file and checked.
    pub fn value(
        &self,
        space: Space,
        key: &[u8],
        record: &RawRecord,
    ) -> Result<Vec<u8>, ReadFailure> {
        match &record.value {
            RawValue::Inline(value) => Ok(value.clone()),
            RawValue::Blob(pointer) => self.blob(space, key, pointer),
            RawValue::Deleted => Err(ReadFailure::Damaged("deleted".into())),
        }
    }

    /// Blob file `id` of `space`; `None` if it is gone.
    fn open_blob_file(&self, space: Space, id: u64) -> Result<Option<File>, ReadFailure> {
        let Some(folder) = self.blob_folders.get(&space) else {
            return Ok(None);
        };
        match File::open(folder.join(id.to_string())) {
            Ok(file) => Ok(Some(file)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(ReadFailure::Other(error.into())),
        }
    }

    fn blob(&self, space: Space, key: &[u8], pointer: &[u8]) -> Result<Vec<u8>, ReadFailure> {
        let damaged = |error: lsm_tree::Error| ReadFailure::Damaged(error.to_string());
        let id = raw::blob_file_of(pointer).map_err(damaged)?;
        let mut files = self.blob_files.lock();
        let file = match files.entry((space, id)) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(self.open_blob_file(space, id)?),
        };
        let Some(file) = file else {
            return Err(ReadFailure::Damaged(format!("blob file {id} is gone")));
        };
        match raw::read_blob(file, key, pointer) {
            Ok(value) => Ok(value.to_vec()),
            Err(lsm_tree::Error::Io(error)) if !is_damage(&error) => {
                Err(ReadFailure::Other(error.into()))
            }
            Err(error) => Err(damaged(error)),
        }
    }
}

/// Bytes that are there but wrong, or missing at the end: damage, not a failing device.
fn is_damage(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
    )
}

/// Why fjall must not open the store at `kv`: a keyspace whose `current` file is gone
/// while its tables or version files are there. fjall would take it for a new, empty
/// tree and write a `current` naming none of them.
pub fn unopenable(kv: &Path) -> io::Result<Option<String>> {
    let keyspaces = kv.join(KEYSPACES_FOLDER);
    if !keyspaces.exists() {
        return Ok(None);
    }
    for entry in fs::read_dir(&keyspaces)? {
        let folder = entry?.path();
        if folder.join(raw::CURRENT_FILE).exists() {
            continue;
        }
        let has_tables = fs::read_dir(folder.join(TABLES_FOLDER))
            .map(|mut tables| tables.next().is_some())
            .unwrap_or(false);
        if has_tables || !version_ids(&folder)?.is_empty() {
            return Ok(Some(format!(
                "{}: the `current` file is gone, beside tables or version files",
                folder.display()
            )));
        }
    }
    Ok(None)
}

/// Reads every record that reads back from the store at `kv` without opening it.
pub fn read_store(kv: &Path) -> Result<RawStore, StoreError> {
    let mut store = RawStore::default();
    for (space, keyspace_id) in KEYSPACES {
        let folder = kv.join(KEYSPACES_FOLDER).join(keyspace_id.to_string());
        read_tables(&mut store, space, &folder)?;
        store.blob_folders.insert(space, folder.join(BLOBS_FOLDER));
    }
    read_journals(&mut store, kv)?;
    Ok(store)
}

/// Reads the tables of one keyspace's tree at `folder` into `store`.
fn read_tables(store: &mut RawStore, space: Space, folder: &Path) -> Result<(), StoreError> {
    let tables = folder.join(TABLES_FOLDER);
    let listed = match live_files(folder) {
        Ok(version) => version.tables,
        Err(why) => {
            store.notes.push(format!(
                "{}: {why}: every table file there was read and the newest record of each key \
                 kept (a key deleted long ago may be back)",
                folder.display()
            ));
            every_table(&tables)?
        }
    };
    for (id, global_seqno) in listed {
        let path = tables.join(id.to_string());
        match fs::read(&path) {
            Ok(bytes) => read_table(store, space, &path, &bytes, global_seqno),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                store.skipped.push((
                    space,
                    Skipped {
                        after: None,
                        before: None,
                        error: format!("table {} is gone", path.display()),
                    },
                ));
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// The tables of the version `current` names, if its checksum holds; else of the newest
/// version file that reads (a `current` lost or damaged); else why there is none.
fn live_files(folder: &Path) -> Result<VersionFiles, String> {
    let vouched = raw::read_current(folder).map_err(|error| error.to_string());
    if let Ok(current) = &vouched {
        let path = folder.join(format!("v{}", current.id));
        let bytes = fs::read(&path).map_err(|error| format!("{}: {error}", path.display()))?;
        if raw::version_checksum(&bytes) != current.checksum {
            return Err(format!(
                "{} does not match the checksum `current` records",
                path.display()
            ));
        }
        return raw::read_version(folder, current.id)
            .map_err(|error| format!("{}: {error}", path.display()));
    }
    let mut ids = version_ids(folder).map_err(|error| error.to_string())?;
    ids.sort_unstable();
    ids.into_iter()
        .rev()
        .find_map(|id| raw::read_version(folder, id).ok())
        .ok_or_else(|| match vouched {
            Err(why) => format!("`current` does not read ({why}) and no version file does"),
            Ok(_) => "no version file reads".to_string(),
        })
}

/// Ids of the version files (`v{id}`) in `folder`.
fn version_ids(folder: &Path) -> io::Result<Vec<u64>> {
    let mut ids = Vec::new();
    for entry in fs::read_dir(folder)? {
        let name = entry?.file_name();
        if let Some(id) = name
            .to_str()
            .and_then(|name| name.strip_prefix('v'))
            .and_then(|id| id.parse().ok())
        {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// Every table file in `tables` (named by its id), with no global sequence number (shoal
/// never ingests tables, the only writer of one).
fn every_table(tables: &Path) -> io::Result<Vec<(u64, u64)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(tables)? {
        if let Some(id) = entry?
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        {
            found.push((id, 0));
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// Offers every record of a table's intact data blocks; notes the damaged stretches.
fn read_table(store: &mut RawStore, space: Space, path: &Path, bytes: &[u8], global_seqno: u64) {
    let mut records = Vec::new();
    let read = raw::read_table_blocks(bytes, global_seqno, &mut |record| records.push(record));
    for record in records {
        offer_table_record(store, space, record);
    }
    for damage in read.damaged {
        store.skipped.push((
            space,
            Skipped {
                after: damage.key_before.map(|key| key.to_vec()),
                before: damage.key_after.map(|key| key.to_vec()),
                error: format!(
                    "table {} at byte {}: {}",
                    path.display(),
                    damage.offset,
                    damage.error
                ),
            },
        ));
    }
}

fn offer_table_record(store: &mut RawStore, space: Space, record: InternalValue) {
    let value = match record.key.value_type {
        ValueType::Value => RawValue::Inline(record.value.to_vec()),
        ValueType::Indirection => RawValue::Blob(record.value.to_vec()),
        ValueType::Tombstone | ValueType::WeakTombstone => RawValue::Deleted,
    };
    store.offer(space, &record.key.user_key, record.key.seqno, value);
}

/// Offers the records of every journal's readable batches.
fn read_journals(store: &mut RawStore, kv: &Path) -> Result<(), StoreError> {
    for path in journal_files(kv)? {
        let bytes = fs::read(&path)?;
        let mut records = Vec::new();
        let read = journal_records(&bytes, &mut |record| records.push(record));
        for record in records {
            offer_journal_record(store, record);
        }
        if let Err(why) = read {
            store.notes.push(format!(
                "{}: the rest of it is lost ({why})",
                path.display()
            ));
        }
    }
    Ok(())
}

fn offer_journal_record(store: &mut RawStore, record: JournalRecord) {
    let Some((space, _)) = KEYSPACES.iter().find(|(_, id)| *id == record.keyspace_id) else {
        return; // fjall's own keyspace: its records describe keyspaces, not shoal's data
    };
    let value = record.value.map_or(RawValue::Deleted, RawValue::Inline);
    store.offer(*space, &record.key, record.seqno, value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fjall_store::write_out_memtables;
    use crate::store::{Batch, FjallStore, FjallTuning, Store};

    fn key(index: u32) -> Vec<u8> {
        format!("key{index:06}").into_bytes()
    }

    /// Writes `keys` into `space` (values of `value_bytes`) and flushes them to a table.
    fn write_table(
        store: &FjallStore,
        space: Space,
        keys: std::ops::Range<u32>,
        value_bytes: usize,
    ) {
        let mut batch = Batch::default();
        for index in keys {
            batch.put(space, key(index), value_of(index, value_bytes));
        }
        store.write(batch).unwrap();
        write_out_memtables(store.keyspace(space)).unwrap();
    }

    fn value_of(index: u32, value_bytes: usize) -> Vec<u8> {
        let mut value = index.to_be_bytes().repeat(value_bytes / 4 + 1);
        value.truncate(value_bytes);
        value
    }

    /// Closes `store` and removes its journals: what the tests read is in the tables.
    fn close_without_journals(store: FjallStore, kv: &Path) {
        drop(store);
        for journal in journal_files(kv).unwrap() {
            fs::remove_file(journal).unwrap();
        }
    }

    fn files_in(folder: &Path) -> Vec<PathBuf> {
        let mut found: Vec<_> = fs::read_dir(folder)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        found.sort();
        found
    }

    fn tables(kv: &Path, space: Space) -> PathBuf {
        let (_, id) = KEYSPACES.iter().find(|(s, _)| *s == space).unwrap();
        kv.join(KEYSPACES_FOLDER)
            .join(id.to_string())
            .join(TABLES_FOLDER)
    }

    fn live_keys(raw: &RawStore, space: Space) -> Vec<Vec<u8>> {
        raw.live(space).map(|(key, _)| key.clone()).collect()
    }

    #[test]
    fn a_table_cut_in_half_yields_the_keys_of_its_intact_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path(), &FjallTuning::default()).unwrap();
        write_table(&store, Space::Meta, 0..4000, 100);
        close_without_journals(store, dir.path());
        let table = files_in(&tables(dir.path(), Space::Meta)).pop().unwrap();
        let bytes = fs::read(&table).unwrap();
        fs::write(&table, &bytes[..bytes.len() / 2]).unwrap();

        let raw = read_store(dir.path()).unwrap();
        let keys = live_keys(&raw, Space::Meta);
        // A prefix of the keys, from whole blocks: more than a quarter, not all.
        assert!(keys.len() > 1000 && keys.len() < 4000, "{}", keys.len());
        let want: Vec<_> = (0..keys.len() as u32).map(key).collect();
        assert_eq!(keys, want);
        for (key, record) in raw.live(Space::Meta) {
            let index: u32 = std::str::from_utf8(&key[3..]).unwrap().parse().unwrap();
            assert_eq!(
                raw.value(Space::Meta, key, record).unwrap(),
                value_of(index, 100)
            );
        }
        // The cut is named, after the last key read.
        let cut: Vec<_> = raw
            .skipped
            .iter()
            .filter(|(space, _)| *space == Space::Meta)
            .collect();
        assert_eq!(cut.len(), 1, "{:?}", raw.skipped);
        assert_eq!(cut[0].1.after.as_deref(), keys.last().map(Vec::as_slice));
    }

    /// The bisection the salvage used before could land past the good keys between two
    /// damaged blocks close together; block by block, only the damaged blocks' keys go.
    #[test]
    fn two_damaged_blocks_close_together_lose_only_their_own_keys() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path(), &FjallTuning::default()).unwrap();
        write_table(&store, Space::Meta, 0..4000, 100);
        close_without_journals(store, dir.path());
        let table = files_in(&tables(dir.path(), Space::Meta)).pop().unwrap();
        let mut bytes = fs::read(&table).unwrap();
        // Two blocks apart by one (blocks are about 4 KiB).
        let first = bytes.len() / 4;
        for at in [first, first + 10_000] {
            bytes[at] ^= 0x5a;
        }
        fs::write(&table, &bytes).unwrap();

        let raw = read_store(dir.path()).unwrap();
        let keys = live_keys(&raw, Space::Meta);
        let lost: Vec<u32> = (0..4000).filter(|&i| !keys.contains(&key(i))).collect();
        assert_eq!(raw.skipped.len(), 2, "{:?}", raw.skipped);
        // Two stretches of at most a block's keys each, with good keys between them.
        let gap = lost
            .windows(2)
            .position(|pair| pair[1] != pair[0] + 1)
            .unwrap();
        let (low, high) = (&lost[..=gap], &lost[gap + 1..]);
        assert!(low.len() < 100 && high.len() < 100, "{lost:?}");
        assert!(high[0] - low[low.len() - 1] > 20, "{lost:?}");
        assert!(
            high.windows(2).all(|pair| pair[1] == pair[0] + 1),
            "{lost:?}"
        );
        for (index, (_, skip)) in raw.skipped.iter().enumerate() {
            let stretch = if index == 0 { low } else { high };
            assert_eq!(skip.after, Some(key(stretch[0] - 1)));
            assert_eq!(skip.before, Some(key(stretch[stretch.len() - 1] + 1)));
        }
    }

    #[test]
    fn a_missing_blob_file_drops_only_the_values_it_held() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path(), &FjallTuning::default()).unwrap();
        // Two flushes: two blob files, one per batch of values.
        write_table(&store, Space::Data, 0..20, 32 << 10);
        write_table(&store, Space::Data, 20..40, 32 << 10);
        close_without_journals(store, dir.path());
        let blobs = tables(dir.path(), Space::Data).with_file_name(BLOBS_FOLDER);
        let blob_files = files_in(&blobs);
        assert_eq!(blob_files.len(), 2, "{blob_files:?}");
        fs::remove_file(&blob_files[0]).unwrap();

        let raw = read_store(dir.path()).unwrap();
        let (mut read, mut lost) = (Vec::new(), Vec::new());
        for (key, record) in raw.live(Space::Data) {
            match raw.value(Space::Data, key, record) {
                Ok(value) => read.push((key.clone(), value)),
                Err(ReadFailure::Damaged(why)) => {
                    assert!(why.contains("is gone"), "{why}");
                    lost.push(key.clone());
                }
                Err(ReadFailure::Other(error)) => panic!("{error}"),
            }
        }
        // The first flush's blob file held the first batch's values.
        assert_eq!(lost, (0..20).map(key).collect::<Vec<_>>());
        let want: Vec<_> = (20..40)
            .map(|index| (key(index), value_of(index, 32 << 10)))
            .collect();
        assert_eq!(read, want);
    }

    #[test]
    fn a_value_whose_blob_file_is_gone_is_read_from_the_journal_that_still_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path(), &FjallTuning::default()).unwrap();
        write_table(&store, Space::Data, 0..20, 32 << 10);
        drop(store);
        let blobs = tables(dir.path(), Space::Data).with_file_name(BLOBS_FOLDER);
        for blob_file in files_in(&blobs) {
            fs::remove_file(blob_file).unwrap();
        }

        let raw = read_store(dir.path()).unwrap();
        let read: Vec<_> = raw
            .live(Space::Data)
            .map(|(key, record)| (key.clone(), raw.value(Space::Data, key, record).unwrap()))
            .collect();
        let want: Vec<_> = (0..20)
            .map(|index| (key(index), value_of(index, 32 << 10)))
            .collect();
        assert_eq!(read, want);
    }

    #[test]
    fn stale_tables_do_not_bring_deleted_keys_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path(), &FjallTuning::default()).unwrap();
        write_table(&store, Space::Meta, 0..100, 50);
        let tables = tables(dir.path(), Space::Meta);
        let stale: Vec<_> = files_in(&tables)
            .into_iter()
            .map(|path| (path.clone(), fs::read(&path).unwrap()))
            .collect();
        let mut batch = Batch::default();
        for index in 0..50 {
            batch.delete(Space::Meta, key(index));
        }
        store.write(batch).unwrap();
        // The deletes and the keys they hide are compacted away, tombstones included.
        store.compact().unwrap();
        close_without_journals(store, dir.path());
        for (path, bytes) in &stale {
            assert!(!path.exists(), "the compaction kept {}", path.display());
            fs::write(path, bytes).unwrap();
        }

        let raw = read_store(dir.path()).unwrap();
        assert_eq!(
            live_keys(&raw, Space::Meta),
            (50..100).map(key).collect::<Vec<_>>()
        );
        assert!(raw.notes.is_empty() && raw.skipped.is_empty(), "{raw:?}");

        // Without a version file every table is read: the report says keys may be back.
        for version in version_ids(tables.parent().unwrap()).unwrap() {
            fs::remove_file(tables.with_file_name(format!("v{version}"))).unwrap();
        }
        let raw = read_store(dir.path()).unwrap();
        assert!(raw.notes[0].contains("may be back"), "{:?}", raw.notes);
    }
}
