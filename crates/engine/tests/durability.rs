//! The on-disk store: durability across close and reopen, fsck after random workloads and
//! after deliberate corruption, the store directory's refusals (format, version, lock), and
//! group commit.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use common::*;
use shoal_engine::internals::keys;
use shoal_engine::internals::store::{Batch, FjallStore, FjallTuning, Space, Store};
use shoal_engine::stats::Op;
use shoal_engine::store_dir;
use shoal_engine::store_dir::Overwrite;

/// Every file under `dir` with its size and modification time, for "unchanged" checks.
fn tree_listing(dir: &Path) -> Vec<(String, u64, Option<SystemTime>, bool)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            let rel = entry
                .path()
                .strip_prefix(dir)
                .unwrap()
                .display()
                .to_string();
            if meta.is_dir() {
                stack.push(entry.path());
            }
            out.push((rel, meta.len(), meta.modified().ok(), meta.is_dir()));
        }
    }
    out.sort();
    out
}

fn store_dir_error(error: OpenError) -> StoreDirError {
    match error {
        OpenError::StoreDir(inner) => inner,
        other => panic!("expected a store directory error, got {other:?}"),
    }
}

/// Builds a varied tree: nested directories, inline, chunked and sparse files, hard links,
/// symlinks, special files, xattrs and foreign owners.
fn populate(fs: &Engine, seed: u64) {
    let mut rng = Lcg::new(seed);
    let top = mkdir(fs, ROOT_INO, format!("top{seed}").as_bytes());
    let sub = mkdir(fs, top.ino, b"sub");
    mkfile_with(fs, top.ino, b"inline", &rng.bytes(1234));
    let big = mkfile_with(fs, sub.ino, b"big", &rng.bytes(3 * CHUNK as usize + 77));
    let sparse = mkfile(fs, sub.ino, b"sparse");
    fs.write(sparse.ino, 5 << 20, b"far").unwrap();
    fs.link(big.ino, top.ino, b"big-link").unwrap();
    fs.symlink(top.ino, b"sym", b"sub/big", ME).unwrap();
    fs.create(top.ino, b"dev", &special(FileKind::CharDevice), ME)
        .unwrap();
    fs.setxattr(big.ino, b"user.checksum", &rng.bytes(32), XattrMode::Either)
        .unwrap();
    fs.setxattr(top.ino, b"trusted.dir", b"yes", XattrMode::Either)
        .unwrap();
    fs.setattr(
        big.ino,
        &SetAttr {
            uid: Some(2000),
            gid: Some(3000),
            perm: Some(0o600),
            ..sattr()
        },
    )
    .unwrap();
    let mut dirs = vec![top.ino, sub.ino];
    for _ in 0..400 {
        random_op(fs, &mut rng, top.ino, &mut dirs, 24);
    }
}

#[test]
fn reopen_right_after_drop_with_default_config() {
    // The brief's plain sequence: mkfs, open with the default config, use, drop, reopen.
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    Engine::mkfs(&store, false).unwrap();
    let fs = Engine::open(&store, EngineConfig::default()).unwrap();
    let file = mkfile_with(&fs, ROOT_INO, b"f", b"persist me");
    fs.sync().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    // With the default config the commit thread holds its own strong reference while it
    // waits out the interval, so this drop does not drop the engine (nor its store lock).
    let handles = std::sync::Arc::strong_count(&fs);
    drop(fs);
    let reopened = Engine::open(&store, EngineConfig::default());
    match reopened {
        Ok(fs) => assert_eq!(read_all(&fs, file.ino), b"persist me"),
        Err(error) => panic!(
            "reopen right after dropping the only user handle failed: {error} \
             (Arc::strong_count before the drop was {handles}: the commit thread holds one)"
        ),
    }
}

#[test]
fn commit_thread_syncs_on_its_interval() {
    let fs = disk_with(EngineConfig {
        commit_interval: Some(Duration::from_millis(20)),
        ..EngineConfig::default()
    });
    let syncs = fs.stats().op_count(Op::StoreSync);
    mkfile(&fs, ROOT_INO, b"f");
    let started = Instant::now();
    while fs.stats().op_count(Op::StoreSync) == syncs {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no interval commit within 5 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Nothing new to commit: the thread does not sync again.
    let after = fs.stats().op_count(Op::StoreSync);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(fs.stats().op_count(Op::StoreSync), after);
}

#[test]
fn sync_is_skipped_when_nothing_was_written_and_each_mutation_is_one_batch() {
    let fs = disk_with(no_thread());
    let (batches, syncs) = (fs.stats().batches(), fs.stats().op_count(Op::StoreSync));
    mkfile(&fs, ROOT_INO, b"f");
    assert_eq!(fs.stats().batches(), batches + 1);
    assert_err!(fs.create(ROOT_INO, b"f", &regular(), ME), FsError::Exists);
    assert_err!(fs.unlink(ROOT_INO, b"missing"), FsError::NotFound);
    assert_eq!(
        fs.stats().batches(),
        batches + 1,
        "failed operations write nothing"
    );
    fs.rename(ROOT_INO, b"f", ROOT_INO, b"g", RenameMode::Replace)
        .unwrap();
    fs.write(
        fs.lookup(ROOT_INO, b"g").unwrap().ino,
        0,
        &vec![1u8; 3 * CHUNK as usize],
    )
    .unwrap();
    assert_eq!(fs.stats().batches(), batches + 3);
    assert!(fs.stats().batch_bytes() > 3 * CHUNK);
    assert_eq!(fs.stats().op_count(Op::Create), 2);
    fs.sync().unwrap();
    assert_eq!(fs.stats().op_count(Op::StoreSync), syncs + 1);
    fs.sync().unwrap();
    fs.sync().unwrap();
    assert_eq!(
        fs.stats().op_count(Op::StoreSync),
        syncs + 1,
        "nothing new: no store sync"
    );
    // Concurrent syncs of one write share a store sync or two, not eight.
    mkfile(&fs, ROOT_INO, b"h");
    let fs = std::sync::Arc::clone(&fs.engine);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let fs = fs.clone();
            std::thread::spawn(move || fs.sync().unwrap())
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let used = fs.stats().op_count(Op::StoreSync) - (syncs + 1);
    assert!((1..=2).contains(&used), "{used} store syncs for one batch");
}

/// Group commit under many writers: each of 16 threads writes a file of its own and
/// fsyncs it, all at once, round after round. One store sync serves every fsync waiting
/// when it starts, so a round costs two or three syncs (the first, and one for all who
/// came during it), not sixteen: the `syncs` and `commits` counters of `shoal stats`.
#[test]
fn concurrent_fsyncs_of_their_own_writes_share_store_syncs() {
    const WRITERS: usize = 16;
    const ROUNDS: usize = 5;
    let store = common::stores::SlowSyncStore {
        inner: std::sync::Arc::new(shoal_engine::internals::store::MemoryStore::new()),
        sync_time: Duration::from_millis(20),
    };
    let fs = Engine::open_with_store(Box::new(store), no_thread()).unwrap();
    let (before, _) = fs.stats_snapshot();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(WRITERS));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (fs, barrier) = (fs.clone(), barrier.clone());
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    barrier.wait();
                    mkfile(&fs, ROOT_INO, format!("w{writer}r{round}").as_bytes());
                    fs.sync().unwrap();
                }
            })
        })
        .collect();
    writers.into_iter().for_each(|w| w.join().unwrap());
    let (after, _) = fs.stats_snapshot();
    let requests = after.sync_requests - before.sync_requests;
    let commits = after.commits - before.commits;
    assert_eq!(requests, (WRITERS * ROUNDS) as u64);
    assert!(
        (ROUNDS as u64..=3 * ROUNDS as u64).contains(&commits),
        "{commits} store syncs for {requests} fsyncs in {ROUNDS} rounds"
    );
    let written = names(&fs, ROOT_INO)
        .into_iter()
        .filter(|name| name.starts_with(b"w"))
        .count();
    assert_eq!(written, WRITERS * ROUNDS);
}

#[test]
fn everything_survives_sync_drop_and_reopen_across_sessions() {
    let fs = disk_with(no_thread());
    populate(&fs, 1);
    let before = snapshot(&fs);
    let usage = total(&fs);
    fs.sync().unwrap();
    let closed = fs.close();
    assert_fsck_clean(&closed.store);

    let fs = closed.open();
    assert_eq!(snapshot(&fs), before);
    assert_eq!(total(&fs), usage);
    assert_consistent(&fs, &[]);
    // A second session adds to it; new inode numbers never collide with old ones.
    populate(&fs, 2);
    let before = snapshot(&fs);
    let inos: std::collections::BTreeSet<u64> = before.values().map(|n| n.inode.ino).collect();
    assert!(
        before.keys().any(|p| p.starts_with(b"/top1"))
            && before.keys().any(|p| p.starts_with(b"/top2"))
    );
    // No explicit sync this time: dropping the engine syncs.
    drop(fs);
    assert_fsck_clean(&closed.store);

    let fs = closed.open();
    assert_eq!(snapshot(&fs), before);
    let fresh = mkfile(&fs, ROOT_INO, b"fresh");
    assert!(
        !inos.contains(&fresh.ino),
        "inode {} handed out again",
        fresh.ino
    );
    assert_consistent(&fs, &[]);
    drop(fs);
    let report = assert_fsck_clean(&closed.store);
    assert_eq!(
        report.inodes as usize,
        inos.len() + 1,
        "{}",
        report.summary()
    );
}

both_backends! {
    fn random_mix_stays_consistent(fs) {
        populate(fs, 7);
        let mut rng = Lcg::new(77);
        let top = fs.lookup(ROOT_INO, b"top7").unwrap().ino;
        let mut dirs = vec![ROOT_INO, top];
        let mut done = std::collections::BTreeMap::new();
        for _ in 0..2500 {
            *done.entry(random_op(fs, &mut rng, top, &mut dirs, 10)).or_insert(0) += 1;
        }
        eprintln!("random mix: {done:?}");
        assert!(done["refused"] < 1500, "mostly refused: {done:?}");
        for op in ["create", "mkdir", "write", "truncate", "unlink", "rmdir", "rename", "link", "setxattr", "chown"] {
            assert!(done.get(op).copied().unwrap_or(0) > 0, "{op} never succeeded: {done:?}");
        }
        assert_consistent(fs, &[]);
    }
}

/// `populate(seed)`, then `ops` random operations from the root (random generator seeded
/// with `11 * seed`).
fn populate_and_mix(fs: &Engine, seed: u64, ops: usize) {
    populate(fs, seed);
    let mut rng = Lcg::new(11 * seed);
    let mut dirs = vec![ROOT_INO];
    for _ in 0..ops {
        random_op(fs, &mut rng, ROOT_INO, &mut dirs, 10);
    }
}

#[test]
fn fsck_agrees_with_the_api_after_a_random_mix() {
    let fs = disk_with(no_thread());
    populate_and_mix(&fs, 3, 2500);
    let walk = assert_consistent(&fs, &[]);
    let closed = fs.close();
    let report = assert_fsck_clean(&closed.store);
    assert_eq!(report.inodes, walk.inodes, "{}", report.summary());
    assert_eq!(report.directories, walk.directories);
    assert_eq!(report.entries, walk.entries);
    assert_eq!(report.orphans, 0);
    assert!(
        report.chunks > 0 && report.xattrs > 0,
        "{}",
        report.summary()
    );
    assert!(report.summary().contains("clean"));
}

#[test]
fn compaction_keeps_every_file_and_drops_overwritten_versions() {
    let fs = disk_with(no_thread());
    populate_and_mix(&fs, 4, 1500);
    let before = snapshot(&fs);
    fs.sync().unwrap();
    let (_, store_before) = fs.stats_snapshot();
    fs.compact().unwrap();
    assert_eq!(
        snapshot(&fs),
        before,
        "compaction changed what the API shows"
    );
    // The blob reclaimer may seal a memtable of its own after the compaction (it runs
    // when a compaction finds stale blob files); it must be written out soon after.
    let deadline = Instant::now() + Duration::from_secs(10);
    let store_after = loop {
        let (_, metrics) = fs.stats_snapshot();
        if metrics.sealed_memtables == 0 || Instant::now() >= deadline {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(store_after.sealed_memtables, 0, "{store_after:?}");
    assert!(
        store_after.table_count >= 1
            && store_after.l0_table_count <= store_before.l0_table_count.max(1),
        "before {store_before:?}, after {store_after:?}"
    );
    let walk = assert_consistent(&fs, &[]);
    let closed = fs.close();
    let report = assert_fsck_clean(&closed.store);
    assert_eq!(report.inodes, walk.inodes, "{}", report.summary());
    let fs = closed.open();
    assert_eq!(snapshot(&fs), before, "reopened after compaction");
}

#[test]
fn configured_memtable_size_applies_to_a_store_made_with_another() {
    // mkfs makes the keyspaces with the default tuning; fjall keeps the memtable size a
    // keyspace was made with, so the engine must seal memtables at the size it is given.
    let mut config = no_thread();
    config.tuning.memtable_bytes = 1 << 20;
    // Checkpoints often, so the creates reach fjall while the test runs.
    config.checkpoint_bytes = 64 << 10;
    let fs = disk_with(config);
    let dir = mkdir(&fs, ROOT_INO, b"d");
    for i in 0..20_000u32 {
        mkfile(&fs, dir.ino, format!("{i:032x}").as_bytes());
    }
    // Each create costs fjall about 500 counted bytes: ~10 MB, ten times the memtable, so
    // tables were flushed and what is still in memory is a memtable or two, once the
    // flushes of the memtables sealed last have caught up (on a busy machine one was still
    // pending: 4.2 MB). Unsealed, all 10 MB would stay in one memtable for good.
    let deadline = Instant::now() + Duration::from_secs(10);
    let store = loop {
        let (_, store) = fs.stats_snapshot();
        let sealed_and_flushed = store.table_count >= 1 && store.write_buffer_bytes < 4 << 20;
        if sealed_and_flushed || Instant::now() >= deadline {
            break store;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        store.table_count >= 1 && store.write_buffer_bytes < 4 << 20,
        "memtables were not sealed at 1 MiB: {store:?}"
    );
    assert_eq!(names(&fs, dir.ino).len(), 20_000);
}

// ---- deliberate corruption: fsck must see it, open must refuse what it cannot use ----

/// A closed store holding `/d/f` (inline), `/big` (chunked) and `/d/f2`.
fn corruptible() -> (Closed, u64, u64, u64) {
    let fs = disk_with(no_thread());
    let dir = mkdir(&fs, ROOT_INO, b"d");
    let file = mkfile_with(&fs, dir.ino, b"f", b"small");
    let big = mkfile_with(&fs, ROOT_INO, b"big", &vec![1u8; 100_000]);
    mkfile(&fs, dir.ino, b"f2");
    let closed = fs.close();
    assert_fsck_clean(&closed.store);
    (closed, dir.ino, file.ino, big.ino)
}

fn tamper(store: &Path, change: impl FnOnce(&mut Batch)) {
    let kv = FjallStore::open(&store_dir::kv_path(store), &FjallTuning::default()).unwrap();
    let mut batch = Batch::default();
    change(&mut batch);
    kv.write(batch).unwrap();
    kv.sync().unwrap();
}

fn problems(store: &Path) -> FsckReport {
    let report = fsck_store_dir(store).unwrap();
    assert!(
        !report.is_clean(),
        "fsck missed the corruption:\n{}",
        report.summary()
    );
    assert_eq!(report.problem_count as usize, report.problems.len());
    report
}

fn mentions(report: &FsckReport, text: &str) -> bool {
    report.problems.iter().any(|p| p.contains(text))
}

#[test]
fn fsck_finds_a_lost_directory_entry() {
    let (closed, dir, file, _) = corruptible();
    tamper(&closed.store, |b| {
        b.delete(Space::Meta, keys::entry_key(dir, b"f"))
    });
    let report = problems(&closed.store);
    assert!(
        mentions(&report, &format!("directory {dir}: size 2 but 1 entries")),
        "{}",
        report.summary()
    );
    assert!(
        mentions(&report, &format!("inode {file}: nlink 1 but 0 entries")),
        "{}",
        report.summary()
    );
    assert!(
        mentions(
            &report,
            &format!("inode {file} is unreachable and not an orphan")
        ),
        "{}",
        report.summary()
    );
    assert!(report.summary().contains("problem(s)"));
}

#[test]
fn fsck_finds_wrong_counters_dangling_entries_and_stray_chunks() {
    let (closed, dir, file, big) = corruptible();
    tamper(&closed.store, |b| {
        b.put(
            Space::Meta,
            keys::counter_key(UsageKey {
                uid: 1000,
                gid: 1000,
                project: 0,
            }),
            keys::encode_usage(Usage {
                inodes: 99,
                bytes: 1,
            }),
        );
        b.put(
            Space::Meta,
            keys::entry_key(dir, b"ghost"),
            keys::encode_entry(777_777, FileKind::Regular),
        );
        b.put(Space::Data, keys::chunk_key(file, 0), b"stray".to_vec());
        b.delete(Space::Data, keys::chunk_key(big, 1));
        b.put(
            Space::Meta,
            keys::xattr_key(888_888, b"user.lost"),
            b"v".to_vec(),
        );
    });
    let report = problems(&closed.store);
    let text = report.summary();
    assert!(
        mentions(&report, "usage of uid 1000 gid 1000 project 0"),
        "{text}"
    );
    assert!(
        mentions(&report, "points to missing inode 777777"),
        "{text}"
    );
    assert!(
        mentions(&report, &format!("chunk 0 of inline inode {file}")),
        "{text}"
    );
    assert!(
        mentions(
            &report,
            &format!(
                "inode {big}: allocated 100000 but chunks hold {}",
                100_000 - CHUNK
            )
        ) || mentions(&report, &format!("inode {big}: allocated")),
        "{text}"
    );
    assert!(mentions(&report, "xattr of missing inode 888888"), "{text}");
    assert!(report.problem_count >= 5, "{text}");
}

#[test]
fn fsck_finds_a_directory_cycle_and_bad_link_counts() {
    let (closed, dir, _, _) = corruptible();
    let kv = FjallStore::open(&store_dir::kv_path(&closed.store), &FjallTuning::default()).unwrap();
    let value = kv.get(Space::Meta, &keys::inode_key(dir)).unwrap().unwrap();
    let mut inode = keys::decode_inode(dir, &value).unwrap();
    inode.nlink = 7;
    inode.parent = dir;
    let mut batch = Batch::default();
    batch.put(
        Space::Meta,
        keys::inode_key(dir),
        keys::encode_inode(&inode),
    );
    kv.write(batch).unwrap();
    kv.sync().unwrap();
    drop(kv);
    let report = problems(&closed.store);
    assert!(
        mentions(&report, &format!("directory {dir}: nlink 7 but 2 expected")),
        "{}",
        report.summary()
    );
    assert!(
        mentions(
            &report,
            &format!("directory {dir}: parent pointer {dir} but named in 1")
        ),
        "{}",
        report.summary()
    );
}

#[test]
fn open_refuses_a_store_without_superblock_or_root() {
    let (closed, _, _, _) = corruptible();
    tamper(&closed.store, |b| {
        b.delete(Space::Meta, keys::inode_key(ROOT_INO))
    });
    match open_err(&closed.store, no_thread()) {
        OpenError::Damaged(why) => assert!(why.contains("root"), "{why}"),
        other => panic!("expected Damaged, got {other:?}"),
    }
    tamper(&closed.store, |b| {
        b.delete(Space::Meta, keys::superblock_key())
    });
    match open_err(&closed.store, no_thread()) {
        OpenError::Damaged(why) => assert!(why.contains("superblock"), "{why}"),
        other => panic!("expected Damaged, got {other:?}"),
    }
    let report = problems(&closed.store);
    assert!(
        mentions(&report, "superblock missing"),
        "{}",
        report.summary()
    );
    // A refused open left the lock free.
    assert!(fsck_store_dir(&closed.store).is_ok());
}

// ---- the store directory ----

#[test]
fn open_and_fsck_refuse_what_is_not_a_store() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    assert!(matches!(
        store_dir_error(open_err(&missing, no_thread())),
        StoreDirError::Missing(_)
    ));
    assert!(!missing.exists());

    let plain = tmp.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    std::fs::write(plain.join("precious.txt"), b"not yours").unwrap();
    let before = tree_listing(&plain);
    assert!(matches!(
        store_dir_error(open_err(&plain, no_thread())),
        StoreDirError::NotAStore(_)
    ));
    assert!(matches!(
        fsck_store_dir(&plain).err().map(store_dir_error),
        Some(StoreDirError::NotAStore(_))
    ));
    assert_eq!(
        tree_listing(&plain),
        before,
        "a failed open touched a foreign directory"
    );

    std::fs::write(plain.join("FORMAT"), b"something else 1\n").unwrap();
    let before = tree_listing(&plain);
    assert!(matches!(
        store_dir_error(open_err(&plain, no_thread())),
        StoreDirError::Foreign(_, _)
    ));
    std::fs::write(plain.join("FORMAT"), b"shoal-store 1\n").unwrap();
    // Right magic and version but no kv/ directory: still foreign.
    assert!(matches!(
        store_dir_error(open_err(&plain, no_thread())),
        StoreDirError::Foreign(_, _)
    ));
    assert_eq!(tree_listing(&plain).len(), before.len());
    assert!(!plain.join("lock").exists() && !plain.join("kv").exists());
}

#[test]
fn a_newer_store_version_is_refused_and_left_unchanged() {
    let fs = disk_with(no_thread());
    mkfile_with(&fs, ROOT_INO, b"f", b"v1 data");
    let closed = fs.close();
    std::fs::write(closed.store.join("FORMAT"), b"shoal-store 99\n").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let before = tree_listing(&closed.store);
    match store_dir_error(open_err(&closed.store, no_thread())) {
        StoreDirError::UnsupportedVersion(path, 99) => assert_eq!(path, closed.store),
        other => panic!("expected UnsupportedVersion(_, 99), got {other:?}"),
    }
    assert!(matches!(
        fsck_store_dir(&closed.store).err().map(store_dir_error),
        Some(StoreDirError::UnsupportedVersion(_, 99))
    ));
    assert!(matches!(
        Engine::mkfs(&closed.store, false)
            .err()
            .map(store_dir_error),
        Some(StoreDirError::NotEmpty(..) | StoreDirError::AlreadyAStore(_))
    ));
    assert_eq!(
        tree_listing(&closed.store),
        before,
        "refusing a newer store must not modify it"
    );
    assert_eq!(
        std::fs::read(closed.store.join("FORMAT")).unwrap(),
        b"shoal-store 99\n"
    );
    // Put the version back: the store opens with its data.
    std::fs::write(closed.store.join("FORMAT"), b"shoal-store 1\n").unwrap();
    let fs = closed.open();
    assert_eq!(
        read_all(&fs, fs.lookup(ROOT_INO, b"f").unwrap().ino),
        b"v1 data"
    );
}

#[test]
fn mkfs_refuses_non_empty_directories_and_existing_stores_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    let nested = tmp.path().join("a/b/store");
    Engine::mkfs(&nested, false).unwrap();
    assert!(nested.join("FORMAT").is_file());
    assert_eq!(
        std::fs::read_to_string(nested.join("FORMAT")).unwrap(),
        format!(
            "shoal-store {}\n",
            shoal_engine::internals::keys::FORMAT_VERSION
        )
    );
    assert_fsck_clean(&nested);

    let busy = tmp.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("data"), b"keep").unwrap();
    assert!(matches!(
        Engine::mkfs(&busy, false).err().map(store_dir_error),
        Some(StoreDirError::NotEmpty(..))
    ));
    assert_eq!(std::fs::read(busy.join("data")).unwrap(), b"keep");

    // An existing store: refused without force, with its data intact.
    let fs = Engine::open(&nested, no_thread()).unwrap();
    mkfile_with(&fs, ROOT_INO, b"old", b"old data");
    drop(fs);
    assert!(matches!(
        Engine::mkfs(&nested, false).err().map(store_dir_error),
        Some(StoreDirError::AlreadyAStore(_))
    ));
    let fs = Engine::open(&nested, no_thread()).unwrap();
    assert_eq!(names(&fs, ROOT_INO), vec![b"old".to_vec()]);
    drop(fs);
    // Forced: a fresh, empty filesystem.
    Engine::mkfs(&nested, true).unwrap();
    let fs = Engine::open(&nested, no_thread()).unwrap();
    assert!(names(&fs, ROOT_INO).is_empty());
    assert_eq!(
        total(&fs),
        Usage {
            inodes: 1,
            bytes: 0
        }
    );
    drop(fs);
    // --force re-formats stores only: a foreign directory is refused, its entries named.
    match Engine::mkfs(&busy, true).err().map(store_dir_error) {
        Some(StoreDirError::NotEmpty(_, listed)) => assert_eq!(listed, "data"),
        other => panic!("expected NotEmpty, got {other:?}"),
    }
    assert_eq!(std::fs::read(busy.join("data")).unwrap(), b"keep");
    // --wipe deletes it, and says what went.
    let deleted = Engine::format(&busy, Overwrite::Anything).unwrap();
    assert_eq!(deleted, vec!["data".to_string()]);
    assert!(!busy.join("data").exists());
    assert_fsck_clean(&busy);
}

/// A store is its owner's only: the directory 0700, everything in it 0600 or 0700, even
/// when formatted by a process with a permissive umask.
#[test]
fn mkfs_makes_a_private_store() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    Engine::mkfs(&store, false).unwrap();
    let mut checked = 0;
    let mut pending = vec![store.clone()];
    while let Some(path) = pending.pop() {
        let metadata = std::fs::metadata(&path).unwrap();
        let mode = metadata.permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
        if metadata.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        }
        checked += 1;
    }
    assert!(checked > 3, "only {checked} paths");
    assert!(shoal_engine::store_dir::access::exposure(&store, 4)
        .unwrap()
        .is_empty());
}

#[test]
fn a_store_in_use_is_locked() {
    let fs = disk_with(no_thread());
    mkfile_with(&fs, ROOT_INO, b"f", b"in use");
    let store = fs.store.clone().unwrap();
    let pid = std::process::id().to_string();
    for config in [
        no_thread(),
        EngineConfig {
            read_only: true,
            ..no_thread()
        },
    ] {
        match store_dir_error(open_err(&store, config)) {
            StoreDirError::Locked(path, owner) => {
                assert_eq!(path, store);
                assert_eq!(owner, pid);
            }
            other => panic!("expected Locked, got {other:?}"),
        }
    }
    assert!(matches!(
        fsck_store_dir(&store).err().map(store_dir_error),
        Some(StoreDirError::Locked(_, _))
    ));
    assert!(matches!(
        Engine::mkfs(&store, true).err().map(store_dir_error),
        Some(StoreDirError::Locked(_, _))
    ));
    // The refused mkfs --force left the live store alone.
    assert_eq!(
        read_all(&fs, fs.lookup(ROOT_INO, b"f").unwrap().ino),
        b"in use"
    );
    let closed = fs.close();
    assert_eq!(
        std::fs::read(closed.store.join("lock")).unwrap(),
        b"",
        "the lock file keeps no stale pid"
    );
    let fs = closed.open();
    assert_eq!(
        read_all(&fs, fs.lookup(ROOT_INO, b"f").unwrap().ino),
        b"in use"
    );
}
