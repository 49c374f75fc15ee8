//! A private copy of a store's key-value files for a read-only check: fjall's recovery
//! writes (it truncates a journal at the first batch it cannot read, creates a new
//! journal and version files), and fsck must not change the store it checks, nor need
//! space or write access on its device.
//!
//! Journals are copied (recovery changes them in place). Every other file is hard-linked
//! when the copy is on the same device, since fjall never changes a table, blob or
//! version file in place (new ones are written and old ones unlinked), else copied. The
//! copy goes to `$TMPDIR` and is removed when this value drops.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

const SMALL_FILE_BYTES: u64 = 64 * 1024;

pub struct StoreShadow {
    root: PathBuf,
}

impl StoreShadow {
    /// Copies the key-value directory `kv_dir`.
    pub fn of(kv_dir: &Path) -> io::Result<StoreShadow> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos());
        let root = std::env::temp_dir().join(format!("shoal-fsck-{}-{nanos}", std::process::id()));
        let shadow = StoreShadow { root };
        fs::create_dir(&shadow.root)?;
        copy_tree(kv_dir, &shadow.root)?;
        Ok(shadow)
    }

    pub fn path(&self) -> &Path {
        &self.root
    }
}

fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let source = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            fs::create_dir(&target)?;
            copy_tree(&source, &target)?;
        } else if kind.is_file() {
            // Journals and small files (`current`, `version`, fjall's lock) are copied:
            // recovery may change those in place.
            let is_journal = source.extension().is_some_and(|ext| ext == "jnl");
            let small = entry.metadata()?.len() < SMALL_FILE_BYTES;
            if is_journal || small || fs::hard_link(&source, &target).is_err() {
                fs::copy(&source, &target)?;
            }
        }
    }
    Ok(())
}

impl Drop for StoreShadow {
    fn drop(&mut self) {
        if let Err(error) = fs::remove_dir_all(&self.root) {
            tracing::warn!(%error, "cannot remove fsck's copy {}", self.root.display());
        }
    }
}
