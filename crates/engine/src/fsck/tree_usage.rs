//! Recursive usage recomputed from a full scan: what `fsck` compares the stored values
//! with, and what upgrading a format-1 store writes.

use std::collections::{BTreeMap, HashMap};

use crate::engine::OpenError;
use crate::error::{FsError, FsResult};
use crate::keys::{self, FORMAT_VERSION};
use crate::namespace::inode::{FileKind, Timestamp, TreeUsage, ROOT_INO};
use crate::store::{Batch, Space, Store, StoreView};
use crate::store_dir;

/// Bound on directory depth when walking up; deeper means a cycle, i.e. corruption.
const MAX_DEPTH: usize = 1 << 20;
/// Items per batch when an upgrade rewrites the store.
const UPGRADE_BATCH_ITEMS: usize = 50_000;

struct Facts {
    kind: FileKind,
    nlink: u32,
    size: u64,
    ctime: Timestamp,
    parent: u64,
}

/// What the store should hold for recursive usage and link parents.
pub(crate) struct Expected {
    /// Every directory's recursive usage.
    usage: HashMap<u64, TreeUsage>,
    /// Non-directories with exactly one name: where it is.
    single_parent: HashMap<u64, u64>,
    /// Non-directories with several names: (ino, dir) -> names in dir.
    link_parents: BTreeMap<(u64, u64), u32>,
    /// Each inode's stored parent field and link count, for the comparison.
    facts: HashMap<u64, Facts>,
}

fn scan<S: StoreView + ?Sized>(
    store: &S,
    range: (Vec<u8>, Vec<u8>),
    visit: impl FnMut(&[u8], &[u8]) -> FsResult<()>,
) -> FsResult<()> {
    super::scan_all(store, Space::Meta, range, visit)
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

/// Compares the stored recursive usage and link parents with a recomputation; returns one
/// line per difference.
/// The recursive usage records as stored, by directory.
fn stored<S: StoreView + ?Sized>(store: &S) -> FsResult<HashMap<u64, TreeUsage>> {
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

pub(crate) fn verify<S: StoreView + ?Sized>(store: &S) -> FsResult<Vec<String>> {
    let expected = compute(store)?;
    let mut problems = Vec::new();
    let mut stored_usage = stored(store)?;
    let mut dirs: Vec<_> = expected.usage.iter().collect();
    dirs.sort_by_key(|(ino, _)| **ino);
    for (&dir, want) in dirs {
        let have = stored_usage.remove(&dir).unwrap_or(TreeUsage {
            rctime: expected.facts[&dir].ctime,
            ..TreeUsage::default()
        });
        if (have.entries, have.files, have.bytes) != (want.entries, want.files, want.bytes) {
            problems.push(format!(
                "directory {dir}: tree usage says {} entries / {} files / {} bytes, scan finds {} / {} / {}",
                have.entries, have.files, have.bytes, want.entries, want.files, want.bytes
            ));
        }
        // Newer is allowed: the clock may have stepped back since a removal stamped it.
        if have.rctime < want.rctime {
            problems.push(format!(
                "directory {dir}: rctime {:?} older than the newest ctime below it {:?}",
                have.rctime, want.rctime
            ));
        }
    }
    for dir in stored_usage.keys() {
        problems.push(format!(
            "tree usage record for {dir}, which is not a directory"
        ));
    }
    let mut stored_links = BTreeMap::new();
    scan(store, keys::all_link_parents_range(), |key, value| {
        stored_links.insert(
            keys::decode_link_parent_key(key)?,
            keys::decode_link_count(key, value)?,
        );
        Ok(())
    })?;
    if stored_links != expected.link_parents {
        let differing = stored_links
            .keys()
            .chain(expected.link_parents.keys())
            .find(|key| stored_links.get(key) != expected.link_parents.get(key));
        if let Some(&(ino, dir)) = differing {
            problems.push(format!(
                "inode {ino}: link parent record for {dir} says {:?} names, entries say {:?}",
                stored_links.get(&(ino, dir)),
                expected.link_parents.get(&(ino, dir))
            ));
        }
    }
    let mut inodes: Vec<_> = expected.facts.iter().collect();
    inodes.sort_by_key(|(ino, _)| **ino);
    for (&ino, facts) in inodes {
        // An inode without names (an orphan awaiting its purge) has no parent to check:
        // `link_added` sets the field from scratch when it gets a name, and O_TMPFILEs
        // made before that was written as 0 still carry their directory.
        if facts.kind == FileKind::Directory || facts.nlink == 0 {
            continue;
        }
        let want = expected.single_parent.get(&ino).copied().unwrap_or(0);
        if facts.parent != want {
            problems.push(format!(
                "inode {ino}: parent {} but {want} expected (nlink {})",
                facts.parent, facts.nlink
            ));
        }
    }
    Ok(problems)
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

/// `fsck --repair`: rewrites recursive usage and link parents from the inodes and entries
/// there are, deleting records of what is gone. (The parent field of each inode is
/// repair's `fix_inodes`'s.)
pub(super) fn rewrite(repairs: &mut super::repair::Repairs) -> FsResult<()> {
    let expected = compute(repairs.store)?;
    let mut stored_usage = stored(repairs.store)?;
    let mut dirs: Vec<_> = expected.usage.iter().collect();
    dirs.sort_by_key(|(ino, _)| **ino);
    for (&dir, want) in dirs {
        let have = stored_usage.remove(&dir);
        let same = have.is_some_and(|have| {
            (have.entries, have.files, have.bytes) == (want.entries, want.files, want.bytes)
                && have.rctime >= want.rctime
        });
        if !same {
            repairs.note(format!(
                "fixed: tree usage of directory {dir}: {} entries / {} files / {} bytes",
                want.entries, want.files, want.bytes
            ));
            repairs.put(
                Space::Meta,
                keys::tree_usage_key(dir),
                keys::encode_tree_usage(want),
            )?;
        }
    }
    for dir in stored_usage.into_keys() {
        repairs.note(format!(
            "dropped: the tree usage record of {dir}, not a directory"
        ));
        repairs.delete(Space::Meta, keys::tree_usage_key(dir))?;
    }
    let mut stored_links = BTreeMap::new();
    scan(
        repairs.store,
        keys::all_link_parents_range(),
        |key, value| {
            stored_links.insert(
                keys::decode_link_parent_key(key)?,
                keys::decode_link_count(key, value)?,
            );
            Ok(())
        },
    )?;
    for (&(ino, dir), &count) in &expected.link_parents {
        if stored_links.remove(&(ino, dir)) != Some(count) {
            repairs.note(format!(
                "fixed: inode {ino} has {count} names in directory {dir}"
            ));
            repairs.put(
                Space::Meta,
                keys::link_parent_key(ino, dir),
                keys::encode_link_count(count),
            )?;
        }
    }
    for (ino, dir) in stored_links.into_keys() {
        repairs.note(format!(
            "dropped: the link parent record of inode {ino} in {dir}"
        ));
        repairs.delete(Space::Meta, keys::link_parent_key(ino, dir))?;
    }
    repairs.flush()
}
