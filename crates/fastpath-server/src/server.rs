//! The listener and one thread per connection: receive a request, serve it, send the reply.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use shoal_engine::{ChangeObserver, Engine, FsError, Timestamp, ROOT_INO};
use shoal_fastpath::fd_passing::{receive_with_fd, send_with_fd};
use shoal_fastpath::pace::Pace;
use shoal_fastpath::shared::{Patience, SharedChannel};
use shoal_fastpath::state::MountState;
use shoal_fastpath::{Hello, Reply, Request, Status, Walk, MAX_MESSAGE_BYTES, PROTOCOL_VERSION};

use crate::activity::Activity;
use crate::answered_early::{copied_as_answered, AnsweredEarly, Apply, Pending};
use crate::below::trimmed;
use crate::credentials::Credentials;
use crate::handles::{Process, Processes};
use crate::held_change::{HeldChange, Holding};
use crate::ops::{OpenDirAsked, Prediction, Session};
use crate::placement::Placement;
use crate::refusal::{Refusal, Served};
use crate::stats::FastPathStats;
use crate::walk_cache::WalkCache;

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
    /// Whether the kernel has `ino` cached (looked up and not forgotten).
    fn holds(&self, ino: u64) -> bool;
}

/// Connections at most: each holds a thread; a process opens one per thread it uses.
const MAX_CONNECTIONS: usize = 4096;
/// Appends are serialized per inode through one of these locks.
const APPEND_LOCKS: usize = 64;
/// The longest a connection's thread keeps looking for the next request before it sleeps:
/// a tool's calls come a few microseconds apart, a wake-up costs tens on an idle VM. How
/// long it looks within that is learned per connection (`Pace`): not at all while the
/// client's requests come far apart (an interactive program, a busy machine).
const SERVER_SPIN: Duration = Duration::from_micros(100);

/// What `serve_request` gives: the answer, the request predicted next, and a change
/// answered before it is written (a create, mkdir, unlink or rmdir).
type ServedRequest<'a> = (Status, Reply, Option<Prediction>, Option<Pending<'a>>);

/// What a request served may answer before it is written.
#[derive(Default)]
struct Early<'a> {
    /// Whether a change may be answered once decided (`Session::may_answer_early`).
    allowed: bool,
    /// The removal this connection holds, which an unlink may join (`join_removal`);
    /// written first by anything else that changes the store.
    held_removal: Option<Pending<'a>>,
}

/// The handles the client left in `channel`'s ring of deferred closes.
fn deferred_closes(channel: &SharedChannel) -> Vec<u64> {
    let mut handles = Vec::new();
    channel.take_deferred_closes(&mut handles);
    handles
}

/// Where a connection's thread stands when it waits for the next request.
struct Waiting<'a> {
    /// The last request's number.
    seq: u32,
    /// Whether spinning pays now (decided at the last request's arrival).
    spinning_pays: bool,
    /// Whether the client and the mount are still there (checked after each sleep).
    alive: &'a dyn Fn() -> bool,
}

/// What a connection's thread does with a change it holds back (`HeldChange`) while it
/// waits for the next request.
struct HeldBack<'a> {
    /// Whether another request waits for it, or the kernel has come to hold its file (a
    /// lookup under way at its answer): the spin for the next request ends then.
    awaited: &'a dyn Fn() -> bool,
    /// Applies it (if any), before the thread sleeps.
    apply: &'a mut dyn FnMut(),
}

/// Whether `a` and `b` (`opendir`s) ask for the same: a path that ends with slashes opens
/// the directory it names without them (`git status` opens `a/b/`).
fn same_open_dir(a: &Request, b: &Request) -> bool {
    match (a, b) {
        (
            Request::OpenDir {
                at: at_a,
                flags: flags_a,
                max: max_a,
                with_attrs: attrs_a,
                below: below_a,
                walk: walk_a,
            },
            Request::OpenDir {
                at: at_b,
                flags: flags_b,
                max: max_b,
                with_attrs: attrs_b,
                below: below_b,
                walk: walk_b,
            },
        ) => {
            at_a.base == at_b.base
                && at_a.follow == at_b.follow
                && trimmed(&at_a.path) == trimmed(&at_b.path)
                && !trimmed(&at_a.path).is_empty()
                && (flags_a, max_a, attrs_a, below_a, walk_a)
                    == (flags_b, max_b, attrs_b, below_b, walk_b)
        }
        _ => false,
    }
}

/// Encodes and sends a request's answer (`Replier::send`).
type Answer<'a> = dyn FnMut(Status, &Reply) + 'a;

/// Sends the answer to request `seq` of `channel`, which arrived at `arrived`.
struct Replier<'c> {
    channel: &'c SharedChannel,
    seq: u32,
    arrived: Instant,
    /// Whether the client may spin for its next answers.
    spinning_pays: bool,
}

impl Replier<'_> {
    fn send(&self, encoded: &[u8]) {
        self.channel.let_client_spin(self.spinning_pays);
        self.channel
            .reply(self.seq, encoded, self.arrived.elapsed());
    }

    /// Sends the `len` bytes `place_next` placed after the reply before this one.
    fn send_placed(&self, len: usize) {
        self.channel.let_client_spin(self.spinning_pays);
        self.channel
            .reply_placed(self.seq, len, self.arrived.elapsed());
    }

    /// Places `encoded`, an answer to the next request, in the reply area once the client
    /// has read this one's (`SharedChannel::place_reply`); whether it did.
    fn place_next(&self, encoded: &[u8]) -> bool {
        self.channel.place_reply(self.seq, encoded)
    }
}

/// A reply made ahead of its request: the `opendir` a walk will send next
/// (`Session::predicted`, the first directory that did not fit its last reply), answered
/// while the caller works through what the last one brought, so the two overlap on two
/// CPUs. It is sent if that very request comes and the mount's change count is still the
/// one read before it was made (it is then what answering now would give); else what it
/// opened is closed.
struct Speculation {
    request: Request,
    changes: u64,
    result: Served<Reply>,
    /// `result` as it travels, encoded while the caller was busy: a step of a walk brings
    /// 130 KiB of listings, whose encoding took 100-150 µs of the round trip on the AMD VM
    /// (`find` waited that long at each of its 33 steps).
    encoded: Vec<u8>,
    /// The reply after which `encoded` was placed in the reply area (`Replier::place_next`):
    /// if its request comes next, the answer is published without copying 130 KiB (20 µs).
    placed_after: Option<u32>,
    /// What it predicts in turn, and the walk's stack after that.
    next: Option<Prediction>,
}

pub struct Server {
    pub(crate) engine: Arc<Engine>,
    /// The mount's device number (major, minor): where a process's directories are seen
    /// (`starts`).
    pub(crate) device: (u32, u32),
    pub(crate) kernel: Arc<dyn KernelCache>,
    access: Access,
    pub(crate) handle_ids: AtomicU64,
    processes: Processes,
    append_locks: Vec<Mutex<()>>,
    connections: AtomicU64,
    /// Numbers connections for `activity`.
    connection_ids: AtomicU64,
    /// Which connections are busy: nobody spins while they need more CPUs than there are.
    activity: Arc<Activity>,
    /// Connection threads spinning for their next request now (see `spin_slot`).
    spinners: AtomicUsize,
    /// At most this many spin at once: the CPUs but one (read once: std reads cgroup
    /// files to answer).
    spin_budget: usize,
    stopped: AtomicBool,
    pub stats: Arc<FastPathStats>,
    /// The page every client maps read-only, with the engine's change count (`state`);
    /// its descriptor goes with each Hello answer.
    state_fd: OwnedFd,
    /// Whether the page follows the engine: only then may listings carry attributes for
    /// clients to keep.
    pub(crate) state_follows_engine: bool,
    /// The state as the engine's observer writes it: replies read inode versions here.
    pub(crate) state: Arc<StatePublisher>,
    /// The directories walks passed through, while their versions stay (`walk_cache`).
    pub(crate) walks: WalkCache,
    /// Listings of directories walks open ahead, encoded, while the count stays (`pages`).
    pub(crate) pages: crate::pages::KeptPages,
}

/// Publishes the engine's change count and per-inode versions in the mount's state.
pub(crate) struct StatePublisher(pub(crate) MountState);

impl ChangeObserver for StatePublisher {
    fn changed(&self, changes: u64, inodes: &[u64]) {
        // Versions first: a client that sees the new count must see them moved too.
        for &ino in inodes {
            self.0.bump(ino);
        }
        self.0.publish(changes);
    }
}

/// The listening fast path; dropping it stops new connections (live ones end with their
/// clients or the process).
pub struct FastPathHandle {
    server: Arc<Server>,
    listener: Arc<OwnedFd>,
    accepting: Option<std::thread::JoinHandle<()>>,
}

impl FastPathHandle {
    pub fn stats(&self) -> &Arc<FastPathStats> {
        &self.server.stats
    }

    /// A probe of whether fast-path callers are busy now (one served within the last
    /// millisecond): the kernel door's ring threads then leave the CPUs to them rather
    /// than poll for the rare request of theirs (`fuser::yield_to_other_work`).
    pub fn busy_probe(&self) -> impl Fn() -> bool + Send + Sync + 'static {
        let activity = self.server.activity.clone();
        move || activity.any_busy(Instant::now())
    }
}

impl Drop for FastPathHandle {
    /// Stops accepting and waits for every connection's thread to end (they notice within
    /// one liveness check), so the engine they share is released with the mount: the store
    /// must be closed when `shoal umount` returns.
    fn drop(&mut self) {
        self.server.stopped.store(true, Ordering::Release);
        // SAFETY: shutting down a socket we own; the accept loop then returns an error.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if let Some(accepting) = self.accepting.take() {
            let _ = accepting.join();
        }
        while self.server.connections.load(Ordering::Acquire) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// Listens on the fast path's socket for the mount with device number `device`
/// (major, minor) and serves connections until the handle is dropped.
/// Who may use the fast path: as the kernel lets them use the mount.
#[derive(Clone, Copy, Debug)]
pub struct Access {
    /// `allow_other`: any user; otherwise only the mount's owner.
    pub allow_other: bool,
    pub owner_uid: u32,
    pub owner_gid: u32,
}

impl Access {
    /// The kernel's `fuse_allow_current_process`: without allow_other, only a caller whose
    /// ids are the mount owner's reaches the filesystem (root included).
    fn admits(&self, caller: &Credentials) -> bool {
        self.allow_other || (caller.uid == self.owner_uid && caller.gid == self.owner_gid)
    }
}

pub fn start(
    engine: Arc<Engine>,
    kernel: Arc<dyn KernelCache>,
    device: (u32, u32),
    access: Access,
) -> io::Result<FastPathHandle> {
    let listener = Arc::new(listen(&shoal_fastpath::socket_name(device.0, device.1))?);
    let (state, state_fd) = MountState::create()?;
    let publisher = Arc::new(StatePublisher(state));
    let state_follows_engine = engine.observe_changes(publisher.clone());
    if state_follows_engine {
        publisher.0.publish(engine.changes());
    } else {
        tracing::warn!(
            "fast path: the engine already has a change observer; listings carry no attributes"
        );
    }
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let server = Arc::new(Server {
        engine,
        device,
        kernel,
        access,
        handle_ids: AtomicU64::new(1),
        processes: Processes::default(),
        append_locks: (0..APPEND_LOCKS).map(|_| Mutex::new(())).collect(),
        connections: AtomicU64::new(0),
        connection_ids: AtomicU64::new(0),
        activity: Arc::new(Activity::new(cpus)),
        spinners: AtomicUsize::new(0),
        spin_budget: cpus.saturating_sub(1).max(1),
        stopped: AtomicBool::new(false),
        stats: Arc::default(),
        state_fd,
        state_follows_engine,
        state: publisher,
        walks: WalkCache::default(),
        pages: crate::pages::KeptPages::default(),
    });
    let accepting = server.clone();
    let accept_fd = listener.clone();
    let accepting = std::thread::Builder::new()
        .name("shoal-fastpath".into())
        .spawn(move || accepting.accept_loop(&accept_fd))?;
    Ok(FastPathHandle {
        server,
        listener,
        accepting: Some(accepting),
    })
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
            // Counted before the thread exists, so a stop waits for it (see Drop).
            self.connections.fetch_add(1, Ordering::AcqRel);
            let server = self.clone();
            let spawned = std::thread::Builder::new()
                .name("shoal-fastpath-conn".into())
                .spawn(move || {
                    server.serve_connection(socket);
                    server.connections.fetch_sub(1, Ordering::AcqRel);
                });
            if let Err(error) = spawned {
                self.connections.fetch_sub(1, Ordering::AcqRel);
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
        if !self.access.admits(&caller) {
            // Closed at once: the client uses the kernel mount, which refuses it (EACCES).
            return;
        }
        let process = self.processes.join(caller.pid);
        self.stats.connected();
        match self.greet(&socket) {
            Ok(channel) => self.serve_requests(&socket, &channel, &caller, &process),
            Err(error) => tracing::debug!(%error, pid = caller.pid, "fast path: no channel"),
        }
        self.processes.leave(caller.pid, &process, &self.engine);
    }

    /// The first message: a Hello carrying the client's channel memfd; answered on the
    /// socket, after which requests come through the channel.
    fn greet(&self, socket: &OwnedFd) -> io::Result<SharedChannel> {
        let mut buf = vec![0u8; 256];
        let (len, memfd) = receive_with_fd(socket.as_raw_fd(), &mut buf)?;
        let version = match Request::decode(&buf[..len]) {
            Ok(Request::Hello { version }) => version,
            _ => return Err(io::Error::other("the first message is not a Hello")),
        };
        let memfd = memfd.ok_or_else(|| io::Error::other("Hello without a channel"))?;
        let channel = SharedChannel::accept(&memfd)?;
        let (status, reply) = if version == PROTOCOL_VERSION {
            let hello = Hello {
                version: PROTOCOL_VERSION,
                root: ROOT_INO,
            };
            (Status::Ok, Reply::Hello(hello))
        } else {
            (Status::Fallback, Reply::Empty)
        };
        let mut out = Vec::new();
        Reply::encode(status, &reply, &mut out);
        send_with_fd(socket.as_raw_fd(), &out, self.state_fd.as_raw_fd())?;
        Ok(channel)
    }

    fn serve_requests(
        &self,
        socket: &OwnedFd,
        channel: &SharedChannel,
        caller: &Credentials,
        process: &Process,
    ) {
        // A connection ends with its client, or with the mount. Each time the thread wakes
        // from its sleep it takes the closes the client deferred meanwhile (bounding how
        // long an unlinked file's space outlives its last close to `LIVENESS_CHECK`).
        let alive = || {
            self.close_deferred(channel, caller, process);
            !self.stopped.load(Ordering::Acquire) && peer_alive(socket)
        };
        let mut request_buf = Vec::with_capacity(MAX_MESSAGE_BYTES);
        let mut reply_buf = Vec::with_capacity(MAX_MESSAGE_BYTES);
        let mut seq = 0;
        let mut pace = Pace::new(SERVER_SPIN);
        let id = self.connection_ids.fetch_add(1, Ordering::Relaxed);
        // Decided once per request, at its arrival, for both sides' next wait.
        let mut spinning_pays = true;
        let mut ahead: Option<Speculation> = None;
        // A change answered early, held until it is known whether the next request goes on
        // with it (`HeldChange`); applied before the thread sleeps, as soon as another
        // request waits for it, and before anything else is served.
        let mut holding = Holding::default();
        let mut placement = Placement::of_this_thread();
        loop {
            let waiting = Waiting {
                seq,
                spinning_pays,
                alive: &alive,
            };
            let held_ino = holding.held.as_ref().map(HeldChange::ino);
            let removal_held = holding.removal.is_some();
            let held_back = HeldBack {
                awaited: &|| self.holding_is_awaited(held_ino, removal_held),
                apply: &mut || self.apply_held(caller, process, &mut holding),
            };
            let Some((next, arrived)) =
                self.wait_for_request(channel, waiting, &mut pace, &mut request_buf, held_back)
            else {
                break;
            };
            seq = next;
            self.activity.served(id, arrived);
            let busy = self.activity.busy(arrived);
            spinning_pays = self.activity.spinning_pays(busy);
            if placement.follow(channel.client_cpu(), arrived) {
                self.stats.count_thread_move();
            }
            let replier = Replier {
                channel,
                seq,
                arrived,
                spinning_pays,
            };
            let mut answer = |status: Status, reply: &Reply| {
                Reply::encode(status, reply, &mut reply_buf);
                replier.send(&reply_buf);
            };
            let decoded = Request::decode(&request_buf);
            // An early answer makes every other request wait for its apply: it pays only
            // while no other connection is asking (else their waits add up, and on 16
            // cores their spinning took 4x the daemon's CPU per create).
            let alone = busy <= 1;
            let next = decoded.as_ref().ok().filter(|_| alone);
            if self.goes_on_with_held(caller, process, &mut holding, next, &mut answer) {
                continue;
            }
            self.serve_in_turn(
                caller,
                process,
                decoded,
                alone,
                (&mut ahead, &mut holding),
                (&mut answer, &replier),
            );
        }
        self.apply_held(caller, process, &mut holding);
        if let Some(unused) = ahead {
            self.stats.ahead(false);
            self.discard(process, unused);
        }
        // Closes deferred just before the client went.
        self.close_deferred(channel, caller, process);
    }

    /// Serves a request that did not go on with a held write: answered ahead, answered
    /// early (when `alone`; then applied or held), or served now, then any change answered
    /// once decided is written and the walk's next step made ahead.
    fn serve_in_turn<'a>(
        &'a self,
        caller: &'a Credentials,
        process: &'a Process,
        decoded: Result<Request, shoal_fastpath::WireError>,
        alone: bool,
        (ahead, holding): (&mut Option<Speculation>, &mut Holding<'a>),
        (answer, replier): (&mut Answer<'_>, &Replier<'a>),
    ) {
        let channel = replier.channel;
        let hit = decoded
            .as_ref()
            .ok()
            .and_then(|request| self.answered_ahead(ahead, process, request));
        if let Some(hit) = hit {
            if hit.placed_after == Some(replier.seq.wrapping_sub(1)) {
                replier.send_placed(hit.encoded.len());
            } else {
                replier.send(&hit.encoded);
            }
            // The closes the client deferred are taken once the answer is out: it was made
            // before them, and no close changes what a listing says (32 of them took 17 µs
            // of each step of a walk).
            self.close_deferred(channel, caller, process);
            if let Some(predicted) = hit.next {
                *ahead = Some(self.speculate_placed(caller, process, predicted, replier));
            }
            return;
        }
        let closes = deferred_closes(channel);
        if !closes.is_empty() {
            // A close may end an unlinked file, whose purge is a change of its own.
            self.write_held_removal(process, holding);
        }
        self.close_handles(caller, process, closes);
        let decoded = match (alone, decoded) {
            (true, Ok(request)) => match self.answer_early(caller, process, &request, answer) {
                Some(early) => {
                    self.hold_or_apply(caller, process, holding, request, early);
                    return;
                }
                None => Ok(request),
            },
            (_, decoded) => decoded,
        };
        let held_removal = holding.removal.take();
        let (status, reply, predicted, pending) = match decoded {
            Ok(request) => {
                let early = Early {
                    allowed: alone,
                    held_removal,
                };
                self.serve_request(caller, process, Some(channel), &request, early)
            }
            Err(error) => {
                tracing::debug!(%error, pid = caller.pid, "fast path: malformed request");
                (Status::Errno(libc::EPROTO), Reply::Empty, None, None)
            }
        };
        answer(status, &reply);
        if let Some(pending) = pending {
            self.hold_or_write_pending(process, holding, pending);
        }
        if let Some(predicted) = predicted {
            *ahead = Some(self.speculate_placed(caller, process, predicted, replier));
        }
    }

    /// `speculate`, its answer placed in the reply area once the client has read the
    /// reply just sent (it has, by the time a step of a walk is made: 300-600 µs).
    fn speculate_placed(
        &self,
        caller: &Credentials,
        process: &Process,
        predicted: Prediction,
        replier: &Replier,
    ) -> Speculation {
        let mut speculation = self.speculate(caller, process, predicted);
        if replier.place_next(&speculation.encoded) {
            speculation.placed_after = Some(replier.seq);
        }
        speculation
    }

    /// Answers `predicted` ahead of its request (`Speculation`), going on with the walk's
    /// `stack` after it.
    fn speculate(
        &self,
        caller: &Credentials,
        process: &Process,
        (predicted, stack): Prediction,
    ) -> Speculation {
        let changes = self.engine.changes();
        let session = Session {
            carried: RefCell::new(Some(stack)),
            ..Session::plain(caller, process)
        };
        let result = self.dispatch(&session, &predicted);
        let mut encoded = Vec::new();
        match &result {
            Ok(reply) => Reply::encode(Status::Ok, reply, &mut encoded),
            Err(refusal) => {
                let (status, reply) = (*refusal).into();
                Reply::encode(status, &reply, &mut encoded);
            }
        }
        Speculation {
            request: predicted,
            changes,
            result,
            encoded,
            placed_after: None,
            next: session.predicted.into_inner(),
        }
    }

    /// The answer made ahead, when `request` is the one it was made for and nothing has
    /// changed on the mount since (it is then what answering now would give); else, at the
    /// next `opendir`, the answer made ahead is dropped.
    fn answered_ahead(
        &self,
        ahead: &mut Option<Speculation>,
        process: &Process,
        request: &Request,
    ) -> Option<Speculation> {
        if !matches!(request, Request::OpenDir { walk, .. } if *walk != Walk::No) {
            // A close or a stat between (a full close ring, a symlink's stat), or an
            // `opendir` that is no step down a walk (`find` opening `..` to go back up a
            // level): the walk's next step down may still be the one predicted.
            return None;
        }
        let speculation = ahead.take()?;
        if !same_open_dir(&speculation.request, request)
            || self.engine.changes() != speculation.changes
        {
            self.stats.ahead(false);
            self.discard(process, speculation);
            return None;
        }
        self.stats.ahead(true);
        self.stats.record(request, &speculation.result);
        Some(speculation)
    }

    /// Closes what an unused answer made ahead opened.
    fn discard(&self, process: &Process, unused: Speculation) {
        if let Ok(Reply::OpenedDir { opened, below, .. }) = unused.result {
            self.close_quietly(process, opened.handle);
            for dir in below {
                self.close_quietly(process, dir.opened.handle);
            }
        } else if let Ok(Reply::Opened(opened)) = unused.result {
            self.close_quietly(process, opened.handle);
        }
    }

    /// Waits for the request after `waiting.seq` into `request_buf`: spins (if a CPU is
    /// free for it), then sleeps; learns the client's pace. The request's number and when
    /// it arrived; `None` when the client or the mount is gone.
    fn wait_for_request(
        &self,
        channel: &SharedChannel,
        waiting: Waiting<'_>,
        pace: &mut Pace,
        request_buf: &mut Vec<u8>,
        held_back: HeldBack<'_>,
    ) -> Option<(u32, Instant)> {
        let Waiting {
            seq,
            spinning_pays,
            alive,
        } = waiting;
        let waiting_since = Instant::now();
        let waiting_since_stamp = shoal_fastpath::shared::stamp();
        let spin = if spinning_pays {
            pace.spin()
        } else {
            Duration::ZERO
        };
        // A slot is held only while spinning.
        let slot = (!spin.is_zero()).then(|| self.spin_slot());
        let polled = match &slot {
            Some(slot) if slot.granted => {
                channel.poll_request(seq, request_buf, spin, held_back.awaited)
            }
            _ => None,
        };
        drop(slot);
        let slept = polled.is_none();
        if slept {
            (held_back.apply)();
        }
        let next = match polled {
            Some(next) => Ok(next),
            // Past its spin it sleeps; while spinning does not pay it takes turns first.
            None => {
                let patience = if spinning_pays {
                    Patience::Spin(Duration::ZERO)
                } else {
                    Patience::TakeTurns
                };
                channel.next_request(seq, request_buf, patience, alive)
            }
        };
        let arrived = Instant::now();
        let waited = arrived.saturating_duration_since(waiting_since);
        // After a sleep, the wait holds this thread's wake-up (and the client's, if it
        // slept for its last reply): the client's own time is what a spin must cover.
        pace.observe(if slept {
            waited.min(channel.client_time(waiting_since_stamp))
        } else {
            waited
        });
        next.ok().map(|next| (next, arrived))
    }

    /// Answers `request` with `answer` before it is applied, when it cannot fail
    /// (`answered_early`): the answer, to apply (`apply_early`) or hold (`HeldChange`).
    fn answer_early<'a>(
        &'a self,
        caller: &Credentials,
        process: &Process,
        request: &Request,
        answer: &mut dyn FnMut(Status, &Reply),
    ) -> Option<AnsweredEarly<'a>> {
        let session = Session::plain(caller, process);
        let early = self.answered_early(&session, request, None)?;
        answer(Status::Ok, &early.reply);
        Some(early)
    }

    /// Applies `request`, answered before it was applied as `early`.
    pub(crate) fn apply_early(
        &self,
        caller: &Credentials,
        process: &Process,
        request: &Request,
        early: AnsweredEarly<'_>,
    ) {
        let failed = self.apply_answered(request, &early);
        self.after_applied(caller, process, failed, early);
    }

    /// What follows the apply of a change answered early: a failure (`failed`, an errno) is
    /// kept for the process's next fsync or sync, the waiting requests go on, and the kernel
    /// is told.
    pub(crate) fn after_applied(
        &self,
        caller: &Credentials,
        process: &Process,
        failed: Option<i32>,
        early: AnsweredEarly<'_>,
    ) {
        if let Some(errno) = failed {
            tracing::error!(
                errno,
                pid = caller.pid,
                "a request answered before it was applied failed"
            );
            process.replied_write_failed(errno);
        }
        let (ino, data) = early.apply.changed();
        drop(early.in_flight);
        // Told only now: the kernel's invalidation may wait for a page lock held by a
        // request of its own that waits for this one to be applied. The kernel did not hold
        // the inode at the answer; only a lookup already under way can have given it since.
        self.kernel.inode_changed(ino, data);
    }

    /// Applies a request answered before it was applied; the errno when it failed anyway
    /// (the device or the store failed since the answer), which the process's next fsync
    /// or sync returns.
    fn apply_answered(&self, request: &Request, early: &AnsweredEarly<'_>) -> Option<i32> {
        let applied = match (&early.apply, request) {
            (Apply::Write { ino, offset, kill }, Request::Write { data, .. }) => self
                .engine
                .write_killing_privileges(*ino, *offset, data, *kill)
                .map(drop),
            // Attributes other than the answer's can only come from a change that was under
            // way when it was given (one begun later waits for this): ordered after this one.
            (Apply::SetAttr { ino, change, .. }, _) => self.engine.setattr(*ino, change).map(drop),
            (
                Apply::Copy {
                    from,
                    ino,
                    offset,
                    len,
                },
                _,
            ) => self
                .engine
                .copy_then_setattrs(*from, (*ino, *offset), *len, Timestamp::now(), &[])
                .and_then(|copied| copied_as_answered(copied, *len)),
            (Apply::Write { .. }, _) => unreachable!("a write's apply is made of its request"),
        };
        let failed = applied.as_ref().err().map(FsError::errno);
        let result = match failed {
            None => Ok(early.reply.clone()),
            Some(errno) => Err(Refusal::Errno(errno)),
        };
        self.stats.record(request, &result);
        failed
    }

    /// Closes the handles the client left in its channel's ring (`defer_close`), in order,
    /// each counted as a `Close` request.
    fn close_deferred(&self, channel: &SharedChannel, caller: &Credentials, process: &Process) {
        self.close_handles(caller, process, deferred_closes(channel));
    }

    /// Closes `handles`, each counted as a `Close` request.
    fn close_handles(&self, caller: &Credentials, process: &Process, handles: Vec<u64>) {
        for handle in handles {
            let close = Request::Close { handle };
            self.serve(caller, process, None, &close);
        }
    }

    fn serve(
        &self,
        caller: &Credentials,
        process: &Process,
        channel: Option<&SharedChannel>,
        request: &Request,
    ) -> (Status, Reply, Option<Prediction>) {
        let (status, reply, predicted, pending) =
            self.serve_request(caller, process, channel, request, Early::default());
        assert!(
            pending.is_none(),
            "a change answered early that was not allowed to be"
        );
        (status, reply, predicted)
    }

    /// `serve`, with a change answered before it is written where `early` allows: then
    /// also the change, to write once the answer is out (`hold_or_write_pending`).
    fn serve_request<'a>(
        &'a self,
        caller: &'a Credentials,
        process: &'a Process,
        channel: Option<&'a SharedChannel>,
        request: &Request,
        early: Early<'a>,
    ) -> ServedRequest<'a> {
        let session = Session {
            channel,
            may_answer_early: early.allowed,
            pending: RefCell::new(early.held_removal),
            ..Session::plain(caller, process)
        };
        let result = self.dispatch(&session, request);
        self.stats.record(request, &result);
        let predicted = session.predicted.into_inner();
        let pending = session.pending.into_inner();
        match result {
            Ok(reply) => (Status::Ok, reply, predicted, pending),
            Err(refusal) => {
                let (status, reply) = refusal.into();
                (status, reply, None, pending)
            }
        }
    }

    fn dispatch<'a>(&'a self, s: &Session<'a>, request: &Request) -> Served<Reply> {
        match request {
            Request::Hello { version } => {
                if *version != PROTOCOL_VERSION {
                    return Err(Refusal::Fallback(crate::refusal::Why::Version));
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
                read_ahead,
            } => self.open(s, at, (*flags, *mode, *umask), *read_ahead),
            Request::OpenDir { at, .. } => self.open_dir(s, at, OpenDirAsked::of(request)),
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
                with_attr,
            } => self.write(s, *handle, (*offset, *append), data, *with_attr),
            Request::Fstat { handle } => self.fstat(s, *handle),
            Request::Fsync { handle } => self.fsync(s, *handle),
            Request::ReadDir {
                handle,
                after,
                max,
                with_attrs,
            } => self.read_dir(s, *handle, after.as_deref(), *max, *with_attrs),
            Request::Mkdir { at, mode, umask } => self.mkdir(s, at, *mode, *umask),
            Request::Unlink { at, dir } => self.unlink(s, at, *dir),
            Request::Rename { from, to, flags } => self.rename(s, from, to, *flags),
            Request::Link { from, to } => self.link(s, from, to),
            Request::Symlink { target, at } => self.symlink(s, target, at),
            Request::Readlink { at } => self.readlink(s, at),
            Request::SetAttr { target, change } => self.set_attr(s, target, change),
            Request::GetXattr { target, name } => self.get_xattr(s, target, name),
            Request::ListXattr { target } => self.list_xattr(s, target),
            Request::RemoveXattr { target, name } => self.remove_xattr(s, target, name),
            Request::Sync => self.sync_for(s),
            Request::Resolve { at } => self.resolve_directory(s, at),
            Request::CopyRange {
                from,
                from_offset,
                to,
                to_offset,
                len,
            } => self.copy_range(s, (*from, *from_offset), (*to, *to_offset), *len),
            Request::SetAccessAclMode { target, perm } => self.set_acl_mode(s, target, *perm),
        }
    }

    /// Spinning for the next request saves a wake-up only while a CPU is free to spin on:
    /// at most one spinner per CPU but one (the client needs a CPU too); the others sleep
    /// on the futex at once.
    fn spin_slot(&self) -> SpinSlot<'_> {
        let granted = self.spinners.fetch_add(1, Ordering::AcqRel) < self.spin_budget;
        SpinSlot {
            spinners: &self.spinners,
            granted,
        }
    }

    pub(crate) fn append_lock(&self, ino: u64) -> MutexGuard<'_, ()> {
        self.append_locks[(ino as usize) % APPEND_LOCKS].lock()
    }
}

/// A place among the spinners, given back when the wait ends.
struct SpinSlot<'a> {
    spinners: &'a AtomicUsize,
    granted: bool,
}

impl Drop for SpinSlot<'_> {
    fn drop(&mut self) {
        self.spinners.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether the client still holds its end of the socket.
fn peer_alive(socket: &OwnedFd) -> bool {
    let mut poll = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: poll(2) of one valid pollfd, without waiting.
    let n = unsafe { libc::poll(&mut poll, 1, 0) };
    !(n > 0 && poll.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0)
}
