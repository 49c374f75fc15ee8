//! A canonical description of a tree, to check that two trees are the same file by file:
//! what `tar`, `cp -a` or a remount must preserve, and nothing that legitimately differs
//! between filesystems (inode numbers, directory sizes, atimes, ctimes).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use shoal_sys::xattr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

/// One path of a tree. Everything here must survive a faithful copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Relative to the manifest's root; the root itself has no entry.
    pub path: PathBuf,
    pub kind: FileKind,
    /// Permission bits with setuid, setgid and sticky (`st_mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Regular files and symlinks only; 0 otherwise (directory sizes are filesystem-specific).
    pub size: u64,
    pub nlink: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: i64,
    pub symlink_target: Option<PathBuf>,
    /// `user.*` attributes, sorted by name.
    pub xattrs: Vec<(String, Vec<u8>)>,
    /// SHA-256 of a regular file's content.
    pub content_sha256: Option<[u8; 32]>,
    /// For the second and later names of one inode: the first name (in path order).
    /// Comparable across trees, unlike inode numbers.
    pub hardlink_of: Option<PathBuf>,
}

/// Walks `root` without following symlinks; entries sorted by path, root excluded.
pub fn manifest(root: &Path) -> io::Result<Vec<Entry>> {
    let mut found: Vec<(Entry, (u64, u64))> = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel_dir) = pending.pop() {
        for dirent in fs::read_dir(root.join(&rel_dir))? {
            let dirent = dirent?;
            let rel = rel_dir.join(dirent.file_name());
            let path = root.join(&rel);
            let meta = fs::symlink_metadata(&path)?;
            let kind = kind_of(&meta.file_type());
            if kind == FileKind::Dir {
                pending.push(rel.clone());
            }
            let entry = Entry {
                path: rel,
                kind,
                mode: meta.mode() & 0o7777,
                uid: meta.uid(),
                gid: meta.gid(),
                size: if matches!(kind, FileKind::File | FileKind::Symlink) {
                    meta.size()
                } else {
                    0
                },
                nlink: meta.nlink(),
                mtime_sec: meta.mtime(),
                mtime_nsec: meta.mtime_nsec(),
                symlink_target: if kind == FileKind::Symlink {
                    Some(fs::read_link(&path)?)
                } else {
                    None
                },
                xattrs: user_xattrs(&path)?,
                content_sha256: if kind == FileKind::File {
                    Some(sha256_of(&path)?)
                } else {
                    None
                },
                hardlink_of: None,
            };
            found.push((entry, (meta.dev(), meta.ino())));
        }
    }
    found.sort_by(|a, b| a.0.path.cmp(&b.0.path));

    let mut first_name: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let mut entries = Vec::with_capacity(found.len());
    for (mut entry, inode) in found {
        if entry.kind != FileKind::Dir {
            match first_name.get(&inode) {
                Some(first) => entry.hardlink_of = Some(first.clone()),
                None => {
                    first_name.insert(inode, entry.path.clone());
                }
            }
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// Human-readable differences between two manifests, one line each; empty when equal.
pub fn diff_manifests(a: &[Entry], b: &[Entry]) -> Vec<String> {
    let mut diffs = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let order = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => x.path.cmp(&y.path),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match order {
            std::cmp::Ordering::Less => {
                diffs.push(format!("only in a: {}", a[i].path.display()));
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                diffs.push(format!("only in b: {}", b[j].path.display()));
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                diff_entry(&a[i], &b[j], &mut diffs);
                i += 1;
                j += 1;
            }
        }
    }
    diffs
}

fn diff_entry(a: &Entry, b: &Entry, diffs: &mut Vec<String>) {
    let mut line = String::new();
    let mut field = |name: &str, x: String, y: String| {
        if x != y {
            let _ = write!(line, " {name}: {x} != {y};");
        }
    };
    field("kind", format!("{:?}", a.kind), format!("{:?}", b.kind));
    field("mode", format!("{:o}", a.mode), format!("{:o}", b.mode));
    field("uid", a.uid.to_string(), b.uid.to_string());
    field("gid", a.gid.to_string(), b.gid.to_string());
    field("size", a.size.to_string(), b.size.to_string());
    field("nlink", a.nlink.to_string(), b.nlink.to_string());
    field(
        "mtime",
        format!("{}.{:09}", a.mtime_sec, a.mtime_nsec),
        format!("{}.{:09}", b.mtime_sec, b.mtime_nsec),
    );
    field(
        "symlink",
        format!("{:?}", a.symlink_target),
        format!("{:?}", b.symlink_target),
    );
    field(
        "xattrs",
        format!("{:?}", a.xattrs),
        format!("{:?}", b.xattrs),
    );
    field("content", hex(&a.content_sha256), hex(&b.content_sha256));
    field(
        "hardlink_of",
        format!("{:?}", a.hardlink_of),
        format!("{:?}", b.hardlink_of),
    );
    if !line.is_empty() {
        diffs.push(format!("{}:{line}", a.path.display()));
    }
}

fn hex(hash: &Option<[u8; 32]>) -> String {
    match hash {
        Some(bytes) => bytes.iter().map(|b| format!("{b:02x}")).collect(),
        None => "-".to_string(),
    }
}

fn kind_of(file_type: &fs::FileType) -> FileKind {
    if file_type.is_symlink() {
        FileKind::Symlink
    } else if file_type.is_dir() {
        FileKind::Dir
    } else if file_type.is_fifo() {
        FileKind::Fifo
    } else if file_type.is_socket() {
        FileKind::Socket
    } else if file_type.is_char_device() {
        FileKind::CharDevice
    } else if file_type.is_block_device() {
        FileKind::BlockDevice
    } else {
        FileKind::File
    }
}

fn user_xattrs(path: &Path) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut names: Vec<String> = xattr::list_xattrs(path)?
        .into_iter()
        .map(|name| String::from_utf8_lossy(&name).into_owned())
        .filter(|name| name.starts_with("user."))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| xattr::get_xattr(path, &name).map(|value| (name, value)))
        .collect()
}

fn sha256_of(path: &Path) -> io::Result<[u8; 32]> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_records_links_and_detects_changes() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        fs::create_dir(r.join("d")).unwrap();
        fs::write(r.join("d/a"), b"hello").unwrap();
        fs::hard_link(r.join("d/a"), r.join("b")).unwrap();
        std::os::unix::fs::symlink("d/a", r.join("s")).unwrap();
        let before = manifest(r).unwrap();
        let paths: Vec<_> = before.iter().map(|e| e.path.to_str().unwrap()).collect();
        assert_eq!(paths, ["b", "d", "d/a", "s"]);
        assert_eq!(before[2].hardlink_of, Some(PathBuf::from("b")));
        assert_eq!(before[0].nlink, 2);
        assert_eq!(before[3].symlink_target, Some(PathBuf::from("d/a")));
        assert_eq!(before[3].size, 3);
        assert!(diff_manifests(&before, &before).is_empty());

        fs::write(r.join("d/a"), b"HELLO").unwrap();
        fs::write(r.join("new"), b"").unwrap();
        let after = manifest(r).unwrap();
        let diffs = diff_manifests(&before, &after);
        assert!(
            diffs
                .iter()
                .any(|d| d.starts_with("b:") && d.contains("content")),
            "{diffs:?}"
        );
        assert!(diffs.iter().any(|d| d == "only in b: new"), "{diffs:?}");
    }
}
