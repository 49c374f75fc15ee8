//! fs_mark-style files: T threads, each creating N files of S bytes in its own directory
//! (optionally spread over D subdirectories, filled one after the other like fs_mark -N),
//! then `stat` and `unlink` of the same shape.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{count_tree, in_threads, Ctx, Outcome};
use crate::error::{IoContext, Result};
use crate::external;
use crate::interrupt;
use crate::rng::SplitMix64;

/// Operations between two checks for Ctrl-C.
const INTERRUPT_CHECK_EVERY: usize = 1024;

/// The files of one thread, in creation order.
pub struct ThreadFiles {
    pub dir: PathBuf,
    pub paths: Vec<PathBuf>,
}

/// Names like fs_mark's: an ascending part and a random part, so neither sorted nor
/// purely random insertion order is favoured.
fn file_names(thread: usize, params: &super::Params) -> Vec<String> {
    let mut rng = SplitMix64::new(params.seed ^ (thread as u64).wrapping_mul(0x9E37_79B9));
    (0..params.files_per_thread)
        .map(|index| format!("{index:08x}{:08x}", rng.next_u64() as u32))
        .collect()
}

/// Plans and makes the directories of every thread (untimed, as in fs_mark).
pub fn plan(root: &Path, params: &super::Params) -> Result<Vec<ThreadFiles>> {
    let files_per_dir = params.files_per_thread.div_ceil(params.dirs_per_thread);
    (0..params.threads)
        .map(|thread| {
            let dir = root.join(format!("t{thread}"));
            fs::create_dir(&dir).context(|| format!("mkdir {}", dir.display()))?;
            let subdirs: Vec<PathBuf> = if params.dirs_per_thread > 1 {
                (0..params.dirs_per_thread)
                    .map(|d| dir.join(format!("d{d:04}")))
                    .collect()
            } else {
                vec![dir.clone()]
            };
            for subdir in subdirs.iter().filter(|s| **s != dir) {
                fs::create_dir(subdir).context(|| format!("mkdir {}", subdir.display()))?;
            }
            let paths = file_names(thread, params)
                .into_iter()
                .enumerate()
                .map(|(index, name)| subdirs[index / files_per_dir].join(name))
                .collect();
            Ok(ThreadFiles { dir, paths })
        })
        .collect()
}

fn create_files(files: &ThreadFiles, size_bytes: usize, fsync: bool) -> Result<()> {
    let payload = vec![b's'; size_bytes];
    for (index, path) in files.paths.iter().enumerate() {
        if index.is_multiple_of(INTERRUPT_CHECK_EVERY) {
            interrupt::check()?;
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .context(|| format!("create {}", path.display()))?;
        // Always one write, even of 0 bytes, as fs_mark does: on filesystems with a
        // writeback cache an empty write still updates times and checks setuid bits (FUSE:
        // GETXATTR security.capability), and the figures must compare with fs_mark's.
        file.write_all(&payload)
            .context(|| format!("write {}", path.display()))?;
        if payload.is_empty() {
            let written = file
                .write(&payload)
                .context(|| format!("write {}", path.display()))?;
            debug_assert_eq!(written, 0);
        }
        if fsync {
            file.sync_all()
                .context(|| format!("fsync {}", path.display()))?;
        }
    }
    Ok(())
}

fn create_all(ctx: &Ctx, plan: &[ThreadFiles]) -> Result<()> {
    let params = ctx.params;
    in_threads(plan.len(), |thread| {
        create_files(&plan[thread], params.file_size_bytes, params.fsync)
    })?;
    Ok(())
}

fn total_files(plan: &[ThreadFiles]) -> u64 {
    plan.iter().map(|t| t.paths.len() as u64).sum()
}

pub fn run_create(ctx: &Ctx) -> Result<Outcome> {
    let root = ctx.dir.join("create");
    fs::create_dir(&root).context(|| format!("mkdir {}", root.display()))?;
    let plan = plan(&root, ctx.params)?;
    let ((), timed) = ctx.timed(|| create_all(ctx, &plan))?;
    let mut outcome = Outcome::default();
    outcome.rate_and_cpu("create", "file", total_files(&plan), &timed);
    for (thread, files) in plan.iter().enumerate() {
        let found = count_tree(&files.dir)? - count_subdirs(ctx.params);
        outcome.count(&format!("files_thread_{thread}"), found);
    }
    if ctx.params.external {
        external::fs_mark(ctx, &mut outcome)?;
    }
    Ok(outcome)
}

fn count_subdirs(params: &super::Params) -> u64 {
    if params.dirs_per_thread > 1 {
        params.dirs_per_thread as u64
    } else {
        0
    }
}

fn prepared(ctx: &Ctx, name: &str) -> Result<Vec<ThreadFiles>> {
    let root = ctx.dir.join(name);
    fs::create_dir(&root).context(|| format!("mkdir {}", root.display()))?;
    let plan = plan(&root, ctx.params)?;
    create_all(ctx, &plan)?;
    Ok(plan)
}

pub fn run_stat(ctx: &Ctx) -> Result<Outcome> {
    let plan = prepared(ctx, "stat")?;
    let (stats, timed) = ctx.timed(|| {
        let counts = in_threads(plan.len(), |thread| {
            let mut found = 0u64;
            for (index, path) in plan[thread].paths.iter().enumerate() {
                if index.is_multiple_of(INTERRUPT_CHECK_EVERY) {
                    interrupt::check()?;
                }
                fs::symlink_metadata(path).context(|| format!("stat {}", path.display()))?;
                found += 1;
            }
            Ok(found)
        })?;
        Ok(counts.iter().sum::<u64>())
    })?;
    let mut outcome = Outcome::default();
    outcome.rate_and_cpu("stat", "file", stats, &timed);
    outcome.count("files_stated", stats);
    Ok(outcome)
}

pub fn run_unlink(ctx: &Ctx) -> Result<Outcome> {
    let plan = prepared(ctx, "unlink")?;
    let ((), timed) = ctx.timed(|| {
        in_threads(plan.len(), |thread| {
            for (index, path) in plan[thread].paths.iter().enumerate() {
                if index.is_multiple_of(INTERRUPT_CHECK_EVERY) {
                    interrupt::check()?;
                }
                fs::remove_file(path).context(|| format!("unlink {}", path.display()))?;
            }
            Ok(())
        })?;
        Ok(())
    })?;
    let mut outcome = Outcome::default();
    outcome.rate_and_cpu("unlink", "file", total_files(&plan), &timed);
    let left: u64 = plan
        .iter()
        .map(|t| count_tree(&t.dir))
        .sum::<Result<u64>>()?;
    outcome.count(
        "files_left",
        left - count_subdirs(ctx.params) * plan.len() as u64,
    );
    Ok(outcome)
}
