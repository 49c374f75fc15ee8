//! `shoal backup SOURCE FILE` and `shoal restore FILE STORE_DIR`: a whole filesystem to one
//! file and back (format in shoal_engine::backup). A live mount is backed up by its daemon
//! from a snapshot while writes go on; an unmounted store is opened here.
//!
//! The file is written as `FILE.partial` and renamed once complete, so a backup that was
//! interrupted never passes for a whole one.

use std::fs::{self, File, OpenOptions};
use std::io::{self, IsTerminal, Seek, Write};
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
    /// The backup file to create (refused if it exists), or `-` for standard output.
    #[arg(value_name = "FILE|-")]
    file: PathBuf,
}

#[derive(clap::Args)]
pub struct RestoreArgs {
    /// A backup made by `shoal backup`, or `-` for standard input (copied into an
    /// unnamed file beside STORE_DIR first, as the backup is checked whole before use).
    #[arg(value_name = "FILE|-")]
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
    let source = mounts::absolute(&args.source);
    if args.file == Path::new(STANDARD_STREAM) {
        return backup_to_stdout(&source);
    }
    let file = mounts::absolute(&args.file);
    if fs::symlink_metadata(&file).is_ok() {
        bail!("{} exists; give a new file name", file.display());
    }
    let answer = match source_kind(&source)? {
        Source::Mount => backup_through_daemon(&source, &file)?,
        Source::Store => {
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

/// The file name that means standard output (backup) or standard input (restore).
const STANDARD_STREAM: &str = "-";

enum Source {
    Mount,
    Store,
}

fn source_kind(source: &Path) -> Result<Source> {
    match mounts::mount_at(source) {
        Some(entry) if !entry.is_shoal() => {
            bail!(
                "{} is a {} mount, not shoal",
                source.display(),
                entry.fstype
            )
        }
        Some(_) => Ok(Source::Mount),
        None => {
            // Opening the store may write into it (a journal): private, as the daemon's.
            crate::mkfs_cmd::set_private_umask();
            store_dir::read_format(source).with_context(|| {
                format!(
                    "{} is neither a shoal mountpoint nor a store",
                    source.display()
                )
            })?;
            Ok(Source::Store)
        }
    }
}

/// `shoal backup SOURCE -`: the backup streamed to standard output (a live mount's by its
/// daemon, in frames over the control socket), the summary to standard error. A reader
/// knows a cut stream by its missing end record, as `restore` does.
fn backup_to_stdout(source: &Path) -> Result<ExitCode> {
    let stdout = io::stdout();
    if stdout.is_terminal() {
        bail!("refusing to write a backup to a terminal (give a FILE or redirect)");
    }
    let mut out = io::BufWriter::with_capacity(STDOUT_BUFFER_BYTES, stdout.lock());
    let answer = match source_kind(source)? {
        Source::Mount => {
            let daemon = crate::stats_cmd::find_daemon(source)?;
            let value = control::stream_request(
                daemon,
                &ControlRequest::BackupStream,
                None,
                &mut out,
                &mut |_| {},
            )?;
            serde_json::from_value(value).context("the daemon's answer is unreadable")?
        }
        Source::Store => {
            let summary = backup::backup_store_dir(source, &mut out, &mut |_| {})?;
            BackupAnswer {
                pairs: summary.pairs,
                bytes: summary.bytes,
            }
        }
    };
    out.flush()
        .context("writing the backup to standard output")?;
    eprintln!(
        "shoal: backed up {} to standard output ({} pairs, {} bytes)",
        source.display(),
        answer.pairs,
        answer.bytes
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes to a pipe in pieces this large (a backup is written in small records).
const STDOUT_BUFFER_BYTES: usize = 256 * 1024;

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

/// The daemon's side of `ControlRequest::BackupStream`: a backup of a snapshot, to
/// `output` (the client's standard output).
pub fn serve_backup_stream(
    engine: &Engine,
    store: Option<&Path>,
    output: &mut dyn Write,
) -> Result<BackupAnswer, String> {
    let label = store
        .and_then(|store| identity::read(store).ok().flatten())
        .and_then(|identity| identity.label);
    let summary = engine
        .backup(label.as_deref(), output, &mut |_| {})
        .map_err(|error| error.to_string())?;
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
    // Everything restore creates is the store's: private from the start.
    crate::mkfs_cmd::set_private_umask();
    let mut input = if args.file == Path::new(STANDARD_STREAM) {
        spool_stdin(&args.store_dir)?
    } else {
        File::open(&args.file).with_context(|| format!("cannot open {}", args.file.display()))?
    };
    let total = input.metadata()?.len();
    // Two passes: the whole file is checked before the target is touched, then restored.
    let bar = progress_bar::bytes("restore", Some(2 * total));
    let summary = backup::restore_backup(&mut input, &args.store_dir, args.force, &mut |bytes| {
        bar.set_position(bytes)
    })
    .with_context(|| format!("restoring {}", args.file.display()));
    bar.finish_and_clear();
    let summary = summary?;
    let from = if args.file == Path::new(STANDARD_STREAM) {
        "standard input".to_string()
    } else {
        args.file.display().to_string()
    };
    println!(
        "shoal: restored {from} into {} ({} pairs)",
        args.store_dir.display(),
        summary.pairs
    );
    Ok(ExitCode::SUCCESS)
}

/// Standard input copied into an unnamed file (mode 0600, gone when closed) beside the
/// store to create: restore checks a whole backup before it writes anything, and reads it
/// twice, which a pipe cannot do.
fn spool_stdin(store_dir: &Path) -> Result<File> {
    let absolute = mounts::absolute(store_dir);
    let beside = absolute.parent().unwrap_or(Path::new("/"));
    let mut spool = tempfile::tempfile_in(beside)
        .with_context(|| format!("cannot create a spool file in {}", beside.display()))?;
    io::copy(&mut io::stdin().lock(), &mut spool).with_context(|| {
        format!(
            "copying standard input into a spool file in {}",
            beside.display()
        )
    })?;
    spool.rewind().context("rewinding the spool file")?;
    Ok(spool)
}
