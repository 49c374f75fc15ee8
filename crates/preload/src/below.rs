//! Directories the daemon opened and listed ahead of an `opendir` (`Reply::OpenedDir::below`,
//! the daemon's `fastpath-server/src/below.rs`), kept to answer the program's own
//! `opendir` of each without a round trip: `find`, `du`, `tar c` and `git status` open
//! every directory of a tree, and each open was a round trip that the kernel door answers
//! from its dentry cache.
//!
//! A directory kept is entry `name` of directory `parent`, opened for the caller (a
//! handle the process holds in the daemon) and listed when the mount's change count was
//! `changes`. While the count stays and the caller's credentials are the ones it was
//! opened for, an `opendir` of that entry would find the same directory, pass the same
//! permission checks and list the same entries: the open is answered here. Once the count
//! moves (any change through either door) everything kept is dropped and its handles
//! closed.
//!
//! They are asked for only while the process walks a tree that nothing changes (its
//! `opendir` is of a directory in one it holds open, and nothing changed on the mount since
//! its last `opendir` was answered: `to_ask`). A copy
//! (`cp -a`) changes the mount between its opens, so it would never use them. Directories
//! the program closes are kept too (`recycle`), for the `..` a walk opens to go back up,
//! and for a second open by the same name: `rm -r` opens each directory twice, once to
//! see whether it is empty and once to walk it (2000 opens of the bench tree's directories
//! a round trip each, and each made the daemon open the next directories ahead for a
//! walk that, removing, would never use them).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use shoal_fastpath::{DirBelow, DirEntryWire, Opened, Walk};

use crate::fds::{Holds, OpenFile};
use crate::{channel, listings, process_state};

/// Directories an `opendir` asks to have opened ahead.
const ASKED: u32 = 256;
/// Directories, and their entries, kept at most (the oldest go first, closed).
const MAX_DIRS: usize = 1024;
const MAX_ENTRIES: usize = 32 * 1024;

/// A directory open in the daemon for this process that the program has not opened (yet,
/// or again).
pub struct Kept {
    mount: usize,
    /// The change count under which it was opened: it holds while the count stays.
    changes: u64,
    who: channel::Who,
    /// Entry `name` of directory `parent` (`name` empty when only the parent is known).
    pub parent: Option<u64>,
    pub name: Vec<u8>,
    pub opened: Opened,
    /// Its first page: the one the daemon sent when it opened it ahead, or the listing a
    /// directory the program closed had read whole (else none: it is asked for again).
    pub page: Option<Page>,
    pub searchable: bool,
}

pub struct Page {
    pub entries: Vec<DirEntryWire>,
    pub done: bool,
    pub dir_version: Option<u32>,
}

impl Kept {
    fn entries(&self) -> usize {
        self.page.as_ref().map_or(0, |page| page.entries.len())
    }

    /// The change count it holds under.
    pub fn changes(&self) -> u64 {
        self.changes
    }
}

/// What is kept, all of one mount and one change count (anything else is dropped first).
struct Ahead {
    holds_for: Option<(usize, u64)>,
    /// Opened ahead, in the order the walk will open them.
    opened_ahead: VecDeque<Kept>,
    entries: usize,
    /// Closed by the program, newest last: a walk opens again only those on its way back up.
    recycled: VecDeque<Kept>,
}

static AHEAD: Mutex<Ahead> = Mutex::new(Ahead {
    holds_for: None,
    opened_ahead: VecDeque::new(),
    entries: 0,
    recycled: VecDeque::new(),
});

/// Directories closed by the program kept at most. A walk goes back up through every
/// directory above it (`find` opens `..`), and the daemon opens the directories it will
/// visit next under those it holds: when a subtree of more than this many directories
/// pushed its ancestors out, each one's `..` was a round trip and the daemon could open
/// nothing ahead under it (`find` of the bench tree: 17 round trips for `..` and 9 walks
/// started afresh with 64 kept).
const MAX_RECYCLED: usize = 1024;
/// The newest of them keep their listing too (for `rm -r`'s second open, which lists the
/// directory again): a bound on the entries kept for them.
const RECYCLED_WITH_PAGES: usize = 64;

/// Directories opened ahead left when the daemon is nudged (`channel::nudge`): the walk
/// will ask for more once it has opened these, a few microseconds each, which is about
/// what an idle CPU of the 2-core VM takes to wake.
const NUDGE_WHEN_LEFT: usize = 4;

/// The mount's change count when this process's last `opendir` was answered, plus one
/// (0: none yet).
static LAST_ANSWERED: AtomicU64 = AtomicU64::new(0);
/// Opens answered from directories kept, for `shoal run --stats`.
static OPENED: AtomicUsize = AtomicUsize::new(0);

/// What an `opendir` asks of the daemon beyond the open: whether it is a step of a walk
/// (`walking`: the directory is opened in one the process holds open) through a tree nothing
/// changes (nothing changed since its last `opendir` was answered), so the daemon may
/// answer the next step ahead, and then how many directories it asks to have opened ahead.
/// Every such walk asks. It used to ask only when the program spent 30 µs or more between
/// its opens (`find -ls`): on the Intel VM a quicker walk (`find`, `du`) found the daemon's
/// thread still spinning and each open answered ahead, and directories opened ahead saved
/// no time there; on an AMD EPYC VM, whose round trips cost more, they do: `find` of the
/// bench tree 1702 -> 66 `opendir` round trips, 94-103 -> 87-93 ms, `du -s` 89-102 ->
/// 87-88 ms (medians of 15-21 runs alternating the libraries on one mount, two sessions).
pub fn to_ask(mount: usize, walking: Walk) -> (Walk, u32) {
    let unchanged = listings::changes_now(mount)
        .is_some_and(|now| LAST_ANSWERED.load(Ordering::Relaxed) == now + 1);
    let walk = if unchanged { walking } else { Walk::No };
    (walk, if walk != Walk::No { ASKED } else { 0 })
}

/// An `opendir` on `mount` was answered when the count was `changes`; `below` came with it.
pub fn keep(mount: usize, changes: u64, below: Vec<DirBelow>) {
    LAST_ANSWERED.store(changes + 1, Ordering::Relaxed);
    if below.is_empty() {
        return;
    }
    let who = channel::who();
    let kept = below.into_iter().map(|dir| Kept {
        mount,
        changes,
        who,
        parent: Some(dir.parent),
        name: dir.name,
        searchable: dir.entries.iter().any(|entry| entry.attr.is_some()),
        opened: dir.opened,
        page: Some(Page {
            entries: dir.entries,
            done: dir.done,
            dir_version: dir.dir_version,
        }),
    });
    add(mount, changes, kept, Queue::Ahead);
}

/// Keeps directory `file`, which the program closed, open in the daemon while it holds
/// (nothing changed since it was opened): a walk that comes back up opens it again by
/// `..`. Whether it was kept (else the caller closes it).
pub fn recycle(file: &OpenFile) -> bool {
    // One opened from a kept listing without a handle has nothing to keep open.
    let (Some(origin), Some(handle)) = (file.origin.as_ref(), file.handle()) else {
        return false;
    };
    let Some(changes) = origin.changes else {
        return false;
    };
    if listings::changes_now(file.mount) != Some(changes) || process_state::in_vfork_child() {
        return false;
    }
    let Some(known) = listings::known(file) else {
        return false;
    };
    let Holds::WhileVersion(version) = known.holds else {
        return false;
    };
    let page = listing_to_keep(file, changes, version);
    let kept = Kept {
        mount: file.mount,
        changes,
        who: origin.who,
        parent: origin.parent,
        name: origin.name.clone(),
        opened: Opened {
            handle,
            attr: known.attr,
            created: false,
            version: Some(version),
            no_xattrs: known.no_xattrs,
        },
        page,
        searchable: origin.searchable,
    };
    add(file.mount, changes, std::iter::once(kept), Queue::Recycled)
}

/// A closed directory's listing, kept with it when it is the whole listing under the
/// count the directory holds under (or the page sent with its open, unread) and small:
/// the next open by its name (`rm -r`'s second) then lists it without a round trip.
fn listing_to_keep(file: &OpenFile, changes: u64, version: u32) -> Option<Page> {
    const MAX_KEPT_ENTRIES: usize = 256;
    let mut cursor = file.lock_cursor();
    let (entries, done) = match cursor.prefetched.take() {
        Some(sent) if sent.changes == changes => (sent.entries, sent.done),
        Some(_) => return None,
        None if cursor.whole == Some(changes) => (std::mem::take(&mut cursor.page), true),
        None => return None,
    };
    (entries.len() <= MAX_KEPT_ENTRIES).then_some(Page {
        entries,
        done,
        dir_version: Some(version),
    })
}

/// Where a directory kept goes: opened ahead (in the walk's order), or closed by the
/// program.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Queue {
    Ahead,
    Recycled,
}

fn add(mount: usize, changes: u64, kept: impl Iterator<Item = Kept>, queue: Queue) -> bool {
    let Some(mut ahead) = lock() else {
        for dir in kept {
            channel::close(mount, dir.opened.handle);
        }
        return false;
    };
    ahead.hold_for(mount, changes);
    for dir in kept {
        match queue {
            Queue::Ahead => {
                ahead.entries += dir.entries();
                ahead.opened_ahead.push_back(dir);
            }
            Queue::Recycled => {
                ahead.recycled.push_back(dir);
                let len = ahead.recycled.len();
                if let Some(older) = len
                    .checked_sub(RECYCLED_WITH_PAGES + 1)
                    .and_then(|at| ahead.recycled.get_mut(at))
                {
                    older.page = None;
                }
            }
        }
    }
    ahead.trim();
    true
}

/// The directory kept for entry `name` of directory `parent`, taken (its handle is the
/// caller's now), while it still holds for the caller `who`.
pub fn take(mount: usize, parent: u64, name: &[u8], who: channel::Who) -> Option<Kept> {
    take_where(mount, who, |kept| {
        kept.parent == Some(parent) && kept.name == name
    })
}

/// Directory `dir`, kept, taken (as `take`): `..` of a subdirectory of it.
pub fn take_directory(mount: usize, dir: u64, who: channel::Who) -> Option<Kept> {
    take_where(mount, who, |kept| kept.opened.attr.ino == dir)
}

fn take_where(mount: usize, who: channel::Who, wanted: impl Fn(&Kept) -> bool) -> Option<Kept> {
    let now = listings::changes_now(mount)?;
    let mut ahead = lock()?;
    if ahead.holds_for != Some((mount, now)) {
        ahead.hold_for(mount, now);
        return None;
    }
    let wanted = |kept: &Kept| kept.who == who && wanted(kept);
    // The walk opens what was opened ahead in order: the one it wants is at the front.
    if let Some(index) = ahead.opened_ahead.iter().position(wanted) {
        let kept = ahead.opened_ahead.remove(index)?;
        ahead.entries -= kept.entries();
        if ahead.opened_ahead.len() == NUDGE_WHEN_LEFT {
            channel::nudge(mount);
        }
        OPENED.fetch_add(1, Ordering::Relaxed);
        return Some(kept);
    }
    let index = ahead.recycled.iter().rposition(wanted)?;
    OPENED.fetch_add(1, Ordering::Relaxed);
    ahead.recycled.remove(index)
}

/// Opens answered from directories kept (`shoal run --stats`).
pub fn opened() -> usize {
    OPENED.load(Ordering::Relaxed)
}

/// In a fork child: what is kept is the parent's (its handles are the parent's in the
/// daemon), so it is forgotten, not closed.
pub fn forget_inherited() {
    if let Some(mut ahead) = lock() {
        ahead.opened_ahead.clear();
        ahead.recycled.clear();
        ahead.entries = 0;
        ahead.holds_for = None;
    }
    LAST_ANSWERED.store(0, Ordering::Relaxed);
    OPENED.store(0, Ordering::Relaxed);
}

/// Taken with a few tries and never waited for: a fork child whose parent had another
/// thread inside (the lock copied held) must not hang here.
fn lock() -> Option<MutexGuard<'static, Ahead>> {
    crate::lock_tries::with_retries(|| match AHEAD.try_lock() {
        Ok(guard) => Ok(guard),
        Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => Err(()),
    })
}

impl Ahead {
    /// Makes what is kept hold for `mount` at change count `changes`: anything kept under
    /// another count (or of another mount) is dropped and closed.
    fn hold_for(&mut self, mount: usize, changes: u64) {
        if self.holds_for == Some((mount, changes)) {
            return;
        }
        for kept in self.opened_ahead.drain(..).chain(self.recycled.drain(..)) {
            channel::close(kept.mount, kept.opened.handle);
        }
        self.entries = 0;
        self.holds_for = Some((mount, changes));
    }

    /// The oldest out (closed) until within the bounds.
    fn trim(&mut self) {
        while self.opened_ahead.len() > MAX_DIRS || self.entries > MAX_ENTRIES {
            let Some(kept) = self.opened_ahead.pop_front() else {
                break;
            };
            self.entries -= kept.entries();
            channel::close(kept.mount, kept.opened.handle);
        }
        while self.recycled.len() > MAX_RECYCLED {
            if let Some(kept) = self.recycled.pop_front() {
                channel::close(kept.mount, kept.opened.handle);
            }
        }
    }
}
