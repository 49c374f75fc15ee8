//! Pages of the program's memory known to be readable, so that a path argument on one is
//! copied with plain loads instead of `process_vm_readv` (0.85 µs a call on the 2-core VM,
//! half of a whole `stat` round trip on the fast path).
//!
//! The kernel answers EFAULT for a path it cannot read; the library must too, so a page is
//! read directly only after `process_vm_readv` has read it under the current generation.
//! Every call that can take a page away or make it unreadable (munmap, mremap, mprotect,
//! pkey_mprotect, madvise, a brk below the last break, shmat, shmdt, a MAP_FIXED mmap)
//! moves the generation on before and after it runs, which forgets every page at once: a
//! page read between the two moves is remembered under the middle generation, already
//! stale. A brk that grows the heap (malloc's, most of them) takes nothing away.
//!
//! What it misses: mappings changed by system calls made outside libc (the dynamic
//! loader's own munmap at `dlclose`, another library's raw `syscall` instruction), and a
//! thread that unmaps memory while another thread is passing it to a system call. In
//! those cases a path on the unmapped page crashes the program where the kernel would
//! have returned EFAULT; both are reads of freed memory by the program.

use std::sync::atomic::{AtomicU64, Ordering};

const PAGE_BYTES: usize = 4096;
/// Slots, direct-mapped by page number: a program's paths live on a few pages at a time
/// (its stack, a buffer or two, string constants), but a tree walk's names are spread
/// over its heap (`fts` keeps one entry per name: the 30k-entry bench tree's take 3 MB);
/// with 64 slots `find -ls` read its names' pages with 7.6k `process_vm_readv`s.
const SLOTS: usize = 1024;
/// A slot holds the page number above these bits and the generation below them. Page
/// numbers of 57-bit addresses take 45 bits; 19 bits of generation wrap only after half a
/// million mapping changes between two reads of a slot, and a wrapped match still needs
/// the same page in the same slot.
const GENERATION_BITS: u32 = 19;
const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;
const _: () = assert!(SLOTS.is_power_of_two());
const _: () = assert!(GENERATION_BITS + 45 <= 64);

static GENERATION: AtomicU64 = AtomicU64::new(1);
static SLOT: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

fn page_of(address: usize) -> u64 {
    (address / PAGE_BYTES) as u64
}

fn slot_of(page: u64) -> &'static AtomicU64 {
    &SLOT[(page as usize) & (SLOTS - 1)]
}

fn tag(page: u64, generation: u64) -> u64 {
    (page << GENERATION_BITS) | (generation & GENERATION_MASK)
}

/// The current generation, read before a `process_vm_readv` whose success is then
/// remembered with [`remember`].
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// Whether the page holding `address` was read under the current generation.
pub fn known_readable(address: usize) -> bool {
    let page = page_of(address);
    page != 0 && slot_of(page).load(Ordering::Acquire) == tag(page, generation())
}

/// The page holding `address` was read whole (to its end) under `generation`.
pub fn remember(address: usize, generation: u64) {
    let page = page_of(address);
    slot_of(page).store(tag(page, generation), Ordering::Release);
}

/// The program break as the last brk returned it (0: not known yet).
static BREAK: AtomicU64 = AtomicU64::new(0);

/// brk(2) to `requested`, made by `call`: around a mapping change unless it asks for no
/// less than the break it last returned (a query, or the heap growing).
pub fn brk(requested: u64, call: impl FnOnce() -> i64) -> i64 {
    let last = BREAK.load(Ordering::Acquire);
    let grows = requested == 0 || (last != 0 && requested >= last);
    let result = if grows {
        call()
    } else {
        around_mapping_change(call)
    };
    if let Ok(now) = u64::try_from(result) {
        BREAK.store(now, Ordering::Release);
    }
    result
}

/// Runs `change`, a call that may unmap memory or take away read access, forgetting every
/// page before and after it (see the module's comment).
pub fn around_mapping_change(change: impl FnOnce() -> i64) -> i64 {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    let result = change();
    GENERATION.fetch_add(1, Ordering::AcqRel);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The generation is process-wide: these tests take turns.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    #[test]
    fn a_page_is_known_only_under_the_generation_it_was_read_in() {
        let _turn = ONE_AT_A_TIME.lock();
        let buffer = [7u8; 64];
        let address = buffer.as_ptr() as usize;
        let before = generation();
        remember(address, before);
        assert!(known_readable(address));
        around_mapping_change(|| 0);
        assert!(!known_readable(address), "a mapping change forgets it");
        remember(address, before);
        assert!(
            !known_readable(address),
            "a read from before the change stays stale"
        );
        remember(address, generation());
        assert!(known_readable(address));
    }

    #[test]
    fn a_read_during_a_change_is_stale_after_it() {
        let _turn = ONE_AT_A_TIME.lock();
        let buffer = [7u8; 64];
        let address = buffer.as_ptr() as usize;
        around_mapping_change(|| {
            remember(address, generation());
            0
        });
        assert!(!known_readable(address));
    }

    #[test]
    fn a_growing_brk_keeps_what_is_known_and_a_shrinking_one_forgets_it() {
        let _turn = ONE_AT_A_TIME.lock();
        let buffer = [7u8; 64];
        let address = buffer.as_ptr() as usize;
        brk(0x10_0000, || 0x10_0000);
        remember(address, generation());
        assert_eq!(brk(0, || 0x10_0000), 0x10_0000, "a query");
        assert_eq!(brk(0x20_0000, || 0x20_0000), 0x20_0000);
        assert!(
            known_readable(address),
            "growing the heap takes nothing away"
        );
        brk(0x18_0000, || 0x18_0000);
        assert!(!known_readable(address), "shrinking it may");
        remember(address, generation());
        brk(0x17_0000, || -i64::from(libc::ENOMEM));
        assert!(
            !known_readable(address),
            "a failed shrink may have done part"
        );
    }

    #[test]
    fn the_null_page_is_never_known() {
        let _turn = ONE_AT_A_TIME.lock();
        remember(8, generation());
        assert!(!known_readable(8));
    }
}
