//! Whether this user can mount FUSE at all, checked before anything else so the error names
//! the real obstacle (/dev/fuse, fusermount3) instead of the mountpoint.
//!
//! Root mounts directly through /dev/fuse. Another user needs read-write access to
//! /dev/fuse (mode 0666 is what udev gives it on most distributions; fusermount3 opens it
//! with the user's rights, so that mode is how an administrator allows or denies FUSE to
//! users) and the setuid-root `fusermount3` (package fuse3) to do the mount.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

const DEV_FUSE: &str = "/dev/fuse";
const FUSERMOUNT: &str = "fusermount3";

pub fn check() -> Result<()> {
    if !Path::new(DEV_FUSE).exists() {
        bail!(
            "{DEV_FUSE} does not exist: this kernel has no FUSE (try `modprobe fuse` as root; \
             in a container, pass the device in)"
        );
    }
    if shoal_sys::identity::is_root() {
        return Ok(());
    }
    let Some(fusermount) = find_in_path(FUSERMOUNT) else {
        bail!(
            "cannot mount as a non-root user: {FUSERMOUNT} is not installed (or not in PATH); \
             install the fuse3 package, or mount as root"
        );
    };
    let metadata = std::fs::metadata(&fusermount)?;
    if metadata.uid() != 0 || metadata.permissions().mode() & 0o4000 == 0 {
        bail!(
            "cannot mount as a non-root user: {} is not setuid root (chmod u+s it as root, \
             as the fuse3 package installs it), or mount as root",
            fusermount.display()
        );
    }
    if !shoal_sys::identity::real_user_may_read_write(Path::new(DEV_FUSE))? {
        let mode = std::fs::metadata(DEV_FUSE).map_or(0, |meta| meta.permissions().mode());
        bail!(
            "cannot mount as a non-root user: {DEV_FUSE} is not readable and writable by you \
             (mode {:o}); FUSE for users needs it mode 0666 (`chmod 0666 {DEV_FUSE}` as root, \
             as udev sets it on most systems), or mount as root",
            mode & 0o7777
        );
    }
    Ok(())
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}
