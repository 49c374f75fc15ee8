//! `shoal bench` end to end: every workload at a tiny size on a tmpfs directory and on a
//! shoal mount, then the JSON, the charts and the Markdown page are checked. The counts are
//! verified by counting the kept sample directories, not by trusting the report. No test
//! asserts a speed.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{run, run_ok, Mounted, SHOAL};
use serde_json::Value;

const BENCH_TIMEOUT: Duration = Duration::from_secs(600);
const WORKLOADS: [&str; 8] = [
    "create",
    "stat",
    "unlink",
    "rmtree",
    "tree",
    "objects",
    "bonnie",
    "quotacheck",
];
const THREADS: usize = 2;
const FILES_PER_THREAD: usize = 50;
const OBJECTS: u64 = 300;

fn ram_dir(prefix: &str) -> tempfile::TempDir {
    let base = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(base)
        .expect("scratch dir")
}

fn files_below(dir: &Path) -> u64 {
    let mut count = 0;
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            count += files_below(&entry.path());
        } else {
            count += 1;
        }
    }
    count
}

fn sample_dir(sample: &Value) -> PathBuf {
    PathBuf::from(sample["dir"].as_str().expect("sample dir"))
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one bench run (minutes) whose report, JSON and charts are all checked here, so it runs once"
)]
fn every_workload_on_tmpfs_and_shoal_with_a_report() {
    let shm = ram_dir("shoal-bench-test.");
    let mounted = Mounted::new();
    let report_dir = ram_dir("shoal-bench-report.");
    let json_file = report_dir.path().join("samples.json");
    let mut cmd = Command::new(SHOAL);
    cmd.arg("bench")
        .arg("--target")
        .arg(shm.path())
        .arg("--target")
        .arg(&mounted.mnt)
        .args(["--runs", "1", "--threads", &THREADS.to_string()])
        .args([
            "--files",
            &FILES_PER_THREAD.to_string(),
            "--tree-files",
            "150",
        ])
        .args([
            "--objects-count",
            &OBJECTS.to_string(),
            "--keep",
            "--external",
        ])
        .arg("--report")
        .arg(report_dir.path())
        .arg("--json")
        .arg(&json_file)
        .args(WORKLOADS);
    let out = run_ok(&mut cmd, BENCH_TIMEOUT);
    assert!(out.stdout.contains("workload"), "{}", out.describe());

    let text = fs::read_to_string(report_dir.path().join("bench.json")).unwrap();
    let report: Value = serde_json::from_str(&text).expect("bench.json is JSON");
    let also: Value = serde_json::from_str(&fs::read_to_string(&json_file).unwrap()).unwrap();
    assert_eq!(report["samples"], also["samples"]);
    assert!(report["environment"]["kernel"]
        .as_str()
        .is_some_and(|k| !k.is_empty()));
    let targets: Vec<String> = report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["label"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(targets.len(), 2);
    assert_eq!(report["targets"][1]["shoal"], Value::Bool(true));
    assert!(report["targets"][1]["mount"]["options"].as_str().is_some());

    let samples = report["samples"].as_array().unwrap();
    for workload in WORKLOADS {
        for target in &targets {
            let sample = samples
                .iter()
                .find(|s| s["workload"] == workload && s["target"] == target.as_str())
                .unwrap_or_else(|| panic!("no {workload} sample on {target}"));
            assert!(
                sample.get("error").is_none(),
                "{workload} on {target}: {sample}"
            );
            let metrics = sample["metrics"].as_array().unwrap();
            assert!(!metrics.is_empty(), "{workload} on {target} has no metrics");
            for metric in metrics {
                let value = metric["value"].as_f64().unwrap();
                // Requests per entry may be zero (a warm listing sends none), and so may
                // the spinners' CPU in a short run (clock ticks are 10 ms).
                let may_be_zero = metric["unit"] == "req/entry"
                    || metric["name"]
                        .as_str()
                        .is_some_and(|name| name.ends_with("spin CPU"));
                assert!(
                    value.is_finite() && (value > 0.0 || may_be_zero && value == 0.0),
                    "{workload} on {target}: {metric}"
                );
            }
        }
    }
    for sample in samples {
        let dir = sample_dir(sample);
        match sample["workload"].as_str().unwrap() {
            "create" => {
                for thread in 0..THREADS {
                    let files = files_below(&dir.join(format!("create/t{thread}")));
                    assert_eq!(files, FILES_PER_THREAD as u64, "{}", dir.display());
                }
            }
            "unlink" => assert_eq!(files_below(&dir.join("unlink")), 0),
            "objects" => {
                assert_eq!(files_below(&dir.join("objects")), OBJECTS);
                assert_eq!(files_below(&dir.join("tmp")), 0);
                let curve = sample["curve"].as_array().expect("objects curve");
                assert!(curve.len() >= 10, "{} curve points", curve.len());
                let last = curve.last().unwrap();
                assert_eq!(last["files"].as_u64(), Some(OBJECTS));
            }
            "tree" => {
                let entries = sample["counts"]["entries"].as_u64().unwrap();
                assert!(entries > 150, "tree has {entries} entries");
                assert_eq!(sample["counts"]["entries_copied"].as_u64(), Some(entries));
                // On shoal the same tarball also goes in through `shoal import`.
                let imported = sample["counts"]["entries_imported"].as_u64();
                if sample["target"] == targets[1].as_str() {
                    assert_eq!(imported, Some(entries), "{sample}");
                } else {
                    assert_eq!(imported, None);
                }
            }
            "quotacheck" => {
                assert!(sample["counts"]["inodes"].as_u64().unwrap() > 150);
                let notes = sample["notes"].as_array().unwrap();
                assert!(notes
                    .iter()
                    .any(|n| n.as_str().unwrap().starts_with("method: ")));
            }
            _ => {}
        }
    }

    let summary = report["summary"].as_array().unwrap();
    assert!(summary.iter().any(
        |row| row["target"] == targets[1].as_str() && row["ratio_to_first"].as_f64().is_some()
    ));

    let page = fs::read_to_string(report_dir.path().join("BENCHMARKS.md")).unwrap();
    assert!(
        page.contains("shoal bench"),
        "the command line is at the top"
    );
    let charts: Vec<PathBuf> = fs::read_dir(report_dir.path().join("charts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(charts
        .iter()
        .any(|c| c.ends_with("objects-rate-over-time.svg")));
    for workload in WORKLOADS {
        assert!(
            page.contains(&format!("## {workload}")),
            "section {workload}"
        );
        assert!(
            charts.iter().any(|c| c
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{workload}-"))),
            "a chart for {workload}"
        );
    }
    for chart in &charts {
        let name = chart.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            page.contains(&format!("(charts/{name})")),
            "page embeds {name}"
        );
        let svg = fs::read_to_string(chart).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{name}"
        );
    }
    mounted.finish();
}

/// reference-memfs is a workspace binary built next to shoal (`cargo build --release
/// --workspace`, as scripts/test does).
fn reference_memfs() -> PathBuf {
    let path = Path::new(SHOAL).with_file_name("reference-memfs");
    assert!(
        path.is_file(),
        "{} is missing: cargo build --release -p reference-memfs",
        path.display()
    );
    path
}

#[test]
fn fresh_made_filesystems_per_sample_including_reference_memfs() {
    // --make needs a scratch directory on a disk, not tmpfs.
    let scratch = tempfile::Builder::new()
        .prefix("shoal-bench-make.")
        .tempdir_in("/var/tmp")
        .expect("scratch dir");
    let report_dir = ram_dir("shoal-bench-fresh.");
    let json_file = report_dir.path().join("samples.json");
    let mut cmd = Command::new(SHOAL);
    cmd.arg("bench")
        .args([
            "--make",
            "shoal-memory,reference-memfs",
            "--fresh",
            "--keep",
        ])
        .arg("--memfs")
        .arg(reference_memfs())
        .arg("--scratch")
        .arg(scratch.path())
        .args(["--runs", "2", "--threads", "1", "--files", "30"])
        .arg("--json")
        .arg(&json_file)
        .args(["create", "unlink"]);
    let out = run_ok(&mut cmd, BENCH_TIMEOUT);
    let report: Value = serde_json::from_str(&fs::read_to_string(&json_file).unwrap()).unwrap();
    let labels: Vec<&str> = report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["shoal-memory", "reference-memfs"]);
    let fstype = report["targets"][1]["mount"]["fstype"]
        .as_str()
        .unwrap_or_default();
    assert!(
        fstype.starts_with("fuse"),
        "reference-memfs mounted as {fstype}"
    );
    let samples = report["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2 * 2 * 2, "{}", out.describe());
    for sample in samples {
        assert!(sample.get("error").is_none(), "{sample}");
        // --keep leaves every sample's files behind, so only a new filesystem is empty.
        assert_eq!(
            sample["counts"]["target entries before"].as_u64(),
            Some(0),
            "not a fresh filesystem: {sample}"
        );
        if sample["workload"] == "create" {
            assert_eq!(
                sample["counts"]["files_thread_0"].as_u64(),
                Some(30),
                "{sample}"
            );
        }
    }
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let scratch_path = scratch.path().to_str().unwrap();
    assert!(!mounts.contains(scratch_path), "left mounted:\n{mounts}");
    assert_eq!(
        fs::read_dir(scratch.path()).unwrap().count(),
        0,
        "everything made is torn down"
    );
}

#[test]
fn bad_input_is_refused_with_a_message() {
    let dir = ram_dir("shoal-bench-bad.");
    let target = dir.path().to_str().unwrap().to_string();
    let cases: [&[&str]; 6] = [
        &["bench", "--target", &target, "nosuchworkload"],
        &["bench", "--target", "/nonexistent/shoal-bench"],
        &["bench", "--make", "zfs"],
        &[
            "bench",
            "--make",
            "reference-memfs",
            "--memfs",
            "/nonexistent/reference-memfs",
        ],
        &["bench"],
        &["bench", "--target", &target, "--size", "huge"],
    ];
    for args in cases {
        let out = run(Command::new(SHOAL).args(args), BENCH_TIMEOUT);
        assert!(!out.success(), "{}", out.describe());
        assert!(out.stderr.starts_with("shoal: "), "{}", out.describe());
    }
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing left behind"
    );
}

/// `churn` (run by name only) fills a live set, overwrites and deletes for a fixed time,
/// and reports a space-amplification curve: live bytes against used bytes, sampled over
/// the run, in the JSON and as a table on the Markdown page. Used bytes of a shoal mount,
/// given or made, are its store's allocated blocks. (Not on tmpfs: /dev/shm is shared,
/// and others' files come and go in its `df`.)
#[test]
fn churn_reports_a_space_amplification_curve() {
    let mounted = Mounted::new();
    let scratch = common::test_dir();
    let report_dir = ram_dir("shoal-bench-churn-report.");
    let mut cmd = Command::new(SHOAL);
    cmd.arg("bench")
        .arg("--target")
        .arg(&mounted.mnt)
        .args(["--make", "shoal", "--scratch"])
        .arg(scratch.path())
        .args(["--runs", "1", "--threads", "2"])
        .args(["--churn-objects", "80", "--churn-seconds", "3"])
        .arg("--report")
        .arg(report_dir.path())
        .arg("churn");
    let out = run_ok(&mut cmd, BENCH_TIMEOUT);
    let text = fs::read_to_string(report_dir.path().join("bench.json")).unwrap();
    let report: Value = serde_json::from_str(&text).unwrap();
    let samples = report["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2, "{}", out.describe());
    for sample in samples {
        assert!(sample.get("error").is_none(), "{sample}");
        let curve = sample["space_curve"].as_array().expect("a space curve");
        let last = curve.last().expect("a point");
        assert_eq!(last["phase"], "churn", "{sample}");
        assert!(
            last["elapsed_ms"].as_f64().unwrap() >= 3000.0,
            "it churned for the time given: {sample}"
        );
        for point in curve {
            let live = point["live_bytes"].as_u64().unwrap();
            let used = point["used_bytes"].as_u64().unwrap();
            let amplification = point["amplification"].as_f64().unwrap();
            assert!(live > 0 && used > 0, "{point}");
            assert!(
                (amplification - used as f64 / live as f64).abs() < 1e-6,
                "{point}"
            );
        }
        assert!(sample["counts"]["churn_operations"].as_u64().unwrap() > 0);
    }
    let notes = samples
        .iter()
        .flat_map(|sample| sample["notes"].as_array().unwrap())
        .map(|note| note.as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        notes.matches("allocated blocks under").count(),
        2,
        "{notes}"
    );
    let page = fs::read_to_string(report_dir.path().join("BENCHMARKS.md")).unwrap();
    assert!(
        page.contains("## churn") && page.matches("Space amplification on").count() == 2,
        "{page}"
    );
    // Not in the default set: it runs for a fixed time.
    let help = run_ok(Command::new(SHOAL).args(["bench", "--help"]), BENCH_TIMEOUT);
    assert!(help.stdout.contains("all but churn"), "{}", help.describe());
    mounted.finish();
}

/// The workloads run by name that answer one question each: `bigdir` (one directory grown
/// in ten timed steps, then listed, sampled with stat and removed), `store-bytes` (bytes
/// per empty file, and on a `--make shoal` store the compacted figure, measured with the
/// store unmounted and then mounted again) and `quota` (creates with limits enforced and
/// without, the limits removed afterwards); `quotacheck` checks the counters online and
/// offline on that store. The target must still be served by a daemon after the offline
/// steps, and every sample must pass.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one bench run on a made store, its rows checked in turn"
)]
fn bigdir_store_bytes_and_quota_with_offline_steps_on_a_made_store() {
    let scratch = tempfile::Builder::new()
        .prefix("shoal-bench-offline.")
        .tempdir_in("/var/tmp")
        .expect("scratch dir");
    let report_dir = ram_dir("shoal-bench-offline-report.");
    let json_file = report_dir.path().join("samples.json");
    let files = 240;
    let mut cmd = Command::new(SHOAL);
    cmd.arg("bench")
        .args(["--make", "shoal", "--keep"])
        .arg("--scratch")
        .arg(scratch.path())
        .args([
            "--runs",
            "1",
            "--threads",
            "2",
            "--files",
            &files.to_string(),
        ])
        .args(["--tree-files", "150"])
        .arg("--json")
        .arg(&json_file)
        .args(["store-bytes", "bigdir", "quota", "quotacheck"]);
    let out = run_ok(&mut cmd, BENCH_TIMEOUT);
    let report: Value = serde_json::from_str(&fs::read_to_string(&json_file).unwrap()).unwrap();
    let samples = report["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 4, "{}", out.describe());
    let metric = |sample: &Value, name: &str| {
        sample["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .and_then(|m| m["value"].as_f64())
            .unwrap_or_else(|| panic!("no metric {name}: {sample}"))
    };
    for sample in samples {
        assert!(sample.get("error").is_none(), "{sample}");
        match sample["workload"].as_str().unwrap() {
            "store-bytes" => {
                assert_eq!(sample["counts"]["files"].as_u64(), Some(files), "{sample}");
                assert!(metric(sample, "metadata bytes per file, compacted") > 0.0);
                assert!(metric(sample, "store bytes per file, with the journal") > 0.0);
            }
            "bigdir" => {
                assert_eq!(sample["counts"]["files"].as_u64(), Some(files), "{sample}");
                assert_eq!(sample["counts"]["listed"].as_u64(), Some(files), "{sample}");
                assert_eq!(sample["counts"]["stated"].as_u64(), Some(files), "{sample}");
                for step in 1..=10 {
                    metric(sample, &format!("create to {} rate", step * files / 10));
                }
                assert!(metric(sample, "rm -rf rate") > 0.0);
                assert_eq!(sample["counts"]["left"].as_u64(), Some(0), "{sample}");
            }
            "quota" => {
                assert!(metric(sample, "create, no limits rate") > 0.0);
                assert!(metric(sample, "create, limits enforced rate") > 0.0);
                assert!(metric(sample, "limits enforced / none") > 0.0);
                for half in ["create, no limits", "create, limits enforced"] {
                    let found = sample["counts"][format!("files {half}")].as_u64();
                    assert_eq!(found, Some(2 * files), "{sample}");
                }
            }
            "quotacheck" => {
                assert!(metric(sample, "fsck --counters online rate") > 0.0);
                assert!(metric(sample, "fsck --counters offline rate") > 0.0);
                assert!(metric(sample, "usage per user, offline (opens the store)") > 0.0);
            }
            other => panic!("unexpected workload {other}"),
        }
    }
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let scratch_path = scratch.path().to_str().unwrap();
    assert!(!mounts.contains(scratch_path), "left mounted:\n{mounts}");
}

/// The fast path library, built next to shoal (`cargo build --release --workspace`, as
/// scripts/test does).
fn preload_library() -> PathBuf {
    let path = Path::new(SHOAL).with_file_name("libshoal_preload.so");
    assert!(
        path.is_file(),
        "{} is missing: cargo build --release -p shoal-preload",
        path.display()
    );
    path
}

/// `--make shoal,shoal-run`: two fresh shoal mounts made alike, the second measured
/// through the fast path library, its tools preloaded and the bench's own creates and
/// unlinks done in a preloaded worker. Its column must be there with sane numbers, its
/// daemon must have served the timed sections on the fast path, and the kernel-path
/// target's must have served none: if the library is silently not used, this fails.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one bench run through shoal run, its rows and the daemon's counters checked in turn"
)]
fn shoal_run_target_goes_through_the_fast_path() {
    let library = preload_library();
    let scratch = tempfile::Builder::new()
        .prefix("shoal-bench-run.")
        .tempdir_in("/var/tmp")
        .expect("scratch dir");
    let report_dir = ram_dir("shoal-bench-run-report.");
    let json_file = report_dir.path().join("samples.json");
    let files: u64 = 200;
    let workloads = ["create", "unlink", "tree", "git"];
    let mut cmd = Command::new(SHOAL);
    cmd.arg("bench")
        .args(["--make", "shoal,shoal-run", "--scratch"])
        .arg(scratch.path())
        .args([
            "--runs",
            "1",
            "--threads",
            "1",
            "--files",
            &files.to_string(),
        ])
        .args(["--tree-files", "150", "--json"])
        .arg(&json_file)
        .args(workloads);
    let out = run_ok(&mut cmd, BENCH_TIMEOUT);
    let report: Value = serde_json::from_str(&fs::read_to_string(&json_file).unwrap()).unwrap();
    let targets = report["targets"].as_array().unwrap();
    let labels: Vec<&str> = targets
        .iter()
        .map(|t| t["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["shoal", "shoal-run"]);
    assert!(targets[0].get("preload").is_none(), "{}", targets[0]);
    let preloaded = PathBuf::from(targets[1]["preload"].as_str().expect("preload"));
    assert_eq!(
        fs::canonicalize(preloaded).unwrap(),
        fs::canonicalize(&library).unwrap()
    );
    let samples = report["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2 * workloads.len(), "{}", out.describe());
    for sample in samples {
        assert!(sample.get("error").is_none(), "{sample}");
        for metric in sample["metrics"].as_array().unwrap() {
            let value = metric["value"].as_f64().unwrap();
            // A target on the fast path may send the kernel no request at all, and
            // spinners may burn nothing in a short run (clock ticks are 10 ms).
            let may_be_zero = metric["unit"] == "req/entry"
                || metric["name"]
                    .as_str()
                    .is_some_and(|name| name.ends_with("spin CPU"));
            assert!(
                value.is_finite() && (value > 0.0 || may_be_zero && value == 0.0),
                "{metric} in {sample}"
            );
        }
        let served = sample["counts"]["fastpath served"]
            .as_u64()
            .unwrap_or_else(|| panic!("no fast-path count: {sample}"));
        let workload = sample["workload"].as_str().unwrap();
        if sample["target"] == "shoal" {
            assert_eq!(
                served, 0,
                "the kernel-path target is not preloaded: {sample}"
            );
        } else if matches!(workload, "create" | "unlink") {
            // Every create and every unlink is at least one request on the fast path.
            assert!(served >= files, "{workload}: {served} served: {sample}");
        } else {
            assert!(served > 0, "{workload} on the fast path: {sample}");
        }
        match workload {
            "create" => assert_eq!(sample["counts"]["files_thread_0"].as_u64(), Some(files)),
            "unlink" => assert_eq!(sample["counts"]["files_left"].as_u64(), Some(0)),
            "tree" => {
                let entries = sample["counts"]["entries"].as_u64().unwrap();
                assert!(entries > 150, "{sample}");
                assert_eq!(sample["counts"]["entries_copied"].as_u64(), Some(entries));
            }
            "git" => {
                assert!(sample["counts"]["entries"].as_u64().unwrap() > 150);
                for count in ["status_changes", "status_changes_again"] {
                    assert_eq!(
                        sample["counts"][count].as_u64(),
                        Some(0),
                        "a fresh clone is clean: {sample}"
                    );
                }
            }
            other => panic!("unexpected workload {other}"),
        }
    }
    let summary = report["summary"].as_array().unwrap();
    for metric in [
        "create rate",
        "tar x + sync",
        "git clone",
        "git status",
        "git status again",
        "git fsck",
    ] {
        assert!(
            summary.iter().any(|row| row["target"] == "shoal-run"
                && row["metric"] == metric
                && row["ratio_to_first"].as_f64().is_some()),
            "no shoal-run row for {metric}"
        );
    }
    assert!(out.stdout.contains("shoal-run"), "{}", out.describe());
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let scratch_path = scratch.path().to_str().unwrap();
    assert!(!mounts.contains(scratch_path), "left mounted:\n{mounts}");

    // Without its library the target is refused before anything is made.
    let out = run(
        Command::new(SHOAL)
            .args(["bench", "--make", "shoal-run", "--scratch"])
            .arg(scratch.path())
            .env("SHOAL_PRELOAD", "/nonexistent/libshoal_preload.so"),
        BENCH_TIMEOUT,
    );
    assert!(!out.success(), "{}", out.describe());
    assert!(
        out.stderr.starts_with("shoal: ") && out.stderr.contains("fast path library"),
        "{}",
        out.describe()
    );
    assert_eq!(fs::read_dir(scratch.path()).unwrap().count(), 0);
}
