//! Create / stat / unlink rates through the library API, no kernel crossing:
//! `cargo run --release -p shoal-engine --example library_rate -- [STORE_DIR|--memory] [FILES]`
//! (STORE_DIR must not exist or be empty; it is formatted).

use std::path::PathBuf;
use std::time::Instant;

use shoal_engine::{Caller, Engine, EngineConfig, NewInode, ROOT_INO};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let target = args.next().unwrap_or_else(|| "--memory".into());
    let files: u64 = args
        .next()
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(100_000);
    let engine = if target == "--memory" {
        Engine::open_memory(EngineConfig::default())?
    } else {
        let dir = PathBuf::from(&target);
        Engine::mkfs(&dir, false)?;
        Engine::open(&dir, EngineConfig::default())?
    };
    let dir = engine.mkdir(ROOT_INO, b"d", 0o755, Caller::ROOT)?.ino;
    let file = NewInode::regular(0o644);
    let payload = [7u8; 100];

    let started = Instant::now();
    for i in 0..files {
        let inode = engine.create(dir, format!("f{i:08}").as_bytes(), &file, Caller::ROOT)?;
        engine.write(inode.ino, 0, &payload)?;
    }
    let create_s = started.elapsed().as_secs_f64();

    let started = Instant::now();
    for i in 0..files {
        engine.lookup(dir, format!("f{i:08}").as_bytes())?;
    }
    let stat_s = started.elapsed().as_secs_f64();

    let started = Instant::now();
    for i in 0..files {
        engine.unlink(dir, format!("f{i:08}").as_bytes())?;
    }
    let unlink_s = started.elapsed().as_secs_f64();
    engine.sync()?;

    let rate = |seconds: f64| files as f64 / seconds;
    println!("target={target} files={files}");
    println!("create+write100  {:>10.0} files/s", rate(create_s));
    println!("lookup           {:>10.0} files/s", rate(stat_s));
    println!("unlink           {:>10.0} files/s", rate(unlink_s));
    Ok(())
}
