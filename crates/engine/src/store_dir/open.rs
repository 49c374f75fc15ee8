//! Opening a store's key-value files for a mount: refused when the journals are damaged
//! or the store recovers to less than it held (`store_dir::state`), or when replaying the
//! journal would need more space than the device has. fjall's recovery would otherwise
//! drop damaged batches without a word, or fill the device and poison itself.

use std::path::Path;

use crate::error::{FsError, StoreError};
use crate::store::{FjallStore, FjallTuning, Store};
use crate::store_dir::space_reserve::{device_space, SpaceReserve};
use crate::store_dir::state::{self, StoreState};
use crate::store_dir::{self, StoreDirError};

/// Why a store could not be opened (by a mount, fsck, a backup).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    StoreDir(#[from] StoreDirError),
    #[error("cannot open the key-value store: {0}")]
    Store(#[from] StoreError),
    #[error("store is damaged: {0}")]
    Damaged(String),
    #[error("{0}")]
    NoSpace(String),
}

impl From<FsError> for OpenError {
    fn from(error: FsError) -> Self {
        match error {
            FsError::Store(store) => OpenError::Store(store),
            other => OpenError::Damaged(other.to_string()),
        }
    }
}

fn io_error(dir: &Path) -> impl FnOnce(std::io::Error) -> OpenError + '_ {
    move |error| OpenError::StoreDir(StoreDirError::Io(dir.to_path_buf(), error))
}

/// The message for a store a mount refuses as damaged.
pub fn damaged(dir: &Path, problems: &[String]) -> OpenError {
    OpenError::Damaged(format!(
        "{}; nothing was changed. `shoal fsck {}` lists the damage, `shoal fsck --repair {}` \
         keeps what is readable and drops the rest",
        problems.join("; "),
        dir.display(),
        dir.display()
    ))
}

pub fn open_verified(
    dir: &Path,
    tuning: &FjallTuning,
    reserve: Option<&SpaceReserve>,
) -> Result<FjallStore, OpenError> {
    let kv = store_dir::kv_path(dir);
    let findings = state::check_store_journals(dir, &kv).map_err(io_error(dir))?;
    let problems: Vec<String> = findings.all_problems().cloned().collect();
    if !problems.is_empty() {
        return Err(damaged(dir, &problems));
    }
    for note in &findings.notes {
        tracing::info!("{note}");
    }
    let store = FjallStore::open(&kv, tuning).map_err(|error| {
        damaged(
            dir,
            &[format!("the key-value store cannot be opened: {error}")],
        )
    })?;
    if let Some(reserve) = reserve {
        // Recovery only read the journals into memtables; their flush is what needs
        // the space, exactly what the memtables now hold.
        check_replay_space(dir, store.pending_bytes(), reserve.floor_bytes())?;
    }
    // A read-only mount too: fjall flushes and compacts what recovery found whatever the
    // mount's mode, changing files the clean state sealed.
    record_open(dir, &store);
    Ok(store)
}

/// The journal's batches not yet in tables were replayed into memtables; writing them
/// out needs their size on the device, beside the reserve.
fn check_replay_space(dir: &Path, replayed_bytes: u64, floor_bytes: u64) -> Result<(), OpenError> {
    let available = device_space(dir).map_err(io_error(dir))?.available_bytes;
    let needed = replayed_bytes + floor_bytes;
    if available < needed {
        return Err(OpenError::NoSpace(format!(
            "{}: the journal's {} MiB not yet in tables need {} MiB free on the store's \
             device (with the {} MiB reserve), and {} MiB are; free space there or grow \
             the device, then mount again (nothing was written)",
            dir.display(),
            replayed_bytes >> 20,
            needed >> 20,
            floor_bytes >> 20,
            available >> 20
        )));
    }
    Ok(())
}

/// Records that the store is open (its journals and files may change from now on). Best
/// effort (a full or read-only device may refuse the small write; on a read-only one
/// nothing changes the files either).
pub(crate) fn record_open(dir: &Path, store: &FjallStore) {
    let recorded = store
        .sync()
        .map_err(|error| error.to_string())
        .and_then(|()| {
            state::write_state(dir, &StoreState::Open).map_err(|error| error.to_string())
        });
    if let Err(error) = recorded {
        tracing::warn!("cannot record the store's state at open: {error}");
    }
}

/// After a clean close (the final sync succeeded and the engine, with fjall and its
/// threads, is gone, so the journals no longer change): the journals as they are now,
/// for the next open to compare.
pub fn record_clean_close(dir: &Path) {
    let recorded = state::clean_state(&store_dir::kv_path(dir))
        .and_then(|state| state::write_state(dir, &state));
    if let Err(error) = recorded {
        tracing::warn!("cannot record the store's clean close: {error}");
    }
}

/// Opens an unmounted store for offline work (fsck, a backup), locked against a mount
/// meanwhile.
pub(crate) fn open_offline(dir: &Path) -> Result<(store_dir::StoreLock, FjallStore), OpenError> {
    store_dir::read_format(dir)?;
    let lock = store_dir::StoreLock::acquire(dir)?;
    let tuning = FjallTuning {
        worker_threads: 1,
        ..FjallTuning::default()
    };
    let store = FjallStore::open(&store_dir::kv_path(dir), &tuning)?;
    record_open(dir, &store);
    Ok((lock, store))
}
