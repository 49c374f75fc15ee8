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
use crate::stats_report::StatsReport;

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
    let mountpoint = mounts::absolute(mountpoint);
    let Some(entry) = mounts::mount_at(&mountpoint) else {
        bail!("{} is not a mount point", mountpoint.display());
    };
    if !entry.is_shoal() {
        bail!(
            "{} is not a shoal mount ({} {})",
            mountpoint.display(),
            entry.fstype,
            entry.source
        );
    }
    match mounts::daemon_pids(&mountpoint).as_slice() {
        [] => bail!(
            "no shoal daemon serves {} (did it die? `shoal umount` it)",
            mountpoint.display()
        ),
        // The newest: a `shoal mount` parent may still be exiting next to its daemon.
        pids => Ok(pids.iter().copied().max().unwrap_or_default()),
    }
}

fn fetch(daemon: u32, request: &ControlRequest) -> Result<StatsReport> {
    let value = control::request(daemon, request)?;
    serde_json::from_value(value).context("the daemon's statistics are unreadable")
}

/// One screen: rates and latencies over the interval between two reports.
pub fn render(mountpoint: &Path, previous: &StatsReport, current: &StatsReport) -> String {
    let restarted =
        current.daemon_pid != previous.daemon_pid || current.uptime_ns < previous.uptime_ns;
    let empty = StatsReport::default();
    let previous = if restarted { &empty } else { previous };
    let interval_s = (current.uptime_ns.saturating_sub(previous.uptime_ns) as f64 / 1e9).max(1e-3);
    let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / interval_s;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "shoal stats {}  pid {}  up {}  over {}  interval {:.1}s",
        mountpoint.display(),
        current.daemon_pid,
        duration(current.uptime_ns),
        current.fuse_transport,
        interval_s
    );
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
            rate(op.count, then),
            op.count,
            duration(interval.quantile(0.5)),
            duration(interval.quantile(0.99)),
            duration(interval.quantile(0.999)),
            duration(interval.max_ns),
        );
    }
    let (engine, was) = (&current.engine, &previous.engine);
    let commit = engine
        .commit_latency
        .histogram()
        .since(&was.commit_latency.histogram());
    let _ = writeln!(
        out,
        "engine  batches/s {:.0}  logged {}/s  syncs/s {:.1}  commits/s {:.1} (p99 {})  slowdowns {} ({})",
        rate(engine.batches, was.batches),
        bytes(rate(engine.log_bytes, was.log_bytes) as u64),
        rate(engine.syncs, was.syncs),
        rate(engine.commits, was.commits),
        if commit.count == 0 {
            "-".to_string()
        } else {
            duration(commit.quantile(0.99))
        },
        engine.write_slowdowns.saturating_sub(was.write_slowdowns),
        duration(engine.write_slowdown_ns.saturating_sub(was.write_slowdown_ns)),
    );
    if let Some(last) = &engine.last_write_error {
        let _ = writeln!(
            out,
            "errors  {} background write failures (the next fsync returns them); last: {last}",
            engine.write_errors
        );
    }
    if engine.reclaim_trees > 0 {
        let _ = writeln!(
            out,
            "reclaim {} detached trees: {} names, {} left to delete",
            engine.reclaim_trees,
            engine.reclaim_entries,
            bytes(engine.reclaim_bytes),
        );
    }
    let (store, was) = (&current.store, &previous.store);
    let hits = store.block_cache_hits.saturating_sub(was.block_cache_hits);
    let misses = store
        .block_cache_misses
        .saturating_sub(was.block_cache_misses);
    let hit_rate = match hits + misses {
        0 => "-".to_string(),
        loads => format!("{:.1}%", hits as f64 * 100.0 / loads as f64),
    };
    let _ = writeln!(
        out,
        "store   staged {} (checkpoints/s {:.1}, held writes {})  memtables {} ({} sealed, {} flushes queued)  journals {} ({})  tables {} (L0 {})  compactions {} running, {} done",
        bytes(store.staged_bytes),
        rate(store.checkpoints, was.checkpoints),
        store.held_writes.saturating_sub(was.held_writes),
        bytes(store.write_buffer_bytes),
        store.sealed_memtables,
        store.pending_flushes,
        store.journal_count,
        bytes(store.journal_bytes),
        store.table_count,
        store.l0_table_count,
        store.active_compactions,
        store.compactions_completed.saturating_sub(was.compactions_completed),
    );
    let _ = writeln!(
        out,
        "space   live {} in {} inodes  on disk {}  reclaimable {}  reclaims {} (returned {})",
        bytes(current.engine.live_bytes),
        current.engine.live_inodes,
        bytes(store.disk_bytes),
        bytes(store.reclaimable_bytes),
        store.reclaims,
        bytes(store.reclaimed_bytes),
    );
    let memory = &current.memory;
    let _ = writeln!(
        out,
        "cache   {} of {}  hits {}    memory  rss {} ({}{} trims up to {})  kernel-referenced inodes {} ({} B each, budget {}, {} evicted)",
        bytes(store.cache_used_bytes),
        bytes(store.cache_capacity_bytes),
        hit_rate,
        bytes(memory.rss_bytes),
        match (memory.heap_in_use_bytes, memory.heap_free_bytes) {
            (Some(used), Some(free)) => format!("heap {} used, {} free, ", bytes(used), bytes(free)),
            _ => String::new(),
        },
        memory.heap_trims.saturating_sub(previous.memory.heap_trims),
        duration(memory.heap_trim_max_ns),
        memory.referenced_inodes,
        memory.lookup_table_bytes_per_inode,
        bytes(memory.budget_bytes),
        memory.evictions.saturating_sub(previous.memory.evictions),
    );
    out
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
    fn figures_are_short() {
        assert_eq!(duration(850), "850ns");
        assert_eq!(duration(42_000), "42us");
        assert_eq!(duration(3_100_000), "3.1ms");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(3 << 20), "3.0MiB");
    }
}
