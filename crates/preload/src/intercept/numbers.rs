//! System call numbers this module must treat specially, and names for the report.

/// Numbers that `install` refuses to route through a handler: the new process or thread
/// (or, for `rt_sigreturn`, the restored context) would come back through our trampoline
/// and the handler's stack frames, which a `vfork` child shares with its parent, or which
/// do not exist on a new thread's stack.
pub(crate) const REFUSED: [i64; 7] = [
    libc::SYS_rt_sigreturn,
    libc::SYS_clone,
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_clone3,
];

/// Calls that may make a child sharing this memory (with CLONE_VM; `vfork` always does):
/// their libc sites get a trampoline of their own that counts them while in flight
/// (`clones::in_flight`), and never reach a handler.
pub(crate) const CLONES: [i64; 3] = [libc::SYS_clone, libc::SYS_clone3, libc::SYS_vfork];

/// Calls that do not return when they succeed. A `vfork` child (posix_spawn's) shares the
/// parent's memory, thread-local re-entrancy flag included: if the flag stayed set across a
/// successful `execve`, the parent would resume with its handler switched off for good.
pub(crate) const NO_RETURN: [i64; 4] = [
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_exit,
    libc::SYS_exit_group,
];

/// The numbers `install` accepts lie below this bound (x86_64 has about 460).
pub(crate) const MAX_NR: i64 = 512;

/// The name of system call `nr`, where the shared table has it.
pub(crate) fn name(nr: i64) -> Option<&'static str> {
    shoal_fastpath::syscall_names::syscall_name(nr)
}
