use fuser::Errno;
use shoal_engine::FsError;
use shoal_engine::StoreError;

/// The one place engine errors become errno values.
pub fn errno(error: &FsError) -> Errno {
    match error {
        FsError::NotFound => Errno::ENOENT,
        FsError::Exists => Errno::EEXIST,
        FsError::NotEmpty => Errno::ENOTEMPTY,
        FsError::NotDir => Errno::ENOTDIR,
        FsError::IsDir => Errno::EISDIR,
        FsError::NameTooLong => Errno::ENAMETOOLONG,
        FsError::Invalid(_) => Errno::EINVAL,
        FsError::NotPermitted(_) => Errno::EPERM,
        FsError::NoXattr => Errno::ENODATA,
        FsError::Range => Errno::ERANGE,
        FsError::XattrNotSupported => Errno::EOPNOTSUPP,
        FsError::FileTooBig => Errno::EFBIG,
        FsError::ReadOnly => Errno::EROFS,
        // The store's own ENOSPC too: the operation that needed the space gets it.
        FsError::NoSpace | FsError::Store(StoreError::NoSpace) => Errno::ENOSPC,
        FsError::QuotaExceeded => Errno::EDQUOT,
        FsError::CrossProject => Errno::EXDEV,
        FsError::Store(_) | FsError::Corrupt(_) => {
            tracing::error!("{error}");
            Errno::EIO
        }
    }
}
