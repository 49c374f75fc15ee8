//! Listings of directories as replies carry them, kept while the versions they were read
//! at stay. The directories a walk opens ahead (`below.rs`) are the same for every process
//! that walks the tree: each `git status` asks again for every directory of its work tree,
//! and making each page from the engine's listing cache (its entries and inodes spread
//! over memory) and encoding it cost the daemon about 1 µs an entry. A page holds while the
//! directory's version and each listed inode's version stay (what a client's kept listing
//! holds by, `state`): the mount's change count would not do, as `git status` makes and
//! removes its index lock each time. Only a directory's whole listing in one page is kept;
//! a page kept for one caller serves another whose access gives the same page (attributes
//! or not: search permission on the directory; the open before it checked the rest).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use shoal_fastpath::DirEntryWire;

/// Bytes kept at most (a 9k-entry work tree's pages take about 1 MiB); past it every page
/// goes (each is made again at its next use).
const MAX_KEPT_BYTES: usize = 16 << 20;

/// A directory's whole listing, encoded (`shoal_fastpath::encode_page`).
#[derive(Clone)]
pub struct KeptPage {
    pub page: Arc<[u8]>,
    /// Entries on it.
    pub count: usize,
    pub dir_version: u32,
    /// Each inode listed with its attributes, at the version they were read after.
    pub versions: Arc<[(u64, u32)]>,
    /// Its subdirectories listed with their attributes: where a walk goes on.
    pub subdirs: Arc<[Vec<u8>]>,
}

impl KeptPage {
    fn bytes(&self) -> usize {
        self.page.len()
            + self.versions.len() * 12
            + self.subdirs.iter().map(Vec::len).sum::<usize>()
    }

    /// Whether directory `dir` and everything listed still have the versions read.
    fn holds(&self, dir: u64, version_of: impl Fn(u64) -> Option<u32>) -> bool {
        version_of(dir) == Some(self.dir_version)
            && self
                .versions
                .iter()
                .all(|&(ino, version)| version_of(ino) == Some(version))
    }
}

#[derive(Default)]
pub struct KeptPages {
    inner: Mutex<Kept>,
}

/// Pages by directory and whether they carry attributes.
#[derive(Default)]
struct Kept {
    bytes: usize,
    pages: HashMap<(u64, bool), KeptPage>,
}

impl KeptPages {
    /// Directory `dir`'s page with or without attributes, if one is kept that still holds
    /// (`version_of`: an inode's version now).
    pub fn get(
        &self,
        dir: u64,
        with_attrs: bool,
        version_of: impl Fn(u64) -> Option<u32>,
    ) -> Option<KeptPage> {
        let kept = self.inner.lock().pages.get(&(dir, with_attrs)).cloned()?;
        kept.holds(dir, version_of).then_some(kept)
    }

    /// Keeps `page` (replacing what was kept of the directory).
    pub fn keep(&self, dir: u64, with_attrs: bool, page: KeptPage) {
        let mut kept = self.inner.lock();
        let size = page.bytes();
        if kept.bytes + size > MAX_KEPT_BYTES {
            kept.pages.clear();
            kept.bytes = 0;
        }
        if let Some(old) = kept.pages.insert((dir, with_attrs), page) {
            kept.bytes -= old.bytes();
        }
        kept.bytes += size;
        debug_assert!(kept.bytes <= MAX_KEPT_BYTES);
    }
}

/// The subdirectories among `entries` whose attributes came with them (the caller may
/// search their parent, so its walk to them would pass there).
pub fn subdirectories(entries: &[DirEntryWire]) -> Vec<Vec<u8>> {
    entries
        .iter()
        .filter(|entry| {
            entry.kind == libc::DT_DIR
                && entry.attr.is_some()
                && !matches!(&entry.name[..], b"." | b"..")
        })
        .map(|entry| entry.name.to_vec())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(bytes: usize) -> KeptPage {
        KeptPage {
            page: Arc::from(vec![7u8; bytes]),
            count: 1,
            dir_version: 3,
            versions: Arc::from(vec![(8, 1)]),
            subdirs: Arc::from(vec![b"sub".to_vec()]),
        }
    }

    #[test]
    fn a_page_serves_while_its_versions_stay_and_the_bytes_kept_are_bounded() {
        let pages = KeptPages::default();
        let at = |dir: u32, entry: u32| move |ino: u64| Some(if ino == 5 { dir } else { entry });
        pages.keep(5, true, page(100));
        assert!(pages.get(5, true, at(3, 1)).is_some());
        assert!(
            pages.get(5, false, at(3, 1)).is_none(),
            "without attributes: another page"
        );
        assert!(
            pages.get(5, true, at(4, 1)).is_none(),
            "its entries changed"
        );
        assert!(
            pages.get(5, true, at(3, 2)).is_none(),
            "an entry's inode changed"
        );
        assert!(pages.get(5, true, |_| None).is_none(), "no versions known");
        for dir in 0..(MAX_KEPT_BYTES / 1000 + 2) as u64 {
            pages.keep(100 + dir, false, page(1000));
        }
        assert!(pages.inner.lock().bytes <= MAX_KEPT_BYTES);
    }
}
