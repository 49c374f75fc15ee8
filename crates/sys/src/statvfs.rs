//! statvfs(3) and statfs(2), wrapped once.

use std::io;
use std::path::Path;

use crate::c_path::c_path;

/// The filesystem figures of the filesystem holding `path`.
pub fn statvfs(path: &Path) -> io::Result<libc::statvfs> {
    let c_path = c_path(path)?;
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

/// Whether the filesystem holding `path` is tmpfs (statfs's `f_type`, which statvfs lacks).
pub fn is_tmpfs(path: &Path) -> io::Result<bool> {
    let c_path = c_path(path)?;
    // SAFETY: an all-zero statfs is a valid value for statfs to overwrite.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable statfs of the right type.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // The field type differs between targets; `as` widens on every one.
    #[allow(clippy::unnecessary_cast)]
    Ok(stat.f_type as i64 == libc::TMPFS_MAGIC as i64)
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
        assert!(is_tmpfs(Path::new("/dev/shm")).unwrap());
        assert!(is_tmpfs(Path::new("/no/such/dir")).is_err());
    }
}
