// Added for shoal (see README.vendor.md): reading a tree's files directly, without
// opening the tree, to salvage what reads back from a damaged one.

//! Raw, read-only access to a tree's files for salvaging a damaged tree: the version
//! file's lists of tables and blob files, a table's data blocks one by one (a table cut
//! short or with damaged blocks still yields its intact blocks), and single blobs.
//!
//! Nothing here trusts an index or a trailer: a table's data blocks start at offset 0
//! and follow each other, each with a header holding its length and checksums, so they
//! are found by walking the headers; a damaged header is skipped by searching for the
//! next block's magic bytes (a false match fails the header checksum).

use crate::{
    blob_tree::handle::BlobIndirection,
    coding::Decode,
    file::{CURRENT_VERSION_FILE, MAGIC_BYTES},
    table::{
        block::{BlockType, Header},
        block::decoder::ParsedItem,
        Block, DataBlock,
    },
    vlog::blob_file::writer::{BLOB_HEADER_LEN, BLOB_HEADER_MAGIC},
    vlog::BlobFileId,
    Checksum, InternalValue, SeqNo, Slice, TableId, UserValue,
};
use byteorder::{LittleEndian, ReadBytesExt};
use std::{io::Read, path::Path};

/// The name of the file naming a tree's current version.
pub const CURRENT_FILE: &str = CURRENT_VERSION_FILE;

/// What `current` says: the current version's id and its file's checksum.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct CurrentVersion {
    /// The version's id: its file is `v{id}`.
    pub id: u64,
    /// The xxh3-128 of the version file's bytes.
    pub checksum: Checksum,
}

/// Reads `folder`'s `current` file (version id u64, xxh3-128 of the version file u128,
/// checksum type u8 = 0; little-endian).
pub fn read_current(folder: &Path) -> crate::Result<CurrentVersion> {
    let bytes = std::fs::read(folder.join(CURRENT_VERSION_FILE))?;
    let mut reader = &bytes[..];
    let id = reader.read_u64::<LittleEndian>()?;
    let checksum = Checksum::from_raw(reader.read_u128::<LittleEndian>()?);
    let checksum_type = reader.read_u8()?;
    if checksum_type != 0 || !reader.is_empty() {
        return Err(crate::Error::InvalidHeader("current"));
    }
    Ok(CurrentVersion { id, checksum })
}

/// The checksum `current` records for a version file with these bytes.
#[must_use]
pub fn version_checksum(bytes: &[u8]) -> Checksum {
    Checksum::from_raw(crate::hash::hash128(bytes))
}

/// The files one version of a tree is made of.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct VersionFiles {
    /// Every table of every level and run: (table id, global sequence number).
    pub tables: Vec<(TableId, SeqNo)>,
    /// Every blob file's id.
    pub blob_files: Vec<BlobFileId>,
}

/// Reads version file `v{id}` of `folder`.
pub fn read_version(folder: &Path, id: u64) -> crate::Result<VersionFiles> {
    let recovery = crate::version::recovery::recover_version(folder, id)?;
    Ok(VersionFiles {
        tables: recovery
            .table_ids
            .iter()
            .flatten()
            .flatten()
            .map(|table| (table.id, table.global_seqno))
            .collect(),
        blob_files: recovery.blob_file_ids.iter().map(|(id, _)| *id).collect(),
    })
}

/// A stretch of a table file that did not read as data blocks.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct DamagedStretch {
    /// Byte offset of the first unreadable byte.
    pub offset: u64,
    /// The last key read before it and the first key read after it, in this table.
    pub key_before: Option<Slice>,
    /// The first key read after it (`None`: none was).
    pub key_after: Option<Slice>,
    /// Why it did not read.
    pub error: String,
}

/// What walking a table's data blocks found.
#[derive(Debug, Default)]
pub struct TableBlocks {
    /// Data blocks that read back.
    pub blocks_read: usize,
    /// The stretches that did not, in file order.
    pub damaged: Vec<DamagedStretch>,
}

/// Visits every record of every data block of a table file's `bytes` that reads back,
/// in file order, with `global_seqno` added to each sequence number. Damaged blocks are
/// skipped and listed; a table cut short yields the blocks before the cut.
pub fn read_table_blocks(
    bytes: &[u8],
    global_seqno: SeqNo,
    visit: &mut dyn FnMut(InternalValue),
) -> TableBlocks {
    let mut found = TableBlocks::default();
    let mut position = 0usize;
    let mut last_key: Option<Slice> = None;
    let mut open_damage: Option<DamagedStretch> = None;
    while position < bytes.len() {
        match read_data_block(bytes, position) {
            BlockRead::Data { block, next } => {
                for item in block.iter() {
                    let mut value = item.materialize(&block.inner.data);
                    value.key.seqno += global_seqno;
                    if let Some(mut damage) = open_damage.take() {
                        damage.key_after = Some(value.key.user_key.clone());
                        found.damaged.push(damage);
                    }
                    last_key = Some(value.key.user_key.clone());
                    visit(value);
                }
                found.blocks_read += 1;
                position = next;
            }
            // The index, filter and metadata regions follow the last data block.
            BlockRead::EndOfData => break,
            BlockRead::Damaged { error, resume } => {
                open_damage.get_or_insert(DamagedStretch {
                    offset: position as u64,
                    key_before: last_key.clone(),
                    key_after: None,
                    error,
                });
                match resume {
                    Some(next) => position = next,
                    None => break,
                }
            }
        }
    }
    found.damaged.extend(open_damage);
    found
}

enum BlockRead {
    Data { block: DataBlock, next: usize },
    EndOfData,
    /// `resume`: where the next block may start (`None`: nowhere).
    Damaged { error: String, resume: Option<usize> },
}

/// The data block whose header starts at `position` of `bytes`.
fn read_data_block(bytes: &[u8], position: usize) -> BlockRead {
    let header_end = position + Header::serialized_len();
    let Some(mut header_bytes) = bytes.get(position..header_end) else {
        return BlockRead::Damaged {
            error: "the file ends inside a block header".into(),
            resume: None,
        };
    };
    let header = match Header::decode_from(&mut header_bytes) {
        Ok(header) => header,
        Err(error) => {
            return BlockRead::Damaged {
                error: format!("a damaged block header ({error})"),
                resume: next_magic(bytes, position + 1),
            }
        }
    };
    if header.block_type != BlockType::Data {
        return BlockRead::EndOfData;
    }
    let data_end = header_end + header.data_length as usize;
    let Some(raw) = bytes.get(header_end..data_end) else {
        return BlockRead::Damaged {
            error: "the file ends inside a data block".into(),
            resume: None,
        };
    };
    // The header is intact, so the next block starts right after this one.
    let damaged = |error: String| BlockRead::Damaged {
        error,
        resume: Some(data_end),
    };
    if Checksum::from_raw(crate::hash::hash128(raw)) != header.checksum {
        return damaged("a data block fails its checksum".into());
    }
    match decompress(raw, header.uncompressed_length) {
        Ok(data) => BlockRead::Data {
            block: DataBlock::new(Block { header, data }),
            next: data_end,
        },
        Err(error) => damaged(error),
    }
}

/// A block's or blob's bytes as written: the table's compression is recorded in its
/// metadata, which may be lost, so it is told from the lengths (lz4 never yields
/// exactly the input's length back for data it compressed).
fn decompress(raw: &[u8], uncompressed_length: u32) -> Result<Slice, String> {
    if raw.len() == uncompressed_length as usize {
        return Ok(Slice::from(raw));
    }
    decompress_lz4(raw, uncompressed_length)
}

#[cfg(feature = "lz4")]
fn decompress_lz4(raw: &[u8], uncompressed_length: u32) -> Result<Slice, String> {
    let data = lz4_flex::decompress(raw, uncompressed_length as usize)
        .map_err(|error| format!("a block does not decompress ({error})"))?;
    if data.len() != uncompressed_length as usize {
        return Err("a block decompresses to the wrong length".into());
    }
    Ok(Slice::from(data))
}

#[cfg(not(feature = "lz4"))]
fn decompress_lz4(_: &[u8], _: u32) -> Result<Slice, String> {
    Err("a block is compressed, and lz4 is not built in".into())
}

/// The first offset at or after `from` where the block magic bytes start.
fn next_magic(bytes: &[u8], from: usize) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(MAGIC_BYTES.len())
        .position(|window| window == MAGIC_BYTES)
        .map(|offset| from + offset)
}

/// The blob file an indirection (the value of a record of type `Indirection`) points into.
pub fn blob_file_of(indirection: &[u8]) -> crate::Result<BlobFileId> {
    Ok(BlobIndirection::decode_from(&mut &indirection[..])?.vhandle.blob_file_id)
}

/// The value `indirection` points to in `blob_file`, checked against its checksum and
/// `key`; a blob file cut short fails with `UnexpectedEof`.
pub fn read_blob(
    blob_file: &std::fs::File,
    key: &[u8],
    indirection: &[u8],
) -> crate::Result<UserValue> {
    let handle = BlobIndirection::decode_from(&mut &indirection[..])?.vhandle;
    let length = BLOB_HEADER_LEN + key.len() + handle.on_disk_size as usize;
    let bytes = crate::file::read_exact(blob_file, handle.offset, length)?;
    let mut reader = &bytes[..];
    let mut magic = [0u8; 4];
    reader.read_exact(&mut magic)?;
    if magic != BLOB_HEADER_MAGIC {
        return Err(crate::Error::InvalidHeader("Blob"));
    }
    let expected = Checksum::from_raw(reader.read_u128::<LittleEndian>()?);
    let _seqno = reader.read_u64::<LittleEndian>()?;
    let key_length = reader.read_u16::<LittleEndian>()? as usize;
    let value_length = reader.read_u32::<LittleEndian>()?;
    let on_disk_length = reader.read_u32::<LittleEndian>()? as usize;
    if key_length != key.len() || on_disk_length != handle.on_disk_size as usize {
        return Err(crate::Error::InvalidHeader("Blob"));
    }
    let (stored_key, raw) = reader.split_at(key_length);
    let got = {
        let mut hasher = xxhash_rust::xxh3::Xxh3::default();
        hasher.update(stored_key);
        hasher.update(raw);
        Checksum::from_raw(hasher.digest128())
    };
    got.check(expected)?;
    if stored_key != key {
        return Err(crate::Error::InvalidHeader("Blob"));
    }
    decompress(raw, value_length)
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidData, error).into())
}
