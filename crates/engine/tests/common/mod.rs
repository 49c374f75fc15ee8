//! Shared helpers of the engine's integration tests: backends (memory and on-disk), a
//! deterministic random generator, an API-level consistency check usable on both backends,
//! and whole-tree snapshots for durability comparisons.

#![allow(dead_code, unused_macros, unused_imports)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub mod stores;

pub use shoal_engine::fsck::{fsck_store_dir, FsckReport};
pub use shoal_engine::store_dir::StoreDirError;
pub use shoal_engine::{
    Caller, Content, DirEntry, Engine, EngineConfig, FileKind, FsError, Inode, NewInode, OpenError,
    RenameMode, Renamed, SetAttr, SetTime, Timestamp, TreeUsage, Usage, UsageKey, UsageOwner,
    XattrMode, MAX_FILE_BYTES, NAME_MAX_BYTES, ROOT_INO,
};

pub const ME: Caller = Caller {
    uid: 1000,
    gid: 1000,
};
pub const OTHER: Caller = Caller {
    uid: 2000,
    gid: 3000,
};
pub const INLINE_MAX: u64 = 4096;
pub const CHUNK: u64 = 64 * 1024;

/// `Err(pattern)` or a panic naming the expression and what it returned.
macro_rules! assert_err {
    ($e:expr, $p:pat) => {
        match $e {
            Err($p) => {}
            other => panic!(
                "{}: expected Err({}), got {:?}",
                stringify!($e),
                stringify!($p),
                other
            ),
        }
    };
}

/// Defines `mod NAME { #[test] fn memory(); #[test] fn disk(); }` running one body on each
/// backend. The body gets `fs: &Fs`.
macro_rules! both_backends {
    ($(fn $name:ident($fs:ident) $body:block)*) => {
        $(
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                // `allow`, not `expect`: most bodies are short.
                #[allow(
                    clippy::too_many_lines,
                    reason = "a test's body, as long as its scenario"
                )]
                fn run($fs: &crate::common::Fs) $body
                #[test]
                fn memory() {
                    run(&crate::common::memory())
                }
                #[test]
                fn disk() {
                    run(&crate::common::disk())
                }
            }
        )*
    };
}

pub(crate) use {assert_err, both_backends};

/// An engine and, for the on-disk backend, the temporary directory holding its store.
pub struct Fs {
    pub engine: Arc<Engine>,
    pub store: Option<PathBuf>,
    _tmp: Option<tempfile::TempDir>,
}

impl Deref for Fs {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl Fs {
    pub fn is_disk(&self) -> bool {
        self.store.is_some()
    }

    /// Drops the engine (on-disk backend only); returns the store path and the guard that
    /// keeps its temporary directory alive.
    pub fn close(self) -> Closed {
        let Fs {
            engine,
            store,
            _tmp,
        } = self;
        drop(engine);
        Closed {
            store: store.expect("close() of a memory engine"),
            _tmp: _tmp.unwrap(),
        }
    }
}

/// A closed on-disk store in a temporary directory.
pub struct Closed {
    pub store: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Closed {
    pub fn open(&self) -> Arc<Engine> {
        Engine::open(&self.store, no_thread()).unwrap_or_else(|e| panic!("reopen: {e}"))
    }
}

pub fn memory() -> Fs {
    Fs {
        engine: Engine::open_memory(EngineConfig::default()).expect("open_memory"),
        store: None,
        _tmp: None,
    }
}

/// mkfs + open with the default config (commit thread on a 5 s interval).
pub fn disk() -> Fs {
    disk_with(EngineConfig::default())
}

pub fn disk_with(config: EngineConfig) -> Fs {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("store");
    Engine::mkfs(&store, false).expect("mkfs");
    let engine = Engine::open(&store, config).expect("open");
    Fs {
        engine,
        store: Some(store),
        _tmp: Some(tmp),
    }
}

/// A config without the commit thread. Used by tests that drop an engine and then reopen or
/// fsck its store at once: with a commit thread, the thread holds a strong `Arc<Engine>`
/// while it waits, so dropping the last user handle does not release the store lock until
/// the interval ends (see `durability::reopen_right_after_drop_with_default_config`).
pub fn no_thread() -> EngineConfig {
    EngineConfig {
        commit_interval: None,
        ..EngineConfig::default()
    }
}

pub fn open_err(dir: &Path, config: EngineConfig) -> OpenError {
    match Engine::open(dir, config) {
        Ok(_) => panic!("Engine::open({}) unexpectedly succeeded", dir.display()),
        Err(error) => error,
    }
}

pub fn regular() -> NewInode<'static> {
    NewInode::regular(0o644)
}

pub fn special(kind: FileKind) -> NewInode<'static> {
    NewInode {
        kind,
        perm: 0o644,
        rdev: 0x0801,
        target: b"",
    }
}

pub fn mkfile(fs: &Engine, parent: u64, name: &[u8]) -> Inode {
    fs.create(parent, name, &regular(), ME)
        .unwrap_or_else(|e| panic!("create {:?}: {e}", String::from_utf8_lossy(name)))
}

pub fn mkfile_with(fs: &Engine, parent: u64, name: &[u8], data: &[u8]) -> Inode {
    let inode = mkfile(fs, parent, name);
    if !data.is_empty() {
        assert_eq!(fs.write(inode.ino, 0, data).unwrap() as usize, data.len());
    }
    fs.getattr(inode.ino).unwrap()
}

pub fn mkdir(fs: &Engine, parent: u64, name: &[u8]) -> Inode {
    fs.mkdir(parent, name, 0o755, ME)
        .unwrap_or_else(|e| panic!("mkdir {:?}: {e}", String::from_utf8_lossy(name)))
}

pub fn read_all(fs: &Engine, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    let mut out = Vec::new();
    let mut offset = 0u64;
    while offset < size {
        let piece = fs.read(ino, offset, 1 << 20).unwrap();
        assert!(!piece.is_empty(), "short read at {offset} of {size}");
        offset += piece.len() as u64;
        out.extend_from_slice(&piece);
    }
    assert_eq!(out.len() as u64, size);
    out
}

/// All entries of a directory, paging through `readdir`.
pub fn list(fs: &Engine, dir: u64) -> Vec<DirEntry> {
    let mut all = Vec::new();
    loop {
        let after = all.last().map(|e: &DirEntry| e.name.clone());
        let page = fs.readdir(dir, after.as_deref(), 512).unwrap();
        if page.is_empty() {
            return all;
        }
        all.extend(page);
    }
}

pub fn names(fs: &Engine, dir: u64) -> Vec<Vec<u8>> {
    list(fs, dir).into_iter().map(|e| e.name).collect()
}

pub fn total(fs: &Engine) -> Usage {
    fs.usage(UsageOwner::Total).unwrap()
}

pub fn sattr() -> SetAttr {
    SetAttr::default()
}

/// A small deterministic generator (64-bit LCG, high bits out).
#[derive(Clone)]
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Lcg(seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let x = self.0;
        (x >> 32) ^ (x << 32 >> 32).rotate_left(17)
    }
    /// Uniform-ish in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

/// What an API walk of the tree finds.
#[derive(Debug, Default)]
pub struct Walk {
    pub directories: u64,
    pub inodes: u64,
    pub entries: u64,
    pub bytes: u64,
}

/// Checks from the public API every invariant fsck checks from the store: directory sizes
/// and link counts, parent pointers, hard-link counts, inline lengths, reachability, and
/// that every usage counter equals the sum over the inodes it owns. `orphans` are inodes
/// unlinked while open (not reachable, still counted).
#[expect(
    clippy::too_many_lines,
    reason = "one walk of the tree checking every invariant fsck checks, each against the state the walk has gathered"
)]
pub fn assert_consistent(fs: &Engine, orphans: &[u64]) -> Walk {
    let mut problems = Vec::new();
    let mut seen: BTreeMap<u64, Inode> = BTreeMap::new();
    let mut names_of: HashMap<u64, u32> = HashMap::new();
    let mut walk = Walk::default();
    let mut stack = vec![ROOT_INO];
    let root = fs.getattr(ROOT_INO).unwrap();
    if root.parent != ROOT_INO || root.kind != FileKind::Directory {
        problems.push(format!("bad root {root:?}"));
    }
    seen.insert(ROOT_INO, root);
    let mut visited_dirs = BTreeSet::new();
    let mut children: HashMap<u64, Vec<u64>> = HashMap::new();
    while let Some(dir) = stack.pop() {
        if !visited_dirs.insert(dir) {
            problems.push(format!("directory {dir} reached twice"));
            continue;
        }
        walk.directories += 1;
        let dir_inode = fs.getattr(dir).unwrap();
        let entries = list(fs, dir);
        let mut sorted = entries.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
        sorted.sort();
        sorted.dedup();
        if sorted != entries.iter().map(|e| e.name.clone()).collect::<Vec<_>>() {
            problems.push(format!("readdir of {dir} not strictly sorted"));
        }
        let mut subdirs = 0;
        children.insert(dir, entries.iter().map(|e| e.ino).collect());
        for entry in &entries {
            walk.entries += 1;
            let child = match fs.getattr(entry.ino) {
                Ok(child) => child,
                Err(e) => {
                    problems.push(format!(
                        "entry {dir}/{:?} -> {}: {e}",
                        String::from_utf8_lossy(&entry.name),
                        entry.ino
                    ));
                    continue;
                }
            };
            if child.kind != entry.kind {
                problems.push(format!(
                    "entry {dir}/{:?}: kind {:?} vs inode {:?}",
                    entry.name, entry.kind, child.kind
                ));
            }
            match fs.lookup(dir, &entry.name) {
                Ok(found) if found.ino == entry.ino => {}
                other => problems.push(format!(
                    "lookup {dir}/{:?} disagrees with readdir: {other:?}",
                    entry.name
                )),
            }
            if child.kind == FileKind::Directory {
                subdirs += 1;
                if child.parent != dir {
                    problems.push(format!(
                        "directory {} parent {} but named in {dir}",
                        child.ino, child.parent
                    ));
                }
                stack.push(child.ino);
            }
            *names_of.entry(child.ino).or_default() += 1;
            seen.insert(child.ino, child);
        }
        if dir_inode.size != entries.len() as u64 {
            problems.push(format!(
                "directory {dir}: size {} but {} entries",
                dir_inode.size,
                entries.len()
            ));
        }
        if dir_inode.nlink != 2 + subdirs {
            problems.push(format!(
                "directory {dir}: nlink {} but {} subdirectories",
                dir_inode.nlink, subdirs
            ));
        }
    }
    for &ino in orphans {
        let inode = fs
            .getattr(ino)
            .unwrap_or_else(|e| panic!("orphan {ino}: {e}"));
        if inode.nlink != 0 {
            problems.push(format!("orphan {ino} has nlink {}", inode.nlink));
        }
        names_of.insert(ino, 0);
        seen.insert(ino, inode);
    }
    let mut expected: BTreeMap<UsageOwner, Usage> = BTreeMap::new();
    for (ino, inode) in &seen {
        if inode.kind != FileKind::Directory {
            let named = names_of.get(ino).copied().unwrap_or(0);
            if inode.nlink != named {
                problems.push(format!(
                    "inode {ino}: nlink {} but {named} names",
                    inode.nlink
                ));
            }
        }
        if inode.kind == FileKind::Regular {
            match &inode.content {
                Content::Inline(bytes) => {
                    if bytes.len() as u64 != inode.size || inode.allocated_bytes != inode.size {
                        problems.push(format!(
                            "inode {ino}: inline {} allocated {} size {}",
                            bytes.len(),
                            inode.allocated_bytes,
                            inode.size
                        ));
                    }
                }
                Content::Chunked => {
                    if inode.allocated_bytes > inode.size {
                        problems.push(format!(
                            "inode {ino}: allocated {} > size {}",
                            inode.allocated_bytes, inode.size
                        ));
                    }
                }
            }
        }
        walk.inodes += 1;
        walk.bytes += inode.allocated_bytes;
        for owner in [
            UsageOwner::Total,
            UsageOwner::User(inode.uid),
            UsageOwner::Group(inode.gid),
            UsageOwner::Project(inode.project),
        ] {
            let usage = expected.entry(owner).or_default();
            usage.inodes += 1;
            usage.bytes += inode.allocated_bytes;
        }
    }
    for id in [0, 1000, 1001, 2000, 3000, 4000] {
        for owner in [
            UsageOwner::User(id),
            UsageOwner::Group(id),
            UsageOwner::Project(id),
        ] {
            expected.entry(owner).or_default();
        }
    }
    for (owner, want) in expected {
        let have = fs.usage(owner).unwrap();
        if have != want {
            problems.push(format!("usage {owner:?}: counter {have:?}, walk {want:?}"));
        }
    }
    for &dir in &visited_dirs {
        let want = subtree_usage(dir, &children, &seen);
        let have = fs.tree_usage(dir).unwrap();
        if (have.entries, have.files, have.bytes) != (want.entries, want.files, want.bytes)
            || have.rctime < want.rctime
        {
            problems.push(format!(
                "tree usage of {dir}: engine {have:?}, walk {want:?}"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "inconsistent engine:\n  {}",
        problems.join("\n  ")
    );
    walk
}

/// What a walk finds below `dir`: names, regular files, their sizes, newest ctime (of `dir`
/// too).
fn subtree_usage(
    dir: u64,
    children: &HashMap<u64, Vec<u64>>,
    seen: &BTreeMap<u64, Inode>,
) -> TreeUsage {
    let mut usage = TreeUsage {
        rctime: seen[&dir].ctime,
        ..TreeUsage::default()
    };
    for ino in children.get(&dir).into_iter().flatten() {
        let Some(child) = seen.get(ino) else { continue };
        usage.entries += 1;
        usage.rctime = usage.rctime.max(child.ctime);
        match child.kind {
            FileKind::Regular => {
                usage.files += 1;
                usage.bytes += child.size;
            }
            FileKind::Directory => {
                let below = subtree_usage(*ino, children, seen);
                usage.entries += below.entries;
                usage.files += below.files;
                usage.bytes += below.bytes;
                usage.rctime = usage.rctime.max(below.rctime);
            }
            _ => {}
        }
    }
    usage
}

/// Runs fsck on a store directory (engine must be gone) and asserts it is clean.
pub fn assert_fsck_clean(store: &Path) -> FsckReport {
    let report = fsck_store_dir(store).unwrap_or_else(|e| panic!("fsck_store_dir: {e}"));
    assert!(
        report.is_clean(),
        "fsck found problems:\n{}",
        report.summary()
    );
    report
}

/// One node of a snapshot: its inode, contents (file bytes or symlink target) and xattrs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub inode: Inode,
    pub data: Vec<u8>,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Every path of the tree with what it holds, for before/after comparisons.
pub fn snapshot(fs: &Engine) -> BTreeMap<Vec<u8>, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(b"/".to_vec(), ROOT_INO)];
    while let Some((path, ino)) = stack.pop() {
        let inode = fs.getattr(ino).unwrap();
        let data = match inode.kind {
            FileKind::Regular => read_all(fs, ino),
            FileKind::Symlink => fs.readlink(ino).unwrap(),
            _ => Vec::new(),
        };
        let xattrs = fs
            .listxattr(ino)
            .unwrap()
            .into_iter()
            .map(|name| {
                let value = fs.getxattr(ino, &name).unwrap();
                (name, value)
            })
            .collect();
        if inode.kind == FileKind::Directory {
            for entry in list(fs, ino) {
                let mut child = path.clone();
                if child.len() > 1 {
                    child.push(b'/');
                }
                child.extend_from_slice(&entry.name);
                stack.push((child, entry.ino));
            }
        }
        out.insert(
            path,
            Node {
                inode,
                data,
                xattrs,
            },
        );
    }
    out
}

/// Applies one random namespace/data operation to a tree kept under `top`, for mixed
/// workloads. Errors the random choice can legitimately cause are accepted; anything else
/// panics. Returns a short label of what happened.
#[expect(
    clippy::too_many_lines,
    reason = "one arm per kind of random operation, each with the errors it may legitimately meet"
)]
pub fn random_op(
    fs: &Engine,
    rng: &mut Lcg,
    top: u64,
    dirs: &mut Vec<u64>,
    names: usize,
) -> &'static str {
    let dir = dirs[rng.below(dirs.len() as u64) as usize];
    let name = format!("n{}", rng.below(names as u64)).into_bytes();
    // Operations on an existing object mostly pick one that is there.
    let entries = fs.readdir(dir, None, 64).unwrap_or_default();
    let pick = |rng: &mut Lcg, want_dir: bool| -> Vec<u8> {
        let pool: Vec<&DirEntry> = entries
            .iter()
            .filter(|e| !want_dir || e.kind == FileKind::Directory)
            .collect();
        if !pool.is_empty() && rng.chance(85) {
            pool[rng.below(pool.len() as u64) as usize].name.clone()
        } else {
            format!("n{}", rng.below(names as u64)).into_bytes()
        }
    };
    let caller = if rng.chance(20) { OTHER } else { ME };
    let ok = |label: &'static str, result: Result<(), FsError>| -> &'static str {
        match result {
            Ok(()) => label,
            Err(
                FsError::NotFound
                | FsError::Exists
                | FsError::NotEmpty
                | FsError::IsDir
                | FsError::NotDir,
            ) => "refused",
            Err(FsError::Invalid(why)) if why.contains("itself") => "refused",
            Err(FsError::NotPermitted(_)) => "refused",
            Err(e) => panic!("{label}: unexpected error {e:?}"),
        }
    };
    match rng.below(100) {
        0..=19 => ok(
            "create",
            fs.create(dir, &name, &regular(), caller).map(|_| ()),
        ),
        20..=27 if dirs.len() >= 40 => ok(
            "create",
            fs.create(dir, &name, &regular(), caller).map(|_| ()),
        ),
        20..=27 => ok(
            "mkdir",
            fs.mkdir(dir, &name, 0o755, caller).map(|inode| {
                dirs.push(inode.ino);
            }),
        ),
        28..=29 => ok(
            "symlink",
            fs.symlink(dir, &name, b"../some/where", caller).map(|_| ()),
        ),
        30..=44 => {
            let name = pick(rng, false);
            let result = fs.lookup(dir, &name).and_then(|inode| {
                if inode.kind != FileKind::Regular {
                    return Err(FsError::IsDir);
                }
                let offset = match rng.below(3) {
                    0 => rng.below(INLINE_MAX),
                    1 => rng.below(3 * CHUNK),
                    _ => (CHUNK * (rng.below(3) + 1)).saturating_sub(rng.below(100)),
                };
                let len = if rng.chance(50) {
                    rng.below(300) + 1
                } else {
                    rng.below(CHUNK + 5000) + 1
                };
                let data = rng.bytes(len as usize);
                fs.write(inode.ino, offset, &data).map(|_| ())
            });
            ok("write", result)
        }
        45..=49 => {
            let name = pick(rng, false);
            let result = fs.lookup(dir, &name).and_then(|inode| {
                if inode.kind != FileKind::Regular {
                    return Err(FsError::IsDir);
                }
                let size = rng.below(3 * CHUNK);
                fs.setattr(
                    inode.ino,
                    &SetAttr {
                        size: Some(size),
                        ..SetAttr::default()
                    },
                )
                .map(|_| ())
            });
            ok("truncate", result)
        }
        50..=61 => ok("unlink", fs.unlink(dir, &pick(rng, false))),
        62..=66 => {
            let empty: Vec<&DirEntry> = entries
                .iter()
                .filter(|e| {
                    e.kind == FileKind::Directory && fs.getattr(e.ino).is_ok_and(|d| d.size == 0)
                })
                .collect();
            let name = if !empty.is_empty() && rng.chance(70) {
                empty[rng.below(empty.len() as u64) as usize].name.clone()
            } else {
                pick(rng, true)
            };
            let result = fs.rmdir(dir, &name);
            if result.is_ok() {
                // The inode is gone; forget it (lookups of its number now fail).
                dirs.retain(|&d| fs.getattr(d).is_ok());
            }
            ok("rmdir", result)
        }
        67..=81 => {
            let name = pick(rng, false);
            let to_dir = dirs[rng.below(dirs.len() as u64) as usize];
            let to_name = format!("n{}", rng.below(names as u64)).into_bytes();
            let mode = match rng.below(10) {
                0..=5 => RenameMode::Replace,
                6..=7 => RenameMode::NoReplace,
                _ => RenameMode::Exchange,
            };
            let result = fs.rename(dir, &name, to_dir, &to_name, mode);
            if result.is_ok() {
                dirs.retain(|&d| fs.getattr(d).is_ok());
            }
            ok("rename", result.map(|_| ()))
        }
        82..=87 => {
            let name = pick(rng, false);
            let to_dir = dirs[rng.below(dirs.len() as u64) as usize];
            let to_name = format!("n{}", rng.below(names as u64)).into_bytes();
            let result = fs
                .lookup(dir, &name)
                .and_then(|inode| fs.link(inode.ino, to_dir, &to_name).map(|_| ()));
            ok("link", result)
        }
        88..=92 => {
            let name = pick(rng, false);
            let result = fs.lookup(dir, &name).and_then(|inode| {
                let len = rng.below(200) as usize;
                let value = rng.bytes(len);
                fs.setxattr(
                    inode.ino,
                    format!("user.k{}", rng.below(3)).as_bytes(),
                    &value,
                    XattrMode::Either,
                )
            });
            ok("setxattr", result)
        }
        93..=95 => {
            let name = pick(rng, false);
            let result = fs.lookup(dir, &name).and_then(|inode| {
                let who = [ME, OTHER][rng.below(2) as usize];
                let change = SetAttr {
                    uid: Some(who.uid),
                    gid: Some(who.gid),
                    ..SetAttr::default()
                };
                fs.setattr(inode.ino, &change).map(|_| ())
            });
            ok("chown", result)
        }
        _ => {
            let name = pick(rng, false);
            let result = fs.lookup(dir, &name).and_then(|inode| {
                let name = format!("user.k{}", rng.below(3)).into_bytes();
                match fs.removexattr(inode.ino, &name) {
                    Err(FsError::NoXattr) => Ok(()),
                    other => other,
                }
            });
            let _ = top;
            ok("removexattr", result)
        }
    }
}
