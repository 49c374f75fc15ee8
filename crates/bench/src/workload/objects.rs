//! The OpenStack Swift object-server pattern: objects in two levels of hashed directories
//! (1000 x 1000), each written as a temp file (+ optional fsync) and renamed into place,
//! by T threads, up to a target count. The rate is sampled every fixed number of objects,
//! so a 20M-object run shows whether the cost per object grows with the file count.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::{count_tree, in_threads, Better, Ctx, CurvePoint, Outcome};
use crate::cpu::{process_rss_bytes, system_used_bytes};
use crate::error::{IoContext, Result};
use crate::interrupt;
use crate::rng::SplitMix64;

/// Directories per hash level, as Swift's partition / suffix layout.
const FANOUT: u64 = 1000;
/// Above this many objects the written tree is not walked again to count them.
const MAX_RECOUNTED_OBJECTS: u64 = 200_000;
/// A sample every 1% of the target, but at least every this many objects.
const MAX_SAMPLE_INTERVAL: u64 = 100_000;

/// Objects between two curve points.
pub fn sample_interval(count: u64) -> u64 {
    (count / 100).clamp(1, MAX_SAMPLE_INTERVAL)
}

/// Raw samples: (objects so far, elapsed since start in ns, memory bytes).
type RawSample = (u64, u128, u64);

fn memory_bytes(daemon_pids: &[u32]) -> u64 {
    if daemon_pids.is_empty() {
        system_used_bytes().unwrap_or(0)
    } else {
        daemon_pids
            .iter()
            .filter_map(|&pid| process_rss_bytes(pid))
            .sum()
    }
}

fn write_object(root: &Path, tmp: &Path, hash: u64, payload: &[u8], fsync: bool) -> Result<()> {
    let temp = tmp.join(format!("{hash:016x}.tmp"));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .context(|| format!("create {}", temp.display()))?;
    file.write_all(payload)
        .context(|| format!("write {}", temp.display()))?;
    if fsync {
        file.sync_all()
            .context(|| format!("fsync {}", temp.display()))?;
    }
    drop(file);
    let dir = root.join(format!(
        "{:03}/{:03}",
        hash % FANOUT,
        (hash / FANOUT) % FANOUT
    ));
    let object = dir.join(format!("{hash:016x}.data"));
    match fs::rename(&temp, &object) {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            // First object of this hash directory: make it, as Swift does, then retry.
            fs::create_dir_all(&dir).context(|| format!("mkdir {}", dir.display()))?;
            fs::rename(&temp, &object).context(|| format!("rename to {}", object.display()))
        }
        other => other.context(|| format!("rename to {}", object.display())),
    }
}

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let params = ctx.params;
    let root = ctx.dir.join("objects");
    let tmp = ctx.dir.join("tmp");
    for dir in [&root, &tmp] {
        fs::create_dir(dir).context(|| format!("mkdir {}", dir.display()))?;
    }
    let target = params.objects_count;
    let interval = sample_interval(target);
    let next = AtomicU64::new(0);
    let samples: Mutex<Vec<RawSample>> =
        Mutex::new(vec![(0, 0, memory_bytes(&ctx.target.daemon_pids))]);
    let payload = vec![b'o'; params.objects_size_bytes];
    let started = Instant::now();
    let ((), timed) = ctx.timed(|| {
        in_threads(params.threads, |_| {
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= target {
                    return Ok(());
                }
                // SplitMix64 of the index: a uniform, collision-free 64-bit "hash".
                let hash = SplitMix64::new(params.seed ^ index).next_u64();
                write_object(&root, &tmp, hash, &payload, params.fsync)?;
                let done = index + 1;
                if done.is_multiple_of(interval) || done == target {
                    interrupt::check()?;
                    let memory = memory_bytes(&ctx.target.daemon_pids);
                    let elapsed_ns = started.elapsed().as_nanos();
                    if let Ok(mut list) = samples.lock() {
                        list.push((done, elapsed_ns, memory));
                    }
                    (ctx.progress)(&format!(
                        "objects {done}/{target}, {:.0}/s",
                        done as f64 / (elapsed_ns as f64 / 1e9).max(1e-9)
                    ));
                }
            }
        })?;
        Ok(())
    })?;
    let raw = samples.into_inner().unwrap_or_default();
    let curve = curve_from(raw);
    let mut outcome = Outcome::default();
    outcome.rate_and_cpu("object create", "object", target, &timed);
    if let Some(last) = tail_rate(&curve) {
        outcome.metric(
            "object create rate, last 10%",
            "object/s",
            Better::Higher,
            last,
        );
    }
    let peak = curve.iter().map(|p| p.memory_bytes).max().unwrap_or(0);
    let memory_name = if ctx.target.daemon_pids.is_empty() {
        "peak system memory used"
    } else {
        "peak daemon RSS"
    };
    outcome.metric(
        memory_name,
        "MiB",
        Better::Lower,
        peak as f64 / (1 << 20) as f64,
    );
    // Recounting walks the whole tree twice: minutes per million objects on a FUSE mount.
    if target <= MAX_RECOUNTED_OBJECTS {
        let files = count_tree(&root)? - count_dirs(&root)?;
        outcome.count("objects", files);
    } else {
        outcome.notes.push(format!(
            "{target} objects written; not recounted (over {MAX_RECOUNTED_OBJECTS})"
        ));
    }
    outcome.count("temp_files_left", count_tree(&tmp)?);
    outcome.curve = curve;
    Ok(outcome)
}

fn count_dirs(root: &Path) -> Result<u64> {
    let mut dirs = 0;
    for first in fs::read_dir(root).context(|| format!("reading {}", root.display()))? {
        let first = first.context(|| format!("reading {}", root.display()))?;
        dirs += 1 + super::count_entries(&first.path())?;
    }
    Ok(dirs)
}

/// Sorts samples by count (threads report out of order) and turns them into rates over
/// each interval.
fn curve_from(mut raw: Vec<RawSample>) -> Vec<CurvePoint> {
    raw.sort_by_key(|sample| (sample.0, sample.1));
    raw.windows(2)
        .map(|pair| {
            let (prev_files, prev_ns, _) = pair[0];
            let (files, ns, memory) = pair[1];
            let secs = (ns.saturating_sub(prev_ns) as f64 / 1e9).max(1e-9);
            CurvePoint {
                files,
                elapsed_ms: ns as f64 / 1e6,
                rate_per_s: files.saturating_sub(prev_files) as f64 / secs,
                memory_bytes: memory,
            }
        })
        .collect()
}

/// The rate over the last tenth of the run: a store that slows with size shows it here.
fn tail_rate(curve: &[CurvePoint]) -> Option<f64> {
    let last = curve.last()?;
    let cutoff = last.files - last.files / 10;
    let start = curve.iter().rev().find(|p| p.files <= cutoff);
    let (files0, ms0) = start.map_or((0, 0.0), |p| (p.files, p.elapsed_ms));
    let secs = ((last.elapsed_ms - ms0) / 1e3).max(1e-9);
    Some((last.files - files0) as f64 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_one_percent_capped() {
        assert_eq!(sample_interval(50), 1);
        assert_eq!(sample_interval(50_000), 500);
        assert_eq!(sample_interval(20_000_000), 100_000);
    }

    #[test]
    fn curve_sorts_and_rates() {
        let raw = vec![(0, 0, 1), (20, 2_000_000_000, 3), (10, 1_000_000_000, 2)];
        let curve = curve_from(raw);
        assert_eq!(curve.len(), 2);
        assert_eq!(curve[0].files, 10);
        assert!((curve[0].rate_per_s - 10.0).abs() < 1e-9);
        assert_eq!(curve[1].memory_bytes, 3);
        assert!((tail_rate(&curve).unwrap() - 10.0).abs() < 1e-9);
    }
}
