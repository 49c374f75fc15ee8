//! The OpenStack Swift object-server pattern: objects in two levels of hashed directories
//! (1000 x 1000), each written as a temp file (+ optional fsync) and renamed into place,
//! by T threads, up to a target count. The rate is sampled every fixed number of objects,
//! so a 20M-object run shows whether the cost per object grows with the file count.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{count_tree, in_threads, Better, Ctx, CurvePoint, Outcome};
use crate::cpu::{process_rss_bytes, system_used_bytes};
use crate::error::{BenchError, IoContext, Result};
use crate::interrupt;
use crate::rng::SplitMix64;
use shoal_sys::statvfs::device_space as free_space;

/// Directories per hash level, as Swift's partition / suffix layout.
const FANOUT: u64 = 1000;
/// Above this many objects the written tree is not walked again to count them.
const MAX_RECOUNTED_OBJECTS: u64 = 200_000;
/// A sample every 1% of the target, but at least every this many objects.
const MAX_SAMPLE_INTERVAL: u64 = 100_000;
/// Disk an object takes besides its data: inode, directory entry, its share of the
/// directories (an estimate on the safe side for XFS, ext4, btrfs and shoal).
const OBJECT_OVERHEAD_BYTES: u64 = 1024;
/// Share of the free space the run may fill.
const FILLABLE_PERCENT: u64 = 90;

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

/// Bytes one object is expected to take on the target: its data rounded up to the block
/// size, except on shoal, which keeps small contents inline in the inode record.
fn bytes_per_object(payload_bytes: u64, block_bytes: u64, inline: bool) -> u64 {
    let data = if inline {
        payload_bytes
    } else {
        payload_bytes.div_ceil(block_bytes) * block_bytes
    };
    data + OBJECT_OVERHEAD_BYTES
}

/// How many of `wanted` objects fit in `free_bytes`, keeping a margin free.
fn objects_that_fit(wanted: u64, free_bytes: u64, per_object: u64) -> u64 {
    let fillable = free_bytes / 100 * FILLABLE_PERCENT;
    wanted.min(fillable / per_object.max(1))
}

/// Checks free disk before a long run and scales the count down, saying so, when short.
/// A loop filesystem needs room both inside its image and on the disk under the image.
fn count_for_free_space(ctx: &Ctx, outcome: &mut Outcome) -> Result<u64> {
    let wanted = ctx.params.objects_count;
    let mut dirs = vec![ctx.dir.as_path()];
    dirs.extend(ctx.target.backing_dir());
    let mut free_bytes = u64::MAX;
    let mut block_bytes = 1;
    for dir in dirs {
        let space = free_space(dir).context(|| format!("statvfs {}", dir.display()))?;
        free_bytes = free_bytes.min(space.available_bytes);
        block_bytes = block_bytes.max(space.block_bytes);
    }
    let payload = ctx.params.objects_size_bytes as u64;
    let per_object = bytes_per_object(payload, block_bytes, ctx.target.is_shoal());
    let count = objects_that_fit(wanted, free_bytes, per_object);
    if count == 0 {
        return Err(BenchError::Invalid(format!(
            "objects: no room on {}: {} MiB free, about {per_object} bytes per object",
            ctx.target.label,
            free_bytes >> 20
        )));
    }
    if count < wanted {
        let message = format!(
            "objects: {wanted} objects need about {} GiB on {}, which has {} GiB free: \
             writing {count} instead",
            (wanted * per_object) >> 30,
            ctx.target.label,
            free_bytes >> 30
        );
        eprintln!("{message}");
        outcome.notes.push(message);
    }
    Ok(count)
}

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let params = ctx.params;
    let root = ctx.dir.join("objects");
    let tmp = ctx.dir.join("tmp");
    for dir in [&root, &tmp] {
        fs::create_dir(dir).context(|| format!("mkdir {}", dir.display()))?;
    }
    let mut outcome = Outcome::default();
    let target = count_for_free_space(ctx, &mut outcome)?;
    let minutes = params.objects_minutes_for(&ctx.target.label);
    let interval = sample_interval(target);
    let (next, written) = (AtomicU64::new(0), AtomicU64::new(0));
    let samples: Mutex<Vec<RawSample>> =
        Mutex::new(vec![(0, 0, memory_bytes(&ctx.target.daemon_pids))]);
    let payload = vec![b'o'; params.objects_size_bytes];
    let started = Instant::now();
    let deadline = minutes.map(|m| started + Duration::from_secs_f64(m * 60.0));
    let ((), timed) = ctx.timed(|| {
        in_threads(params.threads, |_| {
            loop {
                // Every object, not only at samples: a thread that never hits a sample
                // boundary would otherwise write on after Ctrl-C.
                interrupt::check()?;
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(());
                }
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= target {
                    return Ok(());
                }
                // SplitMix64 of the index: a uniform, collision-free 64-bit "hash".
                let hash = SplitMix64::new(params.seed ^ index).next_u64();
                write_object(&root, &tmp, hash, &payload, params.fsync)?;
                written.fetch_add(1, Ordering::Relaxed);
                let done = index + 1;
                if done.is_multiple_of(interval) || done == target {
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
    let elapsed_ns = started.elapsed().as_nanos();
    let written = written.into_inner();
    let mut raw = samples.into_inner().unwrap_or_default();
    if written < target {
        // Stopped by the time limit: the curve ends where the writing did.
        raw.push((written, elapsed_ns, memory_bytes(&ctx.target.daemon_pids)));
        outcome.notes.push(format!(
            "stopped at the time limit ({} minutes) after {written} of {target} objects",
            minutes.unwrap_or_default()
        ));
    }
    let curve = curve_from(raw);
    outcome.rate_and_cpu("object create", "object", written, &timed);
    curve_metrics(&mut outcome, &curve, !ctx.target.daemon_pids.is_empty());
    // Recounting walks the whole tree twice: minutes per million objects on a FUSE mount.
    if written <= MAX_RECOUNTED_OBJECTS {
        let files = count_tree(&root)? - count_dirs(&root)?;
        outcome.count("objects", files);
    } else {
        outcome.notes.push(format!(
            "{written} objects written; not recounted (over {MAX_RECOUNTED_OBJECTS})"
        ));
    }
    outcome.count("temp_files_left", count_tree(&tmp)?);
    outcome.curve = curve;
    Ok(outcome)
}

/// The create rate at the start and the end of the curve, and the peak memory (the
/// daemon's RSS when the target has one, else the system's).
fn curve_metrics(outcome: &mut Outcome, curve: &[CurvePoint], has_daemon: bool) {
    if let (Some(first), Some(last)) = (head_rate(curve), tail_rate(curve)) {
        outcome.metric(
            "object create rate, first 10%",
            "object/s",
            Better::Higher,
            first,
        );
        outcome.metric(
            "object create rate, last 10%",
            "object/s",
            Better::Higher,
            last,
        );
        outcome.metric(
            "object create rate, last 10% / first 10%",
            "x",
            Better::Higher,
            last / first.max(1e-9),
        );
    }
    let peak = curve.iter().map(|p| p.memory_bytes).max().unwrap_or(0);
    let memory_name = if has_daemon {
        "peak daemon RSS"
    } else {
        "peak system memory used"
    };
    outcome.metric(
        memory_name,
        "MiB",
        Better::Lower,
        peak as f64 / (1 << 20) as f64,
    );
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

/// The rate over the first tenth of the run (objects written, not time), against which
/// the last tenth is compared.
fn head_rate(curve: &[CurvePoint]) -> Option<f64> {
    let last = curve.last()?;
    let end = curve.iter().find(|p| p.files >= last.files / 10)?;
    Some(end.files as f64 / (end.elapsed_ms / 1e3).max(1e-9))
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
        assert!((head_rate(&curve).unwrap() - 10.0).abs() < 1e-9);
    }

    #[test]
    fn head_and_tail_show_a_slowdown() {
        // 100 objects at 10/s, then 100 at 5/s: the last tenth is half the first.
        let mut raw = vec![(0, 0, 0)];
        for step in 1..=20u64 {
            let secs = if step <= 10 {
                step
            } else {
                10 + 2 * (step - 10)
            };
            raw.push((step * 10, u128::from(secs) * 1_000_000_000, 0));
        }
        let curve = curve_from(raw);
        assert!((head_rate(&curve).unwrap() - 10.0).abs() < 1e-9);
        assert!((tail_rate(&curve).unwrap() - 5.0).abs() < 1e-9);
    }

    #[test]
    fn object_size_and_fit_follow_the_disk() {
        assert_eq!(
            bytes_per_object(1024, 4096, false),
            4096 + OBJECT_OVERHEAD_BYTES
        );
        assert_eq!(
            bytes_per_object(1024, 4096, true),
            1024 + OBJECT_OVERHEAD_BYTES
        );
        assert_eq!(
            bytes_per_object(5000, 4096, false),
            8192 + OBJECT_OVERHEAD_BYTES
        );
        // Plenty of room: the count stands.
        assert_eq!(objects_that_fit(1_000, 1 << 40, 5120), 1_000);
        // 10 GiB free, 90% fillable, 5 KiB each: about 1.9M.
        let fit = objects_that_fit(20_000_000, 10 << 30, 5120);
        assert_eq!(fit, (10u64 << 30) / 100 * 90 / 5120);
        assert_eq!(objects_that_fit(5, 100, 5120), 0);
    }
}
