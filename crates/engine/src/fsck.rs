//! Offline consistency check: every invariant the engine keeps, proven from a full scan.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::engine::OpenError;
use crate::error::FsResult;
use crate::keys::{self, FORMAT_VERSION};
use crate::namespace::inode::{Content, FileKind, Usage, UsageKey, ROOT_INO};
use crate::store::{FjallStore, FjallTuning, Scan, Space, Store};
use crate::store_dir::shadow::StoreShadow;
use crate::store_dir::state;
use crate::store_dir::{self, SharedStoreLock, StoreLock};

/// Stop listing problems past this many; the count stays exact.
const MAX_LISTED_PROBLEMS: usize = 100;
const MAX_DEPTH: usize = 1 << 20;

#[derive(Debug, Default)]
pub struct FsckReport {
    pub inodes: u64,
    pub directories: u64,
    pub entries: u64,
    pub chunks: u64,
    pub xattrs: u64,
    pub orphans: u64,
    /// Trees detached by rmtree, still being deleted.
    pub reclaims: u64,
    pub data_bytes: u64,
    pub problem_count: u64,
    pub problems: Vec<String>,
    /// Worth saying but not damage: a torn journal tail after a crash, what a repair did.
    pub notes: Vec<String>,
    pub elapsed: Duration,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.problem_count == 0
    }

    fn problem(&mut self, text: String) {
        self.problem_count += 1;
        if self.problems.len() < MAX_LISTED_PROBLEMS {
            self.problems.push(text);
        }
    }

    pub fn summary(&self) -> String {
        let seconds = self.elapsed.as_secs_f64().max(1e-9);
        let mut text = format!(
            "{} inodes ({} directories), {} entries, {} chunks ({} data bytes), {} xattrs, {} orphans, {} detached trees; \
             checked in {:.3} s ({:.0} inodes/s)\n",
            self.inodes,
            self.directories,
            self.entries,
            self.chunks,
            self.data_bytes,
            self.xattrs,
            self.orphans,
            self.reclaims,
            seconds,
            self.inodes as f64 / seconds,
        );
        for note in &self.notes {
            let _ = writeln!(text, "note: {note}");
        }
        if self.is_clean() {
            text.push_str("clean\n");
        } else {
            let _ = writeln!(text, "{} problem(s):", self.problem_count);
            for problem in &self.problems {
                let _ = writeln!(text, "  - {problem}");
            }
            if self.problem_count as usize > self.problems.len() {
                let _ = writeln!(
                    text,
                    "  ... and {} more",
                    self.problem_count as usize - self.problems.len()
                );
            }
        }
        text
    }
}

/// Checks the store in `dir`, which must not be mounted, without changing it: the
/// journals are read as they are (`journal_check`), and the key-value store is opened
/// from a private copy (`store_dir::shadow`), since fjall's recovery writes. Works on a
/// read-only or full device. Damage of any kind is a problem in the report (exit 1);
/// only what is not a store at all (or is in use) is an error.
pub fn fsck_store_dir(dir: &Path) -> Result<FsckReport, OpenError> {
    fsck_store_dir_observed(dir, &|_| {})
}

/// [`fsck_store_dir`], telling `progress` how many pairs the check has read so far.
pub fn fsck_store_dir_observed(
    dir: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<FsckReport, OpenError> {
    store_dir::read_format(dir)?;
    let _lock = SharedStoreLock::acquire(dir)?;
    let kv = store_dir::kv_path(dir);
    let io = |error| OpenError::StoreDir(store_dir::StoreDirError::Io(dir.to_path_buf(), error));
    let findings = state::check_store_journals(dir, &kv).map_err(io)?;
    let shadow = StoreShadow::of(&kv).map_err(io)?;
    let store = FjallStore::open(shadow.path(), &check_tuning());
    let mut report = match &store {
        Ok(store) => checked(&crate::fsck_progress::Counting::new(store, progress)),
        Err(error) => {
            let mut report = FsckReport::default();
            report.problem(format!(
                "the key-value store cannot be opened: {error} (a damaged or missing table, \
                 blob, manifest or `current` file)"
            ));
            report
        }
    };
    for problem in findings.problems {
        report.problem(problem);
    }
    report.notes.extend(findings.notes);
    drop(store);
    drop(shadow);
    Ok(report)
}

/// `fsck --repair`: opens the store in place, letting recovery drop what it cannot read
/// (a journal from its first damaged batch on), checks what is left, and records the
/// result as the store's state so it mounts again. Says what it dropped.
pub fn repair_store_dir(dir: &Path) -> Result<FsckReport, OpenError> {
    store_dir::read_format(dir)?;
    let _lock = StoreLock::acquire(dir)?;
    let kv = store_dir::kv_path(dir);
    let io = |error| OpenError::StoreDir(store_dir::StoreDirError::Io(dir.to_path_buf(), error));
    let findings = state::check_store_journals(dir, &kv).map_err(io)?;
    let cut = state::cut_at_damage(&kv).map_err(io)?;
    // The keyspaces flush apart: a cut journal can drop an inode whose chunks already
    // reached a table. Its data is unreachable; dropping it is part of the repair.
    let store = FjallStore::open(&kv, &check_tuning())?;
    let orphaned = drop_chunks_of_missing_inodes(&store)?;
    let mut report = checked(&store);
    if orphaned.chunks > 0 {
        report.notes.push(format!(
            "dropped: {} chunks of {} inodes lost with the journal's tail",
            orphaned.chunks, orphaned.inodes
        ));
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
    store.sync()?;
    drop(store);
    let state = state::clean_state(&kv).map_err(io)?;
    state::write_state(dir, &state).map_err(io)?;
    Ok(report)
}

/// Chunks (and inodes they belonged to) that `drop_chunks_of_missing_inodes` deleted.
struct OrphanedData {
    chunks: u64,
    inodes: u64,
}

/// Deletes every data chunk whose inode is gone, in batches of bounded size.
fn drop_chunks_of_missing_inodes(store: &FjallStore) -> FsResult<OrphanedData> {
    const BATCH_KEYS: usize = 4096;
    let mut orphaned = OrphanedData {
        chunks: 0,
        inodes: 0,
    };
    let mut doomed = Vec::new();
    let mut last_missing = None;
    scan_all(store, Space::Data, keys::all_chunks_range(), |key, _| {
        let (ino, _) = keys::decode_chunk_key(key)?;
        if last_missing != Some(ino) {
            if store.get(Space::Meta, &keys::inode_key(ino))?.is_some() {
                return Ok(());
            }
            last_missing = Some(ino);
            orphaned.inodes += 1;
        }
        doomed.push(key.to_vec());
        Ok(())
    })?;
    orphaned.chunks = doomed.len() as u64;
    for keys in doomed.chunks(BATCH_KEYS) {
        let mut batch = crate::store::Batch::default();
        for key in keys {
            batch.delete(Space::Data, key.clone());
        }
        store.write(batch)?;
    }
    Ok(orphaned)
}

fn check_tuning() -> FjallTuning {
    FjallTuning {
        worker_threads: 1,
        ..FjallTuning::default()
    }
}

/// `check`, with a store that fails to read (a checksum, an I/O error, an undecodable
/// record) as a problem of the report rather than an error.
fn checked(store: &dyn Store) -> FsckReport {
    match check(store) {
        Ok(report) => report,
        Err(error) => {
            let mut report = FsckReport::default();
            report.problem(format!(
                "reading the store failed: {error} (damage in a table or blob file: \
                 checksum, truncation or a deleted file)"
            ));
            report
        }
    }
}

/// Opens an unmounted store for an offline check, locked against a mount meanwhile.
pub(crate) fn open_for_check(dir: &Path) -> Result<(StoreLock, FjallStore), OpenError> {
    store_dir::read_format(dir)?;
    let lock = StoreLock::acquire(dir)?;
    let tuning = FjallTuning {
        worker_threads: 1,
        ..FjallTuning::default()
    };
    let store = FjallStore::open(&store_dir::kv_path(dir), &tuning)?;
    Ok((lock, store))
}

/// What the check remembers of each inode.
struct InodeFacts {
    kind: FileKind,
    nlink: u32,
    size: u64,
    allocated: u64,
    parent: u64,
    chunked: bool,
    inline_len: u64,
    owners: UsageKey,
    may_have_xattrs: bool,
}

#[derive(Default)]
struct LinkFacts {
    entries_naming: u32,
    children: u64,
    subdirs: u32,
    /// For directories: the parent of the entry naming them.
    named_in: Option<u64>,
}

fn scan_all(
    store: &dyn Store,
    space: Space,
    range: (Vec<u8>, Vec<u8>),
    mut visit: impl FnMut(&[u8], &[u8]) -> FsResult<()>,
) -> FsResult<()> {
    let mut failure = None;
    store.scan(
        space,
        &range.0,
        &range.1,
        &mut |key, value| match visit(key, value) {
            Ok(()) => Scan::Continue,
            Err(error) => {
                failure = Some(error);
                Scan::Stop
            }
        },
    )?;
    failure.map_or(Ok(()), Err)
}

/// Scans the whole store and verifies every invariant.
pub fn check(store: &dyn Store) -> FsResult<FsckReport> {
    let started = Instant::now();
    let mut report = FsckReport::default();
    let mut format_version = None;
    match store.get(Space::Meta, &keys::superblock_key())? {
        Some(value) => {
            let superblock = keys::decode_superblock(&value)?;
            format_version = Some(superblock.format_version);
            if superblock.format_version != FORMAT_VERSION {
                report.problem(format!(
                    "superblock format version {} (this shoal writes {FORMAT_VERSION}; mounting read-write upgrades it)",
                    superblock.format_version
                ));
            }
        }
        None => report.problem("superblock missing".into()),
    }

    let mut inodes: HashMap<u64, InodeFacts> = HashMap::new();
    scan_all(
        store,
        Space::Meta,
        keys::all_inodes_range(),
        |key, value| {
            let ino = keys::decode_inode_key(key)?;
            let inode = keys::decode_inode(ino, value)?;
            let (chunked, inline_len) = match &inode.content {
                Content::Inline(bytes) => (false, bytes.len() as u64),
                Content::Chunked => (true, 0),
            };
            let owners = UsageKey::of(&inode);
            inodes.insert(
                ino,
                InodeFacts {
                    kind: inode.kind,
                    nlink: inode.nlink,
                    size: inode.size,
                    allocated: inode.allocated_bytes,
                    parent: inode.parent,
                    chunked,
                    inline_len,
                    owners,
                    may_have_xattrs: inode.may_have_xattrs,
                },
            );
            Ok(())
        },
    )?;
    report.inodes = inodes.len() as u64;

    let mut links: HashMap<u64, LinkFacts> = HashMap::new();
    let mut entry_problems = Vec::new();
    scan_all(
        store,
        Space::Meta,
        keys::all_entries_range(),
        |key, value| {
            let (parent, name) = keys::decode_entry_key(key)?;
            let (ino, kind) = keys::decode_entry(key, value)?;
            let name = String::from_utf8_lossy(name);
            match inodes.get(&parent) {
                Some(facts) if facts.kind == FileKind::Directory => {}
                Some(_) => entry_problems.push(format!(
                    "entry {parent}/{name:?}: parent is not a directory"
                )),
                None => {
                    entry_problems.push(format!("entry {parent}/{name:?}: parent inode missing"))
                }
            }
            match inodes.get(&ino) {
                None => entry_problems.push(format!(
                    "entry {parent}/{name:?} points to missing inode {ino}"
                )),
                Some(facts) if facts.kind != kind => entry_problems.push(format!(
                    "entry {parent}/{name:?}: kind {kind:?} but inode {ino} is {:?}",
                    facts.kind
                )),
                Some(_) => {}
            }
            let child = links.entry(ino).or_default();
            child.entries_naming += 1;
            if kind == FileKind::Directory {
                if let Some(previous) = child.named_in.replace(parent) {
                    entry_problems.push(format!(
                        "directory {ino} has entries in both {previous} and {parent}"
                    ));
                }
            }
            let parent_links = links.entry(parent).or_default();
            parent_links.children += 1;
            if kind == FileKind::Directory {
                parent_links.subdirs += 1;
            }
            Ok(())
        },
    )?;
    for problem in entry_problems {
        report.problem(problem);
    }
    report.entries = links.values().map(|facts| facts.children).sum();

    let mut orphans = HashSet::new();
    scan_all(store, Space::Meta, keys::all_orphans_range(), |key, _| {
        orphans.insert(keys::decode_orphan_key(key)?);
        Ok(())
    })?;
    report.orphans = orphans.len() as u64;

    let mut reclaims = HashSet::new();
    scan_all(store, Space::Meta, keys::all_reclaims_range(), |key, _| {
        reclaims.insert(keys::decode_reclaim_key(key)?);
        Ok(())
    })?;
    report.reclaims = reclaims.len() as u64;
    for &dir in &reclaims {
        match inodes.get(&dir) {
            Some(facts) if facts.kind == FileKind::Directory && facts.parent == 0 => {}
            _ => report.problem(format!(
                "reclaim record for {dir}, which is not a detached directory"
            )),
        }
    }

    check_links_and_tree(&inodes, &links, &orphans, &reclaims, &mut report);
    check_chunks(store, &inodes, &mut report)?;

    let mut xattr_problems = Vec::new();
    scan_all(store, Space::Meta, keys::all_xattrs_range(), |key, _| {
        let (ino, _) = keys::decode_xattr_key(key)?;
        report.xattrs += 1;
        match inodes.get(&ino) {
            None => xattr_problems.push(format!("xattr of missing inode {ino}")),
            // Deleting the inode would skip the scan and leave the xattr behind.
            Some(facts) if !facts.may_have_xattrs => xattr_problems.push(format!(
                "inode {ino} has xattrs but is not marked as having any"
            )),
            Some(_) => {}
        }
        Ok(())
    })?;
    for problem in xattr_problems {
        report.problem(problem);
    }

    check_counters(store, &inodes, &mut report)?;
    if format_version == Some(FORMAT_VERSION) {
        for problem in crate::tree_usage_check::verify(store)? {
            report.problem(problem);
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

fn check_links_and_tree(
    inodes: &HashMap<u64, InodeFacts>,
    links: &HashMap<u64, LinkFacts>,
    orphans: &HashSet<u64>,
    reclaims: &HashSet<u64>,
    report: &mut FsckReport,
) {
    let empty = LinkFacts::default();
    let mut sorted: Vec<_> = inodes.iter().collect();
    sorted.sort_by_key(|(ino, _)| **ino);
    for (&ino, facts) in sorted {
        let link = links.get(&ino).unwrap_or(&empty);
        if facts.kind == FileKind::Directory {
            report.directories += 1;
            let expected_nlink = 2 + link.subdirs;
            if facts.nlink != expected_nlink {
                report.problem(format!(
                    "directory {ino}: nlink {} but {expected_nlink} expected",
                    facts.nlink
                ));
            }
            if facts.size != link.children {
                report.problem(format!(
                    "directory {ino}: size {} but {} entries",
                    facts.size, link.children
                ));
            }
            if ino == ROOT_INO {
                if link.entries_naming != 0 || facts.parent != ROOT_INO {
                    report.problem("root directory is named by an entry or has a parent".into());
                }
                continue;
            }
            match link.named_in {
                // Detached by rmtree, being deleted in the background.
                None if reclaims.contains(&ino) => {}
                None => report.problem(format!(
                    "directory {ino} is disconnected: no entry names it"
                )),
                Some(parent) if parent != facts.parent => report.problem(format!(
                    "directory {ino}: parent pointer {} but named in {parent}",
                    facts.parent
                )),
                Some(_) => check_reaches_root(ino, inodes, reclaims, report),
            }
        } else {
            if facts.nlink != link.entries_naming {
                report.problem(format!(
                    "inode {ino}: nlink {} but {} entries",
                    facts.nlink, link.entries_naming
                ));
            }
            if link.entries_naming == 0 && !orphans.contains(&ino) {
                report.problem(format!("inode {ino} is unreachable and not an orphan"));
            }
            if facts.kind == FileKind::Regular
                && !facts.chunked
                && (facts.inline_len != facts.size || facts.allocated != facts.size)
            {
                report.problem(format!(
                    "inode {ino}: inline length {} / allocated {} != size {}",
                    facts.inline_len, facts.allocated, facts.size
                ));
            }
        }
    }
    for &ino in orphans {
        match inodes.get(&ino) {
            Some(facts) if facts.nlink == 0 => {}
            Some(facts) => report.problem(format!("orphan {ino} still has {} links", facts.nlink)),
            None => report.problem(format!("orphan marker for missing inode {ino}")),
        }
    }
}

fn check_reaches_root(
    dir: u64,
    inodes: &HashMap<u64, InodeFacts>,
    reclaims: &HashSet<u64>,
    report: &mut FsckReport,
) {
    let mut current = dir;
    for _ in 0..MAX_DEPTH {
        if current == ROOT_INO || reclaims.contains(&current) {
            return;
        }
        match inodes.get(&current) {
            Some(facts) if facts.kind == FileKind::Directory => current = facts.parent,
            _ => {
                report.problem(format!(
                    "directory {dir}: ancestor {current} is missing or not a directory"
                ));
                return;
            }
        }
    }
    report.problem(format!(
        "directory {dir} is in a cycle, disconnected from the root"
    ));
}

fn check_chunks(
    store: &dyn Store,
    inodes: &HashMap<u64, InodeFacts>,
    report: &mut FsckReport,
) -> FsResult<()> {
    let chunk_bytes = match store.get(Space::Meta, &keys::superblock_key())? {
        Some(value) => u64::from(keys::decode_superblock(&value)?.chunk_bytes),
        None => return Ok(()),
    };
    let mut stored: BTreeMap<u64, u64> = BTreeMap::new();
    let mut problems = Vec::new();
    scan_all(
        store,
        Space::Data,
        keys::all_chunks_range(),
        |key, value| {
            let (ino, chunk) = keys::decode_chunk_key(key)?;
            report.chunks += 1;
            report.data_bytes += value.len() as u64;
            *stored.entry(ino).or_default() += value.len() as u64;
            match inodes.get(&ino) {
                None => problems.push(format!("chunk {chunk} of missing inode {ino}")),
                Some(facts) if !facts.chunked => {
                    problems.push(format!("chunk {chunk} of inline inode {ino}"))
                }
                Some(facts) if chunk * chunk_bytes + value.len() as u64 > facts.size => problems
                    .push(format!(
                        "chunk {chunk} of inode {ino} extends past its size {}",
                        facts.size
                    )),
                Some(_) => {}
            }
            Ok(())
        },
    )?;
    for problem in problems {
        report.problem(problem);
    }
    for (ino, facts) in inodes {
        if facts.chunked {
            let bytes = stored.get(ino).copied().unwrap_or(0);
            if bytes != facts.allocated {
                report.problem(format!(
                    "inode {ino}: allocated {} but chunks hold {bytes}",
                    facts.allocated
                ));
            }
        }
    }
    Ok(())
}

fn check_counters(
    store: &dyn Store,
    inodes: &HashMap<u64, InodeFacts>,
    report: &mut FsckReport,
) -> FsResult<()> {
    let mut expected: BTreeMap<UsageKey, Usage> = BTreeMap::new();
    for facts in inodes.values() {
        let usage = expected.entry(facts.owners).or_default();
        usage.inodes += 1;
        usage.bytes += facts.allocated;
    }
    let mut stored: BTreeMap<UsageKey, Usage> = BTreeMap::new();
    scan_all(
        store,
        Space::Meta,
        keys::all_counters_range(),
        |key, value| {
            stored.insert(
                keys::decode_counter_key(key)?,
                keys::decode_usage(key, value)?,
            );
            Ok(())
        },
    )?;
    let owners: BTreeSet<UsageKey> = expected.keys().chain(stored.keys()).copied().collect();
    for owner in owners {
        let want = expected.get(&owner).copied().unwrap_or_default();
        let have = stored.get(&owner).copied().unwrap_or_default();
        if want != have {
            report.problem(format!(
                "usage of uid {} gid {} project {}: counter says {} inodes / {} bytes, scan finds {} / {}",
                owner.uid, owner.gid, owner.project, have.inodes, have.bytes, want.inodes, want.bytes
            ));
        }
    }
    Ok(())
}
