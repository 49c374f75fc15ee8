//! Reading a key-value store that fjall cannot open (a table or blob file gone or cut
//! short, a damaged table index, version file or `current`), as `fsck --repair` salvages
//! one: its files are read directly, block by block (`lsm_tree::salvage`), and for each
//! key the record with the highest sequence number wins, deletes included, as in fjall.
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
    fn offer(&mut self, space: Space, key: &[u8], seqno: u64, value: RawValue) {
        let records = self.records_mut(space);
        match records.get_mut(key) {
            Some(kept) if kept.seqno >= seqno => {}
            Some(kept) => *kept = RawRecord { seqno, value },
            None => {
                records.insert(key.to_vec(), RawRecord { seqno, value });
            }
        }
    }

    /// The bytes of a surviving record: a blob is read from its file and checked.
    pub fn value(&self, space: Space, key: &[u8], record: &RawRecord) -> Result<Vec<u8>, ReadFailure> {
        match &record.value {
            RawValue::Inline(value) => Ok(value.clone()),
            RawValue::Blob(pointer) => self.blob(space, key, pointer),
            RawValue::Deleted => Err(ReadFailure::Damaged("deleted".into())),
        }
    }

    fn blob(&self, space: Space, key: &[u8], pointer: &[u8]) -> Result<Vec<u8>, ReadFailure> {
        let damaged = |error: lsm_tree::Error| ReadFailure::Damaged(error.to_string());
        let id = raw::blob_file_of(pointer).map_err(damaged)?;
        let mut files = self.blob_files.lock();
        if !files.contains_key(&(space, id)) {
            let path = self
                .blob_folders
                .get(&space)
                .map(|folder| folder.join(id.to_string()));
            let file = match path.map(File::open) {
                Some(Ok(file)) => Some(file),
                Some(Err(error)) if error.kind() == io::ErrorKind::NotFound => None,
                Some(Err(error)) => return Err(ReadFailure::Other(error.into())),
                None => None,
            };
            files.insert((space, id), file);
        }
        let Some(Some(file)) = files.get(&(space, id)) else {
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
        if let Some(id) = entry?.file_name().to_str().and_then(|name| name.parse().ok()) {
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
            store
                .notes
                .push(format!("{}: the rest of it is lost ({why})", path.display()));
        }
    }
    Ok(())
}

fn offer_journal_record(store: &mut RawStore, record: JournalRecord) {
    let Some((space, _)) = KEYSPACES
        .iter()
        .find(|(_, id)| *id == record.keyspace_id)
    else {
        return; // fjall's own keyspace: its records describe keyspaces, not shoal's data
    };
    let value = record.value.map_or(RawValue::Deleted, RawValue::Inline);
    store.offer(*space, &record.key, record.seqno, value);
}
