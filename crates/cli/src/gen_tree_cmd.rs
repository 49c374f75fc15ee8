use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use shoal_bench::tree::{generate, TreeSpec};

pub fn run(dir: &Path, files: usize, seed: u64) -> Result<ExitCode> {
    if dir.exists()
        && dir
            .read_dir()
            .with_context(|| format!("{}", dir.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{} is not empty; give a new or empty directory",
            dir.display()
        );
    }
    let started = Instant::now();
    let summary = generate(dir, &TreeSpec::with_files(files, seed))
        .with_context(|| format!("generating into {}", dir.display()))?;
    println!(
        "{}: {} files, {} directories, {} symlinks, {} hard links, {} bytes in {:.1} s",
        dir.display(),
        summary.files,
        summary.dirs,
        summary.symlinks,
        summary.hardlinks,
        summary.bytes,
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
