//! Recursive usage through the kernel: `shoal du` and the virtual `shoal.dir.*` attributes
//! agree with a walk of the mounted tree (`find`'s counts, sizes, newest ctime) after
//! creates, writes, hard links, renames and removals, and with the unmounted store.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use common::{gen_tree, run_ok, shoal_ok, Mounted, SHOAL_TIMEOUT};
use serde::Deserialize;

#[derive(Debug, Deserialize, PartialEq, Eq)]
struct DuLine {
    path: String,
    entries: u64,
    files: u64,
    bytes: u64,
    rctime: String,
}

/// What a walk finds below `dir`: names, regular files, their sizes (per name), and the
/// newest ctime of `dir` and everything below, as (secs, nanos).
fn walk(dir: &Path) -> (u64, u64, u64, (i64, i64)) {
    let meta = fs::symlink_metadata(dir).unwrap();
    let mut totals = (0, 0, 0, (meta.ctime(), meta.ctime_nsec()));
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = fs::symlink_metadata(&path).unwrap();
        totals.0 += 1;
        totals.3 = totals.3.max((meta.ctime(), meta.ctime_nsec()));
        if meta.is_file() {
            totals.1 += 1;
            totals.2 += meta.len();
        } else if meta.is_dir() {
            let below = walk(&path);
            totals.0 += below.0;
            totals.1 += below.1;
            totals.2 += below.2;
            totals.3 = totals.3.max(below.3);
        }
    }
    totals
}

fn du_json(args: &[&OsStr]) -> Vec<DuLine> {
    let mut full = vec![OsStr::new("du"), OsStr::new("--json")];
    full.extend_from_slice(args);
    let out = shoal_ok(&full);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

fn rctime_pair(text: &str) -> (i64, i64) {
    let (secs, nanos) = text.split_once('.').unwrap();
    (secs.parse().unwrap(), nanos.parse().unwrap())
}

/// `shoal du DIR` on the mount equals a walk; rctime is the newest ctime found.
fn assert_du_matches_walk(dir: &Path) -> DuLine {
    let line = du_json(&[dir.as_os_str()]).pop().unwrap();
    let (entries, files, bytes, newest) = walk(dir);
    assert_eq!(
        (line.entries, line.files, line.bytes),
        (entries, files, bytes),
        "shoal du {} disagrees with a walk",
        dir.display()
    );
    // The kernel may show a written file's ctime from its own cache (writeback) a moment
    // before the daemon has it; the engine's own exactness is fsck's and the engine tests'.
    let (secs, _) = rctime_pair(&line.rctime);
    assert!(
        (secs - newest.0).abs() <= 2,
        "rctime {} of {} but newest ctime {newest:?}",
        line.rctime,
        dir.display()
    );
    line
}

fn find_count(dir: &Path, extra: &[&str]) -> u64 {
    let out = run_ok(
        Command::new("find")
            .arg(dir)
            .args(["-mindepth", "1"])
            .args(extra),
        SHOAL_TIMEOUT,
    );
    out.stdout.lines().count() as u64
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "each kind of change followed by du and the virtual xattrs, then the unmounted store: one scenario"
)]
fn du_and_virtual_xattrs_follow_every_change_and_match_the_unmounted_store() {
    let m = Mounted::new();
    let src = m.path("src");
    gen_tree(&src, 1500);
    let line = assert_du_matches_walk(&src);
    assert_eq!(line.entries, find_count(&src, &[]));
    assert_eq!(line.files, find_count(&src, &["-type", "f"]));
    assert_du_matches_walk(&m.mnt);

    // Writes, a second name in another directory, a rename across, removals.
    let other = m.path("other");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("data"), vec![7u8; 300_000]).unwrap();
    let first_file = run_ok(
        Command::new("find")
            .arg(&src)
            .args(["-type", "f", "-print", "-quit"]),
        SHOAL_TIMEOUT,
    );
    let first_file = first_file.stdout.trim().to_string();
    fs::hard_link(&first_file, other.join("second-name")).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(&first_file)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &[1u8; 5000]))
        .unwrap();
    let subdirs: Vec<_> = fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert!(subdirs.len() >= 2, "gen-tree made too few directories");
    fs::rename(&subdirs[0], other.join("moved")).unwrap();
    run_ok(
        Command::new("rm").arg("-rf").arg(&subdirs[1]),
        SHOAL_TIMEOUT,
    );
    for dir in [&src, &other, &m.mnt] {
        assert_du_matches_walk(dir);
    }

    // The attributes themselves, as any tool reads them; not listed, not settable.
    let getfattr = run_ok(
        Command::new("getfattr")
            .args(["--only-values", "-n", "shoal.dir.rentries"])
            .arg(&other),
        SHOAL_TIMEOUT,
    );
    assert_eq!(getfattr.stdout.trim(), find_count(&other, &[]).to_string());
    let listed = run_ok(
        Command::new("getfattr").args(["-d", "-m", "-"]).arg(&other),
        SHOAL_TIMEOUT,
    );
    assert!(!listed.stdout.contains("shoal.dir"), "{}", listed.stdout);
    let set = Command::new("setfattr")
        .args(["-n", "shoal.dir.rbytes", "-v", "1"])
        .arg(&other)
        .output()
        .unwrap();
    assert!(
        !set.status.success(),
        "setting a virtual attribute succeeded"
    );

    let live = du_json(&[m.mnt.as_os_str(), other.as_os_str()]);
    let mut m = m;
    m.umount();
    let offline = du_json(&[m.store.as_os_str()]);
    assert_eq!(
        (
            offline[0].entries,
            offline[0].files,
            offline[0].bytes,
            &offline[0].rctime
        ),
        (
            live[0].entries,
            live[0].files,
            live[0].bytes,
            &live[0].rctime
        )
    );
    let offline_other = du_json(&[
        m.store.as_os_str(),
        OsStr::new("--path"),
        OsStr::new("/other"),
    ]);
    assert_eq!(offline_other[0].entries, live[1].entries);
    assert_eq!(offline_other[0].bytes, live[1].bytes);
    m.fsck_clean();
}
