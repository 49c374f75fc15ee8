//! File bytes and attribute changes: read, write, truncate, setattr.
//!
//! A file up to the inline threshold keeps its bytes in the inode record (one key per small
//! file); past it, bytes live in fixed-size chunks keyed by (ino, index). Missing chunks
//! are holes and read as zeros. An inline file's byte vector always has the file's length.

use crate::defaults;
use crate::engine::{Engine, Txn};
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::limits::{COPY_RANGE_MAX_BYTES, COPY_RANGE_PIECE_BYTES, MAX_FILE_BYTES};
use crate::records::inode::{Content, FileKind, Inode, Timestamp, S_ISGID, S_ISUID, S_IXGRP};
use crate::stats::Op;
use crate::store::{Scan, SharedBytes, Space};

/// The xattr holding file capabilities, which writes and chown clear like setuid.
const SECURITY_CAPABILITY: &[u8] = b"security.capability";

/// What `write_killing_privileges` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Bytes written: all of them.
    pub bytes: u32,
    /// Set-id bits were cleared: the kernel's cached mode is stale (it learns of modes
    /// from attribute replies, and a write's reply carries none).
    pub mode_changed: bool,
}

/// The bytes of a write: the caller's, copied into the store's buffers, or already in
/// one (a chunk `copy_range` shares), put as they are where they make a whole new chunk.
enum WriteBytes<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
    Shared(SharedBytes),
}

impl std::ops::Deref for WriteBytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            WriteBytes::Borrowed(bytes) => bytes,
            WriteBytes::Owned(bytes) => bytes,
            WriteBytes::Shared(bytes) => bytes,
        }
    }
}

/// A time to set: a given instant, or the time of the operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    Now,
    At(Timestamp),
}

/// Attribute changes of one setattr; `None` leaves a field alone.
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    pub perm: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    pub ctime: Option<Timestamp>,
    /// Clear setuid, setgid when group-executable, and file capabilities, as a write or
    /// truncate by an unprivileged caller or any chown must (the kernel leaves this to the
    /// filesystem with FUSE_HANDLE_KILLPRIV_V2). Applied before an explicit `perm`.
    pub kill_suidgid: bool,
}

impl Engine {
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        self.stats().count(Op::Read);
        let inode = self.read_inode(ino)?;
        self.read_of(&inode, offset, size)
    }

    /// `read` of `inode` as the caller already read it: its bytes as they are now, up to
    /// its size then.
    pub fn read_from(&self, inode: &Inode, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        self.stats().count(Op::Read);
        self.read_of(inode, offset, size)
    }

    /// `read` of `inode` as already read.
    fn read_of(&self, inode: &Inode, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let ino = inode.ino;
        match inode.kind {
            FileKind::Regular => {}
            FileKind::Directory => return Err(FsError::IsDir),
            _ => return Err(FsError::Invalid("read of a special file")),
        }
        if offset >= inode.size || size == 0 {
            return Ok(Vec::new());
        }
        let end = inode.size.min(offset.saturating_add(u64::from(size)));
        match &inode.content {
            Content::Inline(bytes) => {
                let (start, end) = (offset as usize, end as usize);
                debug_assert!(
                    bytes.len() as u64 == inode.size,
                    "inline length != size for ino {ino}"
                );
                Ok(bytes
                    .get(start..end.min(bytes.len()))
                    .unwrap_or(&[])
                    .to_vec())
            }
            Content::Chunked => self.read_chunks(ino, offset, end),
        }
    }

    /// Bytes `[offset, end)` of a chunked file; holes read as zeros.
    fn read_chunks(&self, ino: u64, offset: u64, end: u64) -> FsResult<Vec<u8>> {
        let chunk_bytes = self.chunk_bytes();
        let mut out = vec![0u8; (end - offset) as usize];
        let first = offset / chunk_bytes;
        let last = (end - 1) / chunk_bytes;
        let start_key = keys::chunk_key(ino, first);
        if first == last {
            // One chunk (every small file): a point read. A range scan sets up a merge of
            // the memtables and every table first, 10-20 µs; `cp -a` of a tree of small
            // files spent 8% of the daemon's time there.
            if let Some(value) = self.store().get_shared(Space::Data, &start_key)? {
                copy_chunk(&mut out, offset, end, first * chunk_bytes, &value);
            }
            return Ok(out);
        }
        let end_key = keys::chunk_key(ino, last + 1);
        let mut decode_error = None;
        self.store()
            .scan(Space::Data, &start_key, &end_key, &mut |key, value| {
                let chunk = match keys::decode_chunk_key(key) {
                    Ok((_, chunk)) => chunk,
                    Err(error) => {
                        decode_error = Some(error);
                        return Scan::Stop;
                    }
                };
                copy_chunk(&mut out, offset, end, chunk * chunk_bytes, value);
                Scan::Continue
            })?;
        match decode_error {
            Some(error) => Err(error),
            None => Ok(out),
        }
    }

    /// Writes `data` at `offset`; returns the bytes written (all of them).
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        self.write_killing_privileges(ino, offset, data, false)
            .map(|written| written.bytes)
    }

    /// A write that also clears setuid/setgid and capabilities when `kill_suidgid` (see
    /// `SetAttr::kill_suidgid`), in the same batch.
    pub fn write_killing_privileges(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        kill_suidgid: bool,
    ) -> FsResult<Written> {
        self.write_bytes(ino, offset, WriteBytes::Borrowed(data), kill_suidgid)
    }

    fn write_bytes(
        &self,
        ino: u64,
        offset: u64,
        bytes: WriteBytes<'_>,
        kill_suidgid: bool,
    ) -> FsResult<Written> {
        self.stats().count(Op::Write);
        let length = bytes.len();
        if length == 0 {
            // POSIX: a zero-length write changes nothing (not even the size).
            return Ok(Written::default());
        }
        write_end(offset, length as u64)?;
        let mut txn = self.begin()?;
        let mut inode = txn.inode(ino)?;
        let size_before = inode.size;
        let now = txn.now;
        let mode_changed = txn.write_into(&mut inode, offset, bytes, kill_suidgid, now)?;
        txn.put_inode(&inode);
        txn.inode_changed(&inode, size_before)?;
        txn.commit()?;
        Ok(Written {
            bytes: length as u32,
            mode_changed,
        })
    }

    /// A write of `data` at `offset` (made at `written_at`, set-id bits killed when
    /// `kill_suidgid`) and then `changes`, in order, as one operation: what `write` and
    /// each `setattr` in turn leave, in one batch. The fast path applies this way a file's
    /// last write and the times and mode a caller set right after it, all answered before
    /// they were applied (`tar x` writes, then sets times, then the mode); `written_at`
    /// was fixed before the first change was answered, so the changes' times come after
    /// the write's, as they would one by one.
    pub fn write_then_setattrs(
        &self,
        ino: u64,
        (offset, data): (u64, &[u8]),
        kill_suidgid: bool,
        written_at: Timestamp,
        changes: &[SetAttr],
    ) -> FsResult<Inode> {
        self.stats().count(Op::Write);
        for _ in changes {
            self.stats().count(Op::Setattr);
        }
        write_end(offset, data.len() as u64)?;
        let mut txn = self.begin()?;
        let mut inode = txn.inode(ino)?;
        let size_before = inode.size;
        if !data.is_empty() {
            let bytes = WriteBytes::Borrowed(data);
            txn.write_into(&mut inode, offset, bytes, kill_suidgid, written_at)?;
        }
        txn.put_changed(&mut inode, size_before, changes)?;
        txn.commit()?;
        Ok(inode)
    }

    /// Copies up to `len` bytes from `ino_in` at `offset_in` to `ino_out` at `offset_out`
    /// inside the engine (copy_file_range): the bytes never cross the kernel. Stops at the
    /// source's end and after `COPY_RANGE_MAX_BYTES` (the caller asks again for the rest, as
    /// copy_file_range's callers do); returns the bytes copied. Each piece is its own write
    /// batch, as a copy through read(2) and write(2) would be.
    pub fn copy_range(
        &self,
        ino_in: u64,
        offset_in: u64,
        ino_out: u64,
        offset_out: u64,
        len: u64,
    ) -> FsResult<u64> {
        let mut copied: u64 = 0;
        let wanted = len.min(COPY_RANGE_MAX_BYTES);
        while copied < wanted {
            let (from, to) = (
                offset_in.saturating_add(copied),
                offset_out.saturating_add(copied),
            );
            // Read once per piece, for both ways of copying and for where the source ends:
            // a file's inode holding its bytes (up to 4 KiB) is too large for the read
            // cache, each read of it goes to the LSM.
            let source = self.read_inode(ino_in)?;
            let length =
                if let Some(chunk) = self.whole_chunk_of(&source, from, to, wanted - copied)? {
                    let length = chunk.len() as u64;
                    self.write_bytes(ino_out, to, WriteBytes::Shared(chunk), false)?;
                    length
                } else {
                    let piece = (wanted - copied).min(COPY_RANGE_PIECE_BYTES);
                    self.stats().count(Op::Read);
                    let bytes = self.read_of(&source, from, piece as u32)?;
                    if bytes.is_empty() {
                        break;
                    }
                    let written = self.write(ino_out, to, &bytes)?;
                    assert_eq!(
                        written as usize,
                        bytes.len(),
                        "a write takes all of its bytes"
                    );
                    bytes.len() as u64
                };
            copied += length;
            if from.saturating_add(length) >= source.size {
                // The source ended there when read: asking again would read an empty piece.
                break;
            }
        }
        Ok(copied)
    }

    /// A copy of `len` bytes from `ino_in` at `offset_in` to `ino_out` at `offset_out`
    /// (made at `written_at`) and then `changes` of `ino_out`, in order, as one operation:
    /// what `copy_range` and each `setattr` in turn leave, in one batch. The fast path
    /// applies this way a copy it answered before applying it and the times and mode set
    /// right after it (`cp -a`). `len` is what the copy answered: the source holds that
    /// many bytes there (nothing could change it since). Returns the bytes copied.
    pub fn copy_then_setattrs(
        &self,
        (ino_in, offset_in): (u64, u64),
        (ino_out, offset_out): (u64, u64),
        len: u64,
        written_at: Timestamp,
        changes: &[SetAttr],
    ) -> FsResult<u64> {
        assert!(
            len <= COPY_RANGE_PIECE_BYTES,
            "one piece: an answered copy is small"
        );
        self.stats().count(Op::Read);
        self.stats().count(Op::Write);
        for _ in changes {
            self.stats().count(Op::Setattr);
        }
        let source = self.read_inode(ino_in)?;
        let mut txn = self.begin()?;
        let mut inode = txn.inode(ino_out)?;
        let size_before = inode.size;
        let mut copied = 0;
        while copied < len {
            let (from, to) = (offset_in + copied, offset_out + copied);
            // Whole chunks are shared, as `copy_range` shares them; the rest is read.
            let bytes = match self.whole_chunk_of(&source, from, to, len - copied)? {
                Some(chunk) => WriteBytes::Shared(chunk),
                None => WriteBytes::Owned(self.read_of(&source, from, (len - copied) as u32)?),
            };
            if bytes.is_empty() {
                break;
            }
            copied += bytes.len() as u64;
            txn.write_into(&mut inode, to, bytes, false, written_at)?;
        }
        txn.put_changed(&mut inode, size_before, changes)?;
        txn.commit()?;
        Ok(copied)
    }

    /// The stored chunk of `inode` starting at `offset`, when a copy of up to `len` bytes
    /// from there to `to` can take it whole: both offsets on a chunk boundary, and the
    /// chunk holds every byte of the copy's part of it (a short chunk with zeros read
    /// after it does not). The copy then puts the same buffer again: no byte is copied.
    fn whole_chunk_of(
        &self,
        inode: &Inode,
        offset: u64,
        to: u64,
        len: u64,
    ) -> FsResult<Option<SharedBytes>> {
        let chunk_bytes = self.chunk_bytes();
        if !offset.is_multiple_of(chunk_bytes) || !to.is_multiple_of(chunk_bytes) {
            return Ok(None);
        }
        let ino = inode.ino;
        if inode.kind != FileKind::Regular
            || !matches!(inode.content, Content::Chunked)
            || offset >= inode.size
        {
            return Ok(None);
        }
        let part = len.min(inode.size - offset).min(chunk_bytes);
        let key = keys::chunk_key(ino, offset / chunk_bytes);
        let chunk = self
            .store()
            .get_shared(Space::Data, &key)?
            .filter(|chunk| chunk.len() as u64 == part);
        // A chunk shorter than a blob is read as a view into its table block: put again
        // as it is, it would hold the whole block in memory until the next flush.
        Ok(chunk.map(|chunk| {
            if chunk.len() < defaults::BLOB_MIN_BYTES as usize {
                SharedBytes::from(&chunk[..])
            } else {
                chunk
            }
        }))
    }

    pub fn setattr(&self, ino: u64, change: &SetAttr) -> FsResult<Inode> {
        self.setattrs(ino, std::slice::from_ref(change))
    }

    /// `changes` of one inode, in order, as one operation: what applying each with
    /// `setattr` leaves, in one batch. The fast path applies this way the mode and time
    /// changes a caller made one after the other and had answered before they were
    /// applied (`tar x` sets a file's times and then its mode): each change alone rewrote
    /// the inode and the usage of every directory above it.
    pub fn setattrs(&self, ino: u64, changes: &[SetAttr]) -> FsResult<Inode> {
        assert!(!changes.is_empty(), "a setattr changes something");
        for _ in changes {
            self.stats().count(Op::Setattr);
        }
        let mut txn = self.begin()?;
        let mut inode = match txn.inode(ino) {
            Err(FsError::NotFound) if self.is_unlinked(ino) => {
                drop(txn);
                let mut changed = Err(FsError::NotFound);
                for change in changes {
                    changed = Ok(self.setattr_unlinked(ino, change)?);
                }
                return changed;
            }
            result => result?,
        };
        let size_before = inode.size;
        txn.put_changed(&mut inode, size_before, changes)?;
        txn.commit()?;
        Ok(inode)
    }

    /// A setattr on a removed inode: nothing reaches the store (there is nothing left to
    /// change there); the kernel's copy gets what it asked for.
    fn setattr_unlinked(&self, ino: u64, change: &SetAttr) -> FsResult<Inode> {
        let now = Timestamp::now();
        self.unlinked().update(ino, |inode| {
            if let Some(perm) = change.perm {
                inode.perm = perm & 0o7777;
            }
            inode.uid = change.uid.unwrap_or(inode.uid);
            inode.gid = change.gid.unwrap_or(inode.gid);
            if let Some(size) = change.size {
                inode.size = size;
            }
            if let Some(atime) = change.atime {
                inode.atime = resolve(atime, now);
            }
            if let Some(mtime) = change.mtime {
                inode.mtime = resolve(mtime, now);
            }
            inode.ctime = change.ctime.unwrap_or(now);
        })
    }
}

impl Txn<'_> {
    /// A write's `bytes` at `offset` made to `inode` (not yet put) at `now`: data, size,
    /// times, set-id bits killed when `kill_suidgid`, usage charged. Whether the mode
    /// changed.
    fn write_into(
        &mut self,
        inode: &mut Inode,
        offset: u64,
        bytes: WriteBytes<'_>,
        kill_suidgid: bool,
        now: Timestamp,
    ) -> FsResult<bool> {
        match inode.kind {
            FileKind::Regular => {}
            FileKind::Directory => return Err(FsError::IsDir),
            _ => return Err(FsError::Invalid("write to a special file")),
        }
        let end = offset + bytes.len() as u64;
        let allocated_before = inode.allocated_bytes;
        if matches!(inode.content, Content::Inline(_)) && end <= self.engine.inline_max_bytes() {
            write_inline(inode, offset, &bytes);
        } else {
            self.make_chunked(inode);
            match bytes {
                WriteBytes::Borrowed(data) => self.write_chunks(inode, offset, data)?,
                WriteBytes::Owned(data) => self.write_chunks(inode, offset, &data)?,
                WriteBytes::Shared(data) => self.append_chunk(inode, offset, data)?,
            }
            inode.size = inode.size.max(end);
        }
        inode.mtime = now;
        inode.ctime = now;
        let mode_changed = kill_suidgid && self.kill_privileges(inode);
        self.charge(
            inode,
            0,
            inode.allocated_bytes as i64 - allocated_before as i64,
        );
        Ok(mode_changed)
    }

    /// `changes` made to `inode` in turn, then the inode put and its usage moved from
    /// `size_before` (the size it had when the operation began).
    fn put_changed(
        &mut self,
        inode: &mut Inode,
        size_before: u64,
        changes: &[SetAttr],
    ) -> FsResult<()> {
        for change in changes {
            self.set_attributes_of(inode, change)?;
        }
        self.put_inode(inode);
        self.inode_changed(inode, size_before)
    }

    /// One setattr's `change` made to `inode` (not yet put): checks, truncation, quota
    /// moves with ownership, killed privileges, mode, times, and an access ACL kept in
    /// step with the mode.
    fn set_attributes_of(&mut self, inode: &mut Inode, change: &SetAttr) -> FsResult<()> {
        let now = self.now;
        if let Some(size) = change.size {
            match inode.kind {
                FileKind::Regular => {}
                FileKind::Directory => return Err(FsError::IsDir),
                _ => return Err(FsError::Invalid("truncate of a special file")),
            }
            if size > MAX_FILE_BYTES {
                return Err(FsError::FileTooBig);
            }
            let allocated_before = inode.allocated_bytes;
            self.truncate(inode, size)?;
            self.charge(
                inode,
                0,
                inode.allocated_bytes as i64 - allocated_before as i64,
            );
            inode.mtime = now;
        }
        if changes_owner(inode, change) {
            // Usage moves with ownership, in this same batch; never refused (see `quota`).
            self.force_quota();
            self.charge(inode, -1, -(inode.allocated_bytes as i64));
            change_owner(inode, change);
            self.charge(inode, 1, inode.allocated_bytes as i64);
        }
        if change.kill_suidgid {
            // The setattr reply carries the new mode to the kernel.
            self.kill_privileges(inode);
        }
        change_mode_and_times(inode, change, now);
        if change.perm.is_some() {
            self.chmod_acl(inode)?;
        }
        Ok(())
    }
}

/// Where a write of `length` bytes at `offset` ends: EFBIG past the largest file.
fn write_end(offset: u64, length: u64) -> FsResult<u64> {
    let end = offset.checked_add(length).ok_or(FsError::FileTooBig)?;
    if end > MAX_FILE_BYTES {
        return Err(FsError::FileTooBig);
    }
    Ok(end)
}

/// What a setattr of the owner, mode and times only (no size, no privileges killed) makes
/// of `inode` at `now`: the attributes `Engine::setattr` leaves, for a caller that answers
/// before applying it (fix `change.ctime` and explicit times, and they are exactly these).
pub fn set_attributes(inode: &Inode, change: &SetAttr, now: Timestamp) -> Inode {
    assert!(
        change.size.is_none() && !change.kill_suidgid,
        "not a pure attribute change"
    );
    let mut inode = inode.clone();
    if changes_owner(&inode, change) {
        change_owner(&mut inode, change);
    }
    change_mode_and_times(&mut inode, change, now);
    inode
}

/// The permission bits a write or truncation by an unprivileged caller leaves a file that
/// is not a directory: without setuid, and without setgid when group-executable (as the
/// kernel's `should_remove_suid`).
pub fn perm_without_privileges(inode: &Inode) -> u16 {
    let mut perm = inode.perm & !S_ISUID;
    if perm & S_IXGRP != 0 {
        perm &= !S_ISGID;
    }
    perm
}

fn changes_owner(inode: &Inode, change: &SetAttr) -> bool {
    change.uid.is_some_and(|uid| uid != inode.uid) || change.gid.is_some_and(|gid| gid != inode.gid)
}

fn change_owner(inode: &mut Inode, change: &SetAttr) {
    inode.uid = change.uid.unwrap_or(inode.uid);
    inode.gid = change.gid.unwrap_or(inode.gid);
    // chown clears setuid, and setgid when group-executable (as the kernel does for
    // local filesystems); the kernel sends an explicit mode when it wants otherwise.
    if inode.kind != FileKind::Directory && change.perm.is_none() {
        inode.perm &= !S_ISUID;
        if inode.perm & S_IXGRP != 0 {
            inode.perm &= !S_ISGID;
        }
    }
}

fn change_mode_and_times(inode: &mut Inode, change: &SetAttr, now: Timestamp) {
    if let Some(perm) = change.perm {
        inode.perm = perm & 0o7777;
    }
    if let Some(atime) = change.atime {
        inode.atime = resolve(atime, now);
    }
    if let Some(mtime) = change.mtime {
        inode.mtime = resolve(mtime, now);
    }
    inode.ctime = change.ctime.unwrap_or(now);
}

impl SetTime {
    /// The time this sets at `now`.
    pub fn resolved(self, now: Timestamp) -> Timestamp {
        resolve(self, now)
    }
}

pub(crate) fn resolve(time: SetTime, now: Timestamp) -> Timestamp {
    match time {
        SetTime::Now => now,
        SetTime::At(at) => at,
    }
}

pub(crate) fn write_inline(inode: &mut Inode, offset: u64, data: &[u8]) {
    let Content::Inline(bytes) = &mut inode.content else {
        unreachable!("write_inline on a chunked inode")
    };
    overwrite(bytes, offset as usize, data);
    inode.size = bytes.len() as u64;
    inode.allocated_bytes = inode.size;
}

/// Puts `data` at `at` in `bytes`, zero-filling any gap before it and growing `bytes` as
/// needed; bytes past the end are appended, not zeroed first and then copied over.
fn overwrite(bytes: &mut Vec<u8>, at: usize, data: &[u8]) {
    if bytes.len() < at {
        bytes.resize(at, 0);
    }
    let overlap = (bytes.len() - at).min(data.len());
    bytes[at..at + overlap].copy_from_slice(&data[..overlap]);
    bytes.extend_from_slice(&data[overlap..]);
}

impl Txn<'_> {
    /// Clears setuid, setgid when group-executable, and the file capability xattr;
    /// whether the mode changed.
    fn kill_privileges(&mut self, inode: &mut Inode) -> bool {
        if inode.kind == FileKind::Directory {
            return false;
        }
        let before = inode.perm;
        inode.perm = perm_without_privileges(inode);
        if inode.may_have_xattrs {
            self.delete(Space::Meta, keys::xattr_key(inode.ino, SECURITY_CAPABILITY));
        }
        inode.perm != before
    }

    /// Moves an inline file's bytes into chunk 0 before it grows past the threshold.
    pub(crate) fn make_chunked(&mut self, inode: &mut Inode) {
        if let Content::Inline(bytes) = std::mem::replace(&mut inode.content, Content::Chunked) {
            assert!(bytes.len() as u64 <= self.engine.chunk_bytes());
            if !bytes.is_empty() {
                self.put(Space::Data, keys::chunk_key(inode.ino, 0), bytes);
            }
        }
    }

    /// Writes `data` at `offset` of a chunked file; a whole new chunk (at a chunk
    /// boundary at or past the size, at most a chunk long) is stored as it is.
    pub(crate) fn append_chunk(
        &mut self,
        inode: &mut Inode,
        offset: u64,
        data: SharedBytes,
    ) -> FsResult<()> {
        let chunk_bytes = self.engine.chunk_bytes();
        let whole_new_chunk = offset.is_multiple_of(chunk_bytes)
            && offset >= inode.size
            && data.len() as u64 <= chunk_bytes;
        if !whole_new_chunk {
            return self.write_chunks(inode, offset, &data);
        }
        inode.allocated_bytes += data.len() as u64;
        self.put_shared(
            Space::Data,
            keys::chunk_key(inode.ino, offset / chunk_bytes),
            data,
        );
        Ok(())
    }

    pub(crate) fn write_chunks(
        &mut self,
        inode: &mut Inode,
        offset: u64,
        data: &[u8],
    ) -> FsResult<()> {
        let chunk_bytes = self.engine.chunk_bytes();
        let mut written = 0usize;
        while written < data.len() {
            let position = offset + written as u64;
            let chunk = position / chunk_bytes;
            let within = (position % chunk_bytes) as usize;
            let take = (chunk_bytes as usize - within).min(data.len() - written);
            let key = keys::chunk_key(inode.ino, chunk);
            let new_chunk = chunk * chunk_bytes >= inode.size;
            if new_chunk && within == 0 {
                // Made in the store's own buffer type, the checkpoint hands these bytes
                // to the store's journal and memtable without copying them again.
                inode.allocated_bytes += take as u64;
                let bytes = SharedBytes::from(&data[written..written + take]);
                self.put_shared(Space::Data, key, bytes);
                written += take;
                continue;
            }
            // No chunk reaches past the size (fsck checks it): a chunk starting at or
            // after it is new, and an appending write (every import) reads nothing.
            let stored = if new_chunk {
                None
            } else {
                self.get_shared(Space::Data, &key)?
            };
            if let Some(stored) = stored.as_ref().filter(|stored| stored.len() == within) {
                // Goes on where the chunk's bytes end (`tar x` writes a file in records):
                // the chunk is made once, in the store's buffer type, from both parts.
                self.note_replaced_data(stored.len() as u64);
                inode.allocated_bytes += take as u64;
                let appended = byteview::ByteView::fused(stored, &data[written..written + take]);
                self.put_shared(Space::Data, key, SharedBytes::from(appended));
                written += take;
                continue;
            }
            let mut bytes = match stored {
                Some(stored) => stored.to_vec(),
                None => Vec::with_capacity(within + take),
            };
            let old_len = bytes.len() as u64;
            self.note_replaced_data(old_len);
            overwrite(&mut bytes, within, &data[written..written + take]);
            inode.allocated_bytes = inode.allocated_bytes - old_len + bytes.len() as u64;
            self.put(Space::Data, key, bytes);
            written += take;
        }
        Ok(())
    }

    /// Sets a regular file's size: drops or trims chunks past it, zero-extends, and moves
    /// a file that became small back inline.
    pub(crate) fn truncate(&mut self, inode: &mut Inode, size: u64) -> FsResult<()> {
        let inline_max = self.engine.inline_max_bytes();
        if let Content::Inline(bytes) = &mut inode.content {
            if size <= inline_max {
                bytes.resize(size as usize, 0);
                inode.size = size;
                inode.allocated_bytes = size;
                return Ok(());
            }
            self.make_chunked(inode);
        }
        let chunk_bytes = self.engine.chunk_bytes();
        if size < inode.size {
            // In bounded batches: a large file's tail may go after this batch (see `trim`).
            let first_dropped = size.div_ceil(chunk_bytes);
            self.delete_chunks(inode, first_dropped, u64::MAX, false)?;
            let partial = size % chunk_bytes;
            if partial != 0 {
                let key = keys::chunk_key(inode.ino, size / chunk_bytes);
                if let Some(mut bytes) = self.get(Space::Data, &key)? {
                    if bytes.len() as u64 > partial {
                        self.note_replaced_data(bytes.len() as u64);
                        inode.allocated_bytes -= bytes.len() as u64 - partial;
                        bytes.truncate(partial as usize);
                        self.put(Space::Data, key, bytes);
                    }
                }
            }
        }
        inode.size = size;
        // Chunks left for later batches must stay chunks of a chunked file (fsck, and
        // their bytes in `allocated_bytes`); the file is small either way.
        if size <= inline_max && !self.trim_pending(inode.ino) {
            self.make_inline(inode)?;
        }
        Ok(())
    }

    /// Gathers a small chunked file back into its inode record.
    fn make_inline(&mut self, inode: &mut Inode) -> FsResult<()> {
        let mut bytes = vec![0u8; inode.size as usize];
        let (start, end) = keys::chunk_range(inode.ino);
        for key in self.scan_keys(Space::Data, &start, &end)? {
            let (_, chunk) = keys::decode_chunk_key(&key)?;
            let value = self.get(Space::Data, &key)?.unwrap_or_default();
            let chunk_start = chunk * self.engine.chunk_bytes();
            if chunk_start < inode.size {
                let take = value.len().min((inode.size - chunk_start) as usize);
                bytes[chunk_start as usize..chunk_start as usize + take]
                    .copy_from_slice(&value[..take]);
            }
            self.delete(Space::Data, key);
        }
        inode.allocated_bytes = inode.size;
        inode.content = Content::Inline(bytes);
        Ok(())
    }
}

/// Copies the part of the chunk starting at byte `chunk_start` (its stored bytes `value`)
/// that falls in `[offset, end)` into `out`, which holds `[offset, end)`.
fn copy_chunk(out: &mut [u8], offset: u64, end: u64, chunk_start: u64, value: &[u8]) {
    let copy_start = offset.max(chunk_start);
    let copy_end = end.min(chunk_start + value.len() as u64);
    if copy_start < copy_end {
        let src = &value[(copy_start - chunk_start) as usize..(copy_end - chunk_start) as usize];
        let dst_start = (copy_start - offset) as usize;
        out[dst_start..dst_start + src.len()].copy_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::overwrite;

    #[test]
    fn overwrite_fills_gaps_with_zeros_keeps_the_rest_and_appends() {
        let mut bytes = Vec::new();
        overwrite(&mut bytes, 2, b"ab");
        assert_eq!(bytes, b"\0\0ab");
        overwrite(&mut bytes, 1, b"xyz");
        assert_eq!(bytes, b"\0xyz");
        overwrite(&mut bytes, 0, b"1");
        assert_eq!(bytes, b"1xyz");
        overwrite(&mut bytes, 4, b"");
        assert_eq!(bytes, b"1xyz");
        overwrite(&mut bytes, 6, b"");
        assert_eq!(bytes, b"1xyz\0\0");
    }
}
