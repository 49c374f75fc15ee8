//! close, close_range, dup, dup2, dup3, fcntl, and the calls that hand descriptors to the
//! kernel (sendmsg with SCM_RIGHTS, poll, select): the table follows the kernel's numbering.

use super::{fail, kernel, raw};
use crate::{fds, internal_fds, process_state, resolve};

/// A vfork child (posix_spawn's, python's subprocess, dash) shares the parent's memory,
/// this table included, but has a descriptor table of its own: what it closes or dups is
/// its own copy, and the parent's entries must stay as they are. Python's children close
/// every descriptor above 2: before this check, that closed the parent's fast files.
fn in_vfork_child() -> bool {
    process_state::in_vfork_child()
}

pub fn close(args: [i64; 6]) -> Option<i64> {
    let fd = args[0];
    if internal_fds::is_internal(fd) {
        // The library's own socket: not a descriptor of the program's.
        return Some(fail(libc::EBADF));
    }
    resolve::forget_descriptor(fd);
    fds::get(fd)?;
    if !in_vfork_child() {
        fds::remove(fd);
    }
    Some(raw(libc::SYS_close, args))
}

pub fn close_range(args: [i64; 6]) -> Option<i64> {
    let flags = args[2] as u32;
    resolve::forget_descriptors(args[0] as u32, args[1] as u32);
    let result = close_range_around_internal(args);
    // With CLOSE_RANGE_CLOEXEC the kernel only marks the placeholders; they stay fast.
    if result == 0 && flags & libc::CLOSE_RANGE_CLOEXEC == 0 && !in_vfork_child() {
        fds::remove_range(args[0] as u32, args[1] as u32);
    }
    Some(result)
}

/// close_range(2) of every descriptor in the range but the library's own.
fn close_range_around_internal(args: [i64; 6]) -> i64 {
    let (first, last) = (args[0] as u32, args[1] as u32);
    let kept = internal_fds::in_range(first, last);
    if kept.is_empty() || first > last {
        return raw(libc::SYS_close_range, args);
    }
    let mut start = first;
    for fd in kept {
        if fd > start {
            let result = raw(
                libc::SYS_close_range,
                [i64::from(start), i64::from(fd - 1), args[2], 0, 0, 0],
            );
            if result < 0 {
                return result;
            }
        }
        start = fd.saturating_add(1);
    }
    if start <= last && start != 0 {
        return raw(
            libc::SYS_close_range,
            [i64::from(start), i64::from(last), args[2], 0, 0, 0],
        );
    }
    0
}

/// dup(2), dup2(2), dup3(2): the kernel numbers a copy of the placeholder; the copy shares
/// the open file. A fast descriptor replaced by dup2 is closed.
pub fn dup(nr: i64, args: [i64; 6]) -> Option<i64> {
    if nr != libc::SYS_dup {
        internal_fds::make_room(args[1]);
        resolve::forget_descriptor(args[1]);
    }
    let old = fds::get(args[0]);
    let replaces_fast = nr != libc::SYS_dup && fds::is_fast(args[1]) && args[0] != args[1];
    if old.is_none() && !replaces_fast {
        return None;
    }
    if in_vfork_child() {
        // The copy is made of a kernel descriptor of the same file, in the child's table
        // alone (posix_spawn's dup2 file actions, a shell's redirections before exec).
        if let Some(file) = &old {
            if let Err(errno) = fds::reopen_in_place(args[0] as i32, file) {
                return Some(fail(errno));
            }
        }
        return Some(raw(nr, args));
    }
    let result = raw(nr, args);
    if result < 0 {
        return Some(result);
    }
    if replaces_fast {
        fds::remove(result);
    }
    if let Some(file) = old {
        fds::insert(result as i32, file);
    }
    Some(result)
}

const SETTABLE_FLAGS: i32 = libc::O_APPEND | libc::O_NONBLOCK;

/// O_LARGEFILE as the kernel's F_GETFL shows it: a 64-bit kernel sets it on every open
/// (`force_o_largefile`), though x86_64's C library defines the flag as 0.
#[cfg(target_arch = "x86_64")]
const KERNEL_O_LARGEFILE: i32 = 0o100_000;
#[cfg(not(target_arch = "x86_64"))]
const KERNEL_O_LARGEFILE: i32 = libc::O_LARGEFILE;

pub fn fcntl(args: [i64; 6]) -> Option<i64> {
    let file = fds::get(args[0])?;
    let cmd = args[1] as i32;
    Some(match cmd {
        libc::F_GETFL => i64::from(file.status_flags() | KERNEL_O_LARGEFILE),
        libc::F_SETFL => {
            let wanted = args[2] as i32;
            // O_DIRECT, O_ASYNC and O_NOATIME change how I/O works: the kernel's.
            if wanted & (libc::O_DIRECT | libc::O_ASYNC | libc::O_NOATIME) != 0 {
                return Some(kernel(libc::SYS_fcntl, args, &[0]));
            }
            let kept = file.status_flags() & !SETTABLE_FLAGS;
            file.flags.store(
                kept | (wanted & SETTABLE_FLAGS),
                std::sync::atomic::Ordering::Relaxed,
            );
            0
        }
        // Close-on-exec lives on the placeholder, in the kernel.
        libc::F_GETFD | libc::F_SETFD => raw(libc::SYS_fcntl, args),
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC if in_vfork_child() => {
            if let Err(errno) = fds::reopen_in_place(args[0] as i32, &file) {
                return Some(fail(errno));
            }
            raw(libc::SYS_fcntl, args)
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let result = raw(libc::SYS_fcntl, args);
            if result >= 0 {
                fds::insert(result as i32, file);
            }
            result
        }
        // Locks, leases, pipe sizes, seals, owners: the kernel's, on the real file.
        _ => kernel(libc::SYS_fcntl, args, &[0]),
    })
}

/// sendmsg(2) passing fast descriptors (SCM_RIGHTS) passes kernel ones instead.
pub fn sendmsg(args: [i64; 6]) -> Option<i64> {
    if args[1] == 0 {
        return None;
    }
    // SAFETY: the program passed a msghdr, as sendmsg(2) requires.
    let message = unsafe { std::ptr::read_unaligned(args[1] as *const libc::msghdr) };
    if message.msg_control.is_null() {
        return None;
    }
    // SAFETY: the control buffer is the program's, walked with the libc macros within
    // msg_controllen as the kernel walks it.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header) as *const i32;
                let count = ((*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
                for index in 0..count {
                    let fd = std::ptr::read_unaligned(data.add(index));
                    if let Err(errno) = fds::to_kernel(i64::from(fd)) {
                        return Some(fail(errno));
                    }
                }
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
    }
    None
}

/// poll(2), ppoll(2) on fast descriptors poll their kernel descriptors.
pub fn poll(nr: i64, args: [i64; 6]) -> Option<i64> {
    let count = usize::try_from(args[1]).ok()?;
    for index in 0..count.min(1 << 16) {
        // SAFETY: the program passed `count` pollfds, as poll(2) requires.
        let entry =
            unsafe { std::ptr::read_unaligned((args[0] as *const libc::pollfd).add(index)) };
        if let Err(errno) = fds::to_kernel(i64::from(entry.fd)) {
            return Some(fail(errno));
        }
    }
    let _ = nr;
    None
}

/// select(2), pselect6(2): any fast descriptor below nfds becomes a kernel one first.
pub fn select(nr: i64, args: [i64; 6]) -> Option<i64> {
    let nfds = args[0].clamp(0, 1024);
    for (fd, _) in fds::snapshot() {
        if i64::from(fd) < nfds {
            if let Err(errno) = fds::to_kernel(i64::from(fd)) {
                return Some(fail(errno));
            }
        }
    }
    let _ = nr;
    None
}

const FICLONE: u64 = 0x4004_9409;
const FICLONERANGE: u64 = 0x4020_940d;
const FIDEDUPERANGE: u64 = 0xc018_9436;
const FIOCLEX: u64 = 0x5451;
const FIONCLEX: u64 = 0x5450;

/// ioctl(2) on a fast descriptor, as the kernel answers it on the mount: reflinks are not
/// supported (EOPNOTSUPP, from the VFS), close-on-exec lives on the placeholder, the other
/// generic requests (FIONREAD, FIEMAP, FIONBIO...) are served on a kernel descriptor, and
/// anything else reaches the daemon, which answers ENOTTY (isatty's TCGETS included).
pub fn ioctl(args: [i64; 6]) -> Option<i64> {
    fds::get(args[0])?;
    let request = args[1] as u64 & 0xffff_ffff;
    Some(match request {
        FICLONE | FICLONERANGE | FIDEDUPERANGE => fail(libc::EOPNOTSUPP),
        FIOCLEX | FIONCLEX => raw(libc::SYS_ioctl, args),
        _ if is_generic_ioctl(request) => kernel(libc::SYS_ioctl, args, &[0]),
        _ => fail(libc::ENOTTY),
    })
}

/// The requests `do_vfs_ioctl` answers itself before a filesystem sees them.
fn is_generic_ioctl(request: u64) -> bool {
    const FIONBIO: u64 = 0x5421;
    const FIOASYNC: u64 = 0x5452;
    const FIONREAD: u64 = 0x541b;
    const FIOQSIZE: u64 = 0x5460;
    const FIFREEZE: u64 = 0xc004_5877;
    const FITHAW: u64 = 0xc004_5878;
    const FS_IOC_FIEMAP: u64 = 0xc020_660b;
    const FIGETBSZ: u64 = 0x0000_0002;
    const FS_IOC_GETFSUUID: u64 = 0x8011_1500;
    const FS_IOC_GETFSSYSFSPATH: u64 = 0x8081_1501;
    [
        FIONBIO,
        FIOASYNC,
        FIONREAD,
        FIOQSIZE,
        FIFREEZE,
        FITHAW,
        FS_IOC_FIEMAP,
        FIGETBSZ,
        FS_IOC_GETFSUUID,
        FS_IOC_GETFSSYSFSPATH,
    ]
    .contains(&request)
}
