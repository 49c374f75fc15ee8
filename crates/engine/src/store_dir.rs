//! The store directory on disk: a `FORMAT` file naming the format version, the fjall
//! database under `kv/`, a `lock` file holding the owner's pid, and the daemon's log.
//!
//! Nothing is written to a directory until it has been recognised as a shoal store of a
//! version we understand, so a foreign or newer store is never modified.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::keys::{FORMAT_VERSION, FORMAT_VERSION_UPGRADABLE};

pub mod access;
pub mod identity;
pub mod open;
pub mod seal;
pub mod shadow;
pub(crate) mod space_reserve;
pub mod state;
pub(crate) mod upgrade;

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
    #[error(
        "{0}: directory is not empty and holds no shoal store ({1}); \
         `shoal mkfs --wipe` deletes all of that and formats it"
    )]
    NotEmpty(PathBuf, String),
    // No hint at a flag that would delete it: the store may be someone's only copy.
    #[error("{0}: already holds a shoal store; refusing to format over it")]
    AlreadyAStore(PathBuf),
    /// The directory holds a store's data (`kv/`) but its `FORMAT` file is gone or
    /// unreadable: `fsck --repair` writes it again from the store's superblock.
    #[error(
        "{0}: holds a shoal store's data (kv/) but {1}; `shoal fsck --repair {0}` rebuilds \
         it from the store (nothing else is touched)"
    )]
    FormatLost(PathBuf, String),
    #[error("{0}: store is in use by process {1} (mounted?)")]
    Locked(PathBuf, String),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("label {0:?}: {1}")]
    BadLabel(String, crate::store_dir::identity::LabelError),
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

/// Bytes of fjall's journals (`kv/*.jnl`): what opening the store replays at most, for
/// the progress shown while a mount or an offline command opens it.
pub fn journal_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(kv_path(dir)) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "jnl"))
        .filter_map(|entry| entry.metadata().ok())
        .map(|meta| meta.len())
        .sum()
}

/// What mkfs may delete to format a directory that is not empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overwrite {
    /// Nothing: only a missing or empty directory is formatted.
    Nothing,
    /// An existing shoal store (`mkfs --force`), never anything else.
    Store,
    /// Whatever the directory holds (`mkfs --wipe`).
    Anything,
}

/// How many entries a refusal names before "and N more".
const LISTED_ENTRIES: usize = 8;

/// Prepares `dir` for a new store: creates it if missing (private), and empties it as
/// `overwrite` allows. Returns the names of the entries it deleted.
pub fn prepare_new(dir: &Path, overwrite: Overwrite) -> Result<Vec<String>, StoreDirError> {
    if !dir.exists() {
        create_private_dir(dir)?;
        return Ok(Vec::new());
    }
    let names = entry_names(dir)?;
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let format = read_format(dir);
    // A store whose FORMAT is lost is still a store: `--force` may replace it, and no
    // message offers `--wipe` for it.
    let is_store = format.is_ok() || has_format_file(dir) || holds_store_data(dir);
    if let (Overwrite::Nothing, Err(lost @ StoreDirError::FormatLost(..))) = (overwrite, format) {
        return Err(lost);
    }
    match overwrite {
        Overwrite::Nothing if is_store => {
            return Err(StoreDirError::AlreadyAStore(dir.to_path_buf()))
        }
        Overwrite::Nothing | Overwrite::Store if !is_store => {
            return Err(StoreDirError::NotEmpty(
                dir.to_path_buf(),
                list_names(&names),
            ))
        }
        _ => {}
    }
    // Refuse to wipe a store that a daemon is using.
    let _lock = StoreLock::acquire(dir)?;
    for name in &names {
        let path = dir.join(name);
        let removed = if path.is_dir() && !path.is_symlink() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(io_error(&path))?;
    }
    Ok(names)
}

/// Whether `dir` holds what only a shoal store has: a `kv/` directory with fjall's
/// `version` file in it. Such a directory is never offered to a flag that deletes.
pub fn holds_store_data(dir: &Path) -> bool {
    kv_path(dir).join(FJALL_VERSION_FILE).is_file()
}

/// The file fjall writes first into every database directory.
const FJALL_VERSION_FILE: &str = "version";

fn format_lost(dir: &Path, why: &str) -> StoreDirError {
    StoreDirError::FormatLost(dir.to_path_buf(), why.to_string())
}

/// Writes `FORMAT` again for a store whose file was lost, naming `version` (read from
/// the store's superblock by `fsck --repair`).
pub fn rewrite_format(dir: &Path, version: u32) -> Result<(), StoreDirError> {
    if !(FORMAT_VERSION_UPGRADABLE..=FORMAT_VERSION).contains(&version) {
        return Err(StoreDirError::UnsupportedVersion(
            dir.to_path_buf(),
            version,
        ));
    }
    write_format_version(dir, version)
}

/// A `FORMAT` file naming a shoal store, of any version: such a directory is a store
/// (`--force` may re-format it), even one this shoal cannot read.
fn has_format_file(dir: &Path) -> bool {
    fs::read(dir.join(FORMAT_FILE)).is_ok_and(|bytes| bytes.starts_with(FORMAT_MAGIC.as_bytes()))
}

fn entry_names(dir: &Path) -> Result<Vec<String>, StoreDirError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let entry = entry.map_err(io_error(dir))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// "a, b, c and 5 more", for messages.
pub fn list_names(names: &[String]) -> String {
    let mut text = names
        .iter()
        .take(LISTED_ENTRIES)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > LISTED_ENTRIES {
        text.push_str(&format!(" and {} more", names.len() - LISTED_ENTRIES));
    }
    text
}

fn create_private_dir(dir: &Path) -> Result<(), StoreDirError> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(crate::store_dir::access::PRIVATE_DIR_MODE)
        .create(dir)
        .map_err(io_error(dir))
}

/// Writes the `FORMAT` file last, once the database exists: a store without it is not one.
pub fn write_format(dir: &Path) -> Result<(), StoreDirError> {
    write_format_version(dir, FORMAT_VERSION)
}

fn write_format_version(dir: &Path, version: u32) -> Result<(), StoreDirError> {
    let path = dir.join(FORMAT_FILE);
    let text = format!("{FORMAT_MAGIC} {version}\n");
    let mut file = access::create_private_file(&path).map_err(io_error(&path))?;
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
            return Err(if holds_store_data(dir) {
                format_lost(dir, "no FORMAT file")
            } else {
                StoreDirError::NotAStore(dir.to_path_buf())
            });
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
        _ if holds_store_data(dir) => {
            return Err(format_lost(
                dir,
                &format!("its FORMAT file is damaged ({first_line:?})"),
            ))
        }
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
            .mode(access::PRIVATE_FILE_MODE)
            .open(&path)
            .map_err(io_error(&path))?;
        // flock(2) on Linux: released by the kernel when the file closes, whatever kills us.
        if file.try_lock().is_err() {
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

/// A shared lock for a read-only look at a store (fsck): taken without writing, so it
/// works on a read-only or full device. `None` when the store has no lock file (it was
/// never mounted) or it cannot be opened: then nobody can hold it either.
#[derive(Debug)]
pub struct SharedStoreLock {
    _file: Option<File>,
}

impl SharedStoreLock {
    pub fn acquire(dir: &Path) -> Result<SharedStoreLock, StoreDirError> {
        let path = dir.join(LOCK_FILE);
        let Ok(mut file) = File::open(&path) else {
            return Ok(SharedStoreLock { _file: None });
        };
        if file.try_lock_shared().is_err() {
            let mut owner = String::new();
            let _ = file.read_to_string(&mut owner);
            let owner = owner.trim();
            let owner = if owner.is_empty() { "unknown" } else { owner };
            return Err(StoreDirError::Locked(dir.to_path_buf(), owner.to_string()));
        }
        Ok(SharedStoreLock { _file: Some(file) })
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        // The kernel drops the flock when the file closes; clear the pid for readers.
        let _ = self.file.set_len(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_lock_excludes_writers_and_readers_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let held = StoreLock::acquire(dir.path()).unwrap();
        let pid = std::process::id().to_string();
        match StoreLock::acquire(dir.path()) {
            Err(StoreDirError::Locked(_, owner)) => assert_eq!(owner, pid),
            other => panic!("a second writer got {other:?}"),
        }
        assert!(matches!(
            SharedStoreLock::acquire(dir.path()),
            Err(StoreDirError::Locked(..))
        ));
        drop(held);
        let first = SharedStoreLock::acquire(dir.path()).unwrap();
        let second = SharedStoreLock::acquire(dir.path()).unwrap();
        assert!(matches!(
            StoreLock::acquire(dir.path()),
            Err(StoreDirError::Locked(..))
        ));
        drop((first, second));
        StoreLock::acquire(dir.path()).unwrap();
    }
}
