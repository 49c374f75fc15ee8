//! The mount's state: memory the daemon writes and every client maps read-only, holding
//! the mount's change count, which grows with every change the engine makes through either
//! door, by any process, and one version per slot of inodes (an inode's slot is its number
//! modulo `VERSION_SLOTS`), which grows with every change to the attributes or extended
//! attributes of an inode in the slot. A client keeps what the daemon told it (a listing's
//! attributes, an open file's attributes) only while the count or the version stays what
//! it was before the daemon read them, so it never answers from anything older than the
//! last change. Versions let a program's changes to one file (cp's copy) leave what it
//! knows of another (the source) standing; inodes sharing a slot only cost a round trip.
//!
//! The daemon makes the memfd, maps it writable, then seals it against resizing and
//! against any later writable mapping (F_SEAL_FUTURE_WRITE): a client can map it only
//! read-only, so no process can make another one trust stale attributes.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Slots of per-inode versions: 128 KiB of u32, about one slot per inode of a tree of
/// 30k files (inode numbers are handed out in runs, so a tree's inodes spread evenly).
pub const VERSION_SLOTS: usize = 1 << 15;
/// Where the change count lives.
const CHANGES: usize = 0;
/// Where the version slots start (the first page holds the count).
const VERSIONS: usize = 4096;
const STATE_BYTES: usize = VERSIONS + VERSION_SLOTS * 4;

/// Seals a client requires before it trusts the state.
const REQUIRED_SEALS: i32 =
    libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SEAL;

/// One mapping of the mount's state.
pub struct MountState {
    base: *mut u8,
}

// SAFETY: the mapping is shared memory accessed only through atomic words.
unsafe impl Send for MountState {}
// SAFETY: as above; every access is atomic.
unsafe impl Sync for MountState {}

impl Drop for MountState {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this value owns.
        unsafe { libc::munmap(self.base.cast(), STATE_BYTES) };
    }
}

impl MountState {
    /// The daemon's side: a new page, mapped writable, then sealed; the descriptor is
    /// passed to each client with its Hello answer.
    pub fn create() -> io::Result<(MountState, OwnedFd)> {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: memfd_create with a static NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"shoal-mount-state".as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sizing our own memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), STATE_BYTES as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let state = map(&fd, libc::PROT_READ | libc::PROT_WRITE)?;
        // SAFETY: sealing our own memfd; the writable mapping made above stays writable.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, REQUIRED_SEALS) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((state, fd))
    }

    /// A client's side: maps the daemon's page read-only after checking its seals and size.
    pub fn attach(fd: &OwnedFd) -> io::Result<MountState> {
        // SAFETY: reading the seals of a descriptor we hold.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & REQUIRED_SEALS != REQUIRED_SEALS {
            return Err(io::Error::other("mount state page is not sealed"));
        }
        // SAFETY: stat is plain data; all zeroes is a valid value.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat into a valid out-buffer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0
            || stat.st_size != STATE_BYTES as libc::off_t
        {
            return Err(io::Error::other("mount state page has the wrong size"));
        }
        map(fd, libc::PROT_READ)
    }

    fn changes_word(&self) -> &AtomicU64 {
        // SAFETY: CHANGES is an 8-byte aligned offset inside the page-aligned mapping,
        // which lives as long as `self`; the word is only ever accessed atomically.
        unsafe { AtomicU64::from_ptr(self.base.add(CHANGES).cast()) }
    }

    /// The mount's change count now.
    pub fn changes(&self) -> u64 {
        self.changes_word().load(Ordering::Acquire)
    }

    /// The daemon's side: publishes the count after a change is visible to readers.
    /// Only the daemon's writable mapping may call it (a client's would fault).
    pub fn publish(&self, changes: u64) {
        self.changes_word().store(changes, Ordering::Release);
    }

    fn version_word(&self, ino: u64) -> &AtomicU32 {
        let slot = (ino % VERSION_SLOTS as u64) as usize;
        // SAFETY: VERSIONS + slot * 4 is a 4-byte aligned offset inside the mapping, which
        // lives as long as `self`; the word is only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(self.base.add(VERSIONS + slot * 4).cast()) }
    }

    /// The version of `ino`'s slot now. The daemon reads it before it reads the inode's
    /// attributes for a reply: they hold while the version stays.
    pub fn version(&self, ino: u64) -> u32 {
        self.version_word(ino).load(Ordering::Acquire)
    }

    /// The daemon's side: `ino`'s attributes changed and the change is visible to readers.
    pub fn bump(&self, ino: u64) {
        self.version_word(ino).fetch_add(1, Ordering::AcqRel);
    }
}

fn map(fd: &OwnedFd, protection: i32) -> io::Result<MountState> {
    // SAFETY: a shared mapping of STATE_BYTES of a memfd that size.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STATE_BYTES,
            protection,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(MountState { base: base.cast() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_sees_what_the_daemon_publishes_and_cannot_write() {
        let (daemon, fd) = MountState::create().expect("state page");
        let client = MountState::attach(&fd).expect("attach");
        assert_eq!(client.changes(), 0);
        daemon.publish(41);
        assert_eq!(client.changes(), 41);
        // SAFETY: asking for a writable shared mapping, which the seal must refuse.
        let writable = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STATE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_eq!(
            writable,
            libc::MAP_FAILED,
            "a client must not map it writable"
        );
        // SAFETY: making the client's read-only mapping writable, which must fail too.
        let rc = unsafe {
            libc::mprotect(
                client.base.cast(),
                STATE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        assert_ne!(rc, 0, "mprotect must not make the page writable");
    }

    #[test]
    fn a_change_moves_the_version_of_its_inodes_slot_only() {
        let (daemon, fd) = MountState::create().expect("state page");
        let client = MountState::attach(&fd).expect("attach");
        let (a, b) = (7, 8);
        let (before_a, before_b) = (client.version(a), client.version(b));
        daemon.bump(a);
        assert_eq!(client.version(a), before_a.wrapping_add(1));
        assert_eq!(client.version(b), before_b, "another slot is untouched");
        let same_slot = a + VERSION_SLOTS as u64;
        assert_eq!(client.version(same_slot), client.version(a));
    }

    #[test]
    fn an_unsealed_page_is_refused() {
        // SAFETY: memfd_create with a static name.
        let raw = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sizing our own memfd.
        let sized = unsafe { libc::ftruncate(raw, STATE_BYTES as libc::off_t) };
        assert_eq!(sized, 0);
        assert!(MountState::attach(&fd).is_err());
    }
}
