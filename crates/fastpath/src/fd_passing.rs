//! One message with one descriptor passed along (SCM_RIGHTS), both ways: the client's
//! Hello carries its channel's memfd, the daemon's answer the mount's state page.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Sends `message` with `passed` on `socket`; the whole message or an error.
pub fn send_with_fd(socket: RawFd, message: &[u8], passed: RawFd) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: message.as_ptr() as *mut libc::c_void,
        iov_len: message.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; all zeroes is a valid value.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    header.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a size computation.
    header.msg_controllen = unsafe { libc::CMSG_SPACE(4) } as usize;
    // SAFETY: filling the one control message the buffer was sized for.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&header);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(4) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), passed);
    }
    loop {
        // SAFETY: sendmsg of buffers that outlive the call.
        let sent = unsafe { libc::sendmsg(socket, &header, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return if sent as usize == message.len() {
                Ok(())
            } else {
                Err(io::Error::other("message cut short"))
            };
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Receives one message into `buf` and the first descriptor passed with it, if any
/// (close-on-exec; any further ones are closed). A closed peer is an error.
pub fn receive_with_fd(socket: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; all zeroes is a valid value.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    header.msg_control = control.as_mut_ptr().cast();
    header.msg_controllen = std::mem::size_of_val(&control);
    let received = loop {
        // SAFETY: recvmsg into buffers that outlive the call.
        let received = unsafe { libc::recvmsg(socket, &mut header, libc::MSG_CMSG_CLOEXEC) };
        if received >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break received;
        }
    };
    if received <= 0 {
        return Err(io::Error::other("peer gone"));
    }
    let mut passed = None;
    // SAFETY: walking the control buffer recvmsg filled, with the libc macros; every
    // descriptor in it is ours now.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&header);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
                let data = libc::CMSG_DATA(cmsg).cast::<i32>();
                for index in 0..count {
                    let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(index)));
                    if passed.is_none() {
                        passed = Some(fd);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&header, cmsg);
        }
    }
    Ok((received as usize, passed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_message_and_its_descriptor_cross_a_socket_pair() {
        let mut pair = [0; 2];
        // SAFETY: socketpair into a two-element array.
        let rc =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, pair.as_mut_ptr()) };
        assert_eq!(rc, 0);
        // SAFETY: both descriptors are new and ours.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        send_with_fd(a.as_raw_fd(), b"hello", b.as_raw_fd()).expect("send");
        let mut buf = [0u8; 16];
        let (len, fd) = receive_with_fd(b.as_raw_fd(), &mut buf).expect("receive");
        assert_eq!(&buf[..len], b"hello");
        assert!(fd.is_some_and(|fd| fd.as_raw_fd() != b.as_raw_fd()));
        drop(a);
        assert!(
            receive_with_fd(b.as_raw_fd(), &mut buf).is_err(),
            "a closed peer"
        );
    }
}
