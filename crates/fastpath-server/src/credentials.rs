//! Who is calling: learned from the kernel (the socket's peer credentials and the process's
//! capability set), never from a message.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Capabilities that widen file permission checks: CAP_CHOWN, CAP_DAC_OVERRIDE,
/// CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID (bits 0-4) and CAP_SYS_ADMIN (21, trusted.*
/// xattrs). A caller with all of them is `privileged`; one with only some is treated as
/// having none, so a check it fails goes to the kernel, which knows better.
const PRIVILEGE_CAPS: u64 = 0b1_1111 | (1 << 21);

/// A connected process's identity for permission checks (its fsuid/fsgid are its euid/egid:
/// the client falls back to the kernel for good once a process sets them apart).
#[derive(Clone, Debug)]
pub struct Credentials {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub privileged: bool,
}

impl Credentials {
    /// Reads the peer of a connected Unix socket.
    pub fn of_peer(socket: BorrowedFd<'_>) -> io::Result<Credentials> {
        let peer = shoal_sys::peer::credentials(socket)?;
        let groups = peer_groups(socket)?;
        let pid = u32::try_from(peer.pid).map_err(|_| io::Error::other("peer has no pid"))?;
        Ok(Credentials {
            pid,
            uid: peer.uid,
            gid: peer.gid,
            groups,
            privileged: effective_caps(pid)? & PRIVILEGE_CAPS == PRIVILEGE_CAPS,
        })
    }

    /// Whether the caller is in group `gid` (its own or a supplementary one).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// Supplementary groups of the peer at connect time (SO_PEERGROUPS, Linux 4.13+).
fn peer_groups(socket: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut groups = vec![0u32; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<u32>()) as libc::socklen_t;
        // SAFETY: `groups` is a valid out-buffer of `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let needed = len as usize / std::mem::size_of::<u32>();
        if rc == 0 {
            groups.truncate(needed);
            return Ok(groups);
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ERANGE) || needed <= groups.len() {
            return Err(error);
        }
        groups.resize(needed, 0);
    }
}

/// The effective capability set of process `pid` (`CapEff` in /proc/PID/status).
fn effective_caps(pid: u32) -> io::Result<u64> {
    let status = read_proc_file(&format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .ok_or_else(|| io::Error::other(format!("no CapEff in /proc/{pid}/status")))
}

/// A /proc file whole. Its size reads as 0, so `fs::read_to_string` began with 32 bytes and
/// doubled: nine `read`s for a process's status at every connection, seven for its stat.
/// A buffer that holds either at once takes two.
pub(crate) fn read_proc_file(path: &str) -> io::Result<String> {
    use std::io::Read;
    let mut text = String::with_capacity(PROC_FILE_BYTES);
    std::fs::File::open(path)?.read_to_string(&mut text)?;
    Ok(text)
}

/// Room for /proc/PID/status (about 1.4 KiB) or /proc/PID/stat in one `read`.
const PROC_FILE_BYTES: usize = 4096;
