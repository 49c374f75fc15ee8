//! Directory offsets that stay valid across opens and changes, so the kernel may cache
//! listings (no OPENDIR: the kernel then caches every directory it reads, FOPEN_CACHE_DIR).
//!
//! A cached listing is served by the kernel alone; if its pages are evicted mid-stream, the
//! kernel resumes with a plain READDIR at the offset of the last entry it returned, an
//! offset from an earlier listing, perhaps of a name removed since. So an offset must name
//! a position on its own, as ext4's and XFS's hash cookies do: here it is a hash of the
//! name. Entries are stored in name order, so "resume after this name" is well defined even
//! for a removed name; what is needed is the name behind an offset. It is found in a
//! bounded memory of recently listed and removed names, else by scanning the directory
//! for a live name with that hash; an offset found in neither (a name removed long ago,
//! listed by a cache that outlived our memory of it) restarts the listing, so entries may
//! repeat but none is skipped.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Offsets 1 and 2 are "." and ".."; every entry's offset is above.
pub const DOTDOT_OFFSET: u64 = 2;
/// Names remembered per generation; two generations are kept (about 64k names, a few MiB).
const REMEMBERED_PER_GENERATION: usize = 32 * 1024;

/// The offset of the entry `name`: a hash of it, above the dots and below 2^63 (the
/// kernel's directory positions are signed). Stable for the life of the daemon, which is
/// as long as the kernel keeps a listing (a new daemon is a new mount).
pub fn offset_of(name: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    name.hash(&mut hasher);
    let span = i64::MAX as u64 - DOTDOT_OFFSET;
    DOTDOT_OFFSET + 1 + hasher.finish() % span
}

/// Where a listing continues.
#[derive(Debug, PartialEq, Eq)]
pub enum Resume {
    /// With the first entry (after "." and "..").
    Start,
    /// With the first entry after this name.
    After(Vec<u8>),
}

/// The names behind recently handed-out offsets and behind offsets of removed names.
#[derive(Default)]
pub struct DirOffsets {
    generations: Mutex<Generations>,
    /// Offsets resolved by scanning the directory, and offsets not found at all.
    pub(crate) scans: AtomicU64,
    pub(crate) lost: AtomicU64,
}

#[derive(Default)]
struct Generations {
    current: HashMap<(u64, u64), Box<[u8]>>,
    previous: HashMap<(u64, u64), Box<[u8]>>,
}

impl Generations {
    fn insert(&mut self, dir: u64, name: &[u8]) {
        if self.current.len() >= REMEMBERED_PER_GENERATION {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current
            .insert((dir, offset_of(name)), name.to_vec().into_boxed_slice());
        debug_assert!(self.current.len() <= REMEMBERED_PER_GENERATION);
    }

    fn get(&self, dir: u64, offset: u64) -> Option<&[u8]> {
        self.current
            .get(&(dir, offset))
            .or_else(|| self.previous.get(&(dir, offset)))
            .map(|name| &name[..])
    }
}

impl DirOffsets {
    /// Remembers the names of a reply (the kernel may resume after any of them) or a name
    /// removed from `dir` (a cached listing may still resume after it).
    pub fn remember<'a>(&self, dir: u64, names: impl IntoIterator<Item = &'a [u8]>) {
        let mut generations = self.generations.lock();
        for name in names {
            generations.insert(dir, name);
        }
    }

    /// Where a listing of `dir` continues after `offset`. `find_live` scans the directory
    /// for a name with the offset's hash (the slow path, for offsets we forgot).
    pub fn resume<E>(
        &self,
        dir: u64,
        offset: u64,
        find_live: impl FnOnce(u64) -> Result<Option<Vec<u8>>, E>,
    ) -> Result<Resume, E> {
        if offset <= DOTDOT_OFFSET {
            return Ok(Resume::Start);
        }
        if let Some(name) = self.generations.lock().get(dir, offset) {
            return Ok(Resume::After(name.to_vec()));
        }
        self.scans.fetch_add(1, Ordering::Relaxed);
        match find_live(offset)? {
            Some(name) => Ok(Resume::After(name)),
            None => {
                self.lost.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("directory {dir}: offset {offset} names nothing known; listing again from the start");
                Ok(Resume::Start)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_above_the_dots_and_below_two_to_the_63() {
        for name in [&b"a"[..], b"b", b"", &[0xff; 255]] {
            let offset = offset_of(name);
            assert!(offset > DOTDOT_OFFSET && offset < 1 << 63, "{offset}");
            assert_eq!(offset, offset_of(name), "stable");
        }
        assert_ne!(offset_of(b"a"), offset_of(b"b"));
    }

    #[test]
    fn remembered_names_resume_without_a_scan() {
        let offsets = DirOffsets::default();
        offsets.remember(7, [&b"x"[..], b"y"]);
        let never = |_| -> Result<Option<Vec<u8>>, ()> { panic!("scanned") };
        assert_eq!(
            offsets.resume(7, offset_of(b"y"), never),
            Ok(Resume::After(b"y".to_vec()))
        );
        assert_eq!(offsets.resume(7, 0, never), Ok(Resume::Start));
        assert_eq!(offsets.resume(7, DOTDOT_OFFSET, never), Ok(Resume::Start));
    }

    #[test]
    fn forgotten_offsets_are_scanned_for_and_unknown_ones_restart() {
        let offsets = DirOffsets::default();
        let found = offsets.resume(7, offset_of(b"z"), |offset| {
            Ok::<_, ()>((offset == offset_of(b"z")).then(|| b"z".to_vec()))
        });
        assert_eq!(found, Ok(Resume::After(b"z".to_vec())));
        let lost = offsets.resume(7, offset_of(b"gone"), |_| Ok::<_, ()>(None));
        assert_eq!(lost, Ok(Resume::Start));
        assert_eq!(offsets.scans.load(Ordering::Relaxed), 2);
        assert_eq!(offsets.lost.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn memory_is_bounded_to_two_generations() {
        let offsets = DirOffsets::default();
        for i in 0..(3 * REMEMBERED_PER_GENERATION) {
            offsets.remember(1, [format!("n{i}").as_bytes()]);
        }
        let generations = offsets.generations.lock();
        assert!(
            generations.current.len() + generations.previous.len() <= 2 * REMEMBERED_PER_GENERATION
        );
        // The newest names are kept.
        let newest = format!("n{}", 3 * REMEMBERED_PER_GENERATION - 1);
        assert!(generations.get(1, offset_of(newest.as_bytes())).is_some());
    }
}
