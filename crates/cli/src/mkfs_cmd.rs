use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use shoal_engine::store_access::PRIVATE_UMASK;
use shoal_engine::store_dir::{list_names, Overwrite};
use shoal_engine::Engine;

pub fn run(store_dir: &Path, force: bool, wipe: bool) -> Result<ExitCode> {
    let overwrite = match (wipe, force) {
        (true, _) => Overwrite::Anything,
        (false, true) => Overwrite::Store,
        (false, false) => Overwrite::Nothing,
    };
    set_private_umask();
    let deleted = Engine::format(store_dir, overwrite)?;
    if !deleted.is_empty() {
        println!(
            "shoal: deleted from {}: {}",
            store_dir.display(),
            list_names(&deleted)
        );
    }
    println!(
        "shoal: formatted {} (format version {})",
        store_dir.display(),
        shoal_engine::keys::FORMAT_VERSION
    );
    Ok(ExitCode::SUCCESS)
}

/// Files this process creates in a store are its owner's only (see `store_access`).
pub fn set_private_umask() {
    // SAFETY: umask only changes this process's file creation mask.
    unsafe { libc::umask(PRIVATE_UMASK) };
}
