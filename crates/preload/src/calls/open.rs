//! open, openat, creat: a file on the mount opens in the daemon and gets a placeholder
//! descriptor the kernel numbers.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64};
use std::sync::{Arc, Mutex};

use shoal_fastpath::{At, Opened, Reply, Request, Status, Walk, READDIR_BATCH_ENTRIES};

use super::{ask, fail, kernel, Answer};
use crate::fds::{self, DirCursor, DirOrigin, Holds, Known, OpenFile, Prefetched};
use crate::listings::{Batch, Listed};
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

/// open, creat and openat's arguments as openat's: directory, path, flags, mode.
fn open_arguments(nr: i64, args: [i64; 6]) -> (i64, i64, i32, u32) {
    match nr {
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
    }
}

pub fn open(nr: i64, args: [i64; 6]) -> Option<i64> {
    let (dirfd, path_ptr, flags, mode) = open_arguments(nr, args);
    let dirfd_position: &[usize] = if nr == libc::SYS_openat { &[0] } else { &[] };
    if !process_state::fast_path_on() {
        return Some(kernel(nr, args, dirfd_position));
    }
    if flags & KERNEL_ONLY_FLAGS != 0 || is_tmpfile(flags) {
        // Counted with the daemon's fallbacks (when the path is on a mount or not alike).
        crate::stats::note(nr, crate::stats::Way::FellBack);
        return Some(kernel(nr, args, dirfd_position));
    }
    let mut buffer = resolve::PathBuffer::new();
    let path = match resolve::c_path(path_ptr, &mut buffer) {
        Ok(path) => path,
        Err(errno) => return Some(fail(errno)),
    };
    // O_CREAT|O_EXCL never follows a final symlink (the name must be new).
    let exclusive = flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL;
    let follow = flags & libc::O_NOFOLLOW == 0 && !exclusive;
    let (mount, at) = match resolve::route(dirfd, path, follow) {
        Route::Kernel => return None,
        Route::Fail(errno) => return Some(fail(errno)),
        Route::Fast { mount, at } => (mount, at),
    };
    if flags & libc::O_CREAT == 0 && super::stat::absent(mount, &at) {
        // What the daemon would answer; the kernel checks nothing else first for a name
        // that is not there (the flags are valid: O_TMPFILE and the like went above).
        crate::stats::note(nr, crate::stats::Way::Fast);
        return Some(fail(libc::ENOENT));
    }
    if flags & libc::O_DIRECTORY != 0 && flags & libc::O_CREAT == 0 {
        return open_directory(nr, args, dirfd, path, flags, mount, at);
    }
    let request = Request::Open {
        at,
        flags,
        mode,
        umask: process_state::umask(),
        read_ahead: crate::whole_file::to_ask(flags),
    };
    let changes_before = crate::listings::changes_now(mount);
    let (opened, data) = match ask(nr, mount, &request) {
        Answer::Done(Reply::Opened(opened)) => (opened, None),
        Answer::Done(Reply::OpenedWithData { opened, data }) => (opened, Some(data)),
        Answer::Done(_) => return Some(fail(libc::EPROTO)),
        Answer::Errno(errno) => return Some(fail(errno)),
        Answer::Kernel => return Some(kernel(nr, args, dirfd_position)),
    };
    let fd = install(
        mount,
        dirfd,
        path,
        flags,
        &opened,
        None,
        changes_before,
        None,
    );
    if let (Some(data), Some(version)) = (data, opened.version) {
        crate::whole_file::keep(fd, data, version);
    }
    Some(fd)
}

/// `open` with O_DIRECTORY (not O_CREAT): answered from a directory kept open (`below.rs`)
/// or by the daemon with its first page (`Request::OpenDir`).
fn open_directory(
    nr: i64,
    args: [i64; 6],
    dirfd: i64,
    path: &[u8],
    flags: i32,
    mount: usize,
    at: At,
) -> Option<i64> {
    let dirfd_position: &[usize] = if nr == libc::SYS_openat { &[0] } else { &[] };
    let who = crate::channel::who();
    let opening = Opening::of(mount, dirfd, &at, flags, who);
    if flags & !OPENDIR_FLAGS == 0 && !process_state::in_vfork_child() {
        if let Some(fd) = open_without_asking(nr, mount, (dirfd, path, &at), flags, &opening) {
            return Some(fd);
        }
    }
    let changes_before = crate::listings::changes_now(mount);
    let parent = opening.parent.filter(|_| flags & libc::O_NOFOLLOW != 0);
    let mut origin = DirOrigin {
        parent,
        name: parent.map_or_else(Vec::new, |_| opening.name.to_vec()),
        who,
        changes: changes_before,
        searchable: false,
    };
    let (walk, below) = crate::below::to_ask(mount, opening.walking);
    let request = Request::OpenDir {
        max: READDIR_BATCH_ENTRIES,
        with_attrs: crate::listings::want_attrs(),
        below,
        walk,
        at,
        flags,
    };
    let (opened, prefetched) = match ask(nr, mount, &request) {
        Answer::Done(Reply::Opened(opened)) => (opened, None),
        Answer::Done(Reply::OpenedDir {
            opened,
            entries,
            done,
            changes,
            dir_version,
            witness,
            below,
        }) => {
            let dir = opened.attr.ino;
            let mut batch = Batch::default();
            let page = (&entries[..], done);
            batch.remember(mount, dir, (changes, dir_version), page, Listed::ByProgram);
            if let Request::OpenDir { at, .. } = &request {
                // `cp -a` and `tar c` stat what they list by paths through this one.
                batch.reached(mount, at.base, &at.path, dir, changes, witness);
            }
            batch.keep();
            crate::below::keep(mount, changes, below);
            origin.searchable = entries.iter().any(|entry| entry.attr.is_some());
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
    Some(install(
        mount,
        dirfd,
        path,
        flags,
        &opened,
        prefetched,
        changes_before,
        Some(origin),
    ))
}

/// `opendir` answered without a request: from a directory kept open (`below.rs`), else from
/// a listing kept (`open_listed`).
fn open_without_asking(
    nr: i64,
    mount: usize,
    (dirfd, path, at): (i64, &[u8], &At),
    flags: i32,
    opening: &Opening,
) -> Option<i64> {
    let who = crate::channel::who();
    if let Some(kept) = opening.take_kept(mount, who) {
        return Some(open_kept(nr, mount, dirfd, path, at, flags, kept));
    }
    if opening.walking == Walk::ByDescriptor {
        return None;
    }
    open_listed(nr, mount, (dirfd, path), flags, opening, who)
}

/// `opendir` by path of a directory whose whole listing the process keeps, answered from
/// that listing without a request: `git status` lists every directory of its work tree
/// for its stats, then opens each by path to search for untracked files (578 directories,
/// 78 requests, 12 ms of its 26 ms search waiting on the daemon, 9k-file clone). The
/// listing was read by a daemon open of the directory for the same caller (`who`), whose
/// names hold while its version stays: the open would be granted and list the same.
/// The daemon's handle is opened only if a call needs it (`handle_of`). Not for an open
/// relative to a fast descriptor (a tree walk's `openat`): the walk's next calls start from
/// the directory, which the daemon lets a process do from one it holds a handle of.
fn open_listed(
    nr: i64,
    mount: usize,
    (dirfd, path): (i64, &[u8]),
    flags: i32,
    opening: &Opening,
    who: crate::channel::Who,
) -> Option<i64> {
    let changes = crate::listings::changes_now(mount)?;
    let (attr, version, no_xattrs) =
        crate::listings::entry(mount, opening.parent?, opening.name, who)?;
    if attr.mode & libc::S_IFMT != libc::S_IFDIR {
        // A symlink (followed by the daemon) or no directory (ENOTDIR, as it says).
        return None;
    }
    let entries = crate::listings::whole_page(mount, attr.ino, who)?;
    crate::stats::note(nr, crate::stats::Way::Fast);
    crate::stats::note_opened_from_listing();
    let opened = Opened {
        handle: 0,
        attr,
        created: false,
        version,
        no_xattrs,
    };
    let origin = DirOrigin {
        parent: opening.parent,
        name: opening.name.to_vec(),
        who,
        changes: Some(changes),
        searchable: true,
    };
    let page = Prefetched {
        entries,
        done: true,
        changes,
    };
    Some(install(
        mount,
        dirfd,
        path,
        flags,
        &opened,
        Some(page),
        Some(changes),
        Some(origin),
    ))
}

/// The daemon's handle of `file`, opened now for a directory opened from a kept listing
/// (`open_listed`). By its inode, which the daemon lets a process start from once it has
/// opened the directory (the listing came from such an open), wherever it has moved since;
/// else by the path it was opened by, which must still name it (ESTALE if not, as
/// `fds::to_kernel` says of a file renamed or removed since). The open checks the caller's access now: one who lost read access
/// since `opendir` gets what a new open would, where a descriptor the kernel opened keeps
/// the access it was granted (as a listing kept under other credentials is not used).
pub fn handle_of(file: &OpenFile) -> Result<u64, NoHandle> {
    if let Some(handle) = file.handle() {
        return Ok(handle);
    }
    let by_inode = At {
        base: file.ino,
        path: b".".to_vec(),
        follow: true,
    };
    let opened = match open_directory_handle(file.mount, by_inode) {
        Err(NoHandle::Kernel) => {
            let path = file.path.strip_suffix(b"\0").unwrap_or(&file.path);
            match resolve::route(i64::from(libc::AT_FDCWD), path, true) {
                Route::Fast { mount, at } if mount == file.mount => {
                    open_directory_handle(mount, at)?
                }
                Route::Fail(errno) => return Err(NoHandle::Errno(errno)),
                _ => return Err(NoHandle::Errno(libc::ESTALE)),
            }
        }
        opened => opened?,
    };
    if opened.attr.ino != file.ino {
        crate::channel::close(file.mount, opened.handle);
        return Err(NoHandle::Errno(libc::ESTALE));
    }
    let (handle, taken) = file.take_handle(opened.handle);
    if !taken {
        // Another thread opened it first.
        crate::channel::close(file.mount, opened.handle);
    }
    Ok(handle)
}

/// The daemon's open of directory `at` for reading, without its entries.
fn open_directory_handle(mount: usize, at: At) -> Result<Opened, NoHandle> {
    let request = Request::OpenDir {
        at,
        flags: libc::O_RDONLY | libc::O_DIRECTORY,
        max: 1,
        with_attrs: false,
        below: 0,
        walk: Walk::No,
    };
    match crate::channel::call(mount, &request) {
        Ok((Status::Ok, Reply::OpenedDir { opened, .. } | Reply::Opened(opened))) => Ok(opened),
        Ok((Status::Ok, _)) => Err(NoHandle::Errno(libc::EPROTO)),
        Ok((Status::Errno(errno), _)) => Err(NoHandle::Errno(errno)),
        Err(crate::channel::ChannelError::Lost) => Err(NoHandle::Errno(libc::ENOTCONN)),
        Ok((Status::Fallback, _)) | Err(_) => Err(NoHandle::Kernel),
    }
}

/// Why a call on a descriptor has no daemon handle to go on with (`handle_of`).
pub enum NoHandle {
    /// It fails with this errno, as the daemon said.
    Errno(i32),
    /// The kernel serves it.
    Kernel,
}

/// Flags an `opendir` may carry to be answered from a directory opened ahead (the daemon
/// opened it `O_RDONLY | O_DIRECTORY`; these change nothing a directory's open decides).
const OPENDIR_FLAGS: i32 = libc::O_DIRECTORY
    | libc::O_NOFOLLOW
    | libc::O_CLOEXEC
    | libc::O_NONBLOCK
    | libc::O_LARGEFILE
    | libc::O_NOCTTY;

/// Where an `opendir` opens: the directory whose entry it names, when the process knows
/// it (`at`'s base, or a directory a path from it reached while that still holds), or
/// that it opens `..` of a directory the process holds.
struct Opening<'a> {
    parent: Option<u64>,
    name: &'a [u8],
    /// The directory it opens in is one the process holds open (a tree walk), and how
    /// the walk names it.
    walking: Walk,
    /// `..` of fast descriptor `dirfd`: its parent, where known, and whether the caller
    /// may search it (what `..` in it requires) as its opener.
    dotdot: Option<u64>,
}

impl<'a> Opening<'a> {
    fn of(
        mount: usize,
        dirfd: i64,
        at: &'a At,
        flags: i32,
        who: crate::channel::Who,
    ) -> Opening<'a> {
        let path = crate::listings::without_trailing_slashes(&at.path);
        let (parent_path, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(slash) => (&path[..slash], &path[slash + 1..]),
            None => (&path[..0], path),
        };
        let parent_path = crate::listings::without_trailing_slashes(parent_path);
        let from_fd = fds::get(resolve::descriptor(dirfd)).filter(|file| file.directory);
        let mut opening = Opening {
            parent: None,
            name,
            walking: Walk::No,
            dotdot: None,
        };
        if name == b".." && parent_path.is_empty() && flags & !OPENDIR_FLAGS == 0 {
            opening.dotdot = from_fd.and_then(|file| {
                file.origin
                    .as_ref()
                    .filter(|origin| origin.searchable && origin.who == who)
                    .and_then(|origin| origin.parent)
            });
            return opening;
        }
        if name.is_empty() || name == b"." || name == b".." {
            return opening;
        }
        opening.parent = if parent_path.is_empty() {
            Some(at.base)
        } else {
            crate::listings::reached(mount, at.base, parent_path, who)
        };
        opening.walking = match opening.parent {
            _ if from_fd.is_some() => Walk::ByDescriptor,
            Some(_) if !parent_path.is_empty() => Walk::ByPath,
            // `opendir("a/")` from a directory the process has open (`git status` opened
            // its work tree's root first).
            Some(parent) if fds::holds_directory(mount, parent) => Walk::ByPath,
            _ => Walk::No,
        };
        opening
    }

    /// The directory kept open for this open (`below.rs`), taken.
    fn take_kept(&self, mount: usize, who: crate::channel::Who) -> Option<crate::below::Kept> {
        if let Some(dir) = self.dotdot {
            return crate::below::take_directory(mount, dir, who);
        }
        crate::below::take(mount, self.parent?, self.name, who)
    }
}

/// `opendir` answered from directory `kept`, opened ahead or closed by the program and
/// kept open, when the count was what it still is: as the daemon's answer would be
/// handled.
fn open_kept(
    nr: i64,
    mount: usize,
    dirfd: i64,
    path: &[u8],
    at: &At,
    flags: i32,
    kept: crate::below::Kept,
) -> i64 {
    crate::stats::note(nr, crate::stats::Way::Fast);
    let changes = kept.changes();
    let ino = kept.opened.attr.ino;
    let mut batch = Batch::default();
    let prefetched = kept.page.map(|page| {
        let listed = (&page.entries[..], page.done);
        batch.remember(
            mount,
            ino,
            (changes, page.dir_version),
            listed,
            Listed::ByProgram,
        );
        Prefetched {
            entries: page.entries,
            done: page.done,
            changes,
        }
    });
    batch.reached(mount, at.base, &at.path, ino, changes, None);
    batch.keep();
    let origin = DirOrigin {
        parent: kept.parent,
        name: kept.name,
        who: crate::channel::who(),
        changes: Some(changes),
        searchable: kept.searchable,
    };
    install(
        mount,
        dirfd,
        path,
        flags,
        &kept.opened,
        prefetched,
        Some(changes),
        Some(origin),
    )
}

/// A placeholder descriptor for the daemon's open file `opened`; the daemon's file is
/// closed again when there is no number for it.
#[expect(
    clippy::too_many_arguments,
    reason = "what the open asked and what the daemon (or what was kept) answered"
)]
fn install(
    mount: usize,
    dirfd: i64,
    path: &[u8],
    flags: i32,
    opened: &Opened,
    prefetched: Option<Prefetched>,
    changes_before: Option<u64>,
    origin: Option<DirOrigin>,
) -> i64 {
    let file = Arc::new(OpenFile {
        mount,
        handle: AtomicU64::new(opened.handle),
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
        path: resolve::absolute(dirfd, path),
        known: Mutex::new(holds_at_open(mount, opened, changes_before)),
        origin,
        whole: Mutex::new(None),
        written: AtomicBool::new(false),
    });
    let fd = internal_fds::placeholder(flags & libc::O_CLOEXEC != 0);
    if fd < 0 {
        if opened.handle != 0 {
            let _ = crate::channel::call(
                mount,
                &Request::Close {
                    handle: opened.handle,
                },
            );
        }
        return fd;
    }
    fds::insert(fd as i32, file);
    fd
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
