//! Descriptors the library keeps for itself (its daemon sockets), out of the program's
//! way: moved high, above what programs number their own files with, and kept when the
//! program closes them (a `close_range(3, ~0)` before exec, a `dup2` onto the number), so
//! the program sees the kernel's numbering as without the library and never cuts the
//! library's connection from under it.
//!
//! A connection names its socket by a slot, whose descriptor number may change (a `dup2`
//! onto it moves it first).

use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use crate::sys;

/// Where internal descriptors start: high, but well below any RLIMIT_NOFILE, so the
/// kernel's descriptor table does not grow much for them.
const HIGH_FD: i64 = 3000;

static SLOTS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

fn slots() -> MutexGuard<'static, Vec<i32>> {
    SLOTS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Moves `fd` high (close-on-exec) and keeps it in a slot; returns the slot.
pub fn hide(fd: i32) -> usize {
    let high = high_copy(fd).unwrap_or(fd);
    if high != fd {
        sys::close(fd);
    }
    let mut slots = slots();
    match slots.iter().position(|&slot| slot < 0) {
        Some(free) => {
            slots[free] = high;
            free
        }
        None => {
            slots.push(high);
            slots.len() - 1
        }
    }
}

fn high_copy(fd: i32) -> Option<i32> {
    let limit = sys::rlimit_nofile();
    let start = HIGH_FD.min(limit.saturating_sub(64)).max(3);
    let copy = sys::fcntl(fd, libc::F_DUPFD_CLOEXEC, start);
    (copy >= 0).then_some(copy as i32)
}

/// The slot of the placeholder every other one is a copy of, made at its first use.
fn placeholder_base() -> Option<usize> {
    static BASE: OnceLock<Option<usize>> = OnceLock::new();
    *BASE.get_or_init(|| {
        let fd = sys::placeholder(true);
        (fd >= 0).then(|| hide(fd as i32))
    })
}

/// At load, while the process most likely has one thread: makes the placeholder base, so
/// the kernel's descriptor table grows to hold `HIGH_FD` now. The kernel grows a table
/// that threads share only after an RCU grace period (`expand_fdtable`), 10-25 ms on the
/// 2-core VM: a threaded program whose first call on a mount came from a second thread (a
/// JVM runs `main` in one) waited that long at its first connection's `hide`.
pub fn grow_table_early() {
    let _ = placeholder_base();
}

/// The descriptor in `slot` now.
pub fn fd(slot: usize) -> i32 {
    slots().get(slot).copied().unwrap_or(-1)
}

/// Closes the descriptor in `slot` and frees the slot.
pub fn release(slot: usize) {
    let mut slots = slots();
    if let Some(fd) = slots.get_mut(slot) {
        if *fd >= 0 {
            sys::close(*fd);
        }
        *fd = -1;
    }
}

pub fn is_internal(fd: i64) -> bool {
    fd >= 0 && slots().iter().any(|&slot| i64::from(slot) == fd)
}

/// The program is about to make `fd` a copy of another file (dup2/dup3): an internal
/// descriptor there moves elsewhere first.
pub fn make_room(fd: i64) {
    let mut slots = slots();
    for slot in slots.iter_mut() {
        if i64::from(*slot) == fd {
            let limit = sys::rlimit_nofile();
            let moved = sys::fcntl(*slot, libc::F_DUPFD_CLOEXEC, (fd + 1).min(limit - 1));
            if moved >= 0 {
                sys::close(*slot);
                *slot = moved as i32;
            }
        }
    }
}

/// The internal descriptors in `first..=last`, ascending (close_range leaves them).
pub fn in_range(first: u32, last: u32) -> Vec<u32> {
    let mut inside: Vec<u32> = slots()
        .iter()
        .filter(|&&fd| fd >= 0 && (fd as u32) >= first && (fd as u32) <= last)
        .map(|&fd| fd as u32)
        .collect();
    inside.sort_unstable();
    inside
}

/// A new placeholder for a fast descriptor (`sys::placeholder`'s kind: `/` opened O_PATH,
/// EBADF under any call that reaches the kernel unconverted), at the lowest free number as
/// the kernel's own open would take. A copy of one kept here: F_DUPFD costs a third of an
/// openat of `/` (0.33 against 1.06 µs with its close, on the 2-core VM), once per open on
/// the fast path. Placeholders then share one open file description, which nothing reads:
/// the library keeps each fast descriptor's flags and offset itself.
pub fn placeholder(cloexec: bool) -> i64 {
    if let Some(slot) = placeholder_base() {
        let command = if cloexec {
            libc::F_DUPFD_CLOEXEC
        } else {
            libc::F_DUPFD
        };
        let copy = sys::fcntl(fd(slot), command, 0);
        if copy >= 0 {
            return copy;
        }
    }
    sys::placeholder(cloexec)
}
