//! Path walks as the kernel's `link_path_walk` does them, for paths that stay inside the
//! mount: search permission on every directory, symlinks followed (40 at most), `..`
//! through each directory's parent. A path that leaves the mount (an absolute symlink, `..`
//! above the root) falls back: the kernel knows what lies outside.

use shoal_engine::{Engine, FileKind, Inode, ROOT_INO};
use shoal_fastpath::{At, WITNESS_MAX};

use crate::credentials::Credentials;
use crate::permission::{check, MAY_EXEC};
use crate::refusal::{ensure, Refusal, Served, Why};
use crate::stats::FastPathStats;
use crate::walk_cache::WalkCache;

/// Symlinks one walk follows at most (the kernel's MAXSYMLINKS).
const MAX_SYMLINKS: u32 = 40;
/// Longest name a directory holds.
const NAME_MAX: usize = 255;

/// Where a walk ended: the directory holding the last component, its name, and what it
/// names (`None`: nothing, for a call that creates it).
pub struct Walked {
    pub dir: Inode,
    pub name: Vec<u8>,
    pub found: Option<Inode>,
    /// The version of `found`'s slot, read before `found` was (`None`: versions are not
    /// followed, or `found` was read before its version could be).
    pub found_version: Option<u32>,
    /// The path ended in `/`: what it names must be a directory.
    pub trailing_slash: bool,
}

impl Walked {
    /// The last component is `.` or `..` (which no call may create, remove or rename).
    pub fn is_dots(&self) -> bool {
        self.name == b"." || self.name == b".."
    }

    /// What the path names, which must exist.
    pub fn existing(&self) -> Served<&Inode> {
        self.found.as_ref().ok_or(Refusal::Errno(libc::ENOENT))
    }
}

/// The inodes a walk read, each with the version of its slot (`state::MountState`) taken
/// before the walk read it: while every version stays, a walk of the same path by the same
/// caller reads the same entries and permission bits and goes the same way (a directory's
/// record is rewritten whenever its entries change). See `Reply::Exists`.
pub struct Witness<'a> {
    version_of: &'a dyn Fn(u64) -> Option<u32>,
    seen: Option<Vec<(u64, u32)>>,
}

impl<'a> Witness<'a> {
    pub fn new(version_of: &'a dyn Fn(u64) -> Option<u32>) -> Witness<'a> {
        Witness {
            version_of,
            seen: Some(Vec::new()),
        }
    }

    /// Notes `ino`'s version; what the walk uses of the inode must be read after this.
    fn note(&mut self, ino: u64) {
        let version = (self.version_of)(ino);
        self.note_read(ino, version);
    }

    /// Notes `version` for `ino`, read before what the walk uses of the inode was.
    fn note_read(&mut self, ino: u64, version: Option<u32>) {
        self.seen = match (self.seen.take(), version) {
            (Some(mut seen), Some(version)) if seen.len() < WITNESS_MAX => {
                seen.push((ino, version));
                Some(seen)
            }
            _ => None,
        };
    }

    fn recording(&self) -> bool {
        self.seen.is_some()
    }

    fn give_up(&mut self) {
        self.seen = None;
    }

    /// The versions noted, if the walk could note them all.
    pub fn into_versions(self) -> Option<Vec<(u64, u32)>> {
        self.seen
    }
}

/// Where a walk reads inodes: the engine, through the kept directories (`walk_cache`)
/// where the mount's per-inode versions are followed.
pub struct Reader<'a> {
    pub engine: &'a Engine,
    pub version_of: &'a dyn Fn(u64) -> Option<u32>,
    pub kept: Option<&'a WalkCache>,
    pub stats: &'a FastPathStats,
}

impl Reader<'_> {
    /// Inode `ino`, and its version read before it.
    fn inode(&self, ino: u64) -> Served<(Inode, Option<u32>)> {
        let version = (self.version_of)(ino);
        let kept = self.kept.zip(version);
        if let Some(inode) = kept.and_then(|(kept, version)| kept.directory(ino, version)) {
            return Ok((inode, version));
        }
        let inode = self.engine.getattr(ino)?;
        if let Some((kept, version)) = kept {
            kept.keep_directory(version, &inode);
        }
        Ok((inode, version))
    }

    /// `name` in `dir` (with `.` and `..`, which leave the mount at its root: fall back),
    /// and its version read before it; `None`: no such name.
    fn child(&self, dir: &Inode, name: &[u8]) -> Served<Option<(Inode, Option<u32>)>> {
        match name {
            b"." => return Ok(Some(((*dir).clone(), None))),
            b".." if dir.ino == ROOT_INO => return Err(Refusal::Fallback(Why::LeavesMount)),
            b".." => return Ok(Some((self.engine.parent_of(dir.ino)?, None))),
            _ if name.len() > NAME_MAX => return Err(Refusal::Fallback(Why::KernelRule)),
            _ => {}
        }
        let kept = self.kept.zip((self.version_of)(dir.ino));
        if let Some(ino) = kept.and_then(|(kept, version)| kept.child(dir.ino, version, name)) {
            // Kept while `dir` stays, so the name still names it; a directory removed
            // since (its record gone with a detached tree) is looked up afresh.
            if let Ok(found) = self.inode(ino) {
                self.stats.walk_step(true);
                return Ok(Some(found));
            }
        }
        if kept.is_some() {
            self.stats.walk_step(false);
        }
        let Some(ino) = self.engine.lookup_ino(dir.ino, name)? else {
            return Ok(None);
        };
        let (inode, version) = match self.inode(ino) {
            Ok(found) => found,
            // Removed between the entry and its inode: as if the entry were gone already.
            Err(Refusal::Errno(libc::ENOENT)) => return Ok(None),
            Err(refusal) => return Err(refusal),
        };
        if let Some((kept, dir_version)) = kept.filter(|_| inode.kind == FileKind::Directory) {
            kept.keep_child(dir.ino, dir_version, name, ino);
        }
        Ok(Some((inode, version)))
    }
}

/// Walks `at` from its start (which the caller must hold: `starts`), noting in `witness`
/// what it read.
pub fn walk_witnessed(
    reader: &Reader,
    caller: &Credentials,
    at: &At,
    mut witness: Option<&mut Witness>,
) -> Served<Walked> {
    let engine = reader.engine;
    ensure(!at.path.is_empty(), libc::ENOENT)?;
    if at.path.first() == Some(&b'/') {
        return Err(Refusal::Fallback(Why::LeavesMount));
    }
    let mut trailing_slash = at.path.last() == Some(&b'/');
    let mut pending = components_reversed(&at.path);
    if let Some(witness) = witness.as_deref_mut() {
        witness.note(at.base);
    }
    let (mut dir, mut dir_version) = reader.inode(at.base)?;
    ensure(dir.kind == FileKind::Directory, libc::ENOTDIR)?;
    let mut links = 0;
    while let Some(name) = pending.pop() {
        let last = pending.is_empty();
        check(engine, caller, &dir, MAY_EXEC)?;
        let (mut child, mut version) = match reader.child(&dir, &name)? {
            Some(child) => child,
            None if last => {
                return Ok(Walked {
                    dir,
                    name,
                    found: None,
                    found_version: None,
                    trailing_slash,
                })
            }
            None => return Err(Refusal::Errno(libc::ENOENT)),
        };
        let goes_on = !last || (child.kind == FileKind::Symlink && (at.follow || trailing_slash));
        if let Some(witness) = witness.as_deref_mut().filter(|w| goes_on && w.recording()) {
            witness_child(reader, witness, &mut child, &mut version);
        }
        if child.kind == FileKind::Symlink && (!last || at.follow || trailing_slash) {
            links += 1;
            ensure(links <= MAX_SYMLINKS, libc::ELOOP)?;
            let target = symlink_target(engine, &child)?;
            trailing_slash |= last && target.last() == Some(&b'/');
            pending.extend(components_reversed(&target));
            continue;
        }
        if last {
            ensure(
                !trailing_slash || child.kind == FileKind::Directory,
                libc::ENOTDIR,
            )?;
            return Ok(Walked {
                dir,
                name,
                found: Some(child),
                found_version: version,
                trailing_slash,
            });
        }
        ensure(child.kind == FileKind::Directory, libc::ENOTDIR)?;
        (dir, dir_version) = (child, version);
    }
    // Only slashes and dots were left (`a/.` was handled above): the path names `dir`.
    Ok(Walked {
        name: b".".to_vec(),
        found: Some(dir.clone()),
        found_version: dir_version,
        dir,
        trailing_slash,
    })
}

/// Where a walk to a name about to be removed ended: the directory, searched, the last
/// name and what its entry says it names (number and kind). The victim's inode is left
/// unread: the removal reads it, and a file's inode holding its bytes (up to 4 KiB) is
/// too large for the store's read cache, so a second read went to the LSM (`rm -rf` of
/// the bench tree: 26k point reads, one in every two for such files).
pub struct WalkedToEntry {
    pub dir: Inode,
    pub name: Vec<u8>,
    pub entry: Option<(u64, FileKind)>,
    /// The path ended in `/` (never followed here: `unlink` and `rmdir` act on the name).
    pub trailing_slash: bool,
}

/// `walk_witnessed` for `unlink` and `rmdir`, which never follow their last name (not
/// even before a trailing `/`, as the kernel's `do_unlinkat` looks it up): the path up to
/// it walked as any, that name looked up in its entry alone. `None` where the last name
/// is not a plain name (`.`, `..`, none): the whole walk decides those.
pub fn walk_to_entry(
    reader: &Reader,
    caller: &Credentials,
    at: &At,
) -> Served<Option<WalkedToEntry>> {
    let Some(parent) = walk_to_parent(reader, caller, at)? else {
        return Ok(None);
    };
    let entry = reader.engine.lookup_entry(parent.dir.ino, &parent.name)?;
    Ok(Some(WalkedToEntry {
        dir: parent.dir,
        name: parent.name,
        entry,
        trailing_slash: parent.trailing_slash,
    }))
}

/// The directory a path's last name is in, walked as any path and searchable by the
/// caller, and that name, not looked up. `None` where the last name is not a plain name.
pub struct WalkedToParent {
    pub dir: Inode,
    pub name: Vec<u8>,
    pub trailing_slash: bool,
}

/// `walk_to_entry` without its last lookup: for an exclusive create, whose own check
/// finds an existing name.
pub fn walk_to_parent(
    reader: &Reader,
    caller: &Credentials,
    at: &At,
) -> Served<Option<WalkedToParent>> {
    let trimmed = without_trailing_slashes(&at.path);
    if trimmed.is_empty() || at.path.first() == Some(&b'/') {
        return Ok(None);
    }
    let (parent, name) = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(slash) => (&trimmed[..slash], &trimmed[slash + 1..]),
        None => (&trimmed[..0], trimmed),
    };
    if name == b"." || name == b".." || name.len() > NAME_MAX {
        return Ok(None);
    }
    let dir = if parent.is_empty() {
        reader.inode(at.base)?.0
    } else {
        let up_to = At {
            base: at.base,
            path: parent.to_vec(),
            follow: true,
        };
        walk_witnessed(reader, caller, &up_to, None)?
            .existing()?
            .clone()
    };
    ensure(dir.kind == FileKind::Directory, libc::ENOTDIR)?;
    check(reader.engine, caller, &dir, MAY_EXEC)?;
    Ok(Some(WalkedToParent {
        dir,
        name: name.to_vec(),
        trailing_slash: trimmed.len() < at.path.len(),
    }))
}

/// `path` without the slashes it ends in.
fn without_trailing_slashes(path: &[u8]) -> &[u8] {
    let kept = path
        .iter()
        .rposition(|&b| b != b'/')
        .map_or(0, |last| last + 1);
    &path[..kept]
}

/// Notes in `witness` the version `child` was read after. `.` and `..`, read without
/// one, are noted, then read again; gone meanwhile (a rename racing the walk), the walk
/// goes on as it was, unwitnessed.
fn witness_child(
    reader: &Reader,
    witness: &mut Witness,
    child: &mut Inode,
    version: &mut Option<u32>,
) {
    if version.is_some() {
        witness.note_read(child.ino, *version);
        return;
    }
    witness.note(child.ino);
    match reader.inode(child.ino) {
        Ok(again) => (*child, *version) = again,
        Err(_) => witness.give_up(),
    }
}

/// What symlink `link` points to, which a walk goes on with; one that leaves the mount (an
/// absolute target) falls back.
fn symlink_target(engine: &Engine, link: &Inode) -> Served<Vec<u8>> {
    let target = engine.readlink(link.ino)?;
    ensure(!target.is_empty(), libc::ENOENT)?;
    if target.first() == Some(&b'/') {
        return Err(Refusal::Fallback(Why::LeavesMount));
    }
    Ok(target)
}

/// The components of `path`, last first (a stack to pop), empty ones dropped.
fn components_reversed(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&b| b == b'/')
        .filter(|part| !part.is_empty())
        .rev()
        .map(<[u8]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_skip_empty_parts() {
        assert_eq!(
            components_reversed(b"a//b/./c/"),
            vec![b"c".to_vec(), b".".to_vec(), b"b".to_vec(), b"a".to_vec()]
        );
        assert!(components_reversed(b"///").is_empty());
    }
}
