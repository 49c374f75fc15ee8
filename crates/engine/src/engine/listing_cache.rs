//! Directory listings kept between requests, the daemon's counterpart of the kernel's
//! dentry and attribute caches. A listing is a range scan of the LSM: on the 2-core VM
//! setting up its merge of memtables and tables costs 10-20 µs, half of what a warm `find`
//! or `du -s` spends per directory under `shoal run` (the kernel door answers those from
//! its own caches without asking the daemon).
//!
//! Coherent with every batch: a batch rewrites the record of each directory whose names it
//! changes and of each inode whose attributes it changes, and when it is counted
//! (`Engine::count_change`) every page of those directories and every page with those
//! inodes is dropped, under the cache's lock, with the count's move. So a page served while
//! the count is C holds every counted batch up to C. A reader takes the count before it
//! scans and keeps its page only if the count has not moved since (checked under the same
//! lock), so a page read across a change is never kept. It used to drop every page at any
//! change: `git status` rewrites its index each time, and the next one then read every
//! listing of the work tree from the LSM again.
//!
//! Bounded: pages are counted in bytes and the cache is emptied when it would pass
//! `defaults::LISTING_CACHE_BYTES`; inodes are kept without their inline content (listing
//! callers need attributes, not data).

use std::sync::Arc;

use parking_lot::Mutex;

use crate::hashing::FastHashMap;
use crate::records::inode::{DirEntry, Inode};

/// One page request: the directory, the name it starts after, how many entries at most,
/// and whether with inodes.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct PageKey {
    pub dir: u64,
    pub after: Option<Box<[u8]>>,
    pub limit: usize,
    pub with_inodes: bool,
}

#[derive(Clone, Debug)]
pub(crate) enum Page {
    Names(Arc<Vec<DirEntry>>),
    WithInodes(Arc<Vec<(DirEntry, Inode)>>),
}

/// Per-entry bytes beyond names and inline content: the map slot, the vectors' headers,
/// an inode's fixed fields.
const ENTRY_OVERHEAD_BYTES: usize = 64;
/// An inode's place in the index of pages (`Kept::pages_of`): a key and its share of a list.
const INDEX_ENTRY_BYTES: usize = std::mem::size_of::<PageKey>() + 8;
const INODE_BYTES: usize = std::mem::size_of::<Inode>();

impl Page {
    fn bytes(&self, key: &PageKey) -> usize {
        let key_bytes = key.after.as_ref().map_or(0, |name| name.len()) + ENTRY_OVERHEAD_BYTES;
        let entries: usize = match self {
            Page::Names(entries) => entries
                .iter()
                .map(|e| e.name.len() + ENTRY_OVERHEAD_BYTES)
                .sum(),
            Page::WithInodes(entries) => entries
                .iter()
                .map(|(e, _)| e.name.len() + ENTRY_OVERHEAD_BYTES + INODE_BYTES)
                .sum(),
        };
        key_bytes + entries
    }
}

#[derive(Default)]
struct Kept {
    /// The change count the pages hold for (every batch counted up to it is reflected).
    changes: u64,
    pages: FastHashMap<PageKey, Page>,
    /// For each inode, the pages a change of it drops: its own (as a directory) and those
    /// that carry it as an entry with its attributes. A dropped page's key stays in the
    /// lists of its other inodes until the cache is emptied: its bytes count against the
    /// budget until then (`index_bytes`), so the index is bounded with the pages.
    pages_of: FastHashMap<u64, Vec<PageKey>>,
    bytes: usize,
    index_bytes: usize,
}

pub(crate) struct ListingCache {
    kept: Mutex<Kept>,
    budget_bytes: usize,
}

impl ListingCache {
    pub fn new(budget_bytes: usize) -> ListingCache {
        ListingCache {
            kept: Mutex::new(Kept::default()),
            budget_bytes,
        }
    }

    pub fn get(&self, key: &PageKey) -> Option<Page> {
        self.kept.lock().pages.get(key).cloned()
    }

    /// Keeps `page`, read from the store while the count was `read_at`, if no batch has
    /// been counted since (`changes` reads the count under the lock, so no batch can be
    /// counted, and drop what it read, between the check and the insert).
    pub fn put(&self, key: PageKey, page: Page, read_at: u64, changes: impl FnOnce() -> u64) {
        let bytes = page.bytes(&key);
        if bytes > self.budget_bytes / 4 {
            return;
        }
        let inodes = page.inodes(&key);
        let index_bytes = inodes.len() * INDEX_ENTRY_BYTES;
        let mut kept = self.kept.lock();
        if changes() != read_at {
            return;
        }
        if kept.bytes + kept.index_bytes + bytes + index_bytes > self.budget_bytes {
            kept.clear();
        }
        for ino in inodes {
            kept.pages_of.entry(ino).or_default().push(key.clone());
        }
        kept.index_bytes += index_bytes;
        if let Some(old) = kept.pages.insert(key.clone(), page) {
            kept.bytes -= old.bytes(&key);
        }
        kept.bytes += bytes;
    }

    /// A batch that wrote the records of `inodes` is in the store: moves the count
    /// (`count`, which returns the new one) and drops the pages it changed, in one step for
    /// readers.
    pub fn changed(&self, inodes: &[u64], count: impl FnOnce() -> u64) -> u64 {
        let mut kept = self.kept.lock();
        let changes = count();
        for ino in inodes {
            let Some(keys) = kept.pages_of.remove(ino) else {
                continue;
            };
            for key in keys {
                if let Some(page) = kept.pages.remove(&key) {
                    kept.bytes -= page.bytes(&key);
                }
            }
        }
        kept.changes = changes;
        changes
    }

    pub fn bytes(&self) -> u64 {
        let kept = self.kept.lock();
        (kept.bytes + kept.index_bytes) as u64
    }
}

impl Kept {
    fn clear(&mut self) {
        self.pages.clear();
        self.pages_of.clear();
        self.bytes = 0;
        self.index_bytes = 0;
    }
}

impl Page {
    /// The inodes a change of which changes this page: its directory, and with inodes,
    /// each entry's.
    fn inodes(&self, key: &PageKey) -> Vec<u64> {
        let mut inodes = vec![key.dir];
        if let Page::WithInodes(entries) = self {
            inodes.extend(entries.iter().map(|(entry, _)| entry.ino));
        }
        inodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::inode::{Content, FileKind, Timestamp};

    fn key(dir: u64) -> PageKey {
        PageKey {
            dir,
            after: None,
            limit: 100,
            with_inodes: false,
        }
    }

    fn names(n: usize) -> Page {
        Page::Names(Arc::new(
            (0..n)
                .map(|i| DirEntry {
                    name: format!("f{i}").into_bytes(),
                    ino: i as u64 + 10,
                    kind: FileKind::Regular,
                })
                .collect(),
        ))
    }

    fn kept_len(page: Option<Page>) -> Option<usize> {
        match page? {
            Page::Names(entries) => Some(entries.len()),
            Page::WithInodes(entries) => Some(entries.len()),
        }
    }

    fn with_inodes(dir_entries: &[u64]) -> Page {
        Page::WithInodes(Arc::new(
            dir_entries
                .iter()
                .map(|&ino| {
                    let entry = DirEntry {
                        name: format!("f{ino}").into_bytes(),
                        ino,
                        kind: FileKind::Regular,
                    };
                    let inode = Inode {
                        ino,
                        kind: FileKind::Regular,
                        perm: 0o644,
                        uid: 0,
                        gid: 0,
                        nlink: 1,
                        size: 0,
                        allocated_bytes: 0,
                        atime: Timestamp::default(),
                        mtime: Timestamp::default(),
                        ctime: Timestamp::default(),
                        rdev: 0,
                        parent: 1,
                        project: 0,
                        content: Content::Inline(Vec::new()),
                        may_have_xattrs: false,
                    };
                    (entry, inode)
                })
                .collect(),
        ))
    }

    #[test]
    fn a_page_is_served_until_a_change_of_its_directory_or_an_entry() {
        let cache = ListingCache::new(1 << 20);
        cache.put(key(1), names(3), 7, || 7);
        let plus = PageKey {
            with_inodes: true,
            ..key(2)
        };
        cache.put(plus.clone(), with_inodes(&[20, 21]), 7, || 7);
        assert_eq!(kept_len(cache.get(&key(1))), Some(3));
        assert_eq!(kept_len(cache.get(&key(3))), None);
        assert_eq!(cache.changed(&[99], || 8), 8);
        assert_eq!(kept_len(cache.get(&key(1))), Some(3), "elsewhere: kept");
        assert_eq!(kept_len(cache.get(&plus)), Some(2));
        cache.changed(&[21], || 9);
        assert_eq!(
            kept_len(cache.get(&plus)),
            None,
            "an entry's attributes changed"
        );
        assert_eq!(kept_len(cache.get(&key(1))), Some(3));
        cache.changed(&[1], || 10);
        assert_eq!(kept_len(cache.get(&key(1))), None, "its names changed");
        assert!(cache.bytes() < 1024, "what stays is the index's stale keys");
    }

    #[test]
    fn a_page_read_across_a_change_is_not_kept() {
        let cache = ListingCache::new(1 << 20);
        cache.put(key(1), names(3), 7, || 8);
        assert_eq!(kept_len(cache.get(&key(1))), None);
    }

    #[test]
    fn pages_dropped_by_changes_leave_a_bounded_index() {
        let cache = ListingCache::new(64 * 1024);
        let entries: Vec<u64> = (100..200).collect();
        for round in 0..5_000u64 {
            let plus = PageKey {
                with_inodes: true,
                ..key(round % 7)
            };
            cache.put(plus, with_inodes(&entries), round, || round);
            cache.changed(&[round % 7], || round + 1);
            assert!(
                cache.bytes() <= 64 * 1024,
                "round {round}: {}",
                cache.bytes()
            );
        }
    }

    #[test]
    fn the_budget_bounds_what_is_kept() {
        let cache = ListingCache::new(64 * 1024);
        for dir in 0..1000 {
            cache.put(key(dir), names(20), 1, || 1);
            assert!(cache.bytes() <= 64 * 1024);
        }
        assert!(
            kept_len(cache.get(&key(999))).is_some(),
            "the newest page is kept"
        );
        cache.put(key(5000), names(10_000), 1, || 1);
        assert_eq!(
            kept_len(cache.get(&key(5000))),
            None,
            "a page over a quarter is not"
        );
    }
}
