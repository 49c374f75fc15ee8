//! Fault injection: a store that fails writes and syncs (ENOSPC, EIO) at seeded random
//! points, under a seeded random sequence of operations. Every operation either fails and
//! changes nothing, or succeeds and is kept: once the faults stop, a sync succeeds, and a
//! new engine over the same store shows exactly the tree of the successful operations
//! (the model), with fsck clean.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::stores::FaultyStore;
use common::*;
use parking_lot::Mutex;
use shoal_engine::internals::store::{MemoryStore, StagedStore, Store, StoreError};

/// Fails 15% of writes and syncs while `faults_on`, ENOSPC or EIO as `rng` draws, counting
/// them in `injected`.
fn random_faults(
    rng: Lcg,
    faults_on: Arc<AtomicBool>,
    injected: Arc<AtomicU64>,
) -> common::stores::FaultPlan {
    let rng = Mutex::new(rng);
    Box::new(move || {
        if !faults_on.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut rng = rng.lock();
        if !rng.chance(15) {
            return Ok(());
        }
        injected.fetch_add(1, Ordering::SeqCst);
        Err(if rng.chance(50) {
            StoreError::NoSpace
        } else {
            StoreError::Io(std::io::Error::from_raw_os_error(5))
        })
    })
}

/// One random operation; Ok(label) or the error it returned.
fn operation(fs: &Engine, rng: &mut Lcg, dirs: &mut Vec<u64>) -> Result<&'static str, FsError> {
    let dir = dirs[rng.below(dirs.len() as u64) as usize];
    let name = format!("n{}", rng.below(12)).into_bytes();
    let file = |fs: &Engine| fs.lookup(dir, &name).map(|inode| inode.ino);
    match rng.below(9) {
        0 | 1 => fs.create(dir, &name, &regular(), ME).map(|_| "create"),
        2 => fs.mkdir(dir, &name, 0o755, ME).map(|inode| {
            dirs.push(inode.ino);
            "mkdir"
        }),
        3 | 4 => {
            let len = rng.below(70_000) as usize + 1;
            let data = rng.bytes(len);
            let offset = rng.below(100_000);
            file(fs).and_then(|ino| fs.write(ino, offset, &data).map(|_| "write"))
        }
        5 => {
            let size = rng.below(100_000);
            file(fs).and_then(|ino| {
                let attr = SetAttr {
                    size: Some(size),
                    ..SetAttr::default()
                };
                fs.setattr(ino, &attr).map(|_| "truncate")
            })
        }
        6 => fs.unlink(dir, &name).map(|()| "unlink"),
        7 => {
            let to = dirs[rng.below(dirs.len() as u64) as usize];
            let new_name = format!("n{}", rng.below(12)).into_bytes();
            fs.rename(dir, &name, to, &new_name, RenameMode::Replace)
                .map(|_| "rename")
        }
        _ => fs.sync().map(|()| "sync"),
    }
}

fn is_injected(error: &FsError) -> bool {
    matches!(error, FsError::NoSpace | FsError::Store(_))
}

#[test]
fn operations_under_injected_faults_fail_whole_or_are_kept() {
    for seed in 1..=6u64 {
        let inner = Arc::new(MemoryStore::new());
        let faults_on = Arc::new(AtomicBool::new(false));
        let injected = Arc::new(AtomicU64::new(0));
        let faulty = FaultyStore {
            inner: inner.clone(),
            plan: random_faults(Lcg::new(seed * 7919), faults_on.clone(), injected.clone()),
        };
        // Odd seeds stage operations in front (checkpoints fail in the background too).
        let store: Box<dyn Store> = if seed % 2 == 1 {
            Box::new(StagedStore::new(Box::new(faulty), 16 << 10).unwrap())
        } else {
            Box::new(faulty)
        };
        let fs = Engine::open_with_store(store, no_thread()).unwrap();
        faults_on.store(true, Ordering::SeqCst);
        let mut rng = Lcg::new(seed);
        let mut dirs = vec![ROOT_INO];
        let mut model: BTreeMap<Vec<u8>, Node> = snapshot(&fs);
        let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
        for _ in 0..600 {
            match operation(&fs, &mut rng, &mut dirs) {
                Ok(label) => {
                    *outcomes.entry(label.to_string()).or_default() += 1;
                    model = snapshot(&fs);
                }
                Err(error) if is_injected(&error) => {
                    *outcomes.entry("injected".into()).or_default() += 1;
                    assert_eq!(
                        snapshot(&fs),
                        model,
                        "seed {seed}: a failed {error:?} changed the tree"
                    );
                }
                Err(_) => *outcomes.entry("refused".into()).or_default() += 1,
            }
            dirs.retain(|&ino| fs.getattr(ino).is_ok());
            if dirs.is_empty() {
                dirs.push(ROOT_INO);
            }
        }
        assert!(
            injected.load(Ordering::SeqCst) > 10,
            "seed {seed}: {outcomes:?}"
        );
        faults_on.store(false, Ordering::SeqCst);
        // The errseq may report an earlier background failure once; then syncs succeed.
        let _ = fs.sync();
        fs.sync().unwrap();
        assert_consistent(&fs, &[]);
        drop(fs);
        let report = shoal_engine::fsck::check(&FaultyStore::plain(inner.clone())).unwrap();
        assert!(report.is_clean(), "seed {seed}: {}", report.summary());
        let reopened =
            Engine::open_with_store(Box::new(FaultyStore::plain(inner)), no_thread()).unwrap();
        assert_eq!(
            snapshot(&reopened),
            model,
            "seed {seed}: acknowledged operations lost"
        );
        eprintln!("seed {seed}: {outcomes:?}");
    }
}
