//! fallocate(2): preallocation, punching holes and zeroing ranges.
//!
//! shoal has no blocks to reserve: a file's bytes are chunks in the store, and a missing
//! chunk is a hole that reads as zeros. So preallocation only sets the size (the new range
//! is a hole), and punching or zeroing a range removes the chunks it covers whole and
//! zeroes the covered part of the others. Usage follows the bytes the store holds, as for
//! writes and truncates: holes cost nothing, and punching gives bytes back. Preallocation
//! past the end of the file is checked against the quota as a write of those bytes would
//! be, so `EDQUOT` comes from fallocate, as a program that preallocates expects.

use crate::engine::{Engine, Txn};
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::limits::MAX_FILE_BYTES;
use crate::records::inode::{Content, FileKind, Inode};
use crate::stats::Op;
use crate::store::Space;

/// What fallocate does to its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallocate {
    /// Make the range part of the file (mode 0): extends the size unless `keep_size`.
    Allocate { keep_size: bool },
    /// Deallocate the range (`FALLOC_FL_PUNCH_HOLE`, always with `KEEP_SIZE`): it reads
    /// as zeros and holds no bytes; the size never changes.
    PunchHole,
    /// Zero the range (`FALLOC_FL_ZERO_RANGE`), as a hole; extends the size unless
    /// `keep_size`.
    ZeroRange { keep_size: bool },
}

const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

impl Fallocate {
    /// The operation a fallocate(2) `mode` asks for; `None` for modes shoal does not offer
    /// (collapse, insert, unshare: EOPNOTSUPP) and for a hole punch without KEEP_SIZE.
    pub fn from_mode(mode: i32) -> Option<Fallocate> {
        let keep_size = mode & FALLOC_FL_KEEP_SIZE != 0;
        match mode & !FALLOC_FL_KEEP_SIZE {
            0 => Some(Fallocate::Allocate { keep_size }),
            FALLOC_FL_PUNCH_HOLE if keep_size => Some(Fallocate::PunchHole),
            FALLOC_FL_ZERO_RANGE => Some(Fallocate::ZeroRange { keep_size }),
            _ => None,
        }
    }

    fn keeps_size(self) -> bool {
        match self {
            Fallocate::Allocate { keep_size } | Fallocate::ZeroRange { keep_size } => keep_size,
            Fallocate::PunchHole => true,
        }
    }
}

impl Engine {
    /// fallocate(2) on `[offset, offset + length)` of regular file `ino`.
    pub fn fallocate(&self, ino: u64, offset: u64, length: u64, op: Fallocate) -> FsResult<()> {
        self.stats().count(Op::Setattr);
        if length == 0 {
            return Err(FsError::Invalid("fallocate of an empty range"));
        }
        let end = offset.checked_add(length).ok_or(FsError::FileTooBig)?;
        if end > MAX_FILE_BYTES && !op.keeps_size() {
            return Err(FsError::FileTooBig);
        }
        let mut txn = self.begin()?;
        let mut inode = txn.inode(ino)?;
        match inode.kind {
            FileKind::Regular => {}
            FileKind::Directory => return Err(FsError::IsDir),
            _ => return Err(FsError::Invalid("fallocate of a special file")),
        }
        let allocated_before = inode.allocated_bytes;
        let size_before = inode.size;
        if matches!(op, Fallocate::Allocate { .. }) && end > size_before {
            txn.check_quota(&inode, (end - size_before) as i64)?;
        }
        if matches!(op, Fallocate::PunchHole | Fallocate::ZeroRange { .. }) {
            let stop = end.min(inode.size);
            txn.zero_range(&mut inode, offset, stop)?;
        }
        if !op.keeps_size() && end > inode.size {
            // Zero-extends: a hole for a chunked file, zeros inline for a small one.
            txn.truncate(&mut inode, end)?;
        }
        if inode.size == size_before && matches!(op, Fallocate::Allocate { .. }) {
            // Nothing to reserve, nothing changed.
            return Ok(());
        }
        inode.mtime = txn.now;
        inode.ctime = txn.now;
        txn.charge(
            &inode,
            0,
            inode.allocated_bytes as i64 - allocated_before as i64,
        );
        txn.put_inode(&inode);
        txn.inode_changed(&inode, size_before)?;
        txn.commit()
    }
}

impl Txn<'_> {
    /// Makes `[start, stop)` (within the size) read as zeros, freeing whole chunks: the
    /// partly covered chunks at its edges are zeroed or shortened, the chunks wholly
    /// inside are deleted, in bounded batches (see `trim`).
    fn zero_range(&mut self, inode: &mut Inode, start: u64, stop: u64) -> FsResult<()> {
        if start >= stop {
            return Ok(());
        }
        if let Content::Inline(bytes) = &mut inode.content {
            // An inline file's bytes always cover its size (see `data`).
            bytes[start as usize..stop as usize].fill(0);
            return Ok(());
        }
        let chunk_bytes = self.engine.chunk_bytes();
        let (head, tail) = (start / chunk_bytes, stop / chunk_bytes);
        let head_partial = !start.is_multiple_of(chunk_bytes);
        let tail_partial = !stop.is_multiple_of(chunk_bytes);
        if head_partial {
            self.zero_in_chunk(inode, head, start, stop)?;
        }
        // A range inside one chunk has that chunk as head and tail: zeroed once.
        let tail_done = head_partial && tail == head;
        if tail_partial && !tail_done {
            self.zero_in_chunk(inode, tail, start, stop)?;
        }
        // Only chunks that exist cost anything: a huge range over holes is one scan.
        self.delete_chunks(inode, start.div_ceil(chunk_bytes), tail, false)
    }

    /// Zeroes the part of chunk `chunk` that `[start, stop)` covers.
    fn zero_in_chunk(
        &mut self,
        inode: &mut Inode,
        chunk: u64,
        start: u64,
        stop: u64,
    ) -> FsResult<()> {
        let chunk_bytes = self.engine.chunk_bytes();
        let key = keys::chunk_key(inode.ino, chunk);
        let Some(mut value) = self.get(Space::Data, &key)? else {
            return Ok(());
        };
        let chunk_start = chunk * chunk_bytes;
        debug_assert!(chunk_start < stop && start < chunk_start + chunk_bytes);
        let from = (start.max(chunk_start) - chunk_start) as usize;
        let to = ((stop - chunk_start).min(chunk_bytes) as usize).min(value.len());
        if from >= to {
            return Ok(());
        }
        let old_len = value.len() as u64;
        if to == value.len() {
            // The tail goes: a chunk shorter than its span reads as zeros past its end.
            value.truncate(from);
        } else {
            value[from..to].fill(0);
        }
        inode.allocated_bytes = inode.allocated_bytes - old_len + value.len() as u64;
        if value.is_empty() {
            self.delete(Space::Data, key);
        } else {
            self.put(Space::Data, key, value);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_map_to_operations() {
        assert_eq!(
            Fallocate::from_mode(0),
            Some(Fallocate::Allocate { keep_size: false })
        );
        assert_eq!(
            Fallocate::from_mode(1),
            Some(Fallocate::Allocate { keep_size: true })
        );
        assert_eq!(Fallocate::from_mode(3), Some(Fallocate::PunchHole));
        assert_eq!(Fallocate::from_mode(2), None, "punch needs KEEP_SIZE");
        assert_eq!(
            Fallocate::from_mode(0x11),
            Some(Fallocate::ZeroRange { keep_size: true })
        );
        assert_eq!(Fallocate::from_mode(0x08), None, "collapse range");
        assert_eq!(Fallocate::from_mode(0x20), None, "insert range");
    }
}
