//! The narrow ordered key-value interface the engine is written against.
//!
//! Two spaces: `Meta` (inodes, entries, xattrs, counters) and `Data` (file chunks), so bulk
//! file data never slows compaction of the metadata tree. A `Batch` is applied atomically
//! across both spaces.

mod batch_key;
mod blob_reclaim;
pub mod error_seq;
mod fjall_store;
pub mod histogram;
pub mod journal_check;
mod journal_sync;
mod memory_store;
mod metrics;
pub mod poison;
pub mod raw_salvage;
pub(crate) mod read_cache;
pub mod salvage;
mod seqno_recovery;
mod staged_store;

use std::collections::BTreeMap;
use std::ops::{Bound, Deref};

use batch_key::{BatchKey, KeyBytes};

pub use crate::error::StoreError;
pub use crate::keys::Space;
pub use fjall_store::{FjallStore, FjallTuning, MIN_JOURNAL_BYTES};
pub use memory_store::MemoryStore;
pub use metrics::{StoreMetrics, STORE_METRICS};
pub use staged_store::{staged_memory_bound, StagedStore};

/// Whether a scan goes on after the visited pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    Continue,
    Stop,
}

/// Bytes shared without copying, in the buffer type the on-disk store keeps its values in
/// (fjall's): a value made in it (file data read straight from an archive) reaches the
/// store's journal and memtable without another copy.
pub type SharedBytes = fjall::Slice;

/// A value as a batch holds it.
#[derive(Clone, Debug)]
pub enum Value {
    Owned(Vec<u8>),
    /// Handed to the on-disk store as it is (see `SharedBytes`).
    Shared(SharedBytes),
}

impl Value {
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Value::Owned(bytes) => bytes,
            Value::Shared(bytes) => bytes.to_vec(),
        }
    }

    /// The value in the on-disk store's buffer type: a shared one without a copy.
    pub fn to_shared(&self) -> SharedBytes {
        match self {
            Value::Owned(bytes) => SharedBytes::from(bytes.as_slice()),
            Value::Shared(bytes) => bytes.clone(),
        }
    }
}

impl Deref for Value {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Value::Owned(bytes) => bytes,
            Value::Shared(bytes) => bytes,
        }
    }
}

/// A set of puts and deletes applied atomically. Later writes to the same key replace earlier
/// ones, and reads through the batch see its own writes: an operation can update the same
/// inode twice (rename within one directory) without a duplicate key reaching the store.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// One map per space, so a read through the batch borrows the key instead of copying it
    /// (every transaction read passes here).
    meta: SpaceItems,
    data: SpaceItems,
    /// Bytes of file data already in the store that this batch's data puts replace: the
    /// garbage an overwrite leaves (an append or a new file leaves none). The reclaimer
    /// counts it with deleted chunks; the store cannot tell without reading.
    replaced_data_bytes: u64,
}

type SpaceItems = BTreeMap<BatchKey, Option<Value>>;

impl Batch {
    fn space(&self, space: Space) -> &SpaceItems {
        match space {
            Space::Meta => &self.meta,
            Space::Data => &self.data,
        }
    }

    fn space_mut(&mut self, space: Space) -> &mut SpaceItems {
        match space {
            Space::Meta => &mut self.meta,
            Space::Data => &mut self.data,
        }
    }

    pub fn put(&mut self, space: Space, key: Vec<u8>, value: Vec<u8>) {
        self.space_mut(space)
            .insert(BatchKey::new(key), Some(Value::Owned(value)));
    }

    /// `put` of bytes the on-disk store takes without copying them.
    pub fn put_shared(&mut self, space: Space, key: Vec<u8>, value: SharedBytes) {
        self.space_mut(space)
            .insert(BatchKey::new(key), Some(Value::Shared(value)));
    }

    pub fn delete(&mut self, space: Space, key: Vec<u8>) {
        self.space_mut(space).insert(BatchKey::new(key), None);
    }

    /// A put (`Some`) or delete (`None`); returns what the batch held for the key before.
    pub fn insert(
        &mut self,
        space: Space,
        key: Vec<u8>,
        value: Option<Value>,
    ) -> Option<Option<Value>> {
        self.space_mut(space).insert(BatchKey::new(key), value)
    }

    /// The batch's items of one space from `start` up to `end` (excluded), in key order.
    pub fn range<'a>(
        &'a self,
        space: Space,
        start: Bound<&[u8]>,
        end: &[u8],
    ) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> {
        let items = self.space(space);
        // BTreeMap::range panics on a start past the end; such a range is empty.
        let empty = match start {
            Bound::Included(start) => start > end,
            Bound::Excluded(start) => start >= end,
            Bound::Unbounded => false,
        };
        let start = start.map(KeyBytes::new);
        let end = Bound::Excluded(KeyBytes::new(end));
        let range = (!empty).then(|| items.range::<KeyBytes, _>((start, end)));
        range
            .into_iter()
            .flatten()
            .map(|(key, value)| (key.bytes(), value.as_deref()))
    }

    /// Every item, borrowed, in the order `into_items` gives them.
    pub fn items(&self) -> impl Iterator<Item = (Space, &[u8], Option<&Value>)> {
        let meta = self
            .meta
            .iter()
            .map(|(key, value)| (Space::Meta, key.bytes(), value.as_ref()));
        let data = self
            .data
            .iter()
            .map(|(key, value)| (Space::Data, key.bytes(), value.as_ref()));
        meta.chain(data)
    }

    /// `Some(Some(v))`: written in this batch; `Some(None)`: deleted in it; `None`: untouched.
    pub fn lookup(&self, space: Space, key: &[u8]) -> Option<Option<&[u8]>> {
        self.space(space)
            .get(KeyBytes::new(key))
            .map(|value| value.as_deref())
    }

    /// `lookup`, with the value as the batch holds it.
    pub fn lookup_value(&self, space: Space, key: &[u8]) -> Option<Option<&Value>> {
        self.space(space)
            .get(KeyBytes::new(key))
            .map(Option::as_ref)
    }

    /// Whether the batch puts any key in `space` (deletes do not count).
    pub fn has_puts(&self, space: Space) -> bool {
        self.space(space).values().any(Option::is_some)
    }

    pub fn len(&self) -> usize {
        self.meta.len() + self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.meta.is_empty() && self.data.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.meta
            .iter()
            .chain(&self.data)
            .map(|(k, v)| k.bytes().len() + v.as_deref().map_or(0, <[u8]>::len))
            .sum()
    }

    /// Notes that a data put replaces `bytes` of stored file data (see the field).
    pub fn note_replaced_data(&mut self, bytes: u64) {
        self.replaced_data_bytes += bytes;
    }

    pub fn replaced_data_bytes(&self) -> u64 {
        self.replaced_data_bytes
    }

    pub fn into_items(self) -> impl Iterator<Item = (Space, Vec<u8>, Option<Value>)> {
        let meta = self
            .meta
            .into_iter()
            .map(|(key, value)| (Space::Meta, key.into_bytes(), value));
        let data = self
            .data
            .into_iter()
            .map(|(key, value)| (Space::Data, key.into_bytes(), value));
        meta.chain(data)
    }
}

/// A read-only, ordered view of key-value pairs: a whole store, or a point-in-time
/// snapshot of one, shareable by threads scanning it in parallel (online checks run on a
/// snapshot while writes go on).
pub trait StoreView: Send + Sync {
    /// Visits keys in `[start, end)` in ascending order until `visit` says stop.
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
    ) -> Result<(), StoreError>;

    /// `scan` for a caller that needs only each value's length: fjall then loads none of
    /// the values it keeps apart in blob files (a large file's chunks), which a delete or a
    /// truncate would otherwise read whole only to count their bytes. Stores that hold
    /// values in memory need not override it.
    fn scan_lengths(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], u64) -> Scan,
    ) -> Result<(), StoreError> {
        self.scan(space, start, end, &mut |key, value| {
            visit(key, value.len() as u64)
        })
    }

    /// The greatest key in `[start, end)`, if any.
    fn last_key(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError>;
}

/// An ordered key-value store with atomic batches. Implementations: fjall (on disk) and an
/// in-memory map (for `mount --memory` and tests).
pub trait Store: StoreView {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// `get` in the on-disk store's own buffer type: a value read from it, or staged as
    /// one, comes without a copy, and can be put again without one (`copy_range` shares
    /// whole chunks). Stores that keep values otherwise copy (the default).
    fn get_shared(&self, space: Space, key: &[u8]) -> Result<Option<SharedBytes>, StoreError> {
        Ok(self.get(space, key)?.map(SharedBytes::from))
    }

    /// Applies the batch atomically. It reaches the operating system before this returns (so a
    /// killed daemon loses nothing), but is durable against power loss only after `sync`.
    fn write(&self, batch: Batch) -> Result<(), StoreError>;

    /// `write` for a batch the caller keeps (a checkpoint keeps its batch readable until
    /// the store has it). Stores that copy keys and values anyway override it.
    fn write_borrowed(&self, batch: &Batch) -> Result<(), StoreError> {
        self.write(batch.clone())
    }

    /// Makes every written batch durable.
    fn sync(&self) -> Result<(), StoreError>;

    /// Bytes the store occupies on its device (0 for memory).
    fn disk_bytes(&self) -> u64;

    /// Whether file data is kept compressed, as mkfs chose (`mkfs --compress`); None for a
    /// store with no such choice (memory).
    fn data_compressed(&self) -> Option<bool> {
        None
    }

    /// Memtable, flush, compaction and cache figures (all zero by default).
    fn metrics(&self) -> StoreMetrics {
        StoreMetrics::default()
    }

    /// Memory the store holds whatever the kernel does (block cache, write buffers, or all
    /// of its content for a store in RAM), for the memory budget. Cheap: no I/O, no locks
    /// shared with writers.
    fn memory_bytes(&self) -> u64;

    /// A consistent view of everything written so far; later writes stay invisible to it.
    fn snapshot(&self) -> Box<dyn StoreView>;

    /// Bytes the store has taken in and must still write out to its files (memtables to
    /// tables, staged operations to the journal): space it will need (`space_reserve`).
    fn pending_bytes(&self) -> u64 {
        0
    }

    /// Writes out what `pending_bytes` counts now, so the journals holding it can go and
    /// their space comes back; waits for that. For a device near full.
    fn release_space(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Failures of writes the store did on its own (background checkpoints): see
    /// `error_seq`. None for stores that do no such writes.
    fn background_errors(&self) -> crate::store::error_seq::WriteErrors {
        crate::store::error_seq::WriteErrors::default()
    }

    /// Maintenance: writes every memtable out and merges all tables into one sorted run,
    /// dropping overwritten versions and tombstones. Blocks until done; writes may go on.
    fn compact(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// `Err(StoreError::Poisoned)` once a background thread of this store (or of a store
    /// it wraps) panicked (see `poison`). Cheap: checked before every engine operation.
    fn poisoned(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// A batch write at least this long is logged with where its time went (by the engine and
/// by the staged store): requests wait behind it, and the histograms cannot say why.
pub const SLOW_WRITE_REPORT: std::time::Duration = std::time::Duration::from_millis(50);

/// Visits every pair in `range` of `space` until `visit` fails, and returns its error.
pub(crate) fn scan_all<S: StoreView + ?Sized>(
    store: &S,
    space: Space,
    range: (Vec<u8>, Vec<u8>),
    mut visit: impl FnMut(&[u8], &[u8]) -> crate::error::FsResult<()>,
) -> crate::error::FsResult<()> {
    let mut failure = None;
    store.scan(
        space,
        &range.0,
        &range.1,
        &mut |key, value| match visit(key, value) {
            Ok(()) => Scan::Continue,
            Err(error) => {
                failure = Some(error);
                Scan::Stop
            }
        },
    )?;
    failure.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_keeps_the_last_write_per_key_and_reads_its_own_writes() {
        let mut batch = Batch::default();
        batch.put(Space::Meta, b"a".to_vec(), b"1".to_vec());
        batch.put(Space::Meta, b"a".to_vec(), b"2".to_vec());
        batch.put(Space::Data, b"a".to_vec(), b"data".to_vec());
        batch.delete(Space::Meta, b"b".to_vec());
        assert_eq!(batch.len(), 3, "one item per (space, key)");
        assert_eq!(batch.lookup(Space::Meta, b"a"), Some(Some(&b"2"[..])));
        assert_eq!(batch.lookup(Space::Data, b"a"), Some(Some(&b"data"[..])));
        assert_eq!(batch.lookup(Space::Meta, b"b"), Some(None));
        assert_eq!(batch.lookup(Space::Meta, b"c"), None);
        batch.put(Space::Meta, b"b".to_vec(), b"back".to_vec());
        assert_eq!(batch.lookup(Space::Meta, b"b"), Some(Some(&b"back"[..])));
    }

    fn exercise(store: &dyn Store) {
        let mut batch = Batch::default();
        for key in [&b"k1"[..], b"k2", b"k3", b"z"] {
            batch.put(Space::Meta, key.to_vec(), key.to_vec());
        }
        batch.put(Space::Data, b"k2".to_vec(), b"chunk".to_vec());
        store.write(batch).unwrap();
        let mut deletes = Batch::default();
        deletes.delete(Space::Meta, b"k2".to_vec());
        store.write(deletes).unwrap();

        assert_eq!(store.get(Space::Meta, b"k1").unwrap(), Some(b"k1".to_vec()));
        assert_eq!(store.get(Space::Meta, b"k2").unwrap(), None);
        assert_eq!(
            store.get(Space::Data, b"k2").unwrap(),
            Some(b"chunk".to_vec())
        );
        let mut seen = Vec::new();
        store
            .scan(Space::Meta, b"k", b"l", &mut |key, _| {
                seen.push(key.to_vec());
                Scan::Continue
            })
            .unwrap();
        assert_eq!(seen, vec![b"k1".to_vec(), b"k3".to_vec()]);
        let mut first = Vec::new();
        store
            .scan(Space::Meta, b"", b"\xff", &mut |key, _| {
                first.push(key.to_vec());
                Scan::Stop
            })
            .unwrap();
        assert_eq!(first, vec![b"k1".to_vec()]);
        assert_eq!(
            store.last_key(Space::Meta, b"k", b"l").unwrap(),
            Some(b"k3".to_vec())
        );
        assert_eq!(store.last_key(Space::Meta, b"a", b"b").unwrap(), None);
        store.sync().unwrap();
    }

    #[test]
    fn memory_and_fjall_stores_agree() {
        exercise(&MemoryStore::new());
        for checkpoint_bytes in [1, 1 << 20] {
            exercise(&StagedStore::new(Box::new(MemoryStore::new()), checkpoint_bytes).unwrap());
        }
        let dir = tempfile::tempdir().unwrap();
        exercise(&FjallStore::open(dir.path(), &FjallTuning::default()).unwrap());
    }
}
