//! `shoal quota`: usage and limits per user, group and project, in the spirit of
//! `xfs_quota` and `repquota`. On a mountpoint the daemon answers (live); on a store
//! directory the store is opened here (it must not be mounted).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use crate::mounts;
use crate::owner_names;
use crate::quota_protocol::{
    execute, LimitsChange, QuotaKindArg, QuotaLine, QuotaRequest, SettingsChange, SettingsLine,
};
use crate::units;

/// Where quota requests go.
pub enum QuotaTarget {
    /// A live shoal mount: its daemon answers on the control socket.
    Mount(PathBuf),
    /// An unmounted store, opened by this process.
    Store(PathBuf),
}

impl QuotaTarget {
    pub fn resolve(path: &Path) -> Result<QuotaTarget> {
        let absolute = mounts::absolute(path);
        if let Some(entry) = mounts::mount_at(&absolute) {
            if !entry.is_shoal() {
                bail!("{} is a {} mount, not shoal", path.display(), entry.fstype);
            }
            return Ok(QuotaTarget::Mount(absolute));
        }
        if shoal_engine::store_dir::read_format(path).is_ok() {
            return Ok(QuotaTarget::Store(path.to_path_buf()));
        }
        bail!(
            "{} is neither a shoal mountpoint nor a shoal store directory",
            path.display()
        )
    }

    pub fn request(&self, request: &QuotaRequest) -> Result<serde_json::Value> {
        match self {
            QuotaTarget::Mount(mountpoint) => crate::control::quota_request(mountpoint, request),
            QuotaTarget::Store(store) => {
                let engine = crate::offline_store::open(
                    store,
                    false,
                    "if it is mounted, give the mountpoint",
                )?;
                let answer = execute(&engine, request).map_err(anyhow::Error::msg)?;
                engine.sync().context("syncing the store")?;
                Ok(answer)
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            QuotaTarget::Mount(path) => format!("{} (mounted)", path.display()),
            QuotaTarget::Store(path) => format!("store {}", path.display()),
        }
    }
}

pub struct ReportArgs {
    pub kinds: Vec<QuotaKindArg>,
    /// Sizes and counts in human units (`-h`).
    pub human: bool,
    pub json: bool,
    pub target: PathBuf,
}

pub fn report(args: &ReportArgs) -> Result<ExitCode> {
    let target = QuotaTarget::resolve(&args.target)?;
    let kinds = if args.kinds.is_empty() {
        vec![QuotaKindArg::User]
    } else {
        args.kinds.clone()
    };
    let mut all = Vec::new();
    for kind in kinds {
        let answer = target.request(&QuotaRequest::Report { kind })?;
        let lines: Vec<QuotaLine> =
            serde_json::from_value(answer).context("unreadable quota report")?;
        if !args.json {
            print_report(kind, &target.describe(), &lines, args.human);
        }
        all.extend(lines);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
    }
    Ok(ExitCode::SUCCESS)
}

pub struct SetArgs {
    pub kind: QuotaKindArg,
    pub name: String,
    pub change: LimitsChange,
    pub json: bool,
    pub target: PathBuf,
}

pub fn set(args: &SetArgs) -> Result<ExitCode> {
    if args.change == LimitsChange::default() {
        bail!("nothing to set: give at least one of --bsoft, --bhard, --isoft, --ihard");
    }
    let id = id_of(args.kind, &args.name)?;
    let target = QuotaTarget::resolve(&args.target)?;
    let request = QuotaRequest::SetLimits {
        kind: args.kind,
        id,
        change: args.change,
    };
    let line: QuotaLine = serde_json::from_value(target.request(&request)?)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&line)?);
    } else {
        print_report(args.kind, &target.describe(), &[line], false);
    }
    if let QuotaTarget::Mount(mountpoint) = &target {
        note_byte_limits_on_a_mount_without_opens(mountpoint, &args.change);
    }
    Ok(ExitCode::SUCCESS)
}

/// A mount that started without byte limits lets the kernel open files without asking the
/// daemon (docs/quotas.md): a byte limit set on it meets files that existed at close or
/// fsync, not at write, until the next mount. Says so on stderr.
fn note_byte_limits_on_a_mount_without_opens(mountpoint: &Path, change: &LimitsChange) {
    let sets_bytes = [change.bytes_soft, change.bytes_hard]
        .iter()
        .any(|limit| limit.is_some_and(|bytes| bytes > 0));
    if !sets_bytes {
        return;
    }
    let opens_skipped = crate::stats_cmd::live_report(mountpoint)
        .is_ok_and(|report| report.opens_without_requests > 0);
    if opens_skipped {
        eprintln!(
            "shoal quota: note: {} was mounted without byte limits, so the kernel opens files \
             without asking shoal: until the next mount, files that already existed meet \
             this limit when written back (close or fsync report the error), not at write \
             (docs/quotas.md)",
            mountpoint.display()
        );
    }
}

pub fn config(change: SettingsChange, json: bool, target: &Path) -> Result<ExitCode> {
    let target = QuotaTarget::resolve(target)?;
    let settings: SettingsLine =
        serde_json::from_value(target.request(&QuotaRequest::Settings { change })?)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&settings)?);
    } else {
        println!(
            "quota settings of {}: bytes grace {}, inodes grace {}, root limited: {}",
            target.describe(),
            format_duration(settings.bytes_grace_secs),
            format_duration(settings.inodes_grace_secs),
            if settings.enforce_root { "yes" } else { "no" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Tags (or with project 0 clears) a directory tree inside a live mount.
pub fn project(dir: &Path, project: Option<&str>) -> Result<ExitCode> {
    let project = match project {
        Some(name) => owner_names::project_id(name)?,
        None => 0,
    };
    let metadata = std::fs::metadata(dir).with_context(|| format!("{}", dir.display()))?;
    let mountpoint = containing_mount(dir)?;
    let request = QuotaRequest::SetProject {
        ino: metadata.ino(),
        project,
    };
    let answer = QuotaTarget::Mount(mountpoint).request(&request)?;
    let changed = answer["changed_inodes"].as_u64().unwrap_or(0);
    println!(
        "{}: project {project}, {changed} inode(s) changed",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The shoal mount a path lies in: the nearest ancestor that is a mountpoint.
fn containing_mount(path: &Path) -> Result<PathBuf> {
    let absolute = mounts::absolute(path);
    let mut candidate = Some(absolute.as_path());
    while let Some(dir) = candidate {
        if let Some(entry) = mounts::mount_at(dir) {
            if entry.is_shoal() {
                return Ok(dir.to_path_buf());
            }
            bail!(
                "{} is on a {} mount, not shoal: projects are set inside a shoal mount",
                path.display(),
                entry.fstype
            );
        }
        candidate = dir.parent();
    }
    bail!("{} is not inside a shoal mount", path.display())
}

fn id_of(kind: QuotaKindArg, name: &str) -> Result<u32> {
    match kind {
        QuotaKindArg::User => owner_names::user_id(name),
        QuotaKindArg::Group => owner_names::group_id(name),
        QuotaKindArg::Project => owner_names::project_id(name),
    }
}

fn name_of(kind: QuotaKindArg, id: u32) -> String {
    let name = match kind {
        QuotaKindArg::User => shoal_sys::users::user_name(id),
        QuotaKindArg::Group => shoal_sys::users::group_name(id),
        QuotaKindArg::Project => owner_names::project_name(id),
    };
    name.unwrap_or_else(|| format!("#{id}"))
}

fn kind_title(kind: QuotaKindArg) -> &'static str {
    match kind {
        QuotaKindArg::User => "User",
        QuotaKindArg::Group => "Group",
        QuotaKindArg::Project => "Project",
    }
}

fn print_report(kind: QuotaKindArg, target: &str, lines: &[QuotaLine], human: bool) {
    let size = |bytes: u64| {
        if human {
            units::human_bytes(bytes)
        } else {
            bytes.to_string()
        }
    };
    let count = |inodes: u64| {
        if human {
            units::human_count(inodes)
        } else {
            inodes.to_string()
        }
    };
    let now = shoal_engine::Timestamp::now().secs;
    println!("{} quota on {target}", kind_title(kind));
    println!(
        "{:<16} {:>14} {:>14} {:>14} {:>9} {:>11} {:>11} {:>11} {:>9}",
        "id", "bytes used", "soft", "hard", "grace", "inodes used", "soft", "hard", "grace"
    );
    for line in lines {
        println!(
            "{:<16} {:>14} {:>14} {:>14} {:>9} {:>11} {:>11} {:>11} {:>9}",
            name_of(kind, line.id),
            size(line.bytes_used),
            size(line.bytes_soft),
            size(line.bytes_hard),
            grace_left(line.bytes_grace_ends, now),
            count(line.inodes_used),
            count(line.inodes_soft),
            count(line.inodes_hard),
            grace_left(line.inodes_grace_ends, now),
        );
    }
    println!();
}

fn grace_left(ends: Option<i64>, now: i64) -> String {
    match ends {
        None => "-".into(),
        Some(ends) if ends <= now => "expired".into(),
        Some(ends) => format_duration((ends - now) as u64),
    }
}

fn format_duration(secs: u64) -> String {
    match secs {
        s if s >= 86_400 => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
        s if s >= 3600 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        s if s >= 60 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// A non-negative integer count.
pub fn parse_count(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| format!("{text:?} is not a non-negative whole number (0 means no limit)"))
}

pub fn parse_on_off(text: &str) -> Result<bool, String> {
    match text {
        "on" | "yes" | "true" => Ok(true),
        "off" | "no" | "false" => Ok(false),
        _ => Err(format!("{text:?}: expected on or off")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parse_strictly() {
        assert_eq!(parse_count("1000").unwrap(), 1000);
        assert!(parse_count("-3").is_err());
    }

    #[test]
    fn grace_shows_what_is_left() {
        assert_eq!(grace_left(None, 100), "-");
        assert_eq!(grace_left(Some(100), 100), "expired");
        assert_eq!(grace_left(Some(100 + 90_000), 100), "1d01h");
        assert_eq!(grace_left(Some(130), 100), "30s");
    }
}
