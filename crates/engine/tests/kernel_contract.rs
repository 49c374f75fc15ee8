//! What the FUSE adapter relies on for the kernel's contract, through the library:
//! removed inodes kept until forgotten, inode numbers never reused, O_TMPFILE, fallocate
//! and POSIX ACLs.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;

use common::*;
use shoal_engine::Fallocate;

/// A stand-in for the kernel's lookup counts.
fn held_by_kernel(fs: &Engine) -> Arc<Mutex<HashSet<u64>>> {
    let held = Arc::new(Mutex::new(HashSet::new()));
    let probe = held.clone();
    fs.set_reference_probe(Box::new(move |ino| probe.lock().contains(&ino)));
    held
}

both_backends! {
    fn removed_inodes_answer_until_forgotten(fs) {
        let held = held_by_kernel(fs);
        let file = mkfile_with(fs, ROOT_INO, b"f", b"hello");
        let dir = mkdir(fs, ROOT_INO, b"d");
        let loose = mkfile(fs, ROOT_INO, b"loose");
        held.lock().extend([file.ino, dir.ino]);
        fs.unlink(ROOT_INO, b"f").unwrap();
        fs.rmdir(ROOT_INO, b"d").unwrap();
        fs.unlink(ROOT_INO, b"loose").unwrap();
        assert_eq!(fs.getattr(file.ino).unwrap().nlink, 0);
        assert_eq!(fs.getattr(dir.ino).unwrap().nlink, 0);
        assert!(fs.readdir(dir.ino, None, 10).unwrap().is_empty());
        assert_err!(fs.getattr(loose.ino), FsError::NotFound);
        // The writeback cache's times after the unlink.
        let change = SetAttr { mtime: Some(SetTime::Now), ..SetAttr::default() };
        assert_eq!(fs.setattr(file.ino, &change).unwrap().nlink, 0);
        assert_eq!(fs.unlinked_inodes(), 2);
        // Nothing of them is left in the store: usage is back to the root alone.
        assert_eq!(fs.usage(UsageOwner::Total).unwrap().inodes, 1);
        held.lock().clear();
        fs.forgotten(file.ino);
        fs.forgotten(dir.ino);
        assert_eq!(fs.unlinked_inodes(), 0);
        assert_err!(fs.getattr(file.ino), FsError::NotFound);
        assert_err!(fs.setattr(file.ino, &change), FsError::NotFound);
    }

    fn o_tmpfile_lives_until_linked_or_released(fs) {
        let kept = fs.tmpfile(ROOT_INO, &regular(), 0o022, ME).unwrap();
        assert_eq!(kept.nlink, 0);
        assert_eq!(kept.perm, 0o644);
        fs.write(kept.ino, 0, b"object").unwrap();
        let linked = fs.link(kept.ino, ROOT_INO, b"object").unwrap();
        assert_eq!(linked.nlink, 1);
        fs.release_file(kept.ino).unwrap();
        assert_eq!(read_all(fs, fs.lookup(ROOT_INO, b"object").unwrap().ino), b"object");

        let dropped = fs.tmpfile(ROOT_INO, &regular(), 0, ME).unwrap();
        fs.write(dropped.ino, 0, &[1; 100_000]).unwrap();
        fs.release_file(dropped.ino).unwrap();
        assert_err!(fs.getattr(dropped.ino), FsError::NotFound);
        assert_eq!(fs.usage(UsageOwner::Total).unwrap(), Usage { inodes: 2, bytes: 6 });
        // An ordinary unlinked file cannot be linked back.
        let plain = mkfile(fs, ROOT_INO, b"plain");
        fs.open_file(plain.ino);
        fs.unlink(ROOT_INO, b"plain").unwrap();
        assert_err!(fs.link(plain.ino, ROOT_INO, b"again"), FsError::NotFound);
        fs.release_file(plain.ino).unwrap();
    }

    fn fallocate_makes_holes_and_frees_usage(fs) {
        let chunk = CHUNK as usize;
        let file = mkfile_with(fs, ROOT_INO, b"f", &vec![9u8; 3 * chunk]);
        let usage = || fs.usage(UsageOwner::Total).unwrap().bytes;
        assert_eq!(usage(), 3 * CHUNK);
        fs.fallocate(file.ino, CHUNK, CHUNK, Fallocate::PunchHole).unwrap();
        assert_eq!(usage(), 2 * CHUNK, "a whole punched chunk holds nothing");
        fs.fallocate(file.ino, 10, 10, Fallocate::PunchHole).unwrap();
        assert_eq!(usage(), 2 * CHUNK, "zeroed inside a chunk: still stored");
        fs.fallocate(file.ino, 0, 10 * CHUNK, Fallocate::Allocate { keep_size: false }).unwrap();
        assert_eq!(fs.getattr(file.ino).unwrap().size, 10 * CHUNK);
        assert_eq!(usage(), 2 * CHUNK, "preallocation is a hole");
        fs.fallocate(file.ino, 2 * CHUNK + 5, 20 * CHUNK, Fallocate::ZeroRange { keep_size: true })
            .unwrap();
        assert_eq!(fs.getattr(file.ino).unwrap().size, 10 * CHUNK);
        assert_eq!(usage(), CHUNK + 5);
        let bytes = read_all(fs, file.ino);
        let mut expected = vec![9u8; 3 * chunk];
        expected[10..20].fill(0);
        expected[chunk..2 * chunk].fill(0);
        expected[2 * chunk + 5..].fill(0);
        expected.resize(10 * chunk, 0);
        assert!(bytes == expected);
    }

    fn default_acls_are_inherited(fs) {
        // version 2; user::rwx, user:5000:rwx, group::r-x, mask::rwx, other::---
        let entry = |tag: u16, perm: u16, id: u32| {
            let mut bytes = tag.to_le_bytes().to_vec();
            bytes.extend_from_slice(&perm.to_le_bytes());
            bytes.extend_from_slice(&id.to_le_bytes());
            bytes
        };
        let mut acl = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [(1, 7, u32::MAX), (2, 7, 5000), (4, 5, u32::MAX), (0x10, 7, u32::MAX), (0x20, 0, u32::MAX)] {
            acl.extend(entry(tag, perm, id));
        }
        let dir = mkdir(fs, ROOT_INO, b"shared");
        fs.setxattr(dir.ino, b"system.posix_acl_default", &acl, XattrMode::Either).unwrap();
        let file = fs.create_masked(dir.ino, b"f", &regular(), 0o077, ME).unwrap();
        assert_eq!(file.perm, 0o640, "the create mode cut by the default ACL, not the umask");
        let access = fs.getxattr(file.ino, b"system.posix_acl_access").unwrap();
        assert_eq!(&access[4 + 8..4 + 16], &entry(2, 7, 5000)[..]);
        let sub = fs.mkdir_masked(dir.ino, b"sub", 0o777, 0o077, ME).unwrap();
        assert_eq!(sub.perm, 0o770);
        assert_eq!(fs.getxattr(sub.ino, b"system.posix_acl_default").unwrap(), acl);
        let plain = fs.create_masked(ROOT_INO, b"plain", &regular(), 0o077, ME).unwrap();
        assert_eq!(plain.perm, 0o600, "no default ACL: the umask applies");
        assert_err!(
            fs.setxattr(dir.ino, b"system.posix_acl_access", b"junk", XattrMode::Either),
            FsError::Invalid(_)
        );
    }
}

#[test]
fn preallocation_past_a_byte_limit_is_refused() {
    let fs = memory();
    let limits = shoal_engine::QuotaLimits {
        bytes_hard: 100_000,
        ..shoal_engine::QuotaLimits::default()
    };
    fs.set_quota_limits(shoal_engine::QuotaKind::User, ME.uid, limits)
        .unwrap();
    let file = fs.create(ROOT_INO, b"f", &regular(), ME).unwrap();
    let grow = |length| {
        fs.fallocate(
            file.ino,
            0,
            length,
            Fallocate::Allocate { keep_size: false },
        )
    };
    assert_err!(grow(200_000), FsError::QuotaExceeded);
    assert_eq!(
        fs.getattr(file.ino).unwrap().size,
        0,
        "a refusal changes nothing"
    );
    grow(90_000).unwrap();
    assert_eq!(fs.getattr(file.ino).unwrap().size, 90_000);
    // The hole itself is not charged: writes into it are.
    assert_eq!(fs.usage(UsageOwner::User(ME.uid)).unwrap().bytes, 0);
}

#[test]
fn inode_numbers_are_never_reused_after_reopen() {
    let fs = disk_with(no_thread());
    let mut last = 0;
    for i in 0..3 {
        last = mkfile(&fs, ROOT_INO, format!("f{i}").as_bytes()).ino;
    }
    for i in 0..3 {
        fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    let closed = fs.close();
    let fs = closed.open();
    let next = mkfile(&fs, ROOT_INO, b"new").ino;
    assert!(next > last, "inode {next} handed out again after {last}");
}

#[test]
fn a_crash_leaves_no_o_tmpfile_behind() {
    let fs = disk_with(no_thread());
    let orphan = fs.tmpfile(ROOT_INO, &regular(), 0, ME).unwrap();
    fs.write(orphan.ino, 0, b"never linked").unwrap();
    fs.sync().unwrap();
    // Closed without its release, as a killed daemon would leave it.
    let closed = fs.close();
    let fs = closed.open();
    assert_err!(fs.getattr(orphan.ino), FsError::NotFound);
    assert_eq!(
        fs.usage(UsageOwner::Total).unwrap(),
        Usage {
            inodes: 1,
            bytes: 0
        }
    );
    drop(fs);
    assert!(fsck_store_dir(&closed.store).unwrap().is_clean());
}
