//! `rm -rf` of a directory tree with the real `rm`: one process over the whole tree
//! (single), and one `rm -rf` per thread over its own subtree at the same time (parallel).

use std::fs::{self, File};
use std::path::Path;
use std::process::Command;

use super::{count_tree, in_threads, Ctx, Outcome};
use crate::error::{IoContext, Result};
use crate::interrupt;
use crate::tools::run_silent;

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
    let ((), timed) = ctx.timed(|| run_silent(Command::new("rm").arg("-rf").arg(&single)))?;
    outcome.rate_and_cpu("rm -rf single", "entry", entries, &timed);
    outcome.count("entries_single", entries);

    let parallel = ctx.dir.join("parallel");
    let entries = build(&parallel, params.threads, params.files_per_thread)?;
    let ((), timed) = ctx.timed(|| {
        in_threads(params.threads, |thread| {
            run_silent(
                Command::new("rm")
                    .arg("-rf")
                    .arg(parallel.join(format!("t{thread}"))),
            )
        })?;
        fs::remove_dir(&parallel).context(|| format!("rmdir {}", parallel.display()))
    })?;
    outcome.rate_and_cpu("rm -rf parallel", "entry", entries, &timed);
    outcome.count("entries_parallel", entries);
    outcome.count("entries_left", count_tree(&ctx.dir)?);
    Ok(outcome)
}
