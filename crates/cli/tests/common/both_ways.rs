//! Running one command through both doors of a mount: under `shoal run --stats` (the fast
//! path) and plainly (the kernel mount), and reading what `--stats` says went the fast way.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{run, CmdOutput, SHOAL};

/// A tool that hangs fails its test instead of hanging the suite.
const TOOL_TIMEOUT: Duration = Duration::from_secs(300);

/// `shoal run --stats -- ARGS` in `cwd`.
pub fn fast<S: AsRef<OsStr>>(cwd: &Path, args: &[S]) -> CmdOutput {
    run(
        Command::new(SHOAL)
            .args(["run", "--stats", "--"])
            .args(args)
            .current_dir(cwd),
        TOOL_TIMEOUT,
    )
}

/// The same command through the kernel mount.
pub fn kernel<S: AsRef<OsStr>>(cwd: &Path, args: &[S]) -> CmdOutput {
    run(
        Command::new(args[0].as_ref())
            .args(&args[1..])
            .current_dir(cwd),
        TOOL_TIMEOUT,
    )
}

/// `fast` or `kernel` by the door's name ("kernel" or anything else for the fast path).
pub fn through<S: AsRef<OsStr>>(door: &str, cwd: &Path, args: &[S]) -> CmdOutput {
    if door == "kernel" {
        kernel(cwd, args)
    } else {
        fast(cwd, args)
    }
}

/// `shoal run --stats`'s table: per call, (fast, fell back).
pub fn stats_of(out: &CmdOutput) -> BTreeMap<String, (u64, u64)> {
    let mut table = BTreeMap::new();
    let Some(start) = out.stderr.rfind("shoal run: ") else {
        return table;
    };
    for line in out.stderr[start..].lines().skip(2) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [name, fast, fell] = fields[..] {
            if let (Ok(fast), Ok(fell)) = (fast.parse(), fell.parse()) {
                table.insert(name.to_string(), (fast, fell));
            }
        }
    }
    table
}
