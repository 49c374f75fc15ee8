//! A panic in a background thread (the checkpointer, the commit thread) poisons the engine:
//! no operation waits for the thread that is gone, every later one fails with EIO, and what
//! was synced before the panic is there when the store is opened again, fsck clean.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::Duration;

use common::stores::{FaultPlan, FaultyStore};
use common::*;
use shoal_engine::internals::store::{MemoryStore, StagedStore, StoreError};

/// How long an operation may take before the test calls it hung.
const HANG: Duration = Duration::from_secs(10);

/// Panics in the thread named `thread` (and only there) once `armed`: a bug in the store
/// under that background thread.
fn panics_in(thread: &'static str, armed: Arc<AtomicBool>) -> FaultPlan {
    Box::new(move || {
        let here = std::thread::current().name() == Some(thread);
        assert!(!(here && armed.load(Ordering::SeqCst)), "injected panic");
        Ok(())
    })
}

fn assert_poisoned(error: &FsError) {
    assert_eq!(error.errno(), libc::EIO, "{error}");
    assert!(
        matches!(error, FsError::Store(StoreError::Poisoned(_))),
        "{error:?}"
    );
}

/// Reads, writes and syncs all fail now, each at once.
fn assert_every_operation_refused(fs: &Engine) {
    let getattr = fs.getattr(ROOT_INO).map(drop);
    let create = fs.create(ROOT_INO, b"later", &regular(), ME).map(drop);
    let sync = fs.sync();
    for result in [getattr, create, sync] {
        assert_poisoned(&result.expect_err("an operation after the panic succeeded"));
    }
}

/// Opens the store again (as a restart would) and finds what was synced, fsck clean.
fn assert_synced_kept(inner: Arc<MemoryStore>) {
    let report = shoal_engine::fsck::check(&FaultyStore::plain(inner.clone())).unwrap();
    assert!(report.is_clean(), "{}", report.summary());
    let reopened =
        Engine::open_with_store(Box::new(FaultyStore::plain(inner)), no_thread()).unwrap();
    let synced = reopened.lookup(ROOT_INO, b"synced").unwrap();
    assert_eq!(read_all(&reopened, synced.ino), b"before the panic");
}

#[test]
fn a_panic_in_the_checkpointer_refuses_every_later_operation_and_hangs_none() {
    let inner = Arc::new(MemoryStore::new());
    let armed = Arc::new(AtomicBool::new(false));
    let faulty = FaultyStore {
        inner: inner.clone(),
        plan: panics_in("shoal-checkpoint", armed.clone()),
    };
    let staged = StagedStore::new(Box::new(faulty), 4 << 10).unwrap();
    let fs = Engine::open_with_store(Box::new(staged), no_thread()).unwrap();
    mkfile_with(&fs, ROOT_INO, b"synced", b"before the panic");
    fs.sync().unwrap();
    armed.store(true, Ordering::SeqCst);
    // Creates until one is refused: the first checkpoint handed to the background panics,
    // and the creates that reach the hard bound behind it must not wait for it forever.
    let (sender, refused) = channel();
    let writer = fs.clone();
    std::thread::spawn(move || {
        for i in 0..1_000_000u64 {
            let name = format!("f{i}");
            if let Err(error) = writer.create(ROOT_INO, name.as_bytes(), &regular(), ME) {
                let _ = sender.send((i, error));
                return;
            }
        }
    });
    let (created, error) = refused
        .recv_timeout(HANG)
        .expect("a create hung, or none was refused, after the checkpointer panicked");
    assert!(created > 0, "the first create after arming was refused");
    assert_poisoned(&error);
    assert_every_operation_refused(&fs);
    drop(fs);
    assert_synced_kept(inner);
}

#[test]
fn a_panic_in_the_commit_thread_refuses_every_later_operation() {
    let inner = Arc::new(MemoryStore::new());
    let armed = Arc::new(AtomicBool::new(false));
    let faulty = FaultyStore {
        inner: inner.clone(),
        plan: panics_in("shoal-commit", armed.clone()),
    };
    let config = EngineConfig {
        commit_interval: Some(Duration::from_millis(5)),
        checkpoint_bytes: 0,
        ..EngineConfig::default()
    };
    let fs = Engine::open_with_store(Box::new(faulty), config).unwrap();
    mkfile_with(&fs, ROOT_INO, b"synced", b"before the panic");
    fs.sync().unwrap();
    armed.store(true, Ordering::SeqCst);
    // Unsynced: the next interval commit syncs it, and panics.
    mkfile(&fs, ROOT_INO, b"unsynced");
    let started = std::time::Instant::now();
    let error = loop {
        match fs.getattr(ROOT_INO) {
            Err(error) => break error,
            Ok(_) if started.elapsed() < HANG => std::thread::sleep(Duration::from_millis(5)),
            Ok(_) => panic!("the commit thread's panic did not poison the engine"),
        }
    };
    assert_poisoned(&error);
    assert_every_operation_refused(&fs);
    drop(fs);
    assert_synced_kept(inner);
}
