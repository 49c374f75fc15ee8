//! The engine's error types: `FsError`, what every operation returns (the FUSE adapter
//! maps it to errno in exactly one place), and `StoreError`, what the key-value store
//! underneath returns. Both sit below the store so that every layer can name them.

use crate::limits::NAME_MAX_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("directory not empty")]
    NotEmpty,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("name longer than {NAME_MAX_BYTES} bytes")]
    NameTooLong,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("operation not permitted: {0}")]
    NotPermitted(&'static str),
    #[error("no such extended attribute")]
    NoXattr,
    #[error("buffer too small")]
    Range,
    #[error("extended attribute namespace not supported")]
    XattrNotSupported,
    #[error("file too large")]
    FileTooBig,
    #[error("read-only filesystem")]
    ReadOnly,
    #[error("no space left on device")]
    NoSpace,
    #[error("disk quota exceeded")]
    QuotaExceeded,
    /// Moving or linking into a directory tagged with another project (as XFS: EXDEV, so
    /// `mv` falls back to copy and delete, which accounts the copy to the new project).
    #[error("cannot move or link across project quota boundaries")]
    CrossProject,
    #[error("store error: {0}")]
    Store(#[from] StoreError),
    #[error("corrupt store: {0}")]
    Corrupt(String),
}

pub type FsResult<T> = Result<T, FsError>;

impl FsError {
    /// The errno a caller sees for this error, through either door (the FUSE adapter, the
    /// fast path): the one place engine errors become errno values.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::NotPermitted(_) => libc::EPERM,
            FsError::NoXattr => libc::ENODATA,
            FsError::Range => libc::ERANGE,
            FsError::XattrNotSupported => libc::EOPNOTSUPP,
            FsError::FileTooBig => libc::EFBIG,
            FsError::ReadOnly => libc::EROFS,
            // The store's own ENOSPC too: the operation that needed the space gets it.
            FsError::NoSpace | FsError::Store(StoreError::NoSpace) => libc::ENOSPC,
            FsError::QuotaExceeded => libc::EDQUOT,
            FsError::CrossProject => libc::EXDEV,
            FsError::Store(_) | FsError::Corrupt(_) => libc::EIO,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("I/O error in the key-value store: {0}")]
    Io(#[from] std::io::Error),
    #[error("key-value store: {0}")]
    Engine(String),
    #[error("no space left on the store's device")]
    NoSpace,
    /// A background thread panicked (see `store::poison`); nothing is done until a reopen.
    #[error("the {0} thread panicked: the store refuses every operation until it is reopened")]
    Poisoned(String),
}
