//! statvfs(3), wrapped once.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The filesystem figures of the filesystem holding `path`.
pub fn statvfs(path: &Path) -> io::Result<libc::statvfs> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: an all-zero statvfs is a valid value for statvfs to overwrite.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable statvfs of the right type.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat)
}

/// A device's space in bytes, as an unprivileged writer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceSpace {
    pub total_bytes: u64,
    /// Available to unprivileged users (`f_bavail`).
    pub available_bytes: u64,
    /// The allocation unit (`f_frsize`, at least 1): a small file takes at least this much.
    pub block_bytes: u64,
    /// What `df` shows as used: every block but the free ones (`f_blocks - f_bfree`).
    pub used_bytes: u64,
}

pub fn device_space(path: &Path) -> io::Result<DeviceSpace> {
    let stat = statvfs(path)?;
    // The field types differ between targets (u32 or u64); `as` widens on every one.
    #[allow(clippy::unnecessary_cast)]
    let (fragment, blocks, available, free) = (
        (stat.f_frsize as u64).max(1),
        stat.f_blocks as u64,
        stat.f_bavail as u64,
        stat.f_bfree as u64,
    );
    Ok(DeviceSpace {
        total_bytes: blocks * fragment,
        available_bytes: available * fragment,
        block_bytes: fragment,
        used_bytes: blocks.saturating_sub(free) * fragment,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_filesystem_has_space_and_a_bad_path_is_an_error() {
        let root = device_space(Path::new("/")).unwrap();
        assert!(root.total_bytes > 0 && root.block_bytes > 0);
        assert!(root.available_bytes <= root.total_bytes);
        assert!(root.used_bytes <= root.total_bytes);
        let missing = statvfs(Path::new("/no/such/dir")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let nul = statvfs(Path::new("a\0b")).unwrap_err();
        assert_eq!(nul.kind(), io::ErrorKind::InvalidInput);
    }
}
