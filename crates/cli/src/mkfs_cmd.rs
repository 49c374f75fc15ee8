use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use shoal_engine::store_dir::access::PRIVATE_UMASK;
use shoal_engine::store_dir::{list_names, Overwrite};
use shoal_engine::{Caller, Engine, MkfsOptions};
use shoal_sys::identity;

pub fn run(
    store_dir: &Path,
    (force, wipe): (bool, bool),
    label: Option<String>,
    compress_data: bool,
) -> Result<ExitCode> {
    let overwrite = match (wipe, force) {
        (true, _) => Overwrite::Anything,
        (false, true) => Overwrite::Store,
        (false, false) => Overwrite::Nothing,
    };
    let options = MkfsOptions {
        overwrite,
        // The root directory belongs to whoever formats: a user's own filesystem is
        // writable by that user, root's by root.
        root_owner: Caller {
            uid: identity::effective_uid(),
            gid: identity::effective_gid(),
        },
        label,
        compress_data,
    };
    set_private_umask();
    let (identity, deleted) = Engine::mkfs_with(store_dir, &options)?;
    if !deleted.is_empty() {
        println!(
            "shoal: deleted from {}: {}",
            store_dir.display(),
            list_names(&deleted)
        );
    }
    println!(
        "shoal: formatted {} (format version {}, uuid {})",
        store_dir.display(),
        shoal_engine::FORMAT_VERSION,
        identity.uuid
    );
    Ok(ExitCode::SUCCESS)
}

/// Files this process creates in a store are its owner's only (see `store_dir::access`).
pub fn set_private_umask() {
    shoal_sys::process::set_umask(PRIVATE_UMASK);
}
