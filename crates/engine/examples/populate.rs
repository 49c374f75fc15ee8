//! Fills a new store with many small files through the library (no kernel crossing), for
//! benchmarks that need a big filesystem fast:
//! `cargo run --release -p shoal-engine --example populate -- STORE_DIR FILES [OWNERS]`
//! Files go 1000 to a directory, owned round-robin by OWNERS users (uid 1000..), one in ten
//! with 100 bytes of data.

use std::path::PathBuf;
use std::time::Instant;

use shoal_engine::{Caller, Engine, EngineConfig, NewInode, ROOT_INO};

const FILES_PER_DIR: u64 = 1000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(store), Some(files)) = (args.next(), args.next()) else {
        return Err("usage: populate STORE_DIR FILES [OWNERS]".into());
    };
    let files: u64 = files.parse()?;
    let owners: u32 = args
        .next()
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(10)
        .max(1);
    let store = PathBuf::from(store);
    Engine::mkfs(&store, false)?;
    let engine = Engine::open(&store, EngineConfig::default())?;
    let file = NewInode::regular(0o644);
    let payload = [7u8; 100];
    let started = Instant::now();
    let mut dir = ROOT_INO;
    for i in 0..files {
        if i % FILES_PER_DIR == 0 {
            let name = format!("d{:06}", i / FILES_PER_DIR);
            dir = engine
                .mkdir(ROOT_INO, name.as_bytes(), 0o755, Caller::ROOT)?
                .ino;
        }
        let uid = 1000 + (i % u64::from(owners)) as u32;
        let owner = Caller { uid, gid: uid };
        let inode = engine.create(dir, format!("f{i:09}").as_bytes(), &file, owner)?;
        if i % 10 == 0 {
            engine.write(inode.ino, 0, &payload)?;
        }
    }
    engine.sync()?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{files} files in {seconds:.1} s ({:.0} files/s), {owners} owners",
        files as f64 / seconds
    );
    Ok(())
}
