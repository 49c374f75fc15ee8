//! The write transaction every mutation goes through: it holds the writer lock, reads
//! through its own batch, gathers usage and quota changes, and commits them with the
//! operation as one atomic store write.

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use super::{Engine, WriteState, INO_RUNS_MAX, INO_RUN_LENGTH};
use crate::engine::quota::QuotaState;
use crate::engine::tree_usage::{TreeCache, TreeChanges};
use crate::error::{FsError, FsResult};
use crate::hashing::FastHashMap;
use crate::keys;
use crate::records::inode::{FileKind, Inode, Timestamp, Usage, UsageKey};
use crate::records::quota::{QuotaKind, QuotaRecord, QuotaSettings};
use crate::store::{Batch, Scan, SharedBytes, Space, StoreError, Value, SLOW_WRITE_REPORT};
use crate::store_dir::space_reserve::Need;

/// One mutation in progress: holds the writer lock and gathers one atomic batch.
/// Per usage counter, the inodes and bytes a transaction adds (or takes away).
pub(crate) type UsageDeltas = FastHashMap<UsageKey, (i64, i64)>;

pub(crate) struct Txn<'a> {
    pub(crate) engine: &'a Engine,
    pub(super) state: MutexGuard<'a, WriteState>,
    pub(super) batch: Batch,
    pub(super) usage_delta: UsageDeltas,
    /// Ownership changes move usage without being refused by limits (see `quota`).
    pub(super) quota_forced: bool,
    /// Quota records and settings this transaction writes (administration).
    pub(super) quota_records: Vec<((QuotaKind, u32), QuotaRecord)>,
    pub(super) quota_settings: Option<QuotaSettings>,
    /// Inodes this operation put in the in-memory orphan set; taken back if it fails.
    pub(super) new_orphans: Vec<u64>,
    /// Inodes this operation deletes from the store: kept in `unlinked` once it commits,
    /// while the kernel holds them.
    pub(super) removed: Vec<Inode>,
    /// Orphans too large to delete in this batch, purged after it commits (see `purge`).
    pub(super) purges_due: Vec<u64>,
    /// Files whose chunk range is too large for this batch: the rest goes in further
    /// batches of this transaction, under its writer lock (see `trim`).
    pub(super) trims_due: Vec<u64>,
    /// Recursive usage changes, applied to every ancestor at commit.
    pub(crate) tree: TreeChanges,
    pub(crate) now: Timestamp,
}

impl<'a> Txn<'a> {
    /// Reads through the batch: the transaction sees its own writes.
    pub(crate) fn get(&self, space: Space, key: &[u8]) -> FsResult<Option<Vec<u8>>> {
        match self.batch.lookup(space, key) {
            Some(value) => Ok(value.map(<[u8]>::to_vec)),
            None => Ok(self.engine.store.get(space, key)?),
        }
    }

    /// `get` in the store's buffer type (see `Store::get_shared`): a value this batch or
    /// the staged layers hold as such comes without a copy.
    pub(crate) fn get_shared(&self, space: Space, key: &[u8]) -> FsResult<Option<SharedBytes>> {
        match self.batch.lookup_value(space, key) {
            Some(value) => Ok(value.map(Value::to_shared)),
            None => Ok(self.engine.store.get_shared(space, key)?),
        }
    }

    pub(crate) fn put(&mut self, space: Space, key: Vec<u8>, value: Vec<u8>) {
        self.batch.put(space, key, value);
    }

    pub(crate) fn put_shared(&mut self, space: Space, key: Vec<u8>, value: SharedBytes) {
        self.batch.put_shared(space, key, value);
    }

    /// Notes file data in the store that this transaction's puts replace (an overwrite).
    pub(crate) fn note_replaced_data(&mut self, bytes: u64) {
        self.batch.note_replaced_data(bytes);
    }

    pub(crate) fn delete(&mut self, space: Space, key: Vec<u8>) {
        self.batch.delete(space, key);
    }

    pub(crate) fn inode(&self, ino: u64) -> FsResult<Inode> {
        match self.get(Space::Meta, &keys::inode_key(ino))? {
            Some(value) => keys::decode_inode(ino, &value),
            None => Err(FsError::NotFound),
        }
    }

    pub(crate) fn directory(&self, ino: u64) -> FsResult<Inode> {
        let inode = self.inode(ino)?;
        if inode.kind != FileKind::Directory {
            return Err(FsError::NotDir);
        }
        Ok(inode)
    }

    pub(crate) fn put_inode(&mut self, inode: &Inode) {
        self.batch.put(
            Space::Meta,
            keys::inode_key(inode.ino),
            keys::encode_inode(inode),
        );
    }

    pub(crate) fn entry(&self, parent: u64, name: &[u8]) -> FsResult<Option<(u64, FileKind)>> {
        let key = keys::entry_key(parent, name);
        match self.get(Space::Meta, &key)? {
            Some(value) => Ok(Some(keys::decode_entry(&key, &value)?)),
            None => Ok(None),
        }
    }

    /// `parent/name` as this batch has it, without asking the store: for a directory the
    /// batch created, whose every name is in the batch.
    pub(crate) fn batch_entry(
        &self,
        parent: u64,
        name: &[u8],
    ) -> FsResult<Option<(u64, FileKind)>> {
        let key = keys::entry_key(parent, name);
        match self.batch.lookup(Space::Meta, &key) {
            Some(Some(value)) => Ok(Some(keys::decode_entry(&key, value)?)),
            _ => Ok(None),
        }
    }

    pub(crate) fn put_entry(&mut self, parent: u64, name: &[u8], ino: u64, kind: FileKind) {
        self.batch.put(
            Space::Meta,
            keys::entry_key(parent, name),
            keys::encode_entry(ino, kind),
        );
    }

    pub(crate) fn delete_entry(&mut self, parent: u64, name: &[u8]) {
        self.batch
            .delete(Space::Meta, keys::entry_key(parent, name));
    }

    /// This batch's own items of the meta space in `[start, end)`.
    pub(crate) fn batch_range<'b>(
        &'b self,
        start: std::ops::Bound<&[u8]>,
        end: &[u8],
    ) -> impl Iterator<Item = (&'b [u8], Option<&'b [u8]>)> {
        self.batch.range(Space::Meta, start, end)
    }

    pub(crate) fn tree_cache(&mut self) -> &mut TreeCache {
        &mut self.state.tree_cache
    }

    pub(crate) fn tree_cache_ref(&self) -> &TreeCache {
        &self.state.tree_cache
    }

    /// Keys in `[start, end)` as the store has them, ignoring this batch. Callers use it
    /// only for ranges the batch has not touched (an inode's chunks or xattrs).
    pub(crate) fn scan_keys(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> FsResult<Vec<Vec<u8>>> {
        let mut found = Vec::new();
        self.engine.store.scan(space, start, end, &mut |key, _| {
            found.push(key.to_vec());
            Scan::Continue
        })?;
        Ok(found)
    }

    /// Hands out an inode number next to its siblings'.
    pub(crate) fn alloc_ino(&mut self, parent: u64) -> u64 {
        let state = &mut *self.state;
        if let Some((next, end)) = state.ino_runs.get_mut(&parent) {
            if *next < *end {
                let ino = *next;
                *next += 1;
                return ino;
            }
        }
        if state.ino_runs.len() >= INO_RUNS_MAX {
            state.ino_runs.clear();
        }
        let ino = state.next_ino;
        state.next_ino += INO_RUN_LENGTH;
        // Recorded with the inode that takes the run: a number handed out once is never
        // handed out again, even after its inode was deleted and the store reopened.
        let next_ino = state.next_ino;
        self.batch.put(
            Space::Meta,
            keys::next_ino_key(),
            keys::encode_next_ino(next_ino),
        );
        state
            .ino_runs
            .insert(parent, (ino + 1, ino + INO_RUN_LENGTH));
        ino
    }

    /// Lets this transaction's usage moves pass the limits: it changes ownership.
    pub(crate) fn force_quota(&mut self) {
        self.quota_forced = true;
    }

    pub(crate) fn quotas(&self) -> &QuotaState {
        &self.state.quotas
    }

    /// Writes one id's limits and timers (none: deletes the record).
    pub(crate) fn put_quota_record(&mut self, kind: QuotaKind, id: u32, record: QuotaRecord) {
        let key = keys::quota_record_key(kind, id);
        if record.limits.is_unlimited() {
            self.batch.delete(Space::Meta, key);
        } else {
            self.batch
                .put(Space::Meta, key, keys::encode_quota_record(&record));
        }
        self.quota_records.push(((kind, id), record));
    }

    pub(crate) fn put_quota_settings(&mut self, settings: QuotaSettings) {
        self.batch.put(
            Space::Meta,
            keys::quota_settings_key(),
            keys::encode_quota_settings(&settings),
        );
        self.quota_settings = Some(settings);
    }

    /// Charges (or credits, when negative) an inode's owners in this same batch.
    pub(crate) fn charge(&mut self, inode: &Inode, inodes: i64, bytes: i64) {
        if inodes == 0 && bytes == 0 {
            return;
        }
        let delta = self
            .usage_delta
            .entry(UsageKey::of(inode))
            .or_insert((0, 0));
        delta.0 += inodes;
        delta.1 += bytes;
    }

    /// Fails with `QuotaExceeded` where charging `bytes` more to `inode`'s owners (on top
    /// of this transaction's charges) would be refused; charges nothing.
    pub(crate) fn check_quota(&self, inode: &Inode, bytes: i64) -> FsResult<()> {
        let mut deltas = self.usage_delta.clone();
        deltas.entry(UsageKey::of(inode)).or_insert((0, 0)).1 += bytes;
        self.state
            .quotas
            .check(&deltas, self.now, self.quota_forced)
            .map(|_| ())
    }

    /// Drops the link of a non-directory inode in `dir`; deletes it (or orphans it while
    /// open) at zero links.
    pub(crate) fn drop_link(&mut self, mut inode: Inode, dir: u64) -> FsResult<()> {
        assert!(inode.kind != FileKind::Directory && inode.nlink > 0);
        self.link_removed(&mut inode, dir)?;
        inode.nlink -= 1;
        inode.ctime = self.now;
        if inode.nlink > 0 {
            self.put_inode(&inode);
            // Its other names' directories see the new ctime.
            return self.inode_changed(&inode, inode.size);
        }
        if inode.kind == FileKind::Regular && self.engine.keep_as_orphan(inode.ino) {
            self.new_orphans.push(inode.ino);
            self.put_inode(&inode);
            self.put(Space::Meta, keys::orphan_key(inode.ino), Vec::new());
            return Ok(());
        }
        self.put_inode(&inode);
        self.purge_inode(inode.ino)
    }

    /// Whether the device keeps its reserve after this batch (see `space_reserve`).
    fn space_for(&self, batch_bytes: u64) -> bool {
        let Some(space) = &self.engine.space else {
            return true;
        };
        let grows = self.batch.has_puts(Space::Data)
            || self
                .usage_delta
                .values()
                .any(|&(inodes, bytes)| inodes > 0 || bytes > 0);
        let need = if grows { Need::Room } else { Need::Cleanup };
        let store = &self.engine.store;
        let release = || {
            if let Err(error) = store.release_space() {
                tracing::warn!(%error, "writing out memtables for space failed");
            }
        };
        space.admit(need, batch_bytes, &|| store.pending_bytes(), &release)
    }

    /// Writes the batch, with the new absolute counter values, as one atomic store write;
    /// then the in-memory state follows. Nothing changes in memory if the write fails.
    /// Chunk ranges too large for the batch are then deleted in batches of their own
    /// before the writer lock is released (see `trim`).
    pub(crate) fn commit(mut self) -> FsResult<()> {
        self.write_out()?;
        // The operation is done: its batch holds the new size and no stale byte is
        // readable. A failed trim batch is retried by the next transaction to start.
        if let Err(error) = self.finish_trims() {
            tracing::warn!(%error, "deleting a file's chunks failed; the next write retries it");
        }
        Ok(())
    }

    /// The store write of `commit`; leaves the transaction empty, still holding the lock.
    pub(super) fn write_out(&mut self) -> FsResult<()> {
        let mut changed_quotas = self.stage_quota_records()?;
        let tree_staged = self.stage_tree_usage()?;
        let new_usage = match self.stage_usage_counters() {
            Ok(new_usage) => new_usage,
            Err(error) => {
                // Nothing is written: inode numbers handed out here are not trusted later.
                self.state.ino_runs.clear();
                self.engine.errors.record("usage counter underflow", &error);
                return Err(error);
            }
        };
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch_bytes = self.batch.bytes() as u64;
        if !self.space_for(batch_bytes) {
            self.state.ino_runs.clear();
            return Err(FsError::NoSpace);
        }
        let inodes = self.attributes_written();
        let started = Instant::now();
        self.write_batch()?;
        let store_write = started.elapsed();
        changed_quotas.append(&mut self.quota_records);
        self.apply_quotas(changed_quotas);
        self.apply_usage(new_usage);
        self.state.tree_cache.absorb(tree_staged);
        self.apply_removals();
        self.state.purges_due.append(&mut self.purges_due);
        self.record_write(batch_bytes, started.elapsed(), store_write, &inodes);
        Ok(())
    }

    /// The inodes whose attributes or extended attributes this batch writes: for the
    /// listing cache (what it drops) and the change observer (the fast path's per-inode
    /// versions).
    fn attributes_written(&self) -> Vec<u64> {
        let mut inodes = Vec::new();
        for (start, end) in keys::attribute_ranges() {
            let written = self
                .batch
                .range(Space::Meta, Bound::Included(&start[..]), &end);
            inodes.extend(written.filter_map(|(key, _)| keys::attribute_key_ino(key)));
        }
        inodes.sort_unstable();
        inodes.dedup();
        inodes
    }

    /// Checks this transaction's usage moves against the limits, and puts the quota
    /// records whose grace timers they start or clear.
    fn stage_quota_records(&mut self) -> FsResult<Vec<((QuotaKind, u32), QuotaRecord)>> {
        let changed = self
            .state
            .quotas
            .check(&self.usage_delta, self.now, self.quota_forced)?;
        for &((kind, id), record) in &changed {
            self.batch.put(
                Space::Meta,
                keys::quota_record_key(kind, id),
                keys::encode_quota_record(&record),
            );
        }
        Ok(changed)
    }

    /// Puts the new absolute value of every usage counter this transaction moves; refuses
    /// a move below zero (the counters disagree with the tree).
    fn stage_usage_counters(&mut self) -> FsResult<Vec<(UsageKey, Usage)>> {
        let mut new_usage = Vec::with_capacity(self.usage_delta.len());
        for (&owners, &(inodes, bytes)) in &self.usage_delta {
            let current = self.state.usage.get(&owners).copied().unwrap_or_default();
            let updated = Usage {
                inodes: apply_delta(current.inodes, inodes, owners, "inodes")?,
                bytes: apply_delta(current.bytes, bytes, owners, "bytes")?,
            };
            // A combination nobody uses any more leaves no key behind.
            if updated == Usage::default() {
                self.batch.delete(Space::Meta, keys::counter_key(owners));
            } else {
                self.batch.put(
                    Space::Meta,
                    keys::counter_key(owners),
                    keys::encode_usage(updated),
                );
            }
            new_usage.push((owners, updated));
        }
        Ok(new_usage)
    }

    /// The one store write of this transaction.
    fn write_batch(&mut self) -> FsResult<()> {
        let batch = std::mem::take(&mut self.batch);
        if let Err(error) = self.engine.store.write(batch) {
            // Nothing of this operation reached the store; forget reserved inode runs so
            // no number handed out here is trusted later.
            self.state.ino_runs.clear();
            self.state.tree_cache.clear();
            return Err(match error {
                StoreError::NoSpace => FsError::NoSpace,
                other => FsError::Store(other),
            });
        }
        Ok(())
    }

    fn apply_quotas(&mut self, changed: Vec<((QuotaKind, u32), QuotaRecord)>) {
        let usage_delta = std::mem::take(&mut self.usage_delta);
        self.state.quotas.apply(&usage_delta, changed);
        if let Some(settings) = self.quota_settings.take() {
            self.state.quotas.settings = settings;
        }
        self.engine
            .quota_records_exist
            .store(self.state.quotas.has_records(), Ordering::Release);
    }

    fn apply_usage(&mut self, new_usage: Vec<(UsageKey, Usage)>) {
        for (owners, usage) in new_usage {
            if usage == Usage::default() {
                self.state.usage.remove(&owners);
            } else {
                self.state.usage.insert(owners, usage);
            }
        }
    }

    /// The orphans this operation made are now in the store; the inodes it deleted stay
    /// answerable while the kernel holds them.
    fn apply_removals(&mut self) {
        self.new_orphans.clear();
        for inode in std::mem::take(&mut self.removed) {
            self.engine.unlinked().removed(inode, self.now);
        }
    }

    fn record_write(
        &self,
        batch_bytes: u64,
        write_time: Duration,
        store_write: Duration,
        inodes: &[u64],
    ) {
        self.engine.count_change(inodes);
        if write_time >= SLOW_WRITE_REPORT {
            tracing::warn!(
                total_ms = write_time.as_millis() as u64,
                store_write_ms = store_write.as_millis() as u64,
                batch_bytes,
                "slow batch write"
            );
        }
        self.engine.stats.record_batch(batch_bytes, write_time);
    }
}

impl Drop for Txn<'_> {
    /// An operation that failed or never committed must not leave inodes in the orphan set
    /// that the store still shows as linked.
    fn drop(&mut self) {
        super::HOLDS_TXN.set(false);
        if !self.new_orphans.is_empty() {
            self.engine.not_orphans(&self.new_orphans);
        }
    }
}

/// `current` moved by `delta`. Usage is exact, so a counter that would go below zero was
/// wrong before this operation: damage for fsck to report, not a value to clamp.
fn apply_delta(current: u64, delta: i64, owner: UsageKey, unit: &str) -> FsResult<u64> {
    current.checked_add_signed(delta).ok_or_else(|| {
        FsError::Corrupt(format!(
            "usage counter of {owner:?} would go below zero ({current} {unit} {delta:+}); \
             `shoal fsck` reports the counters that disagree with the tree"
        ))
    })
}
