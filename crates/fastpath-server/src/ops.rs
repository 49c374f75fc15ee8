//! One function per request: the kernel's rules for the cases the fast path decides, a
//! fallback for the rest. Nothing is changed before every check has passed, so a fallback
//! never leaves half an operation behind.

use shoal_engine::{
    Caller, FileKind, FsError, Inode, NewInode, RenameMode, SetAttr, SetTime, Timestamp,
};
use shoal_fastpath::{
    At, Attr, DirEntryWire, EntryName, Opened, Reply, Request, SetAttrWire, Target, TimeWire, Walk,
    ENTRIES_HEADER_BYTES, MAX_MESSAGE_BYTES, OPENED_DIR_EXTRA_BYTES, READDIR_BATCH_ENTRIES,
};

use std::cell::RefCell;

use crate::answered_early::Pending;
use crate::below::{Ahead, Frame, Via};
use crate::credentials::Credentials;
use crate::handles::{release, Handle, Process};
use crate::permission::{
    check, granted, may_remove, may_remove_owned_by, owns, MAY_EXEC, MAY_READ, MAY_WRITE,
};
use crate::refusal::{ensure, require, require_because, require_permission, Refusal, Served, Why};
use crate::server::Server;
use crate::walk::{
    walk_to_entry, walk_to_parent, walk_witnessed, Reader, Walked, WalkedToEntry, Witness,
};

/// Permission bits a create keeps (`S_IALLUGO`); set-id bits on a new file fall back (the
/// kernel's `mode_strip_sgid` rules).
const CREATE_MODE_BITS: u32 = 0o7777;
const MKDIR_MODE_BITS: u32 = 0o1777;
const SET_ID_BITS: u32 = 0o6000;
const RENAME_NOREPLACE: u32 = 1;
const BLOCK_BYTES: u32 = 4096;
const ACL_ACCESS_NAME: &[u8] = b"system.posix_acl_access";

/// Which page of a directory a listing asks for, and within what.
pub(crate) struct Page<'a> {
    /// The last name already listed (none: from the start, with `.` and `..`).
    pub after: Option<&'a [u8]>,
    /// Entries at most.
    pub max: u32,
    /// Whether entries carry attributes, where the caller may search the directory.
    pub asked_attrs: bool,
    /// Bytes of the message that carries it at most.
    pub message_bytes: usize,
}

/// What an `opendir` asked for beyond its path (`Request::OpenDir`).
#[derive(Clone, Copy, Default)]
pub struct OpenDirAsked {
    pub flags: i32,
    pub max: u32,
    pub with_attrs: bool,
    pub below: u32,
    pub walk: Walk,
}

impl OpenDirAsked {
    /// What `request` asks, if it is an `OpenDir` (else nothing: an open of nothing).
    pub fn of(request: &Request) -> OpenDirAsked {
        match *request {
            Request::OpenDir {
                flags,
                max,
                with_attrs,
                below,
                walk,
                ..
            } => OpenDirAsked {
                flags,
                max,
                with_attrs,
                below,
                walk,
            },
            _ => OpenDirAsked::default(),
        }
    }
}

/// A walk's next `opendir`, and the walk's stack after it (`Session::predicted`).
pub type Prediction = (Request, Vec<Frame>);

/// The caller of one request.
pub struct Session<'a> {
    pub caller: &'a Credentials,
    pub process: &'a Process,
    /// The channel the request came on (`None`: a close the client deferred, or a request
    /// answered ahead), to nudge the client awake before a long reply (`below.rs`).
    pub channel: Option<&'a shoal_fastpath::shared::SharedChannel>,
    /// The request the caller will most likely send next (a walk's next `opendir`) and the
    /// walk's stack after it, which the connection answers ahead while the caller works
    /// (`server::Speculation`).
    pub predicted: RefCell<Option<Prediction>>,
    /// For a request answered ahead: the walk's stack it was predicted with.
    pub carried: RefCell<Option<Vec<Frame>>>,
    /// Whether a create may be answered before it is written (`create_early`): only for
    /// the request a connection reads while it is the only busy one.
    pub may_answer_early: bool,
    /// A create or unlink answered before it is written: written once the answer is out.
    pub pending: RefCell<Option<Pending<'a>>>,
}

impl<'a> Session<'a> {
    /// A session that predicts nothing, carries no walk and answers no change early.
    pub(crate) fn plain(caller: &'a Credentials, process: &'a Process) -> Self {
        Session {
            caller,
            process,
            channel: None,
            predicted: RefCell::new(None),
            carried: RefCell::new(None),
            may_answer_early: false,
            pending: RefCell::new(None),
        }
    }

    pub(crate) fn owner(&self) -> Caller {
        Caller {
            uid: self.caller.uid,
            gid: self.caller.gid,
        }
    }

    fn handle(&self, id: u64) -> Served<Handle> {
        self.process.get(id).ok_or(Refusal::Errno(libc::EBADF))
    }
}

pub fn attr(inode: &Inode) -> Attr {
    let time = |t: Timestamp| (t.secs, t.nanos);
    Attr {
        ino: inode.ino,
        mode: inode.mode(),
        nlink: inode.nlink,
        uid: inode.uid,
        gid: inode.gid,
        rdev: inode.rdev,
        size: inode.size,
        blocks: inode.blocks(),
        blksize: BLOCK_BYTES,
        atime: time(inode.atime),
        mtime: time(inode.mtime),
        ctime: time(inode.ctime),
    }
}

/// Walks an O_CREAT open makes when other callers keep creating and removing its name
/// between its walk and its create.
const CREATE_ATTEMPTS: usize = 3;

impl Server {
    /// Walks `at` from a start the process holds (`starts`); the kernel walks any other.
    fn walk_from(&self, s: &Session, at: &At) -> Served<Walked> {
        self.walk_from_witnessed(s, at, None)
    }

    fn walk_from_witnessed(
        &self,
        s: &Session,
        at: &At,
        witness: Option<&mut Witness>,
    ) -> Served<Walked> {
        self.require_held_start(s, at)?;
        self.with_reader(|reader| walk_witnessed(reader, s.caller, at, witness))
    }

    /// `walk_to_entry` from `at`'s start (see `walk_from`).
    fn walk_to_entry_from(&self, s: &Session, at: &At) -> Served<Option<WalkedToEntry>> {
        self.require_held_start(s, at)?;
        self.with_reader(|reader| walk_to_entry(reader, s.caller, at))
    }

    /// A walk starts only where the caller holds a descriptor (`starts`).
    fn require_held_start(&self, s: &Session, at: &At) -> Served<()> {
        let held = s
            .process
            .starts
            .allow(s.caller.pid, self.device, at.base, |ino| {
                s.process.holds_directory(ino)
            });
        require_because(held, Why::UnheldStart)
    }

    /// `walk` with the reader of this mount's inodes (the kept directories).
    fn with_reader<T>(&self, walk: impl FnOnce(&Reader) -> T) -> T {
        walk(&Reader {
            engine: &self.engine,
            version_of: &|ino| self.version_of(ino),
            kept: Some(&self.walks),
            stats: &self.stats,
        })
    }

    fn writable(&self) -> Served<()> {
        // A read-only mount answers EROFS, after checks whose order the kernel knows.
        require_because(!self.engine.is_read_only(), Why::ReadOnly)
    }

    pub fn stat(&self, s: &Session, at: &At) -> Served<Reply> {
        let walked = self.walk_from(s, at)?;
        Ok(Reply::Attr(attr(walked.existing()?)))
    }

    pub fn resolve_directory(&self, s: &Session, at: &At) -> Served<Reply> {
        let walked = self.walk_from(s, at)?;
        let inode = walked.existing()?;
        ensure(inode.kind == FileKind::Directory, libc::ENOTDIR)?;
        check(&self.engine, s.caller, inode, MAY_EXEC)?;
        Ok(Reply::Attr(attr(inode)))
    }

    pub fn access(&self, s: &Session, at: &At, mask: u32) -> Served<Reply> {
        let walked = self.walk_from(s, at)?;
        let inode = walked.existing()?;
        let mask = (mask & 0o7) as u16;
        if mask & MAY_WRITE != 0 {
            self.writable()?;
        }
        check(&self.engine, s.caller, inode, mask)?;
        Ok(Reply::Empty)
    }

    /// `open`; with the file's bytes when it is a regular file opened for reading, no
    /// longer than `read_ahead` (the client then reads it without a round trip).
    pub fn open<'a>(
        &'a self,
        s: &Session<'a>,
        at: &At,
        (flags, mode, umask): (i32, u32, u32),
        read_ahead: u32,
    ) -> Served<Reply> {
        let (opened, inode) = self.open_inode(s, at, flags, (mode, umask), None)?;
        Ok(match self.whole_file(&opened, &inode, flags, read_ahead) {
            Some(data) => Reply::OpenedWithData { opened, data },
            None => Reply::Opened(opened),
        })
    }

    /// The bytes of the file `opened`, if it is a regular file opened for reading, of at
    /// most `read_ahead` bytes, and the daemon keeps versions: read after the version the
    /// answer carries, they hold while it stays. A read that fails sends none (the
    /// program's own read then gets the error, as through the kernel). The file's record
    /// is not read again: `inode`, the record the answer's attributes come from, says
    /// where its bytes are (half of a small file's open was reading its record twice).
    fn whole_file(
        &self,
        opened: &Opened,
        inode: &Inode,
        flags: i32,
        read_ahead: u32,
    ) -> Option<Vec<u8>> {
        let limit = u64::from(read_ahead).min(shoal_fastpath::MAX_READ_AHEAD_BYTES as u64);
        let wanted = opened.version.is_some()
            && flags & libc::O_ACCMODE != libc::O_WRONLY
            && opened.attr.mode & libc::S_IFMT == libc::S_IFREG
            && opened.attr.size <= limit;
        if !wanted {
            return None;
        }
        // Its bytes as they are now, to its size in `inode`: a change since moved the
        // version the answer carries, and the client then reads anew.
        let data = self
            .engine
            .read_from(inode, 0, opened.attr.size as u32)
            .ok()?;
        (data.len() as u64 == opened.attr.size).then_some(data)
    }

    /// `open`, noting its walk in `witness`.
    pub(crate) fn open_witnessed<'a>(
        &'a self,
        s: &Session<'a>,
        at: &At,
        flags: i32,
        mode: u32,
        umask: u32,
        witness: Option<&mut Witness>,
    ) -> Served<Reply> {
        let (opened, _) = self.open_inode(s, at, flags, (mode, umask), witness)?;
        Ok(Reply::Opened(opened))
    }

    /// `open_witnessed`'s answer, and the record its attributes come from.
    pub(crate) fn open_inode<'a>(
        &'a self,
        s: &Session<'a>,
        at: &At,
        flags: i32,
        (mode, umask): (u32, u32),
        witness: Option<&mut Witness>,
    ) -> Served<(Opened, Inode)> {
        // O_TMPFILE includes O_DIRECTORY's bit: tested whole, or every opendir falls back.
        require(flags & libc::O_PATH == 0)?;
        require(flags & libc::O_TMPFILE != libc::O_TMPFILE)?;
        let accmode = flags & libc::O_ACCMODE;
        require(accmode != libc::O_ACCMODE)?;
        let creating = flags & libc::O_CREAT != 0;
        require(!(creating && flags & libc::O_DIRECTORY != 0))?;
        let Found {
            inode,
            version: found_version,
            created,
        } = self.find_or_create(s, at, witness, flags, (mode, umask))?;
        if !created {
            self.may_open(s, &inode, flags)?;
            // The kernel's may_open: O_NOATIME only for the owner or with CAP_FOWNER (a
            // capability alone, without the others of `privileged`, is the kernel's to
            // see). shoal never updates access times (FUSE marks every inode S_NOATIME),
            // so the flag asks nothing more.
            if flags & libc::O_NOATIME != 0 {
                require_permission(owns(s.caller, &inode))?;
            }
        }
        let readable = accmode != libc::O_WRONLY;
        let writable = accmode != libc::O_RDONLY;
        if !created && flags & libc::O_TRUNC != 0 && inode.kind == FileKind::Regular {
            self.truncate_to_zero(s, &inode)?;
        }
        let directory = inode.kind == FileKind::Directory;
        let handle = Handle {
            ino: inode.ino,
            readable,
            writable,
            directory,
        };
        if !directory {
            self.engine.pin_file(inode.ino);
        }
        let Some(id) = s.process.insert(&self.handle_ids, handle) else {
            release(&self.engine, &handle);
            return Err(Refusal::Errno(libc::EMFILE));
        };
        // The version first, then the attributes it vouches for: the walk's, read after
        // their version, or read again (a change after the create or the truncation may
        // already have moved it).
        let truncated = flags & libc::O_TRUNC != 0;
        // A create not yet written has no record to read again: the one it writes is this.
        let unwritten = created && s.pending.borrow().is_some();
        let (version, inode) = match found_version {
            Some(version) if !truncated => (Some(version), inode),
            _ => {
                let version = self.version_of(inode.ino);
                if (version.is_none() || unwritten) && (created || !truncated) {
                    (version, inode)
                } else {
                    (version, self.engine.getattr(inode.ino)?)
                }
            }
        };
        let opened = Opened {
            handle: id,
            attr: attr(&inode),
            created,
            version,
            no_xattrs: !inode.may_have_xattrs,
        };
        Ok((opened, inode))
    }

    /// What an open names: the existing file, or (O_CREAT) the file it creates; and
    /// whether it created it. A name another caller creates between the walk and the
    /// create is opened (without O_EXCL), as the kernel's `atomic_open` looks up again:
    /// three appenders opening one log with O_CREAT|O_APPEND got EEXIST here before.
    fn find_or_create<'a>(
        &'a self,
        s: &Session<'a>,
        at: &At,
        mut witness: Option<&mut Witness>,
        flags: i32,
        (mode, umask): (u32, u32),
    ) -> Served<Found> {
        let creating = flags & libc::O_CREAT != 0;
        let exclusive = creating && flags & libc::O_EXCL != 0;
        if exclusive && witness.is_none() {
            if let Some(created) = self.create_unlooked(s, at, (mode, umask)) {
                return Ok(created);
            }
        }
        for _ in 0..CREATE_ATTEMPTS {
            let walked = self.walk_from_witnessed(s, at, witness.as_deref_mut())?;
            match &walked.found {
                Some(inode) => {
                    ensure(!exclusive, libc::EEXIST)?;
                    // O_CREAT never opens a directory, even read-only (do_open's EISDIR).
                    ensure(
                        !(creating && inode.kind == FileKind::Directory),
                        libc::EISDIR,
                    )?;
                    return Ok(Found {
                        inode: inode.clone(),
                        version: walked.found_version,
                        created: false,
                    });
                }
                None if creating => match self.create_file(s, &walked, mode, umask) {
                    Ok(inode) => {
                        return Ok(Found {
                            inode,
                            version: None,
                            created: true,
                        })
                    }
                    Err(Refusal::Errno(libc::EEXIST)) if !exclusive => continue,
                    Err(refusal) => return Err(refusal),
                },
                None => return Err(Refusal::Errno(libc::ENOENT)),
            }
        }
        // Made and removed again at every try: the kernel decides.
        Err(Refusal::Fallback(Why::KernelRule))
    }

    /// An exclusive create (`tar x`, `cp -a`) made without looking its name up first: the
    /// engine's create finds an existing name itself, and the lookup of a name not there
    /// was an LSM read that probes every table's filter (4.5 µs of a create's 26 on the
    /// 2-core VM). Any refusal, EEXIST included, is decided again by `find_or_create`'s
    /// walk, in the kernel's order of checks (an existing name is EEXIST even in a
    /// directory the caller may not write); `None` then.
    fn create_unlooked<'a>(
        &'a self,
        s: &Session<'a>,
        at: &At,
        (mode, umask): (u32, u32),
    ) -> Option<Found> {
        self.require_held_start(s, at).ok()?;
        let parent = self
            .with_reader(|reader| walk_to_parent(reader, s.caller, at))
            .ok()??;
        if parent.trailing_slash {
            return None;
        }
        let walked = Walked {
            dir: parent.dir,
            name: parent.name,
            found: None,
            found_version: None,
            trailing_slash: false,
        };
        let inode = self.create_file(s, &walked, mode, umask).ok()?;
        Some(Found {
            inode,
            version: None,
            created: true,
        })
    }

    /// `may_open`: the type and access checks on an existing file.
    fn may_open(&self, s: &Session, inode: &Inode, flags: i32) -> Served<()> {
        let accmode = flags & libc::O_ACCMODE;
        match inode.kind {
            FileKind::Regular => {}
            FileKind::Directory => {
                ensure(accmode == libc::O_RDONLY, libc::EISDIR)?;
                ensure(flags & libc::O_TRUNC == 0, libc::EISDIR)?;
            }
            FileKind::Symlink => return Err(Refusal::Errno(libc::ELOOP)),
            // Fifos, sockets and devices are the kernel's to open.
            _ => return Err(Refusal::Fallback(Why::KernelRule)),
        }
        ensure(
            flags & libc::O_DIRECTORY == 0 || inode.kind == FileKind::Directory,
            libc::ENOTDIR,
        )?;
        let mut mask = 0;
        if accmode != libc::O_WRONLY {
            mask |= MAY_READ;
        }
        if accmode != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            mask |= MAY_WRITE;
            self.writable()?;
        }
        check(&self.engine, s.caller, inode, mask)
    }

    fn create_file<'a>(
        &'a self,
        s: &Session<'a>,
        walked: &Walked,
        mode: u32,
        umask: u32,
    ) -> Served<Inode> {
        require(!walked.is_dots() && !walked.trailing_slash)?;
        require(mode & SET_ID_BITS == 0)?;
        self.may_create_in(s, &walked.dir)?;
        let new = NewInode {
            kind: FileKind::Regular,
            perm: (mode & CREATE_MODE_BITS) as u16,
            rdev: 0,
            target: b"",
        };
        if let Some(created) = self.create_early(s, walked, &new, umask) {
            return created;
        }
        let inode = self.engine.create_masked(
            walked.dir.ino,
            &walked.name,
            &new,
            (umask & 0o777) as u16,
            s.owner(),
        )?;
        self.kernel.name_added(walked.dir.ino, &walked.name);
        Ok(inode)
    }

    fn may_create_in(&self, s: &Session, dir: &Inode) -> Served<()> {
        self.writable()?;
        check(&self.engine, s.caller, dir, MAY_WRITE | MAY_EXEC)
    }

    fn truncate_to_zero(&self, s: &Session, inode: &Inode) -> Served<()> {
        let change = SetAttr {
            size: Some(0),
            kill_suidgid: !s.caller.privileged,
            ..SetAttr::default()
        };
        self.engine.setattr(inode.ino, &change)?;
        self.kernel.inode_changed(inode.ino, true);
        Ok(())
    }

    /// Closes handle `id` of `process`, if it has it.
    pub(crate) fn close_quietly(&self, process: &Process, id: u64) {
        if let Some(handle) = process.remove(id) {
            release(&self.engine, &handle);
        }
    }

    pub fn close(&self, s: &Session, id: u64) -> Served<Reply> {
        let handle = s.process.remove(id).ok_or(Refusal::Errno(libc::EBADF))?;
        release(&self.engine, &handle);
        Ok(Reply::Empty)
    }

    pub fn read(&self, s: &Session, id: u64, offset: u64, len: u32) -> Served<Reply> {
        let handle = s.handle(id)?;
        ensure(!handle.directory, libc::EISDIR)?;
        ensure(handle.readable, libc::EBADF)?;
        let len = len.min(shoal_fastpath::MAX_IO_BYTES as u32);
        Ok(Reply::Data(self.engine.read(handle.ino, offset, len)?))
    }

    /// A write at `offset` (or at the end, `append`); with the file's attributes after it
    /// when `with_attr`.
    pub fn write(
        &self,
        s: &Session,
        id: u64,
        (offset, append): (u64, bool),
        data: &[u8],
        with_attr: bool,
    ) -> Served<Reply> {
        let handle = s.handle(id)?;
        ensure(handle.writable && !handle.directory, libc::EBADF)?;
        let kill = !s.caller.privileged;
        // Appends from this door are serialized per inode, so each lands at the end.
        let _append_guard = append.then(|| self.append_lock(handle.ino));
        let offset = if append {
            self.engine.getattr(handle.ino)?.size
        } else {
            offset
        };
        // The kernel learns of the cleared set-id bits from the invalidation below.
        let written = self
            .engine
            .write_killing_privileges(handle.ino, offset, data, kill)?
            .bytes;
        self.kernel.inode_changed(handle.ino, true);
        let (written, end) = (u64::from(written), offset + u64::from(written));
        if !with_attr {
            return Ok(Reply::Written { written, end });
        }
        // As `changed`: the version first, then the attributes it vouches for.
        let version = self.version_of(handle.ino);
        let inode = self.engine.getattr(handle.ino)?;
        Ok(Reply::WrittenAt {
            written,
            end,
            attr: attr(&inode),
            version,
            no_xattrs: !inode.may_have_xattrs,
        })
    }

    /// copy_file_range(2) inside the engine: `from` readable, `to` writable (not
    /// O_APPEND: the client checks that), two different regular files.
    pub fn copy_range(
        &self,
        s: &Session,
        from: (u64, u64),
        to: (u64, u64),
        len: u64,
    ) -> Served<Reply> {
        let (source, target) = self.copy_checked(s, from, to, len)?;
        let copied = self.engine.copy_range(source, from.1, target, to.1, len)?;
        self.kernel.inode_changed(target, true);
        Ok(Reply::Written {
            written: copied,
            end: to.1 + copied,
        })
    }

    /// The checks of a copy_file_range of `len` bytes between two handles (`from` and `to`:
    /// handle and offset) before it is made; the source's and target's inodes.
    pub(crate) fn copy_checked(
        &self,
        s: &Session,
        from: (u64, u64),
        to: (u64, u64),
        len: u64,
    ) -> Served<(u64, u64)> {
        let (source, target) = (s.handle(from.0)?, s.handle(to.0)?);
        ensure(!source.directory && !target.directory, libc::EISDIR)?;
        ensure(source.readable && target.writable, libc::EBADF)?;
        // The same file (overlap rules), and killing set-id bits on the target: the kernel's.
        require(source.ino != target.ino)?;
        let target_inode = self.engine.getattr(target.ino)?;
        require(s.caller.privileged || u32::from(target_inode.perm) & SET_ID_BITS == 0)?;
        require(from.1.checked_add(len).is_some() && to.1.checked_add(len).is_some())?;
        self.writable()?;
        Ok((source.ino, target.ino))
    }

    pub fn fstat(&self, s: &Session, id: u64) -> Served<Reply> {
        let handle = s.handle(id)?;
        let version = self.version_of(handle.ino);
        let inode = self.engine.getattr(handle.ino)?;
        Ok(Reply::AttrAt {
            attr: attr(&inode),
            version,
            no_xattrs: !inode.may_have_xattrs,
        })
    }

    /// The version of `ino`'s slot, to be read before its attributes (`Opened::version`);
    /// `None` while the state does not follow the engine.
    pub(crate) fn version_of(&self, ino: u64) -> Option<u32> {
        self.state_follows_engine.then(|| self.state.0.version(ino))
    }

    pub fn fsync(&self, s: &Session, id: u64) -> Served<Reply> {
        s.handle(id)?;
        self.sync_for(s)
    }

    /// `sync`/`syncfs` (and `fsync`) of the session's process: everything durable, then
    /// the error of a write of the process answered before it was applied that failed.
    pub fn sync_for(&self, s: &Session) -> Served<Reply> {
        self.sync()?;
        match s.process.take_replied_write_error() {
            Some(errno) => Err(Refusal::Errno(errno)),
            None => Ok(Reply::Empty),
        }
    }

    pub fn sync(&self) -> Served<Reply> {
        self.engine.stats().count(shoal_engine::stats::Op::Fsync);
        self.engine.sync()?;
        Ok(Reply::Empty)
    }

    /// `opendir`: an O_DIRECTORY open answered with the directory's first page of entries
    /// (the client serves the first `getdents` from it while the mount's change count
    /// stays, as a listing read then would be the same), and up to `below` directories
    /// under it opened and listed too (`below.rs`). A page that cannot be read leaves the
    /// open as it is: the `getdents` asks again and gets the error.
    pub fn open_dir<'a>(&'a self, s: &Session<'a>, at: &At, asked: OpenDirAsked) -> Served<Reply> {
        let OpenDirAsked {
            flags,
            max,
            with_attrs: asked_attrs,
            below,
            walk,
        } = asked;
        require(flags & libc::O_DIRECTORY != 0 && flags & libc::O_CREAT == 0)?;
        let version_of = |ino| self.version_of(ino);
        let mut witness = Witness::new(&version_of);
        let Reply::Opened(opened) = self.open_witnessed(s, at, flags, 0, 0, Some(&mut witness))?
        else {
            return Err(Refusal::Errno(libc::EPROTO));
        };
        let witness = witness.into_versions();
        let budget = MAX_MESSAGE_BYTES - OPENED_DIR_EXTRA_BYTES;
        let page = self.read_dir_within(s, opened.handle, None, max, asked_attrs, budget);
        let Ok(Reply::Entries {
            entries,
            done,
            changes,
            dir_version,
        }) = page
        else {
            return Ok(Reply::Opened(opened));
        };
        let listed: usize = entries.iter().map(DirEntryWire::encoded_len).sum();
        let ahead = Ahead {
            wanted: below,
            max,
            budget: budget - ENTRIES_HEADER_BYTES - listed,
            changes,
            keep_open: walk != Walk::No,
        };
        let wanted = below;
        let mut below = Vec::new();
        if walk != Walk::No || wanted > 0 {
            // Where the walk goes on after this directory's own: the stack it was predicted
            // with, else the directories after it in its parent (one level only: the client
            // names the directories a listing asked for by stats brings by paths from the
            // one holding the directory asked for, `remember_below`: with a stack rebuilt
            // for every level of the path it took `lib/` for `ipv6/lib/`, and `git status`
            // saw files there as deleted).
            let lower = s.carried.take().unwrap_or_else(|| {
                self.later_siblings(s, at, walk, &opened.attr, max)
                    .into_iter()
                    .collect()
            });
            let subdirs = crate::pages::subdirectories(&entries);
            let top = Frame::of(opened.attr.ino, Via::of(at, walk), subdirs);
            let (ahead_of_walk, stack) = self.open_below(s, top, lower, &ahead);
            below = ahead_of_walk;
            let walking = walk != Walk::No;
            if let Some((next, stack)) = Frame::next(stack, at.follow).filter(|_| walking) {
                // The walk's next `opendir`, if it goes on in order: answered ahead of it.
                let request = Request::OpenDir {
                    at: next,
                    flags,
                    max,
                    with_attrs: asked_attrs,
                    below: wanted,
                    walk,
                };
                s.predicted.replace(Some((request, stack)));
            }
        }
        Ok(Reply::OpenedDir {
            opened,
            entries,
            done,
            changes,
            dir_version,
            witness,
            below,
        })
    }

    /// A page of a directory's entries. When the caller may look entries up (search
    /// permission), each carries its attributes, which the client keeps to answer the
    /// `stat` that tools make of every entry they list, while the mount's change count
    /// stays `changes` (read before anything else, so nothing older is ever kept).
    pub fn read_dir(
        &self,
        s: &Session,
        id: u64,
        after: Option<&[u8]>,
        max: u32,
        asked_attrs: bool,
    ) -> Served<Reply> {
        self.read_dir_within(s, id, after, max, asked_attrs, MAX_MESSAGE_BYTES)
    }

    /// `read_dir` in a reply of at most `message_bytes`.
    pub(crate) fn read_dir_within(
        &self,
        s: &Session,
        id: u64,
        after: Option<&[u8]>,
        max: u32,
        asked_attrs: bool,
        message_bytes: usize,
    ) -> Served<Reply> {
        let changes = self.engine.changes();
        let handle = s.handle(id)?;
        ensure(handle.directory, libc::ENOTDIR)?;
        let dir = self.engine.getattr(handle.ino)?;
        let page = Page {
            after,
            max,
            asked_attrs,
            message_bytes,
        };
        self.list(s, &dir, changes, &page)
    }

    /// A page of directory `dir`'s entries (`dir` read after the engine's change count was
    /// `changes`), as `read_dir_within` answers it.
    pub(crate) fn list(
        &self,
        s: &Session,
        dir: &Inode,
        changes: u64,
        page: &Page,
    ) -> Served<Reply> {
        let max = page.max.clamp(1, READDIR_BATCH_ENTRIES) as usize;
        let mut entries = Vec::new();
        if page.after.is_none() {
            entries.push(DirEntryWire::dot(b".", dir.ino));
            entries.push(DirEntryWire::dot(b"..", dir.parent));
        }
        let with_attrs = self.lists_attributes(s, dir, page.asked_attrs);
        // What fits one message; the client asks for the rest after the last name sent.
        let mut bytes =
            ENTRIES_HEADER_BYTES + entries.iter().map(DirEntryWire::encoded_len).sum::<usize>();
        let mut fits = |entry: &DirEntryWire| {
            bytes += entry.encoded_len();
            bytes <= page.message_bytes
        };
        // Each entry made in place, and none past the message's end: a page of a walk
        // (thousands of them) was made whole, then moved entry by entry into the reply.
        let listed = if with_attrs {
            let listed = self.engine.readdir_plus_shared(dir.ino, page.after, max)?;
            entries.reserve(listed.len());
            for (entry, inode) in listed.iter() {
                let wire = DirEntryWire {
                    ino: entry.ino,
                    kind: d_type(entry.kind),
                    name: EntryName::from_slice(&entry.name),
                    attr: Some(attr(inode)),
                    // Counted in the page's bytes; read after it (`listing_versions`).
                    version: Some(0),
                    // `find -ls`, `ls -l`, `tar c` read each symlink they list: a round
                    // trip each, to a daemon thread asleep by then (30 µs each on the
                    // 2-core VM), for bytes the inode read here holds.
                    target: (inode.kind == FileKind::Symlink).then(|| inode.inline_data().to_vec()),
                    // `ls -l` asks each entry's SELinux label and ACLs by path, `cp -a`
                    // each directory's ACLs: ENODATA without a round trip.
                    no_xattrs: !inode.may_have_xattrs,
                };
                if !fits(&wire) {
                    break;
                }
                entries.push(wire);
            }
            listed.len()
        } else {
            let listed = self.engine.readdir(dir.ino, page.after, max)?;
            let count = listed.len();
            entries.reserve(count);
            for entry in listed {
                let wire = DirEntryWire {
                    ino: entry.ino,
                    kind: d_type(entry.kind),
                    name: EntryName::from_vec(entry.name),
                    attr: None,
                    version: None,
                    target: None,
                    no_xattrs: false,
                };
                if !fits(&wire) {
                    break;
                }
                entries.push(wire);
            }
            count
        };
        let sent = entries.len() - usize::from(page.after.is_none()) * 2;
        // A short page from the engine is the directory's end, if all of it was sent.
        let done = listed < max && sent == listed;
        let dir_version = self.listing_versions(dir.ino, &mut entries, changes);
        Ok(Reply::Entries {
            entries,
            done,
            changes,
            dir_version,
        })
    }

    /// Whether a listing of `dir` asked `asked` for attributes carries them: for a caller
    /// who may look its entries up (search permission), when clients can keep them.
    pub(crate) fn lists_attributes(&self, s: &Session, dir: &Inode, asked: bool) -> bool {
        asked && self.state_follows_engine && check(&self.engine, s.caller, dir, MAY_EXEC).is_ok()
    }

    /// The versions of a listing's directory and of its entries with attributes, read
    /// after the listing: they vouch for it as if read before, when the engine's change
    /// count read before the listing (`changes`) has not moved by the time they are read.
    /// A batch the listing missed reaches the store before the engine counts it, and the
    /// count moves before the batch's versions are bumped (`Engine::count_change`): a
    /// version that moved for it comes with a count that moved too. Else none.
    fn listing_versions(
        &self,
        dir: u64,
        entries: &mut [DirEntryWire],
        changes: u64,
    ) -> Option<u32> {
        let dir_version = self.version_of(dir);
        for entry in entries.iter_mut().filter(|entry| entry.attr.is_some()) {
            entry.version = self.version_of(entry.ino);
        }
        if dir_version.is_some() && self.engine.changes() == changes {
            return dir_version;
        }
        for entry in entries.iter_mut() {
            entry.version = None;
        }
        None
    }

    pub fn mkdir<'a>(&'a self, s: &Session<'a>, at: &At, mode: u32, umask: u32) -> Served<Reply> {
        let version_of = |ino| self.version_of(ino);
        let mut witness = Witness::new(&version_of);
        let walked = self.walk_from_witnessed(s, at, Some(&mut witness))?;
        dots_exist(&walked)?;
        if walked.found.is_some() {
            // `mkdir -p` and fs_mark ask again and again for directories that exist.
            return match witness.into_versions() {
                Some(witness) => Ok(Reply::Exists { witness }),
                None => Err(Refusal::Errno(libc::EEXIST)),
            };
        }
        self.may_create_in(s, &walked.dir)?;
        let perm = (mode & MKDIR_MODE_BITS) as u16;
        if let Some(made) = self.mkdir_early(s, &walked, perm, umask) {
            return made.map(|inode| Reply::Attr(attr(&inode)));
        }
        let inode = self.engine.mkdir_masked(
            walked.dir.ino,
            &walked.name,
            perm,
            (umask & 0o777) as u16,
            s.owner(),
        )?;
        self.kernel.name_added(walked.dir.ino, &walked.name);
        Ok(Reply::Attr(attr(&inode)))
    }

    pub fn symlink(&self, s: &Session, target: &[u8], at: &At) -> Served<Reply> {
        ensure(!target.is_empty(), libc::ENOENT)?;
        let walked = self.walk_from(s, at)?;
        dots_exist(&walked)?;
        require(!walked.trailing_slash)?;
        ensure(walked.found.is_none(), libc::EEXIST)?;
        self.may_create_in(s, &walked.dir)?;
        let inode = self
            .engine
            .symlink(walked.dir.ino, &walked.name, target, s.owner())?;
        self.kernel.name_added(walked.dir.ino, &walked.name);
        Ok(Reply::Attr(attr(&inode)))
    }

    pub fn readlink(&self, s: &Session, at: &At) -> Served<Reply> {
        let walked = self.walk_from(s, at)?;
        let inode = walked.existing()?;
        ensure(inode.kind == FileKind::Symlink, libc::EINVAL)?;
        Ok(Reply::Data(self.engine.readlink(inode.ino)?))
    }

    pub fn unlink<'a>(&'a self, s: &Session<'a>, at: &At, dir: bool) -> Served<Reply> {
        let Some(walked) = self.walk_to_entry_from(s, at)? else {
            return self.unlink_walked(s, at, dir);
        };
        // The kernel asks for write access to the mount before it looks the last name up:
        // a missing name on a read-only mount is EROFS, not ENOENT.
        self.writable()?;
        let (victim, kind) = walked.entry.ok_or(Refusal::Errno(libc::ENOENT))?;
        if !dir && walked.trailing_slash {
            // `unlink("name/")` is refused before any permission check: EISDIR for a
            // directory, else ENOTDIR (a symlink to a directory included).
            ensure(kind != FileKind::Directory, libc::EISDIR)?;
            return Err(Refusal::Errno(libc::ENOTDIR));
        }
        // The kernel's `may_delete`: permission (the sticky bit's rule reading the
        // victim's owner only where it applies), then the victim's kind.
        may_remove_owned_by(&self.engine, s.caller, &walked.dir, || {
            Ok(self.engine.getattr(victim)?.uid)
        })?;
        removable_kind(kind, dir)?;
        self.remove(s, &walked.dir, &walked.name, victim, dir)
    }

    /// `unlink` of a path whose last name the whole walk decides (`.`, `..`, none).
    fn unlink_walked<'a>(&'a self, s: &Session<'a>, at: &At, dir: bool) -> Served<Reply> {
        let walked = self.walk_from(s, at)?;
        require(!walked.is_dots())?;
        self.writable()?;
        require(dir || !walked.trailing_slash)?;
        let victim = walked.existing()?.clone();
        may_remove(&self.engine, s.caller, &walked.dir, &victim)?;
        removable_kind(victim.kind, dir)?;
        self.remove(s, &walked.dir, &walked.name, victim.ino, dir)
    }

    /// Removes `name` (naming `victim`) from `dir`, every check passed.
    fn remove<'a>(
        &'a self,
        s: &Session<'a>,
        dir: &Inode,
        name: &[u8],
        victim: u64,
        directory: bool,
    ) -> Served<Reply> {
        if let Some(removed) = self.removed_early(s, dir.ino, name, victim, directory) {
            return removed;
        }
        if directory {
            self.engine.rmdir(dir.ino, name)?;
        } else {
            self.engine.unlink(dir.ino, name)?;
        }
        self.kernel.name_removed(dir.ino, name, victim);
        Ok(Reply::Empty)
    }

    pub fn rename(&self, s: &Session, from: &At, to: &At, flags: u32) -> Served<Reply> {
        require(flags & !RENAME_NOREPLACE == 0)?;
        let source = self.walk_from(s, from)?;
        let target = self.walk_from(s, to)?;
        require(!source.is_dots() && !target.is_dots())?;
        require(!source.trailing_slash && !target.trailing_slash)?;
        // EROFS before the names are looked up, as the kernel checks (see `unlink`).
        self.writable()?;
        let moved = source.existing()?.clone();
        // Directories (loops, `..` updates) and replacing a directory are the kernel's.
        require(moved.kind != FileKind::Directory)?;
        if let Some(replaced) = &target.found {
            ensure(flags & RENAME_NOREPLACE == 0, libc::EEXIST)?;
            require(replaced.kind != FileKind::Directory && replaced.ino != moved.ino)?;
            may_remove(&self.engine, s.caller, &target.dir, replaced)?;
        } else {
            check(&self.engine, s.caller, &target.dir, MAY_WRITE | MAY_EXEC)?;
        }
        may_remove(&self.engine, s.caller, &source.dir, &moved)?;
        let mode = if flags & RENAME_NOREPLACE != 0 {
            RenameMode::NoReplace
        } else {
            RenameMode::Replace
        };
        self.engine.rename(
            source.dir.ino,
            &source.name,
            target.dir.ino,
            &target.name,
            mode,
        )?;
        self.kernel
            .name_removed(source.dir.ino, &source.name, moved.ino);
        if let Some(replaced) = &target.found {
            self.kernel
                .name_removed(target.dir.ino, &target.name, replaced.ino);
        } else {
            self.kernel.name_added(target.dir.ino, &target.name);
        }
        self.kernel.renamed(moved.ino, target.dir.ino, &target.name);
        Ok(Reply::Empty)
    }

    pub fn link(&self, s: &Session, from: &At, to: &At) -> Served<Reply> {
        let source = self.walk_from(s, from)?;
        let linked = source.existing()?.clone();
        ensure(linked.kind != FileKind::Directory, libc::EPERM)?;
        // protected_hardlinks: linking another user's file is the kernel's to judge.
        require_permission(owns(s.caller, &linked))?;
        let target = self.walk_from(s, to)?;
        dots_exist(&target)?;
        require(!target.trailing_slash)?;
        ensure(target.found.is_none(), libc::EEXIST)?;
        self.may_create_in(s, &target.dir)?;
        let inode = self.engine.link(linked.ino, target.dir.ino, &target.name)?;
        self.kernel.name_added(target.dir.ino, &target.name);
        self.kernel.inode_changed(linked.ino, false);
        Ok(Reply::Attr(attr(&inode)))
    }

    pub fn set_attr(&self, s: &Session, target: &Target, change: &SetAttrWire) -> Served<Reply> {
        let (inode, engine_change) = self.planned_set_attr(s, target, change)?;
        let changes_before = self.engine.changes();
        let updated = self.engine.setattr(inode.ino, &engine_change)?;
        self.kernel.inode_changed(inode.ino, change.size.is_some());
        self.changed(updated, changes_before)
    }

    /// A setattr's checks, in the kernel's order: the inode as it is, and the engine's
    /// change they allow.
    pub(crate) fn planned_set_attr(
        &self,
        s: &Session,
        target: &Target,
        change: &SetAttrWire,
    ) -> Served<(Inode, SetAttr)> {
        let (inode, handle) = self.target(s, target)?;
        let engine_change = self.plan_set_attr(s, &inode, handle, change)?;
        Ok((inode, engine_change))
    }

    /// `planned_set_attr` of an inode already read (through `handle`, if by one).
    pub(crate) fn plan_set_attr(
        &self,
        s: &Session,
        inode: &Inode,
        handle: Option<Handle>,
        change: &SetAttrWire,
    ) -> Served<SetAttr> {
        self.writable()?;
        let mut engine_change = SetAttr::default();
        if let Some(size) = change.size {
            self.authorize_size(s, inode, handle)?;
            engine_change.size = Some(size);
            engine_change.kill_suidgid = !s.caller.privileged;
        }
        if let Some(mode) = change.mode {
            // notify_change: a symlink's mode never changes (fchmodat2 with NOFOLLOW).
            ensure(inode.kind != FileKind::Symlink, libc::EOPNOTSUPP)?;
            require_permission(owns(s.caller, inode))?;
            let mut perm = (mode & 0o7777) as u16;
            if !s.caller.privileged && !s.caller.in_group(inode.gid) {
                perm &= !0o2000;
            }
            engine_change.perm = Some(perm);
        }
        if change.uid.is_some() || change.gid.is_some() {
            self.authorize_chown(s, inode, change)?;
            engine_change.uid = change.uid;
            engine_change.gid = change.gid;
        }
        self.authorize_times(s, inode, change)?;
        engine_change.atime = set_time(change.atime);
        engine_change.mtime = set_time(change.mtime);
        Ok(engine_change)
    }

    /// A setattr's reply, with what the caller may keep of the inode: its version, then its
    /// attributes as of that version. `changes_before`, the engine's change count read
    /// before the setattr, tells whether `updated` is still current: a linked inode's
    /// setattr writes one batch, which moves the versions of what it wrote before it
    /// returns, and every batch moves the count before its versions; so a count one past
    /// `changes_before` once the version is read means that batch was the only one since.
    /// Otherwise (another caller's change may have come between, or a removed inode's
    /// setattr wrote no batch) the attributes are read again.
    fn changed(&self, updated: Inode, changes_before: u64) -> Served<Reply> {
        let version = self.version_of(updated.ino);
        let only_this_change =
            updated.nlink > 0 && self.engine.changes() == changes_before.wrapping_add(1);
        let current = match version {
            Some(_) if !only_this_change => self.engine.getattr(updated.ino)?,
            _ => updated,
        };
        Ok(Reply::Changed {
            attr: attr(&current),
            kernel_holds: self.kernel.holds(current.ino),
            version,
            no_xattrs: !current.may_have_xattrs,
        })
    }

    fn authorize_size(&self, s: &Session, inode: &Inode, handle: Option<Handle>) -> Served<()> {
        ensure(inode.kind != FileKind::Directory, libc::EISDIR)?;
        require(inode.kind == FileKind::Regular)?;
        match handle {
            Some(handle) => require(handle.writable),
            None => check(&self.engine, s.caller, inode, MAY_WRITE),
        }
    }

    fn authorize_chown(&self, s: &Session, inode: &Inode, change: &SetAttrWire) -> Served<()> {
        // Clearing set-id bits on chown has rules of its own: the kernel's.
        require(inode.kind == FileKind::Directory || u32::from(inode.perm) & SET_ID_BITS == 0)?;
        if s.caller.privileged {
            return Ok(());
        }
        let uid_kept = change.uid.is_none_or(|uid| uid == inode.uid);
        let gid_allowed = change
            .gid
            .is_none_or(|gid| gid == inode.gid || s.caller.in_group(gid));
        require_permission(s.caller.uid == inode.uid && uid_kept && gid_allowed)
    }

    fn authorize_times(&self, s: &Session, inode: &Inode, change: &SetAttrWire) -> Served<()> {
        let explicit = |t: TimeWire| matches!(t, TimeWire::At { .. });
        let any = |t: TimeWire| t != TimeWire::Omit;
        if explicit(change.atime) || explicit(change.mtime) {
            require_permission(owns(s.caller, inode))
        } else if any(change.atime) || any(change.mtime) {
            require_permission(
                owns(s.caller, inode) || granted(&self.engine, s.caller, inode, MAY_WRITE),
            )
        } else {
            Ok(())
        }
    }

    /// Setting an access ACL that restates permission bits (`posix_acl_update_mode`): only
    /// the owner or CAP_FOWNER, set-gid dropped as chmod drops it, and any stored access
    /// ACL goes, since the mode now says it all.
    pub fn set_acl_mode(&self, s: &Session, target: &Target, perm: u32) -> Served<Reply> {
        let (inode, _) = self.target(s, target)?;
        require(matches!(
            inode.kind,
            FileKind::Regular | FileKind::Directory
        ))?;
        require_permission(owns(s.caller, &inode))?;
        self.writable()?;
        let mut new_perm = (inode.perm & !0o777) | (perm & 0o777) as u16;
        if !s.caller.privileged && !s.caller.in_group(inode.gid) {
            new_perm &= !0o2000;
        }
        if inode.may_have_xattrs {
            match self.engine.removexattr(inode.ino, ACL_ACCESS_NAME) {
                Ok(()) | Err(shoal_engine::FsError::NoXattr) => {}
                Err(error) => return Err(error.into()),
            }
        }
        let change = SetAttr {
            perm: Some(new_perm),
            ..SetAttr::default()
        };
        let changes_before = self.engine.changes();
        let updated = self.engine.setattr(inode.ino, &change)?;
        self.kernel.inode_changed(inode.ino, false);
        self.changed(updated, changes_before)
    }

    pub fn get_xattr(&self, s: &Session, target: &Target, name: &[u8]) -> Served<Reply> {
        let (inode, _) = self.target(s, target)?;
        no_acl_on_symlink(&inode, name)?;
        if name.starts_with(b"user.") {
            require(matches!(
                inode.kind,
                FileKind::Regular | FileKind::Directory
            ))?;
            check(&self.engine, s.caller, &inode, MAY_READ)?;
        } else if name.starts_with(b"trusted.") {
            require_permission(s.caller.privileged)?;
        } else {
            require(name.starts_with(b"security.") || name.starts_with(b"system.posix_acl_"))?;
        }
        Ok(Reply::Data(self.engine.getxattr(inode.ino, name)?))
    }

    pub fn list_xattr(&self, s: &Session, target: &Target) -> Served<Reply> {
        let (inode, _) = self.target(s, target)?;
        let mut list = Vec::new();
        for name in self.engine.listxattr(inode.ino)? {
            list.extend_from_slice(&name);
            list.push(0);
        }
        Ok(Reply::Data(list))
    }

    /// removexattr, for the names whose rules the fast path knows: a POSIX ACL that is not
    /// there, removed by its owner or a privileged caller (ENODATA, as the daemon answers
    /// the kernel's `set_acl(NULL)`), and `user.*` (xattr_permission: a regular file or a
    /// directory, write permission). Anything else, or an ACL that is there (its removal
    /// has the kernel's mode rules), goes to the kernel.
    pub fn remove_xattr(&self, s: &Session, target: &Target, name: &[u8]) -> Served<Reply> {
        let (inode, _) = self.target(s, target)?;
        no_acl_on_symlink(&inode, name)?;
        self.writable()?;
        if name == b"system.posix_acl_access" || name == b"system.posix_acl_default" {
            require(s.caller.privileged || owns(s.caller, &inode))?;
            return match self.engine.getxattr(inode.ino, name) {
                Err(FsError::NoXattr) => Err(Refusal::Errno(libc::ENODATA)),
                Err(error) => Err(error.into()),
                Ok(_) => Err(Refusal::Fallback(Why::KernelRule)),
            };
        }
        require(name.starts_with(b"user."))?;
        require(matches!(
            inode.kind,
            FileKind::Regular | FileKind::Directory
        ))?;
        check(&self.engine, s.caller, &inode, MAY_WRITE)?;
        self.engine.removexattr(inode.ino, name)?;
        Ok(Reply::Empty)
    }

    /// The inode a setattr or xattr call names, and the handle when it names one.
    fn target(&self, s: &Session, target: &Target) -> Served<(Inode, Option<Handle>)> {
        match target {
            Target::Path(at) => {
                let walked = self.walk_from(s, at)?;
                Ok((walked.existing()?.clone(), None))
            }
            Target::Handle(id) => {
                let handle = s.handle(*id)?;
                Ok((self.engine.getattr(handle.ino)?, Some(handle)))
            }
        }
    }
}

/// A call that makes a name (mkdir, symlink, link) whose last component is `.` or `..`:
/// EEXIST, as the kernel's `filename_create` answers before it looks at the mount or the
/// name (`tar x` asks `mkdirat(dir, ".")` of the directory it extracts into).
fn dots_exist(walked: &Walked) -> Served<()> {
    ensure(!walked.is_dots(), libc::EEXIST)
}

fn set_time(time: TimeWire) -> Option<SetTime> {
    match time {
        TimeWire::Omit => None,
        TimeWire::Now => Some(SetTime::Now),
        TimeWire::At { secs, nanos } => Some(SetTime::At(Timestamp { secs, nanos })),
    }
}

/// A symlink has no POSIX ACL to read or remove: the kernel says EOPNOTSUPP before any
/// other check (FUSE's symlink inodes have no `get_inode_acl` nor `set_acl`).
fn no_acl_on_symlink(inode: &Inode, name: &[u8]) -> Served<()> {
    let acl = name == b"system.posix_acl_access" || name == b"system.posix_acl_default";
    ensure(!(acl && inode.kind == FileKind::Symlink), libc::EOPNOTSUPP)
}

pub fn d_type(kind: FileKind) -> u8 {
    match kind {
        FileKind::Regular => libc::DT_REG,
        FileKind::Directory => libc::DT_DIR,
        FileKind::Symlink => libc::DT_LNK,
        FileKind::Fifo => libc::DT_FIFO,
        FileKind::Socket => libc::DT_SOCK,
        FileKind::CharDevice => libc::DT_CHR,
        FileKind::BlockDevice => libc::DT_BLK,
    }
}

impl From<Refusal> for (shoal_fastpath::Status, Reply) {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Errno(errno) => (shoal_fastpath::Status::Errno(errno), Reply::Empty),
            Refusal::Fallback(_) => (shoal_fastpath::Status::Fallback, Reply::Empty),
        }
    }
}

/// What `find_or_create` opens: the inode, the version of its slot read before it (when
/// the walk could), and whether this call created it.
struct Found {
    inode: Inode,
    version: Option<u32>,
    created: bool,
}

/// `unlink` removes no directory, `rmdir` nothing else.
fn removable_kind(kind: FileKind, directory: bool) -> Served<()> {
    let is_dir = kind == FileKind::Directory;
    ensure(!directory || is_dir, libc::ENOTDIR)?;
    ensure(directory || !is_dir, libc::EISDIR)
}
