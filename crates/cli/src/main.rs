//! The `shoal` command: format, mount, unmount and check filesystems.

mod bench_cmd;
mod fsck_cmd;
mod gen_tree_cmd;
mod mkfs_cmd;
mod mount_cmd;
mod mount_options;
mod mounts;
mod umount_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
        /// Comma-separated options: commit=SECONDS, ro, allow_other, threads=N,
        /// cache=MIB, memtable=MIB.
        #[arg(short = 'o', value_name = "OPTIONS")]
        options: Vec<String>,
        /// Serve in the foreground instead of detaching a daemon.
        #[arg(long)]
        foreground: bool,
    },
    /// Make everything durable, unmount, and wait for the daemon to finish.
    Umount { mountpoint: PathBuf },
    /// Check every invariant of an unmounted store.
    Fsck { store_dir: PathBuf },
    /// Run metadata workloads (fs_mark-style create/stat/unlink, rm -rf, tar/cp/find of a
    /// source tree, Swift objects, bonnie++ file tests, quotacheck) on any directories,
    /// side by side, with a table, JSON, Markdown and SVG charts.
    Bench(Box<bench_cmd::BenchArgs>),
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
        Command::Fsck { store_dir } => fsck_cmd::run(&store_dir),
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
