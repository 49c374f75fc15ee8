//! The kernel's references to inodes (FUSE lookup counts): +1 for each entry we hand out,
//! -n on forget. Sharded so request threads rarely contend.
//!
//! Each entry also remembers the name the kernel last reached the inode by, and when: the
//! memory budget asks the kernel to drop the least recently looked-up names
//! (`inval_entry(parent, name)`), after which it forgets their inodes. Directories go
//! last: dropping a directory's name drops every name under it, which turns one round of
//! a few thousand evictions into millions of forgets at once (a stall, then a rebuild).

use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Enough shards that one growing shard is a short pause: a std map doubles all at once,
/// rehashing every entry and touching a table twice the size. At 16 shards, each of 115k
/// entries at 1.8M references, creates waited up to 100 ms behind a doubling; at 256 a
/// shard holds 7k there.
const SHARDS: usize = 256;

struct Reference {
    count: u64,
    parent: u64,
    name: Box<[u8]>,
    /// `LookupCounts::clock` at the last lookup: recency for eviction.
    last_lookup: u64,
    /// Asked the kernel to drop it at this clock value and not looked up since
    /// (`NOT_EVICTED` otherwise); skipped by the next eviction rounds (an open file or a
    /// cwd keeps its inode however we ask). A sentinel, not an Option, so the flag below
    /// costs no extra bytes per entry.
    evicted_at: u64,
    directory: bool,
}

const NOT_EVICTED: u64 = u64::MAX;

/// A shard's capacity below which it is not shrunk: 256 shards of this size hold 2 MB.
const MIN_SHRINK_CAPACITY: usize = 64;

/// Heap bytes of a std `HashMap<u64, Reference>` of this capacity: a power-of-two number
/// of slots, at most 7/8 full, each one (ino, Reference) pair plus one control byte.
fn hash_table_bytes(capacity: usize) -> u64 {
    if capacity == 0 {
        return 0;
    }
    let slot_bytes = (std::mem::size_of::<(u64, Reference)>() + 1) as u64;
    (capacity as u64 * 8 / 7).next_power_of_two() * slot_bytes
}

impl Reference {
    fn asked_to_evict(&self) -> bool {
        self.evicted_at != NOT_EVICTED
    }
}

/// A name the kernel reaches an inode by, chosen for eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvictionCandidate {
    pub ino: u64,
    pub parent: u64,
    pub name: Box<[u8]>,
}

pub struct LookupCounts {
    shards: [Mutex<HashMap<u64, Reference>>; SHARDS],
    referenced_inodes: AtomicU64,
    name_bytes: AtomicU64,
    /// Ticks once per lookup; a logical clock, cheaper than reading time.
    clock: AtomicU64,
}

impl Default for LookupCounts {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| Mutex::default()),
            referenced_inodes: AtomicU64::new(0),
            name_bytes: AtomicU64::new(0),
            clock: AtomicU64::new(0),
        }
    }
}

impl LookupCounts {
    fn shard(&self, ino: u64) -> &Mutex<HashMap<u64, Reference>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    /// The kernel took one more reference to `ino`, which it reached as `name` in `parent`.
    pub fn add(&self, ino: u64, parent: u64, name: &[u8], directory: bool) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut shard = self.shard(ino).lock();
        match shard.get_mut(&ino) {
            Some(reference) => {
                reference.count += 1;
                reference.last_lookup = now;
                reference.evicted_at = NOT_EVICTED;
                self.rename_reference(reference, parent, name);
            }
            None => {
                self.referenced_inodes.fetch_add(1, Ordering::Relaxed);
                self.name_bytes
                    .fetch_add(name.len() as u64, Ordering::Relaxed);
                shard.insert(
                    ino,
                    Reference {
                        count: 1,
                        parent,
                        name: name.into(),
                        last_lookup: now,
                        evicted_at: NOT_EVICTED,
                        directory,
                    },
                );
            }
        }
    }

    /// A rename gave `ino` the name `name` in `parent`: eviction must ask the kernel for
    /// that name, not the one it was looked up by. The count is unchanged (a rename takes
    /// no reference).
    pub fn renamed(&self, ino: u64, parent: u64, name: &[u8]) {
        if let Some(reference) = self.shard(ino).lock().get_mut(&ino) {
            self.rename_reference(reference, parent, name);
        }
    }

    fn rename_reference(&self, reference: &mut Reference, parent: u64, name: &[u8]) {
        if reference.parent == parent && *reference.name == *name {
            return;
        }
        self.name_bytes
            .fetch_add(name.len() as u64, Ordering::Relaxed);
        self.name_bytes
            .fetch_sub(reference.name.len() as u64, Ordering::Relaxed);
        reference.parent = parent;
        reference.name = name.into();
    }

    pub fn forget(&self, ino: u64, n: u64) {
        let mut shard = self.shard(ino).lock();
        let Some(reference) = shard.get_mut(&ino) else {
            tracing::warn!("forget of inode {ino} the kernel never looked up");
            return;
        };
        debug_assert!(
            reference.count >= n,
            "kernel forgot {n} of {} references to {ino}",
            reference.count
        );
        reference.count = reference.count.saturating_sub(n);
        if reference.count == 0 {
            if let Some(gone) = shard.remove(&ino) {
                self.name_bytes
                    .fetch_sub(gone.name.len() as u64, Ordering::Relaxed);
            }
            self.referenced_inodes.fetch_sub(1, Ordering::Relaxed);
            // Give memory back once the kernel let go of most entries (std maps never
            // shrink by themselves); halving at a quarter full keeps it amortized O(1).
            if shard.capacity() > MIN_SHRINK_CAPACITY && shard.len() * 4 < shard.capacity() {
                let keep = shard.len() * 2;
                shard.shrink_to(keep);
            }
        }
    }

    /// Inodes the kernel currently holds.
    pub fn referenced_inodes(&self) -> u64 {
        self.referenced_inodes.load(Ordering::Relaxed)
    }

    /// Heap bytes of the table: the shards' hash tables, estimated from hashbrown's layout
    /// (a power-of-two number of slots, at most 7/8 full, each one (ino, Reference) pair
    /// plus one control byte), and the remembered names (rounded up to the allocator's
    /// 16-byte granule). The tables follow their high-water mark: std maps do not shrink
    /// on remove.
    pub fn table_bytes(&self) -> u64 {
        let tables: u64 = self
            .shards
            .iter()
            .map(|shard| hash_table_bytes(shard.lock().capacity()))
            .sum();
        let names = self.name_bytes.load(Ordering::Relaxed) + 16 * self.referenced_inodes();
        tables + names
    }

    /// What the shards' hash tables would add if every shard within 10% of its capacity
    /// grew now (each doubles). Inode numbers spread evenly over the shards, so they fill
    /// and grow together: the table can jump by half at once (127 MiB in a 20M-file run,
    /// which took the daemon over its budget before evictions caught up).
    pub fn imminent_growth_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|shard| {
                let shard = shard.lock();
                let (len, capacity) = (shard.len(), shard.capacity());
                if capacity > 0 && len * 10 >= capacity * 9 {
                    hash_table_bytes(capacity)
                } else {
                    0
                }
            })
            .sum()
    }

    /// Up to `wanted` of the least recently looked-up references not already asked for,
    /// marked as asked. One pass over the table; only called when over budget.
    pub fn take_eviction_candidates(&self, wanted: usize) -> Vec<EvictionCandidate> {
        if wanted == 0 {
            return Vec::new();
        }
        let now = self.clock.load(Ordering::Relaxed);
        // Ordered by (is a directory, last lookup): files oldest first, then directories.
        // A bounded max-heap keeps the `wanted` smallest: memory follows `wanted`, not
        // the millions of entries scanned.
        let mut oldest: BinaryHeap<(bool, u64, u64)> = BinaryHeap::with_capacity(wanted + 1);
        for shard in &self.shards {
            let shard = shard.lock();
            for (&ino, reference) in shard.iter() {
                if reference.asked_to_evict() {
                    continue;
                }
                let key = (reference.directory, reference.last_lookup, ino);
                if oldest.len() < wanted {
                    oldest.push(key);
                } else if oldest.peek().is_some_and(|newest| key < *newest) {
                    oldest.pop();
                    oldest.push(key);
                }
            }
        }
        let oldest = oldest.into_vec();
        let mut candidates = Vec::with_capacity(oldest.len());
        for (_, _, ino) in oldest {
            let mut shard = self.shard(ino).lock();
            if let Some(reference) = shard.get_mut(&ino) {
                reference.evicted_at = now;
                candidates.push(EvictionCandidate {
                    ino,
                    parent: reference.parent,
                    name: reference.name.clone(),
                });
            }
        }
        candidates
    }

    /// References asked for eviction before `clock_limit` that the kernel kept (an open
    /// file, a cwd, a name it looked up again by another path) become candidates again.
    pub fn retry_kept_evictions(&self, clock_limit: u64) {
        for shard in &self.shards {
            for reference in shard.lock().values_mut() {
                if reference.asked_to_evict() && reference.evicted_at < clock_limit {
                    reference.evicted_at = NOT_EVICTED;
                }
            }
        }
    }

    pub fn clock(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_asks_for_the_name_after_a_rename() {
        let counts = LookupCounts::default();
        counts.add(7, 1, b"tmp.1234", false);
        let before = counts.table_bytes();
        counts.renamed(7, 9, b"object");
        counts.renamed(8, 9, b"never-looked-up"); // not referenced: nothing to follow
        assert_eq!(counts.referenced_inodes(), 1);
        assert_eq!(
            counts.table_bytes() + 2,
            before,
            "the remembered name shrank from 8 to 6 bytes"
        );
        let candidates = counts.take_eviction_candidates(5);
        assert_eq!(
            candidates,
            vec![EvictionCandidate {
                ino: 7,
                parent: 9,
                name: b"object".to_vec().into_boxed_slice(),
            }]
        );
    }

    #[test]
    fn counts_follow_lookups_and_forgets() {
        let counts = LookupCounts::default();
        counts.add(5, 1, b"a", false);
        counts.add(5, 1, b"a", false);
        counts.add(21, 1, b"b", false);
        assert_eq!(counts.referenced_inodes(), 2);
        counts.forget(5, 1);
        assert_eq!(counts.referenced_inodes(), 2);
        counts.forget(5, 1);
        counts.forget(21, 1);
        assert_eq!(counts.referenced_inodes(), 0);
        assert_eq!(counts.name_bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn table_bytes_grow_with_entries() {
        let counts = LookupCounts::default();
        assert_eq!(counts.table_bytes(), 0);
        for ino in 0..10_000 {
            counts.add(ino, 1, b"some-file.c", false);
        }
        let bytes = counts.table_bytes();
        assert!(bytes >= 10_000 * 60, "{bytes} bytes for 10000 entries");
        assert!(bytes <= 10_000 * 60 * 4, "{bytes} bytes for 10000 entries");
    }

    #[test]
    fn the_table_shrinks_when_the_kernel_forgets_its_entries() {
        let counts = LookupCounts::default();
        for ino in 0..100_000 {
            counts.add(ino, 1, b"f", false);
        }
        let full = counts.table_bytes();
        for ino in 0..100_000 {
            counts.forget(ino, 1);
        }
        let floor = SHARDS as u64 * hash_table_bytes(2 * MIN_SHRINK_CAPACITY);
        let left = counts.table_bytes();
        assert!(left <= floor, "{left} bytes left of {full}, floor {floor}");
    }

    #[test]
    fn eviction_takes_the_least_recently_looked_up_once() {
        let counts = LookupCounts::default();
        for ino in 0..100 {
            counts.add(ino, 1, format!("f{ino}").as_bytes(), false);
        }
        // Looked up again: now the most recent.
        counts.add(3, 1, b"f3", false);
        let first = counts.take_eviction_candidates(5);
        let inos: Vec<u64> = first.iter().map(|c| c.ino).collect();
        let mut sorted = inos.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![0, 1, 2, 4, 5]);
        assert_eq!(
            first.iter().find(|c| c.ino == 4).unwrap().name[..],
            b"f4"[..]
        );
        // Already asked: not asked again until retried.
        let second = counts.take_eviction_candidates(3);
        let inos: Vec<u64> = second.iter().map(|c| c.ino).collect();
        assert!(
            inos.iter().all(|ino| ![0, 1, 2, 4, 5].contains(ino)),
            "{inos:?}"
        );
        counts.retry_kept_evictions(counts.clock() + 1);
        assert_eq!(counts.take_eviction_candidates(1)[0].ino, 0);
    }

    #[test]
    fn growth_is_counted_only_for_shards_about_to_grow() {
        let counts = LookupCounts::default();
        assert_eq!(counts.imminent_growth_bytes(), 0);
        for ino in 0..(SHARDS as u64 * 1000) {
            counts.add(ino, 1, b"f", false);
        }
        let growth = counts.imminent_growth_bytes();
        let nearly_full = counts
            .shards
            .iter()
            .filter(|shard| {
                let shard = shard.lock();
                shard.len() * 10 >= shard.capacity() * 9
            })
            .count() as u64;
        let per_shard = hash_table_bytes(counts.shards[0].lock().capacity());
        assert_eq!(growth, nearly_full * per_shard);
        // Fill one shard to the brim: it is about to double, whatever the others do.
        let shard_zero = || counts.shards[0].lock().len();
        let mut ino = SHARDS as u64 * 1000;
        while shard_zero() * 10 < counts.shards[0].lock().capacity() * 9 {
            counts.add(ino, 1, b"f", false);
            ino += SHARDS as u64;
        }
        assert!(counts.imminent_growth_bytes() >= per_shard);
    }

    #[test]
    fn directories_are_evicted_after_every_file() {
        let counts = LookupCounts::default();
        // The directories were looked up first (the oldest), as a tree's parents are.
        for ino in 0..10 {
            counts.add(ino, 1, format!("d{ino}").as_bytes(), true);
        }
        for ino in 10..20 {
            counts.add(ino, 0, format!("f{ino}").as_bytes(), false);
        }
        let files: Vec<u64> = counts
            .take_eviction_candidates(10)
            .iter()
            .map(|c| c.ino)
            .collect();
        assert!(files.iter().all(|&ino| ino >= 10), "{files:?}");
        let directories = counts.take_eviction_candidates(3);
        let mut inos: Vec<u64> = directories.iter().map(|c| c.ino).collect();
        inos.sort_unstable();
        assert_eq!(inos, vec![0, 1, 2], "then the oldest directories");
    }
}
