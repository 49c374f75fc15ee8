//! The `shoal` command: format, mount, unmount and check filesystems.

mod backup_cmd;
mod bench_cmd;
mod compact_cmd;
mod control;
mod decompress;
mod docs_cmd;
mod du_cmd;
mod exit_report;
mod fsck_cmd;
mod fuse_access;
mod gen_tree_cmd;
mod import_cmd;
mod info_cmd;
mod log_file;
mod man_sections;
mod metrics_http;
mod mkfs_cmd;
mod mount_cmd;
mod mount_helper;
mod mount_options;
mod mounts;
mod offline_store;
mod owner_names;
mod progress_bar;
mod quota_cli;
mod quota_cmd;
mod quota_protocol;
mod rmtree_cmd;
mod run_cmd;
mod stats_cmd;
mod stats_report;
mod tar_export;
mod tar_import;
mod umount_cmd;
mod units;
mod version;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// jemalloc: see shoal_fuse's `heap` module for what the daemon relies on it for.
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
    version = version::VERSION,
    about = "A filesystem for many small files, on an LSM key-value store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The daemon's log, under `shoal mount --help` and in shoal-mount(8).
const MOUNT_ENVIRONMENT: &str = "Environment:\n  SHOAL_LOG  what the daemon logs: a level (error, warn, info [default], debug, trace) or \
tracing directives (info,shoal_fuse=debug). The log is STORE_DIR/shoal.log (stderr with \
--foreground), rotated at 16 MiB into shoal.log.1 .. shoal.log.3.\n\nAlso: mount -t fuse.shoal \
STORE_DIR MOUNTPOINT -o OPTIONS and /etc/fstab lines of type fuse.shoal (man shoal-mount has examples).";

#[derive(Subcommand)]
enum Command {
    /// Create a new, empty filesystem store in STORE_DIR.
    Mkfs {
        /// The directory to hold the store (created if missing; must be empty).
        store_dir: PathBuf,
        /// Re-format an existing shoal store (its files are lost); never anything else.
        #[arg(long)]
        force: bool,
        /// A name for the filesystem, shown by `shoal info` (at most 255 bytes).
        #[arg(short = 'L', long)]
        label: Option<String>,
        /// Delete every entry of a non-empty directory that is not a shoal store, then
        /// format it; the deleted names are printed.
        #[arg(long)]
        wipe: bool,
        /// Keep file data lz4-compressed: a source tree takes about a third less space, at
        /// the CPU of compressing every flush and decompressing every cold read. Fixed for
        /// the store's life; metadata is compressed either way.
        #[arg(long)]
        compress: bool,
    },
    /// Mount a store (`shoal mount STORE_DIR MOUNTPOINT`) or a RAM filesystem
    /// (`shoal mount --memory MOUNTPOINT`).
    #[command(after_help = MOUNT_ENVIRONMENT)]
    Mount {
        /// STORE_DIR MOUNTPOINT, or only MOUNTPOINT with --memory.
        #[arg(required = true, num_args = 1..=2, value_names = ["STORE_DIR", "MOUNTPOINT"])]
        paths: Vec<PathBuf>,
        /// Keep the filesystem in RAM only (nothing is stored).
        #[arg(long)]
        memory: bool,
        // The help is written from the defaults (`mount_options::help`).
        // Completions offer each option (`mount_options::OptionWords`).
        #[arg(
            short = 'o',
            value_name = "OPTIONS",
            help = mount_options::help(),
            value_parser = mount_options::OptionWords,
            hide_possible_values = true
        )]
        options: Vec<String>,
        /// Serve in the foreground instead of detaching a daemon.
        #[arg(long)]
        foreground: bool,
    },
    /// Make everything durable, unmount, and wait for the daemon to finish.
    Umount {
        /// The mountpoint of a shoal mount.
        mountpoint: PathBuf,
    },
    /// Check every invariant of an unmounted store, changing nothing (read-only and full
    /// devices too); with --counters, only the usage counters, fast and in parallel, also
    /// on a live mount (against a snapshot).
    Fsck {
        /// A store directory (unmounted), or with --counters also a mountpoint.
        target: PathBuf,
        /// Verify only the usage counters against a parallel scan of a snapshot.
        #[arg(long)]
        counters: bool,
        /// Scan threads for --counters (default: one per core).
        #[arg(long, value_name = "N")]
        threads: Option<usize>,
        /// Repair a damaged store in place: keep what is readable, drop the rest (a
        /// journal from its first damaged batch on), and say what was dropped.
        #[arg(long, conflicts_with = "counters")]
        repair: bool,
    },
    /// What a filesystem is and holds: format version, UUID, label, creation time,
    /// inodes, bytes, store size. TARGET is a mountpoint or an unmounted store directory.
    Info(info_cmd::InfoArgs),
    /// Copy a whole filesystem into one file: a live mount from a consistent snapshot
    /// while writes go on, or an unmounted store.
    Backup(backup_cmd::BackupArgs),
    /// Create a new store from a backup file (checked whole before anything is written).
    Restore(backup_cmd::RestoreArgs),
    /// Usage and limits per user, group and project (xfs_quota / repquota style). TARGET is
    /// a mountpoint (the daemon answers) or an unmounted store directory.
    #[command(subcommand)]
    Quota(quota_cli::QuotaCommand),
    /// Show a live mount's statistics: request rates and latencies, commits, log bytes,
    /// flushes, compactions, cache, memory. Refreshes every second until interrupted.
    Stats {
        /// The mountpoint of a live shoal mount.
        mountpoint: PathBuf,
        /// Print one snapshot as JSON and exit; with --interval or --count, one snapshot
        /// per line every interval until interrupted (or the mount goes away).
        #[arg(long)]
        json: bool,
        /// Seconds between screens (0.1 to 3600; fractions allowed; default 1).
        #[arg(long, value_parser = parse_interval)]
        interval: Option<f64>,
        /// Stop after this many screens or JSON lines (default: run until interrupted).
        #[arg(long)]
        count: Option<u64>,
        /// Also show the daemon's heap (jemalloc's bytes in use, and resident but free),
        /// read from the allocator's counters.
        #[arg(long)]
        heap: bool,
    },
    /// Run metadata workloads (fs_mark-style create/stat/unlink, rm -rf, tar/cp/find of a
    /// source tree, Swift objects, bonnie++ file tests, quotacheck) on any directories,
    /// side by side, with a table, JSON, Markdown and SVG charts.
    Bench(Box<bench_cmd::BenchArgs>),
    /// Settle an unmounted store: write out its memtables, merge every table, print its
    /// size before and after as JSON (`shoal bench store-bytes`; offline maintenance).
    #[command(hide = true)]
    Compact {
        /// An unmounted store directory.
        store_dir: PathBuf,
    },
    /// Write the man pages (shoal.8 and one per subcommand) into a directory.
    #[command(hide = true)]
    Man(docs_cmd::ManArgs),
    /// Print a shell completion script.
    #[command(hide = true)]
    Completions(docs_cmd::CompletionsArgs),
    /// Recursive usage of directories (names, regular files, bytes, newest change), exact
    /// and instant: on a mount, PATH is a directory in it; else a store directory (unmounted)
    /// with --path naming a directory inside it.
    Du {
        /// Directories on a mount, or one unmounted store directory.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// With a store directory: the directory inside the store (default /).
        #[arg(long = "path", value_name = "PATH_IN_STORE")]
        inside: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove a directory tree at once: its name and usage go in one batch, its contents
    /// are deleted in the background (`shoal stats` shows what is left). PATH is in a mount
    /// (root or the daemon's user only), or a store directory (unmounted) with --path.
    Rmtree {
        /// A directory on a mount, or an unmounted store directory (with --path).
        path: PathBuf,
        /// With a store directory: the tree inside the store.
        #[arg(long = "path", value_name = "PATH_IN_STORE")]
        inside: Option<String>,
        /// Wait until the tree is deleted (progress on a terminal).
        #[arg(long)]
        wait: bool,
    },
    /// Create the directory DIR from a tar archive (ustar, pax or GNU, as GNU tar writes
    /// them; plain or compressed with gzip, zstd or xz, told by its first bytes), applied inside the engine in large batches; DIR appears only once the whole
    /// archive is in. DIR is on a mount (root or the daemon's user only), or a store
    /// directory (unmounted) with --path.
    Import {
        /// The directory to create: on a mount, or an unmounted store directory (with --path).
        dir: PathBuf,
        /// The archive (default: standard input).
        #[arg(long, value_name = "FILE|-")]
        from: Option<PathBuf>,
        /// With a store directory: the directory to create inside the store.
        #[arg(long = "path", value_name = "PATH_IN_STORE")]
        inside: Option<String>,
    },
    /// Write the tree at DIR as a tar archive (GNU headers, pax records for xattrs and
    /// nanosecond times), read inside the engine. DIR is on a mount (root or the daemon's
    /// user only), or a store directory (unmounted) with --path.
    Export {
        /// The directory to archive: on a mount, or an unmounted store directory (with --path).
        dir: PathBuf,
        /// Where the archive goes (default: standard output).
        #[arg(long, value_name = "FILE|-")]
        to: Option<PathBuf>,
        /// With a store directory: the directory inside the store.
        #[arg(long = "path", value_name = "PATH_IN_STORE")]
        inside: Option<String>,
    },
    /// Run CMD (and every process it starts) on the fast path: file calls on shoal mounts go
    /// to the daemon without the kernel's FUSE round trip; everything else, and what the
    /// fast path cannot serve exactly as the kernel would, goes through the kernel.
    /// SHOAL_RUN=off in CMD's environment turns it off.
    #[command(after_help = RUN_ENVIRONMENT)]
    Run(run_cmd::RunArgs),
    /// Generate a deterministic, source-like tree (for demos, tests and benchmarks).
    GenTree {
        /// Where to create the tree (created if missing).
        dir: PathBuf,
        /// Regular files to create (hard links, symlinks and directories come on top).
        #[arg(long, default_value_t = 20_000)]
        files: usize,
        /// Seed of the generator: the same seed gives the same tree.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

/// `shoal run --help` and its man page: the library and its switches.
const RUN_ENVIRONMENT: &str = "\
The fast path is a preloaded library, libshoal_preload.so: beside the shoal binary in a build
tree, in PREFIX/lib/shoal/ when installed (scripts/install), or where SHOAL_PRELOAD names it.
Any program can use it without shoal run:
  LD_PRELOAD=/usr/local/lib/shoal/libshoal_preload.so tar xf src.tar -C /mnt/data
Environment of CMD: SHOAL_RUN=off (every call to the kernel), SHOAL_RUN_MOUNT=PATH (serve only
that mount), SHOAL_RUN_STATS=FILE (each process appends its counts at exit).
Static programs, set-id programs and raw system calls (Go, io_uring) use the kernel mount.
Calls the library cannot serve exactly as the kernel would go to the kernel mount too; both
doors show one filesystem (changes on either are seen at once by the other, except bytes
still in the kernel's writeback cache, which follow at close or fsync).";

fn parse_interval(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if (0.1..=3600.0).contains(&seconds) => Ok(seconds),
        _ => Err(format!("{text}: give seconds between 0.1 and 3600")),
    }
}

fn main() -> ExitCode {
    if mount_helper::invoked_as_helper() {
        return mount_helper::main();
    }
    match run(Cli::parse().command) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("shoal: {error:#}");
            ExitCode::from(1)
        }
    }
}

/// One arm per subcommand: each hands its arguments to its module.
fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Mkfs {
            store_dir,
            force,
            label,
            wipe,
            compress,
        } => mkfs_cmd::run(&store_dir, (force, wipe), label, compress),
        Command::Mount {
            paths,
            memory,
            options,
            foreground,
        } => mount_cmd::run(&paths, memory, &options, foreground),
        Command::Umount { mountpoint } => umount_cmd::run(&mountpoint),
        Command::Fsck {
            target,
            counters: true,
            threads,
            ..
        } => fsck_cmd::run_counters(&target, threads),
        Command::Fsck { target, repair, .. } => fsck_cmd::run(&target, repair),
        Command::Quota(command) => quota_cli::run(command),
        Command::Info(args) => info_cmd::run(&args),
        Command::Backup(args) => backup_cmd::run_backup(&args),
        Command::Restore(args) => backup_cmd::run_restore(&args),
        Command::Man(args) => docs_cmd::man(Cli::command(), &args),
        Command::Completions(args) => docs_cmd::completions(Cli::command(), &args),
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
                stream: interval.is_some() || count.is_some(),
                interval: std::time::Duration::from_secs_f64(interval.unwrap_or(1.0)),
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
        Command::Import { dir, from, inside } => {
            import_cmd::run_import(&import_cmd::ImportArgs { dir, from, inside })
        }
        Command::Export { dir, to, inside } => {
            import_cmd::run_export(&import_cmd::ExportArgs { dir, to, inside })
        }
        Command::GenTree { dir, files, seed } => gen_tree_cmd::run(&dir, files, seed),
        Command::Run(args) => run_cmd::run(&args),
        Command::Bench(args) => bench_cmd::run(&args),
        Command::Compact { store_dir } => compact_cmd::run(&store_dir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `shoal mount --help` and docs/cli.md state each option's default: they must be the
    /// defaults mount_options has.
    #[test]
    fn mount_help_and_docs_state_the_defaults() {
        let defaults = mount_options::MountOptions::default();
        let command = Cli::command();
        let help = command
            .find_subcommand("mount")
            .and_then(|mount| mount.get_arguments().find(|arg| arg.get_id() == "options"))
            .and_then(|arg| arg.get_help())
            .map(|help| help.to_string().replace('\n', " "))
            .expect("the -o help");
        let docs = include_str!("../../../docs/cli.md");
        let sizes = [
            ("cache", defaults.cache_bytes),
            ("memtable", defaults.memtable_bytes),
            ("journal", defaults.journal_bytes),
            ("checkpoint", defaults.checkpoint_bytes),
            ("memory", defaults.memory_bytes),
        ];
        for (name, bytes) in sizes {
            let size = units::human_bytes(bytes);
            assert!(
                help.contains(&format!("{name}=SIZE [{size}]")),
                "{name} in {help}"
            );
            assert!(
                docs.contains(&format!("| `{name}=SIZE` | {size} |")),
                "{name} in docs"
            );
        }
        let commit = format!("{}s", defaults.commit.as_secs());
        assert!(help.contains(&format!("commit=DURATION [{commit}]")));
        assert!(docs.contains(&format!("| `commit=DURATION` | {commit} |")));
        for (name, count) in [
            ("threads", defaults.threads),
            ("compaction_threads", defaults.compaction_threads),
        ] {
            assert!(help.contains(&format!("{name}=N [{count}]")), "{name}");
            assert!(
                docs.contains(&format!("| `{name}=N` | {count} |")),
                "{name}"
            );
        }
        let spin = shoal_fuse::SPIN_WINDOW.as_micros();
        assert!(help.contains(&format!(
            "spin=MICROSECONDS [{spin} where idle CPUs wake slowly"
        )));
        assert!(docs.contains(&format!(
            "| `spin=MICROSECONDS` | {spin} where idle CPUs wake slowly"
        )));
        // The pages that explain a default quote it too.
        let tuning = include_str!("../../../docs/tuning.md").replace('\n', " ");
        let memtable = defaults.memtable_bytes >> 20;
        assert!(tuning.contains(&format!("The default, {memtable}, ")));
        let durability = include_str!("../../../docs/durability.md").replace('\n', " ");
        let checkpoint = defaults.checkpoint_bytes >> 20;
        assert!(durability.contains(&format!("when {checkpoint} MiB are staged (`checkpoint=`)")));
    }

    /// The help text repeats the rotation figures: it must say what log_file does.
    #[test]
    fn mount_help_states_the_log_rotation() {
        let size = format!("rotated at {} MiB", log_file::LOG_ROTATE_BYTES >> 20);
        let kept = format!("shoal.log.{}", log_file::LOG_KEPT_FILES);
        assert!(MOUNT_ENVIRONMENT.contains(&size) && MOUNT_ENVIRONMENT.contains(&kept));
    }

    /// Every argument of every command says what it is (`--help`, the man pages).
    #[test]
    fn every_argument_has_help() {
        fn missing(command: &clap::Command, path: &str, out: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    out.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                missing(sub, &format!("{path} {}", sub.get_name()), out);
            }
        }
        let mut out = Vec::new();
        missing(&Cli::command(), "shoal", &mut out);
        assert!(out.is_empty(), "arguments without help: {out:?}");
    }
}
