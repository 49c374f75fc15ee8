//! A session: for run in 1..=N, for workload, for target (A B A B ...), so slow drift of
//! the machine hits every target alike. Each sample runs in a fresh `shoal-bench.XXXXXX`
//! directory of its target, removed (untimed) afterwards. With `fresh`, every sample on a
//! made target gets a new filesystem: the previous one is unmounted and destroyed first.
//! Samples on a preloaded target (`shoal-run`) run in a worker process (`crate::worker`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{BenchError, IoContext, Result};
use crate::interrupt;
use crate::progress::Progress;
use crate::target::{tempfile_in, MakeOptions, Target};
use crate::tools::run_silent;
use crate::tree::{generate, TreeSpec};
use crate::worker;
use crate::workload::count_entries;
use crate::workload::{self, git, Ctx, Outcome, Params, Workload};

pub struct Plan {
    pub workloads: Vec<Workload>,
    pub runs: usize,
    pub params: Params,
    /// Keep each sample's directory (for inspection and tests) instead of removing it.
    pub keep: bool,
    /// Where the tree's tarball is staged: RAM (/dev/shm) when there is room, so `tar x`
    /// reads its input from memory and only the target's write path is measured.
    pub staging_parent: PathBuf,
    /// Remake made targets before every sample after their first (`--fresh`).
    pub fresh: Option<MakeOptions>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    pub run: usize,
    pub workload: Workload,
    pub target: String,
    pub dir: PathBuf,
    /// Wall time of the whole sample, setup included.
    pub elapsed_ms: f64,
    #[serde(flatten)]
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The generated tree, staged as a tarball and as a bare git repository (as the
/// workloads need); its directory is removed on drop.
struct Staging {
    dir: PathBuf,
    tarball: Option<PathBuf>,
    git_repo: Option<PathBuf>,
}

impl Staging {
    fn new(parent: &Path, plan: &Plan, progress: &Progress) -> Result<Option<Staging>> {
        let tarball = plan.workloads.iter().any(|w| w.needs_tarball());
        let mut git_repo = plan.workloads.iter().any(|w| w.needs_git_repo());
        if git_repo && !git::is_installed() {
            progress.log("git is not installed: the git workload is skipped");
            git_repo = false;
        }
        if !tarball && !git_repo {
            return Ok(None);
        }
        let params = &plan.params;
        let dir = tempfile_in(parent).context(|| format!("staging dir in {}", parent.display()))?;
        let staging = Staging {
            tarball: tarball.then(|| dir.join("tree.tar")),
            git_repo: git_repo.then(|| dir.join("tree.git")),
            dir,
        };
        progress.log(&format!(
            "generating the tree ({} files, seed {}) in {}",
            params.tree_files,
            params.seed,
            staging.dir.display()
        ));
        let tree = staging.dir.join("tree");
        generate(&tree, &TreeSpec::with_files(params.tree_files, params.seed))
            .context(|| format!("generating {}", tree.display()))?;
        if let Some(tarball) = &staging.tarball {
            run_silent(
                Command::new("tar")
                    .arg("-cf")
                    .arg(tarball)
                    .arg("-C")
                    .arg(&staging.dir)
                    .arg("tree"),
            )?;
        }
        if let Some(repo) = &staging.git_repo {
            progress.log(&format!("staging a git repository in {}", repo.display()));
            git::stage_repo(&tree, repo)?;
        }
        fs::remove_dir_all(&tree).context(|| format!("removing {}", tree.display()))?;
        Ok(Some(staging))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Picks /dev/shm when it has room for the tarball (about 8 KiB per file), else `fallback`.
pub fn staging_parent(params: &Params, fallback: &Path) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let needed = params.tree_files as u64 * 8192 + (64 << 20);
    if shm.is_dir() && free_bytes(shm).is_some_and(|free| free > needed) {
        shm.to_path_buf()
    } else {
        fallback.to_path_buf()
    }
}

fn free_bytes(path: &Path) -> Option<u64> {
    shoal_sys::statvfs::device_space(path)
        .ok()
        .map(|space| space.available_bytes)
}

pub fn run(plan: &Plan, targets: &mut [Target], progress: &Progress) -> Result<Vec<Sample>> {
    if targets.is_empty() {
        return Err(BenchError::Invalid("no targets".into()));
    }
    let staging = Staging::new(&plan.staging_parent, plan, progress)?;
    progress.start(plan.runs * plan.workloads.len() * targets.len());
    let mut samples = Vec::new();
    let mut used = vec![false; targets.len()];
    for run in 1..=plan.runs {
        for &workload in &plan.workloads {
            for (target, used) in targets.iter_mut().zip(used.iter_mut()) {
                interrupt::check()?;
                if let (Some(options), true) = (&plan.fresh, *used && target.is_made()) {
                    progress.message(&format!("making a fresh {}", target.label));
                    target.remake(options)?;
                }
                *used = true;
                progress.message(&format!(
                    "run {run}: {} on {}",
                    workload.name(),
                    target.label
                ));
                let sample = run_sample(plan, run, workload, target, staging.as_ref(), progress)?;
                // A workload may have remounted the target (`Target::while_unmounted`).
                target.refresh_daemons();
                if let Some(error) = &sample.error {
                    progress.log(&format!(
                        "run {run}: {} on {} FAILED: {error}",
                        workload.name(),
                        target.label
                    ));
                }
                samples.push(sample);
                progress.inc();
            }
        }
    }
    progress.finish();
    Ok(samples)
}

fn run_sample(
    plan: &Plan,
    run: usize,
    workload: Workload,
    target: &Target,
    staging: Option<&Staging>,
    progress: &Progress,
) -> Result<Sample> {
    let dir =
        tempfile_in(&target.path).context(|| format!("mkdir in {}", target.path.display()))?;
    let report_progress =
        |line: &str| progress.message(&format!("{} on {}: {line}", workload.name(), target.label));
    let ctx = Ctx {
        target,
        dir: dir.clone(),
        params: &plan.params,
        run,
        tarball: staging.and_then(|s| s.tarball.as_deref()),
        git_repo: staging.and_then(|s| s.git_repo.as_deref()),
        progress: &report_progress,
        fastpath: Default::default(),
    };
    // What the target held before the sample, for made targets: 0 on a fresh filesystem
    // (ext4 has its lost+found), more when earlier samples were kept (`--keep`).
    let before = if target.is_made() {
        Some(count_entries(&target.path)?.saturating_sub(1))
    } else {
        None
    };
    let started = Instant::now();
    // The bench process is not preloaded: a preloaded target's sample runs in a worker.
    let result = if target.preload.is_some() {
        worker::run_sample(workload, &ctx)
    } else {
        workload::run(workload, &ctx)
    };
    let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    if !plan.keep {
        // Untimed cleanup; `rm -rf` copes with whatever a failed workload left.
        if let Err(error) = run_silent(target.tool("rm").arg("-rf").arg(&dir)) {
            progress.log(&format!("cleanup of {}: {error}", dir.display()));
        }
    }
    let (mut outcome, error) = match result {
        Ok(outcome) => (outcome, None),
        Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
        Err(error) => (Outcome::default(), Some(error.to_string())),
    };
    if let Some(entries) = before {
        outcome.count("target entries before", entries);
    }
    Ok(Sample {
        run,
        workload,
        target: target.label.clone(),
        dir,
        elapsed_ms,
        outcome,
        error,
    })
}
