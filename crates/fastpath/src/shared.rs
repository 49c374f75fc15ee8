//! The shared-memory channel a connection's requests travel on once it is set up: the
//! client makes a sealed memfd, passes it over the socket with its Hello, and from then on
//! writes a request into the memfd and bumps a sequence number; the daemon's thread for the
//! connection spins briefly, then sleeps on a futex, waiting for it, and answers the same
//! way. A round trip with both sides awake costs no system call at all.
//!
//! The daemon copies every request out before decoding it (the client may change the
//! memory at any moment) and maps only a memfd sealed against shrinking, so no client can
//! make it read out of bounds or fault.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::pace::Pace;
use crate::MAX_MESSAGE_BYTES;

/// Header fields, each a u32 at its own offset in the first page, grouped by which side
/// writes them and how often, each group in its own 128 bytes (a cache line and the one
/// Intel's adjacent-line prefetcher pairs with it). A side spinning on a sequence word
/// reads a line that only the other side writes, once per message: when the reply's
/// length and the sequence number shared the spun-on line, each store the daemon made to
/// it pulled the line away from the spinning client and back, several transfers between
/// CPUs per round trip.
///
/// Client, once per request (after everything it announces), polled by the daemon.
const REQUEST_SEQ: usize = 0;
/// Daemon, once per reply (after everything it announces), polled by the client.
const REPLY_SEQ: usize = 128;
/// Daemon, when it goes to sleep and wakes; read by the client after each request.
const SERVER_SLEEPING: usize = 256;
/// Set by the server: 1 while spinning does not pay (more busy connections than CPUs for
/// them, see the server's `activity`); the client then waits on the futex at once.
/// Written only when it changes.
const CLIENT_NO_SPIN: usize = 260;
/// Client, when it goes to sleep and wakes; read by the daemon after each reply.
const CLIENT_SLEEPING: usize = 384;
/// Client, once it has read a reply: that reply's number. The reply area is the daemon's
/// again until the next reply, and it may write that reply's bytes ahead of the request
/// (`place_reply`).
const REPLY_READ: usize = 388;
/// Client, with each request.
const REQUEST_LEN: usize = 512;
/// Times (`stamp`) for the spins' learning (`Pace`), which must not count a side's wake-up
/// from its sleep as the other's slowness: else one long wait (a program writing its
/// output) puts a side to sleep, every later wait then holds its wake-up (20-60 µs on the
/// 2-core VM), and it never spins again for that connection (`find` of 2000 directories:
/// the daemon slept at 900 of them in some runs, and the run took 60-90 ms, not 40).
/// Client: when it sent its request, and when it had the reply before that.
const REQUEST_SENT_AT: usize = 516;
const REPLY_SEEN_AT: usize = 520;
/// Client, with each request: the CPU it runs on, plus one (0: unknown). A hint only, for
/// where the daemon runs the connection's thread (the server's `placement`).
const CLIENT_CPU: usize = 524;
/// Daemon, with each reply.
const REPLY_LEN: usize = 640;
/// Daemon: nanoseconds from taking the request to publishing its reply.
const SERVICE_NS: usize = 644;
/// Daemon, with each reply: when it published it (a `stamp`). The client's wait less its
/// own wake-up: a client that slept through a reply made in 30 µs counted its 100 µs
/// wake-up as the daemon's slowness, stopped spinning, and slept at every later step of a
/// walk (`find`: 33 sleeps, 100-130 µs each, on the AMD VM).
const REPLY_SENT_AT: usize = 648;
/// The ring of closes the client deferred (see `defer_close`): how many it has written
/// (client), how many the daemon has taken (daemon), then the handles, two words each.
const CLOSES_WRITTEN: usize = 768;
const CLOSES_TAKEN: usize = 896;
const CLOSES_RING: usize = 1024;
/// Closes a client may leave waiting in the ring; a full ring sends its close as a message.
/// A walk closes a directory per directory it enters (those the daemon opened ahead and
/// those it kept for the way back up): with 32, `find` of the bench tree filled the ring
/// between two steps six times, each a message and a wait.
pub const DEFERRED_CLOSES: u32 = 256;
const HEADER_BYTES: usize = 4096;
const REQUEST_AREA: usize = HEADER_BYTES;
const REPLY_AREA: usize = REQUEST_AREA + MAX_MESSAGE_BYTES;
/// The memfd's exact size; the daemon refuses any other.
pub const CHANNEL_BYTES: usize = REPLY_AREA + MAX_MESSAGE_BYTES;

const _: () = assert!(CLOSES_RING + 8 * DEFERRED_CLOSES as usize <= HEADER_BYTES);
/// The words each side writes at every message, and the sequence words each side spins on,
/// each in a block of their own (see the header's layout).
const LINE_PAIR_BYTES: usize = 128;
const _: () = {
    let blocks = [
        REQUEST_SEQ / LINE_PAIR_BYTES,
        REPLY_SEQ / LINE_PAIR_BYTES,
        SERVER_SLEEPING / LINE_PAIR_BYTES,
        CLIENT_SLEEPING / LINE_PAIR_BYTES,
        REQUEST_LEN / LINE_PAIR_BYTES,
        REPLY_LEN / LINE_PAIR_BYTES,
        CLOSES_WRITTEN / LINE_PAIR_BYTES,
        CLOSES_TAKEN / LINE_PAIR_BYTES,
        CLOSES_RING / LINE_PAIR_BYTES,
    ];
    let mut i = 0;
    while i < blocks.len() {
        let mut j = i + 1;
        while j < blocks.len() {
            assert!(
                blocks[i] != blocks[j],
                "two groups of the header share a block"
            );
            j += 1;
        }
        i += 1;
    }
};
const _: () = assert!(CLIENT_NO_SPIN / LINE_PAIR_BYTES == SERVER_SLEEPING / LINE_PAIR_BYTES);
const _: () = assert!(REPLY_READ / LINE_PAIR_BYTES == CLIENT_SLEEPING / LINE_PAIR_BYTES);
const _: () = assert!(REQUEST_SENT_AT / LINE_PAIR_BYTES == REQUEST_LEN / LINE_PAIR_BYTES);
const _: () = assert!(CLIENT_CPU / LINE_PAIR_BYTES == REQUEST_LEN / LINE_PAIR_BYTES);
const _: () = assert!(SERVICE_NS / LINE_PAIR_BYTES == REPLY_LEN / LINE_PAIR_BYTES);
const _: () = assert!(REPLY_SENT_AT / LINE_PAIR_BYTES == REPLY_LEN / LINE_PAIR_BYTES);
// The reply area starts 8-byte aligned, so its words could be read in place too.
const _: () = assert!(MAX_MESSAGE_BYTES.is_multiple_of(8));

/// Seals the daemon requires: the size can never change again.
const REQUIRED_SEALS: i32 = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// How a wait ends when the other side never answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// The peer closed its socket (exited, killed).
    Closed,
}

/// One mapping of a channel's memfd.
pub struct SharedChannel {
    base: *mut u8,
}

// SAFETY: the mapping is shared memory accessed only through atomics and byte copies;
// each side is used by one thread at a time.
unsafe impl Send for SharedChannel {}

impl Drop for SharedChannel {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping this value owns.
        unsafe { libc::munmap(self.base.cast(), CHANNEL_BYTES) };
    }
}

impl SharedChannel {
    /// The client's side: a new sealed memfd, mapped; the fd goes to the daemon.
    pub fn create() -> io::Result<(SharedChannel, OwnedFd)> {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: memfd_create with a static NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"shoal-fastpath".as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sizing and sealing our own memfd.
        let sized = unsafe {
            libc::ftruncate(fd.as_raw_fd(), CHANNEL_BYTES as libc::off_t) == 0
                && libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, REQUIRED_SEALS) == 0
        };
        if !sized {
            return Err(io::Error::last_os_error());
        }
        Ok((map(&fd)?, fd))
    }

    /// The daemon's side: maps a client's memfd after checking its size and seals.
    pub fn accept(fd: &OwnedFd) -> io::Result<SharedChannel> {
        // SAFETY: reading the seals of a descriptor we hold.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & REQUIRED_SEALS != REQUIRED_SEALS {
            return Err(io::Error::other("channel memfd is not sealed"));
        }
        // SAFETY: stat is plain data; all zeroes is a valid value.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat into a valid out-buffer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0
            || stat.st_size != CHANNEL_BYTES as libc::off_t
        {
            return Err(io::Error::other("channel memfd has the wrong size"));
        }
        map(fd)
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset + 4 <= HEADER_BYTES && offset.is_multiple_of(4));
        // SAFETY: the header lies inside the mapping, 4-byte aligned (page-aligned base).
        unsafe { &*self.base.add(offset).cast::<AtomicU32>() }
    }

    fn copy_in(&self, area: usize, bytes: &[u8]) {
        assert!(
            bytes.len() <= MAX_MESSAGE_BYTES,
            "message bounded by MAX_MESSAGE_BYTES"
        );
        // SAFETY: `area` and `bytes.len()` stay inside the mapping (checked above).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(area), bytes.len()) };
    }

    fn copy_out(&self, area: usize, len: usize, out: &mut Vec<u8>) {
        let len = len.min(MAX_MESSAGE_BYTES);
        out.clear();
        out.reserve(len);
        // SAFETY: `area + len` lies inside the mapping; `out` has room for `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(area), out.as_mut_ptr(), len);
            out.set_len(len);
        }
    }

    /// Client: sends `request`, waits for the reply and hands it to `read` where it lies
    /// (a step of a walk is 130 KiB: copying it out took 20 µs). `pace` bounds the busy
    /// wait before sleeping, and learns from this one; `soon`: the answer does not wait on
    /// the journal (a sync does, for milliseconds: its caller sleeps at once when it may
    /// not spin, rather than take turns); `alive` says whether the daemon still holds the
    /// connection.
    pub fn call<R>(
        &self,
        request: &[u8],
        pace: &mut Pace,
        soon: bool,
        alive: &dyn Fn() -> bool,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, Gone> {
        let (seq, woke_server) = self.send_request(request);
        // The send's stamp, as `send_request` wrote it (only this side writes it).
        let sent = self.word(REQUEST_SENT_AT).load(Ordering::Relaxed);
        let patience = if self.word(CLIENT_NO_SPIN).load(Ordering::Relaxed) == 0 {
            Patience::Spin(pace.spin())
        } else if soon {
            Patience::TakeTurns
        } else {
            Patience::Spin(Duration::ZERO)
        };
        let answered = self.wait_for_reply(seq, patience, alive);
        // Until the reply was published, without this side's own wake-up if it slept; a
        // daemon thread woken from its sleep answers late by its wake-up: only its time on
        // the request says whether the answer comes soon enough to spin for.
        let answered_after = self.answered_after(sent);
        pace.observe(if woke_server {
            answered_after.min(self.service())
        } else {
            answered_after
        });
        answered?;
        let len = (self.word(REPLY_LEN).load(Ordering::Acquire) as usize).min(MAX_MESSAGE_BYTES);
        // SAFETY: `REPLY_AREA + len` lies inside the mapping; the daemon writes the area
        // again only after this side says it has read it (`REPLY_READ`, below) or sent its
        // next request, so the bytes stay as they are while `read` looks at them.
        let bytes = unsafe { std::slice::from_raw_parts(self.base.add(REPLY_AREA), len) };
        let read = read(bytes);
        self.word(REPLY_READ).store(seq, Ordering::Release);
        Ok(read)
    }

    /// Client: how long after `sent` (a `stamp`) the daemon published its last reply.
    fn answered_after(&self, sent: u32) -> Duration {
        let published = self.word(REPLY_SENT_AT).load(Ordering::Relaxed);
        Duration::from_nanos(u64::from(stamp_since(published, sent)))
    }

    /// Client: sends `request` and returns its sequence number, without waiting; its reply
    /// must be taken (`wait_reply`) before the next request is sent.
    pub fn send(&self, request: &[u8]) -> u32 {
        self.send_request(request).0
    }

    /// `send`, and whether the daemon's thread slept (and is being woken).
    fn send_request(&self, request: &[u8]) -> (u32, bool) {
        self.copy_in(REQUEST_AREA, request);
        self.word(REQUEST_LEN)
            .store(request.len() as u32, Ordering::Relaxed);
        let seq = self
            .word(REQUEST_SEQ)
            .load(Ordering::Relaxed)
            .wrapping_add(1);
        self.word(REQUEST_SENT_AT).store(stamp(), Ordering::Relaxed);
        self.word(CLIENT_CPU)
            .store(current_cpu_plus_one(), Ordering::Relaxed);
        // SeqCst, as the sleeper's flag and its read of the sequence in `wait_for`: a
        // Release store may pass the load below (x86 reorders a store with a later load),
        // and both sides could then miss each other: a sleep until `LIVENESS_CHECK`.
        self.word(REQUEST_SEQ).store(seq, Ordering::SeqCst);
        let sleeping = self.word(SERVER_SLEEPING).load(Ordering::SeqCst) != 0;
        if sleeping {
            futex_wake(self.word(REQUEST_SEQ));
        }
        (seq, sleeping)
    }

    /// Client: what the daemon said its last reply took it.
    fn service(&self) -> Duration {
        Duration::from_nanos(u64::from(self.word(SERVICE_NS).load(Ordering::Relaxed)))
    }

    /// Client: wakes the daemon's thread if it sleeps, without a request: one will follow
    /// shortly, and the thread waits for it awake (a round trip then costs no wake-up).
    pub fn nudge_server(&self) {
        if self.word(SERVER_SLEEPING).load(Ordering::SeqCst) != 0 {
            futex_wake(self.word(REQUEST_SEQ));
        }
    }

    /// Daemon: wakes the client if it sleeps on its reply, which will follow shortly (a
    /// long request: `Request::OpenDir::below`).
    pub fn nudge_client(&self) {
        if self.word(CLIENT_SLEEPING).load(Ordering::SeqCst) != 0 {
            futex_wake(self.word(REPLY_SEQ));
        }
    }

    /// Client: waits for the reply to request `seq` and copies it into `reply`.
    pub fn wait_reply(
        &self,
        seq: u32,
        reply: &mut Vec<u8>,
        patience: Patience,
        alive: &dyn Fn() -> bool,
    ) -> Result<(), Gone> {
        self.wait_for_reply(seq, patience, alive)?;
        let len = self.word(REPLY_LEN).load(Ordering::Acquire) as usize;
        self.copy_out(REPLY_AREA, len, reply);
        self.word(REPLY_READ).store(seq, Ordering::Release);
        Ok(())
    }

    fn wait_for_reply(
        &self,
        seq: u32,
        patience: Patience,
        alive: &dyn Fn() -> bool,
    ) -> Result<(), Gone> {
        wait_for(
            self.word(REPLY_SEQ),
            self.word(CLIENT_SLEEPING),
            seq,
            patience,
            alive,
        )?;
        self.word(REPLY_SEEN_AT).store(stamp(), Ordering::Relaxed);
        Ok(())
    }

    /// Daemon: waits for the request after `last_seq` and copies it into `request`;
    /// returns its sequence number.
    pub fn next_request(
        &self,
        last_seq: u32,
        request: &mut Vec<u8>,
        patience: Patience,
        alive: &dyn Fn() -> bool,
    ) -> Result<u32, Gone> {
        let seq = last_seq.wrapping_add(1);
        wait_for(
            self.word(REQUEST_SEQ),
            self.word(SERVER_SLEEPING),
            seq,
            patience,
            alive,
        )?;
        let len = self.word(REQUEST_LEN).load(Ordering::Acquire) as usize;
        self.copy_out(REQUEST_AREA, len, request);
        Ok(seq)
    }

    /// Daemon: spins up to `spin` for the request after `last_seq`, without sleeping, or
    /// until `give_up` says so (looked at every few microseconds); `None` if it has not
    /// come (the caller then sleeps in `next_request`).
    pub fn poll_request(
        &self,
        last_seq: u32,
        request: &mut Vec<u8>,
        spin: Duration,
        give_up: &dyn Fn() -> bool,
    ) -> Option<u32> {
        let seq = last_seq.wrapping_add(1);
        if !spin_until_or(self.word(REQUEST_SEQ), seq, spin, give_up) {
            return None;
        }
        let len = self.word(REQUEST_LEN).load(Ordering::Acquire) as usize;
        self.copy_out(REQUEST_AREA, len, request);
        Some(seq)
    }

    /// Daemon: publishes the reply to request `seq`.
    /// Tells the client whether to spin for its next answers (server side).
    pub fn let_client_spin(&self, spin: bool) {
        let no_spin = self.word(CLIENT_NO_SPIN);
        // Stored only when it changes: a store takes the line from the client, which reads
        // it at every request.
        if no_spin.load(Ordering::Relaxed) != u32::from(!spin) {
            no_spin.store(u32::from(!spin), Ordering::Relaxed);
        }
    }

    /// Daemon: the CPU the client ran on when it sent its last request, as it says.
    pub fn client_cpu(&self) -> Option<usize> {
        let plus_one = self.word(CLIENT_CPU).load(Ordering::Relaxed);
        (plus_one as usize).checked_sub(1)
    }

    /// Daemon: the client's own time before its request, from its last reply or from
    /// `waiting_since` (a `stamp`), whichever is later: what a spin for the request had
    /// to cover, without the client's wake-up for that reply (nor the daemon's for this
    /// request). The client writes the stamps: the caller bounds what it makes of them.
    pub fn client_time(&self, waiting_since: u32) -> Duration {
        let sent = self.word(REQUEST_SENT_AT).load(Ordering::Relaxed);
        let seen = self.word(REPLY_SEEN_AT).load(Ordering::Relaxed);
        let from = if stamp_after(seen, waiting_since) {
            seen
        } else {
            waiting_since
        };
        Duration::from_nanos(u64::from(stamp_since(sent, from)))
    }

    /// Daemon: publishes the reply to request `seq`, which took `service` to make.
    pub fn reply(&self, seq: u32, reply: &[u8], service: Duration) {
        self.copy_in(REPLY_AREA, reply);
        self.publish_reply(seq, reply.len(), service);
    }

    /// Daemon: writes `reply` into the reply area ahead of the request it answers, when the
    /// client has read the last reply (`last_seq`); whether it did. It is published, if
    /// that request comes next, by `reply_placed`.
    pub fn place_reply(&self, last_seq: u32, reply: &[u8]) -> bool {
        if self.word(REPLY_READ).load(Ordering::Acquire) != last_seq {
            return false;
        }
        self.copy_in(REPLY_AREA, reply);
        true
    }

    /// Daemon: publishes as the reply to request `seq` the `len` bytes placed ahead
    /// (`place_reply`) right after the reply to `seq - 1`.
    pub fn reply_placed(&self, seq: u32, len: usize, service: Duration) {
        assert!(
            len <= MAX_MESSAGE_BYTES,
            "message bounded by MAX_MESSAGE_BYTES"
        );
        self.publish_reply(seq, len, service);
    }

    fn publish_reply(&self, seq: u32, len: usize, service: Duration) {
        let service_ns = u32::try_from(service.as_nanos()).unwrap_or(u32::MAX);
        self.word(SERVICE_NS).store(service_ns, Ordering::Relaxed);
        self.word(REPLY_LEN).store(len as u32, Ordering::Relaxed);
        self.word(REPLY_SENT_AT).store(stamp(), Ordering::Relaxed);
        // SeqCst: see `send_request`.
        self.word(REPLY_SEQ).store(seq, Ordering::SeqCst);
        if self.word(CLIENT_SLEEPING).load(Ordering::SeqCst) != 0 {
            futex_wake(self.word(REPLY_SEQ));
        }
    }
}

impl SharedChannel {
    /// Client: leaves the close of `handle` in the ring for the daemon to take before its
    /// next request, or within `LIVENESS_CHECK` of it going to sleep: `close(2)` reports
    /// nothing the daemon could fail with, so no message and no wake-up is spent on it (on
    /// a machine whose CPUs are all busy, the wake-up an asynchronous close cost halved
    /// the rate of two threads creating files). False when the ring is full.
    pub fn defer_close(&self, handle: u64) -> bool {
        let written = self.word(CLOSES_WRITTEN).load(Ordering::Relaxed);
        let taken = self.word(CLOSES_TAKEN).load(Ordering::Acquire);
        if written.wrapping_sub(taken) >= DEFERRED_CLOSES {
            return false;
        }
        let slot = CLOSES_RING + 8 * (written % DEFERRED_CLOSES) as usize;
        self.word(slot).store(handle as u32, Ordering::Relaxed);
        self.word(slot + 4)
            .store((handle >> 32) as u32, Ordering::Relaxed);
        self.word(CLOSES_WRITTEN)
            .store(written.wrapping_add(1), Ordering::Release);
        true
    }

    /// Daemon: appends the closes deferred since the last call to `out`. A ring the client
    /// left inconsistent (more than it may hold) is skipped whole: what it named stays open
    /// until the process ends, which harms only that process.
    pub fn take_deferred_closes(&self, out: &mut Vec<u64>) {
        let written = self.word(CLOSES_WRITTEN).load(Ordering::Acquire);
        let taken = self.word(CLOSES_TAKEN).load(Ordering::Relaxed);
        let count = written.wrapping_sub(taken);
        if count == 0 {
            return;
        }
        if count <= DEFERRED_CLOSES {
            out.extend((0..count).map(|i| {
                let slot = CLOSES_RING + 8 * (taken.wrapping_add(i) % DEFERRED_CLOSES) as usize;
                let low = self.word(slot).load(Ordering::Relaxed);
                let high = self.word(slot + 4).load(Ordering::Relaxed);
                u64::from(low) | (u64::from(high) << 32)
            }));
        }
        self.word(CLOSES_TAKEN).store(written, Ordering::Release);
    }
}

fn map(fd: &OwnedFd) -> io::Result<SharedChannel> {
    // SAFETY: a shared mapping of CHANNEL_BYTES of a memfd that size (checked by callers).
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            CHANNEL_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(SharedChannel { base: base.cast() })
}

/// CLOCK_MONOTONIC in nanoseconds, its low 32 bits: both sides of a channel read the same
/// clock, and the intervals compared are far below the 4.3 s it takes to wrap.
pub fn stamp() -> u32 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a valid out-parameter (the vDSO: no system call).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(now.tv_nsec as u64) as u32
}

/// Whether stamp `a` is later than stamp `b`.
fn stamp_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// Nanoseconds from stamp `from` to stamp `to`; 0 if `to` is not later.
fn stamp_since(to: u32, from: u32) -> u32 {
    if stamp_after(to, from) {
        to.wrapping_sub(from)
    } else {
        0
    }
}

/// How often a sleeper looks at whether its peer still lives.
const LIVENESS_CHECK: Duration = Duration::from_millis(100);

/// How long a side woken by a nudge spins for what it waits for before sleeping again: a
/// nudge comes that long before, at most, on the machines we measured (an idle CPU of the
/// 2-core VM takes 20-50 µs to wake, which the nudge takes off the round trip).
const AFTER_NUDGE_SPIN: Duration = Duration::from_micros(200);

/// How a side waits for its peer before it sleeps on the futex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Patience {
    /// Waits up to this long awake (zero: sleeps at once): spinning for the first
    /// `SPIN_BEFORE_TURNS` of it, taking turns for the rest.
    Spin(Duration),
    /// Takes turns with the peer, for up to `TAKING_TURNS`: gives the CPU away
    /// (`sched_yield`) until the word arrives. For while the busy connections, callers and
    /// threads, outnumber the CPUs: a spinner then holds a CPU its peer needs to answer,
    /// and a sleeper costs its peer a futex wake-up, an interrupt to a halted vCPU that
    /// took 36% of the daemon's CPU with two threads creating files on the 2-core VM. A
    /// CPU whose runnable threads all take turns never halts, and hands itself on with a
    /// context switch.
    TakeTurns,
}

/// How long a side awake spins before it takes turns (`spin_until` looks at the clock
/// every 1024 pauses, about 10 µs on the 2-core VM's CPUs: the spin lasts that long): a
/// stat or a listing answered from the daemon's caches comes back within it. An answer
/// that takes longer (a create, a write the daemon applies) leaves the CPU to whoever
/// else needs it meanwhile, the daemon's checkpointer and flusher among them: on two CPUs
/// a spinning caller took one of them from those for as long as its wait lasted (medians
/// of 6 alternating runs of `tree-steps.sh`: `cp -a` 2190 -> 2105 ms, `rm -rf` 435 -> 410,
/// `du -s` 50 -> 47).
const SPIN_BEFORE_TURNS: Duration = Duration::from_micros(3);

/// How long a side takes turns before it sleeps: several of its peer's answers (a create
/// takes the daemon 8-10 µs), and short of what a sleep would save when the peer is busy
/// with something else.
const TAKING_TURNS: Duration = Duration::from_micros(50);

/// Waits until `word` reaches `wanted` (sequence numbers only move forward by one), with
/// `patience`, then sleeping on the futex with `sleeping` raised.
fn wait_for(
    word: &AtomicU32,
    sleeping: &AtomicU32,
    wanted: u32,
    patience: Patience,
    alive: &dyn Fn() -> bool,
) -> Result<(), Gone> {
    let arrived = || word.load(Ordering::Acquire) == wanted;
    let awake = match patience {
        Patience::Spin(spin) => {
            let first = spin.min(SPIN_BEFORE_TURNS);
            spin_until(word, wanted, first) || yield_until(word, wanted, spin - first)
        }
        Patience::TakeTurns => yield_until(word, wanted, TAKING_TURNS),
    };
    if awake {
        return Ok(());
    }
    loop {
        sleeping.store(1, Ordering::SeqCst);
        let current = word.load(Ordering::SeqCst);
        if current == wanted {
            sleeping.store(0, Ordering::Relaxed);
            return Ok(());
        }
        let woken = futex_wait(word, current, LIVENESS_CHECK);
        sleeping.store(0, Ordering::Relaxed);
        if arrived() {
            return Ok(());
        }
        // Woken with nothing arrived: a nudge (`nudge_server`, `nudge_client`), the peer's
        // word that it will come soon. Awake already, wait for it awake.
        if woken && spin_until(word, wanted, AFTER_NUDGE_SPIN) {
            return Ok(());
        }
        if !alive() {
            return Err(Gone::Closed);
        }
    }
}

/// Gives the CPU away until `word` is `wanted` or `wait` has passed; whether it arrived.
fn yield_until(word: &AtomicU32, wanted: u32, wait: Duration) -> bool {
    let arrived = || word.load(Ordering::Acquire) == wanted;
    let start = Instant::now();
    while !arrived() {
        if start.elapsed() >= wait {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// Spins until `word` is `wanted` or `spin` has passed; whether it arrived.
fn spin_until(word: &AtomicU32, wanted: u32, spin: Duration) -> bool {
    spin_until_or(word, wanted, spin, &|| false)
}

/// `spin_until`, ending early once `give_up` holds (looked at between rounds of spins).
fn spin_until_or(
    word: &AtomicU32,
    wanted: u32,
    spin: Duration,
    give_up: &dyn Fn() -> bool,
) -> bool {
    let arrived = || word.load(Ordering::Acquire) == wanted;
    if arrived() {
        return true;
    }
    let start = Instant::now();
    let mut spins = 0u32;
    while !spin.is_zero() {
        for _ in 0..64 {
            std::hint::spin_loop();
            if arrived() {
                return true;
            }
        }
        spins += 1;
        if spins.is_multiple_of(16) {
            if start.elapsed() >= spin || give_up() {
                break;
            }
            // On a busy machine the peer may be waiting for this very CPU: let it run.
            // sched_yield returns at once when nothing else is runnable here.
            std::thread::yield_now();
        }
    }
    arrived()
}

/// The CPU the calling thread runs on, plus one (0: unknown). glibc reads it from the
/// thread's rseq area, or asks the vDSO: no system call.
fn current_cpu_plus_one() -> u32 {
    // SAFETY: no arguments, no memory.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).map_or(0, |cpu| cpu.saturating_add(1))
}

/// Sleeps on `word` (in the mapping both processes share) while it is `expected`.
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> bool {
    crate::futex::wait(word, expected, timeout, crate::futex::Scope::Shared)
}

fn futex_wake(word: &AtomicU32) {
    crate::futex::wake(word, 1, crate::futex::Scope::Shared);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_cross_between_two_mappings() {
        let (client, fd) = SharedChannel::create().expect("memfd");
        let server = SharedChannel::accept(&fd).expect("sealed memfd of the right size");
        let serving = std::thread::spawn(move || {
            let mut request = Vec::new();
            let mut last = 0;
            for _ in 0..1000 {
                last = server
                    .next_request(
                        last,
                        &mut request,
                        Patience::Spin(Duration::from_micros(50)),
                        &|| true,
                    )
                    .expect("request");
                request.reverse();
                server.reply(last, &request, Duration::ZERO);
            }
        });
        for i in 0..1000u32 {
            let request = i.to_le_bytes();
            let reply = client
                .call(
                    &request,
                    &mut Pace::new(Duration::from_micros(50)),
                    true,
                    &|| true,
                    <[u8]>::to_vec,
                )
                .expect("reply");
            let mut expected = request.to_vec();
            expected.reverse();
            assert_eq!(reply, expected);
        }
        serving.join().expect("server thread");
    }

    #[test]
    fn deferred_closes_reach_the_daemon_in_order_and_a_full_ring_says_so() {
        let (client, fd) = SharedChannel::create().expect("memfd");
        let server = SharedChannel::accept(&fd).expect("sealed memfd of the right size");
        let mut taken = Vec::new();
        server.take_deferred_closes(&mut taken);
        assert!(taken.is_empty());
        let handles: Vec<u64> = (0..u64::from(DEFERRED_CLOSES))
            .map(|i| (i << 32) | 7)
            .collect();
        for &handle in &handles {
            assert!(client.defer_close(handle));
        }
        assert!(!client.defer_close(99), "a full ring must refuse");
        server.take_deferred_closes(&mut taken);
        assert_eq!(taken, handles);
        // Round the ring again: positions wrap, the order holds.
        taken.clear();
        for handle in [1, u64::MAX, 3] {
            assert!(client.defer_close(handle));
        }
        server.take_deferred_closes(&mut taken);
        assert_eq!(taken, [1, u64::MAX, 3]);
        // A client that claims more than the ring holds is skipped, not believed.
        client
            .word(CLOSES_WRITTEN)
            .store(1_000_000, Ordering::Release);
        taken.clear();
        server.take_deferred_closes(&mut taken);
        assert!(taken.is_empty());
        assert!(client.defer_close(5));
        server.take_deferred_closes(&mut taken);
        assert_eq!(taken, [5]);
    }

    #[test]
    fn a_wait_after_a_sleep_counts_only_the_other_sides_own_time() {
        let (client, fd) = SharedChannel::create().expect("memfd");
        let server = SharedChannel::accept(&fd).expect("sealed memfd of the right size");
        let (mut request, mut reply) = (Vec::new(), Vec::new());
        let waiting_since = stamp();
        let seq = client.send(b"a");
        let taken = server.next_request(0, &mut request, Patience::Spin(Duration::ZERO), &|| true);
        assert_eq!(taken, Ok(seq));
        server.reply(seq, b"r", Duration::from_micros(3));
        assert_eq!(client.service(), Duration::from_micros(3));
        client
            .wait_reply(seq, &mut reply, Patience::Spin(Duration::ZERO), &|| true)
            .expect("reply");
        // The client works 5 ms before its next request; the daemon, asleep since before
        // the reply was seen, takes the request 100 ms later: its wait is the client's 5.
        std::thread::sleep(Duration::from_millis(5));
        let seq = client.send(b"b");
        std::thread::sleep(Duration::from_millis(100));
        let own = server.client_time(waiting_since);
        assert!(
            own >= Duration::from_millis(5) && own < Duration::from_millis(100),
            "{own:?}"
        );
        // A daemon that began to wait after the client had its reply counts from then.
        let taken = server.next_request(
            seq.wrapping_sub(1),
            &mut request,
            Patience::Spin(Duration::ZERO),
            &|| true,
        );
        assert_eq!(taken, Ok(seq));
        server.reply(seq, b"r", Duration::ZERO);
        client
            .wait_reply(seq, &mut reply, Patience::Spin(Duration::ZERO), &|| true)
            .expect("reply");
        std::thread::sleep(Duration::from_millis(5));
        let since_at = Instant::now();
        let since = stamp();
        std::thread::sleep(Duration::from_millis(5));
        client.send(b"c");
        let bound = since_at.elapsed();
        let own = server.client_time(since);
        assert!(
            own >= Duration::from_millis(5) && own <= bound,
            "{own:?} against {bound:?}"
        );
    }

    #[test]
    fn a_reply_counts_until_it_was_published_not_until_it_was_seen() {
        let (client, fd) = SharedChannel::create().expect("memfd");
        let server = SharedChannel::accept(&fd).expect("sealed memfd of the right size");
        let (mut request, mut reply) = (Vec::new(), Vec::new());
        let sent = stamp();
        let seq = client.send(b"a");
        let taken = server.next_request(0, &mut request, Patience::Spin(Duration::ZERO), &|| true);
        assert_eq!(taken, Ok(seq));
        let made_at = Instant::now();
        server.reply(seq, b"r", Duration::ZERO);
        // The client is slow to see it (asleep, or descheduled).
        std::thread::sleep(Duration::from_millis(20));
        client
            .wait_reply(seq, &mut reply, Patience::Spin(Duration::ZERO), &|| true)
            .expect("reply");
        let seen_after = made_at.elapsed();
        let answered_after = client.answered_after(sent);
        assert!(
            answered_after < Duration::from_millis(20) && answered_after < seen_after,
            "{answered_after:?}"
        );
    }

    #[test]
    fn a_reply_is_placed_ahead_only_once_the_last_one_was_read() {
        let (client, fd) = SharedChannel::create().expect("memfd");
        let server = SharedChannel::accept(&fd).expect("sealed memfd of the right size");
        let mut request = Vec::new();
        let mut pace = Pace::new(Duration::from_micros(50));
        let serving = std::thread::spawn(move || {
            let mut request = Vec::new();
            let first = server
                .next_request(0, &mut request, Patience::Spin(Duration::ZERO), &|| true)
                .expect("request");
            // The reply to the first request is not read yet: nothing may be placed.
            server.reply(first, b"first", Duration::ZERO);
            let placed_early = server.place_reply(first, b"early");
            (server, first, placed_early)
        });
        let sent = client.send(b"a");
        let (server, first, placed_early) = serving.join().expect("server thread");
        assert_eq!(sent, first);
        assert!(!placed_early, "placed over a reply the client had not read");
        let mut reply = Vec::new();
        client
            .wait_reply(first, &mut reply, Patience::Spin(Duration::ZERO), &|| true)
            .expect("reply");
        assert_eq!(reply, b"first");
        // Read: the next reply may be placed, and published as is when its request comes.
        assert!(server.place_reply(first, b"placed ahead"));
        let serving = std::thread::spawn(move || {
            let second = server
                .next_request(first, &mut request, Patience::Spin(Duration::ZERO), &|| {
                    true
                })
                .expect("request");
            server.reply_placed(second, b"placed ahead".len(), Duration::ZERO);
        });
        let got = client
            .call(b"b", &mut pace, true, &|| true, <[u8]>::to_vec)
            .expect("reply");
        serving.join().expect("server thread");
        assert_eq!(got, b"placed ahead");
    }

    #[test]
    fn an_unsealed_or_resized_memfd_is_refused() {
        // SAFETY: a plain memfd for the test.
        let fd = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: our new descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        assert_eq!(
            // SAFETY: sizing our memfd.
            unsafe { libc::ftruncate(fd.as_raw_fd(), CHANNEL_BYTES as libc::off_t) },
            0
        );
        assert!(SharedChannel::accept(&fd).is_err());
    }

    #[test]
    fn a_side_taking_turns_sees_an_answer_in_its_window_and_sleeps_after_it() {
        let (client, fd) = SharedChannel::create().expect("memfd");
        let server = SharedChannel::accept(&fd).expect("sealed memfd of the right size");
        let delays = [Duration::ZERO, Duration::from_millis(5)];
        let serving = std::thread::spawn(move || {
            let mut request = Vec::new();
            let mut last = 0;
            for delay in delays {
                last = server
                    .next_request(last, &mut request, Patience::Spin(Duration::ZERO), &|| true)
                    .expect("request");
                std::thread::sleep(delay);
                server.reply(last, b"a", Duration::ZERO);
            }
        });
        let mut waits = Vec::new();
        for _ in delays {
            let seq = client.send(b"q");
            let started = Instant::now();
            let mut reply = Vec::new();
            client
                .wait_reply(seq, &mut reply, Patience::TakeTurns, &|| true)
                .expect("reply");
            assert_eq!(reply, b"a");
            waits.push(started.elapsed());
        }
        serving.join().expect("server thread");
        // Answered at once: seen while taking turns. Answered long after the window: the
        // waiter slept, and the reply's wake ended its sleep (one nobody woke would wait
        // for its liveness check).
        assert!(waits[0] < LIVENESS_CHECK, "{waits:?}");
        assert!(
            waits[1] >= Duration::from_millis(5) && waits[1] < LIVENESS_CHECK,
            "{waits:?}"
        );
        assert!(!yield_until(
            &AtomicU32::new(0),
            1,
            Duration::from_micros(100)
        ));
    }

    #[test]
    fn a_sleeping_waiter_sees_its_peer_gone() {
        let (client, _fd) = SharedChannel::create().expect("memfd");
        let started = Instant::now();
        let result = client.call(
            b"x",
            &mut Pace::new(Duration::ZERO),
            true,
            &|| false,
            <[u8]>::to_vec,
        );
        assert_eq!(result, Err(Gone::Closed));
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
