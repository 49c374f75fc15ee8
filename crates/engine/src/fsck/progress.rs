//! `shoal fsck` with progress: the check reads the store through a wrapper that counts the
//! pairs its scans visit, so a long check on a big store can show how far it has got.

use std::path::Path;

use super::FsckReport;
use crate::store::{Batch, Scan, Space, Store, StoreError, StoreView};
use crate::store_dir::open::OpenError;

/// How often (in visited pairs) `progress` hears of the count.
const REPORT_EVERY_PAIRS: u64 = 16_384;

/// [`super::fsck_store_dir`], telling `progress` the pairs read so far as it goes.
pub fn fsck_store_dir_with_progress(
    dir: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<FsckReport, OpenError> {
    super::fsck_store_dir_observed(dir, progress)
}

/// A read-through view of a store that counts the pairs its scans visit.
pub(crate) struct Counting<'a> {
    inner: &'a dyn Store,
    visited: std::sync::atomic::AtomicU64,
    /// The count `progress` heard last: the check's passes scan on several threads, and a
    /// report is passed on only above it, so the count heard never goes back.
    reported: parking_lot::Mutex<u64>,
    progress: &'a (dyn Fn(u64) + Sync),
}

impl<'a> Counting<'a> {
    pub(crate) fn new(inner: &'a dyn Store, progress: &'a (dyn Fn(u64) + Sync)) -> Self {
        Self {
            inner,
            visited: std::sync::atomic::AtomicU64::new(0),
            reported: parking_lot::Mutex::new(0),
            progress,
        }
    }
}

impl StoreView for Counting<'_> {
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
    ) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering::Relaxed;
        self.inner.scan(space, start, end, &mut |key, value| {
            let visited = self.visited.fetch_add(1, Relaxed) + 1;
            if visited.is_multiple_of(REPORT_EVERY_PAIRS) {
                let mut reported = self.reported.lock();
                if visited > *reported {
                    *reported = visited;
                    (self.progress)(visited);
                }
            }
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

/// Reads pass through; the check never writes, and these delegate all the same.
impl Store for Counting<'_> {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(space, key)
    }

    fn write(&self, batch: Batch) -> Result<(), StoreError> {
        self.inner.write(batch)
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.inner.sync()
    }

    fn disk_bytes(&self) -> u64 {
        self.inner.disk_bytes()
    }

    fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes()
    }

    fn snapshot(&self) -> Box<dyn StoreView> {
        self.inner.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::{Engine, EngineConfig};

    #[test]
    fn progress_counts_the_pairs_read_and_the_report_is_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        Engine::mkfs(&store, false).unwrap();
        {
            let fs = Engine::open(&store, EngineConfig::default()).unwrap();
            for i in 0..20_000u32 {
                let file = crate::NewInode {
                    kind: crate::FileKind::Regular,
                    perm: 0o644,
                    rdev: 0,
                    target: b"",
                };
                fs.create(
                    crate::ROOT_INO,
                    format!("f{i}").as_bytes(),
                    &file,
                    crate::Caller::ROOT,
                )
                .unwrap();
            }
            fs.sync().unwrap();
        }
        let last = AtomicU64::new(0);
        let heard = std::sync::Mutex::new(Vec::new());
        let report = fsck_store_dir_with_progress(&store, &|pairs| {
            last.store(pairs, Ordering::Relaxed);
            heard.lock().unwrap().push(pairs);
        })
        .unwrap();
        assert!(report.is_clean());
        assert!(
            last.load(Ordering::Relaxed) >= 40_000,
            "inodes and entries were counted"
        );
        let heard = heard.into_inner().unwrap();
        assert!(
            heard.windows(2).all(|pair| pair[0] < pair[1]),
            "the count went back (passes on several threads): {heard:?}"
        );
        let plain = crate::fsck::fsck_store_dir(&store).unwrap();
        assert_eq!(plain.inodes, report.inodes);
        assert_eq!(plain.entries, report.entries);
    }
}
