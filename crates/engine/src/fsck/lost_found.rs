//! Reconnecting what lost its name, as e2fsck does: every inode that no entry names
//! (and that is not an orphan, unlinked while open) and every directory that no longer
//! reaches the root gets an entry `#<inode number>` in `/lost+found`, which is made when
//! needed.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::check;
use super::repair::Repairs;
use super::scan_all;
use crate::error::FsResult;
use crate::keys;
use crate::records::inode::{FileKind, Inode, Timestamp, ROOT_INO};
use crate::store::Space;

pub(super) const LOST_FOUND: &[u8] = b"lost+found";

/// Where a directory's one entry is: (parent, name).
type DirName = (u64, Vec<u8>);

pub(super) fn reconnect(repairs: &mut Repairs) -> FsResult<()> {
    let inodes = check::read_inodes(repairs.store)?;
    let orphans = check::read_orphans(repairs.store)?;
    let reclaims = check::read_reclaims(repairs.store)?;
    let mut named: HashSet<u64> = HashSet::new();
    let mut dir_names: HashMap<u64, DirName> = HashMap::new();
    scan_all(
        repairs.store,
        Space::Meta,
        keys::all_entries_range(),
        |key, value| {
            let (parent, name) = keys::decode_entry_key(key)?;
            let (ino, kind) = keys::decode_entry(key, value)?;
            named.insert(ino);
            if kind == FileKind::Directory {
                dir_names.insert(ino, (parent, name.to_vec()));
            }
            Ok(())
        },
    )?;
    let mut lost: BTreeMap<u64, FileKind> = inodes
        .iter()
        .filter(|(ino, facts)| {
            facts.kind != FileKind::Directory && !named.contains(ino) && !orphans.contains(ino)
        })
        .map(|(&ino, facts)| (ino, facts.kind))
        .collect();
    let mut dirs: Vec<u64> = inodes
        .iter()
        .filter(|(_, facts)| facts.kind == FileKind::Directory)
        .map(|(&ino, _)| ino)
        .collect();
    dirs.sort_unstable();
    // Reached: the root, trees being deleted, and what is found to lead to them.
    let mut reached: HashSet<u64> = reclaims.iter().copied().collect();
    reached.insert(ROOT_INO);
    for dir in dirs {
        while let Err(top) = reach(dir, &dir_names, &mut reached) {
            // The top of a detached tree, or where a cycle closes: its old name goes and
            // lost+found names it, which reaches the root.
            if let Some((parent, name)) = dir_names.remove(&top) {
                repairs.note(format!(
                    "dropped: entry {parent}/{:?} of directory {top}, in a cycle cut off from the root",
                    String::from_utf8_lossy(&name)
                ));
                repairs.delete(Space::Meta, keys::entry_key(parent, &name))?;
            }
            lost.insert(top, FileKind::Directory);
            reached.insert(top);
        }
    }
    if lost.is_empty() {
        return repairs.flush();
    }
    let lost_found = lost_found_dir(repairs, &inodes)?;
    for (ino, kind) in lost {
        let name = format!("#{ino}");
        repairs.note(format!("reconnected: {kind:?} {ino} as /lost+found/{name}"));
        repairs.put(
            Space::Meta,
            keys::entry_key(lost_found, name.as_bytes()),
            keys::encode_entry(ino, kind),
        )?;
    }
    repairs.flush()
}

/// Walks up the names from `dir`: Ok once a reached directory is found (all on the way are
/// reached then), else the directory to reconnect (one without a name, or where the walk
/// came back on itself).
fn reach(
    dir: u64,
    dir_names: &HashMap<u64, DirName>,
    reached: &mut HashSet<u64>,
) -> Result<(), u64> {
    let mut path = Vec::new();
    let mut on_path = HashSet::new();
    let mut current = dir;
    loop {
        if reached.contains(&current) {
            reached.extend(path);
            return Ok(());
        }
        if !on_path.insert(current) {
            return Err(current);
        }
        path.push(current);
        match dir_names.get(&current) {
            Some((parent, _)) => current = *parent,
            None => return Err(current),
        }
    }
}

/// The inode of `/lost+found`, made (root's, mode 0700, as mklost+found does) when the
/// root has no directory of that name.
fn lost_found_dir(
    repairs: &mut Repairs,
    inodes: &HashMap<u64, check::InodeFacts>,
) -> FsResult<u64> {
    let key = keys::entry_key(ROOT_INO, LOST_FOUND);
    if let Some(value) = repairs.store.get(Space::Meta, &key)? {
        if let Ok((ino, FileKind::Directory)) = keys::decode_entry(&key, &value) {
            return Ok(ino);
        }
    }
    let ino = next_free_ino(repairs, inodes)?;
    let now = Timestamp::now();
    let dir = Inode::empty_directory(ino, ROOT_INO, 0o700, 0, 0, now);
    // A non-directory named lost+found keeps its name; the new directory takes another.
    let name: Vec<u8> = if repairs.store.get(Space::Meta, &key)?.is_some() {
        format!("lost+found.{ino}").into_bytes()
    } else {
        LOST_FOUND.to_vec()
    };
    repairs.note(format!(
        "made: /{} (inode {ino})",
        String::from_utf8_lossy(&name)
    ));
    repairs.put(Space::Meta, keys::inode_key(ino), keys::encode_inode(&dir))?;
    repairs.put(
        Space::Meta,
        keys::entry_key(ROOT_INO, &name),
        keys::encode_entry(ino, FileKind::Directory),
    )?;
    repairs.put(
        Space::Meta,
        keys::next_ino_key(),
        keys::encode_next_ino(ino + 1),
    )?;
    Ok(ino)
}

/// A number past every inode there is and every one handed out (the engine's mark).
fn next_free_ino(repairs: &Repairs, inodes: &HashMap<u64, check::InodeFacts>) -> FsResult<u64> {
    let highest = inodes.keys().copied().max().unwrap_or(ROOT_INO);
    let recorded = match repairs.store.get(Space::Meta, &keys::next_ino_key())? {
        Some(value) => keys::decode_next_ino(&value)?,
        None => 0,
    };
    Ok((highest + 1).max(recorded))
}
