//! Verifies every usage counter against a parallel scan of the inode records, on a
//! consistent snapshot: offline on a store directory, or online while writes go on.
//!
//! The counters never need this to be correct (they change in the operation's own batch);
//! it is the proof, and it has to be fast enough to run on millions of inodes at will.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::records::inode::{Usage, UsageKey};
use crate::store::{Scan, Space, Store, StoreView};
use crate::store_dir::open::OpenError;

/// Slices of the inode-number space per thread: enough that a slow slice (a dense run of
/// inodes) does not leave the other threads idle at the end.
const SLICES_PER_THREAD: usize = 16;

#[derive(Debug, Default)]
pub struct CountersReport {
    pub inodes_scanned: u64,
    pub counters_checked: usize,
    pub threads: usize,
    pub mismatch_count: usize,
    /// One line per counter that differs from the scan (stored vs scanned).
    pub mismatches: Vec<String>,
    pub elapsed: Duration,
}

impl CountersReport {
    pub fn is_clean(&self) -> bool {
        self.mismatch_count == 0
    }

    pub fn inodes_per_second(&self) -> f64 {
        self.inodes_scanned as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn summary(&self) -> String {
        let mut text = format!(
            "counters: {} counters vs {} inodes scanned on {} threads in {:.3} s ({:.0} inodes/s)\n",
            self.counters_checked,
            self.inodes_scanned,
            self.threads,
            self.elapsed.as_secs_f64(),
            self.inodes_per_second(),
        );
        if self.is_clean() {
            text.push_str("counters clean\n");
        } else {
            let _ = writeln!(text, "{} counter(s) differ:", self.mismatch_count);
            for line in &self.mismatches {
                let _ = writeln!(text, "  - {line}");
            }
        }
        text
    }
}

impl Engine {
    /// Checks the counters on a snapshot while the filesystem stays writable.
    pub fn verify_counters(&self, threads: usize) -> FsResult<CountersReport> {
        verify_counters(self.store().snapshot().as_ref(), threads)
    }
}

/// Checks the counters of the store in `dir`, which must not be mounted.
pub fn verify_counters_store_dir(dir: &Path, threads: usize) -> Result<CountersReport, OpenError> {
    let (_lock, store) = crate::store_dir::open::open_offline(dir)?;
    Ok(verify_counters(store.snapshot().as_ref(), threads)?)
}

pub fn verify_counters(view: &dyn StoreView, threads: usize) -> FsResult<CountersReport> {
    let started = Instant::now();
    let threads = threads.max(1);
    let slices = inode_slices(view, threads * SLICES_PER_THREAD)?;
    let next_slice = AtomicUsize::new(0);
    let partials: Vec<FsResult<(HashMap<UsageKey, Usage>, u64)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| scope.spawn(|| scan_slices(view, &slices, &next_slice)))
            .collect();
        workers
            .into_iter()
            .map(|worker| {
                worker.join().unwrap_or_else(|_| {
                    Err(FsError::Corrupt("counter scan thread panicked".into()))
                })
            })
            .collect()
    });
    let mut scanned = HashMap::new();
    let mut inodes_scanned = 0;
    for partial in partials {
        let (usage, inodes) = partial?;
        inodes_scanned += inodes;
        for (owners, counted) in usage {
            let total: &mut Usage = scanned.entry(owners).or_default();
            total.inodes += counted.inodes;
            total.bytes += counted.bytes;
        }
    }
    let stored = stored_counters(view)?;
    let mut report = CountersReport {
        inodes_scanned,
        counters_checked: stored.len(),
        threads,
        ..CountersReport::default()
    };
    let owners: BTreeSet<UsageKey> = stored.keys().chain(scanned.keys()).copied().collect();
    for owners in owners {
        let kept = stored.get(&owners).copied().unwrap_or_default();
        let found = scanned.get(&owners).copied().unwrap_or_default();
        if kept != found {
            report.mismatch_count += 1;
            report.mismatches.push(format!(
                "uid {} gid {} project {}: counter says {} inodes {} bytes, scan finds {} inodes {} bytes",
                owners.uid, owners.gid, owners.project, kept.inodes, kept.bytes, found.inodes, found.bytes
            ));
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Splits `[first inode, last inode]` into about `count` key ranges of equal width (inode
/// numbers are handed out densely, in runs, so equal widths hold similar counts).
fn inode_slices(view: &dyn StoreView, count: usize) -> FsResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let (start, end) = keys::all_inodes_range();
    let Some(last) = view.last_key(Space::Meta, &start, &end)? else {
        return Ok(Vec::new());
    };
    let last_ino = keys::decode_inode_key(&last)?;
    let width = (last_ino / count as u64).max(1);
    let mut slices = Vec::with_capacity(count + 1);
    let mut from = 0u64;
    while from <= last_ino {
        let to = from.saturating_add(width);
        let slice_end = if to > last_ino {
            end.clone()
        } else {
            keys::inode_key(to)
        };
        slices.push((keys::inode_key(from), slice_end));
        from = to;
    }
    Ok(slices)
}

fn scan_slices(
    view: &dyn StoreView,
    slices: &[(Vec<u8>, Vec<u8>)],
    next_slice: &AtomicUsize,
) -> FsResult<(HashMap<UsageKey, Usage>, u64)> {
    let mut usage: HashMap<UsageKey, Usage> = HashMap::new();
    let mut inodes = 0u64;
    let mut failure = None;
    while let Some((start, end)) = slices.get(next_slice.fetch_add(1, Ordering::Relaxed)) {
        view.scan(Space::Meta, start, end, &mut |key, value| {
            let decoded =
                keys::decode_inode_key(key).and_then(|ino| keys::decode_inode_usage(ino, value));
            match decoded {
                Ok((owners, bytes)) => {
                    let counted = usage.entry(owners).or_default();
                    counted.inodes += 1;
                    counted.bytes += bytes;
                    inodes += 1;
                    Scan::Continue
                }
                Err(error) => {
                    failure = Some(error);
                    Scan::Stop
                }
            }
        })?;
        if let Some(error) = failure.take() {
            return Err(error);
        }
    }
    Ok((usage, inodes))
}

fn stored_counters(view: &dyn StoreView) -> FsResult<HashMap<UsageKey, Usage>> {
    let mut stored = HashMap::new();
    let mut failure = None;
    let (start, end) = keys::all_counters_range();
    view.scan(
        Space::Meta,
        &start,
        &end,
        &mut |key, value| match keys::decode_counter_key(key)
            .and_then(|owners| Ok((owners, keys::decode_usage(key, value)?)))
        {
            Ok((owners, usage)) => {
                stored.insert(owners, usage);
                Scan::Continue
            }
            Err(error) => {
                failure = Some(error);
                Scan::Stop
            }
        },
    )?;
    match failure {
        Some(error) => Err(error),
        None => Ok(stored),
    }
}
