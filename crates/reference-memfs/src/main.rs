//! reference-memfs: the smallest correct in-memory filesystem on `fuser` 0.18.
//!
//! It is the FUSE-ceiling reference for shoal's benchmarks: it stores nothing durable and
//! does little more than a hash lookup per request (only statfs walks all nodes), so its
//! throughput is the cost of the kernel round trip through /dev/fuse plus fuser's
//! dispatch. It supports what
//! fs_mark, `tar xf`, `find -ls` and `rm -rf` need, and nothing more: no xattrs, no
//! locks, no readdirplus, no writeback cache, attribute/entry TTL of 1 s.
//!
//! State is one `Mutex<State>` holding a `HashMap` from inode number to node. Inodes
//! are freed when their link count and the kernel's lookup count are both zero, so an
//! unlinked file that is still open stays readable.
//!
//! It shares no code with shoal on purpose: as the ceiling it must carry none of shoal's
//! costs (no engine, no stats, no lookup-count table), and it depends on fuser and libc
//! only. What it has in common with shoal's adapter (`crates/fuse/src/filesystem.rs`) is
//! fuser's `Filesystem` trait: each method's parameter list is the trait's, spelled out by
//! every implementation, and nothing else repeats.
//!
//! Usage: `reference-memfs MOUNTPOINT [--threads N] [--clone-fd]` (foreground; exits when
//! the filesystem is unmounted, e.g. with `fusermount3 -u MOUNTPOINT`).

#![allow(clippy::too_many_arguments)] // mirrors the FUSE operations

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

const TTL: Duration = Duration::from_secs(1);
const MAX_NAME: usize = 255;
const BLOCK: u32 = 4096;
/// Files are plain `Vec<u8>`s: refuse sizes that would only exhaust memory.
const MAX_FILE_SIZE: u64 = 1 << 34; // 16 GiB
/// What statfs reports as capacity (the data lives in RAM; these are nominal).
const TOTAL_BLOCKS: u64 = 1 << 28; // 1 TiB of 4 KiB blocks
const TOTAL_FILES: u64 = 1 << 32;
/// readdir offsets: 1 is ".", 2 is "..", entries get cookies from 3 up.
const FIRST_COOKIE: u64 = 3;

enum Content {
    File(Vec<u8>),
    Dir(Dir),
    Symlink(OsString),
    /// fifo, socket, device: attributes only
    Special,
}

/// A directory. Each entry gets a cookie that never changes and is never reused in this
/// directory, so a readdir resumed at an offset is stable while entries are removed
/// (as `rm -rf` does between readdir calls).
struct Dir {
    parent: u64,
    by_name: HashMap<OsString, (u64, u64)>, // name -> (ino, cookie)
    by_cookie: BTreeMap<u64, OsString>,
    next_cookie: u64,
}

impl Dir {
    fn new(parent: u64) -> Dir {
        Dir {
            parent,
            by_name: HashMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: FIRST_COOKIE,
        }
    }
    fn get(&self, name: &OsStr) -> Option<u64> {
        self.by_name.get(name).map(|&(ino, _)| ino)
    }
    fn insert(&mut self, name: &OsStr, ino: u64) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.by_name.insert(name.to_owned(), (ino, cookie));
        self.by_cookie.insert(cookie, name.to_owned());
    }
    fn remove(&mut self, name: &OsStr) -> Option<u64> {
        let (ino, cookie) = self.by_name.remove(name)?;
        self.by_cookie.remove(&cookie);
        Some(ino)
    }
}

struct Node {
    kind: FileType,
    perm: u16,
    nlink: u32,
    uid: u32,
    gid: u32,
    rdev: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
    /// references the kernel holds (entry replies minus forgets)
    nlookup: u64,
    content: Content,
}

impl Node {
    fn size(&self) -> u64 {
        match &self.content {
            Content::File(d) => d.len() as u64,
            Content::Dir(d) => d.by_name.len() as u64,
            Content::Symlink(t) => t.len() as u64,
            Content::Special => 0,
        }
    }
    fn attr(&self, ino: u64) -> FileAttr {
        let size = self.size();
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            crtime: self.ctime,
            kind: self.kind,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize: BLOCK,
            flags: 0,
        }
    }
    fn dir(&self) -> Result<&Dir, Errno> {
        match &self.content {
            Content::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }
    fn dir_mut(&mut self) -> Result<&mut Dir, Errno> {
        match &mut self.content {
            Content::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }
}

struct State {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
}

type Res<T> = Result<T, Errno>;

impl State {
    fn new() -> State {
        let now = SystemTime::now();
        let root = Node {
            kind: FileType::Directory,
            perm: 0o755,
            nlink: 2,
            uid: shoal_sys::identity::real_uid(),
            gid: shoal_sys::identity::real_gid(),
            rdev: 0,
            atime: now,
            mtime: now,
            ctime: now,
            nlookup: 1,
            content: Content::Dir(Dir::new(INodeNo::ROOT.0)),
        };
        let mut nodes = HashMap::new();
        nodes.insert(INodeNo::ROOT.0, root);
        State {
            nodes,
            next_ino: INodeNo::ROOT.0 + 1,
        }
    }

    fn node(&self, ino: u64) -> Res<&Node> {
        self.nodes.get(&ino).ok_or(Errno::ENOENT)
    }
    fn node_mut(&mut self, ino: u64) -> Res<&mut Node> {
        self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    /// Drop a node once nothing names it and the kernel holds no reference.
    fn maybe_free(&mut self, ino: u64) {
        if ino == INodeNo::ROOT.0 {
            return;
        }
        if let Some(n) = self.nodes.get(&ino) {
            if n.nlink == 0 && n.nlookup == 0 {
                self.nodes.remove(&ino);
            }
        }
    }

    /// A looked-up (or newly created) entry: count the kernel's reference, return attrs.
    fn entry(&mut self, ino: u64) -> Res<FileAttr> {
        let n = self.node_mut(ino)?;
        n.nlookup += 1;
        Ok(n.attr(ino))
    }

    fn touch_dir(&mut self, ino: u64, now: SystemTime) {
        if let Some(d) = self.nodes.get_mut(&ino) {
            d.mtime = now;
            d.ctime = now;
        }
    }

    /// Create a new node named `name` in `parent`; returns its attributes (lookup counted).
    fn create(
        &mut self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        kind: FileType,
        perm: u32,
        rdev: u32,
        content: Content,
    ) -> Res<FileAttr> {
        if name.len() > MAX_NAME {
            return Err(Errno::ENAMETOOLONG);
        }
        let p = self.node(parent)?;
        if p.dir()?.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        let mut perm = (perm & 0o7777) as u16;
        // BSD/SysV group semantics: a setgid directory passes on its group (and, to
        // subdirectories, the setgid bit).
        let gid = if p.perm & libc::S_ISGID as u16 != 0 {
            if kind == FileType::Directory {
                perm |= libc::S_ISGID as u16;
            }
            p.gid
        } else {
            req.gid()
        };
        let ino = self.next_ino;
        self.next_ino += 1;
        let now = SystemTime::now();
        let is_dir = kind == FileType::Directory;
        self.nodes.insert(
            ino,
            Node {
                kind,
                perm,
                nlink: if is_dir { 2 } else { 1 },
                uid: req.uid(),
                gid,
                rdev,
                atime: now,
                mtime: now,
                ctime: now,
                nlookup: 0,
                content,
            },
        );
        let p = self.node_mut(parent)?;
        p.dir_mut()?.insert(name, ino);
        if is_dir {
            p.nlink += 1;
        }
        p.mtime = now;
        p.ctime = now;
        self.entry(ino)
    }

    /// Remove the entry `name` from `parent`; `want_dir` selects rmdir or unlink semantics.
    fn remove(&mut self, parent: u64, name: &OsStr, want_dir: bool) -> Res<()> {
        let ino = self.node(parent)?.dir()?.get(name).ok_or(Errno::ENOENT)?;
        let n = self.node(ino)?;
        match (want_dir, &n.content) {
            (true, Content::Dir(d)) if !d.by_name.is_empty() => return Err(Errno::ENOTEMPTY),
            (true, Content::Dir(_)) => {}
            (true, _) => return Err(Errno::ENOTDIR),
            (false, Content::Dir(_)) => return Err(Errno::EISDIR),
            (false, _) => {}
        }
        self.unlink_entry(parent, name, ino)
    }

    /// Remove an entry known to name `ino` (already type-checked) and fix link counts.
    fn unlink_entry(&mut self, parent: u64, name: &OsStr, ino: u64) -> Res<()> {
        let now = SystemTime::now();
        let p = self.node_mut(parent)?;
        p.dir_mut()?.remove(name);
        p.mtime = now;
        p.ctime = now;
        let n = self.node_mut(ino)?;
        let is_dir = n.kind == FileType::Directory;
        if is_dir {
            n.nlink = 0;
        } else {
            n.nlink -= 1;
        }
        n.ctime = now;
        if is_dir {
            self.node_mut(parent)?.nlink -= 1;
        }
        self.maybe_free(ino);
        Ok(())
    }

    fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Res<()> {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        if newname.len() > MAX_NAME {
            return Err(Errno::ENAMETOOLONG);
        }
        let ino = self.node(parent)?.dir()?.get(name).ok_or(Errno::ENOENT)?;
        let src_is_dir = self.node(ino)?.kind == FileType::Directory;
        // (The kernel refuses to move a directory under itself before asking us.)
        if let Some(victim) = self.node(newparent)?.dir()?.get(newname) {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            if victim == ino {
                return Ok(()); // two links to one inode: POSIX says do nothing
            }
            match (&self.node(victim)?.content, src_is_dir) {
                (Content::Dir(d), true) if !d.by_name.is_empty() => return Err(Errno::ENOTEMPTY),
                (Content::Dir(_), true) => {}
                (Content::Dir(_), false) => return Err(Errno::EISDIR),
                (_, true) => return Err(Errno::ENOTDIR),
                (_, false) => {}
            }
            self.unlink_entry(newparent, newname, victim)?;
        }
        let now = SystemTime::now();
        self.node_mut(parent)?.dir_mut()?.remove(name);
        self.node_mut(newparent)?.dir_mut()?.insert(newname, ino);
        if src_is_dir && parent != newparent {
            self.node_mut(parent)?.nlink -= 1;
            self.node_mut(newparent)?.nlink += 1;
            self.node_mut(ino)?.dir_mut()?.parent = newparent;
        }
        self.node_mut(ino)?.ctime = now;
        self.touch_dir(parent, now);
        self.touch_dir(newparent, now);
        Ok(())
    }

    fn setattr(
        &mut self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
    ) -> Res<FileAttr> {
        let now = SystemTime::now();
        let n = self.node_mut(ino)?;
        if let Some(size) = size {
            if size > MAX_FILE_SIZE {
                return Err(Errno::EFBIG);
            }
            match &mut n.content {
                Content::File(d) => d.resize(size as usize, 0),
                Content::Dir(_) => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
            n.mtime = now;
        }
        if let Some(mode) = mode {
            n.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = uid {
            n.uid = uid;
        }
        if let Some(gid) = gid {
            n.gid = gid;
        }
        let t = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => t,
            TimeOrNow::Now => now,
        };
        if let Some(a) = atime {
            n.atime = t(a);
        }
        if let Some(m) = mtime {
            n.mtime = t(m);
        }
        n.ctime = now;
        Ok(n.attr(ino))
    }
}

struct MemFs {
    state: Mutex<State>,
}

impl MemFs {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn reply_entry(reply: ReplyEntry, r: Res<FileAttr>) {
    match r {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(reply: ReplyEmpty, r: Res<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn reply_attr(reply: ReplyAttr, r: Res<FileAttr>) {
    match r {
        Ok(attr) => reply.attr(&TTL, &attr),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for MemFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut s = self.lock();
        let r = (|| {
            let ino = s.node(parent.0)?.dir()?.get(name).ok_or(Errno::ENOENT)?;
            s.entry(ino)
        })();
        reply_entry(reply, r);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut s = self.lock();
        if let Some(n) = s.nodes.get_mut(&ino.0) {
            n.nlookup = n.nlookup.saturating_sub(nlookup);
        }
        s.maybe_free(ino.0);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let s = self.lock();
        reply_attr(reply, s.node(ino.0).map(|n| n.attr(ino.0)));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        _kill_suidgid: bool,
        reply: ReplyAttr,
    ) {
        let r = self
            .lock()
            .setattr(ino.0, mode, uid, gid, size, atime, mtime);
        reply_attr(reply, r);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let s = self.lock();
        match s.node(ino.0).map(|n| &n.content) {
            Ok(Content::Symlink(t)) => reply.data(t.as_bytes()),
            Ok(_) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let (kind, content) = match mode & libc::S_IFMT {
            libc::S_IFREG => (FileType::RegularFile, Content::File(Vec::new())),
            libc::S_IFIFO => (FileType::NamedPipe, Content::Special),
            libc::S_IFSOCK => (FileType::Socket, Content::Special),
            libc::S_IFCHR => (FileType::CharDevice, Content::Special),
            libc::S_IFBLK => (FileType::BlockDevice, Content::Special),
            _ => return reply.error(Errno::EINVAL),
        };
        let r = self
            .lock()
            .create(req, parent.0, name, kind, mode & !umask, rdev, content);
        reply_entry(reply, r);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let content = Content::Dir(Dir::new(parent.0));
        let r = self.lock().create(
            req,
            parent.0,
            name,
            FileType::Directory,
            mode & !umask,
            0,
            content,
        );
        reply_entry(reply, r);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.lock().remove(parent.0, name, false));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.lock().remove(parent.0, name, true));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let content = Content::Symlink(target.as_os_str().to_owned());
        let r = self.lock().create(
            req,
            parent.0,
            link_name,
            FileType::Symlink,
            0o777,
            0,
            content,
        );
        reply_entry(reply, r);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            self.lock()
                .rename(parent.0, name, newparent.0, newname, flags),
        );
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut s = self.lock();
        let r = (|| {
            if newname.len() > MAX_NAME {
                return Err(Errno::ENAMETOOLONG);
            }
            if s.node(ino.0)?.kind == FileType::Directory {
                return Err(Errno::EPERM);
            }
            if s.node(newparent.0)?.dir()?.get(newname).is_some() {
                return Err(Errno::EEXIST);
            }
            let now = SystemTime::now();
            s.node_mut(newparent.0)?.dir_mut()?.insert(newname, ino.0);
            s.touch_dir(newparent.0, now);
            let n = s.node_mut(ino.0)?;
            n.nlink += 1;
            n.ctime = now;
            s.entry(ino.0)
        })();
        reply_entry(reply, r);
    }

    fn open(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _flags: OpenFlags,
        _kill_suidgid: bool,
        reply: ReplyOpen,
    ) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let s = self.lock();
        match s.node(ino.0).map(|n| &n.content) {
            Ok(Content::File(d)) => {
                let start = (offset as usize).min(d.len());
                let end = start.saturating_add(size as usize).min(d.len());
                reply.data(&d[start..end]);
            }
            Ok(Content::Dir(_)) => reply.error(Errno::EISDIR),
            Ok(_) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut s = self.lock();
        let n = match s.node_mut(ino.0) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let Content::File(d) = &mut n.content else {
            return reply.error(Errno::EINVAL);
        };
        if offset + data.len() as u64 > MAX_FILE_SIZE {
            return reply.error(Errno::EFBIG);
        }
        let off = offset as usize;
        let end = off + data.len();
        if d.len() < end {
            d.resize(end, 0);
        }
        d[off..end].copy_from_slice(data);
        let now = SystemTime::now();
        n.mtime = now;
        n.ctime = now;
        reply.written(data.len() as u32);
    }

    /// Not implemented on purpose: the kernel remembers ENOSYS and stops sending FLUSH
    /// on close, which saves a round trip per close (nothing to flush in memory).
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lo: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _ds: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let s = self.lock();
        let dir = match s.node(ino.0).and_then(|n| n.dir()) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        if offset < 1 && reply.add(ino, 1, FileType::Directory, ".") {
            return reply.ok();
        }
        if offset < 2 && reply.add(INodeNo(dir.parent), 2, FileType::Directory, "..") {
            return reply.ok();
        }
        for (&cookie, name) in dir.by_cookie.range(offset.max(FIRST_COOKIE - 1) + 1..) {
            let child = dir.get(name).expect("dir index consistent");
            let kind = s
                .nodes
                .get(&child)
                .map_or(FileType::RegularFile, |n| n.kind);
            if reply.add(INodeNo(child), cookie, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ds: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.lock();
        let used_bytes: u64 = s
            .nodes
            .values()
            .map(|n| n.size().next_multiple_of(BLOCK as u64))
            .sum();
        let used_blocks = used_bytes / BLOCK as u64;
        let free = TOTAL_BLOCKS.saturating_sub(used_blocks);
        let ffree = TOTAL_FILES.saturating_sub(s.nodes.len() as u64);
        reply.statfs(
            TOTAL_BLOCKS,
            free,
            free,
            TOTAL_FILES,
            ffree,
            BLOCK,
            MAX_NAME as u32,
            BLOCK,
        );
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EINVAL);
        }
        let content = Content::File(Vec::new());
        let r = self.lock().create(
            req,
            parent.0,
            name,
            FileType::RegularFile,
            mode & !umask,
            0,
            content,
        );
        match r {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }
}

fn usage() -> ! {
    eprintln!("usage: reference-memfs MOUNTPOINT [--threads N] [--clone-fd]");
    std::process::exit(2);
}

fn main() {
    let mut mountpoint = None;
    let mut threads = 2usize;
    let mut clone_fd = false;
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--threads") => {
                threads = args
                    .next()
                    .and_then(|v| v.to_str().and_then(|v| v.parse().ok()))
                    .filter(|&n| n >= 1)
                    .unwrap_or_else(|| usage());
            }
            Some("--clone-fd") => clone_fd = true,
            Some("-h" | "--help") => usage(),
            Some(s) if s.starts_with('-') => usage(),
            _ if mountpoint.is_none() => mountpoint = Some(a),
            _ => usage(),
        }
    }
    let Some(mountpoint) = mountpoint else {
        usage()
    };

    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("reference-memfs".into()),
        MountOption::Subtype("reference-memfs".into()),
        MountOption::DefaultPermissions,
    ];
    config.n_threads = Some(threads);
    config.clone_fd = clone_fd;

    let fs = MemFs {
        state: Mutex::new(State::new()),
    };
    if let Err(e) = fuser::mount(fs, &mountpoint, &config) {
        eprintln!("reference-memfs: {}: {e}", Path::new(&mountpoint).display());
        std::process::exit(1);
    }
}
