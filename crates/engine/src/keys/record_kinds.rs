//! The one table of record kinds: every kind of record the store holds, where it lives,
//! what fsck calls it and how a record of it decodes. fsck's repair drops what does not
//! decode by it, salvage names damaged keys by it, and the decoder fuzz test feeds every
//! decoder through it, so a new kind of record is added here once.

use super::*;

/// One kind of record.
pub struct RecordKind {
    /// What a report calls one record of this kind.
    pub name: &'static str,
    pub space: Space,
    /// The first byte of every key of this kind.
    pub tag: u8,
    /// Decodes a record's key and value with every decoder that reads this kind.
    pub decode: fn(&[u8], &[u8]) -> Result<(), FsError>,
    /// The inode (for an entry, the directory) the key is about, if it names one.
    pub ino: fn(&[u8]) -> Option<u64>,
    /// Whether `fsck --repair` drops a record of this kind that does not decode. The
    /// superblock, the next inode number and the quota settings are single records that
    /// repair rewrites instead.
    pub dropped_when_undecodable: bool,
}

impl RecordKind {
    /// Every key of this kind.
    pub fn range(&self) -> (Vec<u8>, Vec<u8>) {
        tag_range(self.tag)
    }
}

/// The kind of the record at `key` in `space`, if the format has one.
pub fn record_kind(space: Space, key: &[u8]) -> Option<&'static RecordKind> {
    let tag = *key.first()?;
    RECORD_KINDS
        .iter()
        .find(|kind| kind.space == space && kind.tag == tag)
}

const fn kind(
    name: &'static str,
    space: Space,
    tag: u8,
    decode: fn(&[u8], &[u8]) -> Result<(), FsError>,
    ino: fn(&[u8]) -> Option<u64>,
) -> RecordKind {
    RecordKind {
        name,
        space,
        tag,
        decode,
        ino,
        dropped_when_undecodable: true,
    }
}

const fn single(
    name: &'static str,
    tag: u8,
    decode: fn(&[u8], &[u8]) -> Result<(), FsError>,
) -> RecordKind {
    RecordKind {
        name,
        space: Space::Meta,
        tag,
        decode,
        ino: |_| None,
        dropped_when_undecodable: false,
    }
}

/// Every kind of record, in the order `keys.rs` documents them.
pub const RECORD_KINDS: &[RecordKind] = &[
    single("superblock", SUPERBLOCK, |_, v| {
        decode_superblock(v).map(drop)
    }),
    kind(
        "entry",
        Space::Meta,
        ENTRY,
        |k, v| {
            decode_entry_key(k)?;
            decode_entry(k, v).map(drop)
        },
        |k| decode_entry_key(k).ok().map(|(parent, _)| parent),
    ),
    kind(
        "inode",
        Space::Meta,
        INODE,
        |k, v| {
            let ino = decode_inode_key(k)?;
            decode_inode(ino, v)?;
            decode_inode_usage(ino, v).map(drop)
        },
        |k| decode_inode_key(k).ok(),
    ),
    kind(
        "xattr",
        Space::Meta,
        XATTR,
        |k, _| decode_xattr_key(k).map(drop),
        |k| decode_xattr_key(k).ok().map(|(ino, _)| ino),
    ),
    kind(
        "orphan marker",
        Space::Meta,
        ORPHAN,
        |k, _| decode_orphan_key(k).map(drop),
        |k| decode_orphan_key(k).ok(),
    ),
    kind(
        "usage counter",
        Space::Meta,
        COUNTER,
        |k, v| {
            decode_counter_key(k)?;
            decode_usage(k, v).map(drop)
        },
        |_| None,
    ),
    kind(
        "quota record",
        Space::Meta,
        QUOTA_RECORD,
        |k, v| {
            decode_quota_record_key(k)?;
            decode_quota_record(k, v).map(drop)
        },
        |_| None,
    ),
    single("quota settings", QUOTA_SETTINGS, |_, v| {
        decode_quota_settings(v).map(drop)
    }),
    single("next inode number", NEXT_INO, |_, v| {
        decode_next_ino(v).map(drop)
    }),
    kind(
        "tree usage",
        Space::Meta,
        TREE_USAGE,
        |k, v| {
            decode_tree_usage_key(k)?;
            decode_tree_usage(k, v).map(drop)
        },
        |k| decode_tree_usage_key(k).ok(),
    ),
    kind(
        "link parent",
        Space::Meta,
        LINK_PARENT,
        |k, v| {
            decode_link_parent_key(k)?;
            decode_link_count(k, v).map(drop)
        },
        |k| decode_link_parent_key(k).ok().map(|(ino, _)| ino),
    ),
    kind(
        "reclaim record",
        Space::Meta,
        RECLAIM,
        |k, _| decode_reclaim_key(k).map(drop),
        |k| decode_reclaim_key(k).ok(),
    ),
    kind(
        "trim record",
        Space::Meta,
        TRIM,
        |k, v| {
            decode_trim_key(k)?;
            decode_trim(v).map(drop)
        },
        |k| decode_trim_key(k).ok(),
    ),
    kind(
        "chunk",
        Space::Data,
        CHUNK,
        |k, _| decode_chunk_key(k).map(drop),
        |k| decode_chunk_key(k).ok().map(|(ino, _)| ino),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_space_and_tag_names_one_kind() {
        for (index, kind) in RECORD_KINDS.iter().enumerate() {
            let same = RECORD_KINDS[index + 1..]
                .iter()
                .find(|other| (other.space, other.tag) == (kind.space, kind.tag));
            assert!(same.is_none(), "{} and another kind share a tag", kind.name);
        }
    }

    #[test]
    fn single_records_have_single_keys() {
        for (key, name) in [
            (superblock_key(), "superblock"),
            (next_ino_key(), "next inode number"),
            (quota_settings_key(), "quota settings"),
        ] {
            let kind = record_kind(Space::Meta, &key).map(|kind| kind.name);
            assert_eq!(kind, Some(name));
            assert_eq!(key.len(), 1);
        }
    }
}
