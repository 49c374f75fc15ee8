//! A store written by the last shoal that wrote format 1 (fixtures/README.md says which
//! commit and how): this shoal opens it, upgrades it on its first read-write open, and
//! finds everything that shoal wrote, fsck clean.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::path::{Path, PathBuf};

use common::*;
use shoal_engine::internals::keys;
use shoal_engine::store_dir;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/format-1-store.tar.zst"
);

/// The fixture's `seq 1 20000`.
fn numbers() -> Vec<u8> {
    (1..=20000)
        .map(|n| format!("{n}\n"))
        .collect::<String>()
        .into_bytes()
}

/// Unpacks the fixture into `into`, modes as the old shoal left them; returns the store.
fn unpack(into: &Path) -> PathBuf {
    let file = std::fs::File::open(FIXTURE).unwrap();
    let mut archive = tar::Archive::new(zstd::Decoder::new(file).unwrap());
    archive.set_preserve_permissions(true);
    archive.unpack(into).unwrap();
    into.join("store")
}

fn walk(fs: &Engine, path: &str) -> Inode {
    path.split('/')
        .fold(fs.getattr(ROOT_INO).unwrap(), |dir, name| {
            fs.lookup(dir.ino, name.as_bytes())
                .unwrap_or_else(|error| panic!("{path}: {name}: {error}"))
        })
}

fn counts(usage: TreeUsage) -> (u64, u64, u64) {
    (usage.entries, usage.files, usage.bytes)
}

/// Everything the old shoal was told to write, read back through this one.
fn expect_fixture_tree(fs: &Engine) {
    let listing = |path: &str| names(fs, walk(fs, path).ino);
    assert_eq!(
        listing("docs"),
        [&b"fifo"[..], b"hello.txt", b"null", b"numbers.txt", b"sub"]
    );
    assert!(listing("empty").is_empty());
    let hello = walk(fs, "docs/hello.txt");
    assert_eq!(read_all(fs, hello.ino), b"hello, format 1\n");
    assert_eq!((hello.nlink, hello.perm, hello.uid), (2, 0o644, 0));
    assert_eq!(
        (hello.mtime.secs, hello.mtime.nanos),
        (981_173_106, 123_456_789)
    );
    assert_eq!(walk(fs, "docs/sub/hardlink").ino, hello.ino);
    assert_eq!(fs.getxattr(hello.ino, b"user.color").unwrap(), b"blue");
    let docs = walk(fs, "docs");
    assert_eq!(fs.getxattr(docs.ino, b"user.dir").unwrap(), b"note");
    let numbers_file = walk(fs, "docs/numbers.txt");
    assert_eq!((numbers_file.perm, numbers_file.size), (0o4755, 108_894));
    assert_eq!(numbers_file.content, Content::Chunked);
    assert_eq!(read_all(fs, numbers_file.ino), numbers());
    let link = walk(fs, "link");
    assert_eq!(link.kind, FileKind::Symlink);
    assert_eq!(fs.readlink(link.ino).unwrap(), b"docs/hello.txt");
    assert_eq!(walk(fs, "docs/fifo").kind, FileKind::Fifo);
    let null = walk(fs, "docs/null");
    // The kernel's encoding of device 1:3.
    assert_eq!((null.kind, null.rdev), (FileKind::CharDevice, 0x103));
    let sub = walk(fs, "docs/sub");
    assert_eq!((sub.perm, sub.uid, sub.gid), (0o750, 1000, 1000));
}

#[test]
fn a_store_written_in_format_1_opens_upgraded_with_everything_in_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = unpack(tmp.path());
    assert_eq!(store_dir::read_format(&store).unwrap(), 1);
    let report = fsck_store_dir(&store).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("format version 1")),
        "{}",
        report.summary()
    );
    let read_only = EngineConfig {
        read_only: true,
        ..no_thread()
    };
    let refused = open_err(&store, read_only).to_string();
    assert!(refused.contains("open it read-write once"), "{refused}");

    let fs = Engine::open(&store, no_thread()).unwrap();
    assert_eq!(fs.superblock().format_version, keys::FORMAT_VERSION);
    // The old shoal made its files under umask 022: the upgrade makes them private, as
    // today's mkfs does.
    let exposed = store_dir::access::exposure(&store, 10).unwrap();
    assert!(exposed.is_empty(), "after the upgrade: {exposed:?}");
    expect_fixture_tree(&fs);
    // Recursive usage, which format 1 did not keep, computed by the upgrade. Symlinks
    // are names, not files; the hard link counts once per name.
    let docs = walk(&fs, "docs");
    assert_eq!(counts(fs.tree_usage(ROOT_INO).unwrap()), (9, 3, 108_926));
    assert_eq!(counts(fs.tree_usage(docs.ino).unwrap()), (6, 3, 108_926));
    assert_consistent(&fs, &[]);
    drop(fs);
    assert_eq!(
        std::fs::read_to_string(store.join("FORMAT")).unwrap(),
        format!("shoal-store {}\n", keys::FORMAT_VERSION)
    );
    assert_fsck_clean(&store);

    // Upgraded links work as if written by format 2: the second name goes, the file
    // stays with its one parent, and a write reaches its directory.
    let fs = Engine::open(&store, no_thread()).unwrap();
    expect_fixture_tree(&fs);
    let sub = walk(&fs, "docs/sub");
    fs.unlink(sub.ino, b"hardlink").unwrap();
    let hello = walk(&fs, "docs/hello.txt");
    fs.write(hello.ino, 16, b"xyz").unwrap();
    assert_eq!(counts(fs.tree_usage(docs.ino).unwrap()), (5, 2, 108_913));
    assert_consistent(&fs, &[]);
    drop(fs);
    assert_fsck_clean(&store);
}
