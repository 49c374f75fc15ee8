//! bonnie++'s small-file test (`-n`): create, stat and delete N empty files in one
//! directory, first in sequential name order (stat and delete in readdir order), then in
//! random order. One thread, like bonnie++.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use super::{Ctx, Outcome};
use crate::error::{IoContext, Result};
use crate::external;
use crate::interrupt;
use crate::rng::SplitMix64;

const INTERRUPT_CHECK_EVERY: usize = 1024;

/// bonnie++ names: a 7-digit sequence number plus random letters (it uses up to 12).
fn names(count: usize, rng: &mut SplitMix64) -> Vec<String> {
    (0..count)
        .map(|index| {
            let suffix: String = (0..5)
                .map(|_| (b'a' + rng.below(26) as u8) as char)
                .collect();
            format!("{index:07}{suffix}")
        })
        .collect()
}

fn shuffle<T>(items: &mut [T], rng: &mut SplitMix64) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

fn each(paths: &[PathBuf], mut op: impl FnMut(&Path) -> Result<()>) -> Result<()> {
    for (index, path) in paths.iter().enumerate() {
        if index.is_multiple_of(INTERRUPT_CHECK_EVERY) {
            interrupt::check()?;
        }
        op(path)?;
    }
    Ok(())
}

fn create(path: &Path) -> Result<()> {
    File::create_new(path)
        .map(drop)
        .context(|| format!("create {}", path.display()))
}

fn stat(path: &Path) -> Result<()> {
    fs::symlink_metadata(path)
        .map(drop)
        .context(|| format!("stat {}", path.display()))
}

fn delete(path: &Path) -> Result<()> {
    fs::remove_file(path).context(|| format!("unlink {}", path.display()))
}

/// The directory's names in readdir order (bonnie++ stats and deletes what readdir gives).
fn readdir_order(dir: &Path) -> Result<Vec<PathBuf>> {
    fs::read_dir(dir)
        .context(|| format!("reading {}", dir.display()))?
        .map(|entry| {
            entry
                .map(|e| e.path())
                .context(|| format!("reading {}", dir.display()))
        })
        .collect()
}

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let count = ctx.params.threads * ctx.params.files_per_thread;
    let mut rng = SplitMix64::new(ctx.params.seed);
    let mut outcome = Outcome::default();

    let dir = ctx.dir.join("sequential");
    fs::create_dir(&dir).context(|| format!("mkdir {}", dir.display()))?;
    let mut sorted = names(count, &mut rng);
    sorted.sort();
    let paths: Vec<PathBuf> = sorted.iter().map(|name| dir.join(name)).collect();
    let ((), timed) = ctx.timed(|| each(&paths, create))?;
    outcome.rate_and_cpu("sequential create", "file", count as u64, &timed);
    let listed = readdir_order(&dir)?;
    outcome.count("files_sequential", listed.len() as u64);
    let ((), timed) = ctx.timed(|| each(&readdir_order(&dir)?, stat))?;
    outcome.rate_and_cpu("sequential stat", "file", count as u64, &timed);
    let ((), timed) = ctx.timed(|| each(&readdir_order(&dir)?, delete))?;
    outcome.rate_and_cpu("sequential delete", "file", count as u64, &timed);

    let dir = ctx.dir.join("random");
    fs::create_dir(&dir).context(|| format!("mkdir {}", dir.display()))?;
    let mut paths: Vec<PathBuf> = names(count, &mut rng).iter().map(|n| dir.join(n)).collect();
    shuffle(&mut paths, &mut rng);
    let ((), timed) = ctx.timed(|| each(&paths, create))?;
    outcome.rate_and_cpu("random create", "file", count as u64, &timed);
    outcome.count("files_random", readdir_order(&dir)?.len() as u64);
    shuffle(&mut paths, &mut rng);
    let ((), timed) = ctx.timed(|| each(&paths, stat))?;
    outcome.rate_and_cpu("random stat", "file", count as u64, &timed);
    shuffle(&mut paths, &mut rng);
    let ((), timed) = ctx.timed(|| each(&paths, delete))?;
    outcome.rate_and_cpu("random delete", "file", count as u64, &timed);

    if ctx.params.external {
        external::bonnie(ctx, count, &mut outcome)?;
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_is_a_permutation() {
        let mut items: Vec<u32> = (0..100).collect();
        shuffle(&mut items, &mut SplitMix64::new(3));
        assert_ne!(items, (0..100).collect::<Vec<_>>());
        items.sort();
        assert_eq!(items, (0..100).collect::<Vec<_>>());
    }
}
