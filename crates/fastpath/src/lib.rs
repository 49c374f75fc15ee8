//! The fast path's wire format: what a process under `shoal run` (the preload library)
//! asks the daemon that serves a mount, and what it gets back, without the kernel's FUSE
//! round trip.
//!
//! One connection per client thread: a Unix SOCK_SEQPACKET socket on the abstract address
//! [`socket_name`] of the mount's device number, one request message answered by one reply
//! message. The daemon learns who
//! is calling from the socket (SO_PEERCRED, SO_PEERGROUPS), never from a message.
//!
//! Encoding: little-endian integers and length-prefixed byte strings, no padding, in the
//! order each variant lists them. Every length is checked against the message before it is
//! read, so a hostile message gets [`WireError`], never a panic.
//!
//! Both sides depend on this crate and on nothing of each other: the preload library
//! (client) links no engine, the daemon's server links no interception code.

// Unsafe code only in `shared` (the mapping), `futex`, `state` (its mapping) and
// `fd_passing` (SCM_RIGHTS).
#![deny(unsafe_code)]

mod codec;
pub mod fd_passing;
pub mod futex;
mod message;
pub mod pace;
pub mod shared;
pub mod state;
pub mod syscall_names;

pub use codec::{Decoder, Encoder, WireError};
pub use message::{
    encode_page, At, Attr, Cookie, DirBelow, DirEntryWire, EntryName, Hello, Opened, Reply,
    Request, SetAttrWire, Status, Target, TimeWire, Walk, BELOW_MAX, DIR_BELOW_EXTRA_BYTES,
    ENTRIES_HEADER_BYTES, OPENED_DIR_EXTRA_BYTES,
};

/// Bumped on any change of the messages or of the shared channel's layout; a client and a
/// daemon that differ fall back to the kernel (the client says so in its statistics).
pub const PROTOCOL_VERSION: u32 = 14;

/// Largest message either side sends or accepts (a write's data plus its header).
pub const MAX_MESSAGE_BYTES: usize = MAX_IO_BYTES + 4096;

/// Most bytes one read or write request carries; larger calls are split by the client, as
/// the kernel splits them into FUSE requests of at most max_write. A message must fit the
/// socket's default send buffer (net.core.wmem_default, 208 KiB), which only
/// CAP_NET_ADMIN may raise.
pub const MAX_IO_BYTES: usize = 128 * 1024;
/// The most file bytes an open's answer carries (`Request::Open::read_ahead`).
pub const MAX_READ_AHEAD_BYTES: usize = 64 * 1024;

/// Longest path a request carries (PATH_MAX, terminating NUL included).
pub const PATH_MAX_BYTES: usize = 4096;
/// Longest name of a directory entry (NAME_MAX).
pub const NAME_MAX_BYTES: usize = 255;

/// Inodes one walk's witness names at most (`Reply::Exists`); a longer walk gives none.
pub const WITNESS_MAX: usize = 16;

/// Directory entries one `ReadDir` reply carries at most.
pub const READDIR_BATCH_ENTRIES: u32 = 512;

/// The abstract Unix socket (no leading NUL here) where the daemon serving the mount with
/// device number `major:minor` listens: a client finds it from /proc/self/mountinfo alone,
/// and checks that the peer is the mount's owner (`user_id=`) before it trusts it.
pub fn socket_name(major: u32, minor: u32) -> String {
    format!("shoal-fastpath-{major}:{minor}")
}
