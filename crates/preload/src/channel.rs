//! One connection per thread and mount to the mount's daemon: a SOCK_SEQPACKET socket, one
//! request message, one reply. The daemon is trusted only if the kernel says the peer runs
//! as the mount's owner. A connection made before the process changed its credentials is
//! dropped and made again (the daemon learns credentials at connect).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use shoal_fastpath::{Reply, Request, Status, MAX_MESSAGE_BYTES, PROTOCOL_VERSION};

use crate::mounts::{self, Mount};
use crate::sys;

/// Bumped whenever the process changes its uids, gids or groups.
static CREDENTIALS_EPOCH: AtomicU64 = AtomicU64::new(0);

pub fn credentials_changed() {
    CREDENTIALS_EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// Why a call could not be made: the caller falls back to the kernel (before anything
/// was sent) or reports ENOTCONN (the daemon went away mid-call, as the kernel would).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelError {
    Unreachable,
    Lost,
}

struct Connection {
    fd: i32,
    epoch: u64,
    pid: u32,
}

impl Drop for Connection {
    fn drop(&mut self) {
        sys::close(self.fd);
    }
}

struct ThreadChannels {
    /// By mount index.
    connections: Vec<Option<Connection>>,
    send: Vec<u8>,
    receive: Vec<u8>,
}

thread_local! {
    static CHANNELS: RefCell<ThreadChannels> = const {
        RefCell::new(ThreadChannels { connections: Vec::new(), send: Vec::new(), receive: Vec::new() })
    };
}

/// Sends `request` to the daemon of mount `index` and returns its answer.
pub fn call(index: usize, request: &Request) -> Result<(Status, Reply), ChannelError> {
    let mount = mounts::all().get(index).ok_or(ChannelError::Unreachable)?;
    if !mount.usable() {
        return Err(ChannelError::Unreachable);
    }
    CHANNELS
        .try_with(|channels| {
            let mut channels = channels
                .try_borrow_mut()
                .map_err(|_| ChannelError::Unreachable)?;
            channels.exchange(index, mount, request)
        })
        .unwrap_or(Err(ChannelError::Unreachable))
}

/// Drops this thread's connections (a fork child must not share its parent's).
pub fn forget_inherited() {
    let _ = CHANNELS.try_with(|channels| {
        if let Ok(mut channels) = channels.try_borrow_mut() {
            // Closing is right: the child's copies of the sockets are its own descriptors.
            channels.connections.clear();
        }
    });
}

impl ThreadChannels {
    fn exchange(
        &mut self,
        index: usize,
        mount: &Mount,
        request: &Request,
    ) -> Result<(Status, Reply), ChannelError> {
        if self.connections.len() <= index {
            self.connections.resize_with(index + 1, || None);
        }
        let epoch = CREDENTIALS_EPOCH.load(Ordering::Acquire);
        let pid = sys::getpid();
        let stale = self.connections[index]
            .as_ref()
            .is_some_and(|c| c.epoch != epoch || c.pid != pid);
        if stale {
            self.connections[index] = None;
        }
        if self.connections[index].is_none() {
            match connect(mount, &mut self.send, &mut self.receive) {
                Ok(fd) => self.connections[index] = Some(Connection { fd, epoch, pid }),
                Err(error) => {
                    mount.give_up();
                    return Err(error);
                }
            }
        }
        let fd = self.connections[index].as_ref().map_or(-1, |c| c.fd);
        request.encode(&mut self.send);
        let result = round_trip(fd, &self.send, &mut self.receive);
        if result.is_err() {
            self.connections[index] = None;
            mount.give_up();
        }
        result
    }
}

fn round_trip(
    fd: i32,
    send: &[u8],
    receive: &mut Vec<u8>,
) -> Result<(Status, Reply), ChannelError> {
    send_message(fd, send)?;
    let len = receive_message(fd, receive)?;
    Reply::decode(&receive[..len]).map_err(|_| ChannelError::Lost)
}

fn send_message(fd: i32, message: &[u8]) -> Result<(), ChannelError> {
    loop {
        let n = sys::call(
            libc::SYS_sendto,
            &[
                i64::from(fd),
                message.as_ptr() as i64,
                message.len() as i64,
                i64::from(libc::MSG_NOSIGNAL),
                0,
                0,
            ],
        );
        if n == -i64::from(libc::EINTR) {
            continue;
        }
        return if n == message.len() as i64 {
            Ok(())
        } else {
            Err(ChannelError::Lost)
        };
    }
}

fn receive_message(fd: i32, buf: &mut Vec<u8>) -> Result<usize, ChannelError> {
    if buf.len() < MAX_MESSAGE_BYTES {
        buf.resize(MAX_MESSAGE_BYTES, 0);
    }
    loop {
        let n = sys::call(
            libc::SYS_recvfrom,
            &[
                i64::from(fd),
                buf.as_mut_ptr() as i64,
                buf.len() as i64,
                0,
                0,
                0,
            ],
        );
        if n == -i64::from(libc::EINTR) {
            continue;
        }
        return if n > 0 {
            Ok(n as usize)
        } else {
            Err(ChannelError::Lost)
        };
    }
}

/// A new connection to `mount`'s daemon, checked and greeted.
fn connect(mount: &Mount, send: &mut Vec<u8>, receive: &mut Vec<u8>) -> Result<i32, ChannelError> {
    let fd = sys::check(sys::call(
        libc::SYS_socket,
        &[
            i64::from(libc::AF_UNIX),
            i64::from(libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC),
            0,
        ],
    ))
    .map_err(|_| ChannelError::Unreachable)? as i32;
    let connection = Connection {
        fd,
        epoch: 0,
        pid: 0,
    };
    let name = shoal_fastpath::socket_name(mount.device.0, mount.device.1);
    let (address, len) = abstract_address(&name);
    let rc = sys::call(
        libc::SYS_connect,
        &[
            i64::from(fd),
            std::ptr::addr_of!(address) as i64,
            i64::from(len),
        ],
    );
    if rc < 0 || peer_uid(fd) != Some(mount.owner) {
        return Err(ChannelError::Unreachable);
    }
    Request::Hello {
        version: PROTOCOL_VERSION,
    }
    .encode(send);
    match round_trip(fd, send, receive) {
        Ok((Status::Ok, Reply::Hello(hello))) if hello.version == PROTOCOL_VERSION => {
            std::mem::forget(connection);
            Ok(fd)
        }
        _ => Err(ChannelError::Unreachable),
    }
}

fn peer_uid(fd: i32) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    let rc = sys::call(
        libc::SYS_getsockopt,
        &[
            i64::from(fd),
            i64::from(libc::SOL_SOCKET),
            i64::from(libc::SO_PEERCRED),
            std::ptr::addr_of_mut!(cred) as i64,
            std::ptr::addr_of_mut!(len) as i64,
        ],
    );
    (rc == 0).then_some(cred.uid)
}

fn abstract_address(name: &str) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    debug_assert!(bytes.len() + 1 < address.sun_path.len());
    for (slot, &byte) in address.sun_path[1..].iter_mut().zip(bytes) {
        *slot = byte as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + bytes.len();
    (address, len as libc::socklen_t)
}
