//! A deterministic, kernel-source-like tree: nested directories of uneven depth, mostly small
//! text files with a long tail of big ones, `Makefile`s and `Kconfig`s, relative symlinks,
//! hard links, `user.*` xattrs, a few modes and fixed nanosecond mtimes.
//!
//! The same [`TreeSpec`] always produces a byte-identical tree (paths, sizes, contents,
//! modes, mtimes, xattrs), so a benchmark or a test can be rerun against the same input.

use std::collections::HashSet;
use std::fs::{self, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use shoal_sys::xattr::{self, SetXattr};

use crate::rng::SplitMix64;

/// What to generate. Every `*_every` field means "one in N files"; 0 disables the feature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeSpec {
    pub seed: u64,
    /// Regular files (distinct inodes); hard links come on top.
    pub files: usize,
    /// Deepest directory level below the root.
    pub max_depth: usize,
    /// Most subdirectories one directory gets.
    pub dir_fanout: usize,
    /// Average number of files per directory; sets the number of directories.
    pub files_per_dir: usize,
    pub symlink_every: usize,
    pub hardlink_every: usize,
    pub xattr_every: usize,
}

impl TreeSpec {
    /// About 2,000 files, ~10 MB: quick enough for every test run.
    pub fn small() -> Self {
        Self::with_files(2_000, 1)
    }

    /// About 30,000 files, ~190 MB: a mid-sized source tree.
    pub fn medium() -> Self {
        Self::with_files(30_000, 1)
    }

    /// Proportions of a kernel tree (~15 files per directory, depth up to 7).
    pub fn with_files(files: usize, seed: u64) -> Self {
        TreeSpec {
            seed,
            files,
            max_depth: 7,
            dir_fanout: 12,
            files_per_dir: 15,
            symlink_every: 97,
            hardlink_every: 211,
            xattr_every: 13,
        }
    }
}

/// What [`generate`] created below the root (the root itself is not counted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeSummary {
    /// Regular files (inodes).
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Extra names for existing files.
    pub hardlinks: u64,
    /// Sum of regular file sizes, each inode counted once.
    pub bytes: u64,
}

/// Builds the tree described by `spec` under `root` (created if missing; it should be empty).
pub fn generate(root: &Path, spec: &TreeSpec) -> io::Result<TreeSummary> {
    fs::create_dir_all(root)?;
    let mut rng = SplitMix64::new(spec.seed);
    let mut summary = TreeSummary::default();

    let mut dirs = plan_dirs(&mut rng, spec);
    for dir in dirs.iter().skip(1) {
        fs::create_dir(root.join(&dir.rel))?;
        fs::set_permissions(root.join(&dir.rel), Permissions::from_mode(0o755))?;
        summary.dirs += 1;
    }

    let mut files: Vec<PathBuf> = Vec::with_capacity(spec.files);
    for index in 0..spec.files {
        let dir = rng.below(dirs.len() as u64) as usize;
        let name = file_name(&mut rng, &mut dirs[dir].names);
        let rel = dirs[dir].rel.join(&name);
        summary.bytes += write_file(&mut rng, spec, index, &root.join(&rel), &name)?;
        summary.files += 1;
        files.push(rel);
    }

    let symlinks = spec.files.checked_div(spec.symlink_every).unwrap_or(0);
    for _ in 0..symlinks {
        let target = rng.pick(&files).clone();
        let link_dir = sibling_dir(&mut rng, &dirs, &target);
        let name = unique_name(
            &format!("{}_link", stem(&target)),
            &mut dirs[link_dir].names,
        );
        let link = dirs[link_dir].rel.join(name);
        symlink(
            relative_path(&dirs[link_dir].rel, &target),
            root.join(&link),
        )?;
        let (sec, nsec) = mtime(&mut rng);
        xattr::set_times(&root.join(&link), (sec, nsec), (sec, nsec))?;
        summary.symlinks += 1;
    }

    let hardlinks = spec.files.checked_div(spec.hardlink_every).unwrap_or(0);
    for _ in 0..hardlinks {
        let source = rng.pick(&files).clone();
        let dir = rng.below(dirs.len() as u64) as usize;
        let name = unique_name(
            &format!("{}_hl{}", stem(&source), extension(&source)),
            &mut dirs[dir].names,
        );
        // link() changes only the ctime, so the source keeps its generated mtime.
        fs::hard_link(root.join(&source), root.join(dirs[dir].rel.join(name)))?;
        summary.hardlinks += 1;
    }

    // Directory mtimes last: creating entries inside a directory moves its mtime.
    for dir in &dirs {
        let (sec, nsec) = mtime(&mut rng);
        xattr::set_times(&root.join(&dir.rel), (sec, nsec), (sec, nsec))?;
    }
    Ok(summary)
}

/// Writes file number `index` of the tree at `path`: text, mode, xattrs, mtime, drawn from
/// `rng` in that order (the order is part of the seed's tree). Returns its size.
fn write_file(
    rng: &mut SplitMix64,
    spec: &TreeSpec,
    index: usize,
    path: &Path,
    name: &str,
) -> io::Result<u64> {
    let size = file_size(rng);
    let mode = if index == spec.files / 2 {
        0o600 // exactly one private file, so a lost mode bit shows up
    } else if name.ends_with(".sh") || name.ends_with(".py") {
        0o755
    } else {
        0o644
    };
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(&text(rng, size))?;
    drop(file);
    fs::set_permissions(path, Permissions::from_mode(mode))?;
    if spec.xattr_every > 0 && index.is_multiple_of(spec.xattr_every) {
        let origin = format!("seed={} file={index}", spec.seed);
        xattr::set_xattr(
            path,
            "user.shoal.origin",
            origin.as_bytes(),
            SetXattr::CreateOrReplace,
        )?;
        if rng.one_in(2) {
            xattr::set_xattr(
                path,
                "user.mime_type",
                b"text/x-csrc",
                SetXattr::CreateOrReplace,
            )?;
        }
    }
    let (sec, nsec) = mtime(rng);
    xattr::set_times(path, (sec, nsec), (sec, nsec))?;
    Ok(size as u64)
}

struct PlannedDir {
    /// Relative to the root; empty for the root itself.
    rel: PathBuf,
    depth: usize,
    parent: Option<usize>,
    children: Vec<usize>,
    /// Names already used in this directory (files, subdirectories, links).
    names: HashSet<String>,
}

/// Lays out the directories as a random tree: each new directory goes under a random open
/// directory, or, with probability 2/5 per step, under one of its ancestors. Pure uniform
/// attachment piles the directories up at `max_depth`; the climbing gives the hump at depth
/// 3-5 of a real source tree.
fn plan_dirs(rng: &mut SplitMix64, spec: &TreeSpec) -> Vec<PlannedDir> {
    let wanted = spec.files.div_ceil(spec.files_per_dir.max(1)).max(1);
    let max_children = spec.dir_fanout.max(1);
    let mut dirs = vec![PlannedDir {
        rel: PathBuf::new(),
        depth: 0,
        parent: None,
        children: Vec::new(),
        names: HashSet::new(),
    }];
    // Directories that may still get a subdirectory, and each one's position in that list.
    let mut open: Vec<usize> = Vec::new();
    let mut open_position: Vec<Option<usize>> = vec![None];
    if spec.max_depth > 0 {
        open.push(0);
        open_position[0] = Some(0);
    }
    while dirs.len() < wanted && !open.is_empty() {
        let mut parent = open[rng.below(open.len() as u64) as usize];
        while let Some(up) = dirs[parent].parent {
            if open_position[up].is_none() || rng.below(5) >= 2 {
                break;
            }
            parent = up;
        }
        let word = *rng.pick(DIR_WORDS);
        let name = unique_name(word, &mut dirs[parent].names);
        let index = dirs.len();
        let depth = dirs[parent].depth + 1;
        let rel = dirs[parent].rel.join(name);
        dirs.push(PlannedDir {
            rel,
            depth,
            parent: Some(parent),
            children: Vec::new(),
            names: HashSet::new(),
        });
        dirs[parent].children.push(index);
        open_position.push(None);
        if depth < spec.max_depth {
            open_position[index] = Some(open.len());
            open.push(index);
        }
        if dirs[parent].children.len() >= max_children {
            if let Some(position) = open_position[parent].take() {
                open.swap_remove(position);
                if let Some(&moved) = open.get(position) {
                    open_position[moved] = Some(position);
                }
            }
        }
    }
    dirs
}

/// A directory next to the target's directory (same parent), or the target's own directory
/// when it has no sibling: the link then points one level up and down again, like the
/// `../common/foo.h` links of a source tree.
fn sibling_dir(rng: &mut SplitMix64, dirs: &[PlannedDir], target: &Path) -> usize {
    let target_dir = target.parent().unwrap_or(Path::new(""));
    let own = dirs
        .iter()
        .position(|dir| dir.rel == target_dir)
        .unwrap_or(0);
    match dirs[own].parent {
        Some(parent) if dirs[parent].children.len() > 1 => {
            let siblings: Vec<usize> = dirs[parent]
                .children
                .iter()
                .copied()
                .filter(|&c| c != own)
                .collect();
            *rng.pick(&siblings)
        }
        _ => own,
    }
}

/// The relative path from directory `from` to `to` (both relative to the same root).
fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component> = from.components().collect();
    let to: Vec<Component> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path = PathBuf::new();
    for _ in common..from.len() {
        path.push("..");
    }
    for component in &to[common..] {
        path.push(component);
    }
    path
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn extension(path: &Path) -> String {
    path.extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default()
}

/// `base`, or `base` with a counter before its extension, whichever is free in `used`.
fn unique_name(base: &str, used: &mut HashSet<String>) -> String {
    let (stem, ext) = match base.rfind('.') {
        Some(dot) if dot > 0 => base.split_at(dot),
        _ => (base, ""),
    };
    let mut name = base.to_string();
    let mut counter = 2;
    while used.contains(&name) {
        name = format!("{stem}{counter}{ext}");
        counter += 1;
    }
    used.insert(name.clone());
    name
}

fn file_name(rng: &mut SplitMix64, used: &mut HashSet<String>) -> String {
    let roll = rng.below(100);
    let special = match roll {
        0..=5 => Some("Makefile"),
        6..=8 => Some("Kconfig"),
        9 => Some(*rng.pick(&["README", ".gitignore", "COPYING", "MAINTAINERS"])),
        _ => None,
    };
    if let Some(name) = special {
        if !used.contains(name) {
            used.insert(name.to_string());
            return name.to_string();
        }
    }
    let words = rng.range(1, 3);
    let mut base: Vec<&str> = Vec::new();
    for _ in 0..words {
        base.push(*rng.pick(FILE_WORDS));
    }
    let ext = pick_weighted(rng, EXTENSIONS);
    unique_name(&format!("{}{ext}", base.join("_")), used)
}

fn pick_weighted(rng: &mut SplitMix64, choices: &[(&'static str, u64)]) -> &'static str {
    let total: u64 = choices.iter().map(|(_, weight)| weight).sum();
    let mut roll = rng.below(total);
    for (choice, weight) in choices {
        if roll < *weight {
            return choice;
        }
        roll -= weight;
    }
    choices[choices.len() - 1].0
}

/// Skewed like a source tree: a few empty files, most between 0.5 and 16 KiB, a tail up to
/// 48 KiB and a rare few of 100-300 KiB. Integer-only (a size class, then uniform within it)
/// so the result never depends on floating-point libraries.
fn file_size(rng: &mut SplitMix64) -> usize {
    let roll = rng.below(1000);
    let (lo, hi) = match roll {
        0..=39 => return 0,
        40..=639 => {
            let class = rng.range(9, 11); // 512 B .. 4 KiB
            (1u64 << class, 1u64 << (class + 1))
        }
        640..=939 => {
            let class = rng.range(12, 13); // 4 KiB .. 16 KiB
            (1u64 << class, 1u64 << (class + 1))
        }
        940..=996 => (16 << 10, 48 << 10),
        _ => (100 << 10, 300 << 10),
    };
    rng.range(lo, hi - 1) as usize
}

/// An mtime between 2020 and 2023 with a non-zero nanosecond part, so lost precision shows.
fn mtime(rng: &mut SplitMix64) -> (i64, i64) {
    let sec = 1_600_000_000 + rng.below(100_000_000) as i64;
    let nsec = rng.range(1, 999_999_999) as i64;
    (sec, nsec)
}

/// Pseudo-random C-like text of exactly `size` bytes.
fn text(rng: &mut SplitMix64, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 128);
    while out.len() < size {
        let a = *rng.pick(FILE_WORDS);
        let b = *rng.pick(FILE_WORDS);
        let c = *rng.pick(FILE_WORDS);
        let n = rng.below(4096);
        // write! into a Vec cannot fail.
        let _ = match rng.below(8) {
            0 => writeln!(out, "#include <linux/{a}.h>"),
            1 => writeln!(out, "static int {a}_{b}(struct {c} *{a})\n{{"),
            2 => writeln!(out, "\t{a}->{b} = {c}_{a}({b}, {n});"),
            3 => writeln!(out, "\tif ({a} < {n})\n\t\treturn -EINVAL;"),
            4 => writeln!(out, "/* {a} {b} {c}: keep {n} entries */"),
            5 => writeln!(out, "}}\n"),
            6 => writeln!(out, "#define {}_{} {n}", a.to_uppercase(), b.to_uppercase()),
            _ => writeln!(out, "\tspin_lock(&{a}->{b}_lock);"),
        };
    }
    out.truncate(size);
    out
}

const DIR_WORDS: &[&str] = &[
    "arch",
    "drivers",
    "fs",
    "kernel",
    "net",
    "mm",
    "include",
    "lib",
    "block",
    "crypto",
    "sound",
    "tools",
    "scripts",
    "security",
    "virt",
    "ipc",
    "init",
    "samples",
    "firmware",
    "core",
    "platform",
    "power",
    "misc",
    "base",
    "common",
    "gpu",
    "media",
    "staging",
    "input",
    "hid",
    "scsi",
    "ata",
    "nvme",
    "pci",
    "usb",
    "i2c",
    "spi",
    "mtd",
    "clk",
    "irq",
    "acpi",
    "xfs",
    "ext4",
    "btrfs",
    "nfs",
    "fuse",
    "ipv4",
    "ipv6",
    "bluetooth",
    "wireless",
    "x86",
    "arm64",
    "riscv",
    "boot",
    "entry",
    "uapi",
];

const FILE_WORDS: &[&str] = &[
    "sched", "core", "irq", "page", "alloc", "lock", "timer", "trace", "power", "clk", "gpio",
    "dma", "vfs", "inode", "dentry", "super", "journal", "extent", "bio", "queue", "cpu", "mem",
    "map", "table", "hash", "list", "tree", "buf", "dev", "port", "link", "reg", "init", "exit",
    "probe", "ops", "ctrl", "fault", "slab", "rcu", "work", "event", "attr", "file", "dir",
    "xattr",
];

const EXTENSIONS: &[(&str, u64)] = &[
    (".c", 50),
    (".h", 30),
    (".S", 3),
    (".rst", 5),
    (".txt", 2),
    (".py", 3),
    (".sh", 3),
    (".yaml", 2),
    ("", 2),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{diff_manifests, manifest, FileKind};

    fn tiny(seed: u64) -> TreeSpec {
        TreeSpec {
            symlink_every: 20,
            hardlink_every: 30,
            xattr_every: 7,
            ..TreeSpec::with_files(300, seed)
        }
    }

    #[test]
    fn same_seed_gives_identical_trees() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let summary_a = generate(a.path(), &tiny(42)).unwrap();
        let summary_b = generate(b.path(), &tiny(42)).unwrap();
        assert_eq!(summary_a, summary_b);
        let diff = diff_manifests(&manifest(a.path()).unwrap(), &manifest(b.path()).unwrap());
        assert!(diff.is_empty(), "{diff:#?}");
    }

    #[test]
    fn different_seeds_give_different_trees() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        generate(a.path(), &tiny(1)).unwrap();
        generate(b.path(), &tiny(2)).unwrap();
        assert!(
            !diff_manifests(&manifest(a.path()).unwrap(), &manifest(b.path()).unwrap()).is_empty()
        );
    }

    #[test]
    fn summary_matches_the_tree() {
        let root = tempfile::tempdir().unwrap();
        let spec = tiny(7);
        let summary = generate(root.path(), &spec).unwrap();
        let entries = manifest(root.path()).unwrap();
        let count = |kind: FileKind| entries.iter().filter(|e| e.kind == kind).count() as u64;
        let regular_names = count(FileKind::File);
        assert_eq!(summary.files, spec.files as u64);
        assert_eq!(regular_names, summary.files + summary.hardlinks);
        assert_eq!(count(FileKind::Dir), summary.dirs);
        assert_eq!(count(FileKind::Symlink), summary.symlinks);
        assert_eq!(summary.symlinks, 15);
        assert_eq!(summary.hardlinks, 10);
        let linked = entries.iter().filter(|e| e.hardlink_of.is_some()).count() as u64;
        assert_eq!(linked, summary.hardlinks);
        let bytes: u64 = entries
            .iter()
            .filter(|e| e.kind == FileKind::File && e.hardlink_of.is_none())
            .map(|e| e.size)
            .sum();
        assert_eq!(bytes, summary.bytes);
    }

    #[test]
    fn tree_has_the_promised_variety() {
        let root = tempfile::tempdir().unwrap();
        generate(root.path(), &tiny(3)).unwrap();
        let entries = manifest(root.path()).unwrap();
        let files: Vec<_> = entries
            .iter()
            .filter(|e| e.kind == FileKind::File)
            .collect();
        let private = files
            .iter()
            .filter(|e| e.mode == 0o600 && e.hardlink_of.is_none())
            .count();
        assert_eq!(private, 1, "exactly one 0600 inode");
        assert!(files.iter().any(|e| e.mode == 0o644));
        assert!(files.iter().any(|e| e.size == 0), "some empty files");
        assert!(
            files.iter().any(|e| e.size > 16 << 10),
            "a tail of bigger files"
        );
        assert!(files.iter().any(|e| !e.xattrs.is_empty()));
        assert!(files.iter().any(|e| e.path.ends_with("Makefile")));
        assert!(
            entries.iter().any(|e| e.path.components().count() >= 3),
            "nested directories"
        );
        assert!(
            entries.iter().all(|e| e.mtime_nsec != 0),
            "nanosecond mtimes everywhere"
        );
        for link in entries.iter().filter(|e| e.kind == FileKind::Symlink) {
            let target = link.symlink_target.as_ref().unwrap();
            assert!(target.is_relative());
            let resolved = root.path().join(link.path.parent().unwrap()).join(target);
            assert!(
                resolved.is_file(),
                "{} -> {} does not resolve",
                link.path.display(),
                target.display()
            );
        }
    }

    #[test]
    fn relative_paths() {
        assert_eq!(
            relative_path(Path::new("a/b"), Path::new("a/c/f.c")),
            PathBuf::from("../c/f.c")
        );
        assert_eq!(
            relative_path(Path::new("a"), Path::new("a/f.c")),
            PathBuf::from("f.c")
        );
        assert_eq!(
            relative_path(Path::new(""), Path::new("x/f.c")),
            PathBuf::from("x/f.c")
        );
    }

    #[test]
    fn unique_names_keep_the_extension() {
        let mut used = HashSet::new();
        assert_eq!(unique_name("irq.c", &mut used), "irq.c");
        assert_eq!(unique_name("irq.c", &mut used), "irq2.c");
        assert_eq!(unique_name(".gitignore", &mut used), ".gitignore");
        assert_eq!(unique_name(".gitignore", &mut used), ".gitignore2");
    }
}
