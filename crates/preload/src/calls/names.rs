//! mkdir, unlink, rmdir, rename, link, symlink: calls that add or remove names.

use shoal_fastpath::{At, Reply, Request};

use super::{ask, fail, kernel, Answer};
use crate::process_state;
use crate::resolve::{self, Route};
use crate::stats;

/// A path argument routed; `Err` carries the call's result when it is not the daemon's.
fn path_at(dirfd: i64, path_ptr: i64, follow: bool) -> Result<(usize, At), Option<i64>> {
    if !process_state::fast_path_on() {
        return Err(None);
    }
    let mut buffer = resolve::PathBuffer::new();
    let path = resolve::c_path(path_ptr, &mut buffer).map_err(|errno| Some(fail(errno)))?;
    match resolve::route(dirfd, path, follow) {
        Route::Fast { mount, at } => Ok((mount, at)),
        Route::Kernel => Err(None),
        Route::Fail(errno) => Err(Some(fail(errno))),
    }
}

/// Before this process unlinks `path` or renames it (or over it): its fast descriptors
/// opened by that path become kernel descriptors of the file, which the kernel keeps open
/// by inode. A fast descriptor is made a kernel one by reopening its path (before a fork,
/// an exec, ...): once the name is gone that fails, and a fork child got a descriptor it
/// could not use (EBADF). Best effort: the path as this process spelled it at open; names
/// removed by other processes, or a renamed parent directory, are not seen here.
fn keep_open_files(dirfd: i64, path_ptr: i64) {
    let open = crate::fds::snapshot();
    if open.is_empty() {
        return;
    }
    let mut buffer = resolve::PathBuffer::new();
    let Ok(path) = resolve::c_path(path_ptr, &mut buffer) else {
        return;
    };
    let absolute = resolve::absolute(dirfd, path);
    for (fd, file) in open {
        if !file.directory && file.path == absolute {
            let _ = crate::fds::to_kernel(i64::from(fd));
        }
    }
}

/// The daemon's answer to a call that returns 0 on success.
fn zero_or(nr: i64, mount: usize, request: &Request, args: [i64; 6], positions: &[usize]) -> i64 {
    match ask(nr, mount, request) {
        Answer::Done(_) => 0,
        Answer::Errno(errno) => fail(errno),
        Answer::Kernel => kernel(nr, args, positions),
    }
}

pub fn mkdir(nr: i64, args: [i64; 6]) -> Option<i64> {
    let (dirfd, path, mode, positions): (i64, i64, u32, &[usize]) = match nr {
        libc::SYS_mkdir => (i64::from(libc::AT_FDCWD), args[0], args[1] as u32, &[]),
        _ => (args[0], args[1], args[2] as u32, &[0]),
    };
    let (mount, at) = match path_at(dirfd, path, false) {
        Ok(found) => found,
        Err(result) => return result,
    };
    if crate::witnessed::exists(mount, &at) {
        stats::note(nr, stats::Way::Fast);
        return Some(fail(libc::EEXIST));
    }
    let request = Request::Mkdir {
        at,
        mode,
        umask: process_state::umask(),
    };
    Some(match ask(nr, mount, &request) {
        Answer::Done(Reply::Exists { witness }) => {
            if let Request::Mkdir { at, .. } = &request {
                crate::witnessed::remember_exists(mount, at, witness);
            }
            fail(libc::EEXIST)
        }
        Answer::Done(_) => 0,
        Answer::Errno(errno) => fail(errno),
        Answer::Kernel => kernel(nr, args, positions),
    })
}

pub fn unlink(nr: i64, args: [i64; 6]) -> Option<i64> {
    let (dirfd, path, dir, positions): (i64, i64, bool, &[usize]) = match nr {
        libc::SYS_unlink => (i64::from(libc::AT_FDCWD), args[0], false, &[]),
        libc::SYS_rmdir => (i64::from(libc::AT_FDCWD), args[0], true, &[]),
        _ => {
            let flags = args[2] as i32;
            if flags & !libc::AT_REMOVEDIR != 0 {
                return Some(fail(libc::EINVAL));
            }
            (args[0], args[1], flags & libc::AT_REMOVEDIR != 0, &[0])
        }
    };
    let (mount, at) = match path_at(dirfd, path, false) {
        Ok(found) => found,
        Err(result) => return result,
    };
    if !dir {
        keep_open_files(dirfd, path);
    }
    Some(zero_or(
        nr,
        mount,
        &Request::Unlink { at, dir },
        args,
        positions,
    ))
}

pub fn rename(nr: i64, args: [i64; 6]) -> Option<i64> {
    let (old_dir, old, new_dir, new, flags, positions): (i64, i64, i64, i64, u32, &[usize]) =
        match nr {
            libc::SYS_rename => {
                let cwd = i64::from(libc::AT_FDCWD);
                (cwd, args[0], cwd, args[1], 0, &[])
            }
            libc::SYS_renameat => (args[0], args[1], args[2], args[3], 0, &[0, 2]),
            _ => (args[0], args[1], args[2], args[3], args[4] as u32, &[0, 2]),
        };
    let from = path_at(old_dir, old, false);
    let to = path_at(new_dir, new, false);
    let ((mount, from), (to_mount, to)) = match (from, to) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(Some(result)), _) | (_, Err(Some(result))) => return Some(result),
        // One side outside the mount: the kernel says EXDEV.
        _ => return Some(kernel(nr, args, positions)),
    };
    if mount != to_mount {
        return Some(kernel(nr, args, positions));
    }
    keep_open_files(old_dir, old);
    keep_open_files(new_dir, new);
    Some(zero_or(
        nr,
        mount,
        &Request::Rename { from, to, flags },
        args,
        positions,
    ))
}

pub fn link(nr: i64, args: [i64; 6]) -> Option<i64> {
    let (old_dir, old, new_dir, new, flags, positions): (i64, i64, i64, i64, i32, &[usize]) =
        match nr {
            libc::SYS_link => {
                let cwd = i64::from(libc::AT_FDCWD);
                (cwd, args[0], cwd, args[1], 0, &[])
            }
            _ => (args[0], args[1], args[2], args[3], args[4] as i32, &[0, 2]),
        };
    if flags & !libc::AT_SYMLINK_FOLLOW != 0 {
        return Some(kernel(nr, args, positions));
    }
    let from = path_at(old_dir, old, flags & libc::AT_SYMLINK_FOLLOW != 0);
    let to = path_at(new_dir, new, false);
    let ((mount, from), (to_mount, to)) = match (from, to) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(Some(result)), _) | (_, Err(Some(result))) => return Some(result),
        _ => return Some(kernel(nr, args, positions)),
    };
    if mount != to_mount {
        return Some(kernel(nr, args, positions));
    }
    Some(zero_or(
        nr,
        mount,
        &Request::Link { from, to },
        args,
        positions,
    ))
}

pub fn symlink(nr: i64, args: [i64; 6]) -> Option<i64> {
    let (target, new_dir, new, positions): (i64, i64, i64, &[usize]) = match nr {
        libc::SYS_symlink => (args[0], i64::from(libc::AT_FDCWD), args[1], &[]),
        _ => (args[0], args[1], args[2], &[1]),
    };
    let mut buffer = resolve::PathBuffer::new();
    let target = match resolve::c_path(target, &mut buffer) {
        Ok(target) => target.to_vec(),
        Err(errno) => return Some(fail(errno)),
    };
    let (mount, at) = match path_at(new_dir, new, false) {
        Ok(found) => found,
        Err(result) => return result,
    };
    Some(zero_or(
        nr,
        mount,
        &Request::Symlink { target, at },
        args,
        positions,
    ))
}
