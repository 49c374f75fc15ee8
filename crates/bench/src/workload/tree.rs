//! A generated source-like tree through the everyday tools: `tar x`, `tar c` (cold),
//! `cp -a`, `find`, `find -ls` (cold and warm), `du -s`, `rm -rf`. On shoal also the same
//! archive applied inside the engine (`shoal import`, durable when it returns, so it
//! compares with `tar x + sync`) and the tree read back inside it (`shoal export`, compared
//! with `tar c cold`). Cold means sync + drop_caches first (root only; a FUSE daemon's own
//! caches stay, the kernel's go). The import runs last, after `rm -rf`, and the bench then
//! waits (untimed, at most `SETTLE_LIMIT`) until the daemon is idle: the store's work on
//! what the import wrote and on its removal (flushes, then reclaim of the stale blob files
//! as later writes trigger compactions) would otherwise land in rows every target shares.
//! Run before `cp -a` it made shoal's copy take 7.3-8.9 s (medians 8.00 and 7.55 s in two
//! sessions of 3, the second with a wait for an idle daemon before the copy); run last,
//! 5.3-6.0 s (median 5.51 s).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::rmtree::shoal_of;
use super::{count_tree, Better, Ctx, Outcome, Timed};
use crate::cpu::wait_until_daemons_idle;
use crate::error::{BenchError, Result};

/// Longest wait for the daemon to finish the import's background work.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);
use crate::tools::{drop_caches, run_silent};

fn tool(ctx: &Ctx, outcome: &mut Outcome, name: &str, cmd: &mut Command) -> Result<Timed> {
    let ((), timed) = ctx.timed(|| run_silent(cmd))?;
    outcome.seconds(name, &timed);
    Ok(timed)
}

/// Drops caches, then loads `tool` itself back (untimed): a cold row should measure the
/// filesystem under test, not reading the tool's binary and libraries (the fast path one
/// among them) from the root disk.
fn cold(ctx: &Ctx, tool: &str) -> bool {
    let dropped = drop_caches();
    let _ = ctx
        .tool(tool)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    dropped
}

fn find(ctx: &Ctx, root: &Path, ls: bool) -> Command {
    let mut cmd = ctx.tool("find");
    cmd.arg(root);
    if ls {
        cmd.arg("-ls");
    }
    cmd
}

/// find, find -ls (cold, then warm) and du -s over the extracted tree.
fn read_rows(ctx: &Ctx, outcome: &mut Outcome, root: &Path, entries: u64) -> Result<()> {
    let mut readers = Vec::new();
    cold(ctx, "find");
    readers.push((
        "find cold",
        tool(ctx, outcome, "find cold", &mut find(ctx, root, false))?,
    ));
    cold(ctx, "find");
    let find_ls = &mut find(ctx, root, true);
    readers.push((
        "find -ls cold",
        tool(ctx, outcome, "find -ls cold", find_ls)?,
    ));
    let find_ls = &mut find(ctx, root, true);
    readers.push((
        "find -ls warm",
        tool(ctx, outcome, "find -ls warm", find_ls)?,
    ));
    readers.push((
        "find warm",
        tool(ctx, outcome, "find warm", &mut find(ctx, root, false))?,
    ));
    let du = &mut ctx.tool("du");
    readers.push((
        "du -s",
        tool(ctx, outcome, "du -s", du.arg("-s").arg(root))?,
    ));
    for (name, timed) in &readers {
        outcome.requests_per(name, entries, timed);
    }
    Ok(())
}

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let tarball = ctx
        .tarball
        .ok_or_else(|| BenchError::Invalid("tree workload without its tarball".into()))?;
    let mut outcome = Outcome::default();
    let root = ctx.dir.join("tree");
    let copy = ctx.dir.join("copy");

    if !cold(ctx, "tar") {
        outcome
            .notes
            .push("not root: caches were not dropped, cold rows are warm".into());
    }
    let timed = tool(
        ctx,
        &mut outcome,
        "tar x",
        ctx.tool("tar")
            .arg("-xf")
            .arg(tarball)
            .arg("-C")
            .arg(&ctx.dir),
    )?;
    // What makes the extraction durable: XFS and ext4 write most of it back only now. The
    // kernel does not pass syncfs on to a FUSE daemon, so on shoal it returns before the
    // store has committed; under the fast path library (shoal-run) it asks the daemon to.
    let synced = tool(
        ctx,
        &mut outcome,
        "sync after tar x",
        ctx.tool("sync").arg("-f").arg(&ctx.dir),
    )?;
    outcome.metric(
        "tar x + sync",
        "s",
        Better::Lower,
        (timed.elapsed + synced.elapsed).as_secs_f64(),
    );
    // The entries of the extracted tree, counted independently (untimed).
    let entries = count_tree(&root)? + 1;
    outcome.rate_and_cpu("tar x", "entry", entries, &timed);
    outcome.count("entries", entries);

    outcome.requests_per("sync after tar x", entries, &synced);
    archive_rows(ctx, &mut outcome, &root, entries)?;
    let timed = tool(
        ctx,
        &mut outcome,
        "cp -a",
        ctx.tool("cp").arg("-a").arg(&root).arg(&copy),
    )?;
    outcome.rate_and_cpu("cp -a", "entry", entries, &timed);
    outcome.count("entries_copied", count_tree(&copy)? + 1);

    read_rows(ctx, &mut outcome, &root, entries)?;
    let timed = tool(
        ctx,
        &mut outcome,
        "rm -rf",
        ctx.tool("rm").arg("-rf").arg(&root),
    )?;
    outcome.rate_and_cpu("rm -rf", "entry", entries, &timed);
    import_row(ctx, &mut outcome, tarball, entries)?;
    Ok(outcome)
}

/// A shell pipeline into `cat > /dev/null`: GNU tar skips reading file data when its own
/// output is /dev/null, so both archivers write into a pipe.
fn into_pipe(ctx: &Ctx, command: &str, args: &[&Path]) -> Command {
    let mut cmd = ctx.tool("sh");
    cmd.arg("-c")
        .arg(format!("{command} | cat > /dev/null"))
        .arg("sh")
        .args(args);
    cmd
}

/// `tar c` of the extracted tree, cold; on shoal, `shoal export` of it (cold).
fn archive_rows(ctx: &Ctx, outcome: &mut Outcome, root: &Path, entries: u64) -> Result<()> {
    cold(ctx, "tar");
    let timed = tool(
        ctx,
        outcome,
        "tar c cold",
        &mut into_pipe(ctx, r#"tar -cf - -C "$1" ."#, &[root]),
    )?;
    outcome.rate_and_cpu("tar c cold", "entry", entries, &timed);
    let Some((shoal, _)) = shoal_of(ctx.target) else {
        return Ok(());
    };
    cold(ctx, "tar");
    let timed = tool(
        ctx,
        outcome,
        "shoal export cold",
        &mut into_pipe(ctx, r#""$1" export "$2""#, &[shoal, root]),
    )?;
    outcome.rate_and_cpu("shoal export cold", "entry", entries, &timed);
    Ok(())
}

/// On shoal, `shoal import` of the tarball into a new tree, removed again untimed; then
/// waits for the daemon to go idle, so the next target's run does not share the CPUs with
/// its background work.
fn import_row(ctx: &Ctx, outcome: &mut Outcome, tarball: &Path, entries: u64) -> Result<()> {
    let Some((shoal, _)) = shoal_of(ctx.target) else {
        return Ok(());
    };
    let imported = ctx.dir.join("imported");
    let timed = tool(
        ctx,
        outcome,
        "shoal import",
        Command::new(shoal)
            .arg("import")
            .arg("--from")
            .arg(tarball)
            .arg(&imported),
    )?;
    outcome.rate_and_cpu("shoal import", "entry", entries, &timed);
    outcome.count("entries_imported", count_tree(&imported)?);
    run_silent(Command::new(shoal).arg("rmtree").arg(&imported))?;
    let waited = wait_until_daemons_idle(&ctx.target.daemon_pids, SETTLE_LIMIT);
    outcome.metric(
        "idle wait after import",
        "s",
        Better::Lower,
        waited.as_secs_f64(),
    );
    Ok(())
}
