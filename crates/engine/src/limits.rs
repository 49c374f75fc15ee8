//! The limits of what a store holds, in one place: names, symlink targets, extended
//! attributes, file sizes, and the inline threshold and chunk size of new stores. The
//! assertions below check at compile time how they relate; the store checks that the
//! largest key and value (`keys::MAX_KEY_BYTES`, `keys::MAX_VALUE_BYTES`) fit what it
//! accepts.

/// Longest name in a directory (NAME_MAX).
pub const NAME_MAX_BYTES: usize = 255;
/// Longest symlink target (PATH_MAX less its terminating zero).
pub const SYMLINK_MAX_BYTES: usize = 4095;
/// Longest extended attribute name (XATTR_NAME_MAX).
pub const XATTR_NAME_MAX_BYTES: usize = 255;
/// Largest extended attribute value (XATTR_SIZE_MAX).
pub const XATTR_VALUE_MAX_BYTES: usize = 64 * 1024;
/// Largest file size we accept (as ext4 with 4 KiB blocks).
pub const MAX_FILE_BYTES: u64 = 16 << 40;
/// Files up to this size keep their bytes in the inode record (new stores; the
/// superblock records what a store was made with).
pub const DEFAULT_INLINE_MAX_BYTES: u32 = 4096;
/// Larger files are split into chunks of this size (new stores; in the superblock too).
pub const DEFAULT_CHUNK_BYTES: u32 = 64 * 1024;
/// Most bytes one `copy_range` call copies: a request is answered in tens of milliseconds
/// at most, and copy_file_range's callers loop over short copies.
pub const COPY_RANGE_MAX_BYTES: u64 = 64 << 20;
/// Bytes read and written per step of a copy (one write batch each).
pub const COPY_RANGE_PIECE_BYTES: u64 = 1 << 20;

// Chunk arithmetic (`offset / chunk`, `offset % chunk`) and the chunk keys assume a power
// of two; a file's last chunk ends at the size limit, and a copy moves whole chunks per
// step, so its steps never write part of a chunk they do not end in.
const _: () = assert!(DEFAULT_CHUNK_BYTES.is_power_of_two());
const _: () = assert!(MAX_FILE_BYTES.is_multiple_of(DEFAULT_CHUNK_BYTES as u64));
const _: () = assert!(COPY_RANGE_PIECE_BYTES.is_multiple_of(DEFAULT_CHUNK_BYTES as u64));
const _: () = assert!(COPY_RANGE_MAX_BYTES.is_multiple_of(COPY_RANGE_PIECE_BYTES));
// The FUSE reply to copy_file_range carries the bytes copied in a u32.
const _: () = assert!(COPY_RANGE_MAX_BYTES <= u32::MAX as u64);
// Inline data moves into the first chunk when a file outgrows it, and a symlink's target
// is kept inline whatever the threshold.
const _: () = assert!(DEFAULT_INLINE_MAX_BYTES <= DEFAULT_CHUNK_BYTES);
const _: () = assert!(SYMLINK_MAX_BYTES < 4096);
// statfs reports the name limit in a u32 (`f_namemax`).
const _: () = assert!(NAME_MAX_BYTES <= u32::MAX as usize);
