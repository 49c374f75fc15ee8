//! The `fuser::Filesystem` implementation: argument conversion, replies, caching policy.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileHandle, FileType, FopenFlags, Generation, INodeNo,
    InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use shoal_engine::{
    Caller, DirEntry, Engine, FileKind, FsError, FsResult, Inode, NewInode, RenameMode, SetAttr,
    SetTime, Timestamp, XattrMode, NAME_MAX_BYTES,
};

use crate::attr::{file_attr, file_type, BLOCK_BYTES};
use crate::dir_offsets::{offset_of, DirOffsets, Resume, DOTDOT_OFFSET};
use crate::errno::errno;
use crate::fuse_stats::{FuseOp, FuseStats, RequestTimer};
use crate::keep_awake::KeepAwake;
use crate::lookup_counts::LookupCounts;
use crate::open_requests::OpenRequests;
use crate::sync_waiters::{Fsync, SyncWaiters};

mod export;
mod fallocate;
mod tmpfile;

/// shoal is the only writer of its store, so the kernel may trust what it caches for long;
/// every change made through the mount updates or invalidates the kernel's copy itself.
const ENTRY_TTL: Duration = Duration::from_secs(3600);
const ATTR_TTL: Duration = Duration::from_secs(3600);
/// How long the kernel may remember that a name does not exist.
const NEGATIVE_TTL: Duration = Duration::from_secs(3600);
const GENERATION: Generation = Generation(0);
/// Entries fetched from the engine per readdir page.
const READDIR_PAGE_ENTRIES: usize = 256;

const XATTR_CREATE: i32 = 1;
const XATTR_REPLACE: i32 = 2;

pub struct ShoalFs {
    engine: Arc<Engine>,
    capacity_path: Option<PathBuf>,
    lookups: Arc<LookupCounts>,
    dir_offsets: DirOffsets,
    /// The kernel caches directory listings itself when we answer OPENDIR with ENOSYS.
    no_opendir: bool,
    /// Whether the kernel still sends OPEN, CREATE and RELEASE for regular files.
    open_requests: OpenRequests,
    stats: Arc<FuseStats>,
    keep_awake: Arc<KeepAwake>,
    writeback_cache: bool,
    io_uring: bool,
    /// Tells the kernel a mode it cached is stale (set once the session exists).
    mode_notifier: Arc<OnceLock<fuser::Notifier>>,
    /// The thread that answers fsyncs that come while a sync runs (`sync_for`).
    sync_waiters: OnceLock<Option<SyncWaiters>>,
}

/// `fuse_setxattr_in.setxattr_flags`: the caller is outside the inode's group without
/// CAP_FSETID, so an access ACL must clear set-gid (fuse_kernel.h).
const FUSE_SETXATTR_ACL_KILL_SGID: u32 = 1;

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
    }
}

fn set_time(time: TimeOrNow) -> SetTime {
    match time {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(at) => SetTime::At(kernel_timestamp(at)),
    }
}

/// fuser 0.18 turns a kernel time (secs < 0, nsecs) into `EPOCH - (|secs| + nsecs)` instead of
/// `EPOCH - |secs| + nsecs`; undo that for times before 1970.
fn kernel_timestamp(at: SystemTime) -> Timestamp {
    match UNIX_EPOCH.duration_since(at) {
        Ok(before) if before.subsec_nanos() != 0 => Timestamp {
            secs: -(before.as_secs() as i64),
            nanos: before.subsec_nanos(),
        },
        _ => Timestamp::from_system_time(at),
    }
}

/// Largest write the kernel sends in one request.
const MAX_WRITE_BYTES: u32 = 1 << 20;

impl ShoalFs {
    pub fn new(engine: Arc<Engine>, capacity_path: Option<PathBuf>, stats: Arc<FuseStats>) -> Self {
        let lookups = stats.lookups.clone();
        engine.set_reference_probe(Box::new(move |ino| lookups.is_referenced(ino)));
        Self {
            engine,
            capacity_path,
            lookups: stats.lookups.clone(),
            dir_offsets: DirOffsets::default(),
            no_opendir: false,
            open_requests: OpenRequests::default(),
            stats,
            keep_awake: Arc::default(),
            writeback_cache: true,
            io_uring: true,
            mode_notifier: Arc::default(),
            sync_waiters: OnceLock::new(),
        }
    }

    /// Where `mount` puts the session's notifier, for `forget_cached_mode`.
    pub fn mode_notifier(&self) -> &Arc<OnceLock<fuser::Notifier>> {
        &self.mode_notifier
    }

    /// A write cleared set-id bits: the kernel's cached mode is stale (a write's reply
    /// carries no attributes), and `ls -l` would show the bits until the cache expires.
    /// Only the attributes are dropped (offset -1), which takes no inode lock, so this is
    /// safe while the kernel holds the file's lock for the write being answered.
    fn forget_cached_mode(&self, ino: u64) {
        if let Some(notifier) = self.mode_notifier.get() {
            if let Err(error) = notifier.inval_inode(INodeNo(ino), -1, 0) {
                tracing::debug!(ino, "dropping the kernel's cached mode: {error}");
            }
        }
    }

    /// Whether to offer FUSE over io_uring at init (used when the kernel offers it too).
    pub fn with_io_uring(mut self, enabled: bool) -> Self {
        self.io_uring = enabled;
        self
    }

    /// Whether to ask the kernel for its writeback cache at init.
    pub fn with_writeback_cache(mut self, enabled: bool) -> Self {
        self.writeback_cache = enabled;
        self
    }

    /// The spinners that keep CPUs awake while requests flow (started by `mount`).
    pub fn keep_awake(&self) -> &Arc<KeepAwake> {
        &self.keep_awake
    }

    /// The start of every request: wakes the spinners, starts the latency timer.
    #[inline]
    fn begin(&self, op: FuseOp) -> RequestTimer<'_> {
        self.keep_awake.notice_request();
        // A write the fast path answered before applying it is applied before this
        // request reads or changes anything (`replied_writes`).
        self.engine.replied_writes().wait_applied();
        self.stats.time(op)
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Inodes the kernel holds references to (daemon memory follows this).
    pub fn referenced_inodes(&self) -> u64 {
        self.lookups.referenced_inodes()
    }

    /// Replies with an entry and counts the kernel's new reference to it, reached as
    /// `name` in `parent`.
    fn reply_entry(&self, reply: ReplyEntry, parent: u64, name: &[u8], result: FsResult<Inode>) {
        match result {
            Ok(inode) => {
                self.lookups
                    .add(inode.ino, parent, name, is_directory(&inode));
                reply.entry(&ENTRY_TTL, &file_attr(&inode), GENERATION);
            }
            Err(error) => reply.error(errno(&error)),
        }
    }

    /// An fsync: waits for a journal sync (its own or one it shares). No busy-waiter
    /// polls meanwhile (`fuser::BlockedWait`): the answer comes when the sync ends.
    fn sync_waiting(&self) -> FsResult<()> {
        let _blocked = fuser::BlockedWait::begin();
        self.engine.sync()
    }

    /// fsync and fsyncdir: everything completed so far made durable (group commit). One
    /// that comes while a sync runs waits on the syncing thread (`sync_waiters`) while this
    /// one goes back to serving requests; otherwise it syncs here.
    fn sync_for(&self, op: FuseOp, reply: ReplyEmpty) {
        self.keep_awake.notice_request();
        // What the fast path answered before applying it is in this sync too.
        self.engine.replied_writes().wait_applied();
        self.engine.stats().count(shoal_engine::stats::Op::Fsync);
        let (reply, lead) = match self.sync_waiters() {
            None => (reply, None),
            Some(waiters) => match waiters.take(reply, op) {
                Fsync::Queued => return,
                Fsync::InPlace { reply, lead } => (reply, lead),
            },
        };
        let _timer = self.stats.time(op);
        let synced = self.sync_waiting();
        drop(lead);
        Self::reply_empty(reply, synced);
    }

    /// The syncing thread, started at the first fsync; none if it could not start.
    fn sync_waiters(&self) -> Option<&SyncWaiters> {
        self.sync_waiters
            .get_or_init(|| {
                SyncWaiters::start(self.engine.clone(), self.stats.clone())
                    .inspect_err(|error| {
                        tracing::warn!("cannot start the fsync thread: {error}; syncing in place");
                    })
                    .ok()
            })
            .as_ref()
    }

    fn reply_empty(reply: ReplyEmpty, result: FsResult<()>) {
        match result {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(errno(&error)),
        }
    }

    /// Where a listing of `dir` continues after `offset` (see `dir_offsets`).
    fn resume_after(&self, dir: u64, offset: u64) -> FsResult<Option<Vec<u8>>> {
        let resume = self.dir_offsets.resume(dir, offset, |wanted| {
            self.find_name_with_offset(dir, wanted)
        })?;
        Ok(match resume {
            Resume::Start => None,
            Resume::After(name) => Some(name),
        })
    }

    /// The slow path of a resume: a live name in `dir` whose offset is `wanted`.
    fn find_name_with_offset(&self, dir: u64, wanted: u64) -> FsResult<Option<Vec<u8>>> {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = self
                .engine
                .readdir(dir, after.as_deref(), READDIR_PAGE_ENTRIES)?;
            let Some(last) = page.last() else {
                return Ok(None);
            };
            if let Some(entry) = page.iter().find(|entry| offset_of(&entry.name) == wanted) {
                return Ok(Some(entry.name.clone()));
            }
            after = Some(last.name.clone());
        }
    }

    /// Feeds "." "..", then entries after `offset`, to `add` until it reports a full buffer.
    /// `add` gets (offset, name, entry or None for the dots) and returns true when full.
    fn list_dir<T>(
        &self,
        dir: u64,
        offset: u64,
        fetch: impl Fn(&Engine, Option<&[u8]>) -> FsResult<Vec<T>>,
        name_of: impl Fn(&T) -> &[u8],
        mut add: impl FnMut(u64, &[u8], Option<&T>) -> bool,
    ) -> FsResult<()> {
        if offset < 1 && add(1, b".", None) {
            return Ok(());
        }
        if offset < DOTDOT_OFFSET && add(DOTDOT_OFFSET, b"..", None) {
            return Ok(());
        }
        let mut after = self.resume_after(dir, offset)?;
        'pages: loop {
            let page = fetch(&self.engine, after.as_deref())?;
            if page.is_empty() {
                break;
            }
            for (added, item) in page.iter().enumerate() {
                let name = name_of(item);
                if add(offset_of(name), name, Some(item)) {
                    self.dir_offsets
                        .remember(dir, page[..added].iter().map(&name_of));
                    break 'pages;
                }
            }
            self.dir_offsets.remember(dir, page.iter().map(&name_of));
            after = page.last().map(|item| name_of(item).to_vec());
        }
        Ok(())
    }

    /// Nothing changes a file behind the kernel's back, so its page cache is kept. Files
    /// whose owners have byte limits are written through (direct I/O): the writeback cache
    /// would report EDQUOT long after the `write` that caused it, or lose it.
    fn file_open_flags(&self, ino: u64) -> FopenFlags {
        match self.engine.bytes_limited(ino) {
            Ok(true) => FopenFlags::FOPEN_DIRECT_IO,
            Ok(false) => FopenFlags::FOPEN_KEEP_CACHE,
            Err(error) => {
                tracing::warn!("quota lookup for inode {ino} at open: {error}");
                FopenFlags::FOPEN_DIRECT_IO
            }
        }
    }

    /// Inside a directory tagged with a limited project, `df` shows the project's limits
    /// and usage (as XFS does), so a project behaves like a filesystem of its own.
    fn statfs_project(&self, ino: u64) -> FsResult<Option<(u64, u64, u64, u64)>> {
        let Some(project) = self.engine.project_quota(ino)? else {
            return Ok(None);
        };
        let (fs_blocks, fs_free_blocks, fs_files, fs_free_files) = self.statfs_numbers()?;
        let limits = project.limits;
        let block_limit = first_nonzero(limits.bytes_hard, limits.bytes_soft)
            .map(|bytes| bytes.div_ceil(u64::from(BLOCK_BYTES)));
        let used_blocks = project.usage.bytes.div_ceil(u64::from(BLOCK_BYTES));
        let (blocks, free_blocks) = match block_limit {
            Some(limit) => (limit, limit.saturating_sub(used_blocks).min(fs_free_blocks)),
            None => (fs_blocks, fs_free_blocks),
        };
        let (files, free_files) = match first_nonzero(limits.inodes_hard, limits.inodes_soft) {
            Some(limit) => (
                limit,
                limit
                    .saturating_sub(project.usage.inodes)
                    .min(fs_free_files),
            ),
            None => (fs_files, fs_free_files),
        };
        Ok(Some((blocks, free_blocks, files, free_files)))
    }

    fn statfs_numbers(&self) -> FsResult<(u64, u64, u64, u64)> {
        let stats = self.engine.fs_stats()?;
        let (total_bytes, free_bytes) = match &self.capacity_path {
            // Shoal's own bytes as used (not the whole device's), the reserve as neither
            // used nor available.
            Some(path) => {
                let free_bytes = disk_capacity(path).1.saturating_sub(stats.reserved_bytes);
                (stats.store_disk_bytes + free_bytes, free_bytes)
            }
            None => memory_capacity(),
        };
        let blocks = total_bytes / u64::from(BLOCK_BYTES);
        let free_blocks = free_bytes / u64::from(BLOCK_BYTES);
        // About one inode per 512 bytes of free space: an empty file costs well under that.
        let free_inodes = free_bytes / 512;
        Ok((
            blocks,
            free_blocks,
            stats.used.inodes + free_inodes,
            free_inodes,
        ))
    }
}

impl Drop for ShoalFs {
    fn drop(&mut self) {
        self.keep_awake.stop();
    }
}

fn is_directory(inode: &Inode) -> bool {
    inode.kind == FileKind::Directory
}

fn first_nonzero(a: u64, b: u64) -> Option<u64> {
    [a, b].into_iter().find(|&limit| limit > 0)
}

fn disk_capacity(path: &Path) -> (u64, u64) {
    shoal_sys::statvfs::device_space(path)
        .map_or((0, 0), |space| (space.total_bytes, space.available_bytes))
}

fn memory_capacity() -> (u64, u64) {
    shoal_sys::process::memory().map_or((0, 0), |memory| (memory.total_bytes, memory.free_bytes))
}

impl fuser::Filesystem for ShoalFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let wanted = [
            InitFlags::FUSE_WRITEBACK_CACHE,
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_BIG_WRITES,
            InitFlags::FUSE_ASYNC_READ,
            InitFlags::FUSE_OVER_IO_URING,
            // We clear setuid/setgid and capabilities on write, truncate and chown as the
            // request flags say; the kernel then skips a GETATTR before every chown and
            // sets SB_NOSEC, so it asks for `security.capability` once per inode instead
            // of on every write.
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
            // setxattr carries FUSE_SETXATTR_ACL_KILL_SGID: an ACL set by a user outside
            // the file's group clears set-gid, as chmod by that user does.
            InitFlags::FUSE_SETXATTR_EXT,
            // File handles: lookups of "." and ".." by inode (see `export`).
            InitFlags::FUSE_EXPORT_SUPPORT,
            // POSIX ACLs enforced by the kernel, stored by the engine; modes arrive
            // without the umask, which the engine applies unless a default ACL rules.
            InitFlags::FUSE_POSIX_ACL,
            InitFlags::FUSE_DONT_MASK,
        ];
        self.no_opendir = config
            .capabilities()
            .contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT);
        self.open_requests = OpenRequests::new(
            config
                .capabilities()
                .contains(InitFlags::FUSE_NO_OPEN_SUPPORT),
        );
        if self.open_requests.atomic_truncate()
            && config
                .add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC)
                .is_err()
        {
            tracing::info!("kernel lacks FUSE_ATOMIC_O_TRUNC");
        }
        for flag in wanted {
            if flag == InitFlags::FUSE_WRITEBACK_CACHE && !self.writeback_cache {
                continue;
            }
            if flag == InitFlags::FUSE_OVER_IO_URING && !self.io_uring {
                continue;
            }
            if config.add_capabilities(flag).is_err() {
                tracing::info!("kernel lacks {flag:?}");
            }
        }
        let _ = config.set_max_background(64);
        // Requests are at most 1 MiB anyway (the kernel's page limit per request); a smaller
        // max_write keeps each io_uring entry's payload buffer at 1 MiB instead of 16.
        let _ = config.set_max_write(MAX_WRITE_BYTES);
        Ok(())
    }

    fn destroy(&mut self) {
        // Queued fsyncs are answered first (a last sync), then the unmount's own.
        if let Some(Some(mut waiters)) = self.sync_waiters.take() {
            waiters.stop();
        }
        if let Err(error) = self.engine.sync() {
            tracing::error!("sync at unmount failed: {error}");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _timer = self.begin(FuseOp::Lookup);
        if let Some(dots) = self.lookup_dots(parent.0, name.as_bytes()) {
            return self.reply_dots(reply, dots);
        }
        // The kernel sends LOOKUP only for directories it holds.
        match self.engine.lookup_child(parent.0, name.as_bytes()) {
            Ok(inode) => {
                self.lookups
                    .add(inode.ino, parent.0, name.as_bytes(), is_directory(&inode));
                reply.entry(&ENTRY_TTL, &file_attr(&inode), GENERATION);
            }
            // Inode 0 with a timeout: the kernel caches the absence.
            Err(FsError::NotFound) => {
                let mut absent = file_attr(&negative_inode());
                absent.ino = INodeNo(0);
                reply.entry(&NEGATIVE_TTL, &absent, GENERATION);
            }
            Err(error) => reply.error(errno(&error)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _timer = self.begin(FuseOp::Forget);
        if self.lookups.forget(ino.0, nlookup) {
            // A removed inode's attributes were kept for the kernel until now.
            self.engine.forgotten(ino.0);
        }
    }

    /// The kernel sends forgets in batches when several are queued (after an `rm -rf`, one
    /// per removed file): the orphans among them are deleted in one store batch.
    fn batch_forget(&self, _req: &Request, nodes: &[fuser::ForgetOne]) {
        let _timer = self.begin(FuseOp::Forget);
        let forgotten: Vec<u64> = nodes
            .iter()
            .filter(|node| self.lookups.forget(node.nodeid().0, node.nlookup()))
            .map(|node| node.nodeid().0)
            .collect();
        self.engine.forgotten_all(&forgotten);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _timer = self.begin(FuseOp::Getattr);
        match self.engine.getattr(ino.0) {
            Ok(inode) => reply.attr(&ATTR_TTL, &file_attr(&inode)),
            Err(error) => reply.error(errno(&error)),
        }
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
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        kill_suidgid: bool,
        reply: ReplyAttr,
    ) {
        let _timer = self.begin(FuseOp::Setattr);
        let change = SetAttr {
            perm: mode.map(|mode| (mode & 0o7777) as u16),
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
            ctime: ctime.map(kernel_timestamp),
            kill_suidgid,
        };
        match self.engine.setattr(ino.0, &change) {
            Ok(inode) => reply.attr(&ATTR_TTL, &file_attr(&inode)),
            Err(error) => reply.error(errno(&error)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _timer = self.begin(FuseOp::Readlink);
        match self.engine.readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(error) => reply.error(errno(&error)),
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
        let _timer = self.begin(FuseOp::Mknod);
        let Some(kind) = FileKind::from_mode(mode) else {
            return reply.error(Errno::EINVAL);
        };
        if kind == FileKind::Directory {
            return reply.error(Errno::EINVAL);
        }
        let new = NewInode {
            kind,
            perm: (mode & 0o7777) as u16,
            rdev,
            target: b"",
        };
        let result = self.engine.create_masked(
            parent.0,
            name.as_bytes(),
            &new,
            umask_bits(umask),
            caller(req),
        );
        self.reply_entry(reply, parent.0, name.as_bytes(), result);
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
        let _timer = self.begin(FuseOp::Mkdir);
        let perm = (mode & 0o7777) as u16;
        let result = self.engine.mkdir_masked(
            parent.0,
            name.as_bytes(),
            perm,
            umask_bits(umask),
            caller(req),
        );
        self.reply_entry(reply, parent.0, name.as_bytes(), result);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _timer = self.begin(FuseOp::Unlink);
        // Before the reply: a cached listing may resume after this name right after.
        self.dir_offsets.remember(parent.0, [name.as_bytes()]);
        Self::reply_empty(reply, self.engine.unlink(parent.0, name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _timer = self.begin(FuseOp::Rmdir);
        self.dir_offsets.remember(parent.0, [name.as_bytes()]);
        Self::reply_empty(reply, self.engine.rmdir(parent.0, name.as_bytes()));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let _timer = self.begin(FuseOp::Symlink);
        let result = self.engine.symlink(
            parent.0,
            link_name.as_bytes(),
            target.as_os_str().as_bytes(),
            caller(req),
        );
        self.reply_entry(reply, parent.0, link_name.as_bytes(), result);
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
        let _timer = self.begin(FuseOp::Rename);
        let mode = if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        } else if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            RenameMode::Exchange
        } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            RenameMode::NoReplace
        } else {
            RenameMode::Replace
        };
        self.dir_offsets.remember(parent.0, [name.as_bytes()]);
        let result = self.engine.rename(
            parent.0,
            name.as_bytes(),
            newparent.0,
            newname.as_bytes(),
            mode,
        );
        if let Ok(renamed) = result {
            // Evictions must ask the kernel for the names these inodes have now.
            self.lookups
                .renamed(renamed.moved, newparent.0, newname.as_bytes());
            if let Some(exchanged) = renamed.exchanged {
                self.lookups.renamed(exchanged, parent.0, name.as_bytes());
            }
        }
        Self::reply_empty(reply, result.map(|_| ()));
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let _timer = self.begin(FuseOp::Link);
        let result = self.engine.link(ino.0, newparent.0, newname.as_bytes());
        self.reply_entry(reply, newparent.0, newname.as_bytes(), result);
    }

    fn open(
        &self,
        _req: &Request,
        ino: INodeNo,
        flags: OpenFlags,
        kill_suidgid: bool,
        reply: ReplyOpen,
    ) {
        let _timer = self.begin(FuseOp::Open);
        if self.open_requests.skip(&self.engine) {
            // Sent once: the kernel asks for no other open.
            self.stats.record_opens_without_requests();
            return reply.error(Errno::ENOSYS);
        }
        // With FUSE_ATOMIC_O_TRUNC the kernel leaves O_TRUNC to us (one round trip less
        // than a separate setattr).
        if flags.0 & libc::O_TRUNC != 0 {
            let truncate = SetAttr {
                size: Some(0),
                kill_suidgid,
                ..SetAttr::default()
            };
            if let Err(error) = self.engine.setattr(ino.0, &truncate) {
                return reply.error(errno(&error));
            }
            if kill_suidgid {
                // The open's reply carries no attributes either.
                self.forget_cached_mode(ino.0);
            }
        }
        // Only regular files reach open (the kernel serves fifos and devices itself), so
        // there is nothing to look up: count the open for unlink-while-open.
        self.engine.open_file(ino.0);
        reply.opened(FileHandle(0), self.file_open_flags(ino.0));
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
        let _timer = self.begin(FuseOp::Read);
        match self.engine.read(ino.0, offset, size) {
            Ok(bytes) => reply.data(&bytes),
            Err(error) => reply.error(errno(&error)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _timer = self.begin(FuseOp::Write);
        let kill_suidgid = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        match self
            .engine
            .write_killing_privileges(ino.0, offset, data, kill_suidgid)
        {
            Ok(written) => {
                if written.mode_changed {
                    self.forget_cached_mode(ino.0);
                }
                reply.written(written.bytes)
            }
            Err(error) => {
                if matches!(error, FsError::QuotaExceeded)
                    && write_flags.contains(WriteFlags::FUSE_WRITE_CACHE)
                {
                    // Only a file opened without a request (see `open_requests`) after a
                    // byte limit was set meets its limit at writeback: the writer learns
                    // of it at close or fsync (as EIO), not at write.
                    tracing::warn!(
                        ino = ino.0,
                        "write-back refused by a byte limit set after opens went without \
                         requests; remount to have write() return EDQUOT"
                    );
                }
                reply.error(errno(&error))
            }
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let _timer = self.begin(FuseOp::Flush);
        // ENOSYS once tells the kernel never to send FLUSH again: one round trip less per
        // close(2). Dirty pages are still written back before close returns, and durability
        // comes from fsync and group commit, not from close.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _timer = self.begin(FuseOp::Release);
        Self::reply_empty(reply, self.engine.release_file(ino.0));
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync_for(FuseOp::Fsync, reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _timer = self.begin(FuseOp::Opendir);
        // Offsets stay valid across opens and changes (`dir_offsets`), so the kernel may
        // keep listings: ENOSYS makes it stop sending OPENDIR and RELEASEDIR and cache every
        // directory it reads (FOPEN_CACHE_DIR); a kernel without that support gets the
        // cache flag on each open.
        if self.no_opendir {
            return reply.error(Errno::ENOSYS);
        }
        match self.engine.getattr(ino.0) {
            Ok(inode) if inode.kind == FileKind::Directory => reply.opened(
                FileHandle(0),
                FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(error) => reply.error(errno(&error)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let _timer = self.begin(FuseOp::Readdir);
        let result = self.list_dir(
            ino.0,
            offset,
            |engine, after| engine.readdir(ino.0, after, READDIR_PAGE_ENTRIES),
            |entry: &DirEntry| entry.name.as_slice(),
            |entry_offset, name, entry| {
                let (entry_ino, kind) = match entry {
                    Some(entry) => (entry.ino, file_type(entry.kind)),
                    None => (ino.0, FileType::Directory),
                };
                reply.add(
                    INodeNo(entry_ino),
                    entry_offset,
                    kind,
                    OsStr::from_bytes(name),
                )
            },
        );
        match result {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(errno(&error)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let _timer = self.begin(FuseOp::Readdirplus);
        let dir_attr = match self.engine.getattr(ino.0) {
            Ok(inode) => file_attr(&inode),
            Err(error) => return reply.error(errno(&error)),
        };
        let lookups = &self.lookups;
        let result = self.list_dir(
            ino.0,
            offset,
            |engine, after| engine.readdir_plus(ino.0, after, READDIR_PAGE_ENTRIES),
            |(entry, _): &(DirEntry, Inode)| entry.name.as_slice(),
            |entry_offset, name, item| match item {
                // The kernel takes no reference for "." and "..".
                None => reply.add(
                    INodeNo(ino.0),
                    entry_offset,
                    OsStr::from_bytes(name),
                    &ATTR_TTL,
                    &dir_attr,
                    GENERATION,
                ),
                Some((_, inode)) => {
                    let full = reply.add(
                        INodeNo(inode.ino),
                        entry_offset,
                        OsStr::from_bytes(name),
                        &ENTRY_TTL,
                        &file_attr(inode),
                        GENERATION,
                    );
                    if !full {
                        lookups.add(inode.ino, ino.0, name, is_directory(inode));
                    }
                    full
                }
            },
        );
        match result {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(errno(&error)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let _timer = self.begin(FuseOp::Releasedir);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync_for(FuseOp::Fsyncdir, reply);
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let _timer = self.begin(FuseOp::Statfs);
        let numbers = match self.statfs_project(ino.0) {
            Ok(Some(project)) => Ok(project),
            Ok(None) => self.statfs_numbers(),
            Err(error) => Err(error),
        };
        match numbers {
            Ok((blocks, free_blocks, files, free_files)) => reply.statfs(
                blocks,
                free_blocks,
                free_blocks,
                files,
                free_files,
                BLOCK_BYTES,
                NAME_MAX_BYTES as u32,
                BLOCK_BYTES,
            ),
            Err(error) => reply.error(errno(&error)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        setxattr_flags: u32,
        reply: ReplyEmpty,
    ) {
        let _timer = self.begin(FuseOp::Setxattr);
        let mode = match flags {
            0 => XattrMode::Either,
            XATTR_CREATE => XattrMode::CreateOnly,
            XATTR_REPLACE => XattrMode::ReplaceOnly,
            _ => return reply.error(Errno::EINVAL),
        };
        let kill_sgid = setxattr_flags & FUSE_SETXATTR_ACL_KILL_SGID != 0;
        // The kernel drops its cached attributes after a setxattr: the new mode is seen.
        Self::reply_empty(
            reply,
            self.engine
                .setxattr_killing_sgid(ino.0, name.as_bytes(), value, mode, kill_sgid),
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _timer = self.begin(FuseOp::Getxattr);
        match self.engine.getxattr(ino.0, name.as_bytes()) {
            Ok(value) => reply_xattr(reply, &value, size),
            Err(error) => reply.error(errno(&error)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _timer = self.begin(FuseOp::Listxattr);
        match self.engine.listxattr(ino.0) {
            Ok(names) => {
                let mut list = Vec::new();
                for name in names {
                    list.extend_from_slice(&name);
                    list.push(0);
                }
                reply_xattr(reply, &list, size);
            }
            Err(error) => reply.error(errno(&error)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _timer = self.begin(FuseOp::Removexattr);
        Self::reply_empty(reply, self.engine.removexattr(ino.0, name.as_bytes()));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let _timer = self.begin(FuseOp::Access);
        match self.engine.getattr(ino.0) {
            Ok(inode) if may_access(&inode, req.uid(), req.gid(), mask.bits() as u32) => reply.ok(),
            Ok(_) => reply.error(Errno::EACCES),
            Err(error) => reply.error(errno(&error)),
        }
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
        let _timer = self.begin(FuseOp::Create);
        let new = NewInode {
            kind: FileKind::Regular,
            perm: (mode & 0o7777) as u16,
            rdev: 0,
            target: b"",
        };
        match self.engine.create_masked(
            parent.0,
            name.as_bytes(),
            &new,
            umask_bits(umask),
            caller(req),
        ) {
            Ok(inode) => {
                self.lookups
                    .add(inode.ino, parent.0, name.as_bytes(), is_directory(&inode));
                self.engine.open_file(inode.ino);
                reply.created(
                    &ENTRY_TTL,
                    &file_attr(&inode),
                    GENERATION,
                    FileHandle(0),
                    self.file_open_flags(inode.ino),
                );
            }
            Err(error) => reply.error(errno(&error)),
        }
    }

    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let _timer = self.begin(FuseOp::Tmpfile);
        self.create_tmpfile(req, parent.0, mode, umask_bits(umask), reply);
    }

    /// shoal has no file flags or other ioctls: ENOTTY, as for any file that does not know
    /// the command. Answered quietly, since every `isatty` check on an open file asks
    /// (Python's `open` does).
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        let _timer = self.begin(FuseOp::Ioctl);
        reply.error(Errno::ENOTTY);
    }

    /// Served inside the engine, so `cp` within the mount moves no bytes through the kernel
    /// and sends one request per file instead of a READ and a WRITE (and the source's atime
    /// invalidation that makes `cp -a` re-read its attributes).
    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let _timer = self.begin(FuseOp::CopyFileRange);
        match self
            .engine
            .copy_range(ino_in.0, offset_in, ino_out.0, offset_out, len)
        {
            // At most COPY_RANGE_MAX_BYTES, well inside the reply's u32.
            Ok(copied) => reply.written(copied as u32),
            Err(error) => reply.error(errno(&error)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _timer = self.begin(FuseOp::Fallocate);
        match self.fallocate_range(ino.0, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }
}

/// The permission bits of a umask (the engine applies it unless a default ACL rules).
fn umask_bits(umask: u32) -> u16 {
    (umask & 0o777) as u16
}

/// An attribute block for negative entries (the kernel reads only the inode number 0).
fn negative_inode() -> Inode {
    Inode {
        ino: 0,
        kind: FileKind::Regular,
        perm: 0,
        uid: 0,
        gid: 0,
        nlink: 0,
        size: 0,
        allocated_bytes: 0,
        atime: Timestamp::default(),
        mtime: Timestamp::default(),
        ctime: Timestamp::default(),
        rdev: 0,
        parent: 0,
        project: 0,
        content: shoal_engine::Content::Inline(Vec::new()),
        may_have_xattrs: false,
    }
}

fn reply_xattr(reply: ReplyXattr, value: &[u8], size: u32) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

/// access(2) by mode bits, for callers that ask (the kernel checks on its own with
/// default_permissions).
fn may_access(inode: &Inode, uid: u32, gid: u32, mask: u32) -> bool {
    let mask = mask & 0o7;
    if mask == 0 {
        return true;
    }
    let perm = u32::from(inode.perm);
    if uid == 0 {
        // Root may read and write anything, and execute what anyone may execute.
        return mask & 0o1 == 0 || perm & 0o111 != 0 || inode.kind == FileKind::Directory;
    }
    let granted = if uid == inode.uid {
        perm >> 6
    } else if gid == inode.gid {
        perm >> 3
    } else {
        perm
    } & 0o7;
    granted & mask == mask
}
