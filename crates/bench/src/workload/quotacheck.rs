//! Per-user usage of a whole filesystem. shoal keeps usage counters, so it answers from
//! its report (`shoal quota report --json MOUNT`, the whole filesystem's users); everything
//! else is measured with a parallel scan: threads = cores, summing inodes
//! and allocated bytes (st_blocks * 512) per uid, each hard-linked inode once. The scanned
//! population is the generated tree, extracted untimed; caches are dropped first (root),
//! as a quotacheck at mount time starts cold. On shoal, the counters are then checked
//! against a scan of its own (`shoal fsck --counters`) on the live mount and, on a store
//! made by `--make shoal`, offline, where the report is read from the store too.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Condvar, Mutex};

use super::{Ctx, Outcome};
use crate::error::{BenchError, IoContext, Result};
use crate::interrupt;
use crate::target::Target;
use crate::tools::{drop_caches, run_capture, run_silent};

/// Usage of one uid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub inodes: u64,
    pub bytes: u64,
}

pub type UsageByUid = BTreeMap<u32, Usage>;

/// The shared work list of the scan: directories to read, and how many are being read
/// (the scan is over when both are zero).
struct Queue {
    state: Mutex<(Vec<PathBuf>, usize)>,
    changed: Condvar,
}

impl Queue {
    fn next(&self) -> Option<PathBuf> {
        let mut state = self.state.lock().ok()?;
        loop {
            if let Some(dir) = state.0.pop() {
                state.1 += 1;
                return Some(dir);
            }
            if state.1 == 0 || interrupt::interrupted() {
                self.changed.notify_all();
                return None;
            }
            state = self.changed.wait(state).ok()?;
        }
    }

    fn done(&self, found: Vec<PathBuf>) {
        if let Ok(mut state) = self.state.lock() {
            state.0.extend(found);
            state.1 -= 1;
        }
        self.changed.notify_all();
    }
}

/// Sums usage below `root` (root included) with `threads` threads.
pub fn scan(root: &Path, threads: usize) -> Result<UsageByUid> {
    let queue = Queue {
        state: Mutex::new((vec![root.to_path_buf()], 0)),
        changed: Condvar::new(),
    };
    let seen_links: Mutex<HashSet<(u64, u64)>> = Mutex::new(HashSet::new());
    let mut total = UsageByUid::new();
    let root_meta = fs::symlink_metadata(root).context(|| format!("stat {}", root.display()))?;
    add(&mut total, &root_meta);
    let partials = super::in_threads(threads.max(1), |_| {
        let mut usage = UsageByUid::new();
        while let Some(dir) = queue.next() {
            let result = scan_dir(&dir, &mut usage, &seen_links);
            let found = match result {
                Ok(found) => found,
                Err(error) => {
                    queue.done(Vec::new());
                    return Err(error);
                }
            };
            queue.done(found);
        }
        Ok(usage)
    })?;
    interrupt::check()?;
    for partial in partials {
        for (uid, usage) in partial {
            let entry = total.entry(uid).or_default();
            entry.inodes += usage.inodes;
            entry.bytes += usage.bytes;
        }
    }
    Ok(total)
}

fn add(usage: &mut UsageByUid, meta: &fs::Metadata) {
    let entry = usage.entry(meta.uid()).or_default();
    entry.inodes += 1;
    entry.bytes += meta.blocks() * 512;
}

fn scan_dir(
    dir: &Path,
    usage: &mut UsageByUid,
    seen_links: &Mutex<HashSet<(u64, u64)>>,
) -> Result<Vec<PathBuf>> {
    let mut subdirs = Vec::new();
    for entry in fs::read_dir(dir).context(|| format!("reading {}", dir.display()))? {
        let entry = entry.context(|| format!("reading {}", dir.display()))?;
        let path = entry.path();
        let meta = fs::symlink_metadata(&path).context(|| format!("stat {}", path.display()))?;
        if meta.is_dir() {
            subdirs.push(path);
        } else if meta.nlink() > 1 {
            let first = seen_links
                .lock()
                .map(|mut seen| seen.insert((meta.dev(), meta.ino())))
                .unwrap_or(true);
            if !first {
                continue;
            }
        }
        add(usage, &meta);
    }
    Ok(subdirs)
}

/// shoal's own answer, `quota report --json`: the time it takes is the figure, no scan.
/// None when the target is not shoal or the command fails.
fn shoal_report(target: &Target) -> Option<UsageByUid> {
    if !target.is_shoal() {
        return None;
    }
    let shoal = target.shoal_bin.as_ref()?;
    let mount = target.mount.as_ref()?;
    let text = run_capture(
        Command::new(shoal)
            .args(["quota", "report", "--json"])
            .arg(&mount.mountpoint),
    )
    .ok()?;
    let lines: Vec<serde_json::Value> = serde_json::from_str(&text).ok()?;
    let mut usage = UsageByUid::new();
    for line in lines {
        let uid = u32::try_from(line["id"].as_u64()?).ok()?;
        let counted = Usage {
            inodes: line["inodes_used"].as_u64()?,
            bytes: line["bytes_used"].as_u64()?,
        };
        if counted != Usage::default() {
            usage.insert(uid, counted);
        }
    }
    Some(usage)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from)
}

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let tarball = ctx
        .tarball
        .ok_or_else(|| BenchError::Invalid("quotacheck workload without its tarball".into()))?;
    run_silent(
        ctx.tool("tar")
            .arg("-xf")
            .arg(tarball)
            .arg("-C")
            .arg(&ctx.dir),
    )?;
    let mut outcome = Outcome::default();
    if !drop_caches() {
        outcome.notes.push("not root: the scan started warm".into());
    }
    // Probe once untimed: a failing probe must not be charged to the scan.
    let use_report = shoal_report(ctx.target).is_some();
    let (usage, timed) = ctx.timed(|| {
        if use_report {
            shoal_report(ctx.target)
                .ok_or_else(|| BenchError::Invalid("shoal quota report failed".into()))
        } else {
            scan(&ctx.dir, cores())
        }
    })?;
    let method = if use_report { "report" } else { "scan" };
    outcome.notes.push(format!("method: {method}"));
    outcome.seconds("usage per user", &timed);
    let inodes: u64 = usage.values().map(|u| u.inodes).sum();
    if !use_report {
        outcome.rate_and_cpu("scan", "inode", inodes, &timed);
    }
    outcome.count("inodes", inodes);
    outcome.count("users", usage.len() as u64);
    outcome.count(&format!("method_{method}"), 1);
    if let Some((shoal, mountpoint)) = super::rmtree::shoal_of(ctx.target) {
        check_counters(ctx, shoal, mountpoint, inodes, &mut outcome)?;
    }
    Ok(outcome)
}

/// `shoal fsck --counters` on the mount, then (offline, so last) `quota report` and
/// `fsck --counters` on the unmounted store; `inodes` is the filesystem's whole count.
fn check_counters(
    ctx: &Ctx,
    shoal: &Path,
    mountpoint: &Path,
    inodes: u64,
    outcome: &mut Outcome,
) -> Result<()> {
    let fsck =
        |target: &Path| run_silent(Command::new(shoal).args(["fsck", "--counters"]).arg(target));
    let ((), timed) = ctx.timed(|| fsck(mountpoint))?;
    outcome.rate_and_cpu("fsck --counters online", "inode", inodes, &timed);
    let offline = ctx.target.while_unmounted(|store| {
        let ((), report) = ctx.timed(|| {
            run_silent(
                Command::new(shoal)
                    .args(["quota", "report", "-u"])
                    .arg(store),
            )
        })?;
        let ((), check) = ctx.timed(|| fsck(store))?;
        Ok((report, check))
    })?;
    if let Some((report, check)) = offline {
        outcome.seconds("usage per user, offline (opens the store)", &report);
        outcome.rate_and_cpu("fsck --counters offline", "inode", inodes, &check);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_counts_inodes_and_hard_links_once() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("a")).unwrap();
        fs::write(dir.path().join("a/one"), vec![1u8; 10_000]).unwrap();
        fs::write(dir.path().join("two"), b"x").unwrap();
        fs::hard_link(dir.path().join("two"), dir.path().join("a/two_again")).unwrap();
        std::os::unix::fs::symlink("two", dir.path().join("link")).unwrap();
        let usage = scan(dir.path(), 3).unwrap();
        let uid = fs::metadata(dir.path()).unwrap().uid();
        // root, a, one, two (once), link
        assert_eq!(usage[&uid].inodes, 5);
        assert!(usage[&uid].bytes >= 10_000);
    }
}
