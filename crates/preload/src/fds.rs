//! Fast-path file descriptors. Each is a real kernel descriptor (an O_PATH placeholder the
//! kernel numbered, whose close-on-exec flag the kernel keeps) mapped here to an open file
//! of the daemon. Descriptors made by dup share one `OpenFile`, and so one offset, as they
//! share one file description in the kernel.
//!
//! A fast descriptor never leaves the process: before anything could carry it elsewhere
//! (fork, exec, a call the library does not serve) it becomes a kernel descriptor of the
//! same file through the mount, at the same offset and flags (`to_kernel`).

use foldhash::HashMap;
use foldhash::HashMapExt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use shoal_fastpath::{Attr, DirEntryWire};

use crate::{channel, sys};

/// A directory listing in progress: the page the daemon sent last (`page[next..]` not yet
/// returned), where the next batch starts, and how many entries were returned (the d_off
/// values).
#[derive(Default)]
pub struct DirCursor {
    pub page: Vec<DirEntryWire>,
    pub next: usize,
    /// The change count of `page` when it is the whole listing, read as one page from its
    /// start: a directory closed with it is kept with it (`below::recycle`).
    pub whole: Option<u64>,
    pub after: Option<Vec<u8>>,
    pub started: bool,
    pub done: bool,
    pub position: u64,
    /// The name of the last entry returned: where a kernel descriptor of the directory
    /// continues the listing (`to_kernel`).
    pub last_name: Option<Vec<u8>>,
    /// The first page, sent with the open (`Request::OpenDir`): the first `getdents`
    /// serves it if the mount's change count is still `changes`, else asks again.
    pub prefetched: Option<Prefetched>,
}

impl DirCursor {
    /// The next entry to return, if the page holds one.
    pub fn front(&self) -> Option<&DirEntryWire> {
        self.page.get(self.next)
    }

    /// The entry `front` gave is returned.
    pub fn advance(&mut self) {
        self.next += 1;
        self.position += 1;
    }

    /// Remembers the name of the last entry returned (`last_name`).
    pub fn note_last_returned(&mut self) {
        if let Some(entry) = self
            .next
            .checked_sub(1)
            .and_then(|last| self.page.get(last))
        {
            // The buffer kept: every `getdents` call ends here.
            let last_name = self.last_name.get_or_insert_with(Vec::new);
            last_name.clear();
            last_name.extend_from_slice(&entry.name);
        }
    }
}

pub struct Prefetched {
    pub entries: Vec<DirEntryWire>,
    pub done: bool,
    pub changes: u64,
}

pub struct OpenFile {
    pub mount: usize,
    /// The daemon's handle; 0 for a directory opened from a listing the process keeps,
    /// until a call needs one (`handle`, `calls::open::handle_of`).
    pub handle: AtomicU64,
    pub ino: u64,
    pub directory: bool,
    /// open(2)'s access mode and status flags (O_APPEND, O_NONBLOCK, ...), as F_GETFL.
    pub flags: AtomicI32,
    pub offset: Mutex<u64>,
    pub cursor: Mutex<DirCursor>,
    /// The absolute path it was opened by, NUL-terminated: how `to_kernel` reopens it.
    pub path: Vec<u8>,
    /// The attributes the daemon last gave for this file (at open, at an fstat) and what
    /// they hold for (`listings::known_attr`): the `fstat` that follows most opens, and
    /// the `fstat`s and end-of-file checks of a file another one is copied from, need no
    /// round trip.
    pub known: Mutex<Option<Known>>,
    /// For a directory opened on the fast path: what lets it be opened again without a
    /// round trip once the program closes it, and `..` from it (`below.rs`).
    pub origin: Option<DirOrigin>,
    /// A small file's bytes, sent with its open (`whole_file.rs`).
    pub whole: Mutex<Option<crate::whole_file::WholeFile>>,
    /// Whether a write through it was answered: only an `fstat` after one makes the
    /// process's writes ask for attributes (`io::attrs_wanted_after_writes`).
    pub written: AtomicBool,
}

/// How a directory came to be open: where, by whom, with what answer.
#[derive(Clone, Debug)]
pub struct DirOrigin {
    /// The directory it is an entry of, where known: opened by its name there, never
    /// through a symlink.
    pub parent: Option<u64>,
    /// Its name in `parent` (empty where `parent` is not known).
    pub name: Vec<u8>,
    /// Who opened it, and the mount's change count from before the open was decided: while
    /// the count stays, the same caller's open of it would be answered the same.
    pub who: channel::Who,
    pub changes: Option<u64>,
    /// Its listing came with attributes: the opener may search it.
    pub searchable: bool,
}

/// What the daemon last said of an open file, and what it holds for.
#[derive(Clone, Copy, Debug)]
pub struct Known {
    pub holds: Holds,
    pub attr: Attr,
    /// It has no extended attributes (its listxattr is empty).
    pub no_xattrs: bool,
}

/// What attributes the daemon gave hold for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// While the version of the inode's slot stays this (`state::MountState::version`).
    WhileVersion(u32),
    /// While the mount's change count stays this (a daemon that keeps no versions).
    WhileChanges(u64),
}

impl OpenFile {
    /// The daemon's handle of the file, if it has one yet.
    pub fn handle(&self) -> Option<u64> {
        Some(self.handle.load(Ordering::Acquire)).filter(|&handle| handle != 0)
    }

    /// Gives a file opened without a handle the daemon's `handle`, unless another thread
    /// gave it one first: the handle it has, and whether `handle` was not taken.
    pub fn take_handle(&self, handle: u64) -> (u64, bool) {
        debug_assert_ne!(handle, 0);
        match self
            .handle
            .compare_exchange(0, handle, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => (handle, true),
            Err(held) => (held, false),
        }
    }

    pub fn status_flags(&self) -> i32 {
        self.flags.load(Ordering::Relaxed)
    }

    pub fn readable(&self) -> bool {
        self.status_flags() & libc::O_ACCMODE != libc::O_WRONLY
    }

    pub fn writable(&self) -> bool {
        self.status_flags() & libc::O_ACCMODE != libc::O_RDONLY
    }

    pub fn lock_offset(&self) -> MutexGuard<'_, u64> {
        self.offset
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn lock_cursor(&self) -> MutexGuard<'_, DirCursor> {
        self.cursor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

static TABLE: RwLock<Option<HashMap<i32, Arc<OpenFile>>>> = RwLock::new(None);
/// Fast descriptors open now: with none, a call on any descriptor skips the table.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn read_table() -> std::sync::RwLockReadGuard<'static, Option<HashMap<i32, Arc<OpenFile>>>> {
    TABLE
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write_table() -> std::sync::RwLockWriteGuard<'static, Option<HashMap<i32, Arc<OpenFile>>>> {
    TABLE
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The open file behind `fd`, if it is a fast descriptor.
pub fn get(fd: i64) -> Option<Arc<OpenFile>> {
    if COUNT.load(Ordering::Acquire) == 0 || !(0..=i64::from(i32::MAX)).contains(&fd) {
        return None;
    }
    read_table().as_ref()?.get(&(fd as i32)).cloned()
}

pub fn is_fast(fd: i64) -> bool {
    get(fd).is_some()
}

/// Maps `fd` (a placeholder the kernel just numbered) to `file`, replacing whatever fast
/// file `fd` named before (dup2 onto a fast descriptor closes it).
pub fn insert(fd: i32, file: Arc<OpenFile>) {
    let replaced = {
        let mut table = write_table();
        let map = table.get_or_insert_with(HashMap::new);
        let replaced = map.insert(fd, file);
        if replaced.is_none() {
            COUNT.fetch_add(1, Ordering::AcqRel);
        }
        replaced
    };
    if let Some(old) = replaced {
        release(old);
    }
}

/// Forgets `fd` (closed, or now a kernel descriptor); its file is closed in the daemon when
/// no other descriptor shares it.
pub fn remove(fd: i64) -> Option<()> {
    let removed = {
        let mut table = write_table();
        let removed = table.as_mut()?.remove(&(fd as i32));
        if removed.is_some() {
            COUNT.fetch_sub(1, Ordering::AcqRel);
        }
        removed
    }?;
    release(removed);
    Some(())
}

/// Forgets every fast descriptor in `first..=last`.
pub fn remove_range(first: u32, last: u32) {
    let fds: Vec<i32> = read_table()
        .as_ref()
        .map(|map| {
            map.keys()
                .copied()
                .filter(|&fd| fd as u32 >= first && fd as u32 <= last)
                .collect()
        })
        .unwrap_or_default();
    for fd in fds {
        remove(i64::from(fd));
    }
}

/// Closes `file` in the daemon if this was its last descriptor.
fn release(file: Arc<OpenFile>) {
    if let Some(file) = Arc::into_inner(file) {
        if crate::below::recycle(&file) {
            // Kept open in the daemon, to be opened again (`..` of a subdirectory).
            return;
        }
        // close(2) of a regular file or directory reports nothing the daemon could fail
        // with (every write was answered already): the caller does not wait for it.
        if let Some(handle) = file.handle() {
            channel::close(file.mount, handle);
        }
    }
}

/// Whether the process has directory `dir` of mount `mount` open on the fast path.
pub fn holds_directory(mount: usize, dir: u64) -> bool {
    read_table().as_ref().is_some_and(|map| {
        map.values()
            .any(|file| file.directory && file.mount == mount && file.ino == dir)
    })
}

/// Every fast descriptor now, with its file.
pub fn snapshot() -> Vec<(i32, Arc<OpenFile>)> {
    read_table()
        .as_ref()
        .map(|map| map.iter().map(|(&fd, file)| (fd, file.clone())).collect())
        .unwrap_or_default()
}

/// Makes `fd` and every descriptor sharing its file kernel descriptors of the same file,
/// opened through the mount, at the same offset and status flags; their close-on-exec
/// flags stay. Returns the errno of a failed reopen (the file was renamed or removed
/// since: its path no longer names it).
pub fn to_kernel(fd: i64) -> Result<(), i32> {
    let Some(file) = get(fd) else { return Ok(()) };
    let sharing: Vec<i32> = snapshot()
        .into_iter()
        .filter(|(_, other)| Arc::ptr_eq(other, &file))
        .map(|(fd, _)| fd)
        .collect();
    let kernel_fd = reopen(&file)?;
    for &shared in &sharing {
        let cloexec = sys::fcntl(shared, libc::F_GETFD, 0) > 0;
        let flags = if cloexec { libc::O_CLOEXEC } else { 0 };
        if let Err(errno) = sys::check(sys::dup3(kernel_fd, shared, flags)) {
            sys::close(kernel_fd);
            return Err(errno);
        }
    }
    sys::close(kernel_fd);
    for shared in sharing {
        remove(i64::from(shared));
    }
    Ok(())
}

/// A kernel descriptor of `file` at its offset, checked to be the same inode, with the
/// status flags the program opened it with.
fn reopen(file: &OpenFile) -> Result<i32, i32> {
    let keep = libc::O_ACCMODE
        | libc::O_APPEND
        | libc::O_NONBLOCK
        | libc::O_SYNC
        | libc::O_DSYNC
        | libc::O_NOATIME
        | libc::O_NOFOLLOW
        | libc::O_DIRECTORY;
    let flags = (file.status_flags() & keep) | libc::O_CLOEXEC;
    let kernel_fd = if flags & libc::O_NOFOLLOW != 0 {
        open_by_path(file, flags)?
    } else {
        // The path's own file, not a symlink put in its place since (O_NOFOLLOW), then
        // opened as the program opened it through its /proc link: O_NOFOLLOW on the open
        // itself would stay in the descriptor's flags (F_GETFL).
        let found = open_by_path(file, libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)?;
        let link = sys::proc_fd_link(found);
        let reopened = sys::check(sys::openat(libc::AT_FDCWD, link.as_bytes(), flags, 0));
        sys::close(found);
        match reopened {
            Ok(fd) => fd as i32,
            // No /proc (a chroot): by path, O_NOFOLLOW showing in its flags.
            Err(libc::ENOENT) => open_by_path(file, flags | libc::O_NOFOLLOW)?,
            Err(errno) => return Err(errno),
        }
    };
    if file.directory {
        // A listing in progress goes on where it was (a fork in the middle of a readdir
        // loop restarted it from the top: every entry came twice).
        let last = file.lock_cursor().last_name.clone();
        if let Some(last) = last {
            if let Err(errno) = continue_after(kernel_fd, &last) {
                sys::close(kernel_fd);
                return Err(errno);
            }
        }
    } else {
        let offset = *file.lock_offset();
        sys::lseek(kernel_fd, offset as i64, libc::SEEK_SET);
    }
    Ok(kernel_fd)
}

/// `file`'s path opened with `flags`, if it still names the same inode (ESTALE if not).
fn open_by_path(file: &OpenFile, flags: i32) -> Result<i32, i32> {
    let by_path = sys::check(sys::openat(libc::AT_FDCWD, &file.path, flags, 0));
    let fd = match by_path {
        // A directory above the working directory is closed to the caller (pjdfstest's
        // other users, in a work directory under root's 0700 one): from the working
        // directory, as the program reached the file. The inode check below still holds.
        Err(libc::EACCES) => match crate::resolve::from_working_directory(&file.path) {
            Some(relative) => sys::check(sys::openat(libc::AT_FDCWD, &relative, flags, 0)),
            None => by_path,
        },
        other => other,
    }? as i32;
    // SAFETY: stat is plain data; all zeroes is a valid value.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if sys::fstat(fd, &mut stat) < 0 || stat.st_ino != file.ino {
        sys::close(fd);
        crate::stats::note_lost_conversion();
        return Err(libc::ESTALE);
    }
    Ok(fd)
}

/// Sets the kernel descriptor `fd` of a directory just after the entry `last`. The kernel
/// lists `.` and `..`, then the names in the byte order the daemon lists them in: the
/// entries up to `last` are read past, and `fd` set to the kernel's own offset after the
/// last of them. A name removed since is no problem: the listing resumes at the next one.
fn continue_after(fd: i32, last: &[u8]) -> Result<(), i32> {
    /// Header of a linux_dirent64: d_ino, d_off, d_reclen, d_type.
    const HEADER: usize = 19;
    let mut buf = vec![0u8; 32 * 1024];
    let mut resume = 0i64;
    loop {
        let n = sys::check(sys::call(
            libc::SYS_getdents64,
            &[i64::from(fd), buf.as_mut_ptr() as i64, buf.len() as i64],
        ))? as usize;
        if n == 0 {
            break;
        }
        let mut at = 0;
        while at + HEADER <= n {
            let field = |from: usize, len: usize| &buf[at + from..at + from + len];
            let d_off = i64::from_ne_bytes(field(8, 8).try_into().unwrap_or_default());
            let reclen = usize::from(u16::from_ne_bytes(
                field(16, 2).try_into().unwrap_or_default(),
            ));
            if reclen < HEADER || at + reclen > n {
                return Err(libc::EIO);
            }
            let name = &buf[at + HEADER..at + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if !listed_before(name, last) && name != last {
                sys::check(sys::lseek(fd, resume, libc::SEEK_SET))?;
                return Ok(());
            }
            resume = d_off;
            at += reclen;
        }
    }
    sys::check(sys::lseek(fd, resume, libc::SEEK_SET)).map(|_| ())
}

/// Whether the kernel lists `name` before `other`: the dots first, then byte order.
fn listed_before(name: &[u8], other: &[u8]) -> bool {
    let rank = |n: &[u8]| match n {
        b"." => 0,
        b".." => 1,
        _ => 2,
    };
    (rank(name), name) < (rank(other), other)
}

/// Converts every fast descriptor (before fork) or those without close-on-exec (before
/// exec). Failures are counted; such a descriptor stays a placeholder.
pub fn all_to_kernel(only_inherited: bool) {
    for (fd, _) in snapshot() {
        let cloexec = sys::fcntl(fd, libc::F_GETFD, 0) > 0;
        if only_inherited && cloexec {
            continue;
        }
        let _ = to_kernel(i64::from(fd));
    }
}

/// In a vfork child (posix_spawn's), about to exec: its descriptors without close-on-exec
/// become kernel ones in its own descriptor table, while the table here, which is the
/// parent's memory, stays as it is.
pub fn reopen_for_exec_in_place() {
    for (fd, file) in snapshot() {
        if sys::fcntl(fd, libc::F_GETFD, 0) > 0 {
            continue;
        }
        let _ = reopen_in_place(fd, &file);
    }
}

/// In a vfork child: `fd` becomes a kernel descriptor of `file` (close-on-exec kept) in
/// the child's own descriptor table; the table here, the parent's memory, stays as it is.
pub fn reopen_in_place(fd: i32, file: &OpenFile) -> Result<(), i32> {
    let kernel_fd = reopen(file)?;
    let cloexec = sys::fcntl(fd, libc::F_GETFD, 0) > 0;
    let flags = if cloexec { libc::O_CLOEXEC } else { 0 };
    let result = sys::check(sys::dup3(kernel_fd, fd, flags));
    sys::close(kernel_fd);
    result.map(|_| ())
}
