//! What the kernel says is mounted, and which process serves a shoal mount: read in one
//! place for every crate, `shoal_sys::mounts`.

pub use shoal_sys::mounts::{absolute, daemon_pids, mount_at, mount_table};

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};

/// `mountpoint` made absolute, if a shoal filesystem is mounted there; else why not.
pub fn shoal_mount_at(mountpoint: &Path) -> Result<PathBuf> {
    let mountpoint = absolute(mountpoint);
    let Some(entry) = mount_at(&mountpoint) else {
        bail!("{} is not a mount point", mountpoint.display());
    };
    if !entry.is_shoal() {
        bail!(
            "{} is not a shoal mount ({} {})",
            mountpoint.display(),
            entry.fstype,
            entry.source
        );
    }
    Ok(mountpoint)
}

/// The innermost shoal mount holding `absolute` (already resolved), and the path inside it
/// ("" for its root). `shown` is the path as the user gave it, for errors.
pub fn shoal_mount_holding(absolute: &Path, shown: &Path) -> Result<(PathBuf, String)> {
    let mount = mount_table()
        .into_iter()
        .filter(|entry| entry.is_shoal() && absolute.starts_with(&entry.mountpoint))
        .max_by_key(|entry| entry.mountpoint.as_os_str().len())
        .ok_or_else(|| anyhow!("{} is not on a shoal mount", shown.display()))?;
    let inside = absolute
        .strip_prefix(&mount.mountpoint)
        .map_err(|_| anyhow!("{} is not on a shoal mount", shown.display()))?
        .to_str()
        .ok_or_else(|| anyhow!("{}: the path is not UTF-8", shown.display()))?
        .to_owned();
    Ok((mount.mountpoint, inside))
}
