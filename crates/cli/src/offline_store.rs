//! Opening an unmounted store in this process, for the commands that take one (`compact`,
//! `du`, `import`/`export`, `info`, `quota`, `rmtree`).

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Result};
use shoal_engine::{Engine, EngineConfig};

/// Opens the store at `store` for a one-shot command: no interval commits (the command
/// syncs before it exits), and every file it creates private, as the daemon's are.
/// `if_mounted` ends the error: what to give instead when the store is mounted.
pub fn open(store: &Path, read_only: bool, if_mounted: &str) -> Result<Arc<Engine>> {
    crate::mkfs_cmd::set_private_umask();
    let config = EngineConfig {
        read_only,
        commit_interval: None,
        ..EngineConfig::default()
    };
    Engine::open(store, config).map_err(|error| {
        anyhow!(
            "cannot open store {}: {error} ({if_mounted})",
            store.display()
        )
    })
}
