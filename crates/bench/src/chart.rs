//! SVG charts with plotters: one horizontal bar chart per workload and unit (median bars,
//! min-max whiskers, one colour per target) and the objects rate-over-time curve. SVG text
//! needs no font files, so nothing beyond the crate is required.

use std::path::Path;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use crate::error::{BenchError, Result};
use crate::report::{ChartFile, Report, SummaryRow};
use crate::workload::{CurvePoint, Workload};

const WIDTH_PX: u32 = 900;
const ROW_PX: u32 = 26;
/// Approximate width of one label character at the default font size.
const CHAR_PX: u32 = 7;

fn chart_error(error: impl std::fmt::Debug) -> BenchError {
    BenchError::Invalid(format!("drawing a chart: {error:?}"))
}

/// File-name-safe form of a unit: "file/s" -> "file-per-s", "µs/file" -> "us-per-file".
fn slug(text: &str) -> String {
    text.replace('/', "-per-")
        .replace('µ', "u")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Writes every chart of `report` into `dir`; paths in the result are relative to the
/// report directory (`charts/NAME.svg`).
pub fn write_all(report: &Report, dir: &Path) -> Result<Vec<ChartFile>> {
    let targets: Vec<String> = report.targets.iter().map(|t| t.label.clone()).collect();
    let mut files = Vec::new();
    for &workload in &report.workloads {
        let rows: Vec<&SummaryRow> = report
            .summary
            .iter()
            .filter(|r| r.workload == workload)
            .collect();
        let mut units: Vec<&str> = Vec::new();
        for row in &rows {
            if !units.contains(&row.unit.as_str()) {
                units.push(&row.unit);
            }
        }
        for unit in units {
            let group: Vec<&SummaryRow> = rows.iter().copied().filter(|r| r.unit == unit).collect();
            let name = format!("{}-{}.svg", workload.name(), slug(unit));
            let title = format!("{}: {} ({})", workload.name(), unit, better_word(group[0]));
            bar_chart(&dir.join(&name), &title, unit, &group, &targets)?;
            files.push(ChartFile {
                workload,
                title,
                relative_path: format!("charts/{name}"),
            });
        }
    }
    if report.workloads.contains(&Workload::Objects) {
        let curves = [
            (
                "objects-rate-over-time.svg",
                "objects: create rate as the file count grows",
                CurveAxis::Rate,
            ),
            (
                "objects-memory-over-time.svg",
                "objects: memory as the file count grows (shoal: daemon RSS; others: system memory used)",
                CurveAxis::Memory,
            ),
        ];
        for (name, title, axis) in curves {
            if objects_curve(report, &dir.join(name), title, &targets, axis)? {
                files.push(ChartFile {
                    workload: Workload::Objects,
                    title: title.to_string(),
                    relative_path: format!("charts/{name}"),
                });
            }
        }
    }
    Ok(files)
}

/// What an objects curve plots against the object count.
#[derive(Clone, Copy)]
enum CurveAxis {
    Rate,
    Memory,
}

impl CurveAxis {
    fn value(self, point: &CurvePoint) -> f64 {
        match self {
            CurveAxis::Rate => point.rate_per_s,
            CurveAxis::Memory => point.memory_bytes as f64 / (1u64 << 20) as f64,
        }
    }

    fn description(self) -> &'static str {
        match self {
            CurveAxis::Rate => "objects/s over the last interval",
            CurveAxis::Memory => "MiB",
        }
    }
}

fn better_word(row: &SummaryRow) -> &'static str {
    match row.better {
        crate::workload::Better::Higher => "higher is better",
        crate::workload::Better::Lower => "lower is better",
    }
}

fn target_color(targets: &[String], target: &str) -> RGBColor {
    let index = targets.iter().position(|t| t == target).unwrap_or(0);
    let colors = <Palette99 as Palette>::COLORS;
    let (r, g, b) = colors[index % colors.len()];
    RGBColor(r, g, b)
}

/// "metric · target" for each bar, top to bottom.
fn row_labels(rows: &[&SummaryRow]) -> Vec<String> {
    let label = |row: &&SummaryRow| format!("{} · {}", row.metric, row.target);
    rows.iter().map(label).collect()
}

/// Room for the longest label on the y axis.
fn label_width_px(labels: &[String]) -> u32 {
    let longest = labels.iter().map(|l| l.chars().count() as u32).max();
    longest.unwrap_or(10) * CHAR_PX + 20
}

/// The x axis ends 10% past the largest bar or whisker (never at 0: an empty axis).
fn x_axis_max(rows: &[&SummaryRow]) -> f64 {
    let largest = rows.iter().map(|r| r.max.max(r.median));
    largest.fold(0.0f64, f64::max).max(1e-9) * 1.1
}

fn bar_chart(
    path: &Path,
    title: &str,
    unit: &str,
    rows: &[&SummaryRow],
    targets: &[String],
) -> Result<()> {
    let labels = row_labels(rows);
    let (label_px, x_max) = (label_width_px(&labels), x_axis_max(rows));
    let size_px = (WIDTH_PX + label_px, 90 + ROW_PX * rows.len() as u32);
    let root = SVGBackend::new(path, size_px).into_drawing_area();
    root.fill(&WHITE).map_err(chart_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(label_px)
        .build_cartesian_2d(0f64..x_max, (0..rows.len()).into_segmented())
        .map_err(chart_error)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.len())
        .y_label_formatter(&|value| match value {
            SegmentValue::CenterOf(index) => labels.get(*index).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_desc(unit)
        .draw()
        .map_err(chart_error)?;
    for target in targets {
        let color = target_color(targets, target);
        let bars: Vec<(usize, &&SummaryRow)> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| &r.target == target)
            .collect();
        if bars.is_empty() {
            continue;
        }
        chart
            .draw_series(bars.iter().map(|(index, row)| {
                let mut bar = Rectangle::new(
                    [
                        (0.0, SegmentValue::Exact(*index)),
                        (row.median, SegmentValue::Exact(index + 1)),
                    ],
                    color.filled(),
                );
                bar.set_margin(4, 4, 0, 0);
                bar
            }))
            .map_err(chart_error)?
            .label(target.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        chart
            .draw_series(bars.iter().map(|(index, row)| {
                PathElement::new(
                    vec![
                        (row.min, SegmentValue::CenterOf(*index)),
                        (row.max, SegmentValue::CenterOf(*index)),
                    ],
                    BLACK.stroke_width(2),
                )
            }))
            .map_err(chart_error)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(chart_error)?;
    root.present().map_err(chart_error)
}

/// The rate-over-time lines of every objects sample, one colour per target. False when no
/// sample has a curve (all failed).
fn objects_curve(
    report: &Report,
    path: &Path,
    title: &str,
    targets: &[String],
    axis: CurveAxis,
) -> Result<bool> {
    let samples: Vec<_> = report
        .samples
        .iter()
        .filter(|s| s.workload == Workload::Objects && !s.outcome.curve.is_empty())
        .collect();
    if samples.is_empty() {
        return Ok(false);
    }
    let x_max = samples
        .iter()
        .flat_map(|s| &s.outcome.curve)
        .map(|p| p.files as f64)
        .fold(1.0, f64::max);
    let y_max = samples
        .iter()
        .flat_map(|s| &s.outcome.curve)
        .map(|p| axis.value(p))
        .fold(1.0, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (WIDTH_PX, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(chart_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .map_err(chart_error)?;
    chart
        .configure_mesh()
        .x_desc("objects so far")
        .y_desc(axis.description())
        .draw()
        .map_err(chart_error)?;
    let mut labelled: Vec<&str> = Vec::new();
    for sample in samples {
        let color = target_color(targets, &sample.target);
        let points = sample
            .outcome
            .curve
            .iter()
            .map(|p| (p.files as f64, axis.value(p)));
        let series = chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(chart_error)?;
        if !labelled.contains(&sample.target.as_str()) {
            labelled.push(&sample.target);
            series.label(sample.target.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 15, y)], color.stroke_width(2))
            });
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(chart_error)?;
    root.present().map_err(chart_error)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_file_names() {
        assert_eq!(slug("file/s"), "file-per-s");
        assert_eq!(slug("µs/file"), "us-per-file");
        assert_eq!(slug("s"), "s");
    }
}
