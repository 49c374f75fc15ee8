//! Store bytes per empty file once the store has settled (issue: under 100 bytes of
//! metadata per empty file after compaction):
//! `cargo run --release -p shoal-engine --example store_bytes -- STORE_DIR FILES`
//! Makes a new store, creates FILES empty files through the library, 1000 to a directory
//! with Swift-like 32-character names, and prints the store's size after the writes, and
//! after a full compaction (memtables written out, tables merged), split into journal and
//! tables.

use std::path::PathBuf;

use shoal_engine::{Caller, Engine, EngineConfig, NewInode, ROOT_INO};

const FILES_PER_DIR: u64 = 1000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(store), Some(files)) = (args.next(), args.next()) else {
        return Err("usage: store_bytes STORE_DIR FILES".into());
    };
    let files: u64 = files.parse()?;
    if files == 0 {
        return Err("FILES must be at least 1".into());
    }
    let store = PathBuf::from(store);
    Engine::mkfs(&store, false)?;
    let engine = Engine::open(&store, EngineConfig::default())?;
    let file = NewInode::regular(0o644);
    let mut dir = ROOT_INO;
    for i in 0..files {
        if i % FILES_PER_DIR == 0 {
            let name = format!("{:03x}", i / FILES_PER_DIR);
            dir = engine
                .mkdir(ROOT_INO, name.as_bytes(), 0o755, Caller::ROOT)?
                .ino;
        }
        // An object-store name: a 32-hex-digit hash, as Swift's .data files carry.
        let name = format!(
            "{:032x}",
            u128::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
        );
        engine.create(dir, name.as_bytes(), &file, Caller::ROOT)?;
    }
    engine.sync()?;
    report(&engine, "after the writes", files);
    engine.compact()?;
    report(&engine, "after compaction", files);
    Ok(())
}

fn report(engine: &Engine, when: &str, files: u64) {
    let (_, store) = engine.stats_snapshot();
    let tables = store.disk_bytes.saturating_sub(store.journal_bytes);
    println!(
        "{when}: store {} bytes = journal {} + tables {}; {:.1} store bytes per file, {:.1} table bytes per file ({} files, {} tables)",
        store.disk_bytes,
        store.journal_bytes,
        tables,
        store.disk_bytes as f64 / files as f64,
        tables as f64 / files as f64,
        files,
        store.table_count,
    );
}
