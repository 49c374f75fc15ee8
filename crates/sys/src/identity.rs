//! Who this process is: its real and effective user and group ids. These calls cannot fail
//! (POSIX: "always successful"), so each is a plain safe function.

/// The effective uid: the one the kernel checks permissions and quotas against.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The effective gid.
pub fn effective_gid() -> u32 {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}

/// The real uid: the user who started the process (what access(2) checks).
pub fn real_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The real gid.
pub fn real_gid() -> u32 {
    // SAFETY: getgid has no preconditions and cannot fail.
    unsafe { libc::getgid() }
}

/// Whether the real user (not the effective one: access(2), as fusermount3 checks) may
/// read and write `path`.
pub fn real_user_may_read_write(path: &std::path::Path) -> std::io::Result<bool> {
    let path = crate::c_path::c_path(path)?;
    // SAFETY: a NUL-terminated path.
    Ok(unsafe { libc::access(path.as_ptr(), libc::R_OK | libc::W_OK) } == 0)
}

/// Whether this process runs as root (effective uid 0): it may mount, drop caches, chown.
pub fn is_root() -> bool {
    effective_uid() == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_ids_match_what_proc_says() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let ids = |field: &str| -> Vec<u32> {
            let line = status.lines().find(|line| line.starts_with(field)).unwrap();
            line.split_whitespace()
                .skip(1)
                .map(|id| id.parse().unwrap())
                .collect()
        };
        let (uids, gids) = (ids("Uid:"), ids("Gid:"));
        assert_eq!(
            (super::real_uid(), super::effective_uid()),
            (uids[0], uids[1])
        );
        assert_eq!(
            (super::real_gid(), super::effective_gid()),
            (gids[0], gids[1])
        );
        assert_eq!(super::is_root(), uids[1] == 0);
        let proc_status = std::path::Path::new("/proc/self/status");
        assert_eq!(
            super::real_user_may_read_write(proc_status).unwrap(),
            uids[0] == 0
        );
        assert!(super::real_user_may_read_write(std::path::Path::new("a\0b")).is_err());
    }
}
