use fuser::Errno;
use shoal_engine::FsError;

/// Engine errors as FUSE replies (the values come from `FsError::errno`).
pub fn errno(error: &FsError) -> Errno {
    if matches!(error, FsError::Store(_) | FsError::Corrupt(_)) {
        tracing::error!("{error}");
    }
    Errno::from_i32(error.errno())
}
