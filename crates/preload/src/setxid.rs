//! setuid and friends as the program calls them (symbol interposition). In a threaded
//! process glibc changes every thread's ids through `__nptl_setxid`, whose system calls take
//! their number from a register, which the interception does not see; so the library read
//! the caller's effective ids at every request of a threaded program (two system calls:
//! 55k `geteuid` and 55k `getegid` per `git status` of the bench tree's clone, whose index
//! 20 threads stat). Each of these moves the credentials epoch once the change is made in
//! every thread (glibc returns only then), and each thread reads its ids again at its next
//! request (`channel::current_ids`). A change made with a raw `syscall(SYS_setresuid, ...)`
//! goes through the intercepted `syscall()` and moves the epoch too; one made by a
//! `syscall` instruction of the program's own is not seen (as for a single thread).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{channel, process_state};

/// libc's functions taken here, in the order of `REAL` (the macro's `$at`).
const NAMES: [&std::ffi::CStr; 10] = [
    c"setuid",
    c"setgid",
    c"seteuid",
    c"setegid",
    c"setreuid",
    c"setregid",
    c"setresuid",
    c"setresgid",
    c"setgroups",
    c"initgroups",
];
static REAL: [AtomicUsize; 10] = [const { AtomicUsize::new(0) }; 10];

/// Finds libc's functions (the next definitions after this library's) at load: a vfork
/// child (Python's, which drops ids before its exec) must not call `dlsym`, whose lock
/// another thread of its parent may hold.
pub fn resolve() {
    for at in 0..NAMES.len() {
        real(at);
    }
}

/// libc's function `NAMES[at]`, looked up now if `resolve` did not run (a process the
/// fast path is off in).
fn real(at: usize) -> usize {
    let known = REAL[at].load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, NAMES[at].as_ptr()) as usize };
    REAL[at].store(found, Ordering::Release);
    found
}

fn changed() {
    channel::credentials_changed();
    // A vfork child (Python's drops ids there before its exec) shares its parent's
    // memory: what it records of its own ids would be taken for the parent's.
    if !process_state::in_vfork_child() {
        process_state::credentials_changed();
    }
}

/// Defines `name(args) -> c_int` calling libc's, then moving the credentials epoch.
macro_rules! moves_credentials {
    ($name:ident, $at:literal, ($($arg:ident: $ty:ty),*)) => {
        /// # Safety
        /// As libc's function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> libc::c_int {
            debug_assert_eq!(NAMES[$at].to_bytes(), stringify!($name).as_bytes());
            let address = real($at);
            if address == 0 {
                // SAFETY: this thread's errno.
                unsafe { *libc::__errno_location() = libc::ENOSYS };
                return -1;
            }
            let function: unsafe extern "C" fn($($ty),*) -> libc::c_int =
                // SAFETY: `address` is libc's function of this exact signature.
                unsafe { std::mem::transmute::<usize, _>(address) };
            // SAFETY: the program's own arguments, passed on unchanged.
            let result = unsafe { function($($arg),*) };
            changed();
            result
        }
    };
}

moves_credentials!(setuid, 0, (uid: libc::uid_t));
moves_credentials!(setgid, 1, (gid: libc::gid_t));
moves_credentials!(seteuid, 2, (uid: libc::uid_t));
moves_credentials!(setegid, 3, (gid: libc::gid_t));
moves_credentials!(setreuid, 4, (ruid: libc::uid_t, euid: libc::uid_t));
moves_credentials!(setregid, 5, (rgid: libc::gid_t, egid: libc::gid_t));
moves_credentials!(
    setresuid,
    6,
    (ruid: libc::uid_t, euid: libc::uid_t, suid: libc::uid_t)
);
moves_credentials!(
    setresgid,
    7,
    (rgid: libc::gid_t, egid: libc::gid_t, sgid: libc::gid_t)
);
moves_credentials!(
    setgroups,
    8,
    (count: libc::size_t, groups: *const libc::gid_t)
);
// glibc's initgroups calls its own setgroups, past the symbol above.
moves_credentials!(
    initgroups,
    9,
    (user: *const libc::c_char, group: libc::gid_t)
);
