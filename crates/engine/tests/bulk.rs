//! Bulk loading in the engine (what `shoal import` runs on): a tree built in batches under
//! a directory with no name is invisible and left alone by the reclaimer, appears with all
//! its usage in one batch, and an abandoned one is deleted like a detached tree.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::time::Duration;

use common::*;
use shoal_engine::{BulkAttrs, BulkOp, NodeRef, Timestamp};

fn attrs(perm: u16, uid: u32) -> BulkAttrs {
    let at = Timestamp {
        secs: 1_600_000_000,
        nanos: 123_456_789,
    };
    BulkAttrs {
        perm,
        uid,
        gid: uid,
        atime: at,
        mtime: at,
    }
}

fn make(parent: NodeRef, name: &[u8], kind: FileKind, perm: u16) -> BulkOp {
    BulkOp::Make {
        parent,
        name: name.to_vec(),
        kind,
        rdev: 0,
        target: Vec::new(),
        attrs: attrs(perm, 1000),
    }
}

/// `dir/` with `file` (100 KiB, written in two pieces, one per batch), a hard link to it
/// from the root, and an xattr; returns the staged root.
fn stage(fs: &Engine) -> u64 {
    let root = fs.stage_tree(ROOT_INO, &attrs(0o750, 0)).unwrap();
    let first = vec![
        make(NodeRef::Ino(root), b"dir", FileKind::Directory, 0o700),
        make(NodeRef::New(0), b"file", FileKind::Regular, 0o4755),
        BulkOp::Write {
            file: NodeRef::New(1),
            offset: 0,
            data: vec![1u8; 60_000].into(),
        },
    ];
    let made = fs.apply(first).unwrap();
    let (dir, file) = (made[0], made[1]);
    let second = vec![
        BulkOp::Write {
            file: NodeRef::Ino(file),
            offset: 60_000,
            data: vec![2u8; 42_400].into(),
        },
        BulkOp::Link {
            parent: NodeRef::Ino(root),
            name: b"link".to_vec(),
            target_dir: NodeRef::Ino(dir),
            target_name: b"file".to_vec(),
        },
        BulkOp::Xattr {
            node: NodeRef::Ino(file),
            name: b"user.k".to_vec(),
            value: b"v".to_vec(),
        },
        BulkOp::Attrs {
            node: NodeRef::Ino(dir),
            attrs: attrs(0o711, 1000),
        },
    ];
    fs.apply(second).unwrap();
    root
}

#[test]
fn a_staged_tree_is_invisible_until_attached_with_its_usage() {
    let fs = memory();
    let before = fs.tree_usage(ROOT_INO).unwrap();
    let root = stage(&fs);
    // Invisible, not counted by the root, and not reclaimed while held.
    assert_eq!(fs.readdir(ROOT_INO, None, 10).unwrap(), vec![]);
    assert_eq!(fs.tree_usage(ROOT_INO).unwrap().entries, before.entries);
    assert_eq!(fs.reclaim_backlog().unwrap().trees, 0);
    std::thread::sleep(Duration::from_millis(50));
    assert!(fs.getattr(root).is_ok());

    fs.attach_tree(root, ROOT_INO, b"imported").unwrap();
    let imported = fs.lookup(ROOT_INO, b"imported").unwrap();
    assert_eq!(
        (imported.ino, imported.perm, imported.parent),
        (root, 0o750, ROOT_INO)
    );
    let dir = fs.lookup(root, b"dir").unwrap();
    assert_eq!(
        (dir.perm, dir.uid, dir.mtime.nanos),
        (0o711, 1000, 123_456_789)
    );
    let file = fs.lookup(dir.ino, b"file").unwrap();
    assert_eq!((file.perm, file.nlink, file.size), (0o4755, 2, 102_400));
    assert_eq!(file.mtime.secs, 1_600_000_000);
    assert_eq!(fs.lookup(root, b"link").unwrap().ino, file.ino);
    assert_eq!(fs.getxattr(file.ino, b"user.k").unwrap(), b"v");
    let data = read_all(&fs, file.ino);
    assert_eq!(&data[59_999..60_001], &[1, 2]);
    let usage = fs.tree_usage(ROOT_INO).unwrap();
    // imported, dir, file, link.
    assert_eq!(usage.entries, before.entries + 4);
    assert_eq!(usage.bytes, before.bytes + 2 * 102_400);
    // The name is taken: attaching again fails.
    assert_err!(
        fs.attach_tree(root, ROOT_INO, b"other"),
        FsError::Invalid(_)
    );
    assert_consistent(&fs, &[]);
}

#[test]
fn an_abandoned_tree_is_deleted_by_the_reclaimer() {
    let fs = memory();
    let inodes = fs.usage(UsageOwner::Total).unwrap().inodes;
    let root = stage(&fs);
    assert!(fs.usage(UsageOwner::Total).unwrap().inodes > inodes);
    // A failed operation fails its whole batch, saying which one.
    let bad = vec![
        make(NodeRef::Ino(root), b"fine", FileKind::Regular, 0o644),
        make(NodeRef::Ino(root), b"a/b", FileKind::Regular, 0o644),
    ];
    let failure = fs.apply(bad).unwrap_err();
    assert_eq!(failure.op, 1);
    fs.engine.abandon_tree(root);
    let done = (0..6000).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        fs.getattr(root).is_err() && fs.reclaim_backlog().unwrap().trees == 0
    });
    assert!(done, "the abandoned tree was not deleted");
    assert_eq!(fs.usage(UsageOwner::Total).unwrap().inodes, inodes);
    assert_consistent(&fs, &[]);
}

fn write(file: NodeRef, offset: u64, data: Vec<u8>) -> BulkOp {
    BulkOp::Write {
        file,
        offset,
        data: data.into(),
    }
}

/// Names made twice replace the first (as `tar xf` does with a repeated member), whether
/// their directory was made by the same batch (looked up in the batch only), by an
/// earlier one, or made again by this batch and kept (its names are in the store).
#[test]
fn repeated_names_replace_the_first_in_new_and_kept_directories() {
    let fs = disk();
    let root = fs.stage_tree(ROOT_INO, &attrs(0o755, 0)).unwrap();
    let first = vec![
        make(NodeRef::Ino(root), b"kept", FileKind::Directory, 0o755),
        make(NodeRef::New(0), b"twice", FileKind::Regular, 0o644),
        write(NodeRef::New(1), 0, b"old".to_vec()),
        make(NodeRef::Ino(root), b"fresh", FileKind::Directory, 0o755),
        make(NodeRef::New(3), b"twice", FileKind::Regular, 0o644),
        write(NodeRef::New(4), 0, b"first".to_vec()),
        BulkOp::Make {
            parent: NodeRef::New(3),
            name: b"twice".to_vec(),
            kind: FileKind::Symlink,
            rdev: 0,
            target: b"second".to_vec(),
            attrs: attrs(0o777, 1000),
        },
    ];
    let made = fs.apply(first).unwrap();
    let (kept, fresh) = (made[0], made[3]);
    // A new batch: `kept` is made again (and kept), and `twice` in it made again.
    let second = vec![
        make(NodeRef::Ino(root), b"kept", FileKind::Directory, 0o700),
        make(NodeRef::New(0), b"twice", FileKind::Regular, 0o600),
        write(NodeRef::New(1), 0, b"new".to_vec()),
        make(NodeRef::Ino(fresh), b"twice", FileKind::Regular, 0o644),
    ];
    let made = fs.apply(second).unwrap();
    assert_eq!(made[0], kept);
    fs.attach_tree(root, ROOT_INO, b"t").unwrap();
    assert_eq!(names(&fs, kept), vec![b"twice".to_vec()]);
    let twice = fs.lookup(kept, b"twice").unwrap();
    assert_eq!((twice.perm, twice.size), (0o600, 3));
    assert_eq!(read_all(&fs, twice.ino), b"new");
    assert_eq!(fs.lookup(kept, b"twice").unwrap().ino, made[1]);
    // The symlink replaced the first file, and a regular file in a later batch replaced it.
    assert_eq!(names(&fs, fresh), vec![b"twice".to_vec()]);
    let last = fs.lookup(fresh, b"twice").unwrap();
    assert_eq!(
        (last.ino, last.kind, last.size),
        (made[3], FileKind::Regular, 0)
    );
    assert_eq!(fs.tree_usage(root).unwrap().entries, 4);
    assert_consistent(&fs, &[]);
    let closed = fs.close();
    assert_fsck_clean(&closed.store);
}

/// File data in pieces of the chunk size lands as whole chunks; other pieces (short,
/// unaligned, overwriting, past a hole) are merged into chunks as a write would.
#[test]
fn file_pieces_of_any_shape_read_back_and_count_their_bytes() {
    let fs = disk();
    let piece = fs.bulk_piece_bytes();
    let root = fs.stage_tree(ROOT_INO, &attrs(0o755, 0)).unwrap();
    let bytes = |seed: u8, len: usize| -> Vec<u8> {
        (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
    };
    let mut expected = bytes(1, 2 * piece + 10);
    let mut ops = vec![
        make(NodeRef::Ino(root), b"aligned", FileKind::Regular, 0o644),
        write(NodeRef::New(0), 0, bytes(1, piece)),
        write(
            NodeRef::New(0),
            piece as u64,
            bytes(1u8.wrapping_add(piece as u8), piece),
        ),
        write(
            NodeRef::New(0),
            2 * piece as u64,
            expected[2 * piece..].to_vec(),
        ),
        make(NodeRef::Ino(root), b"small", FileKind::Regular, 0o644),
        write(NodeRef::New(4), 0, b"tiny".to_vec()),
        make(NodeRef::Ino(root), b"odd", FileKind::Regular, 0o644),
        write(NodeRef::New(6), 0, bytes(7, 1000)),
        write(NodeRef::New(6), 1000, bytes(8, piece)),
        write(NodeRef::New(6), 500, bytes(9, 100)),
        write(NodeRef::New(6), 3 * piece as u64, bytes(10, 5)),
    ];
    // Overwrite the aligned file's second chunk in part, in the same batch.
    ops.push(write(NodeRef::New(0), piece as u64 + 3, bytes(11, 4)));
    expected[piece + 3..piece + 7].copy_from_slice(&bytes(11, 4));
    let made = fs.apply(ops).unwrap();
    fs.attach_tree(root, ROOT_INO, b"t").unwrap();
    assert_eq!(read_all(&fs, made[0]), expected);
    assert_eq!(read_all(&fs, made[4]), b"tiny");
    let mut odd = bytes(7, 1000);
    odd.extend_from_slice(&bytes(8, piece));
    odd[500..600].copy_from_slice(&bytes(9, 100));
    odd.resize(3 * piece, 0);
    odd.extend_from_slice(&bytes(10, 5));
    assert_eq!(read_all(&fs, made[6]), odd);
    let usage = fs.tree_usage(root).unwrap();
    assert_eq!(usage.bytes, (expected.len() + 4 + odd.len()) as u64);
    assert_consistent(&fs, &[]);
    let closed = fs.close();
    assert_fsck_clean(&closed.store);
}
