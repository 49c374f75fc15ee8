//! One directory grown to `--files` empty files by one writer, in ten steps, to show
//! whether the cost of a create grows with the directory: each step is timed on its own
//! (`create to N`). The creates make fs_mark's system calls (see `create`). Then, timed:
//! `ls -f` of the directory (every name, warm), a listing plus `stat` of 10000 names picked
//! at random, and `rm -rf` of it.

use std::fs;
use std::path::Path;

use super::create::{create_files, plan, ThreadFiles};
use super::{count_entries, Ctx, Outcome, Params};
use crate::error::{BenchError, IoContext, Result};
use crate::interrupt;
use crate::rng::SplitMix64;
use crate::tools::{run_capture, run_silent};

/// Steps the directory grows in (fs_mark -L 10).
const STEPS: usize = 10;
/// Names stat'ed after a listing.
const STAT_SAMPLE: usize = 10_000;

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let files = ctx.params.files_per_thread;
    let one_writer = Params {
        threads: 1,
        dirs_per_thread: 1,
        ..ctx.params.clone()
    };
    let root = ctx.dir.join("bigdir");
    fs::create_dir(&root).context(|| format!("mkdir {}", root.display()))?;
    let mut writer = plan(&root, &one_writer)?
        .pop()
        .ok_or_else(|| BenchError::Invalid("bigdir: no writer planned".into()))?;
    let dir = writer.dir.clone();
    let mut outcome = Outcome::default();
    let all = std::mem::take(&mut writer.paths);
    let per_step = files.div_ceil(STEPS);
    let mut created = 0;
    for step in all.chunks(per_step) {
        let part = ThreadFiles {
            dir: dir.clone(),
            paths: step.to_vec(),
        };
        (ctx.progress)(&format!(
            "creating files {created}..{}",
            created + step.len()
        ));
        let ((), timed) = ctx.timed(|| create_files(&part, 0, ctx.params.fsync))?;
        created += step.len();
        outcome.rate_and_cpu(
            &format!("create to {created}"),
            "file",
            step.len() as u64,
            &timed,
        );
    }
    let (listed, timed) = ctx.timed(|| {
        let names = run_capture(ctx.tool("ls").arg("-f").arg(&dir))?;
        Ok(names.lines().count() as u64)
    })?;
    outcome.seconds("ls -f (all names)", &timed);
    // `ls -f` lists `.` and `..` too.
    outcome.count("listed", listed.saturating_sub(2));
    let (stated, timed) = ctx.timed(|| stat_random(&dir, ctx.params.seed))?;
    outcome.seconds(&format!("listing + stat of {stated} random names"), &timed);
    outcome.count("stated", stated);
    outcome.count("files", count_entries(&dir)?);
    let ((), timed) = ctx.timed(|| run_silent(ctx.tool("rm").arg("-rf").arg(&dir)))?;
    outcome.rate_and_cpu("rm -rf", "file", created as u64, &timed);
    outcome.count("left", count_entries(&root)?);
    Ok(outcome)
}

/// Lists `dir`, then stats up to `STAT_SAMPLE` of its names picked at random.
fn stat_random(dir: &Path, seed: u64) -> Result<u64> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).context(|| format!("reading {}", dir.display()))? {
        names.push(
            entry
                .context(|| format!("reading {}", dir.display()))?
                .file_name(),
        );
    }
    let mut rng = SplitMix64::new(seed);
    let picks = STAT_SAMPLE.min(names.len());
    // A partial Fisher-Yates shuffle: the first `picks` names are a random sample.
    for index in 0..picks {
        let other = index + rng.below((names.len() - index) as u64) as usize;
        names.swap(index, other);
    }
    for (index, name) in names[..picks].iter().enumerate() {
        if index % 1024 == 0 {
            interrupt::check()?;
        }
        let path = dir.join(name);
        fs::symlink_metadata(&path).context(|| format!("stat {}", path.display()))?;
    }
    Ok(picks as u64)
}
