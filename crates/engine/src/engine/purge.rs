//! Deleting an inode that has lost its last link and handle, in bounded batches.
//!
//! A file with at most `defaults::BATCH_OPS` chunks is deleted in the batch that removes
//! its last link (or closes its last handle). A larger one would need a batch of one
//! tombstone per chunk, so it is not: that batch keeps the inode, with no links, under an
//! orphan key, and after the commit the operation deletes its chunks `BATCH_OPS` at a time,
//! each batch crediting the bytes it frees to the inode's `allocated_bytes` and its owners'
//! usage, then deletes the inode with the last few. fsck is clean between any two batches
//! (the inode is an orphan whose chunks hold its allocated bytes), and a crash part way
//! leaves the orphan key, which the next read-write open purges the same way.

use crate::engine::{Engine, Txn, BLIND_DELETE_MAX_CHUNKS};
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::records::inode::{Content, FileKind, Inode};
use crate::store::{Scan, Space};

use crate::defaults::BATCH_OPS;

impl Txn<'_> {
    /// Deletes an inode with its data and xattrs, crediting its usage; one with more
    /// chunks than a batch may hold becomes an orphan purged after the commit (see the
    /// module comment).
    pub(crate) fn purge_inode(&mut self, ino: u64) -> FsResult<()> {
        let inode = match self.inode(ino) {
            Ok(inode) => inode,
            Err(FsError::NotFound) => {
                self.delete(Space::Meta, keys::orphan_key(ino));
                return Ok(());
            }
            Err(error) => return Err(error),
        };
        assert!(
            inode.nlink == 0 || inode.kind == FileKind::Directory,
            "purging linked inode {ino}"
        );
        if inode.content == Content::Chunked && !self.delete_all_chunks(ino, inode.size)? {
            self.put(Space::Meta, keys::orphan_key(ino), Vec::new());
            self.purges_due.push(ino);
            return Ok(());
        }
        if inode.kind == FileKind::Directory {
            self.dir_removed(ino);
        }
        if inode.may_have_xattrs {
            let (start, end) = keys::xattr_range(ino);
            for key in self.scan_keys(Space::Meta, &start, &end)? {
                self.delete(Space::Meta, key);
            }
        }
        self.delete(Space::Meta, keys::inode_key(ino));
        self.delete(Space::Meta, keys::orphan_key(ino));
        self.charge(&inode, -1, -(inode.allocated_bytes as i64));
        self.removed.push(inode);
        Ok(())
    }

    /// Whether dropping the last name of `inode` reads nothing from the store once begun,
    /// so that no failure can stop it half done (`Decided::join_unlink`): one name (no
    /// link records to read), no xattrs to list, no more chunks than are deleted blind.
    pub(crate) fn removal_reads_nothing(&self, inode: &Inode) -> bool {
        let chunks = inode.size.div_ceil(self.engine.chunk_bytes());
        inode.nlink == 1
            && inode.kind != FileKind::Directory
            && !inode.may_have_xattrs
            && (inode.content != Content::Chunked || chunks <= BLIND_DELETE_MAX_CHUNKS)
    }

    /// Deletes every chunk of a file of `size` bytes in this batch, unless it has more
    /// than `BATCH_OPS`: then deletes none and returns false.
    fn delete_all_chunks(&mut self, ino: u64, size: u64) -> FsResult<bool> {
        let possible = size.div_ceil(self.engine.chunk_bytes());
        // Range scans cost far more than point writes; most files are small and dense.
        if possible <= BLIND_DELETE_MAX_CHUNKS {
            // Deleting every possible chunk key is cheaper than a range scan; a hole
            // costs one tombstone.
            for chunk in 0..possible {
                self.delete(Space::Data, keys::chunk_key(ino, chunk));
            }
            return Ok(true);
        }
        let chunks = self.chunks_in(ino, 0, u64::MAX, BATCH_OPS + 1)?;
        if chunks.len() > BATCH_OPS {
            return Ok(false);
        }
        for chunk in chunks {
            self.delete(Space::Data, chunk.key);
        }
        Ok(true)
    }

    /// One batch of the purge of orphan `ino`: `BATCH_OPS` of its chunks, or, when no
    /// more are left than that, the whole inode. Returns whether the inode is gone.
    fn purge_some(&mut self, ino: u64) -> FsResult<bool> {
        let mut inode = match self.inode(ino) {
            Ok(inode) => inode,
            Err(FsError::NotFound) => {
                self.delete(Space::Meta, keys::orphan_key(ino));
                return Ok(true);
            }
            Err(error) => return Err(error),
        };
        assert!(inode.nlink == 0, "purging linked inode {ino}");
        let mut chunks = self.chunks_in(ino, 0, u64::MAX, BATCH_OPS + 1)?;
        if chunks.len() <= BATCH_OPS {
            self.purge_inode(ino)?;
            return Ok(true);
        }
        chunks.truncate(BATCH_OPS);
        let mut freed = 0;
        for chunk in chunks {
            freed += chunk.len;
            self.delete(Space::Data, chunk.key);
        }
        assert!(
            freed <= inode.allocated_bytes,
            "inode {ino}: chunks past its allocation"
        );
        inode.allocated_bytes -= freed;
        self.put_inode(&inode);
        self.charge(&inode, 0, -(freed as i64));
        Ok(false)
    }
}

impl Engine {
    /// Purges, in batches of their own, the large files this thread's last commit left as
    /// orphans (see the module comment). The operation that unlinked them has succeeded
    /// already: a failure here is logged, and the orphan waits for the next open.
    pub(crate) fn finish_purges(&self) {
        let due = std::mem::take(&mut self.write_state().purges_due);
        for ino in due {
            if let Err(error) = self.purge_in_batches(ino) {
                tracing::warn!(
                    ino,
                    %error,
                    "purging a large unlinked file failed; the next mount resumes it"
                );
            }
        }
    }

    /// Purges orphan `ino` one bounded batch at a time, taking the writer lock per batch.
    fn purge_in_batches(&self, ino: u64) -> FsResult<()> {
        loop {
            let mut txn = self.begin()?;
            let gone = txn.purge_some(ino)?;
            txn.commit()?;
            if gone {
                return Ok(());
            }
        }
    }

    /// Removes inodes that were unlinked while open when the previous daemon stopped, and
    /// large files whose purge it did not finish.
    pub(super) fn purge_orphans(&self) -> FsResult<()> {
        let orphans = self.recorded_inos(keys::all_orphans_range(), keys::decode_orphan_key)?;
        for ino in orphans {
            self.purge_in_batches(ino)?;
        }
        Ok(())
    }

    /// The inode numbers of the Meta records in `range` (orphan markers, trim records),
    /// each key decoded by `decode`.
    pub(super) fn recorded_inos(
        &self,
        (start, end): (Vec<u8>, Vec<u8>),
        decode: fn(&[u8]) -> FsResult<u64>,
    ) -> FsResult<Vec<u64>> {
        let mut inos = Vec::new();
        let mut decode_error = None;
        self.store
            .scan(Space::Meta, &start, &end, &mut |key, _| match decode(key) {
                Ok(ino) => {
                    inos.push(ino);
                    Scan::Continue
                }
                Err(error) => {
                    decode_error = Some(error);
                    Scan::Stop
                }
            })?;
        match decode_error {
            Some(error) => Err(error),
            None => Ok(inos),
        }
    }
}
