//! `shoal fsck --repair` on stores damaged in specific ways, through the key-value store
//! underneath (as a bad block or a bug would leave them): repair keeps what reads,
//! reconnects what lost its name into /lost+found, rewrites counters and recursive usage,
//! says what it changed, and leaves a store that fsck finds clean and that mounts.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{shoal, Mounted};
use shoal_engine::internals::keys;
use shoal_engine::internals::store::{Batch, FjallStore, Space, Store};
use shoal_engine::FjallTuning;
use shoal_engine::{Engine, EngineConfig, ROOT_INO};

/// Inode numbers of `names` (paths below the root), read through the engine.
fn inos(store: &Path, names: &[&str]) -> Vec<u64> {
    let engine = Engine::open(store, EngineConfig::default()).unwrap();
    let found = names
        .iter()
        .map(|path| {
            path.split('/').fold(ROOT_INO, |dir, name| {
                engine.lookup(dir, name.as_bytes()).unwrap().ino
            })
        })
        .collect();
    drop(engine);
    found
}

/// Applies `damage` to the store's key-value store directly, durably.
fn damage_store(store: &Path, damage: impl FnOnce(&FjallStore, &mut Batch)) {
    let kv = shoal_engine::store_dir::kv_path(store);
    let fjall = FjallStore::open(&kv, &FjallTuning::default()).unwrap();
    let mut batch = Batch::default();
    damage(&fjall, &mut batch);
    fjall.write(batch).unwrap();
    fjall.sync().unwrap();
}

fn fsck(store: &Path, repair: bool) -> common::CmdOutput {
    let mut args = vec![OsStr::new("fsck")];
    if repair {
        args.push(OsStr::new("--repair"));
    }
    args.push(store.as_os_str());
    shoal(&args)
}

/// A directory whose inode record is lost (its entry dangles, its subdirectory and files
/// lose their parent), a file whose only entry is lost, a wrong link count, and wrong
/// usage counters and recursive usage: repair reconnects every file and subtree under
/// /lost+found with its data, rewrites the counters, names what it did, and the store is
/// clean, mounts, and takes new writes.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one damaged store taken through fsck, repair and fsck again: the steps share its state"
)]
fn repair_reconnects_orphans_into_lost_found_and_rewrites_counters() {
    let mut m = Mounted::new();
    fs::create_dir_all(m.path("lost-parent/sub/deeper")).unwrap();
    fs::write(m.path("lost-parent/file"), b"in the lost directory").unwrap();
    fs::write(m.path("lost-parent/sub/inner"), vec![7u8; 300_000]).unwrap();
    fs::write(m.path("nameless"), b"its entry goes").unwrap();
    fs::write(m.path("keep"), b"untouched").unwrap();
    fs::write(m.path("linked"), b"two names").unwrap();
    fs::hard_link(m.path("linked"), m.path("second-name")).unwrap();
    m.umount();
    let [lost_parent, sub, file, inner, nameless, linked] = inos(
        &m.store,
        &[
            "lost-parent",
            "lost-parent/sub",
            "lost-parent/file",
            "lost-parent/sub/inner",
            "nameless",
            "linked",
        ],
    )[..] else {
        unreachable!()
    };
    damage_store(&m.store, |store, batch| {
        batch.delete(Space::Meta, keys::inode_key(lost_parent));
        batch.delete(Space::Meta, keys::entry_key(ROOT_INO, b"nameless"));
        let mut inode = keys::decode_inode(
            linked,
            &store
                .get(Space::Meta, &keys::inode_key(linked))
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        inode.nlink = 7;
        batch.put(
            Space::Meta,
            keys::inode_key(linked),
            keys::encode_inode(&inode),
        );
        batch.put(
            Space::Meta,
            keys::counter_key(shoal_engine::UsageKey {
                uid: 4242,
                gid: 4242,
                project: 0,
            }),
            keys::encode_usage(shoal_engine::Usage {
                inodes: 3,
                bytes: 99,
            }),
        );
        batch.delete(Space::Meta, keys::tree_usage_key(ROOT_INO));
    });

    let out = fsck(&m.store, false);
    assert_eq!(out.code, Some(1), "{}", out.describe());
    for expected in [
        "missing",
        "nlink",
        "usage of uid 4242",
        "tree usage",
        "--repair",
    ] {
        assert!(
            out.stdout.contains(expected),
            "{expected}: {}",
            out.describe()
        );
    }
    let out = fsck(&m.store, true);
    assert!(out.success(), "{}", out.describe());
    for expected in [
        format!("dropped: entry {ROOT_INO}/\"lost-parent\" points to missing inode {lost_parent}"),
        format!("reconnected: Directory {sub} as /lost+found/#{sub}"),
        format!("reconnected: Regular {file} as /lost+found/#{file}"),
        format!("reconnected: Regular {nameless} as /lost+found/#{nameless}"),
        format!("fixed: inode {linked} (Regular): nlink 7 -> 2"),
        "fixed: usage of uid 4242 gid 4242 project 0: 3 inodes / 99 bytes -> none".into(),
        format!("fixed: tree usage of directory {ROOT_INO}"),
        "made: /lost+found".into(),
    ] {
        assert!(
            out.stdout.contains(&expected),
            "{expected}: {}",
            out.describe()
        );
    }
    let out = fsck(&m.store, false);
    assert!(out.success(), "after --repair: {}", out.describe());

    m.mount();
    let lost_found = m.path("lost+found");
    assert_eq!(
        fs::metadata(&lost_found).unwrap().mode() & 0o7777,
        0o700,
        "lost+found is root's alone"
    );
    assert_eq!(
        fs::read(lost_found.join(format!("#{file}"))).unwrap(),
        b"in the lost directory"
    );
    assert_eq!(
        fs::read(lost_found.join(format!("#{nameless}"))).unwrap(),
        b"its entry goes"
    );
    let reconnected_sub = lost_found.join(format!("#{sub}"));
    assert_eq!(
        fs::read(reconnected_sub.join("inner")).unwrap(),
        vec![7u8; 300_000]
    );
    assert!(reconnected_sub.join("deeper").is_dir());
    assert_eq!(
        fs::metadata(reconnected_sub.join("inner")).unwrap().ino(),
        inner
    );
    assert_eq!(fs::read(m.path("keep")).unwrap(), b"untouched");
    assert_eq!(fs::metadata(m.path("linked")).unwrap().nlink(), 2);
    assert!(!m.path("lost-parent").exists());
    // The repaired store takes changes, and they last.
    fs::remove_dir_all(&reconnected_sub).unwrap();
    fs::rename(lost_found.join(format!("#{file}")), m.path("found")).unwrap();
    fs::write(m.path("after"), b"written after the repair").unwrap();
    m.umount();
    let out = fsck(&m.store, false);
    assert!(out.success(), "after changes: {}", out.describe());
    m.mount();
    assert!(!reconnected_sub.exists());
    assert_eq!(fs::read(m.path("found")).unwrap(), b"in the lost directory");
    assert_eq!(
        fs::read(m.path("after")).unwrap(),
        b"written after the repair"
    );
    m.umount();
}

/// A directory cycle cut off from the root (two directories naming each other) and an
/// undecodable inode record: repair drops the record, cuts the cycle into /lost+found,
/// and an existing /lost+found is reused.
#[test]
fn repair_cuts_directory_cycles_and_drops_undecodable_records() {
    let mut m = Mounted::new();
    fs::create_dir_all(m.path("a/b")).unwrap();
    fs::create_dir(m.path("lost+found")).unwrap();
    fs::write(m.path("a/b/data"), b"inside the cycle").unwrap();
    fs::write(m.path("broken"), b"x").unwrap();
    m.umount();
    let [lost_found, a, b, broken] = inos(&m.store, &["lost+found", "a", "a/b", "broken"][..])[..]
    else {
        unreachable!()
    };
    damage_store(&m.store, |store, batch| {
        // a leaves the root and moves under its own child b.
        batch.delete(Space::Meta, keys::entry_key(ROOT_INO, b"a"));
        batch.put(
            Space::Meta,
            keys::entry_key(b, b"a"),
            keys::encode_entry(a, shoal_engine::FileKind::Directory),
        );
        let mut inode = keys::decode_inode(
            a,
            &store
                .get(Space::Meta, &keys::inode_key(a))
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        inode.parent = b;
        batch.put(Space::Meta, keys::inode_key(a), keys::encode_inode(&inode));
        batch.put(
            Space::Meta,
            keys::inode_key(broken),
            b"\x99garbage".to_vec(),
        );
    });
    let out = fsck(&m.store, false);
    assert_eq!(out.code, Some(1), "{}", out.describe());
    let out = fsck(&m.store, true);
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout.contains("dropped: an undecodable inode")
            && out.stdout.contains("in a cycle cut off from the root")
            && !out.stdout.contains("made: /lost+found"),
        "{}",
        out.describe()
    );
    let out = fsck(&m.store, false);
    assert!(out.success(), "after --repair: {}", out.describe());
    m.mount();
    let found = fs::read_dir(m.path("lost+found"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect::<Vec<_>>();
    assert_eq!(found.len(), 1, "{found:?}");
    let top = m.path("lost+found").join(&found[0]);
    assert!(top.is_dir());
    let data = if found[0] == format!("#{a}") {
        top.join("b/data")
    } else {
        top.join("data")
    };
    assert_eq!(fs::read(data).unwrap(), b"inside the cycle");
    assert_eq!(
        fs::metadata(m.path("lost+found")).unwrap().ino(),
        lost_found
    );
    assert!(!m.path("broken").exists());
    m.umount();
}

/// The uuid line of the store's IDENTITY file.
fn identity_uuid(store: &Path) -> Option<String> {
    let text = fs::read_to_string(store.join("IDENTITY")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("uuid="))
        .map(str::to_string)
}

/// A store whose FORMAT file is deleted or damaged is refused by every command with the
/// one hint that keeps its data (`fsck --repair`), never one at a flag that deletes it;
/// `fsck --repair` writes FORMAT again from the superblock, and IDENTITY (deleted, or
/// damaged with its uuid still readable, or garbage) from what still reads, and says so.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "each damage to the format and identity files, repaired and checked on the same store in turn"
)]
fn repair_rebuilds_a_missing_or_damaged_format_and_identity() {
    let mut m = Mounted::new();
    fs::write(m.path("kept"), b"precious").unwrap();
    m.umount();
    let format = fs::read_to_string(m.store.join("FORMAT")).unwrap();
    let uuid = identity_uuid(&m.store).unwrap();
    let store = m.store.clone();
    let damages: [(&str, &dyn Fn()); 2] = [
        ("deleted", &|| {
            fs::remove_file(store.join("FORMAT")).unwrap()
        }),
        ("damaged", &|| {
            fs::write(store.join("FORMAT"), b"shoal-st\xffre 2\x00\n").unwrap()
        }),
    ];
    for (how, damage) in damages {
        damage();
        let mnt = m.mnt.as_os_str();
        for args in [
            vec![OsStr::new("mount"), m.store.as_os_str(), mnt],
            vec![OsStr::new("fsck"), m.store.as_os_str()],
            vec![OsStr::new("mkfs"), m.store.as_os_str()],
            vec![OsStr::new("info"), m.store.as_os_str()],
        ] {
            let out = shoal(&args);
            assert!(!out.success(), "FORMAT {how}: {}", out.describe());
            let said = format!("{}{}", out.stdout, out.stderr);
            assert!(
                said.contains("fsck --repair"),
                "FORMAT {how}: {}",
                out.describe()
            );
            assert!(
                !said.contains("--wipe") && !said.contains("--force"),
                "FORMAT {how}: a hint at a flag that deletes: {}",
                out.describe()
            );
        }
        assert!(!common::is_mounted(&m.mnt));
        let out = fsck(&m.store, true);
        assert!(out.success(), "FORMAT {how}: {}", out.describe());
        assert!(
            out.stdout.contains("rebuilt FORMAT") && out.stdout.contains("superblock"),
            "{}",
            out.describe()
        );
        assert_eq!(fs::read_to_string(m.store.join("FORMAT")).unwrap(), format);
        m.mount();
        assert_eq!(fs::read(m.path("kept")).unwrap(), b"precious");
        m.umount();
    }

    // IDENTITY: damaged around a readable uuid (kept), garbage, deleted (new uuids).
    fs::write(
        m.store.join("IDENTITY"),
        format!("uuid={uuid}\ncreated=\u{fffd}\u{fffd}\n"),
    )
    .unwrap();
    let out = fsck(&m.store, true);
    assert!(out.success(), "{}", out.describe());
    assert!(
        out.stdout.contains("rebuilt IDENTITY (damaged)")
            && out.stdout.contains(&format!("uuid {uuid} kept")),
        "{}",
        out.describe()
    );
    assert_eq!(identity_uuid(&m.store).as_deref(), Some(uuid.as_str()));
    for (how, damage) in [
        ("damaged", Some(b"\x00\xffnot an identity\n".as_slice())),
        ("missing", None),
    ] {
        match damage {
            Some(bytes) => fs::write(m.store.join("IDENTITY"), bytes).unwrap(),
            None => fs::remove_file(m.store.join("IDENTITY")).unwrap(),
        }
        let out = fsck(&m.store, true);
        assert!(out.success(), "{}", out.describe());
        assert!(
            out.stdout.contains(&format!("rebuilt IDENTITY ({how})"))
                && out.stdout.contains("new uuid"),
            "{}",
            out.describe()
        );
        let new_uuid = identity_uuid(&m.store).unwrap();
        assert_ne!(new_uuid, uuid);
        let info = shoal(&[OsStr::new("info"), m.store.as_os_str()]);
        assert!(info.stdout.contains(&new_uuid), "{}", info.describe());
        // A second repair finds nothing to rebuild.
        let again = fsck(&m.store, true);
        assert!(!again.stdout.contains("rebuilt"), "{}", again.describe());
    }
    m.mount();
    assert_eq!(fs::read(m.path("kept")).unwrap(), b"precious");
    m.finish();
}
