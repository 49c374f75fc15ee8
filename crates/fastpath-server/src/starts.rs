//! Where a request's path may start. A request names its start as a directory inode
//! (`At::base`): the mount's root for an absolute path, else the directory a relative path
//! is relative to (the working directory, a directory descriptor). The kernel starts a
//! walk only from a directory the process holds (its root, its working directory, an open
//! descriptor) and checks search permission from there down, so a start taken from the
//! message alone would skip its ancestors' permissions: a client could name a directory
//! below one it may not search. A start other than the root must therefore be a directory
//! the process holds: one it has open on the fast path (a handle), or one the daemon sees
//! in /proc/PID as the process's working directory, root or an open descriptor. That is
//! looked up once per process and directory and then kept: a process that held the
//! directory could have kept holding it, as the kernel would let it. For the same reason a
//! directory the process opened on the fast path stays a start after its handle closes.

use std::collections::HashSet;
use std::ffi::CString;

use parking_lot::Mutex;
use shoal_engine::ROOT_INO;

/// The starts a process was seen holding (`proc_shows_directory`), kept at most this many: a
/// bound on what one client can make us keep (past it, each is looked up again).
const MAX_KNOWN_STARTS: usize = 4096;

#[derive(Default)]
pub struct Starts {
    known: Mutex<HashSet<u64>>,
}

impl Starts {
    /// Whether process `pid` may start a walk at directory `base` of the mount on `device`
    /// (major, minor); `holds_handle` says whether it has that directory open on the fast
    /// path.
    pub fn allow(
        &self,
        pid: u32,
        device: (u32, u32),
        base: u64,
        holds_handle: impl FnOnce(u64) -> bool,
    ) -> bool {
        if base == ROOT_INO || holds_handle(base) || self.known.lock().contains(&base) {
            return true;
        }
        if !proc_shows_directory(pid, device, base) {
            return false;
        }
        self.remember(base);
        true
    }

    /// Keeps directory `ino` as a start: the process opened it (the daemon checked that
    /// open), and could have kept it open. A directory it opens from a listing it keeps,
    /// without a handle (the client's `calls::open::open_listed`), starts its walks from
    /// here.
    pub fn remember(&self, ino: u64) {
        let mut known = self.known.lock();
        if known.len() < MAX_KNOWN_STARTS {
            known.insert(ino);
        }
    }
}

/// Whether process `pid`'s working directory, root or one of its descriptors is directory
/// `ino` of the mount on `device`.
fn proc_shows_directory(pid: u32, device: (u32, u32), ino: u64) -> bool {
    let is_it = |path: &str| directory_at(path) == Some((device, ino));
    if is_it(&format!("/proc/{pid}/cwd")) || is_it(&format!("/proc/{pid}/root")) {
        return true;
    }
    let Ok(descriptors) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    descriptors
        .flatten()
        .any(|descriptor| is_it(&descriptor.path().to_string_lossy()))
}

/// The device and inode of the directory `path` leads to; `None` for anything else. The
/// kernel's cached attributes do: no request goes to a FUSE daemon (this one) for them.
fn directory_at(path: &str) -> Option<((u32, u32), u64)> {
    let path = CString::new(path).ok()?;
    // SAFETY: statx is plain data; all zeroes is a valid value.
    let mut found: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statx buffer of the right size, both ours.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_STATX_DONT_SYNC,
            libc::STATX_TYPE | libc::STATX_INO,
            &mut found,
        )
    };
    let directory = u32::from(found.stx_mode) & libc::S_IFMT == libc::S_IFDIR;
    (rc == 0 && directory).then_some(((found.stx_dev_major, found.stx_dev_minor), found.stx_ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device_of(path: &str) -> ((u32, u32), u64) {
        directory_at(path).expect("a directory")
    }

    #[test]
    fn a_start_is_allowed_only_where_the_process_holds_it() {
        let starts = Starts::default();
        let pid = std::process::id();
        let here = std::env::current_dir().expect("cwd");
        let (device, cwd) = device_of(&here.to_string_lossy());
        assert!(starts.allow(pid, device, ROOT_INO, |_| false), "the root");
        assert!(
            starts.allow(pid, device, cwd, |_| false),
            "the working directory"
        );
        let unheld = std::env::temp_dir().join(format!("shoal-starts-{pid}"));
        std::fs::create_dir_all(&unheld).expect("a directory");
        let (device, ino) = device_of(&unheld.to_string_lossy());
        assert!(
            !starts.allow(pid, device, ino, |_| false),
            "a directory named alone"
        );
        assert!(
            starts.allow(pid, device, ino, |held| held == ino),
            "a handle"
        );
        let open = std::fs::File::open(&unheld).expect("open the directory");
        assert!(
            starts.allow(pid, device, ino, |_| false),
            "an open descriptor"
        );
        drop(open);
        std::fs::remove_dir(&unheld).expect("remove the directory");
    }

    #[test]
    fn a_directory_once_opened_stays_a_start_within_the_bound() {
        let starts = Starts::default();
        let pid = std::process::id();
        let here = std::env::current_dir().expect("cwd");
        let (device, _) = device_of(&here.to_string_lossy());
        // Inode numbers no directory of the process has: only `remember` makes them starts.
        let unseen = u64::MAX - 10;
        assert!(
            !starts.allow(pid, device, unseen, |_| false),
            "never opened"
        );
        starts.remember(unseen);
        assert!(starts.allow(pid, device, unseen, |_| false), "opened once");
        for ino in 0..MAX_KNOWN_STARTS as u64 {
            starts.remember(u64::MAX - 1000 - ino);
        }
        let past_the_bound = u64::MAX - 5;
        starts.remember(past_the_bound);
        assert!(
            !starts.allow(pid, device, past_the_bound, |_| false),
            "a full set keeps no more"
        );
    }
}
