//! Upgrading an older store to the current format, and the recursive usage recomputed
//! from a full scan that it writes (`fsck` compares the stored values with the same
//! recomputation, in `fsck::tree_usage`).

use std::collections::{BTreeMap, HashMap};

use crate::error::{FsError, FsResult};
use crate::keys::{self, FORMAT_VERSION};
use crate::records::inode::{FileKind, Timestamp, TreeUsage, ROOT_INO};
use crate::store::{scan_all, Batch, Space, Store, StoreView};
use crate::store_dir::{self, open::OpenError};

/// Bound on directory depth when walking up; deeper means a cycle, i.e. corruption.
const MAX_DEPTH: usize = 1 << 20;
/// Items per batch when an upgrade rewrites the store.
const UPGRADE_BATCH_ITEMS: usize = 50_000;

pub(crate) struct Facts {
    pub(crate) kind: FileKind,
    pub(crate) nlink: u32,
    pub(crate) size: u64,
    pub(crate) ctime: Timestamp,
    pub(crate) parent: u64,
}

/// What the store should hold for recursive usage and link parents.
pub(crate) struct Expected {
    /// Every directory's recursive usage.
    pub(crate) usage: HashMap<u64, TreeUsage>,
    /// Non-directories with exactly one name: where it is.
    pub(crate) single_parent: HashMap<u64, u64>,
    /// Non-directories with several names: (ino, dir) -> names in dir.
    pub(crate) link_parents: BTreeMap<(u64, u64), u32>,
    /// Each inode's stored parent field and link count, for the comparison.
    pub(crate) facts: HashMap<u64, Facts>,
}

pub(crate) fn scan<S: StoreView + ?Sized>(
    store: &S,
    range: (Vec<u8>, Vec<u8>),
    visit: impl FnMut(&[u8], &[u8]) -> FsResult<()>,
) -> FsResult<()> {
    scan_all(store, Space::Meta, range, visit)
}

/// Recomputes recursive usage and link parents from every inode and entry.
pub(crate) fn compute<S: StoreView + ?Sized>(store: &S) -> FsResult<Expected> {
    let mut facts = HashMap::new();
    scan(store, keys::all_inodes_range(), |key, value| {
        let ino = keys::decode_inode_key(key)?;
        let inode = keys::decode_inode(ino, value)?;
        facts.insert(
            ino,
            Facts {
                kind: inode.kind,
                nlink: inode.nlink,
                size: inode.size,
                ctime: inode.ctime,
                parent: inode.parent,
            },
        );
        Ok(())
    })?;
    // What each directory's own entries add, before adding subdirectories' subtrees.
    let mut direct: HashMap<u64, TreeUsage> = HashMap::new();
    let mut names: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    scan(store, keys::all_entries_range(), |key, value| {
        let (parent, _) = keys::decode_entry_key(key)?;
        let (ino, _) = keys::decode_entry(key, value)?;
        // A dangling entry is fsck's to report; it adds nothing here.
        let Some(child) = facts.get(&ino) else {
            return Ok(());
        };
        let sums = direct.entry(parent).or_default();
        sums.entries += 1;
        sums.rctime = sums.rctime.max(child.ctime);
        if child.kind == FileKind::Regular {
            sums.files += 1;
            sums.bytes += child.size;
        }
        if child.kind != FileKind::Directory {
            *names.entry((ino, parent)).or_default() += 1;
        }
        Ok(())
    })?;
    let mut usage: HashMap<u64, TreeUsage> = facts
        .iter()
        .filter(|(_, f)| f.kind == FileKind::Directory)
        .map(|(&ino, f)| {
            let own = TreeUsage {
                rctime: f.ctime,
                ..TreeUsage::default()
            };
            (ino, own)
        })
        .collect();
    for (&dir, sums) in &direct {
        add_to_ancestors(dir, sums, &facts, &mut usage)?;
    }
    let mut single_parent = HashMap::new();
    let mut link_parents = BTreeMap::new();
    let mut count_of: HashMap<u64, u32> = HashMap::new();
    for &(ino, _) in names.keys() {
        *count_of.entry(ino).or_default() += 1;
    }
    for ((ino, dir), count) in names {
        if count == 1 && count_of.get(&ino) == Some(&1) {
            single_parent.insert(ino, dir);
        } else {
            link_parents.insert((ino, dir), count);
        }
    }
    Ok(Expected {
        usage,
        single_parent,
        link_parents,
        facts,
    })
}

/// Adds a directory's own entries to it and to every ancestor.
fn add_to_ancestors(
    dir: u64,
    sums: &TreeUsage,
    facts: &HashMap<u64, Facts>,
    usage: &mut HashMap<u64, TreeUsage>,
) -> FsResult<()> {
    let mut current = dir;
    // A cycle (which fsck reports from the tree check) stops the walk.
    for _ in 0..=facts.len().min(MAX_DEPTH) {
        let Some(total) = usage.get_mut(&current) else {
            // Not a directory or missing: fsck reports the tree itself.
            return Ok(());
        };
        total.entries += sums.entries;
        total.files += sums.files;
        total.bytes += sums.bytes;
        total.rctime = total.rctime.max(sums.rctime);
        if current == ROOT_INO {
            return Ok(());
        }
        current = match facts.get(&current) {
            Some(f) => f.parent,
            None => return Ok(()),
        };
    }
    Ok(())
}

/// The recursive usage records as stored, by directory.
pub(crate) fn stored<S: StoreView + ?Sized>(store: &S) -> FsResult<HashMap<u64, TreeUsage>> {
    let mut stored_usage = HashMap::new();
    scan(store, keys::all_tree_usage_range(), |key, value| {
        stored_usage.insert(
            keys::decode_tree_usage_key(key)?,
            keys::decode_tree_usage(key, value)?,
        );
        Ok(())
    })?;
    Ok(stored_usage)
}

/// Rewrites a format-1 store to the current format: recursive usage of every directory,
/// link parents, and the parent field of singly linked files; the superblock last, so a
/// crash midway leaves a format-1 store that the next open upgrades again from scratch.
pub(crate) fn upgrade(store: &dyn Store) -> FsResult<()> {
    let expected = compute(store)?;
    let mut batch = Batch::default();
    let flush = |batch: &mut Batch| -> FsResult<()> {
        if batch.len() >= UPGRADE_BATCH_ITEMS {
            store.write(std::mem::take(batch))?;
        }
        Ok(())
    };
    for (&dir, usage) in &expected.usage {
        batch.put(
            Space::Meta,
            keys::tree_usage_key(dir),
            keys::encode_tree_usage(usage),
        );
        flush(&mut batch)?;
    }
    for (&(ino, dir), &count) in &expected.link_parents {
        batch.put(
            Space::Meta,
            keys::link_parent_key(ino, dir),
            keys::encode_link_count(count),
        );
        flush(&mut batch)?;
    }
    for (&ino, &dir) in &expected.single_parent {
        let key = keys::inode_key(ino);
        let Some(value) = store.get(Space::Meta, &key)? else {
            continue;
        };
        let mut inode = keys::decode_inode(ino, &value)?;
        if inode.parent != dir {
            inode.parent = dir;
            batch.put(Space::Meta, key, keys::encode_inode(&inode));
            flush(&mut batch)?;
        }
    }
    store.write(batch)?;
    let mut superblock = match store.get(Space::Meta, &keys::superblock_key())? {
        Some(value) => keys::decode_superblock(&value)?,
        None => return Err(FsError::Corrupt("no superblock".into())),
    };
    superblock.format_version = FORMAT_VERSION;
    let mut last = Batch::default();
    last.put(
        Space::Meta,
        keys::superblock_key(),
        keys::encode_superblock(&superblock),
    );
    store.write(last)?;
    store.sync()?;
    Ok(())
}

/// Brings an older store in `dir` (open as `store`) to the current format, then its
/// `FORMAT` file; a read-only open cannot, and says so.
pub(crate) fn upgrade_store_dir(
    dir: &std::path::Path,
    store: &dyn Store,
    read_only: bool,
) -> Result<(), OpenError> {
    let superblock = match store.get(Space::Meta, &keys::superblock_key())? {
        Some(value) => keys::decode_superblock(&value)?,
        None => return Err(OpenError::Damaged("no superblock".into())),
    };
    if superblock.format_version < FORMAT_VERSION {
        if read_only {
            return Err(OpenError::Damaged(format!(
                "store format version {} needs an upgrade to {FORMAT_VERSION}: open it read-write once",
                superblock.format_version
            )));
        }
        tracing::info!(
            from = superblock.format_version,
            to = FORMAT_VERSION,
            "upgrading the store format (recursive usage)"
        );
        upgrade(store)?;
        store_dir::write_format(dir)?;
        // What the upgrade wrote (tables, journals) was made under the caller's umask.
        store_dir::access::make_private(dir)
            .map_err(|error| store_dir::StoreDirError::Io(dir.into(), error))?;
        return Ok(());
    }
    store_dir::write_format(dir)?;
    Ok(())
}
