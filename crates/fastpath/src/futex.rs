//! The futex calls that waiting sides sleep and wake with: on a word of a mapping two
//! processes share (the channel, `shared.rs`), or on one private to a process (the preload
//! library's turns).
#![allow(unsafe_code)]

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Who else waits on the word.
#[derive(Clone, Copy)]
pub enum Scope {
    /// Another process too: the word lies in a shared mapping.
    Shared,
    /// Threads of this process only (the kernel skips the mapping lookup).
    Private,
}

impl Scope {
    fn flag(self) -> i32 {
        match self {
            Scope::Shared => 0,
            Scope::Private => libc::FUTEX_PRIVATE_FLAG,
        }
    }
}

/// Sleeps on `word` while it is `expected`, at most `timeout`; whether a wake ended it (not
/// the timeout, nor a word that had moved already).
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration, scope: Scope) -> bool {
    let timeout = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    // SAFETY: FUTEX_WAIT on a live word, with a valid timeout; the kernel only reads both.
    let result = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | scope.flag(),
            expected,
            std::ptr::addr_of!(timeout),
        )
    };
    result == 0
}

/// Wakes up to `count` sleepers on `word`.
pub fn wake(word: &AtomicU32, count: i32, scope: Scope) {
    // SAFETY: FUTEX_WAKE on a live word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | scope.flag(),
            count,
        )
    };
}
