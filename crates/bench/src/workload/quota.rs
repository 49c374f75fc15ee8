//! Creates with quota limits enforced against without, in one sample: the fs_mark-shaped
//! creates of `create` (`--threads` x `--files` empty files), once with no limits and, on
//! shoal, once with limits set for the creating user (and `enforce_root` on, so root is
//! held to them too): every create then passes the limit check. The two halves alternate
//! their order with the run. Other filesystems run the first half only, for scale (this
//! kernel's XFS and ext4 have no quota support). shoal keeps its usage counters either
//! way: they are part of its format, not an option. The limits are removed afterwards.

use std::fs;
use std::path::Path;
use std::process::Command;

use super::create::{create_all, plan, total_files};
use super::rmtree::shoal_of;
use super::{count_tree, Better, Ctx, Outcome};
use crate::error::{IoContext, Result};
use crate::tools::run_silent;

/// Limits no create of a benchmark reaches: every create is checked, none refused.
const INODE_LIMIT: &str = "100000000";
const BYTE_LIMIT: &str = "1T";

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let mut outcome = Outcome::default();
    let Some((shoal, mountpoint)) = shoal_of(ctx.target) else {
        creates(ctx, "create, no limits", &mut outcome)?;
        return Ok(outcome);
    };
    let limited_first = ctx.run.is_multiple_of(2);
    if !limited_first {
        creates(ctx, "create, no limits", &mut outcome)?;
    }
    set_limits(shoal, mountpoint, true)?;
    let limited = creates(ctx, "create, limits enforced", &mut outcome);
    set_limits(shoal, mountpoint, false)?;
    limited?;
    if limited_first {
        creates(ctx, "create, no limits", &mut outcome)?;
    }
    let rate = |name: &str| {
        outcome
            .metrics
            .iter()
            .find(|metric| metric.name == format!("{name} rate"))
            .map(|metric| metric.value)
    };
    let (on, off) = (rate("create, limits enforced"), rate("create, no limits"));
    if let (Some(on), Some(off)) = (on, off) {
        outcome.metric("limits enforced / none", "ratio", Better::Higher, on / off);
    }
    Ok(outcome)
}

/// One timed set of creates in a directory of its own.
fn creates(ctx: &Ctx, name: &str, outcome: &mut Outcome) -> Result<()> {
    let root = ctx.dir.join(name.replace([',', ' '], "_"));
    fs::create_dir(&root).context(|| format!("mkdir {}", root.display()))?;
    let plan = plan(&root, ctx.params)?;
    let ((), timed) = ctx.timed(|| create_all(ctx, &plan))?;
    outcome.rate_and_cpu(name, "file", total_files(&plan), &timed);
    // Counted by readdir: every thread's directory holds its files.
    let found = count_tree(&root)? - plan.len() as u64;
    outcome.count(&format!("files {name}"), found);
    Ok(())
}

/// Limits for the calling user, with root held to them, or none again.
fn set_limits(shoal: &Path, mountpoint: &Path, on: bool) -> Result<()> {
    let uid = shoal_sys::identity::effective_uid().to_string();
    let (inodes, bytes, enforce_root) = if on {
        (INODE_LIMIT, BYTE_LIMIT, "on")
    } else {
        ("0", "0", "off")
    };
    run_silent(
        Command::new(shoal)
            .args(["quota", "config", "--enforce-root", enforce_root])
            .arg(mountpoint),
    )?;
    run_silent(
        Command::new(shoal)
            .args([
                "quota", "set", "-u", &uid, "--ihard", inodes, "--bhard", bytes,
            ])
            .arg(mountpoint),
    )
}
