//! Everyday tools on a source-like tree: `tar x`, `diff -r`, `cp -a`, `find -ls`, `rm -rf`,
//! `tar c`, each checked against a reference copy on a local filesystem, across a remount.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{run_ok, Mounted};
use shoal_bench::{diff_manifests, generate, manifest, Entry, TreeSpec};

const TOOL_TIMEOUT: Duration = Duration::from_secs(600);

/// tar flags that keep everything the manifest compares: pax format for nanosecond mtimes
/// and xattrs, `-p` for modes (root keeps owners by default).
const TAR_CREATE: &[&str] = &[
    "--format=posix",
    "--xattrs",
    "--xattrs-include=user.*",
    "-cf",
];
const TAR_EXTRACT: &[&str] = &["--xattrs", "--xattrs-include=user.*", "-p", "-xf"];

#[track_caller]
fn assert_same_tree(expected: &[Entry], actual_root: &Path, what: &str) {
    let actual = manifest(actual_root)
        .unwrap_or_else(|e| panic!("{what}: manifest of {}: {e}", actual_root.display()));
    let diffs = diff_manifests(expected, &actual);
    assert!(
        diffs.is_empty(),
        "{what}: {} differences (expected vs actual), first ones:\n{}",
        diffs.len(),
        diffs
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The generated tree and its reference copy live in RAM when possible: creating files on
/// this machine's local ext4 costs about 1 ms each, which would dominate the test.
fn scratch_dir() -> tempfile::TempDir {
    let base = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    tempfile::Builder::new()
        .prefix("shoal-tools-")
        .tempdir_in(base)
        .expect("create scratch dir")
}

fn tar(args: &[&str], archive: &Path, dir: &Path) {
    run_ok(
        Command::new("tar")
            .args(args)
            .arg(archive)
            .arg("-C")
            .arg(dir)
            .arg("."),
        TOOL_TIMEOUT,
    );
}

/// Prints how long each step took (seen with --nocapture): where the time goes is the first
/// question when this test gets slow.
struct Steps(Instant);

impl Steps {
    fn done(&mut self, step: &str) {
        println!("{step}: {:.1?}", self.0.elapsed());
        self.0 = Instant::now();
    }
}

#[test]
fn tar_diff_cp_find_rm_on_a_source_tree() {
    let mut steps = Steps(Instant::now());
    let scratch = scratch_dir();
    let source = scratch.path().join("source");
    let archive = scratch.path().join("tree.tar");
    let reference = scratch.path().join("reference");
    let summary = generate(&source, &TreeSpec::medium()).unwrap();
    steps.done("generate the tree");
    tar(TAR_CREATE, &archive, &source);
    fs::create_dir(&reference).unwrap();
    tar(TAR_EXTRACT, &archive, &reference);
    let expected = manifest(&reference).unwrap();
    assert_eq!(
        expected.len() as u64,
        summary.files + summary.dirs + summary.symlinks + summary.hardlinks,
        "reference holds the whole generated tree"
    );
    // Proves the tar flags carry every attribute the manifest compares.
    assert_same_tree(&expected, &source, "tar round trip on the local filesystem");
    steps.done("reference copy");

    let mut m = Mounted::new();
    let first = m.path("first");
    let second = m.path("second");
    fs::create_dir(&first).unwrap();
    tar(TAR_EXTRACT, &archive, &first);
    steps.done("tar xf into shoal");
    assert_same_tree(&expected, &first, "tar xf into shoal");
    steps.done("manifest");
    run_ok(
        Command::new("diff").arg("-r").arg(&reference).arg(&first),
        TOOL_TIMEOUT,
    );
    steps.done("diff -r");

    run_ok(
        Command::new("cp").arg("-a").arg(&first).arg(&second),
        TOOL_TIMEOUT,
    );
    steps.done("cp -a");
    assert_same_tree(&expected, &second, "cp -a inside shoal");

    let find = run_ok(Command::new("find").arg(&first).arg("-ls"), TOOL_TIMEOUT);
    steps.done("find -ls");
    assert_eq!(
        find.stdout.lines().count(),
        expected.len() + 1,
        "find -ls lists every entry plus the top dir"
    );

    run_ok(Command::new("rm").arg("-rf").arg(&second), TOOL_TIMEOUT);
    steps.done("rm -rf");
    assert!(!second.exists(), "rm -rf left {}", second.display());

    m.umount();
    m.fsck_clean();
    steps.done("umount + fsck");
    m.mount();
    assert_same_tree(&expected, &first, "after a remount");
    assert!(!second.exists(), "removed tree is back after a remount");
    let names: Vec<_> = fs::read_dir(&m.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["first"], "mount root after rm -rf");

    // Read the whole tree back out with tar.
    let back_archive = scratch.path().join("back.tar");
    let back = scratch.path().join("back");
    fs::create_dir(&back).unwrap();
    tar(TAR_CREATE, &back_archive, &first);
    steps.done("tar cf out of shoal");
    tar(TAR_EXTRACT, &back_archive, &back);
    assert_same_tree(&expected, &back, "tar cf out of shoal");
    m.finish();
    steps.done("umount + fsck");
}
