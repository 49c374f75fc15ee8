//! Several threads creating, unlinking, renaming (files and directories, across shared and
//! private directories), writing and reading on one `Arc<Engine>`; afterwards the tree must
//! be consistent (API walk) and, on disk, fsck-clean.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;

const THREADS: u64 = 4;
const OPS_PER_THREAD: usize = 1500;

fn tolerated<T>(result: Result<T, FsError>, what: &str) -> bool {
    match result {
        Ok(_) => true,
        Err(
            FsError::NotFound
            | FsError::Exists
            | FsError::NotEmpty
            | FsError::IsDir
            | FsError::NotDir,
        ) => false,
        Err(FsError::Invalid(why)) if why.contains("itself") => false,
        Err(error) => panic!("{what}: unexpected {error:?}"),
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one arm per random operation of a worker, each with the errors a race may cause"
)]
fn worker(fs: Arc<Engine>, id: u64, shared: u64, own: u64) -> BTreeMap<&'static str, u64> {
    let mut rng = Lcg::new(1000 + id);
    let mut succeeded = BTreeMap::new();
    for step in 0..OPS_PER_THREAD {
        let shared_name = format!("s{}", rng.below(16)).into_bytes();
        let own_name = format!("o{}", rng.below(8)).into_bytes();
        let dir_name = format!("d{}", rng.below(6)).into_bytes();
        let (dir, name) = if rng.chance(60) {
            (shared, shared_name.clone())
        } else {
            (own, own_name.clone())
        };
        let caller = Caller {
            uid: 1000 + (id as u32 % 2),
            gid: 1000,
        };
        let (label, ok) = match rng.below(100) {
            0..=19 => (
                "create",
                tolerated(
                    fs.create(dir, &name, &regular(), caller).map(|_| ()),
                    "create",
                ),
            ),
            20..=31 => ("unlink", tolerated(fs.unlink(dir, &name), "unlink")),
            32..=45 => {
                let (from, to) = if rng.chance(50) {
                    ((shared, &shared_name), (own, &own_name))
                } else {
                    ((own, &own_name), (shared, &shared_name))
                };
                let mode = [
                    RenameMode::Replace,
                    RenameMode::NoReplace,
                    RenameMode::Exchange,
                ][rng.below(3) as usize];
                (
                    "rename file",
                    tolerated(fs.rename(from.0, from.1, to.0, to.1, mode), "rename file"),
                )
            }
            46..=51 => (
                "mkdir",
                tolerated(
                    fs.mkdir(shared, &dir_name, 0o755, caller).map(|_| ()),
                    "mkdir",
                ),
            ),
            52..=56 => ("rmdir", tolerated(fs.rmdir(shared, &dir_name), "rmdir")),
            57..=66 => {
                // Move a shared directory into another one, or back up: concurrent threads
                // race to build cycles that the engine must refuse.
                let target = format!("d{}", rng.below(6)).into_bytes();
                let result = fs.lookup(shared, &target).and_then(|into| {
                    if rng.chance(50) {
                        fs.rename(
                            shared,
                            &dir_name,
                            into.ino,
                            &dir_name,
                            RenameMode::NoReplace,
                        )
                    } else {
                        fs.rename(
                            into.ino,
                            &dir_name,
                            shared,
                            &dir_name,
                            RenameMode::NoReplace,
                        )
                    }
                });
                ("rename dir", tolerated(result, "rename dir"))
            }
            67..=76 => {
                let result = fs.lookup(dir, &name).and_then(|inode| {
                    if inode.kind != FileKind::Regular {
                        return Err(FsError::IsDir);
                    }
                    let offset = [0, 100, 4000, CHUNK - 5, 2 * CHUNK][rng.below(5) as usize];
                    let len = [10usize, 3000, 70_000][rng.below(3) as usize];
                    fs.write(inode.ino, offset, &vec![id as u8; len])
                        .map(|_| ())
                });
                ("write", tolerated(result, "write"))
            }
            77..=80 => {
                let result = fs.lookup(dir, &name).and_then(|inode| {
                    if inode.kind != FileKind::Regular {
                        return Err(FsError::IsDir);
                    }
                    fs.setattr(
                        inode.ino,
                        &SetAttr {
                            size: Some(rng.below(2 * CHUNK)),
                            ..sattr()
                        },
                    )
                    .map(|_| ())
                });
                ("truncate", tolerated(result, "truncate"))
            }
            81..=85 => {
                let result = fs
                    .lookup(shared, &shared_name)
                    .and_then(|inode| fs.link(inode.ino, own, &own_name).map(|_| ()));
                match result {
                    Err(FsError::NotPermitted(_)) => ("link", false),
                    other => ("link", tolerated(other, "link")),
                }
            }
            86..=91 => {
                // A private file unlinked while open: its bytes stay readable until release.
                let tmp = format!("tmp{step}").into_bytes();
                let file = fs.create(own, &tmp, &regular(), caller).unwrap();
                let len = rng.below(100_000) as usize + 1;
                let data = rng.bytes(len);
                fs.write(file.ino, 0, &data).unwrap();
                fs.open_file(file.ino);
                fs.unlink(own, &tmp).unwrap();
                assert_eq!(fs.getattr(file.ino).unwrap().nlink, 0);
                assert!(
                    read_all(&fs, file.ino) == data,
                    "thread {id}: orphan contents changed"
                );
                fs.release_file(file.ino).unwrap();
                assert_err!(fs.getattr(file.ino), FsError::NotFound);
                ("orphan", true)
            }
            92..=94 => {
                fs.sync().unwrap();
                ("sync", true)
            }
            _ => {
                let result = fs.lookup(dir, &name).and_then(|inode| {
                    fs.setxattr(
                        inode.ino,
                        b"user.owner",
                        &id.to_be_bytes(),
                        XattrMode::Either,
                    )
                });
                ("setxattr", tolerated(result, "setxattr"))
            }
        };
        *succeeded.entry(label).or_insert(0) += u64::from(ok);
    }
    succeeded
}

/// Reads while the writers run: every readdir page sorted and unique, every readdirplus
/// inode the one its entry names.
fn reader(fs: Arc<Engine>, shared: u64, stop: Arc<AtomicBool>) -> u64 {
    let mut rounds = 0;
    while !stop.load(Ordering::Relaxed) || rounds == 0 {
        let entries = fs.readdir_plus(shared, None, 1000).unwrap();
        for pair in entries.windows(2) {
            assert!(
                pair[0].0.name < pair[1].0.name,
                "readdir out of order or duplicated"
            );
        }
        for (entry, inode) in &entries {
            assert_eq!(entry.ino, inode.ino);
            match fs.read(inode.ino, 0, 100) {
                Ok(_) | Err(FsError::NotFound) | Err(FsError::IsDir) | Err(FsError::Invalid(_)) => {
                }
                Err(error) => panic!("read: {error:?}"),
            }
            if inode.kind == FileKind::Directory {
                match fs.readdir(inode.ino, None, 100) {
                    Ok(_) | Err(FsError::NotFound) => {}
                    Err(error) => panic!("readdir: {error:?}"),
                }
            }
        }
        for i in 0..16 {
            match fs.lookup(shared, format!("s{i}").as_bytes()) {
                Ok(_) | Err(FsError::NotFound) => {}
                Err(error) => panic!("lookup: {error:?}"),
            }
        }
        let _ = fs.usage(UsageOwner::Total).unwrap();
        rounds += 1;
    }
    rounds
}

fn run(fs: &Fs) -> Walk {
    let shared = mkdir(fs, ROOT_INO, b"shared").ino;
    let own: Vec<u64> = (0..THREADS)
        .map(|i| mkdir(fs, ROOT_INO, format!("t{i}").as_bytes()).ino)
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (fs, stop) = (Arc::clone(&fs.engine), Arc::clone(&stop));
        std::thread::spawn(move || reader(fs, shared, stop))
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|id| {
            let fs = Arc::clone(&fs.engine);
            let own = own[id as usize];
            std::thread::spawn(move || worker(fs, id, shared, own))
        })
        .collect();
    let succeeded: Vec<BTreeMap<&str, u64>> = workers
        .into_iter()
        .map(|w| w.join().expect("worker panicked"))
        .collect();
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().expect("reader panicked") > 0);
    let mut all: BTreeMap<&str, u64> = BTreeMap::new();
    for (id, counts) in succeeded.iter().enumerate() {
        let count: u64 = counts.values().sum();
        assert!(
            count > OPS_PER_THREAD as u64 / 4,
            "thread {id}: only {count} operations succeeded: {counts:?}"
        );
        for (label, n) in counts {
            *all.entry(label).or_insert(0) += n;
        }
    }
    for label in [
        "create",
        "unlink",
        "rename file",
        "mkdir",
        "rmdir",
        "rename dir",
        "write",
        "truncate",
        "link",
        "orphan",
        "setxattr",
    ] {
        assert!(
            all.get(label).copied().unwrap_or(0) > 0,
            "no {label} ever succeeded: {all:?}"
        );
    }
    eprintln!("succeeded: {all:?}");
    // The private temporary files are all gone.
    for &dir in &own {
        assert!(names(fs, dir).iter().all(|n| !n.starts_with(b"tmp")));
    }
    assert_consistent(fs, &[])
}

#[test]
fn four_threads_on_a_memory_engine() {
    let fs = memory();
    let walk = run(&fs);
    assert!(walk.inodes > 5);
}

#[test]
fn four_threads_on_a_disk_engine_then_fsck() {
    let fs = disk_with(no_thread());
    let walk = run(&fs);
    let closed = fs.close();
    let report = assert_fsck_clean(&closed.store);
    assert_eq!(
        (report.inodes, report.directories, report.entries),
        (walk.inodes, walk.directories, walk.entries)
    );
    assert_eq!(report.orphans, 0);
    // And it reopens to the same tree.
    let fs = closed.open();
    assert_consistent(&fs, &[]);
}
