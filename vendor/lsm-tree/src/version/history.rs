// shoal patch (see vendor/lsm-tree/README.vendor.md): the version history behind its
// lock, plus the latest super version published outside it. Tested through fjall in
// shoal-engine (`reads_do_not_wait_for_the_version_history_lock`).

use super::{SuperVersion, SuperVersions};
use crate::SeqNo;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Writers hold the history's write lock while they persist a new version (a file write,
/// two fsyncs and a rename) and while they delete old version files. Point reads and
/// scans only need the newest version, so they take it from `published`, which is
/// replaced just before the write lock is released: a reader never waits for a writer's
/// disk I/O, and sees either the version before an upgrade or the one after it (a flush
/// or compaction changes where data lives, never what it is).
pub struct VersionHistory {
    lock: RwLock<SuperVersions>,
    published: Mutex<SuperVersion>,
}

/// A panic while the lock was held.
#[derive(Debug)]
pub struct Poisoned;

impl VersionHistory {
    pub fn new(versions: SuperVersions) -> Self {
        let latest = versions.latest_version();
        Self {
            lock: RwLock::new(versions),
            published: Mutex::new(latest),
        }
    }

    pub fn read(&self) -> Result<RwLockReadGuard<'_, SuperVersions>, Poisoned> {
        self.lock.read().map_err(|_| Poisoned)
    }

    pub fn write(&self) -> Result<VersionHistoryWriteGuard<'_>, Poisoned> {
        let guard = self.lock.write().map_err(|_| Poisoned)?;
        Ok(VersionHistoryWriteGuard {
            guard,
            published: &self.published,
        })
    }

    /// The newest version, without waiting for a writer's disk I/O: for statistics,
    /// write-stall checks and inserts. An insert may use it because fjall inserts under its
    /// journal lock, which every memtable rotation holds too (and the rotation publishes
    /// before it releases the history lock), so the active memtable cannot change beneath
    /// an insert; during a flush's or a compaction's upgrade it is the same memtable.
    pub fn latest(&self) -> Result<SuperVersion, Poisoned> {
        Ok(self.published.lock().map_err(|_| Poisoned)?.clone())
    }

    /// The version a read at `seqno` must see: the published one when it is visible at
    /// `seqno` (every read at the current sequence number), else from the history.
    pub fn version_for_snapshot(&self, seqno: SeqNo) -> Result<SuperVersion, Poisoned> {
        if seqno != 0 {
            let published = self.latest()?;
            if published.seqno < seqno {
                return Ok(published);
            }
        }
        Ok(self.read()?.get_version_for_snapshot(seqno))
    }
}

/// The history's write guard; publishes the latest version when dropped, before the
/// lock is released, so no write can land in a memtable readers do not see.
pub struct VersionHistoryWriteGuard<'a> {
    guard: RwLockWriteGuard<'a, SuperVersions>,
    published: &'a Mutex<SuperVersion>,
}

impl Deref for VersionHistoryWriteGuard<'_> {
    type Target = SuperVersions;

    fn deref(&self) -> &SuperVersions {
        &self.guard
    }
}

impl DerefMut for VersionHistoryWriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut SuperVersions {
        &mut self.guard
    }
}

impl Drop for VersionHistoryWriteGuard<'_> {
    fn drop(&mut self) {
        let latest = self.guard.latest_version();
        match self.published.lock() {
            Ok(mut published) => *published = latest,
            Err(poisoned) => *poisoned.into_inner() = latest,
        }
    }
}
