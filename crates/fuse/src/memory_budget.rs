//! `-o memory=`: a bound on what the daemon holds for the kernel. Every inode the kernel
//! references costs one lookup-table entry, and the kernel keeps references as long as it
//! keeps the dentries, which with 24 GiB of RAM is until unmount: a `find` over 20M files
//! would grow the table without bound. Over budget, a background thread asks the kernel to
//! drop the least recently looked-up names (FUSE_NOTIFY_INVAL_ENTRY); the kernel then sends
//! FORGET for inodes nothing else holds, and the table shrinks. The table gives way to
//! everything else resident: the store's cache and write buffers as the store counts them,
//! and the rest of the resident set (program, stacks, allocator slack) as measured.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use fuser::{INodeNo, Notifier};
use shoal_engine::Engine;

use crate::fuse_stats::FuseStats;
use crate::heap;

/// How often the budget is checked: often enough that a `find` at ~50k lookups/s overshoots
/// by a few thousand entries at most.
const CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// Evict down to this fraction of the budget, so one round buys room for many lookups.
const TARGET_PERCENT: u64 = 85;
/// Bound on the names invalidated per round (each is one write to /dev/fuse).
const MAX_EVICTIONS_PER_ROUND: usize = 100_000;
/// Rounds after which names the kernel kept (open files, cwds, stale names) are retried.
const RETRY_ROUNDS: u64 = 50;
/// Near the budget, free heap pages are handed back at most this often (unless over it):
/// a purge returns pages that writers then fault in again, and purging every round at the
/// budget cost a 20M-file run's late create rate.
const PURGE_INTERVAL: Duration = Duration::from_secs(1);

/// Starts the thread that keeps the daemon's resident set (the lookup table, the store's
/// cache and write buffers, and the rest) within `budget_bytes` by shrinking the table. It
/// ends when the engine is dropped.
pub fn spawn(
    budget_bytes: u64,
    engine: Weak<Engine>,
    stats: Arc<FuseStats>,
    notifier: Notifier,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("shoal-memory".into())
        .spawn(move || {
            let mut round = 0u64;
            let mut retry_clock = stats.lookups.clock();
            let mut warned = false;
            let mut last_purge: Option<Instant> = None;
            let mut quiet = Quiet::default();
            loop {
                std::thread::sleep(CHECK_INTERVAL);
                if quiet.skip_round(stats.requests_total()) {
                    continue;
                }
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                // The store's block cache, write buffers (memtables) and in-memory content
                // are held whatever the kernel does; the lookup table gives way to fit them.
                let store_bytes = engine.store_memory_bytes();
                drop(engine);
                round += 1;
                if round.is_multiple_of(RETRY_ROUNDS) {
                    stats.lookups.retry_kept_evictions(retry_clock);
                    retry_clock = stats.lookups.clock();
                }
                // Read once a round: each read locks every shard.
                let table_bytes = stats.lookups.table_bytes();
                let counted = store_bytes + table_bytes;
                let uncounted_bytes =
                    uncounted_resident_bytes(budget_bytes, counted, &stats, &mut last_purge);
                if !warned && store_bytes + uncounted_bytes >= budget_bytes {
                    warned = true;
                    tracing::warn!(
                        budget_bytes,
                        store_bytes,
                        uncounted_bytes,
                        "the memory budget is below what the daemon holds besides its \
                         table of kernel references: every reference is dropped"
                    );
                }
                enforce(
                    budget_bytes,
                    store_bytes + uncounted_bytes,
                    table_bytes,
                    &stats,
                    &notifier,
                );
                quiet.within_target = (store_bytes + uncounted_bytes + table_bytes) * 100
                    <= budget_bytes * TARGET_PERCENT;
            }
        })?;
    Ok(())
}

/// Rounds skipped while nothing happens: with no request since the last round and the
/// daemon within the target, the table cannot have grown, so an idle mount does no work
/// (the full round reads /proc and locks every shard). Work the kernel does not see
/// (imports, reclaim, flushes) is caught by a full round at least every `QUIET_ROUNDS`.
#[derive(Default)]
struct Quiet {
    last_requests: u64,
    within_target: bool,
    skipped: u64,
}

const QUIET_ROUNDS: u64 = 50;

impl Quiet {
    fn skip_round(&mut self, requests: u64) -> bool {
        let unchanged = requests == self.last_requests;
        self.last_requests = requests;
        if unchanged && self.within_target && self.skipped + 1 < QUIET_ROUNDS {
            self.skipped += 1;
            return true;
        }
        self.skipped = 0;
        false
    }
}

/// Resident memory that neither the lookup table nor the store accounts for: the program,
/// thread stacks, request buffers, allocator slack. Near the budget, free heap pages
/// (freed table entries, flushed memtables) are first handed back to the system rather
/// than left to age out, so they are not taken for memory in use.
fn uncounted_resident_bytes(
    budget_bytes: u64,
    counted_bytes: u64,
    stats: &FuseStats,
    last_purge: &mut Option<Instant>,
) -> u64 {
    let Some(mut resident) = resident_bytes() else {
        return 0;
    };
    if purge_due(budget_bytes, resident, *last_purge) {
        let started = Instant::now();
        *last_purge = Some(started);
        if heap::release_free_memory() {
            stats.record_heap_trim(started.elapsed());
        }
        resident = resident_bytes().unwrap_or(resident);
    }
    resident.saturating_sub(counted_bytes)
}

/// Whether to hand free heap pages back now: near the budget once per `PURGE_INTERVAL`,
/// over it every round.
fn purge_due(budget_bytes: u64, resident_bytes: u64, last_purge: Option<Instant>) -> bool {
    if resident_bytes > budget_bytes {
        return true;
    }
    resident_bytes > budget_bytes * TARGET_PERCENT / 100
        && last_purge.is_none_or(|at| at.elapsed() >= PURGE_INTERVAL)
}

/// How many references to drop so the table plus everything else held (`held_bytes`) fit
/// `TARGET_PERCENT` of the budget; 0 when within budget.
pub(crate) fn references_to_drop(
    budget_bytes: u64,
    held_bytes: u64,
    table_bytes: u64,
    referenced: u64,
) -> usize {
    if table_bytes + held_bytes <= budget_bytes || referenced == 0 {
        return 0;
    }
    let target = budget_bytes * TARGET_PERCENT / 100;
    let excess = (table_bytes + held_bytes).saturating_sub(target);
    let bytes_per_reference = (table_bytes / referenced).max(1);
    let wanted = excess.div_ceil(bytes_per_reference).min(referenced);
    usize::try_from(wanted)
        .unwrap_or(usize::MAX)
        .min(MAX_EVICTIONS_PER_ROUND)
}

fn enforce(
    budget_bytes: u64,
    held_bytes: u64,
    table_bytes: u64,
    stats: &FuseStats,
    notifier: &Notifier,
) {
    // Room is kept for the table's next growth, which comes all at once.
    let wanted = references_to_drop(
        budget_bytes,
        held_bytes + stats.lookups.imminent_growth_bytes(),
        table_bytes,
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

/// This process's resident set: the second field of /proc/self/statm, in pages.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * shoal_sys::process::page_bytes())
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

    #[test]
    fn quiet_rounds_are_skipped_only_without_requests_and_within_target() {
        let mut quiet = Quiet::default();
        assert!(!quiet.skip_round(0), "no round done yet: nothing known");
        quiet.within_target = true;
        let skipped = (0..QUIET_ROUNDS).filter(|_| quiet.skip_round(0)).count() as u64;
        assert_eq!(skipped, QUIET_ROUNDS - 1, "a full round every QUIET_ROUNDS");
        assert!(!quiet.skip_round(1), "a request: a full round");
        quiet.within_target = false;
        assert!(!quiet.skip_round(1), "near the budget: every round");
    }

    #[test]
    fn purges_near_the_budget_once_a_second_and_over_it_every_round() {
        let just_now = Some(Instant::now());
        assert!(!purge_due(1000, 800, None), "below 85%: never");
        assert!(purge_due(1000, 900, None));
        assert!(!purge_due(1000, 900, just_now));
        let a_while_ago = Instant::now().checked_sub(PURGE_INTERVAL);
        assert!(purge_due(1000, 900, a_while_ago));
        assert!(
            purge_due(1000, 1001, just_now),
            "over the budget: every round"
        );
    }
}
