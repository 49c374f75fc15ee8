//! Where each open directory stream stands, so readdir continues with a seek to the last
//! name returned instead of counting entries from the start (O(1) per page, however large
//! the directory, and stable while entries are removed, as `rm -rf` does).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Offsets 1 and 2 are "." and ".."; entry k of the directory has offset k + 3.
pub const FIRST_ENTRY_OFFSET: u64 = 2;

/// The entries of the last reply, by offset. The kernel may resume from any of them: it
/// drops what does not fit the caller's getdents buffer and asks again from there.
#[derive(Clone, Debug, Default)]
pub struct DirCursor {
    pub page: Vec<(u64, Vec<u8>)>,
}

impl DirCursor {
    pub fn name_at(&self, offset: u64) -> Option<&[u8]> {
        self.page
            .iter()
            .find(|(entry_offset, _)| *entry_offset == offset)
            .map(|(_, name)| name.as_slice())
    }
}

#[derive(Default)]
pub struct DirCursors {
    next_handle: AtomicU64,
    cursors: Mutex<HashMap<u64, DirCursor>>,
}

impl DirCursors {
    pub fn open(&self) -> u64 {
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed) + 1;
        self.cursors.lock().insert(handle, DirCursor::default());
        handle
    }

    pub fn get(&self, handle: u64) -> Option<DirCursor> {
        self.cursors.lock().get(&handle).cloned()
    }

    pub fn set(&self, handle: u64, cursor: DirCursor) {
        if let Some(slot) = self.cursors.lock().get_mut(&handle) {
            *slot = cursor;
        }
    }

    pub fn close(&self, handle: u64) {
        self.cursors.lock().remove(&handle);
    }
}
