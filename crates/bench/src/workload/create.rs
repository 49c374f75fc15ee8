//! fs_mark-style files: T threads, each creating N files of S bytes in its own directory
//! (optionally spread over D subdirectories, filled one after the other like fs_mark -N),
//! then `stat` and `unlink` of the same shape.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
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

/// Characters of the random part of a name, as fs_mark draws them.
const NAME_ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// Names shaped like fs_mark's 40-byte default: 8 hex digits of an ascending part (fs_mark
/// uses the time of day), 8 filler bytes, 24 random characters. Same length, same order
/// of insertion, so the directory code does the same work for both.
fn file_names(thread: usize, params: &super::Params) -> Vec<String> {
    let mut rng = SplitMix64::new(params.seed ^ (thread as u64).wrapping_mul(0x9E37_79B9));
    (0..params.files_per_thread)
        .map(|index| {
            let random: String = (0..24)
                .map(|_| NAME_ALPHABET[rng.below(NAME_ALPHABET.len() as u64) as usize] as char)
                .collect();
            let name = format!("{:08x}~~~~~~~~{random}", index / 1000);
            debug_assert_eq!(name.len(), 40);
            name
        })
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

/// The per-file system calls of fs_mark 3.3, in its order: `mkdir` of the file's directory
/// (it exists: EEXIST), `open(O_CREAT | O_RDWR | O_TRUNC, 0666)`, one `write` (even of 0
/// bytes), optionally `fsync`, `close`. The cross-check compares like with like.
pub(super) fn create_files(files: &ThreadFiles, size_bytes: usize, fsync: bool) -> Result<()> {
    let payload = vec![b's'; size_bytes];
    for (index, path) in files.paths.iter().enumerate() {
        if index.is_multiple_of(INTERRUPT_CHECK_EVERY) {
            interrupt::check()?;
        }
        let dir = path.parent().unwrap_or(&files.dir);
        match fs::create_dir(dir) {
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error).context(|| format!("mkdir {}", dir.display())),
            Ok(()) => {
                return Err(std::io::Error::other("directory was missing"))
                    .context(|| format!("mkdir {}", dir.display()))
            }
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o666)
            .open(path)
            .context(|| format!("create {}", path.display()))?;
        // On filesystems with a writeback cache even an empty write updates times and
        // checks setuid bits (FUSE: GETXATTR security.capability).
        let written = file
            .write(&payload)
            .context(|| format!("write {}", path.display()))?;
        if written < payload.len() {
            file.write_all(&payload[written..])
                .context(|| format!("write {}", path.display()))?;
        }
        if fsync {
            file.sync_all()
                .context(|| format!("fsync {}", path.display()))?;
        }
    }
    Ok(())
}

pub(super) fn create_all(ctx: &Ctx, plan: &[ThreadFiles]) -> Result<()> {
    let params = ctx.params;
    in_threads(plan.len(), |thread| {
        create_files(&plan[thread], params.file_size_bytes, params.fsync)
    })?;
    Ok(())
}

pub(super) fn total_files(plan: &[ThreadFiles]) -> u64 {
    plan.iter().map(|t| t.paths.len() as u64).sum()
}

pub fn run_create(ctx: &Ctx) -> Result<Outcome> {
    let mut outcome = Outcome::default();
    // fs_mark runs first in even runs: the second writer meets a fuller filesystem.
    let external_first = ctx.params.external && ctx.run.is_multiple_of(2);
    if external_first {
        external::fs_mark(ctx, &mut outcome)?;
    }
    let root = ctx.dir.join("create");
    fs::create_dir(&root).context(|| format!("mkdir {}", root.display()))?;
    let plan = plan(&root, ctx.params)?;
    let ((), timed) = ctx.timed(|| create_all(ctx, &plan))?;
    outcome.rate_and_cpu("create", "file", total_files(&plan), &timed);
    for (thread, files) in plan.iter().enumerate() {
        let found = count_tree(&files.dir)? - count_subdirs(ctx.params);
        outcome.count(&format!("files_thread_{thread}"), found);
    }
    if ctx.params.external && !external_first {
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
