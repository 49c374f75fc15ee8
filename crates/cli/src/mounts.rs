//! What the kernel says is mounted, and which process serves a shoal mount.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// One line of /proc/self/mountinfo, the fields we use.
#[derive(Debug, Clone)]
pub struct MountEntry {
    pub mountpoint: PathBuf,
    pub fstype: String,
    pub source: String,
}

/// Undoes the octal escapes (`\040` for space) of mountinfo fields.
fn unescape(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

pub fn mount_table() -> Vec<MountEntry> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines().filter_map(parse_mountinfo_line).collect()
}

fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    let (before, after) = line.split_once(" - ")?;
    let mountpoint = before.split(' ').nth(4)?;
    let mut rest = after.split(' ');
    let fstype = rest.next()?.to_string();
    let source = rest.next()?.to_string();
    Some(MountEntry {
        mountpoint: PathBuf::from(OsStr::from_bytes(&unescape(mountpoint))),
        fstype,
        source,
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

pub fn absolute(path: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    lexical_absolute(path, &cwd)
}

/// The mount at exactly `path`, if any (the last one when stacked).
pub fn mount_at(path: &Path) -> Option<MountEntry> {
    let path = absolute(path);
    mount_table()
        .into_iter()
        .rev()
        .find(|entry| entry.mountpoint == path)
}

/// Mounted by root, FUSE mounts are of type plain `fuse` (the subtype is dropped), so the
/// source name `shoal` identifies ours too.
pub fn is_shoal(entry: &MountEntry) -> bool {
    entry.fstype == "fuse.shoal" || (entry.fstype == "fuse" && entry.source == "shoal")
}

/// The shoal daemons serving `mountpoint`: processes whose command line is
/// `shoal mount ... MOUNTPOINT`.
pub fn daemon_pids(mountpoint: &Path) -> Vec<u32> {
    let target = absolute(mountpoint);
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
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
            continue;
        }
        let cwd = fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_else(|_| PathBuf::from("/"));
        let serves = mountpoint_argument(&args).is_some_and(|mountpoint| {
            lexical_absolute(Path::new(OsStr::from_bytes(mountpoint)), &cwd) == target
        });
        if serves {
            pids.push(pid);
        }
    }
    pids
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
    fn parses_mountinfo_with_escapes() {
        let line = r"36 35 0:52 / /mnt/my\040dir rw,nosuid - fuse.shoal shoal rw,user_id=0";
        let entry = parse_mountinfo_line(line).unwrap();
        assert_eq!(entry.mountpoint, PathBuf::from("/mnt/my dir"));
        assert_eq!(entry.fstype, "fuse.shoal");
        assert!(is_shoal(&entry));
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
            lexical_absolute(Path::new("/a/b/.."), Path::new("/x")),
            PathBuf::from("/a")
        );
    }
}
