//! Small files read without a round trip: an `open` for reading asks the daemon to send
//! the whole file with its answer when it is no longer than `READ_AHEAD_BYTES`
//! (`Request::Open::read_ahead`), and the program's reads are then served from those
//! bytes while the inode's version (`state::MountState::version`) stays what it was
//! before the daemon read them. Reading a small file (a source file, a git object, a
//! header) then costs one round trip, not two; a change from either door moves the
//! version and the next read asks the daemon.
//!
//! Programs that open files they do not read (`cp -a` copies inside the daemon) would pay
//! for bytes sent for nothing: after `MISSES_TO_STOP` opens in a row whose bytes went
//! unread, the process stops asking, and asks again once every `PROBE_EVERY` opens. A
//! process keeps at most `MAX_HELD_BYTES` of such bytes at once (one that holds thousands
//! of small files open would otherwise hold all of them): past that, opens do not ask.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::fds::OpenFile;
use crate::mounts;

/// Files up to this size come with their open.
pub const READ_AHEAD_BYTES: u32 = 16 * 1024;
const MISSES_TO_STOP: u32 = 8;
const PROBE_EVERY: u32 = 64;
/// Bytes of open files' contents a process holds at most.
const MAX_HELD_BYTES: usize = 4 << 20;

/// Bytes held now, in every `WholeFile` of the process.
static HELD_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Opens in a row whose bytes went unread (at most MISSES_TO_STOP).
static MISSES: AtomicU32 = AtomicU32::new(0);
/// Opens that did not ask since asking stopped.
static SKIPPED: AtomicU32 = AtomicU32::new(0);

/// The file's bytes sent with its open, and the inode version they hold for.
pub struct WholeFile {
    data: Vec<u8>,
    version: u32,
    used: bool,
}

/// Keeps `data`, the whole file sent with the open of fast descriptor `fd`, read after
/// the inode's version `version`.
pub fn keep(fd: i64, data: Vec<u8>, version: u32) {
    let Some(file) = crate::fds::get(fd) else {
        return;
    };
    HELD_BYTES.fetch_add(data.len(), Ordering::Relaxed);
    let kept = WholeFile {
        data,
        version,
        used: false,
    };
    if let Ok(mut whole) = file.whole.lock() {
        *whole = Some(kept);
    };
}

impl Drop for WholeFile {
    fn drop(&mut self) {
        HELD_BYTES.fetch_sub(self.data.len(), Ordering::Relaxed);
        if self.used {
            MISSES.store(0, Ordering::Relaxed);
        } else {
            let misses = MISSES.load(Ordering::Relaxed);
            MISSES.store((misses + 1).min(MISSES_TO_STOP), Ordering::Relaxed);
        }
    }
}

/// How many bytes an `open` with `flags` asks to come with it (0: none).
pub fn to_ask(flags: i32) -> u32 {
    let reading_only = flags & libc::O_ACCMODE == libc::O_RDONLY
        && flags & (libc::O_CREAT | libc::O_TRUNC | libc::O_DIRECTORY) == 0;
    let room = HELD_BYTES.load(Ordering::Relaxed) + READ_AHEAD_BYTES as usize <= MAX_HELD_BYTES;
    if !reading_only || !room {
        return 0;
    }
    if MISSES.load(Ordering::Relaxed) < MISSES_TO_STOP {
        return READ_AHEAD_BYTES;
    }
    let skipped = SKIPPED.fetch_add(1, Ordering::Relaxed) + 1;
    if skipped.is_multiple_of(PROBE_EVERY) {
        READ_AHEAD_BYTES
    } else {
        0
    }
}

/// Copies `file`'s bytes from `offset` into `fill` (which takes what fits and says how
/// much it took), if they came with the open and still hold; the byte count, 0 at the
/// end of the file. None: the daemon must be asked.
pub fn read(file: &OpenFile, offset: u64, fill: impl FnOnce(&[u8]) -> usize) -> Option<usize> {
    let mut whole = file.whole.lock().ok()?;
    let kept = whole.as_mut()?;
    let state = mounts::all().get(file.mount)?.state.get()?;
    if state.version(file.ino) != kept.version {
        // Changed since it was read: the daemon has the bytes now.
        *whole = None;
        return None;
    }
    kept.used = true;
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(kept.data.len());
    let taken = fill(&kept.data[start..]);
    crate::stats::note_whole_file_read();
    Some(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_ask_only_while_the_bytes_held_leave_room() {
        let read_only = libc::O_RDONLY | libc::O_CLOEXEC;
        assert_eq!(to_ask(read_only), READ_AHEAD_BYTES);
        assert_eq!(to_ask(libc::O_WRONLY), 0);
        assert_eq!(to_ask(libc::O_RDONLY | libc::O_CREAT), 0);
        let held = WholeFile {
            data: vec![0; MAX_HELD_BYTES - READ_AHEAD_BYTES as usize + 1],
            version: 1,
            used: true,
        };
        HELD_BYTES.fetch_add(held.data.len(), Ordering::Relaxed);
        assert_eq!(to_ask(read_only), 0, "no room left");
        drop(held);
        assert_eq!(to_ask(read_only), READ_AHEAD_BYTES, "room again");
    }
}
