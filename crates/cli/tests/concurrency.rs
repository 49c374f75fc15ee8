//! Several writers at once on a multi-threaded mount: creates, overwrites, unlinks, renames
//! within and across shared directories, directory renames and rmdirs. Each writer owns its
//! names, so its own bookkeeping is exact while the directories it works in are shared; the
//! union of the bookkeeping must be the tree, before and after a remount, and fsck clean.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use common::{read_tree, renamed_path, Mounted, TreeNode};
use shoal_bench::SplitMix64;

const WRITERS: usize = 6;
const OPS_PER_WRITER: usize = 3_000;
const SHARED_DIRS: usize = 4;
/// Keeps directory renames from building ever deeper chains.
const MAX_DEPTH: usize = 6;
const MAX_READER_PASSES: usize = 100_000;

fn shared_dir(i: usize) -> PathBuf {
    PathBuf::from(format!("shared{i}"))
}

/// One writer: the entries it created (paths relative to the mount) and their contents.
struct Writer {
    id: usize,
    root: PathBuf,
    rng: SplitMix64,
    next_name: u64,
    entries: BTreeMap<PathBuf, TreeNode>,
}

impl Writer {
    fn new(id: usize, root: &Path) -> Self {
        Writer {
            id,
            root: root.to_path_buf(),
            rng: SplitMix64::new(1000 + id as u64),
            next_name: 0,
            entries: BTreeMap::new(),
        }
    }

    fn fresh_name(&mut self, kind: &str) -> String {
        self.next_name += 1;
        format!("w{}-{kind}{}", self.id, self.next_name)
    }

    fn own(&self, want_dir: bool) -> Vec<PathBuf> {
        self.entries
            .iter()
            .filter(|(_, node)| matches!(node, TreeNode::Dir) == want_dir)
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// A directory to put something in: a shared one or one of ours, not too deep.
    fn some_parent(&mut self) -> PathBuf {
        let mut parents: Vec<PathBuf> = (0..SHARED_DIRS).map(shared_dir).collect();
        parents.extend(
            self.own(true)
                .into_iter()
                .filter(|p| p.components().count() < MAX_DEPTH),
        );
        self.rng.pick(&parents).clone()
    }

    fn content(&mut self) -> Vec<u8> {
        let repeats = self.rng.below(300) as usize;
        format!("writer {} item {}\n", self.id, self.next_name)
            .repeat(repeats)
            .into_bytes()
    }

    fn fail(&self, what: String, err: io::Error) -> ! {
        panic!("writer {}: {what}: {err}", self.id)
    }

    fn step(&mut self) {
        let files = self.own(false);
        let dirs = self.own(true);
        match self.rng.below(100) {
            0..=29 => self.create_file(),
            30..=39 => self.make_dir(),
            40..=54 if !files.is_empty() => {
                let victim = self.rng.pick(&files).clone();
                fs::remove_file(self.root.join(&victim))
                    .unwrap_or_else(|e| self.fail(format!("unlink {victim:?}"), e));
                self.entries.remove(&victim);
            }
            55..=74 if !files.is_empty() => {
                let from = self.rng.pick(&files).clone();
                let parent = if self.rng.one_in(3) {
                    from.parent().unwrap().to_path_buf()
                } else {
                    self.some_parent()
                };
                let to = parent.join(self.fresh_name("f"));
                self.rename(&from, &to);
            }
            75..=79 if files.len() >= 2 => {
                // Rename over an existing file of ours: the target is replaced.
                let from = self.rng.pick(&files).clone();
                let to = self.rng.pick(&files).clone();
                if from != to {
                    self.rename(&from, &to);
                }
            }
            80..=89 if !dirs.is_empty() => {
                let from = self.rng.pick(&dirs).clone();
                let parent = self.some_parent();
                // Moving a directory below itself is EINVAL; the tree depth bound stays.
                let depth_below = self
                    .entries
                    .keys()
                    .filter(|p| p.starts_with(&from))
                    .map(|p| p.components().count())
                    .max()
                    .unwrap_or(0)
                    - from.components().count();
                if !parent.starts_with(&from)
                    && parent.components().count() + 1 + depth_below <= MAX_DEPTH
                {
                    let to = parent.join(self.fresh_name("d"));
                    self.rename(&from, &to);
                }
            }
            90..=94 if !dirs.is_empty() => {
                let empty: Vec<PathBuf> = dirs
                    .into_iter()
                    .filter(|d| !self.entries.keys().any(|p| p != d && p.starts_with(d)))
                    .collect();
                if !empty.is_empty() {
                    let victim = self.rng.pick(&empty).clone();
                    fs::remove_dir(self.root.join(&victim))
                        .unwrap_or_else(|e| self.fail(format!("rmdir {victim:?}"), e));
                    self.entries.remove(&victim);
                }
            }
            95..=99 if !files.is_empty() => {
                let target = self.rng.pick(&files).clone();
                let content = self.content();
                fs::write(self.root.join(&target), &content)
                    .unwrap_or_else(|e| self.fail(format!("overwrite {target:?}"), e));
                self.entries.insert(target, TreeNode::File(content));
            }
            _ => self.create_file(),
        }
    }

    fn create_file(&mut self) {
        let path = self.some_parent().join(self.fresh_name("f"));
        let content = self.content();
        fs::write(self.root.join(&path), &content)
            .unwrap_or_else(|e| self.fail(format!("create {path:?}"), e));
        self.entries.insert(path, TreeNode::File(content));
    }

    fn make_dir(&mut self) {
        let path = self.some_parent().join(self.fresh_name("d"));
        fs::create_dir(self.root.join(&path))
            .unwrap_or_else(|e| self.fail(format!("mkdir {path:?}"), e));
        self.entries.insert(path, TreeNode::Dir);
    }

    /// Renames in the filesystem and in the bookkeeping (with everything below a directory).
    fn rename(&mut self, from: &Path, to: &Path) {
        fs::rename(self.root.join(from), self.root.join(to))
            .unwrap_or_else(|e| self.fail(format!("rename {from:?} -> {to:?}"), e));
        let moved: Vec<PathBuf> = self
            .entries
            .keys()
            .filter(|p| p.starts_with(from))
            .cloned()
            .collect();
        for old in moved {
            let node = self.entries.remove(&old).unwrap();
            let new = renamed_path(&old, from, to);
            self.entries.insert(new, node);
        }
    }
}

/// Lists and stats the shared directories while the writers change them. Entries vanish
/// between readdir and stat all the time; any other error is a bug.
fn read_while_writing(root: &Path, writers_done: &AtomicBool) -> usize {
    let mut passes = 0;
    while !writers_done.load(Ordering::Relaxed) && passes < MAX_READER_PASSES {
        for i in 0..SHARED_DIRS {
            let dir = root.join(shared_dir(i));
            for dirent in
                fs::read_dir(&dir).unwrap_or_else(|e| panic!("reader: readdir {dir:?}: {e}"))
            {
                let dirent = dirent.unwrap_or_else(|e| panic!("reader: readdir {dir:?}: {e}"));
                if let Err(e) = fs::symlink_metadata(dirent.path()) {
                    assert_eq!(
                        e.kind(),
                        io::ErrorKind::NotFound,
                        "reader: stat {:?}: {e}",
                        dirent.path()
                    );
                }
            }
        }
        passes += 1;
    }
    passes
}

fn assert_tree_matches(root: &Path, expected: &BTreeMap<PathBuf, TreeNode>, when: &str) {
    let actual = read_tree(root).unwrap_or_else(|e| panic!("{when}: reading the tree: {e}"));
    let mut problems = Vec::new();
    for (path, node) in expected {
        match actual.get(path) {
            None => problems.push(format!("missing {path:?}")),
            Some(found) if found != node => problems.push(format!(
                "{path:?}: expected {}, found {}",
                describe(node),
                describe(found)
            )),
            _ => {}
        }
    }
    for path in actual.keys().filter(|p| !expected.contains_key(*p)) {
        problems.push(format!("unexpected {path:?}"));
    }
    assert!(
        problems.is_empty(),
        "{when}: {} problems, first ones:\n{}",
        problems.len(),
        problems
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn describe(node: &TreeNode) -> String {
    match node {
        TreeNode::Dir => "a directory".to_string(),
        TreeNode::File(content) => format!("a file of {} bytes", content.len()),
        TreeNode::Other => "a special file".to_string(),
    }
}

#[test]
fn concurrent_writers_leave_the_tree_their_bookkeeping_says() {
    let mut m = Mounted::with_options(&["threads=4"]);
    for i in 0..SHARED_DIRS {
        fs::create_dir(m.path(shared_dir(i))).unwrap();
    }
    let writers_done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (root, done) = (m.mnt.clone(), writers_done.clone());
        thread::spawn(move || read_while_writing(&root, &done))
    };
    let handles: Vec<_> = (0..WRITERS)
        .map(|id| {
            let root = m.mnt.clone();
            thread::spawn(move || {
                let mut writer = Writer::new(id, &root);
                for _ in 0..OPS_PER_WRITER {
                    writer.step();
                }
                writer.entries
            })
        })
        .collect();
    let mut expected: BTreeMap<PathBuf, TreeNode> = (0..SHARED_DIRS)
        .map(|i| (shared_dir(i), TreeNode::Dir))
        .collect();
    for handle in handles {
        expected.extend(handle.join().expect("a writer failed"));
    }
    writers_done.store(true, Ordering::Relaxed);
    reader.join().expect("the reader failed");
    assert!(
        expected.len() > 100,
        "the writers left too little to check: {}",
        expected.len()
    );

    assert_tree_matches(&m.mnt, &expected, "while mounted");
    m.umount();
    m.fsck_clean();
    m.mount();
    assert_tree_matches(&m.mnt, &expected, "after a remount");
    m.finish();
}
