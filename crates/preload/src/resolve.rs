//! Which door a path goes through: the mount's daemon (a path inside a usable shoal mount,
//! relative to a directory inode the daemon walks from) or the kernel (everything else).
//! Only the part before the mount is looked at here; the daemon walks the rest, and falls
//! back when the walk leaves the mount.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use shoal_fastpath::{At, PATH_MAX_BYTES};

use crate::{fds, mounts, process_state, readable_pages, sys};

const ROOT_INO: u64 = 1;

pub enum Route {
    Kernel,
    Fast { mount: usize, at: At },
    Fail(i32),
}

/// The bytes of a C path argument, copied into `buffer`, or the errno the kernel gives for
/// it (EFAULT for memory the process cannot read, as the kernel checks it: a page at a
/// time, through process_vm_readv, so a bad pointer is an error, not a crash; a page already
/// read so since the last mapping change is read directly, see `readable_pages`).
pub fn c_path(ptr: i64, buffer: &mut PathBuffer) -> Result<&[u8], i32> {
    if ptr == 0 {
        return Err(libc::EFAULT);
    }
    let mut len = 0;
    let mut address = ptr as usize;
    while len < PATH_MAX_BYTES {
        let to_page_end = PAGE_BYTES - address % PAGE_BYTES;
        let want = to_page_end.min(PATH_MAX_BYTES - len);
        if readable_pages::known_readable(address) {
            // SAFETY: the page holding `address..address + want` (`want` stops at its end)
            // was read by process_vm_readv since the last mapping change the library saw.
            let source = unsafe { std::slice::from_raw_parts(address as *const u8, want) };
            let nul = source.iter().position(|&b| b == 0);
            let taken = nul.unwrap_or(want);
            buffer.append(len, &source[..taken]);
            len += taken;
            if nul.is_some() {
                return Ok(buffer.filled(len));
            }
            address += want;
            continue;
        }
        let seen = readable_pages::before_read(address);
        let local = libc::iovec {
            iov_base: buffer.room(len, want).cast(),
            iov_len: want,
        };
        let remote = libc::iovec {
            iov_base: address as *mut libc::c_void,
            iov_len: want,
        };
        let n = sys::call(
            libc::SYS_process_vm_readv,
            &[
                i64::from(process_state::pid()),
                std::ptr::addr_of!(local) as i64,
                1,
                std::ptr::addr_of!(remote) as i64,
                1,
                0,
            ],
        );
        if n != want as i64 {
            return Err(libc::EFAULT);
        }
        readable_pages::remember(seen);
        let read = &buffer.filled(len + want)[len..];
        if let Some(nul) = read.iter().position(|&b| b == 0) {
            return Ok(buffer.filled(len + nul));
        }
        len += want;
        address += want;
    }
    Err(libc::ENAMETOOLONG)
}

/// Room for a path argument copied out of the program's memory, on the caller's stack: the
/// handler runs inside libc (malloc's own trim opens /proc files with an arena locked), so a
/// call that is not the fast path's must not allocate. Never zeroed and never moved once
/// filled: zeroing a 4 KiB path and returning it by value made a fast-path `getxattr`
/// take 3.8-4.6 µs on an AMD EPYC host, 1.6-1.9 µs without (`docs/bench/fastpath/calls.c`).
pub struct PathBuffer {
    bytes: [std::mem::MaybeUninit<u8>; PATH_MAX_BYTES],
    /// How many bytes from the start have been written (what `filled` may hand out).
    written: usize,
}

impl PathBuffer {
    #[inline(always)]
    pub fn new() -> Self {
        // Built in place: an array of `MaybeUninit::uninit()` was zeroed all the same (a
        // 4 KiB memset in every path call, 4% of a stat storm's CPU).
        let mut buffer = std::mem::MaybeUninit::<Self>::uninit();
        // SAFETY: `bytes` may stay uninitialised (an array of MaybeUninit); `written`, the
        // only other field, is written here before the value is used.
        unsafe {
            std::ptr::addr_of_mut!((*buffer.as_mut_ptr()).written).write(0);
            buffer.assume_init()
        }
    }

    fn append(&mut self, at: usize, source: &[u8]) {
        assert!(at <= self.written && at + source.len() <= PATH_MAX_BYTES);
        // SAFETY: in bounds (asserted); MaybeUninit<u8> has u8's layout.
        unsafe {
            std::ptr::copy_nonoverlapping(
                source.as_ptr(),
                self.bytes.as_mut_ptr().add(at).cast::<u8>(),
                source.len(),
            );
        }
        self.written = at + source.len();
    }

    /// Where the kernel writes `want` bytes from `at`; they then count as written
    /// (process_vm_readv fills them all, or the path is an error and nothing is read).
    fn room(&mut self, at: usize, want: usize) -> *mut u8 {
        assert!(at <= self.written && at + want <= PATH_MAX_BYTES);
        self.written = at + want;
        self.bytes[at..].as_mut_ptr().cast()
    }

    fn filled(&self, len: usize) -> &[u8] {
        assert!(len <= self.written);
        // SAFETY: the first `written` bytes were initialised (`append`, `room`).
        unsafe { std::slice::from_raw_parts(self.bytes.as_ptr().cast::<u8>(), len) }
    }
}

const PAGE_BYTES: usize = 4096;

/// A descriptor argument as the kernel reads it: an `int`, the register's low 32 bits.
/// libc may pass AT_FDCWD zero-extended (`mov edi, -100` leaves 0xffffff9c in rdi), which
/// compared as an i64 is no AT_FDCWD: relative paths then all went to the kernel.
pub fn descriptor(fd: i64) -> i64 {
    i64::from(fd as i32)
}

/// Routes `path` relative to `dirfd` (AT_FDCWD, a fast descriptor, or a kernel one).
pub fn route(dirfd: i64, path: &[u8], follow: bool) -> Route {
    let dirfd = descriptor(dirfd);
    if path.is_empty() {
        return Route::Kernel;
    }
    if path[0] == b'/' {
        return route_absolute(path, follow);
    }
    match base_of(dirfd) {
        Ok(Some((mount, base))) => Route::Fast {
            mount,
            at: At {
                base,
                path: path.to_vec(),
                follow,
            },
        },
        Ok(None) if dirfd == i64::from(libc::AT_FDCWD) && cwd_is_above_a_mount() => {
            // `cp -a mnt/a mnt/b` run beside the mount: the path enters it from outside.
            let mut joined = working_directory_and_room(1 + path.len());
            if joined.first() != Some(&b'/') {
                return Route::Kernel;
            }
            joined.push(b'/');
            joined.extend_from_slice(path);
            route_absolute(&joined, follow)
        }
        Ok(None) => Route::Kernel,
        Err(errno) => Route::Fail(errno),
    }
}

/// Whether a usable mount lies below the working directory (which is on none), so that a
/// relative path may lead into it; learned once per chdir. The path itself is read again
/// at each use (`working_directory`): a directory above may have been renamed since.
fn cwd_is_above_a_mount() -> bool {
    let mut cached = CWD_ABOVE_MOUNT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *cached.get_or_insert_with(|| {
        let cwd = working_directory();
        // Unreadable, or "(unreachable)" (outside this process's root): the kernel's.
        cwd.first() == Some(&b'/')
            && mounts::all().iter().any(|mount| {
                mount.usable() && mount.path != cwd && plainly_under(&mount.path, &cwd)
            })
    })
}

static CWD_ABOVE_MOUNT: Mutex<Option<bool>> = Mutex::new(None);

fn route_absolute(path: &[u8], follow: bool) -> Route {
    if let Some(fd) = proc_fd_link(path) {
        // /proc/self/fd/N of a fast descriptor: the kernel's magic link must name the real
        // file, so the descriptor becomes a kernel one and the kernel resolves the path.
        return match fds::to_kernel(fd) {
            Ok(()) => Route::Kernel,
            Err(errno) => Route::Fail(errno),
        };
    }
    let Some((index, rest)) = split_at_mount(path) else {
        return Route::Kernel;
    };
    let rest = if rest.is_empty() { b".".to_vec() } else { rest };
    Route::Fast {
        mount: index,
        at: At {
            base: ROOT_INO,
            path: rest,
            follow,
        },
    }
}

/// N, when `path` is /proc/self/fd/N, /proc/PID/fd/N (this process) or /dev/fd/N.
fn proc_fd_link(path: &[u8]) -> Option<i64> {
    let fd_path = if let Some(rest) = path.strip_prefix(b"/dev/fd/") {
        rest
    } else {
        let rest = path.strip_prefix(b"/proc/")?;
        let (who, rest) = rest.split_at(rest.iter().position(|&b| b == b'/')?);
        let own = who == b"self"
            || who == b"thread-self"
            || parse_decimal(who) == Some(i64::from(process_state::pid()));
        if !own {
            return None;
        }
        rest.strip_prefix(b"/fd/")?
    };
    let digits = fd_path.strip_suffix(b"/").unwrap_or(fd_path);
    let fd = parse_decimal(digits)?;
    fds::is_fast(fd).then_some(fd)
}

/// A plain decimal number, without allocating.
fn parse_decimal(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0i64, |n, &d| n * 10 + i64::from(d - b'0')),
    )
}

/// The usable mount `path` lies in, and the rest of `path` inside it. The part up to the
/// mountpoint must be plain (no `..`, no symlinks we could not see: the kernel resolves a
/// path with them).
pub fn split_at_mount(path: &[u8]) -> Option<(usize, Vec<u8>)> {
    // Most paths are on no mount: said without allocating (see `PathBuffer`). The deepest
    // mount holding the path wins (a mount inside another's tree), and of two at one
    // path the later in mountinfo, the one on top.
    let (index, depth) = mounts::all()
        .iter()
        .enumerate()
        .filter(|(_, mount)| mount.usable() && plainly_under(path, &mount.path))
        .map(|(index, mount)| (index, components(&mount.path).count()))
        .max_by_key(|&(_, depth)| depth)?;
    // One allocation: the rest, its components joined by single slashes.
    let mut rest = Vec::with_capacity(path.len());
    for part in components(path).skip(depth) {
        if !rest.is_empty() {
            rest.push(b'/');
        }
        rest.extend_from_slice(part);
    }
    if path.ends_with(b"/") && !rest.is_empty() {
        rest.push(b'/');
    }
    Some((index, rest))
}

/// `path`'s components, without empty and `.` ones.
fn components(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|&b| b == b'/')
        .filter(|part| !part.is_empty() && *part != b".")
}

/// Whether absolute `path`'s components begin with `dir`'s (skipping empty and `.` ones),
/// without allocating.
fn plainly_under(path: &[u8], dir: &[u8]) -> bool {
    let mut parts = components(path);
    components(dir).all(|wanted| parts.next() == Some(wanted))
}

/// The mount and directory inode a relative path starts from, `None` for the kernel.
fn base_of(dirfd: i64) -> Result<Option<(usize, u64)>, i32> {
    if dirfd == i64::from(libc::AT_FDCWD) {
        return Ok(cwd());
    }
    if let Some(file) = fds::get(dirfd) {
        if !file.directory {
            return Err(libc::ENOTDIR);
        }
        return Ok(Some((file.mount, file.ino)));
    }
    Ok(kernel_directory(dirfd))
}

/// A kernel descriptor of a directory on a usable shoal mount, as (mount, inode).
fn kernel_directory(fd: i64) -> Option<(usize, u64)> {
    if fd < 0 || fd > i64::from(i32::MAX) || NOT_MOUNT_DIRECTORIES.holds(fd) {
        return None;
    }
    // SAFETY: stat is plain data; all zeroes is a valid value.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if sys::fstat(fd as i32, &mut stat) < 0 {
        return None;
    }
    let found = (stat.st_mode & libc::S_IFMT == libc::S_IFDIR)
        .then(|| {
            mounts::all()
                .iter()
                .position(|mount| mount.usable() && mount.dev() == stat.st_dev)
        })
        .flatten();
    match found {
        Some(index) => Some((index, stat.st_ino)),
        None => {
            NOT_MOUNT_DIRECTORIES.add(fd);
            None
        }
    }
}

/// Kernel descriptors known to be no directory on a usable mount: a `*at` call relative
/// to one goes to the kernel without an `fstat` to find out again (`find`, `du` and `rm -r`
/// on another filesystem make one per entry: 484 -> 338 ns a call under the library). A
/// number leaves the set when the program closes it or `dup2`s onto it; one that a call
/// the library does not see reused (io_uring's close) only sends its calls to the kernel,
/// which serves every path, the mount's included.
static NOT_MOUNT_DIRECTORIES: DescriptorSet = DescriptorSet::new();

/// The program closed `fd`, or is about to replace it (`dup2`).
pub fn forget_descriptor(fd: i64) {
    NOT_MOUNT_DIRECTORIES.remove(fd);
}

/// The program closed every descriptor in `first..=last`.
pub fn forget_descriptors(first: u32, last: u32) {
    NOT_MOUNT_DIRECTORIES.remove_range(first, last);
}

/// A set of descriptor numbers below `DescriptorSet::LIMIT`, one bit each, for threads.
struct DescriptorSet {
    words: [AtomicU64; DescriptorSet::LIMIT / 64],
}

impl DescriptorSet {
    const LIMIT: usize = 4096;

    const fn new() -> Self {
        Self {
            words: [const { AtomicU64::new(0) }; Self::LIMIT / 64],
        }
    }

    fn place(fd: i64) -> Option<(usize, u64)> {
        let fd = usize::try_from(fd).ok().filter(|&fd| fd < Self::LIMIT)?;
        Some((fd / 64, 1 << (fd % 64)))
    }

    fn holds(&self, fd: i64) -> bool {
        Self::place(fd)
            .is_some_and(|(word, bit)| self.words[word].load(Ordering::Relaxed) & bit != 0)
    }

    fn add(&self, fd: i64) {
        if let Some((word, bit)) = Self::place(fd) {
            self.words[word].fetch_or(bit, Ordering::Relaxed);
        }
    }

    fn remove(&self, fd: i64) {
        if let Some((word, bit)) = Self::place(fd) {
            if self.words[word].load(Ordering::Relaxed) & bit != 0 {
                self.words[word].fetch_and(!bit, Ordering::Relaxed);
            }
        }
    }

    fn remove_range(&self, first: u32, last: u32) {
        let last = (last as usize).min(Self::LIMIT - 1);
        for fd in first as usize..=last {
            self.remove(fd as i64);
        }
    }
}

/// The working directory as (mount, inode), learned from the kernel once per chdir.
static CWD: Mutex<Option<Option<(usize, u64)>>> = Mutex::new(None);

fn cwd() -> Option<(usize, u64)> {
    let mut cached = CWD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = *cached {
        return known;
    }
    // SAFETY: stat is plain data; all zeroes is a valid value.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    let rc = sys::call(
        libc::SYS_newfstatat,
        &[
            i64::from(libc::AT_FDCWD),
            c".".as_ptr() as i64,
            std::ptr::addr_of_mut!(stat) as i64,
            0,
        ],
    );
    let known = (rc == 0)
        .then(|| {
            mounts::all()
                .iter()
                .position(|m| m.usable() && m.dev() == stat.st_dev)
        })
        .flatten()
        .map(|index| (index, stat.st_ino));
    *cached = Some(known);
    known
}

/// The working directory's path as `getcwd` read it, on mount `mount` whose change count
/// was `changes` just before: it names the working directory while the count stays (a
/// rename anywhere on the mount moves it; a chdir forgets it). Each open by a relative
/// path keeps its absolute path (`absolute`): `git status` read it 2000 times with
/// `getcwd` per run, each a system call into the dentry tree.
struct CwdPath {
    path: Vec<u8>,
    mount: usize,
    changes: u64,
}

static CWD_PATH: Mutex<Option<CwdPath>> = Mutex::new(None);

/// `working_directory`, kept while it holds (`CwdPath`) when it is on a mount.
fn working_directory_on_mount() -> Vec<u8> {
    let Some((mount, _)) = cwd() else {
        return working_directory();
    };
    let Some(before) = crate::listings::changes_now(mount) else {
        return working_directory();
    };
    // Never waited for: a fork child whose parent had another thread inside must not hang.
    if let Ok(kept) = CWD_PATH.try_lock() {
        if let Some(kept) = kept
            .as_ref()
            .filter(|kept| (kept.mount, kept.changes) == (mount, before))
        {
            return kept.path.clone();
        }
    }
    let path = working_directory();
    if path.first() == Some(&b'/') {
        if let Ok(mut kept) = CWD_PATH.try_lock() {
            *kept = Some(CwdPath {
                path: path.clone(),
                mount,
                changes: before,
            });
        }
    }
    path
}

/// The working directory changed (chdir, fchdir).
pub fn forget_cwd() {
    *CWD_PATH
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    *CWD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    *CWD_ABOVE_MOUNT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
}

/// An absolute path for `path` relative to `dirfd`, as the kernel would resolve it now,
/// NUL-terminated: how a fast descriptor is reopened through the kernel later (`fds`).
pub fn absolute(dirfd: i64, path: &[u8]) -> Vec<u8> {
    let dirfd = descriptor(dirfd);
    let mut out = if path.first() == Some(&b'/') {
        Vec::new()
    } else if dirfd == i64::from(libc::AT_FDCWD) {
        working_directory_on_mount()
    } else if let Some(file) = fds::get(dirfd) {
        file.path[..file.path.len().saturating_sub(1)].to_vec()
    } else {
        link_target(&crate::sys::proc_fd_link(dirfd))
    };
    if !out.is_empty() && out.last() != Some(&b'/') {
        out.push(b'/');
    }
    out.extend_from_slice(path);
    out.push(0);
    out
}

/// `path` (absolute, NUL-terminated) as a path from the working directory, if it lies
/// under it: how the program can still reach a file when a directory above its working
/// directory is closed to it (it got there before, or was started there).
pub fn from_working_directory(path: &[u8]) -> Option<Vec<u8>> {
    relative_to(&working_directory(), path)
}

/// `path` (absolute, NUL-terminated) from directory `dir` (absolute), if it lies under it.
fn relative_to(dir: &[u8], path: &[u8]) -> Option<Vec<u8>> {
    if dir.first() != Some(&b'/') {
        return None;
    }
    let dir = if dir == b"/" { &dir[..0] } else { dir };
    let rest = path.strip_prefix(dir)?;
    match rest {
        // The directory itself ("" then the NUL, or "/" then the NUL).
        [0] | [b'/', 0] => Some(b".\0".to_vec()),
        [b'/', ..] => Some([b".", rest].concat()),
        _ => None,
    }
}

fn working_directory() -> Vec<u8> {
    working_directory_and_room(0)
}

/// The working directory's path, in a vector with room for `more` bytes after it: read
/// into the stack, so a call pays no 4 KiB allocation (a relative path from a working
/// directory above a mount reads it at every call).
fn working_directory_and_room(more: usize) -> Vec<u8> {
    let mut buf = [0u8; PATH_MAX_BYTES];
    let n = sys::call(
        libc::SYS_getcwd,
        &[buf.as_mut_ptr() as i64, buf.len() as i64],
    );
    // getcwd(2) returns the length with its NUL.
    let len = usize::try_from(n).unwrap_or(1).saturating_sub(1);
    let mut cwd = Vec::with_capacity(len + more);
    cwd.extend_from_slice(&buf[..len]);
    cwd
}

fn link_target(link: &str) -> Vec<u8> {
    let mut buf = vec![0u8; PATH_MAX_BYTES];
    let n = sys::call(
        libc::SYS_readlinkat,
        &[
            i64::from(libc::AT_FDCWD),
            link.as_ptr() as i64,
            buf.as_mut_ptr() as i64,
            buf.len() as i64,
        ],
    );
    buf.truncate(usize::try_from(n).unwrap_or(0));
    buf
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_path_under_a_directory_is_reached_from_it() {
        use super::relative_to;
        assert_eq!(
            relative_to(b"/w/mnt", b"/w/mnt/d/.\0"),
            Some(b"./d/.\0".to_vec())
        );
        assert_eq!(relative_to(b"/w/mnt", b"/w/mnt\0"), Some(b".\0".to_vec()));
        assert_eq!(relative_to(b"/", b"/w/x\0"), Some(b"./w/x\0".to_vec()));
        assert_eq!(
            relative_to(b"/w/mnt", b"/w/mntx/d\0"),
            None,
            "a sibling is not under it"
        );
        assert_eq!(relative_to(b"/w/mnt", b"/elsewhere\0"), None);
        assert_eq!(relative_to(b"(unreachable)/w", b"/w/x\0"), None);
    }

    use super::*;

    #[test]
    fn a_descriptor_set_holds_what_was_added_until_removed() {
        let set = DescriptorSet::new();
        for fd in [0, 63, 64, 4095] {
            assert!(!set.holds(fd));
            set.add(fd);
            assert!(set.holds(fd), "{fd}");
        }
        set.add(4096);
        set.add(-1);
        assert!(
            !set.holds(4096) && !set.holds(-1),
            "outside the set: never held"
        );
        set.remove(63);
        assert!(!set.holds(63) && set.holds(64) && set.holds(0));
        set.remove_range(1, u32::MAX);
        assert!(set.holds(0) && !set.holds(64) && !set.holds(4095));
    }

    #[test]
    fn c_path_stops_at_nul_and_bad_pointers_are_efault() {
        crate::process_state::start();
        let bytes = b"abc\0def";
        let mut buffer = PathBuffer::new();
        assert_eq!(c_path(bytes.as_ptr() as i64, &mut buffer), Ok(&b"abc"[..]));
        assert_eq!(c_path(0, &mut buffer), Err(libc::EFAULT));
        assert_eq!(c_path(0xdead_c0de, &mut buffer), Err(libc::EFAULT));
    }
}
