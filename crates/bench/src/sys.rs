//! The few raw syscalls std does not offer: nanosecond timestamps without following
//! symlinks, extended attributes and free space.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

fn c_name(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "xattr name contains a NUL byte",
        )
    })
}

/// Sets atime and mtime of `path` itself (a symlink is not followed).
pub(crate) fn set_times(path: &Path, sec: i64, nsec: i64) -> io::Result<()> {
    let path = c_path(path)?;
    let time = libc::timespec {
        tv_sec: sec as libc::time_t,
        tv_nsec: nsec as libc::c_long,
    };
    let times = [time, time];
    // SAFETY: `path` is NUL-terminated and `times` points at two timespecs, as utimensat requires.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            path.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(crate) fn set_xattr(path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
    let (path, name) = (c_path(path)?, c_name(name)?);
    // SAFETY: both strings are NUL-terminated; value pointer and length describe one slice.
    let rc = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Calls a size-probing xattr syscall twice: once for the length, once for the bytes.
/// Retries if the value grew in between (ERANGE), as the man pages advise.
fn read_sized(mut call: impl FnMut(*mut libc::c_void, usize) -> isize) -> io::Result<Vec<u8>> {
    loop {
        let len = call(std::ptr::null_mut(), 0);
        if len < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; len as usize];
        let got = call(buf.as_mut_ptr().cast(), buf.len());
        if got >= 0 {
            buf.truncate(got as usize);
            return Ok(buf);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ERANGE) {
            return Err(err);
        }
    }
}

/// Names of all extended attributes of `path` itself (a symlink is not followed).
pub(crate) fn list_xattrs(path: &Path) -> io::Result<Vec<String>> {
    let path = c_path(path)?;
    // SAFETY: `path` is NUL-terminated; read_sized passes a buffer of the stated length.
    let raw = read_sized(|buf, len| unsafe { libc::llistxattr(path.as_ptr(), buf.cast(), len) })?;
    Ok(raw
        .split(|&b| b == 0)
        .filter(|name| !name.is_empty())
        .map(|name| OsStr::from_bytes(name).to_string_lossy().into_owned())
        .collect())
}

pub(crate) fn get_xattr(path: &Path, name: &str) -> io::Result<Vec<u8>> {
    let (path, name) = (c_path(path)?, c_name(name)?);
    // SAFETY: both strings are NUL-terminated; read_sized passes a buffer of the stated length.
    read_sized(|buf, len| unsafe { libc::lgetxattr(path.as_ptr(), name.as_ptr(), buf, len) })
}

/// Free space of the filesystem holding `path`, as an unprivileged writer sees it.
#[derive(Clone, Copy, Debug)]
pub struct FreeSpace {
    pub free_bytes: u64,
    /// The allocation unit: a small file takes at least this much.
    pub block_bytes: u64,
    /// What `df` shows as used: all blocks but the free ones.
    pub used_bytes: u64,
}

pub fn free_space(path: &Path) -> io::Result<FreeSpace> {
    let c_path = c_path(path)?;
    // SAFETY: an all-zero statvfs is valid for statvfs to overwrite.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable statvfs.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(FreeSpace {
        free_bytes: stat.f_bavail as u64 * stat.f_frsize as u64,
        block_bytes: (stat.f_frsize as u64).max(1),
        used_bytes: (stat.f_blocks as u64).saturating_sub(stat.f_bfree as u64)
            * stat.f_frsize as u64,
    })
}
