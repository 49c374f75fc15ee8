//! `fsck --repair` of the store directory's own files: `FORMAT` and `IDENTITY`, written
//! again from what the store holds when one is missing or unreadable. Without `FORMAT` no
//! command touches the store at all, so this is the one way back that keeps the data.

use std::path::Path;

use super::check_tuning;
use crate::keys;
use crate::store::{FjallStore, Space, Store};
use crate::store_dir::identity::{self, Rebuilt};
use crate::store_dir::open::OpenError;
use crate::store_dir::{self, StoreDirError};

/// Writes `FORMAT` again if it is lost, naming the version in the store's superblock;
/// the note says what was done.
pub(super) fn rebuild_format(dir: &Path) -> Result<Option<String>, OpenError> {
    let why = match store_dir::read_format(dir) {
        Ok(_) => return Ok(None),
        Err(StoreDirError::FormatLost(_, why)) => why,
        Err(error) => return Err(error.into()),
    };
    let version = superblock_version(dir)?;
    store_dir::rewrite_format(dir, version)?;
    Ok(Some(format!(
        "rebuilt FORMAT ({why}): format version {version}, from the store's superblock"
    )))
}

/// The format version the store's superblock records.
fn superblock_version(dir: &Path) -> Result<u32, OpenError> {
    let store = FjallStore::open(&store_dir::kv_path(dir), &check_tuning())?;
    let value = store
        .get(Space::Meta, &keys::superblock_key())?
        .ok_or_else(|| {
            OpenError::Damaged(
                "FORMAT is lost and the store has no superblock to rebuild it from".into(),
            )
        })?;
    Ok(keys::decode_superblock(&value)?.format_version)
}

/// Writes `IDENTITY` again if it is missing or unreadable, keeping every field that still
/// reads; what was lost is made anew (a UUID) or taken from the store directory (its
/// creation time), and the note says which.
pub(super) fn rebuild_identity(dir: &Path) -> Result<Option<String>, OpenError> {
    let created_fallback = store_created_secs(dir);
    Ok(identity::rebuild(dir, created_fallback)?.map(|rebuilt| describe(&rebuilt)))
}

fn describe(rebuilt: &Rebuilt) -> String {
    let uuid = if rebuilt.kept_uuid {
        format!("uuid {} kept", rebuilt.identity.uuid)
    } else {
        format!(
            "new uuid {} (the old one is recorded nowhere else)",
            rebuilt.identity.uuid
        )
    };
    let created = if rebuilt.kept_created {
        "creation time kept"
    } else {
        "creation time from the store's kv/ directory"
    };
    format!("rebuilt IDENTITY ({}): {uuid}, {created}", rebuilt.why)
}

/// When `kv/` was made (mkfs made it), in seconds since the epoch; now if the filesystem
/// below does not record birth times.
fn store_created_secs(dir: &Path) -> i64 {
    std::fs::metadata(store_dir::kv_path(dir))
        .and_then(|meta| meta.created())
        .ok()
        .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|since| i64::try_from(since.as_secs()).ok())
        .unwrap_or_else(|| crate::Timestamp::now().secs)
}
