use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use shoal_engine::Engine;

pub fn run(store_dir: &Path, force: bool) -> Result<ExitCode> {
    Engine::mkfs(store_dir, force)?;
    println!(
        "shoal: formatted {} (format version {})",
        store_dir.display(),
        shoal_engine::keys::FORMAT_VERSION
    );
    Ok(ExitCode::SUCCESS)
}
