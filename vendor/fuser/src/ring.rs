//! FUSE over io_uring (Linux 6.14+, protocol 7.42; Documentation/filesystems/fuse-io-uring.rst).
//!
//! The kernel keeps one request queue per possible CPU and puts a request on the queue of the
//! CPU its caller runs on. Each queue here is served by one thread pinned to that CPU, so the
//! caller and the thread that answers it share a CPU: handing a request over is a local
//! wake-up instead of a cross-CPU one (which, in a VM, costs an IPI and a halted vCPU's exit).
//! The thread owns one io_uring. It registers `QUEUE_DEPTH` entries (a header area and a
//! payload buffer each); a request arrives as the completion of an entry, and the reply goes
//! back in the same buffers with FUSE_IO_URING_CMD_COMMIT_AND_FETCH, which also re-arms the
//! entry. Forgets, interrupts and notifications keep using /dev/fuse.

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

/// Where a reply made while dispatching a ring request is kept until it is committed.
#[derive(Debug, Default)]
pub(crate) struct RingReply {
    /// Out header and data, as they would be written to /dev/fuse; empty until a reply is
    /// sent (a reply always has its 16-byte header).
    bytes: Mutex<Vec<u8>>,
}

impl RingReply {
    pub(crate) fn send(&self, data: &[io::IoSlice<'_>]) -> io::Result<()> {
        let mut bytes = self
            .bytes
            .lock()
            .map_err(|_| io::Error::other("ring reply poisoned"))?;
        bytes.clear();
        for part in data {
            bytes.extend_from_slice(part);
        }
        Ok(())
    }
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
    fn new(payload_size: usize) -> Self {
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
            reply: Arc::new(RingReply::default()),
            live: true,
        }
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
        .build((QUEUE_DEPTH * 2) as u32)?;
    let mut entries: Vec<RingEntry> = (0..QUEUE_DEPTH)
        .map(|_| RingEntry::new(payload_size))
        .collect();
    for (index, entry) in entries.iter().enumerate() {
        let sqe = register_command(device_fd, qid, entry).user_data(index as u64);
        // SAFETY: the entry's buffers live in `entries` until the ring is dropped below.
        unsafe { ring.submission().push(&sqe) }.map_err(|_| io::Error::other("ring full"))?;
    }
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
            let commit_id = entry.header.ent_in_out.commit_id;
            answer(entry, session, &mut request);
            let sqe = commit_and_fetch_command(device_fd, commit_id, qid).user_data(index as u64);
            // SAFETY: as above; the ring holds at most QUEUE_DEPTH commands, half its size.
            unsafe { ring.submission().push(&sqe) }.map_err(|_| io::Error::other("ring full"))?;
        }
    }
    info!("fuse ring queue {qid} stopped");
    Ok(())
}

/// Dispatches the entry's request and leaves the reply in the entry. Never fails: a request
/// that cannot be answered gets EIO, because the entry (and the caller waiting on it) is
/// only released by a reply.
fn answer<FS: Filesystem>(
    entry: &mut RingEntry,
    session: &SessionEventLoop<FS>,
    request: &mut Vec<u8>,
) {
    let unique = u64::from_ne_bytes(entry.header.in_out[8..16].try_into().expect("8 bytes"));
    let ring_reply = entry.reply.clone();
    let stored = dispatch(entry, session, request).and_then(|()| {
        let bytes = ring_reply
            .bytes
            .lock()
            .map_err(|_| io::Error::other("ring reply poisoned"))?;
        if bytes.is_empty() {
            // Every request on a ring expects a reply while it is dispatched.
            return Err(io::Error::other("no reply while dispatching"));
        }
        entry.store_reply(&bytes)
    });
    if let Err(error) = stored {
        error!("fuse ring: request {unique}: {error}; answering EIO");
        let eio = error_reply(unique, libc::EIO);
        entry
            .store_reply(&eio)
            .expect("an out header alone always fits");
    }
}

/// Parses and dispatches the request; its reply lands in `entry.reply`.
fn dispatch<FS: Filesystem>(
    entry: &RingEntry,
    session: &SessionEventLoop<FS>,
    request: &mut Vec<u8>,
) -> io::Result<()> {
    entry.request_bytes(request)?;
    entry
        .reply
        .bytes
        .lock()
        .map_err(|_| io::Error::other("ring reply poisoned"))?
        .clear();
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
