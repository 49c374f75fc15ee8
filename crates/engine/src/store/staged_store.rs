//! Delayed logging: batches are staged in memory and reach the inner store together, as one
//! atomic checkpoint batch, the way XFS's delayed logging aggregates metadata changes.
//!
//! Writes to one key between two checkpoints merge in memory (a directory's inode on every
//! create in it, a file's inode on create, write and setattr, the usage counters on every
//! operation), so the inner store writes each key once per checkpoint and appends to its
//! journal once per checkpoint instead of once per operation.
//!
//! When the staged bytes reach a bound, the write that finds them there freezes them and a
//! checkpointer thread writes them while new batches stage beside them. If that checkpoint
//! is held up in the inner store (a flush or a compaction stall there), the new layer may
//! grow to `HARD_BOUND_FACTOR` times the bound before a writer waits for it, writes slowed
//! gradually on the way (up to `MAX_WRITE_DELAY` each): a hiccup of a few hundred
//! milliseconds in the inner store then stalls no operation. `sync` (group commit:
//! fsync, the commit interval, unmount), a snapshot, a compaction and drop checkpoint
//! everything at once. Each checkpoint holds every operation up to a point, atomically, so
//! after a crash the store holds a prefix of the operations: at least all of them up to
//! the last sync.

use std::iter::Peekable;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use super::{Batch, Scan, SharedBytes, Space, Store, StoreError, StoreMetrics, StoreView, Value};
use crate::store::error_seq::{ErrorSeq, WriteErrors};
use crate::store::histogram::Histogram;
use crate::store::poison::Poison;
use crate::store::SLOW_WRITE_REPORT;

/// How far past the checkpoint bound the active layer may grow while the previous layer is
/// still being written, before writers wait: at the default bound and ~4 MiB staged per
/// second of creates, about a second of slack.
const HARD_BOUND_FACTOR: u64 = 2;

/// The delay of a write that finds the active layer nearly at the hard bound while the
/// previous layer is still being written; less below (see `Shared::write_delay`).
const MAX_WRITE_DELAY: Duration = Duration::from_millis(1);

/// Resident memory of staged pairs, in percent of their key and value bytes (B-tree nodes
/// and one allocation per key and per value).
const STAGED_MEMORY_PERCENT: u64 = 200;

/// A pair as staged: `None` for a deletion.
type StagedPair = (Vec<u8>, Option<Vec<u8>>);

/// Staged pairs a scan copies at a time (see `StagedCursor`).
const SCAN_CHUNK: usize = 64;

pub struct StagedStore {
    shared: Arc<Shared>,
    checkpointer: Option<JoinHandle<()>>,
}

struct Shared {
    inner: Box<dyn Store>,
    checkpoint_bytes: u64,
    layers: RwLock<Layers>,
    /// Held by the one checkpoint writing a frozen layer into the inner store at a time.
    checkpoint_writer: Mutex<()>,
    /// Held exclusively while a written layer leaves the staged layers, and shared by
    /// scans: a scan merges the staged layers with the inner store, and may have read the
    /// inner store before the layer reached it. Scans wait for that moment only, never
    /// for the inner store's write.
    unstaging: RwLock<()>,
    checkpoints: AtomicU64,
    /// How long each checkpoint took to write into the inner store.
    checkpoint_writes: Histogram,
    /// Writes that found the active layer at the hard bound, and how long each waited for
    /// the checkpoint in progress: the stalls delayed logging exists to avoid.
    held_writes: Histogram,
    background: Mutex<Background>,
    /// Wakes the checkpointer thread.
    handed_over: Condvar,
    /// Wakes writers waiting for the checkpointer to finish.
    written: Condvar,
    /// Failed background checkpoints, reported to stats and the next sync.
    errors: ErrorSeq,
    /// The last checkpoint failed (its layer is still staged): until one succeeds, each
    /// write first retries it and is refused if it fails again, so writes are not
    /// acknowledged into memory that the store cannot take.
    failing: AtomicBool,
    /// The checkpointer panicked: its layer may be half written, so nothing more is.
    poison: Poison,
}

/// The checkpointer thread's work.
#[derive(Default)]
struct Background {
    /// A frozen layer is handed to the thread and not yet written (or failed).
    busy: bool,
    stopping: bool,
}

#[derive(Default)]
struct Layers {
    /// Batches written since the last checkpoint began.
    active: Staged,
    /// What a checkpoint is writing (or failed to write) to the inner store; read from
    /// until the inner store has it.
    frozen: Option<Arc<Staged>>,
}

impl Layers {
    /// The newest staged version of a key: `Some(None)` if it is staged as deleted.
    fn lookup(&self, space: Space, key: &[u8]) -> Option<Option<Vec<u8>>> {
        let staged = self.active.batch.lookup(space, key).or_else(|| {
            self.frozen
                .as_ref()
                .and_then(|frozen| frozen.batch.lookup(space, key))
        });
        staged.map(|value| value.map(<[u8]>::to_vec))
    }

    /// `lookup` in the on-disk store's buffer type: a value staged in it is not copied.
    fn lookup_shared(&self, space: Space, key: &[u8]) -> Option<Option<SharedBytes>> {
        let staged = self.active.batch.lookup_value(space, key).or_else(|| {
            self.frozen
                .as_ref()
                .and_then(|frozen| frozen.batch.lookup_value(space, key))
        });
        staged.map(|value| value.map(Value::to_shared))
    }

    fn staged_bytes(&self) -> u64 {
        self.active.bytes + self.frozen.as_ref().map_or(0, |frozen| frozen.bytes)
    }
}

/// One layer of staged batches, later writes to a key replacing earlier ones.
#[derive(Default)]
struct Staged {
    batch: Batch,
    /// Key and value bytes held.
    bytes: u64,
}

impl Staged {
    /// Takes `batch` in, later writes to a key replacing earlier ones. File data the batch
    /// overwrites is garbage in the store only if the store has it: a chunk replaced here,
    /// before any checkpoint wrote it (every append of a file written in pieces), leaves
    /// none, and counting it started needless reclaim rounds (27 during one `tar x`).
    fn absorb(&mut self, batch: Batch) {
        let mut replaced_data = batch.replaced_data_bytes();
        for (space, key, value) in batch.into_items() {
            let key_len = key.len();
            let added = pair_bytes(key_len, value.as_deref());
            let overwrite = value.is_some();
            let replaced = self.batch.insert(space, key, value);
            if let (Space::Data, true, Some(Some(old))) = (space, overwrite, &replaced) {
                replaced_data = replaced_data.saturating_sub(old.len() as u64);
            }
            let removed = replaced.map_or(0, |old| pair_bytes(key_len, old.as_deref()));
            self.bytes = (self.bytes + added).saturating_sub(removed);
        }
        self.batch.note_replaced_data(replaced_data);
    }
}

fn pair_bytes(key_len: usize, value: Option<&[u8]>) -> u64 {
    (key_len + value.map_or(0, <[u8]>::len)) as u64
}

impl StagedStore {
    pub fn new(inner: Box<dyn Store>, checkpoint_bytes: u64) -> Result<Self, StoreError> {
        let shared = Arc::new(Shared {
            inner,
            checkpoint_bytes: checkpoint_bytes.max(1),
            layers: RwLock::default(),
            checkpoint_writer: Mutex::new(()),
            unstaging: RwLock::new(()),
            checkpoints: AtomicU64::new(0),
            checkpoint_writes: Histogram::default(),
            held_writes: Histogram::default(),
            background: Mutex::default(),
            handed_over: Condvar::new(),
            written: Condvar::new(),
            errors: ErrorSeq::default(),
            failing: AtomicBool::new(false),
            poison: Poison::default(),
        });
        let thread_shared = shared.clone();
        let checkpointer = std::thread::Builder::new()
            .name("shoal-checkpoint".into())
            .spawn(move || thread_shared.run_checkpointer())?;
        Ok(Self {
            shared,
            checkpointer: Some(checkpointer),
        })
    }
}

impl Shared {
    /// Writes everything staged so far to the inner store, oldest first: a frozen layer
    /// (handed to the checkpointer, or left by a failed checkpoint), then the active one.
    /// On failure what is staged stays staged (and readable), and the next checkpoint
    /// tries again.
    fn checkpoint(&self) -> Result<(), StoreError> {
        self.poison.check()?;
        let _writer = self.checkpoint_writer.lock();
        self.write_frozen()?;
        if self.freeze() {
            self.write_frozen()?;
        }
        Ok(())
    }

    /// Makes the active layer the frozen one; false if it is empty or a frozen layer
    /// is still there.
    fn freeze(&self) -> bool {
        let mut layers = self.layers.write();
        if layers.active.batch.is_empty() || layers.frozen.is_some() {
            return false;
        }
        layers.frozen = Some(Arc::new(std::mem::take(&mut layers.active)));
        true
    }

    /// Writes the frozen layer, if any, to the inner store and unstages it. Callers hold
    /// `checkpoint_writer`, so no layer is written twice.
    fn write_frozen(&self) -> Result<(), StoreError> {
        let Some(frozen) = self.layers.read().frozen.clone() else {
            return Ok(());
        };
        let started = Instant::now();
        if let Err(error) = self.inner.write_borrowed(&frozen.batch) {
            self.failing.store(true, Ordering::Release);
            return Err(error);
        }
        self.failing.store(false, Ordering::Release);
        self.checkpoint_writes.record(started.elapsed());
        let unstaged = {
            let _no_scans = self.unstaging.write();
            self.layers.write().frozen.take()
        };
        // Freed outside the lock: tens of thousands of pairs take milliseconds to free, and
        // every read waits while the layers are locked for writing.
        drop(unstaged);
        drop(frozen);
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Before a write that finds the bound reached: hands the active layer to the
    /// checkpointer. While a frozen layer is still being written (by the checkpointer, or
    /// by a sync), the write goes ahead below the hard bound, slowed a little, and waits
    /// at it for that checkpoint only: the layer it then hands over is written in the
    /// background like any other.
    fn make_room(&self, active_bytes: u64) -> Result<(), StoreError> {
        if active_bytes >= self.checkpoint_bytes.saturating_mul(HARD_BOUND_FACTOR) {
            self.wait_for_checkpoint()?;
        }
        let mut background = self.background.lock();
        // Checked once, under the lock the checkpointer hands over with: a sync may still
        // freeze the layer after this, and then `freeze` below finds it frozen.
        let frozen_in_hand = background.busy || self.layers.read().frozen.is_some();
        if frozen_in_hand {
            drop(background);
            std::thread::sleep(self.write_delay(active_bytes));
            return Ok(());
        }
        if self.freeze() {
            background.busy = true;
            self.handed_over.notify_one();
        }
        Ok(())
    }

    /// At the hard bound: waits until no frozen layer is left. One that the checkpointer
    /// or a sync is writing is waited for; one left by a failed checkpoint is written
    /// here, so its error reaches this write.
    fn wait_for_checkpoint(&self) -> Result<(), StoreError> {
        let started = Instant::now();
        {
            let mut background = self.background.lock();
            while background.busy && !self.poison.is_poisoned() {
                self.written.wait(&mut background);
            }
        }
        self.poison.check()?;
        let written = if self.layers.read().frozen.is_some() {
            let _writer = self.checkpoint_writer.lock();
            self.write_frozen()
        } else {
            Ok(())
        };
        self.held_writes.record(started.elapsed());
        written
    }

    /// Nothing at the bound, growing with the square of the way to the hard bound up to
    /// `MAX_WRITE_DELAY`: writers slow down gradually while a checkpoint is held up, so it
    /// can catch up before any writer has to wait for it whole.
    fn write_delay(&self, active_bytes: u64) -> Duration {
        let over = active_bytes.saturating_sub(self.checkpoint_bytes) as f64;
        let room = (self.checkpoint_bytes * (HARD_BOUND_FACTOR - 1)) as f64;
        let fraction = (over / room).min(1.0);
        MAX_WRITE_DELAY.mul_f64(fraction * fraction)
    }

    /// Waits until the checkpointer has nothing in hand (tests: a settled state).
    #[cfg(test)]
    fn wait_for_checkpointer(&self) -> parking_lot::MutexGuard<'_, Background> {
        let mut background = self.background.lock();
        while background.busy && !self.poison.is_poisoned() {
            self.written.wait(&mut background);
        }
        background
    }

    fn run_checkpointer(&self) {
        // Writers waiting for this thread's checkpoint are woken to see the poison. The
        // lock is taken first so none can check and then miss the wake-up.
        let _poison_on_panic = self.poison.guard("checkpointer", || {
            drop(self.background.lock());
            self.written.notify_all();
        });
        loop {
            {
                let mut background = self.background.lock();
                while !background.busy && !background.stopping {
                    self.handed_over.wait(&mut background);
                }
                if !background.busy {
                    return;
                }
            }
            let written = {
                let _writer = self.checkpoint_writer.lock();
                self.write_frozen()
            };
            if let Err(error) = written {
                // The frozen layer stays staged; the next write retries it.
                self.errors.record("background checkpoint failed", &error);
            }
            self.background.lock().busy = false;
            self.written.notify_all();
        }
    }

    /// Up to `SCAN_CHUNK` staged pairs of `space` after `after` and before `end`, newest
    /// version per key, in key order.
    fn staged_chunk(&self, space: Space, after: Bound<&[u8]>, end: &[u8]) -> Vec<StagedPair> {
        let layers = self.layers.read();
        let active = layers.active.batch.range(space, after, end);
        let frozen = layers
            .frozen
            .as_ref()
            .map(|frozen| frozen.batch.range(space, after, end));
        merge_newest_first(active, frozen.into_iter().flatten())
            .take(SCAN_CHUNK)
            .map(|(key, value)| (key.to_vec(), value.map(<[u8]>::to_vec)))
            .collect()
    }
}

/// Two ordered runs of pairs merged by key; where both hold a key, `newer`'s version wins.
fn merge_newest_first<'a>(
    newer: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    older: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> {
    let mut newer = newer.peekable();
    let mut older = older.peekable();
    std::iter::from_fn(move || match (newer.peek(), older.peek()) {
        (Some((new_key, _)), Some((old_key, _))) => {
            if new_key > old_key {
                return older.next();
            }
            if new_key == old_key {
                older.next();
            }
            newer.next()
        }
        (Some(_), None) => newer.next(),
        (None, _) => older.next(),
    })
}

/// The staged pairs of one scan, fetched a chunk at a time so a scan that stops early
/// copies little, and so no lock is held while the scan's visitor runs.
struct StagedCursor<'a> {
    store: &'a Shared,
    space: Space,
    end: &'a [u8],
    /// The last key fetched; the next chunk starts after it.
    last: Option<Vec<u8>>,
    chunk: Peekable<std::vec::IntoIter<StagedPair>>,
    exhausted: bool,
}

impl<'a> StagedCursor<'a> {
    fn new(store: &'a Shared, space: Space, start: &'a [u8], end: &'a [u8]) -> Self {
        let chunk = store.staged_chunk(space, Bound::Included(start), end);
        Self::with_chunk(store, space, end, None, chunk)
    }

    fn with_chunk(
        store: &'a Shared,
        space: Space,
        end: &'a [u8],
        last: Option<Vec<u8>>,
        chunk: Vec<StagedPair>,
    ) -> Self {
        let exhausted = chunk.len() < SCAN_CHUNK;
        let last = chunk.last().map(|(key, _)| key.clone()).or(last);
        Self {
            store,
            space,
            end,
            last,
            chunk: chunk.into_iter().peekable(),
            exhausted,
        }
    }

    fn peek_key(&mut self) -> Option<&[u8]> {
        if self.chunk.peek().is_none() && !self.exhausted {
            let after = self.last.take();
            let chunk = match &after {
                Some(last) => self
                    .store
                    .staged_chunk(self.space, Bound::Excluded(last), self.end),
                None => Vec::new(),
            };
            *self = Self::with_chunk(self.store, self.space, self.end, after, chunk);
        }
        self.chunk.peek().map(|(key, _)| key.as_slice())
    }

    fn next(&mut self) -> Option<StagedPair> {
        self.peek_key()?;
        self.chunk.next()
    }
}

/// Emits staged pairs before `key` (and the staged version of `key` itself, if any) to
/// `visit`; returns whether the inner store's version of `key` is replaced, and whether
/// the visitor stopped.
fn emit_staged_through(
    staged: &mut StagedCursor<'_>,
    key: Option<&[u8]>,
    visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
) -> (bool, Scan) {
    while let Some(staged_key) = staged.peek_key() {
        let replaces = match key {
            Some(key) if staged_key > key => return (false, Scan::Continue),
            Some(key) => staged_key == key,
            None => false,
        };
        let Some((staged_key, value)) = staged.next() else {
            break;
        };
        if let Some(value) = value {
            if visit(&staged_key, &value) == Scan::Stop {
                return (replaces, Scan::Stop);
            }
        }
        if replaces {
            return (true, Scan::Continue);
        }
    }
    (false, Scan::Continue)
}

/// A value as a merged scan hands it on: its bytes, or only its length.
#[derive(Clone, Copy)]
enum Seen<'a> {
    Bytes(&'a [u8]),
    Length(u64),
}

/// A visitor of a merged scan's pairs.
type SeenVisitor<'v> = dyn FnMut(&[u8], Seen<'_>) -> Scan + 'v;

impl StagedStore {
    /// The inner store's pairs in `[start, end)` as `inner_scan` visits them, merged with
    /// the staged ones (which replace the inner store's pair of the same key, and hide it
    /// when deleted).
    fn scan_merged(
        &self,
        (space, start, end): (Space, &[u8], &[u8]),
        inner_scan: &mut dyn FnMut(&mut SeenVisitor<'_>) -> Result<(), StoreError>,
        visit: &mut SeenVisitor<'_>,
    ) -> Result<(), StoreError> {
        let shared = self.shared.as_ref();
        let _no_unstaging = shared.unstaging.read();
        let mut staged = StagedCursor::new(shared, space, start, end);
        let mut stopped = false;
        inner_scan(&mut |key, value| {
            let (replaced, scan) =
                emit_staged_through(&mut staged, Some(key), &mut |k, v| visit(k, Seen::Bytes(v)));
            if scan == Scan::Stop {
                stopped = true;
                return Scan::Stop;
            }
            if !replaced && visit(key, value) == Scan::Stop {
                stopped = true;
                return Scan::Stop;
            }
            Scan::Continue
        })?;
        if !stopped {
            emit_staged_through(&mut staged, None, &mut |k, v| visit(k, Seen::Bytes(v)));
        }
        Ok(())
    }
}

impl StoreView for StagedStore {
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
    ) -> Result<(), StoreError> {
        let inner = &self.shared.inner;
        self.scan_merged(
            (space, start, end),
            &mut |merge| inner.scan(space, start, end, &mut |k, v| merge(k, Seen::Bytes(v))),
            &mut |key, seen| match seen {
                Seen::Bytes(value) => visit(key, value),
                Seen::Length(_) => unreachable!("the inner store's scan gives values"),
            },
        )
    }

    fn scan_lengths(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], u64) -> Scan,
    ) -> Result<(), StoreError> {
        let inner = &self.shared.inner;
        self.scan_merged(
            (space, start, end),
            &mut |merge| {
                inner.scan_lengths(space, start, end, &mut |k, n| merge(k, Seen::Length(n)))
            },
            &mut |key, seen| match seen {
                Seen::Bytes(value) => visit(key, value.len() as u64),
                Seen::Length(length) => visit(key, length),
            },
        )
    }

    /// Rare (opening, checking): checkpoints, then asks the inner store.
    fn last_key(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.shared.checkpoint()?;
        self.shared.inner.last_key(space, start, end)
    }
}

impl Store for StagedStore {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        // A checkpoint puts pairs into the inner store before it unstages them, so a key
        // missing from both layers here is in the inner store, or was not written.
        if let Some(staged) = self.shared.layers.read().lookup(space, key) {
            return Ok(staged);
        }
        self.shared.inner.get(space, key)
    }

    fn get_shared(&self, space: Space, key: &[u8]) -> Result<Option<SharedBytes>, StoreError> {
        if let Some(staged) = self.shared.layers.read().lookup_shared(space, key) {
            return Ok(staged);
        }
        self.shared.inner.get_shared(space, key)
    }

    /// Stages the batch. Room is made first when the bound is reached: if a checkpoint
    /// fails there, this batch is refused whole rather than staged and reported failed.
    fn write(&self, batch: Batch) -> Result<(), StoreError> {
        let shared = self.shared.as_ref();
        shared.poison.check()?;
        if shared.failing.load(Ordering::Acquire) {
            shared.checkpoint()?;
        }
        let started = Instant::now();
        let mut layers = shared.layers.write();
        let locked = started.elapsed();
        let active_bytes = layers.active.bytes;
        let mut made_room = Duration::ZERO;
        if active_bytes >= shared.checkpoint_bytes {
            drop(layers);
            let room_started = Instant::now();
            shared.make_room(active_bytes)?;
            layers = shared.layers.write();
            made_room = room_started.elapsed();
        }
        layers.active.absorb(batch);
        drop(layers);
        let took = started.elapsed();
        if took >= SLOW_WRITE_REPORT {
            // Absorbing is what is left once the lock wait and making room are taken off.
            let absorbed = took.saturating_sub(locked + made_room);
            tracing::warn!(
                lock_wait_ms = locked.as_millis() as u64,
                make_room_ms = made_room.as_millis() as u64,
                absorb_ms = absorbed.as_millis() as u64,
                active_bytes,
                "slow staged write"
            );
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.shared.checkpoint()?;
        self.shared.inner.sync()
    }

    fn disk_bytes(&self) -> u64 {
        self.shared.inner.disk_bytes()
    }

    fn data_compressed(&self) -> Option<bool> {
        self.shared.inner.data_compressed()
    }

    fn metrics(&self) -> StoreMetrics {
        let checkpoint_writes = self.shared.checkpoint_writes.snapshot();
        let held_writes = self.shared.held_writes.snapshot();
        // Read and unlocked before the inner store's metrics, which may wait on the inner
        // store (fjall's did, for a flush's fsyncs): every write would wait behind them.
        let staged_bytes = self.shared.layers.read().staged_bytes();
        StoreMetrics {
            staged_bytes,
            checkpoints: self.shared.checkpoints.load(Ordering::Relaxed),
            checkpoint_write_ns: checkpoint_writes.sum_ns,
            checkpoint_write_max_ns: checkpoint_writes.max_ns,
            held_writes: held_writes.count,
            held_write_ns: held_writes.sum_ns,
            held_write_max_ns: held_writes.max_ns,
            ..self.shared.inner.metrics()
        }
    }

    fn memory_bytes(&self) -> u64 {
        let staged = self.shared.layers.read().staged_bytes() * STAGED_MEMORY_PERCENT / 100;
        self.shared.inner.memory_bytes() + staged
    }

    fn snapshot(&self) -> Box<dyn StoreView> {
        // Best effort: a failed checkpoint leaves its pairs staged, and the snapshot
        // without them (the error shows again on the next write or sync).
        if let Err(error) = self.shared.checkpoint() {
            tracing::warn!(%error, "checkpoint before a snapshot failed");
        }
        self.shared.inner.snapshot()
    }

    fn compact(&self) -> Result<(), StoreError> {
        self.shared.checkpoint()?;
        self.shared.inner.compact()
    }

    fn pending_bytes(&self) -> u64 {
        self.shared.layers.read().staged_bytes() + self.shared.inner.pending_bytes()
    }

    fn release_space(&self) -> Result<(), StoreError> {
        self.shared.checkpoint()?;
        self.shared.inner.release_space()
    }

    fn background_errors(&self) -> WriteErrors {
        self.shared.errors.snapshot()
    }

    fn poisoned(&self) -> Result<(), StoreError> {
        self.shared.poison.check()?;
        self.shared.inner.poisoned()
    }
}

impl Drop for StagedStore {
    fn drop(&mut self) {
        self.shared.background.lock().stopping = true;
        self.shared.handed_over.notify_one();
        if let Some(thread) = self.checkpointer.take() {
            if thread.join().is_err() {
                tracing::error!("the checkpointer had panicked: staged operations are lost");
            }
        }
        let shared = &self.shared;
        if let Err(error) = shared.checkpoint().and_then(|()| shared.inner.sync()) {
            tracing::error!(%error, "final checkpoint failed: staged operations are lost");
        }
    }
}

/// The most memory staged pairs take at a checkpoint bound: the active layer up to the
/// hard bound (plus one batch), and the frozen one being written, which may have grown as
/// far. Zero when nothing is staged (`checkpoint_bytes` 0).
pub fn staged_memory_bound(checkpoint_bytes: u64) -> u64 {
    2 * HARD_BOUND_FACTOR * checkpoint_bytes * STAGED_MEMORY_PERCENT / 100
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::store::MemoryStore;

    /// An inner store the test can also read directly, and make fail.
    #[derive(Clone, Default)]
    struct Inner {
        store: Arc<MemoryStore>,
        failing: Arc<AtomicBool>,
        writes: Arc<AtomicUsize>,
        /// Writes the inner store lets through before it holds the rest up (`None`: all),
        /// for tests that hold checkpoints up.
        permits: Arc<(Mutex<Option<usize>>, Condvar)>,
        /// Held by a test to make `metrics` wait, as fjall's did for a flush's fsyncs;
        /// `in_metrics` tells that a report is waiting there.
        metrics_gate: Arc<Mutex<()>>,
        in_metrics: Arc<AtomicBool>,
        /// Writes panic (after their permit): a bug in the store under a checkpoint.
        panicking: Arc<AtomicBool>,
        /// Overwritten file data the written batches declared (what starts reclaim rounds).
        replaced_data: Arc<AtomicU64>,
    }

    impl Inner {
        fn allow_writes(&self, permits: Option<usize>) {
            let (allowed, changed) = &*self.permits;
            *allowed.lock() = permits;
            changed.notify_all();
        }
    }

    /// Lets every write through when dropped: a failing assertion then fails its test
    /// instead of hanging it on a checkpoint held up forever (the store's drop and a
    /// thread scope's end both wait for it).
    struct ReleaseWrites<'a>(&'a Inner);

    impl Drop for ReleaseWrites<'_> {
        fn drop(&mut self) {
            self.0.allow_writes(None);
        }
    }

    impl StoreView for Inner {
        fn scan(
            &self,
            space: Space,
            start: &[u8],
            end: &[u8],
            visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
        ) -> Result<(), StoreError> {
            self.store.scan(space, start, end, visit)
        }

        fn scan_lengths(
            &self,
            space: Space,
            start: &[u8],
            end: &[u8],
            visit: &mut dyn FnMut(&[u8], u64) -> Scan,
        ) -> Result<(), StoreError> {
            self.store.scan_lengths(space, start, end, visit)
        }

        fn last_key(
            &self,
            space: Space,
            start: &[u8],
            end: &[u8],
        ) -> Result<Option<Vec<u8>>, StoreError> {
            self.store.last_key(space, start, end)
        }
    }

    impl Store for Inner {
        fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
            self.store.get(space, key)
        }

        fn write(&self, batch: Batch) -> Result<(), StoreError> {
            {
                let (allowed, changed) = &*self.permits;
                let mut allowed = allowed.lock();
                while *allowed == Some(0) {
                    changed.wait(&mut allowed);
                }
                if let Some(left) = allowed.as_mut() {
                    *left -= 1;
                }
            }
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::NoSpace);
            }
            assert!(!self.panicking.load(Ordering::SeqCst), "injected panic");
            self.writes.fetch_add(1, Ordering::SeqCst);
            self.replaced_data
                .fetch_add(batch.replaced_data_bytes(), Ordering::SeqCst);
            self.store.write(batch)
        }

        fn sync(&self) -> Result<(), StoreError> {
            Ok(())
        }

        fn disk_bytes(&self) -> u64 {
            0
        }

        fn memory_bytes(&self) -> u64 {
            self.store.memory_bytes()
        }

        fn metrics(&self) -> StoreMetrics {
            self.in_metrics.store(true, Ordering::SeqCst);
            let _gate = self.metrics_gate.lock();
            StoreMetrics::default()
        }

        fn snapshot(&self) -> Box<dyn StoreView> {
            self.store.snapshot()
        }
    }

    fn staged(checkpoint_bytes: u64) -> (StagedStore, Inner) {
        let inner = Inner::default();
        (
            StagedStore::new(Box::new(inner.clone()), checkpoint_bytes).unwrap(),
            inner,
        )
    }

    fn put(store: &dyn Store, key: &[u8], value: &[u8]) {
        let mut batch = Batch::default();
        batch.put(Space::Meta, key.to_vec(), value.to_vec());
        store.write(batch).unwrap();
    }

    fn delete(store: &dyn Store, key: &[u8]) {
        let mut batch = Batch::default();
        batch.delete(Space::Meta, key.to_vec());
        store.write(batch).unwrap();
    }

    fn keys_in(store: &dyn StoreView, start: &[u8], end: &[u8], stop_after: usize) -> Vec<String> {
        let mut seen = Vec::new();
        store
            .scan(Space::Meta, start, end, &mut |key, value| {
                seen.push(format!(
                    "{}={}",
                    String::from_utf8_lossy(key),
                    String::from_utf8_lossy(value)
                ));
                if seen.len() >= stop_after {
                    Scan::Stop
                } else {
                    Scan::Continue
                }
            })
            .unwrap();
        seen
    }

    #[test]
    fn staged_writes_shadow_the_inner_store_in_reads_and_scans() {
        let (store, inner) = staged(1 << 20);
        for key in ["a", "c", "e", "g"] {
            put(&inner, key.as_bytes(), b"old");
        }
        put(&store, b"b", b"new");
        put(&store, b"c", b"new");
        delete(&store, b"e");
        put(&store, b"h", b"new");
        delete(&store, b"x");
        assert_eq!(
            inner.writes.load(Ordering::SeqCst),
            4,
            "nothing checkpointed yet"
        );

        assert_eq!(store.get(Space::Meta, b"c").unwrap(), Some(b"new".to_vec()));
        assert_eq!(store.get(Space::Meta, b"e").unwrap(), None);
        assert_eq!(store.get(Space::Meta, b"g").unwrap(), Some(b"old".to_vec()));
        assert_eq!(
            store.get(Space::Data, b"c").unwrap(),
            None,
            "spaces are apart"
        );
        let all = ["a=old", "b=new", "c=new", "g=old", "h=new"];
        assert_eq!(keys_in(&store, b"", b"z", usize::MAX), all);
        assert_eq!(keys_in(&store, b"b", b"h", usize::MAX), all[1..4]);
        assert_eq!(
            keys_in(&store, b"", b"z", 2),
            all[..2],
            "a stop is honoured"
        );
        assert_eq!(
            keys_in(&store, b"c", b"c", usize::MAX),
            Vec::<String>::new()
        );
        // A scan for lengths merges the same way ("old" and "new" have three bytes).
        put(&inner, b"i", b"longer");
        let mut lengths = Vec::new();
        store
            .scan_lengths(Space::Meta, b"", b"z", &mut |key, length| {
                lengths.push(format!("{}={length}", String::from_utf8_lossy(key)));
                Scan::Continue
            })
            .unwrap();
        assert_eq!(lengths, ["a=3", "b=3", "c=3", "g=3", "h=3", "i=6"]);
        let all = ["a=old", "b=new", "c=new", "g=old", "h=new", "i=longer"];

        // After a sync, the inner store alone holds the same.
        store.sync().unwrap();
        assert_eq!(keys_in(&inner, b"", b"z", usize::MAX), all);
        assert_eq!(keys_in(&store, b"", b"z", usize::MAX), all);
        assert_eq!(store.metrics().staged_bytes, 0);
        assert_eq!(store.metrics().checkpoints, 1);
    }

    /// A data chunk rewritten before any checkpoint wrote it leaves no garbage in the
    /// store; one rewritten after it does.
    #[test]
    fn only_overwrites_of_written_data_reach_the_store_as_garbage() {
        let (store, inner) = staged(1 << 20);
        let write_chunk = |len: usize, replaced: u64| {
            let mut batch = Batch::default();
            batch.put(Space::Data, b"chunk".to_vec(), vec![7; len]);
            batch.note_replaced_data(replaced);
            store.write(batch).unwrap();
        };
        // A file written in three pieces: each write replaces the chunk the last made.
        write_chunk(10, 0);
        write_chunk(20, 10);
        write_chunk(30, 20);
        store.sync().unwrap();
        assert_eq!(inner.replaced_data.load(Ordering::SeqCst), 0);
        // Rewritten once the store has it: its 30 bytes are garbage there.
        write_chunk(40, 30);
        write_chunk(50, 40);
        store.sync().unwrap();
        assert_eq!(inner.replaced_data.load(Ordering::SeqCst), 30);
    }

    #[test]
    fn scans_merge_more_staged_pairs_than_one_chunk() {
        let (store, inner) = staged(1 << 20);
        let key = |i: usize| format!("k{i:04}");
        for i in (0..3 * SCAN_CHUNK).step_by(3) {
            put(&inner, key(i).as_bytes(), b"inner");
        }
        for i in (0..3 * SCAN_CHUNK).filter(|i| i % 3 != 2) {
            put(&store, key(i).as_bytes(), b"staged");
        }
        let expected: Vec<String> = (0..3 * SCAN_CHUNK)
            .filter(|i| i % 3 != 2)
            .map(|i| format!("{}=staged", key(i)))
            .collect();
        assert_eq!(keys_in(&store, b"k", b"l", usize::MAX), expected);
        let after = key(SCAN_CHUNK + 7);
        let from: Vec<&String> = expected.iter().filter(|k| **k >= after).collect();
        let scanned = keys_in(&store, after.as_bytes(), b"l", usize::MAX);
        assert_eq!(scanned.iter().collect::<Vec<_>>(), from);
    }

    #[test]
    fn a_checkpoint_comes_when_staged_bytes_reach_the_bound() {
        let (store, inner) = staged(100);
        for i in 0..10 {
            // 2 + 18 bytes per pair: the sixth write finds 100 staged and hands them over.
            put(&store, format!("k{i}").as_bytes(), &[b'v'; 18]);
        }
        drop(store.shared.wait_for_checkpointer());
        assert_eq!(store.metrics().checkpoints, 1);
        assert_eq!(keys_in(&inner, b"", b"z", usize::MAX).len(), 5);
        assert_eq!(store.metrics().staged_bytes, 100);
        assert_eq!(keys_in(&store, b"", b"z", usize::MAX).len(), 10);
    }

    #[test]
    fn writers_stage_past_the_bound_while_a_checkpoint_is_held_up_and_wait_at_the_hard_bound() {
        let (store, inner) = staged(100);
        inner.allow_writes(Some(0));
        let _release = ReleaseWrites(&inner);
        // 20 bytes a pair: the sixth write hands 100 bytes to the checkpointer, which the
        // inner store holds up; the next ten stage beside it, up to the hard bound of 200.
        for i in 0..15 {
            put(&store, format!("k{i:02}").as_bytes(), &[b'v'; 17]);
        }
        assert_eq!(store.metrics().staged_bytes, 100 + 200);
        let (sender, written) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                put(&store, b"k15", &[b'v'; 17]);
                let _ = sender.send(());
            });
            let early = written.recv_timeout(std::time::Duration::from_millis(200));
            assert!(early.is_err(), "a write at the hard bound went ahead");
            inner.allow_writes(None);
            written
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("the write stayed blocked after the checkpoint");
        });
        store.sync().unwrap();
        assert_eq!(keys_in(&inner, b"", b"z", usize::MAX).len(), 16);
    }

    #[test]
    fn a_write_at_the_hard_bound_waits_for_the_checkpoint_in_progress_not_its_own() {
        let (store, inner) = staged(100);
        inner.allow_writes(Some(0));
        let _release = ReleaseWrites(&inner);
        for i in 0..15 {
            put(&store, format!("k{i:02}").as_bytes(), &[b'v'; 17]);
        }
        let (sender, written) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                put(&store, b"k15", &[b'v'; 17]);
                let _ = sender.send(());
            });
            let _release = ReleaseWrites(&inner);
            let early = written.recv_timeout(Duration::from_millis(200));
            assert!(early.is_err(), "a write at the hard bound went ahead");
            // Only the held-up checkpoint may reach the inner store: the layer the waiting
            // write hands over next is the checkpointer's to write, not the write's.
            inner.allow_writes(Some(1));
            written
                .recv_timeout(Duration::from_secs(10))
                .expect("the write waited for more than the checkpoint in progress");
        });
        let metrics = store.metrics();
        assert_eq!(metrics.held_writes, 1);
        assert!(metrics.held_write_ns > 0);
        assert_eq!(keys_in(&store, b"", b"z", usize::MAX).len(), 16);
        inner.allow_writes(None);
        store.sync().unwrap();
        assert_eq!(keys_in(&inner, b"", b"z", usize::MAX).len(), 16);
        assert_eq!(store.metrics().checkpoints, 3);
    }

    #[test]
    fn scans_go_on_while_a_checkpoint_is_held_up_in_the_inner_store() {
        let (store, inner) = staged(100);
        put(&inner, b"k", b"inner");
        inner.allow_writes(Some(0));
        let _release = ReleaseWrites(&inner);
        for i in 0..8 {
            // The sixth write hands five pairs to the checkpointer, held up inside the
            // inner store's write.
            put(&store, format!("k{i:02}").as_bytes(), &[b'v'; 17]);
        }
        while !store.shared.background.lock().busy {
            std::thread::yield_now();
        }
        let (sender, scanned) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _ = sender.send(keys_in(&store, b"", b"z", usize::MAX).len());
            });
            let _release = ReleaseWrites(&inner);
            let seen = scanned.recv_timeout(Duration::from_secs(10));
            inner.allow_writes(None);
            assert_eq!(seen, Ok(9), "a scan waited for the inner store's write");
        });
        drop(store.shared.wait_for_checkpointer());
        assert_eq!(keys_in(&store, b"", b"z", usize::MAX).len(), 9);
        assert!(store.metrics().checkpoint_write_ns > 0);
    }

    /// A stats report reads the inner store's metrics, which may wait on the inner store:
    /// writes must not wait behind the report.
    #[test]
    fn writes_go_on_while_the_inner_store_is_slow_to_report_metrics() {
        let (store, inner) = staged(1 << 20);
        let gate = inner.metrics_gate.lock();
        let (sender, written) = std::sync::mpsc::channel();
        let store = &store;
        std::thread::scope(|scope| {
            let report = scope.spawn(|| store.metrics());
            while !inner.in_metrics.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            scope.spawn(move || {
                put(store, b"k", b"v");
                let _ = sender.send(());
            });
            let outcome = written.recv_timeout(Duration::from_secs(10));
            drop(gate);
            assert_eq!(outcome, Ok(()), "a write waited for a metrics report");
            assert!(report.join().is_ok());
        });
        assert_eq!(
            store.get(Space::Meta, b"k").unwrap().as_deref(),
            Some(&b"v"[..])
        );
    }

    #[test]
    fn writers_stage_past_the_bound_while_a_sync_is_held_up() {
        let (store, inner) = staged(100);
        put(&store, b"k00", &[b'v'; 17]);
        inner.allow_writes(Some(0));
        let _release = ReleaseWrites(&inner);
        let (sender, written) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            let syncing = scope.spawn(|| store.sync());
            while store.shared.layers.read().frozen.is_none() {
                std::thread::yield_now();
            }
            // The sync holds `k00` frozen; ten more writes reach the bound and pass it.
            scope.spawn(|| {
                for i in 1..11 {
                    put(&store, format!("k{i:02}").as_bytes(), &[b'v'; 17]);
                }
                let _ = sender.send(());
            });
            let wrote = written.recv_timeout(std::time::Duration::from_secs(10));
            inner.allow_writes(None);
            wrote.expect("writers waited for the sync below the hard bound");
            syncing.join().unwrap().unwrap();
        });
        store.sync().unwrap();
        assert_eq!(keys_in(&inner, b"", b"z", usize::MAX).len(), 11);
    }

    #[test]
    fn writes_past_the_bound_slow_down_gradually() {
        let (store, _inner) = staged(1000);
        let delay = |bytes| store.shared.write_delay(bytes);
        assert_eq!(delay(1000), Duration::ZERO);
        assert_eq!(delay(1500), MAX_WRITE_DELAY / 4);
        assert!(delay(1250) < delay(1500) && delay(1500) < delay(1999));
        assert_eq!(delay(2000), MAX_WRITE_DELAY);
    }

    #[test]
    fn rewriting_a_staged_key_replaces_its_bytes() {
        let (store, _inner) = staged(100);
        put(&store, b"k0", &[b'v'; 18]);
        put(&store, b"k1", &[b'v'; 18]);
        put(&store, b"k1", b"short");
        delete(&store, b"k0");
        assert_eq!(store.metrics().staged_bytes, 2 + 7);
        assert_eq!(store.memory_bytes(), 9 * STAGED_MEMORY_PERCENT / 100);
    }

    #[test]
    fn a_failed_checkpoint_keeps_everything_staged_and_refuses_new_batches() {
        let (store, inner) = staged(10);
        put(&store, b"first", b"0123456789");
        inner.failing.store(true, Ordering::SeqCst);
        // The bound is reached: `first` goes to the checkpointer, whose write fails.
        put(&store, b"second", b"0123456789");
        drop(store.shared.wait_for_checkpointer());
        let errors = store.background_errors();
        assert_eq!(errors.count, 1, "{errors:?}");
        assert!(errors.last.is_some_and(|text| text.contains("checkpoint")));
        // Every write now retries that checkpoint first and is refused while it fails:
        // nothing more is acknowledged into memory the store cannot take.
        for key in [&b"third"[..], b"fourth"] {
            let mut batch = Batch::default();
            batch.put(Space::Meta, key.to_vec(), b"x".to_vec());
            assert!(matches!(store.write(batch), Err(StoreError::NoSpace)));
            assert_eq!(store.get(Space::Meta, key).unwrap(), None, "refused whole");
        }
        for key in [&b"first"[..], b"second"] {
            assert_eq!(
                store.get(Space::Meta, key).unwrap(),
                Some(b"0123456789".to_vec())
            );
        }
        assert!(store.sync().is_err());
        assert_eq!(inner.writes.load(Ordering::SeqCst), 0);

        inner.failing.store(false, Ordering::SeqCst);
        put(&store, b"fifth", b"5");
        store.sync().unwrap();
        assert_eq!(
            keys_in(&inner, b"", b"z", usize::MAX),
            ["fifth=5", "first=0123456789", "second=0123456789"]
        );
        // In order: `fifth` retried the failed checkpoint (`first`) and wrote the active
        // layer (`second`) before it was staged; the sync wrote `fifth`.
        assert_eq!(inner.writes.load(Ordering::SeqCst), 3);
        assert_eq!(
            store.background_errors().count,
            1,
            "foreground failures are returned, not counted"
        );
    }

    #[test]
    fn readers_never_miss_a_pair_while_checkpoints_move_it() {
        // Tiny checkpoints: nearly every write moves pairs from the layers to the inner
        // store while readers look.
        let (store, _inner) = staged(64);
        let store = Arc::new(store);
        let written = Arc::new(AtomicUsize::new(0));
        const KEYS: usize = 3000;
        let key = |i: usize| format!("k{i:05}").into_bytes();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (store, written) = (store.clone(), written.clone());
                std::thread::spawn(move || {
                    while written.load(Ordering::SeqCst) < KEYS {
                        let before = written.load(Ordering::SeqCst);
                        let mut count = 0;
                        store
                            .scan(Space::Meta, b"k", b"l", &mut |_, _| {
                                count += 1;
                                Scan::Continue
                            })
                            .unwrap();
                        assert!(count >= before, "scan saw {count} of {before} keys");
                        if before > 0 {
                            let probe = key(before - 1);
                            assert!(store.get(Space::Meta, &probe).unwrap().is_some());
                        }
                    }
                })
            })
            .collect();
        for i in 0..KEYS {
            put(store.as_ref(), &key(i), b"value");
            written.store(i + 1, Ordering::SeqCst);
        }
        for reader in readers {
            reader.join().unwrap();
        }
        assert!(store.metrics().checkpoints > 100);
    }

    #[test]
    fn a_panic_in_the_checkpointer_refuses_every_later_operation_and_hangs_no_writer() {
        let (store, inner) = staged(100);
        put(&store, b"acknowledged", b"synced before the panic");
        store.sync().unwrap();
        let synced_writes = inner.writes.load(Ordering::SeqCst);
        inner.allow_writes(Some(0));
        let _release = ReleaseWrites(&inner);
        inner.panicking.store(true, Ordering::SeqCst);
        // To the hard bound: the checkpoint handed over is held up in the inner store.
        for i in 0..15 {
            put(&store, format!("k{i:02}").as_bytes(), &[b'v'; 17]);
        }
        let (sender, written) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut batch = Batch::default();
                batch.put(Space::Meta, b"held".to_vec(), b"v".to_vec());
                let _ = sender.send(store.write(batch));
            });
            let early = written.recv_timeout(Duration::from_millis(200));
            assert!(early.is_err(), "a write at the hard bound went ahead");
            // The held-up checkpoint goes on, and panics.
            inner.allow_writes(None);
            let held = written
                .recv_timeout(Duration::from_secs(10))
                .expect("a writer waited for a checkpointer that had panicked");
            assert!(matches!(held, Err(StoreError::Poisoned(_))), "{held:?}");
        });
        let mut batch = Batch::default();
        batch.put(Space::Meta, b"later".to_vec(), b"v".to_vec());
        assert!(matches!(store.write(batch), Err(StoreError::Poisoned(_))));
        assert!(matches!(store.sync(), Err(StoreError::Poisoned(_))));
        assert!(matches!(store.poisoned(), Err(StoreError::Poisoned(_))));
        drop(store);
        // Nothing reached the inner store after the panic, not even at drop.
        assert_eq!(inner.writes.load(Ordering::SeqCst), synced_writes);
        assert_eq!(
            inner.get(Space::Meta, b"acknowledged").unwrap().as_deref(),
            Some(&b"synced before the panic"[..])
        );
    }
}
