//! Requests and replies. Each request names what it acts on by a directory inode and a
//! path relative to it ([`At`], walked by the daemon as the kernel would), or by a handle
//! the daemon gave out at open.

use std::sync::Arc;

use crate::codec::{Decoder, Encoder, WireError};
use crate::{MAX_IO_BYTES, MAX_READ_AHEAD_BYTES, PATH_MAX_BYTES, WITNESS_MAX};

/// Longest xattr name or value carried (the kernel's XATTR_SIZE_MAX is 64 KiB).
const XATTR_MAX_BYTES: usize = 64 * 1024;
/// Most entries a decoded `Entries` reply may hold (bounds the allocation).
const ENTRIES_MAX: u32 = 4096;
/// Most directories a decoded `OpenedDir` reply may carry below its own (bounds the
/// allocation; the daemon sends fewer: `Request::OpenDir::below` and the message size).
pub const BELOW_MAX: u32 = 1024;

/// A path to walk: from directory inode `base` (the mount's root for an absolute path),
/// following a final symlink or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct At {
    pub base: u64,
    pub path: Vec<u8>,
    pub follow: bool,
}

/// Whether an `opendir` is a step of a walk, and how the walk names the directories it opens
/// (`Request::OpenDir::walk`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Walk {
    #[default]
    No,
    /// `openat(fd, name)` from a descriptor of the directory it lists (`fts`).
    ByDescriptor,
    /// By paths from where it started (`git status`: `opendir("a/b/")`).
    ByPath,
}

impl Walk {
    fn tag(self) -> u8 {
        match self {
            Walk::No => 0,
            Walk::ByDescriptor => 1,
            Walk::ByPath => 2,
        }
    }

    fn decode(d: &mut Decoder) -> Result<Walk, WireError> {
        match d.u8()? {
            0 => Ok(Walk::No),
            1 => Ok(Walk::ByDescriptor),
            2 => Ok(Walk::ByPath),
            tag => Err(WireError::UnknownTag(u32::from(tag))),
        }
    }
}

/// A time in a setattr: leave it, set it to the daemon's now, or to a given instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeWire {
    Omit,
    Now,
    At { secs: i64, nanos: u32 },
}

/// Attribute changes (chmod, chown, truncate, utimensat); `None`/`Omit` leaves a field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetAttrWire {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: TimeWire,
    pub mtime: TimeWire,
}

/// What a setattr or an xattr call acts on: a path, or an open handle (the f- variants).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Path(At),
    Handle(u64),
}

/// Where a directory listing resumes: after this name (`None`: from the start).
pub type Cookie = Option<Vec<u8>>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Hello {
        version: u32,
    },
    Stat {
        at: At,
    },
    Access {
        at: At,
        mask: u32,
    },
    Open {
        at: At,
        flags: i32,
        mode: u32,
        umask: u32,
        /// Send the file's bytes with the answer if it is a regular file opened for
        /// reading no longer than this (`Opened::data`); 0: not wanted.
        read_ahead: u32,
    },
    Close {
        handle: u64,
    },
    Read {
        handle: u64,
        offset: u64,
        len: u32,
    },
    Write {
        handle: u64,
        offset: u64,
        append: bool,
        data: Vec<u8>,
        /// Answer with the file's attributes after the write (`Reply::WrittenAt`): the
        /// caller asks for them with an `fstat` next (git records each file it writes).
        with_attr: bool,
    },
    Fstat {
        handle: u64,
    },
    Fsync {
        handle: u64,
    },
    /// open(2) with O_DIRECTORY (not O_CREAT), answered with the directory's first page
    /// of entries too (`Reply::OpenedDir`): `opendir` then the first `getdents` in one
    /// round trip.
    OpenDir {
        at: At,
        flags: i32,
        max: u32,
        with_attrs: bool,
        /// How many directories below this one (in the order a walk visits them) the daemon
        /// may open and list with it (`Reply::OpenedDir::below`): a program walking a tree
        /// then opens them without a round trip (a walk's step: they stay open for the
        /// caller), or stats what is in them (no walk: they are listed and closed, their
        /// handles 0).
        below: u32,
        /// Whether the open is a step of a walk through a tree that nothing changes, and
        /// how the walk names what it opens: the daemon may answer the walk's next step
        /// ahead, while the program works on this one.
        walk: Walk,
    },
    ReadDir {
        handle: u64,
        after: Cookie,
        max: u32,
        /// Whether the entries should carry their attributes (see `DirEntryWire::attr`).
        with_attrs: bool,
    },
    Mkdir {
        at: At,
        mode: u32,
        umask: u32,
    },
    Unlink {
        at: At,
        dir: bool,
    },
    Rename {
        from: At,
        to: At,
        flags: u32,
    },
    Link {
        from: At,
        to: At,
    },
    Symlink {
        target: Vec<u8>,
        at: At,
    },
    Readlink {
        at: At,
    },
    SetAttr {
        target: Target,
        change: SetAttrWire,
    },
    GetXattr {
        target: Target,
        name: Vec<u8>,
    },
    ListXattr {
        target: Target,
    },
    RemoveXattr {
        target: Target,
        name: Vec<u8>,
    },
    Sync,
    /// The directory `at` names, searchable by the caller (chdir).
    Resolve {
        at: At,
    },
    /// copy_file_range between two open files, inside the daemon.
    CopyRange {
        from: u64,
        from_offset: u64,
        to: u64,
        to_offset: u64,
        len: u64,
    },
    /// A `system.posix_acl_access` that only restates permission bits (owner, group,
    /// other): as the kernel does, the mode takes them and no ACL is kept.
    SetAccessAclMode {
        target: Target,
        perm: u32,
    },
}

/// File attributes as `stat` shows them (the mount's st_dev is the client's to add).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    /// Type and permission bits, as st_mode.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub size: u64,
    pub blocks: u64,
    pub blksize: u32,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
}

/// A listed entry's name: most names fit inline, so a page of a walk (thousands of
/// entries) makes no allocation per name on either side (`find` of the bench tree made
/// 32k on each).
pub type EntryName = smallvec::SmallVec<[u8; 32]>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntryWire {
    pub ino: u64,
    /// d_type (DT_REG, DT_DIR, ...).
    pub kind: u8,
    pub name: EntryName,
    /// The entry's attributes, when the caller may look entries up in the directory
    /// (search permission): what its next `stat` of the entry would return.
    pub attr: Option<Attr>,
    /// With `attr`: the version of the entry's slot, as good as one read before `attr`
    /// (see the daemon's `read_dir_within`): `attr` holds while it stays, whatever else
    /// changes on the mount.
    pub version: Option<u32>,
    /// With `attr` and `version`, for a symlink: its target, what `readlink` of the entry
    /// would return (a symlink's target never changes, so it holds as `attr` does).
    pub target: Option<Vec<u8>>,
    /// With `attr` and `version`: the inode holds no xattr (ACLs included), while `attr`
    /// holds (an xattr's change moves the inode's version).
    pub no_xattrs: bool,
}

impl DirEntryWire {
    /// The entry `.` or `..` (`name`) of a listing: inode `ino`, a directory, nothing else.
    pub fn dot(name: &[u8], ino: u64) -> DirEntryWire {
        debug_assert!(matches!(name, b"." | b".."));
        DirEntryWire {
            ino,
            kind: libc::DT_DIR,
            name: EntryName::from_slice(name),
            attr: None,
            version: None,
            target: None,
            no_xattrs: false,
        }
    }

    /// Bytes this entry takes in an encoded `Entries` reply.
    pub fn encoded_len(&self) -> usize {
        let attr = match (self.attr, self.version, &self.target) {
            (None, _, _) => 0,
            (Some(_), None, _) => ATTR_BYTES,
            (Some(_), Some(_), None) => ATTR_BYTES + 4 + 1,
            (Some(_), Some(_), Some(target)) => ATTR_BYTES + 4 + 1 + 4 + target.len(),
        };
        ENTRY_FIXED_BYTES + self.name.len() + attr
    }
}

/// An encoded `Attr`: ino, mode, nlink, uid, gid, rdev, size, blocks, blksize, 3 times.
const ATTR_BYTES: usize = 8 + 4 * 5 + 8 * 2 + 4 + 3 * (8 + 4);
/// An encoded entry without its name and attributes: ino, kind, name length, attr tag.
const ENTRY_FIXED_BYTES: usize = 8 + 1 + 4 + 1;
/// An `Entries` reply without its entries: status, tag, count, changes, the directory's
/// version (tag and value), done.
pub const ENTRIES_HEADER_BYTES: usize = 1 + 1 + 4 + 8 + 5 + 1;
/// What an `OpenedDir` reply carries beyond an `Entries` one at most: handle, attributes,
/// created, version (tag and value), no_xattrs, the walk's witness (tag, count, entries),
/// the count of directories below (each `DirBelow::encoded_len` more).
pub const OPENED_DIR_EXTRA_BYTES: usize = 8 + ATTR_BYTES + 1 + 5 + 1 + 1 + 4 + WITNESS_MAX * 12 + 4;

/// A directory opened and listed ahead (`Reply::OpenedDir::below`): entry `name` of
/// directory `parent`, its open (a handle the caller now holds) and its first page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirBelow {
    pub parent: u64,
    pub name: Vec<u8>,
    pub opened: Opened,
    pub entries: Vec<DirEntryWire>,
    pub done: bool,
    pub dir_version: Option<u32>,
    /// The daemon's: the page (`entries`, `done`, `dir_version`) encoded already, as
    /// `encode_page` makes it, kept from an earlier reply (`entries` is then empty); it is
    /// sent with the reply's change count in it. Never on the wire as such: a decoded
    /// `DirBelow` has its entries.
    pub encoded: Option<Arc<[u8]>>,
}

impl DirBelow {
    /// Bytes it takes in an encoded `OpenedDir` reply.
    pub fn encoded_len(&self) -> usize {
        let page = match &self.encoded {
            Some(page) => page.len() - PAGE_FIXED_BYTES,
            None => self.entries.iter().map(DirEntryWire::encoded_len).sum(),
        };
        DIR_BELOW_EXTRA_BYTES + self.name.len() + page
    }
}

/// What an encoded page takes besides its entries: count, change count, version (tag and
/// value), done.
const PAGE_FIXED_BYTES: usize = 4 + 8 + 5 + 1;

/// A page of a directory's entries as a reply carries it (for `DirBelow::encoded`).
pub fn encode_page(
    entries: &[DirEntryWire],
    done: bool,
    changes: u64,
    dir_version: Option<u32>,
) -> Arc<[u8]> {
    let mut out = Vec::new();
    encode_entries(
        &mut Encoder::new(&mut out),
        entries,
        done,
        changes,
        dir_version,
    );
    Arc::from(out)
}

/// An encoded `DirBelow` without its name and entries: parent, name length, the open
/// (handle, attributes, created, version, no_xattrs), then its page's count, change
/// count, version and done.
pub const DIR_BELOW_EXTRA_BYTES: usize = 8 + 4 + 8 + ATTR_BYTES + 1 + 5 + 1 + 4 + 8 + 5 + 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub version: u32,
    pub root: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened {
    pub handle: u64,
    pub attr: Attr,
    pub created: bool,
    /// The version of the inode's slot read before `attr` (`state::MountState::version`):
    /// `attr` holds while it stays. `None` where the daemon keeps no versions.
    pub version: Option<u32>,
    /// The inode has no extended attributes (as of `version`): its listxattr is empty.
    pub no_xattrs: bool,
}

/// How a request ended: done, failed with an errno as the kernel would give it, or not
/// attempted because the kernel must decide (nothing was changed: the client asks the
/// kernel mount instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    Errno(i32),
    Fallback,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Empty,
    Hello(Hello),
    Attr(Attr),
    Opened(Opened),
    /// `Opened`, and the whole file (`Request::Open::read_ahead`), read after its
    /// `version` was: the bytes hold while that version stays.
    OpenedWithData {
        opened: Opened,
        data: Vec<u8>,
    },
    Data(Vec<u8>),
    Written {
        written: u64,
        end: u64,
    },
    /// `Written`, and the file's attributes read after the inode's `version` that
    /// followed the write (as `Reply::Changed` carries them).
    WrittenAt {
        written: u64,
        end: u64,
        attr: Attr,
        version: Option<u32>,
        no_xattrs: bool,
    },
    Entries {
        entries: Vec<DirEntryWire>,
        done: bool,
        /// The mount's change count read before the listing (`state::MountState`): the
        /// attributes hold while it stays the same.
        changes: u64,
        /// The directory's version, as good as one read before the listing: its names hold
        /// while it stays (each entry's attributes while the entry's `version` stays too).
        dir_version: Option<u32>,
    },
    /// A directory opened by `Request::OpenDir`, with its first page of entries, as an
    /// `Entries` reply would give it (see there), and the witness of the walk that found
    /// it (see `Reply::Exists`): the same path leads to it while that holds.
    OpenedDir {
        opened: Opened,
        entries: Vec<DirEntryWire>,
        done: bool,
        changes: u64,
        dir_version: Option<u32>,
        witness: Option<Vec<(u64, u32)>>,
        /// Directories below it, opened read-only for the caller and listed, breadth first:
        /// each is what an `OpenDir` of its name in its parent would answer while the
        /// mount's change count stays `changes` (the daemon stops at a change).
        below: Vec<DirBelow>,
    },
    /// A fast descriptor's attributes, with the version of its inode's slot read before
    /// them (see `Opened::version`).
    AttrAt {
        attr: Attr,
        version: Option<u32>,
        no_xattrs: bool,
    },
    /// What a call that must not find its last component found there (mkdir: EEXIST, as
    /// the client returns it), with the walk's witness: each inode the walk read (the
    /// starting directory, each directory it went through, each symlink it followed) and
    /// the version of its slot read before it. While every version holds, the path leads to
    /// the same entry for the same caller, and the client answers the same call itself.
    Exists {
        witness: Vec<(u64, u32)>,
    },
    /// A setattr's result. `kernel_holds`: the kernel mount has the inode cached; its
    /// owner and mode checks at setattr do not revalidate, so the client refreshes them
    /// (a stat through the kernel) before it returns.
    Changed {
        attr: Attr,
        kernel_holds: bool,
        /// As `Opened::version`: the attributes were read after it, and hold while it stays.
        version: Option<u32>,
        no_xattrs: bool,
    },
}

impl At {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.base).bytes(&self.path).bool(self.follow);
    }

    fn decode(d: &mut Decoder) -> Result<At, WireError> {
        Ok(At {
            base: d.u64()?,
            path: d.bytes(PATH_MAX_BYTES)?.to_vec(),
            follow: d.bool()?,
        })
    }
}

impl Opened {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.handle);
        self.attr.encode(e);
        e.bool(self.created);
        encode_option_u32(e, self.version);
        e.bool(self.no_xattrs);
    }

    fn decode(d: &mut Decoder) -> Result<Opened, WireError> {
        Ok(Opened {
            handle: d.u64()?,
            attr: Attr::decode(d)?,
            created: d.bool()?,
            version: decode_option_u32(d)?,
            no_xattrs: d.bool()?,
        })
    }
}

impl TimeWire {
    fn encode(&self, e: &mut Encoder) {
        match *self {
            TimeWire::Omit => e.u8(0),
            TimeWire::Now => e.u8(1),
            TimeWire::At { secs, nanos } => e.u8(2).i64(secs).u32(nanos),
        };
    }

    fn decode(d: &mut Decoder) -> Result<TimeWire, WireError> {
        match d.u8()? {
            0 => Ok(TimeWire::Omit),
            1 => Ok(TimeWire::Now),
            2 => Ok(TimeWire::At {
                secs: d.i64()?,
                nanos: d.u32()?,
            }),
            tag => Err(WireError::UnknownTag(u32::from(tag))),
        }
    }
}

fn encode_option_u32(e: &mut Encoder, value: Option<u32>) {
    e.bool(value.is_some()).u32(value.unwrap_or(0));
}

fn decode_option_u32(d: &mut Decoder) -> Result<Option<u32>, WireError> {
    let present = d.bool()?;
    let value = d.u32()?;
    Ok(present.then_some(value))
}

impl SetAttrWire {
    fn encode(&self, e: &mut Encoder) {
        encode_option_u32(e, self.mode);
        encode_option_u32(e, self.uid);
        encode_option_u32(e, self.gid);
        e.bool(self.size.is_some()).u64(self.size.unwrap_or(0));
        self.atime.encode(e);
        self.mtime.encode(e);
    }

    fn decode(d: &mut Decoder) -> Result<SetAttrWire, WireError> {
        let mode = decode_option_u32(d)?;
        let uid = decode_option_u32(d)?;
        let gid = decode_option_u32(d)?;
        let has_size = d.bool()?;
        let size = d.u64()?;
        Ok(SetAttrWire {
            mode,
            uid,
            gid,
            size: has_size.then_some(size),
            atime: TimeWire::decode(d)?,
            mtime: TimeWire::decode(d)?,
        })
    }
}

impl Target {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Target::Path(at) => {
                e.u8(0);
                at.encode(e);
            }
            Target::Handle(handle) => {
                e.u8(1).u64(*handle);
            }
        }
    }

    fn decode(d: &mut Decoder) -> Result<Target, WireError> {
        match d.u8()? {
            0 => Ok(Target::Path(At::decode(d)?)),
            1 => Ok(Target::Handle(d.u64()?)),
            tag => Err(WireError::UnknownTag(u32::from(tag))),
        }
    }
}

impl Request {
    /// Whether its answer waits for the journal to reach the disk (milliseconds, not
    /// microseconds: its caller sleeps rather than keep a CPU busy waiting).
    pub fn waits_on_journal(&self) -> bool {
        matches!(self, Request::Fsync { .. } | Request::Sync)
    }

    fn tag(&self) -> u32 {
        match self {
            Request::Hello { .. } => 1,
            Request::Stat { .. } => 2,
            Request::Access { .. } => 3,
            Request::Open { .. } => 4,
            Request::Close { .. } => 5,
            Request::Read { .. } => 6,
            Request::Write { .. } => 7,
            Request::Fstat { .. } => 8,
            Request::Fsync { .. } => 9,
            Request::ReadDir { .. } => 10,
            Request::Mkdir { .. } => 11,
            Request::Unlink { .. } => 12,
            Request::Rename { .. } => 13,
            Request::Link { .. } => 14,
            Request::Symlink { .. } => 15,
            Request::Readlink { .. } => 16,
            Request::SetAttr { .. } => 17,
            Request::GetXattr { .. } => 18,
            Request::ListXattr { .. } => 19,
            Request::Sync => 20,
            Request::Resolve { .. } => 21,
            Request::CopyRange { .. } => 22,
            Request::SetAccessAclMode { .. } => 23,
            Request::RemoveXattr { .. } => 24,
            Request::OpenDir { .. } => 25,
        }
    }

    /// Writes the message into `out` (cleared first).
    #[expect(
        clippy::too_many_lines,
        reason = "one arm per request kind: the wire format of every request in one place, beside `decode`"
    )]
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut e = Encoder::new(out);
        e.u32(self.tag());
        match self {
            Request::Hello { version } => {
                e.u32(*version);
            }
            Request::Stat { at } | Request::Readlink { at } | Request::Resolve { at } => {
                at.encode(&mut e)
            }
            Request::Access { at, mask } => {
                at.encode(&mut e);
                e.u32(*mask);
            }
            Request::Open {
                at,
                flags,
                mode,
                umask,
                read_ahead,
            } => {
                at.encode(&mut e);
                e.i32(*flags).u32(*mode).u32(*umask).u32(*read_ahead);
            }
            Request::OpenDir {
                at,
                flags,
                max,
                with_attrs,
                below,
                walk,
            } => {
                at.encode(&mut e);
                e.i32(*flags)
                    .u32(*max)
                    .bool(*with_attrs)
                    .u32(*below)
                    .u8(walk.tag());
            }
            Request::Close { handle } | Request::Fstat { handle } | Request::Fsync { handle } => {
                e.u64(*handle);
            }
            Request::Read {
                handle,
                offset,
                len,
            } => {
                e.u64(*handle).u64(*offset).u32(*len);
            }
            Request::Write {
                handle,
                offset,
                append,
                data,
                with_attr,
            } => {
                e.u64(*handle)
                    .u64(*offset)
                    .bool(*append)
                    .bytes(data)
                    .bool(*with_attr);
            }
            Request::ReadDir {
                handle,
                after,
                max,
                with_attrs,
            } => {
                e.u64(*handle).bool(after.is_some());
                e.bytes(after.as_deref().unwrap_or_default()).u32(*max);
                e.bool(*with_attrs);
            }
            Request::Mkdir { at, mode, umask } => {
                at.encode(&mut e);
                e.u32(*mode).u32(*umask);
            }
            Request::Unlink { at, dir } => {
                at.encode(&mut e);
                e.bool(*dir);
            }
            Request::Rename { from, to, flags } => {
                from.encode(&mut e);
                to.encode(&mut e);
                e.u32(*flags);
            }
            Request::Link { from, to } => {
                from.encode(&mut e);
                to.encode(&mut e);
            }
            Request::Symlink { target, at } => {
                e.bytes(target);
                at.encode(&mut e);
            }
            Request::SetAttr { target, change } => {
                target.encode(&mut e);
                change.encode(&mut e);
            }
            Request::GetXattr { target, name } => {
                target.encode(&mut e);
                e.bytes(name);
            }
            Request::ListXattr { target } => target.encode(&mut e),
            Request::RemoveXattr { target, name } => {
                target.encode(&mut e);
                e.bytes(name);
            }
            Request::Sync => {}
            Request::CopyRange {
                from,
                from_offset,
                to,
                to_offset,
                len,
            } => {
                e.u64(*from)
                    .u64(*from_offset)
                    .u64(*to)
                    .u64(*to_offset)
                    .u64(*len);
            }
            Request::SetAccessAclMode { target, perm } => {
                target.encode(&mut e);
                e.u32(*perm);
            }
        }
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one arm per request kind, mirroring `encode` arm for arm"
    )]
    pub fn decode(message: &[u8]) -> Result<Request, WireError> {
        let mut d = Decoder::new(message);
        let request = match d.u32()? {
            1 => Request::Hello { version: d.u32()? },
            2 => Request::Stat {
                at: At::decode(&mut d)?,
            },
            3 => Request::Access {
                at: At::decode(&mut d)?,
                mask: d.u32()?,
            },
            4 => Request::Open {
                at: At::decode(&mut d)?,
                flags: d.i32()?,
                mode: d.u32()?,
                umask: d.u32()?,
                read_ahead: d.u32()?,
            },
            25 => Request::OpenDir {
                at: At::decode(&mut d)?,
                flags: d.i32()?,
                max: d.u32()?,
                with_attrs: d.bool()?,
                below: d.u32()?,
                walk: Walk::decode(&mut d)?,
            },
            5 => Request::Close { handle: d.u64()? },
            6 => Request::Read {
                handle: d.u64()?,
                offset: d.u64()?,
                len: d.u32()?,
            },
            7 => Request::Write {
                handle: d.u64()?,
                offset: d.u64()?,
                append: d.bool()?,
                data: d.bytes(MAX_IO_BYTES)?.to_vec(),
                with_attr: d.bool()?,
            },
            8 => Request::Fstat { handle: d.u64()? },
            9 => Request::Fsync { handle: d.u64()? },
            10 => {
                let handle = d.u64()?;
                let has_after = d.bool()?;
                let after = d.bytes(PATH_MAX_BYTES)?.to_vec();
                Request::ReadDir {
                    handle,
                    after: has_after.then_some(after),
                    max: d.u32()?,
                    with_attrs: d.bool()?,
                }
            }
            11 => Request::Mkdir {
                at: At::decode(&mut d)?,
                mode: d.u32()?,
                umask: d.u32()?,
            },
            12 => Request::Unlink {
                at: At::decode(&mut d)?,
                dir: d.bool()?,
            },
            13 => Request::Rename {
                from: At::decode(&mut d)?,
                to: At::decode(&mut d)?,
                flags: d.u32()?,
            },
            14 => Request::Link {
                from: At::decode(&mut d)?,
                to: At::decode(&mut d)?,
            },
            15 => Request::Symlink {
                target: d.bytes(PATH_MAX_BYTES)?.to_vec(),
                at: At::decode(&mut d)?,
            },
            16 => Request::Readlink {
                at: At::decode(&mut d)?,
            },
            17 => Request::SetAttr {
                target: Target::decode(&mut d)?,
                change: SetAttrWire::decode(&mut d)?,
            },
            18 => Request::GetXattr {
                target: Target::decode(&mut d)?,
                name: d.bytes(XATTR_MAX_BYTES)?.to_vec(),
            },
            19 => Request::ListXattr {
                target: Target::decode(&mut d)?,
            },
            20 => Request::Sync,
            21 => Request::Resolve {
                at: At::decode(&mut d)?,
            },
            22 => Request::CopyRange {
                from: d.u64()?,
                from_offset: d.u64()?,
                to: d.u64()?,
                to_offset: d.u64()?,
                len: d.u64()?,
            },
            23 => Request::SetAccessAclMode {
                target: Target::decode(&mut d)?,
                perm: d.u32()?,
            },
            24 => Request::RemoveXattr {
                target: Target::decode(&mut d)?,
                name: d.bytes(XATTR_MAX_BYTES)?.to_vec(),
            },
            tag => return Err(WireError::UnknownTag(tag)),
        };
        d.finish()?;
        Ok(request)
    }
}

impl Attr {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.ino).u32(self.mode).u32(self.nlink);
        e.u32(self.uid).u32(self.gid).u32(self.rdev);
        e.u64(self.size).u64(self.blocks).u32(self.blksize);
        for (secs, nanos) in [self.atime, self.mtime, self.ctime] {
            e.i64(secs).u32(nanos);
        }
    }

    fn decode(d: &mut Decoder) -> Result<Attr, WireError> {
        Ok(Attr {
            ino: d.u64()?,
            mode: d.u32()?,
            nlink: d.u32()?,
            uid: d.u32()?,
            gid: d.u32()?,
            rdev: d.u32()?,
            size: d.u64()?,
            blocks: d.u64()?,
            blksize: d.u32()?,
            atime: (d.i64()?, d.u32()?),
            mtime: (d.i64()?, d.u32()?),
            ctime: (d.i64()?, d.u32()?),
        })
    }
}

impl Reply {
    /// Writes a reply with its status into `out` (cleared first). A failed or fallen-back
    /// request carries no body.
    pub fn encode(status: Status, reply: &Reply, out: &mut Vec<u8>) {
        let mut e = Encoder::new(out);
        match status {
            Status::Ok => e.u8(0),
            Status::Errno(errno) => return void(e.u8(1).i32(errno)),
            Status::Fallback => return void(e.u8(2)),
        };
        match reply {
            Reply::Empty => {
                e.u8(0);
            }
            Reply::Hello(hello) => {
                e.u8(1).u32(hello.version).u64(hello.root);
            }
            Reply::Attr(attr) => {
                e.u8(2);
                attr.encode(&mut e);
            }
            Reply::Opened(opened) => opened.encode(e.u8(3)),
            Reply::OpenedWithData { opened, data } => {
                opened.encode(e.u8(11));
                e.bytes(data);
            }
            Reply::AttrAt {
                attr,
                version,
                no_xattrs,
            } => {
                attr.encode(e.u8(9));
                encode_option_u32(&mut e, *version);
                e.bool(*no_xattrs);
            }
            Reply::Data(data) => {
                e.u8(4).bytes(data);
            }
            Reply::Written { written, end } => {
                e.u8(5).u64(*written).u64(*end);
            }
            Reply::WrittenAt {
                written,
                end,
                attr,
                version,
                no_xattrs,
            } => {
                e.u8(12).u64(*written).u64(*end);
                attr.encode(&mut e);
                encode_option_u32(&mut e, *version);
                e.bool(*no_xattrs);
            }
            Reply::Changed {
                attr,
                kernel_holds,
                version,
                no_xattrs,
            } => {
                e.u8(7);
                attr.encode(&mut e);
                e.bool(*kernel_holds);
                encode_option_u32(&mut e, *version);
                e.bool(*no_xattrs);
            }
            Reply::Exists { witness } => encode_witness(e.u8(10), witness),
            Reply::Entries {
                entries,
                done,
                changes,
                dir_version,
            } => encode_entries(e.u8(6), entries, *done, *changes, *dir_version),
            Reply::OpenedDir { .. } => encode_opened_dir(e.u8(8), reply),
        }
    }

    pub fn decode(message: &[u8]) -> Result<(Status, Reply), WireError> {
        let mut d = Decoder::new(message);
        let status = match d.u8()? {
            0 => Status::Ok,
            1 => Status::Errno(d.i32()?),
            2 => Status::Fallback,
            tag => return Err(WireError::UnknownTag(u32::from(tag))),
        };
        if status != Status::Ok {
            d.finish()?;
            return Ok((status, Reply::Empty));
        }
        let reply = match d.u8()? {
            0 => Reply::Empty,
            1 => Reply::Hello(Hello {
                version: d.u32()?,
                root: d.u64()?,
            }),
            2 => Reply::Attr(Attr::decode(&mut d)?),
            3 => Reply::Opened(Opened::decode(&mut d)?),
            11 => Reply::OpenedWithData {
                opened: Opened::decode(&mut d)?,
                data: d.bytes(MAX_READ_AHEAD_BYTES)?.to_vec(),
            },
            9 => Reply::AttrAt {
                attr: Attr::decode(&mut d)?,
                version: decode_option_u32(&mut d)?,
                no_xattrs: d.bool()?,
            },
            4 => Reply::Data(d.bytes(MAX_IO_BYTES.max(XATTR_MAX_BYTES))?.to_vec()),
            5 => Reply::Written {
                written: d.u64()?,
                end: d.u64()?,
            },
            12 => Reply::WrittenAt {
                written: d.u64()?,
                end: d.u64()?,
                attr: Attr::decode(&mut d)?,
                version: decode_option_u32(&mut d)?,
                no_xattrs: d.bool()?,
            },
            6 => {
                let (entries, done, changes, dir_version) = decode_entries(&mut d)?;
                Reply::Entries {
                    entries,
                    done,
                    changes,
                    dir_version,
                }
            }
            8 => decode_opened_dir(&mut d)?,
            7 => Reply::Changed {
                attr: Attr::decode(&mut d)?,
                kernel_holds: d.bool()?,
                version: decode_option_u32(&mut d)?,
                no_xattrs: d.bool()?,
            },
            10 => Reply::Exists {
                witness: decode_witness(&mut d)?,
            },
            tag => return Err(WireError::UnknownTag(u32::from(tag))),
        };
        d.finish()?;
        Ok((status, reply))
    }
}

/// `Reply::OpenedDir`'s fields, after its tag: the open, the witness (tagged), the first
/// page, the directories below.
fn encode_opened_dir(e: &mut Encoder, reply: &Reply) {
    let Reply::OpenedDir {
        opened,
        entries,
        done,
        changes,
        dir_version,
        witness,
        below,
    } = reply
    else {
        return;
    };
    opened.encode(e);
    match witness {
        Some(witness) => encode_witness(e.u8(1), witness),
        None => void(e.u8(0)),
    }
    encode_entries(e, entries, *done, *changes, *dir_version);
    encode_below(e, below, *changes);
}

fn decode_opened_dir(d: &mut Decoder) -> Result<Reply, WireError> {
    let opened = Opened::decode(d)?;
    let witness = match d.u8()? {
        0 => None,
        1 => Some(decode_witness(d)?),
        tag => return Err(WireError::UnknownTag(u32::from(tag))),
    };
    let (entries, done, changes, dir_version) = decode_entries(d)?;
    Ok(Reply::OpenedDir {
        opened,
        entries,
        done,
        changes,
        dir_version,
        witness,
        below: decode_below(d)?,
    })
}

/// A page of entries: count, the change count, the directory's version, each entry
/// (attributes and version tagged), done.
fn encode_entries(
    e: &mut Encoder,
    entries: &[DirEntryWire],
    done: bool,
    changes: u64,
    dir_version: Option<u32>,
) {
    let count = u32::try_from(entries.len()).expect("bounded by READDIR_BATCH_ENTRIES");
    e.u32(count).u64(changes);
    encode_option_u32(e, dir_version);
    for entry in entries {
        e.u64(entry.ino).u8(entry.kind).bytes(&entry.name);
        match (&entry.attr, entry.version) {
            (None, _) => void(e.u8(0)),
            (Some(attr), None) => attr.encode(e.u8(1)),
            (Some(attr), Some(version)) => {
                attr.encode(e.u8(2));
                let flags = u8::from(entry.no_xattrs) | u8::from(entry.target.is_some()) << 1;
                e.u32(version).u8(flags);
                if let Some(target) = &entry.target {
                    e.bytes(target);
                }
            }
        }
    }
    e.bool(done);
}

type Page = (Vec<DirEntryWire>, bool, u64, Option<u32>);

fn decode_entries(d: &mut Decoder) -> Result<Page, WireError> {
    let count = d.u32()?;
    if count > ENTRIES_MAX {
        return Err(WireError::TooLong);
    }
    let changes = d.u64()?;
    let dir_version = decode_option_u32(d)?;
    let mut entries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (ino, kind) = (d.u64()?, d.u8()?);
        let name = EntryName::from_slice(d.bytes(PATH_MAX_BYTES)?);
        let mut entry = DirEntryWire {
            ino,
            kind,
            name,
            attr: None,
            version: None,
            target: None,
            no_xattrs: false,
        };
        match d.u8()? {
            0 => {}
            1 => entry.attr = Some(Attr::decode(d)?),
            2 => {
                (entry.attr, entry.version) = (Some(Attr::decode(d)?), Some(d.u32()?));
                let flags = d.u8()?;
                if flags & !0b11 != 0 {
                    return Err(WireError::UnknownTag(u32::from(flags)));
                }
                entry.no_xattrs = flags & 1 != 0;
                if flags & 2 != 0 {
                    entry.target = Some(d.bytes(PATH_MAX_BYTES)?.to_vec());
                }
            }
            tag => return Err(WireError::UnknownTag(u32::from(tag))),
        }
        entries.push(entry);
    }
    Ok((entries, d.bool()?, changes, dir_version))
}

/// Directories opened ahead: count, then each one's parent, name, open and page.
fn encode_below(e: &mut Encoder, below: &[DirBelow], changes: u64) {
    let count = u32::try_from(below.len()).expect("bounded by BELOW_MAX");
    e.u32(count);
    for dir in below {
        e.u64(dir.parent).bytes(&dir.name);
        dir.opened.encode(e);
        match &dir.encoded {
            // Kept from a reply at another count that the page still holds at: this
            // reply's count in its place (bytes 4..12, after the entry count).
            Some(page) if page.len() >= PAGE_FIXED_BYTES => {
                e.encoded(&page[..4]).u64(changes).encoded(&page[12..]);
            }
            _ => encode_entries(e, &dir.entries, dir.done, changes, dir.dir_version),
        }
    }
}

fn decode_below(d: &mut Decoder) -> Result<Vec<DirBelow>, WireError> {
    let count = d.u32()?;
    if count > BELOW_MAX {
        return Err(WireError::TooLong);
    }
    let mut below = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let parent = d.u64()?;
        let name = d.bytes(PATH_MAX_BYTES)?.to_vec();
        let opened = Opened::decode(d)?;
        let (entries, done, _, dir_version) = decode_entries(d)?;
        below.push(DirBelow {
            parent,
            name,
            opened,
            entries,
            done,
            dir_version,
            encoded: None,
        });
    }
    Ok(below)
}

/// A walk's witness: count, then (inode, version) pairs.
fn encode_witness(e: &mut Encoder, witness: &[(u64, u32)]) {
    let count = u32::try_from(witness.len()).expect("bounded by WITNESS_MAX");
    e.u32(count);
    for &(ino, version) in witness {
        e.u64(ino).u32(version);
    }
}

fn decode_witness(d: &mut Decoder) -> Result<Vec<(u64, u32)>, WireError> {
    let count = d.u32()? as usize;
    if count > WITNESS_MAX {
        return Err(WireError::TooLong);
    }
    (0..count).map(|_| Ok((d.u64()?, d.u32()?))).collect()
}

fn void(_: &mut Encoder) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(path: &[u8]) -> At {
        At {
            base: 1,
            path: path.to_vec(),
            follow: true,
        }
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one value of every request kind, for the round-trip tests"
    )]
    fn every_request() -> Vec<Request> {
        let change = SetAttrWire {
            mode: Some(0o644),
            uid: None,
            gid: Some(5),
            size: Some(9),
            atime: TimeWire::Now,
            mtime: TimeWire::At { secs: -1, nanos: 5 },
        };
        vec![
            Request::Hello { version: 1 },
            Request::Stat { at: at(b"a/b") },
            Request::Access {
                at: at(b"x"),
                mask: 4,
            },
            Request::Open {
                at: at(b"f"),
                flags: 0o1101,
                mode: 0o644,
                umask: 0o22,
                read_ahead: 16384,
            },
            Request::Close { handle: 3 },
            Request::Read {
                handle: 3,
                offset: 10,
                len: 4096,
            },
            Request::Write {
                handle: 3,
                offset: 0,
                append: true,
                data: b"hello".to_vec(),
                with_attr: true,
            },
            Request::Fstat { handle: 3 },
            Request::Fsync { handle: 3 },
            Request::ReadDir {
                handle: 4,
                after: Some(b"m".to_vec()),
                max: 64,
                with_attrs: true,
            },
            Request::ReadDir {
                handle: 4,
                after: None,
                max: 64,
                with_attrs: false,
            },
            Request::OpenDir {
                at: at(b"dir"),
                flags: libc::O_RDONLY | libc::O_DIRECTORY,
                max: 64,
                with_attrs: true,
                below: 32,
                walk: Walk::ByPath,
            },
            Request::Mkdir {
                at: at(b"d"),
                mode: 0o755,
                umask: 0o22,
            },
            Request::Unlink {
                at: at(b"d"),
                dir: true,
            },
            Request::Rename {
                from: at(b"a"),
                to: at(b"b"),
                flags: 1,
            },
            Request::Link {
                from: at(b"a"),
                to: at(b"c"),
            },
            Request::Symlink {
                target: b"../t".to_vec(),
                at: at(b"l"),
            },
            Request::Readlink { at: at(b"l") },
            Request::SetAttr {
                target: Target::Path(at(b"f")),
                change: change.clone(),
            },
            Request::SetAttr {
                target: Target::Handle(7),
                change,
            },
            Request::GetXattr {
                target: Target::Handle(7),
                name: b"user.a".to_vec(),
            },
            Request::ListXattr {
                target: Target::Path(at(b"f")),
            },
            Request::RemoveXattr {
                target: Target::Path(at(b"f")),
                name: b"system.posix_acl_default".to_vec(),
            },
            Request::Sync,
            Request::Resolve { at: at(b"d") },
            Request::CopyRange {
                from: 1,
                from_offset: 2,
                to: 3,
                to_offset: 4,
                len: 5,
            },
            Request::SetAccessAclMode {
                target: Target::Handle(7),
                perm: 0o640,
            },
        ]
    }

    #[test]
    fn every_request_round_trips_and_every_cut_is_an_error() {
        let mut buf = Vec::new();
        for request in every_request() {
            request.encode(&mut buf);
            assert_eq!(Request::decode(&buf), Ok(request.clone()));
            for cut in 0..buf.len() {
                assert!(
                    Request::decode(&buf[..cut]).is_err(),
                    "{request:?} cut at {cut}"
                );
            }
            buf.push(0);
            assert_eq!(Request::decode(&buf), Err(WireError::TrailingBytes));
        }
    }

    /// One reply of each kind (two of the listings), around `attr`.
    #[expect(
        clippy::too_many_lines,
        reason = "one value of every reply kind, for the round-trip tests"
    )]
    fn every_reply(attr: Attr) -> Vec<Reply> {
        vec![
            Reply::Empty,
            Reply::Hello(Hello {
                version: 1,
                root: 1,
            }),
            Reply::Attr(attr),
            Reply::Opened(Opened {
                handle: 2,
                attr,
                created: true,
                version: Some(7),
                no_xattrs: true,
            }),
            Reply::OpenedWithData {
                opened: Opened {
                    handle: 3,
                    attr,
                    created: false,
                    version: Some(8),
                    no_xattrs: false,
                },
                data: b"the whole file".to_vec(),
            },
            Reply::WrittenAt {
                written: 5,
                end: 9,
                attr,
                version: Some(4),
                no_xattrs: true,
            },
            Reply::AttrAt {
                attr,
                version: None,
                no_xattrs: false,
            },
            Reply::Data(b"bytes".to_vec()),
            Reply::Written {
                written: 5,
                end: 10,
            },
            Reply::Changed {
                attr,
                kernel_holds: true,
                version: Some(3),
                no_xattrs: true,
            },
            Reply::Exists {
                witness: vec![(1, 0), (u64::MAX, u32::MAX)],
            },
            Reply::Entries {
                entries: vec![
                    DirEntryWire {
                        ino: 3,
                        kind: 4,
                        name: EntryName::from_slice(b"d"),
                        attr: None,
                        version: None,
                        target: None,
                        no_xattrs: false,
                    },
                    DirEntryWire {
                        ino: 4,
                        kind: 8,
                        name: EntryName::from_slice(b"f"),
                        attr: Some(attr),
                        version: None,
                        target: None,
                        no_xattrs: false,
                    },
                    DirEntryWire {
                        ino: 5,
                        kind: 8,
                        name: EntryName::from_slice(b"v"),
                        attr: Some(attr),
                        version: Some(u32::MAX),
                        target: None,
                        no_xattrs: false,
                    },
                    DirEntryWire {
                        ino: 7,
                        kind: 10,
                        name: EntryName::from_slice(b"link"),
                        attr: Some(attr),
                        version: Some(5),
                        target: Some(b"../some/where".to_vec()),
                        no_xattrs: true,
                    },
                ],
                done: false,
                changes: 77,
                dir_version: Some(4),
            },
            Reply::OpenedDir {
                opened: Opened {
                    handle: 5,
                    attr,
                    created: false,
                    version: None,
                    no_xattrs: false,
                },
                entries: vec![DirEntryWire {
                    ino: 6,
                    kind: 8,
                    name: EntryName::from_slice(b"g"),
                    attr: Some(attr),
                    version: Some(2),
                    target: None,
                    no_xattrs: true,
                }],
                done: true,
                changes: 78,
                dir_version: None,
                witness: Some((0..WITNESS_MAX as u64).map(|i| (i, 7)).collect()),
                below: vec![DirBelow {
                    parent: 6,
                    name: b"sub".to_vec(),
                    opened: Opened {
                        handle: 11,
                        attr,
                        created: false,
                        version: Some(3),
                        no_xattrs: true,
                    },
                    entries: vec![DirEntryWire {
                        ino: 12,
                        kind: 4,
                        name: EntryName::from_slice(b"deeper"),
                        attr: Some(attr),
                        version: Some(1),
                        target: None,
                        no_xattrs: false,
                    }],
                    done: true,
                    dir_version: Some(8),
                    encoded: None,
                }],
            },
        ]
    }

    #[test]
    fn a_page_encoded_ahead_is_sent_as_its_entries_would_be() {
        let attr = Attr {
            ino: 9,
            mode: 0o40755,
            ..Attr::default()
        };
        let (mut plain, mut ahead) = (Vec::new(), Vec::new());
        for reply in every_reply(attr) {
            let Reply::OpenedDir {
                opened,
                entries,
                done,
                changes,
                dir_version,
                witness,
                mut below,
            } = reply.clone()
            else {
                continue;
            };
            assert!(!below.is_empty());
            Reply::encode(Status::Ok, &reply, &mut plain);
            for dir in &mut below {
                // Kept at an earlier count: sent with the reply's.
                let page = encode_page(&dir.entries, dir.done, changes - 5, dir.dir_version);
                let sized = dir.encoded_len();
                dir.entries.clear();
                dir.encoded = Some(page);
                assert_eq!(dir.encoded_len(), sized, "budgeted alike");
            }
            let with_pages = Reply::OpenedDir {
                opened,
                entries,
                done,
                changes,
                dir_version,
                witness,
                below,
            };
            Reply::encode(Status::Ok, &with_pages, &mut ahead);
            assert_eq!(ahead, plain);
            assert_eq!(Reply::decode(&ahead), Ok((Status::Ok, reply)));
        }
    }

    #[test]
    fn replies_round_trip() {
        let attr = Attr {
            ino: 9,
            mode: 0o100644,
            nlink: 1,
            size: 5,
            ..Attr::default()
        };
        let mut buf = Vec::new();
        for reply in every_reply(attr) {
            Reply::encode(Status::Ok, &reply, &mut buf);
            let budgeted = match &reply {
                Reply::Entries { entries, .. } => Some((entries, ENTRIES_HEADER_BYTES)),
                Reply::OpenedDir { entries, below, .. } => {
                    let below: usize = below.iter().map(DirBelow::encoded_len).sum();
                    Some((
                        entries,
                        ENTRIES_HEADER_BYTES + OPENED_DIR_EXTRA_BYTES + below,
                    ))
                }
                _ => None,
            };
            if let Some((entries, header)) = budgeted {
                let listed: usize = entries.iter().map(DirEntryWire::encoded_len).sum();
                assert_eq!(buf.len(), header + listed, "sizes the server budgets by");
            }
            assert_eq!(Reply::decode(&buf), Ok((Status::Ok, reply)));
        }
        Reply::encode(Status::Errno(2), &Reply::Empty, &mut buf);
        assert_eq!(Reply::decode(&buf), Ok((Status::Errno(2), Reply::Empty)));
        Reply::encode(Status::Fallback, &Reply::Empty, &mut buf);
        assert_eq!(Reply::decode(&buf), Ok((Status::Fallback, Reply::Empty)));
    }

    #[test]
    fn hostile_messages_are_errors_not_panics() {
        // Lengths far past the message, unknown tags, huge entry counts.
        let cases: [&[u8]; 4] = [
            &[2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255],
            &[99, 0, 0, 0],
            &[0, 6, 255, 255, 255, 255],
            &[],
        ];
        for case in cases {
            assert!(Request::decode(case).is_err() || Reply::decode(case).is_err());
        }
        assert!(Reply::decode(&[0, 6, 255, 255, 255, 255]).is_err());
    }
}
