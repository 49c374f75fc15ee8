//! How a request ends when it is not done: an errno the kernel would give too, or a
//! fallback, which the client turns into the same call through the kernel mount.

use shoal_engine::FsError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The kernel path would fail with this errno at this point, for the same reason.
    Errno(i32),
    /// Nothing was changed; the kernel decides, for the reason given.
    Fallback(Why),
}

/// Why a request was left to the kernel, as `shoal stats` counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// A permission the caller may still have through an ACL or a capability the fast
    /// path does not weigh (and every refusal: the kernel gives the exact errno).
    Permission,
    /// The path leaves the mount: `..` above its root, an absolute symlink.
    LeavesMount,
    /// A rule kept to the kernel: directory renames, set-id bits at create or chown,
    /// O_TMPFILE, O_PATH, fifos and devices, names of more than 255 bytes, `.` and `..`
    /// as the last component of a change.
    KernelRule,
    /// A change on a read-only mount (the kernel orders its errors).
    ReadOnly,
    /// A client of another protocol version.
    Version,
    /// A relative path from a directory the daemon does not see the process hold (its
    /// working directory in a thread of its own, a directory of another mount namespace):
    /// the kernel walks it from the directory the process does hold.
    UnheldStart,
}

impl Why {
    pub const ALL: [Why; 6] = [
        Why::Permission,
        Why::LeavesMount,
        Why::KernelRule,
        Why::ReadOnly,
        Why::Version,
        Why::UnheldStart,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Why::Permission => "permission",
            Why::LeavesMount => "leaves_mount",
            Why::KernelRule => "kernel_rule",
            Why::ReadOnly => "read_only",
            Why::Version => "version",
            Why::UnheldStart => "unheld_start",
        }
    }
}

pub type Served<T> = Result<T, Refusal>;

impl From<FsError> for Refusal {
    fn from(error: FsError) -> Self {
        if matches!(error, FsError::Store(_) | FsError::Corrupt(_)) {
            tracing::error!("fast path: {error}");
        }
        Refusal::Errno(error.errno())
    }
}

/// Falls back unless `condition` holds: a rule the fast path leaves to the kernel.
pub fn require(condition: bool) -> Served<()> {
    require_because(condition, Why::KernelRule)
}

/// Falls back unless `condition` holds: a permission the kernel must judge.
pub fn require_permission(condition: bool) -> Served<()> {
    require_because(condition, Why::Permission)
}

pub fn require_because(condition: bool, why: Why) -> Served<()> {
    if condition {
        Ok(())
    } else {
        Err(Refusal::Fallback(why))
    }
}

/// Fails with `errno` unless `condition` holds.
pub fn ensure(condition: bool, errno: i32) -> Served<()> {
    if condition {
        Ok(())
    } else {
        Err(Refusal::Errno(errno))
    }
}
