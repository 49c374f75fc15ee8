//! The results of a session: every sample plus the environment as JSON, a columnar
//! terminal table, and a Markdown page embedding the charts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::chart;
use crate::env::Environment;
use crate::error::{BenchError, IoContext, Result};
use crate::runner::Sample;
use crate::stats::{ratio, summarize};
use crate::target::TargetInfo;
use crate::workload::{Better, Params, Workload};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// The exact command line that produced this report.
    pub command: String,
    pub environment: Environment,
    pub params: Params,
    pub runs: usize,
    pub workloads: Vec<Workload>,
    pub targets: Vec<TargetInfo>,
    pub samples: Vec<Sample>,
    pub summary: Vec<SummaryRow>,
}

/// One metric on one target over all runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SummaryRow {
    pub workload: Workload,
    pub metric: String,
    pub unit: String,
    pub better: Better,
    pub target: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub samples: usize,
    /// median / median of the first target (None for the first target itself).
    pub ratio_to_first: Option<f64>,
}

/// Summary rows in a stable order: workload, metric (first-seen order), target order.
pub fn summarize_samples(
    workloads: &[Workload],
    targets: &[String],
    samples: &[Sample],
) -> Vec<SummaryRow> {
    let mut rows = Vec::new();
    for &workload in workloads {
        let mut metric_order: Vec<(String, String, Better)> = Vec::new();
        let mut values: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
        for sample in samples.iter().filter(|s| s.workload == workload) {
            for metric in &sample.outcome.metrics {
                if !metric_order.iter().any(|(name, _, _)| *name == metric.name) {
                    metric_order.push((metric.name.clone(), metric.unit.clone(), metric.better));
                }
                values
                    .entry((metric.name.clone(), sample.target.clone()))
                    .or_default()
                    .push(metric.value);
            }
        }
        for (name, unit, better) in metric_order {
            let mut first_median = None;
            for (index, target) in targets.iter().enumerate() {
                let Some(stats) = values
                    .get(&(name.clone(), target.clone()))
                    .and_then(|v| summarize(v))
                else {
                    continue;
                };
                if index == 0 {
                    first_median = Some(stats.median);
                }
                rows.push(SummaryRow {
                    workload,
                    metric: name.clone(),
                    unit: unit.clone(),
                    better,
                    target: target.clone(),
                    median: stats.median,
                    min: stats.min,
                    max: stats.max,
                    samples: stats.samples,
                    ratio_to_first: match (index, first_median) {
                        (0, _) | (_, None) => None,
                        (_, Some(base)) => ratio(stats.median, base),
                    },
                });
            }
        }
    }
    rows
}

/// Three significant digits or so, without scientific notation for everyday sizes.
pub fn format_value(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

fn format_ratio(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| "-".to_string(), |r| format!("{r:.2}x"))
}

/// The terminal table: terse and aligned, one row per metric and target.
pub fn table(rows: &[SummaryRow]) -> String {
    let header = [
        "workload", "metric", "unit", "target", "median", "min", "max", "vs first",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|row| {
            [
                row.workload.name().to_string(),
                row.metric.clone(),
                row.unit.clone(),
                row.target.clone(),
                format_value(row.median),
                format_value(row.min),
                format_value(row.max),
                format_ratio(row.ratio_to_first),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        let mut text = String::new();
        for (index, (cell, width)) in cells.iter().zip(widths).enumerate() {
            // Text left-aligned, numbers right-aligned.
            if index < 4 {
                let _ = write!(text, "{cell:<width$}  ");
            } else {
                let _ = write!(text, "{cell:>width$}  ");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&header.map(String::from));
    for row in &cells {
        line(row);
    }
    out
}

pub fn write_json(report: &Report, path: &Path) -> Result<()> {
    let text = serde_json::to_string_pretty(report)
        .map_err(|e| BenchError::Invalid(format!("serializing the report: {e}")))?;
    fs::write(path, text + "\n").context(|| format!("writing {}", path.display()))
}

/// A report written by [`write_json`], to render its table, charts and page again.
pub fn read_json(path: &Path) -> Result<Report> {
    let text = fs::read_to_string(path).context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        BenchError::Invalid(format!(
            "{} is not a shoal bench report: {e}",
            path.display()
        ))
    })
}

/// Writes DIR/bench.json, DIR/charts/*.svg and DIR/BENCHMARKS.md; returns the page path.
pub fn write_report_dir(report: &Report, dir: &Path) -> Result<PathBuf> {
    let charts_dir = dir.join("charts");
    fs::create_dir_all(&charts_dir).context(|| format!("mkdir {}", charts_dir.display()))?;
    write_json(report, &dir.join("bench.json"))?;
    let charts = chart::write_all(report, &charts_dir)?;
    let page = dir.join("BENCHMARKS.md");
    fs::write(&page, markdown(report, &charts))
        .context(|| format!("writing {}", page.display()))?;
    Ok(page)
}

/// A chart written for the page: which workload it belongs to and its path relative to the
/// page.
pub struct ChartFile {
    pub workload: Workload,
    pub title: String,
    pub relative_path: String,
}

pub fn markdown(report: &Report, charts: &[ChartFile]) -> String {
    let mut page = String::new();
    let _ = writeln!(page, "# shoal bench\n");
    let _ = writeln!(page, "Produced by:\n\n```\n{}\n```\n", report.command);
    environment_section(&mut page, report);
    for &workload in &report.workloads {
        workload_section(&mut page, report, charts, workload);
    }
    page
}

/// The machine, the tools and the targets the figures below were measured on.
fn environment_section(page: &mut String, report: &Report) {
    let env = &report.environment;
    let _ = writeln!(page, "## Environment\n");
    let _ = writeln!(
        page,
        "- kernel {}, {} CPUs ({}), {:.1} GiB RAM, root: {}",
        env.kernel,
        env.cpus,
        env.cpu_model,
        env.memory_bytes as f64 / (1u64 << 30) as f64,
        env.root
    );
    let _ = writeln!(page, "- load average at start: {}", env.load_average);
    let _ = writeln!(page, "- shoal {}; {}", env.shoal_version, tools_line(env));
    let _ = writeln!(page, "- {} run(s), interleaved across targets; median (min-max); ratios are medians against the first target", report.runs);
    let _ = writeln!(page, "- {}\n", env.note);
    let _ = writeln!(
        page,
        "| target | path | filesystem | mount options |\n|---|---|---|---|"
    );
    for target in &report.targets {
        let (fstype, options) = target
            .mount
            .as_ref()
            .map_or(("?".to_string(), String::new()), |m| {
                (format!("{} ({})", m.fstype, m.source), m.options.clone())
            });
        let _ = writeln!(
            page,
            "| {} | `{}` | {} | `{}` |",
            target.label,
            target.path.display(),
            fstype,
            options
        );
    }
    let _ = writeln!(page);
}

/// One workload: its summary table, charts, failed runs, space curves and notes.
fn workload_section(page: &mut String, report: &Report, charts: &[ChartFile], workload: Workload) {
    let _ = writeln!(page, "## {}\n", workload.name());
    let _ = writeln!(
        page,
        "| metric | target | median | min | max | vs first |\n|---|---|---:|---:|---:|---:|"
    );
    for row in report.summary.iter().filter(|r| r.workload == workload) {
        let _ = writeln!(
            page,
            "| {} ({}) | {} | {} | {} | {} | {} |",
            row.metric,
            row.unit,
            row.target,
            format_value(row.median),
            format_value(row.min),
            format_value(row.max),
            format_ratio(row.ratio_to_first)
        );
    }
    let _ = writeln!(page);
    for chart in charts.iter().filter(|c| c.workload == workload) {
        let _ = writeln!(page, "![{}]({})\n", chart.title, chart.relative_path);
    }
    for failure in report.samples.iter().filter(|s| s.workload == workload) {
        if let Some(error) = &failure.error {
            let _ = writeln!(
                page,
                "- run {} on {} failed: {error}",
                failure.run, failure.target
            );
        }
    }
    space_curves(page, report, workload);
    let mut notes: Vec<&String> = report
        .samples
        .iter()
        .filter(|s| s.workload == workload)
        .flat_map(|s| s.outcome.notes.iter())
        .collect();
    notes.sort();
    notes.dedup();
    for note in notes {
        let _ = writeln!(page, "- note: {note}");
    }
    let _ = writeln!(page);
}

/// churn: each run's space-amplification curve as a table (elapsed, live, used, used/live).
fn space_curves(page: &mut String, report: &Report, workload: Workload) {
    for sample in report
        .samples
        .iter()
        .filter(|s| s.workload == workload && !s.outcome.space_curve.is_empty())
    {
        let _ = writeln!(
            page,
            "Space amplification on {}, run {}:\n\n| s | phase | live MB | used MB | used / live | operations |\n|---:|---|---:|---:|---:|---:|",
            sample.target, sample.run
        );
        for point in &sample.outcome.space_curve {
            let _ = writeln!(
                page,
                "| {:.0} | {} | {:.1} | {:.1} | {:.2} | {} |",
                point.elapsed_ms / 1e3,
                point.phase,
                point.live_bytes as f64 / 1e6,
                point.used_bytes as f64 / 1e6,
                point.amplification,
                point.operations
            );
        }
        let _ = writeln!(page);
    }
}

fn tools_line(env: &Environment) -> String {
    env.tools
        .iter()
        .map(|t| {
            format!(
                "{}: {}",
                t.tool,
                t.version.as_deref().unwrap_or("not installed")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Metric, Outcome};

    fn sample(run: usize, target: &str, value: f64) -> Sample {
        Sample {
            run,
            workload: Workload::Create,
            target: target.to_string(),
            dir: PathBuf::from("/x"),
            elapsed_ms: 1.0,
            outcome: Outcome {
                metrics: vec![Metric {
                    name: "create rate".into(),
                    unit: "file/s".into(),
                    better: Better::Higher,
                    value,
                }],
                ..Outcome::default()
            },
            error: None,
        }
    }

    #[test]
    fn summary_has_medians_and_ratios_to_the_first_target() {
        let samples = vec![
            sample(1, "a", 100.0),
            sample(1, "b", 50.0),
            sample(2, "a", 300.0),
            sample(2, "b", 70.0),
            sample(3, "a", 200.0),
            sample(3, "b", 60.0),
        ];
        let rows = summarize_samples(&[Workload::Create], &["a".into(), "b".into()], &samples);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].median, rows[0].min, rows[0].max),
            (200.0, 100.0, 300.0)
        );
        assert_eq!(rows[0].ratio_to_first, None);
        assert_eq!(rows[1].median, 60.0);
        assert_eq!(rows[1].ratio_to_first, Some(0.3));
        let text = table(&rows);
        assert!(
            text.lines().count() == 3 && text.contains("0.30x"),
            "{text}"
        );
    }

    #[test]
    fn report_dir_has_json_charts_and_a_page_that_embeds_them() {
        let mut samples = vec![sample(1, "a", 100.0), sample(1, "b", 50.0)];
        let mut objects = sample(1, "a", 10.0);
        objects.workload = Workload::Objects;
        objects.outcome.curve = (1..=5)
            .map(|i| crate::workload::CurvePoint {
                files: i * 10,
                elapsed_ms: i as f64,
                rate_per_s: 1000.0 + i as f64,
                memory_bytes: 1 << 20,
            })
            .collect();
        samples.push(objects);
        let workloads = vec![Workload::Create, Workload::Objects];
        let labels = vec!["a".to_string(), "b".to_string()];
        let target = |label: &str| TargetInfo {
            label: label.into(),
            path: PathBuf::from("/"),
            made: false,
            mount: None,
            shoal: false,
            daemon_pids: Vec::new(),
            preload: None,
        };
        let report = Report {
            command: "shoal bench --target a --target b".into(),
            environment: crate::env::collect("test"),
            params: Params::for_size(crate::workload::Size::Small),
            runs: 1,
            summary: summarize_samples(&workloads, &labels, &samples),
            workloads,
            targets: vec![target("a"), target("b")],
            samples,
        };
        let dir = tempfile::tempdir().unwrap();
        let page_path = write_report_dir(&report, dir.path()).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.path().join("bench.json")).unwrap())
                .unwrap();
        assert_eq!(json["samples"].as_array().unwrap().len(), 3);
        let page = fs::read_to_string(page_path).unwrap();
        assert!(page.contains("shoal bench --target a --target b"));
        let again = read_json(&dir.path().join("bench.json")).unwrap();
        assert_eq!(again.samples.len(), 3);
        assert_eq!(again.summary.len(), report.summary.len());
        assert_eq!(markdown(&again, &[]), markdown(&report, &[]));
        for name in [
            "create-file-per-s.svg",
            "objects-rate-over-time.svg",
            "objects-memory-over-time.svg",
        ] {
            assert!(
                page.contains(&format!("(charts/{name})")),
                "{name} embedded"
            );
            let svg = fs::read_to_string(dir.path().join("charts").join(name)).unwrap();
            assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{name}");
        }
    }

    #[test]
    fn values_are_formatted_tersely() {
        assert_eq!(format_value(123456.7), "123457");
        assert_eq!(format_value(12.34), "12.3");
        assert_eq!(format_value(1.234), "1.23");
        assert_eq!(format_value(0.01234), "0.012");
    }
}
