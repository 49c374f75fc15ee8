//! Usage counters (per user, group, project and total) and orphans: inodes unlinked while
//! open, which live until their last release (or the next mount).

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use common::*;

fn usage(fs: &Engine, owner: UsageOwner) -> Usage {
    fs.usage(owner).unwrap()
}

fn u(inodes: u64, bytes: u64) -> Usage {
    Usage { inodes, bytes }
}

both_backends! {
    fn a_new_filesystem_counts_its_root(fs) {
        for owner in [UsageOwner::Total, UsageOwner::User(0), UsageOwner::Group(0), UsageOwner::Project(0)] {
            assert_eq!(usage(fs, owner), u(1, 0), "{owner:?}");
        }
        assert_eq!(usage(fs, UsageOwner::User(1000)), u(0, 0));
        let stats = fs.fs_stats().unwrap();
        assert_eq!(stats.used, u(1, 0));
        if !fs.is_disk() {
            assert_eq!(stats.store_disk_bytes, 0);
        }
    }

    fn create_write_truncate_and_remove_move_the_counters(fs) {
        let file = mkfile(fs, ROOT_INO, b"f");
        let dir = mkdir(fs, ROOT_INO, b"d");
        fs.symlink(dir.ino, b"l", b"some/target", ME).unwrap();
        fs.create(dir.ino, b"p", &special(FileKind::Fifo), ME).unwrap();
        for owner in [UsageOwner::User(1000), UsageOwner::Group(1000)] {
            assert_eq!(usage(fs, owner), u(4, 0), "{owner:?}");
        }
        assert_eq!(usage(fs, UsageOwner::Total), u(5, 0));
        assert_eq!(usage(fs, UsageOwner::Project(0)), u(5, 0));
        fs.write(file.ino, 0, &vec![1u8; 10_000]).unwrap();
        fs.write(file.ino, 5_000, &vec![2u8; 1_000]).unwrap();
        for owner in [UsageOwner::Total, UsageOwner::User(1000), UsageOwner::Group(1000), UsageOwner::Project(0)] {
            assert_eq!(usage(fs, owner).bytes, 10_000, "{owner:?}");
        }
        fs.setattr(file.ino, &SetAttr { size: Some(3_000), ..sattr() }).unwrap();
        assert_eq!(usage(fs, UsageOwner::User(1000)), u(4, 3_000));
        fs.write(file.ino, 1 << 30, b"x").unwrap();
        let allocated = fs.getattr(file.ino).unwrap().allocated_bytes;
        assert_eq!(allocated, 3_001);
        assert_eq!(usage(fs, UsageOwner::User(1000)), u(4, 3_001));
        assert_eq!(fs.fs_stats().unwrap().used, usage(fs, UsageOwner::Total));
        fs.unlink(dir.ino, b"l").unwrap();
        fs.unlink(dir.ino, b"p").unwrap();
        fs.rmdir(ROOT_INO, b"d").unwrap();
        assert_eq!(usage(fs, UsageOwner::User(1000)), u(1, 3_001));
        fs.unlink(ROOT_INO, b"f").unwrap();
        assert_eq!(usage(fs, UsageOwner::User(1000)), u(0, 0));
        assert_eq!(usage(fs, UsageOwner::Group(1000)), u(0, 0));
        assert_eq!(usage(fs, UsageOwner::Total), u(1, 0));
        assert_consistent(fs, &[]);
    }

    fn chown_moves_inodes_and_bytes_between_owners(fs) {
        let file = mkfile_with(fs, ROOT_INO, b"f", &vec![3u8; 70_000]);
        let small = mkfile_with(fs, ROOT_INO, b"s", b"12345");
        assert_eq!(usage(fs, UsageOwner::User(1000)), u(2, 70_005));
        fs.setattr(file.ino, &SetAttr { uid: Some(2000), ..sattr() }).unwrap();
        assert_eq!(usage(fs, UsageOwner::User(1000)), u(1, 5));
        assert_eq!(usage(fs, UsageOwner::User(2000)), u(1, 70_000));
        assert_eq!(usage(fs, UsageOwner::Group(1000)), u(2, 70_005));
        fs.setattr(file.ino, &SetAttr { gid: Some(3000), ..sattr() }).unwrap();
        assert_eq!(usage(fs, UsageOwner::Group(1000)), u(1, 5));
        assert_eq!(usage(fs, UsageOwner::Group(3000)), u(1, 70_000));
        fs.setattr(small.ino, &SetAttr { uid: Some(2000), gid: Some(3000), ..sattr() }).unwrap();
        assert_eq!(usage(fs, UsageOwner::User(1000)), u(0, 0));
        assert_eq!(usage(fs, UsageOwner::Group(1000)), u(0, 0));
        assert_eq!(usage(fs, UsageOwner::User(2000)), u(2, 70_005));
        assert_eq!(usage(fs, UsageOwner::Group(3000)), u(2, 70_005));
        // Total and project do not move.
        assert_eq!(usage(fs, UsageOwner::Total), u(3, 70_005));
        assert_eq!(usage(fs, UsageOwner::Project(0)), u(3, 70_005));
        // A no-op chown (same ids) changes nothing; writes go to the new owner.
        fs.setattr(small.ino, &SetAttr { uid: Some(2000), gid: Some(3000), ..sattr() }).unwrap();
        fs.write(small.ino, 5, b"678").unwrap();
        assert_eq!(usage(fs, UsageOwner::User(2000)), u(2, 70_008));
        // Directories too.
        let dir = mkdir(fs, ROOT_INO, b"d");
        fs.setattr(dir.ino, &SetAttr { uid: Some(2000), ..sattr() }).unwrap();
        assert_eq!(usage(fs, UsageOwner::User(2000)), u(3, 70_008));
        assert_eq!(usage(fs, UsageOwner::Group(1000)), u(1, 0));
        assert_consistent(fs, &[]);
    }

    fn truncate_and_chown_in_one_setattr(fs) {
        let file = mkfile_with(fs, ROOT_INO, b"f", &vec![1u8; 200_000]);
        let change = SetAttr { size: Some(70_000), uid: Some(2000), gid: Some(3000), ..sattr() };
        let inode = fs.setattr(file.ino, &change).unwrap();
        assert_eq!((inode.size, inode.allocated_bytes, inode.uid, inode.gid), (70_000, 70_000, 2000, 3000));
        assert_eq!(usage(fs, UsageOwner::User(1000)), u(0, 0));
        assert_eq!(usage(fs, UsageOwner::Group(1000)), u(0, 0));
        assert_eq!(usage(fs, UsageOwner::User(2000)), u(1, 70_000));
        assert_eq!(usage(fs, UsageOwner::Group(3000)), u(1, 70_000));
        assert_eq!(usage(fs, UsageOwner::Total), u(2, 70_000));
        // Back, growing this time.
        let change = SetAttr { size: Some(1_000), uid: Some(1000), gid: Some(1000), ..sattr() };
        fs.setattr(file.ino, &change).unwrap();
        assert_eq!(usage(fs, UsageOwner::User(1000)), u(1, 1_000));
        assert_eq!(usage(fs, UsageOwner::User(2000)), u(0, 0));
        assert_consistent(fs, &[]);
    }

    fn hard_links_are_counted_once(fs) {
        let file = mkfile_with(fs, ROOT_INO, b"f", &vec![1u8; 5_000]);
        let dir = mkdir(fs, ROOT_INO, b"d");
        let before = usage(fs, UsageOwner::User(1000));
        assert_eq!(before, u(2, 5_000));
        fs.link(file.ino, dir.ino, b"l1").unwrap();
        fs.link(file.ino, ROOT_INO, b"l2").unwrap();
        assert_eq!(usage(fs, UsageOwner::User(1000)), before);
        assert_eq!(usage(fs, UsageOwner::Total), u(3, 5_000));
        fs.unlink(ROOT_INO, b"f").unwrap();
        fs.unlink(dir.ino, b"l1").unwrap();
        assert_eq!(usage(fs, UsageOwner::User(1000)), before);
        fs.unlink(ROOT_INO, b"l2").unwrap();
        assert_eq!(usage(fs, UsageOwner::User(1000)), u(1, 0));
        assert_consistent(fs, &[]);
    }

    fn setgid_directories_charge_their_group(fs) {
        let shared = fs.mkdir(ROOT_INO, b"shared", 0o2775, OTHER).unwrap();
        let file = fs.create(shared.ino, b"f", &regular(), ME).unwrap();
        fs.write(file.ino, 0, b"abc").unwrap();
        assert_eq!(usage(fs, UsageOwner::Group(3000)), u(2, 3));
        assert_eq!(usage(fs, UsageOwner::Group(1000)), u(0, 0));
        assert_eq!(usage(fs, UsageOwner::User(1000)), u(1, 3));
        assert_consistent(fs, &[]);
    }

    fn an_open_unlinked_file_lives_until_release(fs) {
        let before = usage(fs, UsageOwner::Total);
        let mine_before = usage(fs, UsageOwner::User(1000));
        let file = mkfile_with(fs, ROOT_INO, b"f", &vec![7u8; 100_000]);
        fs.setxattr(file.ino, b"user.k", b"v", XattrMode::Either).unwrap();
        fs.open_file(file.ino);
        fs.unlink(ROOT_INO, b"f").unwrap();
        assert_err!(fs.lookup(ROOT_INO, b"f"), FsError::NotFound);
        assert!(names(fs, ROOT_INO).is_empty());
        let orphan = fs.getattr(file.ino).unwrap();
        assert_eq!((orphan.nlink, orphan.size), (0, 100_000));
        assert_eq!(fs.read(file.ino, 99_990, 100).unwrap(), vec![7u8; 10]);
        // Still writable, still counted.
        fs.write(file.ino, 100_000, b"more").unwrap();
        assert_eq!(fs.read(file.ino, 99_999, 10).unwrap(), b"\x07more");
        assert_eq!(fs.getxattr(file.ino, b"user.k").unwrap(), b"v");
        assert_eq!(usage(fs, UsageOwner::Total), u(before.inodes + 1, before.bytes + 100_004));
        assert_err!(fs.link(file.ino, ROOT_INO, b"resurrect"), FsError::NotFound);
        assert_consistent(fs, &[file.ino]);
        fs.release_file(file.ino).unwrap();
        assert_err!(fs.getattr(file.ino), FsError::NotFound);
        assert_err!(fs.read(file.ino, 0, 1), FsError::NotFound);
        assert_err!(fs.listxattr(file.ino), FsError::NotFound);
        assert_eq!(usage(fs, UsageOwner::Total), before);
        assert_eq!(usage(fs, UsageOwner::User(1000)), mine_before);
        assert_consistent(fs, &[]);
    }

    fn the_last_of_several_opens_frees_the_orphan(fs) {
        let before = total(fs);
        let file = mkfile_with(fs, ROOT_INO, b"f", b"data");
        fs.open_file(file.ino);
        fs.open_file(file.ino);
        fs.unlink(ROOT_INO, b"f").unwrap();
        fs.release_file(file.ino).unwrap();
        assert_eq!(fs.read(file.ino, 0, 10).unwrap(), b"data");
        fs.open_file(file.ino);
        fs.release_file(file.ino).unwrap();
        assert_eq!(fs.getattr(file.ino).unwrap().nlink, 0);
        fs.release_file(file.ino).unwrap();
        assert_err!(fs.getattr(file.ino), FsError::NotFound);
        assert_eq!(total(fs), before);
    }

    fn releasing_a_linked_file_keeps_it(fs) {
        let file = mkfile_with(fs, ROOT_INO, b"f", b"data");
        fs.open_file(file.ino);
        fs.release_file(file.ino).unwrap();
        assert_eq!(read_all(fs, file.ino), b"data");
        // Open, unlink one of two links, release: still there through the other.
        fs.link(file.ino, ROOT_INO, b"g").unwrap();
        fs.open_file(file.ino);
        fs.unlink(ROOT_INO, b"f").unwrap();
        fs.release_file(file.ino).unwrap();
        assert_eq!(fs.lookup(ROOT_INO, b"g").unwrap().nlink, 1);
        // An open file unlinked later, after its release, is deleted at once.
        fs.unlink(ROOT_INO, b"g").unwrap();
        assert_err!(fs.getattr(file.ino), FsError::NotFound);
        assert_eq!(total(fs), u(1, 0));
        assert_consistent(fs, &[]);
    }

    fn rename_over_an_open_file_orphans_it(fs) {
        let victim = mkfile_with(fs, ROOT_INO, b"victim", b"old contents");
        mkfile_with(fs, ROOT_INO, b"new", b"new contents");
        let before = total(fs);
        fs.open_file(victim.ino);
        fs.rename(ROOT_INO, b"new", ROOT_INO, b"victim", RenameMode::Replace).unwrap();
        assert_eq!(read_all(fs, victim.ino), b"old contents");
        assert_eq!(read_all(fs, fs.lookup(ROOT_INO, b"victim").unwrap().ino), b"new contents");
        assert_eq!(total(fs), before);
        assert_consistent(fs, &[victim.ino]);
        fs.release_file(victim.ino).unwrap();
        assert_err!(fs.getattr(victim.ino), FsError::NotFound);
        assert_eq!(total(fs), u(before.inodes - 1, before.bytes - 12));
        assert_consistent(fs, &[]);
    }
}

#[test]
fn orphans_left_at_shutdown_are_purged_at_the_next_open() {
    let fs = disk_with(no_thread());
    let baseline = total(&fs);
    let kept = mkfile_with(&fs, ROOT_INO, b"kept", b"kept");
    let orphan = mkfile_with(&fs, ROOT_INO, b"orphan", &vec![5u8; 200_000]);
    fs.setxattr(orphan.ino, b"user.x", b"y", XattrMode::Either)
        .unwrap();
    fs.open_file(orphan.ino);
    fs.unlink(ROOT_INO, b"orphan").unwrap();
    assert_eq!(total(&fs), u(baseline.inodes + 2, 200_004));
    fs.sync().unwrap();
    // The daemon stops with the file still open.
    let closed = fs.close();
    let report = assert_fsck_clean(&closed.store);
    assert_eq!(
        (report.orphans, report.inodes, report.chunks),
        (1, 3, 4),
        "{}",
        report.summary()
    );

    // A read-only open cannot purge: the orphan is still there, unreachable.
    let ro = Engine::open(
        &closed.store,
        EngineConfig {
            read_only: true,
            commit_interval: None,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    assert_eq!(ro.getattr(orphan.ino).unwrap().nlink, 0);
    drop(ro);

    let fs = closed.open();
    assert_err!(fs.getattr(orphan.ino), FsError::NotFound);
    assert_eq!(read_all(&fs, kept.ino), b"kept");
    assert_eq!(total(&fs), u(baseline.inodes + 1, 4));
    assert_consistent(&fs, &[]);
    drop(fs);
    let report = assert_fsck_clean(&closed.store);
    assert_eq!(
        (report.orphans, report.inodes, report.chunks, report.xattrs),
        (0, 2, 0, 0),
        "{}",
        report.summary()
    );
}

#[test]
fn counters_survive_a_reopen() {
    let fs = disk_with(no_thread());
    let file = mkfile_with(&fs, ROOT_INO, b"f", &vec![1u8; 90_000]);
    fs.setattr(
        file.ino,
        &SetAttr {
            uid: Some(2000),
            gid: Some(3000),
            ..sattr()
        },
    )
    .unwrap();
    mkdir(&fs, ROOT_INO, b"d");
    let owners = [
        UsageOwner::Total,
        UsageOwner::User(0),
        UsageOwner::User(1000),
        UsageOwner::User(2000),
        UsageOwner::Group(1000),
        UsageOwner::Group(3000),
        UsageOwner::Project(0),
    ];
    let before: Vec<Usage> = owners.iter().map(|&o| usage(&fs, o)).collect();
    assert_eq!(
        before,
        vec![
            u(3, 90_000),
            u(1, 0),
            u(1, 0),
            u(1, 90_000),
            u(1, 0),
            u(1, 90_000),
            u(3, 90_000)
        ]
    );
    let closed = fs.close();
    let fs = closed.open();
    let after: Vec<Usage> = owners.iter().map(|&o| usage(&fs, o)).collect();
    assert_eq!(after, before);
    assert!(fs.fs_stats().unwrap().store_disk_bytes > 0);
    // And they keep moving correctly from the stored values.
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert_eq!(usage(&fs, UsageOwner::User(2000)), u(0, 0));
    assert_eq!(usage(&fs, UsageOwner::Total), u(2, 0));
    drop(fs);
    assert_fsck_clean(&closed.store);
}
