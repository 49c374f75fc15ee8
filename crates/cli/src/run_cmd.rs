//! `shoal run [-m MNT] [--stats] -- CMD ARGS...`: runs CMD (and what it starts) with the
//! fast path library preloaded, so its file calls on shoal mounts go to the daemon without
//! the kernel's FUSE round trip. The library is found next to this binary (the build tree)
//! or in `../lib/shoal/` (an install); `SHOAL_PRELOAD` names another.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};

use crate::mounts;

/// The library's file name, as cargo builds it and scripts/install installs it.
pub const LIBRARY_NAME: &str = "libshoal_preload.so";

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Serve only this mount on the fast path (default: every shoal mount).
    #[arg(short = 'm', long = "mount", value_name = "MOUNTPOINT")]
    pub mount: Option<PathBuf>,
    /// When CMD ends, print per call how many the daemon served (its errors included) and
    /// how many it left to the kernel (all of CMD's processes together).
    #[arg(long)]
    pub stats: bool,
    /// The command and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

pub fn run(args: &RunArgs) -> Result<ExitCode> {
    let library = library_path()?;
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    command.env("LD_PRELOAD", preload_value(&library));
    if let Some(mount) = &args.mount {
        command.env("SHOAL_RUN_MOUNT", mounts::shoal_mount_at(mount)?);
    }
    if !args.stats {
        let error = command.exec();
        bail!("cannot run {}: {error}", args.command[0].to_string_lossy());
    }
    let report = tempfile_path();
    command.env("SHOAL_RUN_STATS", &report);
    let status = command
        .status()
        .with_context(|| format!("cannot run {}", args.command[0].to_string_lossy()))?;
    let text = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    eprint!("{}", render_report(&text));
    Ok(exit_code(status))
}

/// LD_PRELOAD with the library first, keeping what the caller preloads.
fn preload_value(library: &Path) -> OsString {
    let mut value = library.as_os_str().to_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        value.push(":");
        value.push(existing);
    }
    value
}

/// Where the library is: `SHOAL_PRELOAD`, beside this binary, or `../lib/shoal/`.
pub fn library_path() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("SHOAL_PRELOAD") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().context("cannot find the shoal binary's path")?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [
        dir.join(LIBRARY_NAME),
        dir.join("../lib/shoal").join(LIBRARY_NAME),
    ];
    candidates
        .iter()
        .find(|path| path.is_file())
        .cloned()
        .with_context(|| {
            format!(
                "the fast path library {LIBRARY_NAME} is not beside {} nor in ../lib/shoal \
                 (build it with `cargo build --release -p shoal-preload`, or set SHOAL_PRELOAD)",
                exe.display()
            )
        })
}

fn tempfile_path() -> PathBuf {
    std::env::temp_dir().join(format!("shoal-run-stats-{}", std::process::id()))
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code as u8),
        (None, Some(signal)) => ExitCode::from(128 + signal as u8),
        _ => ExitCode::from(1),
    }
}

/// The counters each process adds after its calls, and how the report names them.
const COUNTED: [(&str, &str); 7] = [
    (
        "listed=",
        "stats answered from directory listings (no round trip)",
    ),
    (
        "ahead=",
        "directories opened from those opened ahead (no round trip)",
    ),
    (
        "dirs=",
        "directories opened from their listings kept (no round trip)",
    ),
    (
        "whole=",
        "reads answered from files sent with their open (no round trip)",
    ),
    (
        "other=",
        "readlinks and xattr reads by path answered from directory listings (no round trip)",
    ),
    ("lost=", "descriptors that could not become kernel ones"),
    (
        "busy=",
        "listing lookups and keeps given up while another thread held the listings",
    ),
];

/// Sums the processes' lines (`pid nr:fast:fellback ... lost=N listed=N ahead=N
/// whole=N other=N busy=N dirs=N`) into one table.
fn render_report(text: &str) -> String {
    let mut totals: BTreeMap<i64, [u64; 2]> = BTreeMap::new();
    let mut processes = 0;
    let mut counted = [0u64; COUNTED.len()];
    for line in text.lines() {
        processes += 1;
        'field: for field in line.split_whitespace().skip(1) {
            for (total, (prefix, _)) in counted.iter_mut().zip(COUNTED) {
                if let Some(n) = field.strip_prefix(prefix) {
                    *total += n.parse::<u64>().unwrap_or(0);
                    continue 'field;
                }
            }
            let parts: Vec<u64> = field.split(':').filter_map(|p| p.parse().ok()).collect();
            if let [nr, fast, fell] = parts[..] {
                let entry = totals.entry(nr as i64).or_default();
                entry[0] += fast;
                entry[1] += fell;
            }
        }
    }
    let mut out = format!(
        "shoal run: {processes} processes\n{:<16} {:>10} {:>12}\n",
        "call", "fast", "fell back"
    );
    for (nr, [fast, fell]) in totals {
        out.push_str(&format!("{:<16} {fast:>10} {fell:>12}\n", syscall_name(nr)));
    }
    for (total, (_, label)) in counted.iter().zip(COUNTED) {
        if *total > 0 {
            out.push_str(&format!("{label}: {total}\n"));
        }
    }
    out
}

fn syscall_name(nr: i64) -> String {
    shoal_fastpath::syscall_names::syscall_name(nr)
        .map_or_else(|| format!("nr {nr}"), str::to_string)
}
