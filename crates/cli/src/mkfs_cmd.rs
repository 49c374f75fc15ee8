use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use shoal_engine::{Caller, Engine, MkfsOptions};

pub fn run(store_dir: &Path, force: bool, label: Option<String>) -> Result<ExitCode> {
    let options = MkfsOptions {
        force,
        // The root directory belongs to whoever formats: a user's own filesystem is
        // writable by that user, root's by root.
        // SAFETY: geteuid/getegid cannot fail.
        root_owner: unsafe {
            Caller {
                uid: libc::geteuid(),
                gid: libc::getegid(),
            }
        },
        label,
    };
    let identity = Engine::mkfs_with(store_dir, &options)?;
    println!(
        "shoal: formatted {} (format version {}, uuid {})",
        store_dir.display(),
        shoal_engine::keys::FORMAT_VERSION,
        identity.uuid
    );
    Ok(ExitCode::SUCCESS)
}
