//! FUSE over io_uring (Linux 6.14+, protocol 7.42; Documentation/filesystems/fuse-io-uring.rst).
//!
//! The kernel keeps one request queue per possible CPU and puts a request on the queue of the
//! CPU its caller runs on. Each queue here is served by one thread pinned to that CPU, so the
//! caller and the thread that answers it share a CPU: handing a request over is a local
//! wake-up instead of a cross-CPU one (which, in a VM, costs an IPI and a halted vCPU's exit).
//! The thread owns one io_uring. It registers `QUEUE_DEPTH` entries (a header area and a
//! payload buffer each); a request arrives as the completion of an entry, and the reply goes
//! back in the same buffers with FUSE_IO_URING_CMD_COMMIT_AND_FETCH, which also re-arms the
//! entry. A reply sent after its dispatch returned (an fsync answered once the journal is
//! synced) leaves its entry waiting; the thread commits it when an eventfd, whose read is
//! always pending on the ring, says it came. Forgets, interrupts and notifications keep
//! using /dev/fuse.

use std::io;
use std::mem::size_of;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::error;
use log::info;
use log::warn;

use crate::Filesystem;
use crate::ll;
use crate::request::RequestWithSender;
use crate::ring_follow::Activity;
use crate::ring_follow::Follow;
use crate::session::SessionEventLoop;

const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;
/// Size of `fuse_in_header` / `fuse_out_header` on the wire.
const IN_HEADER_SIZE: usize = 40;
const OUT_HEADER_SIZE: usize = 16;
/// Entries each thread registers: requests the kernel can hand it while it is busy.
const QUEUE_DEPTH: usize = 2;
/// Threads serving each queue, each with its own ring and entries: a request that blocks
/// (an fsync waiting for the journal's sync) holds up only its thread, the others go on
/// with that CPU's requests, and concurrent fsyncs can then share one sync. Enough threads
/// over all queues together for `BLOCKING_THREADS` fsyncs to wait at once, and never fewer
/// than `MIN_THREADS_PER_QUEUE` on a queue (one blocked, one serving its CPU): 4 per queue
/// on 2 CPUs (as measured there), 2 on 8 CPUs or more, rather than 4 per CPU regardless
/// (64 threads and 128 MiB of entry buffers on 16 CPUs).
const BLOCKING_THREADS: usize = 16;
const MIN_THREADS_PER_QUEUE: usize = 2;
const MAX_THREADS_PER_QUEUE: usize = 4;
/// How often an idle queue thread checks whether the session has ended.
const STOP_POLL: Duration = Duration::from_secs(1);

/// `struct fuse_uring_ent_in_out` (include/uapi/linux/fuse.h).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct EntryInOut {
    flags: u64,
    commit_id: u64,
    payload_sz: u32,
    padding: u32,
    reserved: u64,
}

/// `struct fuse_uring_req_header`: request/reply header, op header, entry info.
#[repr(C)]
struct EntryHeader {
    in_out: [u8; 128],
    op_in: [u8; 128],
    ent_in_out: EntryInOut,
}

/// `struct fuse_uring_cmd_req`, the 80-byte command area of a SQE128 starts with it.
#[repr(C)]
struct CommandRequest {
    flags: u64,
    commit_id: u64,
    qid: u16,
    padding: [u8; 6],
}

const _: () = assert!(size_of::<EntryInOut>() == 32);
const _: () = assert!(size_of::<EntryHeader>() == 288);
const _: () = assert!(size_of::<CommandRequest>() == 24);
const _: () = assert!(size_of::<squeue::Entry128>() == 128);

/// Where a reply to a ring request is kept until it is committed. Most are made while the
/// request is dispatched; one sent later, from another thread (an fsync answered after the
/// journal's sync), is announced to the entry's queue thread, which commits it (only that
/// thread submits to its ring).
#[derive(Debug)]
pub(crate) struct RingReply {
    state: Mutex<ReplyState>,
    /// Where a late reply is announced, and as which entry.
    late: Arc<LateReplies>,
    index: usize,
}

#[derive(Debug, Default)]
struct ReplyState {
    /// Out header and data, as they would be written to /dev/fuse; empty until a reply is
    /// sent (a reply always has its 16-byte header).
    bytes: Vec<u8>,
    /// The dispatch returned without a reply: the entry waits, uncommitted, for it.
    waiting: bool,
}

impl RingReply {
    fn new(late: Arc<LateReplies>, index: usize) -> Self {
        Self {
            state: Mutex::new(ReplyState::default()),
            late,
            index,
        }
    }

    fn lock(&self) -> io::Result<std::sync::MutexGuard<'_, ReplyState>> {
        self.state
            .lock()
            .map_err(|_| io::Error::other("ring reply poisoned"))
    }

    pub(crate) fn send(&self, data: &[io::IoSlice<'_>]) -> io::Result<()> {
        let mut state = self.lock()?;
        state.bytes.clear();
        for part in data {
            state.bytes.extend_from_slice(part);
        }
        if state.waiting {
            // Decided under the same lock as `dispatched`: announced exactly once.
            state.waiting = false;
            self.late.announce(self.index)?;
        }
        Ok(())
    }

    /// Before a dispatch: no reply yet.
    fn clear(&self) -> io::Result<()> {
        *self.lock()? = ReplyState::default();
        Ok(())
    }

    /// After the dispatch: the reply made meanwhile, or `None` when it comes later (then
    /// `send` announces it).
    fn dispatched(&self) -> io::Result<Option<Vec<u8>>> {
        let mut state = self.lock()?;
        if state.bytes.is_empty() {
            state.waiting = true;
            return Ok(None);
        }
        Ok(Some(std::mem::take(&mut state.bytes)))
    }

    /// A late reply, once announced.
    fn take_late(&self) -> io::Result<Vec<u8>> {
        Ok(std::mem::take(&mut self.lock()?.bytes))
    }
}

/// The entries of one queue thread whose late replies have come, and the eventfd that wakes
/// the thread for them (a read of it is always pending on the thread's ring).
#[derive(Debug)]
pub(crate) struct LateReplies {
    eventfd: std::os::fd::OwnedFd,
    ready: Mutex<Vec<usize>>,
}

impl LateReplies {
    fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory arguments; the descriptor is owned from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor, owned by nothing else.
        let eventfd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        Ok(Self {
            eventfd,
            ready: Mutex::new(Vec::new()),
        })
    }

    fn announce(&self, index: usize) -> io::Result<()> {
        self.ready
            .lock()
            .map_err(|_| io::Error::other("late replies poisoned"))?
            .push(index);
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a local array to our eventfd.
        let written = unsafe { libc::write(self.eventfd.as_raw_fd(), one.as_ptr().cast(), 8) };
        if written != 8 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn take(&self) -> Vec<usize> {
        self.ready
            .lock()
            .map(|mut ready| std::mem::take(&mut *ready))
            .unwrap_or_default()
    }
}

/// The `user_data` of the eventfd read on each queue thread's ring (entries use their index).
const LATE_REPLY_TAG: u64 = u64::MAX;

fn late_reply_read(late: &LateReplies, buffer: &mut [u8; 8]) -> squeue::Entry128 {
    let read = opcode::Read::new(
        types::Fd(late.eventfd.as_raw_fd()),
        buffer.as_mut_ptr(),
        buffer.len() as u32,
    )
    .build()
    .user_data(LATE_REPLY_TAG);
    read.into()
}

/// One registered entry: the buffers the kernel reads and writes.
struct RingEntry {
    header: Box<EntryHeader>,
    payload: Vec<u8>,
    /// The two iovecs registered with the entry; they must outlive the REGISTER command.
    iovecs: Box<[libc::iovec; 2]>,
    reply: Arc<RingReply>,
    live: bool,
}

impl RingEntry {
    fn new(payload_size: usize, late: &Arc<LateReplies>, index: usize) -> Self {
        let mut header = Box::new(EntryHeader {
            in_out: [0; 128],
            op_in: [0; 128],
            ent_in_out: EntryInOut::default(),
        });
        let mut payload = vec![0u8; payload_size];
        let iovecs = Box::new([
            libc::iovec {
                iov_base: std::ptr::from_mut(header.as_mut()).cast(),
                iov_len: size_of::<EntryHeader>(),
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload.len(),
            },
        ]);
        Self {
            header,
            payload,
            iovecs,
            reply: Arc::new(RingReply::new(late.clone(), index)),
            live: true,
        }
    }

    /// The request's id (`fuse_in_header.unique`).
    fn unique(&self) -> u64 {
        u64::from_ne_bytes(self.header.in_out[8..16].try_into().expect("8 bytes"))
    }

    /// The thread that sent the request (`fuse_in_header.pid`); 0 for the kernel's own.
    fn caller_pid(&self) -> u32 {
        u32::from_ne_bytes(self.header.in_out[32..36].try_into().expect("4 bytes"))
    }

    /// The request as /dev/fuse would deliver it: in header, op header, payload.
    fn request_bytes(&self, out: &mut Vec<u8>) -> io::Result<()> {
        let in_header = &self.header.in_out[..IN_HEADER_SIZE];
        let total = u32::from_ne_bytes(in_header[..4].try_into().expect("4 bytes")) as usize;
        let payload_size = self.header.ent_in_out.payload_sz as usize;
        let op_size = total
            .checked_sub(IN_HEADER_SIZE + payload_size)
            .filter(|size| *size <= self.header.op_in.len())
            .filter(|_| payload_size <= self.payload.len())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("ring request of {total} bytes with a {payload_size}-byte payload"),
                )
            })?;
        out.clear();
        out.extend_from_slice(in_header);
        out.extend_from_slice(&self.header.op_in[..op_size]);
        out.extend_from_slice(&self.payload[..payload_size]);
        Ok(())
    }

    /// Moves the captured reply into the entry's buffers.
    fn store_reply(&mut self, reply: &[u8]) -> io::Result<()> {
        if reply.len() < OUT_HEADER_SIZE || reply.len() - OUT_HEADER_SIZE > self.payload.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("ring reply of {} bytes does not fit", reply.len()),
            ));
        }
        let (out_header, data) = reply.split_at(OUT_HEADER_SIZE);
        self.header.in_out[..OUT_HEADER_SIZE].copy_from_slice(out_header);
        self.payload[..data.len()].copy_from_slice(data);
        self.header.ent_in_out.payload_sz = data.len() as u32;
        Ok(())
    }
}

/// An error reply (out header only) for a request that got no reply while dispatching.
fn error_reply(unique: u64, errno: i32) -> Vec<u8> {
    let mut reply = Vec::with_capacity(OUT_HEADER_SIZE);
    reply.extend_from_slice(&(OUT_HEADER_SIZE as u32).to_ne_bytes());
    reply.extend_from_slice(&(-errno).to_ne_bytes());
    reply.extend_from_slice(&unique.to_ne_bytes());
    reply
}

/// The 80-byte command area of a SQE128: a `fuse_uring_cmd_req` followed by zeros.
fn command_area(commit_id: u64, qid: u16) -> [u8; 80] {
    let request = CommandRequest {
        flags: 0,
        commit_id,
        qid,
        padding: [0; 6],
    };
    let mut area = [0u8; 80];
    // SAFETY: CommandRequest is repr(C) plain data of 24 bytes, copied into an 80-byte array.
    unsafe {
        std::ptr::copy_nonoverlapping(
            std::ptr::from_ref(&request).cast::<u8>(),
            area.as_mut_ptr(),
            size_of::<CommandRequest>(),
        );
    }
    area
}

fn commit_and_fetch_command(device_fd: i32, commit_id: u64, qid: u16) -> squeue::Entry128 {
    opcode::UringCmd80::new(types::Fd(device_fd), FUSE_IO_URING_CMD_COMMIT_AND_FETCH)
        .cmd(command_area(commit_id, qid))
        .build()
}

/// REGISTER passes the entry's two iovecs in `sqe->addr` and `sqe->len`; the io-uring crate's
/// UringCmd80 sets `addr` but has no `len`, so it is written at its ABI offset (24).
fn register_command(device_fd: i32, qid: u16, entry: &RingEntry) -> squeue::Entry128 {
    const SQE_LEN_OFFSET: usize = 24;
    let sqe = opcode::UringCmd80::new(types::Fd(device_fd), FUSE_IO_URING_CMD_REGISTER)
        .cmd(command_area(0, qid))
        .addr(Some(entry.iovecs.as_ptr() as u64))
        .build();
    // SAFETY: Entry128 is repr(C), 128 bytes (asserted above), and `len` is the u32 at byte 24
    // of struct io_uring_sqe.
    unsafe {
        let mut bytes: [u8; 128] = std::mem::transmute(sqe);
        bytes[SQE_LEN_OFFSET..SQE_LEN_OFFSET + 4].copy_from_slice(&2u32.to_ne_bytes());
        std::mem::transmute(bytes)
    }
}

/// Threads serving each of the machine's kernel queues (see `BLOCKING_THREADS`).
pub fn threads_per_queue() -> usize {
    threads_for_queues(queue_count())
}

fn threads_for_queues(queues: usize) -> usize {
    BLOCKING_THREADS
        .div_ceil(queues.max(1))
        .clamp(MIN_THREADS_PER_QUEUE, MAX_THREADS_PER_QUEUE)
}

/// Number of kernel queues: one per possible CPU (`/sys/devices/system/cpu/possible`).
pub(crate) fn queue_count() -> usize {
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let last = possible
        .trim()
        .rsplit([',', '-'])
        .next()
        .and_then(|last| last.parse::<usize>().ok());
    match last {
        Some(last) => last + 1,
        // SAFETY: sysconf has no preconditions.
        None => unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as usize,
    }
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it for cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return;
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            warn!(
                "fuse ring queue {cpu}: cannot pin to its CPU: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// Serves kernel queue `qid` until the connection ends or `stop` is set.
pub(crate) fn serve_queue<FS: Filesystem>(
    qid: u16,
    payload_size: usize,
    session: &SessionEventLoop<FS>,
    stop: &AtomicBool,
    activity: &Activity,
) -> io::Result<()> {
    let local_cpu = usize::from(qid);
    pin_to_cpu(local_cpu);
    let device_fd = session.ch.as_fd().as_raw_fd();
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        // A following thread polls this flag to see a request without a system call.
        .setup_taskrun_flag()
        // Per turn at most: a commit per entry answered, one per late reply, the eventfd read.
        .build((QUEUE_DEPTH * 2 + 1).next_power_of_two() as u32)?;
    let late = Arc::new(LateReplies::new()?);
    let mut entries: Vec<RingEntry> = (0..QUEUE_DEPTH)
        .map(|index| RingEntry::new(payload_size, &late, index))
        .collect();
    for (index, entry) in entries.iter().enumerate() {
        let sqe = register_command(device_fd, qid, entry).user_data(index as u64);
        // SAFETY: the entry's buffers live in `entries` until the ring is dropped below.
        unsafe { ring.submission().push(&sqe) }.map_err(|_| io::Error::other("ring full"))?;
    }
    // The eventfd read's buffer lives as long as the ring (declared before it is dropped).
    let mut late_buffer = Box::new([0u8; 8]);
    // SAFETY: `late_buffer` and the eventfd outlive the ring's use of them.
    unsafe { ring.submission().push(&late_reply_read(&late, &mut late_buffer)) }
        .map_err(|_| io::Error::other("ring full"))?;
    let mut request = Vec::with_capacity(payload_size + 512);
    let mut completions = Vec::with_capacity(QUEUE_DEPTH);
    let wait = types::Timespec::from(STOP_POLL);
    let mut follow: Option<Follow<'_>> = None;
    // Only a thread that just answered may start a follow: the kernel hands the queue's
    // next request to it.
    let mut answered = false;
    while entries.iter().any(|entry| entry.live) && !stop.load(Ordering::Acquire) {
        if follow.is_none() && answered {
            follow = activity.try_follow(local_cpu);
            if let Some(following) = &follow {
                pin_to_cpu(following.cpu);
            }
        }
        // Following: replies go out at once, the next request is polled for.
        let mut arrived = false;
        if let Some(following) = &follow {
            ring.submit()?;
            arrived = following.poll(|| {
                let flagged = ring.submission().taskrun();
                flagged || !ring.completion().is_empty()
            });
            if !arrived {
                follow = None;
                pin_to_cpu(local_cpu);
            }
        }
        let args = types::SubmitArgs::new().timespec(&wait);
        let waited = if arrived {
            ring.submitter().submit_and_wait(1)
        } else {
            ring.submitter().submit_with_args(1, &args)
        };
        match waited {
            Ok(_) => {}
            Err(error)
                if matches!(
                    error.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                ) => {}
            Err(error) => return Err(error),
        }
        completions.clear();
        completions.extend(
            ring.completion()
                .map(|cqe| (cqe.user_data() as usize, cqe.result())),
        );
        answered = !completions.is_empty();
        for &(index, result) in &completions {
            if index as u64 == LATE_REPLY_TAG {
                commit_late_replies(&mut ring, &mut entries, &late, device_fd, qid)?;
                if result >= 0 {
                    // SAFETY: as for the first read.
                    unsafe { ring.submission().push(&late_reply_read(&late, &mut late_buffer)) }
                        .map_err(|_| io::Error::other("ring full"))?;
                }
                continue;
            }
            let entry = &mut entries[index];
            if result < 0 {
                // ENOTCONN / ECANCELED: the connection is going away.
                if !matches!(-result, libc::ENOTCONN | libc::ECANCELED | libc::ENODEV) {
                    error!(
                        "fuse ring queue {qid}: entry {index} failed: errno {}",
                        -result
                    );
                }
                entry.live = false;
                continue;
            }
            activity.request_arrived(local_cpu);
            if let Some(following) = follow.as_mut() {
                if !following.note_caller(entry.caller_pid()) {
                    follow = None;
                    pin_to_cpu(local_cpu);
                }
            }
            if answer(entry, session, &mut request) {
                push_commit(&mut ring, entry, index, device_fd, qid)?;
            }
        }
    }
    info!("fuse ring queue {qid} stopped");
    Ok(())
}

/// Commits the entry's reply and re-arms it for the next request.
fn push_commit(
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    entry: &RingEntry,
    index: usize,
    device_fd: i32,
    qid: u16,
) -> io::Result<()> {
    let commit_id = entry.header.ent_in_out.commit_id;
    let sqe = commit_and_fetch_command(device_fd, commit_id, qid).user_data(index as u64);
    // SAFETY: as for the registrations; the ring has room for a commit per entry twice over.
    unsafe { ring.submission().push(&sqe) }.map_err(|_| io::Error::other("ring full"))
}

/// Commits the replies sent after their dispatch returned, as `LateReplies` announced them.
fn commit_late_replies(
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    entries: &mut [RingEntry],
    late: &LateReplies,
    device_fd: i32,
    qid: u16,
) -> io::Result<()> {
    for index in late.take() {
        let entry = &mut entries[index];
        let unique = entry.unique();
        let stored = entry.reply.take_late().and_then(|bytes| entry.store_reply(&bytes));
        if let Err(error) = stored {
            error!("fuse ring: request {unique}: {error}; answering EIO");
            entry
                .store_reply(&error_reply(unique, libc::EIO))
                .expect("an out header alone always fits");
        }
        push_commit(ring, entry, index, device_fd, qid)?;
    }
    Ok(())
}

/// Dispatches the entry's request and leaves the reply in the entry; false when the reply
/// comes later (`RingReply::send` announces it). Never fails: a request that cannot be
/// answered gets EIO, because the entry (and the caller waiting on it) is only released by
/// a reply.
fn answer<FS: Filesystem>(
    entry: &mut RingEntry,
    session: &SessionEventLoop<FS>,
    request: &mut Vec<u8>,
) -> bool {
    let unique = entry.unique();
    let ring_reply = entry.reply.clone();
    let stored = dispatch(entry, session, request).and_then(|()| match ring_reply.dispatched()? {
        Some(bytes) => entry.store_reply(&bytes).map(|()| true),
        // A reply dropped unsent answers EIO (`ReplyRaw`'s drop): an empty one is on its way.
        None => Ok(false),
    });
    match stored {
        Ok(now) => now,
        Err(error) => {
            error!("fuse ring: request {unique}: {error}; answering EIO");
            let eio = error_reply(unique, libc::EIO);
            entry
                .store_reply(&eio)
                .expect("an out header alone always fits");
            true
        }
    }
}

/// Parses and dispatches the request; its reply lands in `entry.reply`.
fn dispatch<FS: Filesystem>(
    entry: &RingEntry,
    session: &SessionEventLoop<FS>,
    request: &mut Vec<u8>,
) -> io::Result<()> {
    entry.request_bytes(request)?;
    entry.reply.clear()?;
    let parsed = RequestWithSender::new_ring(session.ch.sender(), entry.reply.clone(), request)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable request"))?;
    if let Ok(ll::Operation::Destroy(_)) = parsed.request.operation() {
        parsed.reply::<crate::reply::ReplyEmpty>().ok();
    } else {
        parsed.dispatch(session);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_per_queue_shrink_as_queues_grow() {
        assert_eq!(threads_for_queues(1), MAX_THREADS_PER_QUEUE);
        assert_eq!(threads_for_queues(2), 4);
        assert_eq!(threads_for_queues(8), 2);
        assert_eq!(threads_for_queues(16), MIN_THREADS_PER_QUEUE);
        assert_eq!(threads_for_queues(256), MIN_THREADS_PER_QUEUE);
        for queues in 1..64 {
            assert!(queues * threads_for_queues(queues) >= BLOCKING_THREADS.min(queues * 4));
        }
    }
}
