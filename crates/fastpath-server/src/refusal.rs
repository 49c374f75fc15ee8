//! How a request ends when it is not done: an errno the kernel would give too, or a
//! fallback, which the client turns into the same call through the kernel mount.

use shoal_engine::FsError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The kernel path would fail with this errno at this point, for the same reason.
    Errno(i32),
    /// Nothing was changed; the kernel decides (a permission it might grant through a
    /// capability or ACL, a rule the fast path does not implement, a path leaving the mount).
    Fallback,
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

/// Falls back unless `condition` holds.
pub fn require(condition: bool) -> Served<()> {
    if condition {
        Ok(())
    } else {
        Err(Refusal::Fallback)
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
