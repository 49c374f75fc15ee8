//! Who is at the other end of a connected Unix socket, as the kernel recorded it at
//! connect (SO_PEERCRED): the one source of a caller's identity for the control socket and
//! the fast path.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The peer's pid, effective uid and effective gid at connect time.
pub fn credentials(socket: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt into a ucred of the size we pass.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}
