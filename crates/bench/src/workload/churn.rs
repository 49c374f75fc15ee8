//! Space amplification under churn, as an object store's disks see it: a live set of N
//! objects of mixed small sizes in Swift-like hashed directories, filled once, then
//! overwritten (a temp file renamed over the object), deleted and created again at random
//! by T threads for a fixed time. Every few seconds a sample records the live bytes (the
//! sum of the objects' sizes) and the bytes the filesystem uses for them, so the report
//! shows whether deleted and overwritten space comes back.
//!
//! Used bytes: for a shoal mount with a store (made here, or as its daemon names it), the
//! store directory's allocated blocks (as `du` counts them: journals, tables and blob
//! files); for any other target, `df`'s used bytes minus those at the start of the
//! workload (a fresh filesystem's own metadata).

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{in_threads, Better, Ctx, Outcome};
use crate::error::{BenchError, IoContext, Result};
use crate::interrupt;
use crate::rng::SplitMix64;

/// Hashed directories objects spread over (Swift's suffix directories).
const FANOUT: u64 = 256;
/// Of the churn operations on a live object: percent that overwrite it (the rest delete
/// it); a deleted object is created again when picked. The live set settles near 5/6 N.
const OVERWRITE_PERCENT: u64 = 80;

/// One point of the space-amplification curve.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SpacePoint {
    pub elapsed_ms: f64,
    /// "fill" while the live set is first written, then "churn".
    pub phase: String,
    /// Sum of the sizes of the objects that exist.
    pub live_bytes: u64,
    /// Bytes the filesystem (or shoal's store) takes on its device.
    pub used_bytes: u64,
    /// used / live.
    pub amplification: f64,
    /// Object writes and deletes since the start.
    pub operations: u64,
}

/// A mixed, small-object size: half below 4 KiB, most below 32 KiB, a few up to 1 MiB
/// (about 44 KB on average).
fn object_size(rng: &mut SplitMix64) -> u64 {
    match rng.below(100) {
        0..50 => rng.range(512, 4096),
        50..85 => rng.range(4096, 32 << 10),
        85..97 => rng.range(32 << 10, 256 << 10),
        _ => rng.range(256 << 10, 1 << 20),
    }
}

fn object_path(root: &Path, index: u64) -> PathBuf {
    root.join(format!("{:03x}/{index:08x}.data", index % FANOUT))
}

/// Writes `bytes` random bytes (incompressible, as stored objects mostly are) as a temp
/// file and renames it over the object (Swift's PUT).
fn put(
    root: &Path,
    rng: &mut SplitMix64,
    (thread, index): (usize, u64),
    bytes: u64,
    fsync: bool,
) -> Result<()> {
    let temp = root.join(format!("tmp/{thread}.tmp"));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp)
        .context(|| format!("create {}", temp.display()))?;
    let mut payload = vec![0u8; bytes as usize];
    rng.fill_bytes(&mut payload);
    file.write_all(&payload)
        .context(|| format!("write {}", temp.display()))?;
    if fsync {
        file.sync_all()
            .context(|| format!("fsync {}", temp.display()))?;
    }
    drop(file);
    let object = object_path(root, index);
    fs::rename(&temp, &object).context(|| format!("rename to {}", object.display()))
}

/// Bytes the target uses now; see the module comment.
struct UsedMeter {
    store: Option<PathBuf>,
    mount: PathBuf,
    baseline: u64,
}

impl UsedMeter {
    fn new(ctx: &Ctx) -> Result<UsedMeter> {
        let store = ctx.target.shoal_store();
        let mut meter = UsedMeter {
            store,
            mount: ctx.dir.clone(),
            baseline: 0,
        };
        if meter.store.is_none() {
            meter.baseline = df_used(&meter.mount)?;
        }
        Ok(meter)
    }

    fn used(&self) -> Result<u64> {
        match &self.store {
            Some(store) => allocated_under(store),
            None => Ok(df_used(&self.mount)?.saturating_sub(self.baseline)),
        }
    }

    fn describe(&self) -> String {
        match &self.store {
            Some(store) => format!("used = allocated blocks under {}", store.display()),
            None => format!("used = df used minus {} bytes at the start", self.baseline),
        }
    }
}

fn df_used(path: &Path) -> Result<u64> {
    let space =
        shoal_sys::statvfs::device_space(path).context(|| format!("statvfs {}", path.display()))?;
    Ok(space.used_bytes)
}

/// `du`-style: the allocated blocks of every file below `dir`.
fn allocated_under(dir: &Path) -> Result<u64> {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let entries = match fs::read_dir(&current) {
            Ok(entries) => entries,
            // fjall deletes files and folders as it compacts.
            Err(error) if error.kind() == ErrorKind::NotFound => continue,
            Err(error) => return Err(error).context(|| format!("reading {}", current.display())),
        };
        for entry in entries.flatten() {
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            total += metadata.blocks() * 512;
            if metadata.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    Ok(total)
}

/// Seconds between samples: about 30 points per run, 1-10 s apart.
fn sample_every(seconds: u64) -> Duration {
    Duration::from_secs((seconds / 30).clamp(1, 10))
}

/// What the churn threads and the sampler share.
#[derive(Default)]
struct ChurnState {
    /// Sum of the sizes of the objects that exist.
    live_bytes: AtomicU64,
    /// Puts and deletes so far, fill included.
    operations: AtomicU64,
    /// Set once the fill is done: the threads start churning.
    churning: AtomicBool,
    /// Set when the threads have finished (or the sampler has failed).
    done: AtomicBool,
}

impl ChurnState {
    /// Ends the run: threads still waiting for the fill go on, and stop at once.
    fn finish(&self) {
        self.done.store(true, Ordering::Release);
        self.churning.store(true, Ordering::Release);
    }
}

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let params = ctx.params;
    let root = ctx.dir.join("objects");
    for dir in (0..FANOUT)
        .map(|suffix| root.join(format!("{suffix:03x}")))
        .chain([root.join("tmp")])
    {
        fs::create_dir_all(&dir).context(|| format!("mkdir {}", dir.display()))?;
    }
    let meter = UsedMeter::new(ctx)?;
    let state = ChurnState::default();
    let started = Instant::now();
    let mut curve = Vec::new();
    let (worked, timed) = ctx.timed(|| {
        std::thread::scope(|scope| {
            let workers = scope.spawn(|| {
                let result = in_threads(params.threads.max(1), |thread| {
                    churn_thread(ctx, &root, &state, thread)
                });
                state.finish();
                result
            });
            let sampled = sample_space(ctx, &meter, &state, started, &mut curve);
            if sampled.is_err() {
                state.finish();
            }
            let worked = workers
                .join()
                .unwrap_or_else(|_| Err(BenchError::Invalid("churn workers panicked".into())));
            sampled.and(worked.map(|_| ()))
        })
    })?;
    let () = worked;
    let churn_ops = state
        .operations
        .load(Ordering::Relaxed)
        .saturating_sub(params.churn_objects);
    let mut outcome = Outcome::default();
    outcome.rate_and_cpu("churn", "op", churn_ops.max(1), &timed);
    space_metrics(&mut outcome, &curve);
    outcome.count("objects", params.churn_objects);
    outcome.count("churn_operations", churn_ops);
    outcome.notes.push(format!(
        "churn: {} objects (mixed 0.5 KiB-1 MiB), {OVERWRITE_PERCENT}% overwrites / \
         {}% deletes of live objects, {} s after the fill; {}",
        params.churn_objects,
        100 - OVERWRITE_PERCENT,
        params.churn_seconds,
        meter.describe()
    ));
    outcome.space_curve = curve;
    Ok(outcome)
}

/// One thread: puts its share of the objects (index % threads == thread), waits for the
/// others to finish theirs, then overwrites and deletes its objects at random until the
/// churn time is up.
fn churn_thread(ctx: &Ctx, root: &Path, state: &ChurnState, thread: usize) -> Result<()> {
    let params = ctx.params;
    let threads = params.threads.max(1);
    let mut rng = SplitMix64::new(params.seed ^ ((thread as u64 + 1) * 0x9e37));
    let mine: Vec<u64> = (thread as u64..params.churn_objects)
        .step_by(threads)
        .collect();
    let mut sizes = vec![0u64; mine.len()];
    for (slot, &index) in mine.iter().enumerate() {
        interrupt::check()?;
        let bytes = object_size(&mut rng);
        put(root, &mut rng, (thread, index), bytes, params.fsync)?;
        sizes[slot] = bytes;
        state.live_bytes.fetch_add(bytes, Ordering::Relaxed);
        state.operations.fetch_add(1, Ordering::Relaxed);
    }
    while !state.churning.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Each worker keeps its own time: a sampler slow to wake (a loaded machine) does not
    // stretch the run.
    let until = Instant::now() + Duration::from_secs(params.churn_seconds);
    while !state.done.load(Ordering::Acquire) && Instant::now() < until && !mine.is_empty() {
        interrupt::check()?;
        let slot = rng.below(mine.len() as u64) as usize;
        let index = mine[slot];
        let old = sizes[slot];
        if old > 0 && rng.below(100) >= OVERWRITE_PERCENT {
            let path = object_path(root, index);
            fs::remove_file(&path).context(|| format!("unlink {}", path.display()))?;
            sizes[slot] = 0;
        } else {
            let bytes = object_size(&mut rng);
            put(root, &mut rng, (thread, index), bytes, params.fsync)?;
            sizes[slot] = bytes;
            state.live_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        state.live_bytes.fetch_sub(old, Ordering::Relaxed);
        state.operations.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// The sampler: starts the churn once the fill is done, and records a point of the space
/// curve every `sample_every` until the threads finish.
fn sample_space(
    ctx: &Ctx,
    meter: &UsedMeter,
    state: &ChurnState,
    started: Instant,
    curve: &mut Vec<SpacePoint>,
) -> Result<()> {
    let objects = ctx.params.churn_objects;
    let every = sample_every(ctx.params.churn_seconds);
    let mut churn_started = false;
    let mut last_fill = 0;
    loop {
        std::thread::sleep(every.min(Duration::from_millis(500)));
        if !churn_started && state.operations.load(Ordering::Relaxed) >= objects {
            churn_started = true;
            state.churning.store(true, Ordering::Release);
        }
        let due = curve.last().is_none_or(|point| {
            started.elapsed().as_secs_f64() * 1e3 - point.elapsed_ms >= every.as_secs_f64() * 1e3
        });
        let finished = state.done.load(Ordering::Acquire);
        if due || finished {
            let live = state.live_bytes.load(Ordering::Relaxed);
            let used = meter.used()?;
            let ops = state.operations.load(Ordering::Relaxed);
            let phase = if churn_started { "churn" } else { "fill" };
            if churn_started {
                (ctx.progress)(&format!("churn: {} operations", ops - last_fill));
            } else {
                last_fill = ops;
                (ctx.progress)(&format!("churn: filling {ops}/{objects}"));
            }
            curve.push(SpacePoint {
                elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
                phase: phase.to_string(),
                live_bytes: live,
                used_bytes: used,
                amplification: used as f64 / live.max(1) as f64,
                operations: ops,
            });
        }
        if finished {
            return Ok(());
        }
    }
}

/// The end of the curve and its worst point while churning.
fn space_metrics(outcome: &mut Outcome, curve: &[SpacePoint]) {
    if let Some(last) = curve.last() {
        let amplification = last.amplification;
        outcome.metric(
            "space amplification at the end",
            "x",
            Better::Lower,
            amplification,
        );
        let live = last.live_bytes as f64;
        outcome.metric("live bytes at the end", "B", Better::Higher, live);
        let used = last.used_bytes as f64;
        outcome.metric("used bytes at the end", "B", Better::Lower, used);
    }
    let churned = curve.iter().filter(|point| point.phase == "churn");
    if let Some(worst) = churned
        .map(|point| point.amplification)
        .max_by(f64::total_cmp)
    {
        outcome.metric(
            "space amplification, worst while churning",
            "x",
            Better::Lower,
            worst,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_mixed_and_small() {
        let mut rng = SplitMix64::new(7);
        let sizes: Vec<u64> = (0..10_000).map(|_| object_size(&mut rng)).collect();
        let mean = sizes.iter().sum::<u64>() / sizes.len() as u64;
        assert!((30_000..60_000).contains(&mean), "mean {mean}");
        assert!(sizes.iter().all(|&size| (512..=1 << 20).contains(&size)));
        assert!(sizes.iter().filter(|&&size| size < 4096).count() > 4000);
    }

    #[test]
    fn allocated_under_counts_blocks() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        fs::write(dir.path().join("sub/a"), vec![1u8; 100_000]).unwrap();
        let used = allocated_under(dir.path()).unwrap();
        assert!(used >= 100_000, "{used}");
    }
}
