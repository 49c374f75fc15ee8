//! Directory listings kept between requests, the daemon's counterpart of the kernel's
//! dentry and attribute caches. A listing is a range scan of the LSM: on the 2-core VM
//! setting up its merge of memtables and tables costs 10-20 µs, half of what a warm `find`
//! or `du -s` spends per directory under `shoal run` (the kernel door answers those from
//! its own caches without asking the daemon).
//!
//! Coherent by the engine's change count (`Engine::changes`), which moves after every
//! batch is in the store: every kept page was read while the count had one value, and the
//! whole cache is dropped the first time it is used under another. A reader takes the
//! count before it scans and keeps its page only if the count has not moved since, so a
//! page read across a change is never kept. Coarse (any change anywhere drops every page)
//! and so simple: what it serves is a tree nobody is changing, which is what `find`, `du`,
//! `ls -lR` and a build's dependency scan read again and again.
//!
//! Bounded: pages are counted in bytes and the cache is emptied when it would pass
//! `defaults::LISTING_CACHE_BYTES`; inodes are kept without their inline content (listing
//! callers need attributes, not data).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

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
    /// The change count every kept page was read under.
    changes: u64,
    pages: HashMap<PageKey, Page>,
    bytes: usize,
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

    /// The page kept for `key`, if it was read under `changes_now`.
    pub fn get(&self, key: &PageKey, changes_now: u64) -> Option<Page> {
        let mut kept = self.kept.lock();
        forget_if_moved(&mut kept, changes_now);
        kept.pages.get(key).cloned()
    }

    /// Keeps `page`, read by a scan that started when the count was `read_at`, unless
    /// something changed since (`changes_now` differs) or it alone passes the budget.
    pub fn put(&self, key: PageKey, page: Page, read_at: u64, changes_now: u64) {
        if read_at != changes_now {
            return;
        }
        let bytes = page.bytes(&key);
        if bytes > self.budget_bytes / 4 {
            return;
        }
        let mut kept = self.kept.lock();
        forget_if_moved(&mut kept, changes_now);
        if kept.bytes + bytes > self.budget_bytes {
            kept.pages.clear();
            kept.bytes = 0;
        }
        if let Some(old) = kept.pages.insert(key.clone(), page) {
            kept.bytes -= old.bytes(&key);
        }
        kept.bytes += bytes;
    }

    /// Bytes the kept pages are counted at (the memory budget's share).
    pub fn bytes(&self) -> u64 {
        self.kept.lock().bytes as u64
    }
}

fn forget_if_moved(kept: &mut Kept, changes_now: u64) {
    if kept.changes != changes_now {
        kept.pages.clear();
        kept.bytes = 0;
        kept.changes = changes_now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::inode::FileKind;

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

    #[test]
    fn a_page_is_served_until_the_count_moves() {
        let cache = ListingCache::new(1 << 20);
        cache.put(key(1), names(3), 7, 7);
        assert_eq!(kept_len(cache.get(&key(1), 7)), Some(3));
        assert_eq!(kept_len(cache.get(&key(2), 7)), None);
        assert_eq!(kept_len(cache.get(&key(1), 8)), None, "a change drops it");
        assert_eq!(
            kept_len(cache.get(&key(1), 7)),
            None,
            "and it stays dropped"
        );
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn a_page_read_across_a_change_is_not_kept() {
        let cache = ListingCache::new(1 << 20);
        cache.put(key(1), names(3), 7, 8);
        assert_eq!(kept_len(cache.get(&key(1), 8)), None);
        assert_eq!(kept_len(cache.get(&key(1), 7)), None);
    }

    #[test]
    fn the_budget_bounds_what_is_kept() {
        let cache = ListingCache::new(64 * 1024);
        for dir in 0..1000 {
            cache.put(key(dir), names(20), 1, 1);
            assert!(cache.bytes() <= 64 * 1024);
        }
        assert!(
            kept_len(cache.get(&key(999), 1)).is_some(),
            "the newest page is kept"
        );
        cache.put(key(5000), names(10_000), 1, 1);
        assert_eq!(
            kept_len(cache.get(&key(5000), 1)),
            None,
            "a page over a quarter is not"
        );
    }
}
