//! Recursive usage and link parents checked against a recomputation from a full scan
//! (`store_dir::upgrade::compute`, what upgrading a format-1 store writes), and rewritten
//! from it by `--repair`.

use std::collections::BTreeMap;

use crate::error::FsResult;
use crate::keys;
use crate::records::inode::{FileKind, TreeUsage};
use crate::store::{Space, StoreView};
use crate::store_dir::upgrade::{compute, scan, stored};

/// Compares the stored recursive usage and link parents with a recomputation; returns one
/// line per difference.
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
