//! The listener and one thread per connection: receive a request, serve it, send the reply.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use shoal_engine::{Engine, ROOT_INO};
use shoal_fastpath::{Hello, Reply, Request, Status, MAX_MESSAGE_BYTES, PROTOCOL_VERSION};

use crate::credentials::Credentials;
use crate::handles::{Process, Processes};
use crate::ops::Session;
use crate::refusal::{Refusal, Served};
use crate::stats::FastPathStats;

/// What the kernel mount caches, told of every change made through the fast path so the
/// other door sees it at once (the FUSE adapter implements it with notifications).
pub trait KernelCache: Send + Sync {
    /// `name` now exists in `parent` (the kernel may hold a negative entry for it).
    fn name_added(&self, parent: u64, name: &[u8]);
    /// `name` in `parent`, which named `ino`, is gone.
    fn name_removed(&self, parent: u64, name: &[u8], ino: u64);
    /// `ino` is now reached as `name` in `parent`.
    fn renamed(&self, ino: u64, parent: u64, name: &[u8]);
    /// `ino`'s attributes changed, and its data too when `data`.
    fn inode_changed(&self, ino: u64, data: bool);
}

/// Connections at most: each holds a thread; a process opens one per thread it uses.
const MAX_CONNECTIONS: usize = 4096;
/// Appends are serialized per inode through one of these locks.
const APPEND_LOCKS: usize = 64;

pub struct Server {
    pub(crate) engine: Arc<Engine>,
    pub(crate) kernel: Arc<dyn KernelCache>,
    pub(crate) handle_ids: AtomicU64,
    processes: Processes,
    append_locks: Vec<Mutex<()>>,
    connections: AtomicU64,
    stopped: AtomicBool,
    pub stats: Arc<FastPathStats>,
}

/// The listening fast path; dropping it stops new connections (live ones end with their
/// clients or the process).
pub struct FastPathHandle {
    server: Arc<Server>,
    listener: Arc<OwnedFd>,
}

impl FastPathHandle {
    pub fn stats(&self) -> &Arc<FastPathStats> {
        &self.server.stats
    }
}

impl Drop for FastPathHandle {
    fn drop(&mut self) {
        self.server.stopped.store(true, Ordering::Release);
        // SAFETY: shutting down a socket we own; the accept loop then returns an error.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

/// Listens on the fast path's socket for the mount with device number `device`
/// (major, minor) and serves connections until the handle is dropped.
pub fn start(
    engine: Arc<Engine>,
    kernel: Arc<dyn KernelCache>,
    device: (u32, u32),
) -> io::Result<FastPathHandle> {
    let listener = Arc::new(listen(&shoal_fastpath::socket_name(device.0, device.1))?);
    let server = Arc::new(Server {
        engine,
        kernel,
        handle_ids: AtomicU64::new(1),
        processes: Processes::default(),
        append_locks: (0..APPEND_LOCKS).map(|_| Mutex::new(())).collect(),
        connections: AtomicU64::new(0),
        stopped: AtomicBool::new(false),
        stats: Arc::default(),
    });
    let accepting = server.clone();
    let accept_fd = listener.clone();
    std::thread::Builder::new()
        .name("shoal-fastpath".into())
        .spawn(move || accepting.accept_loop(&accept_fd))?;
    Ok(FastPathHandle { server, listener })
}

fn listen(name: &str) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the result is checked before it is owned.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nobody else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let (address, len) = abstract_address(name)?;
    // SAFETY: `address` is a valid sockaddr_un of `len` bytes.
    if unsafe { libc::bind(fd, std::ptr::addr_of!(address).cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: listen(2) on our bound socket.
    if unsafe { libc::listen(fd, 128) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(socket)
}

/// A sockaddr_un for the abstract name `\0name`.
pub fn abstract_address(name: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    if bytes.len() + 1 > address.sun_path.len() {
        return Err(io::Error::other("socket name too long"));
    }
    for (slot, &byte) in address.sun_path[1..].iter_mut().zip(bytes) {
        *slot = byte as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + bytes.len();
    Ok((address, len as libc::socklen_t))
}

impl Server {
    fn accept_loop(self: Arc<Self>, listener: &OwnedFd) {
        loop {
            // SAFETY: accept4 on our listening socket; the result is checked.
            let fd = unsafe {
                libc::accept4(
                    listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if self.stopped.load(Ordering::Acquire) {
                return;
            }
            if fd < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::warn!(%error, "fast path: accept failed");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
            // SAFETY: accept4 returned a new descriptor we now own.
            let socket = unsafe { OwnedFd::from_raw_fd(fd) };
            if self.connections.load(Ordering::Acquire) >= MAX_CONNECTIONS as u64 {
                continue; // dropped: the client falls back to the kernel
            }
            let server = self.clone();
            let spawned = std::thread::Builder::new()
                .name("shoal-fastpath-conn".into())
                .spawn(move || server.serve_connection(socket));
            if let Err(error) = spawned {
                tracing::warn!(%error, "fast path: no thread for a connection");
            }
        }
    }

    fn serve_connection(&self, socket: OwnedFd) {
        let caller = match Credentials::of_peer(socket.as_fd()) {
            Ok(caller) => caller,
            Err(error) => {
                tracing::debug!(%error, "fast path: peer credentials unreadable");
                return;
            }
        };
        self.connections.fetch_add(1, Ordering::AcqRel);
        let process = self.processes.join(caller.pid);
        self.stats.connected();
        let mut request_buf = vec![0u8; MAX_MESSAGE_BYTES];
        let mut reply_buf = Vec::with_capacity(MAX_MESSAGE_BYTES);
        while let Some(len) = receive(&socket, &mut request_buf) {
            let (status, reply) = match Request::decode(&request_buf[..len]) {
                Ok(request) => self.serve(&caller, &process, &request),
                Err(error) => {
                    tracing::debug!(%error, pid = caller.pid, "fast path: malformed request");
                    (Status::Errno(libc::EPROTO), Reply::Empty)
                }
            };
            Reply::encode(status, &reply, &mut reply_buf);
            if !send(&socket, &reply_buf) {
                break;
            }
        }
        self.processes.leave(caller.pid, &process, &self.engine);
        self.connections.fetch_sub(1, Ordering::AcqRel);
    }

    fn serve(&self, caller: &Credentials, process: &Process, request: &Request) -> (Status, Reply) {
        let session = Session { caller, process };
        let result = self.dispatch(&session, request);
        self.stats.record(request, &result);
        match result {
            Ok(reply) => (Status::Ok, reply),
            Err(refusal) => refusal.into(),
        }
    }

    fn dispatch(&self, s: &Session, request: &Request) -> Served<Reply> {
        match request {
            Request::Hello { version } => {
                if *version != PROTOCOL_VERSION {
                    return Err(Refusal::Fallback);
                }
                Ok(Reply::Hello(Hello {
                    version: PROTOCOL_VERSION,
                    root: ROOT_INO,
                }))
            }
            Request::Stat { at } => self.stat(s, at),
            Request::Access { at, mask } => self.access(s, at, *mask),
            Request::Open {
                at,
                flags,
                mode,
                umask,
            } => self.open(s, at, *flags, *mode, *umask),
            Request::Close { handle } => self.close(s, *handle),
            Request::Read {
                handle,
                offset,
                len,
            } => self.read(s, *handle, *offset, *len),
            Request::Write {
                handle,
                offset,
                append,
                data,
            } => self.write(s, *handle, *offset, *append, data),
            Request::Fstat { handle } => self.fstat(s, *handle),
            Request::Fsync { handle } => self.fsync(s, *handle),
            Request::ReadDir { handle, after, max } => {
                self.read_dir(s, *handle, after.as_deref(), *max)
            }
            Request::Mkdir { at, mode, umask } => self.mkdir(s, at, *mode, *umask),
            Request::Unlink { at, dir } => self.unlink(s, at, *dir),
            Request::Rename { from, to, flags } => self.rename(s, from, to, *flags),
            Request::Link { from, to } => self.link(s, from, to),
            Request::Symlink { target, at } => self.symlink(s, target, at),
            Request::Readlink { at } => self.readlink(s, at),
            Request::SetAttr { target, change } => self.set_attr(s, target, change),
            Request::GetXattr { target, name } => self.get_xattr(s, target, name),
            Request::ListXattr { target } => self.list_xattr(s, target),
            Request::Sync => self.sync(),
            Request::Resolve { at } => self.resolve_directory(s, at),
        }
    }

    pub(crate) fn append_lock(&self, ino: u64) -> MutexGuard<'_, ()> {
        self.append_locks[(ino as usize) % APPEND_LOCKS].lock()
    }

    /// Processes connected now.
    pub fn processes(&self) -> usize {
        self.processes.count()
    }
}

/// One message, or `None` when the peer is gone.
fn receive(socket: &OwnedFd, buf: &mut [u8]) -> Option<usize> {
    loop {
        // SAFETY: `buf` is a valid writable buffer of its length.
        let n = unsafe { libc::recv(socket.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n > 0 {
            return Some(n as usize);
        }
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return None;
    }
}

fn send(socket: &OwnedFd, message: &[u8]) -> bool {
    loop {
        // SAFETY: `message` is a valid buffer of its length.
        let n = unsafe {
            libc::send(
                socket.as_raw_fd(),
                message.as_ptr().cast(),
                message.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return true;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
    }
}
