//! Makes fjall continue its sequence numbers above those already in tables when every
//! journal is gone.
//!
//! fjall (3.1.13, `Database::recover`) sets its next sequence number from the highest one
//! in the keyspaces' tables and memtables only while it replays an existing active
//! journal. With no journal file at all (deleted, lost with a device, or every one removed
//! by a repair) it creates a new journal and starts again from 0, below the sequence
//! numbers in the tables: every later write and tombstone is shadowed by the older table
//! entries (overwrites read the old value, deletes never take effect), and a flush or
//! replay skips them as already persisted. An empty journal file is a valid journal
//! holding no batches; giving fjall one takes it down the path that recovers the number.

use std::fs;
use std::io;
use std::path::Path;

/// Where fjall keeps its keyspaces inside its folder; present once a database exists.
const KEYSPACES_FOLDER: &str = "keyspaces";
/// The id fjall itself gives the journal it creates when it finds none.
const FIRST_JOURNAL: &str = "1.jnl";

/// Before fjall opens the database in `folder`: when it exists and has no journal, adds
/// an empty one (durably). Returns whether it did.
pub(super) fn ensure_a_journal(folder: &Path) -> io::Result<bool> {
    if !folder.join(KEYSPACES_FOLDER).is_dir() || has_a_journal(folder)? {
        return Ok(false);
    }
    let file = fs::File::create_new(folder.join(FIRST_JOURNAL))?;
    file.sync_all()?;
    fs::File::open(folder)?.sync_all()?;
    tracing::warn!(
        folder = %folder.display(),
        "the key-value store has no journal: started an empty one"
    );
    Ok(true)
}

fn has_a_journal(folder: &Path) -> io::Result<bool> {
    for entry in fs::read_dir(folder)? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "jnl") {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use crate::store::{Batch, FjallStore, FjallTuning, Space, Store};

    fn put(store: &FjallStore, key: &[u8], value: &[u8]) {
        let mut batch = Batch::default();
        batch.put(Space::Meta, key.to_vec(), value.to_vec());
        batch.put(Space::Data, key.to_vec(), value.to_vec());
        store.write(batch).unwrap();
    }

    fn delete(store: &FjallStore, key: &[u8]) {
        let mut batch = Batch::default();
        batch.delete(Space::Meta, key.to_vec());
        batch.delete(Space::Data, key.to_vec());
        store.write(batch).unwrap();
    }

    fn remove_journals(folder: &std::path::Path) -> usize {
        let mut removed = 0;
        for entry in std::fs::read_dir(folder).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "jnl") {
                std::fs::remove_file(path).unwrap();
                removed += 1;
            }
        }
        removed
    }

    /// With every journal deleted, writes and deletes made after the reopen take effect,
    /// and stay in effect across another reopen (their journal is replayed, not skipped
    /// as older than the tables). Without `ensure_a_journal` the delete and the overwrite
    /// are shadowed by the table entries written before.
    #[test]
    fn writes_after_every_journal_is_lost_take_effect() {
        let dir = tempfile::tempdir().unwrap();
        let tuning = FjallTuning {
            worker_threads: 1,
            ..FjallTuning::default()
        };
        {
            let store = FjallStore::open(dir.path(), &tuning).unwrap();
            for round in 0..50u32 {
                put(&store, &round.to_be_bytes(), b"old");
            }
            // Out to tables, with sequence numbers well above 0.
            store.compact().unwrap();
            store.sync().unwrap();
        }
        assert!(remove_journals(dir.path()) > 0);
        {
            let store = FjallStore::open(dir.path(), &tuning).unwrap();
            delete(&store, &0u32.to_be_bytes());
            put(&store, &1u32.to_be_bytes(), b"new");
            for space in [Space::Meta, Space::Data] {
                assert_eq!(store.get(space, &0u32.to_be_bytes()).unwrap(), None);
                assert_eq!(
                    store.get(space, &1u32.to_be_bytes()).unwrap().as_deref(),
                    Some(&b"new"[..])
                );
            }
            store.sync().unwrap();
        }
        for flushed in [false, true] {
            let store = FjallStore::open(dir.path(), &tuning).unwrap();
            if flushed {
                store.compact().unwrap();
            }
            for space in [Space::Meta, Space::Data] {
                assert_eq!(store.get(space, &0u32.to_be_bytes()).unwrap(), None);
                assert_eq!(
                    store.get(space, &1u32.to_be_bytes()).unwrap().as_deref(),
                    Some(&b"new"[..])
                );
                assert_eq!(
                    store.get(space, &2u32.to_be_bytes()).unwrap().as_deref(),
                    Some(&b"old"[..])
                );
            }
        }
    }
}
