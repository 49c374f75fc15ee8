//! The narrow ordered key-value interface the engine is written against.
//!
//! Two spaces: `Meta` (inodes, entries, xattrs, counters) and `Data` (file chunks), so bulk
//! file data never slows compaction of the metadata tree. A `Batch` is applied atomically
//! across both spaces.

mod fjall_store;
mod memory_store;

use std::collections::BTreeMap;

pub use fjall_store::{FjallStore, FjallTuning};
pub use memory_store::MemoryStore;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Space {
    Meta,
    Data,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("I/O error in the key-value store: {0}")]
    Io(#[from] std::io::Error),
    #[error("key-value store: {0}")]
    Engine(String),
    #[error("no space left on the store's device")]
    NoSpace,
}

/// Whether a scan goes on after the visited pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    Continue,
    Stop,
}

/// A set of puts and deletes applied atomically. Later writes to the same key replace earlier
/// ones, and reads through the batch see its own writes: an operation can update the same
/// inode twice (rename within one directory) without a duplicate key reaching the store.
#[derive(Debug, Default)]
pub struct Batch {
    items: BTreeMap<(Space, Vec<u8>), Option<Vec<u8>>>,
}

impl Batch {
    pub fn put(&mut self, space: Space, key: Vec<u8>, value: Vec<u8>) {
        self.items.insert((space, key), Some(value));
    }

    pub fn delete(&mut self, space: Space, key: Vec<u8>) {
        self.items.insert((space, key), None);
    }

    /// `Some(Some(v))`: written in this batch; `Some(None)`: deleted in it; `None`: untouched.
    pub fn lookup(&self, space: Space, key: &[u8]) -> Option<Option<&[u8]>> {
        self.items
            .get(&(space, key.to_vec()))
            .map(|value| value.as_deref())
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.items
            .iter()
            .map(|((_, k), v)| k.len() + v.as_ref().map_or(0, Vec::len))
            .sum()
    }

    pub fn into_items(self) -> impl Iterator<Item = (Space, Vec<u8>, Option<Vec<u8>>)> {
        self.items
            .into_iter()
            .map(|((space, key), value)| (space, key, value))
    }
}

/// An ordered key-value store with atomic batches. Implementations: fjall (on disk) and an
/// in-memory map (for `mount --memory` and tests).
pub trait Store: Send + Sync {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// Visits keys in `[start, end)` in ascending order until `visit` says stop.
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
    ) -> Result<(), StoreError>;

    /// The greatest key in `[start, end)`, if any.
    fn last_key(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError>;

    /// Applies the batch atomically. It reaches the operating system before this returns (so a
    /// killed daemon loses nothing), but is durable against power loss only after `sync`.
    fn write(&self, batch: Batch) -> Result<(), StoreError>;

    /// Makes every written batch durable.
    fn sync(&self) -> Result<(), StoreError>;

    /// Bytes the store occupies on its device (0 for memory).
    fn disk_bytes(&self) -> u64;
}
