//! `shoal rmtree`: a whole tree out of the namespace in one batch, deleted in the
//! background. On a mount the daemon does it (control socket) and tells the kernel to drop
//! the name; on an unmounted store this process does it and deletes the tree before it
//! exits. Only root and the daemon's user may ask a mount (the kernel's permission checks
//! on each directory are not made, as for any administrative command).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use shoal_engine::{Engine, ReclaimBacklog, TreeUsage, ROOT_INO};

use shoal_fuse::ChildNames;

use crate::control::{self, ControlRequest};
use crate::mounts;

/// How often `--wait` asks the daemon how far the reclaim got.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

pub struct RmtreeArgs {
    pub path: PathBuf,
    /// With a store directory: the tree inside the store.
    pub inside: Option<String>,
    /// On a mount: wait until the tree is deleted, with progress on a terminal.
    pub wait: bool,
}

/// The daemon's answer to an rmtree request.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Removed {
    pub entries: u64,
    pub files: u64,
    pub bytes: u64,
}

impl From<TreeUsage> for Removed {
    fn from(usage: TreeUsage) -> Self {
        Removed {
            entries: usage.entries,
            files: usage.files,
            bytes: usage.bytes,
        }
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Backlog {
    pub trees: u64,
    pub entries: u64,
    pub bytes: u64,
}

impl From<ReclaimBacklog> for Backlog {
    fn from(backlog: ReclaimBacklog) -> Self {
        Backlog {
            trees: backlog.trees,
            entries: backlog.entries,
            bytes: backlog.bytes,
        }
    }
}

pub fn run(args: &RmtreeArgs) -> Result<ExitCode> {
    if shoal_engine::store_dir::read_format(&args.path).is_ok() {
        let inside = args
            .inside
            .as_deref()
            .ok_or_else(|| anyhow!("give the tree inside the store with --path"))?;
        return run_offline(&args.path, inside);
    }
    if args.inside.is_some() {
        bail!("{}: --path needs a store directory", args.path.display());
    }
    let (mountpoint, inside) = locate_in_mount(&args.path)?;
    let daemon = crate::stats_cmd::find_daemon(&mountpoint)?;
    let answer = control::request(daemon, &ControlRequest::Rmtree { path: inside })?;
    let removed: Removed = serde_json::from_value(answer)?;
    println!(
        "removed {}: {} names below it ({} files, {} bytes); deleting in the background",
        args.path.display(),
        removed.entries,
        removed.files,
        removed.bytes
    );
    if args.wait {
        wait_for_reclaim(daemon, removed.entries + 1)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The shoal mount holding `path` and the path inside it. The last component is not
/// followed (a symlink is removed, not its target), the ones before it are.
pub(crate) fn locate_in_mount(path: &Path) -> Result<(PathBuf, String)> {
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("{}: give a directory to remove", path.display()))?;
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let parent = std::fs::canonicalize(&parent).with_context(|| format!("{}", parent.display()))?;
    let absolute = parent.join(name);
    let (mountpoint, inside) = mounts::shoal_mount_holding(&absolute, path)?;
    if inside.is_empty() {
        bail!("{}: the root of a mount cannot be removed", path.display());
    }
    Ok((mountpoint, format!("/{inside}")))
}

/// Polls the daemon until no detached tree is left, with a progress bar on a terminal.
fn wait_for_reclaim(daemon: u32, removed: u64) -> Result<()> {
    let bar = progress_bar(removed);
    loop {
        let answer = control::request(daemon, &ControlRequest::ReclaimStatus)?;
        let backlog: Backlog = serde_json::from_value(answer)?;
        bar.set_position(removed.saturating_sub(backlog.entries));
        if backlog.trees == 0 {
            bar.finish_and_clear();
            return Ok(());
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{elapsed_precise} [{bar:40}] {pos}/{len} names deleted ({per_sec})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// The daemon's side: detach the tree at `path` (from the mount's root), then tell the
/// kernel the name is gone (what it cached below the name is dropped in the background).
pub fn serve(
    engine: &Arc<Engine>,
    invalidator: Option<&shoal_fuse::EntryInvalidator>,
    path: &str,
) -> Result<serde_json::Value, String> {
    let (parent, name) = resolve_parent(engine, path).map_err(|error| format!("{error:#}"))?;
    let children = match engine.lookup_child(parent, name.as_bytes()) {
        Ok(root) if invalidator.is_some() => ChildNames::read(engine, root.ino),
        _ => ChildNames::default(),
    };
    let detached = engine
        .detach_tree(parent, name.as_bytes())
        .map_err(|error| format!("{path}: {error}"))?;
    if let Some(invalidator) = invalidator {
        if let Err(error) = invalidator.forget_tree(parent, name.as_bytes(), detached.ino, children)
        {
            tracing::warn!("rmtree {path}: the kernel kept its cached name: {error}");
        }
    }
    tracing::info!(
        path,
        entries = detached.usage.entries,
        bytes = detached.usage.bytes,
        "rmtree: detached"
    );
    serde_json::to_value(Removed::from(detached.usage)).map_err(|error| error.to_string())
}

pub fn serve_status(engine: &Engine) -> Result<serde_json::Value, String> {
    let backlog = engine
        .reclaim_backlog()
        .map_err(|error| error.to_string())?;
    serde_json::to_value(Backlog::from(backlog)).map_err(|error| error.to_string())
}

/// The directory holding the last component of `path`, and that component.
pub(crate) fn resolve_parent<'a>(engine: &Engine, path: &'a str) -> Result<(u64, &'a str)> {
    let trimmed = path.trim_end_matches('/');
    let (parent_path, name) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
    if name.is_empty() || name == "." || name == ".." {
        bail!("{path}: give a directory name");
    }
    let mut parent = ROOT_INO;
    for component in parent_path.split('/').filter(|part| !part.is_empty()) {
        parent = engine
            .lookup(parent, component.as_bytes())
            .map_err(|error| anyhow!("{path}: {component}: {error}"))?
            .ino;
    }
    Ok((parent, name))
}

/// `shoal rmtree STORE --path P`: detach, then delete here with progress.
fn run_offline(store: &Path, inside: &str) -> Result<ExitCode> {
    let engine =
        crate::offline_store::open(store, false, "if it is mounted, give the path in the mount")?;
    let (parent, name) = resolve_parent(&engine, inside)?;
    let detached = engine
        .detach_tree(parent, name.as_bytes())
        .map_err(|error| anyhow!("{inside}: {error}"))?;
    println!(
        "removed {inside}: {} names below it ({} files, {} bytes)",
        detached.usage.entries, detached.usage.files, detached.usage.bytes
    );
    let bar = progress_bar(detached.usage.entries + 1);
    engine.reclaim_all(|deleted| bar.set_position(deleted))?;
    bar.finish_and_clear();
    engine.sync().context("syncing the store")?;
    Ok(ExitCode::SUCCESS)
}
