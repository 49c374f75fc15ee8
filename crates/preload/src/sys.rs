//! The kernel calls the library makes for itself, always straight to the kernel (never
//! through libc's patched wrappers). Each returns the kernel's value: `>= 0` or `-errno`.

use crate::intercept::raw_syscall;

/// Performs `nr` with up to six arguments.
pub fn call(nr: i64, args: &[i64]) -> i64 {
    let mut all = [0i64; 6];
    all[..args.len()].copy_from_slice(args);
    // SAFETY: every caller passes arguments as valid as the same libc call would need:
    // pointers to live buffers of the stated length, descriptors it owns.
    unsafe { raw_syscall(nr, all) }
}

pub fn close(fd: i32) -> i64 {
    call(libc::SYS_close, &[i64::from(fd)])
}

/// openat(2) of a NUL-terminated `path`.
pub fn openat(dirfd: i32, path: &[u8], flags: i32, mode: u32) -> i64 {
    debug_assert_eq!(path.last(), Some(&0));
    call(
        libc::SYS_openat,
        &[
            i64::from(dirfd),
            path.as_ptr() as i64,
            i64::from(flags),
            i64::from(mode),
        ],
    )
}

pub fn fstat(fd: i32, out: &mut libc::stat) -> i64 {
    call(
        libc::SYS_fstat,
        &[i64::from(fd), std::ptr::from_mut(out) as i64],
    )
}

pub fn lseek(fd: i32, offset: i64, whence: i32) -> i64 {
    call(libc::SYS_lseek, &[i64::from(fd), offset, i64::from(whence)])
}

pub fn dup3(old: i32, new: i32, flags: i32) -> i64 {
    call(
        libc::SYS_dup3,
        &[i64::from(old), i64::from(new), i64::from(flags)],
    )
}

pub fn fcntl(fd: i32, cmd: i32, arg: i64) -> i64 {
    call(libc::SYS_fcntl, &[i64::from(fd), i64::from(cmd), arg])
}

pub fn getpid() -> u32 {
    call(libc::SYS_getpid, &[]) as u32
}

/// A new descriptor for `/` opened O_PATH: the kernel-side placeholder of a fast-path fd.
/// It takes the lowest free number, as the kernel's own open would, and fails loudly
/// (EBADF) under any call that reaches the kernel unconverted.
pub fn placeholder(cloexec: bool) -> i64 {
    let flags = libc::O_PATH | libc::O_DIRECTORY | if cloexec { libc::O_CLOEXEC } else { 0 };
    openat(libc::AT_FDCWD, b"/\0", flags, 0)
}

/// `Err(errno)` for a negative kernel result.
pub fn check(result: i64) -> Result<i64, i32> {
    if result < 0 {
        Err((-result) as i32)
    } else {
        Ok(result)
    }
}

/// RLIMIT_NOFILE's soft limit.
pub fn rlimit_nofile() -> i64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let rc = call(
        libc::SYS_getrlimit,
        &[
            i64::from(libc::RLIMIT_NOFILE),
            std::ptr::addr_of_mut!(limit) as i64,
        ],
    );
    if rc < 0 {
        1024
    } else {
        i64::try_from(limit.rlim_cur).unwrap_or(i64::MAX)
    }
}

/// The NUL-terminated `/proc/self/fd/N` link of descriptor `fd`: the kernel's name for the
/// open file itself, whatever has happened to its path since.
pub fn proc_fd_link(fd: impl std::fmt::Display) -> String {
    format!("/proc/self/fd/{fd}\0")
}
