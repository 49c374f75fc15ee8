//! What went the fast way and what went to the kernel, per call, for `shoal run --stats`:
//! each process appends one line to the file named by SHOAL_RUN_STATS when it exits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// How a call ended.
#[derive(Clone, Copy)]
pub enum Way {
    /// Served by the daemon (an errno it returned counts here too).
    Fast,
    /// The daemon asked for the kernel's decision (or could not be reached).
    FellBack,
}

const CALLS: usize = 512;

struct Counters {
    fast: [AtomicU64; CALLS],
    fell_back: [AtomicU64; CALLS],
    lost_conversions: AtomicU64,
    listed: AtomicU64,
    listed_other: AtomicU64,
    whole_file_reads: AtomicU64,
    listings_busy: AtomicU64,
    opened_from_listings: AtomicU64,
}

static COUNTERS: Counters = Counters {
    fast: [const { AtomicU64::new(0) }; CALLS],
    fell_back: [const { AtomicU64::new(0) }; CALLS],
    lost_conversions: AtomicU64::new(0),
    listed: AtomicU64::new(0),
    listed_other: AtomicU64::new(0),
    whole_file_reads: AtomicU64::new(0),
    listings_busy: AtomicU64::new(0),
    opened_from_listings: AtomicU64::new(0),
};

static REPORT_PATH: OnceLock<Option<Vec<u8>>> = OnceLock::new();

pub fn configure(path: Option<Vec<u8>>) {
    let _ = REPORT_PATH.set(path.map(|mut p| {
        p.push(0);
        p
    }));
}

pub fn note(nr: i64, way: Way) {
    let Ok(index) = usize::try_from(nr) else {
        return;
    };
    let counters = match way {
        Way::Fast => &COUNTERS.fast,
        Way::FellBack => &COUNTERS.fell_back,
    };
    if let Some(counter) = counters.get(index) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A fork child starts with no counts: what it inherited are its parent's, which the
/// parent reports.
pub fn forget_inherited() {
    let all = COUNTERS.fast.iter().chain(&COUNTERS.fell_back);
    let others = [
        &COUNTERS.lost_conversions,
        &COUNTERS.listed,
        &COUNTERS.listed_other,
        &COUNTERS.whole_file_reads,
        &COUNTERS.listings_busy,
        &COUNTERS.opened_from_listings,
    ];
    for counter in all.chain(others) {
        counter.store(0, Ordering::Relaxed);
    }
}

/// A fast descriptor could not be reopened through the kernel (renamed or removed since).
pub fn note_lost_conversion() {
    COUNTERS.lost_conversions.fetch_add(1, Ordering::Relaxed);
}

/// A read answered from the file's bytes sent with its open (counted as fast too).
pub fn note_whole_file_read() {
    COUNTERS.whole_file_reads.fetch_add(1, Ordering::Relaxed);
}

/// A stat answered from a directory listing's attributes (counted as fast too).
pub fn note_listed() {
    COUNTERS.listed.fetch_add(1, Ordering::Relaxed);
}

/// A readlink or an xattr read by path answered from a directory listing (counted as fast
/// too).
pub fn note_listed_other() {
    COUNTERS.listed_other.fetch_add(1, Ordering::Relaxed);
}

/// A directory opened from a listing the process keeps (counted as fast too).
pub fn note_opened_from_listing() {
    COUNTERS
        .opened_from_listings
        .fetch_add(1, Ordering::Relaxed);
}

/// The kept listings were not to be had: another thread held them too long, and a lookup
/// went without (a round trip) or a listing the daemon sent was not kept.
pub fn note_listings_busy() {
    COUNTERS.listings_busy.fetch_add(1, Ordering::Relaxed);
}

/// Appends this process's counts as one line:
/// `pid nr:fast:fellback ... lost=N listed=N ahead=N whole=N other=N busy=N dirs=N`.
pub fn write_report() {
    let Some(Some(path)) = REPORT_PATH.get() else {
        return;
    };
    let mut line = format!("{}", crate::sys::getpid());
    for index in 0..CALLS {
        let fast = COUNTERS.fast[index].load(Ordering::Relaxed);
        let fell = COUNTERS.fell_back[index].load(Ordering::Relaxed);
        if fast + fell > 0 {
            line.push_str(&format!(" {index}:{fast}:{fell}"));
        }
    }
    line.push_str(&format!(
        " lost={} listed={} ahead={} whole={} other={} busy={} dirs={}\n",
        COUNTERS.lost_conversions.load(Ordering::Relaxed),
        COUNTERS.listed.load(Ordering::Relaxed),
        crate::below::opened(),
        COUNTERS.whole_file_reads.load(Ordering::Relaxed),
        COUNTERS.listed_other.load(Ordering::Relaxed),
        COUNTERS.listings_busy.load(Ordering::Relaxed),
        COUNTERS.opened_from_listings.load(Ordering::Relaxed),
    ));
    let fd = crate::sys::openat(
        libc::AT_FDCWD,
        path,
        libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC,
        0o600,
    );
    if fd >= 0 {
        // One write with O_APPEND: lines of concurrent processes do not interleave.
        crate::sys::call(
            libc::SYS_write,
            &[fd, line.as_ptr() as i64, line.len() as i64],
        );
        crate::sys::close(fd as i32);
    }
}
