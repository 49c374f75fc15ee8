//! In-memory shapes of what the store holds: inodes, directory entries, usage counters.

use std::time::{SystemTime, UNIX_EPOCH};

pub const ROOT_INO: u64 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    Regular,
    Directory,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileKind {
    /// Whether inodes of this kind have a device number.
    pub fn is_device(self) -> bool {
        matches!(self, FileKind::CharDevice | FileKind::BlockDevice)
    }

    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Regular => 0o100000,
            FileKind::Directory => 0o040000,
            FileKind::Symlink => 0o120000,
            FileKind::Fifo => 0o010000,
            FileKind::Socket => 0o140000,
            FileKind::CharDevice => 0o020000,
            FileKind::BlockDevice => 0o060000,
        }
    }

    pub fn from_mode(mode: u32) -> Option<FileKind> {
        match mode & 0o170000 {
            0o100000 | 0 => Some(FileKind::Regular),
            0o040000 => Some(FileKind::Directory),
            0o120000 => Some(FileKind::Symlink),
            0o010000 => Some(FileKind::Fifo),
            0o140000 => Some(FileKind::Socket),
            0o020000 => Some(FileKind::CharDevice),
            0o060000 => Some(FileKind::BlockDevice),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

impl Timestamp {
    /// The time of an operation, from the clock the kernel stamps file times with
    /// (`current_time()` reads the coarse clock: the time at the last tick). With the
    /// writeback cache the kernel sets a file's mtime and ctime itself; times from a finer
    /// clock would run up to a tick ahead of the kernel's, so a change the kernel stamps
    /// after one shoal stamped could carry an earlier time.
    pub fn now() -> Self {
        match shoal_sys::clock::realtime_coarse() {
            Some((secs, nanos)) => Timestamp { secs, nanos },
            None => Self::from_system_time(SystemTime::now()),
        }
    }

    pub fn from_system_time(time: SystemTime) -> Self {
        match time.duration_since(UNIX_EPOCH) {
            Ok(since) => Timestamp {
                secs: since.as_secs() as i64,
                nanos: since.subsec_nanos(),
            },
            Err(before) => {
                let before = before.duration();
                let mut secs = -(before.as_secs() as i64);
                let mut nanos = before.subsec_nanos();
                if nanos > 0 {
                    secs -= 1;
                    nanos = 1_000_000_000 - nanos;
                }
                Timestamp { secs, nanos }
            }
        }
    }

    pub fn to_system_time(self) -> SystemTime {
        let nanos = std::time::Duration::from_nanos(u64::from(self.nanos));
        if self.secs >= 0 {
            UNIX_EPOCH + std::time::Duration::from_secs(self.secs as u64) + nanos
        } else {
            UNIX_EPOCH - std::time::Duration::from_secs(self.secs.unsigned_abs()) + nanos
        }
    }
}

/// Where a regular file's bytes are: inside the inode record, or in chunk keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// Inline file data, or a symlink's target. Empty for other kinds.
    Inline(Vec<u8>),
    Chunked,
}

/// The set-id bits and group-execute, as `Inode::perm` holds them (stat's `st_mode`).
pub(crate) const S_ISUID: u16 = 0o4000;
pub(crate) const S_ISGID: u16 = 0o2000;
pub(crate) const S_IXGRP: u16 = 0o0010;

/// One inode as stored under its `I` key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    pub ino: u64,
    pub kind: FileKind,
    /// Permission bits including setuid, setgid and sticky (`mode & 0o7777`).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    /// Bytes for files and symlinks; the number of entries for directories.
    pub size: u64,
    /// Bytes of file data actually stored (sparse holes cost nothing); drives `st_blocks`
    /// and usage counters.
    pub allocated_bytes: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub rdev: u32,
    /// For directories: the directory holding it (root: itself). For other kinds: the
    /// directory holding its one name while nlink is 1, else 0 (several names: their
    /// directories are link parent keys; none: unlinked).
    pub parent: u64,
    /// Project id, inherited from the parent directory at creation.
    pub project: u32,
    pub content: Content,
    /// Set once an xattr was stored, so deleting an inode without any skips the scan.
    pub may_have_xattrs: bool,
}

impl Inode {
    /// A new directory with no entries (the root, `lost+found`): two links, its own `.`
    /// and its parent's entry.
    pub(crate) fn empty_directory(
        ino: u64,
        parent: u64,
        perm: u16,
        uid: u32,
        gid: u32,
        now: Timestamp,
    ) -> Inode {
        Inode {
            ino,
            kind: FileKind::Directory,
            perm,
            uid,
            gid,
            nlink: 2,
            size: 0,
            allocated_bytes: 0,
            atime: now,
            mtime: now,
            ctime: now,
            rdev: 0,
            parent,
            project: 0,
            content: Content::Inline(Vec::new()),
            may_have_xattrs: false,
        }
    }

    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | u32::from(self.perm)
    }

    pub fn inline_data(&self) -> &[u8] {
        match &self.content {
            Content::Inline(bytes) => bytes,
            Content::Chunked => &[],
        }
    }

    /// 512-byte blocks, as `st_blocks` counts them.
    pub fn blocks(&self) -> u64 {
        self.allocated_bytes.div_ceil(512)
    }
}

/// A directory entry as returned by `readdir`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: FileKind,
}

/// What a directory's subtree holds (every name below it, at any depth), as CephFS's
/// `rentries`/`rfiles`/`rbytes`/`rctime`. A file with several names counts once per name,
/// as `find` counts names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeUsage {
    /// Names below the directory (`find DIR -mindepth 1 | wc -l`).
    pub entries: u64,
    /// Names of regular files below it.
    pub files: u64,
    /// Sizes (`st_size`) of the regular files below it, one per name.
    pub bytes: u64,
    /// Newest ctime of the directory itself and everything below it.
    pub rctime: Timestamp,
}

/// Inodes and bytes charged to one user, group or project, or to the whole filesystem.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub inodes: u64,
    pub bytes: u64,
}

/// What one usage counter key holds: the inodes and bytes of one (uid, gid, project)
/// combination. Each operation then changes exactly one counter key (two for chown), and the
/// per-user, per-group, per-project and total figures are sums over these keys, of which
/// there are only as many as owner combinations in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UsageKey {
    pub uid: u32,
    pub gid: u32,
    pub project: u32,
}

impl UsageKey {
    pub fn of(inode: &Inode) -> Self {
        UsageKey {
            uid: inode.uid,
            gid: inode.gid,
            project: inode.project,
        }
    }

    /// Whether this combination's usage counts towards `owner`.
    pub fn counts_for(&self, owner: UsageOwner) -> bool {
        match owner {
            UsageOwner::Total => true,
            UsageOwner::User(uid) => self.uid == uid,
            UsageOwner::Group(gid) => self.gid == gid,
            UsageOwner::Project(project) => self.project == project,
        }
    }
}

/// Whose usage is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UsageOwner {
    Total,
    User(u32),
    Group(u32),
    Project(u32),
}
