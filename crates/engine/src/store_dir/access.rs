//! Who may read a store. A store holds every file's bytes in its journal, tables and blob
//! files, so it is private to its owner: the directory 0700 and everything in it 0600
//! (directories 0700), whatever the modes of the files inside the filesystem say.
//!
//! The daemon and mkfs create files with `PRIVATE_UMASK` (fjall creates its own files, so
//! a umask is the one way to cover them all); `make_private` sets the modes of a tree
//! explicitly, for stores formatted by a library user; `exposure` finds what others can
//! read, for the warning a mount gives.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The umask for every file a store's owner process creates: nothing for group or others.
pub const PRIVATE_UMASK: u32 = 0o077;
pub const PRIVATE_DIR_MODE: u32 = 0o700;
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Permission bits that let users other than the owner in.
const SHARED_BITS: u32 = 0o077;

/// Creates (or truncates) a file of the store itself (FORMAT, IDENTITY, STATE, the lock)
/// with the private mode, whatever the process's umask: a library user's or a command's.
/// An existing file is made private too.
pub fn create_private_file(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(PRIVATE_FILE_MODE)
        .open(path)?;
    file.set_permissions(fs::Permissions::from_mode(PRIVATE_FILE_MODE))?;
    Ok(file)
}

/// Sets `dir` and everything below it to owner-only modes (0700 directories, 0600 files),
/// keeping the owner's own bits for files (an executable stays executable to its owner).
pub fn make_private(dir: &Path) -> io::Result<()> {
    fs::set_permissions(dir, fs::Permissions::from_mode(PRIVATE_DIR_MODE))?;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            make_private(&path)?;
        } else if kind.is_file() {
            let mode = entry.metadata()?.permissions().mode();
            let private = (mode & 0o700) | PRIVATE_FILE_MODE;
            fs::set_permissions(&path, fs::Permissions::from_mode(private))?;
        }
    }
    Ok(())
}

/// The store directory itself if others may enter it, else the entries below it that
/// others may read or enter: what a mount warns about. Stops after `limit` paths.
pub fn exposure(dir: &Path, limit: usize) -> io::Result<Vec<(PathBuf, u32)>> {
    let mut found = Vec::new();
    let mode = fs::metadata(dir)?.permissions().mode() & 0o7777;
    if mode & SHARED_BITS != 0 {
        found.push((dir.to_path_buf(), mode));
        return Ok(found);
    }
    collect_shared(dir, limit, &mut found)?;
    Ok(found)
}

fn collect_shared(dir: &Path, limit: usize, found: &mut Vec<(PathBuf, u32)>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        if found.len() >= limit {
            return Ok(());
        }
        let entry = entry?;
        let metadata = entry.metadata()?;
        let mode = metadata.permissions().mode() & 0o7777;
        if mode & SHARED_BITS != 0 {
            found.push((entry.path(), mode));
        }
        if metadata.is_dir() {
            collect_shared(&entry.path(), limit, found)?;
        }
    }
    Ok(())
}

/// One line naming what others can read, for a log or a terminal.
pub fn describe_exposure(dir: &Path, exposed: &[(PathBuf, u32)]) -> String {
    let listed: Vec<String> = exposed
        .iter()
        .map(|(path, mode)| format!("{} ({mode:04o})", path.display()))
        .collect();
    format!(
        "{}: other users can read this store's files ({}); `chmod -R go= {}` makes it private",
        dir.display(),
        listed.join(", "),
        dir.display()
    )
}

/// Logs a warning when others can read the store in `dir`; returns the warning.
pub fn warn_if_exposed(dir: &Path) -> Option<String> {
    let exposed = exposure(dir, 4).ok().filter(|found| !found.is_empty())?;
    let warning = describe_exposure(dir, &exposed);
    tracing::warn!("{warning}");
    Some(warning)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn make_private_closes_a_tree_and_exposure_finds_what_is_open() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        fs::create_dir_all(root.join("kv/tables")).unwrap();
        fs::write(root.join("kv/1.jnl"), b"secret").unwrap();
        fs::write(root.join("kv/tables/7"), b"secret").unwrap();
        for (path, mode) in [
            (root.clone(), 0o755),
            (root.join("kv"), 0o755),
            (root.join("kv/1.jnl"), 0o644),
        ] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        }
        assert_eq!(exposure(&root, 10).unwrap(), vec![(root.clone(), 0o755)]);
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
        let exposed = exposure(&root, 10).unwrap();
        assert!(
            exposed.contains(&(root.join("kv/1.jnl"), 0o644)),
            "{exposed:?}"
        );
        assert!(describe_exposure(&root, &exposed).contains("chmod -R go="));

        make_private(&root).unwrap();
        assert_eq!(mode_of(&root), 0o700);
        assert_eq!(mode_of(&root.join("kv/tables")), 0o700);
        assert_eq!(mode_of(&root.join("kv/1.jnl")), 0o600);
        assert_eq!(mode_of(&root.join("kv/tables/7")), 0o600);
        assert!(exposure(&root, 10).unwrap().is_empty());
    }
}
