//! `shoal stats MOUNT`: a live mount's statistics, from its daemon's control socket.
//! Every second a terse screen of rates over the last interval (like `hammer iostats` or
//! collectl over /proc/fs/xfs/stat); `--json` prints one snapshot for scripts, or with
//! `--interval`/`--count` one snapshot per line for the curves of a long benchmark.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::control::{self, ControlRequest};
use crate::mounts;
use crate::stats_report::{
    StatsReport, DAEMON_METRICS, ENGINE_HISTOGRAMS, ENGINE_METRICS, MEMORY_METRICS,
};
use shoal_engine::metric::{Kind, Metric, Unit};
use shoal_engine::STORE_METRICS;

pub struct StatsArgs {
    pub json: bool,
    /// With `json`: print a snapshot every interval instead of one.
    pub stream: bool,
    pub interval: Duration,
    /// Screens to print; `None`: until interrupted.
    pub count: Option<u64>,
    /// Ask for jemalloc's heap figures too (`ControlRequest::HeapStats`).
    pub heap: bool,
}

pub fn run(mountpoint: &Path, args: &StatsArgs) -> Result<ExitCode> {
    let daemon = find_daemon(mountpoint)?;
    let request = if args.heap {
        ControlRequest::HeapStats
    } else {
        ControlRequest::Stats
    };
    let first = fetch(daemon, &request)?;
    if args.json {
        return json_lines(mountpoint, daemon, &request, first, args);
    }
    let terminal = std::io::stdout().is_terminal();
    let mut previous = first;
    let mut shown = 0;
    while args.count.is_none_or(|count| shown < count) {
        std::thread::sleep(args.interval);
        let current = fetch(daemon, &request)?;
        let mut screen = String::new();
        if terminal {
            // Home and clear: redraw in place, like top.
            screen.push_str("\x1b[H\x1b[2J");
        } else if shown > 0 {
            screen.push('\n');
        }
        screen.push_str(&render(mountpoint, &previous, &current));
        let mut stdout = std::io::stdout().lock();
        // A closed pipe (`shoal stats MNT | head`) ends the command quietly.
        if stdout
            .write_all(screen.as_bytes())
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
        previous = current;
        shown += 1;
    }
    Ok(ExitCode::SUCCESS)
}

/// One snapshot per line (scripts pipe it to jq): the first at once, then one every interval
/// while streaming. A stream ends quietly when its reader goes (`| head`) or the mount does.
fn json_lines(
    mountpoint: &Path,
    daemon: u32,
    request: &ControlRequest,
    first: StatsReport,
    args: &StatsArgs,
) -> Result<ExitCode> {
    let mut report = first;
    let mut printed = 0;
    loop {
        let line = serde_json::to_string(&report)?;
        let mut stdout = std::io::stdout().lock();
        if writeln!(stdout, "{line}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
        printed += 1;
        let done = args.count.is_some_and(|count| printed >= count);
        if !args.stream || done {
            break;
        }
        std::thread::sleep(args.interval);
        report = match fetch(daemon, request) {
            Ok(report) => report,
            Err(error) if find_daemon(mountpoint).is_err() => {
                eprintln!("shoal stats: {} is gone: {error:#}", mountpoint.display());
                break;
            }
            Err(error) => return Err(error),
        };
    }
    Ok(ExitCode::SUCCESS)
}

/// The pid of the daemon serving `mountpoint`, or why there is none.
pub fn find_daemon(mountpoint: &Path) -> Result<u32> {
    let mountpoint = mounts::shoal_mount_at(mountpoint)?;
    match mounts::daemon_pids(&mountpoint).as_slice() {
        [] => bail!(
            "no shoal daemon serves {} (did it die? `shoal umount` it)",
            mountpoint.display()
        ),
        // The newest: a `shoal mount` parent may still be exiting next to its daemon.
        pids => Ok(pids.iter().copied().max().unwrap_or_default()),
    }
}

/// The statistics of the daemon serving `mountpoint`, once.
pub fn live_report(mountpoint: &Path) -> Result<StatsReport> {
    fetch(find_daemon(mountpoint)?, &ControlRequest::Stats)
}

fn fetch(daemon: u32, request: &ControlRequest) -> Result<StatsReport> {
    let value = control::request(daemon, request)?;
    serde_json::from_value(value).context("the daemon's statistics are unreadable")
}

/// One screen: rates and latencies over the interval between two reports. Below the
/// request table, one section per metric table (`stats_report`), every metric of it by
/// its JSON name: a counter as its rate over the interval (`name/s`), a gauge as it is,
/// each in its table's unit made short.
pub fn render(mountpoint: &Path, previous: &StatsReport, current: &StatsReport) -> String {
    let restarted =
        current.daemon_pid != previous.daemon_pid || current.uptime_ns < previous.uptime_ns;
    let empty = StatsReport::default();
    let previous = if restarted { &empty } else { previous };
    let interval_s = (current.uptime_ns.saturating_sub(previous.uptime_ns) as f64 / 1e9).max(1e-3);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "shoal stats {}  over {}  interval {:.1}s",
        mountpoint.display(),
        current.fuse_transport,
        interval_s
    );
    let _ = writeln!(
        out,
        "busy-wait {}: {}",
        current.busy_wait, current.busy_wait_reason
    );
    render_ops(&mut out, previous, current, interval_s);
    let (engine, was) = (&current.engine, &previous.engine);
    let mut figures = table_figures(ENGINE_METRICS, engine, was, interval_s);
    for histogram in ENGINE_HISTOGRAMS {
        let interval = (histogram.read)(engine)
            .histogram()
            .since(&(histogram.read)(was).histogram());
        let p99 = match interval.count {
            0 => "-".to_string(),
            _ => duration(interval.quantile(0.99)),
        };
        figures.push(format!("{} p99 {p99}", histogram.field));
    }
    section(&mut out, "engine", &figures);
    if let Some(last) = &engine.last_write_error {
        let _ = writeln!(
            out,
            "errors  {} background write failures (the next fsync returns them); last: {last}",
            engine.write_errors
        );
    }
    let (store, was) = (&current.store, &previous.store);
    let mut figures = table_figures(STORE_METRICS, store, was, interval_s);
    let hits = store.block_cache_hits.saturating_sub(was.block_cache_hits);
    let misses = store
        .block_cache_misses
        .saturating_sub(was.block_cache_misses);
    figures.push(match hits + misses {
        0 => "cache_hit_rate -".to_string(),
        loads => format!("cache_hit_rate {:.1}%", hits as f64 * 100.0 / loads as f64),
    });
    section(&mut out, "store", &figures);
    let memory = &current.memory;
    let mut figures = table_figures(MEMORY_METRICS, memory, &previous.memory, interval_s);
    if let (Some(used), Some(free)) = (memory.heap_in_use_bytes, memory.heap_free_bytes) {
        figures.push(format!("heap_in_use_bytes {}", bytes(used)));
        figures.push(format!("heap_free_bytes {}", bytes(free)));
    }
    section(&mut out, "memory", &figures);
    let figures = table_figures(DAEMON_METRICS, current, previous, interval_s);
    section(&mut out, "daemon", &figures);
    render_fast_path(&mut out, previous, current);
    out
}

/// Fast-path requests of the interval, per kind with any: served / failed / fell back.
fn render_fast_path(out: &mut String, previous: &StatsReport, current: &StatsReport) {
    let figures: Vec<String> = current
        .fastpath
        .iter()
        .filter_map(|kind| {
            let was = previous.fastpath.iter().find(|p| p.kind == kind.kind);
            let delta = |now: u64, then: Option<u64>| now.saturating_sub(then.unwrap_or(0));
            let served = delta(kind.served, was.map(|w| w.served));
            let failed = delta(kind.failed, was.map(|w| w.failed));
            let fell_back = delta(kind.fell_back, was.map(|w| w.fell_back));
            (served + failed + fell_back > 0)
                .then(|| format!("{} {served}/{failed}/{fell_back}", kind.kind))
        })
        .collect();
    if !figures.is_empty() {
        section(out, "fast path (served/failed/fell back)", &figures);
    }
    let reasons: Vec<String> = current
        .fastpath_fallbacks
        .iter()
        .filter_map(|(reason, count)| {
            let was = previous
                .fastpath_fallbacks
                .iter()
                .find(|(r, _)| r == reason)
                .map_or(0, |(_, c)| *c);
            let delta = count.saturating_sub(was);
            (delta > 0).then(|| format!("{reason} {delta}"))
        })
        .collect();
    if !reasons.is_empty() {
        section(out, "fell back because", &reasons);
    }
}

/// The request table: the requests that arrived in the interval, their rate and latency.
fn render_ops(out: &mut String, previous: &StatsReport, current: &StatsReport, interval_s: f64) {
    let _ = writeln!(
        out,
        "{:<12}{:>10}{:>12}{:>9}{:>9}{:>9}{:>9}",
        "op", "ops/s", "total", "p50", "p99", "p99.9", "max"
    );
    for op in &current.ops {
        let before = previous.op(&op.op);
        let then = before.map_or(0, |before| before.count);
        if op.count == then {
            continue;
        }
        let interval = match before {
            Some(before) => op.latency.histogram().since(&before.latency.histogram()),
            None => op.latency.histogram(),
        };
        let _ = writeln!(
            out,
            "{:<12}{:>10.0}{:>12}{:>9}{:>9}{:>9}{:>9}",
            op.op,
            op.count.saturating_sub(then) as f64 / interval_s,
            op.count,
            duration(interval.quantile(0.5)),
            duration(interval.quantile(0.99)),
            duration(interval.quantile(0.999)),
            duration(interval.max_ns),
        );
    }
}

/// Every metric of `table` as `name value`: a counter as its rate over the interval, a
/// gauge as it is now.
fn table_figures<T>(table: &[Metric<T>], now: &T, then: &T, interval_s: f64) -> Vec<String> {
    table
        .iter()
        .map(|metric| {
            let value = (metric.read)(now);
            match metric.kind {
                Kind::Counter => {
                    let rate = value.saturating_sub((metric.read)(then)) as f64 / interval_s;
                    format!("{}/s {}", metric.field, short(metric.unit, rate))
                }
                Kind::Gauge => format!("{} {}", metric.field, short(metric.unit, value as f64)),
            }
        })
        .collect()
}

/// A value in `unit` as a short human figure.
fn short(unit: Unit, value: f64) -> String {
    match unit {
        Unit::Count if value.fract() == 0.0 || value >= 10.0 => format!("{value:.0}"),
        Unit::Count => format!("{value:.1}"),
        Unit::Bytes => bytes(value as u64),
        Unit::Nanoseconds => duration(value as u64),
        Unit::Microseconds => duration((value * 1e3) as u64),
    }
}

/// Width a section's lines are wrapped at.
const SCREEN_COLUMNS: usize = 100;

/// `figures` under a section label, wrapped at `SCREEN_COLUMNS`.
fn section(out: &mut String, label: &str, figures: &[String]) {
    let indent = 8;
    let mut line = format!("{label:<indent$}");
    let mut empty = true;
    for figure in figures {
        if !empty && line.len() + 2 + figure.len() > SCREEN_COLUMNS {
            let _ = writeln!(out, "{line}");
            line = " ".repeat(indent);
            empty = true;
        }
        if !empty {
            line.push_str("  ");
        }
        line.push_str(figure);
        empty = false;
    }
    let _ = writeln!(out, "{line}");
}

/// Nanoseconds as a short human figure: 850ns, 42us, 3.1ms, 2.0s.
fn duration(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..1_000_000 => format!("{}us", ns / 1_000),
        1_000_000..1_000_000_000 => format!("{:.1}ms", ns as f64 / 1e6),
        _ => format!("{:.1}s", ns as f64 / 1e9),
    }
}

fn bytes(count: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = count as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{count}B")
    } else {
        format!("{value:.1}{}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats_report::{LatencyReport, OpReport};
    use shoal_engine::histogram::Histogram;

    #[test]
    fn a_screen_shows_interval_rates_of_active_ops_only() {
        let histogram = Histogram::default();
        histogram.record_ns(10_000);
        let mut previous = StatsReport {
            daemon_pid: 7,
            uptime_ns: 1_000_000_000,
            ..StatsReport::default()
        };
        previous.ops.push(OpReport {
            op: "create".into(),
            count: 1,
            latency: LatencyReport::from_snapshot(&histogram.snapshot()),
        });
        previous.ops.push(OpReport {
            op: "rmdir".into(),
            ..OpReport::default()
        });
        let mut current = previous.clone();
        current.uptime_ns = 3_000_000_000;
        for _ in 0..200 {
            histogram.record_ns(3_000_000);
        }
        current.ops[0] = OpReport {
            op: "create".into(),
            count: 201,
            latency: LatencyReport::from_snapshot(&histogram.snapshot()),
        };
        let screen = render(Path::new("/mnt"), &previous, &current);
        let create = screen
            .lines()
            .find(|line| line.starts_with("create"))
            .expect(&screen);
        let columns: Vec<&str> = create.split_whitespace().collect();
        assert_eq!(columns[1], "100", "{screen}");
        assert_eq!(columns[2], "201");
        // The interval held only 3 ms requests (the 10 µs one was before it).
        assert_eq!(columns[3], "3.0ms", "{screen}");
        assert!(!screen.contains("rmdir"));
    }

    #[test]
    fn the_screen_shows_every_metric_of_every_table() {
        let mut report = StatsReport {
            daemon_pid: 7,
            uptime_ns: 2_000_000_000,
            ..StatsReport::default()
        };
        report.engine.last_write_error = Some("EIO".into());
        report.memory.heap_in_use_bytes = Some(1 << 20);
        report.memory.heap_free_bytes = Some(1 << 10);
        let screen = render(Path::new("/mnt"), &StatsReport::default(), &report);
        let words: Vec<&str> = screen
            .split_whitespace()
            .map(|word| word.trim_end_matches("/s"))
            .collect();
        let mut fields: Vec<&str> = ENGINE_METRICS.iter().map(|m| m.field).collect();
        fields.extend(ENGINE_HISTOGRAMS.iter().map(|h| h.field));
        fields.extend(STORE_METRICS.iter().map(|m| m.field));
        fields.extend(MEMORY_METRICS.iter().map(|m| m.field));
        fields.extend(DAEMON_METRICS.iter().map(|m| m.field));
        for field in fields {
            assert_eq!(
                words.iter().filter(|word| **word == field).count(),
                1,
                "{field} once on the screen:\n{screen}"
            );
        }
        assert!(screen.contains("heap_in_use_bytes 1.0MiB"), "{screen}");
        assert!(screen.contains("last: EIO"), "{screen}");
        assert!(
            screen.lines().all(|line| line.len() <= SCREEN_COLUMNS),
            "{screen}"
        );
    }

    #[test]
    fn counters_show_as_rates_and_gauges_as_they_are_in_short_units() {
        let previous = StatsReport {
            daemon_pid: 7,
            uptime_ns: 1_000_000_000,
            ..StatsReport::default()
        };
        let mut current = previous.clone();
        current.uptime_ns = 3_000_000_000;
        current.engine.log_bytes = 4 << 20;
        current.engine.commits = 5;
        current.store.staged_bytes = 3 << 20;
        current.memory.heap_trim_max_ns = 3_100_000;
        let screen = render(Path::new("/mnt"), &previous, &current);
        assert!(screen.contains("log_bytes/s 2.0MiB"), "{screen}");
        assert!(screen.contains("commits/s 2.5"), "{screen}");
        assert!(screen.contains("staged_bytes 3.0MiB"), "{screen}");
        assert!(screen.contains("heap_trim_max_ns 3.1ms"), "{screen}");
        assert!(screen.contains("uptime_ns 3.0s"), "{screen}");
    }

    #[test]
    fn figures_are_short() {
        assert_eq!(duration(850), "850ns");
        assert_eq!(duration(42_000), "42us");
        assert_eq!(duration(3_100_000), "3.1ms");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(3 << 20), "3.0MiB");
    }
}
