//! A bounded cache of recently read metadata pairs (inodes, directory entries, and names
//! known to be absent) in front of a store's point reads.
//!
//! An LSM point read walks memtables and table filters and costs microseconds; the pairs a
//! filesystem reads come in bursts (a directory listed, then its entries unlinked; a file
//! created, then written and closed), so a small cache answers most of them. Scans fill it
//! too: `readdir` before `unlink` is the `rm -rf` pattern. File data (the `Data` space) is
//! never cached: the kernel's page cache does that.

use std::sync::atomic::{AtomicU64, Ordering};

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::{Batch, Scan, Space, Store, StoreError, StoreMetrics, StoreView};

pub const DEFAULT_METADATA_CACHE_BYTES: u64 = 32 << 20;

/// Memory of one cached pair beyond its key and value bytes: the two vectors' headers and
/// allocations, and the cache's own entry.
const PAIR_OVERHEAD_BYTES: u64 = 96;

/// A pair's share of the cache: its bytes and the fixed overhead.
#[derive(Clone)]
struct PairWeight;

impl Weighter<Vec<u8>, Option<Vec<u8>>> for PairWeight {
    fn weight(&self, key: &Vec<u8>, value: &Option<Vec<u8>>) -> u64 {
        (key.len() + value.as_ref().map_or(0, Vec::len)) as u64 + PAIR_OVERHEAD_BYTES
    }
}

pub struct CachedStore {
    inner: Box<dyn Store>,
    /// `Meta` pairs: `None` for a key the store does not hold.
    pairs: Cache<Vec<u8>, Option<Vec<u8>>, PairWeight>,
    /// Bumped by every write before it evicts the keys it wrote. A read that began in an
    /// older epoch may have read a value the write replaced, so it withdraws what it
    /// cached (see `remember`).
    epoch: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl CachedStore {
    pub fn new(inner: Box<dyn Store>, capacity_bytes: u64) -> Self {
        let estimated_pairs = (capacity_bytes / (PAIR_OVERHEAD_BYTES + 64)).max(16) as usize;
        Self {
            inner,
            pairs: Cache::with_weighter(estimated_pairs, capacity_bytes.max(1), PairWeight),
            epoch: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Caches a pair read from the inner store while the epoch was `read_in`. If a write
    /// began since, the value may be older than what the store now holds: the write's own
    /// eviction may already have passed, so the pair is withdrawn here instead.
    fn remember(&self, key: &[u8], value: Option<Vec<u8>>, read_in: u64) {
        self.pairs.insert(key.to_vec(), value);
        if self.epoch.load(Ordering::SeqCst) != read_in {
            self.pairs.remove(key);
        }
    }

    /// Evicts every `Meta` key of a batch just written (or attempted).
    fn forget(&self, batch: &Batch) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        for (space, key, _) in batch.items() {
            if space == Space::Meta {
                self.pairs.remove(key);
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
        let read_in = self.epoch.load(Ordering::SeqCst);
        self.inner.scan(space, start, end, &mut |key, value| {
            self.remember(key, Some(value.to_vec()), read_in);
            visit(key, value)
        })
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
        if let Some(value) = self.pairs.get(key) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(value);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let read_in = self.epoch.load(Ordering::SeqCst);
        let value = self.inner.get(space, key)?;
        self.remember(key, value.clone(), read_in);
        Ok(value)
    }

    fn write(&self, batch: Batch) -> Result<(), StoreError> {
        self.write_borrowed(&batch)
    }

    fn write_borrowed(&self, batch: &Batch) -> Result<(), StoreError> {
        let written = self.inner.write_borrowed(batch);
        // Evicted whether or not the write went through: a failed write may have
        // applied, and an evicted pair is only a later miss.
        self.forget(batch);
        written
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.inner.sync()
    }

    fn disk_bytes(&self) -> u64 {
        self.inner.disk_bytes()
    }

    fn metrics(&self) -> StoreMetrics {
        StoreMetrics {
            metadata_cache_bytes: self.pairs.weight(),
            metadata_cache_hits: self.hits.load(Ordering::Relaxed),
            metadata_cache_misses: self.misses.load(Ordering::Relaxed),
            ..self.inner.metrics()
        }
    }

    fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes() + self.pairs.weight()
    }

    fn snapshot(&self) -> Box<dyn StoreView> {
        self.inner.snapshot()
    }

    fn compact(&self) -> Result<(), StoreError> {
        self.inner.compact()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use super::*;
    use crate::store::MemoryStore;

    fn put(store: &dyn Store, space: Space, key: &[u8], value: &[u8]) {
        let mut batch = Batch::default();
        batch.put(space, key.to_vec(), value.to_vec());
        store.write(batch).unwrap();
    }

    #[test]
    fn reads_are_cached_and_writes_evict_them() {
        let store = CachedStore::new(Box::new(MemoryStore::new()), 1 << 20);
        put(&store, Space::Meta, b"inode", b"v1");
        assert_eq!(
            store.get(Space::Meta, b"inode").unwrap(),
            Some(b"v1".to_vec())
        );
        assert_eq!(
            store.get(Space::Meta, b"inode").unwrap(),
            Some(b"v1".to_vec())
        );
        assert_eq!(store.get(Space::Meta, b"absent").unwrap(), None);
        assert_eq!(store.get(Space::Meta, b"absent").unwrap(), None);
        let metrics = store.metrics();
        assert_eq!(
            (metrics.metadata_cache_hits, metrics.metadata_cache_misses),
            (2, 2)
        );
        assert!(metrics.metadata_cache_bytes > 0);

        put(&store, Space::Meta, b"inode", b"v2");
        put(&store, Space::Meta, b"absent", b"now here");
        assert_eq!(
            store.get(Space::Meta, b"inode").unwrap(),
            Some(b"v2".to_vec())
        );
        assert_eq!(
            store.get(Space::Meta, b"absent").unwrap(),
            Some(b"now here".to_vec())
        );

        // Scanned pairs are cached; file data never is.
        store
            .scan(Space::Meta, b"", b"z", &mut |_, _| Scan::Continue)
            .unwrap();
        assert_eq!(
            store.get(Space::Meta, b"inode").unwrap(),
            Some(b"v2".to_vec())
        );
        assert_eq!(
            store.get(Space::Meta, b"absent").unwrap(),
            Some(b"now here".to_vec())
        );
        put(&store, Space::Data, b"chunk", b"bytes");
        assert_eq!(
            store.get(Space::Data, b"chunk").unwrap(),
            Some(b"bytes".to_vec())
        );
        let metrics = store.metrics();
        assert_eq!(
            (metrics.metadata_cache_hits, metrics.metadata_cache_misses),
            (4, 4)
        );
    }

    #[test]
    fn the_cache_stays_within_its_capacity() {
        let store = CachedStore::new(Box::new(MemoryStore::new()), 64 << 10);
        for i in 0..10_000u32 {
            let key = i.to_be_bytes();
            put(&store, Space::Meta, &key, &[7; 100]);
            store.get(Space::Meta, &key).unwrap();
        }
        assert!(store.metrics().metadata_cache_bytes <= 64 << 10);
    }

    #[test]
    fn readers_racing_writers_never_keep_a_replaced_value() {
        // A writer counts one key up; readers must never see the count go back once the
        // writer has moved past it, whatever they cached in between.
        let store = Arc::new(CachedStore::new(Box::new(MemoryStore::new()), 1 << 20));
        put(store.as_ref(), Space::Meta, b"count", &0u64.to_be_bytes());
        let done = Arc::new(AtomicBool::new(false));
        let latest = Arc::new(AtomicU64::new(0));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (store, done, latest) = (store.clone(), done.clone(), latest.clone());
                std::thread::spawn(move || {
                    while !done.load(Ordering::SeqCst) {
                        let floor = latest.load(Ordering::SeqCst);
                        let value = store.get(Space::Meta, b"count").unwrap().unwrap();
                        let count = u64::from_be_bytes(value.try_into().unwrap());
                        assert!(count >= floor, "read {count} after {floor} was written");
                    }
                })
            })
            .collect();
        for count in 1..=20_000u64 {
            put(store.as_ref(), Space::Meta, b"count", &count.to_be_bytes());
            latest.store(count, Ordering::SeqCst);
        }
        done.store(true, Ordering::SeqCst);
        for reader in readers {
            reader.join().unwrap();
        }
    }
}
