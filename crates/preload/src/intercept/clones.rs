//! Children that share this process's memory. A `vfork` child, `posix_spawn`'s child
//! and any `clone` with CLONE_VM run on the parent's memory, the handler's tables
//! included, but have a descriptor table of their own: the handler must not change its
//! tables for them. Telling such a child from its parent took a `getpid` at every call
//! that could (a close, a dup): 18k of them for a `find` of a 2000-directory tree. Instead,
//! every clone that shares the memory is counted while it is in flight, by the trampolines
//! of libc's `clone`, `clone3` and `vfork` sites and by `syscall()`'s entry hook: while the
//! count is zero no thread of this process can be such a child.
//!
//! The parent raises the count before the call and lowers it when the call returns to
//! it (a `vfork` parent: once the child has exec'd or exited); the child (the call returns
//! 0 to it) leaves it raised. A child that neither holds its parent until it execs
//! (CLONE_VFORK) nor is one of its threads (CLONE_THREAD) may run on beside it: for such
//! a clone the parent leaves the count raised for good, and every close asks again. A clone made outside libc (a raw `syscall` instruction of the
//! program's own) is not counted: `complete` says whether every way through libc is.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Clones that share this memory, in flight (and, in a child that shares it, its own).
pub(crate) static IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

/// Whether every `clone`, `clone3` and `vfork` site libc has was given a counting
/// trampoline and `syscall()` is hooked.
static COMPLETE: AtomicBool = AtomicBool::new(false);

pub(crate) fn counter_address() -> u64 {
    &IN_FLIGHT as *const AtomicU64 as u64
}

pub(crate) fn set_complete(complete: bool) {
    COMPLETE.store(complete, Ordering::Release);
}

/// Whether this thread may be a child that shares its parent's memory: a clone that
/// shares it is in flight, or not every clone is counted.
pub fn may_share_parents_memory() -> bool {
    !COMPLETE.load(Ordering::Acquire) || IN_FLIGHT.load(Ordering::Acquire) != 0
}

/// In a fork child (its own copy of the memory, one thread): no clone of its own is in
/// flight, whatever its parent's other threads were doing when it was copied.
pub fn forget_in_flight() {
    IN_FLIGHT.store(0, Ordering::Release);
}
