//! A bounded cache of point reads of metadata (inodes, directory entries, and the absence
//! of either) in front of the store. Path walks read the same few keys over and over (a
//! directory's inode for its permission bits, then the entry, then the inode it names); the
//! LSM answers each from its memtables or tables at a cost of a microsecond, the cache in a
//! hash probe.
//!
//! The engine puts it between the staged layers of delayed logging and the LSM: what is
//! staged is read above it, and its writes are checkpoints, each dropping the keys it
//! wrote once (on the checkpointer's thread, before the layer is unstaged) instead of
//! every operation dropping its own.
//!
//! Coherent by construction: every write goes through `write`, which drops the keys it
//! wrote after the store has them. A read that missed records its shard's generation
//! before reading the store and fills the cache only if no write touched the shard
//! meanwhile, so a value read just before a write can never be cached after it.
//!
//! A range scan of metadata fills the cache the same way (its first `MAX_SCAN_KEYS` keys,
//! each shard's generation recorded before the scan): a directory is listed before its
//! files are opened (`grep -r`, `cp -a`, `tar c`), and each open then looks up the entry
//! and reads the inode the listing has just read, a hash probe each instead of two point
//! reads of the LSM (their index and data blocks: 47% of the daemon's time in `grep -r`).

use parking_lot::Mutex;

use crate::hashing::FastHashMap;
use crate::store::{Batch, Scan, SharedBytes, Space, Store, StoreError, StoreMetrics, StoreView};

/// Shards, so readers on several threads rarely wait on one lock.
const SHARDS: usize = 16;

/// Values larger than this (inline file data) are not worth a slot.
const MAX_VALUE_BYTES: usize = 1024;
/// Per-entry overhead counted against the budget (map slot, vectors' headers).
const ENTRY_OVERHEAD_BYTES: usize = 64;
/// Keys one scan leaves in the cache at most: a listing page's entries and inodes, not a
/// whole tree's walk (`export`, `rmtree`) flushing every shard.
const MAX_SCAN_KEYS: usize = 1024;

type Entries = FastHashMap<Vec<u8>, Option<Vec<u8>>>;

#[derive(Default)]
struct Shard {
    entries: Entries,
    bytes: usize,
    /// Bytes of keys and values it keeps at most; a full shard is emptied (cheap, and hot
    /// keys come back at once).
    budget: usize,
    generation: u64,
}

fn entry_cost(key: &[u8], value: Option<&Vec<u8>>) -> usize {
    key.len() + value.map_or(0, Vec::len) + ENTRY_OVERHEAD_BYTES
}

impl Shard {
    /// Keeps `value` for `key`. It may replace another one: a read that missed before a
    /// checkpoint wrote the key and a scan that read it after, both before the checkpoint
    /// dropped it, keep an absence and the value under one generation (counting only the
    /// first made the count fall below zero when the key was dropped).
    fn insert(&mut self, key: &[u8], value: Option<Vec<u8>>) {
        let cost = entry_cost(key, value.as_ref());
        if self.bytes + cost > self.budget {
            self.entries.clear();
            self.bytes = 0;
        }
        if let Some(replaced) = self.entries.insert(key.to_vec(), value) {
            self.bytes -= entry_cost(key, replaced.as_ref());
        }
        self.bytes += cost;
    }
}

pub struct CachedStore {
    inner: Box<dyn Store>,
    shards: Vec<Mutex<Shard>>,
}

impl CachedStore {
    /// A cache of at most `bytes` of keys and values in front of `inner`.
    pub fn new(inner: Box<dyn Store>, bytes: usize) -> CachedStore {
        let budget = bytes / SHARDS;
        CachedStore {
            inner,
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        budget,
                        ..Shard::default()
                    })
                })
                .collect(),
        }
    }

    fn shard(&self, key: &[u8]) -> &Mutex<Shard> {
        &self.shards[self.shard_index(key)]
    }

    fn shard_index(&self, key: &[u8]) -> usize {
        // FNV-1a: keys share long prefixes (the space and parent inode), so mix every byte.
        let hash = key.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        (hash as usize) % SHARDS
    }

    /// Drops what a batch wrote, after the store has it.
    fn forget_written(&self, batch: &Batch) {
        self.forget(
            batch
                .items()
                .filter(|(space, ..)| *space == Space::Meta)
                .map(|(_, key, _)| key),
        );
    }

    /// Drops `keys` and moves their shards' generations on, so a read that missed before the
    /// write cannot cache what it read (see the module's comment).
    fn forget<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) {
        for key in keys {
            let mut shard = self.shard(key).lock();
            shard.generation += 1;
            if let Some(value) = shard.entries.remove(key) {
                shard.bytes -= entry_cost(key, value.as_ref());
            }
        }
    }
}

impl StoreView for CachedStore {
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
    ) -> Result<(), StoreError> {
        if space != Space::Meta {
            return self.inner.scan(space, start, end, visit);
        }
        let generations: Vec<u64> = self
            .shards
            .iter()
            .map(|shard| shard.lock().generation)
            .collect();
        let mut seen: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        self.inner.scan(space, start, end, &mut |key, value| {
            if seen.len() < MAX_SCAN_KEYS && value.len() <= MAX_VALUE_BYTES {
                seen.push((key.to_vec(), value.to_vec()));
            }
            visit(key, value)
        })?;
        for (key, value) in seen {
            let index = self.shard_index(&key);
            let mut shard = self.shards[index].lock();
            if shard.generation == generations[index] {
                shard.insert(&key, Some(value));
            }
        }
        Ok(())
    }

    /// Lengths are not values: nothing to keep.
    fn scan_lengths(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], u64) -> Scan,
    ) -> Result<(), StoreError> {
        self.inner.scan_lengths(space, start, end, visit)
    }

    fn last_key(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.last_key(space, start, end)
    }
}

impl Store for CachedStore {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if space != Space::Meta {
            return self.inner.get(space, key);
        }
        let generation = {
            let shard = self.shard(key).lock();
            if let Some(value) = shard.entries.get(key) {
                return Ok(value.clone());
            }
            shard.generation
        };
        let value = self.inner.get(space, key)?;
        if value.as_ref().is_none_or(|v| v.len() <= MAX_VALUE_BYTES) {
            let mut shard = self.shard(key).lock();
            if shard.generation == generation {
                shard.insert(key, value.clone());
            }
        }
        Ok(value)
    }

    fn get_shared(&self, space: Space, key: &[u8]) -> Result<Option<SharedBytes>, StoreError> {
        if space != Space::Meta {
            return self.inner.get_shared(space, key);
        }
        Ok(self.get(space, key)?.map(SharedBytes::from))
    }

    fn write(&self, batch: Batch) -> Result<(), StoreError> {
        // The store consumes the batch: keep its metadata keys (not its values) to drop after.
        let written: Vec<Vec<u8>> = batch
            .items()
            .filter(|(space, ..)| *space == Space::Meta)
            .map(|(_, key, _)| key.to_vec())
            .collect();
        let result = self.inner.write(batch);
        self.forget(written.iter().map(Vec::as_slice));
        result
    }

    fn write_borrowed(&self, batch: &Batch) -> Result<(), StoreError> {
        let result = self.inner.write_borrowed(batch);
        self.forget_written(batch);
        result
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.inner.sync()
    }

    fn disk_bytes(&self) -> u64 {
        self.inner.disk_bytes()
    }

    fn data_compressed(&self) -> Option<bool> {
        self.inner.data_compressed()
    }

    fn metrics(&self) -> StoreMetrics {
        self.inner.metrics()
    }

    fn memory_bytes(&self) -> u64 {
        let cached: usize = self.shards.iter().map(|shard| shard.lock().bytes).sum();
        self.inner.memory_bytes() + cached as u64
    }

    fn snapshot(&self) -> Box<dyn StoreView> {
        self.inner.snapshot()
    }

    fn pending_bytes(&self) -> u64 {
        self.inner.pending_bytes()
    }

    fn release_space(&self) -> Result<(), StoreError> {
        self.inner.release_space()
    }

    fn background_errors(&self) -> crate::store::error_seq::WriteErrors {
        self.inner.background_errors()
    }

    fn compact(&self) -> Result<(), StoreError> {
        self.inner.compact()
    }

    fn poisoned(&self) -> Result<(), StoreError> {
        self.inner.poisoned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory_store::MemoryStore;
    use crate::store::staged_store::StagedStore;

    #[test]
    fn reads_see_every_write_and_absences_are_cached_until_written() {
        let store = CachedStore::new(Box::new(MemoryStore::default()), 8 << 20);
        assert_eq!(store.get(Space::Meta, b"k").unwrap(), None);
        let mut batch = Batch::default();
        batch.put(Space::Meta, b"k".to_vec(), b"1".to_vec());
        store.write(batch).unwrap();
        assert_eq!(store.get(Space::Meta, b"k").unwrap(), Some(b"1".to_vec()));
        let mut batch = Batch::default();
        batch.put(Space::Meta, b"k".to_vec(), b"2".to_vec());
        store.write_borrowed(&batch).unwrap();
        assert_eq!(store.get(Space::Meta, b"k").unwrap(), Some(b"2".to_vec()));
        let mut batch = Batch::default();
        batch.delete(Space::Meta, b"k".to_vec());
        store.write(batch).unwrap();
        assert_eq!(store.get(Space::Meta, b"k").unwrap(), None);
    }

    #[test]
    fn a_value_kept_over_another_is_counted_once() {
        let store = CachedStore::new(Box::new(MemoryStore::default()), 8 << 20);
        let shard = store.shard(b"k");
        shard.lock().insert(b"k", None);
        shard.lock().insert(b"k", Some(vec![7; 100]));
        assert_eq!(shard.lock().bytes, entry_cost(b"k", Some(&vec![7; 100])));
        store.forget([b"k".as_slice()].into_iter());
        assert_eq!(shard.lock().bytes, 0);
    }

    /// Whether the cache holds `key` (a read of it then asks nothing of the store).
    fn cached(store: &CachedStore, key: &[u8]) -> bool {
        store.shard(key).lock().entries.contains_key(key)
    }

    #[test]
    fn what_a_scan_read_is_read_again_from_the_cache_until_written() {
        let store = CachedStore::new(Box::new(MemoryStore::default()), 8 << 20);
        let mut batch = Batch::default();
        for key in [b"a1", b"a2", b"a3", b"b1"] {
            batch.put(Space::Meta, key.to_vec(), key.to_vec());
        }
        store.write(batch).unwrap();
        let mut listed = Vec::new();
        store
            .scan(Space::Meta, b"a", b"b", &mut |key, _| {
                listed.push(key.to_vec());
                Scan::Continue
            })
            .unwrap();
        assert_eq!(listed, [b"a1".to_vec(), b"a2".to_vec(), b"a3".to_vec()]);
        for key in [b"a1", b"a2", b"a3"] {
            assert!(cached(&store, key), "the scan's keys come from the cache");
            assert_eq!(store.get(Space::Meta, key).unwrap(), Some(key.to_vec()));
        }
        assert!(
            !cached(&store, b"b1"),
            "a key past the scan is read from the store"
        );
        assert_eq!(store.get(Space::Meta, b"b1").unwrap(), Some(b"b1".to_vec()));
        let mut batch = Batch::default();
        batch.put(Space::Meta, b"a2".to_vec(), b"new".to_vec());
        batch.delete(Space::Meta, b"a3".to_vec());
        store.write(batch).unwrap();
        assert!(
            !cached(&store, b"a2") && !cached(&store, b"a3"),
            "written: read anew"
        );
        assert_eq!(
            store.get(Space::Meta, b"a2").unwrap(),
            Some(b"new".to_vec())
        );
        assert_eq!(store.get(Space::Meta, b"a3").unwrap(), None);
    }

    #[test]
    fn under_a_staged_layer_reads_see_each_checkpoint_and_never_an_older_value() {
        // The engine's order: staged layer, then this cache, then the LSM. The cache learns
        // of writes only when a checkpoint writes them through it.
        let store = StagedStore::new(
            Box::new(CachedStore::new(Box::new(MemoryStore::default()), 8 << 20)),
            1 << 20,
        )
        .unwrap();
        let write = |key: &[u8], value: Option<&[u8]>| {
            let mut batch = Batch::default();
            match value {
                Some(value) => batch.put(Space::Meta, key.to_vec(), value.to_vec()),
                None => batch.delete(Space::Meta, key.to_vec()),
            }
            store.write(batch).unwrap();
        };
        let read = |key: &[u8]| store.get(Space::Meta, key).unwrap();
        write(b"k", Some(b"1"));
        store.sync().unwrap();
        assert_eq!(
            read(b"k").as_deref(),
            Some(&b"1"[..]),
            "cached from the store"
        );
        write(b"k", Some(b"2"));
        assert_eq!(
            read(b"k").as_deref(),
            Some(&b"2"[..]),
            "staged, above the cache"
        );
        store.sync().unwrap();
        assert_eq!(
            read(b"k").as_deref(),
            Some(&b"2"[..]),
            "checkpointed: not the cached 1"
        );
        write(b"k", None);
        store.sync().unwrap();
        assert_eq!(
            read(b"k"),
            None,
            "deleted by a checkpoint: not the cached 2"
        );
        assert_eq!(read(b"absent"), None);
        write(b"absent", Some(b"3"));
        store.sync().unwrap();
        assert_eq!(
            read(b"absent").as_deref(),
            Some(&b"3"[..]),
            "a cached absence ends at the checkpoint that writes the key"
        );
    }

    #[test]
    fn a_full_shard_stays_within_its_bytes() {
        let store = CachedStore::new(Box::new(MemoryStore::default()), 8 << 20);
        for i in 0..100_000u32 {
            store.get(Space::Meta, &i.to_le_bytes()).unwrap();
        }
        let total: usize = store.shards.iter().map(|s| s.lock().bytes).sum();
        assert!(total <= 8 << 20, "{total}");
    }
}
