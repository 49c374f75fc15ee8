//! Names and directories: lookup, create, mkdir, symlink, mknod, link, unlink, rmdir,
//! readdir — every error path as an `FsError`, on the memory and the on-disk backend.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use common::*;

const MISSING_INO: u64 = 987_654_321;

both_backends! {
    fn listings_follow_every_change_although_they_are_kept(fs) {
        // Pages are kept between calls (`listing_cache`); each change must show in the
        // next listing, names and attributes alike.
        let dir = mkdir(fs, ROOT_INO, b"kept");
        let names = |fs: &Engine| -> Vec<Vec<u8>> {
            fs.readdir(dir.ino, None, 100).unwrap().into_iter().map(|e| e.name).collect()
        };
        let sizes = |fs: &Engine| -> Vec<(Vec<u8>, u64, u16)> {
            fs.readdir_plus(dir.ino, None, 100)
                .unwrap()
                .into_iter()
                .map(|(e, inode)| (e.name, inode.size, inode.perm))
                .collect()
        };
        assert!(names(fs).is_empty());
        assert!(sizes(fs).is_empty());
        let a = mkfile(fs, dir.ino, b"a");
        assert_eq!(names(fs), vec![b"a".to_vec()]);
        assert_eq!(names(fs), vec![b"a".to_vec()], "served again, unchanged");
        assert_eq!(sizes(fs), vec![(b"a".to_vec(), 0, a.perm)]);
        fs.write(a.ino, 0, b"12345").unwrap();
        assert_eq!(sizes(fs), vec![(b"a".to_vec(), 5, a.perm)]);
        fs.setattr(a.ino, &SetAttr { perm: Some(0o600), ..sattr() }).unwrap();
        assert_eq!(sizes(fs), vec![(b"a".to_vec(), 5, 0o600)]);
        let (_, inode) = &fs.readdir_plus(dir.ino, None, 100).unwrap()[0];
        assert_eq!(inode.content, Content::Inline(Vec::new()), "attributes only");
        fs.rename(dir.ino, b"a", dir.ino, b"b", RenameMode::NoReplace).unwrap();
        assert_eq!(names(fs), vec![b"b".to_vec()]);
        mkfile(fs, ROOT_INO, b"elsewhere");
        fs.link(a.ino, dir.ino, b"c").unwrap();
        assert_eq!(names(fs), vec![b"b".to_vec(), b"c".to_vec()]);
        fs.unlink(dir.ino, b"b").unwrap();
        fs.unlink(dir.ino, b"c").unwrap();
        assert!(names(fs).is_empty());
        assert!(sizes(fs).is_empty());
        // A change elsewhere leaves a page kept; what changes an entry's inode (a name
        // made in a subdirectory, a rename in from another directory) must show.
        let sub = mkdir(fs, dir.ino, b"sub");
        let before = fs.readdir_plus(dir.ino, None, 100).unwrap()[0].1.clone();
        let other = mkdir(fs, ROOT_INO, b"other");
        mkfile(fs, other.ino, b"moved");
        assert_eq!(fs.readdir_plus(dir.ino, None, 100).unwrap()[0].1, before);
        mkfile(fs, sub.ino, b"inside");
        let after = fs.readdir_plus(dir.ino, None, 100).unwrap()[0].1.clone();
        assert_eq!(after.ino, sub.ino);
        assert_ne!(
            (after.size, after.mtime, after.ctime),
            (before.size, before.mtime, before.ctime),
            "the subdirectory's record changed"
        );
        fs.rename(other.ino, b"moved", dir.ino, b"m", RenameMode::NoReplace).unwrap();
        assert_eq!(names(fs), vec![b"m".to_vec(), b"sub".to_vec()]);
    }

    fn setattrs_and_a_write_before_them_leave_what_each_in_turn_leaves(fs) {
        // The fast path applies a file's consecutive attribute changes as one
        // (`Engine::setattrs`): the file, and the usage of the directories above it, must
        // be what applying them one by one leaves.
        let at = |secs| Timestamp { secs, nanos: 7 };
        let changes = [
            SetAttr { perm: Some(0o4750), ctime: Some(at(100)), ..sattr() },
            SetAttr { size: Some(70_000), ctime: Some(at(200)), ..sattr() },
            SetAttr { uid: Some(1234), gid: Some(99), ctime: Some(at(300)), ..sattr() },
            SetAttr {
                mtime: Some(SetTime::At(at(5))),
                atime: Some(SetTime::At(at(6))),
                ctime: Some(at(400)),
                ..sattr()
            },
        ];
        let one_by_one = mkdir(fs, ROOT_INO, b"one_by_one");
        let a = mkfile_with(fs, one_by_one.ino, b"f", b"hello");
        for change in &changes {
            fs.setattr(a.ino, change).unwrap();
        }
        let together = mkdir(fs, ROOT_INO, b"together");
        let b = mkfile_with(fs, together.ino, b"f", b"hello");
        let returned = fs.setattrs(b.ino, &changes).unwrap();
        let (a, b) = (fs.getattr(a.ino).unwrap(), fs.getattr(b.ino).unwrap());
        assert_eq!(returned, b, "what setattrs returns is what it left");
        let attributes = |i: &Inode| (i.perm, i.size, i.uid, i.gid, i.mtime, i.atime, i.ctime, i.allocated_bytes);
        assert_eq!(attributes(&a), attributes(&b));
        assert_eq!(attributes(&b), (0o750, 70_000, 1234, 99, at(5), at(6), at(400), b.allocated_bytes), "chown cleared setuid");
        assert_eq!(fs.read(b.ino, 0, 8).unwrap(), b"hello\0\0\0", "truncation extended with zeros");
        let counts = |dir| {
            let usage = fs.tree_usage(dir).unwrap();
            (usage.entries, usage.files, usage.bytes)
        };
        assert_eq!(counts(one_by_one.ino), counts(together.ino));
        assert_eq!(counts(together.ino), (1, 1, 70_000));

        // A write and the changes after it, as one: the same again.
        let with_write = mkdir(fs, ROOT_INO, b"with_write");
        let c = mkfile(fs, with_write.ino, b"f");
        let c = fs.write_then_setattrs(c.ino, (0, b"hello"), false, at(50), &changes).unwrap();
        assert_eq!(attributes(&c), attributes(&b));
        assert_eq!(fs.read(c.ino, 0, 8).unwrap(), b"hello\0\0\0");
        assert_eq!(counts(with_write.ino), counts(together.ino));
        // An unprivileged writer's write kills setuid; the write's time stands where no
        // change after it sets the times.
        let d = mkfile(fs, with_write.ino, b"setuid");
        fs.setattr(d.ino, &SetAttr { perm: Some(0o4755), ..sattr() }).unwrap();
        let mode_only = [SetAttr { perm: Some(0o4711), ctime: Some(at(60)), ..sattr() }];
        let d = fs.write_then_setattrs(d.ino, (3, b"abc"), true, at(55), &mode_only).unwrap();
        assert_eq!((d.perm, d.size, d.mtime, d.ctime), (0o4711, 6, at(55), at(60)));
        let e = mkfile(fs, with_write.ino, b"killed");
        fs.setattr(e.ino, &SetAttr { perm: Some(0o4755), ..sattr() }).unwrap();
        let e = fs.write_then_setattrs(e.ino, (0, b"x"), true, at(70), &[]).unwrap();
        assert_eq!((e.perm, e.mtime, e.ctime), (0o755, at(70), at(70)));

        // A copy and the changes after it, as one: whole chunks shared, the rest read, at
        // a chunk boundary and off one, as `copy_range` copies.
        let source: Vec<u8> = (0..150_000u32).map(|i| (i % 251) as u8).collect();
        let from = mkfile_with(fs, with_write.ino, b"source", &source);
        for (name, from_offset, to_offset) in [(&b"aligned"[..], 0u64, 0u64), (&b"unaligned"[..], 10, 1000)] {
            let to = mkfile(fs, with_write.ino, name);
            let len = source.len() as u64 - from_offset;
            let copied = fs
                .copy_then_setattrs((from.ino, from_offset), (to.ino, to_offset), len, at(80), &changes[..1])
                .unwrap();
            assert_eq!(copied, len);
            let to = fs.getattr(to.ino).unwrap();
            assert_eq!((to.size, to.perm, to.mtime, to.ctime), (to_offset + len, 0o4750, at(80), at(100)));
            let read = fs.read(to.ino, to_offset, len as u32).unwrap();
            assert!(read == source[from_offset as usize..], "{}: the copied bytes", String::from_utf8_lossy(name));
        }
    }

    fn readdir_plus_pairs_every_entry_with_its_own_inode_near_or_far(fs) {
        // Children created in turn in two directories share allocation blocks unevenly;
        // a hard link and renamed-in files bring inode numbers from far away.
        let dir = mkdir(fs, ROOT_INO, b"dir");
        let other = mkdir(fs, ROOT_INO, b"other");
        for i in 0..150u32 {
            mkfile(fs, dir.ino, format!("f{i:03}").as_bytes());
            if i % 3 == 0 {
                mkfile(fs, other.ino, format!("o{i:03}").as_bytes());
            }
        }
        let far = mkfile(fs, other.ino, b"far");
        fs.link(far.ino, dir.ino, b"linked").unwrap();
        fs.rename(other.ino, b"o000", dir.ino, b"moved", RenameMode::NoReplace).unwrap();
        fs.unlink(dir.ino, b"f007").unwrap();
        for limit in [3, 10, 64, 1000] {
            let mut after: Option<Vec<u8>> = None;
            let mut seen = 0;
            loop {
                let page = fs.readdir_plus(dir.ino, after.as_deref(), limit).unwrap();
                let Some(last) = page.last() else { break };
                after = Some(last.0.name.clone());
                for (entry, inode) in &page {
                    assert_eq!(fs.lookup(dir.ino, &entry.name).unwrap().ino, entry.ino);
                    assert_eq!(&fs.getattr(entry.ino).unwrap(), inode, "limit {limit}");
                }
                seen += page.len();
            }
            assert_eq!(seen, 150 - 1 + 2, "limit {limit}");
        }
    }

    fn lookup_missing_is_not_found(fs) {
        assert_err!(fs.lookup(ROOT_INO, b"nope"), FsError::NotFound);
        let dir = mkdir(fs, ROOT_INO, b"d");
        assert_err!(fs.lookup(dir.ino, b"nope"), FsError::NotFound);
        assert_err!(fs.lookup(MISSING_INO, b"x"), FsError::NotFound);
        assert_err!(fs.getattr(MISSING_INO), FsError::NotFound);
        assert_err!(fs.readdir(MISSING_INO, None, 10), FsError::NotFound);
        assert_err!(fs.readlink(MISSING_INO), FsError::NotFound);
        assert_err!(fs.create(MISSING_INO, b"x", &regular(), ME), FsError::NotFound);
        assert_err!(fs.mkdir(MISSING_INO, b"x", 0o755, ME), FsError::NotFound);
        assert_err!(fs.unlink(ROOT_INO, b"nope"), FsError::NotFound);
        assert_err!(fs.rmdir(ROOT_INO, b"nope"), FsError::NotFound);
        assert_err!(fs.link(MISSING_INO, ROOT_INO, b"x"), FsError::NotFound);
        // Nothing was created by the failures.
        assert_eq!(names(fs, ROOT_INO), vec![b"d".to_vec()]);
        assert_consistent(fs, &[]);
    }

    fn lookup_child_finds_names_and_misses_without_checking_the_parent(fs) {
        let dir = fs.mkdir(ROOT_INO, b"dir", 0o755, ME).unwrap();
        let file = mkfile(fs, dir.ino, b"f");
        assert_eq!(fs.lookup_child(dir.ino, b"f").unwrap().ino, file.ino);
        assert_err!(fs.lookup_child(dir.ino, b"g"), FsError::NotFound);
        assert_err!(fs.lookup_child(dir.ino, &[b'n'; 256]), FsError::NameTooLong);
        // Same answers as lookup wherever the parent is a directory.
        assert_eq!(fs.lookup(dir.ino, b"f").unwrap().ino, file.ino);
        assert_err!(fs.lookup(dir.ino, b"g"), FsError::NotFound);
    }

    fn operations_inside_a_file_are_not_dir(fs) {
        let file = mkfile(fs, ROOT_INO, b"f");
        assert_err!(fs.lookup(file.ino, b"x"), FsError::NotDir);
        assert_err!(fs.readdir(file.ino, None, 10), FsError::NotDir);
        assert_err!(fs.readdir_plus(file.ino, None, 10), FsError::NotDir);
        assert_err!(fs.create(file.ino, b"x", &regular(), ME), FsError::NotDir);
        assert_err!(fs.mkdir(file.ino, b"x", 0o755, ME), FsError::NotDir);
        assert_err!(fs.symlink(file.ino, b"x", b"t", ME), FsError::NotDir);
        assert_err!(fs.link(file.ino, file.ino, b"x"), FsError::NotDir);
        assert_err!(fs.unlink(file.ino, b"x"), FsError::NotDir);
        assert_err!(fs.rmdir(file.ino, b"x"), FsError::NotDir);
        assert_eq!(fs.getattr(file.ino).unwrap().nlink, 1);
        assert_consistent(fs, &[]);
    }

    fn creating_an_existing_name_is_exists(fs) {
        let file = mkfile_with(fs, ROOT_INO, b"f", b"keep me");
        let dir = mkdir(fs, ROOT_INO, b"d");
        for name in [&b"f"[..], b"d"] {
            assert_err!(fs.create(ROOT_INO, name, &regular(), ME), FsError::Exists);
            assert_err!(fs.create(ROOT_INO, name, &special(FileKind::Fifo), ME), FsError::Exists);
            assert_err!(fs.mkdir(ROOT_INO, name, 0o755, ME), FsError::Exists);
            assert_err!(fs.symlink(ROOT_INO, name, b"t", ME), FsError::Exists);
            assert_err!(fs.link(file.ino, ROOT_INO, name), FsError::Exists);
        }
        // The existing objects are untouched.
        assert_eq!(fs.lookup(ROOT_INO, b"f").unwrap().ino, file.ino);
        assert_eq!(read_all(fs, file.ino), b"keep me");
        assert_eq!(fs.getattr(file.ino).unwrap().nlink, 1);
        assert_eq!(fs.lookup(ROOT_INO, b"d").unwrap().ino, dir.ino);
        assert_eq!(fs.getattr(ROOT_INO).unwrap().size, 2);
        assert_consistent(fs, &[]);
    }

    fn names_of_255_bytes_work_and_256_are_too_long(fs) {
        let long = vec![b'x'; NAME_MAX_BYTES];
        let too_long = vec![b'y'; NAME_MAX_BYTES + 1];
        let file = fs.create(ROOT_INO, &long, &regular(), ME).unwrap();
        assert_eq!(fs.lookup(ROOT_INO, &long).unwrap().ino, file.ino);
        assert_eq!(names(fs, ROOT_INO), vec![long.clone()]);
        let mut long_dir = long.clone();
        long_dir[0] = b'd';
        let dir = fs.mkdir(ROOT_INO, &long_dir, 0o755, ME).unwrap();
        let mut long_link = long.clone();
        long_link[0] = b'l';
        fs.link(file.ino, dir.ino, &long_link).unwrap();
        let mut renamed = long.clone();
        renamed[0] = b'r';
        fs.rename(ROOT_INO, &long, ROOT_INO, &renamed, RenameMode::NoReplace).unwrap();
        assert_eq!(fs.lookup(ROOT_INO, &renamed).unwrap().ino, file.ino);

        assert_err!(fs.create(ROOT_INO, &too_long, &regular(), ME), FsError::NameTooLong);
        assert_err!(fs.mkdir(ROOT_INO, &too_long, 0o755, ME), FsError::NameTooLong);
        assert_err!(fs.symlink(ROOT_INO, &too_long, b"t", ME), FsError::NameTooLong);
        assert_err!(fs.link(file.ino, ROOT_INO, &too_long), FsError::NameTooLong);
        assert_err!(fs.lookup(ROOT_INO, &too_long), FsError::NameTooLong);
        assert_err!(fs.rename(ROOT_INO, &renamed, ROOT_INO, &too_long, RenameMode::Replace), FsError::NameTooLong);
        assert_eq!(fs.getattr(ROOT_INO).unwrap().size, 2);
        assert_eq!(fs.getattr(file.ino).unwrap().nlink, 2);
        assert_consistent(fs, &[]);
    }

    fn empty_dot_dotdot_slash_and_nul_names_are_invalid(fs) {
        let file = mkfile(fs, ROOT_INO, b"f");
        let bad: [&[u8]; 6] = [b"", b".", b"..", b"a/b", b"/", b"a\0b"];
        for name in bad {
            assert_err!(fs.create(ROOT_INO, name, &regular(), ME), FsError::Invalid(_));
            assert_err!(fs.create(ROOT_INO, name, &special(FileKind::Socket), ME), FsError::Invalid(_));
            assert_err!(fs.mkdir(ROOT_INO, name, 0o755, ME), FsError::Invalid(_));
            assert_err!(fs.symlink(ROOT_INO, name, b"t", ME), FsError::Invalid(_));
            assert_err!(fs.link(file.ino, ROOT_INO, name), FsError::Invalid(_));
            assert_err!(fs.rename(ROOT_INO, b"f", ROOT_INO, name, RenameMode::Replace), FsError::Invalid(_));
        }
        assert_eq!(names(fs, ROOT_INO), vec![b"f".to_vec()]);
        assert_eq!(fs.getattr(file.ino).unwrap().nlink, 1);
        assert_consistent(fs, &[]);
    }

    fn unlink_of_a_directory_is_is_dir(fs) {
        let dir = mkdir(fs, ROOT_INO, b"d");
        assert_err!(fs.unlink(ROOT_INO, b"d"), FsError::IsDir);
        assert_eq!(fs.lookup(ROOT_INO, b"d").unwrap().ino, dir.ino);
        assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 3);
        assert_consistent(fs, &[]);
    }

    fn rmdir_errors(fs) {
        let file = mkfile(fs, ROOT_INO, b"f");
        let dir = mkdir(fs, ROOT_INO, b"d");
        mkfile(fs, dir.ino, b"inner");
        assert_err!(fs.rmdir(ROOT_INO, b"f"), FsError::NotDir);
        assert_err!(fs.rmdir(ROOT_INO, b"d"), FsError::NotEmpty);
        assert_err!(fs.rmdir(ROOT_INO, b"missing"), FsError::NotFound);
        assert_err!(fs.rmdir(dir.ino, b"."), FsError::Invalid(_));
        assert_err!(fs.rmdir(dir.ino, b".."), FsError::NotEmpty);
        assert_eq!(fs.getattr(file.ino).unwrap().nlink, 1);
        assert_eq!(fs.getattr(dir.ino).unwrap().size, 1);

        // A directory holding only a subdirectory is not empty either.
        fs.unlink(dir.ino, b"inner").unwrap();
        mkdir(fs, dir.ino, b"sub");
        assert_eq!(fs.getattr(dir.ino).unwrap().nlink, 3);
        assert_err!(fs.rmdir(ROOT_INO, b"d"), FsError::NotEmpty);
        fs.rmdir(dir.ino, b"sub").unwrap();
        assert_eq!(fs.getattr(dir.ino).unwrap().nlink, 2);
        assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 3);
        fs.rmdir(ROOT_INO, b"d").unwrap();
        assert_err!(fs.getattr(dir.ino), FsError::NotFound);
        assert_err!(fs.lookup(ROOT_INO, b"d"), FsError::NotFound);
        let root = fs.getattr(ROOT_INO).unwrap();
        assert_eq!((root.nlink, root.size), (2, 1));
        // A removed directory accepts nothing any more.
        assert_err!(fs.create(dir.ino, b"x", &regular(), ME), FsError::NotFound);
        assert_err!(fs.readdir(dir.ino, None, 10), FsError::NotFound);
        assert_consistent(fs, &[]);
    }

    fn link_to_a_directory_is_not_permitted(fs) {
        let dir = mkdir(fs, ROOT_INO, b"d");
        assert_err!(fs.link(dir.ino, ROOT_INO, b"alias"), FsError::NotPermitted(_));
        assert_err!(fs.link(ROOT_INO, dir.ino, b"root-alias"), FsError::NotPermitted(_));
        assert_err!(fs.lookup(ROOT_INO, b"alias"), FsError::NotFound);
        assert_eq!(fs.getattr(dir.ino).unwrap().nlink, 2);
        assert_consistent(fs, &[]);
    }

    fn readlink_and_symlink_rules(fs) {
        let file = mkfile(fs, ROOT_INO, b"f");
        let dir = mkdir(fs, ROOT_INO, b"d");
        assert_err!(fs.readlink(file.ino), FsError::Invalid(_));
        assert_err!(fs.readlink(dir.ino), FsError::Invalid(_));
        let link = fs.symlink(ROOT_INO, b"l", b"../target/of\xffbytes", ME).unwrap();
        assert_eq!(link.kind, FileKind::Symlink);
        assert_eq!(link.size, 18);
        assert_eq!(link.mode(), 0o120777);
        assert_eq!(fs.readlink(link.ino).unwrap(), b"../target/of\xffbytes");
        assert_eq!(fs.lookup(ROOT_INO, b"l").unwrap().ino, link.ino);
        assert_err!(fs.read(link.ino, 0, 10), FsError::Invalid(_));
        assert_err!(fs.write(link.ino, 0, b"x"), FsError::Invalid(_));

        let max = vec![b'a'; 4095];
        let big = fs.symlink(ROOT_INO, b"max", &max, ME).unwrap();
        assert_eq!(fs.readlink(big.ino).unwrap(), max);
        assert_err!(fs.symlink(ROOT_INO, b"over", &vec![b'a'; 4096], ME), FsError::NameTooLong);
        assert_err!(fs.lookup(ROOT_INO, b"over"), FsError::NotFound);
        // Symlinks can be hard-linked and unlinked like files.
        fs.link(link.ino, dir.ino, b"l2").unwrap();
        assert_eq!(fs.getattr(link.ino).unwrap().nlink, 2);
        fs.unlink(ROOT_INO, b"l").unwrap();
        assert_eq!(fs.readlink(link.ino).unwrap(), b"../target/of\xffbytes");
        fs.unlink(dir.ino, b"l2").unwrap();
        assert_err!(fs.getattr(link.ino), FsError::NotFound);
        assert_consistent(fs, &[]);
    }

    fn create_refuses_the_directory_kind(fs) {
        let new = NewInode { kind: FileKind::Directory, perm: 0o755, rdev: 0, target: b"" };
        assert_err!(fs.create(ROOT_INO, b"d", &new, ME), FsError::Invalid(_));
        assert_err!(fs.lookup(ROOT_INO, b"d"), FsError::NotFound);
        assert_eq!(fs.getattr(ROOT_INO).unwrap().size, 0);
    }

    fn special_files_keep_kind_and_rdev(fs) {
        let kinds = [
            (FileKind::Fifo, 0o010644),
            (FileKind::Socket, 0o140644),
            (FileKind::CharDevice, 0o020644),
            (FileKind::BlockDevice, 0o060644),
        ];
        for (i, (kind, mode)) in kinds.into_iter().enumerate() {
            let name = format!("s{i}").into_bytes();
            let inode = fs.create(ROOT_INO, &name, &special(kind), ME).unwrap();
            let found = fs.lookup(ROOT_INO, &name).unwrap();
            assert_eq!(found, inode);
            // mknod's device number is kept for devices only.
            let rdev = if kind.is_device() { 0x0801 } else { 0 };
            assert_eq!((found.kind, found.mode(), found.rdev, found.size, found.nlink), (kind, mode, rdev, 0, 1));
            assert_eq!(FileKind::from_mode(mode), Some(kind));
            assert_err!(fs.read(inode.ino, 0, 1), FsError::Invalid(_));
            assert_err!(fs.write(inode.ino, 0, b"x"), FsError::Invalid(_));
            assert_err!(fs.setattr(inode.ino, &SetAttr { size: Some(0), ..sattr() }), FsError::Invalid(_));
            assert_err!(fs.readlink(inode.ino), FsError::Invalid(_));
        }
        let kinds: Vec<_> = list(fs, ROOT_INO).into_iter().map(|e| e.kind).collect();
        assert_eq!(kinds, vec![FileKind::Fifo, FileKind::Socket, FileKind::CharDevice, FileKind::BlockDevice]);
        assert_consistent(fs, &[]);
    }

    fn mkdir_sets_attributes_and_parent_links(fs) {
        let before = fs.getattr(ROOT_INO).unwrap();
        let dir = fs.mkdir(ROOT_INO, b"d", 0o750, ME).unwrap();
        assert_eq!(dir.kind, FileKind::Directory);
        assert_eq!(dir.mode(), 0o040750);
        assert_eq!((dir.nlink, dir.size, dir.parent, dir.uid, dir.gid), (2, 0, ROOT_INO, 1000, 1000));
        let root = fs.getattr(ROOT_INO).unwrap();
        assert_eq!((root.nlink, root.size), (before.nlink + 1, before.size + 1));
        assert!(root.mtime >= before.mtime && root.ctime >= before.ctime);
        let sub = mkdir(fs, dir.ino, b"sub");
        assert_eq!(sub.parent, dir.ino);
        assert_eq!(fs.getattr(dir.ino).unwrap().nlink, 3);
        assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 3);
        let file = mkfile(fs, dir.ino, b"f");
        assert_eq!((file.nlink, file.parent, file.size), (1, dir.ino, 0));
        assert_eq!(file.mode(), 0o100644);
        let d = fs.getattr(dir.ino).unwrap();
        assert_eq!((d.nlink, d.size), (3, 2));
        assert_consistent(fs, &[]);
    }

    fn setgid_directories_pass_their_group_down(fs) {
        let dir = fs.mkdir(ROOT_INO, b"shared", 0o2775, OTHER).unwrap();
        assert_eq!((dir.gid, dir.perm), (3000, 0o2775));
        let file = fs.create(dir.ino, b"f", &regular(), ME).unwrap();
        assert_eq!((file.uid, file.gid, file.perm), (1000, 3000, 0o644));
        let sub = fs.mkdir(dir.ino, b"sub", 0o755, ME).unwrap();
        assert_eq!((sub.uid, sub.gid, sub.perm), (1000, 3000, 0o2755));
        let plain = fs.mkdir(ROOT_INO, b"plain", 0o755, OTHER).unwrap();
        let file2 = fs.create(plain.ino, b"f", &regular(), ME).unwrap();
        assert_eq!((file2.uid, file2.gid), (1000, 1000));
        assert_consistent(fs, &[]);
    }

    fn hard_links_share_one_inode(fs) {
        let file = mkfile_with(fs, ROOT_INO, b"a", b"shared bytes");
        let dir = mkdir(fs, ROOT_INO, b"d");
        let linked = fs.link(file.ino, dir.ino, b"b").unwrap();
        assert_eq!((linked.ino, linked.nlink), (file.ino, 2));
        fs.link(file.ino, ROOT_INO, b"c").unwrap();
        assert_eq!(fs.getattr(file.ino).unwrap().nlink, 3);
        assert_eq!(fs.lookup(dir.ino, b"b").unwrap().ino, file.ino);
        assert_eq!(fs.getattr(dir.ino).unwrap().size, 1);
        // A write through one name is seen through the others.
        fs.write(fs.lookup(ROOT_INO, b"c").unwrap().ino, 0, b"SHARED").unwrap();
        assert_eq!(read_all(fs, fs.lookup(dir.ino, b"b").unwrap().ino), b"SHARED bytes");
        fs.unlink(ROOT_INO, b"a").unwrap();
        assert_eq!(fs.getattr(file.ino).unwrap().nlink, 2);
        fs.unlink(dir.ino, b"b").unwrap();
        assert_eq!(fs.getattr(file.ino).unwrap().nlink, 1);
        assert_eq!(read_all(fs, file.ino), b"SHARED bytes");
        assert_consistent(fs, &[]);
        fs.unlink(ROOT_INO, b"c").unwrap();
        assert_err!(fs.getattr(file.ino), FsError::NotFound);
        assert_err!(fs.read(file.ino, 0, 10), FsError::NotFound);
        assert_err!(fs.link(file.ino, ROOT_INO, b"again"), FsError::NotFound);
        assert_consistent(fs, &[]);
    }

    fn readdir_pages_5000_entries_exactly_once_in_order(fs) {
        let dir = mkdir(fs, ROOT_INO, b"big");
        let mut rng = Lcg::new(5000);
        let mut order: Vec<u32> = (0..5000).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut inos = std::collections::BTreeMap::new();
        for &i in &order {
            let name = format!("entry-{:x}-{}", i * 7919 % 5003, i).into_bytes();
            let inode = if i % 10 == 0 {
                mkdir(fs, dir.ino, &name)
            } else {
                mkfile(fs, dir.ino, &name)
            };
            inos.insert(name, inode.ino);
        }
        let expected: Vec<Vec<u8>> = inos.keys().cloned().collect();
        let d = fs.getattr(dir.ino).unwrap();
        assert_eq!((d.size, d.nlink), (5000, 2 + 500));

        for limit in [1usize, 97, 1000, 10_000] {
            let mut seen = Vec::new();
            let mut after: Option<Vec<u8>> = None;
            loop {
                let page = fs.readdir(dir.ino, after.as_deref(), limit).unwrap();
                assert!(page.len() <= limit, "page of {} over limit {limit}", page.len());
                if page.is_empty() {
                    break;
                }
                for entry in &page {
                    assert_eq!(inos[&entry.name], entry.ino);
                    let want = if entry.name.ends_with(b"0") { FileKind::Directory } else { FileKind::Regular };
                    assert_eq!(entry.kind, want);
                }
                after = Some(page.last().unwrap().name.clone());
                seen.extend(page.into_iter().map(|e| e.name));
                if limit == 1 && seen.len() >= 300 {
                    break;
                }
            }
            if limit == 1 {
                assert_eq!(&seen[..], &expected[..300]);
            } else {
                assert_eq!(seen, expected, "limit {limit}");
            }
        }

        let mut plus = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = fs.readdir_plus(dir.ino, after.as_deref(), 333).unwrap();
            if page.is_empty() {
                break;
            }
            after = Some(page.last().unwrap().0.name.clone());
            plus.extend(page);
        }
        assert_eq!(plus.len(), 5000);
        for (entry, inode) in &plus {
            assert_eq!(entry.ino, inode.ino);
            assert_eq!(entry.kind, inode.kind);
            assert_eq!(&fs.getattr(entry.ino).unwrap(), inode);
        }
        assert_eq!(plus.iter().map(|(e, _)| e.name.clone()).collect::<Vec<_>>(), expected);

        // Remove every other entry; paging sees exactly the rest.
        for (i, name) in expected.iter().enumerate() {
            if i % 2 == 0 {
                if name.ends_with(b"0") {
                    fs.rmdir(dir.ino, name).unwrap();
                } else {
                    fs.unlink(dir.ino, name).unwrap();
                }
            }
        }
        let rest: Vec<Vec<u8>> = expected.iter().skip(1).step_by(2).cloned().collect();
        assert_eq!(names(fs, dir.ino), rest);
        assert_eq!(fs.getattr(dir.ino).unwrap().size, 2500);
        assert_consistent(fs, &[]);
    }

    fn readdir_after_a_name_that_does_not_exist(fs) {
        for name in [&b"a"[..], b"c", b"e", b"e\x01", b"ee"] {
            mkfile(fs, ROOT_INO, name);
        }
        let after = |name: &[u8]| -> Vec<Vec<u8>> {
            fs.readdir(ROOT_INO, Some(name), 100).unwrap().into_iter().map(|e| e.name).collect()
        };
        assert_eq!(after(b"b"), vec![b"c".to_vec(), b"e".to_vec(), b"e\x01".to_vec(), b"ee".to_vec()]);
        assert_eq!(after(b"e"), vec![b"e\x01".to_vec(), b"ee".to_vec()]);
        assert_eq!(after(b"e\0"), vec![b"e\x01".to_vec(), b"ee".to_vec()]);
        assert_eq!(after(b"e\x01"), vec![b"ee".to_vec()]);
        assert_eq!(after(b"ee"), Vec::<Vec<u8>>::new());
        assert_eq!(after(b"zzz"), Vec::<Vec<u8>>::new());
        assert_eq!(after(b""), names(fs, ROOT_INO));
        let empty = mkdir(fs, ROOT_INO, b"empty");
        assert!(fs.readdir(empty.ino, None, 100).unwrap().is_empty());
        assert!(fs.readdir(empty.ino, Some(b"x"), 100).unwrap().is_empty());
        assert!(fs.readdir_plus(empty.ino, None, 100).unwrap().is_empty());
    }

    fn readdir_with_limit_zero_returns_nothing(fs) {
        mkfile(fs, ROOT_INO, b"a");
        mkfile(fs, ROOT_INO, b"b");
        // "Up to `limit` entries": a zero limit must not return one.
        assert_eq!(fs.readdir(ROOT_INO, None, 0).unwrap(), Vec::<DirEntry>::new());
        assert_eq!(fs.readdir_plus(ROOT_INO, None, 0).unwrap().len(), 0);
    }

    fn siblings_get_adjacent_inode_numbers(fs) {
        let a = mkdir(fs, ROOT_INO, b"a");
        let b = mkdir(fs, ROOT_INO, b"b");
        let mut in_a = Vec::new();
        let mut in_b = Vec::new();
        for i in 0..20 {
            in_a.push(mkfile(fs, a.ino, format!("f{i}").as_bytes()).ino);
            in_b.push(mkfile(fs, b.ino, format!("f{i}").as_bytes()).ino);
        }
        for run in [&in_a, &in_b] {
            assert!(run.windows(2).all(|w| w[1] == w[0] + 1), "not adjacent: {run:?}");
        }
        let all: std::collections::BTreeSet<u64> = in_a.iter().chain(&in_b).copied().chain([ROOT_INO, a.ino, b.ino]).collect();
        assert_eq!(all.len(), 43, "inode numbers handed out twice");
    }

    fn new_inodes_belong_to_the_caller(fs) {
        let file = fs.create(ROOT_INO, b"f", &regular(), OTHER).unwrap();
        let link = fs.symlink(ROOT_INO, b"l", b"f", OTHER).unwrap();
        let dir = fs.mkdir(ROOT_INO, b"d", 0o700, OTHER).unwrap();
        for inode in [file, link, dir] {
            assert_eq!((inode.uid, inode.gid, inode.project), (2000, 3000, 0));
            assert_eq!(fs.getattr(inode.ino).unwrap(), inode);
        }
        assert_consistent(fs, &[]);
    }
}

#[test]
fn read_only_memory_engine_refuses_every_mutation() {
    let fs = Engine::open_memory(EngineConfig {
        read_only: true,
        ..EngineConfig::default()
    })
    .unwrap();
    assert!(fs.is_read_only());
    assert_eq!(fs.getattr(ROOT_INO).unwrap().nlink, 2);
    assert_err!(fs.create(ROOT_INO, b"f", &regular(), ME), FsError::ReadOnly);
    assert_err!(fs.mkdir(ROOT_INO, b"d", 0o755, ME), FsError::ReadOnly);
    assert_err!(fs.symlink(ROOT_INO, b"l", b"t", ME), FsError::ReadOnly);
    assert_err!(
        fs.setattr(
            ROOT_INO,
            &SetAttr {
                perm: Some(0o700),
                ..sattr()
            }
        ),
        FsError::ReadOnly
    );
    assert_err!(
        fs.setxattr(ROOT_INO, b"user.a", b"v", XattrMode::Either),
        FsError::ReadOnly
    );
    assert!(fs.readdir(ROOT_INO, None, 10).unwrap().is_empty());
    assert_eq!(fs.getattr(ROOT_INO).unwrap().perm, 0o755);
    fs.sync().unwrap();
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "a table of every mutation, each refused on the same read-only engine"
)]
fn read_only_disk_engine_serves_reads_and_refuses_every_mutation() {
    let fs = disk_with(no_thread());
    let store = fs.store.clone().unwrap();
    let dir = mkdir(&fs, ROOT_INO, b"d");
    let file = mkfile_with(&fs, dir.ino, b"f", b"hello");
    let big = mkfile_with(&fs, ROOT_INO, b"big", &vec![7u8; 100_000]);
    fs.setxattr(file.ino, b"user.k", b"v", XattrMode::Either)
        .unwrap();
    let before = snapshot(&fs);
    let usage_before = total(&fs);
    let closed = fs.close();

    let ro = Engine::open(
        &store,
        EngineConfig {
            read_only: true,
            commit_interval: None,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    assert!(ro.is_read_only());
    assert_eq!(snapshot(&ro), before);
    assert_eq!(ro.usage(UsageOwner::Total).unwrap(), usage_before);
    let mutations: Vec<(&str, Result<(), FsError>)> = vec![
        (
            "create",
            ro.create(ROOT_INO, b"new", &regular(), ME).map(|_| ()),
        ),
        (
            "mknod",
            ro.create(ROOT_INO, b"fifo", &special(FileKind::Fifo), ME)
                .map(|_| ()),
        ),
        ("mkdir", ro.mkdir(ROOT_INO, b"new", 0o755, ME).map(|_| ())),
        (
            "symlink",
            ro.symlink(ROOT_INO, b"new", b"t", ME).map(|_| ()),
        ),
        ("link", ro.link(file.ino, ROOT_INO, b"new").map(|_| ())),
        ("unlink", ro.unlink(dir.ino, b"f")),
        ("rmdir", ro.rmdir(ROOT_INO, b"d")),
        (
            "rename",
            ro.rename(ROOT_INO, b"d", ROOT_INO, b"e", RenameMode::Replace)
                .map(|_| ()),
        ),
        (
            "exchange",
            ro.rename(ROOT_INO, b"d", ROOT_INO, b"big", RenameMode::Exchange)
                .map(|_| ()),
        ),
        ("write", ro.write(file.ino, 0, b"x").map(|_| ())),
        (
            "truncate",
            ro.setattr(
                big.ino,
                &SetAttr {
                    size: Some(1),
                    ..sattr()
                },
            )
            .map(|_| ()),
        ),
        (
            "chmod",
            ro.setattr(
                file.ino,
                &SetAttr {
                    perm: Some(0o600),
                    ..sattr()
                },
            )
            .map(|_| ()),
        ),
        (
            "chown",
            ro.setattr(
                file.ino,
                &SetAttr {
                    uid: Some(0),
                    ..sattr()
                },
            )
            .map(|_| ()),
        ),
        (
            "utimes",
            ro.setattr(
                file.ino,
                &SetAttr {
                    mtime: Some(SetTime::Now),
                    ..sattr()
                },
            )
            .map(|_| ()),
        ),
        (
            "setxattr",
            ro.setxattr(file.ino, b"user.k2", b"v", XattrMode::Either),
        ),
        ("removexattr", ro.removexattr(file.ino, b"user.k")),
    ];
    for (what, result) in mutations {
        assert!(
            matches!(result, Err(FsError::ReadOnly)),
            "{what} on a read-only engine: {result:?}"
        );
    }
    assert_eq!(read_all(&ro, file.ino), b"hello");
    assert_eq!(snapshot(&ro), before);
    ro.sync().unwrap();
    drop(ro);
    assert_fsck_clean(&store);
    // And it opens read-write again, unchanged.
    let rw = Engine::open(&store, no_thread()).unwrap();
    assert_eq!(snapshot(&rw), before);
    drop(rw);
    drop(closed);
}

both_backends! {
    fn unlinks_joined_to_a_decided_one_are_written_with_it(fs) {
        // `Decided::join_unlink`: the fast path decides the unlinks `rm -rf` makes one
        // after another into one batch. Each answers as it would alone; nothing is
        // written before the commit, and then all of it.
        let dir = mkdir(fs, ROOT_INO, b"d");
        let other = mkdir(fs, ROOT_INO, b"o");
        let a = mkfile_with(fs, dir.ino, b"a", b"data");
        let b = mkfile_with(fs, dir.ino, b"b", &[7u8; 70_000]);
        let c = mkfile(fs, dir.ino, b"c");
        let e = mkfile(fs, other.ino, b"e");
        let linked = mkfile(fs, dir.ino, b"l");
        fs.link(linked.ino, other.ino, b"l2").unwrap();
        mkdir(fs, dir.ino, b"sub");
        let inodes_before = total(fs).inodes;

        let mut decided = fs.unlink_decided(dir.ino, b"a").unwrap();
        assert_eq!(decided.inode().ino, a.ino);
        let joined = decided.join_unlink(dir.ino, b"b").unwrap();
        assert_eq!(joined.map(|file| file.ino), Some(b.ino));
        assert_err!(decided.join_unlink(dir.ino, b"a"), FsError::NotFound);
        assert_err!(decided.join_unlink(dir.ino, b"missing"), FsError::NotFound);
        assert_err!(decided.join_unlink(dir.ino, b"sub"), FsError::IsDir);
        assert!(
            decided.join_unlink(dir.ino, b"l").unwrap().is_none(),
            "a file with another name: its removal reads link records, so it goes alone"
        );
        let joined = decided.join_unlink(other.ino, b"e").unwrap();
        assert_eq!(joined.map(|file| file.ino), Some(e.ino));
        assert_eq!(
            fs.lookup(dir.ino, b"b").unwrap().ino,
            b.ino,
            "written only at the commit"
        );
        decided.commit().unwrap();

        for (parent, name) in [(dir.ino, b"a"), (dir.ino, b"b"), (other.ino, b"e")] {
            assert_err!(fs.lookup(parent, name), FsError::NotFound);
        }
        assert_eq!(fs.lookup(dir.ino, b"c").unwrap().ino, c.ino);
        assert_eq!(fs.getattr(linked.ino).unwrap().nlink, 2);
        assert_eq!(fs.getattr(dir.ino).unwrap().size, 3, "c, l and sub left");
        assert_eq!(fs.getattr(other.ino).unwrap().size, 1, "l2 left");
        assert_eq!(total(fs).inodes, inodes_before - 3);
        // The writer lock is free again.
        fs.unlink(dir.ino, b"l").unwrap();
        assert_consistent(fs, &[]);
    }
}

/// A thread that holds a decided change (the fast path holds one across requests) and
/// begins another would wait on its own writer lock: a panic that names it, not a hang.
#[test]
#[should_panic(expected = "a thread that holds a transaction waited for the writer lock it holds")]
fn beginning_a_change_while_holding_one_panics_rather_than_hangs() {
    let fs = memory();
    mkfile(&fs, ROOT_INO, b"a");
    mkfile(&fs, ROOT_INO, b"b");
    let _held = fs.unlink_decided(ROOT_INO, b"a").unwrap();
    let _ = fs.unlink(ROOT_INO, b"b");
}

both_backends! {
    fn lookups_a_kept_listing_answers_follow_every_change(fs) {
        // Name lookups between listings kept (`listing_cache`) and changes of every kind
        // see each change at once.
        let dir = mkdir(fs, ROOT_INO, b"looked");
        let a = mkfile(fs, dir.ino, b"a");
        mkfile(fs, dir.ino, b"c");
        let lookup = |fs: &Engine, name: &[u8]| {
            fs.lookup_entry(dir.ino, name)
                .unwrap()
                .map(|(ino, _)| ino)
        };
        fs.readdir(dir.ino, None, 100).unwrap();
        assert_eq!(lookup(fs, b"a"), Some(a.ino));
        assert_eq!(lookup(fs, b"b"), None);
        assert_eq!(lookup(fs, b"zz"), None);
        let b = mkfile(fs, dir.ino, b"b");
        assert_eq!(lookup(fs, b"b"), Some(b.ino));
        fs.readdir_plus(dir.ino, None, 100).unwrap();
        fs.unlink(dir.ino, b"a").unwrap();
        assert_eq!(lookup(fs, b"a"), None);
        fs.readdir(dir.ino, None, 100).unwrap();
        fs.rename(dir.ino, b"b", dir.ino, b"z", RenameMode::NoReplace)
            .unwrap();
        assert_eq!(lookup(fs, b"b"), None);
        assert_eq!(lookup(fs, b"z"), Some(b.ino));
        let other = mkdir(fs, ROOT_INO, b"other");
        let moved = mkfile(fs, other.ino, b"m");
        fs.readdir(dir.ino, None, 100).unwrap();
        fs.rename(other.ino, b"m", dir.ino, b"m", RenameMode::NoReplace)
            .unwrap();
        assert_eq!(lookup(fs, b"m"), Some(moved.ino));
        fs.readdir(dir.ino, None, 100).unwrap();
        let sub = mkdir(fs, dir.ino, b"d");
        assert_eq!(lookup(fs, b"d"), Some(sub.ino));
        assert_consistent(fs, &[]);
    }
}
