//! `shoal bench`: argument parsing only; the workloads, targets and reports live in the
//! shoal-bench library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use shoal_bench::env;
use shoal_bench::interrupt;
use shoal_bench::progress::Progress;
use shoal_bench::report::{self, Report};
use shoal_bench::runner::{self, Plan};
use shoal_bench::target::{self, MakeKind, MakeOptions, Target};
use shoal_bench::worker;
use shoal_bench::workload::{Params, Size, TimeLimit, Workload};

use crate::run_cmd;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Workloads to run: create, stat, unlink, rmtree, tree, git, objects, bonnie,
    /// quotacheck, churn, quota, bigdir, store-bytes (default: all but churn, quota, bigdir
    /// and store-bytes).
    #[arg(value_name = "WORKLOAD")]
    workloads: Vec<String>,
    /// A directory to run in (any filesystem; repeatable). Ratios are against the first.
    #[arg(long = "target", value_name = "DIR")]
    targets: Vec<PathBuf>,
    /// Root only: make fresh filesystems to compare, from xfs,ext4,btrfs,shoal,shoal-run,
    /// shoal-memory,reference-memfs (loop devices, shoal mounts and the minimal fuser
    /// in-memory filesystem, the FUSE ceiling, under --scratch; always torn down). shoal-run
    /// is a shoal mount whose workloads run under the fast path library (`shoal run`).
    #[arg(long, value_name = "LIST")]
    make: Option<String>,
    /// Give every sample on a --make target a new filesystem (made, mounted, measured,
    /// unmounted, destroyed), instead of one filesystem per target for the session.
    #[arg(long)]
    fresh: bool,
    /// The reference-memfs binary for --make reference-memfs (default: beside shoal).
    #[arg(long, value_name = "PATH")]
    memfs: Option<PathBuf>,
    /// reference-memfs --threads.
    #[arg(long, default_value_t = 2)]
    memfs_threads: usize,
    /// Repetitions, interleaved across targets (A B A B); the table shows median, min, max.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Preset scale: small (minutes), medium (~100k files per row), large (millions).
    #[arg(long, default_value = "small")]
    size: String,
    /// Write bench.json, charts/*.svg and BENCHMARKS.md into DIR.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Write every sample and the environment as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Threads of create, stat, unlink, rmtree and objects.
    #[arg(long)]
    threads: Option<usize>,
    /// Files per thread (create, stat, unlink, rmtree, quota; bonnie uses threads x files;
    /// bigdir and store-bytes: the files of their one writer).
    #[arg(long)]
    files: Option<usize>,
    /// Bytes per file in create (fs_mark -s: 0, 100, 1024, 4096 ...).
    #[arg(long, value_name = "BYTES")]
    file_size: Option<usize>,
    /// Subdirectories per thread in create (fs_mark -D).
    #[arg(long)]
    dirs: Option<usize>,
    /// fsync every file in create and objects (fs_mark -S1).
    #[arg(long)]
    fsync: bool,
    /// Regular files of the generated tree (tree, git, quotacheck).
    #[arg(long)]
    tree_files: Option<usize>,
    /// Objects written by the objects workload.
    #[arg(long, value_name = "N")]
    objects_count: Option<u64>,
    /// Stop the objects workload after this many minutes short of the count, "as far as
    /// time allows": MINUTES for every target, or TARGET=MINUTES,... (e.g. xfs=25).
    #[arg(long, value_name = "LIST")]
    objects_minutes: Option<String>,
    /// Objects in the live set of the churn workload.
    #[arg(long, value_name = "N")]
    churn_objects: Option<u64>,
    /// Seconds the churn workload overwrites and deletes after filling its live set.
    #[arg(long, value_name = "SECONDS")]
    churn_seconds: Option<u64>,
    /// Seed of the generated tree and of random choices: the same seed, the same work
    /// (default: the size preset's).
    #[arg(long)]
    seed: Option<u64>,
    /// Also run fs_mark and bonnie++ with matching parameters, where installed.
    #[arg(long)]
    external: bool,
    /// Where --make puts loop images, stores and mountpoints (must not be tmpfs).
    #[arg(long, default_value = "/var/tmp/shoal-bench")]
    scratch: PathBuf,
    /// Keep each sample's directory instead of removing it (for inspection).
    #[arg(long)]
    keep: bool,
    /// Run nothing: render the table, and --report DIR or --json FILE, again from the JSON
    /// of an earlier session (e.g. after the charts changed).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["targets", "make"])]
    from_json: Option<PathBuf>,
    /// Internal: run one sample sent as JSON on stdin (a shoal-run target's, preloaded).
    #[arg(long, hide = true)]
    worker: bool,
}

fn params(args: &BenchArgs, size: Size) -> Result<Params> {
    let mut params = Params::for_size(size);
    if let Some(list) = &args.objects_minutes {
        params.objects_minutes = TimeLimit::parse_list(list)?;
    }
    params.threads = args.threads.unwrap_or(params.threads);
    params.files_per_thread = args.files.unwrap_or(params.files_per_thread);
    params.file_size_bytes = args.file_size.unwrap_or(params.file_size_bytes);
    params.dirs_per_thread = args.dirs.unwrap_or(params.dirs_per_thread);
    params.tree_files = args.tree_files.unwrap_or(params.tree_files);
    params.objects_count = args.objects_count.unwrap_or(params.objects_count);
    params.seed = args.seed.unwrap_or(params.seed);
    params.churn_objects = args.churn_objects.unwrap_or(params.churn_objects);
    params.churn_seconds = args.churn_seconds.unwrap_or(params.churn_seconds);
    params.fsync = args.fsync;
    params.external = args.external;
    Ok(params)
}

fn workloads(names: &[String]) -> Result<Vec<Workload>> {
    if names.is_empty() {
        return Ok(Workload::ALL
            .into_iter()
            .filter(|workload| workload.in_default())
            .collect());
    }
    let mut list = Vec::new();
    for name in names {
        let workload = Workload::parse(name)?;
        if !list.contains(&workload) {
            list.push(workload);
        }
    }
    Ok(list)
}

fn make_kinds(list: Option<&str>) -> Result<Vec<MakeKind>> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    let mut kinds = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let kind = MakeKind::parse(name)?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(kinds)
}

/// Sparse loop images big enough for the preset (only written blocks take disk space).
fn image_bytes(size: Size) -> u64 {
    match size {
        Size::Small => 8 << 30,
        Size::Medium => 16 << 30,
        Size::Large => 64 << 30,
    }
}

/// The command line as typed, shell-quoted where needed, for the top of the report.
fn command_line() -> String {
    std::env::args()
        .map(|arg| {
            let plain = !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_./,:=+@%-".contains(c));
            if plain {
                arg
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn run(args: &BenchArgs) -> Result<ExitCode> {
    if args.worker {
        return Ok(ExitCode::from(worker::serve()));
    }
    if let Some(path) = &args.from_json {
        let report = report::read_json(path)?;
        return output(args, &report);
    }
    let size = Size::parse(&args.size)?;
    let params = params(args, size)?;
    params.validate()?;
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let workloads = workloads(&args.workloads)?;
    let kinds = make_kinds(args.make.as_deref())?;
    if args.targets.is_empty() && kinds.is_empty() {
        bail!("nothing to measure: give --target DIR (repeatable) and/or --make LIST");
    }
    let shoal_bin = std::env::current_exe().context("locating the shoal binary")?;
    let make_options = make_options(args, size, &kinds, &shoal_bin)?;
    target::check_make(&kinds, &make_options)?;
    let mut targets = Vec::new();
    for dir in &args.targets {
        targets.push(Target::existing(dir, Some(&shoal_bin))?);
    }
    interrupt::install();
    let progress = Progress::new(false);
    if !kinds.is_empty() {
        std::fs::create_dir_all(&args.scratch)
            .with_context(|| format!("creating {}", args.scratch.display()))?;
        if shoal_sys::statvfs::is_tmpfs(&args.scratch).unwrap_or(false) {
            bail!(
                "--scratch {} is tmpfs; give a directory on a disk",
                args.scratch.display()
            );
        }
        for &kind in &kinds {
            progress.log(&format!("making {}", kind.name()));
            // A failure here drops the targets made so far, which tears them down.
            targets.push(target::make(kind, &make_options)?);
            interrupt::check()?;
        }
    }
    let environment = env::collect(env!("CARGO_PKG_VERSION"));
    let plan = Plan {
        workloads: workloads.clone(),
        runs: args.runs,
        staging_parent: runner::staging_parent(&params, &std::env::temp_dir()),
        params,
        keep: args.keep,
        fresh: args.fresh.then(|| make_options.clone()),
    };
    let samples = runner::run(&plan, &mut targets, &progress)?;
    let labels: Vec<String> = targets.iter().map(|t| t.label.clone()).collect();
    let report = Report {
        command: command_line(),
        environment,
        params: plan.params.clone(),
        runs: args.runs,
        workloads: workloads.clone(),
        targets: targets.iter().map(Target::info).collect(),
        summary: report::summarize_samples(&workloads, &labels, &samples),
        samples,
    };
    // Tear down made filesystems before writing: the report needs nothing from them.
    drop(targets);
    output(args, &report)
}

/// How `--make` builds its filesystems: the binaries it mounts with, image sizes, scratch.
fn make_options(
    args: &BenchArgs,
    size: Size,
    kinds: &[MakeKind],
    shoal_bin: &Path,
) -> Result<MakeOptions> {
    let memfs_bin = match &args.memfs {
        Some(path) => path.clone(),
        None => shoal_bin.with_file_name("reference-memfs"),
    };
    let preload = if kinds.contains(&MakeKind::ShoalRun) {
        Some(run_cmd::library_path().context("--make shoal-run")?)
    } else {
        None
    };
    Ok(MakeOptions {
        scratch: args.scratch.clone(),
        image_bytes: image_bytes(size),
        shoal_bin: Some(shoal_bin.to_path_buf()),
        preload,
        memfs_bin: Some(memfs_bin),
        memfs_threads: args.memfs_threads.max(1),
    })
}

/// The table on the terminal, then the JSON and the report directory when asked for.
fn output(args: &BenchArgs, report: &Report) -> Result<ExitCode> {
    print!("{}", report::table(&report.summary));
    if let Some(path) = &args.json {
        report::write_json(report, path)?;
    }
    if let Some(dir) = &args.report {
        let page = report::write_report_dir(report, dir)?;
        eprintln!("shoal bench: report in {}", page.display());
    }
    let failures = report.samples.iter().filter(|s| s.error.is_some()).count();
    if failures > 0 {
        eprintln!("shoal bench: {failures} sample(s) failed; see the report");
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}
