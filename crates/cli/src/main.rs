//! The `shoal` command: format, mount, unmount and check filesystems.

mod bench_cmd;
mod control;
mod du_cmd;
mod fsck_cmd;
mod gen_tree_cmd;
mod metrics_http;
mod mkfs_cmd;
mod mount_cmd;
mod mount_options;
mod mounts;
mod owner_names;
mod quota_cmd;
mod quota_protocol;
mod rmtree_cmd;
mod stats_cmd;
mod stats_report;
mod umount_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// jemalloc, not glibc malloc: see shoal_fuse's `heap` module for why.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`: free pages go back to the system about a second
/// after they were freed, so the resident set follows the memory in use. The mount daemon
/// has that done by background threads (`shoal_fuse::release_heap_in_background`), started
/// once it has forked: a fork would leave them behind.
#[export_name = "_rjem_malloc_conf"]
static ALLOCATOR_OPTIONS: AllocatorOptions =
    AllocatorOptions(c"dirty_decay_ms:1000,muzzy_decay_ms:0".as_ptr());

/// A C string pointer, as jemalloc declares `malloc_conf`.
#[repr(transparent)]
struct AllocatorOptions(*const std::ffi::c_char);

// SAFETY: it points to a static string that is never written.
unsafe impl Sync for AllocatorOptions {}

#[derive(Parser)]
#[command(
    name = "shoal",
    version,
    about = "A filesystem for many small files, on an LSM key-value store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a new, empty filesystem store in STORE_DIR.
    Mkfs {
        store_dir: PathBuf,
        /// Format even if the directory is not empty or already holds a store.
        #[arg(long)]
        force: bool,
    },
    /// Mount a store (`shoal mount STORE_DIR MOUNTPOINT`) or a RAM filesystem
    /// (`shoal mount --memory MOUNTPOINT`).
    Mount {
        /// STORE_DIR MOUNTPOINT, or only MOUNTPOINT with --memory.
        #[arg(required = true, num_args = 1..=2, value_names = ["STORE_DIR", "MOUNTPOINT"])]
        paths: Vec<PathBuf>,
        /// Keep the filesystem in RAM only (nothing is stored).
        #[arg(long)]
        memory: bool,
        /// Comma-separated options: commit=SECONDS, ro, rw, allow_other, threads=N,
        /// cache=MIB, memtable=MIB, compaction_threads=N, journal=MIB, checkpoint=MIB,
        /// memory=MIB, metrics=IP:PORT, writeback=on|off, uring=on|off (see the README).
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
        /// Serve in the foreground instead of detaching a daemon.
        #[arg(long)]
        foreground: bool,
    },
    /// Make everything durable, unmount, and wait for the daemon to finish.
    Umount { mountpoint: PathBuf },
    /// Check every invariant of an unmounted store; with --counters, only the usage
    /// counters, fast and in parallel, also on a live mount (against a snapshot).
    Fsck {
        /// A store directory (unmounted), or with --counters also a mountpoint.
        target: PathBuf,
        /// Verify only the usage counters against a parallel scan of a snapshot.
        #[arg(long)]
        counters: bool,
        /// Scan threads for --counters (default: one per core).
        #[arg(long, value_name = "N")]
        threads: Option<usize>,
    },
    /// Usage and limits per user, group and project (xfs_quota / repquota style). TARGET is
    /// a mountpoint (the daemon answers) or an unmounted store directory.
    #[command(subcommand)]
    Quota(QuotaCommand),
    /// Show a live mount's statistics: request rates and latencies, commits, log bytes,
    /// flushes, compactions, cache, memory. Refreshes every second until interrupted.
    Stats {
        mountpoint: PathBuf,
        /// Print one snapshot as JSON and exit.
        #[arg(long)]
        json: bool,
        /// Seconds between screens.
        #[arg(long, default_value_t = 1.0, value_parser = parse_interval)]
        interval: f64,
        /// Stop after this many screens.
        #[arg(long)]
        count: Option<u64>,
        /// Also read malloc's heap (in use, free): the daemon walks the heap holding
        /// malloc's locks, tens of milliseconds on a big fragmented heap, while every
        /// allocation waits.
        #[arg(long)]
        heap: bool,
    },
    /// Run metadata workloads (fs_mark-style create/stat/unlink, rm -rf, tar/cp/find of a
    /// source tree, Swift objects, bonnie++ file tests, quotacheck) on any directories,
    /// side by side, with a table, JSON, Markdown and SVG charts.
    Bench(Box<bench_cmd::BenchArgs>),
    /// Recursive usage of directories (names, regular files, bytes, newest change), exact
    /// and instant: on a mount, PATH is a directory in it; else a store directory (unmounted)
    /// with --path naming a directory inside it.
    Du {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// With a store directory: the directory inside the store (default /).
        #[arg(long = "path", value_name = "PATH_IN_STORE")]
        inside: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Remove a directory tree at once: its name and usage go in one batch, its contents
    /// are deleted in the background (`shoal stats` shows what is left). PATH is in a mount
    /// (root or the daemon's user only), or a store directory (unmounted) with --path.
    Rmtree {
        path: PathBuf,
        /// With a store directory: the tree inside the store.
        #[arg(long = "path", value_name = "PATH_IN_STORE")]
        inside: Option<String>,
        /// Wait until the tree is deleted (progress on a terminal).
        #[arg(long)]
        wait: bool,
    },
    /// Generate a deterministic, source-like tree (for demos, tests and benchmarks).
    GenTree {
        dir: PathBuf,
        /// Regular files to create (hard links, symlinks and directories come on top).
        #[arg(long, default_value_t = 20_000)]
        files: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

#[derive(Subcommand)]
enum QuotaCommand {
    /// Usage, limits and grace of every id with usage or limits (default: users).
    Report {
        #[arg(short = 'u', long = "user")]
        user: bool,
        #[arg(short = 'g', long = "group")]
        group: bool,
        #[arg(short = 'p', long = "project")]
        project: bool,
        #[arg(long)]
        json: bool,
        target: PathBuf,
    },
    /// Set limits of one user, group or project; 0 removes a limit. Sizes take k/m/g/t
    /// (binary) suffixes.
    Set {
        #[arg(short = 'u', long = "user", value_name = "USER", group = "owner")]
        user: Option<String>,
        #[arg(short = 'g', long = "group", value_name = "GROUP", group = "owner")]
        group: Option<String>,
        #[arg(short = 'p', long = "project", value_name = "PROJECT", group = "owner")]
        project: Option<String>,
        #[arg(long, value_name = "SIZE", value_parser = quota_cmd::parse_bytes)]
        bsoft: Option<u64>,
        #[arg(long, value_name = "SIZE", value_parser = quota_cmd::parse_bytes)]
        bhard: Option<u64>,
        #[arg(long, value_name = "N", value_parser = quota_cmd::parse_count)]
        isoft: Option<u64>,
        #[arg(long, value_name = "N", value_parser = quota_cmd::parse_count)]
        ihard: Option<u64>,
        #[arg(long)]
        json: bool,
        target: PathBuf,
    },
    /// Show or change grace periods (default 7d) and whether id 0 is limited (default off).
    Config {
        #[arg(long, value_name = "DURATION", value_parser = quota_cmd::parse_duration)]
        bytes_grace: Option<u64>,
        #[arg(long, value_name = "DURATION", value_parser = quota_cmd::parse_duration)]
        inodes_grace: Option<u64>,
        #[arg(long, value_name = "on|off", value_parser = quota_cmd::parse_on_off)]
        enforce_root: Option<bool>,
        #[arg(long)]
        json: bool,
        target: PathBuf,
    },
    /// Tag a directory tree in a mount with a project (children inherit it), or clear it.
    #[command(subcommand)]
    Project(ProjectCommand),
}

#[derive(Subcommand)]
enum ProjectCommand {
    /// Tag DIR and everything below it with project ID (a number or a name from /etc/projid).
    Set { dir: PathBuf, project: String },
    /// Move DIR and everything below it back to project 0.
    Clear { dir: PathBuf },
}

fn run_quota(command: QuotaCommand) -> anyhow::Result<ExitCode> {
    use quota_protocol::{LimitsChange, QuotaKindArg, SettingsChange};
    match command {
        QuotaCommand::Report {
            user,
            group,
            project,
            json,
            target,
        } => {
            let kinds = [
                (user, QuotaKindArg::User),
                (group, QuotaKindArg::Group),
                (project, QuotaKindArg::Project),
            ]
            .into_iter()
            .filter_map(|(wanted, kind)| wanted.then_some(kind))
            .collect();
            quota_cmd::report(&quota_cmd::ReportArgs {
                kinds,
                json,
                target,
            })
        }
        QuotaCommand::Set {
            user,
            group,
            project,
            bsoft,
            bhard,
            isoft,
            ihard,
            json,
            target,
        } => {
            let (kind, name) = match (user, group, project) {
                (Some(name), None, None) => (QuotaKindArg::User, name),
                (None, Some(name), None) => (QuotaKindArg::Group, name),
                (None, None, Some(name)) => (QuotaKindArg::Project, name),
                _ => anyhow::bail!("say whose limits: one of -u USER, -g GROUP, -p PROJECT"),
            };
            let change = LimitsChange {
                bytes_soft: bsoft,
                bytes_hard: bhard,
                inodes_soft: isoft,
                inodes_hard: ihard,
            };
            quota_cmd::set(&quota_cmd::SetArgs {
                kind,
                name,
                change,
                json,
                target,
            })
        }
        QuotaCommand::Config {
            bytes_grace,
            inodes_grace,
            enforce_root,
            json,
            target,
        } => {
            let change = SettingsChange {
                bytes_grace_secs: bytes_grace,
                inodes_grace_secs: inodes_grace,
                enforce_root,
            };
            quota_cmd::config(change, json, &target)
        }
        QuotaCommand::Project(ProjectCommand::Set { dir, project }) => {
            quota_cmd::project(&dir, Some(&project))
        }
        QuotaCommand::Project(ProjectCommand::Clear { dir }) => quota_cmd::project(&dir, None),
    }
}

fn parse_interval(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if (0.1..=3600.0).contains(&seconds) => Ok(seconds),
        _ => Err(format!("{text}: give seconds between 0.1 and 3600")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Mkfs { store_dir, force } => mkfs_cmd::run(&store_dir, force),
        Command::Mount {
            paths,
            memory,
            options,
            foreground,
        } => mount_cmd::run(&paths, memory, &options, foreground),
        Command::Umount { mountpoint } => umount_cmd::run(&mountpoint),
        Command::Fsck {
            target,
            counters,
            threads,
        } => {
            if counters {
                fsck_cmd::run_counters(&target, threads)
            } else {
                fsck_cmd::run(&target)
            }
        }
        Command::Quota(command) => run_quota(command),
        Command::Stats {
            mountpoint,
            json,
            interval,
            count,
            heap,
        } => stats_cmd::run(
            &mountpoint,
            &stats_cmd::StatsArgs {
                json,
                interval: std::time::Duration::from_secs_f64(interval),
                count,
                heap,
            },
        ),
        Command::Du {
            paths,
            inside,
            json,
        } => du_cmd::run(&du_cmd::DuArgs {
            paths,
            inside,
            json,
        }),
        Command::Rmtree { path, inside, wait } => {
            rmtree_cmd::run(&rmtree_cmd::RmtreeArgs { path, inside, wait })
        }
        Command::GenTree { dir, files, seed } => gen_tree_cmd::run(&dir, files, seed),
        Command::Bench(args) => bench_cmd::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("shoal: {error:#}");
            ExitCode::from(1)
        }
    }
}
