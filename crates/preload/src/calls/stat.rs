//! stat, lstat, fstat, newfstatat, statx, access, readlink.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use shoal_fastpath::{At, Attr, DirEntryWire, Reply, Request, Status, READDIR_BATCH_ENTRIES};

use super::{ask, copy_out, fail, kernel, write_out, Answer};
use crate::channel::Who;
use crate::fds::{self, OpenFile};
use crate::listings::{Batch, Listed, Looked, More};
use crate::mounts;
use crate::resolve::{self, Route};
use crate::stats;

/// What a stat-like call names: a fast descriptor, a path for the daemon, or the kernel's.
pub enum Named {
    /// A fast descriptor.
    Handle(Arc<OpenFile>),
    Path(usize, At),
    Kernel,
    Fail(i32),
}

/// Resolves (dirfd, path) with AT_EMPTY_PATH and AT_SYMLINK_NOFOLLOW as the *at calls take
/// them.
pub fn named(dirfd: i64, path_ptr: i64, flags: i32) -> Named {
    let mut buffer = resolve::PathBuffer::new();
    let path = match resolve::c_path(path_ptr, &mut buffer) {
        Ok(path) => path,
        Err(errno) => return Named::Fail(errno),
    };
    if path.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
        return match fds::get(dirfd) {
            Some(file) => Named::Handle(file),
            None => Named::Kernel,
        };
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    match resolve::route(dirfd, path, follow) {
        Route::Kernel => Named::Kernel,
        Route::Fail(errno) => Named::Fail(errno),
        Route::Fast { mount, at } => Named::Path(mount, at),
    }
}

/// The daemon's attributes for what `named` names; `None` for the kernel.
fn attributes(nr: i64, target: Named) -> Result<Option<(usize, Attr)>, i32> {
    match target {
        Named::Handle(file) => descriptor_attributes(nr, &file),
        Named::Path(mount, at) => path_attributes(nr, mount, at),
        Named::Kernel => Ok(None),
        Named::Fail(errno) => Err(errno),
    }
}

/// A path's attributes: its absence this thread was last told of, or a listing, while
/// they hold; else asked (and an absence kept).
fn path_attributes(nr: i64, mount: usize, at: At) -> Result<Option<(usize, Attr)>, i32> {
    let who = crate::channel::who();
    if crate::listings::known_absent(mount, &at, who) {
        stats::note(nr, stats::Way::Fast);
        return Err(libc::ENOENT);
    }
    if let Some(answer) = answered(nr, mount, kept(mount, &at, who)) {
        return answer;
    }
    // A miss: the daemon is asked, by one thread of the process at a time (`turns`); one
    // that waited for another's reply looks again first.
    let mut waiting = crate::turns::Waiting::new();
    let _turn = loop {
        if let Some(turn) = waiting.take() {
            break turn;
        }
        if let Some(answer) = answered(nr, mount, kept(mount, &at, who)) {
            return answer;
        }
    };
    if let Some(answer) = answered(nr, mount, listed(mount, &at, who, waiting.waited())) {
        return answer;
    }
    let changes = crate::listings::changes_now(mount);
    let request = Request::Stat { at };
    let answer = ask(nr, mount, &request);
    if let (Answer::Errno(libc::ENOENT), Some(changes), Request::Stat { at }) =
        (&answer, changes, &request)
    {
        crate::listings::remember_absent(mount, at, changes, who);
    }
    match answer {
        Answer::Done(Reply::Attr(attr)) => Ok(Some((mount, attr))),
        Answer::Done(_) => Err(libc::EPROTO),
        Answer::Errno(errno) => Err(errno),
        Answer::Kernel => Ok(None),
    }
}

/// A stat answered by the listings: found, or absent from a whole listing.
fn answered(nr: i64, mount: usize, looked: Looked) -> Option<Result<Option<(usize, Attr)>, i32>> {
    match looked {
        Looked::Found(attr) => {
            stats::note(nr, stats::Way::Fast);
            stats::note_listed();
            Some(Ok(Some((mount, attr))))
        }
        Looked::Absent => {
            stats::note(nr, stats::Way::Fast);
            Some(Err(libc::ENOENT))
        }
        Looked::Unanswered | Looked::Unlisted => None,
    }
}

/// A fast descriptor's attributes: those the daemon last gave while they hold, else asked;
/// `None` for the kernel.
pub fn descriptor_attributes(nr: i64, file: &OpenFile) -> Result<Option<(usize, Attr)>, i32> {
    if let Some(attr) = crate::listings::known_attr(file) {
        stats::note(nr, stats::Way::Fast);
        return Ok(Some((file.mount, attr)));
    }
    // `git` writes each file it checks out, then stats it; `tar x` stats the placeholder
    // it makes for a symlink, unwritten: that one says nothing of the process's writes.
    if file.writable() && file.written.load(Ordering::Relaxed) {
        super::io::attrs_wanted_after_writes();
    }
    let handle = match super::open::handle_of(file) {
        Ok(handle) => handle,
        Err(super::open::NoHandle::Errno(errno)) => return Err(errno),
        Err(super::open::NoHandle::Kernel) => return Ok(None),
    };
    match ask(nr, file.mount, &Request::Fstat { handle }) {
        Answer::Done(Reply::AttrAt {
            attr,
            version,
            no_xattrs,
        }) => {
            crate::listings::remember_known(file, version, attr, no_xattrs);
            Ok(Some((file.mount, attr)))
        }
        Answer::Done(_) => Err(libc::EPROTO),
        Answer::Errno(errno) => Err(errno),
        Answer::Kernel => Ok(None),
    }
}

/// A path's parent path, the directory that is (the base directory, or the one the parent
/// path reached while its listing holds) and its last name; `None` for `.`, `..` and a path
/// ending in `/`.
fn parent_and_name<'a>(mount: usize, at: &'a At, who: Who) -> Option<ParentAndName<'a>> {
    let (parent, name) = match at.path.iter().rposition(|&byte| byte == b'/') {
        Some(slash) => (&at.path[..slash], &at.path[slash + 1..]),
        None => (&at.path[..0], at.path.as_slice()),
    };
    if name.is_empty() || name == b"." || name == b".." {
        return None;
    }
    let dir = if parent.is_empty() {
        Some(at.base)
    } else {
        crate::listings::reached(mount, at.base, parent, who)
    };
    Some((parent, dir, name))
}

type ParentAndName<'a> = (&'a [u8], Option<u64>, &'a [u8]);

/// Whether a listing that still holds says the path's last name is not there (an `open`
/// without O_CREAT of it is ENOENT: `git status` tries a `.gitignore` in every directory,
/// a compiler each include directory). Lists nothing.
pub fn absent(mount: usize, at: &At) -> bool {
    listed_place(mount, at).is_some_and(|(dir, name, who)| {
        matches!(
            crate::listings::lookup(mount, dir, name, at.follow, who),
            Looked::Absent
        )
    })
}

/// Where a kept listing may answer for what `at` names: the directory its last name is in
/// (as `parent_and_name` reaches it), that name, and the caller, read once.
fn listed_place(mount: usize, at: &At) -> Option<(u64, &[u8], Who)> {
    let who = crate::channel::who();
    match parent_and_name(mount, at, who)? {
        (_, Some(dir), name) => Some((dir, name, who)),
        (_, None, _) => None,
    }
}

/// What the kept listings say of a path's last name, asking nothing.
fn kept(mount: usize, at: &At, who: Who) -> Looked {
    match parent_and_name(mount, at, who) {
        Some((_, Some(dir), name)) => crate::listings::lookup(mount, dir, name, at.follow, who),
        _ => Looked::Unlisted,
    }
}

/// What the listings say of a path's last name: an entry of a directory, from a listing
/// that still holds (of the base directory, or of the directory a path reached, listed by
/// `prefetch` at the second miss in a row there, or at the first in a `crowd`: after
/// waiting for another thread's turn), or its absence from a whole one.
fn listed(mount: usize, at: &At, who: Who, crowd: bool) -> Looked {
    let Some((parent, dir, name)) = parent_and_name(mount, at, who) else {
        return Looked::Unlisted;
    };
    if let Some(dir) = dir {
        match crate::listings::lookup(mount, dir, name, at.follow, who) {
            // Past the pages listed so far: the next one.
            Looked::Unanswered if list_further(mount, dir, name) => {
                return crate::listings::lookup(mount, dir, name, at.follow, who);
            }
            Looked::Unlisted => {}
            // Found, absent, or listed already (a name probed in vain, a symlink
            // followed): asked then.
            looked => return looked,
        }
    }
    let second_miss = crate::listings::second_miss_in(mount, at.base, parent, name);
    let storm = crowd || crate::listings::last_prefetch_paid_off();
    if !storm && !second_miss {
        return Looked::Unlisted;
    }
    // The directories after it only in a storm of stats: a program that probes a few
    // names (git's start in `.git`: 1.4 ms for a listing of it and 64 directories ahead)
    // gets the directory alone.
    let below = if storm { PREFETCH_BELOW } else { 0 };
    let Some(dir) = prefetch(mount, at.base, parent, below) else {
        return Looked::Unlisted;
    };
    crate::listings::lookup(mount, dir, name, at.follow, who)
}

/// Entries a prefetch lists at most: a directory's first page, enough for most.
const PREFETCH_ENTRIES: u32 = 128;

/// Lists directory `parent` (a path from `base`, the base itself when empty) with its
/// entries' attributes and keeps them (`listings`); its inode. Any failure (no read
/// permission, a path that leaves the mount) only means no listing: the `stat` asks.
fn prefetch(mount: usize, base: u64, parent: &[u8], below: u32) -> Option<u64> {
    let path = if parent.is_empty() {
        b".".to_vec()
    } else {
        parent.to_vec()
    };
    let request = Request::OpenDir {
        at: At {
            base,
            path,
            follow: true,
        },
        flags: libc::O_RDONLY | libc::O_DIRECTORY,
        max: PREFETCH_ENTRIES,
        with_attrs: true,
        below,
        walk: shoal_fastpath::Walk::No,
    };
    let (handle, listed) = match crate::channel::call(mount, &request) {
        Ok((
            Status::Ok,
            Reply::OpenedDir {
                opened,
                entries,
                changes,
                dir_version,
                witness,
                done,
                below,
            },
        )) => (
            opened.handle,
            Some((
                opened.attr.ino,
                entries,
                changes,
                dir_version,
                witness,
                done,
                below,
            )),
        ),
        Ok((Status::Ok, Reply::Opened(opened))) => (opened.handle, None),
        _ => return None,
    };
    let Some((dir, entries, changes, dir_version, witness, done, below)) = listed else {
        crate::channel::close(mount, handle);
        return None;
    };
    let mut batch = Batch::default();
    batch.remember(
        mount,
        dir,
        (changes, dir_version),
        (&entries, done),
        Listed::ByProgram,
    );
    if !parent.is_empty() {
        batch.reached(mount, base, parent, dir, changes, witness.clone());
    }
    let top = (dir, dir_version, witness);
    remember_below(&mut batch, (mount, base, parent), top, changes, &below);
    batch.keep();
    crate::listings::prefetched(mount, dir);
    crate::listings::keep_more(mount, dir, handle, more_after(handle, &entries, done));
    Some(dir)
}

/// Directories listed with a listing asked for by stats: those the program's stats will
/// reach next, as `git status` stats its index in order (`Request::OpenDir::below`).
const PREFETCH_BELOW: u32 = 64;

/// Keeps the listings of the directories `below` that came with the listing of `dir`
/// (`parent` from `base`), and the paths from `base` that reach them: each is entry
/// `name` of a directory listed before it in the reply, or of the one holding `dir`
/// (the daemon sends those only where `parent`'s last name is `dir`'s own entry there).
/// Each path holds while the mount's count stays, or while every directory it goes
/// through keeps the version its listing came with (`walk`): `git status` makes its
/// index lock between its stats and its search for untracked files, and the search's
/// `opendir` of each directory by path finds it reached (`calls::open::open_listed`).
fn remember_below(
    batch: &mut Batch,
    (mount, base, parent): (usize, u64, &[u8]),
    (dir, dir_version, walk): (u64, Option<u32>, Option<Witness>),
    changes: u64,
    below: &[shoal_fastpath::DirBelow],
) {
    let parent = crate::listings::without_trailing_slashes(parent);
    // Each directory's path, and the witness of a walk to one of its entries.
    let mut reached: std::collections::HashMap<u64, (Vec<u8>, Option<Witness>)> =
        std::collections::HashMap::new();
    let top_walk = if parent.is_empty() {
        Some(Vec::new())
    } else {
        walk
    };
    reached.insert(
        dir,
        (parent.to_vec(), through(top_walk.clone(), dir, dir_version)),
    );
    // The directory holding `dir`: a walk to its entries is the one to `dir`.
    let container = (!parent.is_empty()).then(|| {
        let slash = parent.iter().rposition(|&b| b == b'/').unwrap_or(0);
        let path = crate::listings::without_trailing_slashes(&parent[..slash]).to_vec();
        (path, top_walk)
    });
    for listed in below {
        let Some((holder, walk)) = reached
            .get(&listed.parent)
            .cloned()
            .or_else(|| container.clone())
        else {
            continue;
        };
        let path = if holder.is_empty() {
            listed.name.to_vec()
        } else {
            [holder.as_slice(), b"/", &listed.name].concat()
        };
        let ino = listed.opened.attr.ino;
        batch.remember(
            mount,
            ino,
            (changes, listed.dir_version),
            (&listed.entries, listed.done),
            Listed::Ahead,
        );
        batch.reached(mount, base, &path, ino, changes, walk.clone());
        reached.insert(ino, (path, through(walk, ino, listed.dir_version)));
    }
}

/// The inodes a walk read, each with its version then (`Reply::Exists`).
type Witness = Vec<(u64, u32)>;

/// The witness of a walk to an entry of directory `dir`: the one to `dir`, and `dir` at
/// the version its listing came with (`None` where a version is unknown, or past what a
/// witness holds).
fn through(walk: Option<Witness>, dir: u64, version: Option<u32>) -> Option<Witness> {
    let mut walk = walk?;
    if walk.len() >= shoal_fastpath::WITNESS_MAX {
        return None;
    }
    walk.push((dir, version?));
    Some(walk)
}

/// Where to go on listing after `entries`, unless they were the last.
fn more_after(handle: u64, entries: &[DirEntryWire], done: bool) -> Option<More> {
    let last = entries
        .iter()
        .rev()
        .find(|entry| !matches!(&entry.name[..], b"." | b".."))?;
    (!done).then(|| More {
        handle,
        after: last.name.to_vec(),
    })
}

/// The next page of a listing asked for by `stat`s, when `name` lies past it; whether it
/// was added.
fn list_further(mount: usize, dir: u64, name: &[u8]) -> bool {
    let Some(more) = crate::listings::take_more(mount, dir, name) else {
        return false;
    };
    let request = Request::ReadDir {
        handle: more.handle,
        after: Some(more.after.clone()),
        max: READDIR_BATCH_ENTRIES,
        with_attrs: true,
    };
    match crate::channel::call(mount, &request) {
        Ok((
            Status::Ok,
            Reply::Entries {
                entries,
                done,
                changes,
                dir_version,
            },
        )) => {
            // A later page: the first said the directory goes on.
            crate::listings::remember(mount, dir, changes, dir_version, &entries, false);
            let next = more_after(more.handle, &entries, done);
            crate::listings::keep_more(mount, dir, more.handle, next);
            true
        }
        _ => {
            crate::listings::keep_more(mount, dir, more.handle, None);
            false
        }
    }
}

pub fn stat(nr: i64, args: [i64; 6]) -> Option<i64> {
    let (target, out, positions): (Named, i64, &[usize]) = match nr {
        libc::SYS_fstat => (Named::Handle(fds::get(args[0])?), args[1], &[0]),
        libc::SYS_stat => (named(i64::from(libc::AT_FDCWD), args[0], 0), args[1], &[]),
        libc::SYS_lstat => (
            named(
                i64::from(libc::AT_FDCWD),
                args[0],
                libc::AT_SYMLINK_NOFOLLOW,
            ),
            args[1],
            &[],
        ),
        _ => (named(args[0], args[1], args[3] as i32), args[2], &[0]),
    };
    Some(match attributes(nr, target) {
        Ok(Some((mount, attr))) => {
            // SAFETY: the program passed a struct stat to fill.
            unsafe { write_out(out, to_stat(&attr, mounts::all()[mount].dev())) };
            0
        }
        Ok(None) => kernel(nr, args, positions),
        Err(errno) => fail(errno),
    })
}

fn to_stat(attr: &Attr, dev: u64) -> libc::stat {
    // SAFETY: stat is plain data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_dev = dev;
    st.st_ino = attr.ino;
    st.st_mode = attr.mode;
    st.st_nlink = u64::from(attr.nlink);
    st.st_uid = attr.uid;
    st.st_gid = attr.gid;
    st.st_rdev = u64::from(attr.rdev);
    st.st_size = attr.size as i64;
    st.st_blksize = i64::from(attr.blksize);
    st.st_blocks = attr.blocks as i64;
    (st.st_atime, st.st_atime_nsec) = (attr.atime.0, i64::from(attr.atime.1));
    (st.st_mtime, st.st_mtime_nsec) = (attr.mtime.0, i64::from(attr.mtime.1));
    (st.st_ctime, st.st_ctime_nsec) = (attr.ctime.0, i64::from(attr.ctime.1));
    st
}

pub fn statx(args: [i64; 6]) -> Option<i64> {
    let flags = args[2] as i32;
    let target = named(args[0], args[1], flags);
    if matches!(target, Named::Kernel) {
        return None;
    }
    Some(match attributes(libc::SYS_statx, target) {
        Ok(Some((mount, attr))) => {
            // SAFETY: the program passed a struct statx to fill.
            unsafe { write_out(args[4], to_statx(&attr, mounts::all()[mount].device)) };
            0
        }
        Ok(None) => kernel(libc::SYS_statx, args, &[0]),
        Err(errno) => fail(errno),
    })
}

fn to_statx(attr: &Attr, device: (u32, u32)) -> libc::statx {
    let time = |(secs, nanos): (i64, u32)| {
        // SAFETY: statx_timestamp is plain data; all zeroes is a valid value.
        let mut stamp: libc::statx_timestamp = unsafe { std::mem::zeroed() };
        stamp.tv_sec = secs;
        stamp.tv_nsec = nanos;
        stamp
    };
    // SAFETY: statx is plain data; all zeroes is a valid value.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    st.stx_mask = libc::STATX_BASIC_STATS;
    st.stx_blksize = attr.blksize;
    st.stx_nlink = attr.nlink;
    st.stx_uid = attr.uid;
    st.stx_gid = attr.gid;
    st.stx_mode = attr.mode as u16;
    st.stx_ino = attr.ino;
    st.stx_size = attr.size;
    st.stx_blocks = attr.blocks;
    st.stx_atime = time(attr.atime);
    st.stx_mtime = time(attr.mtime);
    st.stx_ctime = time(attr.ctime);
    st.stx_rdev_major = libc::major(u64::from(attr.rdev));
    st.stx_rdev_minor = libc::minor(u64::from(attr.rdev));
    st.stx_dev_major = device.0;
    st.stx_dev_minor = device.1;
    st
}

pub fn access(nr: i64, args: [i64; 6]) -> Option<i64> {
    let (dirfd, path, mode, flags) = match nr {
        libc::SYS_access => (i64::from(libc::AT_FDCWD), args[0], args[1] as u32, 0),
        libc::SYS_faccessat => (args[0], args[1], args[2] as u32, 0),
        _ => (args[0], args[1], args[2] as u32, args[3] as i32),
    };
    // access(2) checks the real ids, which the daemon does not know: only when they are
    // the effective ones, or with AT_EACCESS.
    if mode & !0o7 != 0
        || (flags & libc::AT_EACCESS == 0 && !crate::process_state::real_ids_are_effective())
    {
        return None;
    }
    let (mount, at) = match named(dirfd, path, flags) {
        Named::Path(mount, at) => (mount, at),
        Named::Fail(errno) => return Some(fail(errno)),
        Named::Handle(..) | Named::Kernel => {
            return Some(kernel(
                nr,
                args,
                if nr == libc::SYS_access { &[] } else { &[0] },
            ))
        }
    };
    let positions: &[usize] = if nr == libc::SYS_access { &[] } else { &[0] };
    Some(match ask(nr, mount, &Request::Access { at, mask: mode }) {
        Answer::Done(_) => 0,
        Answer::Errno(errno) => fail(errno),
        Answer::Kernel => kernel(nr, args, positions),
    })
}

pub fn readlink(nr: i64, args: [i64; 6]) -> Option<i64> {
    let (dirfd, path, buf, size) = match nr {
        libc::SYS_readlink => (i64::from(libc::AT_FDCWD), args[0], args[1], args[2]),
        _ => (args[0], args[1], args[2], args[3]),
    };
    let positions: &[usize] = if nr == libc::SYS_readlink { &[] } else { &[0] };
    let (mount, at) = match named(dirfd, path, libc::AT_SYMLINK_NOFOLLOW) {
        Named::Path(mount, at) => (mount, at),
        Named::Fail(errno) => return Some(fail(errno)),
        Named::Handle(..) | Named::Kernel => return Some(kernel(nr, args, positions)),
    };
    if size <= 0 {
        return Some(fail(libc::EINVAL));
    }
    if let Some(answer) = listed_target(nr, mount, &at, buf, size) {
        return Some(answer);
    }
    Some(match ask(nr, mount, &Request::Readlink { at }) {
        Answer::Done(Reply::Data(target)) => {
            let n = target.len().min(size as usize);
            // SAFETY: the program's buffer holds `size` bytes; `n <= size`.
            unsafe { copy_out(buf, &target[..n]) };
            n as i64
        }
        Answer::Done(_) => fail(libc::EPROTO),
        Answer::Errno(errno) => fail(errno),
        Answer::Kernel => kernel(nr, args, positions),
    })
}

/// Whether a listing that holds for what `at` names says it is a regular file or directory
/// without xattrs.
pub fn listed_without_xattrs(mount: usize, at: &At) -> bool {
    listed_place(mount, at).is_some_and(|(dir, name, who)| {
        crate::listings::xattrs_absent(mount, dir, name, at.follow, who)
    })
}

/// A `readlink` answered from a listing that holds for the entry (the program listed the
/// directory, as `find -ls`, `ls -l` and `tar c` do before they read each symlink): the
/// target it carried, EINVAL for an entry that is not a symlink, ENOENT for a name a whole
/// listing lacks. `None`: asked.
fn listed_target(nr: i64, mount: usize, at: &At, buf: i64, size: i64) -> Option<i64> {
    let (dir, name, who) = listed_place(mount, at)?;
    let answer = match crate::listings::link_target(mount, dir, name, who) {
        Ok(Some(target)) => {
            let n = target.len().min(size as usize);
            // SAFETY: the program's buffer holds `size` bytes; `n <= size`.
            unsafe { copy_out(buf, &target[..n]) };
            n as i64
        }
        Ok(None) => fail(libc::EINVAL),
        Err(Looked::Absent) => fail(libc::ENOENT),
        Err(_) => return None,
    };
    stats::note(nr, stats::Way::Fast);
    stats::note_listed_other();
    Some(answer)
}
