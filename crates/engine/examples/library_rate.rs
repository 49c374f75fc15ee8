//! Create / stat / unlink rates through the library API, no kernel crossing:
//! `cargo run --release -p shoal-engine --example library_rate -- [STORE_DIR|--memory] [FILES] [THREADS]`
//! (STORE_DIR must not exist or be empty; it is formatted). With several threads each works
//! in a directory of its own, FILES in all: how the engine's writes scale with writers.

use std::path::PathBuf;
use std::time::Instant;

use shoal_engine::{Caller, Engine, EngineConfig, FsResult, NewInode, ROOT_INO};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let target = args.next().unwrap_or_else(|| "--memory".into());
    let files: u64 = args
        .next()
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(100_000);
    let threads: u64 = args.next().map(|n| n.parse()).transpose()?.unwrap_or(1);
    let engine = if target == "--memory" {
        Engine::open_memory(EngineConfig::default())?
    } else {
        let dir = PathBuf::from(&target);
        Engine::mkfs(&dir, false)?;
        Engine::open(&dir, EngineConfig::default())?
    };
    let mut dirs = Vec::new();
    for t in 0..threads {
        dirs.push(
            engine
                .mkdir(ROOT_INO, format!("d{t}").as_bytes(), 0o755, Caller::ROOT)?
                .ino,
        );
    }
    let per_thread = files / threads.max(1);
    let file = NewInode::regular(0o644);
    let payload = [7u8; 100];
    let name = |i: u64| format!("f{i:08}");

    let create_s = on_threads(&dirs, |dir| {
        for i in 0..per_thread {
            let inode = engine.create(dir, name(i).as_bytes(), &file, Caller::ROOT)?;
            engine.write(inode.ino, 0, &payload)?;
        }
        Ok(())
    })?;
    let stat_s = on_threads(&dirs, |dir| {
        for i in 0..per_thread {
            engine.lookup(dir, name(i).as_bytes())?;
        }
        Ok(())
    })?;
    let unlink_s = on_threads(&dirs, |dir| {
        for i in 0..per_thread {
            engine.unlink(dir, name(i).as_bytes())?;
        }
        Ok(())
    })?;
    engine.sync()?;

    let total = per_thread * threads.max(1);
    let rate = |seconds: f64| total as f64 / seconds;
    println!("target={target} files={total} threads={threads}");
    println!("create+write100  {:>10.0} files/s", rate(create_s));
    println!("lookup           {:>10.0} files/s", rate(stat_s));
    println!("unlink           {:>10.0} files/s", rate(unlink_s));
    Ok(())
}

/// Runs `work` once per directory, each on a thread of its own; the seconds they took.
fn on_threads(dirs: &[u64], work: impl Fn(u64) -> FsResult<()> + Sync) -> FsResult<f64> {
    let started = Instant::now();
    std::thread::scope(|scope| {
        let running: Vec<_> = dirs
            .iter()
            .map(|&dir| {
                let work = &work;
                scope.spawn(move || work(dir))
            })
            .collect();
        running
            .into_iter()
            .try_for_each(|thread| thread.join().expect("a worker panicked"))
    })?;
    Ok(started.elapsed().as_secs_f64())
}
