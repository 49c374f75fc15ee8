//! The daemon's heap: jemalloc (the `shoal` binary's global allocator, configured there).
//!
//! No request may wait for the allocator's housekeeping: jemalloc returns free pages from
//! background threads as they age (decay), so freeing a flushed 100 MB memtable does not
//! trim inside `free()`; it keeps per-thread caches in front of its arenas; and it reads
//! its statistics from counters instead of walking the heap under its locks.

use std::ptr;

use tikv_jemalloc_ctl::{background_thread, epoch, stats};

/// `arena.<i>.purge` with i = MALLCTL_ARENAS_ALL: every arena.
const PURGE_ALL_ARENAS: &[u8] = b"arena.4096.purge\0";

/// The allocator's view of the heap: bytes handed out and bytes resident but not handed
/// out (free pages not yet returned, and the allocator's own metadata).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapBytes {
    pub in_use: u64,
    pub free: u64,
}

/// What jemalloc holds now; zeros if its statistics cannot be read.
pub fn heap_bytes() -> HeapBytes {
    // The statistics are a snapshot taken when the epoch advances.
    if epoch::advance().is_err() {
        return HeapBytes::default();
    }
    let (Ok(allocated), Ok(resident)) = (stats::allocated::read(), stats::resident::read()) else {
        return HeapBytes::default();
    };
    HeapBytes {
        in_use: allocated as u64,
        free: resident.saturating_sub(allocated) as u64,
    }
}

/// Has jemalloc's background threads return aged free pages to the system, so no request's
/// thread does it. False if jemalloc refused (it is not the allocator).
pub fn release_heap_in_background() -> bool {
    background_thread::write(true).is_ok()
}

/// Returns every free page of every arena to the system now, instead of when it ages out.
/// False if jemalloc refused (it is not the allocator, or was built without the control).
pub fn release_free_memory() -> bool {
    // SAFETY: the name is NUL-terminated; `purge` reads and writes nothing, so all the
    // value pointers are null and the lengths zero, as mallctl requires for it.
    let status = unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL_ARENAS.as_ptr().cast(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            0,
        )
    };
    status == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

    #[test]
    fn purging_is_accepted_and_statistics_are_read() {
        assert!(release_free_memory());
        assert!(release_heap_in_background());
        let kept: Vec<Vec<u8>> = (0..64).map(|_| vec![1u8; 64 << 10]).collect();
        let heap = heap_bytes();
        assert!(heap.in_use > 0, "{heap:?}");
        drop(kept);
    }
}
