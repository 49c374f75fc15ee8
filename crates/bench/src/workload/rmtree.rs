//! `rm -rf` of a directory tree with the real `rm`: one process over the whole tree
//! (single), and one `rm -rf` per thread over its own subtree at the same time (parallel).
//! Before the single removal, the tree's usage is read cold: `du -s` (caches dropped) or,
//! on shoal, `shoal du` (its recursive usage counters). On shoal a third tree goes with
//! `shoal rmtree`: the time until the name is gone, and until its space is reclaimed.

use std::fs::{self, File};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{count_tree, in_threads, Ctx, Outcome};
use crate::error::{BenchError, IoContext, Result};
use crate::interrupt;
use crate::target::Target;
use crate::tools::{drop_caches, run_capture, run_silent};

/// Files per leaf directory: a typical build-output or mail-spool directory.
const FILES_PER_DIR: usize = 100;

/// T subtrees `t{i}/dNNNN/fNNNN` of empty files; returns the entries created.
fn build(root: &Path, threads: usize, files_per_thread: usize) -> Result<u64> {
    fs::create_dir(root).context(|| format!("mkdir {}", root.display()))?;
    let per_thread = in_threads(threads, |thread| {
        let top = root.join(format!("t{thread}"));
        fs::create_dir(&top).context(|| format!("mkdir {}", top.display()))?;
        let mut entries = 1u64;
        for dir_index in 0..files_per_thread.div_ceil(FILES_PER_DIR) {
            interrupt::check()?;
            let dir = top.join(format!("d{dir_index:04}"));
            fs::create_dir(&dir).context(|| format!("mkdir {}", dir.display()))?;
            entries += 1;
            let first = dir_index * FILES_PER_DIR;
            for file in first..(first + FILES_PER_DIR).min(files_per_thread) {
                let path = dir.join(format!("f{file:07}"));
                File::create(&path).context(|| format!("create {}", path.display()))?;
                entries += 1;
            }
        }
        Ok(entries)
    })?;
    Ok(per_thread.iter().sum())
}

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let params = ctx.params;
    let mut outcome = Outcome::default();

    let single = ctx.dir.join("single");
    let entries = build(&single, params.threads, params.files_per_thread)?;
    measure_usage(ctx, &single, &mut outcome)?;
    let ((), timed) = ctx.timed(|| run_silent(ctx.tool("rm").arg("-rf").arg(&single)))?;
    outcome.rate_and_cpu("rm -rf single", "entry", entries, &timed);
    outcome.count("entries_single", entries);

    let parallel = ctx.dir.join("parallel");
    let entries = build(&parallel, params.threads, params.files_per_thread)?;
    let ((), timed) = ctx.timed(|| {
        in_threads(params.threads, |thread| {
            run_silent(
                ctx.tool("rm")
                    .arg("-rf")
                    .arg(parallel.join(format!("t{thread}"))),
            )
        })?;
        fs::remove_dir(&parallel).context(|| format!("rmdir {}", parallel.display()))
    })?;
    outcome.rate_and_cpu("rm -rf parallel", "entry", entries, &timed);
    outcome.count("entries_parallel", entries);

    if let Some((shoal, mountpoint)) = shoal_of(ctx.target) {
        let engine = ctx.dir.join("engine");
        let entries = build(&engine, params.threads, params.files_per_thread)?;
        let ((), timed) =
            ctx.timed(|| run_silent(Command::new(shoal).arg("rmtree").arg(&engine)))?;
        outcome.rate_and_cpu("shoal rmtree", "entry", entries, &timed);
        let ((), timed) = ctx.timed(|| wait_reclaimed(shoal, mountpoint))?;
        outcome.seconds("shoal rmtree reclaim", &timed);
        outcome.count("entries_engine", entries);
    }
    outcome.count("entries_left", count_tree(&ctx.dir)?);
    Ok(outcome)
}

/// The shoal binary and mountpoint of a shoal target.
pub(super) fn shoal_of(target: &Target) -> Option<(&Path, &Path)> {
    if !target.is_shoal() {
        return None;
    }
    Some((
        target.shoal_bin.as_deref()?,
        &target.mount.as_ref()?.mountpoint,
    ))
}

/// The usage of `tree` as a cold `du -s` finds it, or from shoal's counters.
fn measure_usage(ctx: &Ctx, tree: &Path, outcome: &mut Outcome) -> Result<()> {
    if let Some((shoal, _)) = shoal_of(ctx.target) {
        let ((), timed) = ctx.timed(|| {
            run_capture(Command::new(shoal).args(["du", "--json"]).arg(tree)).map(drop)
        })?;
        outcome.seconds("usage of the tree", &timed);
        outcome.notes.push("usage: shoal du".into());
        return Ok(());
    }
    if !drop_caches() {
        outcome.notes.push("not root: du -s started warm".into());
    }
    let ((), timed) = ctx.timed(|| run_capture(ctx.tool("du").arg("-s").arg(tree)).map(drop))?;
    outcome.seconds("usage of the tree", &timed);
    Ok(())
}

/// Polls `shoal stats` until no detached tree is left to delete.
fn wait_reclaimed(shoal: &Path, mountpoint: &Path) -> Result<()> {
    loop {
        interrupt::check()?;
        let text = run_capture(
            Command::new(shoal)
                .args(["stats", "--json"])
                .arg(mountpoint),
        )?;
        let stats: serde_json::Value = serde_json::from_str(&text)
            .map_err(|error| BenchError::Invalid(format!("shoal stats --json: {error}")))?;
        if stats["engine"]["reclaim_trees"].as_u64() == Some(0) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
