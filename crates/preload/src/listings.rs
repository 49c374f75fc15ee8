//! Attributes that came with directory listings, kept to answer the `stat` that tools
//! make of each entry right after listing it (`du`, `find -ls`, `ls -l`, `cp -a`,
//! `tar c`) without a round trip: the kernel door answers those from its attribute cache.
//!
//! A listing holds wholly while the mount's change count (the daemon's state page) is the
//! one read before the daemon read the listing. When the count has moved (any change
//! through either door, by any process: `cp -a` moves it with every file it makes), its
//! names still hold while the directory's version stays, and an entry's attributes while
//! the entry's version stays too (`DirEntryWire::version`); else it is dropped at its next
//! use. The daemon sends attributes only to a caller who may search the directory (what
//! `fstatat` of an entry requires), and a listing kept under other credentials than the
//! caller's now is not used.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use foldhash::{HashMap, HashMapExt};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

use shoal_fastpath::state::MountState;
use shoal_fastpath::{At, Attr, DirEntryWire, NAME_MAX_BYTES};

use crate::fds::{Holds, Known, OpenFile};
use crate::{channel, mounts};

/// Listings kept at most, and entries over all of them: a tool lists one directory and
/// stats its entries, then moves on; a listing asked for by stats brings the directories
/// under and after it too (`calls::stat::prefetch`), each a listing kept.
const MAX_LISTINGS: usize = 4096;
const MAX_ENTRIES: usize = 64 * 1024;

struct Listing {
    mount: usize,
    /// Its place in `Listings::order` (the count of listings kept before it).
    kept_as: u64,
    changes: u64,
    /// The directory's version the daemon vouched for with the listing.
    dir_version: Option<u32>,
    who: channel::Who,
    /// Each entry's attributes and the version they hold for.
    attrs: Entries,
    /// Stats it answered: a listing of a new directory whose predecessor answered none
    /// although it had subdirectories turns attributes off (`want_attrs`).
    hits: AtomicUsize,
    /// Subdirectories among its entries: a tool that walks a tree stats those (fts
    /// checks each directory before it enters), and only those in a leaf directory.
    subdirs: usize,
    /// Where a listing asked for by `stat`s (`calls::stat::prefetch`) goes on when the
    /// directory has more than one page: the daemon's handle of the directory, kept open,
    /// and the last name listed. Names come in byte order, so a name past it is in a later
    /// page: the next one is asked for, not the name alone (`ls`-less stats through a
    /// directory of 20k files).
    more: Option<More>,
    /// A page from the directory's start to its end was kept (its first page said
    /// `done`): a name not in `attrs` is not in the directory while the listing holds.
    whole: bool,
    /// With `whole`, when every entry came with attributes: the inode `..` names. The
    /// listing then stands in for the directory's own (`whole_page`).
    dotdot: Option<u64>,
}

/// A listing's entries by name: the names back to back in one buffer and, past
/// `INDEXED_FROM` names, an index into them, so a page of a walk (thousands of them) costs a
/// few allocations, not one per name.
#[derive(Default)]
struct Entries {
    names: Vec<u8>,
    slots: Vec<Slot>,
    /// Positions in `slots`, by the hash of the name; empty while there are at most
    /// `INDEXED_FROM` of them.
    index: hashbrown::HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

/// Listings of at most this many names are searched name by name, without an index: most
/// directories of a tree hold a few dozen, and a walk keeps every one it opens (`find`
/// hashed and indexed 32k names to look up its 2000 subdirectories: 7% of its CPU).
const INDEXED_FROM: usize = 32;

struct Slot {
    name_at: u32,
    name_len: u32,
    attr: Attr,
    version: Option<u32>,
    /// A symlink's target, when the listing carried it.
    target: Option<Box<[u8]>>,
    /// The inode holds no xattr (`DirEntryWire::no_xattrs`).
    no_xattrs: bool,
}

impl Entries {
    fn with_capacity(entries: usize) -> Entries {
        Entries {
            slots: Vec::with_capacity(entries),
            ..Entries::default()
        }
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    fn name(&self, slot: &Slot) -> &[u8] {
        let at = slot.name_at as usize;
        &self.names[at..at + slot.name_len as usize]
    }

    fn indexed(&self) -> bool {
        self.slots.len() > INDEXED_FROM
    }

    fn position(&self, name: &[u8]) -> Option<usize> {
        if !self.indexed() {
            return self.slots.iter().position(|slot| self.name(slot) == name);
        }
        let hash = self.hasher.hash_one(name);
        self.index
            .find(hash, |&i| self.name(&self.slots[i as usize]) == name)
            .map(|&i| i as usize)
    }

    fn get(&self, name: &[u8]) -> Option<&Slot> {
        Some(&self.slots[self.position(name)?])
    }

    /// Keeps what `entry` says of its name (its attributes, a symlink's target, whether it
    /// holds xattrs); whether the name is new here.
    #[cfg(test)]
    fn insert(&mut self, entry: &DirEntryWire, attr: Attr) -> bool {
        let target = entry.target.as_deref().map(Box::from);
        self.insert_parts(&entry.name, attr, entry.version, target, entry.no_xattrs)
    }

    /// Keeps every entry of `other` (a further page of the same directory); how many of
    /// its names are new here.
    fn absorb(&mut self, other: Entries) -> usize {
        self.reserve(other.len(), other.names.len());
        let mut added = 0;
        for slot in other.slots {
            let at = slot.name_at as usize;
            let name = &other.names[at..at + slot.name_len as usize];
            let (attr, version, target) = (slot.attr, slot.version, slot.target);
            added += usize::from(self.insert_parts(name, attr, version, target, slot.no_xattrs));
        }
        added
    }

    fn insert_parts(
        &mut self,
        name: &[u8],
        attr: Attr,
        version: Option<u32>,
        target: Option<Box<[u8]>>,
        no_xattrs: bool,
    ) -> bool {
        if let Some(at) = self.position(name) {
            let slot = &mut self.slots[at];
            (slot.attr, slot.version, slot.target) = (attr, version, target);
            slot.no_xattrs = no_xattrs;
            return false;
        }
        let Some(position) = self.append(name, attr, version, target, no_xattrs) else {
            return false;
        };
        if self.slots.len() == INDEXED_FROM + 1 {
            self.build_index();
        } else if self.indexed() {
            let hash = self.hasher.hash_one(name);
            let (hasher, names, slots) = (&self.hasher, &self.names, &self.slots);
            self.index.insert_unique(hash, position, |&i| {
                rehash(hasher, names, &slots[i as usize])
            });
        }
        true
    }

    /// Adds a slot for `name` after the others, unindexed; its position.
    fn append(
        &mut self,
        name: &[u8],
        attr: Attr,
        version: Option<u32>,
        target: Option<Box<[u8]>>,
        no_xattrs: bool,
    ) -> Option<u32> {
        // A listing holds at most MAX_ENTRIES names of at most NAME_MAX bytes: far below
        // what u32 positions reach.
        let (Ok(name_at), Ok(name_len), Ok(position)) = (
            u32::try_from(self.names.len()),
            u32::try_from(name.len()),
            u32::try_from(self.slots.len()),
        ) else {
            return None;
        };
        self.names.extend_from_slice(name);
        self.slots.push(Slot {
            name_at,
            name_len,
            attr,
            version,
            target,
            no_xattrs,
        });
        Some(position)
    }

    /// An empty `Entries` filled with every entry of `page` that carries attributes, in
    /// its order. A page lists each name of its directory once, so none is looked for
    /// first, and the index is built once, at the end: a walk keeps thousands of entries
    /// a reply, each looked for and indexed in turn before (0.6 µs an entry of the reply).
    fn of_page(page: &[DirEntryWire]) -> Entries {
        let mut entries = Entries::with_capacity(page.len());
        entries
            .names
            .reserve(page.iter().map(|entry| entry.name.len()).sum());
        for entry in page {
            if let Some(attr) = entry.attr {
                let target = entry.target.as_deref().map(Box::from);
                entries.append(&entry.name, attr, entry.version, target, entry.no_xattrs);
            }
        }
        if entries.indexed() {
            entries.build_index();
        }
        entries
    }

    /// Indexes every name: the listing has just grown past `INDEXED_FROM`.
    fn build_index(&mut self) {
        debug_assert!(self.index.is_empty());
        let (hasher, names, slots) = (&self.hasher, &self.names, &self.slots);
        self.index.reserve(slots.len().max(slots.capacity()), |&i| {
            rehash(hasher, names, &slots[i as usize])
        });
        for (position, slot) in (0u32..).zip(slots) {
            self.index
                .insert_unique(rehash(hasher, names, slot), position, |&i| {
                    rehash(hasher, names, &slots[i as usize])
                });
        }
    }

    /// Room for `more` entries whose names take `name_bytes`.
    fn reserve(&mut self, more: usize, name_bytes: usize) {
        self.slots.reserve(more);
        self.names.reserve(name_bytes);
        if self.indexed() {
            let (hasher, names, slots) = (&self.hasher, &self.names, &self.slots);
            self.index
                .reserve(more, |&i| rehash(hasher, names, &slots[i as usize]));
        }
    }
}

/// The hash of `slot`'s name, for the index's growth.
fn rehash(hasher: &foldhash::fast::RandomState, names: &[u8], slot: &Slot) -> u64 {
    let at = slot.name_at as usize;
    hasher.hash_one(&names[at..at + slot.name_len as usize])
}

/// A directory handle to go on listing from, after `after`.
pub struct More {
    pub handle: u64,
    pub after: Vec<u8>,
}

/// Whether listings ask for attributes, as the kernel's READDIRPLUS_AUTO decides: yes until
/// a listing with subdirectories answers no stat (`rm -rf` reads names and types only, and
/// the daemon's inode reads for it cost a cold walk 1.7x), then no until a stat by name in
/// a directory listed without them (`du`, `ls -l`, `cp -a`) asks again. A leaf directory's
/// listing does not count: `find` stats only the subdirectories it enters, and turning
/// attributes off at every leaf sent those stats to the daemon at every other directory.
static WANT_ATTRS: AtomicBool = AtomicBool::new(true);

pub fn want_attrs() -> bool {
    WANT_ATTRS.load(Ordering::Relaxed)
}

struct Listings {
    /// By mount and directory; `order` has them oldest first (the first to go), and `last`
    /// is the one kept last.
    by_dir: Option<HashMap<(usize, u64), Listing>>,
    /// Each listing as it was kept (`Listing::kept_as`); a place whose listing was dropped
    /// or kept again since costs nothing to pass. Removing a directory's old place when
    /// it was kept again scanned the whole queue: with a thousand listings, that was 16%
    /// of `git status`'s CPU, whose search for untracked files lists again each directory
    /// its stats had listed.
    order: VecDeque<((usize, u64), u64)>,
    kept: u64,
    last: Option<(usize, u64)>,
    entries: usize,
    /// Directories a prefetch reached by path, by mount, base and path; oldest first in
    /// `reached_order`.
    /// Keyed by mount and base, then by path (looked up by a borrowed path: a stat by path
    /// allocates nothing).
    reached: Option<HashMap<(usize, u64), ReachedPaths>>,
    reached_order: VecDeque<ReachedKey>,
}

type ReachedKey = (usize, u64, Box<[u8]>);

/// The directories paths from one base reached, by path.
type ReachedPaths = HashMap<Box<[u8]>, Reached>;

/// A directory that `path` from directory `base` named when the change count was
/// `changes`: it names the same one while the count stays (a rename anywhere moves it), or
/// while the walk's witness holds (see `Reply::Exists`).
struct Reached {
    dir: u64,
    changes: u64,
    witness: Option<Vec<(u64, u32)>>,
    who: channel::Who,
}

/// A `stat` no listing answered: the directory (as base inode and path) and the name.
struct Miss {
    mount: usize,
    base: u64,
    path: Box<[u8]>,
    name: Box<[u8]>,
    changes: Option<u64>,
}

impl Miss {
    /// Whether `self` and `other` are stats of two names of one directory, nothing changed
    /// between them.
    fn another_name_in_same_directory(&self, other: &Miss) -> bool {
        self.changes.is_some()
            && (self.mount, self.base, &self.path, self.changes)
                == (other.mount, other.base, &other.path, other.changes)
            && self.name != other.name
    }
}

/// A path this thread's last `stat` by path found missing (ENOENT), from where, by whom,
/// following a last symlink or not, and the mount's change count read before it was asked.
struct Absent {
    mount: usize,
    base: u64,
    path: Box<[u8]>,
    follow: bool,
    changes: u64,
    who: channel::Who,
}

/// Directories reached by path kept at most.
const MAX_REACHED: usize = 4096;

static LISTINGS: RwLock<Listings> = RwLock::new(Listings::EMPTY);

thread_local! {
    /// The directory (as base inode and path) of this thread's last `stat` that no listing
    /// answered, and the change count then (per thread: `git status` stats from two).
    static LAST_MISS: std::cell::RefCell<Option<Miss>> = const { std::cell::RefCell::new(None) };
    /// This thread's last `stat` by path that the daemon answered ENOENT.
    static LAST_ABSENT: std::cell::RefCell<Option<Absent>> = const { std::cell::RefCell::new(None) };
    /// The directory this thread's last listing asked for by stats was of (`paid_off`).
    static LAST_PREFETCH: std::cell::Cell<Option<(usize, u64)>> = const { std::cell::Cell::new(None) };
}

/// Stats a listing asked for by stats answered, at least, for the next directory to be
/// listed at its first miss instead of its second.
const PAID_OFF_HITS: usize = 4;

/// The directory `path` from directory `base` names, as an open of it found it, while
/// nothing has changed on the mount since or nothing its walk read.
/// `who` is the caller (`channel::who`, read once per call: in a threaded process it
/// takes two system calls).
pub fn reached(mount: usize, base: u64, path: &[u8], who: channel::Who) -> Option<u64> {
    let path = without_trailing_slashes(path);
    let state = mounts::all().get(mount)?.state.get()?;
    let listings = read_listings()?;
    let found = listings.reached.as_ref()?.get(&(mount, base))?.get(path)?;
    let holds = state.changes() == found.changes
        || found
            .witness
            .as_ref()
            .is_some_and(|witness| crate::witnessed::holds(state, witness));
    (holds && found.who == who).then_some(found.dir)
}

/// Whether a listing of the whole of `dir`, read under change count `changes` by `who`, is
/// kept.
fn kept_whole(mount: usize, dir: u64, changes: u64, who: channel::Who) -> bool {
    read_listings().is_some_and(|listings| {
        listings
            .get(mount, dir)
            .is_some_and(|l| l.whole && l.changes == changes && l.who == who)
    })
}

/// Listings and paths that reached directories, made ready outside the lock and kept
/// under one take of it (`keep`). A listing asked for by stats brings up to
/// `calls::stat::PREFETCH_BELOW` directories, and taking the lock twice for each (a
/// listing, a path) while `git status`'s 20 threads looked up theirs made a few hundred
/// takes per status fail on either side: stats that went to the daemon, listings it sent
/// that were not kept.
#[derive(Default)]
pub struct Batch {
    listings: Vec<ReadyListing>,
    reached: Vec<(ReachedKey, Reached)>,
}

/// Whose listing a page is: one the program asked for (it then judges the one kept before
/// it: `WANT_ATTRS`), or one made ahead of the program's use (`calls::stat::prefetch`), which
/// says nothing yet of whether the program uses listings' attributes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    ByProgram,
    Ahead,
}

/// A listing made ready (`Batch::remember`), and whether it is the program's own.
struct ReadyListing {
    dir: u64,
    listing: Listing,
    judges_previous: bool,
}

impl Batch {
    /// `remember` (`Listed::ByProgram`) or a listing made ahead of the program's use,
    /// kept with the batch; nothing, if it would not hold or carries no attributes.
    pub fn remember(
        &mut self,
        mount: usize,
        dir: u64,
        (changes, dir_version): (u64, Option<u32>),
        (page, whole): (&[DirEntryWire], bool),
        listed: Listed,
    ) {
        let judges_previous = listed == Listed::ByProgram;
        let Some(state) = mounts::all().get(mount).and_then(|m| m.state.get()) else {
            return;
        };
        if holding(state, changes, dir, dir_version) == Holding::Not
            || page.iter().all(|entry| entry.attr.is_none())
        {
            return;
        }
        let who = channel::who();
        if kept_whole(mount, dir, changes, who) {
            // Listed whole under the same count already (`git status` lists each directory
            // for its stats, then opens it to search for untracked files): the page would
            // only replace every entry with itself.
            return;
        }
        let attrs = Entries::of_page(page);
        let subdirs = attrs
            .slots
            .iter()
            .filter(|slot| slot.attr.mode & libc::S_IFMT == libc::S_IFDIR)
            .count();
        let listing = Listing {
            mount,
            kept_as: 0,
            changes,
            dir_version,
            who,
            attrs,
            hits: AtomicUsize::new(0),
            more: None,
            subdirs,
            whole,
            dotdot: whole_with_attrs(page).then(|| dotdot_of(page)).flatten(),
        };
        self.listings.push(ReadyListing {
            dir,
            listing,
            judges_previous,
        });
    }

    /// Keeps that `path` from `base` named directory `dir` when the count was `changes`,
    /// and the witness of the walk that found it.
    pub fn reached(
        &mut self,
        mount: usize,
        base: u64,
        path: &[u8],
        dir: u64,
        changes: u64,
        witness: Option<Vec<(u64, u32)>>,
    ) {
        let path = without_trailing_slashes(path);
        let reached = Reached {
            dir,
            changes,
            witness,
            who: channel::who(),
        };
        self.reached.push(((mount, base, path.into()), reached));
    }

    /// Keeps everything in the batch (nothing, if the listings cannot be had).
    pub fn keep(self) {
        if self.listings.is_empty() && self.reached.is_empty() {
            return;
        }
        let Some(mut guard) = listings() else {
            return;
        };
        let listings = &mut *guard;
        for ready in self.listings {
            listings.put(ready);
        }
        listings.trim();
        for (key, reached) in self.reached {
            listings.put_reached(key, reached);
        }
    }
}

/// `path` without the slashes it ends with: a directory reached as `a/b/` is the one
/// reached as `a/b` (each is followed as a directory on the way to what lies in it).
pub fn without_trailing_slashes(path: &[u8]) -> &[u8] {
    let end = path
        .iter()
        .rposition(|&b| b != b'/')
        .map_or(0, |last| last + 1);
    &path[..end]
}

/// A `stat` of `name` in directory (`base`, `path`) that no listing answered: whether the
/// one before it missed another name in the same directory with nothing changed since, the
/// sign of a program going through a directory's entries by name (`git status`, in index
/// order) that a listing of it would answer. A name probed again is not: `unzip` stats
/// each name it is about to create four times (`stat`, `lstat`, twice), and a listing
/// asked for at the second answered the two after it and went stale at the create (10k
/// listings, with attributes, of directories growing to hundreds of entries, for 9k files).
pub fn second_miss_in(mount: usize, base: u64, path: &[u8], name: &[u8]) -> bool {
    let miss = Miss {
        mount,
        base,
        path: path.into(),
        name: name.into(),
        changes: changes_now(mount),
    };
    LAST_MISS
        .try_with(|last| {
            let Ok(mut last) = last.try_borrow_mut() else {
                return false;
            };
            let again = last
                .as_ref()
                .is_some_and(|last| miss.another_name_in_same_directory(last));
            *last = Some(miss);
            again
        })
        .unwrap_or(false)
}

/// Whether this thread's last `stat` that the daemon answered ENOENT was of the path `at`
/// names, by the same caller, and nothing has changed on the mount since it was asked: then
/// it is missing still. A path missing without following its last symlink is missing when
/// following it too; not the other way round (a dangling symlink).
pub fn known_absent(mount: usize, at: &At, who: channel::Who) -> bool {
    let Some(now) = changes_now(mount) else {
        return false;
    };
    LAST_ABSENT
        .try_with(|last| {
            last.try_borrow().ok().is_some_and(|last| {
                last.as_ref().is_some_and(|absent| {
                    (
                        absent.mount,
                        absent.base,
                        &*absent.path,
                        absent.changes,
                        absent.who,
                    ) == (mount, at.base, at.path.as_slice(), now, who)
                        && (absent.follow == at.follow || !absent.follow)
                })
            })
        })
        .unwrap_or(false)
}

/// The daemon said the path `at` names is missing, asked when the change count was
/// `changes` (read before the request, so a change made meanwhile moved it).
pub fn remember_absent(mount: usize, at: &At, changes: u64, who: channel::Who) {
    let absent = Absent {
        mount,
        base: at.base,
        path: at.path.as_slice().into(),
        follow: at.follow,
        changes,
        who,
    };
    let _ = LAST_ABSENT.try_with(|last| {
        if let Ok(mut last) = last.try_borrow_mut() {
            *last = Some(absent);
        }
    });
}

/// This thread asked for a listing of directory `dir` to answer its stats.
pub fn prefetched(mount: usize, dir: u64) {
    let _ = LAST_PREFETCH.try_with(|last| last.set(Some((mount, dir))));
}

/// Whether the last listing this thread asked for answered several stats: a program that
/// goes through directories' files in order (`git status`, in index order) gets its next
/// directory listed at the first miss there, not the second (a stat round trip saved per
/// directory). One that stats a file here and there gets one listing it did not need, and
/// then the second miss again.
pub fn last_prefetch_paid_off() -> bool {
    let Some((mount, dir)) = LAST_PREFETCH.try_with(std::cell::Cell::get).ok().flatten() else {
        return false;
    };
    read_listings().is_some_and(|listings| {
        listings
            .get(mount, dir)
            .is_some_and(|l| l.hits.load(Ordering::Relaxed) >= PAID_OFF_HITS)
    })
}

/// The kept listings, to read (lookups, from any number of threads at once: `git status`
/// stats from 20) or to change. A thread that finds them taken tries again a few times,
/// letting the holder run (20 threads on 2 CPUs: the holder is often preempted), then does
/// without (a miss, or nothing kept). Never waiting for good also means a fork child whose
/// parent had another thread inside (the lock copied held) cannot hang here.
fn read_listings() -> Option<RwLockReadGuard<'static, Listings>> {
    counted_busy(crate::lock_tries::with_retries(|| {
        match LISTINGS.try_read() {
            Ok(guard) => Ok(guard),
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => Err(()),
        }
    }))
}

fn listings() -> Option<RwLockWriteGuard<'static, Listings>> {
    counted_busy(crate::lock_tries::with_retries(|| {
        match LISTINGS.try_write() {
            Ok(guard) => Ok(guard),
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => Err(()),
        }
    }))
}

/// `guard`, counting its absence (`shoal run --stats`).
fn counted_busy<G>(guard: Option<G>) -> Option<G> {
    if guard.is_none() {
        crate::stats::note_listings_busy();
    }
    guard
}

/// The mount's change count now; `None` when its daemon publishes none (an older one).
pub fn changes_now(mount: usize) -> Option<u64> {
    Some(mounts::all().get(mount)?.state.get()?.changes())
}

/// What the daemon last said of `file`, while it still holds. (`try_lock`, as for the
/// listings: a fork child whose parent had another thread inside must not hang here.)
pub fn known(file: &OpenFile) -> Option<Known> {
    let known = (*file.known.try_lock().ok()?)?;
    let state = mounts::all().get(file.mount)?.state.get()?;
    let still = match known.holds {
        Holds::WhileVersion(version) => state.version(file.ino) == version,
        Holds::WhileChanges(changes) => state.changes() == changes,
    };
    still.then_some(known)
}

/// The attributes the daemon last gave for `file`, while they still hold.
pub fn known_attr(file: &OpenFile) -> Option<Attr> {
    known(file).map(|known| known.attr)
}

/// Keeps what the daemon read of `file` after the version `version` of its inode slot.
pub fn remember_known(file: &OpenFile, version: Option<u32>, attr: Attr, no_xattrs: bool) {
    if let (Some(version), Ok(mut known)) = (version, file.known.try_lock()) {
        *known = Some(Known {
            holds: Holds::WhileVersion(version),
            attr,
            no_xattrs,
        });
    }
}

/// How much of a kept listing still holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holding {
    /// Nothing changed on the mount since it was read.
    Wholly,
    /// Its names (its directory's version stays), and each entry whose version stays.
    ByVersions,
    Not,
}

fn holding(state: &MountState, changes: u64, dir: u64, dir_version: Option<u32>) -> Holding {
    if state.changes() == changes {
        Holding::Wholly
    } else if dir_version == Some(state.version(dir)) {
        Holding::ByVersions
    } else {
        Holding::Not
    }
}

/// Keeps the attributes of a page of directory `dir`'s entries, listed when the mount's
/// change count was `changes` (and the directory's version `dir_version`).
/// `whole`: the page lists the directory from its start to its end.
pub fn remember(
    mount: usize,
    dir: u64,
    changes: u64,
    dir_version: Option<u32>,
    page: &[DirEntryWire],
    whole: bool,
) {
    let mut batch = Batch::default();
    batch.remember(
        mount,
        dir,
        (changes, dir_version),
        (page, whole),
        Listed::ByProgram,
    );
    batch.keep();
}

fn is_dot(entry: &DirEntryWire) -> bool {
    matches!(&entry.name[..], b"." | b"..")
}

/// Whether every entry of `page` but `.` and `..` came with its attributes.
fn whole_with_attrs(page: &[DirEntryWire]) -> bool {
    page.iter()
        .all(|entry| is_dot(entry) || entry.attr.is_some())
}

fn dotdot_of(page: &[DirEntryWire]) -> Option<u64> {
    page.iter()
        .find(|entry| &entry.name[..] == b"..")
        .map(|entry| entry.ino)
}

/// Entry `name` of directory `dir` as a listing that holds for it has it: its attributes,
/// the version they hold for, and whether it has no xattrs.
pub fn entry(
    mount: usize,
    dir: u64,
    name: &[u8],
    who: channel::Who,
) -> Option<(Attr, Option<u32>, bool)> {
    find(mount, dir, name, false, who, |slot| {
        (slot.attr, slot.version, slot.no_xattrs)
    })
    .ok()
}

/// The whole listing of directory `dir` as a page of its own listing would give it (`.`
/// and `..`, then its names in the daemon's order), from a listing kept under `who` whose
/// names still hold: what `opendir` of it would list (`calls::open::open_listed`).
pub fn whole_page(mount: usize, dir: u64, who: channel::Who) -> Option<Vec<DirEntryWire>> {
    let listings = read_listings()?;
    let listing = listings.get(mount, dir)?;
    let state = mounts::all().get(mount)?.state.get()?;
    let dotdot = listing
        .dotdot
        .filter(|_| listing.whole && listing.who == who)?;
    if holding(state, listing.changes, dir, listing.dir_version) == Holding::Not {
        return None;
    }
    let names = &listing.attrs;
    let mut page = Vec::with_capacity(names.len() + 2);
    page.push(DirEntryWire::dot(b".", dir));
    page.push(DirEntryWire::dot(b"..", dotdot));
    page.extend(names.slots.iter().map(|slot| DirEntryWire {
        ino: slot.attr.ino,
        kind: ((slot.attr.mode & libc::S_IFMT) >> 12) as u8,
        name: names.name(slot).into(),
        attr: None,
        version: None,
        target: None,
        no_xattrs: false,
    }));
    Some(page)
}

/// What the kept listings say of `name` in directory `dir`.
pub enum Looked {
    Found(Attr),
    /// A listing of `dir` holds, but cannot answer: the name is not in it (not in its
    /// first page, or not there at all), or it is a symlink the caller follows. Listing
    /// the directory again would not help.
    Unanswered,
    /// A listing of the whole of `dir` holds, and the name is not in it: the directory
    /// has no such entry (and the caller may search it: the listing has attributes).
    Absent,
    /// No listing of `dir` holds.
    Unlisted,
}

/// The attributes of `name` in directory `dir`, if a listing that still holds has them.
/// `follow`: the caller follows a final symlink, which a listing cannot answer.
/// `who`: the caller, as for `reached`.
pub fn lookup(mount: usize, dir: u64, name: &[u8], follow: bool, who: channel::Who) -> Looked {
    match find(mount, dir, name, follow, who, |slot| slot.attr) {
        Ok(attr) => Looked::Found(attr),
        Err(looked) => looked,
    }
}

/// The target of symlink `name` in directory `dir`, as `lookup` finds the entry: `Ok(None)`
/// when the entry is not a symlink (`readlink` is EINVAL), `Err` with what `lookup` says
/// when it finds no entry (or one whose listing did not carry its target).
pub fn link_target(
    mount: usize,
    dir: u64,
    name: &[u8],
    who: channel::Who,
) -> Result<Option<Box<[u8]>>, Looked> {
    match find(mount, dir, name, false, who, |slot| {
        (slot.attr.mode & libc::S_IFMT == libc::S_IFLNK).then(|| slot.target.clone())
    }) {
        Ok(Some(None)) => Err(Looked::Unanswered),
        Ok(found) => Ok(found.flatten()),
        Err(looked) => Err(looked),
    }
}

/// Whether regular file or directory `name` in directory `dir` holds no xattr, as a
/// listing that holds for the entry says (following a last symlink: never).
pub fn xattrs_absent(mount: usize, dir: u64, name: &[u8], follow: bool, who: channel::Who) -> bool {
    find(mount, dir, name, follow, who, |slot| {
        let kind = slot.attr.mode & libc::S_IFMT;
        slot.no_xattrs && (kind == libc::S_IFREG || kind == libc::S_IFDIR)
    })
    .unwrap_or(false)
}

/// What `answer` makes of entry `name` of directory `dir` in a listing that holds for it
/// (the `Looked` that says why not, else).
fn find<R>(
    mount: usize,
    dir: u64,
    name: &[u8],
    follow: bool,
    who: channel::Who,
    answer: impl FnOnce(&Slot) -> R,
) -> Result<R, Looked> {
    let Some(listings) = read_listings() else {
        return Err(Looked::Unlisted);
    };
    let Some(listing) = listings.get(mount, dir) else {
        // A stat by name in a directory listed without attributes: ask for them again.
        WANT_ATTRS.store(true, Ordering::Relaxed);
        return Err(Looked::Unlisted);
    };
    let Some(state) = mounts::all().get(mount).and_then(|m| m.state.get()) else {
        return Err(Looked::Unlisted);
    };
    let holds = holding(state, listing.changes, dir, listing.dir_version);
    if holds == Holding::Not {
        // Replaced when the directory is listed again, or aged out (`trim`).
        return Err(Looked::Unlisted);
    }
    if listing.who != who {
        return Err(Looked::Unlisted);
    }
    match listing.attrs.get(name) {
        Some(slot)
            if !(follow && slot.attr.mode & libc::S_IFMT == libc::S_IFLNK)
                && (holds == Holding::Wholly
                    || slot.version == Some(state.version(slot.attr.ino))) =>
        {
            listing.hits.fetch_add(1, Ordering::Relaxed);
            Ok(answer(slot))
        }
        // A name too long is ENAMETOOLONG, which the daemon says.
        None if listing.whole && name.len() <= NAME_MAX_BYTES => Err(Looked::Absent),
        _ => Err(Looked::Unanswered),
    }
}

/// Takes the way on of directory `dir`'s listing if `name` lies past what it lists (see
/// `Listing::more`); the caller lists the next page and gives it back (`keep_more`).
pub fn take_more(mount: usize, dir: u64, name: &[u8]) -> Option<More> {
    let mut listings = listings()?;
    let listing = listings.by_dir.as_mut()?.get_mut(&(mount, dir))?;
    if listing.more.as_ref()?.after.as_slice() >= name {
        return None;
    }
    listing.more.take()
}

/// Gives back (or records) the way on of directory `dir`'s listing; closes the handle
/// when the listing is gone or complete (`more` is `None` then).
pub fn keep_more(mount: usize, dir: u64, handle: u64, more: Option<More>) {
    let kept = listings().and_then(|mut listings| {
        let listing = listings
            .by_dir
            .as_mut()?
            .get_mut(&(mount, dir))
            .filter(|l| l.more.is_none())?;
        listing.more = Some(more?);
        Some(())
    });
    if kept.is_none() {
        channel::close(mount, handle);
    }
}

impl Listings {
    const EMPTY: Listings = Listings {
        by_dir: None,
        order: VecDeque::new(),
        kept: 0,
        last: None,
        entries: 0,
        reached: None,
        reached_order: VecDeque::new(),
    };

    fn get(&self, mount: usize, dir: u64) -> Option<&Listing> {
        self.by_dir.as_ref()?.get(&(mount, dir))
    }

    /// Keeps a listing made ready: a further page of the one kept (same count, same
    /// caller) joins it, else it replaces whatever was kept of its directory.
    fn put(&mut self, ready: ReadyListing) {
        let ReadyListing {
            dir,
            mut listing,
            judges_previous,
        } = ready;
        let key = (listing.mount, dir);
        if let Some(kept) = self
            .by_dir
            .as_mut()
            .and_then(|map| map.get_mut(&key))
            .filter(|kept| kept.changes == listing.changes && kept.who == listing.who)
        {
            kept.whole |= listing.whole;
            kept.subdirs += listing.subdirs;
            self.entries += kept.attrs.absorb(listing.attrs);
            return;
        }
        self.drop_listing(key);
        let previous = self.last.and_then(|(mount, dir)| self.get(mount, dir));
        if judges_previous
            && previous.is_some_and(|previous| {
                previous.hits.load(Ordering::Relaxed) == 0 && previous.subdirs > 0
            })
        {
            WANT_ATTRS.store(false, Ordering::Relaxed);
        }
        self.entries += listing.attrs.len();
        listing.kept_as = self.kept;
        self.kept += 1;
        self.order.push_back((key, listing.kept_as));
        self.by_dir
            .get_or_insert_with(HashMap::new)
            .insert(key, listing);
        if judges_previous {
            self.last = Some(key);
        }
    }

    /// Keeps a path that reached a directory, the oldest going past `MAX_REACHED`.
    fn put_reached(&mut self, (mount, base, path): ReachedKey, reached: Reached) {
        let paths = self
            .reached
            .get_or_insert_with(HashMap::new)
            .entry((mount, base))
            .or_default();
        if paths.insert(path.clone(), reached).is_none() {
            self.reached_order.push_back((mount, base, path));
        }
        while self.reached_order.len() > MAX_REACHED {
            let (Some((mount, base, path)), Some(reached)) =
                (self.reached_order.pop_front(), self.reached.as_mut())
            else {
                break;
            };
            if let Some(paths) = reached.get_mut(&(mount, base)) {
                paths.remove(&path);
                if paths.is_empty() {
                    reached.remove(&(mount, base));
                }
            }
        }
    }

    /// Drops the listing of `key`; whether there was one.
    fn drop_listing(&mut self, key: (usize, u64)) -> bool {
        let Some(listing) = self.by_dir.as_mut().and_then(|map| map.remove(&key)) else {
            return false;
        };
        self.entries -= listing.attrs.len();
        if let Some(more) = listing.more {
            channel::close(listing.mount, more.handle);
        }
        true
    }

    /// Whether the listing kept at `place` in `order` is still there.
    fn lives(&self, &(key, kept_as): &((usize, u64), u64)) -> bool {
        self.by_dir
            .as_ref()
            .and_then(|map| map.get(&key))
            .is_some_and(|listing| listing.kept_as == kept_as)
    }

    /// Drops the oldest listing still kept; whether there was one.
    fn drop_oldest(&mut self) -> bool {
        while let Some(place) = self.order.pop_front() {
            if self.lives(&place) {
                return self.drop_listing(place.0);
            }
        }
        false
    }

    /// Oldest listings out until within the bounds.
    fn trim(&mut self) {
        while self.by_dir.as_ref().map_or(0, HashMap::len) > MAX_LISTINGS
            || (self.entries > MAX_ENTRIES && self.by_dir.as_ref().map_or(0, HashMap::len) > 1)
        {
            if !self.drop_oldest() {
                break;
            }
        }
        if self.entries > MAX_ENTRIES {
            // One listing over the bound alone: not kept at all.
            self.drop_oldest();
        }
        // `order` keeps a place per listing kept: bounded by what it could name.
        let live = self.by_dir.as_ref().map_or(0, HashMap::len);
        if self.order.len() > 4 * MAX_LISTINGS.max(live) {
            let mut order = std::mem::take(&mut self.order);
            order.retain(|place| self.lives(place));
            self.order = order;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ino: u64) -> Attr {
        Attr {
            ino,
            ..Attr::default()
        }
    }

    #[test]
    fn entries_find_each_name_and_a_name_kept_again_replaces_its_attributes() {
        let entry = |name: &[u8], version: Option<u32>, target: Option<&[u8]>| DirEntryWire {
            ino: 0,
            kind: 0,
            name: name.into(),
            attr: None,
            version,
            target: target.map(<[u8]>::to_vec),
            no_xattrs: target.is_none(),
        };
        let mut entries = Entries::with_capacity(4);
        let names: Vec<Vec<u8>> = (0..5000u32)
            .map(|i| format!("name-{i}").into_bytes())
            .collect();
        for (i, name) in names.iter().enumerate() {
            let target = (i % 3 == 0).then_some(&name[..]);
            let kept = entry(name, Some(i as u32), target);
            assert!(entries.insert(&kept, attr(i as u64)));
        }
        assert_eq!(entries.len(), names.len());
        for (i, name) in names.iter().enumerate() {
            let slot = entries.get(name).expect("kept");
            assert_eq!((slot.attr.ino, slot.version), (i as u64, Some(i as u32)));
            assert_eq!(slot.target.as_deref(), (i % 3 == 0).then_some(&name[..]));
            assert_eq!(slot.no_xattrs, i % 3 != 0);
        }
        assert!(entries.get(b"name-").is_none());
        assert!(entries.get(b"name-50000").is_none());
        let again = entry(b"name-6", None, None);
        assert!(!entries.insert(&again, attr(99)));
        assert_eq!(entries.len(), names.len());
        let slot = entries.get(b"name-6").expect("kept");
        assert_eq!((slot.attr.ino, slot.version), (99, None));
        assert_eq!(slot.target, None, "a target kept again goes with its entry");
        assert!(slot.no_xattrs);
    }

    fn ready(dir: u64, changes: u64, names: &[&str]) -> ReadyListing {
        let mut attrs = Entries::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            attrs.insert_parts(name.as_bytes(), attr(i as u64), None, None, false);
        }
        ReadyListing {
            dir,
            judges_previous: false,
            listing: Listing {
                mount: 0,
                kept_as: 0,
                changes,
                dir_version: None,
                who: channel::who(),
                attrs,
                hits: AtomicUsize::new(0),
                more: None,
                subdirs: 0,
                whole: false,
                dotdot: None,
            },
        }
    }

    #[test]
    fn a_directory_listed_again_goes_last_and_its_old_place_drops_nothing() {
        let mut listings = Listings::EMPTY;
        let max = MAX_LISTINGS as u64;
        for dir in 0..max {
            listings.put(ready(dir, 1, &["a"]));
            listings.trim();
        }
        // Listed again after a change: it replaces the listing kept, and is the newest.
        listings.put(ready(0, 2, &["a", "b"]));
        listings.trim();
        assert_eq!(listings.entries, MAX_LISTINGS + 1);
        listings.put(ready(max, 2, &["a"]));
        listings.trim();
        assert_eq!(listings.get(0, 0).map(|l| l.attrs.len()), Some(2));
        assert!(listings.get(0, 1).is_none(), "the oldest still kept went");
        assert!(listings.get(0, 2).is_some());
        // A further page of the listing kept (same count, same caller) joins it.
        listings.put(ready(0, 2, &["b", "c"]));
        assert_eq!(listings.get(0, 0).map(|l| l.attrs.len()), Some(3));
        let kept: usize = listings
            .by_dir
            .as_ref()
            .map_or(0, |map| map.values().map(|l| l.attrs.len()).sum());
        assert_eq!(listings.entries, kept);
        // One directory listed again and again leaves a bounded queue.
        for changes in 3..(5 * max) {
            listings.put(ready(7, changes, &["a"]));
            listings.trim();
        }
        assert!(listings.order.len() <= 4 * MAX_LISTINGS + 1);
        assert_eq!(
            listings.by_dir.as_ref().map(HashMap::len),
            Some(MAX_LISTINGS)
        );
    }

    #[test]
    fn a_listing_is_indexed_only_past_a_few_dozen_names_and_found_either_way() {
        for count in [0, 1, INDEXED_FROM, INDEXED_FROM + 1, INDEXED_FROM + 2, 300] {
            let mut entries = Entries::with_capacity(count);
            let names: Vec<Vec<u8>> = (0..count).map(|i| format!("n{i}").into_bytes()).collect();
            entries.reserve(count, names.iter().map(Vec::len).sum());
            for (i, name) in names.iter().enumerate() {
                let kept = DirEntryWire {
                    ino: 0,
                    kind: 0,
                    name: name[..].into(),
                    attr: None,
                    version: None,
                    target: None,
                    no_xattrs: false,
                };
                assert!(entries.insert(&kept, attr(i as u64)));
                // Every name kept so far is found, whichever side of the bound it stands.
                for (j, earlier) in names[..=i].iter().enumerate() {
                    assert_eq!(
                        entries.get(earlier).map(|slot| slot.attr.ino),
                        Some(j as u64)
                    );
                }
            }
            assert_eq!(entries.index.is_empty(), count <= INDEXED_FROM, "{count}");
            assert_eq!(
                entries.index.len(),
                if count > INDEXED_FROM { count } else { 0 }
            );
            assert!(entries.get(b"absent").is_none());
        }
    }

    #[test]
    fn a_page_kept_whole_finds_each_name_and_takes_more_after() {
        for count in [0, 1, INDEXED_FROM, INDEXED_FROM + 1, 300] {
            let page: Vec<DirEntryWire> = (0..count + 2)
                .map(|i| DirEntryWire {
                    ino: i as u64,
                    kind: 0,
                    name: format!("n{i}").as_bytes().into(),
                    // The last two carry no attributes: not kept.
                    attr: (i < count).then(|| attr(i as u64)),
                    version: Some(i as u32),
                    target: None,
                    no_xattrs: false,
                })
                .collect();
            let mut entries = Entries::of_page(&page);
            assert_eq!(entries.len(), count);
            assert_eq!(entries.index.is_empty(), count <= INDEXED_FROM, "{count}");
            for i in 0..count {
                let slot = entries.get(format!("n{i}").as_bytes()).expect("kept");
                assert_eq!((slot.attr.ino, slot.version), (i as u64, Some(i as u32)));
            }
            assert!(entries.get(format!("n{count}").as_bytes()).is_none());
            assert!(entries.insert_parts(b"later", attr(7), None, None, false));
            assert_eq!(entries.get(b"later").map(|slot| slot.attr.ino), Some(7));
            assert_eq!(
                entries.get(b"n0").map(|slot| slot.attr.ino),
                (count > 0).then_some(0)
            );
        }
    }
}
