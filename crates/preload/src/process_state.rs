//! What the library knows of its process: whether the fast path is on, the umask (the
//! daemon applies it at create), whether real and effective ids agree (access(2)), and the
//! pid, which tells a fork or vfork child from its parent.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::sys;

static ON: AtomicBool = AtomicBool::new(false);
static UMASK: AtomicU32 = AtomicU32::new(0o022);
static PID: AtomicU32 = AtomicU32::new(0);
static REAL_IS_EFFECTIVE: AtomicBool = AtomicBool::new(false);

/// At load: the fast path starts on, with the process's umask.
pub fn start() {
    let previous = sys::call(libc::SYS_umask, &[0o022]);
    sys::call(libc::SYS_umask, &[previous]);
    UMASK.store(previous as u32 & 0o777, Ordering::Relaxed);
    PID.store(sys::getpid(), Ordering::Relaxed);
    credentials_changed();
    ON.store(true, Ordering::Release);
}

pub fn fast_path_on() -> bool {
    ON.load(Ordering::Acquire)
}

/// For good, in this process (set-fs ids).
pub fn turn_off() {
    ON.store(false, Ordering::Release);
}

pub fn umask() -> u32 {
    UMASK.load(Ordering::Relaxed)
}

pub fn set_umask(umask: u32) {
    UMASK.store(umask, Ordering::Relaxed);
}

pub fn credentials_changed() {
    let same = sys::call(libc::SYS_getuid, &[]) == sys::call(libc::SYS_geteuid, &[])
        && sys::call(libc::SYS_getgid, &[]) == sys::call(libc::SYS_getegid, &[]);
    REAL_IS_EFFECTIVE.store(same, Ordering::Relaxed);
}

pub fn real_ids_are_effective() -> bool {
    REAL_IS_EFFECTIVE.load(Ordering::Relaxed)
}

/// This process's pid, as of its start or its last fork through libc.
pub fn pid() -> u32 {
    PID.load(Ordering::Relaxed)
}

/// A fork child (after its atfork handler) is a process of its own.
pub fn forked() {
    PID.store(sys::getpid(), Ordering::Relaxed);
    crate::intercept::forget_in_flight();
}

/// Whether this is a child that still shares the parent's memory (vfork, posix_spawn) or
/// was made without libc's fork: the library's tables are not its own. Only while a clone
/// that shares the memory is in flight can it be one (`intercept::clones`), so the `getpid`
/// that tells is made only then.
pub fn in_vfork_child() -> bool {
    crate::intercept::may_share_parents_memory() && PID.load(Ordering::Relaxed) != sys::getpid()
}
