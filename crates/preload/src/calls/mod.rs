//! The handler: every intercepted system call comes here, and goes to the daemon when it
//! names a file on a usable shoal mount, to the kernel otherwise. A call the daemon cannot
//! decide (it falls back) is made in the kernel exactly as the program made it, after any
//! fast descriptor among its arguments has become a kernel one.

mod attrs;
mod descriptors;
mod io;
mod names;
mod open;
mod process;
mod stat;

use shoal_fastpath::{Reply, Request, Status};

use crate::channel::{self, ChannelError};
use crate::fds;
use crate::readable_pages;
use crate::stats::{self, Way};

/// Every call the library intercepts.
pub const NUMBERS: &[i64] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_open,
    libc::SYS_close,
    libc::SYS_stat,
    libc::SYS_fstat,
    libc::SYS_lstat,
    libc::SYS_lseek,
    libc::SYS_mmap,
    libc::SYS_mprotect,
    libc::SYS_munmap,
    libc::SYS_brk,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_shmat,
    libc::SYS_shmdt,
    libc::SYS_pkey_mprotect,
    libc::SYS_ioctl,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_access,
    libc::SYS_dup,
    libc::SYS_dup2,
    libc::SYS_sendfile,
    libc::SYS_sendmsg,
    libc::SYS_execve,
    libc::SYS_fcntl,
    libc::SYS_flock,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_truncate,
    libc::SYS_ftruncate,
    libc::SYS_chdir,
    libc::SYS_fchdir,
    libc::SYS_rename,
    libc::SYS_mkdir,
    libc::SYS_rmdir,
    libc::SYS_creat,
    libc::SYS_link,
    libc::SYS_unlink,
    libc::SYS_symlink,
    libc::SYS_readlink,
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_chown,
    libc::SYS_fchown,
    libc::SYS_lchown,
    libc::SYS_umask,
    libc::SYS_setuid,
    libc::SYS_setgid,
    libc::SYS_setreuid,
    libc::SYS_setregid,
    libc::SYS_setgroups,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_capset,
    libc::SYS_fstatfs,
    libc::SYS_sync,
    libc::SYS_readahead,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_getxattr,
    libc::SYS_lgetxattr,
    libc::SYS_fgetxattr,
    libc::SYS_listxattr,
    libc::SYS_llistxattr,
    libc::SYS_flistxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    libc::SYS_getdents64,
    libc::SYS_fadvise64,
    libc::SYS_openat,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_fchownat,
    libc::SYS_newfstatat,
    libc::SYS_unlinkat,
    libc::SYS_renameat,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_readlinkat,
    libc::SYS_fchmodat,
    libc::SYS_faccessat,
    libc::SYS_splice,
    libc::SYS_tee,
    libc::SYS_sync_file_range,
    libc::SYS_utimensat,
    libc::SYS_fallocate,
    libc::SYS_dup3,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_name_to_handle_at,
    libc::SYS_syncfs,
    libc::SYS_execveat,
    libc::SYS_renameat2,
    libc::SYS_copy_file_range,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_statx,
    libc::SYS_close_range,
    libc::SYS_openat2,
    libc::SYS_faccessat2,
    libc::SYS_utimes,
    libc::SYS_futimesat,
    libc::SYS_utime,
    libc::SYS_mknod,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_select,
    libc::SYS_pselect6,
    libc::SYS_epoll_ctl,
    libc::SYS_getdents,
    libc::SYS_statfs,
    libc::SYS_fanotify_mark,
    SYS_FCHMODAT2,
    SYS_SETXATTRAT,
    SYS_GETXATTRAT,
    SYS_LISTXATTRAT,
    SYS_REMOVEXATTRAT,
];

// Newer calls that take a directory descriptor, by number (newer C libraries use them:
// glibc 2.39's fchmodat with AT_SYMLINK_NOFOLLOW is fchmodat2). They go to the kernel,
// a fast directory descriptor first made a kernel one: on a placeholder (an O_PATH
// descriptor of `/`) a relative path would be resolved from `/`.
const SYS_FCHMODAT2: i64 = crate::intercept::FCHMODAT2;
const SYS_SETXATTRAT: i64 = 463;
const SYS_GETXATTRAT: i64 = 464;
const SYS_LISTXATTRAT: i64 = 465;
const SYS_REMOVEXATTRAT: i64 = 466;

/// Argument positions that hold a descriptor, for the calls served only by the kernel:
/// a fast descriptor there is made a kernel one first.
fn descriptor_arguments(nr: i64) -> &'static [usize] {
    match nr {
        libc::SYS_mmap => &[4],
        libc::SYS_ioctl
        | libc::SYS_flock
        | libc::SYS_fstatfs
        | libc::SYS_readahead
        | libc::SYS_fsetxattr
        | libc::SYS_fadvise64
        | libc::SYS_sync_file_range
        | libc::SYS_fallocate
        | libc::SYS_preadv
        | libc::SYS_pwritev
        | libc::SYS_preadv2
        | libc::SYS_pwritev2
        | libc::SYS_getdents => &[0],
        libc::SYS_epoll_ctl => &[2],
        // sendfile(out_fd, in_fd, offset, count); splice and copy_file_range put an offset
        // pointer between their descriptors.
        libc::SYS_sendfile => &[0, 1],
        libc::SYS_splice | libc::SYS_copy_file_range => &[0, 2],
        libc::SYS_tee => &[0, 1],
        libc::SYS_mknodat
        | libc::SYS_name_to_handle_at
        | libc::SYS_openat2
        | libc::SYS_futimesat
        | libc::SYS_execveat
        | SYS_FCHMODAT2
        | SYS_SETXATTRAT
        | SYS_GETXATTRAT
        | SYS_LISTXATTRAT
        | SYS_REMOVEXATTRAT => &[0],
        libc::SYS_fanotify_mark => &[3],
        _ => &[],
    }
}

/// The one entry point (see `intercept::Handler`).
pub fn handle(nr: i64, args: [i64; 6]) -> i64 {
    let served = match nr {
        libc::SYS_open | libc::SYS_openat | libc::SYS_creat => open::open(nr, args),
        libc::SYS_close => descriptors::close(args),
        libc::SYS_close_range => descriptors::close_range(args),
        libc::SYS_dup | libc::SYS_dup2 | libc::SYS_dup3 => descriptors::dup(nr, args),
        libc::SYS_fcntl => descriptors::fcntl(args),
        libc::SYS_read | libc::SYS_pread64 | libc::SYS_readv => io::read(nr, args),
        libc::SYS_write | libc::SYS_pwrite64 | libc::SYS_writev => io::write(nr, args),
        libc::SYS_lseek => io::lseek(args),
        libc::SYS_getdents64 => io::getdents64(args),
        libc::SYS_fsync | libc::SYS_fdatasync => io::fsync(nr, args),
        libc::SYS_sync | libc::SYS_syncfs => io::sync(nr, args),
        libc::SYS_stat | libc::SYS_lstat | libc::SYS_fstat | libc::SYS_newfstatat => {
            stat::stat(nr, args)
        }
        libc::SYS_statx => stat::statx(args),
        libc::SYS_access | libc::SYS_faccessat | libc::SYS_faccessat2 => stat::access(nr, args),
        libc::SYS_readlink | libc::SYS_readlinkat => stat::readlink(nr, args),
        libc::SYS_mkdir | libc::SYS_mkdirat => names::mkdir(nr, args),
        libc::SYS_unlink | libc::SYS_rmdir | libc::SYS_unlinkat => names::unlink(nr, args),
        libc::SYS_rename | libc::SYS_renameat | libc::SYS_renameat2 => names::rename(nr, args),
        libc::SYS_link | libc::SYS_linkat => names::link(nr, args),
        libc::SYS_symlink | libc::SYS_symlinkat => names::symlink(nr, args),
        libc::SYS_chmod | libc::SYS_fchmod | libc::SYS_fchmodat | SYS_FCHMODAT2 => {
            attrs::chmod(nr, args)
        }
        libc::SYS_chown | libc::SYS_lchown | libc::SYS_fchown | libc::SYS_fchownat => {
            attrs::chown(nr, args)
        }
        libc::SYS_utimensat => attrs::utimensat(args),
        libc::SYS_truncate | libc::SYS_ftruncate => attrs::truncate(nr, args),
        libc::SYS_getxattr | libc::SYS_lgetxattr | libc::SYS_fgetxattr => attrs::getxattr(nr, args),
        libc::SYS_listxattr | libc::SYS_llistxattr | libc::SYS_flistxattr => {
            attrs::listxattr(nr, args)
        }
        libc::SYS_chdir | libc::SYS_fchdir => process::chdir(nr, args),
        libc::SYS_execve | libc::SYS_execveat => process::execve(nr, args),
        libc::SYS_umask => process::umask(args),
        libc::SYS_setfsuid | libc::SYS_setfsgid => process::set_fs_ids(nr, args),
        libc::SYS_setuid
        | libc::SYS_setgid
        | libc::SYS_setreuid
        | libc::SYS_setregid
        | libc::SYS_setgroups
        | libc::SYS_setresuid
        | libc::SYS_setresgid
        | libc::SYS_capset => process::set_credentials(nr, args),
        libc::SYS_sendmsg => descriptors::sendmsg(args),
        libc::SYS_ioctl => descriptors::ioctl(args),
        libc::SYS_setxattr | libc::SYS_lsetxattr | libc::SYS_fsetxattr => attrs::setxattr(nr, args),
        libc::SYS_removexattr | libc::SYS_lremovexattr | libc::SYS_fremovexattr => {
            attrs::removexattr(nr, args)
        }
        libc::SYS_copy_file_range => io::copy_file_range(args),
        libc::SYS_fadvise64 => io::fadvise(args),
        libc::SYS_poll | libc::SYS_ppoll => descriptors::poll(nr, args),
        libc::SYS_select | libc::SYS_pselect6 => descriptors::select(nr, args),
        libc::SYS_brk => Some(mapping_change_within(nr, args)),
        _ => memory_taken_away(nr, args)
            .map(|taken| around(taken, || kernel(nr, args, descriptor_arguments(nr)))),
    };
    served.unwrap_or_else(|| kernel(nr, args, descriptor_arguments(nr)))
}

/// The calls that change what memory is mapped: seen also when the library makes them
/// itself (its own malloc's), so that what it knows of readable pages stays true
/// (`intercept::observe_reentered`).
pub const MAPPING_CHANGES: &[i64] = &[
    libc::SYS_brk,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
];

/// A call of `MAPPING_CHANGES` that the library made itself: made as it asked (there are
/// no fast descriptors in it), the known-readable pages kept true. Allocation-free.
pub fn mapping_change_within(nr: i64, args: [i64; 6]) -> i64 {
    let call = || raw(nr, args);
    if nr == libc::SYS_brk {
        return readable_pages::brk(args[0] as u64, call);
    }
    match memory_taken_away(nr, args) {
        Some(taken) => around(taken, call),
        None => call(),
    }
}

fn around(taken: Taken, call: impl FnOnce() -> i64) -> i64 {
    match taken {
        Taken::Range(start, len) => readable_pages::around_range_change(start, len, call),
        Taken::Anywhere => readable_pages::around_mapping_change(call),
    }
}

/// Where a call can unmap memory or take read access away, which forgets the pages known
/// readable there (`readable_pages`).
enum Taken {
    /// Within `start..start + len`.
    Range(u64, u64),
    /// Anywhere: mremap to a fixed address, shmat, shmdt.
    Anywhere,
}

/// What a call can take away; `None`: nothing. madvise only with advice that does (guard
/// regions, poisoning, or one this list does not know); freeing or paging out keeps pages
/// readable, and malloc's frequent MADV_DONTNEED must not forget them.
fn memory_taken_away(nr: i64, args: [i64; 6]) -> Option<Taken> {
    const READABLE_AFTER: &[i32] = &[
        libc::MADV_NORMAL,
        libc::MADV_RANDOM,
        libc::MADV_SEQUENTIAL,
        libc::MADV_WILLNEED,
        libc::MADV_DONTNEED,
        libc::MADV_FREE,
        libc::MADV_REMOVE,
        libc::MADV_DONTFORK,
        libc::MADV_DOFORK,
        libc::MADV_MERGEABLE,
        libc::MADV_UNMERGEABLE,
        libc::MADV_HUGEPAGE,
        libc::MADV_NOHUGEPAGE,
        libc::MADV_DONTDUMP,
        libc::MADV_DODUMP,
        libc::MADV_WIPEONFORK,
        libc::MADV_KEEPONFORK,
        libc::MADV_COLD,
        libc::MADV_PAGEOUT,
        libc::MADV_POPULATE_READ,
        libc::MADV_POPULATE_WRITE,
    ];
    let range = Taken::Range(args[0] as u64, args[1] as u64);
    match nr {
        libc::SYS_mmap if args[3] & i64::from(libc::MAP_FIXED) != 0 => Some(range),
        libc::SYS_madvise if !READABLE_AFTER.contains(&(args[2] as i32)) => Some(range),
        libc::SYS_mprotect | libc::SYS_munmap | libc::SYS_pkey_mprotect => Some(range),
        // Moved or shrunk, a mapping leaves only its old range (realloc of a large block,
        // each of which forgot every page: `du -s` of the bench tree read its pages 562
        // times); to a fixed address it also replaces whatever was there.
        libc::SYS_mremap if args[3] & i64::from(libc::MREMAP_FIXED) == 0 => Some(range),
        libc::SYS_mremap | libc::SYS_shmat | libc::SYS_shmdt => Some(Taken::Anywhere),
        _ => None,
    }
}

/// The call made in the kernel as the program made it, after the fast descriptors at
/// `positions` became kernel descriptors.
pub fn kernel(nr: i64, args: [i64; 6], positions: &[usize]) -> i64 {
    for &position in positions {
        if let Err(errno) = fds::to_kernel(args[position]) {
            return -i64::from(errno);
        }
    }
    raw(nr, args)
}

pub fn raw(nr: i64, args: [i64; 6]) -> i64 {
    // SAFETY: the program's own call, with its own arguments, as it would reach the kernel.
    unsafe { crate::intercept::raw_syscall(nr, args) }
}

/// How the daemon answered.
#[expect(
    clippy::large_enum_variant,
    reason = "returned by value once per call and taken apart at once, never kept"
)]
pub enum Answer {
    Done(Reply),
    Errno(i32),
    /// The kernel decides (the daemon fell back, or cannot be reached).
    Kernel,
}

/// Asks the daemon of `mount`, counting the outcome for call `nr`.
pub fn ask(nr: i64, mount: usize, request: &Request) -> Answer {
    match channel::call(mount, request) {
        Ok((Status::Ok, reply)) => {
            stats::note(nr, Way::Fast);
            Answer::Done(reply)
        }
        Ok((Status::Errno(errno), _)) => {
            stats::note(nr, Way::Fast);
            Answer::Errno(errno)
        }
        Ok((Status::Fallback, _)) | Err(ChannelError::Unreachable) => {
            stats::note(nr, Way::FellBack);
            Answer::Kernel
        }
        // The daemon is gone: the mount is dead for the kernel too.
        Err(ChannelError::Lost) => Answer::Errno(libc::ENOTCONN),
    }
}

/// `-errno` as the kernel returns it.
pub fn fail(errno: i32) -> i64 {
    -i64::from(errno)
}

/// Writes `value` through a pointer the program passed.
///
/// # Safety
/// `ptr` must be where the program expects the call to write a `T`.
pub unsafe fn write_out<T>(ptr: i64, value: T) {
    // SAFETY: the caller vouches for the pointer, as the kernel would write there.
    unsafe { std::ptr::write_unaligned(ptr as *mut T, value) };
}

/// Copies `bytes` into the program's buffer at `ptr` (which holds at least that many).
///
/// # Safety
/// `ptr` must be a buffer of the program's of at least `bytes.len()` bytes.
pub unsafe fn copy_out(ptr: i64, bytes: &[u8]) {
    // SAFETY: the caller vouches for the buffer's size.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr as *mut u8, bytes.len()) };
}
