//! Deleting a file's chunks in a range (a truncate, a hole punch) in bounded batches.
//!
//! A range holding at most `defaults::BATCH_OPS` chunks goes in the operation's own batch.
//! A larger one would need a batch of one tombstone per chunk, so it does not: the
//! operation's batch sets the new size, trims the partial chunks at the edges, deletes the
//! range's first `BATCH_OPS` chunks and records the rest under a trim key (`T ino -> from,
//! to`). The transaction then keeps the writer lock and deletes the rest `BATCH_OPS`
//! chunks per batch, each batch crediting the bytes it frees to the inode's
//! `allocated_bytes` and its owners' usage, the last deleting the record. No other write
//! runs in between, so no write can expose a chunk left past a truncated size; reads do
//! not read past the size, so a truncated file looks truncated from the first batch on (a
//! reader racing a hole punch may see chunks of the hole until its last batch, as it may
//! see the data before the call). fsck is clean between any two batches (chunks past the
//! size are in a recorded range, and the inode's allocation is what its chunks hold), and
//! a crash part way leaves the record, which the next read-write open finishes before
//! anything else is written. A batch that fails leaves the record too; the next
//! transaction to start finishes it first.

use super::{Engine, Txn};
use crate::defaults::BATCH_OPS;
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::records::inode::Inode;
use crate::store::{Scan, Space};

/// A chunk as the store has it: key, index and stored length.
pub(crate) struct StoredChunk {
    pub(crate) key: Vec<u8>,
    pub(crate) index: u64,
    pub(crate) len: u64,
}

impl Txn<'_> {
    /// Up to `limit` chunks of `ino` with indexes in `[from, to)`, in order.
    pub(crate) fn chunks_in(
        &self,
        ino: u64,
        from: u64,
        to: u64,
        limit: usize,
    ) -> FsResult<Vec<StoredChunk>> {
        let start = keys::chunk_key(ino, from);
        let end = match to {
            u64::MAX => keys::chunk_range(ino).1,
            to => keys::chunk_key(ino, to),
        };
        let mut found = Vec::new();
        let mut decode_error = None;
        self.engine
            .store
            .scan_lengths(Space::Data, &start, &end, &mut |key, len| {
                match keys::decode_chunk_key(key) {
                    Ok((_, index)) => found.push(StoredChunk {
                        key: key.to_vec(),
                        index,
                        len,
                    }),
                    Err(error) => {
                        decode_error = Some(error);
                        return Scan::Stop;
                    }
                }
                if found.len() < limit {
                    Scan::Continue
                } else {
                    Scan::Stop
                }
            })?;
        match decode_error {
            Some(error) => Err(error),
            None => Ok(found),
        }
    }

    /// Deletes the chunks of `inode` with indexes in `[from, to)`, taking their bytes off
    /// its `allocated_bytes`: all of them, or, when there are more than a batch may hold,
    /// the first `BATCH_OPS` in this batch and the rest after the commit (see the module
    /// comment). `recorded` says a trim record for the range exists already.
    pub(crate) fn delete_chunks(
        &mut self,
        inode: &mut Inode,
        from: u64,
        to: u64,
        recorded: bool,
    ) -> FsResult<()> {
        if from >= to {
            return Ok(());
        }
        let mut chunks = self.chunks_in(inode.ino, from, to, BATCH_OPS + 1)?;
        let rest_from = (chunks.len() > BATCH_OPS).then(|| chunks[BATCH_OPS].index);
        chunks.truncate(BATCH_OPS);
        for chunk in chunks {
            assert!(
                chunk.len <= inode.allocated_bytes,
                "inode {}: chunk {} past its allocation",
                inode.ino,
                chunk.index
            );
            inode.allocated_bytes -= chunk.len;
            self.delete(Space::Data, chunk.key);
        }
        match rest_from {
            Some(rest_from) => {
                let record = keys::encode_trim(rest_from, to);
                self.put(Space::Meta, keys::trim_key(inode.ino), record);
                if !self.trims_due.contains(&inode.ino) {
                    self.trims_due.push(inode.ino);
                }
            }
            None if recorded => self.delete(Space::Meta, keys::trim_key(inode.ino)),
            None => {}
        }
        Ok(())
    }

    /// Whether a part of `ino`'s chunks is left for later batches of this transaction.
    pub(crate) fn trim_pending(&self, ino: u64) -> bool {
        self.trims_due.contains(&ino)
    }

    /// One batch of the recorded trim of `ino`. Returns whether the trim is finished.
    fn trim_some(&mut self, ino: u64) -> FsResult<bool> {
        let Some(record) = self.get(Space::Meta, &keys::trim_key(ino))? else {
            return Ok(true);
        };
        let (from, to) = keys::decode_trim(&record)?;
        let mut inode = match self.inode(ino) {
            Ok(inode) => inode,
            Err(FsError::NotFound) => {
                self.delete(Space::Meta, keys::trim_key(ino));
                return Ok(true);
            }
            Err(error) => return Err(error),
        };
        let allocated_before = inode.allocated_bytes;
        self.trims_due.retain(|&due| due != ino);
        self.delete_chunks(&mut inode, from, to, true)?;
        self.put_inode(&inode);
        self.charge(
            &inode,
            0,
            inode.allocated_bytes as i64 - allocated_before as i64,
        );
        Ok(!self.trims_due.contains(&ino))
    }

    /// Runs the trims this transaction left (and any a failed batch left before it) to
    /// their end, one committed batch each, keeping the writer lock throughout. A failure
    /// leaves them to the next transaction to start (`Engine::begin`).
    pub(crate) fn finish_trims(&mut self) -> FsResult<()> {
        let mut due = std::mem::take(&mut self.state.trims_unfinished);
        due.append(&mut self.trims_due);
        while let Some(&ino) = due.first() {
            let step = self.trim_some(ino).and_then(|done| {
                self.write_out()?;
                Ok(done)
            });
            match step {
                Ok(true) => {
                    due.remove(0);
                }
                Ok(false) => {}
                Err(error) => {
                    self.trims_due.clear();
                    self.state.trims_unfinished = due;
                    return Err(error);
                }
            }
        }
        Ok(())
    }
}

impl Engine {
    /// Finishes the trims a previous daemon left part way (see the module comment).
    pub(super) fn finish_recorded_trims(&self) -> FsResult<()> {
        let inos = self.recorded_inos(keys::all_trims_range(), keys::decode_trim_key)?;
        if inos.is_empty() {
            return Ok(());
        }
        let mut txn = self.begin()?;
        txn.trims_due = inos;
        txn.finish_trims()
    }
}
