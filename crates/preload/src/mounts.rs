//! The shoal mounts this process can reach, read once from /proc/self/mountinfo when the
//! library loads. A mount with another filesystem mounted below it is left to the kernel
//! (the fast path would walk past the submount).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use shoal_fastpath::state::MountState;

pub struct Mount {
    /// The mountpoint as this process sees it: absolute, no trailing slash (`/` itself
    /// stays `/`).
    pub path: Vec<u8>,
    /// mountinfo's `major:minor`: names the daemon's socket, and is st_dev.
    pub device: (u32, u32),
    /// The mount's owner (`user_id=`): the only peer trusted as its daemon.
    pub owner: u32,
    /// Cleared when the daemon cannot be reached or refused us: the kernel serves the
    /// mount from then on.
    pub usable: AtomicBool,
    /// The daemon's state page (the mount's change count), mapped at the first Hello.
    pub state: OnceLock<MountState>,
}

impl Mount {
    /// st_dev as stat(2) shows it.
    pub fn dev(&self) -> u64 {
        libc::makedev(self.device.0, self.device.1)
    }

    pub fn usable(&self) -> bool {
        self.usable.load(Ordering::Relaxed)
    }

    pub fn give_up(&self) {
        self.usable.store(false, Ordering::Relaxed);
    }
}

static MOUNTS: OnceLock<Vec<Mount>> = OnceLock::new();

/// Every shoal mount found at load (empty before `load`).
pub fn all() -> &'static [Mount] {
    MOUNTS.get().map_or(&[], Vec::as_slice)
}

/// Reads the mount table; `only` (from `shoal run -m`) keeps the mounts at those paths.
pub fn load(only: Option<&[u8]>) {
    let table = mount_table();
    let entries: Vec<Entry> = table
        .split(|&b| b == b'\n')
        .filter_map(parse_line)
        .collect();
    let mounts = entries
        .iter()
        .filter(|entry| entry.fstype == b"fuse.shoal")
        .filter(|entry| only.is_none_or(|wanted| wanted == entry.path.as_slice()))
        .map(|entry| Mount {
            path: entry.path.clone(),
            device: entry.device,
            owner: entry.owner.unwrap_or(0),
            usable: AtomicBool::new(entry.owner.is_some() && !has_submount(entry, &entries)),
            state: OnceLock::new(),
        })
        .collect();
    let _ = MOUNTS.set(mounts);
}

struct Entry {
    device: (u32, u32),
    path: Vec<u8>,
    fstype: Vec<u8>,
    owner: Option<u32>,
}

fn has_submount(mount: &Entry, entries: &[Entry]) -> bool {
    entries
        .iter()
        .any(|other| other.path != mount.path && is_below(&other.path, &mount.path))
}

/// Whether `path` lies strictly inside directory `dir` (component-wise).
pub fn is_below(path: &[u8], dir: &[u8]) -> bool {
    if dir == b"/" {
        return path.len() > 1;
    }
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/'
}

fn parse_line(line: &[u8]) -> Option<Entry> {
    let text = std::str::from_utf8(line).ok()?;
    let (before, after) = text.split_once(" - ")?;
    let fields: Vec<&str> = before.split(' ').collect();
    let (major, minor) = fields.get(2)?.split_once(':')?;
    let mut rest = after.split(' ');
    let fstype = rest.next()?.as_bytes().to_vec();
    let _source = rest.next()?;
    let owner = rest
        .next()
        .unwrap_or("")
        .split(',')
        .find_map(|option| option.strip_prefix("user_id="))
        .and_then(|uid| uid.parse().ok());
    Some(Entry {
        device: (major.parse().ok()?, minor.parse().ok()?),
        path: unescape(fields.get(4)?.as_bytes()),
        fstype,
        owner,
    })
}

/// /proc/self/mountinfo, read in large pieces: the kernel writes the table again at each
/// read, and `fs::read` of a file that says it is empty starts with 32 bytes.
fn mount_table() -> Vec<u8> {
    use std::io::Read;
    let mut table = Vec::with_capacity(64 * 1024);
    if let Ok(mut file) = std::fs::File::open("/proc/self/mountinfo") {
        if file.read_to_end(&mut table).is_err() {
            table.clear();
        }
    }
    table
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field[i] == b'\\'
            && field.len() >= i + 4
            && field[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b));
        if octal {
            out.push(
                (field[i + 1] - b'0') * 64 + (field[i + 2] - b'0') * 8 + (field[i + 3] - b'0'),
            );
            i += 4;
        } else {
            out.push(field[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_device_path_and_owner() {
        let line =
            b"87 30 0:52 / /mnt/a\\040b rw,nosuid - fuse.shoal /srv/st rw,user_id=1000,group_id=0";
        let entry = parse_line(line).expect("parses");
        assert_eq!(entry.device, (0, 52));
        assert_eq!(entry.path, b"/mnt/a b");
        assert_eq!(entry.fstype, b"fuse.shoal");
        assert_eq!(entry.owner, Some(1000));
    }

    #[test]
    fn below_is_component_wise() {
        assert!(is_below(b"/mnt/a/b", b"/mnt/a"));
        assert!(!is_below(b"/mnt/ab", b"/mnt/a"));
        assert!(!is_below(b"/mnt/a", b"/mnt/a"));
        assert!(is_below(b"/x", b"/"));
    }
}
