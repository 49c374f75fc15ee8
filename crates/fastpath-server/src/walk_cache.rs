//! The directories path walks passed through, kept for every connection's walks while each
//! directory's version (`state::MountState`) stays.
//!
//! A directory's record is rewritten whenever its entries, permission bits, owner or ACL
//! change (and deleted with it), and every write bumps its version, so a directory whose
//! version stays has the same entries and grants the same search rights. `cp -a` opens
//! `tree/net/sound/NAME` and `copy/net/sound/NAME` for every file: without this it read
//! the six directories and their entries again at every open. Only directories are kept
//! (a walk passes through them; a file's record is read fresh), and nothing here depends
//! on who walks: the permission checks run on every walk, with the caller's credentials.
//!
//! One cache for the mount, in shards (a walk takes one shard's lock per step), so memory
//! stays bounded however many connections there are: about 100 bytes an entry, under
//! 1 MiB in all.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use parking_lot::Mutex;
use shoal_engine::{FileKind, Inode};

/// Shards, so walks on several threads rarely wait on one lock.
const SHARDS: usize = 16;
/// Directories, and names of directories, a shard keeps at most (each table); a full table
/// starts again empty.
const MAX_KEPT_PER_SHARD: usize = 256;

pub struct WalkCache {
    hasher: foldhash::fast::RandomState,
    shards: [Mutex<Shard>; SHARDS],
}

#[derive(Default)]
struct Shard {
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
            shards: std::array::from_fn(|_| Mutex::default()),
        }
    }
}

impl WalkCache {
    /// The shard of an entry hashed to `hash`, chosen by bits its table uses for neither
    /// the bucket (the low bits) nor the tag (the top seven).
    fn shard(&self, hash: u64) -> parking_lot::MutexGuard<'_, Shard> {
        self.shards[(hash >> 32) as usize % SHARDS].lock()
    }

    /// Directory `ino`, if kept at `version` (its version now).
    pub fn directory(&self, ino: u64, version: u32) -> Option<Inode> {
        let hash = self.hasher.hash_one(ino);
        self.shard(hash)
            .directories
            .find(hash, |kept| kept.inode.ino == ino)
            .filter(|kept| kept.version == version)
            .map(|kept| kept.inode.clone())
    }

    /// Keeps `inode`, read after its version was `version`; only directories are kept.
    pub fn keep_directory(&self, version: u32, inode: &Inode) {
        if inode.kind != FileKind::Directory {
            return;
        }
        let hash = self.hasher.hash_one(inode.ino);
        let kept = KeptDirectory {
            version,
            inode: inode.clone(),
        };
        let mut shard = self.shard(hash);
        if shard.directories.len() >= MAX_KEPT_PER_SHARD {
            shard.directories.clear();
        }
        match shard
            .directories
            .find_mut(hash, |old| old.inode.ino == inode.ino)
        {
            Some(old) => *old = kept,
            None => {
                let hasher = &self.hasher;
                shard
                    .directories
                    .insert_unique(hash, kept, |k| hasher.hash_one(k.inode.ino));
            }
        }
    }

    /// The directory `name` in `dir` names, if kept while `dir`'s version is `dir_version`.
    pub fn child(&self, dir: u64, dir_version: u32, name: &[u8]) -> Option<u64> {
        let hash = self.hasher.hash_one((dir, name));
        self.shard(hash)
            .names
            .find(hash, |kept| kept.dir == dir && *kept.name == *name)
            .filter(|kept| kept.dir_version == dir_version)
            .map(|kept| kept.child)
    }

    /// Keeps that `name` in `dir` names the directory `child`, read after `dir`'s version
    /// was `dir_version`.
    pub fn keep_child(&self, dir: u64, dir_version: u32, name: &[u8], child: u64) {
        let hash = self.hasher.hash_one((dir, name));
        let mut shard = self.shard(hash);
        if shard.names.len() >= MAX_KEPT_PER_SHARD {
            shard.names.clear();
        }
        match shard
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
                shard
                    .names
                    .insert_unique(hash, kept, |k| hasher.hash_one((k.dir, &*k.name)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_engine::{Caller, Engine, EngineConfig, NewInode, ROOT_INO};

    const ROOT: Caller = Caller { uid: 0, gid: 0 };

    /// A directory and a file as an engine makes them.
    fn directory_and_file() -> (Inode, Inode) {
        let engine = Engine::open_memory(EngineConfig::default()).expect("memory engine");
        let dir = engine.mkdir(ROOT_INO, b"d", 0o755, ROOT).expect("mkdir");
        let file = engine
            .create(ROOT_INO, b"f", &NewInode::regular(0o644), ROOT)
            .expect("create");
        (dir, file)
    }

    fn directory(like: &Inode, ino: u64) -> Inode {
        let mut inode = like.clone();
        inode.ino = ino;
        inode
    }

    #[test]
    fn kept_entries_serve_only_at_the_version_they_were_read_at() {
        let (dir, _) = directory_and_file();
        let cache = WalkCache::default();
        cache.keep_directory(7, &directory(&dir, 5));
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
    fn files_are_not_kept_and_full_shards_start_again() {
        let (dir, file) = directory_and_file();
        let cache = WalkCache::default();
        cache.keep_directory(1, &file);
        assert!(cache.directory(file.ino, 1).is_none());
        let kept = (SHARDS * MAX_KEPT_PER_SHARD * 2) as u64;
        for ino in 0..kept {
            cache.keep_directory(1, &directory(&dir, 100 + ino));
            cache.keep_child(1, 1, &ino.to_le_bytes(), 100 + ino);
        }
        for shard in &cache.shards {
            let shard = shard.lock();
            assert!(shard.directories.len() <= MAX_KEPT_PER_SHARD);
            assert!(shard.names.len() <= MAX_KEPT_PER_SHARD);
        }
        assert!(
            cache.directory(100 + kept - 1, 1).is_some(),
            "the last one kept"
        );
    }
}
