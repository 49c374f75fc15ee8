//! The store directory on disk: a `FORMAT` file naming the format version, the fjall
//! database under `kv/`, a `lock` file holding the owner's pid, and the daemon's log.
//!
//! Nothing is written to a directory until it has been recognised as a shoal store of a
//! version we understand, so a foreign or newer store is never modified.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::keys::{FORMAT_VERSION, FORMAT_VERSION_UPGRADABLE};

const FORMAT_FILE: &str = "FORMAT";
const FORMAT_MAGIC: &str = "shoal-store";
const KV_DIR: &str = "kv";
const LOCK_FILE: &str = "lock";
pub const LOG_FILE: &str = "shoal.log";

#[derive(Debug, thiserror::Error)]
pub enum StoreDirError {
    #[error("{0}: no such directory")]
    Missing(PathBuf),
    #[error("{0}: not a shoal store (no {FORMAT_FILE} file); refusing to touch it")]
    NotAStore(PathBuf),
    #[error("{0}: {FORMAT_FILE} does not describe a shoal store ({1:?}); refusing to touch it")]
    Foreign(PathBuf, String),
    #[error(
        "{0}: store format version {1} is not supported by this shoal (supports {FORMAT_VERSION})"
    )]
    UnsupportedVersion(PathBuf, u32),
    #[error("{0}: directory is not empty; use --force to format it anyway")]
    NotEmpty(PathBuf),
    #[error("{0}: already holds a shoal store; use --force to replace it")]
    AlreadyAStore(PathBuf),
    #[error("{0}: store is in use by process {1} (mounted?)")]
    Locked(PathBuf, String),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreDirError + '_ {
    move |error| StoreDirError::Io(path.to_path_buf(), error)
}

pub fn kv_path(dir: &Path) -> PathBuf {
    dir.join(KV_DIR)
}

pub fn log_path(dir: &Path) -> PathBuf {
    dir.join(LOG_FILE)
}

/// Prepares `dir` for a new store: creates it if missing, and empties it when `force`.
pub fn prepare_new(dir: &Path, force: bool) -> Result<(), StoreDirError> {
    if !dir.exists() {
        return fs::create_dir_all(dir).map_err(io_error(dir));
    }
    let mut entries = fs::read_dir(dir).map_err(io_error(dir))?.peekable();
    if entries.peek().is_none() {
        return Ok(());
    }
    if !force {
        return Err(match read_format(dir) {
            Ok(_) => StoreDirError::AlreadyAStore(dir.to_path_buf()),
            Err(_) => StoreDirError::NotEmpty(dir.to_path_buf()),
        });
    }
    // Refuse to wipe a store that a daemon is using.
    let _lock = StoreLock::acquire(dir)?;
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let path = entry.map_err(io_error(dir))?.path();
        let removed = if path.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(io_error(&path))?;
    }
    Ok(())
}

/// Writes the `FORMAT` file last, once the database exists: a store without it is not one.
pub fn write_format(dir: &Path) -> Result<(), StoreDirError> {
    let path = dir.join(FORMAT_FILE);
    let text = format!("{FORMAT_MAGIC} {FORMAT_VERSION}\n");
    let mut file = File::create(&path).map_err(io_error(&path))?;
    file.write_all(text.as_bytes()).map_err(io_error(&path))?;
    file.sync_all().map_err(io_error(&path))
}

/// Checks that `dir` is a shoal store of a version we understand (the current one, or one
/// that opening read-write upgrades); returns the version.
pub fn read_format(dir: &Path) -> Result<u32, StoreDirError> {
    if !dir.is_dir() {
        return Err(StoreDirError::Missing(dir.to_path_buf()));
    }
    let path = dir.join(FORMAT_FILE);
    let text = match fs::read(&path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreDirError::NotAStore(dir.to_path_buf()))
        }
        Err(error) => return Err(StoreDirError::Io(path, error)),
    };
    let first_line = text.lines().next().unwrap_or("").trim().to_string();
    let mut words = first_line.split_whitespace();
    let version = match (
        words.next(),
        words.next().map(str::parse::<u32>),
        words.next(),
    ) {
        (Some(FORMAT_MAGIC), Some(Ok(version)), None) => version,
        _ => return Err(StoreDirError::Foreign(dir.to_path_buf(), first_line)),
    };
    if !(FORMAT_VERSION_UPGRADABLE..=FORMAT_VERSION).contains(&version) {
        return Err(StoreDirError::UnsupportedVersion(
            dir.to_path_buf(),
            version,
        ));
    }
    if !kv_path(dir).is_dir() {
        return Err(StoreDirError::Foreign(
            dir.to_path_buf(),
            "missing kv/ directory".into(),
        ));
    }
    Ok(version)
}

/// An exclusive lock on a store, held for as long as this value lives. The file holds the
/// owner's pid so a second mount can say who has it.
#[derive(Debug)]
pub struct StoreLock {
    file: File,
}

impl StoreLock {
    pub fn acquire(dir: &Path) -> Result<StoreLock, StoreDirError> {
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_error(&path))?;
        // SAFETY: flock on a file descriptor we own.
        let locked = unsafe { flock(file.as_raw_fd(), LOCK_EX | LOCK_NB) } == 0;
        if !locked {
            let mut owner = String::new();
            let _ = file.read_to_string(&mut owner);
            let owner = owner.trim();
            let owner = if owner.is_empty() { "unknown" } else { owner };
            return Err(StoreDirError::Locked(dir.to_path_buf(), owner.to_string()));
        }
        let pid = std::process::id().to_string();
        file.set_len(0).map_err(io_error(&path))?;
        file.seek(SeekFrom::Start(0)).map_err(io_error(&path))?;
        file.write_all(pid.as_bytes()).map_err(io_error(&path))?;
        Ok(StoreLock { file })
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        // The kernel drops the flock when the file closes; clear the pid for readers.
        let _ = self.file.set_len(0);
    }
}

const LOCK_EX: i32 = 2;
const LOCK_NB: i32 = 4;

extern "C" {
    fn flock(fd: i32, operation: i32) -> i32;
}
