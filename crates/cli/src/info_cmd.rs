//! `shoal info STORE|MOUNTPOINT`: what a filesystem is (format version, UUID, label,
//! creation time) and holds (inodes, bytes, store size), as `xfs_info` and `tune2fs -l`.
//! On a mountpoint the daemon says which store it serves and its live usage; an unmounted
//! store is opened read-only here.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use shoal_engine::store_dir::identity;
use shoal_engine::{store_dir, Engine};

use crate::control::{self, ControlRequest};
use crate::mounts;
use crate::units;

/// What the daemon answers to `ControlRequest::Info`.
#[derive(Debug, Serialize, Deserialize)]
pub struct InfoAnswer {
    /// None for a RAM filesystem (`shoal mount --memory`).
    pub store_dir: Option<PathBuf>,
    pub inodes: u64,
    pub bytes: u64,
    pub store_disk_bytes: u64,
    /// Whether file data is kept compressed (`mkfs --compress`); absent from a daemon
    /// older than this field, and None in RAM.
    #[serde(default)]
    pub data_compressed: Option<bool>,
}

/// The daemon's side.
pub fn answer(engine: &Engine, store_dir: Option<PathBuf>) -> Result<InfoAnswer, String> {
    let stats = engine.fs_stats().map_err(|error| error.to_string())?;
    Ok(InfoAnswer {
        store_dir,
        inodes: stats.used.inodes,
        bytes: stats.used.bytes,
        store_disk_bytes: stats.store_disk_bytes,
        data_compressed: engine.data_compressed(),
    })
}

/// Everything `shoal info` prints (and `--json` emits).
#[derive(Debug, Serialize)]
struct Info {
    store_dir: Option<PathBuf>,
    mountpoint: Option<PathBuf>,
    format_version: Option<u32>,
    /// None for a store made before shoal recorded identities.
    uuid: Option<String>,
    label: Option<String>,
    created_secs: Option<i64>,
    inodes: u64,
    bytes: u64,
    store_disk_bytes: u64,
    data_compressed: Option<bool>,
}

/// `shoal info`'s command line (`-h` is help, as everywhere in shoal).
#[derive(clap::Args)]
pub struct InfoArgs {
    /// A shoal mountpoint (the daemon answers) or an unmounted store directory.
    target: PathBuf,
    /// Sizes and counts in human units (256M, 1.5k) instead of bytes and inodes.
    #[arg(long = "human")]
    human: bool,
    /// Print the information as JSON (bytes and counts, never human units).
    #[arg(long)]
    json: bool,
}

pub fn run(args: &InfoArgs) -> Result<ExitCode> {
    let (target, json, human) = (args.target.as_path(), args.json, args.human);
    let absolute = mounts::absolute(target);
    let (mountpoint, answer) = match mounts::mount_at(&absolute) {
        Some(entry) if !entry.is_shoal() => {
            bail!(
                "{} is a {} mount, not shoal",
                target.display(),
                entry.fstype
            )
        }
        Some(_) => {
            let daemon = crate::stats_cmd::find_daemon(&absolute)?;
            let value = control::request(daemon, &ControlRequest::Info)?;
            let answer: InfoAnswer =
                serde_json::from_value(value).context("the daemon's answer is unreadable")?;
            (Some(absolute), answer)
        }
        None => (None, open_store(target)?),
    };
    let store = answer.store_dir.as_deref();
    let identity = match store {
        Some(store) => identity::read(store)?,
        None => None,
    };
    let info = Info {
        format_version: store.map(store_dir::read_format).transpose()?,
        store_dir: answer.store_dir.clone(),
        mountpoint,
        uuid: identity.as_ref().map(|identity| identity.uuid.clone()),
        label: identity
            .as_ref()
            .and_then(|identity| identity.label.clone()),
        created_secs: identity.as_ref().map(|identity| identity.created_secs),
        inodes: answer.inodes,
        bytes: answer.bytes,
        store_disk_bytes: answer.store_disk_bytes,
        data_compressed: answer.data_compressed,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        print!("{}", render(&info, human));
    }
    Ok(ExitCode::SUCCESS)
}

fn open_store(store: &Path) -> Result<InfoAnswer> {
    store_dir::read_format(store).with_context(|| {
        format!(
            "{} is neither a shoal mountpoint nor a store",
            store.display()
        )
    })?;
    let engine = crate::offline_store::open(store, true, "if it is mounted, give the mountpoint")?;
    answer(&engine, Some(mounts::absolute(store))).map_err(anyhow::Error::msg)
}

fn render(info: &Info, human: bool) -> String {
    let missing = || "-".to_string();
    let size = |bytes: u64| {
        if human {
            units::human_bytes(bytes)
        } else {
            format!("{bytes} bytes")
        }
    };
    let path = |path: &Option<PathBuf>| {
        path.as_ref()
            .map_or_else(missing, |path| path.display().to_string())
    };
    let rows = [
        ("store", path(&info.store_dir)),
        ("mounted on", path(&info.mountpoint)),
        (
            "format version",
            info.format_version
                .map_or_else(missing, |version| version.to_string()),
        ),
        ("uuid", info.uuid.clone().unwrap_or_else(missing)),
        ("label", info.label.clone().unwrap_or_else(missing)),
        (
            "created",
            info.created_secs.map_or_else(missing, utc_timestamp),
        ),
        (
            "inodes",
            if human {
                units::human_count(info.inodes)
            } else {
                info.inodes.to_string()
            },
        ),
        ("bytes", size(info.bytes)),
        ("store size", size(info.store_disk_bytes)),
        (
            "file data",
            info.data_compressed.map_or_else(missing, |compressed| {
                if compressed {
                    "lz4-compressed"
                } else {
                    "as written"
                }
                .to_string()
            }),
        ),
    ];
    rows.iter()
        .map(|(name, value)| format!("{:<15} {value}\n", format!("{name}:")))
        .collect()
}

/// `2026-11-23 20:16:58 UTC`, from seconds since the epoch (proleptic Gregorian calendar).
fn utc_timestamp(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let day_secs = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        day_secs / 3600,
        day_secs % 3600 / 60,
        day_secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(utc_timestamp(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_timestamp(1_795_465_018), "2026-11-23 20:16:58 UTC");
        assert_eq!(utc_timestamp(-1), "1969-12-31 23:59:59 UTC");
    }
}
