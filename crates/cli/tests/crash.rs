//! kill -9 durability. Each round runs a deterministic sequence of operations in its own
//! directory and SIGKILLs the daemon somewhere in the middle. Operations are checkpointed to
//! the store in groups (delayed logging), so after the crash the store must be fsck-clean and
//! hold the state after some prefix of the operations: one that includes every operation up
//! to the last completed fsync, and at most the acknowledged ones plus the one in flight.
//! Files written with fsync must have their exact content. Rounds share one store, so each
//! recovery must also keep everything the earlier rounds left.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{
    errno, errno_name, incompressible, is_dead_connection, poll, read_tree, renamed_path,
    stats_json, Mounted, TreeNode,
};
use shoal_bench::SplitMix64;

const ROUNDS: u64 = 20;
const OPS_PER_ROUND: usize = 1_500;
/// The kill lands after this many acknowledged operations (seeded per round)...
const KILL_AFTER_OPS: (u64, u64) = (5, 400);
/// ...which a healthy mount reaches in well under a second.
const WORKER_PROGRESS_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Clone, Debug)]
enum Op {
    Mkdir(PathBuf),
    /// Create and write, without fsync: the name must survive, the bytes may not.
    Create(PathBuf, Vec<u8>),
    /// Create, write and fsync: the bytes must survive too.
    CreateSynced(PathBuf, Vec<u8>),
    Rename(PathBuf, PathBuf),
    Unlink(PathBuf),
    Rmdir(PathBuf),
}

impl Op {
    fn describe(&self) -> String {
        match self {
            Op::Create(path, data) => format!("Create({path:?}, {} bytes)", data.len()),
            Op::CreateSynced(path, data) => format!("CreateSynced({path:?}, {} bytes)", data.len()),
            other => format!("{other:?}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir,
    /// `synced`: the content is known to be durable.
    File {
        content: Vec<u8>,
        synced: bool,
    },
}

/// Paths relative to the mount root.
type Model = BTreeMap<PathBuf, Node>;

fn apply(model: &mut Model, op: &Op) {
    match op {
        Op::Mkdir(path) => {
            model.insert(path.clone(), Node::Dir);
        }
        Op::Create(path, content) => {
            model.insert(
                path.clone(),
                Node::File {
                    content: content.clone(),
                    synced: false,
                },
            );
        }
        Op::CreateSynced(path, content) => {
            model.insert(
                path.clone(),
                Node::File {
                    content: content.clone(),
                    synced: true,
                },
            );
        }
        Op::Rename(from, to) => {
            let moved: Vec<PathBuf> = model
                .keys()
                .filter(|p| p.starts_with(from))
                .cloned()
                .collect();
            for old in moved {
                let node = model.remove(&old).unwrap();
                model.insert(renamed_path(&old, from, to), node);
            }
        }
        Op::Unlink(path) | Op::Rmdir(path) => {
            model.remove(path);
        }
    }
}

fn is_empty_dir(model: &Model, dir: &Path) -> bool {
    matches!(model.get(dir), Some(Node::Dir))
        && !model.keys().any(|p| p != dir && p.starts_with(dir))
}

/// The round's operation sequence, generated against a model so every operation is valid:
/// mkdir d{i}; create d{i}/f; move d{i-1}/f to d{i}/g; now and then an fsync'ed file, an
/// unlink, an rmdir, a directory moved into another.
fn plan(round: u64) -> Vec<Op> {
    let mut rng = SplitMix64::new(0xC4A5_0000 + round);
    let base = PathBuf::from(format!("round{round}"));
    let mut ops = vec![Op::Mkdir(base.clone())];
    let mut model = Model::new();
    apply(&mut model, &ops[0]);
    let push = |model: &mut Model, ops: &mut Vec<Op>, op: Op| {
        apply(model, &op);
        ops.push(op);
    };
    let dir = |i: u64| base.join(format!("d{i}"));
    let mut i = 0;
    while ops.len() < OPS_PER_ROUND {
        i += 1;
        push(&mut model, &mut ops, Op::Mkdir(dir(i)));
        let content = text(&mut rng, round, i);
        push(&mut model, &mut ops, Op::Create(dir(i).join("f"), content));
        if model.contains_key(&dir(i - 1).join("f")) {
            push(
                &mut model,
                &mut ops,
                Op::Rename(dir(i - 1).join("f"), dir(i).join("g")),
            );
        }
        if i % 3 == 0 {
            let mut content = vec![0u8; rng.range(1, 70_000) as usize];
            rng.fill_bytes(&mut content);
            push(
                &mut model,
                &mut ops,
                Op::CreateSynced(dir(i).join(format!("s{i}")), content),
            );
        }
        if rng.one_in(4) {
            let files: Vec<PathBuf> = model
                .iter()
                .filter(|(_, n)| matches!(n, Node::File { .. }))
                .map(|(p, _)| p.clone())
                .collect();
            if !files.is_empty() {
                let victim = rng.pick(&files).clone();
                push(&mut model, &mut ops, Op::Unlink(victim));
            }
        }
        if rng.one_in(4) {
            let empty: Vec<PathBuf> = model
                .keys()
                .filter(|p| **p != base && is_empty_dir(&model, p))
                .cloned()
                .collect();
            if !empty.is_empty() {
                let victim = rng.pick(&empty).clone();
                push(&mut model, &mut ops, Op::Rmdir(victim));
            }
        }
        if i >= 3 && rng.one_in(6) && model.contains_key(&dir(i - 2)) {
            push(
                &mut model,
                &mut ops,
                Op::Rename(dir(i - 2), dir(i).join(format!("moved{}", i - 2))),
            );
        }
    }
    ops
}

fn text(rng: &mut SplitMix64, round: u64, i: u64) -> Vec<u8> {
    let lines = rng.below(100) as usize;
    format!("round {round} dir {i}\n")
        .repeat(lines)
        .into_bytes()
}

fn execute(root: &Path, op: &Op) -> io::Result<()> {
    match op {
        Op::Mkdir(path) => fs::create_dir(root.join(path)),
        Op::Create(path, content) => {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(root.join(path))?;
            file.write_all(content)
        }
        Op::CreateSynced(path, content) => {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(root.join(path))?;
            file.write_all(content)?;
            file.sync_all()
        }
        Op::Rename(from, to) => fs::rename(root.join(from), root.join(to)),
        Op::Unlink(path) => fs::remove_file(root.join(path)),
        Op::Rmdir(path) => fs::remove_dir(root.join(path)),
    }
}

/// How the worker stopped early.
struct WorkerFailure {
    error: io::Error,
    /// Whether the kill had been sent when the error came back.
    after_kill: bool,
}

/// Runs `ops` until one fails; `completed` counts the acknowledged ones as they finish.
fn run_worker(
    root: PathBuf,
    ops: Arc<Vec<Op>>,
    completed: Arc<AtomicUsize>,
    killing: Arc<AtomicBool>,
) -> Option<WorkerFailure> {
    for (index, op) in ops.iter().enumerate() {
        if let Err(error) = execute(&root, op) {
            let after_kill = killing.load(Ordering::SeqCst);
            return Some(WorkerFailure { error, after_kill });
        }
        completed.store(index + 1, Ordering::SeqCst);
    }
    None
}

/// The fewest operations a recovery may show: all of them up to the last fsync that
/// completed among the `done` acknowledged ones.
fn durable_prefix(ops: &[Op], done: usize) -> usize {
    ops[..done]
        .iter()
        .rposition(|op| matches!(op, Op::CreateSynced(..)))
        .map_or(0, |last_synced| last_synced + 1)
}

/// What a recovery must hold of a round's operations.
#[derive(Clone, Copy, PartialEq)]
enum Promise {
    /// Everything up to the last completed fsync (operations are staged, then checkpointed).
    Fsynced,
    /// Every acknowledged operation (`checkpoint=0`: each reaches the journal first).
    Acknowledged,
}

/// Checks the tree against `accepted` (earlier rounds) plus the model after a prefix of this
/// round's operations, from the shortest the promise allows up to `done` plus the one in
/// flight; returns this round's model and the length of the prefix that matched.
fn verify_round(
    root: &Path,
    accepted: &Model,
    ops: &[Op],
    done: usize,
    promise: Promise,
) -> (Model, usize) {
    let actual = read_tree(root).expect("read the recovered tree");
    let shortest = match promise {
        Promise::Fsynced => durable_prefix(ops, done),
        Promise::Acknowledged => done,
    };
    let longest = (done + 1).min(ops.len());
    let mut models = Vec::with_capacity(longest + 1);
    models.push(Model::new());
    for (index, op) in ops[..longest].iter().enumerate() {
        let mut model = models[index].clone();
        apply(&mut model, op);
        // The in-flight write was never acknowledged: its name may exist, its bytes are unknown.
        if let (true, Op::CreateSynced(path, content)) = (index == done, op) {
            model.insert(
                path.clone(),
                Node::File {
                    content: content.clone(),
                    synced: false,
                },
            );
        }
        models.push(model);
    }
    let mut reports = Vec::new();
    for length in (shortest..=longest).rev() {
        let round_model = models[length].clone();
        let label = length;
        let mut expected = accepted.clone();
        expected.extend(round_model.clone());
        let problems = compare(&actual, &expected);
        if problems.is_empty() {
            return (round_model, label);
        }
        reports.push(format!(
            "against the first {label} ops: {}",
            problems
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let in_flight = ops
        .get(done)
        .map(Op::describe)
        .unwrap_or_else(|| "none".to_string());
    // The longest prefixes are the likeliest near misses; show those.
    reports.truncate(5);
    panic!("recovered tree matches no prefix of {shortest}..={longest} ops ({done} ops acknowledged, in flight: {in_flight}):\n{}", reports.join("\n"));
}

/// Names and types must match exactly; contents only where they were fsync'ed.
fn compare(actual: &BTreeMap<PathBuf, TreeNode>, expected: &Model) -> Vec<String> {
    let mut problems = Vec::new();
    for (path, node) in expected {
        match (node, actual.get(path)) {
            (_, None) => problems.push(format!("missing {path:?}")),
            (Node::Dir, Some(TreeNode::Dir)) => {}
            (Node::File { content, synced }, Some(TreeNode::File(found))) => {
                if *synced && found != content {
                    problems.push(format!(
                        "fsync'ed {path:?} has {} bytes, wrote {} (or other bytes)",
                        found.len(),
                        content.len()
                    ));
                }
            }
            (_, Some(found)) => problems.push(format!("{path:?} has the wrong type: {found:?}")),
        }
    }
    for path in actual.keys().filter(|p| !expected.contains_key(*p)) {
        problems.push(format!("unexpected {path:?}"));
    }
    problems
}

#[test]
fn kill_dash_nine_leaves_a_prefix_holding_everything_fsynced() {
    crash_rounds(Mounted::new(), ROUNDS, Promise::Fsynced);
}

#[test]
fn without_staging_kill_dash_nine_loses_nothing_acknowledged() {
    crash_rounds(
        Mounted::with_options(&["checkpoint=0"]),
        ROUNDS / 2,
        Promise::Acknowledged,
    );
}

fn crash_rounds(mut m: Mounted, rounds: u64, promise: Promise) {
    let mut accepted = Model::new();
    let mut kills_mid_sequence = 0;
    for round in 0..rounds {
        let ops = Arc::new(plan(round));
        let completed = Arc::new(AtomicUsize::new(0));
        let killing = Arc::new(AtomicBool::new(false));
        let kill_after = SplitMix64::new(round).range(KILL_AFTER_OPS.0, KILL_AFTER_OPS.1) as usize;
        let worker = {
            let (root, ops, completed, killing) = (
                m.mnt.clone(),
                ops.clone(),
                completed.clone(),
                killing.clone(),
            );
            thread::spawn(move || run_worker(root, ops, completed, killing))
        };
        let reached = poll(WORKER_PROGRESS_TIMEOUT, || {
            completed.load(Ordering::SeqCst) >= kill_after || worker.is_finished()
        });
        assert!(reached, "round {round}: the worker did not reach op {kill_after} in {WORKER_PROGRESS_TIMEOUT:?}");
        m.kill_daemon(|| killing.store(true, Ordering::SeqCst));
        let failure = worker.join().expect("worker thread panicked");
        m.detach_dead_mount();
        let done = completed.load(Ordering::SeqCst);
        if let Some(WorkerFailure { error, after_kill }) = &failure {
            let code = errno(error);
            assert!(
                *after_kill,
                "round {round}: op {done} ({}) failed with {error} ({}) while the daemon was alive",
                ops[done].describe(),
                errno_name(code)
            );
            assert!(
                is_dead_connection(code),
                "round {round}: op {done} ({}) failed with {error} ({}) instead of a dead connection",
                ops[done].describe(),
                errno_name(code)
            );
            kills_mid_sequence += 1;
        }

        m.fsck_clean();
        m.mount();
        let (round_model, recovered) = verify_round(&m.mnt, &accepted, &ops, done, promise);
        println!(
            "round {round}: killed after {done} acknowledged ops ({} up to the last fsync); recovered the first {recovered}",
            durable_prefix(&ops, done)
        );
        // Contents not known to be durable stay unchecked in later rounds too.
        accepted.extend(round_model);
    }
    assert!(
        kills_mid_sequence >= rounds / 2,
        "only {kills_mid_sequence} of {rounds} kills landed before the worker finished: the test lost its teeth"
    );
    // And a clean unmount after all those recoveries.
    m.remount();
    verify_round(&m.mnt, &accepted, &[], 0, promise);
    m.finish();
}

/// Opens an unnamed file (O_TMPFILE) in `dir` for writing.
fn open_tmpfile(dir: &Path) -> fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
        .unwrap()
}

/// After a crash the store is consistent by contract, orphans included: two O_TMPFILEs
/// (chunked and inline) and two files unlinked while open, all written and fsynced, are orphans awaiting the next mount, and fsck says the store is
/// clean (exit 0, no hint to repair). The next mount purges them.
#[test]
fn kill_dash_nine_with_open_tmpfiles_and_unlinked_files_leaves_a_clean_store() {
    let mut m = Mounted::new();
    fs::create_dir(m.path("dir")).unwrap();
    let mut unnamed = open_tmpfile(&m.path("dir"));
    unnamed.write_all(&vec![7u8; 200_000]).unwrap();
    unnamed.sync_all().unwrap();
    let mut in_root = open_tmpfile(&m.mnt);
    in_root.write_all(b"small").unwrap();
    in_root.sync_all().unwrap();
    let mut unlinked = fs::File::create(m.path("dir/unlinked")).unwrap();
    unlinked.write_all(&vec![1u8; 300_000]).unwrap();
    fs::remove_file(m.path("dir/unlinked")).unwrap();
    unlinked.sync_all().unwrap();
    let mut small = fs::File::create(m.path("small")).unwrap();
    small.write_all(b"inline").unwrap();
    fs::remove_file(m.path("small")).unwrap();
    small.sync_all().unwrap();
    let before = fsck_orphans_after_kill(&mut m);
    assert_eq!(before, 4, "the four open files are orphans after the crash");
    drop((unnamed, in_root, unlinked, small));
    m.mount();
    assert!(fs::read_dir(m.path("dir")).unwrap().next().is_none());
    let report = m.finish();
    assert!(report.contains(" 0 orphans"), "{report}");
}

/// kill -9 the daemon, detach its mount, and run fsck, which must exit 0 and say the store
/// is clean; the number of orphans it counted.
fn fsck_orphans_after_kill(m: &mut Mounted) -> u64 {
    m.kill_daemon(|| {});
    m.detach_dead_mount();
    let out = common::run(
        std::process::Command::new(common::SHOAL)
            .arg("fsck")
            .arg(&m.store),
        common::FSCK_TIMEOUT,
    );
    assert!(out.success(), "fsck after the crash: {}", out.describe());
    assert!(
        out.stdout.contains("clean") && !out.stdout.contains("--repair"),
        "{}",
        out.describe()
    );
    let orphans = out
        .stdout
        .split(", ")
        .find_map(|part| part.strip_suffix(" orphans"))
        .and_then(|count| count.trim().parse().ok());
    orphans.unwrap_or_else(|| panic!("no orphan count in {}", out.stdout))
}

/// fsyncs that come while a store sync runs wait for the next one on the syncing thread
/// instead of syncing on their request thread (which then serves on): over io_uring (the
/// mount's default where the kernel has it) and over /dev/fuse. Eight writers fsync 40
/// files each; some of their fsyncs come while another's sync runs, and those are counted
/// as queued (an fsync that syncs in place never is). Each fsync is durable when it
/// returns: after kill -9 every file is there, whole.
#[test]
fn fsyncs_during_a_sync_queue_for_the_next_and_survive_kill_dash_nine() {
    fsyncs_queue_during_a_sync(&["commit=60"]);
}

#[test]
fn fsyncs_read_from_dev_fuse_queue_for_the_next_and_survive_kill_dash_nine() {
    fsyncs_queue_during_a_sync(&["uring=off", "threads=2", "commit=60"]);
}

fn fsyncs_queue_during_a_sync(options: &[&str]) {
    const WRITERS: usize = 8;
    const FILES: usize = 40;
    let mut m = Mounted::with_options(options);
    let queued = |m: &Mounted| {
        stats_json(&m.mnt)["queued_fsyncs"]
            .as_u64()
            .expect("queued_fsyncs")
    };
    let before = queued(&m);
    let content =
        |writer: usize, file: usize| incompressible((writer * FILES + file) as u64, 64 << 10);
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let root = m.mnt.clone();
            thread::spawn(move || -> io::Result<()> {
                for file in 0..FILES {
                    let mut f = fs::File::create(root.join(format!("w{writer}-{file}")))?;
                    f.write_all(&content(writer, file))?;
                    f.sync_all()?;
                }
                Ok(())
            })
        })
        .collect();
    for writer in writers {
        writer
            .join()
            .expect("a writer panicked")
            .expect("a writer failed");
    }
    let queued = queued(&m) - before;
    assert!(
        queued > 0,
        "none of {} fsyncs queued for the syncing thread: each synced on its request thread",
        WRITERS * FILES
    );

    m.kill_daemon(|| {});
    m.detach_dead_mount();
    m.mount();
    for writer in 0..WRITERS {
        for file in 0..FILES {
            let path = m.path(format!("w{writer}-{file}"));
            let held =
                fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            assert!(
                held == content(writer, file),
                "{}: not what was fsynced",
                path.display()
            );
        }
    }
    m.umount();
    m.fsck_clean();
}
