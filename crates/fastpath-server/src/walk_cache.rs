//! A connection's kept directories: what its path walks read of the directories they pass
//! through, used again while each directory's version (`state::MountState`) stays.
//!
//! A directory's record is rewritten whenever its entries, permission bits, owner or ACL
//! change (and deleted with it), and every write bumps its version, so a directory whose
//! version stays has the same entries and grants the same search rights. `cp -a` opens
//! `tree/net/sound/NAME` and `copy/net/sound/NAME` for every file: without this it read
//! the six directories and their entries again at every open. Only directories are kept
//! (a walk passes through them; a file's record is read fresh), so an entry is small.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use shoal_engine::{FileKind, Inode};

/// Directories, and names of directories, a connection keeps at most (each table); a full
/// table starts again empty. About 100 bytes an entry: some 200 KiB per busy connection.
const MAX_KEPT: usize = 1024;

pub struct WalkCache {
    hasher: foldhash::fast::RandomState,
    directories: HashTable<KeptDirectory>,
    names: HashTable<KeptName>,
}

struct KeptDirectory {
    /// The directory's version, read before `inode` was.
    version: u32,
    inode: Inode,
}

/// `name` in directory `dir` names the directory `child`, while `dir`'s version is
/// `dir_version` (read before the entry was).
struct KeptName {
    dir: u64,
    dir_version: u32,
    name: Box<[u8]>,
    child: u64,
}

impl Default for WalkCache {
    fn default() -> Self {
        WalkCache {
            hasher: foldhash::fast::RandomState::default(),
            directories: HashTable::new(),
            names: HashTable::new(),
        }
    }
}

impl WalkCache {
    /// Directory `ino`, if kept at `version` (its version now).
    pub fn directory(&self, ino: u64, version: u32) -> Option<Inode> {
        self.directories
            .find(self.hasher.hash_one(ino), |kept| kept.inode.ino == ino)
            .filter(|kept| kept.version == version)
            .map(|kept| kept.inode.clone())
    }

    /// Keeps `inode`, read after its version was `version`; only directories are kept.
    pub fn keep_directory(&mut self, version: u32, inode: &Inode) {
        if inode.kind != FileKind::Directory {
            return;
        }
        if self.directories.len() >= MAX_KEPT {
            self.directories.clear();
        }
        let hash = self.hasher.hash_one(inode.ino);
        let kept = KeptDirectory {
            version,
            inode: inode.clone(),
        };
        match self
            .directories
            .find_mut(hash, |old| old.inode.ino == inode.ino)
        {
            Some(old) => *old = kept,
            None => {
                let hasher = &self.hasher;
                self.directories
                    .insert_unique(hash, kept, |k| hasher.hash_one(k.inode.ino));
            }
        }
    }

    /// The directory `name` in `dir` names, if kept while `dir`'s version is `dir_version`.
    pub fn child(&self, dir: u64, dir_version: u32, name: &[u8]) -> Option<u64> {
        self.names
            .find(self.hasher.hash_one((dir, name)), |kept| {
                kept.dir == dir && *kept.name == *name
            })
            .filter(|kept| kept.dir_version == dir_version)
            .map(|kept| kept.child)
    }

    /// Keeps that `name` in `dir` names the directory `child`, read after `dir`'s version
    /// was `dir_version`.
    pub fn keep_child(&mut self, dir: u64, dir_version: u32, name: &[u8], child: u64) {
        if self.names.len() >= MAX_KEPT {
            self.names.clear();
        }
        let hash = self.hasher.hash_one((dir, name));
        match self
            .names
            .find_mut(hash, |kept| kept.dir == dir && *kept.name == *name)
        {
            Some(kept) => {
                kept.dir_version = dir_version;
                kept.child = child;
            }
            None => {
                let hasher = &self.hasher;
                let kept = KeptName {
                    dir,
                    dir_version,
                    name: name.into(),
                    child,
                };
                self.names
                    .insert_unique(hash, kept, |k| hasher.hash_one((k.dir, &*k.name)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_engine::{Content, Timestamp};

    fn directory(ino: u64) -> Inode {
        Inode {
            ino,
            kind: FileKind::Directory,
            perm: 0o755,
            uid: 0,
            gid: 0,
            nlink: 2,
            size: 0,
            allocated_bytes: 0,
            atime: Timestamp::default(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            rdev: 0,
            parent: 1,
            project: 0,
            content: Content::Inline(Vec::new()),
            may_have_xattrs: false,
        }
    }

    #[test]
    fn kept_entries_serve_only_at_the_version_they_were_read_at() {
        let mut cache = WalkCache::default();
        cache.keep_directory(7, &directory(5));
        assert_eq!(cache.directory(5, 7).map(|inode| inode.ino), Some(5));
        assert!(cache.directory(5, 8).is_none(), "a moved version is a miss");
        cache.keep_child(1, 3, b"net", 5);
        assert_eq!(cache.child(1, 3, b"net"), Some(5));
        assert!(cache.child(1, 4, b"net").is_none());
        assert!(cache.child(1, 3, b"ne").is_none());
        cache.keep_child(1, 4, b"net", 6);
        assert_eq!(
            cache.child(1, 4, b"net"),
            Some(6),
            "kept again at the new version"
        );
    }

    #[test]
    fn files_are_not_kept_and_full_tables_start_again() {
        let mut cache = WalkCache::default();
        let mut file = directory(9);
        file.kind = FileKind::Regular;
        cache.keep_directory(1, &file);
        assert!(cache.directory(9, 1).is_none());
        for ino in 0..=MAX_KEPT as u64 {
            cache.keep_directory(1, &directory(100 + ino));
            cache.keep_child(1, 1, &ino.to_le_bytes(), 100 + ino);
        }
        assert!(cache.directories.len() <= MAX_KEPT && cache.names.len() <= MAX_KEPT);
        assert!(cache.directory(100 + MAX_KEPT as u64, 1).is_some());
    }
}
