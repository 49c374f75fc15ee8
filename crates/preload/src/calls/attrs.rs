//! chmod, chown, utimensat, truncate and the xattr reads: attribute calls by path or by
//! fast descriptor.

use shoal_fastpath::{Reply, Request, SetAttrWire, Target, TimeWire};

use super::stat::{named, Named};
use super::{ask, copy_out, fail, kernel, Answer};
use crate::fds;
use crate::intercept::FCHMODAT2;
use crate::stats;

const UTIME_NOW: i64 = (1 << 30) - 1;
const UTIME_OMIT: i64 = (1 << 30) - 2;

fn no_change() -> SetAttrWire {
    SetAttrWire {
        mode: None,
        uid: None,
        gid: None,
        size: None,
        atime: TimeWire::Omit,
        mtime: TimeWire::Omit,
    }
}

/// The target of an f- call (a fast descriptor) or of a path call.
fn target_of(named: Named) -> Result<Option<(usize, Target)>, i32> {
    match named {
        Named::Handle(file) => match super::open::handle_of(&file) {
            Ok(handle) => Ok(Some((file.mount, Target::Handle(handle)))),
            Err(super::open::NoHandle::Errno(errno)) => Err(errno),
            Err(super::open::NoHandle::Kernel) => Ok(None),
        },
        Named::Path(mount, at) => Ok(Some((mount, Target::Path(at)))),
        Named::Kernel => Ok(None),
        Named::Fail(errno) => Err(errno),
    }
}

fn descriptor(fd: i64) -> Named {
    match fds::get(fd) {
        Some(file) => Named::Handle(file),
        None => Named::Kernel,
    }
}

fn set_attr(
    nr: i64,
    args: [i64; 6],
    positions: &[usize],
    named: Named,
    change: SetAttrWire,
) -> Option<i64> {
    let file = match &named {
        Named::Handle(file) => Some(file.clone()),
        _ => None,
    };
    let (mount, target) = match target_of(named) {
        Ok(Some(found)) => found,
        Ok(None) => return None,
        Err(errno) => return Some(fail(errno)),
    };
    Some(match ask(nr, mount, &Request::SetAttr { target, change }) {
        Answer::Done(Reply::Changed {
            attr,
            kernel_holds,
            version,
            no_xattrs,
        }) => {
            if let Some(file) = file {
                crate::listings::remember_known(&file, version, attr, no_xattrs);
            }
            if kernel_holds {
                refresh_kernel_attributes(nr, args);
            }
            0
        }
        Answer::Done(_) => 0,
        Answer::Errno(errno) => fail(errno),
        Answer::Kernel => kernel(nr, args, positions),
    })
}

/// The kernel caches what the daemon just changed and checks owner and mode at setattr
/// from its cache without asking: a stat through the kernel (the daemon has invalidated
/// what it cached) brings it up to date before the call returns.
fn refresh_kernel_attributes(nr: i64, args: [i64; 6]) {
    let cwd = i64::from(libc::AT_FDCWD);
    let (dirfd, path_ptr, flags) = match nr {
        libc::SYS_fchmod | libc::SYS_fchown | libc::SYS_ftruncate => {
            let Some(file) = fds::get(args[0]) else {
                return;
            };
            return stat_in_kernel(&file.path, 0);
        }
        libc::SYS_utimensat if args[1] == 0 => {
            let Some(file) = fds::get(args[0]) else {
                return;
            };
            return stat_in_kernel(&file.path, 0);
        }
        libc::SYS_chmod | libc::SYS_chown | libc::SYS_truncate => (cwd, args[0], 0),
        libc::SYS_lchown => (cwd, args[0], libc::AT_SYMLINK_NOFOLLOW),
        libc::SYS_fchownat => (args[0], args[1], args[4] as i32),
        libc::SYS_utimensat => (args[0], args[1], args[3] as i32),
        _ => (args[0], args[1], 0),
    };
    let mut buffer = crate::resolve::PathBuffer::new();
    if let Ok(path) = crate::resolve::c_path(path_ptr, &mut buffer) {
        let absolute = crate::resolve::absolute(dirfd, path);
        stat_in_kernel(&absolute, flags & libc::AT_SYMLINK_NOFOLLOW);
    }
}

fn stat_in_kernel(path: &[u8], flags: i32) {
    // SAFETY: stat is plain data; all zeroes is a valid value.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    crate::sys::call(
        libc::SYS_newfstatat,
        &[
            i64::from(libc::AT_FDCWD),
            path.as_ptr() as i64,
            std::ptr::addr_of_mut!(stat) as i64,
            i64::from(flags),
        ],
    );
}

pub fn chmod(nr: i64, args: [i64; 6]) -> Option<i64> {
    let cwd = i64::from(libc::AT_FDCWD);
    let (named, mode, positions): (Named, u32, &[usize]) = match nr {
        libc::SYS_fchmod => (descriptor(args[0]), args[1] as u32, &[0]),
        libc::SYS_chmod => (named(cwd, args[0], 0), args[1] as u32, &[]),
        FCHMODAT2 => {
            let flags = args[3] as i32;
            if flags & !(libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) != 0 {
                return Some(fail(libc::EINVAL));
            }
            (named(args[0], args[1], flags), args[2] as u32, &[0])
        }
        // fchmodat's flags argument is not the kernel's (glibc emulates NOFOLLOW).
        _ => (named(args[0], args[1], 0), args[2] as u32, &[0]),
    };
    let result = set_attr(
        nr,
        args,
        positions,
        named,
        SetAttrWire {
            mode: Some(mode & 0o7777),
            ..no_change()
        },
    );
    if nr == FCHMODAT2 && result == Some(-i64::from(libc::ENOSYS)) {
        // A kernel before 6.6, reached for a call the daemon left to it: what glibc does.
        return Some(fchmodat_nofollow_emulated(args));
    }
    result
}

/// glibc's fchmodat with AT_SYMLINK_NOFOLLOW where fchmodat2 is missing: an O_PATH
/// descriptor of the file itself, never a symlink's mode (EOPNOTSUPP), then chmod through
/// its /proc/self/fd link. Every step is the kernel's.
fn fchmodat_nofollow_emulated(args: [i64; 6]) -> i64 {
    let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let fd = kernel(
        libc::SYS_openat,
        [args[0], args[1], i64::from(flags), 0, 0, 0],
        &[0],
    );
    if fd < 0 {
        return fd;
    }
    // SAFETY: stat is plain data; all zeroes is a valid value.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    let empty = c"";
    let mut result = crate::calls::raw(
        libc::SYS_newfstatat,
        [
            fd,
            empty.as_ptr() as i64,
            std::ptr::addr_of_mut!(stat) as i64,
            i64::from(libc::AT_EMPTY_PATH),
            0,
            0,
        ],
    );
    if result == 0 {
        result = if stat.st_mode & libc::S_IFMT == libc::S_IFLNK {
            -i64::from(libc::EOPNOTSUPP)
        } else {
            let link = crate::sys::proc_fd_link(fd);
            crate::calls::raw(libc::SYS_chmod, [link.as_ptr() as i64, args[2], 0, 0, 0, 0])
        };
    }
    crate::calls::raw(libc::SYS_close, [fd, 0, 0, 0, 0, 0]);
    result
}

pub fn chown(nr: i64, args: [i64; 6]) -> Option<i64> {
    let cwd = i64::from(libc::AT_FDCWD);
    let (named, uid, gid, positions): (Named, i64, i64, &[usize]) = match nr {
        libc::SYS_fchown => (descriptor(args[0]), args[1], args[2], &[0]),
        libc::SYS_chown => (named(cwd, args[0], 0), args[1], args[2], &[]),
        libc::SYS_lchown => (
            named(cwd, args[0], libc::AT_SYMLINK_NOFOLLOW),
            args[1],
            args[2],
            &[],
        ),
        _ => (
            named(args[0], args[1], args[4] as i32),
            args[2],
            args[3],
            &[0],
        ),
    };
    let id = |value: i64| (value as u32 != u32::MAX).then_some(value as u32);
    let (uid, gid) = (id(uid), id(gid));
    if let Named::Handle(file) = &named {
        if chown_changes_nothing(file, uid, gid) {
            stats::note(nr, stats::Way::Fast);
            return Some(0);
        }
    }
    set_attr(
        nr,
        args,
        positions,
        named,
        SetAttrWire {
            uid,
            gid,
            ..no_change()
        },
    )
}

/// Whether a chown of `file` to `uid` and `gid` would leave it exactly as it is, as the
/// kernel path would: its owner asks for the owner and group it has (allowed without
/// privilege), it has no set-id bits (a chown clears them) and no xattrs (a chown drops
/// security.capability), it was opened for writing (so the mount is not read-only: EROFS
/// comes first), and its ctime is already this tick of the coarse clock the engine stamps
/// changes with (the one thing a chown would change). What is known of it must hold (its
/// version). `tar x` run by root chowns every file it makes to the owner it has.
fn chown_changes_nothing(file: &fds::OpenFile, uid: Option<u32>, gid: Option<u32>) -> bool {
    let Some(known) = crate::listings::known(file) else {
        return false;
    };
    let attr = known.attr;
    let access = file.flags.load(std::sync::atomic::Ordering::Relaxed) & libc::O_ACCMODE;
    known.no_xattrs
        && access != libc::O_RDONLY
        && uid.is_none_or(|uid| uid == attr.uid)
        && gid.is_none_or(|gid| gid == attr.gid)
        && attr.mode & (libc::S_ISUID | libc::S_ISGID) == 0
        && crate::sys::call(libc::SYS_geteuid, &[]) as u32 == attr.uid
        && coarse_now() == Some(attr.ctime)
}

/// CLOCK_REALTIME_COARSE (the vDSO's; not a system call the library intercepts).
fn coarse_now() -> Option<(i64, u32)> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut now) };
    (rc == 0).then_some((now.tv_sec, now.tv_nsec as u32))
}

fn time_of(spec: libc::timespec) -> Result<TimeWire, i32> {
    match spec.tv_nsec {
        UTIME_NOW => Ok(TimeWire::Now),
        UTIME_OMIT => Ok(TimeWire::Omit),
        0..=999_999_999 => Ok(TimeWire::At {
            secs: spec.tv_sec,
            nanos: spec.tv_nsec as u32,
        }),
        _ => Err(libc::EINVAL),
    }
}

/// utimensat(dirfd, path, times, flags); a NULL path is futimens on dirfd.
pub fn utimensat(args: [i64; 6]) -> Option<i64> {
    let nr = libc::SYS_utimensat;
    let (atime, mtime) = if args[2] == 0 {
        (TimeWire::Now, TimeWire::Now)
    } else {
        // SAFETY: the program passed two timespecs, as utimensat(2) requires.
        let times = unsafe { std::ptr::read_unaligned(args[2] as *const [libc::timespec; 2]) };
        match (time_of(times[0]), time_of(times[1])) {
            (Ok(atime), Ok(mtime)) => (atime, mtime),
            _ => return Some(fail(libc::EINVAL)),
        }
    };
    let named = if args[1] == 0 {
        descriptor(args[0])
    } else {
        named(args[0], args[1], args[3] as i32)
    };
    set_attr(
        nr,
        args,
        &[0],
        named,
        SetAttrWire {
            atime,
            mtime,
            ..no_change()
        },
    )
}

pub fn truncate(nr: i64, args: [i64; 6]) -> Option<i64> {
    if args[1] < 0 {
        return Some(fail(libc::EINVAL));
    }
    let (named, positions): (Named, &[usize]) = match nr {
        libc::SYS_ftruncate => {
            let file = fds::get(args[0])?;
            if file.directory || !file.writable() {
                return Some(fail(libc::EINVAL));
            }
            (Named::Handle(file), &[0])
        }
        _ => (named(i64::from(libc::AT_FDCWD), args[0], 0), &[]),
    };
    set_attr(
        nr,
        args,
        positions,
        named,
        SetAttrWire {
            size: Some(args[1] as u64),
            ..no_change()
        },
    )
}

/// What an xattr call names: a descriptor (the f- variant), a path not following a final
/// symlink (the l- variant), or a path; with the argument positions holding descriptors.
fn xattr_target(by_descriptor: bool, no_follow: bool, first: i64) -> (Named, &'static [usize]) {
    let cwd = i64::from(libc::AT_FDCWD);
    if by_descriptor {
        (descriptor(first), &[0])
    } else if no_follow {
        (named(cwd, first, libc::AT_SYMLINK_NOFOLLOW), &[])
    } else {
        (named(cwd, first, 0), &[])
    }
}

/// The value (size 0: its length) as getxattr(2) returns it into the program's buffer.
fn xattr_result(value: &[u8], buf: i64, size: usize) -> i64 {
    if size == 0 {
        return value.len() as i64;
    }
    if value.len() > size {
        return fail(libc::ERANGE);
    }
    // SAFETY: the program's buffer holds `size` bytes; `value.len() <= size`.
    unsafe { copy_out(buf, value) };
    value.len() as i64
}

/// What a get- or remove-xattr call names: its mount, target and attribute name, and
/// where its descriptor argument is. `Err` holds the call's answer already decided: `None`
/// for the kernel, or a failure.
type XattrCall = (usize, Target, Vec<u8>, &'static [usize]);

fn xattr_call(
    args: [i64; 6],
    by_descriptor: bool,
    no_follow: bool,
) -> Result<XattrCall, Option<i64>> {
    let (named, positions) = xattr_target(by_descriptor, no_follow, args[0]);
    let mut buffer = crate::resolve::PathBuffer::new();
    let name = match crate::resolve::c_path(args[1], &mut buffer) {
        Ok(name) => name.to_vec(),
        Err(errno) => return Err(Some(fail(errno))),
    };
    match target_of(named) {
        Ok(Some((mount, target))) => Ok((mount, target, name, positions)),
        Ok(None) => Err(None),
        Err(errno) => Err(Some(fail(errno))),
    }
}

/// removexattr, lremovexattr, fremovexattr (the daemon serves ACLs that are not there and
/// user.*; the rest is the kernel's).
pub fn removexattr(nr: i64, args: [i64; 6]) -> Option<i64> {
    let by_descriptor = nr == libc::SYS_fremovexattr;
    let (mount, target, name, positions) =
        match xattr_call(args, by_descriptor, nr == libc::SYS_lremovexattr) {
            Ok(call) => call,
            Err(answer) => return answer,
        };
    Some(
        match ask(nr, mount, &Request::RemoveXattr { target, name }) {
            Answer::Done(_) => 0,
            Answer::Errno(errno) => fail(errno),
            Answer::Kernel => kernel(nr, args, positions),
        },
    )
}

pub fn getxattr(nr: i64, args: [i64; 6]) -> Option<i64> {
    let by_descriptor = nr == libc::SYS_fgetxattr;
    if by_descriptor && acl_known_absent(args[0], args[1]) {
        // What the daemon would answer (cp -a asks it of every file it copies).
        stats::note(nr, stats::Way::Fast);
        return Some(fail(libc::ENODATA));
    }
    let (mount, target, name, positions) =
        match xattr_call(args, by_descriptor, nr == libc::SYS_lgetxattr) {
            Ok(call) => call,
            Err(answer) => return answer,
        };
    if let Target::Path(at) = &target {
        if NAMES_LISTINGS_ANSWER.contains(&name.as_slice())
            && super::stat::listed_without_xattrs(mount, at)
        {
            stats::note(nr, stats::Way::Fast);
            stats::note_listed_other();
            return Some(fail(libc::ENODATA));
        }
    }
    Some(match ask(nr, mount, &Request::GetXattr { target, name }) {
        Answer::Done(Reply::Data(value)) => xattr_result(&value, args[2], args[3] as usize),
        Answer::Done(_) => fail(libc::EPROTO),
        Answer::Errno(errno) => fail(errno),
        Answer::Kernel => kernel(nr, args, positions),
    })
}

/// Names a listing answers ENODATA for, by path, for a regular file or directory it says
/// holds no xattr: what the daemon answers from the store, with no permission rule for them
/// (nor has the kernel's `xattr_permission` one for `security.*` and `system.*`). `ls -l`
/// asks the first three of every entry it lists (its SELinux label and its ACLs), `cp -a`
/// the ACLs of every directory.
const NAMES_LISTINGS_ANSWER: [&[u8]; 4] = [
    b"security.selinux",
    b"system.posix_acl_access",
    b"system.posix_acl_default",
    b"security.capability",
];

/// Whether `name` is a POSIX ACL and the file open as `fd` is known to have no xattrs: the
/// daemon answers ENODATA then, with no permission rule for these names (nor has the
/// kernel's `xattr_permission` one for `system.*`).
fn acl_known_absent(fd: i64, name: i64) -> bool {
    let Some(file) = fds::get(fd) else {
        return false;
    };
    // The name is read from the program only when the file's state could answer.
    crate::listings::known(&file).is_some_and(|known| known.no_xattrs)
        && crate::resolve::c_path(name, &mut crate::resolve::PathBuffer::new()).is_ok_and(|name| {
            name == b"system.posix_acl_access" || name == b"system.posix_acl_default"
        })
}

pub fn listxattr(nr: i64, args: [i64; 6]) -> Option<i64> {
    let (named, positions) = xattr_target(
        nr == libc::SYS_flistxattr,
        nr == libc::SYS_llistxattr,
        args[0],
    );
    let known_empty = match &named {
        // What the daemon would answer: an empty list (cp -a asks twice per file, and
        // twice per directory by path).
        Named::Handle(file) => crate::listings::known(file).is_some_and(|known| known.no_xattrs),
        Named::Path(mount, at) => super::stat::listed_without_xattrs(*mount, at),
        _ => false,
    };
    if known_empty {
        crate::stats::note(nr, crate::stats::Way::Fast);
        if matches!(named, Named::Path(..)) {
            stats::note_listed_other();
        }
        return Some(0);
    }
    let (mount, target) = match target_of(named) {
        Ok(Some(found)) => found,
        Ok(None) => return None,
        Err(errno) => return Some(fail(errno)),
    };
    Some(match ask(nr, mount, &Request::ListXattr { target }) {
        Answer::Done(Reply::Data(list)) => xattr_result(&list, args[1], args[2] as usize),
        Answer::Done(_) => fail(libc::EPROTO),
        Answer::Errno(errno) => fail(errno),
        Answer::Kernel => kernel(nr, args, positions),
    })
}

/// setxattr, lsetxattr, fsetxattr of a `system.posix_acl_access` that only restates
/// permission bits (what `cp -a` and `tar --acls` set on a file without an ACL): the mode
/// change the kernel makes of it, on the fast path. Any other xattr goes to the kernel.
pub fn setxattr(nr: i64, args: [i64; 6]) -> Option<i64> {
    let (named, positions) = xattr_target(
        nr == libc::SYS_fsetxattr,
        nr == libc::SYS_lsetxattr,
        args[0],
    );
    let mut buffer = crate::resolve::PathBuffer::new();
    let name = crate::resolve::c_path(args[1], &mut buffer).ok()?;
    if name != b"system.posix_acl_access" || args[4] != 0 {
        return None;
    }
    let size = usize::try_from(args[3]).ok()?;
    if args[2] == 0 || size > 64 {
        return None;
    }
    // SAFETY: the program passed `size` bytes of value, as setxattr(2) requires.
    let value = unsafe { std::slice::from_raw_parts(args[2] as *const u8, size) };
    let perm = minimal_acl_mode(value)?;
    let (mount, target) = match target_of(named) {
        Ok(Some(found)) => found,
        Ok(None) => return None,
        Err(errno) => return Some(fail(errno)),
    };
    Some(
        match ask(nr, mount, &Request::SetAccessAclMode { target, perm }) {
            Answer::Done(Reply::Changed { kernel_holds, .. }) => {
                if kernel_holds {
                    refresh_kernel_attributes(nr, args);
                }
                0
            }
            Answer::Done(_) => 0,
            Answer::Errno(errno) => fail(errno),
            Answer::Kernel => kernel(nr, args, positions),
        },
    )
}

/// The permission bits of an ACL xattr with exactly the owner, group and other entries
/// (version 2, in the kernel's order); `None` for anything else.
fn minimal_acl_mode(value: &[u8]) -> Option<u32> {
    const VERSION: u32 = 2;
    const TAGS: [u16; 3] = [0x01, 0x04, 0x20];
    if value.len() != 4 + 3 * 8 || u32::from_le_bytes(value[..4].try_into().ok()?) != VERSION {
        return None;
    }
    let mut mode = 0;
    for (entry, tag) in value[4..].chunks_exact(8).zip(TAGS) {
        let entry_tag = u16::from_le_bytes([entry[0], entry[1]]);
        let perm = u16::from_le_bytes([entry[2], entry[3]]);
        if entry_tag != tag || perm > 7 {
            return None;
        }
        mode = (mode << 3) | u32::from(perm);
    }
    Some(mode)
}

#[cfg(test)]
mod tests {
    use super::minimal_acl_mode;

    #[test]
    fn only_a_minimal_acl_is_a_mode() {
        // What cp -a set in strace: rw- r-- r--.
        let minimal = b"\x02\0\0\0\x01\0\x06\0\xff\xff\xff\xff\x04\0\x04\0\xff\xff\xff\xff\x20\0\x04\0\xff\xff\xff\xff";
        assert_eq!(minimal_acl_mode(minimal), Some(0o644));
        let mut named_user = minimal.to_vec();
        named_user[12] = 0x02;
        assert_eq!(minimal_acl_mode(&named_user), None);
        assert_eq!(minimal_acl_mode(&minimal[..20]), None);
    }
}
