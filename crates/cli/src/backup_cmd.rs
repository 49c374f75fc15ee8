//! `shoal backup SOURCE FILE` and `shoal restore FILE STORE_DIR`: a whole filesystem to one
//! file and back (format in shoal_engine::backup). A live mount is backed up by its daemon
//! from a snapshot while writes go on; an unmounted store is opened here.
//!
//! The file is written as `FILE.partial` and renamed once complete, so a backup that was
//! interrupted never passes for a whole one.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use shoal_engine::backup::{self, BackupSummary};
use shoal_engine::store_dir::{self, identity};
use shoal_engine::Engine;

use crate::control::{self, ControlRequest};
use crate::mounts;
use crate::progress_bar;

#[derive(clap::Args)]
pub struct BackupArgs {
    /// A shoal mountpoint (backed up live, from a snapshot) or an unmounted store directory.
    source: PathBuf,
    /// The backup file to create (refused if it exists).
    file: PathBuf,
}

#[derive(clap::Args)]
pub struct RestoreArgs {
    /// A backup made by `shoal backup`.
    file: PathBuf,
    /// Where to create the restored store (created if missing; must be empty).
    store_dir: PathBuf,
    /// Restore even into a non-empty directory or over an existing store (after the whole
    /// backup has been checked).
    #[arg(long)]
    force: bool,
}

/// The daemon's answer to `ControlRequest::Backup`.
#[derive(Debug, Serialize, Deserialize)]
pub struct BackupAnswer {
    pub pairs: u64,
    pub bytes: u64,
}

pub fn run_backup(args: &BackupArgs) -> Result<ExitCode> {
    let file = mounts::absolute(&args.file);
    if fs::symlink_metadata(&file).is_ok() {
        bail!("{} exists; give a new file name", file.display());
    }
    let source = mounts::absolute(&args.source);
    let answer = match mounts::mount_at(&source) {
        Some(entry) if !entry.is_shoal() => {
            bail!(
                "{} is a {} mount, not shoal",
                source.display(),
                entry.fstype
            )
        }
        Some(_) => backup_through_daemon(&source, &file)?,
        None => {
            store_dir::read_format(&source).with_context(|| {
                format!(
                    "{} is neither a shoal mountpoint nor a store",
                    source.display()
                )
            })?;
            let bar = progress_bar::bytes("backup", None);
            let summary = write_atomically(&file, &mut |out| {
                Ok(backup::backup_store_dir(&source, out, &mut |bytes| {
                    bar.set_position(bytes)
                })?)
            });
            bar.finish_and_clear();
            let summary = summary?;
            BackupAnswer {
                pairs: summary.pairs,
                bytes: summary.bytes,
            }
        }
    };
    println!(
        "shoal: backed up {} to {} ({} pairs, {} bytes)",
        source.display(),
        file.display(),
        answer.pairs,
        answer.bytes
    );
    Ok(ExitCode::SUCCESS)
}

/// Asks the daemon to write the backup (it holds the store); the bar follows the growing
/// file meanwhile.
fn backup_through_daemon(mountpoint: &Path, file: &Path) -> Result<BackupAnswer> {
    let daemon = crate::stats_cmd::find_daemon(mountpoint)?;
    let request = ControlRequest::Backup {
        path: file.to_path_buf(),
    };
    let worker = std::thread::spawn(move || control::request(daemon, &request));
    let bar = progress_bar::bytes("backup", None);
    let partial = partial_path(file);
    while !worker.is_finished() {
        if let Ok(meta) = fs::metadata(&partial) {
            bar.set_position(meta.len());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bar.finish_and_clear();
    let value = worker
        .join()
        .map_err(|_| anyhow::anyhow!("the backup request thread panicked"))??;
    serde_json::from_value(value).context("the daemon's answer is unreadable")
}

/// The daemon's side of `ControlRequest::Backup`: creates `path` (never overwriting) and
/// writes a backup of a snapshot into it.
pub fn serve_backup(
    engine: &Arc<Engine>,
    store: Option<&Path>,
    path: &Path,
) -> Result<BackupAnswer, String> {
    if !path.is_absolute() {
        return Err(format!(
            "{}: the backup path must be absolute",
            path.display()
        ));
    }
    let label = store
        .and_then(|store| identity::read(store).ok().flatten())
        .and_then(|identity| identity.label);
    let summary = write_atomically(path, &mut |out| {
        Ok(engine.backup(label.as_deref(), out, &mut |_| {})?)
    })
    .map_err(|error| format!("{error:#}"))?;
    Ok(BackupAnswer {
        pairs: summary.pairs,
        bytes: summary.bytes,
    })
}

fn partial_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// Writes through `write` into `file.partial` (created new, mode 0600: a backup holds
/// every file's contents), syncs it, and renames it to `file` only when complete.
fn write_atomically(
    file: &Path,
    write: &mut dyn FnMut(&mut File) -> Result<BackupSummary>,
) -> Result<BackupSummary> {
    if fs::symlink_metadata(file).is_ok() {
        bail!("{} exists; give a new file name", file.display());
    }
    let partial = partial_path(file);
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("cannot create {}", partial.display()))?;
    let written = write(&mut out).and_then(|summary| {
        out.sync_all()
            .with_context(|| format!("syncing {}", partial.display()))?;
        Ok(summary)
    });
    match written {
        Ok(summary) => {
            fs::rename(&partial, file)
                .with_context(|| format!("renaming {} to {}", partial.display(), file.display()))?;
            Ok(summary)
        }
        Err(error) => {
            let _ = fs::remove_file(&partial);
            Err(error)
        }
    }
}

pub fn run_restore(args: &RestoreArgs) -> Result<ExitCode> {
    let mut input =
        File::open(&args.file).with_context(|| format!("cannot open {}", args.file.display()))?;
    let total = input.metadata()?.len();
    // Two passes: the whole file is checked before the target is touched, then restored.
    let bar = progress_bar::bytes("restore", Some(2 * total));
    let summary = backup::restore_backup(&mut input, &args.store_dir, args.force, &mut |bytes| {
        bar.set_position(bytes)
    })
    .with_context(|| format!("restoring {}", args.file.display()));
    bar.finish_and_clear();
    let summary = summary?;
    println!(
        "shoal: restored {} into {} ({} pairs)",
        args.file.display(),
        args.store_dir.display(),
        summary.pairs
    );
    Ok(ExitCode::SUCCESS)
}
