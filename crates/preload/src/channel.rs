//! One connection per thread and mount to the mount's daemon: a SOCK_SEQPACKET socket, one
//! request message, one reply. The daemon is trusted only if the kernel says the peer runs
//! as the mount's owner. A connection made before the process changed its credentials is
//! dropped and made again (the daemon learns credentials at connect).

use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use std::time::Duration;

use shoal_fastpath::fd_passing::{receive_with_fd, send_with_fd};
use shoal_fastpath::pace::Pace;
use shoal_fastpath::shared::{Patience, SharedChannel};
use shoal_fastpath::state::MountState;
use shoal_fastpath::{Reply, Request, Status, PROTOCOL_VERSION};

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

/// The longest a caller spins for its reply before it sleeps: most requests are answered
/// in a few microseconds; a sync may take milliseconds. How long it spins within that is
/// learned per connection (`Pace`): not at all while answers come late.
const CLIENT_SPIN: Duration = Duration::from_micros(200);

/// The largest answer to a Hello (a status, the protocol version and the root's inode).
const HELLO_REPLY_MAX_BYTES: usize = 256;

struct Connection {
    /// The socket's slot among the library's own descriptors (`internal_fds`).
    slot: usize,
    epoch: u64,
    pid: u32,
    /// The thread's (euid, egid) when it connected: what the daemon read from the socket.
    ids: (u32, u32),
    /// Requests travel here once the Hello is answered.
    shared: Option<SharedChannel>,
    /// A request sent without waiting (a close): its reply is taken before the next one.
    unanswered: Option<u32>,
    pace: Pace,
}

struct SocketGuard(i32);

impl Drop for SocketGuard {
    fn drop(&mut self) {
        sys::close(self.0);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        crate::internal_fds::release(self.slot);
    }
}

struct ThreadChannels {
    /// By mount index.
    connections: Vec<Option<Connection>>,
    send: Vec<u8>,
    receive: Vec<u8>,
}

/// Connections no thread is using, in a process with threads: a thread takes one for a
/// call and gives it back after, so threads that call the daemon one at a time share one
/// (`git status` stats from 20 threads, nearly all answered by listings: each thread's
/// own connection cost the daemon a thread, a channel and its spinning, 18 of them 5-7 ms
/// of setup and four times the daemon CPU of one thread's stats). A process without
/// threads keeps its connection to itself.
struct Pool {
    held: AtomicBool,
    idle: std::cell::UnsafeCell<Vec<(usize, Connection)>>,
}

// SAFETY: `idle` is reached only inside `Pool::with`, by the one thread that set `held`.
unsafe impl Sync for Pool {}

static POOL: Pool = Pool {
    held: AtomicBool::new(false),
    idle: std::cell::UnsafeCell::new(Vec::new()),
};

impl Pool {
    /// Runs `f` on the idle connections, if the pool can be had within a few tries (a
    /// holder preempted: the caller goes on without it).
    fn with<R>(&self, f: impl FnOnce(&mut Vec<(usize, Connection)>) -> R) -> Option<R> {
        crate::lock_tries::with_retries(|| {
            self.held
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .map(|_| ())
                .map_err(|_| ())
        })?;
        // SAFETY: `held` was false and is now ours: no other thread is inside.
        let result = f(unsafe { &mut *self.idle.get() });
        self.held.store(false, Ordering::Release);
        Some(result)
    }

    /// An idle connection to mount `index` made for the calling thread's process and
    /// credentials: (credentials epoch, pid, effective ids).
    fn take(&self, index: usize, made_for: (u64, u32, (u32, u32))) -> Option<Connection> {
        let last = LAST_SLOT.try_with(std::cell::Cell::get).ok().flatten();
        self.with(|idle| {
            let fits = |(mount, c): &(usize, Connection)| {
                *mount == index && (c.epoch, c.pid, c.ids) == made_for
            };
            // The one this thread used last (the daemon placed its thread by this one's
            // CPU), else the one given back last: its daemon thread is the likeliest awake.
            let at = idle
                .iter()
                .position(|entry| fits(entry) && Some(entry.1.slot) == last)
                .or_else(|| idle.iter().rposition(fits))?;
            Some(idle.swap_remove(at).1)
        })
        .flatten()
    }

    /// Gives `connection` back; dropped (closed) if the pool cannot be had.
    fn give(&self, index: usize, connection: Connection) {
        let _ = LAST_SLOT.try_with(|last| last.set(Some(connection.slot)));
        let _ = self.with(|idle| idle.push((index, connection)));
    }

    /// Defers closing `handle` on an idle connection to mount `index`; whether one took it.
    fn defer_close(&self, index: usize, handle: u64) -> bool {
        self.with(|idle| {
            idle.iter().any(|(mount, c)| {
                *mount == index && c.shared.as_ref().is_some_and(|s| s.defer_close(handle))
            })
        })
        .unwrap_or(false)
    }

    /// Wakes the daemon's thread of the idle connection to mount `index` given back last,
    /// if it sleeps (`take` gives it next unless this thread used another last).
    fn nudge(&self, index: usize) {
        let _ = self.with(|idle| {
            let last = idle.iter().rev().find(|(mount, _)| *mount == index);
            if let Some(shared) = last.and_then(|(_, c)| c.shared.as_ref()) {
                shared.nudge_server();
            }
        });
    }

    /// In a fork child, whose only thread is this one: the parent's idle connections are
    /// the child's copies, closed; a pool held by another thread at the fork is let go.
    fn forget_inherited(&self) {
        // SAFETY: the child has one thread, so nobody else is inside whatever `held` says.
        let inherited = std::mem::take(unsafe { &mut *self.idle.get() });
        self.held.store(false, Ordering::Release);
        drop(inherited);
    }
}

thread_local! {
    /// The pooled connection this thread gave back last, by its slot.
    static LAST_SLOT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    static CHANNELS: RefCell<ThreadChannels> = const {
        RefCell::new(ThreadChannels { connections: Vec::new(), send: Vec::new(), receive: Vec::new() })
    };
}

/// Whether a call waits for the daemon's answer.
#[derive(Clone, Copy)]
enum Wait {
    ForReply,
    /// For a request that cannot fail in a way the caller must hear of (a close): the
    /// caller goes on while the daemon works; the reply is taken before the next request.
    No,
}

/// Sends `request` to the daemon of mount `index` and returns its answer.
pub fn call(index: usize, request: &Request) -> Result<(Status, Reply), ChannelError> {
    call_with(index, request, Wait::ForReply)
}

/// Sends `request` without waiting for its answer (see `Wait::No`).
pub fn send_only(index: usize, request: &Request) {
    let _ = call_with(index, request, Wait::No);
}

fn call_with(index: usize, request: &Request, mode: Wait) -> Result<(Status, Reply), ChannelError> {
    let mount = mounts::all().get(index).ok_or(ChannelError::Unreachable)?;
    if !mount.usable() {
        return Err(ChannelError::Unreachable);
    }
    CHANNELS
        .try_with(|channels| {
            let mut channels = channels
                .try_borrow_mut()
                .map_err(|_| ChannelError::Unreachable)?;
            channels.exchange(index, mount, request, mode)
        })
        .unwrap_or(Err(ChannelError::Unreachable))
}

/// Closes the daemon's handle `handle` of mount `index`: through this thread's connection
/// to the mount, without a message or a wake-up (`SharedChannel::defer_close`), or, with
/// no connection or its ring full, as a request the caller does not wait for.
pub fn close(index: usize, handle: u64) {
    let deferred = CHANNELS
        .try_with(|channels| {
            let Ok(channels) = channels.try_borrow() else {
                return false;
            };
            channels
                .connections
                .get(index)
                .and_then(Option::as_ref)
                .and_then(|connection| connection.shared.as_ref())
                .is_some_and(|shared| shared.defer_close(handle))
        })
        .unwrap_or(false);
    if !deferred && !POOL.defer_close(index, handle) {
        send_only(index, &Request::Close { handle });
    }
}

/// Wakes the daemon's thread of the connection to mount `index` this thread will use next
/// (its own, or the pool's) if it sleeps: a request follows shortly
/// (`SharedChannel::nudge_server`).
pub fn nudge(index: usize) {
    let nudged = CHANNELS
        .try_with(|channels| {
            let Ok(channels) = channels.try_borrow() else {
                return true;
            };
            let own = channels
                .connections
                .get(index)
                .and_then(Option::as_ref)
                .and_then(|connection| connection.shared.as_ref());
            own.inspect(|shared| shared.nudge_server()).is_some()
        })
        .unwrap_or(true);
    if !nudged {
        POOL.nudge(index);
    }
}

/// Drops this thread's connections (a fork child must not share its parent's).
pub fn forget_inherited() {
    let _ = CHANNELS.try_with(|channels| {
        if let Ok(mut channels) = channels.try_borrow_mut() {
            // Closing is right: the child's copies of the sockets are its own descriptors.
            channels.connections.clear();
        }
    });
    POOL.forget_inherited();
}

impl ThreadChannels {
    /// Makes `connections[index]` one to use now, made for this thread's process and
    /// credentials (`ids`, as `current_ids` read them): its own, an idle one of the
    /// pool's, or a new one.
    fn ready_connection(
        &mut self,
        index: usize,
        mount: &Mount,
        ids: Option<(u32, u32)>,
    ) -> Result<(), ChannelError> {
        if self.connections.len() <= index {
            self.connections.resize_with(index + 1, || None);
        }
        let epoch = CREDENTIALS_EPOCH.load(Ordering::Acquire);
        // The pid as of the last fork (libc's fork runs our atfork handler in the child).
        let pid = crate::process_state::pid();
        let stale = self.connections[index].as_ref().is_some_and(|c| {
            c.epoch != epoch || c.pid != pid || ids.is_some_and(|ids| c.ids != ids)
        });
        if stale {
            self.connections[index] = None;
        }
        // Only a threaded process pools its connections, and only it has `ids`.
        if let (None, Some(ids)) = (&self.connections[index], ids) {
            self.connections[index] = POOL.take(index, (epoch, pid, ids));
        }
        if self.connections[index].is_none() {
            let (fd, shared) = connect(mount, &mut self.send, &mut self.receive)?;
            self.connections[index] = Some(Connection {
                slot: crate::internal_fds::hide(fd),
                epoch,
                pid,
                ids: ids.unwrap_or_else(effective_ids),
                shared: Some(shared),
                unanswered: None,
                pace: Pace::new(CLIENT_SPIN),
            });
        }
        Ok(())
    }

    fn exchange(
        &mut self,
        index: usize,
        mount: &Mount,
        request: &Request,
        mode: Wait,
    ) -> Result<(Status, Reply), ChannelError> {
        let ids = current_ids();
        if let Err(error) = self.ready_connection(index, mount, ids) {
            mount.give_up();
            return Err(error);
        }
        let Some(connection) = self.connections[index].as_mut() else {
            return Err(ChannelError::Unreachable);
        };
        let Some(shared) = &connection.shared else {
            return Err(ChannelError::Unreachable);
        };
        let pace = &mut connection.pace;
        let slot = connection.slot;
        let alive = || daemon_alive(crate::internal_fds::fd(slot));
        let mut result = Ok((Status::Ok, Reply::Empty));
        if let Some(seq) = connection.unanswered.take() {
            // The reply of a request sent without waiting (its outcome mattered to nobody).
            if shared
                .wait_reply(seq, &mut self.receive, Patience::Spin(pace.spin()), &alive)
                .is_err()
            {
                result = Err(ChannelError::Lost);
            }
        }
        request.encode(&mut self.send);
        if result.is_ok() {
            result = match mode {
                Wait::ForReply => {
                    let soon = !request.waits_on_journal();
                    shared_round_trip(slot, shared, pace, soon, &self.send)
                }
                Wait::No => {
                    connection.unanswered = Some(shared.send(&self.send));
                    Ok((Status::Ok, Reply::Empty))
                }
            };
        }
        if result.is_err() {
            self.connections[index] = None;
            mount.give_up();
        } else if ids.is_some() {
            if let Some(connection) = self.connections[index].take() {
                POOL.give(index, connection);
            }
        }
        result
    }
}

fn shared_round_trip(
    slot: usize,
    shared: &SharedChannel,
    pace: &mut Pace,
    soon: bool,
    send: &[u8],
) -> Result<(Status, Reply), ChannelError> {
    let alive = || daemon_alive(crate::internal_fds::fd(slot));
    shared
        .call(send, pace, soon, &alive, Reply::decode)
        .map_err(|_| ChannelError::Lost)?
        .map_err(|_| ChannelError::Lost)
}

/// Who the calling thread is to the daemon: what a connection (or anything the daemon
/// answered it) was made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Who {
    epoch: u64,
    ids: Option<(u32, u32)>,
}

pub fn who() -> Who {
    Who {
        epoch: CREDENTIALS_EPOCH.load(Ordering::Acquire),
        ids: current_ids(),
    }
}

/// This thread's effective ids when they must be read from the kernel, `None` when the
/// credentials epoch alone tells. A process that never had a second thread
/// (`__libc_single_threaded`, which glibc never sets back) changes them only through calls
/// the library intercepts, which move the epoch. A threaded one changes them through
/// glibc's `__nptl_setxid`, whose system calls are not intercepted; the functions that
/// call it are (`setxid.rs`) and move the epoch once every thread has the new ids: a
/// thread reads its ids from the kernel once per epoch (two system calls; it used to be
/// at every request).
fn current_ids() -> Option<(u32, u32)> {
    if single_threaded() {
        return None;
    }
    let epoch = CREDENTIALS_EPOCH.load(Ordering::Acquire);
    let cached = IDS_READ.try_with(|read| match read.get() {
        Some((at, ids)) if at == epoch => ids,
        _ => {
            let ids = effective_ids();
            read.set(Some((epoch, ids)));
            ids
        }
    });
    Some(cached.unwrap_or_else(|_| effective_ids()))
}

thread_local! {
    /// This thread's effective ids and the credentials epoch they were read under.
    static IDS_READ: std::cell::Cell<Option<(u64, (u32, u32))>> =
        const { std::cell::Cell::new(None) };
}

fn single_threaded() -> bool {
    static FLAG: OnceLock<usize> = OnceLock::new();
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
    let flag = *FLAG.get_or_init(|| unsafe {
        libc::dlsym(libc::RTLD_DEFAULT, c"__libc_single_threaded".as_ptr()) as usize
    });
    // SAFETY: glibc's `char __libc_single_threaded` (2.32 and later), alive for the
    // process; read volatile, as another thread's pthread_create clears it.
    flag != 0 && unsafe { std::ptr::read_volatile(flag as *const u8) } != 0
}

/// This thread's effective uid and gid, from the kernel.
fn effective_ids() -> (u32, u32) {
    (
        sys::call(libc::SYS_geteuid, &[]) as u32,
        sys::call(libc::SYS_getegid, &[]) as u32,
    )
}

/// Whether the daemon still holds its end of the socket.
fn daemon_alive(fd: i32) -> bool {
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    let n = sys::call(libc::SYS_poll, &[std::ptr::addr_of_mut!(poll) as i64, 1, 0]);
    !(n > 0 && poll.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0)
}

/// A new connection to `mount`'s daemon, checked and greeted: the Hello carries the
/// shared channel's memfd.
fn connect(
    mount: &Mount,
    send: &mut Vec<u8>,
    receive: &mut Vec<u8>,
) -> Result<(i32, SharedChannel), ChannelError> {
    let fd = sys::check(sys::call(
        libc::SYS_socket,
        &[
            i64::from(libc::AF_UNIX),
            i64::from(libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC),
            0,
        ],
    ))
    .map_err(|_| ChannelError::Unreachable)? as i32;
    // Closes the socket on every early return.
    let guard = SocketGuard(fd);
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
    let (shared, memfd) = SharedChannel::create().map_err(|_| ChannelError::Unreachable)?;
    Request::Hello {
        version: PROTOCOL_VERSION,
    }
    .encode(send);
    send_with_fd(fd, send, memfd.as_raw_fd()).map_err(|_| ChannelError::Unreachable)?;
    drop(memfd);
    // A daemon that closes at once refused us (a user a mount without allow_other does not
    // admit): the kernel mount answers instead.
    // Room for the Hello's answer only: replies are read where they lie in the channel, so
    // a thread's buffer need not be a whole message (132 KiB zeroed at every thread's first
    // call, 33 page faults).
    if receive.len() < HELLO_REPLY_MAX_BYTES {
        receive.resize(HELLO_REPLY_MAX_BYTES, 0);
    }
    let (len, state_fd) = receive_with_fd(fd, receive).map_err(|_| ChannelError::Unreachable)?;
    if let Some(state_fd) = state_fd {
        // Mapped once per process (a fork child inherits the mapping); the descriptor is
        // not needed once mapped.
        if mount.state.get().is_none() {
            if let Ok(state) = MountState::attach(&state_fd) {
                let _ = mount.state.set(state);
            }
        }
        drop(state_fd);
    }
    match Reply::decode(&receive[..len]) {
        Ok((Status::Ok, Reply::Hello(hello))) if hello.version == PROTOCOL_VERSION => {
            std::mem::forget(guard);
            Ok((fd, shared))
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
