//! rename(2)/renameat2(2): plain moves, replacement, NOREPLACE, EXCHANGE and every refusal,
//! checking parents' sizes and link counts, parent pointers and usage counters.

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use common::*;

/// Three directories under the root: `a`, `b` and `a/sub`.
struct Tree {
    a: Inode,
    b: Inode,
    sub: Inode,
}

fn tree(fs: &Engine) -> Tree {
    let a = mkdir(fs, ROOT_INO, b"a");
    let b = mkdir(fs, ROOT_INO, b"b");
    let sub = mkdir(fs, a.ino, b"sub");
    Tree { a, b, sub }
}

fn attr(fs: &Engine, ino: u64) -> Inode {
    fs.getattr(ino).unwrap()
}

both_backends! {
    fn rename_reports_which_inode_went_where(fs) {
        let t = tree(fs);
        let f = mkfile(fs, t.a.ino, b"f");
        let g = mkfile(fs, t.b.ino, b"g");
        let moved = fs.rename(t.a.ino, b"f", t.b.ino, b"h", RenameMode::Replace).unwrap();
        assert_eq!(moved, Renamed { moved: f.ino, exchanged: None });
        let swapped = fs.rename(t.b.ino, b"h", t.b.ino, b"g", RenameMode::Exchange).unwrap();
        assert_eq!(swapped, Renamed { moved: f.ino, exchanged: Some(g.ino) });
    }
}

both_backends! {
    fn move_a_file_across_directories(fs) {
        let t = tree(fs);
        let file = mkfile_with(fs, t.a.ino, b"f", b"payload");
        let (a0, b0) = (attr(fs, t.a.ino), attr(fs, t.b.ino));
        fs.rename(t.a.ino, b"f", t.b.ino, b"g", RenameMode::Replace).unwrap();
        assert_err!(fs.lookup(t.a.ino, b"f"), FsError::NotFound);
        let moved = fs.lookup(t.b.ino, b"g").unwrap();
        assert_eq!(moved.ino, file.ino);
        assert_eq!((moved.nlink, moved.parent), (1, t.b.ino));
        assert!(moved.ctime >= file.ctime);
        assert_eq!(read_all(fs, moved.ino), b"payload");
        let (a1, b1) = (attr(fs, t.a.ino), attr(fs, t.b.ino));
        assert_eq!((a1.size, a1.nlink), (a0.size - 1, a0.nlink));
        assert_eq!((b1.size, b1.nlink), (b0.size + 1, b0.nlink));
        assert!(a1.mtime >= a0.mtime && b1.mtime >= b0.mtime);
        assert_consistent(fs, &[]);
    }

    fn move_a_directory_across_directories(fs) {
        let t = tree(fs);
        mkfile_with(fs, t.sub.ino, b"inner", b"x");
        mkdir(fs, t.sub.ino, b"deeper");
        let (a0, b0) = (attr(fs, t.a.ino), attr(fs, t.b.ino));
        assert_eq!(a0.nlink, 3);
        fs.rename(t.a.ino, b"sub", t.b.ino, b"moved", RenameMode::Replace).unwrap();
        let (a1, b1) = (attr(fs, t.a.ino), attr(fs, t.b.ino));
        assert_eq!((a1.size, a1.nlink), (a0.size - 1, a0.nlink - 1));
        assert_eq!((b1.size, b1.nlink), (b0.size + 1, b0.nlink + 1));
        let moved = fs.lookup(t.b.ino, b"moved").unwrap();
        assert_eq!(moved.ino, t.sub.ino);
        assert_eq!((moved.parent, moved.nlink, moved.size), (t.b.ino, 3, 2));
        assert_eq!(names(fs, t.sub.ino), vec![b"deeper".to_vec(), b"inner".to_vec()]);
        // The root's link count did not move: both directories stay where they were.
        assert_eq!(attr(fs, ROOT_INO).nlink, 4);
        assert_consistent(fs, &[]);
    }

    fn rename_within_one_directory(fs) {
        let t = tree(fs);
        mkfile(fs, t.a.ino, b"f");
        let a0 = attr(fs, t.a.ino);
        fs.rename(t.a.ino, b"f", t.a.ino, b"g", RenameMode::NoReplace).unwrap();
        fs.rename(t.a.ino, b"sub", t.a.ino, b"sub2", RenameMode::Replace).unwrap();
        let a1 = attr(fs, t.a.ino);
        assert_eq!((a1.size, a1.nlink), (a0.size, a0.nlink));
        assert_eq!(names(fs, t.a.ino), vec![b"g".to_vec(), b"sub2".to_vec()]);
        assert_eq!(attr(fs, t.sub.ino).parent, t.a.ino);
        // Renaming a name onto itself changes nothing.
        let before = snapshot(fs);
        fs.rename(t.a.ino, b"g", t.a.ino, b"g", RenameMode::Replace).unwrap();
        fs.rename(t.a.ino, b"sub2", t.a.ino, b"sub2", RenameMode::Replace).unwrap();
        assert_eq!(names(fs, t.a.ino), vec![b"g".to_vec(), b"sub2".to_vec()]);
        assert_eq!(snapshot(fs), before);
        assert_consistent(fs, &[]);
    }

    fn rename_over_an_existing_file_removes_it(fs) {
        let t = tree(fs);
        let src = mkfile_with(fs, t.a.ino, b"src", b"new contents");
        let victim = mkfile_with(fs, t.b.ino, b"dst", &vec![9u8; 100_000]);
        fs.setxattr(victim.ino, b"user.x", b"1", XattrMode::Either).unwrap();
        let usage0 = total(fs);
        let mine0 = fs.usage(UsageOwner::User(1000)).unwrap();
        let b0 = attr(fs, t.b.ino);
        fs.rename(t.a.ino, b"src", t.b.ino, b"dst", RenameMode::Replace).unwrap();
        assert_err!(fs.getattr(victim.ino), FsError::NotFound);
        assert_err!(fs.read(victim.ino, 0, 10), FsError::NotFound);
        assert_err!(fs.listxattr(victim.ino), FsError::NotFound);
        let found = fs.lookup(t.b.ino, b"dst").unwrap();
        assert_eq!(found.ino, src.ino);
        assert_eq!(read_all(fs, found.ino), b"new contents");
        assert_err!(fs.lookup(t.a.ino, b"src"), FsError::NotFound);
        let b1 = attr(fs, t.b.ino);
        assert_eq!((b1.size, b1.nlink), (b0.size, b0.nlink));
        let usage1 = total(fs);
        assert_eq!(usage1, Usage { inodes: usage0.inodes - 1, bytes: usage0.bytes - 100_000 });
        let mine1 = fs.usage(UsageOwner::User(1000)).unwrap();
        assert_eq!(mine1, Usage { inodes: mine0.inodes - 1, bytes: mine0.bytes - 100_000 });
        assert_consistent(fs, &[]);
    }

    fn rename_over_a_file_with_other_links_keeps_it(fs) {
        let t = tree(fs);
        let src = mkfile_with(fs, t.a.ino, b"src", b"s");
        let target = mkfile_with(fs, t.b.ino, b"dst", b"target");
        fs.link(target.ino, t.a.ino, b"other-name").unwrap();
        let usage0 = total(fs);
        fs.rename(t.a.ino, b"src", t.b.ino, b"dst", RenameMode::Replace).unwrap();
        let kept = attr(fs, target.ino);
        assert_eq!(kept.nlink, 1);
        assert_eq!(read_all(fs, target.ino), b"target");
        assert_eq!(fs.lookup(t.a.ino, b"other-name").unwrap().ino, target.ino);
        assert_eq!(fs.lookup(t.b.ino, b"dst").unwrap().ino, src.ino);
        assert_eq!(total(fs), usage0);
        assert_consistent(fs, &[]);
    }

    fn rename_a_directory_over_an_empty_directory(fs) {
        let t = tree(fs);
        mkfile(fs, t.sub.ino, b"content");
        let empty = mkdir(fs, t.b.ino, b"empty");
        let usage0 = total(fs);
        let (a0, b0) = (attr(fs, t.a.ino), attr(fs, t.b.ino));
        fs.rename(t.a.ino, b"sub", t.b.ino, b"empty", RenameMode::Replace).unwrap();
        assert_err!(fs.getattr(empty.ino), FsError::NotFound);
        let moved = fs.lookup(t.b.ino, b"empty").unwrap();
        assert_eq!((moved.ino, moved.parent), (t.sub.ino, t.b.ino));
        assert_eq!(names(fs, moved.ino), vec![b"content".to_vec()]);
        let (a1, b1) = (attr(fs, t.a.ino), attr(fs, t.b.ino));
        assert_eq!((a1.size, a1.nlink), (a0.size - 1, a0.nlink - 1));
        assert_eq!((b1.size, b1.nlink), (b0.size, b0.nlink));
        assert_eq!(total(fs).inodes, usage0.inodes - 1);
        assert_consistent(fs, &[]);
    }

    fn rename_refusals_change_nothing(fs) {
        let t = tree(fs);
        let full = mkdir(fs, t.b.ino, b"full");
        mkfile(fs, full.ino, b"x");
        mkfile_with(fs, t.a.ino, b"file", b"f");
        mkfile_with(fs, t.b.ino, b"file2", b"g");
        mkdir(fs, t.b.ino, b"emptydir");
        let before = snapshot(fs);
        let usage = total(fs);
        assert_err!(fs.rename(t.a.ino, b"sub", t.b.ino, b"full", RenameMode::Replace), FsError::NotEmpty);
        assert_err!(fs.rename(t.a.ino, b"file", t.b.ino, b"emptydir", RenameMode::Replace), FsError::IsDir);
        assert_err!(fs.rename(t.a.ino, b"file", t.b.ino, b"full", RenameMode::Replace), FsError::IsDir);
        assert_err!(fs.rename(t.a.ino, b"sub", t.b.ino, b"file2", RenameMode::Replace), FsError::NotDir);
        assert_err!(fs.rename(t.a.ino, b"file", t.b.ino, b"file2", RenameMode::NoReplace), FsError::Exists);
        assert_err!(fs.rename(t.a.ino, b"sub", t.b.ino, b"emptydir", RenameMode::NoReplace), FsError::Exists);
        assert_err!(fs.rename(t.a.ino, b"file", t.a.ino, b"file", RenameMode::NoReplace), FsError::Exists);
        assert_err!(fs.rename(t.a.ino, b"missing", t.b.ino, b"x", RenameMode::Replace), FsError::NotFound);
        assert_err!(fs.rename(t.a.ino, b"missing", t.b.ino, b"file2", RenameMode::Exchange), FsError::NotFound);
        assert_err!(fs.rename(t.a.ino, b"file", t.b.ino, b"missing", RenameMode::Exchange), FsError::NotFound);
        let file = fs.lookup(t.a.ino, b"file").unwrap();
        assert_err!(fs.rename(file.ino, b"x", t.b.ino, b"x", RenameMode::Replace), FsError::NotDir);
        assert_err!(fs.rename(t.a.ino, b"file", file.ino, b"x", RenameMode::Replace), FsError::NotDir);
        assert_err!(fs.rename(t.a.ino, b"file", 99_999_999, b"x", RenameMode::Replace), FsError::NotFound);
        assert_err!(fs.rename(99_999_999, b"file", t.a.ino, b"x", RenameMode::Replace), FsError::NotFound);
        assert_eq!(snapshot(fs), before);
        assert_eq!(total(fs), usage);
        assert_consistent(fs, &[]);
    }

    fn noreplace_moves_to_a_free_name(fs) {
        let t = tree(fs);
        mkfile(fs, t.a.ino, b"f");
        fs.rename(t.a.ino, b"f", t.b.ino, b"f", RenameMode::NoReplace).unwrap();
        fs.rename(t.a.ino, b"sub", t.b.ino, b"sub", RenameMode::NoReplace).unwrap();
        assert_eq!(names(fs, t.b.ino), vec![b"f".to_vec(), b"sub".to_vec()]);
        assert_eq!(names(fs, t.a.ino), Vec::<Vec<u8>>::new());
        assert_eq!((attr(fs, t.a.ino).nlink, attr(fs, t.b.ino).nlink), (2, 3));
        assert_consistent(fs, &[]);
    }

    fn exchange_a_file_and_a_directory_across_directories(fs) {
        let t = tree(fs);
        let file = mkfile_with(fs, t.b.ino, b"file", b"data");
        mkfile(fs, t.sub.ino, b"child");
        let (a0, b0) = (attr(fs, t.a.ino), attr(fs, t.b.ino));
        let usage = total(fs);
        fs.rename(t.a.ino, b"sub", t.b.ino, b"file", RenameMode::Exchange).unwrap();
        let in_a = fs.lookup(t.a.ino, b"sub").unwrap();
        let in_b = fs.lookup(t.b.ino, b"file").unwrap();
        assert_eq!((in_a.ino, in_a.kind), (file.ino, FileKind::Regular));
        assert_eq!((in_b.ino, in_b.kind, in_b.parent), (t.sub.ino, FileKind::Directory, t.b.ino));
        assert_eq!(read_all(fs, file.ino), b"data");
        assert_eq!(names(fs, t.sub.ino), vec![b"child".to_vec()]);
        let kinds: Vec<_> = list(fs, t.a.ino).into_iter().map(|e| (e.name, e.kind)).collect();
        assert_eq!(kinds, vec![(b"sub".to_vec(), FileKind::Regular)]);
        let (a1, b1) = (attr(fs, t.a.ino), attr(fs, t.b.ino));
        assert_eq!((a1.size, a1.nlink), (a0.size, a0.nlink - 1));
        assert_eq!((b1.size, b1.nlink), (b0.size, b0.nlink + 1));
        assert_eq!(total(fs), usage);
        assert_consistent(fs, &[]);
        // And back.
        fs.rename(t.b.ino, b"file", t.a.ino, b"sub", RenameMode::Exchange).unwrap();
        assert_eq!(fs.lookup(t.a.ino, b"sub").unwrap().ino, t.sub.ino);
        assert_eq!(attr(fs, t.sub.ino).parent, t.a.ino);
        assert_eq!((attr(fs, t.a.ino).nlink, attr(fs, t.b.ino).nlink), (a0.nlink, b0.nlink));
        assert_consistent(fs, &[]);
    }

    fn exchange_two_files_and_two_directories(fs) {
        let t = tree(fs);
        let f1 = mkfile_with(fs, t.a.ino, b"one", b"111");
        let f2 = mkfile_with(fs, t.a.ino, b"two", b"22222");
        fs.rename(t.a.ino, b"one", t.a.ino, b"two", RenameMode::Exchange).unwrap();
        assert_eq!(fs.lookup(t.a.ino, b"one").unwrap().ino, f2.ino);
        assert_eq!(fs.lookup(t.a.ino, b"two").unwrap().ino, f1.ino);
        let d2 = mkdir(fs, t.b.ino, b"d2");
        mkdir(fs, d2.ino, b"x");
        let (a0, b0) = (attr(fs, t.a.ino), attr(fs, t.b.ino));
        fs.rename(t.a.ino, b"sub", t.b.ino, b"d2", RenameMode::Exchange).unwrap();
        assert_eq!(attr(fs, t.sub.ino).parent, t.b.ino);
        assert_eq!(attr(fs, d2.ino).parent, t.a.ino);
        assert_eq!(fs.lookup(t.a.ino, b"sub").unwrap().ino, d2.ino);
        assert_eq!(fs.lookup(t.b.ino, b"d2").unwrap().ino, t.sub.ino);
        assert_eq!((attr(fs, t.a.ino).nlink, attr(fs, t.b.ino).nlink), (a0.nlink, b0.nlink));
        // Exchanging a name with itself is harmless.
        fs.rename(t.a.ino, b"one", t.a.ino, b"one", RenameMode::Exchange).unwrap();
        assert_eq!(fs.lookup(t.a.ino, b"one").unwrap().ino, f2.ino);
        assert_consistent(fs, &[]);
    }

    fn a_directory_cannot_move_into_itself(fs) {
        let t = tree(fs);
        let deep = mkdir(fs, t.sub.ino, b"deep");
        let before = snapshot(fs);
        assert_err!(fs.rename(ROOT_INO, b"a", t.a.ino, b"x", RenameMode::Replace), FsError::Invalid(_));
        assert_err!(fs.rename(ROOT_INO, b"a", t.sub.ino, b"x", RenameMode::Replace), FsError::Invalid(_));
        assert_err!(fs.rename(ROOT_INO, b"a", deep.ino, b"x", RenameMode::NoReplace), FsError::Invalid(_));
        assert_err!(fs.rename(t.a.ino, b"sub", deep.ino, b"x", RenameMode::Replace), FsError::Invalid(_));
        // Exchange in either direction with a descendant.
        assert_err!(fs.rename(ROOT_INO, b"a", t.sub.ino, b"deep", RenameMode::Exchange), FsError::Invalid(_));
        assert_err!(fs.rename(t.sub.ino, b"deep", ROOT_INO, b"a", RenameMode::Exchange), FsError::Invalid(_));
        assert_err!(fs.rename(t.a.ino, b"sub", ROOT_INO, b"a", RenameMode::Exchange), FsError::Invalid(_));
        assert_eq!(snapshot(fs), before);
        // Moving up is fine.
        fs.rename(t.sub.ino, b"deep", ROOT_INO, b"deep", RenameMode::NoReplace).unwrap();
        assert_eq!(attr(fs, deep.ino).parent, ROOT_INO);
        assert_consistent(fs, &[]);
    }

    fn renaming_a_hard_link_onto_its_sibling_is_a_no_op(fs) {
        let t = tree(fs);
        let file = mkfile_with(fs, t.a.ino, b"x", b"same");
        fs.link(file.ino, t.a.ino, b"y").unwrap();
        fs.link(file.ino, t.b.ino, b"z").unwrap();
        let usage = total(fs);
        fs.rename(t.a.ino, b"x", t.a.ino, b"y", RenameMode::Replace).unwrap();
        fs.rename(t.a.ino, b"x", t.b.ino, b"z", RenameMode::Replace).unwrap();
        assert_eq!(names(fs, t.a.ino), vec![b"sub".to_vec(), b"x".to_vec(), b"y".to_vec()]);
        assert_eq!(names(fs, t.b.ino), vec![b"z".to_vec()]);
        let inode = attr(fs, file.ino);
        assert_eq!(inode.nlink, 3);
        assert_eq!(read_all(fs, file.ino), b"same");
        assert_eq!(total(fs), usage);
        assert_err!(fs.rename(t.a.ino, b"x", t.a.ino, b"y", RenameMode::NoReplace), FsError::Exists);
        assert_consistent(fs, &[]);
    }

    fn rename_special_files_and_symlinks(fs) {
        let t = tree(fs);
        let link = fs.symlink(t.a.ino, b"l", b"target", ME).unwrap();
        let fifo = fs.create(t.a.ino, b"p", &special(FileKind::Fifo), ME).unwrap();
        fs.rename(t.a.ino, b"l", t.b.ino, b"l", RenameMode::Replace).unwrap();
        fs.rename(t.a.ino, b"p", t.b.ino, b"l", RenameMode::Replace).unwrap();
        assert_err!(fs.getattr(link.ino), FsError::NotFound);
        assert_eq!(fs.lookup(t.b.ino, b"l").unwrap().ino, fifo.ino);
        assert_eq!(fs.lookup(t.b.ino, b"l").unwrap().kind, FileKind::Fifo);
        assert_consistent(fs, &[]);
    }
}
