//! `fsck --repair`, as `xfs_repair` does: keep every record that reads and fits, drop
//! (and name) those that cannot be made to fit, reconnect inodes that lost their names
//! into `/lost+found`, and rewrite everything derived from the rest (link counts,
//! directory sizes, parents, recursive usage, usage counters) from what is there.
//!
//! Each pass reads the store as the passes before it left it, writes its changes in
//! bounded batches and notes each one; the final check then proves the result.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use super::check::{self, InodeFacts};
use super::salvage::Damaged;
use super::{check_tuning, checked, scan_all, FsckReport};
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::records::inode::{Content, FileKind, Usage, UsageKey, ROOT_INO};
use crate::store::{raw_salvage, Batch, FjallStore, Space, Store};
use crate::store_dir::open::OpenError;
use crate::store_dir::state as store_state;
use crate::store_dir::{self, StoreLock};

/// Notes listed per repair; the count stays exact.
const MAX_LISTED_NOTES: usize = 200;

/// Opens the store in place, letting recovery drop what it cannot read (a journal from its
/// first damaged batch on), repairs what is left (`repair`), checks it, and records the
/// result as the store's state so it mounts again. Says what it dropped and changed.
pub fn repair_store_dir(dir: &Path) -> Result<FsckReport, OpenError> {
    match store_dir::read_format(dir) {
        // Written again below, under the lock.
        Ok(_) | Err(store_dir::StoreDirError::FormatLost(..)) => {}
        Err(error) => return Err(error.into()),
    }
    let _lock = StoreLock::acquire(dir)?;
    let mut rebuilt: Vec<String> = super::store_files::rebuild_format(dir)?
        .into_iter()
        .collect();
    rebuilt.extend(super::store_files::rebuild_identity(dir)?);
    let kv = store_dir::kv_path(dir);
    let io = |error| OpenError::StoreDir(store_dir::StoreDirError::Io(dir.to_path_buf(), error));
    let findings = store_state::check_store_journals(dir, &kv).map_err(io)?;
    let cut = store_state::cut_at_damage(&kv).map_err(io)?;
    // A table block or blob that fails its checksum stops every pass's scans, and a file
    // gone or cut short stops fjall from opening the store: the store is salvaged into a
    // new one first (`salvage`), which the passes then repair.
    let opened = match raw_salvage::unopenable(&kv).map_err(io)? {
        Some(why) => Err(why),
        None => open_for_repair(&kv)?,
    };
    let (store, salvaged) = match opened {
        Ok(store) => (store, None),
        Err(why) => {
            let files = raw_salvage::read_store(&kv)?;
            let salvaged = super::salvage::salvage(dir, Damaged { files, why })?;
            (FjallStore::open(&kv, &check_tuning())?, Some(salvaged))
        }
    };
    let repaired = repair(&store);
    let mut report = checked(&store);
    report.notes.extend(rebuilt);
    if let Some(salvaged) = &salvaged {
        report.notes.extend(super::salvage::notes(salvaged, &store));
    }
    for problem in findings
        .problems
        .iter()
        .filter(|problem| !problem.contains("damaged at"))
    {
        report.notes.push(format!("dropped: {problem}"));
    }
    for dropped in cut {
        report.notes.push(format!("dropped: {dropped}"));
    }
    // A salvaged store's files are all new: the damaged ones are named above.
    let changed_files = if salvaged.is_some() {
        &[][..]
    } else {
        &findings.changed_files[..]
    };
    for changed in changed_files {
        report
            .notes
            .push(format!("recorded as it is now: {changed}"));
    }
    match repaired {
        Ok(notes) => report.notes.extend(notes),
        Err(error) => report.problem(format!("the repair stopped: {error}")),
    }
    store.sync()?;
    drop(store);
    let state = store_state::clean_state(&kv).map_err(io)?;
    store_state::write_state(dir, &state).map_err(io)?;
    Ok(report)
}

/// The store at `kv` opened, if it reads whole; else why it needs salvaging (closed then,
/// so its files can be read and moved aside).
fn open_for_repair(kv: &Path) -> Result<Result<FjallStore, String>, OpenError> {
    let store = match FjallStore::open(kv, &check_tuning()) {
        Ok(store) => store,
        Err(error) => return Ok(Err(format!("the key-value store does not open ({error})"))),
    };
    Ok(match store.first_damage()? {
        None => Ok(store),
        Some(what) => Err(format!(
            "a table block or blob of the key-value store fails to read ({what})"
        )),
    })
}

/// Repairs the namespace in `store`; returns one note per change (bounded, with a count).
pub fn repair(store: &dyn Store) -> FsResult<Vec<String>> {
    let mut repairs = Repairs::new(store);
    if store.get(Space::Meta, &keys::superblock_key())?.is_none() {
        return Err(FsError::Corrupt(
            "no superblock: not repairable (make a new store and restore a backup)".into(),
        ));
    }
    drop_undecodable(&mut repairs)?;
    drop_dangling_entries(&mut repairs)?;
    drop_records_of_missing_inodes(&mut repairs)?;
    super::lost_found::reconnect(&mut repairs)?;
    fix_inodes(&mut repairs)?;
    super::tree_usage::rewrite(&mut repairs)?;
    rewrite_counters(&mut repairs)?;
    Ok(repairs.into_notes())
}

/// Writes a repair's changes in bounded batches and keeps its notes.
pub(super) struct Repairs<'a> {
    pub(super) store: &'a dyn Store,
    batch: Batch,
    notes: Vec<String>,
    changes: u64,
}

impl<'a> Repairs<'a> {
    fn new(store: &'a dyn Store) -> Self {
        Self {
            store,
            batch: Batch::default(),
            notes: Vec::new(),
            changes: 0,
        }
    }

    pub(super) fn note(&mut self, text: String) {
        self.changes += 1;
        if self.notes.len() < MAX_LISTED_NOTES {
            self.notes.push(text);
        }
    }

    pub(super) fn put(&mut self, space: Space, key: Vec<u8>, value: Vec<u8>) -> FsResult<()> {
        self.batch.put(space, key, value);
        self.flush_if_full()
    }

    pub(super) fn delete(&mut self, space: Space, key: Vec<u8>) -> FsResult<()> {
        self.batch.delete(space, key);
        self.flush_if_full()
    }

    fn flush_if_full(&mut self) -> FsResult<()> {
        if self.batch.len() >= crate::defaults::BATCH_OPS {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes what is pending: each pass ends with this, so the next reads its result.
    pub(super) fn flush(&mut self) -> FsResult<()> {
        if !self.batch.is_empty() {
            self.store.write(std::mem::take(&mut self.batch))?;
        }
        Ok(())
    }

    fn into_notes(mut self) -> Vec<String> {
        let listed = self.notes.len() as u64;
        if self.changes > listed {
            self.notes
                .push(format!("... and {} more changes", self.changes - listed));
        }
        self.notes
    }
}

/// A record that does not decode tells nothing that can be trusted: it goes.
fn drop_undecodable(repairs: &mut Repairs) -> FsResult<()> {
    let droppable = keys::RECORD_KINDS
        .iter()
        .filter(|kind| kind.dropped_when_undecodable);
    for kind in droppable {
        let mut undecodable = Vec::new();
        scan_all(repairs.store, kind.space, kind.range(), |key, value| {
            if let Err(error) = (kind.decode)(key, value) {
                undecodable.push((key.to_vec(), error));
            }
            Ok(())
        })?;
        for (key, error) in undecodable {
            repairs.note(format!("dropped: an undecodable {} ({error})", kind.name));
            repairs.delete(kind.space, key)?;
        }
    }
    repairs.flush()
}

/// Entries whose parent is not a directory or whose target is missing go; an entry of
/// the wrong kind is rewritten with its inode's; a directory keeps one name (the one its
/// parent pointer agrees with), and the root none.
fn drop_dangling_entries(repairs: &mut Repairs) -> FsResult<()> {
    let inodes = check::read_inodes(repairs.store)?;
    let mut dangling = Vec::new();
    let mut wrong_kind = Vec::new();
    let mut names_of_dirs: BTreeMap<u64, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
    scan_all(
        repairs.store,
        Space::Meta,
        keys::all_entries_range(),
        |key, value| {
            let (parent, name) = keys::decode_entry_key(key)?;
            let (ino, kind) = keys::decode_entry(key, value)?;
            let parent_is_dir = matches!(
                inodes.get(&parent),
                Some(facts) if facts.kind == FileKind::Directory
            );
            match inodes.get(&ino) {
                Some(facts) if parent_is_dir && ino != ROOT_INO => {
                    if facts.kind != kind {
                        wrong_kind.push((key.to_vec(), ino, facts.kind, kind));
                    }
                    if facts.kind == FileKind::Directory {
                        names_of_dirs
                            .entry(ino)
                            .or_default()
                            .push((parent, name.to_vec()));
                    }
                }
                _ => {
                    let problem = check::entry_problem(&inodes, parent, name, ino, kind)
                        .unwrap_or_else(|| format!("entry {parent}/{name:?} names the root"));
                    dangling.push((key.to_vec(), problem));
                }
            }
            Ok(())
        },
    )?;
    for (key, problem) in dangling {
        repairs.note(format!("dropped: {problem}"));
        repairs.delete(Space::Meta, key)?;
    }
    for (key, ino, kind, said) in wrong_kind {
        repairs.note(format!(
            "fixed: an entry said {said:?} for inode {ino}, which is {kind:?}"
        ));
        repairs.put(Space::Meta, key, keys::encode_entry(ino, kind))?;
    }
    for (dir, mut names) in names_of_dirs {
        if names.len() < 2 {
            continue;
        }
        let parent = inodes.get(&dir).map_or(0, |facts| facts.parent);
        let keep = names.iter().position(|(p, _)| *p == parent).unwrap_or(0);
        names.remove(keep);
        for (parent, name) in names {
            repairs.note(format!(
                "dropped: a second name {parent}/{:?} of directory {dir}",
                String::from_utf8_lossy(&name)
            ));
            repairs.delete(Space::Meta, keys::entry_key(parent, &name))?;
        }
    }
    repairs.flush()
}

/// Chunks, xattrs and orphan markers of inodes that are gone, chunks an inode cannot have
/// (inline, or past its size) and reclaim records of what is not a detached directory.
fn drop_records_of_missing_inodes(repairs: &mut Repairs) -> FsResult<()> {
    let inodes = check::read_inodes(repairs.store)?;
    drop_stray_chunks(repairs, &inodes)?;
    let mut stray = Vec::new();
    scan_all(
        repairs.store,
        Space::Meta,
        keys::all_xattrs_range(),
        |key, _| {
            let (ino, _) = keys::decode_xattr_key(key)?;
            if !inodes.contains_key(&ino) {
                stray.push((key.to_vec(), format!("an xattr of missing inode {ino}")));
            }
            Ok(())
        },
    )?;
    for ino in check::read_orphans(repairs.store)? {
        if !inodes.contains_key(&ino) {
            let text = format!("the orphan marker of missing inode {ino}");
            stray.push((keys::orphan_key(ino), text));
        }
    }
    for ino in check::read_trims(repairs.store)?.into_keys() {
        if !inodes.get(&ino).is_some_and(|facts| facts.chunked) {
            let text = format!("the trim record of {ino}, not a chunked inode");
            stray.push((keys::trim_key(ino), text));
        }
    }
    for dir in check::read_reclaims(repairs.store)? {
        if !check::is_detached_directory(&inodes, dir) {
            let text = format!("the reclaim record of {dir}, not a detached directory");
            stray.push((keys::reclaim_key(dir), text));
        }
    }
    for (key, what) in stray {
        repairs.note(format!("dropped: {what}"));
        repairs.delete(Space::Meta, key)?;
    }
    repairs.flush()
}

/// Deletes the chunks `check::chunk_problem` objects to, one note per inode.
fn drop_stray_chunks(repairs: &mut Repairs, inodes: &HashMap<u64, InodeFacts>) -> FsResult<()> {
    let Some(chunk_bytes) = check::chunk_bytes(repairs.store)? else {
        return Ok(());
    };
    let trims = check::read_trims(repairs.store)?;
    let mut doomed: BTreeMap<u64, (Vec<Vec<u8>>, String)> = BTreeMap::new();
    scan_all(
        repairs.store,
        Space::Data,
        keys::all_chunks_range(),
        |key, value| {
            let (ino, chunk) = keys::decode_chunk_key(key)?;
            if let Some(problem) =
                check::chunk_problem(inodes, &trims, chunk_bytes, ino, chunk, value.len())
            {
                let (keys, first) = doomed.entry(ino).or_default();
                if keys.is_empty() {
                    *first = problem;
                }
                keys.push(key.to_vec());
            }
            Ok(())
        },
    )?;
    for (_, (keys, first)) in doomed {
        repairs.note(format!(
            "dropped: {} chunk(s), the first: {first}",
            keys.len()
        ));
        for key in keys {
            repairs.delete(Space::Data, key)?;
        }
    }
    repairs.flush()
}

/// What the entries, chunks and xattrs say each inode's fields must be.
#[derive(Default)]
struct Derived {
    names: HashMap<u64, (u32, u64)>,
    children: HashMap<u64, (u64, u32)>,
    chunk_bytes: HashMap<u64, u64>,
    with_xattrs: HashSet<u64>,
}

fn derive(store: &dyn Store) -> FsResult<Derived> {
    let mut derived = Derived::default();
    scan_all(
        store,
        Space::Meta,
        keys::all_entries_range(),
        |key, value| {
            let (parent, _) = keys::decode_entry_key(key)?;
            let (ino, kind) = keys::decode_entry(key, value)?;
            let (count, dir) = derived.names.entry(ino).or_default();
            *count += 1;
            *dir = parent;
            let (children, subdirs) = derived.children.entry(parent).or_default();
            *children += 1;
            *subdirs += u32::from(kind == FileKind::Directory);
            Ok(())
        },
    )?;
    scan_all(
        store,
        Space::Data,
        keys::all_chunks_range(),
        |key, value| {
            let (ino, _) = keys::decode_chunk_key(key)?;
            *derived.chunk_bytes.entry(ino).or_default() += value.len() as u64;
            Ok(())
        },
    )?;
    scan_all(store, Space::Meta, keys::all_xattrs_range(), |key, _| {
        derived.with_xattrs.insert(keys::decode_xattr_key(key)?.0);
        Ok(())
    })?;
    Ok(derived)
}

/// Rewrites each inode's link count, size (directories, inline files), allocated bytes,
/// parent and xattr mark from what is there; drops orphan markers of inodes with names.
#[expect(
    clippy::too_many_lines,
    reason = "one pass over every inode rewriting each derived field in the order fsck reports them; the fields share the pass's state"
)]
fn fix_inodes(repairs: &mut Repairs) -> FsResult<()> {
    let derived = derive(repairs.store)?;
    let orphans = check::read_orphans(repairs.store)?;
    let mut fixed = Vec::new();
    scan_all(
        repairs.store,
        Space::Meta,
        keys::all_inodes_range(),
        |key, value| {
            let ino = keys::decode_inode_key(key)?;
            let inode = keys::decode_inode(ino, value)?;
            let mut want = inode.clone();
            let (names, last_dir) = derived.names.get(&ino).copied().unwrap_or_default();
            if inode.kind == FileKind::Directory {
                let (children, subdirs) = derived.children.get(&ino).copied().unwrap_or_default();
                want.nlink = 2 + subdirs;
                want.size = children;
                // Unnamed and not the root: a detached tree being deleted keeps parent 0.
                want.parent = match ino {
                    ROOT_INO => ROOT_INO,
                    _ if names == 0 => inode.parent,
                    _ => last_dir,
                };
            } else {
                want.nlink = names;
                want.parent = if names == 1 { last_dir } else { 0 };
            }
            match &inode.content {
                Content::Chunked => {
                    want.allocated_bytes = derived.chunk_bytes.get(&ino).copied().unwrap_or(0)
                }
                Content::Inline(bytes) if inode.kind == FileKind::Regular => {
                    want.size = bytes.len() as u64;
                    want.allocated_bytes = bytes.len() as u64;
                }
                Content::Inline(_) => {}
            }
            if derived.with_xattrs.contains(&ino) {
                want.may_have_xattrs = true;
            }
            if want != inode {
                fixed.push((inode, want));
            }
            Ok(())
        },
    )?;
    for (was, want) in fixed {
        repairs.note(format!(
            "fixed: inode {} ({:?}): nlink {} -> {}, size {} -> {}, allocated {} -> {}, parent {} -> {}",
            was.ino,
            was.kind,
            was.nlink,
            want.nlink,
            was.size,
            want.size,
            was.allocated_bytes,
            want.allocated_bytes,
            was.parent,
            want.parent
        ));
        repairs.put(
            Space::Meta,
            keys::inode_key(want.ino),
            keys::encode_inode(&want),
        )?;
    }
    for ino in orphans {
        if derived.names.contains_key(&ino) {
            repairs.note(format!(
                "dropped: the orphan marker of inode {ino}, which has names"
            ));
            repairs.delete(Space::Meta, keys::orphan_key(ino))?;
        }
    }
    repairs.flush()
}

/// Rewrites every usage counter from the inodes there are.
fn rewrite_counters(repairs: &mut Repairs) -> FsResult<()> {
    let mut want: BTreeMap<UsageKey, Usage> = BTreeMap::new();
    scan_all(
        repairs.store,
        Space::Meta,
        keys::all_inodes_range(),
        |key, value| {
            let (owners, bytes) = keys::decode_inode_usage(keys::decode_inode_key(key)?, value)?;
            let usage = want.entry(owners).or_default();
            usage.inodes += 1;
            usage.bytes += bytes;
            Ok(())
        },
    )?;
    let mut have: BTreeMap<UsageKey, Usage> = BTreeMap::new();
    scan_all(
        repairs.store,
        Space::Meta,
        keys::all_counters_range(),
        |key, value| {
            have.insert(
                keys::decode_counter_key(key)?,
                keys::decode_usage(key, value)?,
            );
            Ok(())
        },
    )?;
    for (owners, stored) in &have {
        if !want.contains_key(owners) {
            repairs.note(format!(
                "fixed: usage of uid {} gid {} project {}: {} inodes / {} bytes -> none",
                owners.uid, owners.gid, owners.project, stored.inodes, stored.bytes
            ));
            repairs.delete(Space::Meta, keys::counter_key(*owners))?;
        }
    }
    for (owners, usage) in want {
        let stored = have.get(&owners).copied().unwrap_or_default();
        if stored != usage {
            repairs.note(format!(
                "fixed: usage of uid {} gid {} project {}: {} inodes / {} bytes -> {} / {}",
                owners.uid,
                owners.gid,
                owners.project,
                stored.inodes,
                stored.bytes,
                usage.inodes,
                usage.bytes
            ));
            repairs.put(
                Space::Meta,
                keys::counter_key(owners),
                keys::encode_usage(usage),
            )?;
        }
    }
    repairs.flush()
}
