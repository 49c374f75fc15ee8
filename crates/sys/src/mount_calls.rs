//! Changing mounts: unmount and remount (both need CAP_SYS_ADMIN; users unmount through
//! fusermount3 instead).

use std::io;
use std::path::Path;

use crate::c_path::{c_path, check};

/// Unmounts `mountpoint`; `lazy` detaches it even while busy (MNT_DETACH). EBUSY when it is
/// busy and not lazy.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    let path = c_path(mountpoint)?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: a NUL-terminated path.
    check(unsafe { libc::umount2(path.as_ptr(), flags) })
}

/// Changes the flags of the mount at `mountpoint` (`MS_REMOUNT` is added); `flags` are the
/// complete new set, as mount(2) takes them.
pub fn remount(mountpoint: &Path, flags: libc::c_ulong) -> io::Result<()> {
    let path = c_path(mountpoint)?;
    // SAFETY: a NUL-terminated target; null source, type and data are allowed for a remount.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            flags | libc::MS_REMOUNT,
            std::ptr::null(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_is_no_mountpoint_is_refused() {
        let error = unmount(Path::new("/no/such/mountpoint"), false).unwrap_err();
        // ENOENT as root, EPERM otherwise: either way nothing happened.
        assert!(matches!(
            error.raw_os_error(),
            Some(libc::ENOENT | libc::EPERM)
        ));
        assert!(remount(Path::new("/no/such/mountpoint"), 0).is_err());
    }
}
