//! The one error type of the benchmark library; the CLI turns it into a message and exit 1.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The io::Error is in the message, not a `source`: chained display would repeat it.
    #[error("{context}: {error}")]
    Io { context: String, error: io::Error },
    #[error("`{command}` failed: {detail}")]
    Tool { command: String, detail: String },
    #[error("target {path}: {reason}")]
    BadTarget { path: PathBuf, reason: String },
    #[error("{0}")]
    Invalid(String),
    #[error("interrupted")]
    Interrupted,
}

pub type Result<T> = std::result::Result<T, BenchError>;

/// Adds "what we were doing" to an io::Error, like anyhow's `context` but typed.
pub trait IoContext<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|error| BenchError::Io {
            context: context(),
            error,
        })
    }
}
