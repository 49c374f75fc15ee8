//! What the store's write buffers (memtables) cost in memory, against what they report:
//! `cargo run --release -p shoal-engine --example memtable_footprint -- STORE_DIR [FILES]`
//! (STORE_DIR must not exist or be empty; it is formatted). Creates FILES empty files
//! (1000 per directory) with memtables large enough that none is flushed, then prints the
//! reported write-buffer bytes and the growth of the resident set.

use std::path::PathBuf;

use shoal_engine::{Caller, Engine, EngineConfig, NewInode, ROOT_INO};

fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: memtable_footprint STORE_DIR [FILES]")?,
    );
    let files: u64 = args
        .next()
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(200_000);
    let mut config = EngineConfig::default();
    config.tuning.memtable_bytes = 16 << 30;
    config.tuning.cache_bytes = 1 << 20;
    config.commit_interval = None;
    Engine::mkfs(&dir, false)?;
    let engine = Engine::open(&dir, config)?;
    let file = NewInode::regular(0o644);
    let rss_before = resident_bytes().unwrap_or(0);
    let buffered_before = engine.stats_snapshot().1.write_buffer_counted_bytes;
    let mut parent = ROOT_INO;
    for i in 0..files {
        if i % 1000 == 0 {
            let name = format!("d{:06}", i / 1000);
            parent = engine
                .mkdir(ROOT_INO, name.as_bytes(), 0o755, Caller::ROOT)?
                .ino;
        }
        engine.create(parent, format!("{i:032x}").as_bytes(), &file, Caller::ROOT)?;
    }
    let store = engine.stats_snapshot().1;
    let buffered = store.write_buffer_counted_bytes - buffered_before;
    let resident = resident_bytes().unwrap_or(0).saturating_sub(rss_before);
    println!("files={files} sealed_memtables={}", store.sealed_memtables);
    println!(
        "write buffers reported   {:>12} bytes ({:.0} per file)",
        buffered,
        buffered as f64 / files as f64
    );
    println!(
        "resident set growth      {:>12} bytes ({:.0} per file)",
        resident,
        resident as f64 / files as f64
    );
    println!(
        "resident / reported      {:>12.2}",
        resident as f64 / buffered.max(1) as f64
    );
    Ok(())
}
