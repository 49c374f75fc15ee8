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
//! A page is kept by where it starts (directory, the name it follows, with inodes or not),
//! not by how many entries it was asked for: a page read for `limit` entries answers any
//! request for at most as many, and any request at all once it reached the directory's
//! end. Keyed by the limit too, an `opendir`'s first page (128 entries) and a `getdents`'s
//! (512) of the same directory were two pages: `git status` of a 32k-entry clone kept
//! every listing twice, passed the budget and listed 4.8k directories from the LSM per
//! run, warm.
//!
//! Bounded: pages are counted in bytes against `defaults::LISTING_CACHE_BYTES`, in rounds.
//! A round ends when the pages kept or served in it would pass half the budget; then the
//! pages of the round before that were not used in this one go. So the pages used last
//! stay, at least half the budget's worth, and at most the budget is kept. Emptying the
//! whole cache at the budget instead made a working set just over it miss on every page.
//! Inodes are kept without their inline content (listing callers need attributes, not
//! data).

use std::ops::Deref;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::hashing::FastHashMap;
use crate::records::inode::{DirEntry, Inode};

/// Where a page starts: the directory, the name it follows, and whether with inodes.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct PageKey {
    pub dir: u64,
    pub after: Option<Box<[u8]>>,
    pub with_inodes: bool,
}

#[derive(Clone, Debug)]
pub(crate) enum Page {
    Names(Arc<Vec<DirEntry>>),
    WithInodes(Arc<Vec<(DirEntry, Inode)>>),
}

/// The first `len` entries of a page kept by the listing cache, shared rather than copied:
/// a caller that only reads them (to encode them) spares a copy of every entry.
#[derive(Clone, Debug)]
pub struct SharedPage<T> {
    entries: Arc<Vec<T>>,
    len: usize,
}

impl<T: Clone> SharedPage<T> {
    pub(crate) fn new(entries: Arc<Vec<T>>, limit: usize) -> SharedPage<T> {
        let len = entries.len().min(limit);
        SharedPage { entries, len }
    }

    /// The entries, copied only where the page is shared or longer than asked for.
    pub fn into_vec(self) -> Vec<T> {
        if self.len == self.entries.len() {
            Arc::unwrap_or_clone(self.entries)
        } else {
            self.entries[..self.len].to_vec()
        }
    }
}

impl<T> Deref for SharedPage<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.entries[..self.len]
    }
}

/// Per-entry bytes beyond names and inline content: the map slot, the vectors' headers,
/// an inode's fixed fields.
const ENTRY_OVERHEAD_BYTES: usize = 64;
/// An inode's place in the index of pages (`Kept::pages_of`): a key and its share of a list.
const INDEX_ENTRY_BYTES: usize = std::mem::size_of::<PageKey>() + 8;
const INODE_BYTES: usize = std::mem::size_of::<Inode>();

impl Page {
    fn len(&self) -> usize {
        match self {
            Page::Names(entries) => entries.len(),
            Page::WithInodes(entries) => entries.len(),
        }
    }

    fn bytes(&self, key: &PageKey) -> usize {
        let key_bytes = key.after.as_ref().map_or(0, |name| name.len()) + ENTRY_OVERHEAD_BYTES;
        let entries: usize = match self {
            Page::Names(entries) => entries
                .iter()
                .map(|e| e.name.len() + ENTRY_OVERHEAD_BYTES)
                .sum(),
            Page::WithInodes(entries) => entries
                .iter()
                .map(|(e, inode)| {
                    e.name.len() + ENTRY_OVERHEAD_BYTES + INODE_BYTES + inode.inline_data().len()
                })
                .sum(),
        };
        key_bytes + entries
    }

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

struct KeptPage {
    page: Page,
    /// The most entries its scan was asked for: fewer means it reached the directory's end.
    read_limit: usize,
    /// Its bytes and its keys' in the index (`Kept::current_bytes`).
    cost: usize,
    /// The round it was last kept or served in (`Kept::generation`).
    generation: u64,
}

impl KeptPage {
    /// Whether it holds the answer to a request for `limit` entries from its start.
    fn answers(&self, limit: usize) -> bool {
        let len = self.page.len();
        len >= limit || len < self.read_limit
    }
}

#[derive(Default)]
struct Kept {
    /// The change count the pages hold for (every batch counted up to it is reflected).
    changes: u64,
    pages: FastHashMap<PageKey, KeptPage>,
    /// For each inode, the pages a change of it drops: its own (as a directory) and those
    /// that carry it as an entry with its attributes. A dropped page's key stays in the
    /// lists of its other inodes until the next round rebuilds the index: its bytes count
    /// against the budget until then (`index_bytes`), so the index is bounded with the
    /// pages.
    pages_of: FastHashMap<u64, Vec<PageKey>>,
    bytes: usize,
    index_bytes: usize,
    /// The current round: pages kept or served in it stay at the next one, the others go.
    generation: u64,
    /// The cost of the pages of the current round: a round ends at half the budget, so
    /// the pages of the last one (at most the other half) stay.
    current_bytes: usize,
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

    /// The page at `key` if it answers a request for `limit` entries (the caller takes
    /// the first `limit`).
    pub fn get(&self, key: &PageKey, limit: usize) -> Option<Page> {
        let mut kept = self.kept.lock();
        let generation = kept.generation;
        let found = kept.pages.get_mut(key)?;
        if !found.answers(limit) {
            return None;
        }
        let promoted = (found.generation != generation).then_some(found.cost);
        found.generation = generation;
        let page = found.page.clone();
        kept.current_bytes += promoted.unwrap_or(0);
        Some(page)
    }

    /// Keeps `page`, read for `limit` entries from the store while the count was
    /// `read_at`, if no batch has been counted since (`changes` reads the count under the
    /// lock, so no batch can be counted, and drop what it read, between the check and the
    /// insert).
    pub fn put(
        &self,
        key: PageKey,
        page: Page,
        limit: usize,
        read_at: u64,
        changes: impl FnOnce() -> u64,
    ) {
        assert!(page.len() <= limit, "a page holds at most what was asked");
        let bytes = page.bytes(&key);
        let inodes = page.inodes(&key);
        let cost = bytes + inodes.len() * INDEX_ENTRY_BYTES;
        if cost > self.budget_bytes / 4 {
            return;
        }
        let mut kept = self.kept.lock();
        if changes() != read_at {
            return;
        }
        kept.remove(&key);
        if kept.current_bytes + cost > self.budget_bytes / 2 || !kept.fits(cost, self.budget_bytes)
        {
            kept.start_round();
        }
        if !kept.fits(cost, self.budget_bytes) {
            // The round that ended had used more than half (its pages served again):
            // a second round keeps none.
            kept.start_round();
        }
        assert!(kept.fits(cost, self.budget_bytes));
        for ino in inodes {
            kept.pages_of.entry(ino).or_default().push(key.clone());
        }
        kept.index_bytes += cost - bytes;
        kept.bytes += bytes;
        kept.current_bytes += cost;
        let generation = kept.generation;
        let page = KeptPage {
            page,
            read_limit: limit,
            cost,
            generation,
        };
        kept.pages.insert(key, page);
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
                kept.remove(&key);
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
    /// Drops the page at `key`, if kept (its keys stay in the index until the next round).
    fn remove(&mut self, key: &PageKey) {
        let Some(gone) = self.pages.remove(key) else {
            return;
        };
        self.bytes -= gone.page.bytes(key);
        if gone.generation == self.generation {
            self.current_bytes -= gone.cost;
        }
    }

    fn fits(&self, cost: usize, budget_bytes: usize) -> bool {
        self.bytes + self.index_bytes + cost <= budget_bytes
    }

    /// Drops the pages neither kept nor served in the round that ends, rebuilds the index
    /// from those that stay (so dropped pages' keys leave it) and starts the next round.
    fn start_round(&mut self) {
        let ending = self.generation;
        self.pages.retain(|_, kept| kept.generation == ending);
        self.pages_of.clear();
        self.bytes = 0;
        self.index_bytes = 0;
        for (key, kept) in &self.pages {
            let inodes = kept.page.inodes(key);
            self.index_bytes += inodes.len() * INDEX_ENTRY_BYTES;
            self.bytes += kept.page.bytes(key);
            for ino in inodes {
                self.pages_of.entry(ino).or_default().push(key.clone());
            }
        }
        self.generation += 1;
        self.current_bytes = 0;
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
        cache.put(key(1), names(3), 100_000, 7, || 7);
        let plus = PageKey {
            with_inodes: true,
            ..key(2)
        };
        cache.put(plus.clone(), with_inodes(&[20, 21]), 100_000, 7, || 7);
        assert_eq!(kept_len(cache.get(&key(1), 100)), Some(3));
        assert_eq!(kept_len(cache.get(&key(3), 100)), None);
        assert_eq!(cache.changed(&[99], || 8), 8);
        assert_eq!(
            kept_len(cache.get(&key(1), 100)),
            Some(3),
            "elsewhere: kept"
        );
        assert_eq!(kept_len(cache.get(&plus, 100)), Some(2));
        cache.changed(&[21], || 9);
        assert_eq!(
            kept_len(cache.get(&plus, 100)),
            None,
            "an entry's attributes changed"
        );
        assert_eq!(kept_len(cache.get(&key(1), 100)), Some(3));
        cache.changed(&[1], || 10);
        assert_eq!(kept_len(cache.get(&key(1), 100)), None, "its names changed");
        assert!(cache.bytes() < 1024, "what stays is the index's stale keys");
    }

    #[test]
    fn a_page_read_across_a_change_is_not_kept() {
        let cache = ListingCache::new(1 << 20);
        cache.put(key(1), names(3), 100_000, 7, || 8);
        assert_eq!(kept_len(cache.get(&key(1), 100)), None);
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
            cache.put(plus, with_inodes(&entries), 100_000, round, || round);
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
            cache.put(key(dir), names(20), 100_000, 1, || 1);
            assert!(cache.bytes() <= 64 * 1024);
        }
        assert!(
            kept_len(cache.get(&key(999), 100)).is_some(),
            "the newest page is kept"
        );
        cache.put(key(5000), names(10_000), 100_000, 1, || 1);
        assert_eq!(
            kept_len(cache.get(&key(5000), 100)),
            None,
            "a page over a quarter is not"
        );
    }

    #[test]
    fn a_page_answers_fewer_entries_and_any_number_once_it_reached_the_end() {
        let cache = ListingCache::new(1 << 20);
        cache.put(key(1), names(128), 128, 7, || 7);
        assert_eq!(kept_len(cache.get(&key(1), 100)), Some(128), "a prefix");
        assert_eq!(kept_len(cache.get(&key(1), 128)), Some(128));
        assert_eq!(
            kept_len(cache.get(&key(1), 512)),
            None,
            "a full page may end before the directory does"
        );
        cache.put(key(1), names(200), 512, 7, || 7);
        assert_eq!(kept_len(cache.get(&key(1), 128)), Some(200));
        assert_eq!(
            kept_len(cache.get(&key(1), 4096)),
            Some(200),
            "fewer than asked: the directory's end"
        );
        let kept_once = cache.bytes();
        cache.put(key(1), names(200), 512, 7, || 7);
        assert!(cache.bytes() > kept_once, "the index's stale keys");
        assert_eq!(kept_len(cache.get(&key(1), 4096)), Some(200));
    }

    #[test]
    fn pages_used_in_the_last_round_outlive_pages_read_once() {
        let budget = 256 * 1024;
        let cache = ListingCache::new(budget);
        let page_bytes = names(20).bytes(&key(0)) + 2 * INDEX_ENTRY_BYTES;
        // A working set of a third of the budget read over and over, with a page read
        // once after every fourth of its pages: those pass the budget one and a half times
        // over in 20 passes (emptying the cache at the budget dropped the working set at
        // the 9th).
        let hot = (budget / 3 / page_bytes) as u64;
        let mut once = 1_000_000;
        for pass in 0..20 {
            for dir in 0..hot {
                if cache.get(&key(dir), 20).is_none() {
                    assert!(pass == 0, "pass {pass}: dir {dir} was dropped");
                    cache.put(key(dir), names(20), 20, 1, || 1);
                }
                if dir % 4 == 3 {
                    cache.put(key(once), names(20), 20, 1, || 1);
                    once += 1;
                }
                assert!(cache.bytes() <= budget as u64);
            }
        }
        assert!(
            once - 1_000_000 > 3 * hot,
            "the pages read once passed the budget"
        );
    }
}
