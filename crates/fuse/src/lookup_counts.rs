//! The kernel's references to inodes (FUSE lookup counts): +1 for each entry we hand out,
//! -n on forget. Sharded so request threads rarely contend.
//!
//! Each entry also remembers the name the kernel last reached the inode by, and when: the
//! memory budget asks the kernel to drop the least recently looked-up names
//! (`inval_entry(parent, name)`), after which it forgets their inodes. Directories go
//! last: dropping a directory's name drops every name under it, which turns one round of
//! a few thousand evictions into millions of forgets at once (a stall, then a rebuild).

use std::collections::BinaryHeap;
use std::hash::RandomState;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Enough shards that one growing shard is a short pause: a std map doubles all at once,
/// rehashing every entry and touching a table twice the size. At 16 shards, each of 115k
/// entries at 1.8M references, creates waited up to 100 ms behind a doubling; at 256 a
/// shard holds 7k there.
const SHARDS: usize = 256;

/// hashbrown's map, not std's (the same table), for `allocation_size`: what a shard holds
/// cannot be told from `capacity()`, which tombstones shrink (see `TableShape`).
type Shard = hashbrown::HashMap<u64, Reference, RandomState>;

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

/// One slot of a shard's hash table: an (ino, Reference) pair and its control byte.
const SLOT_BYTES: usize = std::mem::size_of::<(u64, Reference)>() + 1;

/// A shard's hash table as hashbrown lays it out: a power-of-two number of slots, of
/// which 7/8 may hold entries.
struct TableShape {
    bytes: u64,
    slots: usize,
}

impl TableShape {
    fn of(shard: &Shard) -> Self {
        let bytes = shard.allocation_size();
        // The allocation is the slots, their control bytes and one group of spare control
        // bytes (16): dividing by a slot's bytes leaves the slot count.
        let slots = match bytes / SLOT_BYTES {
            0 => 0,
            n => 1 << n.ilog2(),
        };
        debug_assert!(
            bytes < 2 * slots * SLOT_BYTES + 64,
            "{bytes} bytes for {slots} slots"
        );
        Self {
            bytes: bytes as u64,
            slots,
        }
    }

    /// Entries the table holds before it must grow (hashbrown's `bucket_mask_to_capacity`).
    fn capacity(&self) -> usize {
        if self.slots <= 8 {
            self.slots.saturating_sub(1)
        } else {
            self.slots / 8 * 7
        }
    }

    /// Whether the table is bound to double. A removal leaves a tombstone that takes a
    /// slot until the next rehash, and once no free slot is left hashbrown rehashes in
    /// place only if at most half the capacity holds entries; otherwise it doubles. So
    /// under churn (the kernel forgets while creates add) a table over half full doubles
    /// even though its entry count stays flat, and `capacity()` (entries plus free slots)
    /// shrinks towards the entry count meanwhile: a 20M-file run's table went from 204 to
    /// 513 MiB at a near-constant count, and the daemon over its budget.
    fn bound_to_double(&self, entries: usize) -> bool {
        self.slots > 0 && (entries + 1) * 2 > self.capacity()
    }
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
    shards: [Mutex<Shard>; SHARDS],
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
    fn shard(&self, ino: u64) -> &Mutex<Shard> {
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

    /// The kernel took one more reference to `ino` without a name (a file handle's lookup
    /// of "." or ".."): a name it is known by stays; a new entry has none, and eviction
    /// cannot name it (the kernel lets it go with its last user).
    pub fn add_unnamed(&self, ino: u64, directory: bool) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut shard = self.shard(ino).lock();
        match shard.get_mut(&ino) {
            Some(reference) => {
                reference.count += 1;
                reference.last_lookup = now;
            }
            None => {
                self.referenced_inodes.fetch_add(1, Ordering::Relaxed);
                shard.insert(
                    ino,
                    Reference {
                        count: 1,
                        parent: 0,
                        name: Box::default(),
                        last_lookup: now,
                        // Never a candidate until retried: there is no name to drop.
                        evicted_at: now,
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

    /// The name the kernel reaches `ino` by (the last looked up or renamed to) and whether
    /// it is a directory, if the kernel holds it.
    pub fn name_of(&self, ino: u64) -> Option<(u64, Box<[u8]>, bool)> {
        let shard = self.shard(ino).lock();
        let reference = shard.get(&ino)?;
        Some((
            reference.parent,
            reference.name.clone(),
            reference.directory,
        ))
    }

    /// Whether the kernel holds `ino` (has looked it up and not forgotten it).
    pub fn is_referenced(&self, ino: u64) -> bool {
        self.shard(ino).lock().contains_key(&ino)
    }

    /// Lowers `ino`'s count by `n`; true when the kernel no longer holds it.
    pub fn forget(&self, ino: u64, n: u64) -> bool {
        let mut shard = self.shard(ino).lock();
        let Some(reference) = shard.get_mut(&ino) else {
            tracing::warn!("forget of inode {ino} the kernel never looked up");
            return false;
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
            // Give memory back once the kernel let go of most entries (hash maps never
            // shrink by themselves); halving at a quarter full keeps it amortized O(1).
            let capacity = TableShape::of(&shard).capacity();
            if capacity > MIN_SHRINK_CAPACITY && shard.len() * 4 < capacity {
                let keep = shard.len() * 2;
                shard.shrink_to(keep);
            }
            return true;
        }
        false
    }

    /// Inodes the kernel currently holds.
    pub fn referenced_inodes(&self) -> u64 {
        self.referenced_inodes.load(Ordering::Relaxed)
    }

    /// Heap bytes of the table: the shards' hash tables as allocated, and the remembered
    /// names (rounded up to the allocator's 16-byte granule).
    pub fn table_bytes(&self) -> u64 {
        let tables: u64 = self
            .shards
            .iter()
            .map(|shard| TableShape::of(&shard.lock()).bytes)
            .sum();
        let names = self.name_bytes.load(Ordering::Relaxed) + 16 * self.referenced_inodes();
        tables + names
    }

    /// What the shards' hash tables will add when every shard bound to double has doubled.
    /// Inode numbers spread evenly over the shards, so they fill and double together: the
    /// table can jump by its whole size within minutes, faster than evictions follow.
    pub fn imminent_growth_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|shard| {
                let shard = shard.lock();
                let shape = TableShape::of(&shard);
                if shape.bound_to_double(shard.len()) {
                    shape.bytes
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
        let smallest = Shard::with_capacity_and_hasher(2 * MIN_SHRINK_CAPACITY, RandomState::new());
        let floor = SHARDS as u64 * smallest.allocation_size() as u64;
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
    fn the_shape_is_read_from_the_allocation() {
        let shape = |entries| {
            TableShape::of(&Shard::with_capacity_and_hasher(
                entries,
                RandomState::new(),
            ))
        };
        assert_eq!(shape(0).slots, 0);
        assert_eq!((shape(896).slots, shape(896).capacity()), (1024, 896));
        assert_eq!((shape(897).slots, shape(897).capacity()), (2048, 1792));
        assert!(shape(896).bytes >= 1024 * SLOT_BYTES as u64);
        assert!(shape(896).bound_to_double(448));
        assert!(!shape(896).bound_to_double(447));
    }

    /// Adds `peak` references to shard 0, lets the kernel forget the oldest down to
    /// `entries`, then keeps that many while `churn` new ones replace the oldest, as when
    /// the kernel forgets files while creates add others. Returns the table's bytes and
    /// the growth counted as imminent before the churn, and the bytes after.
    fn churn_shard_zero(peak: u64, entries: u64, churn: u64) -> (u64, u64, u64) {
        let counts = LookupCounts::default();
        let ino = |n: u64| n * SHARDS as u64;
        for n in 0..peak {
            counts.add(ino(n), 1, b"f", false);
        }
        for n in 0..peak - entries {
            counts.forget(ino(n), 1);
        }
        let before = (counts.table_bytes(), counts.imminent_growth_bytes());
        for n in peak..peak + churn {
            counts.add(ino(n), 1, b"f", false);
            counts.forget(ino(n - entries), 1);
        }
        assert_eq!(counts.referenced_inodes(), entries);
        (before.0, before.1, counts.table_bytes())
    }

    #[test]
    fn a_table_over_half_full_doubles_under_churn_as_anticipated() {
        // 1024 slots hold 896 entries; 500 is over half of them. A table grown by inserts
        // alone is always over half full: it doubles when full.
        let (before, imminent, after) = churn_shard_zero(500, 500, 20_000);
        let slots_bytes = 1024 * SLOT_BYTES as u64;
        assert!(
            imminent >= slots_bytes,
            "{imminent} bytes counted as growth"
        );
        assert!(
            after >= before + slots_bytes,
            "{before} -> {after}: the table doubled with a flat entry count"
        );
        assert!(
            after <= before + imminent,
            "{before} + {imminent} < {after}"
        );
    }

    #[test]
    fn a_table_at_most_half_full_stays_put_under_churn() {
        // Grown to 1024 slots (896 usable) by 500 entries, then 400 left: under half.
        let (before, imminent, after) = churn_shard_zero(500, 400, 20_000);
        assert_eq!(imminent, 0);
        assert_eq!(before, after, "rehashed in place, not grown");
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
