//! Every key and value encoding of shoal, and nothing else: a format change is a diff of
//! this file plus a bump of `FORMAT_VERSION`.
//!
//! Meta space (big-endian integers so keys sort numerically):
//! - `S`                          superblock: format version, inline threshold, chunk size
//! - `E` parent:u64 name          directory entry -> ino:u64 kind:u8
//! - `I` ino:u64                  inode record (attributes + inline data)
//! - `X` ino:u64 name             extended attribute value
//! - `O` ino:u64                  orphan: unlinked while open; purged at release or mount
//! - `C` uid:u32 gid:u32 project:u32  usage counter -> inodes:u64 bytes:u64
//! - `L` kind:u8 id:u32           quota record of a user (0), group (1) or project (2)
//!   -> 4 limits:u64, 2 grace ends:i64 (i64::MIN = not running)
//! - `Q`                          quota settings: 2 grace periods:u64, enforce_root:u8
//! - `N`                          next inode number never handed out: u64 (file handles
//!   name inodes by number, so a number is never used twice; absent in older stores,
//!   whose next number is one past the greatest inode)
//! - `R` dir:u64                  recursive usage of a directory's subtree (format 2) ->
//!   entries:u64 files:u64 bytes:u64 rctime (secs:i64 nanos:u32); absent = empty subtree,
//!   rctime the directory's own ctime
//! - `B` ino:u64 dir:u64          names of a multiply linked inode in `dir` (format 2) ->
//!   count:u32; kept only while nlink > 1 (with one link, the inode's `parent` says where)
//! - `Z` dir:u64                  a detached tree to reclaim (format 2): the directory was
//!   unnamed by `rmtree` (its `parent` is 0) and is deleted in the background
//! - `T` ino:u64                  chunks of a file still to delete -> from:u64 to:u64 (chunk
//!   indexes, `to` exclusive): the rest of a truncate or hole punch too large for one batch
//!   (see `engine::trim`); present only until the operation's last batch, or, after a
//!   crash, until the next read-write open finishes it
//!
//! Data space:
//! - `D` ino:u64 chunk:u64        file bytes `[chunk * CHUNK_BYTES, ...)`, at most CHUNK_BYTES
//!
//! Entries of one directory are one contiguous `E parent` range, and inode numbers are
//! handed out in per-directory runs (see `alloc`), so the `I` keys a readdirplus needs sit
//! next to each other.

use crate::error::FsError;
use crate::limits::{
    DEFAULT_CHUNK_BYTES, DEFAULT_INLINE_MAX_BYTES, NAME_MAX_BYTES, SYMLINK_MAX_BYTES,
    XATTR_NAME_MAX_BYTES, XATTR_VALUE_MAX_BYTES,
};
use crate::records::inode::{Content, FileKind, Inode, Timestamp, TreeUsage, Usage, UsageKey};
use crate::records::quota::{QuotaKind, QuotaLimits, QuotaRecord, QuotaSettings};

mod record_kinds;
pub use record_kinds::{record_kind, RecordKind, RECORD_KINDS};

/// The format's two keyspaces: metadata records, and file chunks (apart, so that large
/// values can be separated from the keys; see `store::FjallStore`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Space {
    Meta,
    Data,
}

/// 2: recursive usage (`R`), link parents (`B`), and `parent` set for singly linked
/// non-directories. A format-1 store is upgraded when first opened read-write.
pub const FORMAT_VERSION: u32 = 2;
/// The format a store may be in and still be opened (and upgraded).
pub const FORMAT_VERSION_UPGRADABLE: u32 = 1;

const SUPERBLOCK: u8 = b'S';
const ENTRY: u8 = b'E';
const INODE: u8 = b'I';
const XATTR: u8 = b'X';
const ORPHAN: u8 = b'O';
const COUNTER: u8 = b'C';
const QUOTA_RECORD: u8 = b'L';
const QUOTA_SETTINGS: u8 = b'Q';
const CHUNK: u8 = b'D';
const NEXT_INO: u8 = b'N';
const TREE_USAGE: u8 = b'R';
const LINK_PARENT: u8 = b'B';
const RECLAIM: u8 = b'Z';
const TRIM: u8 = b'T';

const INODE_RECORD_VERSION: u8 = 1;
/// Bits of the inode record's last header byte.
const INODE_CHUNKED: u8 = 1;
const INODE_MAY_HAVE_XATTRS: u8 = 2;

pub fn superblock_key() -> Vec<u8> {
    vec![SUPERBLOCK]
}

/// Bytes of a `tag id:u64` key prefix: the name of an entry or xattr key starts here.
const ID_PREFIX_BYTES: usize = 1 + 8;

/// The longest key of the format: an entry or xattr key with the longest name (every
/// other key is a tag and at most 16 bytes of ids).
pub const MAX_KEY_BYTES: usize = ID_PREFIX_BYTES + larger(NAME_MAX_BYTES, XATTR_NAME_MAX_BYTES);
/// The largest value of the format (in a store made with the default chunk size): an
/// xattr value, a chunk, or an inode record with the most inline data.
pub const MAX_VALUE_BYTES: usize = larger(
    larger(XATTR_VALUE_MAX_BYTES, DEFAULT_CHUNK_BYTES as usize),
    INODE_HEADER_BYTES + larger(SYMLINK_MAX_BYTES, DEFAULT_INLINE_MAX_BYTES as usize),
);
// Every id-prefixed key other than entries and xattrs is at most tag, two u64 ids.
const _: () = assert!(MAX_KEY_BYTES >= ID_PREFIX_BYTES + 8);

const fn larger(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

fn prefixed(tag: u8, id: u64, rest: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(ID_PREFIX_BYTES + rest.len());
    key.push(tag);
    key.extend_from_slice(&id.to_be_bytes());
    key.extend_from_slice(rest);
    key
}

/// `[start, end)` of every key `tag id ...`.
fn id_range(tag: u8, id: u64) -> (Vec<u8>, Vec<u8>) {
    let start = prefixed(tag, id, &[]);
    let end = match id.checked_add(1) {
        Some(next) => prefixed(tag, next, &[]),
        None => vec![tag + 1],
    };
    (start, end)
}

fn tag_range(tag: u8) -> (Vec<u8>, Vec<u8>) {
    (vec![tag], vec![tag + 1])
}

fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn corrupt(what: &str, key: &[u8]) -> FsError {
    FsError::Corrupt(format!("undecodable {what} at key {key:02x?}"))
}

// ---- directory entries ----

pub fn entry_key(parent: u64, name: &[u8]) -> Vec<u8> {
    prefixed(ENTRY, parent, name)
}

pub fn entry_range(parent: u64) -> (Vec<u8>, Vec<u8>) {
    id_range(ENTRY, parent)
}

/// Entries of `parent` strictly after `name`.
pub fn entry_range_after(parent: u64, name: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut start = entry_key(parent, name);
    start.push(0);
    (start, id_range(ENTRY, parent).1)
}

pub fn all_entries_range() -> (Vec<u8>, Vec<u8>) {
    tag_range(ENTRY)
}

/// Splits an entry key into (parent, name).
pub fn decode_entry_key(key: &[u8]) -> Result<(u64, &[u8]), FsError> {
    match (key.first(), read_u64(key, 1)) {
        (Some(&ENTRY), Some(parent)) => Ok((parent, &key[ID_PREFIX_BYTES..])),
        _ => Err(corrupt("entry key", key)),
    }
}

pub fn encode_entry(ino: u64, kind: FileKind) -> Vec<u8> {
    let mut value = ino.to_be_bytes().to_vec();
    value.push(kind_code(kind));
    value
}

pub fn decode_entry(key: &[u8], value: &[u8]) -> Result<(u64, FileKind), FsError> {
    let ino = read_u64(value, 0).ok_or_else(|| corrupt("entry", key))?;
    let kind = value
        .get(8)
        .and_then(|&code| kind_from_code(code))
        .ok_or_else(|| corrupt("entry kind", key))?;
    Ok((ino, kind))
}

// ---- inodes ----

pub fn inode_key(ino: u64) -> Vec<u8> {
    prefixed(INODE, ino, &[])
}

pub fn all_inodes_range() -> (Vec<u8>, Vec<u8>) {
    tag_range(INODE)
}

/// The metadata key ranges that hold an inode's attributes and its extended attributes:
/// a batch writing into them changed what a stat or listxattr of the inode returns.
/// (Arrays, not vectors: every transaction's commit asks, and allocating the four bounds
/// showed as 4% of an in-process create under perf.)
pub fn attribute_ranges() -> [([u8; 1], [u8; 1]); 2] {
    [([INODE], [INODE + 1]), ([XATTR], [XATTR + 1])]
}

/// The inode of a key in `attribute_ranges`.
pub fn attribute_key_ino(key: &[u8]) -> Option<u64> {
    match key.first() {
        Some(&INODE | &XATTR) => read_u64(key, 1),
        _ => None,
    }
}

pub fn decode_inode_key(key: &[u8]) -> Result<u64, FsError> {
    match (key.first(), read_u64(key, 1), key.len()) {
        (Some(&INODE), Some(ino), 9) => Ok(ino),
        _ => Err(corrupt("inode key", key)),
    }
}

fn kind_code(kind: FileKind) -> u8 {
    match kind {
        FileKind::Regular => 1,
        FileKind::Directory => 2,
        FileKind::Symlink => 3,
        FileKind::Fifo => 4,
        FileKind::Socket => 5,
        FileKind::CharDevice => 6,
        FileKind::BlockDevice => 7,
    }
}

fn kind_from_code(code: u8) -> Option<FileKind> {
    Some(match code {
        1 => FileKind::Regular,
        2 => FileKind::Directory,
        3 => FileKind::Symlink,
        4 => FileKind::Fifo,
        5 => FileKind::Socket,
        6 => FileKind::CharDevice,
        7 => FileKind::BlockDevice,
        _ => return None,
    })
}

/// Where each field of the inode record starts (all integers big-endian), in the order
/// `encode_inode` writes them; inline data follows the header. A timestamp is secs:i64
/// then nanos:u32.
mod inode_at {
    pub const VERSION: usize = 0; // u8: INODE_RECORD_VERSION
    pub const KIND: usize = 1; // u8: kind_code
    pub const PERM: usize = 2; // u16
    pub const UID: usize = 4; // u32
    pub const GID: usize = 8; // u32
    pub const NLINK: usize = 12; // u32
    pub const SIZE: usize = 16; // u64
    pub const ALLOCATED: usize = 24; // u64
    pub const ATIME: usize = 32; // timestamp
    pub const MTIME: usize = 44; // timestamp
    pub const CTIME: usize = 56; // timestamp
    pub const RDEV: usize = 68; // u32
    pub const PARENT: usize = 72; // u64
    pub const PROJECT: usize = 80; // u32
    pub const FLAGS: usize = 84; // u8: INODE_CHUNKED | INODE_MAY_HAVE_XATTRS
    pub const INLINE: usize = 85; // inline data to the end
}

/// secs:i64 nanos:u32.
const TIMESTAMP_BYTES: usize = 12;
const INODE_HEADER_BYTES: usize = inode_at::INLINE;

// Each field ends where the next begins: the offsets above are the layout encode writes.
const _: () = {
    use inode_at::*;
    assert!(KIND == VERSION + 1 && PERM == KIND + 1 && UID == PERM + 2);
    assert!(GID == UID + 4 && NLINK == GID + 4 && SIZE == NLINK + 4);
    assert!(ALLOCATED == SIZE + 8 && ATIME == ALLOCATED + 8);
    assert!(MTIME == ATIME + TIMESTAMP_BYTES && CTIME == MTIME + TIMESTAMP_BYTES);
    assert!(RDEV == CTIME + TIMESTAMP_BYTES && PARENT == RDEV + 4 && PROJECT == PARENT + 8);
    assert!(FLAGS == PROJECT + 4 && INLINE == FLAGS + 1);
};

/// Appends one field at its named offset: the encode half of the paired layout checks.
fn put_at(out: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    debug_assert_eq!(out.len(), at, "inode field written out of place");
    out.extend_from_slice(bytes);
}

fn put_time(out: &mut Vec<u8>, time: Timestamp) {
    out.extend_from_slice(&time.secs.to_be_bytes());
    out.extend_from_slice(&time.nanos.to_be_bytes());
}

fn put_time_at(out: &mut Vec<u8>, at: usize, time: Timestamp) {
    debug_assert_eq!(out.len(), at, "inode field written out of place");
    put_time(out, time);
}

fn read_time(bytes: &[u8], at: usize) -> Option<Timestamp> {
    let secs = read_u64(bytes, at)? as i64;
    let nanos = read_u32(bytes, at + 8)?;
    Some(Timestamp { secs, nanos })
}

pub fn encode_inode(inode: &Inode) -> Vec<u8> {
    let inline = inode.inline_data();
    let mut out = Vec::with_capacity(INODE_HEADER_BYTES + inline.len());
    put_at(&mut out, inode_at::VERSION, &[INODE_RECORD_VERSION]);
    put_at(&mut out, inode_at::KIND, &[kind_code(inode.kind)]);
    put_at(&mut out, inode_at::PERM, &inode.perm.to_be_bytes());
    put_at(&mut out, inode_at::UID, &inode.uid.to_be_bytes());
    put_at(&mut out, inode_at::GID, &inode.gid.to_be_bytes());
    put_at(&mut out, inode_at::NLINK, &inode.nlink.to_be_bytes());
    put_at(&mut out, inode_at::SIZE, &inode.size.to_be_bytes());
    put_at(
        &mut out,
        inode_at::ALLOCATED,
        &inode.allocated_bytes.to_be_bytes(),
    );
    put_time_at(&mut out, inode_at::ATIME, inode.atime);
    put_time_at(&mut out, inode_at::MTIME, inode.mtime);
    put_time_at(&mut out, inode_at::CTIME, inode.ctime);
    put_at(&mut out, inode_at::RDEV, &inode.rdev.to_be_bytes());
    put_at(&mut out, inode_at::PARENT, &inode.parent.to_be_bytes());
    put_at(&mut out, inode_at::PROJECT, &inode.project.to_be_bytes());
    let xattr_bit = if inode.may_have_xattrs {
        INODE_MAY_HAVE_XATTRS
    } else {
        0
    };
    let flags = match &inode.content {
        Content::Inline(_) => xattr_bit,
        Content::Chunked => INODE_CHUNKED | xattr_bit,
    };
    put_at(&mut out, inode_at::FLAGS, &[flags]);
    put_at(&mut out, inode_at::INLINE, inline);
    debug_assert_eq!(out.len(), INODE_HEADER_BYTES + inline.len());
    out
}

/// Decodes an inode record and verifies that it makes sense (as XFS's `xfs_dinode_verify`
/// on every inode read): a record of the right shape whose fields contradict each other is
/// corruption, reported where it is read, not a value passed on.
pub fn decode_inode(ino: u64, value: &[u8]) -> Result<Inode, FsError> {
    let inode = decode_inode_fields(ino, value).ok_or_else(|| corrupt("inode", &inode_key(ino)))?;
    match inode_problem(&inode) {
        None => Ok(inode),
        Some(problem) => Err(FsError::Corrupt(format!("inode {ino}: {problem}"))),
    }
}

/// Nanoseconds in a second: a timestamp's `nanos` stays below.
const NANOS_PER_SEC: u32 = 1_000_000_000;
/// Permission bits, setuid, setgid and sticky: all a mode holds besides its kind.
const PERM_BITS: u16 = 0o7777;

/// What makes a decoded inode impossible, if anything: fields that contradict its kind or
/// lie outside their range. The engine writes none of these.
fn inode_problem(inode: &Inode) -> Option<String> {
    if inode.perm & !PERM_BITS != 0 {
        return Some(format!("permission bits {:o} beyond 0o7777", inode.perm));
    }
    for (name, time) in [
        ("atime", inode.atime),
        ("mtime", inode.mtime),
        ("ctime", inode.ctime),
    ] {
        if time.nanos >= NANOS_PER_SEC {
            return Some(format!("{name} nanoseconds {} not below 1e9", time.nanos));
        }
    }
    if inode.rdev != 0 && !inode.kind.is_device() {
        return Some(format!(
            "device number {:#x} on a {:?}",
            inode.rdev, inode.kind
        ));
    }
    if inode.kind == FileKind::Directory && inode.nlink == 1 {
        // Two links from the start (its entry and its own `.`); none once removed.
        return Some("directory with one link".into());
    }
    content_problem(inode)
}

/// The content and sizes a kind allows: only regular files hold data (inline exactly their
/// size, or chunked), a symlink holds its target, the others nothing.
fn content_problem(inode: &Inode) -> Option<String> {
    let inline_len = inode.inline_data().len() as u64;
    let chunked = inode.content == Content::Chunked;
    match inode.kind {
        FileKind::Regular if chunked => None,
        FileKind::Regular if inline_len != inode.size || inode.allocated_bytes != inode.size => {
            Some(format!(
                "inline file of size {} holds {inline_len} bytes, {} allocated",
                inode.size, inode.allocated_bytes
            ))
        }
        FileKind::Regular => None,
        FileKind::Symlink if chunked || inline_len == 0 || inline_len != inode.size => {
            Some(format!(
                "symlink of size {} with a target of {inline_len} bytes{}",
                inode.size,
                if chunked { " (chunked)" } else { "" }
            ))
        }
        FileKind::Symlink => None,
        // A directory's size is its number of entries; no kind but those above holds data.
        FileKind::Directory if chunked || inline_len > 0 || inode.allocated_bytes > 0 => {
            Some("directory holding data".into())
        }
        FileKind::Directory => None,
        _ if chunked || inline_len > 0 || inode.size > 0 || inode.allocated_bytes > 0 => {
            Some(format!("{:?} holding data", inode.kind))
        }
        _ => None,
    }
}

fn decode_inode_fields(ino: u64, v: &[u8]) -> Option<Inode> {
    if *v.first()? != INODE_RECORD_VERSION || v.len() < INODE_HEADER_BYTES {
        return None;
    }
    let flags = v[inode_at::FLAGS];
    if flags & !(INODE_CHUNKED | INODE_MAY_HAVE_XATTRS) != 0 {
        return None;
    }
    let content = if flags & INODE_CHUNKED != 0 {
        Content::Chunked
    } else {
        Content::Inline(v[inode_at::INLINE..].to_vec())
    };
    let inode = Inode {
        ino,
        kind: kind_from_code(v[inode_at::KIND])?,
        perm: u16::from_be_bytes([v[inode_at::PERM], v[inode_at::PERM + 1]]),
        uid: read_u32(v, inode_at::UID)?,
        gid: read_u32(v, inode_at::GID)?,
        nlink: read_u32(v, inode_at::NLINK)?,
        size: read_u64(v, inode_at::SIZE)?,
        allocated_bytes: read_u64(v, inode_at::ALLOCATED)?,
        atime: read_time(v, inode_at::ATIME)?,
        mtime: read_time(v, inode_at::MTIME)?,
        ctime: read_time(v, inode_at::CTIME)?,
        rdev: read_u32(v, inode_at::RDEV)?,
        parent: read_u64(v, inode_at::PARENT)?,
        project: read_u32(v, inode_at::PROJECT)?,
        content,
        may_have_xattrs: flags & INODE_MAY_HAVE_XATTRS != 0,
    };
    // The decode half of encode's layout check: the header, then the inline data and
    // nothing else (a chunked record with bytes after its header is not one encode wrote).
    (v.len() == INODE_HEADER_BYTES + inode.inline_data().len()).then_some(inode)
}

// ---- extended attributes ----

pub fn xattr_key(ino: u64, name: &[u8]) -> Vec<u8> {
    prefixed(XATTR, ino, name)
}

pub fn xattr_range(ino: u64) -> (Vec<u8>, Vec<u8>) {
    id_range(XATTR, ino)
}

pub fn all_xattrs_range() -> (Vec<u8>, Vec<u8>) {
    tag_range(XATTR)
}

/// Splits an xattr key into (ino, name).
pub fn decode_xattr_key(key: &[u8]) -> Result<(u64, &[u8]), FsError> {
    match (key.first(), read_u64(key, 1)) {
        (Some(&XATTR), Some(ino)) => Ok((ino, &key[ID_PREFIX_BYTES..])),
        _ => Err(corrupt("xattr key", key)),
    }
}

// ---- orphans ----

pub fn orphan_key(ino: u64) -> Vec<u8> {
    prefixed(ORPHAN, ino, &[])
}

pub fn all_orphans_range() -> (Vec<u8>, Vec<u8>) {
    tag_range(ORPHAN)
}

pub fn decode_orphan_key(key: &[u8]) -> Result<u64, FsError> {
    match (key.first(), read_u64(key, 1), key.len()) {
        (Some(&ORPHAN), Some(ino), 9) => Ok(ino),
        _ => Err(corrupt("orphan key", key)),
    }
}

// ---- chunks still to delete ----

pub fn trim_key(ino: u64) -> Vec<u8> {
    prefixed(TRIM, ino, &[])
}

pub fn all_trims_range() -> (Vec<u8>, Vec<u8>) {
    tag_range(TRIM)
}

pub fn decode_trim_key(key: &[u8]) -> Result<u64, FsError> {
    match (key.first(), read_u64(key, 1), key.len()) {
        (Some(&TRIM), Some(ino), 9) => Ok(ino),
        _ => Err(corrupt("trim key", key)),
    }
}

/// The chunk indexes `[from, to)` a trim record says are still to delete.
pub fn encode_trim(from: u64, to: u64) -> Vec<u8> {
    assert!(from < to, "empty trim range {from}..{to}");
    let mut value = Vec::with_capacity(16);
    value.extend_from_slice(&from.to_be_bytes());
    value.extend_from_slice(&to.to_be_bytes());
    value
}

pub fn decode_trim(value: &[u8]) -> Result<(u64, u64), FsError> {
    match (read_u64(value, 0), read_u64(value, 8), value.len()) {
        (Some(from), Some(to), 16) if from < to => Ok((from, to)),
        _ => Err(corrupt("trim record", value)),
    }
}

// ---- usage counters ----

pub fn counter_key(owners: UsageKey) -> Vec<u8> {
    let mut key = Vec::with_capacity(13);
    key.push(COUNTER);
    key.extend_from_slice(&owners.uid.to_be_bytes());
    key.extend_from_slice(&owners.gid.to_be_bytes());
    key.extend_from_slice(&owners.project.to_be_bytes());
    key
}

pub fn all_counters_range() -> (Vec<u8>, Vec<u8>) {
    tag_range(COUNTER)
}

pub fn decode_counter_key(key: &[u8]) -> Result<UsageKey, FsError> {
    match (
        key.first(),
        read_u32(key, 1),
        read_u32(key, 5),
        read_u32(key, 9),
        key.len(),
    ) {
        (Some(&COUNTER), Some(uid), Some(gid), Some(project), 13) => {
            Ok(UsageKey { uid, gid, project })
        }
        _ => Err(corrupt("counter key", key)),
    }
}

pub fn encode_usage(usage: Usage) -> Vec<u8> {
    let mut value = usage.inodes.to_be_bytes().to_vec();
    value.extend_from_slice(&usage.bytes.to_be_bytes());
    value
}

pub fn decode_usage(key: &[u8], value: &[u8]) -> Result<Usage, FsError> {
    match (read_u64(value, 0), read_u64(value, 8)) {
        (Some(inodes), Some(bytes)) if value.len() == 16 => Ok(Usage { inodes, bytes }),
        _ => Err(corrupt("usage counter", key)),
    }
}

/// Owners and allocated bytes of an inode record, read from its header only (the usage
/// verifier reads millions of records and needs nothing else).
pub fn decode_inode_usage(ino: u64, v: &[u8]) -> Result<(UsageKey, u64), FsError> {
    let fields = (|| {
        if *v.first()? != INODE_RECORD_VERSION || v.len() < INODE_HEADER_BYTES {
            return None;
        }
        let owners = UsageKey {
            uid: read_u32(v, inode_at::UID)?,
            gid: read_u32(v, inode_at::GID)?,
            project: read_u32(v, inode_at::PROJECT)?,
        };
        Some((owners, read_u64(v, inode_at::ALLOCATED)?))
    })();
    fields.ok_or_else(|| corrupt("inode", &inode_key(ino)))
}

// ---- recursive usage ----

pub fn tree_usage_key(dir: u64) -> Vec<u8> {
    prefixed(TREE_USAGE, dir, &[])
}

pub fn all_tree_usage_range() -> (Vec<u8>, Vec<u8>) {
    tag_range(TREE_USAGE)
}

pub fn decode_tree_usage_key(key: &[u8]) -> Result<u64, FsError> {
    match (key.first(), read_u64(key, 1), key.len()) {
        (Some(&TREE_USAGE), Some(dir), 9) => Ok(dir),
        _ => Err(corrupt("tree usage key", key)),
    }
}

const TREE_USAGE_BYTES: usize = 3 * 8 + 12;

pub fn encode_tree_usage(usage: &TreeUsage) -> Vec<u8> {
    let mut value = Vec::with_capacity(TREE_USAGE_BYTES);
    value.extend_from_slice(&usage.entries.to_be_bytes());
    value.extend_from_slice(&usage.files.to_be_bytes());
    value.extend_from_slice(&usage.bytes.to_be_bytes());
    put_time(&mut value, usage.rctime);
    value
}

pub fn decode_tree_usage(key: &[u8], v: &[u8]) -> Result<TreeUsage, FsError> {
    let fields = (|| {
        if v.len() != TREE_USAGE_BYTES {
            return None;
        }
        Some(TreeUsage {
            entries: read_u64(v, 0)?,
            files: read_u64(v, 8)?,
            bytes: read_u64(v, 16)?,
            rctime: read_time(v, 24)?,
        })
    })();
    fields.ok_or_else(|| corrupt("tree usage", key))
}

// ---- link parents ----

pub fn link_parent_key(ino: u64, dir: u64) -> Vec<u8> {
    prefixed(LINK_PARENT, ino, &dir.to_be_bytes())
}

pub fn link_parent_range(ino: u64) -> (Vec<u8>, Vec<u8>) {
    id_range(LINK_PARENT, ino)
}

pub fn all_link_parents_range() -> (Vec<u8>, Vec<u8>) {
    tag_range(LINK_PARENT)
}

/// Splits a link parent key into (ino, dir).
pub fn decode_link_parent_key(key: &[u8]) -> Result<(u64, u64), FsError> {
    match (key.first(), read_u64(key, 1), read_u64(key, 9), key.len()) {
        (Some(&LINK_PARENT), Some(ino), Some(dir), 17) => Ok((ino, dir)),
        _ => Err(corrupt("link parent key", key)),
    }
}

pub fn encode_link_count(count: u32) -> Vec<u8> {
    count.to_be_bytes().to_vec()
}

pub fn decode_link_count(key: &[u8], v: &[u8]) -> Result<u32, FsError> {
    match (read_u32(v, 0), v.len()) {
        (Some(count), 4) if count > 0 => Ok(count),
        _ => Err(corrupt("link count", key)),
    }
}

// ---- trees to reclaim ----

pub fn reclaim_key(dir: u64) -> Vec<u8> {
    prefixed(RECLAIM, dir, &[])
}

pub fn all_reclaims_range() -> (Vec<u8>, Vec<u8>) {
    tag_range(RECLAIM)
}

pub fn decode_reclaim_key(key: &[u8]) -> Result<u64, FsError> {
    match (key.first(), read_u64(key, 1), key.len()) {
        (Some(&RECLAIM), Some(dir), 9) => Ok(dir),
        _ => Err(corrupt("reclaim key", key)),
    }
}

// ---- quotas ----

fn quota_kind_code(kind: QuotaKind) -> u8 {
    match kind {
        QuotaKind::User => 0,
        QuotaKind::Group => 1,
        QuotaKind::Project => 2,
    }
}

pub fn quota_record_key(kind: QuotaKind, id: u32) -> Vec<u8> {
    let mut key = Vec::with_capacity(6);
    key.push(QUOTA_RECORD);
    key.push(quota_kind_code(kind));
    key.extend_from_slice(&id.to_be_bytes());
    key
}

pub fn all_quota_records_range() -> (Vec<u8>, Vec<u8>) {
    tag_range(QUOTA_RECORD)
}

pub fn decode_quota_record_key(key: &[u8]) -> Result<(QuotaKind, u32), FsError> {
    let kind = match key.get(1) {
        Some(0) => QuotaKind::User,
        Some(1) => QuotaKind::Group,
        Some(2) => QuotaKind::Project,
        _ => return Err(corrupt("quota record key", key)),
    };
    match (key.first(), read_u32(key, 2), key.len()) {
        (Some(&QUOTA_RECORD), Some(id), 6) => Ok((kind, id)),
        _ => Err(corrupt("quota record key", key)),
    }
}

const GRACE_NOT_RUNNING: i64 = i64::MIN;

pub fn encode_quota_record(record: &QuotaRecord) -> Vec<u8> {
    let limits = &record.limits;
    let mut value = Vec::with_capacity(48);
    for limit in [
        limits.bytes_soft,
        limits.bytes_hard,
        limits.inodes_soft,
        limits.inodes_hard,
    ] {
        value.extend_from_slice(&limit.to_be_bytes());
    }
    for ends in [record.bytes_grace_ends, record.inodes_grace_ends] {
        value.extend_from_slice(&ends.unwrap_or(GRACE_NOT_RUNNING).to_be_bytes());
    }
    value
}

pub fn decode_quota_record(key: &[u8], v: &[u8]) -> Result<QuotaRecord, FsError> {
    let grace =
        |at| read_u64(v, at).map(|raw| Some(raw as i64).filter(|&ends| ends != GRACE_NOT_RUNNING));
    let fields = (|| {
        if v.len() != 48 {
            return None;
        }
        Some(QuotaRecord {
            limits: QuotaLimits {
                bytes_soft: read_u64(v, 0)?,
                bytes_hard: read_u64(v, 8)?,
                inodes_soft: read_u64(v, 16)?,
                inodes_hard: read_u64(v, 24)?,
            },
            bytes_grace_ends: grace(32)?,
            inodes_grace_ends: grace(40)?,
        })
    })();
    fields.ok_or_else(|| corrupt("quota record", key))
}

pub fn next_ino_key() -> Vec<u8> {
    vec![NEXT_INO]
}

pub fn encode_next_ino(ino: u64) -> Vec<u8> {
    ino.to_be_bytes().to_vec()
}

pub fn decode_next_ino(value: &[u8]) -> Result<u64, FsError> {
    match (read_u64(value, 0), value.len()) {
        (Some(ino), 8) => Ok(ino),
        _ => Err(corrupt("next inode number", &next_ino_key())),
    }
}

pub fn quota_settings_key() -> Vec<u8> {
    vec![QUOTA_SETTINGS]
}

pub fn encode_quota_settings(settings: &QuotaSettings) -> Vec<u8> {
    let mut value = settings.bytes_grace_secs.to_be_bytes().to_vec();
    value.extend_from_slice(&settings.inodes_grace_secs.to_be_bytes());
    value.push(u8::from(settings.enforce_root));
    value
}

pub fn decode_quota_settings(v: &[u8]) -> Result<QuotaSettings, FsError> {
    match (read_u64(v, 0), read_u64(v, 8), v.get(16), v.len()) {
        (Some(bytes_grace_secs), Some(inodes_grace_secs), Some(&root @ (0 | 1)), 17) => {
            Ok(QuotaSettings {
                bytes_grace_secs,
                inodes_grace_secs,
                enforce_root: root == 1,
            })
        }
        _ => Err(corrupt("quota settings", &quota_settings_key())),
    }
}

// ---- file chunks (data space) ----

pub fn chunk_key(ino: u64, chunk: u64) -> Vec<u8> {
    prefixed(CHUNK, ino, &chunk.to_be_bytes())
}

pub fn chunk_range(ino: u64) -> (Vec<u8>, Vec<u8>) {
    id_range(CHUNK, ino)
}

/// Chunks of `ino` from index `first` on.
pub fn chunk_range_from(ino: u64, first: u64) -> (Vec<u8>, Vec<u8>) {
    (chunk_key(ino, first), id_range(CHUNK, ino).1)
}

pub fn all_chunks_range() -> (Vec<u8>, Vec<u8>) {
    tag_range(CHUNK)
}

/// Splits a chunk key into (ino, chunk index).
pub fn decode_chunk_key(key: &[u8]) -> Result<(u64, u64), FsError> {
    match (key.first(), read_u64(key, 1), read_u64(key, 9), key.len()) {
        (Some(&CHUNK), Some(ino), Some(chunk), 17) => Ok((ino, chunk)),
        _ => Err(corrupt("chunk key", key)),
    }
}

// ---- superblock ----

/// Parameters fixed at mkfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub format_version: u32,
    pub inline_max_bytes: u32,
    pub chunk_bytes: u32,
}

pub fn encode_superblock(superblock: &Superblock) -> Vec<u8> {
    let mut value = superblock.format_version.to_be_bytes().to_vec();
    value.extend_from_slice(&superblock.inline_max_bytes.to_be_bytes());
    value.extend_from_slice(&superblock.chunk_bytes.to_be_bytes());
    value
}

pub fn decode_superblock(value: &[u8]) -> Result<Superblock, FsError> {
    match (read_u32(value, 0), read_u32(value, 4), read_u32(value, 8)) {
        (Some(format_version), Some(inline_max_bytes), Some(chunk_bytes)) => Ok(Superblock {
            format_version,
            inline_max_bytes,
            chunk_bytes,
        }),
        _ => Err(corrupt("superblock", &superblock_key())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A regular file that makes sense: inline, its size is its bytes.
    fn sample_inode(content: Content) -> Inode {
        let (size, allocated_bytes) = match &content {
            Content::Inline(bytes) => (bytes.len() as u64, bytes.len() as u64),
            Content::Chunked => (12345, 4096),
        };
        Inode {
            ino: 0x0102_0304_0506_0708,
            kind: FileKind::Regular,
            perm: 0o4755,
            uid: 1000,
            gid: 100,
            nlink: 3,
            size,
            allocated_bytes,
            atime: Timestamp {
                secs: -5,
                nanos: 999_999_999,
            },
            mtime: Timestamp {
                secs: 1_700_000_000,
                nanos: 1,
            },
            ctime: Timestamp { secs: 0, nanos: 0 },
            rdev: 0,
            parent: 0,
            project: 42,
            content,
            may_have_xattrs: true,
        }
    }

    #[test]
    fn inode_usage_reads_the_header_fields() {
        let inode = sample_inode(Content::Inline(b"abc".to_vec()));
        let (owners, allocated) = decode_inode_usage(inode.ino, &encode_inode(&inode)).unwrap();
        assert_eq!(owners, UsageKey::of(&inode));
        assert_eq!(allocated, inode.allocated_bytes);
        assert!(decode_inode_usage(1, &[INODE_RECORD_VERSION, 1]).is_err());
    }

    #[test]
    fn next_ino_round_trips() {
        assert_eq!(decode_next_ino(&encode_next_ino(1 << 40)).unwrap(), 1 << 40);
        assert!(decode_next_ino(&[1, 2, 3]).is_err());
        assert_eq!(next_ino_key(), b"N");
    }

    #[test]
    fn quota_records_and_settings_round_trip() {
        let record = QuotaRecord {
            limits: QuotaLimits {
                bytes_soft: 1,
                bytes_hard: 2,
                inodes_soft: 3,
                inodes_hard: u64::MAX,
            },
            bytes_grace_ends: Some(-7),
            inodes_grace_ends: None,
        };
        let key = quota_record_key(QuotaKind::Project, 42);
        assert_eq!(
            decode_quota_record_key(&key).unwrap(),
            (QuotaKind::Project, 42)
        );
        assert_eq!(
            decode_quota_record(&key, &encode_quota_record(&record)).unwrap(),
            record
        );
        assert!(decode_quota_record(&key, &[0; 47]).is_err());
        assert!(decode_quota_record_key(&[QUOTA_RECORD, 3, 0, 0, 0, 1]).is_err());
        let settings = QuotaSettings {
            bytes_grace_secs: 5,
            inodes_grace_secs: 6,
            enforce_root: true,
        };
        assert_eq!(
            decode_quota_settings(&encode_quota_settings(&settings)).unwrap(),
            settings
        );
        assert!(decode_quota_settings(&[0; 16]).is_err());
        let (start, end) = all_quota_records_range();
        assert!(start <= key && key < end);
    }

    #[test]
    fn inode_round_trips() {
        for content in [
            Content::Inline(b"hello".to_vec()),
            Content::Inline(vec![]),
            Content::Chunked,
        ] {
            let inode = sample_inode(content);
            let decoded = decode_inode(inode.ino, &encode_inode(&inode)).unwrap();
            assert_eq!(decoded, inode);
        }
    }

    /// The on-disk layout, field by field: each value sits big-endian at its named offset
    /// (a moved field or a changed width fails here, not in a store written by the old
    /// format), and the offsets are the ones of format 2.
    #[test]
    fn inode_fields_sit_at_their_named_offsets() {
        let inode = Inode {
            rdev: 0x0801,
            size: 12345,
            ..sample_inode(Content::Inline(b"xyz".to_vec()))
        };
        let bytes = encode_inode(&inode);
        let at = |offset: usize, width: usize| &bytes[offset..offset + width];
        assert_eq!(at(inode_at::VERSION, 1), [INODE_RECORD_VERSION]);
        assert_eq!(at(inode_at::KIND, 1), [kind_code(FileKind::Regular)]);
        assert_eq!(at(inode_at::PERM, 2), inode.perm.to_be_bytes());
        assert_eq!(at(inode_at::UID, 4), inode.uid.to_be_bytes());
        assert_eq!(at(inode_at::GID, 4), inode.gid.to_be_bytes());
        assert_eq!(at(inode_at::NLINK, 4), inode.nlink.to_be_bytes());
        assert_eq!(at(inode_at::SIZE, 8), inode.size.to_be_bytes());
        assert_eq!(
            at(inode_at::ALLOCATED, 8),
            inode.allocated_bytes.to_be_bytes()
        );
        for (offset, time) in [
            (inode_at::ATIME, inode.atime),
            (inode_at::MTIME, inode.mtime),
            (inode_at::CTIME, inode.ctime),
        ] {
            assert_eq!(at(offset, 8), time.secs.to_be_bytes());
            assert_eq!(at(offset + 8, 4), time.nanos.to_be_bytes());
        }
        assert_eq!(at(inode_at::RDEV, 4), inode.rdev.to_be_bytes());
        assert_eq!(at(inode_at::PARENT, 8), inode.parent.to_be_bytes());
        assert_eq!(at(inode_at::PROJECT, 4), inode.project.to_be_bytes());
        assert_eq!(at(inode_at::FLAGS, 1), [INODE_MAY_HAVE_XATTRS]);
        assert_eq!(&bytes[inode_at::INLINE..], b"xyz");
        assert_eq!(
            (
                inode_at::UID,
                inode_at::ATIME,
                inode_at::PROJECT,
                inode_at::INLINE
            ),
            (4, 32, 80, 85),
            "format 2's offsets"
        );
        let chunked = encode_inode(&sample_inode(Content::Chunked));
        assert_eq!(chunked.len(), INODE_HEADER_BYTES);
        assert_eq!(
            chunked[inode_at::FLAGS],
            INODE_CHUNKED | INODE_MAY_HAVE_XATTRS
        );
    }

    /// Well-shaped records whose fields make no sense are corrupt, each with its reason.
    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "one case per verifier rule, each a record and the reason it must fail with"
    )]
    fn senseless_inodes_are_corrupt() {
        let file = sample_inode(Content::Inline(b"abc".to_vec()));
        let symlink = Inode {
            kind: FileKind::Symlink,
            ..file.clone()
        };
        let directory = Inode {
            kind: FileKind::Directory,
            nlink: 2,
            size: 7,
            allocated_bytes: 0,
            content: Content::Inline(Vec::new()),
            ..file.clone()
        };
        let fifo = Inode {
            kind: FileKind::Fifo,
            ..directory.clone()
        };
        let device = Inode {
            kind: FileKind::BlockDevice,
            size: 0,
            rdev: 0x0801,
            ..directory.clone()
        };
        for sound in [&file, &symlink, &directory, &device] {
            assert_eq!(
                &decode_inode(sound.ino, &encode_inode(sound)).unwrap(),
                sound
            );
        }
        let mut late = file.clone();
        late.mtime.nanos = 1_000_000_000;
        let damaged = [
            (
                "permission bits",
                Inode {
                    perm: 0o17777,
                    ..file.clone()
                },
            ),
            ("nanoseconds", late),
            (
                "device number",
                Inode {
                    rdev: 1,
                    ..file.clone()
                },
            ),
            (
                "device number",
                Inode {
                    rdev: 1,
                    size: 0,
                    ..fifo.clone()
                },
            ),
            (
                "holds 3 bytes",
                Inode {
                    size: 4,
                    ..file.clone()
                },
            ),
            (
                "allocated",
                Inode {
                    allocated_bytes: 0,
                    ..file.clone()
                },
            ),
            (
                "symlink",
                Inode {
                    content: Content::Inline(Vec::new()),
                    size: 0,
                    ..symlink.clone()
                },
            ),
            (
                "symlink",
                Inode {
                    content: Content::Chunked,
                    ..symlink
                },
            ),
            (
                "one link",
                Inode {
                    nlink: 1,
                    ..directory.clone()
                },
            ),
            (
                "directory holding data",
                Inode {
                    content: Content::Chunked,
                    ..directory.clone()
                },
            ),
            (
                "directory holding data",
                Inode {
                    allocated_bytes: 1,
                    ..directory
                },
            ),
            ("Fifo holding data", Inode { size: 1, ..fifo }),
            (
                "BlockDevice holding data",
                Inode {
                    content: Content::Inline(b"x".to_vec()),
                    ..device
                },
            ),
        ];
        for (reason, inode) in damaged {
            match decode_inode(1, &encode_inode(&inode)) {
                Err(FsError::Corrupt(message)) => {
                    assert!(message.contains(reason), "{message:?} for {inode:?}");
                }
                other => panic!("{inode:?} decoded as {other:?}, not corrupt ({reason})"),
            }
        }
    }

    #[test]
    fn truncated_inode_is_corrupt() {
        let bytes = encode_inode(&sample_inode(Content::Chunked));
        assert!(matches!(
            decode_inode(1, &bytes[..20]),
            Err(FsError::Corrupt(_))
        ));
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(
            decode_inode(1, &trailing).is_err(),
            "a chunked record has no inline data"
        );
        let mut wrong_version = bytes.clone();
        wrong_version[0] = 9;
        assert!(decode_inode(1, &wrong_version).is_err());
    }

    #[test]
    fn entries_of_one_directory_are_one_ordered_range() {
        let (start, end) = entry_range(7);
        let a = entry_key(7, b"a");
        let z = entry_key(7, &[0xff; 255]);
        assert!(start <= a && a < z && z < end);
        assert!(entry_key(6, &[0xff; 255]) < start);
        assert!(entry_key(8, b"") >= end);
        assert_eq!(decode_entry_key(&z).unwrap(), (7, &[0xffu8; 255][..]));
        let (after_start, _) = entry_range_after(7, b"a");
        assert!(after_start > a && after_start <= entry_key(7, b"a\0"));
    }

    #[test]
    fn entry_value_round_trips() {
        let value = encode_entry(99, FileKind::Symlink);
        assert_eq!(decode_entry(b"k", &value).unwrap(), (99, FileKind::Symlink));
        assert!(decode_entry(b"k", &value[..8]).is_err());
    }

    #[test]
    fn chunk_keys_sort_by_inode_then_index() {
        assert!(chunk_key(1, 255) < chunk_key(1, 256));
        assert!(chunk_key(1, u64::MAX) < chunk_key(2, 0));
        assert_eq!(decode_chunk_key(&chunk_key(5, 9)).unwrap(), (5, 9));
        let (start, end) = chunk_range_from(5, 3);
        assert!(start == chunk_key(5, 3) && chunk_key(5, u64::MAX) < end);
    }

    #[test]
    fn counters_and_superblock_round_trip() {
        let owners = UsageKey {
            uid: 7,
            gid: 8,
            project: u32::MAX,
        };
        assert_eq!(decode_counter_key(&counter_key(owners)).unwrap(), owners);
        assert!(decode_counter_key(&counter_key(owners)[..12]).is_err());
        let usage = Usage {
            inodes: 3,
            bytes: 1 << 40,
        };
        assert_eq!(decode_usage(b"k", &encode_usage(usage)).unwrap(), usage);
        let superblock = Superblock {
            format_version: 1,
            inline_max_bytes: 4096,
            chunk_bytes: 65536,
        };
        assert_eq!(
            decode_superblock(&encode_superblock(&superblock)).unwrap(),
            superblock
        );
    }

    #[test]
    fn tree_usage_and_link_parents_round_trip() {
        let usage = TreeUsage {
            entries: 1,
            files: 2,
            bytes: 1 << 50,
            rctime: Timestamp { secs: -3, nanos: 7 },
        };
        let key = tree_usage_key(9);
        assert_eq!(decode_tree_usage_key(&key).unwrap(), 9);
        assert_eq!(
            decode_tree_usage(&key, &encode_tree_usage(&usage)).unwrap(),
            usage
        );
        assert!(decode_tree_usage(&key, &encode_tree_usage(&usage)[..35]).is_err());
        let key = link_parent_key(5, 77);
        assert_eq!(decode_link_parent_key(&key).unwrap(), (5, 77));
        let (start, end) = link_parent_range(5);
        assert!(start < key && key < end && link_parent_key(6, 0) >= end);
        assert_eq!(decode_link_count(&key, &encode_link_count(3)).unwrap(), 3);
        assert!(decode_link_count(&key, &encode_link_count(0)).is_err());
    }

    #[test]
    fn id_ranges_at_the_top_of_the_space() {
        let (start, end) = id_range(INODE, u64::MAX);
        assert!(start < end && inode_key(u64::MAX) >= start && inode_key(u64::MAX) < end);
        assert_eq!(
            decode_xattr_key(&xattr_key(4, b"user.a")).unwrap(),
            (4, &b"user.a"[..])
        );
        assert_eq!(decode_orphan_key(&orphan_key(4)).unwrap(), 4);
        assert_eq!(decode_reclaim_key(&reclaim_key(4)).unwrap(), 4);
        assert_eq!(decode_trim_key(&trim_key(4)).unwrap(), 4);
        assert!(decode_trim_key(&orphan_key(4)).is_err());
        assert_eq!(
            decode_trim(&encode_trim(3, u64::MAX)).unwrap(),
            (3, u64::MAX)
        );
        assert!(decode_trim(&encode_trim(3, 4)[..15]).is_err());
        assert!(decode_reclaim_key(&orphan_key(4)).is_err());
        assert_eq!(decode_inode_key(&inode_key(4)).unwrap(), 4);
    }
}
