//! chdir, exec, umask and credential changes: the process-wide state the fast path keeps.

use super::{fail, kernel, raw};
use crate::{channel, fds, process_state, resolve};

/// chdir(2), fchdir(2): made in the kernel (so children and the kernel's own paths agree),
/// a fast descriptor first made a kernel one.
pub fn chdir(nr: i64, args: [i64; 6]) -> Option<i64> {
    let positions: &[usize] = if nr == libc::SYS_fchdir { &[0] } else { &[] };
    let result = kernel(nr, args, positions);
    if result == 0 {
        resolve::forget_cwd();
    }
    Some(result)
}

/// execve(2), execveat(2): descriptors the new program inherits must be kernel ones.
pub fn execve(nr: i64, args: [i64; 6]) -> Option<i64> {
    if process_state::in_vfork_child() {
        // The parent's memory: its table must stay as it is (see `fds::inherit_for_exec`).
        fds::reopen_for_exec_in_place();
    } else {
        // The program's counts end with it (a vfork child's are its parent's, counted
        // there: the memory is shared).
        crate::stats::write_report();
        // Every fast descriptor, close-on-exec ones included: the daemon keeps a process's
        // open files while the process lives (a thread that opened them may have ended),
        // and the program exec'd here, perhaps with other credentials, must not find
        // them there. As kernel descriptors they close with the exec, or stay usable if
        // it fails.
        fds::all_to_kernel(false);
    }
    let positions: &[usize] = if nr == libc::SYS_execveat { &[0] } else { &[] };
    Some(kernel(nr, args, positions))
}

pub fn umask(args: [i64; 6]) -> Option<i64> {
    let previous = raw(libc::SYS_umask, args);
    process_state::set_umask(args[0] as u32 & 0o777);
    Some(previous)
}

/// setuid and friends: the daemon knows who calls from the connection, so connections made
/// before go.
pub fn set_credentials(nr: i64, args: [i64; 6]) -> Option<i64> {
    let result = raw(nr, args);
    channel::credentials_changed();
    process_state::credentials_changed();
    Some(result)
}

/// setfsuid, setfsgid: file access by ids the daemon cannot learn: the kernel serves this
/// process from now on.
pub fn set_fs_ids(nr: i64, args: [i64; 6]) -> Option<i64> {
    fds::all_to_kernel(false);
    process_state::turn_off();
    let _ = fail;
    Some(raw(nr, args))
}
