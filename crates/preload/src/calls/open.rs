//! open, openat, creat: a file on the mount opens in the daemon and gets a placeholder
//! descriptor the kernel numbers.

use std::sync::atomic::AtomicI32;
use std::sync::{Arc, Mutex};

use shoal_fastpath::{Opened, Reply, Request, READDIR_BATCH_ENTRIES};

use super::{ask, fail, kernel, Answer};
use crate::fds::{self, DirCursor, Holds, Known, OpenFile, Prefetched};
use crate::resolve::{self, Route};
use crate::{internal_fds, process_state};

/// Flags the kernel alone serves: path-only descriptors, unnamed files, direct I/O
/// (its alignment rules), signal-driven I/O.
/// O_TMPFILE is tested whole (`is_tmpfile`): it includes O_DIRECTORY's bit, so testing it
/// as one of these bits sent every O_DIRECTORY open (opendir) to the kernel.
const KERNEL_ONLY_FLAGS: i32 = libc::O_PATH | libc::O_DIRECT | libc::O_ASYNC;

fn is_tmpfile(flags: i32) -> bool {
    flags & libc::O_TMPFILE == libc::O_TMPFILE
}

#[expect(
    clippy::too_many_lines,
    reason = "the arguments of open, creat, openat and openat2 decoded side by side, then one path for them all"
)]
pub fn open(nr: i64, args: [i64; 6]) -> Option<i64> {
    let (dirfd, path_ptr, flags, mode) = match nr {
        libc::SYS_open => (
            i64::from(libc::AT_FDCWD),
            args[0],
            args[1] as i32,
            args[2] as u32,
        ),
        libc::SYS_creat => (
            i64::from(libc::AT_FDCWD),
            args[0],
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            args[1] as u32,
        ),
        _ => (args[0], args[1], args[2] as i32, args[3] as u32),
    };
    let dirfd_position: &[usize] = if nr == libc::SYS_openat { &[0] } else { &[] };
    if !process_state::fast_path_on() {
        return Some(kernel(nr, args, dirfd_position));
    }
    if flags & KERNEL_ONLY_FLAGS != 0 || is_tmpfile(flags) {
        // Counted with the daemon's fallbacks (when the path is on a mount or not alike).
        crate::stats::note(nr, crate::stats::Way::FellBack);
        return Some(kernel(nr, args, dirfd_position));
    }
    let path = match resolve::c_path(path_ptr) {
        Ok(path) => path,
        Err(errno) => return Some(fail(errno)),
    };
    // O_CREAT|O_EXCL never follows a final symlink (the name must be new).
    let exclusive = flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL;
    let follow = flags & libc::O_NOFOLLOW == 0 && !exclusive;
    let (mount, at) = match resolve::route(dirfd, &path, follow) {
        Route::Kernel => return None,
        Route::Fail(errno) => return Some(fail(errno)),
        Route::Fast { mount, at } => (mount, at),
    };
    let request = if flags & libc::O_DIRECTORY != 0 && flags & libc::O_CREAT == 0 {
        Request::OpenDir {
            at,
            flags,
            max: READDIR_BATCH_ENTRIES,
            with_attrs: crate::listings::want_attrs(),
        }
    } else {
        Request::Open {
            at,
            flags,
            mode,
            umask: process_state::umask(),
        }
    };
    let changes_before = crate::listings::changes_now(mount);
    let (opened, prefetched) = match ask(nr, mount, &request) {
        Answer::Done(Reply::Opened(opened)) => (opened, None),
        Answer::Done(Reply::OpenedDir {
            opened,
            entries,
            done,
            changes,
            dir_version,
            witness,
        }) => {
            let dir = opened.attr.ino;
            crate::listings::remember(mount, dir, changes, dir_version, &entries);
            if let Request::OpenDir { at, .. } = &request {
                // `cp -a` and `tar c` stat what they list by paths through this one.
                crate::listings::remember_reached(mount, at.base, &at.path, dir, changes, witness);
            }
            let page = Prefetched {
                entries,
                done,
                changes,
            };
            (opened, Some(page))
        }
        Answer::Done(_) => return Some(fail(libc::EPROTO)),
        Answer::Errno(errno) => return Some(fail(errno)),
        Answer::Kernel => return Some(kernel(nr, args, dirfd_position)),
    };
    let file = Arc::new(OpenFile {
        mount,
        handle: opened.handle,
        ino: opened.attr.ino,
        directory: opened.attr.mode & libc::S_IFMT == libc::S_IFDIR,
        flags: AtomicI32::new(
            flags
                & !(libc::O_CREAT
                    | libc::O_EXCL
                    | libc::O_TRUNC
                    | libc::O_NOCTTY
                    | libc::O_CLOEXEC),
        ),
        offset: Mutex::new(0),
        cursor: Mutex::new(DirCursor {
            prefetched,
            ..DirCursor::default()
        }),
        path: resolve::absolute(dirfd, &path),
        known: Mutex::new(holds_at_open(mount, &opened, changes_before)),
    });
    let fd = internal_fds::placeholder(flags & libc::O_CLOEXEC != 0);
    if fd < 0 {
        // No number for it: the daemon's file is closed again.
        let _ = crate::channel::call(
            mount,
            &Request::Close {
                handle: opened.handle,
            },
        );
        return Some(fd);
    }
    fds::insert(fd as i32, file);
    Some(fd)
}

/// What the attributes an open returned hold for: the inode's version where the daemon
/// gives one; else, if nothing changed on the mount while the open was answered (a create
/// or truncate would have moved the count), the count.
fn holds_at_open(mount: usize, opened: &Opened, changes_before: Option<u64>) -> Option<Known> {
    let holds = match opened.version {
        Some(version) => Holds::WhileVersion(version),
        None => Holds::WhileChanges(
            changes_before.filter(|&before| crate::listings::changes_now(mount) == Some(before))?,
        ),
    };
    Some(Known {
        holds,
        attr: opened.attr,
        no_xattrs: opened.no_xattrs,
    })
}
