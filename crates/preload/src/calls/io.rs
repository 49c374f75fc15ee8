//! Reads, writes, seeks, directory listings and syncs on fast descriptors.

use std::sync::atomic::{AtomicBool, Ordering};

use shoal_fastpath::{
    DirEntryWire, Reply, Request, MAX_IO_BYTES, NAME_MAX_BYTES, READDIR_BATCH_ENTRIES,
};

use super::open::{handle_of, NoHandle};
use super::{ask, copy_out, fail, kernel, Answer};
use crate::fds::{self, OpenFile};
use crate::{mounts, stats};

/// A read or write the daemon left to the kernel: made there once the offset lock is
/// released (the conversion to a kernel descriptor reads the offset).
const TO_KERNEL: i64 = i64::MIN;

/// Whether writes ask for the file's attributes with their answer: once the process has
/// asked the daemon for those of a file open for writing (an `fstat` after a write, which
/// made what was known stale: `git` records every file it checks out), from then on.
/// `tar x`, which never does, pays nothing for them.
static WRITES_WANT_ATTRS: AtomicBool = AtomicBool::new(false);

/// An `fstat` of a file open for writing had to ask the daemon (see `WRITES_WANT_ATTRS`).
pub fn attrs_wanted_after_writes() {
    WRITES_WANT_ATTRS.store(true, Ordering::Relaxed);
}

/// The call's result, or the kernel's when the daemon left it to the kernel.
fn finish(nr: i64, args: [i64; 6], result: i64) -> i64 {
    if result == TO_KERNEL {
        kernel(nr, args, &[0])
    } else {
        result
    }
}

/// One chunk of a read or write, at most MAX_IO_BYTES.
fn chunk(remaining: usize) -> usize {
    remaining.min(MAX_IO_BYTES)
}

/// An iovec array as (pointer, length) pairs.
fn iovecs(ptr: i64, count: i64) -> Result<Vec<(i64, usize)>, i32> {
    if !(0..=1024).contains(&count) {
        return Err(libc::EINVAL);
    }
    let mut out = Vec::with_capacity(count as usize);
    for index in 0..count as usize {
        // SAFETY: the program passed `count` iovecs at `ptr`, as readv(2) requires.
        let iov = unsafe { std::ptr::read_unaligned((ptr as *const libc::iovec).add(index)) };
        out.push((iov.iov_base as i64, iov.iov_len));
    }
    Ok(out)
}

pub fn read(nr: i64, args: [i64; 6]) -> Option<i64> {
    let file = fds::get(args[0])?;
    if file.directory {
        return Some(fail(libc::EISDIR));
    }
    if !file.readable() {
        return Some(fail(libc::EBADF));
    }
    let buffers = match nr {
        libc::SYS_readv => match iovecs(args[1], args[2]) {
            Ok(buffers) => buffers,
            Err(errno) => return Some(fail(errno)),
        },
        _ => vec![(args[1], args[2] as usize)],
    };
    if nr == libc::SYS_pread64 {
        if args[3] < 0 {
            return Some(fail(libc::EINVAL));
        }
        let result = read_at(nr, &file, &buffers, args[3] as u64).map_or_else(|r| r, |(n, _)| n);
        return Some(finish(nr, args, result));
    }
    let mut offset = file.lock_offset();
    let result = match read_at(nr, &file, &buffers, *offset) {
        Ok((n, end)) => {
            *offset = end;
            n
        }
        Err(result) => result,
    };
    drop(offset);
    Some(finish(nr, args, result))
}

/// Fills `buffers` from `offset` until they are full or the file ends; returns the byte
/// count and the offset after them (or what the call returns instead).
fn read_at(
    nr: i64,
    file: &OpenFile,
    buffers: &[(i64, usize)],
    offset: u64,
) -> Result<(i64, u64), i64> {
    // One request per MAX_IO_BYTES of the whole vector, not one per iovec: readv of many
    // small buffers is one read to the kernel too.
    let wanted: usize = buffers.iter().map(|&(_, len)| len).sum();
    let mut cursor = IovCursor::new(buffers);
    let from_open = crate::whole_file::read(file, offset, |bytes| {
        let taken = bytes.len().min(wanted);
        cursor.scatter(&bytes[..taken]);
        taken
    });
    if let Some(taken) = from_open {
        crate::stats::note(nr, crate::stats::Way::Fast);
        return Ok((taken as i64, offset + taken as u64));
    }
    let handle = handle_or_return(file)?;
    let mut position = offset;
    let mut total = 0usize;
    while total < wanted {
        let want = chunk(wanted - total) as u32;
        let request = Request::Read {
            handle,
            offset: position,
            len: want,
        };
        let data = match ask(nr, file.mount, &request) {
            Answer::Done(Reply::Data(data)) => data,
            Answer::Done(_) => return Err(fail(libc::EPROTO)),
            Answer::Errno(errno) if total == 0 => return Err(fail(errno)),
            Answer::Errno(_) => break,
            Answer::Kernel => return Err(TO_KERNEL),
        };
        let got = data.len().min(want as usize);
        cursor.scatter(&data[..got]);
        total += got;
        position += got as u64;
        if got < want as usize {
            break;
        }
    }
    Ok((total as i64, position))
}

/// A position in a program's iovec array: where the next bytes go or come from.
struct IovCursor<'a> {
    buffers: &'a [(i64, usize)],
    index: usize,
    within: usize,
}

impl<'a> IovCursor<'a> {
    fn new(buffers: &'a [(i64, usize)]) -> Self {
        IovCursor {
            buffers,
            index: 0,
            within: 0,
        }
    }

    /// Copies `bytes` into the buffers from the cursor on.
    fn scatter(&mut self, mut bytes: &[u8]) {
        while let (Some(&(ptr, len)), false) = (self.buffers.get(self.index), bytes.is_empty()) {
            let n = (len - self.within).min(bytes.len());
            // SAFETY: the program's iovec holds `len` bytes; `within + n <= len`.
            unsafe { copy_out(ptr + self.within as i64, &bytes[..n]) };
            bytes = &bytes[n..];
            self.advance(n, len);
        }
    }

    /// Appends up to `max` bytes from the buffers to `out`.
    fn gather(&mut self, max: usize, out: &mut Vec<u8>) {
        while let Some(&(ptr, len)) = self.buffers.get(self.index) {
            if out.len() >= max {
                break;
            }
            let n = (len - self.within).min(max - out.len());
            // SAFETY: the program's iovec holds `len` bytes; `within + n <= len`.
            let bytes =
                unsafe { std::slice::from_raw_parts((ptr + self.within as i64) as *const u8, n) };
            out.extend_from_slice(bytes);
            self.advance(n, len);
        }
    }

    fn advance(&mut self, n: usize, len: usize) {
        self.within += n;
        if self.within >= len {
            self.index += 1;
            self.within = 0;
        }
    }
}

pub fn write(nr: i64, args: [i64; 6]) -> Option<i64> {
    let file = fds::get(args[0])?;
    if file.directory || !file.writable() {
        return Some(fail(libc::EBADF));
    }
    let buffers = match nr {
        libc::SYS_writev => match iovecs(args[1], args[2]) {
            Ok(buffers) => buffers,
            Err(errno) => return Some(fail(errno)),
        },
        _ => vec![(args[1], args[2] as usize)],
    };
    let append = file.status_flags() & libc::O_APPEND != 0;
    if nr == libc::SYS_pwrite64 {
        if args[3] < 0 {
            return Some(fail(libc::EINVAL));
        }
        // Linux appends a pwrite to an O_APPEND file, whatever its offset.
        let result =
            write_at(nr, &file, &buffers, args[3] as u64, append).map_or_else(|r| r, |(n, _)| n);
        return Some(finish(nr, args, result));
    }
    let mut offset = file.lock_offset();
    let result = match write_at(nr, &file, &buffers, *offset, append) {
        Ok((n, end)) => {
            *offset = end;
            n
        }
        Err(result) => result,
    };
    drop(offset);
    Some(finish(nr, args, result))
}

fn write_at(
    nr: i64,
    file: &OpenFile,
    buffers: &[(i64, usize)],
    offset: u64,
    append: bool,
) -> Result<(i64, u64), i64> {
    let wanted: usize = buffers.iter().map(|&(_, len)| len).sum();
    let mut cursor = IovCursor::new(buffers);
    let handle = handle_or_return(file)?;
    let mut position = offset;
    let mut total = 0usize;
    while total < wanted {
        let mut data = Vec::with_capacity(chunk(wanted - total));
        cursor.gather(chunk(wanted - total), &mut data);
        let n = data.len();
        let request = Request::Write {
            handle,
            offset: position,
            append,
            data,
            with_attr: total + n == wanted && WRITES_WANT_ATTRS.load(Ordering::Relaxed),
        };
        let (written, end) = match ask(nr, file.mount, &request) {
            Answer::Done(Reply::Written { written, end }) => (written as usize, end),
            Answer::Done(Reply::WrittenAt {
                written,
                end,
                attr,
                version,
                no_xattrs,
            }) => {
                crate::listings::remember_known(file, version, attr, no_xattrs);
                (written as usize, end)
            }
            Answer::Done(_) => return Err(fail(libc::EPROTO)),
            Answer::Errno(errno) if total == 0 => return Err(fail(errno)),
            Answer::Errno(_) => break,
            Answer::Kernel => return Err(TO_KERNEL),
        };
        file.written.store(true, Ordering::Relaxed);
        total += written;
        position = end;
        if written < n {
            break;
        }
    }
    let total = total as i64;
    if file.status_flags() & (libc::O_SYNC | libc::O_DSYNC) != 0 {
        if let Answer::Errno(errno) = ask(nr, file.mount, &Request::Fsync { handle }) {
            return Err(fail(errno));
        }
    }
    Ok((total, position))
}

pub fn lseek(args: [i64; 6]) -> Option<i64> {
    let file = fds::get(args[0])?;
    let (offset, whence) = (args[1], args[2] as i32);
    if file.directory {
        return Some(seek_directory(&file, offset, whence));
    }
    let base = match whence {
        libc::SEEK_SET => 0,
        libc::SEEK_CUR => *file.lock_offset() as i64,
        libc::SEEK_END => match super::stat::descriptor_attributes(libc::SYS_lseek, &file) {
            Ok(Some((_, attr))) => attr.size as i64,
            Ok(None) => return Some(kernel(libc::SYS_lseek, args, &[0])),
            Err(errno) => return Some(fail(errno)),
        },
        // SEEK_DATA, SEEK_HOLE: the kernel knows the rules.
        _ => return Some(kernel(libc::SYS_lseek, args, &[0])),
    };
    let Some(target) = base.checked_add(offset).filter(|t| *t >= 0) else {
        return Some(fail(libc::EINVAL));
    };
    *file.lock_offset() = target as u64;
    Some(target)
}

/// A directory's offsets are entry counts: 0 rewinds, a position telldir gave resumes.
fn seek_directory(file: &OpenFile, offset: i64, whence: i32) -> i64 {
    let mut cursor = file.lock_cursor();
    let target = match whence {
        libc::SEEK_SET => offset,
        libc::SEEK_CUR => cursor.position as i64 + offset,
        _ => return fail(libc::EINVAL),
    };
    if target < 0 {
        return fail(libc::EINVAL);
    }
    if target as u64 != cursor.position {
        *cursor = crate::fds::DirCursor::default();
        drop(cursor);
        skip_entries(file, target as u64);
    }
    target
}

fn skip_entries(file: &OpenFile, count: u64) {
    let mut cursor = file.lock_cursor();
    while cursor.position < count {
        if cursor.front().is_none() && (cursor.done || fetch(file, &mut cursor).is_err()) {
            break;
        }
        if cursor.front().is_some() {
            cursor.advance();
        }
    }
    cursor.note_last_returned();
}

fn fetch(file: &OpenFile, cursor: &mut crate::fds::DirCursor) -> Result<(), i64> {
    if let Some(page) = cursor.prefetched.take() {
        // Sent with the open: what a listing now would be while nothing has changed.
        if !cursor.started && crate::listings::changes_now(file.mount) == Some(page.changes) {
            stats::note(libc::SYS_getdents64, stats::Way::Fast);
            take_page(cursor, page.entries, page.done, page.changes);
            return Ok(());
        }
    }
    let from_start = !cursor.started;
    let handle = match handle_of(file) {
        Ok(handle) => handle,
        Err(NoHandle::Errno(errno)) => return Err(fail(errno)),
        Err(NoHandle::Kernel) => return Err(fail(libc::EIO)),
    };
    let request = Request::ReadDir {
        handle,
        after: if cursor.started {
            cursor.after.clone()
        } else {
            None
        },
        max: READDIR_BATCH_ENTRIES,
        with_attrs: crate::listings::want_attrs(),
    };
    match ask(libc::SYS_getdents64, file.mount, &request) {
        Answer::Done(Reply::Entries {
            entries,
            done,
            changes,
            dir_version,
        }) => {
            let whole = done && from_start;
            crate::listings::remember(file.mount, file.ino, changes, dir_version, &entries, whole);
            take_page(cursor, entries, done, changes);
            Ok(())
        }
        Answer::Done(_) => Err(fail(libc::EPROTO)),
        Answer::Errno(errno) => Err(fail(errno)),
        Answer::Kernel => Err(fail(libc::EIO)),
    }
}

/// A page of entries from the daemon, listed when the count was `changes`, into the listing
/// in progress (the page before it all returned).
fn take_page(
    cursor: &mut crate::fds::DirCursor,
    entries: Vec<DirEntryWire>,
    done: bool,
    changes: u64,
) {
    cursor.whole = (!cursor.started && done).then_some(changes);
    cursor.started = true;
    if let Some(last) = entries
        .iter()
        .rev()
        .find(|e| !matches!(&e.name[..], b"." | b".."))
    {
        cursor.after = Some(last.name.to_vec());
    }
    cursor.done = done;
    cursor.page = entries;
    cursor.next = 0;
}

/// The daemon's handle of `file` (`open::handle_of`), or what a read or write returns
/// without one (`TO_KERNEL`: the kernel serves it).
fn handle_or_return(file: &OpenFile) -> Result<u64, i64> {
    match handle_of(file) {
        Ok(handle) => Ok(handle),
        Err(NoHandle::Errno(errno)) => Err(fail(errno)),
        Err(NoHandle::Kernel) => Err(TO_KERNEL),
    }
}

/// Header of a linux_dirent64: d_ino, d_off, d_reclen, d_type.
const DIRENT_HEADER: usize = 19;
/// The longest record: a name of NAME_MAX bytes, its NUL, padded to 8.
const DIRENT_MAX: usize = (DIRENT_HEADER + NAME_MAX_BYTES + 1).next_multiple_of(8);

pub fn getdents64(args: [i64; 6]) -> Option<i64> {
    let file = fds::get(args[0])?;
    if !file.directory {
        return Some(fail(libc::ENOTDIR));
    }
    let (buf, size) = (args[1], args[2] as usize);
    let mut cursor = file.lock_cursor();
    let mut used = 0usize;
    // Built on the stack: a listing of 30k entries made as many allocations. Zeroed once:
    // each record writes its header and name and zeroes the rest of its length.
    let mut record = [0u8; DIRENT_MAX];
    loop {
        if cursor.front().is_none() {
            if cursor.done {
                break;
            }
            if let Err(result) = fetch(&file, &mut cursor) {
                cursor.note_last_returned();
                return Some(if used > 0 { used as i64 } else { result });
            }
            if cursor.front().is_none() {
                break;
            }
        }
        let Some(entry) = cursor.front() else {
            break;
        };
        let reclen = (DIRENT_HEADER + entry.name.len() + 1).next_multiple_of(8);
        if reclen > DIRENT_MAX {
            // The daemon keeps names to NAME_MAX: this one is not a name.
            cursor.note_last_returned();
            return Some(if used > 0 {
                used as i64
            } else {
                fail(libc::EIO)
            });
        }
        if used + reclen > size {
            if used == 0 {
                return Some(fail(libc::EINVAL));
            }
            break;
        }
        let name_end = DIRENT_HEADER + entry.name.len();
        record[0..8].copy_from_slice(&entry.ino.to_ne_bytes());
        record[8..16].copy_from_slice(&((cursor.position + 1) as i64).to_ne_bytes());
        record[16..18].copy_from_slice(&(reclen as u16).to_ne_bytes());
        record[18] = entry.kind;
        record[DIRENT_HEADER..name_end].copy_from_slice(&entry.name);
        // The name's NUL and the padding to 8 bytes.
        record[name_end..reclen].fill(0);
        // SAFETY: the program's buffer holds `size` bytes; `used + reclen <= size`.
        unsafe { copy_out(buf + used as i64, &record[..reclen]) };
        used += reclen;
        cursor.advance();
    }
    cursor.note_last_returned();
    Some(used as i64)
}

pub fn fsync(nr: i64, args: [i64; 6]) -> Option<i64> {
    let file = fds::get(args[0])?;
    let answer = match handle_of(&file) {
        Ok(handle) => ask(nr, file.mount, &Request::Fsync { handle }),
        Err(NoHandle::Errno(errno)) => Answer::Errno(errno),
        Err(NoHandle::Kernel) => Answer::Kernel,
    };
    Some(match answer {
        Answer::Done(_) => 0,
        Answer::Errno(errno) => fail(errno),
        Answer::Kernel => kernel(nr, args, &[0]),
    })
}

/// sync(2) and syncfs(2): the kernel does not pass syncfs on to a FUSE daemon, so the
/// fast path asks every daemon (sync) or the descriptor's (syncfs) itself, then the
/// kernel does the rest.
pub fn sync(nr: i64, args: [i64; 6]) -> Option<i64> {
    let mut targets: Vec<usize> = Vec::new();
    if nr == libc::SYS_sync {
        targets.extend((0..mounts::all().len()).filter(|&i| mounts::all()[i].usable()));
    } else if let Some(file) = fds::get(args[0]) {
        targets.push(file.mount);
    } else if let Some(mount) = mount_of_kernel_fd(args[0]) {
        targets.push(mount);
    }
    for mount in targets {
        if let Answer::Errno(errno) = ask(nr, mount, &Request::Sync) {
            return Some(fail(errno));
        }
    }
    Some(kernel(
        nr,
        args,
        if nr == libc::SYS_syncfs { &[0] } else { &[] },
    ))
}

fn mount_of_kernel_fd(fd: i64) -> Option<usize> {
    if !(0..=i64::from(i32::MAX)).contains(&fd) {
        return None;
    }
    // SAFETY: stat is plain data; all zeroes is a valid value.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if crate::sys::fstat(fd as i32, &mut stat) < 0 {
        return None;
    }
    mounts::all()
        .iter()
        .position(|m| m.usable() && m.dev() == stat.st_dev)
}

/// copy_file_range(2) between two fast descriptors of one mount, inside the daemon (cp
/// copies every file with it); any other pair goes to the kernel.
pub fn copy_file_range(args: [i64; 6]) -> Option<i64> {
    let (from, to) = (fds::get(args[0])?, fds::get(args[2])?);
    if from.mount != to.mount {
        return None;
    }
    if args[5] != 0 {
        return Some(fail(libc::EINVAL));
    }
    if to.status_flags() & libc::O_APPEND != 0 {
        return Some(fail(libc::EBADF));
    }
    let (from_offset, to_offset) = match (
        offset_argument(args[1], &from),
        offset_argument(args[3], &to),
    ) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(errno), _) | (_, Err(errno)) => return Some(fail(errno)),
    };
    if at_known_end(&from, &to, from_offset) {
        // What the daemon would answer: nothing to copy past the end of the source.
        crate::stats::note(libc::SYS_copy_file_range, crate::stats::Way::Fast);
        return Some(0);
    }
    let handles = handle_of(&from).and_then(|from| Ok((from, handle_of(&to)?)));
    let (from_handle, to_handle) = match handles {
        Ok(handles) => handles,
        Err(NoHandle::Errno(errno)) => return Some(fail(errno)),
        Err(NoHandle::Kernel) => return Some(kernel(libc::SYS_copy_file_range, args, &[0, 2])),
    };
    let request = Request::CopyRange {
        from: from_handle,
        from_offset,
        to: to_handle,
        to_offset,
        len: args[4] as u64,
    };
    let copied = match ask(libc::SYS_copy_file_range, from.mount, &request) {
        Answer::Done(Reply::Written { written, .. }) => written,
        Answer::Done(_) => return Some(fail(libc::EPROTO)),
        Answer::Errno(errno) => return Some(fail(errno)),
        Answer::Kernel => return Some(kernel(libc::SYS_copy_file_range, args, &[0, 2])),
    };
    advance_offset(args[1], &from, copied);
    advance_offset(args[3], &to, copied);
    Some(copied as i64)
}

/// Whether a copy from `from_offset` of `from` into `to` is known to copy nothing, as the
/// kernel answers it without asking the filesystem: two files (fast descriptors are
/// regular files or directories) open for it, and the offset at or past the source's
/// size while the daemon's last word on it holds (cp's last call of every file, after
/// one that copied it whole).
fn at_known_end(from: &OpenFile, to: &OpenFile, from_offset: u64) -> bool {
    if from.directory || to.directory || !from.readable() || !to.writable() || from.ino == to.ino {
        return false;
    }
    crate::listings::known_attr(from).is_some_and(|attr| from_offset >= attr.size)
}

/// The offset a copy starts at: the one the program passed, or the file's own.
fn offset_argument(ptr: i64, file: &OpenFile) -> Result<u64, i32> {
    if ptr == 0 {
        return Ok(*file.lock_offset());
    }
    // SAFETY: the program passed a pointer to a loff_t, as copy_file_range(2) requires.
    let offset = unsafe { std::ptr::read_unaligned(ptr as *const i64) };
    u64::try_from(offset).map_err(|_| libc::EINVAL)
}

fn advance_offset(ptr: i64, file: &OpenFile, by: u64) {
    if ptr == 0 {
        *file.lock_offset() += by;
    } else {
        // SAFETY: as in `offset_argument`: the program's loff_t, updated as the kernel does.
        unsafe {
            let offset = std::ptr::read_unaligned(ptr as *const i64);
            std::ptr::write_unaligned(ptr as *mut i64, offset + by as i64);
        }
    }
}

/// posix_fadvise(2) on a fast descriptor: hints for a page cache it does not use; checked
/// as the kernel checks them, then nothing to do.
pub fn fadvise(args: [i64; 6]) -> Option<i64> {
    fds::get(args[0])?;
    let advice = args[3];
    Some(if args[2] < 0 || !(0..=5).contains(&advice) {
        fail(libc::EINVAL)
    } else {
        0
    })
}
