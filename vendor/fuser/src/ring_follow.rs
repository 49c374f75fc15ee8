//! Following a lone busy queue from another CPU.
//!
//! A queue's threads are pinned to its CPU, so a request costs two context switches on
//! that CPU (caller to daemon and back). In a VM each switch between processes is
//! expensive, and a single-threaded tool (`tar`, `cp`, `rm`) leaves the other CPUs idle.
//! While only one queue receives requests, the thread of that queue that answered last
//! moves to another CPU and polls its ring instead of sleeping: the caller's CPU then only
//! switches to its idle loop and back (kept polling, not halted, by a zero
//! `/dev/cpu_dma_latency` request held meanwhile), and no wake-up crosses CPUs. As soon as
//! another queue gets requests (callers on several CPUs need every CPU), or no request
//! came for `FOLLOW_IDLE`, the thread goes back to its CPU and sleeps as before.
//!
//! The kernel hands a queue's next request to the entry that was re-armed last, so the
//! following thread, which re-arms its entry with each reply, keeps getting them.
//!
//! Two callers on one CPU also send to one queue only. Following them would keep them
//! there (the polling CPU looks busy to the scheduler, the caller's CPU idle between
//! requests), so a follower that serves a second caller steps back, and the queue is not
//! followed for `SHARED_BACKOFF`: the scheduler then spreads the callers over both CPUs.
//!
//! While a request handler waits on something slow of its own (an fsync waiting for the
//! journal's sync, `BlockedWait`), nothing is followed: the answers come when the wait
//! ends, and polling meanwhile only burns a CPU (on 16 CPUs, waiting fsyncs kept followers
//! and spinners polling for milliseconds per file).
//!
//! Nor while other work of the process says it needs the CPUs (`yield_to_other_work`: a
//! filesystem that also serves its callers another way, busy now). A follower polling for
//! the rare request that comes this way took a CPU from that work: a program on shoal's
//! fast path whose `mmap`s read through the kernel kept a follower polling for 2 ms after
//! each of them.

use std::fs::File;
use std::fs::OpenOptions;
use std::io::Write;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use log::info;

/// A queue counts as alone while no other queue got a request for this long. Shorter
/// follows a caller the scheduler moved to another CPU sooner; longer keeps two callers
/// that share a CPU for a moment from starting a follow that the next moment ends
/// (measured on 2 CPUs: 1 ms cost fs_mark with 2 threads 20%, 20 ms lost half of `tar x`'s
/// gain, 5 ms kept both).
const OTHERS_QUIET: Duration = Duration::from_millis(5);
/// How long a following thread polls without a request before it goes back to sleep.
const FOLLOW_IDLE: Duration = Duration::from_millis(2);
/// While polling, the follower yields this often; a yield that took this long means other
/// work waits for this CPU, and the follower stops.
const YIELD_EVERY: Duration = Duration::from_micros(20);
const YIELD_CONTENDED: Duration = Duration::from_millis(5);
/// Requests of two different callers within this window: they share the followed CPU.
const SHARED_CALLER_WINDOW: Duration = Duration::from_millis(1);
/// How long a queue whose callers shared a CPU is not followed. Long enough for the
/// scheduler's balancing to move one of them to the CPU the follower left; two threads of
/// fs_mark-style creates ran at 12-16k files/s followed and 21-25k not (2 CPUs).
const SHARED_BACKOFF: Duration = Duration::from_millis(50);
/// `/dev/cpu_dma_latency` values: none allowed (idle CPUs poll), and no constraint.
const NO_LATENCY_US: i32 = 0;
const ANY_LATENCY_US: i32 = 2_000_000_000;

/// Followers polling now, in this process.
static FOLLOWERS: AtomicUsize = AtomicUsize::new(0);
/// Follows started, in this process (for tests and diagnosis).
static FOLLOWS_STARTED: AtomicU64 = AtomicU64::new(0);
/// Follows ended because two callers shared the followed CPU, in this process.
static SHARED_STEP_BACKS: AtomicU64 = AtomicU64::new(0);
/// Nanoseconds followers spent polling, in this process: CPU time that would otherwise
/// have been idle, to be told apart from work on requests.
static POLL_NS: AtomicU64 = AtomicU64::new(0);
/// Request handlers of this process blocked now in a long wait (`BlockedWait`).
static BLOCKED_WAITS: AtomicUsize = AtomicUsize::new(0);

/// A request handler's wait on something slow of its own (an fsync waiting for a journal
/// sync), from `begin` until dropped. Meanwhile no ring thread starts or goes on following,
/// and busy-waiters of the filesystem's own look at `blocked_waits` to stand aside too.
#[derive(Debug)]
#[must_use = "the wait ends when this is dropped"]
pub struct BlockedWait(());

impl BlockedWait {
    /// The calling handler starts waiting.
    pub fn begin() -> Self {
        BLOCKED_WAITS.fetch_add(1, Ordering::AcqRel);
        BlockedWait(())
    }
}

impl Drop for BlockedWait {
    fn drop(&mut self) {
        let before = BLOCKED_WAITS.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "a blocked wait ended twice");
    }
}

/// How many request handlers of this process are blocked in a long wait now.
pub fn blocked_waits() -> usize {
    BLOCKED_WAITS.load(Ordering::Acquire)
}

/// What `yield_to_other_work` was given.
static OTHER_WORK: OnceLock<Box<dyn Fn() -> bool + Send + Sync>> = OnceLock::new();

/// While `busy()` says other work of this process needs the CPUs, no ring thread starts
/// or goes on following. Set once per process; false if it was set already.
pub fn yield_to_other_work(busy: Box<dyn Fn() -> bool + Send + Sync>) -> bool {
    OTHER_WORK.set(busy).is_ok()
}

/// Whether other work of this process needs the CPUs now (`yield_to_other_work`).
pub fn other_work_busy() -> bool {
    OTHER_WORK.get().is_some_and(|busy| busy())
}

/// Whether a queue thread of this process is following a queue from another CPU now.
/// Busy-waiters of the filesystem's own (keep-awake threads) stand aside meanwhile: on the
/// followed caller's CPU they would take the place of the polling idle loop.
pub fn following() -> bool {
    FOLLOWERS.load(Ordering::Relaxed) > 0
}

/// How many follows this process started.
pub fn follows_started() -> u64 {
    FOLLOWS_STARTED.load(Ordering::Relaxed)
}

/// How many follows ended because two callers shared the followed CPU.
pub fn follow_step_backs() -> u64 {
    SHARED_STEP_BACKS.load(Ordering::Relaxed)
}

/// Nanoseconds this process's followers spent polling for requests.
pub fn poll_ns() -> u64 {
    POLL_NS.load(Ordering::Relaxed)
}

/// What the queue threads of one session share.
pub(crate) struct Activity {
    epoch: Instant,
    /// Per queue: nanoseconds after `epoch` of its last request.
    last_request_ns: Vec<AtomicU64>,
    /// Per queue: follows started on it. The newest follow of a queue is its follower; an
    /// older one that sees the count move on steps back. The thread that answered last is
    /// the one the kernel hands the next request (see the module comment), so when a
    /// request lands on a sleeping thread of a followed queue (the follower was busy with
    /// the one before), that thread takes over instead of leaving the follower idle.
    generation: Vec<AtomicU64>,
    /// Per queue: nanoseconds after `epoch` before which it is not followed (its callers
    /// shared its CPU).
    backoff_until_ns: Vec<AtomicU64>,
    /// The CPUs this process may run on; a follower of queue q runs on the next one after q.
    cpus: Vec<usize>,
    /// `/dev/cpu_dma_latency` and how many followers hold it.
    latency: Mutex<(Option<File>, usize)>,
    /// The latency device is open: following is on.
    enabled: bool,
}

impl Activity {
    /// `wanted`: the session asked for following. It is off where it cannot help (one
    /// CPU) or would hurt (no latency request: the caller's CPU would halt between
    /// requests, and waking it costs more than the switches saved).
    pub(crate) fn new(queues: usize, wanted: bool) -> Self {
        let cpus = allowed_cpus();
        let device = if wanted && cpus.len() > 1 {
            match OpenOptions::new().write(true).open("/dev/cpu_dma_latency") {
                Ok(file) => Some(file),
                Err(error) => {
                    info!("fuse ring: no following of lone callers: /dev/cpu_dma_latency: {error}");
                    None
                }
            }
        } else {
            None
        };
        Self {
            enabled: device.is_some(),
            epoch: Instant::now(),
            last_request_ns: (0..queues).map(|_| AtomicU64::new(0)).collect(),
            generation: (0..queues).map(|_| AtomicU64::new(0)).collect(),
            backoff_until_ns: (0..queues).map(|_| AtomicU64::new(0)).collect(),
            cpus,
            latency: Mutex::new((device, 0)),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Records that queue `qid` received a request.
    pub(crate) fn request_arrived(&self, qid: usize) {
        if let Some(last) = self.last_request_ns.get(qid) {
            last.store(self.now_ns(), Ordering::Relaxed);
        }
    }

    /// Whether a queue other than `qid` got a request within `OTHERS_QUIET`.
    fn others_active(&self, qid: usize) -> bool {
        let now = self.now_ns();
        let quiet = OTHERS_QUIET.as_nanos() as u64;
        self.last_request_ns.iter().enumerate().any(|(other, last)| {
            let last = last.load(Ordering::Relaxed);
            other != qid && last != 0 && now.saturating_sub(last) < quiet
        })
    }

    /// Starts following queue `qid` if it is alone (an older follower of it steps back);
    /// the caller then runs on the returned follow's `cpu`.
    pub(crate) fn try_follow(&self, qid: usize) -> Option<Follow<'_>> {
        let cpu = self.follower_cpu(qid)?;
        if self.others_active(qid)
            || self.backing_off(qid)
            || blocked_waits() > 0
            || other_work_busy()
        {
            return None;
        }
        let generation = self.generation.get(qid)?.fetch_add(1, Ordering::AcqRel) + 1;
        self.hold_latency(true);
        FOLLOWS_STARTED.fetch_add(1, Ordering::Relaxed);
        Some(Follow {
            activity: self,
            qid,
            generation,
            cpu,
            last_caller: None,
        })
    }

    /// Whether `qid` is not to be followed now (see `SHARED_BACKOFF`).
    fn backing_off(&self, qid: usize) -> bool {
        let until = self.backoff_until_ns[qid].load(Ordering::Relaxed);
        self.now_ns() < until
    }

    fn back_off(&self, qid: usize) {
        let until = self.now_ns() + SHARED_BACKOFF.as_nanos() as u64;
        self.backoff_until_ns[qid].store(until, Ordering::Relaxed);
        SHARED_STEP_BACKS.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a newer follow of `qid` than `generation` started.
    fn superseded(&self, qid: usize, generation: u64) -> bool {
        self.generation[qid].load(Ordering::Acquire) != generation
    }

    /// The CPU after `qid` among the allowed ones; None while following is off.
    fn follower_cpu(&self, qid: usize) -> Option<usize> {
        if !self.enabled {
            return None;
        }
        let next = self.cpus.iter().position(|&cpu| cpu > qid).unwrap_or(0);
        let cpu = self.cpus[next];
        (cpu != qid).then_some(cpu)
    }

    /// Counts a follower in or out; the first in asks for no idle latency, the last out
    /// withdraws it.
    fn hold_latency(&self, start: bool) {
        let Ok(mut guard) = self.latency.lock() else {
            return;
        };
        let (device, holders) = &mut *guard;
        let before = *holders;
        *holders = if start {
            before + 1
        } else {
            before.saturating_sub(1)
        };
        FOLLOWERS.store(*holders, Ordering::Relaxed);
        let value = match (before, *holders) {
            (0, 1) => NO_LATENCY_US,
            (1, 0) => ANY_LATENCY_US,
            _ => return,
        };
        if let Some(device) = device.as_mut() {
            if let Err(error) = device.write_all(&value.to_ne_bytes()) {
                info!("fuse ring: /dev/cpu_dma_latency: {error}");
            }
        }
    }
}

/// One thread following one queue; ends (and frees the queue) when dropped.
pub(crate) struct Follow<'a> {
    activity: &'a Activity,
    qid: usize,
    generation: u64,
    /// Where the follower runs.
    pub(crate) cpu: usize,
    /// The caller of the last request served, and when.
    last_caller: Option<(u32, Instant)>,
}

impl Follow<'_> {
    /// Notes the caller (`fuse_in_header.pid`, a thread id) of a request served while
    /// following; false when a second caller came within `SHARED_CALLER_WINDOW`: the
    /// follow is to end, and the queue backs off. Requests of the kernel's own (pid 0:
    /// write-back, releases) do not count.
    pub(crate) fn note_caller(&mut self, pid: u32) -> bool {
        if pid == 0 {
            return true;
        }
        let now = Instant::now();
        let shared = self.last_caller.is_some_and(|(other, at)| {
            other != pid && now.duration_since(at) < SHARED_CALLER_WINDOW
        });
        self.last_caller = Some((pid, now));
        if shared {
            self.activity.back_off(self.qid);
        }
        !shared
    }

    /// Spins until `ready()` (a request is there) or the follow should end; returns
    /// whether a request is there.
    pub(crate) fn poll(&self, ready: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        let arrived = self.spin(start, ready);
        let polled = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        POLL_NS.fetch_add(polled, Ordering::Relaxed);
        arrived
    }

    fn spin(&self, start: Instant, mut ready: impl FnMut() -> bool) -> bool {
        let mut next_yield = YIELD_EVERY;
        let mut spins: u32 = 0;
        loop {
            if ready() {
                return true;
            }
            spins = spins.wrapping_add(1);
            if spins % 64 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let elapsed = start.elapsed();
            if elapsed > FOLLOW_IDLE
                || self.activity.superseded(self.qid, self.generation)
                || self.activity.others_active(self.qid)
                || blocked_waits() > 0
                || other_work_busy()
            {
                return false;
            }
            if elapsed >= next_yield {
                let before = Instant::now();
                std::thread::yield_now();
                if before.elapsed() > YIELD_CONTENDED {
                    return false;
                }
                next_yield = start.elapsed() + YIELD_EVERY;
            }
        }
    }
}

impl Drop for Follow<'_> {
    fn drop(&mut self) {
        self.activity.hold_latency(false);
    }
}

/// The CPUs this process may run on, ascending.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data, filled by the kernel.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-parameter of the size given.
    let ok = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if ok != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: cpu < CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}
