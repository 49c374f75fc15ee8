//! Write failures nobody was waiting for (a background checkpoint, an interval commit),
//! remembered so they are reported instead of swallowed: counted and shown in `shoal
//! stats`, and returned once to the next `sync` (fsync), as the kernel's errseq returns a
//! writeback error to the next fsync of the file.

use std::fmt::Display;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

#[derive(Debug, Default)]
pub struct ErrorSeq {
    count: AtomicU64,
    last: Mutex<Option<String>>,
}

/// What an `ErrorSeq` holds at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteErrors {
    /// Failures since the store was opened.
    pub count: u64,
    /// The newest one, with what was being done.
    pub last: Option<String>,
}

impl ErrorSeq {
    /// Logs the failure and remembers it.
    pub fn record(&self, what: &str, error: &dyn Display) {
        let text = format!("{what}: {error}");
        tracing::error!("{text}");
        *self.last.lock() = Some(text);
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    pub fn snapshot(&self) -> WriteErrors {
        WriteErrors {
            count: self.count(),
            last: self.last.lock().clone(),
        }
    }
}

impl WriteErrors {
    /// Both sources together: the newest message of either (the engine's own if both).
    pub fn merged(self, other: WriteErrors) -> WriteErrors {
        WriteErrors {
            count: self.count + other.count,
            last: self.last.or(other.last),
        }
    }
}
