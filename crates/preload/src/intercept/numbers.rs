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

/// Names of the calls a file system interposer cares about, for `InstallReport`'s output;
/// other numbers print as `nr N`.
const NAMES: &[(i64, &str)] = &[
    (libc::SYS_read, "read"),
    (libc::SYS_write, "write"),
    (libc::SYS_open, "open"),
    (libc::SYS_close, "close"),
    (libc::SYS_stat, "stat"),
    (libc::SYS_fstat, "fstat"),
    (libc::SYS_lstat, "lstat"),
    (libc::SYS_lseek, "lseek"),
    (libc::SYS_mmap, "mmap"),
    (libc::SYS_pread64, "pread64"),
    (libc::SYS_pwrite64, "pwrite64"),
    (libc::SYS_readv, "readv"),
    (libc::SYS_writev, "writev"),
    (libc::SYS_access, "access"),
    (libc::SYS_dup, "dup"),
    (libc::SYS_dup2, "dup2"),
    (libc::SYS_getpid, "getpid"),
    (libc::SYS_sendfile, "sendfile"),
    (libc::SYS_execve, "execve"),
    (libc::SYS_fcntl, "fcntl"),
    (libc::SYS_flock, "flock"),
    (libc::SYS_fsync, "fsync"),
    (libc::SYS_fdatasync, "fdatasync"),
    (libc::SYS_truncate, "truncate"),
    (libc::SYS_ftruncate, "ftruncate"),
    (libc::SYS_getdents, "getdents"),
    (libc::SYS_getcwd, "getcwd"),
    (libc::SYS_chdir, "chdir"),
    (libc::SYS_fchdir, "fchdir"),
    (libc::SYS_rename, "rename"),
    (libc::SYS_mkdir, "mkdir"),
    (libc::SYS_rmdir, "rmdir"),
    (libc::SYS_creat, "creat"),
    (libc::SYS_link, "link"),
    (libc::SYS_unlink, "unlink"),
    (libc::SYS_symlink, "symlink"),
    (libc::SYS_readlink, "readlink"),
    (libc::SYS_chmod, "chmod"),
    (libc::SYS_fchmod, "fchmod"),
    (libc::SYS_chown, "chown"),
    (libc::SYS_fchown, "fchown"),
    (libc::SYS_lchown, "lchown"),
    (libc::SYS_getppid, "getppid"),
    (libc::SYS_utime, "utime"),
    (libc::SYS_mknod, "mknod"),
    (libc::SYS_statfs, "statfs"),
    (libc::SYS_fstatfs, "fstatfs"),
    (libc::SYS_setxattr, "setxattr"),
    (libc::SYS_lsetxattr, "lsetxattr"),
    (libc::SYS_fsetxattr, "fsetxattr"),
    (libc::SYS_getxattr, "getxattr"),
    (libc::SYS_lgetxattr, "lgetxattr"),
    (libc::SYS_fgetxattr, "fgetxattr"),
    (libc::SYS_listxattr, "listxattr"),
    (libc::SYS_llistxattr, "llistxattr"),
    (libc::SYS_flistxattr, "flistxattr"),
    (libc::SYS_removexattr, "removexattr"),
    (libc::SYS_lremovexattr, "lremovexattr"),
    (libc::SYS_fremovexattr, "fremovexattr"),
    (libc::SYS_getdents64, "getdents64"),
    (libc::SYS_fadvise64, "fadvise64"),
    (libc::SYS_utimes, "utimes"),
    (libc::SYS_openat, "openat"),
    (libc::SYS_mkdirat, "mkdirat"),
    (libc::SYS_mknodat, "mknodat"),
    (libc::SYS_fchownat, "fchownat"),
    (libc::SYS_futimesat, "futimesat"),
    (libc::SYS_newfstatat, "newfstatat"),
    (libc::SYS_unlinkat, "unlinkat"),
    (libc::SYS_renameat, "renameat"),
    (libc::SYS_linkat, "linkat"),
    (libc::SYS_symlinkat, "symlinkat"),
    (libc::SYS_readlinkat, "readlinkat"),
    (libc::SYS_fchmodat, "fchmodat"),
    (libc::SYS_faccessat, "faccessat"),
    (libc::SYS_utimensat, "utimensat"),
    (libc::SYS_fallocate, "fallocate"),
    (libc::SYS_dup3, "dup3"),
    (libc::SYS_preadv, "preadv"),
    (libc::SYS_pwritev, "pwritev"),
    (libc::SYS_syncfs, "syncfs"),
    (libc::SYS_renameat2, "renameat2"),
    (libc::SYS_execveat, "execveat"),
    (libc::SYS_copy_file_range, "copy_file_range"),
    (libc::SYS_preadv2, "preadv2"),
    (libc::SYS_pwritev2, "pwritev2"),
    (libc::SYS_statx, "statx"),
    (libc::SYS_close_range, "close_range"),
    (libc::SYS_openat2, "openat2"),
    (libc::SYS_faccessat2, "faccessat2"),
];

/// The name of system call `nr`, where the table above has it.
pub(crate) fn name(nr: i64) -> Option<&'static str> {
    NAMES.iter().find(|(n, _)| *n == nr).map(|(_, name)| *name)
}
