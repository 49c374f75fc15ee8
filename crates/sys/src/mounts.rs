//! What the kernel says is mounted (/proc/self/mountinfo), and which `shoal mount` process
//! serves a mountpoint.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One line of /proc/self/mountinfo, the fields shoal uses.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MountInfo {
    pub mountpoint: PathBuf,
    /// The filesystem's device number (st_dev), as mountinfo's `major:minor` field.
    #[serde(default)]
    pub device: (u32, u32),
    pub fstype: String,
    pub source: String,
    /// Per-mount options and superblock options, as the kernel prints them.
    pub options: String,
}

impl MountInfo {
    /// Mounted by root, FUSE mounts are of type plain `fuse` (the subtype is dropped), so
    /// the source name `shoal` identifies ours too.
    pub fn is_shoal(&self) -> bool {
        self.fstype == "fuse.shoal" || (self.fstype == "fuse" && self.source == "shoal")
    }
}

/// Undoes the octal escapes (`\040` for space) of mountinfo fields.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b));
        if octal {
            out.push(
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0'),
            );
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    PathBuf::from(OsStr::from_bytes(&out))
}

/// One line of mountinfo: `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] -
/// FSTYPE SOURCE SUPER_OPTIONS`.
pub fn parse_mountinfo_line(line: &str) -> Option<MountInfo> {
    let (before, after) = line.split_once(" - ")?;
    let fields: Vec<&str> = before.split(' ').collect();
    let mountpoint = unescape(fields.get(4)?);
    let (major, minor) = fields.get(2)?.split_once(':')?;
    let device = (major.parse().ok()?, minor.parse().ok()?);
    let mount_options = fields.get(5)?;
    let mut rest = after.split(' ');
    let fstype = rest.next()?.to_string();
    let source = rest.next()?.to_string();
    let super_options = rest.next().unwrap_or("");
    Some(MountInfo {
        mountpoint,
        device,
        fstype,
        source,
        options: format!("{mount_options} {super_options}"),
    })
}

/// Every mount this process sees, in mount order; empty if mountinfo cannot be read.
pub fn mount_table() -> Vec<MountInfo> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines().filter_map(parse_mountinfo_line).collect()
}

/// The mount at exactly `path`, made absolute lexically (the last one when stacked).
pub fn mount_at(path: &Path) -> Option<MountInfo> {
    let path = absolute(path);
    mount_table()
        .into_iter()
        .rev()
        .find(|entry| entry.mountpoint == path)
}

/// Whether something is mounted exactly at `path`.
pub fn is_mountpoint(path: &Path) -> bool {
    mount_at(path).is_some()
}

/// The mount holding `path` (already canonical): the longest mountpoint prefix, the last
/// one when mounts are stacked.
pub fn mount_of(path: &Path) -> Option<MountInfo> {
    mount_table()
        .into_iter()
        .filter(|entry| path.starts_with(&entry.mountpoint))
        .fold(None, |best: Option<MountInfo>, entry| match best {
            Some(b) if b.mountpoint.as_os_str().len() > entry.mountpoint.as_os_str().len() => {
                Some(b)
            }
            _ => Some(entry),
        })
}

/// Makes a path absolute and drops `.` and `..` without touching the filesystem (a dead
/// FUSE mountpoint cannot be stat'ed).
pub fn lexical_absolute(path: &Path, cwd: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    let mut out = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// `path` made absolute against this process's working directory, lexically.
pub fn absolute(path: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    lexical_absolute(path, &cwd)
}

/// The shoal daemons serving `mountpoint`: other processes whose command line is
/// `shoal mount ... MOUNTPOINT`, the argument absolute or relative to their cwd.
pub fn daemon_pids(mountpoint: &Path) -> Vec<u32> {
    let target = absolute(mountpoint);
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me && serves(pid, &target))
        .collect()
}

/// The mountpoint the shoal daemon `pid` serves, from its command line (`shoal mount ...
/// MOUNTPOINT`), if it is one.
pub fn served_mountpoint(pid: u32) -> Option<PathBuf> {
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .collect();
    let named = mountpoint_argument(&args)?;
    let cwd = fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_else(|_| PathBuf::from("/"));
    Some(lexical_absolute(Path::new(OsStr::from_bytes(named)), &cwd))
}

fn serves(pid: u32, target: &Path) -> bool {
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .collect();
    let is_shoal_mount = args
        .first()
        .is_some_and(|arg0| Path::new(OsStr::from_bytes(arg0)).ends_with("shoal"))
        && args.iter().any(|arg| *arg == b"mount");
    if !is_shoal_mount {
        return false;
    }
    let Some(named) = mountpoint_argument(&args) else {
        return false;
    };
    let cwd = fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_else(|_| PathBuf::from("/"));
    // Lexically only: resolving links would stat other daemons' mountpoints, and a hung
    // one would hang the caller (`shoal umount` of another mount).
    lexical_absolute(Path::new(OsStr::from_bytes(named)), &cwd) == target
}

/// The MOUNTPOINT of a `shoal mount` command line: its last positional argument, skipping
/// flags and the values of `-o` (as `-o OPTS`, `-oOPTS` or `--o=OPTS`).
fn mountpoint_argument<'a>(args: &[&'a [u8]]) -> Option<&'a [u8]> {
    let after_mount = args.iter().position(|arg| *arg == b"mount")? + 1;
    let mut positionals = Vec::new();
    let mut rest = args[after_mount..].iter();
    while let Some(arg) = rest.next() {
        if *arg == b"-o" {
            rest.next();
        } else if *arg == b"--" {
            positionals.extend(rest.by_ref());
        } else if !arg.starts_with(b"-") {
            positionals.push(*arg);
        }
    }
    positionals.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mountinfo_with_escapes_and_options() {
        let line = r"36 35 0:52 / /mnt/my\040dir rw,nosuid - fuse.shoal shoal rw,user_id=0";
        let entry = parse_mountinfo_line(line).unwrap();
        assert_eq!(entry.mountpoint, PathBuf::from("/mnt/my dir"));
        assert_eq!(entry.fstype, "fuse.shoal");
        assert_eq!(entry.options, "rw,nosuid rw,user_id=0");
        assert!(entry.is_shoal());
        let root_mounted = parse_mountinfo_line("36 35 0:52 / /m rw - fuse shoal rw").unwrap();
        assert!(root_mounted.is_shoal());
        assert!(parse_mountinfo_line("36 35 0:52 / /m rw").is_none());
    }

    #[test]
    fn finds_the_mountpoint_among_options() {
        let line: Vec<&[u8]> = vec![
            b"shoal",
            b"mount",
            b"/s",
            b"/m",
            b"-o",
            b"ro,threads=4",
            b"--foreground",
        ];
        assert_eq!(mountpoint_argument(&line), Some(&b"/m"[..]));
        let line: Vec<&[u8]> = vec![b"/bin/shoal", b"mount", b"-oro", b"--memory", b"m"];
        assert_eq!(mountpoint_argument(&line), Some(&b"m"[..]));
        let line: Vec<&[u8]> = vec![b"shoal", b"mkfs", b"/s"];
        assert_eq!(mountpoint_argument(&line), None);
    }

    #[test]
    fn lexical_paths() {
        assert_eq!(
            lexical_absolute(Path::new("a/../b/./c"), Path::new("/x")),
            PathBuf::from("/x/b/c")
        );
        assert_eq!(
            lexical_absolute(Path::new("/../.."), Path::new("/x")),
            PathBuf::from("/")
        );
    }

    #[test]
    fn root_is_always_found() {
        let root = mount_of(Path::new("/")).expect("/ is mounted");
        assert_eq!(root.mountpoint, PathBuf::from("/"));
        assert!(is_mountpoint(Path::new("/")));
    }
}
