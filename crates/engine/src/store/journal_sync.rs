//! Makes fjall's journal durable without holding fjall's journal lock through the fsync.
//!
//! `Database::persist(SyncAll)` fsyncs while it holds the journal writer's lock, and every
//! batch write takes that lock: an fsync of 50-700 ms (interval commits at 2.4M objects)
//! then holds up the checkpointer and, once the staged bound is reached, every writer. Here only the
//! hand-over of fjall's write buffer to the OS happens under the lock; the fsync goes
//! through a handle of our own to the same file, which flushes the same pages.
//!
//! Which file: fjall names journals `<id>.jnl` in the database folder and writes only the
//! highest. A rotation between the hand-over and the fsync fsyncs the older journal under
//! the lock itself, so fsyncing the newest file found afterwards always covers every
//! batch handed over.
//!
//! This depends on fjall's private journal layout, not on its public API: journals are
//! files named `<id>.jnl` (decimal id) directly in the database folder, and the one with
//! the highest id is the one being written (fjall 3.1, `src/journal/`). A fjall upgrade
//! must re-check it; `fjall_store::tests::sync_finds_the_journal_fjall_writes_to` checks
//! it against the fjall in Cargo.lock, before and after a rotation. If the layout is not
//! found at all, `sync_journal` falls back to fjall's own fsync under its lock.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use fjall::{Database, PersistMode};

use super::StoreError;

/// Every batch written to `db` so far becomes durable.
pub fn sync_journal(db: &Database, folder: &Path) -> Result<(), StoreError> {
    db.persist(PersistMode::Buffer)?;
    match active_journal(folder)? {
        Some(path) => File::open(path)?.sync_all()?,
        // Not fjall's layout as we know it: let fjall do it, under its lock.
        None => db.persist(PersistMode::SyncAll)?,
    }
    Ok(())
}

/// Every `<id>.jnl` in `folder`, oldest (lowest id) first.
pub fn journal_files(folder: &Path) -> io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(folder)? {
        let entry = entry?;
        let name = entry.file_name();
        let id = name
            .to_str()
            .and_then(|name| name.strip_suffix(".jnl"))
            .and_then(|id| id.parse::<u64>().ok());
        if let Some(id) = id {
            found.push((id, entry.path()));
        }
    }
    found.sort();
    Ok(found.into_iter().map(|(_, path)| path).collect())
}

/// The journal fjall writes to: the `<id>.jnl` with the highest id in `folder`.
pub fn active_journal(folder: &Path) -> io::Result<Option<PathBuf>> {
    let mut newest: Option<(u64, PathBuf)> = None;
    for entry in std::fs::read_dir(folder)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|name| name.strip_suffix(".jnl"))
            .and_then(|id| id.parse::<u64>().ok())
        else {
            continue;
        };
        if newest.as_ref().is_none_or(|(best, _)| id > *best) {
            newest = Some((id, entry.path()));
        }
    }
    Ok(newest.map(|(_, path)| path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_active_journal_is_the_highest_id_by_number() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(active_journal(dir.path()).unwrap(), None);
        for name in ["9.jnl", "10.jnl", "11.tmp", "x.jnl", "version"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        assert_eq!(
            active_journal(dir.path()).unwrap(),
            Some(dir.path().join("10.jnl"))
        );
    }
}
