//! `shoal stats` and `-o metrics=`: the counters of a live mount match the operations a test
//! performs through syscalls, the JSON and the Prometheus endpoint agree, and commands
//! aimed at something that is not a live shoal mount fail with a clear message.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;

use common::{is_mounted, shoal, shoal_ok, Mounted};
use serde_json::Value;

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

fn stats_json(mnt: &Path) -> Value {
    let out = shoal_ok(&[OsStr::new("stats"), OsStr::new("--json"), mnt.as_os_str()]);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.describe()))
}

fn op<'a>(stats: &'a Value, name: &str) -> &'a Value {
    stats["ops"]
        .as_array()
        .expect("ops array")
        .iter()
        .find(|op| op["op"] == name)
        .unwrap_or_else(|| panic!("no op {name} in {stats}"))
}

fn count(stats: &Value, name: &str) -> u64 {
    op(stats, name)["count"].as_u64().expect("count")
}

fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect("connect to metrics");
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// The value of the sample line `series value` in a Prometheus exposition.
fn sample(exposition: &str, series: &str) -> f64 {
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{exposition}"))
        .parse()
        .expect("a number")
}

/// 10 mkdir, 100 create, 30 unlink, 5 rename, 3 fsync.
fn known_operations(mnt: &Path) {
    for dir in 0..10 {
        fs::create_dir(mnt.join(format!("dir{dir}"))).unwrap();
    }
    for file in 0..100 {
        File::create(mnt.join(format!("dir{}/file{file}", file % 10))).unwrap();
    }
    for file in 0..30 {
        fs::remove_file(mnt.join(format!("dir{}/file{file}", file % 10))).unwrap();
    }
    for file in 30..35 {
        fs::rename(
            mnt.join(format!("dir{}/file{file}", file % 10)),
            mnt.join(format!("dir0/renamed{file}")),
        )
        .unwrap();
    }
    for file in 40..43 {
        let path = mnt.join(format!("dir{}/file{file}", file % 10));
        let mut handle = fs::OpenOptions::new().write(true).open(path).unwrap();
        handle.write_all(b"durable").unwrap();
        handle.sync_all().unwrap();
    }
}

#[test]
fn counters_match_the_operations_performed_and_prometheus_agrees() {
    let port = free_port();
    let metrics = format!("metrics=127.0.0.1:{port}");
    let m = Mounted::with_options(&[&metrics]);
    let before = stats_json(&m.mnt);
    known_operations(&m.mnt);
    let after = stats_json(&m.mnt);

    let delta = |name| count(&after, name) - count(&before, name);
    assert_eq!(delta("mkdir"), 10, "{after}");
    assert_eq!(delta("create"), 100, "{after}");
    assert_eq!(delta("unlink"), 30, "{after}");
    assert_eq!(delta("rename"), 5, "{after}");
    assert_eq!(delta("fsync"), 3, "{after}");
    // The kernel adds lookups and getattrs of its own: at least, not exactly.
    assert!(delta("lookup") >= 1, "{after}");

    let engine = |stats: &Value, field: &str| stats["engine"][field].as_u64().expect(field);
    assert!(engine(&after, "batches") - engine(&before, "batches") >= 145);
    assert!(engine(&after, "log_bytes") > engine(&before, "log_bytes"));
    assert!(engine(&after, "syncs") - engine(&before, "syncs") >= 3);
    assert!(engine(&after, "commits") > engine(&before, "commits"));
    assert!(after["memory"]["rss_bytes"].as_u64().unwrap() > 0);
    assert!(after["memory"]["referenced_inodes"].as_u64().unwrap() > 0);

    let latency = &op(&after, "create")["latency"];
    let field = |name: &str| latency[name].as_u64().expect(name);
    assert!(field("p50_ns") > 0, "{latency}");
    assert!(field("p50_ns") <= field("p99_ns"), "{latency}");
    assert!(field("p99_ns") <= field("p999_ns"), "{latency}");
    assert!(field("p999_ns") <= field("max_ns"), "{latency}");
    assert_eq!(field("count"), count(&after, "create"));

    // Nothing touches the mount between the JSON snapshot and the scrape. Every sample
    // names the store (its uuid, as `shoal info` shows it) and the mountpoint.
    let exposition = scrape(port);
    let labels = mount_labels(&m);
    assert_eq!(
        sample(
            &exposition,
            &format!("shoal_ops_total{{{labels},op=\"create\"}}")
        ),
        count(&after, "create") as f64
    );
    assert_eq!(
        sample(
            &exposition,
            &format!("shoal_op_latency_seconds_count{{{labels},op=\"create\"}}")
        ),
        count(&after, "create") as f64
    );
    assert!(exposition.contains("# TYPE shoal_op_latency_seconds histogram"));
    assert!(sample(&exposition, &format!("shoal_rss_bytes{{{labels}}}")) > 0.0);
    let unlabelled: Vec<&str> = exposition
        .lines()
        .filter(|line| !line.starts_with('#') && !line.contains(&labels))
        .collect();
    assert!(
        unlabelled.is_empty(),
        "samples without the mount's labels: {unlabelled:?}"
    );
    m.finish();
}

/// `uuid="...",mountpoint="..."` of a mount, the uuid read from `shoal info --json`.
fn mount_labels(m: &Mounted) -> String {
    let info = shoal_ok(&[OsStr::new("info"), OsStr::new("--json"), m.mnt.as_os_str()]);
    let info: Value = serde_json::from_str(&info.stdout).expect("info --json");
    let uuid = info["uuid"].as_str().expect("a uuid").to_string();
    assert_eq!(uuid.len(), 36, "{info}");
    format!("uuid=\"{uuid}\",mountpoint=\"{}\"", m.mnt.display())
}

/// The endpoint carries free space and the reserve as gauges (as df and `shoal info`
/// see them), and each quota's use and limits, which follow a `quota set` and writes.
#[test]
fn metrics_carry_free_space_reserve_and_every_quota() {
    let port = free_port();
    let metrics = format!("metrics=127.0.0.1:{port}");
    let m = Mounted::with_options(&[&metrics]);
    let labels = mount_labels(&m);
    for (flag, id, limit) in [("-u", "4242", "--bhard"), ("-g", "4343", "--ihard")] {
        shoal_ok(&[
            OsStr::new("quota"),
            OsStr::new("set"),
            OsStr::new(flag),
            OsStr::new(id),
            OsStr::new(limit),
            OsStr::new("1000000"),
            m.mnt.as_os_str(),
        ]);
    }
    fs::write(m.path("owned"), vec![1u8; 10_000]).unwrap();
    std::os::unix::fs::chown(m.path("owned"), Some(4242), Some(4343)).unwrap();
    let exposition = scrape(port);
    let free = sample(&exposition, &format!("shoal_free_bytes{{{labels}}}"));
    let reserved = sample(&exposition, &format!("shoal_reserved_bytes{{{labels}}}"));
    assert!(free > 0.0 && reserved > 0.0, "{exposition}");
    // df's available space is the same figure, give or take what changed in between.
    let available = shoal_sys::statvfs::device_space(&m.mnt)
        .unwrap()
        .available_bytes as f64;
    assert!(
        (available - free).abs() < 64.0 * 1024.0 * 1024.0,
        "df {available}, metric {free}"
    );
    let user = format!("{labels},kind=\"user\",id=\"4242\"");
    let group = format!("{labels},kind=\"group\",id=\"4343\"");
    let value = |series: String| sample(&exposition, &series);
    assert_eq!(value(format!("shoal_quota_used_bytes{{{user}}}")), 10_000.0);
    assert_eq!(value(format!("shoal_quota_used_inodes{{{group}}}")), 1.0);
    let hard = |family: &str, who: &str| format!("{family}{{{who},limit=\"hard\"}}");
    assert_eq!(value(hard("shoal_quota_limit_bytes", &user)), 1_000_000.0);
    assert_eq!(value(hard("shoal_quota_limit_inodes", &group)), 1_000_000.0);
    assert_eq!(
        value(format!("shoal_quota_limit_bytes{{{user},limit=\"soft\"}}")),
        0.0
    );
    // Ids without a limit are not listed (root owns the root directory).
    assert!(
        !exposition.contains("kind=\"user\",id=\"0\""),
        "{exposition}"
    );
    m.finish();
}

#[test]
fn live_screens_on_a_pipe_are_successive_blocks() {
    let m = Mounted::new();
    fs::write(m.path("one"), b"1").unwrap();
    let out = shoal_ok(&[
        OsStr::new("stats"),
        m.mnt.as_os_str(),
        OsStr::new("--interval"),
        OsStr::new("0.2"),
        OsStr::new("--count"),
        OsStr::new("2"),
    ]);
    assert_eq!(out.stdout.matches("ops/s").count(), 2, "{}", out.describe());
    assert!(
        !out.stdout.contains('\x1b'),
        "no terminal codes on a pipe: {}",
        out.describe()
    );
    assert!(out.stdout.contains("commits/s"), "{}", out.describe());
    m.finish();
}

#[test]
fn json_with_an_interval_streams_one_snapshot_per_line() {
    let m = Mounted::new();
    fs::write(m.path("one"), b"1").unwrap();
    let out = shoal_ok(&[
        OsStr::new("stats"),
        OsStr::new("--json"),
        OsStr::new("--interval"),
        OsStr::new("0.2"),
        OsStr::new("--count"),
        OsStr::new("3"),
        m.mnt.as_os_str(),
    ]);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert_eq!(lines.len(), 3, "{}", out.describe());
    let uptimes: Vec<u64> = lines
        .iter()
        .map(|stats| stats["uptime_ns"].as_u64().expect("uptime_ns"))
        .collect();
    assert!(
        uptimes
            .windows(2)
            .all(|pair| pair[1] >= pair[0] + 150_000_000),
        "one snapshot per interval: {uptimes:?}"
    );
    assert!(count(&lines[2], "create") >= 1, "{}", lines[2]);

    // Without --count the stream runs until the mount goes away, then ends cleanly.
    let mut stream = std::process::Command::new(common::SHOAL)
        .args(["stats", "--json", "--interval", "0.1"])
        .arg(&m.mnt)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn shoal stats");
    std::thread::sleep(std::time::Duration::from_millis(500));
    m.finish();
    let exited = common::poll(std::time::Duration::from_secs(30), || {
        stream.try_wait().expect("try_wait").is_some()
    });
    if !exited {
        let _ = stream.kill();
    }
    let output = stream.wait_with_output().expect("stats output");
    assert!(exited, "the stream outlived its mount");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.lines().count() >= 2, "{stdout}");
    for line in stdout.lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
}

#[test]
fn stats_of_something_else_is_refused_clearly() {
    let dir = common::test_dir();
    let out = shoal(&[
        OsStr::new("stats"),
        OsStr::new("--json"),
        dir.path().as_os_str(),
    ]);
    assert!(!out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("is not a mount point"),
        "{}",
        out.describe()
    );

    let out = shoal(&["stats", "--json", "/proc"]);
    assert!(!out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("is not a shoal mount"),
        "{}",
        out.describe()
    );
}

#[test]
fn bad_or_taken_metrics_addresses_fail_the_mount() {
    let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let taken = format!("metrics=127.0.0.1:{}", taken.local_addr().unwrap().port());
    for (option, message) in [
        ("metrics=localhost:9100", "not an IP address and port"),
        (taken.as_str(), "cannot serve metrics"),
    ] {
        let dir = common::test_dir();
        let (store, mnt) = (dir.path().join("store"), dir.path().join("mnt"));
        fs::create_dir(&mnt).unwrap();
        shoal_ok(&[OsStr::new("mkfs"), store.as_os_str()]);
        let out = shoal(&[
            OsStr::new("mount"),
            store.as_os_str(),
            mnt.as_os_str(),
            OsStr::new("-o"),
            OsStr::new(option),
        ]);
        let _guard = common::MountGuard {
            store: Some(store.clone()),
            mnt: mnt.clone(),
        };
        assert!(!out.success(), "{option}: {}", out.describe());
        assert!(out.stderr.contains(message), "{option}: {}", out.describe());
        assert!(!is_mounted(&mnt), "{option} left a mount");
    }
}

/// What the kernel allows: FUSE over io_uring needs the fuse module's `enable_uring`
/// (`scripts/setup` sets it when it can).
fn kernel_offers_io_uring() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|value| value.trim() == "Y")
}

#[test]
fn requests_come_over_io_uring_when_the_kernel_allows_and_uring_off_opts_out() {
    let expected = if kernel_offers_io_uring() {
        "io_uring"
    } else {
        "/dev/fuse"
    };
    let mut m = Mounted::new();
    fs::write(m.path("f"), b"over the ring").unwrap();
    assert_eq!(fs::read(m.path("f")).unwrap(), b"over the ring");
    let stats = stats_json(&m.mnt);
    assert_eq!(stats["fuse_transport"], expected, "{stats}");
    // Requests were answered on the transport the report names (creates and writes counted).
    assert!(
        count(&stats, "create") >= 1 && count(&stats, "write") >= 1,
        "{stats}"
    );
    m.umount();

    m.set_options(&["uring=off"]);
    m.mount();
    assert_eq!(fs::read(m.path("f")).unwrap(), b"over the ring");
    assert_eq!(stats_json(&m.mnt)["fuse_transport"], "/dev/fuse");
    m.finish();
}

/// Busy-waiting: decided from the machine unless `spin=` and `follow=` are given, and
/// `shoal stats` says which and why.
#[test]
fn busy_waiting_and_its_reason_are_reported() {
    let decided = Mounted::new();
    let stats = stats_json(&decided.mnt);
    let mode = stats["busy_wait"].as_str().unwrap();
    assert!(
        ["spin+follow", "spin", "follow", "off"].contains(&mode),
        "{stats}"
    );
    let reason = stats["busy_wait_reason"].as_str().unwrap();
    assert!(!reason.is_empty() && !reason.contains("given"), "{stats}");
    assert!(
        stats["ring_threads_per_queue"].as_u64().unwrap() <= 4,
        "{stats}"
    );
    decided.finish();
    let m = Mounted::with_options(&["spin=0", "follow=off"]);
    let stats = stats_json(&m.mnt);
    assert_eq!(stats["busy_wait"], "off", "{stats}");
    assert_eq!(
        stats["busy_wait_reason"], "spin= and follow= given",
        "{stats}"
    );
    let m2 = Mounted::with_options(&["spin=500"]);
    let stats = stats_json(&m2.mnt);
    let reason = stats["busy_wait_reason"].as_str().unwrap();
    assert!(reason.starts_with("spin= given; otherwise: "), "{stats}");
    assert!(
        stats["busy_wait"].as_str().unwrap().starts_with("spin"),
        "{stats}"
    );
    let screen = shoal_ok(&[
        OsStr::new("stats"),
        m2.mnt.as_os_str(),
        OsStr::new("--interval"),
        OsStr::new("0.2"),
        OsStr::new("--count"),
        OsStr::new("1"),
    ]);
    let mode = stats["busy_wait"].as_str().unwrap();
    assert!(
        screen
            .stdout
            .contains(&format!("busy-wait {mode}: {reason}")),
        "{}",
        screen.describe()
    );
    m2.finish();
    m.finish();
}
