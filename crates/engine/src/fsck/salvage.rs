//! Salvage, for a store whose tables or blob files fail their checksums (repair in place
//! cannot read it) or that fjall cannot open at all (a file gone or cut short, a damaged
//! index, version file or `current`): every record that reads back from the store's
//! files (`store::raw_salvage`) is copied into a fresh key-value store beside the damaged
//! one, which then takes its place; the damaged one is kept aside for the admin to
//! delete. The usual repair passes then run on the copy.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::check_tuning;
use crate::keys;
use crate::records::inode::{Content, FileKind, Inode, ROOT_INO};
use crate::store::raw_salvage::RawStore;
use crate::store::salvage::{ReadFailure, Skipped};
use crate::store::{Batch, FjallStore, Scan, Space, Store, MIN_JOURNAL_BYTES};
use crate::store_dir::open::OpenError;
use crate::store_dir::space_reserve::device_space;
use crate::store_dir::{self, access, StoreDirError};

/// Records per batch written to the new store.
const BATCH_ITEMS: usize = 4096;
/// Bytes per batch written to the new store (chunks are up to 64 KiB each).
const BATCH_BYTES: usize = 16 << 20;
/// The new store is built under this name, next to `kv`, and renamed in when complete.
const SALVAGE_PREFIX: &str = "kv.salvage-";
/// The damaged store is kept under this name, next to the new `kv`.
const DAMAGED_PREFIX: &str = "kv.damaged-";
/// Free space kept beyond the salvaged data's estimate, for the new store's version
/// files and manifests.
const SLACK_BYTES: u64 = 4 << 20;
/// Directory levels followed up to the root when naming an inode's path.
const MAX_PATH_DEPTH: usize = 4096;
/// Dropped records listed by name; the count stays exact.
const MAX_LISTED: usize = 100;
/// Files named per stretch of lost chunks.
const MAX_FILES_PER_STRETCH: usize = 20;

/// What a salvage reads: the damaged store's files as read, and why they needed it.
pub(super) struct Damaged {
    pub files: RawStore,
    pub why: String,
}

/// What a salvage kept and dropped.
pub(super) struct Salvaged {
    /// Why the store needed salvaging, for the report.
    pub why: String,
    pub kept: u64,
    pub damaged_copy: PathBuf,
    /// Stretches of keys lost to damaged table blocks, per space.
    pub skipped: Vec<(Space, Skipped)>,
    /// Records whose value (a blob) failed: (space, key, why).
    pub lost_values: Vec<(Space, Vec<u8>, String)>,
    /// Other losses and doubts, each a whole sentence (a version file, a journal).
    pub other: Vec<String>,
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> OpenError + '_ {
    move |error| OpenError::StoreDir(StoreDirError::Io(path.to_path_buf(), error))
}

/// Copies what reads back from `damaged` (the store at `dir`'s `kv`) into a new store,
/// closes both, and swaps the new one in.
pub(super) fn salvage(dir: &Path, damaged: Damaged) -> Result<Salvaged, OpenError> {
    let kv = store_dir::kv_path(dir);
    check_free_space(dir, &kv)?;
    let stamp = unix_seconds();
    let fresh_path = dir.join(format!("{SALVAGE_PREFIX}{stamp}"));
    if fresh_path.exists() {
        fs::remove_dir_all(&fresh_path).map_err(io_error(&fresh_path))?;
    }
    let mut salvaged = Salvaged {
        why: damaged.why.clone(),
        kept: 0,
        damaged_copy: dir.join(format!("{DAMAGED_PREFIX}{stamp}")),
        skipped: Vec::new(),
        lost_values: Vec::new(),
        other: damaged.files.notes.clone(),
    };
    let copied = copy_all(&damaged, &fresh_path, &mut salvaged);
    drop(damaged);
    if let Err(error) = copied {
        // The damaged store stays as it was; a half-made copy is of no use.
        let _ = fs::remove_dir_all(&fresh_path);
        return Err(error);
    }
    swap_in(dir, &kv, &fresh_path, &salvaged.damaged_copy)?;
    Ok(salvaged)
}

/// Makes the new store at `fresh_path` with every record of `damaged` that reads, durably
/// and privately; closed when this returns.
fn copy_all(
    damaged: &Damaged,
    fresh_path: &Path,
    salvaged: &mut Salvaged,
) -> Result<(), OpenError> {
    let fresh = FjallStore::open(fresh_path, &check_tuning())?;
    for space in [Space::Meta, Space::Data] {
        copy_space(&damaged.files, &fresh, space, salvaged)?;
    }
    salvaged
        .skipped
        .extend(damaged.files.skipped.iter().cloned());
    fresh.sync()?;
    drop(fresh);
    access::make_private(fresh_path).map_err(io_error(fresh_path))
}

/// Refuses a salvage the device has no room for: the copy needs about what the damaged
/// store holds, once in tables and blobs and, until fjall rotates its journal (at
/// `journal_bytes`), once more in the journal.
fn check_free_space(dir: &Path, kv: &Path) -> Result<(), OpenError> {
    let data = tree_bytes(kv).map_err(io_error(kv))?;
    let journal = data.min(check_tuning().journal_bytes.max(MIN_JOURNAL_BYTES));
    let needed = data + journal + SLACK_BYTES;
    let available = device_space(dir).map_err(io_error(dir))?.available_bytes;
    if available < needed {
        return Err(OpenError::NoSpace(format!(
            "{}: salvaging the damaged key-value store copies what reads back into a new \
             one beside it, which needs about {} MiB free on the store's device, and {} MiB \
             are; free space there (or copy the store to a larger device) and repair again \
             (the damaged store stays in place)",
            dir.display(),
            needed >> 20,
            available >> 20
        )));
    }
    Ok(())
}

/// Bytes of every file under `path`.
fn tree_bytes(path: &Path) -> io::Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(path)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            tree_bytes(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// Copies the surviving records `raw` found in `space`, noting the values that fail.
fn copy_space(
    raw: &RawStore,
    fresh: &FjallStore,
    space: Space,
    salvaged: &mut Salvaged,
) -> Result<(), OpenError> {
    let mut batch = Batch::default();
    for (key, record) in raw.live(space) {
        match raw.value(space, key, record) {
            Ok(value) => {
                batch.put(space, key.clone(), value);
                salvaged.kept += 1;
            }
            Err(ReadFailure::Damaged(why)) => {
                salvaged.lost_values.push((space, key.clone(), why));
            }
            Err(ReadFailure::Other(error)) => return Err(error.into()),
        }
        if batch.len() >= BATCH_ITEMS || batch.bytes() >= BATCH_BYTES {
            fresh.write(std::mem::take(&mut batch))?;
        }
    }
    fresh.write(batch)?;
    Ok(())
}

/// Renames the damaged `kv` aside and the complete new store in, durably.
fn swap_in(dir: &Path, kv: &Path, fresh: &Path, damaged_copy: &Path) -> Result<(), OpenError> {
    fs::rename(kv, damaged_copy).map_err(io_error(kv))?;
    fs::rename(fresh, kv).map_err(io_error(fresh))?;
    fs::File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(io_error(dir))
}

/// One note per thing the salvage did or dropped, naming inodes and paths (looked up in
/// the repaired store) where the keys tell them.
pub(super) fn notes(salvaged: &Salvaged, repaired: &dyn Store) -> Vec<String> {
    let mut notes = vec![format!(
        "salvaged: {}; the {} records that read back were copied into a new key-value \
         store, which replaced it. The damaged one is kept at {} (delete it once the store \
         is checked)",
        salvaged.why,
        salvaged.kept,
        salvaged.damaged_copy.display()
    )];
    notes.extend(salvaged.other.iter().map(|note| format!("dropped: {note}")));
    let mut listed = 0;
    for (space, skip) in &salvaged.skipped {
        if listed < MAX_LISTED {
            notes.push(format!(
                "dropped: the {space:?} records after {} and before {} ({})",
                describe_bound(*space, skip.after.as_deref(), "the start", repaired),
                describe_bound(*space, skip.before.as_deref(), "the end", repaired),
                skip.error
            ));
            if *space == Space::Data {
                notes.push(files_with_lost_chunks(skip, repaired));
            }
        }
        listed += 1;
    }
    for (space, key, why) in &salvaged.lost_values {
        if listed < MAX_LISTED {
            notes.push(format!(
                "dropped: {} (its value fails to read: {why}){}",
                describe_key(*space, key, repaired),
                hole_note(key)
            ));
        }
        listed += 1;
    }
    if listed > MAX_LISTED {
        notes.push(format!("... and {} more dropped", listed - MAX_LISTED));
    }
    notes
}

fn describe_bound(space: Space, key: Option<&[u8]>, none: &str, store: &dyn Store) -> String {
    key.map_or_else(|| none.to_string(), |key| describe_key(space, key, store))
}

/// "chunk 3 of inode 42 (/a/b)", "the entry "x" of inode 7 (/a)", "the xattr record of
/// inode 42 (/a/b)": what the key's kind (`keys::RECORD_KINDS`) says, or its bytes.
fn describe_key(space: Space, key: &[u8], store: &dyn Store) -> String {
    let named = |ino: u64| match path_of(store, ino) {
        Some(path) => format!("inode {ino} ({path})"),
        None => format!("inode {ino}"),
    };
    let Some(kind) = keys::record_kind(space, key) else {
        return format!("key {}", key.escape_ascii());
    };
    if let Some((ino, chunk)) = chunk_position(key).filter(|_| space == Space::Data) {
        return format!("chunk {chunk} of {}", named(ino));
    }
    if let Some((parent, name)) = keys::decode_entry_key(key)
        .ok()
        .filter(|_| space == Space::Meta)
    {
        return format!(
            "the entry {:?} of {}",
            String::from_utf8_lossy(name),
            named(parent)
        );
    }
    match (kind.ino)(key) {
        Some(ino) => format!("the {} record of {}", kind.name, named(ino)),
        None => format!("the {} record at key {}", kind.name, key.escape_ascii()),
    }
}

/// The (inode, chunk) a chunk key names.
fn chunk_position(key: &[u8]) -> Option<(u64, u64)> {
    keys::decode_chunk_key(key).ok()
}

fn hole_note(key: &[u8]) -> &'static str {
    if keys::decode_chunk_key(key).is_ok() {
        "; the file keeps its size and reads zeros there"
    } else {
        ""
    }
}

/// The path of `ino` from its parent pointers and its parents' entries, if it has one.
fn path_of(store: &dyn Store, mut ino: u64) -> Option<String> {
    let mut names = Vec::new();
    for _ in 0..MAX_PATH_DEPTH {
        if ino == ROOT_INO {
            names.reverse();
            return Some(format!("/{}", names.join("/")));
        }
        let value = store.get(Space::Meta, &keys::inode_key(ino)).ok()??;
        let parent = keys::decode_inode(ino, &value).ok()?.parent;
        names.push(name_in(store, parent, ino)?);
        ino = parent;
    }
    None
}

/// The name `ino` has in directory `parent`.
fn name_in(store: &dyn Store, parent: u64, ino: u64) -> Option<String> {
    let (start, end) = keys::entry_range(parent);
    let mut found = None;
    store
        .scan(
            Space::Meta,
            &start,
            &end,
            &mut |key, value| match keys::decode_entry(key, value) {
                Ok((child, _)) if child == ino => {
                    found = keys::decode_entry_key(key)
                        .ok()
                        .map(|(_, name)| String::from_utf8_lossy(name).into_owned());
                    Scan::Stop
                }
                _ => Scan::Continue,
            },
        )
        .ok()?;
    found
}

/// The files whose chunks a skipped stretch of the data space may have held: those in
/// its inode range that now miss a chunk below their size (they keep their sizes and read
/// zeros there). A sparse file's holes look the same: it may be named too.
fn files_with_lost_chunks(skip: &Skipped, store: &dyn Store) -> String {
    let ino_of =
        |key: Option<&[u8]>, none: u64| key.and_then(chunk_position).map_or(none, |(ino, _)| ino);
    let first = ino_of(skip.after.as_deref(), 0);
    let last = ino_of(skip.before.as_deref(), u64::MAX);
    let chunk_bytes = chunk_bytes(store);
    let mut files = Vec::new();
    let end = keys::inode_key(last.saturating_add(1));
    let _ = store.scan(
        Space::Meta,
        &keys::inode_key(first),
        &end,
        &mut |key, value| {
            let Ok(ino) = keys::decode_inode_key(key) else {
                return Scan::Continue;
            };
            let lacking = keys::decode_inode(ino, value).is_ok_and(|inode| {
                inode.kind == FileKind::Regular && lacks_chunks(store, &inode, chunk_bytes)
            });
            if lacking {
                files.push(describe_key(Space::Meta, key, store));
            }
            if files.len() >= MAX_FILES_PER_STRETCH {
                files.push("...".into());
                return Scan::Stop;
            }
            Scan::Continue
        },
    );
    if files.is_empty() {
        files.push("none".into());
    }
    format!(
        "dropped: chunks of these files may have been among them (they keep their sizes \
         and read zeros there): {}",
        files.join(", ")
    )
}

/// The store's chunk size (its superblock's); `None` if that does not read.
fn chunk_bytes(store: &dyn Store) -> Option<u64> {
    let value = store.get(Space::Meta, &keys::superblock_key()).ok()??;
    let superblock = keys::decode_superblock(&value).ok()?;
    Some(u64::from(superblock.chunk_bytes).max(1))
}

/// Whether a chunked file has fewer chunks than its size needs (always, when the chunk
/// size is unknown: it may have lost some).
fn lacks_chunks(store: &dyn Store, inode: &Inode, chunk_bytes: Option<u64>) -> bool {
    if inode.content != Content::Chunked || inode.size == 0 {
        return false;
    }
    let Some(chunk_bytes) = chunk_bytes else {
        return true;
    };
    let (start, end) = keys::chunk_range(inode.ino);
    let mut chunks = 0u64;
    let counted = store.scan(Space::Data, &start, &end, &mut |_, _| {
        chunks += 1;
        Scan::Continue
    });
    counted.is_err() || chunks < inode.size.div_ceil(chunk_bytes)
}
