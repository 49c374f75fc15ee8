//! Telling the kernel that names changed behind its back (a whole tree removed by the
//! control socket's `rmtree`, or made by `import`), so it drops its cached dentries,
//! inodes and attributes.
//!
//! Dropping a name the kernel cached a big tree under is slow: the kernel evicts every
//! dentry and inode below it inside the notification (about 2.8 µs each, with a FORGET
//! each), holding the lock of the directory the name is in. So a removed tree's name is
//! only expired before `rmtree` answers (`FUSE_EXPIRE_ONLY`: the same cost whatever is
//! below it; the next lookup of the name asks us, gets ENOENT and drops the dentry), and
//! what the kernel cached below it is dropped afterwards by a thread of its own. A lookup
//! of the removed name made while that thread works pays for what it has not dropped yet.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Weak};

use fuser::{INodeNo, InitFlags, Notifier};
use shoal_engine::Engine;

use crate::ShoalFs;

/// Bound on the removed trees whose cached dentries wait for the background thread; past
/// it the caller drops them itself (slow, still right).
const PENDING_TREES: usize = 64;

/// A removed tree whose name the kernel may still hold dentries under.
struct RemovedName {
    parent: u64,
    name: Vec<u8>,
    /// The tree's root, whose names the thread drops (never the name `parent/name`
    /// itself: a directory made there since must be left alone, see `drop_removed_names`).
    ino: u64,
    /// The names directly in the tree, read before it was detached: the reclaimer may
    /// delete them before the thread gets to the tree.
    children: ChildNames,
}

/// Names directly in a directory, read before an rmtree detaches it (up to
/// `SNAPSHOT_NAMES`; the thread reads the rest, if any, from the engine after the last).
#[derive(Default)]
pub struct ChildNames {
    names: Vec<Vec<u8>>,
    complete: bool,
}

/// Most names kept per snapshot: a few MB at most, read in a few ms.
const SNAPSHOT_NAMES: usize = 64 * 1024;

impl ChildNames {
    /// The names directly in `dir` now (none if it is not a directory).
    pub fn read(engine: &Engine, dir: u64) -> Self {
        let mut names = Vec::new();
        while names.len() < SNAPSHOT_NAMES {
            let after = names.last().map(Vec::as_slice);
            let Ok(page) = engine.readdir(dir, after, CHILDREN_PAGE) else {
                break;
            };
            let full = page.len() == CHILDREN_PAGE;
            names.extend(page.into_iter().map(|entry| entry.name));
            if !full {
                return ChildNames {
                    names,
                    complete: true,
                };
            }
        }
        ChildNames {
            names,
            complete: false,
        }
    }
}

/// Sends FUSE_NOTIFY_INVAL_ENTRY for names the kernel may have cached.
pub struct EntryInvalidator {
    notifier: Notifier,
    /// None when the kernel cannot expire a name only (before Linux 6.2): a removed tree's
    /// name is then dropped in full before `forget_tree` returns.
    background: Option<SyncSender<RemovedName>>,
}

impl EntryInvalidator {
    /// Notifications are written by the caller's thread (and the background thread), never
    /// by a thread serving FUSE requests: the kernel may wait inside the notification on a
    /// request only those threads can answer (a directory lock held by a caller whose
    /// request is queued, the writeback of an evicted inode).
    pub fn new(session: &fuser::Session<ShoalFs>, engine: &Arc<Engine>) -> io::Result<Self> {
        let notifier = session.notifier();
        let background = if session
            .kernel_capabilities()
            .contains(InitFlags::FUSE_HAS_EXPIRE_ONLY)
        {
            let (sender, receiver) = mpsc::sync_channel(PENDING_TREES);
            let thread_notifier = notifier.clone();
            let engine = Arc::downgrade(engine);
            std::thread::Builder::new()
                .name("shoal-dcache-drop".into())
                .spawn(move || drop_removed_names(&thread_notifier, &engine, &receiver))?;
            Some(sender)
        } else {
            tracing::info!("the kernel cannot expire names only: rmtree waits for its dcache");
            None
        };
        Ok(EntryInvalidator {
            notifier,
            background,
        })
    }

    /// The kernel forgets `parent/name` (and, for a directory, every dentry below it).
    /// A name it had not cached is no error.
    pub fn forget_name(&self, parent: u64, name: &[u8]) -> io::Result<()> {
        ignore_uncached(
            self.notifier
                .inval_entry(INodeNo(parent), OsStr::from_bytes(name)),
        )
    }

    /// The tree `ino`, named `parent/name`, left the namespace: when this returns no
    /// lookup of the name is answered from the kernel's cache any more (the next one asks
    /// us); what the kernel cached below it is dropped later, by the background thread.
    pub fn forget_tree(
        &self,
        parent: u64,
        name: &[u8],
        ino: u64,
        children: ChildNames,
    ) -> io::Result<()> {
        let Some(background) = &self.background else {
            return self.forget_name(parent, name);
        };
        ignore_uncached(
            self.notifier
                .expire_entry(INodeNo(parent), OsStr::from_bytes(name)),
        )?;
        let removed = RemovedName {
            parent,
            name: name.to_vec(),
            ino,
            children,
        };
        match background.try_send(removed) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(removed) | TrySendError::Disconnected(removed)) => {
                self.forget_name(removed.parent, &removed.name)
            }
        }
    }

    /// The kernel forgets the attributes it cached for `ino` (a directory whose entries
    /// changed behind its back: its size, link count and times). An inode it does not
    /// hold is no error.
    pub fn forget_attrs(&self, ino: u64) -> io::Result<()> {
        // A negative offset invalidates the attributes only, not cached data.
        ignore_uncached(self.notifier.inval_inode(INodeNo(ino), -1, 0))
    }
}

fn ignore_uncached(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

/// The background thread, one removed tree after another. The kernel evicts what it
/// cached below a name inside the notification, holding the lock of the directory the
/// name is in; so first each name directly in the removed tree is dropped (the lock held
/// is the removed directory's, which nobody reaches by name any more). The tree's own name
/// is left as `forget_tree` left it, expired: dropping it here could drop a directory
/// made under the same name since (a check of the name first cannot close that race: a
/// mkdir may land between the check and the notification, and a cwd in the new
/// directory would then read as deleted). The next lookup of the name drops the old
/// dentry; until then it holds one inode. An unmount waits for the notification in
/// progress (the kernel's `killsb` lock); later ones fail harmlessly.
fn drop_removed_names(notifier: &Notifier, engine: &Weak<Engine>, pending: &Receiver<RemovedName>) {
    for removed in pending {
        drop_children(notifier, engine, removed.ino, &removed.children);
        if engine.strong_count() == 0 {
            return; // unmounting: the kernel drops its whole cache anyway
        }
    }
}

/// Names listed per engine read while dropping a removed directory's children.
const CHILDREN_PAGE: usize = 1024;

/// Drops the kernel's dentries for every name in the removed directory `dir`: those read
/// before it was detached, then any beyond them still in the engine (the reclaimer
/// deletes them meanwhile; a name it already took is dropped with `dir` itself).
fn drop_children(notifier: &Notifier, engine: &Weak<Engine>, dir: u64, children: &ChildNames) {
    for name in &children.names {
        report(notifier.inval_entry(INodeNo(dir), OsStr::from_bytes(name)));
    }
    if children.complete {
        return;
    }
    let mut after: Option<Vec<u8>> = children.names.last().cloned();
    loop {
        // The engine is held for one page at a time, so an unmount is not kept waiting.
        let page = match engine.upgrade() {
            Some(live) => live.readdir(dir, after.as_deref(), CHILDREN_PAGE),
            None => return,
        };
        // Not a directory (rmtree of a file), or reclaimed already.
        let Ok(page) = page else { return };
        for entry in &page {
            report(notifier.inval_entry(INodeNo(dir), OsStr::from_bytes(&entry.name)));
        }
        match page.last() {
            Some(last) if page.len() == CHILDREN_PAGE => after = Some(last.name.clone()),
            _ => return,
        }
    }
}

fn report(result: io::Result<()>) {
    if let Err(error) = ignore_uncached(result) {
        tracing::debug!("dropping the kernel's cache of a removed tree: {error}");
    }
}
