//! Paths and names as the NUL-terminated strings libc takes.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `path` as a C string; a path holding a NUL byte is `InvalidInput`.
pub(crate) fn c_path(path: &Path) -> io::Result<CString> {
    c_string(path.as_os_str().as_bytes())
}

/// `bytes` as a C string; bytes holding a NUL are `InvalidInput`.
pub(crate) fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path or name holds a NUL byte",
        )
    })
}

/// `Ok(())` when a libc call returned 0, else the errno it left.
pub(crate) fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
