//! The check: one pass per kind of record, each proving its invariants from a full scan
//! and adding what it finds to the report.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use super::{scan_all, FsckReport};
use crate::error::FsResult;
use crate::keys::{self, FORMAT_VERSION};
use crate::records::inode::{Content, FileKind, ROOT_INO};
use crate::store::{Space, Store};

const MAX_DEPTH: usize = 1 << 20;

/// What the check remembers of each inode.
pub(super) struct InodeFacts {
    pub(super) kind: FileKind,
    pub(super) nlink: u32,
    pub(super) size: u64,
    pub(super) allocated: u64,
    pub(super) parent: u64,
    pub(super) chunked: bool,
    pub(super) inline_len: u64,
    pub(super) may_have_xattrs: bool,
}

/// What the entries say of each inode.
#[derive(Default)]
pub(super) struct LinkFacts {
    pub(super) entries_naming: u32,
    pub(super) children: u64,
    pub(super) subdirs: u32,
    /// For directories: the parent of the entry naming them.
    pub(super) named_in: Option<u64>,
}

/// Scans the whole store and verifies every invariant. The passes that need no inode
/// facts (usage counters, tree usage) run beside the inode read, and the chunk pass, the
/// longest (it reads every chunk), beside the entry and link passes: each pass scans its
/// own key range into its own report, merged in the order the passes are listed here,
/// so the report reads the same whatever ran first. Memory: the passes' maps are held at
/// once rather than one after another, each still bounded by the inode count.
pub fn check(store: &dyn Store) -> FsResult<FsckReport> {
    let started = Instant::now();
    let mut report = FsckReport::default();
    let format_version = check_superblock(store, &mut report)?;
    let (inode_passes, counters, tree_usage) = std::thread::scope(|scope| {
        let counters = scope.spawn(|| pass(|report| check_counters(store, report)));
        let tree_usage = scope.spawn(|| {
            pass(|report| match format_version {
                Some(FORMAT_VERSION) => check_tree_usage(store, report),
                _ => Ok(()),
            })
        });
        let inode_passes = read_inodes(store).map(|inodes| {
            std::thread::scope(|inner| {
                let chunks = inner.spawn(|| {
                    pass(|report| {
                        let trims = check_trims(store, &inodes, report)?;
                        check_chunks(store, &inodes, &trims, report)
                    })
                });
                let names = pass(|report| check_names(store, &inodes, report));
                (names, joined(chunks))
            })
        });
        (inode_passes, joined(counters), joined(tree_usage))
    });
    let (names, chunks) = inode_passes?;
    for part in [names, chunks, counters, tree_usage] {
        report.absorb(part?);
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// One pass into a report of its own.
fn pass(run: impl FnOnce(&mut FsckReport) -> FsResult<()>) -> FsResult<FsckReport> {
    let mut report = FsckReport::default();
    run(&mut report)?;
    Ok(report)
}

/// What a scoped thread returned; a panic there is a panic here.
pub(super) fn joined<T>(thread: std::thread::ScopedJoinHandle<'_, T>) -> T {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The passes over names: entries, orphans, detached trees, link counts and the tree's
/// shape, xattrs.
fn check_names(
    store: &dyn Store,
    inodes: &HashMap<u64, InodeFacts>,
    report: &mut FsckReport,
) -> FsResult<()> {
    report.inodes = inodes.len() as u64;
    let links = check_entries(store, inodes, report)?;
    let orphans = read_orphans(store)?;
    report.orphans = orphans.len() as u64;
    let reclaims = check_reclaims(store, inodes, report)?;
    check_links_and_tree(inodes, &links, &orphans, &reclaims, report);
    check_xattrs(store, inodes, report)
}

/// The superblock is there and of this format; returns its format version.
fn check_superblock(store: &dyn Store, report: &mut FsckReport) -> FsResult<Option<u32>> {
    let Some(value) = store.get(Space::Meta, &keys::superblock_key())? else {
        report.problem("superblock missing".into());
        return Ok(None);
    };
    let superblock = keys::decode_superblock(&value)?;
    if superblock.format_version != FORMAT_VERSION {
        report.problem(format!(
            "superblock format version {} (this shoal writes {FORMAT_VERSION}; mounting read-write upgrades it)",
            superblock.format_version
        ));
    }
    Ok(Some(superblock.format_version))
}

/// Every inode record, decoded.
pub(super) fn read_inodes(store: &dyn Store) -> FsResult<HashMap<u64, InodeFacts>> {
    let mut inodes = HashMap::new();
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
                    may_have_xattrs: inode.may_have_xattrs,
                },
            );
            Ok(())
        },
    )?;
    Ok(inodes)
}

/// Every entry names an inode of its kind inside a directory, and a directory has one
/// name; returns what the entries say of each inode.
fn check_entries(
    store: &dyn Store,
    inodes: &HashMap<u64, InodeFacts>,
    report: &mut FsckReport,
) -> FsResult<HashMap<u64, LinkFacts>> {
    let mut links: HashMap<u64, LinkFacts> = HashMap::new();
    let mut problems = Vec::new();
    scan_all(
        store,
        Space::Meta,
        keys::all_entries_range(),
        |key, value| {
            let (parent, name) = keys::decode_entry_key(key)?;
            let (ino, kind) = keys::decode_entry(key, value)?;
            if let Some(problem) = entry_problem(inodes, parent, name, ino, kind) {
                problems.push(problem);
            }
            let child = links.entry(ino).or_default();
            child.entries_naming += 1;
            if kind == FileKind::Directory {
                if let Some(previous) = child.named_in.replace(parent) {
                    problems.push(format!(
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
    for problem in problems {
        report.problem(problem);
    }
    report.entries = links.values().map(|facts| facts.children).sum();
    Ok(links)
}

/// What is wrong with the entry `parent`/`name` -> `ino` of `kind`, if anything: the
/// parent or the target missing, or of another kind than the entry says.
pub(super) fn entry_problem(
    inodes: &HashMap<u64, InodeFacts>,
    parent: u64,
    name: &[u8],
    ino: u64,
    kind: FileKind,
) -> Option<String> {
    let name = String::from_utf8_lossy(name);
    match inodes.get(&parent) {
        Some(facts) if facts.kind == FileKind::Directory => {}
        Some(_) => {
            return Some(format!(
                "entry {parent}/{name:?}: parent is not a directory"
            ))
        }
        None => return Some(format!("entry {parent}/{name:?}: parent inode missing")),
    }
    match inodes.get(&ino) {
        None => Some(format!(
            "entry {parent}/{name:?} points to missing inode {ino}"
        )),
        Some(facts) if facts.kind != kind => Some(format!(
            "entry {parent}/{name:?}: kind {kind:?} but inode {ino} is {:?}",
            facts.kind
        )),
        Some(_) => None,
    }
}

/// Inodes unlinked while open, deleted at the next mount.
pub(super) fn read_orphans(store: &dyn Store) -> FsResult<HashSet<u64>> {
    let mut orphans = HashSet::new();
    scan_all(store, Space::Meta, keys::all_orphans_range(), |key, _| {
        orphans.insert(keys::decode_orphan_key(key)?);
        Ok(())
    })?;
    Ok(orphans)
}

/// Each tree detached by rmtree (being deleted) is a directory without a parent.
fn check_reclaims(
    store: &dyn Store,
    inodes: &HashMap<u64, InodeFacts>,
    report: &mut FsckReport,
) -> FsResult<HashSet<u64>> {
    let reclaims = read_reclaims(store)?;
    report.reclaims = reclaims.len() as u64;
    for &dir in &reclaims {
        if !is_detached_directory(inodes, dir) {
            report.problem(format!(
                "reclaim record for {dir}, which is not a detached directory"
            ));
        }
    }
    Ok(reclaims)
}

pub(super) fn read_reclaims(store: &dyn Store) -> FsResult<HashSet<u64>> {
    let mut reclaims = HashSet::new();
    scan_all(store, Space::Meta, keys::all_reclaims_range(), |key, _| {
        reclaims.insert(keys::decode_reclaim_key(key)?);
        Ok(())
    })?;
    Ok(reclaims)
}

pub(super) fn is_detached_directory(inodes: &HashMap<u64, InodeFacts>, dir: u64) -> bool {
    matches!(inodes.get(&dir), Some(facts) if facts.kind == FileKind::Directory && facts.parent == 0)
}

/// Link counts, directory sizes and parents agree with the entries, every directory
/// reaches the root, and every inode without a name is an orphan.
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
            check_directory(ino, facts, link, inodes, reclaims, report);
        } else {
            check_non_directory(ino, facts, link, orphans, report);
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

fn check_directory(
    ino: u64,
    facts: &InodeFacts,
    link: &LinkFacts,
    inodes: &HashMap<u64, InodeFacts>,
    reclaims: &HashSet<u64>,
    report: &mut FsckReport,
) {
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
        return;
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
        Some(_) => {
            if let Err(problem) = reaches_root(ino, inodes, reclaims) {
                report.problem(problem);
            }
        }
    }
}

fn check_non_directory(
    ino: u64,
    facts: &InodeFacts,
    link: &LinkFacts,
    orphans: &HashSet<u64>,
    report: &mut FsckReport,
) {
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

/// Walks up the parent pointers from `dir` to the root (or a detached tree).
pub(super) fn reaches_root(
    dir: u64,
    inodes: &HashMap<u64, InodeFacts>,
    reclaims: &HashSet<u64>,
) -> Result<(), String> {
    let mut current = dir;
    for _ in 0..MAX_DEPTH.min(inodes.len() + 1) {
        if current == ROOT_INO || reclaims.contains(&current) {
            return Ok(());
        }
        match inodes.get(&current) {
            Some(facts) if facts.kind == FileKind::Directory => current = facts.parent,
            _ => {
                return Err(format!(
                    "directory {dir}: ancestor {current} is missing or not a directory"
                ))
            }
        }
    }
    Err(format!(
        "directory {dir} is in a cycle, disconnected from the root"
    ))
}

/// The chunk size every chunk key counts in.
pub(super) fn chunk_bytes(store: &dyn Store) -> FsResult<Option<u64>> {
    Ok(match store.get(Space::Meta, &keys::superblock_key())? {
        Some(value) => Some(u64::from(keys::decode_superblock(&value)?.chunk_bytes)),
        None => None,
    })
}

/// Every chunk belongs to a chunked inode and lies inside its size, and the chunks of each
/// inode hold its allocated bytes.
fn check_chunks(
    store: &dyn Store,
    inodes: &HashMap<u64, InodeFacts>,
    trims: &Trims,
    report: &mut FsckReport,
) -> FsResult<()> {
    let Some(chunk_bytes) = chunk_bytes(store)? else {
        return Ok(());
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
            if let Some(problem) =
                chunk_problem(inodes, trims, chunk_bytes, ino, chunk, value.len())
            {
                problems.push(problem);
            }
            Ok(())
        },
    )?;
    for problem in problems {
        report.problem(problem);
    }
    let mut chunked: Vec<_> = inodes.iter().filter(|(_, facts)| facts.chunked).collect();
    chunked.sort_by_key(|(ino, _)| **ino);
    for (ino, facts) in chunked {
        let bytes = stored.get(ino).copied().unwrap_or(0);
        if bytes != facts.allocated {
            report.problem(format!(
                "inode {ino}: allocated {} but chunks hold {bytes}",
                facts.allocated
            ));
        }
    }
    Ok(())
}

/// The chunk ranges still to delete (`engine::trim`), by inode.
pub(super) type Trims = HashMap<u64, (u64, u64)>;

pub(super) fn read_trims(store: &dyn Store) -> FsResult<Trims> {
    let mut trims = Trims::new();
    scan_all(store, Space::Meta, keys::all_trims_range(), |key, value| {
        trims.insert(keys::decode_trim_key(key)?, keys::decode_trim(value)?);
        Ok(())
    })?;
    Ok(trims)
}

/// Each truncate or hole punch cut short belongs to a chunked inode.
fn check_trims(
    store: &dyn Store,
    inodes: &HashMap<u64, InodeFacts>,
    report: &mut FsckReport,
) -> FsResult<Trims> {
    let trims = read_trims(store)?;
    report.trims = trims.len() as u64;
    let mut stray: Vec<_> = trims
        .keys()
        .filter(|ino| !inodes.get(ino).is_some_and(|facts| facts.chunked))
        .collect();
    stray.sort();
    for ino in stray {
        report.problem(format!(
            "trim record of {ino}, which is not a chunked inode"
        ));
    }
    Ok(trims)
}

/// What is wrong with chunk `chunk` of `ino` (`len` bytes), if anything. Chunks past the
/// size in a range still to delete are the rest of a truncate cut short.
pub(super) fn chunk_problem(
    inodes: &HashMap<u64, InodeFacts>,
    trims: &Trims,
    chunk_bytes: u64,
    ino: u64,
    chunk: u64,
    len: usize,
) -> Option<String> {
    let trimmed = |chunk: u64| {
        trims
            .get(&ino)
            .is_some_and(|&(from, to)| (from..to).contains(&chunk))
    };
    match inodes.get(&ino) {
        None => Some(format!("chunk {chunk} of missing inode {ino}")),
        Some(facts) if !facts.chunked => Some(format!("chunk {chunk} of inline inode {ino}")),
        Some(_) if trimmed(chunk) => None,
        Some(facts) if chunk * chunk_bytes + len as u64 > facts.size => Some(format!(
            "chunk {chunk} of inode {ino} extends past its size {}",
            facts.size
        )),
        Some(_) => None,
    }
}

/// Every xattr belongs to an inode marked as having some (deleting an inode not marked
/// skips the xattr scan and would leave them behind).
fn check_xattrs(
    store: &dyn Store,
    inodes: &HashMap<u64, InodeFacts>,
    report: &mut FsckReport,
) -> FsResult<()> {
    let mut problems = Vec::new();
    scan_all(store, Space::Meta, keys::all_xattrs_range(), |key, _| {
        let (ino, _) = keys::decode_xattr_key(key)?;
        report.xattrs += 1;
        match inodes.get(&ino) {
            None => problems.push(format!("xattr of missing inode {ino}")),
            Some(facts) if !facts.may_have_xattrs => problems.push(format!(
                "inode {ino} has xattrs but is not marked as having any"
            )),
            Some(_) => {}
        }
        Ok(())
    })?;
    for problem in problems {
        report.problem(problem);
    }
    Ok(())
}

/// The usage counters agree with the inodes (`counters::verify_counters`).
fn check_counters(store: &dyn Store, report: &mut FsckReport) -> FsResult<()> {
    let threads = std::thread::available_parallelism().map_or(1, |cores| cores.get().min(4));
    let counters = super::counters::verify_counters(store, threads)?;
    for mismatch in counters.mismatches {
        report.problem(format!("usage of {mismatch}"));
    }
    Ok(())
}

/// Recursive usage, link parents and the parent field agree with the entries
/// (`tree_usage::verify`).
fn check_tree_usage(store: &dyn Store, report: &mut FsckReport) -> FsResult<()> {
    for problem in super::tree_usage::verify(store)? {
        report.problem(problem);
    }
    Ok(())
}
