//! The named workloads. Each runs in a fresh, empty directory on a target and returns its
//! metrics; setup and cleanup outside the timed part are not measured.

pub mod bigdir;
pub mod bonnie;
pub mod churn;
pub mod create;
pub mod git;
pub mod objects;
pub mod quota;
pub mod quotacheck;
pub mod rmtree;
pub mod store_bytes;
pub mod tree;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cpu::{CpuSnapshot, CpuUsage};
use crate::error::{BenchError, Result};
use crate::target::{FastPathCounts, Target};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Create,
    Stat,
    Unlink,
    Rmtree,
    Tree,
    Git,
    Objects,
    Bonnie,
    Quotacheck,
    Churn,
    Quota,
    Bigdir,
    #[serde(rename = "store-bytes")]
    StoreBytes,
}

impl Workload {
    pub const ALL: [Workload; 13] = [
        Workload::Create,
        Workload::Stat,
        Workload::Unlink,
        Workload::Rmtree,
        Workload::Tree,
        Workload::Git,
        Workload::Objects,
        Workload::Bonnie,
        Workload::Quotacheck,
        Workload::Churn,
        Workload::Quota,
        Workload::Bigdir,
        Workload::StoreBytes,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Create => "create",
            Workload::Stat => "stat",
            Workload::Unlink => "unlink",
            Workload::Rmtree => "rmtree",
            Workload::Tree => "tree",
            Workload::Git => "git",
            Workload::Objects => "objects",
            Workload::Bonnie => "bonnie",
            Workload::Quotacheck => "quotacheck",
            Workload::Churn => "churn",
            Workload::Quota => "quota",
            Workload::Bigdir => "bigdir",
            Workload::StoreBytes => "store-bytes",
        }
    }

    /// Whether a session that names no workloads runs it: churn runs for a fixed time,
    /// and quota, bigdir and store-bytes answer one question each at their own sizes
    /// (their commands are in BENCHMARKS.md); those are run by name.
    pub fn in_default(self) -> bool {
        !matches!(
            self,
            Workload::Churn | Workload::Quota | Workload::Bigdir | Workload::StoreBytes
        )
    }

    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|w| w.name() == name)
            .ok_or_else(|| {
                BenchError::Invalid(format!(
                    "unknown workload '{name}' (known: {})",
                    Self::ALL.map(Workload::name).join(", ")
                ))
            })
    }

    /// Whether a run needs the generated tree's tarball.
    pub fn needs_tarball(self) -> bool {
        matches!(self, Workload::Tree | Workload::Quotacheck)
    }

    /// Whether a run needs a bare git repository of the generated tree.
    pub fn needs_git_repo(self) -> bool {
        self == Workload::Git
    }
}

/// Preset scales of `--size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    Small,
    Medium,
    Large,
}

impl Size {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "small" => Ok(Size::Small),
            "medium" => Ok(Size::Medium),
            "large" => Ok(Size::Large),
            _ => Err(BenchError::Invalid(format!(
                "unknown size '{name}' (small, medium, large)"
            ))),
        }
    }
}

/// Every knob of every workload. Presets come from [`Params::for_size`]; the CLI overrides.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    pub threads: usize,
    /// create / stat / unlink / quota: files per thread; rmtree trees and bonnie use
    /// threads x this; bigdir and store-bytes: the files of their one writer.
    pub files_per_thread: usize,
    /// create: bytes written into each file (0, 100, 1024, 4096 are the classic rows).
    pub file_size_bytes: usize,
    /// create: subdirectories per thread (fs_mark -D); files fill one before the next (-N).
    pub dirs_per_thread: usize,
    /// create and objects: fsync each file before close (fs_mark -S1).
    pub fsync: bool,
    /// tree, git and quotacheck: regular files of the generated tree (entries are ~1.1x).
    pub tree_files: usize,
    pub seed: u64,
    /// objects: total objects written.
    pub objects_count: u64,
    pub objects_size_bytes: usize,
    /// objects: how long a target may write before it stops short of the count ("as far as
    /// time allows"), for all targets or per target label.
    #[serde(default)]
    pub objects_minutes: Vec<TimeLimit>,
    /// Also run fs_mark and bonnie++ with matching parameters, where installed.
    pub external: bool,
    /// churn: objects in the live set.
    #[serde(default = "default_churn_objects")]
    pub churn_objects: u64,
    /// churn: how long the churn runs after the fill.
    #[serde(default = "default_churn_seconds")]
    pub churn_seconds: u64,
}

fn default_churn_objects() -> u64 {
    Params::for_size(Size::Small).churn_objects
}

fn default_churn_seconds() -> u64 {
    Params::for_size(Size::Small).churn_seconds
}

impl Params {
    pub fn for_size(size: Size) -> Self {
        let (files_per_thread, tree_files, objects_count) = match size {
            Size::Small => (10_000, 9_000, 50_000),
            Size::Medium => (100_000, 90_000, 1_000_000),
            Size::Large => (1_000_000, 1_000_000, 2_000_000),
        };
        // About 44 KB per object: 220 MB, 2.2 GB and 22 GB live.
        let (churn_objects, churn_seconds) = match size {
            Size::Small => (5_000, 60),
            Size::Medium => (50_000, 600),
            Size::Large => (500_000, 1_800),
        };
        Params {
            threads: 2,
            files_per_thread,
            file_size_bytes: 0,
            dirs_per_thread: 1,
            fsync: false,
            tree_files,
            seed: 1,
            objects_count,
            objects_size_bytes: 1024,
            objects_minutes: Vec::new(),
            external: false,
            churn_objects,
            churn_seconds,
        }
    }

    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("--threads", self.threads as u64),
            ("--files", self.files_per_thread as u64),
            ("--dirs", self.dirs_per_thread as u64),
            ("--tree-files", self.tree_files as u64),
            ("--objects-count", self.objects_count),
            ("--churn-objects", self.churn_objects),
            ("--churn-seconds", self.churn_seconds),
        ];
        for (flag, value) in positive {
            if value == 0 {
                return Err(BenchError::Invalid(format!("{flag} must be at least 1")));
            }
        }
        Ok(())
    }
}

/// A time limit of the objects workload: for every target, or for the one labelled so.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeLimit {
    pub target: Option<String>,
    pub minutes: f64,
}

impl TimeLimit {
    /// `25` (every target) or `xfs=25,ext4=10` (per target label).
    pub fn parse_list(list: &str) -> Result<Vec<TimeLimit>> {
        list.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(TimeLimit::parse)
            .collect()
    }

    fn parse(item: &str) -> Result<TimeLimit> {
        let (target, minutes) = match item.split_once('=') {
            Some((label, minutes)) => (Some(label.trim().to_string()), minutes),
            None => (None, item),
        };
        let bad = || {
            BenchError::Invalid(format!(
                "--objects-minutes: '{item}' is not MINUTES or TARGET=MINUTES (minutes > 0)"
            ))
        };
        let minutes: f64 = minutes.trim().parse().map_err(|_| bad())?;
        if !(minutes.is_finite() && minutes > 0.0) || target.as_deref() == Some("") {
            return Err(bad());
        }
        Ok(TimeLimit { target, minutes })
    }
}

impl Params {
    /// The objects time limit of the target labelled `label`: its own, else the general one.
    pub fn objects_minutes_for(&self, label: &str) -> Option<f64> {
        let own = self
            .objects_minutes
            .iter()
            .find(|limit| limit.target.as_deref() == Some(label));
        let general = self.objects_minutes.iter().find(|l| l.target.is_none());
        own.or(general).map(|limit| limit.minutes)
    }
}

/// Which way a metric improves, for ratios and the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    pub unit: String,
    pub better: Better,
    pub value: f64,
}

/// One point of the objects rate-over-time curve.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CurvePoint {
    pub files: u64,
    pub elapsed_ms: f64,
    /// Objects per second over the interval since the previous point.
    pub rate_per_s: f64,
    /// The shoal daemon's RSS, or the machine's used memory for other targets.
    pub memory_bytes: u64,
}

/// What one workload run on one target produced.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Outcome {
    pub metrics: Vec<Metric>,
    /// Independent counts (by readdir, after the timed part) for validation.
    pub counts: BTreeMap<String, u64>,
    pub notes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub curve: Vec<CurvePoint>,
    /// churn: live and used bytes over time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub space_curve: Vec<churn::SpacePoint>,
}

impl Outcome {
    pub fn metric(&mut self, name: &str, unit: &str, better: Better, value: f64) {
        self.metrics.push(Metric {
            name: name.to_string(),
            unit: unit.to_string(),
            better,
            value,
        });
    }

    /// The usual pair for an operation count: ops/s and CPU microseconds per op.
    pub fn rate_and_cpu(&mut self, name: &str, unit_op: &str, ops: u64, timed: &Timed) {
        let secs = timed.elapsed.as_secs_f64().max(1e-9);
        self.metric(
            &format!("{name} rate"),
            &format!("{unit_op}/s"),
            Better::Higher,
            ops as f64 / secs,
        );
        let cpu_us = timed.cpu.total().as_secs_f64() * 1e6 / ops.max(1) as f64;
        self.metric(
            &format!("{name} CPU"),
            &format!("µs/{unit_op}"),
            Better::Lower,
            cpu_us,
        );
        // On shoal, the daemon's share of that CPU and what its spinners burned besides.
        if !timed.cpu.daemon.is_zero() {
            let per_op = |cpu: Duration| cpu.as_secs_f64() * 1e6 / ops.max(1) as f64;
            let unit = format!("µs/{unit_op}");
            self.metric(
                &format!("{name} daemon CPU"),
                &unit,
                Better::Lower,
                per_op(timed.cpu.daemon),
            );
            self.metric(
                &format!("{name} spin CPU"),
                &unit,
                Better::Lower,
                per_op(timed.cpu.spin),
            );
        }
        self.requests_per(name, ops, timed);
    }

    /// FUSE requests per entry of a section on shoal (nothing elsewhere): the total as a
    /// metric, and each request type as a count (`requests NAME OP`) for the breakdown.
    pub fn requests_per(&mut self, name: &str, entries: u64, timed: &Timed) {
        let Some(requests) = &timed.requests else {
            return;
        };
        let total: u64 = requests.values().sum();
        self.metric(
            &format!("{name} requests"),
            "req/entry",
            Better::Lower,
            total as f64 / entries.max(1) as f64,
        );
        for (op, count) in requests {
            self.count(&format!("requests {name} {op}"), *count);
        }
    }

    pub fn seconds(&mut self, name: &str, timed: &Timed) {
        self.metric(name, "s", Better::Lower, timed.elapsed.as_secs_f64());
    }

    pub fn count(&mut self, name: &str, value: u64) {
        self.counts.insert(name.to_string(), value);
    }
}

/// Wall time and CPU of one timed section.
#[derive(Clone, Debug)]
pub struct Timed {
    pub elapsed: Duration,
    pub cpu: CpuUsage,
    /// FUSE requests sent to a shoal daemon during the section, by type (shoal only).
    pub requests: Option<BTreeMap<String, u64>>,
}

/// Fast-path requests of a sample's timed sections, added up as they end.
#[derive(Debug, Default)]
pub struct FastPathTally {
    served: AtomicU64,
    failed: AtomicU64,
    fell_back: AtomicU64,
}

impl FastPathTally {
    fn add(&self, counts: FastPathCounts) {
        self.served.fetch_add(counts.served, Ordering::Relaxed);
        self.failed.fetch_add(counts.failed, Ordering::Relaxed);
        self.fell_back
            .fetch_add(counts.fell_back, Ordering::Relaxed);
    }

    pub fn total(&self) -> FastPathCounts {
        FastPathCounts {
            served: self.served.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            fell_back: self.fell_back.load(Ordering::Relaxed),
        }
    }
}

/// Everything a workload sees.
pub struct Ctx<'a> {
    pub target: &'a Target,
    /// Fresh and empty; removed by the runner afterwards.
    pub dir: PathBuf,
    pub params: &'a Params,
    /// Which repetition this is (1-based); workloads that pair two measurements alternate
    /// their order with it, so neither always meets the fresher filesystem.
    pub run: usize,
    /// The generated tree as a tar archive (tree and quotacheck only).
    pub tarball: Option<&'a Path>,
    /// The generated tree as a bare git repository, outside the targets (git only; `None`
    /// where git is not installed).
    pub git_repo: Option<&'a Path>,
    /// Streams a progress line (a progress bar message on a terminal).
    pub progress: &'a (dyn Fn(&str) + Sync),
    /// What the daemon's fast path did during the timed sections (shoal targets).
    pub fastpath: FastPathTally,
}

impl Ctx<'_> {
    /// A command for one of the workload's tools: preloaded on a `shoal-run` target
    /// ([`Target::tool`]).
    pub fn tool(&self, program: impl AsRef<OsStr>) -> Command {
        self.target.tool(program)
    }

    /// Runs `f` and measures its wall time and CPU (ours, our children's and the daemon's).
    pub fn timed<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<(T, Timed)> {
        // Request counts are read outside the timed and CPU-measured window (asking the
        // daemon runs `shoal stats`, a child process).
        let counts_before = self.target.daemon_counts();
        let before = CpuSnapshot::take(&self.target.daemon_pids);
        let started = Instant::now();
        let value = f()?;
        let elapsed = started.elapsed();
        let mut cpu = CpuSnapshot::take(&self.target.daemon_pids).since(&before);
        let counts_after = counts_before.as_ref().and(self.target.daemon_counts());
        let requests = counts_before.zip(counts_after).map(|(before, after)| {
            self.fastpath.add(after.fastpath.since(&before.fastpath));
            // A follower's polling is CPU the daemon would otherwise have left idle: it
            // counts with the spinners', not as work on requests.
            let polled = after.ring_poll.saturating_sub(before.ring_poll);
            cpu.daemon = cpu.daemon.saturating_sub(polled);
            cpu.spin += polled;
            after
                .requests
                .into_iter()
                .map(|(op, count)| {
                    let delta =
                        count.saturating_sub(before.requests.get(&op).copied().unwrap_or(0));
                    (op, delta)
                })
                .filter(|(_, delta)| *delta > 0)
                .collect()
        });
        Ok((
            value,
            Timed {
                elapsed,
                cpu,
                requests,
            },
        ))
    }
}

/// Runs one workload in `ctx.dir`. On shoal, the counts say what the fast path did during
/// its timed sections (all zero unless the target is `shoal-run`).
pub fn run(workload: Workload, ctx: &Ctx) -> Result<Outcome> {
    let mut outcome = run_workload(workload, ctx)?;
    if ctx.target.is_shoal() {
        let fastpath = ctx.fastpath.total();
        outcome.count("fastpath served", fastpath.served);
        outcome.count("fastpath failed", fastpath.failed);
        outcome.count("fastpath fell back", fastpath.fell_back);
    }
    Ok(outcome)
}

fn run_workload(workload: Workload, ctx: &Ctx) -> Result<Outcome> {
    match workload {
        Workload::Create => create::run_create(ctx),
        Workload::Stat => create::run_stat(ctx),
        Workload::Unlink => create::run_unlink(ctx),
        Workload::Rmtree => rmtree::run(ctx),
        Workload::Tree => tree::run(ctx),
        Workload::Git => git::run(ctx),
        Workload::Objects => objects::run(ctx),
        Workload::Bonnie => bonnie::run(ctx),
        Workload::Quotacheck => quotacheck::run(ctx),
        Workload::Churn => churn::run(ctx),
        Workload::Quota => quota::run(ctx),
        Workload::Bigdir => bigdir::run(ctx),
        Workload::StoreBytes => store_bytes::run(ctx),
    }
}

/// Runs `work(thread)` on `threads` scoped threads; the first error wins.
pub fn in_threads<T: Send>(
    threads: usize,
    work: impl Fn(usize) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let work = &work;
                scope.spawn(move || work(thread))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err(BenchError::Invalid("a worker thread panicked".into())))
            })
            .collect()
    })
}

/// Entries directly in `dir` (an independent count for validation).
pub fn count_entries(dir: &Path) -> Result<u64> {
    use crate::error::IoContext;
    let entries = std::fs::read_dir(dir).context(|| format!("reading {}", dir.display()))?;
    Ok(entries.count() as u64)
}

/// Entries below `dir`, recursively, not counting `dir` itself and not following symlinks.
pub fn count_tree(dir: &Path) -> Result<u64> {
    use crate::error::IoContext;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        // Walks of big trees take minutes on FUSE: Ctrl-C must still tear down.
        crate::interrupt::check()?;
        for entry in
            std::fs::read_dir(&current).context(|| format!("reading {}", current.display()))?
        {
            let entry = entry.context(|| format!("reading {}", current.display()))?;
            total += 1;
            if entry
                .file_type()
                .context(|| format!("stat {}", entry.path().display()))?
                .is_dir()
            {
                stack.push(entry.path());
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_limits_parse_general_and_per_target() {
        let limits = TimeLimit::parse_list("30, xfs=12.5").unwrap();
        assert_eq!(limits.len(), 2);
        let mut params = Params::for_size(Size::Small);
        params.objects_minutes = limits;
        assert_eq!(params.objects_minutes_for("xfs"), Some(12.5));
        assert_eq!(params.objects_minutes_for("shoal"), Some(30.0));
        params.objects_minutes = TimeLimit::parse_list("xfs=5").unwrap();
        assert_eq!(params.objects_minutes_for("shoal"), None);
    }

    #[test]
    fn bad_time_limits_are_refused() {
        for bad in ["0", "-3", "soon", "=5", "xfs=", "xfs=nan"] {
            assert!(TimeLimit::parse_list(bad).is_err(), "{bad} was accepted");
        }
    }
}
