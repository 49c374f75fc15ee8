//! `shoal compact STORE`: makes an unmounted store's tables settle (memtables written out,
//! every table merged) and prints its size before and after, as JSON. For measuring the
//! settled size of a store (`shoal bench store-bytes`) and for offline maintenance.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{anyhow, Result};
use shoal_engine::Engine;

pub fn run(store: &Path) -> Result<ExitCode> {
    let engine = crate::offline_store::open(store, false, "unmount it first")?;
    let before = sizes(&engine);
    engine
        .compact()
        .map_err(|error| anyhow!("compacting {}: {error}", store.display()))?;
    let after = sizes(&engine);
    println!(
        "{}",
        serde_json::json!({ "before": before, "after": after })
    );
    Ok(ExitCode::SUCCESS)
}

/// The store's bytes on disk, its journal's share and its table count.
fn sizes(engine: &Engine) -> serde_json::Value {
    let (_, store) = engine.stats_snapshot();
    serde_json::json!({
        "disk_bytes": store.disk_bytes,
        "journal_bytes": store.journal_bytes,
        "table_count": store.table_count,
    })
}
