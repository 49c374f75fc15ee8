//! Extended attributes and nanosecond timestamps of a path itself: a symlink is never
//! followed (the `l*xattr` calls, `AT_SYMLINK_NOFOLLOW`), as tar, cp -a and rsync treat one.

use std::io;
use std::path::Path;

use crate::c_path::{c_path, c_string, check};

/// What `set_xattr` may do to an attribute that exists or not (setxattr(2)'s flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetXattr {
    /// Create it or replace its value.
    CreateOrReplace,
    /// Fail with EEXIST if it exists (`XATTR_CREATE`).
    CreateOnly,
    /// Fail with ENODATA if it does not exist (`XATTR_REPLACE`).
    ReplaceOnly,
}

impl SetXattr {
    fn flags(self) -> libc::c_int {
        match self {
            Self::CreateOrReplace => 0,
            Self::CreateOnly => libc::XATTR_CREATE,
            Self::ReplaceOnly => libc::XATTR_REPLACE,
        }
    }
}

pub fn set_xattr(
    path: &Path,
    name: impl AsRef<[u8]>,
    value: &[u8],
    mode: SetXattr,
) -> io::Result<()> {
    let (path, name) = (c_path(path)?, c_string(name.as_ref())?);
    // SAFETY: both strings are NUL-terminated; the pointer and length describe `value`.
    check(unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            mode.flags(),
        )
    })
}

/// One lgetxattr(2) into `buffer`: the value's length. An empty buffer asks for the
/// length only; a buffer too small is ERANGE.
pub fn get_xattr_into(path: &Path, name: impl AsRef<[u8]>, buffer: &mut [u8]) -> io::Result<usize> {
    let (path, name) = (c_path(path)?, c_string(name.as_ref())?);
    // SAFETY: both strings are NUL-terminated; the pointer and length describe `buffer`
    // (a null pointer with length 0 asks for the size, as the man page allows).
    let length = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            buffer_pointer(buffer),
            buffer.len(),
        )
    };
    usize::try_from(length).map_err(|_| io::Error::last_os_error())
}

/// The value of attribute `name`.
pub fn get_xattr(path: &Path, name: impl AsRef<[u8]>) -> io::Result<Vec<u8>> {
    read_sized(|buffer| get_xattr_into(path, name.as_ref(), buffer))
}

/// One llistxattr(2) into `buffer`: the length of the NUL-separated name list. An empty
/// buffer asks for the length only.
pub fn list_xattrs_into(path: &Path, buffer: &mut [u8]) -> io::Result<usize> {
    let path = c_path(path)?;
    // SAFETY: a NUL-terminated path; the pointer and length describe `buffer`.
    let length =
        unsafe { libc::llistxattr(path.as_ptr(), buffer_pointer(buffer).cast(), buffer.len()) };
    usize::try_from(length).map_err(|_| io::Error::last_os_error())
}

/// The names of every attribute, in the order the filesystem lists them.
pub fn list_xattrs(path: &Path) -> io::Result<Vec<Vec<u8>>> {
    let list = read_sized(|buffer| list_xattrs_into(path, buffer))?;
    Ok(list
        .split(|&byte| byte == 0)
        .filter(|name| !name.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

pub fn remove_xattr(path: &Path, name: impl AsRef<[u8]>) -> io::Result<()> {
    let (path, name) = (c_path(path)?, c_string(name.as_ref())?);
    // SAFETY: both strings are NUL-terminated.
    check(unsafe { libc::lremovexattr(path.as_ptr(), name.as_ptr()) })
}

/// Sets the access and modification times, each (seconds, nanoseconds).
pub fn set_times(path: &Path, atime: (i64, i64), mtime: (i64, i64)) -> io::Result<()> {
    let path = c_path(path)?;
    let timespec = |(secs, nanos): (i64, i64)| libc::timespec {
        tv_sec: secs as libc::time_t,
        tv_nsec: nanos as libc::c_long,
    };
    let times = [timespec(atime), timespec(mtime)];
    // SAFETY: a NUL-terminated path and a pointer to two timespecs, as utimensat requires.
    check(unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            path.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

/// A null pointer for an empty buffer: the size query the xattr calls document.
fn buffer_pointer(buffer: &mut [u8]) -> *mut libc::c_void {
    if buffer.is_empty() {
        std::ptr::null_mut()
    } else {
        buffer.as_mut_ptr().cast()
    }
}

/// Asks for the length, then reads; retries if the value grew in between (ERANGE), as the
/// man pages advise.
fn read_sized(mut read: impl FnMut(&mut [u8]) -> io::Result<usize>) -> io::Result<Vec<u8>> {
    loop {
        let length = read(&mut [])?;
        let mut buffer = vec![0u8; length];
        match read(&mut buffer) {
            Ok(got) => {
                buffer.truncate(got);
                return Ok(buffer);
            }
            Err(error) if error.raw_os_error() == Some(libc::ERANGE) => continue,
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_xattr_round_trips_and_times_are_set() {
        let dir = std::env::temp_dir().join(format!("shoal-sys-xattr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("file");
        std::fs::write(&file, b"x").unwrap();
        set_times(&file, (1_000, 5), (2_000, 7)).unwrap();
        let meta = std::fs::symlink_metadata(&file).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((meta.mtime(), meta.mtime_nsec()), (2_000, 7));
        // tmpfs before 6.6 and some container filesystems have no user xattrs.
        match set_xattr(&file, "user.shoal", b"value", SetXattr::CreateOnly) {
            Ok(()) => {
                assert_eq!(get_xattr(&file, "user.shoal").unwrap(), b"value");
                assert_eq!(list_xattrs(&file).unwrap(), vec![b"user.shoal".to_vec()]);
                let exists = set_xattr(&file, "user.shoal", b"v", SetXattr::CreateOnly);
                assert_eq!(exists.unwrap_err().raw_os_error(), Some(libc::EEXIST));
                remove_xattr(&file, "user.shoal").unwrap();
                let gone = get_xattr(&file, "user.shoal").unwrap_err();
                assert_eq!(gone.raw_os_error(), Some(libc::ENODATA));
            }
            Err(error) => assert_eq!(error.raw_os_error(), Some(libc::EOPNOTSUPP)),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
