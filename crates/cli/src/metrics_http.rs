//! `-o metrics=IP:PORT`: the mount's statistics in the Prometheus text exposition format
//! (version 0.0.4) at `GET /metrics`.
//!
//! Written by hand on std::net rather than with an HTTP or Prometheus crate: the format is a
//! few lines per metric, one scrape every few seconds needs no async runtime, and the report
//! it renders already exists (`StatsReport`), so JSON and Prometheus cannot disagree.
//! The endpoint is unauthenticated: bind it to loopback unless the network is trusted.

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use crate::stats_report::{LatencyReport, StatsReport};

/// A scraper that stalls is dropped after this long.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on the request head we read; a GET is a few hundred bytes.
const MAX_REQUEST_BYTES: u64 = 16 * 1024;
/// Histogram bucket bounds: powers of two nanoseconds from 2^10 (~1 µs) to 2^36 (~69 s).
/// They are bucket boundaries of `shoal_engine::histogram`, so the counts are exact.
const LE_EXPONENTS: std::ops::RangeInclusive<u32> = 10..=36;

/// Serves `GET /metrics` on `listener` from one background thread, until the process exits.
pub fn serve(
    listener: TcpListener,
    report: Arc<dyn Fn() -> Option<StatsReport> + Send + Sync>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("shoal-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let result = stream.and_then(|stream| answer(stream, report.as_ref()));
                if let Err(error) = result {
                    tracing::debug!("metrics connection: {error}");
                }
            }
        })?;
    Ok(())
}

fn answer(stream: TcpStream, report: &dyn Fn() -> Option<StatsReport>) -> io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new((&stream).take(MAX_REQUEST_BYTES));
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Read the rest of the head so the client sees its request consumed.
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let mut parts = request_line.split_whitespace();
    let (status, content_type, body) = match (parts.next(), parts.next()) {
        (Some("GET"), Some("/metrics")) => match report() {
            Some(report) => (
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                render(&report),
            ),
            None => (
                "503 Service Unavailable",
                "text/plain",
                "unmounting\n".into(),
            ),
        },
        (Some("GET"), Some(_)) => ("404 Not Found", "text/plain", "try /metrics\n".into()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET /metrics\n".into(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut writer = &stream;
    writer.write_all(head.as_bytes())?;
    writer.write_all(body.as_bytes())
}

/// Writes one metric's HELP and TYPE lines.
fn describe(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{name} {value}");
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    describe(out, name, "counter", help);
    sample(out, name, value);
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    describe(out, name, "gauge", help);
    sample(out, name, value);
}

/// A counter of time kept in nanoseconds, exposed in seconds as Prometheus expects.
fn seconds_counter(out: &mut String, name: &str, help: &str, ns: u64) {
    describe(out, name, "counter", help);
    sample(out, name, seconds(ns));
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The samples of one histogram (cumulative `_bucket{le=...}`, `_sum`, `_count`); `labels`
/// is empty or `key="value",`.
fn histogram_samples(out: &mut String, name: &str, labels: &str, latency: &LatencyReport) {
    let histogram = latency.histogram();
    for exponent in LE_EXPONENTS {
        let bound_ns = 1u64 << exponent;
        // Integer nanoseconds below 2^k are exactly those at most 2^k - 1.
        let count = histogram.count_at_most(bound_ns - 1);
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}le=\"{}\"}} {count}",
            seconds(bound_ns)
        );
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{{labels}le=\"+Inf\"}} {}",
        histogram.count
    );
    let braces = |labels: &str| {
        if labels.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", labels.trim_end_matches(','))
        }
    };
    let _ = writeln!(
        out,
        "{name}_sum{} {}",
        braces(labels),
        seconds(latency.sum_ns)
    );
    let _ = writeln!(out, "{name}_count{} {}", braces(labels), histogram.count);
}

/// The whole exposition.
pub fn render(report: &StatsReport) -> String {
    let mut out = String::new();
    describe(
        &mut out,
        "shoal_ops_total",
        "counter",
        "FUSE requests answered, by request type.",
    );
    for op in &report.ops {
        sample(
            &mut out,
            &format!("shoal_ops_total{{op=\"{}\"}}", op.op),
            op.count,
        );
    }
    describe(
        &mut out,
        "shoal_op_latency_seconds",
        "histogram",
        "Time from a FUSE request's arrival in its handler to the reply, by request type.",
    );
    for op in report.ops.iter().filter(|op| op.count > 0) {
        let labels = format!("op=\"{}\",", op.op);
        histogram_samples(&mut out, "shoal_op_latency_seconds", &labels, &op.latency);
    }
    describe(
        &mut out,
        "shoal_op_latency_max_seconds",
        "gauge",
        "Slowest FUSE request since mount, by request type.",
    );
    for op in report.ops.iter().filter(|op| op.count > 0) {
        let name = format!("shoal_op_latency_max_seconds{{op=\"{}\"}}", op.op);
        sample(&mut out, &name, seconds(op.latency.max_ns));
    }
    render_engine(&mut out, report);
    render_store(&mut out, report);
    render_memory(&mut out, report);
    out
}

fn render_engine(out: &mut String, report: &StatsReport) {
    let engine = &report.engine;
    counter(
        out,
        "shoal_batches_total",
        "Atomic batches written to the store.",
        engine.batches,
    );
    counter(
        out,
        "shoal_log_bytes_total",
        "Key and value bytes of the batches written (logged).",
        engine.log_bytes,
    );
    counter(
        out,
        "shoal_syncs_total",
        "Sync requests (fsync, fsyncdir, unmount).",
        engine.syncs,
    );
    counter(
        out,
        "shoal_commits_total",
        "Store syncs performed (group commits).",
        engine.commits,
    );
    counter(
        out,
        "shoal_interval_commits_total",
        "Group commits made by the commit= timer.",
        engine.interval_commits,
    );
    describe(
        out,
        "shoal_commit_latency_seconds",
        "histogram",
        "Duration of group commits (store syncs).",
    );
    histogram_samples(
        out,
        "shoal_commit_latency_seconds",
        "",
        &engine.commit_latency,
    );
    describe(
        out,
        "shoal_batch_write_latency_seconds",
        "histogram",
        "Duration of batch writes to the store.",
    );
    histogram_samples(
        out,
        "shoal_batch_write_latency_seconds",
        "",
        &engine.batch_write_latency,
    );
    counter(
        out,
        "shoal_write_slowdowns_total",
        "Batch writes slowed by the store (over 1 ms).",
        engine.write_slowdowns,
    );
    seconds_counter(
        out,
        "shoal_write_slowdown_seconds_total",
        "Time spent in slowed batch writes.",
        engine.write_slowdown_ns,
    );
    counter(
        out,
        "shoal_write_errors_total",
        "Background writes (checkpoints, interval commits) that failed.",
        engine.write_errors,
    );
}

fn render_store(out: &mut String, report: &StatsReport) {
    let store = &report.store;
    gauge(
        out,
        "shoal_memtable_bytes",
        "Active and sealed memtables.",
        store.write_buffer_bytes,
    );
    gauge(
        out,
        "shoal_sealed_memtables",
        "Memtables waiting to be flushed.",
        store.sealed_memtables,
    );
    gauge(
        out,
        "shoal_pending_flushes",
        "Memtable flushes queued.",
        store.pending_flushes,
    );
    gauge(
        out,
        "shoal_staged_bytes",
        "Bytes of operations staged in memory, not yet checkpointed to the store.",
        store.staged_bytes,
    );
    counter(
        out,
        "shoal_checkpoints_total",
        "Checkpoints: staged operations written to the store as one batch.",
        store.checkpoints,
    );
    seconds_counter(
        out,
        "shoal_checkpoint_write_seconds_total",
        "Time checkpoints spent writing staged operations into the store.",
        store.checkpoint_write_ns,
    );
    counter(
        out,
        "shoal_held_writes_total",
        "Writes that found twice checkpoint= staged and waited for the checkpoint in progress.",
        store.held_writes,
    );
    seconds_counter(
        out,
        "shoal_held_write_seconds_total",
        "Time writes waited for a held-up checkpoint.",
        store.held_write_ns,
    );
    gauge(
        out,
        "shoal_journals",
        "Journal files on disk.",
        store.journal_count,
    );
    gauge(
        out,
        "shoal_journal_bytes",
        "Journal bytes on disk.",
        store.journal_bytes,
    );
    gauge(
        out,
        "shoal_store_disk_bytes",
        "Bytes the store occupies on disk.",
        store.disk_bytes,
    );
    gauge(
        out,
        "shoal_tables",
        "LSM tables (SST files).",
        store.table_count,
    );
    gauge(
        out,
        "shoal_l0_tables",
        "Level-0 tables (writers slow down as they pile up).",
        store.l0_table_count,
    );
    gauge(
        out,
        "shoal_blob_files",
        "Blob files (separated file data).",
        store.blob_file_count,
    );
    gauge(
        out,
        "shoal_active_compactions",
        "Compactions running.",
        store.active_compactions,
    );
    counter(
        out,
        "shoal_compactions_total",
        "Compactions completed.",
        store.compactions_completed,
    );
    describe(
        out,
        "shoal_compaction_seconds_total",
        "counter",
        "Time spent compacting.",
    );
    sample(
        out,
        "shoal_compaction_seconds_total",
        store.compaction_time_us as f64 / 1e6,
    );
    gauge(
        out,
        "shoal_cache_capacity_bytes",
        "Block cache capacity.",
        store.cache_capacity_bytes,
    );
    gauge(
        out,
        "shoal_cache_used_bytes",
        "Block cache in use.",
        store.cache_used_bytes,
    );
    counter(
        out,
        "shoal_cache_hits_total",
        "Block reads served by the block cache.",
        store.block_cache_hits,
    );
    counter(
        out,
        "shoal_cache_misses_total",
        "Block reads that went to the OS.",
        store.block_cache_misses,
    );
}

fn render_memory(out: &mut String, report: &StatsReport) {
    let memory = &report.memory;
    gauge(
        out,
        "shoal_rss_bytes",
        "Resident memory of the daemon.",
        memory.rss_bytes,
    );
    gauge(
        out,
        "shoal_referenced_inodes",
        "Inodes the kernel holds references to.",
        memory.referenced_inodes,
    );
    gauge(
        out,
        "shoal_lookup_table_bytes",
        "Daemon memory for the kernel's inode references.",
        memory.lookup_table_bytes,
    );
    gauge(
        out,
        "shoal_memory_budget_bytes",
        "Bound on the daemon's resident memory, kept by dropping kernel references (memory=).",
        memory.budget_bytes,
    );
    counter(
        out,
        "shoal_evictions_total",
        "Names the daemon asked the kernel to drop to stay within the memory budget.",
        memory.evictions,
    );
    counter(
        out,
        "shoal_heap_trims_total",
        "Times free heap memory was handed back to the system near the memory budget.",
        memory.heap_trims,
    );
    seconds_counter(
        out,
        "shoal_spin_cpu_seconds_total",
        "CPU time of the keep-awake spinners (idle CPUs kept from halting while requests flow).",
        report.spin_cpu_ns,
    );
    seconds_counter(
        out,
        "shoal_heap_trim_seconds_total",
        "Time spent handing free heap memory back near the memory budget.",
        memory.heap_trim_ns,
    );
    gauge(
        out,
        "shoal_uptime_seconds",
        "Time since the daemon mounted.",
        report.uptime_ns / 1_000_000_000,
    );
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::net::Ipv4Addr;

    use shoal_engine::histogram::Histogram;

    use super::*;
    use crate::stats_report::OpReport;

    fn latency(values_ns: &[u64]) -> LatencyReport {
        let histogram = Histogram::default();
        for &value in values_ns {
            histogram.record_ns(value);
        }
        LatencyReport::from_snapshot(&histogram.snapshot())
    }

    fn sample_report() -> StatsReport {
        let mut report = StatsReport::default();
        report.ops.push(OpReport {
            op: "create".into(),
            count: 3,
            latency: latency(&[2_000, 30_000, 5_000_000]),
        });
        report.ops.push(OpReport {
            op: "unlink".into(),
            count: 0,
            latency: latency(&[]),
        });
        report.engine.commits = 7;
        report.engine.log_bytes = 12_345;
        report.memory.rss_bytes = 40 << 20;
        report
    }

    /// Sample lines as `name{labels}` -> value; checks every metric has HELP and TYPE.
    fn parse_exposition(text: &str) -> HashMap<String, f64> {
        let mut samples = HashMap::new();
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut words = rest.split(' ');
                typed.insert(words.next().unwrap().to_string());
                let kind = words.next().unwrap();
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                continue;
            }
            if line.starts_with("# HELP ") || line.is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("name value");
            let name = series.split('{').next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix).filter(|f| typed.contains(*f)))
                .unwrap_or(name);
            assert!(typed.contains(family), "no TYPE before {line}");
            samples.insert(series.to_string(), value.parse::<f64>().expect(line));
        }
        samples
    }

    fn scrape(address: std::net::SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(address).unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    #[test]
    fn scraped_over_loopback_the_values_are_those_recorded() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let address = listener.local_addr().unwrap();
        serve(listener, Arc::new(|| Some(sample_report()))).unwrap();

        let response = scrape(address, "/metrics");
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        assert!(head.contains("text/plain; version=0.0.4"));
        let samples = parse_exposition(body);
        assert_eq!(samples["shoal_ops_total{op=\"create\"}"], 3.0);
        assert_eq!(samples["shoal_ops_total{op=\"unlink\"}"], 0.0);
        assert_eq!(samples["shoal_commits_total"], 7.0);
        assert_eq!(samples["shoal_log_bytes_total"], 12_345.0);
        assert_eq!(samples["shoal_rss_bytes"], (40u64 << 20) as f64);
        // The heap figures are on request only (`shoal stats --heap`), never on a scrape.
        assert!(!samples.contains_key("shoal_heap_free_bytes"));
        assert_eq!(
            samples["shoal_op_latency_seconds_count{op=\"create\"}"],
            3.0
        );
        let sum = samples["shoal_op_latency_seconds_sum{op=\"create\"}"];
        assert!((sum - 0.005032).abs() < 1e-9, "sum {sum}");
        assert_eq!(
            samples["shoal_op_latency_max_seconds{op=\"create\"}"],
            0.005
        );
        // Cumulative buckets: 2 µs and 30 µs are below 2^15 ns (32.8 µs), 5 ms is not.
        let bucket = |le: &str| {
            samples[&format!("shoal_op_latency_seconds_bucket{{op=\"create\",le=\"{le}\"}}")]
        };
        assert_eq!(bucket("0.000001024"), 0.0);
        assert_eq!(bucket("0.000032768"), 2.0);
        assert_eq!(bucket("0.008388608"), 3.0);
        assert_eq!(bucket("+Inf"), 3.0);
        assert!(!samples.contains_key("shoal_op_latency_seconds_count{op=\"unlink\"}"));

        assert!(scrape(address, "/other").starts_with("HTTP/1.1 404"));
    }
}
