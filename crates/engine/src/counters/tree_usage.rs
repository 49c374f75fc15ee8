//! Recursive usage as a program reads it: `Engine::tree_usage` and the virtual `shoal.dir.*`
//! attributes. The engine keeps it exact at every commit (`engine::tree_usage`).

use crate::engine::tree_usage::empty_usage;
use crate::engine::Engine;
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::records::inode::{FileKind, Timestamp, TreeUsage};
use crate::store::Space;

/// Virtual extended attributes of a directory (as CephFS's `ceph.dir.rbytes`): computed,
/// never stored, not listed (so `cp -a` and `tar` do not copy them).
pub const XATTR_RENTRIES: &[u8] = b"shoal.dir.rentries";
pub const XATTR_RFILES: &[u8] = b"shoal.dir.rfiles";
pub const XATTR_RBYTES: &[u8] = b"shoal.dir.rbytes";
pub const XATTR_RCTIME: &[u8] = b"shoal.dir.rctime";
const XATTR_PREFIX: &[u8] = b"shoal.";

impl Engine {
    /// The recursive usage of directory `dir`.
    pub fn tree_usage(&self, dir: u64) -> FsResult<TreeUsage> {
        let inode = self.read_inode(dir)?;
        if inode.kind != FileKind::Directory {
            return Err(FsError::NotDir);
        }
        match self.store().get(Space::Meta, &keys::tree_usage_key(dir))? {
            Some(value) => keys::decode_tree_usage(&keys::tree_usage_key(dir), &value),
            None => Ok(empty_usage(&inode)),
        }
    }

    /// The value of a virtual `shoal.` attribute, or `None` if `name` is not one.
    pub(crate) fn virtual_xattr(&self, ino: u64, name: &[u8]) -> Option<FsResult<Vec<u8>>> {
        if !name.starts_with(XATTR_PREFIX) {
            return None;
        }
        let known = [XATTR_RENTRIES, XATTR_RFILES, XATTR_RBYTES, XATTR_RCTIME];
        if !known.contains(&name) {
            return Some(Err(FsError::NoXattr));
        }
        let usage = match self.tree_usage(ino) {
            Ok(usage) => usage,
            Err(FsError::NotDir) => return Some(Err(FsError::NoXattr)),
            Err(error) => return Some(Err(error)),
        };
        let text = match name {
            XATTR_RENTRIES => usage.entries.to_string(),
            XATTR_RFILES => usage.files.to_string(),
            XATTR_RBYTES => usage.bytes.to_string(),
            _ => format_rctime(usage.rctime),
        };
        Some(Ok(text.into_bytes()))
    }
}

/// `secs.nanoseconds`, as CephFS shows `ceph.dir.rctime`.
pub fn format_rctime(time: Timestamp) -> String {
    format!("{}.{:09}", time.secs, time.nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Caller, EngineConfig, NewInode, RenameMode, SetAttr, ROOT_INO};

    fn usage(fs: &Engine, dir: u64) -> (u64, u64, u64) {
        let usage = fs.tree_usage(dir).unwrap();
        (usage.entries, usage.files, usage.bytes)
    }

    #[test]
    fn creates_writes_links_renames_and_removals_keep_every_ancestor_exact() {
        let fs = Engine::open_memory(EngineConfig::default()).unwrap();
        let me = Caller::ROOT;
        let a = fs.mkdir(ROOT_INO, b"a", 0o755, me).unwrap().ino;
        let b = fs.mkdir(a, b"b", 0o755, me).unwrap().ino;
        let file = fs.create(b, b"f", &NewInode::regular(0o644), me).unwrap();
        fs.write(file.ino, 0, &[7; 10_000]).unwrap();
        fs.symlink(b, b"s", b"target", me).unwrap();
        assert_eq!(usage(&fs, b), (2, 1, 10_000));
        assert_eq!(usage(&fs, a), (3, 1, 10_000));
        assert_eq!(usage(&fs, ROOT_INO), (4, 1, 10_000));

        // A second name counts the file again, and a write through it reaches both.
        fs.link(file.ino, ROOT_INO, b"hard").unwrap();
        assert_eq!(usage(&fs, ROOT_INO), (5, 2, 20_000));
        fs.write(file.ino, 10_000, &[1; 5]).unwrap();
        assert_eq!(usage(&fs, ROOT_INO), (5, 2, 20_010));
        assert_eq!(usage(&fs, a), (3, 1, 10_005));
        fs.unlink(b, b"f").unwrap();
        assert_eq!(usage(&fs, a), (2, 0, 0));
        assert_eq!(usage(&fs, ROOT_INO), (4, 1, 10_005));
        let truncate = SetAttr {
            size: Some(3),
            ..SetAttr::default()
        };
        fs.setattr(file.ino, &truncate).unwrap();
        assert_eq!(usage(&fs, ROOT_INO), (4, 1, 3));

        // A directory moves with its whole subtree.
        let c = fs.mkdir(ROOT_INO, b"c", 0o755, me).unwrap().ino;
        fs.rename(ROOT_INO, b"a", c, b"a2", RenameMode::NoReplace)
            .unwrap();
        assert_eq!(usage(&fs, c), (3, 0, 0));
        fs.rename(ROOT_INO, b"hard", b, b"f2", RenameMode::NoReplace)
            .unwrap();
        assert_eq!(usage(&fs, c), (4, 1, 3));
        assert_eq!(usage(&fs, ROOT_INO), (5, 1, 3));
        fs.write(file.ino, 3, &[1; 2]).unwrap();
        assert_eq!(usage(&fs, c), (4, 1, 5));

        fs.unlink(b, b"f2").unwrap();
        fs.unlink(b, b"s").unwrap();
        fs.rmdir(a, b"b").unwrap();
        assert_eq!(usage(&fs, ROOT_INO), (2, 0, 0));
        let before = fs.tree_usage(ROOT_INO).unwrap().rctime;
        fs.rmdir(c, b"a2").unwrap();
        assert!(fs.tree_usage(ROOT_INO).unwrap().rctime >= before);
        assert_eq!(usage(&fs, ROOT_INO), (1, 0, 0));
        assert_eq!(
            fs.getxattr(ROOT_INO, XATTR_RENTRIES).unwrap(),
            b"1".to_vec()
        );
    }

    #[test]
    fn exchange_and_replace_move_usage_between_directories() {
        let fs = Engine::open_memory(EngineConfig::default()).unwrap();
        let me = Caller::ROOT;
        let x = fs.mkdir(ROOT_INO, b"x", 0o755, me).unwrap().ino;
        let y = fs.mkdir(ROOT_INO, b"y", 0o755, me).unwrap().ino;
        let big = fs.create(x, b"big", &NewInode::regular(0o644), me).unwrap();
        fs.write(big.ino, 0, &[0; 100]).unwrap();
        let sub = fs.mkdir(y, b"sub", 0o755, me).unwrap().ino;
        fs.create(sub, b"one", &NewInode::regular(0o644), me)
            .unwrap();
        fs.rename(x, b"big", y, b"sub", RenameMode::Exchange)
            .unwrap();
        assert_eq!(usage(&fs, x), (2, 1, 0));
        assert_eq!(usage(&fs, y), (1, 1, 100));
        let small = fs
            .create(x, b"small", &NewInode::regular(0o644), me)
            .unwrap();
        fs.write(small.ino, 0, &[0; 9]).unwrap();
        fs.rename(x, b"small", y, b"sub", RenameMode::Replace)
            .unwrap();
        assert_eq!(usage(&fs, y), (1, 1, 9));
        assert_eq!(usage(&fs, x), (2, 1, 0));
        assert_eq!(usage(&fs, ROOT_INO), (5, 2, 9));
        assert_eq!(fs.getxattr(y, XATTR_RBYTES).unwrap(), b"9".to_vec());
        assert!(matches!(
            fs.getxattr(small.ino, XATTR_RBYTES),
            Err(FsError::NoXattr)
        ));
    }
}
