//! `-o metrics=IP:PORT`: the mount's statistics in the Prometheus text exposition format
//! (version 0.0.4) at `GET /metrics`.
//!
//! Written by hand on std::net rather than with an HTTP or Prometheus crate: the format is a
//! few lines per metric, one scrape every few seconds needs no async runtime, and the report
//! it renders already exists (`StatsReport`), with each metric's name, type and help in
//! one table beside its struct, so JSON and Prometheus cannot disagree.
//! The endpoint is unauthenticated: bind it to loopback unless the network is trusted.

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use shoal_engine::metric::Metric;
use shoal_engine::STORE_METRICS;

use crate::stats_report::{
    LatencyReport, QuotaUse, StatsReport, DAEMON_METRICS, ENGINE_HISTOGRAMS, ENGINE_METRICS,
    MEMORY_METRICS,
};

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

/// One sample; `labels` is empty or `key="value",...,` (with its trailing comma).
fn sample(out: &mut String, name: &str, labels: &str, value: impl std::fmt::Display) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let _ = writeln!(out, "{name}{{{}}} {value}", labels.trim_end_matches(','));
    }
}

/// A label value as the exposition format quotes it: backslash, quote and newline escaped.
fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The labels every sample carries: which store, mounted where, so that one Prometheus
/// tells the mounts of many hosts apart (`uuid` is empty for a RAM filesystem).
fn mount_labels(report: &StatsReport) -> String {
    format!(
        "uuid=\"{}\",mountpoint=\"{}\",",
        label_value(&report.uuid),
        label_value(&report.mountpoint)
    )
}

/// Every exposed metric of one table, read from `of`.
fn scalars<T>(out: &mut String, table: &[Metric<T>], of: &T, labels: &str) {
    for metric in table {
        if let Some(name) = metric.prometheus {
            describe(out, name, metric.kind.as_str(), metric.help);
            sample(out, name, labels, metric.exposed_value(of));
        }
    }
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

/// The per-request-type families: (name, type, help).
const OP_FAMILIES: [(&str, &str, &str); 3] = [
    (
        "shoal_ops_total",
        "counter",
        "FUSE requests answered, by request type.",
    ),
    (
        "shoal_op_latency_seconds",
        "histogram",
        "Time from a FUSE request's arrival in its handler to the reply, by request type.",
    ),
    (
        "shoal_op_latency_max_seconds",
        "gauge",
        "Slowest FUSE request since mount, by request type.",
    ),
];

/// The per-quota families, labelled `kind` (user, group, project) and `id`; the limits also
/// `limit` (soft, hard). Only ids with a limit set are listed.
const QUOTA_FAMILIES: [(&str, &str, &str); 4] = [
    (
        "shoal_quota_used_bytes",
        "gauge",
        "Bytes charged to a user, group or project that has a limit.",
    ),
    (
        "shoal_quota_used_inodes",
        "gauge",
        "Inodes charged to a user, group or project that has a limit.",
    ),
    (
        "shoal_quota_limit_bytes",
        "gauge",
        "Byte limit of a user, group or project (limit=soft or hard; 0: none).",
    ),
    (
        "shoal_quota_limit_inodes",
        "gauge",
        "Inode limit of a user, group or project (limit=soft or hard; 0: none).",
    ),
];

fn quota_samples(out: &mut String, report: &StatsReport, labels: &str) {
    let [used_bytes, used_inodes, limit_bytes, limit_inodes] = QUOTA_FAMILIES;
    let each = |quota: &QuotaUse| format!("{labels}kind=\"{}\",id=\"{}\",", quota.kind, quota.id);
    describe(out, used_bytes.0, used_bytes.1, used_bytes.2);
    for quota in &report.quotas {
        sample(out, used_bytes.0, &each(quota), quota.used_bytes);
    }
    describe(out, used_inodes.0, used_inodes.1, used_inodes.2);
    for quota in &report.quotas {
        sample(out, used_inodes.0, &each(quota), quota.used_inodes);
    }
    describe(out, limit_bytes.0, limit_bytes.1, limit_bytes.2);
    for quota in &report.quotas {
        for (limit, value) in [("soft", quota.bytes_soft), ("hard", quota.bytes_hard)] {
            let labels = format!("{}limit=\"{limit}\",", each(quota));
            sample(out, limit_bytes.0, &labels, value);
        }
    }
    describe(out, limit_inodes.0, limit_inodes.1, limit_inodes.2);
    for quota in &report.quotas {
        for (limit, value) in [("soft", quota.inodes_soft), ("hard", quota.inodes_hard)] {
            let labels = format!("{}limit=\"{limit}\",", each(quota));
            sample(out, limit_inodes.0, &labels, value);
        }
    }
}

/// Every family the endpoint serves, as (name, type, help): what docs/monitoring.md's
/// glossary lists.
#[cfg(test)]
pub fn families() -> Vec<(&'static str, &'static str, &'static str)> {
    fn of<T>(
        table: &[Metric<T>],
    ) -> impl Iterator<Item = (&'static str, &'static str, &'static str)> + '_ {
        table.iter().filter_map(|metric| {
            metric
                .prometheus
                .map(|name| (name, metric.kind.as_str(), metric.help))
        })
    }
    let histograms = ENGINE_HISTOGRAMS
        .iter()
        .map(|histogram| (histogram.prometheus, "histogram", histogram.help));
    OP_FAMILIES
        .into_iter()
        .chain(QUOTA_FAMILIES)
        .chain([FASTPATH_FAMILY, FASTPATH_FALLBACK_FAMILY])
        .chain(of(ENGINE_METRICS))
        .chain(histograms)
        .chain(of(STORE_METRICS))
        .chain(of(MEMORY_METRICS))
        .chain(of(DAEMON_METRICS))
        .collect()
}

/// The whole exposition.
pub fn render(report: &StatsReport) -> String {
    let mut out = String::new();
    let labels = mount_labels(report);
    let [ops, latency, latency_max] = OP_FAMILIES;
    describe(&mut out, ops.0, ops.1, ops.2);
    for op in &report.ops {
        let op_labels = format!("{labels}op=\"{}\",", op.op);
        sample(&mut out, ops.0, &op_labels, op.count);
    }
    describe(&mut out, latency.0, latency.1, latency.2);
    for op in report.ops.iter().filter(|op| op.count > 0) {
        let op_labels = format!("{labels}op=\"{}\",", op.op);
        histogram_samples(&mut out, latency.0, &op_labels, &op.latency);
    }
    describe(&mut out, latency_max.0, latency_max.1, latency_max.2);
    for op in report.ops.iter().filter(|op| op.count > 0) {
        let op_labels = format!("{labels}op=\"{}\",", op.op);
        sample(
            &mut out,
            latency_max.0,
            &op_labels,
            seconds(op.latency.max_ns),
        );
    }
    quota_samples(&mut out, report, &labels);
    scalars(&mut out, ENGINE_METRICS, &report.engine, &labels);
    for histogram in ENGINE_HISTOGRAMS {
        describe(&mut out, histogram.prometheus, "histogram", histogram.help);
        histogram_samples(
            &mut out,
            histogram.prometheus,
            &labels,
            (histogram.read)(&report.engine),
        );
    }
    scalars(&mut out, STORE_METRICS, &report.store, &labels);
    scalars(&mut out, MEMORY_METRICS, &report.memory, &labels);
    scalars(&mut out, DAEMON_METRICS, report, &labels);
    fast_path_samples(&mut out, report, &labels);
    out
}

/// What `shoal run` processes asked, by request kind and outcome.
const FASTPATH_FAMILY: (&str, &str, &str) = (
    "shoal_fastpath_requests_total",
    "counter",
    "Fast-path requests by kind and outcome: served, failed (the kernel's errno), fell_back (left to the kernel).",
);

/// Fast-path requests left to the kernel, by reason.
const FASTPATH_FALLBACK_FAMILY: (&str, &str, &str) = (
    "shoal_fastpath_fallbacks_total",
    "counter",
    "Fast-path requests left to the kernel, by reason: permission (an ACL or capability may grant it; every refusal), leaves_mount, kernel_rule (directory renames, set-id bits, O_TMPFILE, special files...), read_only, version.",
);

/// `shoal_fastpath_requests_total{kind, outcome}` and `shoal_fastpath_fallbacks_total{reason}`.
fn fast_path_samples(out: &mut String, report: &StatsReport, mount: &str) {
    let (name, kind, help) = FASTPATH_FALLBACK_FAMILY;
    describe(out, name, kind, help);
    for (reason, count) in &report.fastpath_fallbacks {
        sample(out, name, &format!("{mount}reason=\"{reason}\","), count);
    }
    let (name, kind, help) = FASTPATH_FAMILY;
    describe(out, name, kind, help);
    const NAME: &str = FASTPATH_FAMILY.0;
    for kind in &report.fastpath {
        for (outcome, count) in [
            ("served", kind.served),
            ("failed", kind.failed),
            ("fell_back", kind.fell_back),
        ] {
            let labels = format!("{mount}kind=\"{}\",outcome=\"{outcome}\",", kind.kind);
            sample(out, NAME, &labels, count);
        }
    }
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
        report.uuid = "0f6e0a1c-54b2-4c1e-9d1e-2a7b3c4d5e6f".into();
        report.mountpoint = "/srv/a \"b\"".into();
        report.free_bytes = 5 << 30;
        report.reserved_bytes = 1 << 30;
        report.quotas.push(QuotaUse {
            kind: "user".into(),
            id: 1000,
            used_bytes: 4096,
            used_inodes: 3,
            bytes_hard: 1 << 20,
            ..QuotaUse::default()
        });
        report
    }

    /// The labels of every sample of `sample_report`.
    const LABELS: &str = r#"uuid="0f6e0a1c-54b2-4c1e-9d1e-2a7b3c4d5e6f",mountpoint="/srv/a \"b\"""#;

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
        assert_eq!(
            samples[&format!("shoal_ops_total{{{LABELS},op=\"create\"}}")],
            3.0
        );
        assert_eq!(
            samples[&format!("shoal_ops_total{{{LABELS},op=\"unlink\"}}")],
            0.0
        );
        assert_eq!(samples[&format!("shoal_commits_total{{{LABELS}}}")], 7.0);
        assert_eq!(
            samples[&format!("shoal_log_bytes_total{{{LABELS}}}")],
            12_345.0
        );
        assert_eq!(
            samples[&format!("shoal_rss_bytes{{{LABELS}}}")],
            (40u64 << 20) as f64
        );
        // The heap figures are on request only (`shoal stats --heap`), never on a scrape.
        assert!(!samples.contains_key("shoal_heap_free_bytes"));
        assert_eq!(
            samples[&format!("shoal_op_latency_seconds_count{{{LABELS},op=\"create\"}}")],
            3.0
        );
        let sum = samples[&format!("shoal_op_latency_seconds_sum{{{LABELS},op=\"create\"}}")];
        assert!((sum - 0.005032).abs() < 1e-9, "sum {sum}");
        assert_eq!(
            samples[&format!("shoal_op_latency_max_seconds{{{LABELS},op=\"create\"}}")],
            0.005
        );
        // Cumulative buckets: 2 µs and 30 µs are below 2^15 ns (32.8 µs), 5 ms is not.
        let bucket = |le: &str| {
            samples
                [&format!("shoal_op_latency_seconds_bucket{{{LABELS},op=\"create\",le=\"{le}\"}}")]
        };
        assert_eq!(bucket("0.000001024"), 0.0);
        assert_eq!(bucket("0.000032768"), 2.0);
        assert_eq!(bucket("0.008388608"), 3.0);
        assert_eq!(bucket("+Inf"), 3.0);
        assert!(!samples.contains_key(&format!(
            "shoal_op_latency_seconds_count{{{LABELS},op=\"unlink\"}}"
        )));

        // Space and quotas, by store and mountpoint; a quota by kind, id and limit.
        assert_eq!(
            samples[&format!("shoal_free_bytes{{{LABELS}}}")],
            (5u64 << 30) as f64
        );
        assert_eq!(
            samples[&format!("shoal_reserved_bytes{{{LABELS}}}")],
            (1u64 << 30) as f64
        );
        let quota = format!("{LABELS},kind=\"user\",id=\"1000\"");
        assert_eq!(
            samples[&format!("shoal_quota_used_bytes{{{quota}}}")],
            4096.0
        );
        assert_eq!(samples[&format!("shoal_quota_used_inodes{{{quota}}}")], 3.0);
        let hard = format!("shoal_quota_limit_bytes{{{quota},limit=\"hard\"}}");
        assert_eq!(samples[&hard], (1u64 << 20) as f64);
        let soft = format!("shoal_quota_limit_inodes{{{quota},limit=\"soft\"}}");
        assert_eq!(samples[&soft], 0.0);
        // Every sample names its store and mountpoint.
        assert!(samples.keys().all(|series| series.contains(LABELS)));

        assert!(scrape(address, "/other").starts_with("HTTP/1.1 404"));
    }
}
