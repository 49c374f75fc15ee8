//! Extended attributes: namespaces, create/replace modes, limits and lifetime.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use common::*;

const VALUE_MAX: usize = 64 * 1024;

both_backends! {
    fn set_get_list_remove_round_trip(fs) {
        let file = mkfile(fs, ROOT_INO, b"f");
        fs.setxattr(file.ino, b"user.b", b"\x00\xffbinary\x00", XattrMode::Either).unwrap();
        fs.setxattr(file.ino, b"user.a", b"", XattrMode::Either).unwrap();
        fs.setxattr(file.ino, b"trusted.t", b"tv", XattrMode::Either).unwrap();
        fs.setxattr(file.ino, b"security.selinux", b"ctx", XattrMode::Either).unwrap();
        assert_eq!(fs.getxattr(file.ino, b"user.b").unwrap(), b"\x00\xffbinary\x00");
        assert_eq!(fs.getxattr(file.ino, b"user.a").unwrap(), b"");
        assert_eq!(fs.getxattr(file.ino, b"trusted.t").unwrap(), b"tv");
        assert_eq!(
            fs.listxattr(file.ino).unwrap(),
            vec![b"security.selinux".to_vec(), b"trusted.t".to_vec(), b"user.a".to_vec(), b"user.b".to_vec()]
        );
        fs.setxattr(file.ino, b"user.b", b"replaced", XattrMode::Either).unwrap();
        assert_eq!(fs.getxattr(file.ino, b"user.b").unwrap(), b"replaced");
        fs.removexattr(file.ino, b"user.b").unwrap();
        assert_err!(fs.getxattr(file.ino, b"user.b"), FsError::NoXattr);
        assert_eq!(fs.listxattr(file.ino).unwrap().len(), 3);
        // Attributes are per inode: a fresh file has none.
        let other = mkfile(fs, ROOT_INO, b"g");
        assert_eq!(fs.listxattr(other.ino).unwrap(), Vec::<Vec<u8>>::new());
        assert_err!(fs.getxattr(other.ino, b"user.a"), FsError::NoXattr);
    }

    fn create_and_replace_modes(fs) {
        let file = mkfile(fs, ROOT_INO, b"f");
        fs.setxattr(file.ino, b"user.k", b"one", XattrMode::CreateOnly).unwrap();
        assert_err!(fs.setxattr(file.ino, b"user.k", b"two", XattrMode::CreateOnly), FsError::Exists);
        assert_eq!(fs.getxattr(file.ino, b"user.k").unwrap(), b"one");
        assert_err!(fs.setxattr(file.ino, b"user.missing", b"x", XattrMode::ReplaceOnly), FsError::NoXattr);
        assert_err!(fs.getxattr(file.ino, b"user.missing"), FsError::NoXattr);
        fs.setxattr(file.ino, b"user.k", b"three", XattrMode::ReplaceOnly).unwrap();
        assert_eq!(fs.getxattr(file.ino, b"user.k").unwrap(), b"three");
        assert_eq!(fs.listxattr(file.ino).unwrap(), vec![b"user.k".to_vec()]);
        fs.removexattr(file.ino, b"user.k").unwrap();
        assert_err!(fs.removexattr(file.ino, b"user.k"), FsError::NoXattr);
        assert_err!(fs.setxattr(file.ino, b"user.k", b"x", XattrMode::ReplaceOnly), FsError::NoXattr);
        fs.setxattr(file.ino, b"user.k", b"again", XattrMode::CreateOnly).unwrap();
        assert_eq!(fs.getxattr(file.ino, b"user.k").unwrap(), b"again");
    }

    fn unsupported_namespaces_and_bad_names(fs) {
        let file = mkfile(fs, ROOT_INO, b"f");
        for name in [&b"system.other"[..], b"other.x", b"user.", b"user", b"trusted."] {
            assert_err!(fs.setxattr(file.ino, name, b"v", XattrMode::Either), FsError::XattrNotSupported);
            // Reading or removing one that cannot exist is "no such attribute".
            assert_err!(fs.getxattr(file.ino, name), FsError::NoXattr);
            assert_err!(fs.removexattr(file.ino, name), FsError::NoXattr);
        }
        // POSIX ACLs are supported (see kernel_contract.rs), in their own encoding only.
        for name in [&b"system.posix_acl_access"[..], b"system.posix_acl_default"] {
            assert_err!(fs.setxattr(file.ino, name, b"v", XattrMode::Either), FsError::Invalid(_));
            assert_err!(fs.getxattr(file.ino, name), FsError::NoXattr);
        }
        assert_err!(fs.setxattr(file.ino, b"", b"v", XattrMode::Either), FsError::Invalid(_));
        assert_err!(fs.getxattr(file.ino, b""), FsError::Invalid(_));
        let mut long = b"user.".to_vec();
        long.resize(255, b'n');
        fs.setxattr(file.ino, &long, b"v", XattrMode::Either).unwrap();
        assert_eq!(fs.getxattr(file.ino, &long).unwrap(), b"v");
        long.push(b'n');
        assert_err!(fs.setxattr(file.ino, &long, b"v", XattrMode::Either), FsError::Range);
        assert_err!(fs.getxattr(file.ino, &long), FsError::Range);
        assert_eq!(fs.listxattr(file.ino).unwrap().len(), 1);
    }

    fn value_size_limit(fs) {
        let file = mkfile(fs, ROOT_INO, b"f");
        let mut rng = Lcg::new(64);
        let max = rng.bytes(VALUE_MAX);
        fs.setxattr(file.ino, b"user.max", &max, XattrMode::Either).unwrap();
        assert_eq!(fs.getxattr(file.ino, b"user.max").unwrap(), max);
        assert_err!(fs.setxattr(file.ino, b"user.over", &vec![1u8; VALUE_MAX + 1], XattrMode::Either), FsError::Range);
        assert_err!(fs.setxattr(file.ino, b"user.max", &vec![1u8; VALUE_MAX + 1], XattrMode::ReplaceOnly), FsError::Range);
        assert_eq!(fs.getxattr(file.ino, b"user.max").unwrap(), max);
        assert_eq!(fs.listxattr(file.ino).unwrap(), vec![b"user.max".to_vec()]);
        // Attribute bytes are not file data: usage does not see them.
        assert_eq!(total(fs).bytes, 0);
    }

    fn missing_inode_is_not_found(fs) {
        let gone = mkfile(fs, ROOT_INO, b"f");
        fs.setxattr(gone.ino, b"user.k", b"v", XattrMode::Either).unwrap();
        fs.unlink(ROOT_INO, b"f").unwrap();
        assert_err!(fs.setxattr(gone.ino, b"user.k", b"v", XattrMode::Either), FsError::NotFound);
        assert_err!(fs.getxattr(gone.ino, b"user.other"), FsError::NotFound);
        assert_err!(fs.listxattr(gone.ino), FsError::NotFound);
        assert_err!(fs.removexattr(gone.ino, b"user.k"), FsError::NotFound);
        // A new file never sees the old one's attributes.
        let fresh = mkfile(fs, ROOT_INO, b"f");
        assert_eq!(fs.listxattr(fresh.ino).unwrap(), Vec::<Vec<u8>>::new());
    }

    fn every_kind_of_inode_takes_attributes(fs) {
        let dir = mkdir(fs, ROOT_INO, b"d");
        let link = fs.symlink(ROOT_INO, b"l", b"t", ME).unwrap();
        let fifo = fs.create(ROOT_INO, b"p", &special(FileKind::Fifo), ME).unwrap();
        for ino in [ROOT_INO, dir.ino, link.ino, fifo.ino] {
            fs.setxattr(ino, b"trusted.overlay.opaque", b"y", XattrMode::CreateOnly).unwrap();
            assert_eq!(fs.getxattr(ino, b"trusted.overlay.opaque").unwrap(), b"y");
        }
        // Hard links share them.
        let file = mkfile(fs, dir.ino, b"f");
        fs.link(file.ino, ROOT_INO, b"f2").unwrap();
        fs.setxattr(fs.lookup(ROOT_INO, b"f2").unwrap().ino, b"user.shared", b"1", XattrMode::Either).unwrap();
        assert_eq!(fs.getxattr(fs.lookup(dir.ino, b"f").unwrap().ino, b"user.shared").unwrap(), b"1");
    }

    fn setxattr_and_removexattr_touch_ctime_only(fs) {
        let file = mkfile_with(fs, ROOT_INO, b"f", b"x");
        let old = Timestamp { secs: 1000, nanos: 0 };
        fs.setattr(file.ino, &SetAttr { mtime: Some(SetTime::At(old)), ctime: Some(old), ..sattr() }).unwrap();
        fs.setxattr(file.ino, b"user.k", b"v", XattrMode::Either).unwrap();
        let after_set = fs.getattr(file.ino).unwrap();
        assert!(after_set.ctime > old);
        assert_eq!(after_set.mtime, old);
        fs.setattr(file.ino, &SetAttr { ctime: Some(old), ..sattr() }).unwrap();
        fs.removexattr(file.ino, b"user.k").unwrap();
        assert!(fs.getattr(file.ino).unwrap().ctime > old);
        // A refused change leaves ctime alone.
        fs.setattr(file.ino, &SetAttr { ctime: Some(old), ..sattr() }).unwrap();
        assert_err!(fs.removexattr(file.ino, b"user.k"), FsError::NoXattr);
        assert_eq!(fs.getattr(file.ino).unwrap().ctime, old);
    }
}

#[test]
fn attributes_die_with_their_inode() {
    let fs = disk_with(no_thread());
    let dir = mkdir(&fs, ROOT_INO, b"d");
    let a = mkfile(&fs, dir.ino, b"a");
    let b = mkfile(&fs, ROOT_INO, b"b");
    let c = mkfile(&fs, ROOT_INO, b"c");
    let keep = mkfile(&fs, ROOT_INO, b"keep");
    let orphan = mkfile(&fs, ROOT_INO, b"orphan");
    for ino in [dir.ino, a.ino, b.ino, c.ino, keep.ino, orphan.ino] {
        for i in 0..3 {
            fs.setxattr(
                ino,
                format!("user.{i}").as_bytes(),
                b"value",
                XattrMode::Either,
            )
            .unwrap();
        }
    }
    fs.unlink(dir.ino, b"a").unwrap();
    fs.rmdir(ROOT_INO, b"d").unwrap();
    fs.rename(ROOT_INO, b"b", ROOT_INO, b"c", RenameMode::Replace)
        .unwrap();
    fs.open_file(orphan.ino);
    fs.unlink(ROOT_INO, b"orphan").unwrap();
    assert_eq!(fs.listxattr(orphan.ino).unwrap().len(), 3);
    fs.release_file(orphan.ino).unwrap();
    assert_eq!(
        fs.listxattr(fs.lookup(ROOT_INO, b"c").unwrap().ino)
            .unwrap()
            .len(),
        3
    );
    let closed = fs.close();
    let report = assert_fsck_clean(&closed.store);
    // Only `keep` and the renamed `b` (now `c`) still have attributes.
    assert_eq!(report.xattrs, 6, "{}", report.summary());
}
