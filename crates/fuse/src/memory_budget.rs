//! `-o memory=`: a bound on what the daemon holds for the kernel. Every inode the kernel
//! references costs one lookup-table entry, and the kernel keeps references as long as it
//! keeps the dentries, which with 24 GiB of RAM is until unmount: a `find` over 20M files
//! would grow the table without bound. Over budget, a background thread asks the kernel to
//! drop the least recently looked-up names (FUSE_NOTIFY_INVAL_ENTRY); the kernel then sends
//! FORGET for inodes nothing else holds, and the table shrinks.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use fuser::{INodeNo, Notifier};
use shoal_engine::Engine;

use crate::fuse_stats::FuseStats;

/// How often the budget is checked: often enough that a `find` at ~50k lookups/s overshoots
/// by a few thousand entries at most.
const CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// Evict down to this fraction of the budget, so one round buys room for many lookups.
const TARGET_PERCENT: u64 = 85;
/// Bound on the names invalidated per round (each is one write to /dev/fuse).
const MAX_EVICTIONS_PER_ROUND: usize = 100_000;
/// Rounds after which names the kernel kept (open files, cwds, stale names) are retried.
const RETRY_ROUNDS: u64 = 50;
/// Rounds between two returns of the allocator's free memory to the system.
const TRIM_ROUNDS: u64 = 10;
/// glibc malloc arenas: its default (8 per core) lets each of the daemon's threads keep its
/// own heap of freed memtable and request memory, which the budget never sees.
const MALLOC_ARENAS: libc::c_int = 2;

/// Starts the thread that keeps the lookup table plus the engine's block cache within
/// `budget_bytes`. It ends when the engine is dropped.
pub fn spawn(
    budget_bytes: u64,
    engine: Weak<Engine>,
    stats: Arc<FuseStats>,
    notifier: Notifier,
) -> std::io::Result<()> {
    // SAFETY: mallopt only changes allocator tuning; any value is accepted or refused.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS) };
    std::thread::Builder::new()
        .name("shoal-memory".into())
        .spawn(move || {
            let mut round = 0u64;
            let mut retry_clock = stats.lookups.clock();
            loop {
                std::thread::sleep(CHECK_INTERVAL);
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                // The store's block cache and write buffers (memtables) are held whatever
                // the kernel does; the lookup table gives way to fit them.
                let store = engine.stats_snapshot().1;
                let cache_bytes = store.cache_used_bytes + store.write_buffer_bytes;
                drop(engine);
                round += 1;
                if round.is_multiple_of(RETRY_ROUNDS) {
                    stats.lookups.retry_kept_evictions(retry_clock);
                    retry_clock = stats.lookups.clock();
                }
                enforce(budget_bytes, cache_bytes, &stats, &notifier);
                if round.is_multiple_of(TRIM_ROUNDS) {
                    return_free_memory_over(budget_bytes);
                }
            }
        })?;
    Ok(())
}

/// How many references to drop so the table plus the cache fit `TARGET_PERCENT` of the
/// budget; 0 when within budget.
pub(crate) fn references_to_drop(
    budget_bytes: u64,
    cache_bytes: u64,
    table_bytes: u64,
    referenced: u64,
) -> usize {
    if table_bytes + cache_bytes <= budget_bytes || referenced == 0 {
        return 0;
    }
    let target = budget_bytes * TARGET_PERCENT / 100;
    let excess = (table_bytes + cache_bytes).saturating_sub(target);
    let bytes_per_reference = (table_bytes / referenced).max(1);
    let wanted = excess.div_ceil(bytes_per_reference).min(referenced);
    usize::try_from(wanted)
        .unwrap_or(usize::MAX)
        .min(MAX_EVICTIONS_PER_ROUND)
}

fn enforce(budget_bytes: u64, cache_bytes: u64, stats: &FuseStats, notifier: &Notifier) {
    let wanted = references_to_drop(
        budget_bytes,
        cache_bytes,
        stats.lookups.table_bytes(),
        stats.lookups.referenced_inodes(),
    );
    for candidate in stats.lookups.take_eviction_candidates(wanted) {
        let name = OsStr::from_bytes(&candidate.name);
        match notifier.inval_entry(INodeNo(candidate.parent), name) {
            Ok(()) => stats.evictions.fetch_add(1, Ordering::Relaxed),
            // ENOENT: the kernel no longer has that name (renamed, or already dropped).
            Err(_) => stats.failed_evictions.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// Over budget by resident set, hands the allocator's free pages back to the system: freed
/// memtables and request buffers otherwise stay resident in malloc's heaps.
fn return_free_memory_over(budget_bytes: u64) {
    if resident_bytes().is_some_and(|rss| rss > budget_bytes) {
        // SAFETY: malloc_trim has no preconditions; it only releases free memory.
        unsafe { libc::malloc_trim(0) };
    }
}

/// This process's resident set: the second field of /proc/self/statm, in pages.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page_bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page_bytes).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_nothing_within_budget_and_enough_over_it() {
        assert_eq!(references_to_drop(1000, 200, 800, 10), 0);
        // 1100 held, target 850: 250 bytes at 80 bytes each.
        assert_eq!(references_to_drop(1000, 300, 800, 10), 4);
        // The cache alone over budget: everything goes, and no more.
        assert_eq!(references_to_drop(1000, 2000, 800, 10), 10);
        assert_eq!(references_to_drop(1000, 2000, 0, 0), 0);
    }
}
