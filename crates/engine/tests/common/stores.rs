//! A memory store that fails writes and syncs when its plan says so (fault tests).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use shoal_engine::internals::store::{
    Batch, MemoryStore, Scan, Space, Store, StoreError, StoreView,
};

/// Decides, before each write or sync, whether it fails (and how).
pub type FaultPlan = Box<dyn Fn() -> Result<(), StoreError> + Send + Sync>;

/// Fails writes and syncs of the memory store it wraps as `plan` decides: a failed write
/// applies nothing (the store contract: batches are atomic).
pub struct FaultyStore {
    pub inner: Arc<MemoryStore>,
    pub plan: FaultPlan,
}

impl FaultyStore {
    /// Fails every write once `writes_left` (read and counted down at each write) is used
    /// up: a crash, nothing after it reaches the store. Tests set it to cut an operation
    /// short after so many batches.
    pub fn failing_after(inner: Arc<MemoryStore>, writes_left: Arc<AtomicU64>) -> Self {
        FaultyStore {
            inner,
            plan: Box::new(move || match writes_left.fetch_sub(1, Ordering::SeqCst) {
                0 => {
                    writes_left.store(0, Ordering::SeqCst);
                    Err(StoreError::Io(std::io::Error::from_raw_os_error(5)))
                }
                _ => Ok(()),
            }),
        }
    }

    /// The same store without faults, for the engine that checks the outcome.
    pub fn plain(inner: Arc<MemoryStore>) -> Self {
        FaultyStore {
            inner,
            plan: Box::new(|| Ok(())),
        }
    }
}

impl StoreView for FaultyStore {
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
    ) -> Result<(), StoreError> {
        self.inner.scan(space, start, end, visit)
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

impl Store for FaultyStore {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(space, key)
    }

    fn write(&self, batch: Batch) -> Result<(), StoreError> {
        (self.plan)()?;
        self.inner.write(batch)
    }

    fn sync(&self) -> Result<(), StoreError> {
        (self.plan)()?;
        self.inner.sync()
    }

    fn disk_bytes(&self) -> u64 {
        0
    }

    fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes()
    }

    fn snapshot(&self) -> Box<dyn StoreView> {
        self.inner.snapshot()
    }
}

/// A memory store whose syncs take `sync_time`, as a journal fsync on a disk does: long
/// enough for concurrent fsyncs to pile up behind one (group commit tests).
pub struct SlowSyncStore {
    pub inner: Arc<MemoryStore>,
    pub sync_time: std::time::Duration,
}

impl StoreView for SlowSyncStore {
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
    ) -> Result<(), StoreError> {
        self.inner.scan(space, start, end, visit)
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

impl Store for SlowSyncStore {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(space, key)
    }

    fn write(&self, batch: Batch) -> Result<(), StoreError> {
        self.inner.write(batch)
    }

    fn sync(&self) -> Result<(), StoreError> {
        std::thread::sleep(self.sync_time);
        self.inner.sync()
    }

    fn disk_bytes(&self) -> u64 {
        0
    }

    fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes()
    }

    fn snapshot(&self) -> Box<dyn StoreView> {
        self.inner.snapshot()
    }
}
