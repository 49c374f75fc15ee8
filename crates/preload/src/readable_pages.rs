//! Pages of the program's memory known to be readable, so that a path argument on one is
//! copied with plain loads instead of `process_vm_readv` (0.85 µs a call on the 2-core VM,
//! half of a whole `stat` round trip on the fast path).
//!
//! The kernel answers EFAULT for a path it cannot read; the library must too, so a page is
//! read directly only after `process_vm_readv` has read it under the current generation.
//! A call that can take pages away or make them unreadable forgets them before and after it
//! runs: the pages of its range where it names one (munmap, mprotect, pkey_mprotect,
//! madvise, a MAP_FIXED mmap, a brk below the last break, mremap's old range), else every
//! page at once, by moving the generation on (mremap to a fixed address, shmat, shmdt, a
//! range larger than the slots). A read
//! made while the change runs is never remembered: it is kept only if its slot still holds
//! what the reader saw before it read (`Seen`), and forgetting writes a value never seen
//! before. A brk that grows the heap (malloc's, most of them) takes nothing away. Forgetting
//! only the range matters where memory comes and goes: `cp -a` maps and unmaps a buffer
//! per file, and `find` shrinks its heap, and each of those forgot every path's page
//! (a `process_vm_readv` costs 3-4 µs on an AMD EPYC host: pages pinned and unpinned).
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
/// with 64 slots `find -ls` read its names' pages with 7.6k `process_vm_readv`s. With
/// 1024 (4 MiB of heap) `du -s` of that tree, whose heap grows to 4.6 MiB, read its pages
/// 562 times, two pages 4 MiB apart taking each other's slot in turn.
const SLOTS: usize = 4096;
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

/// What a reader saw of a page before it read it with `process_vm_readv`: its read is
/// remembered only if nothing has been forgotten since ([`remember`]).
#[derive(Clone, Copy)]
pub struct Seen {
    page: u64,
    slot: u64,
    generation: u64,
}

/// Taken before a `process_vm_readv` of the page holding `address`, whose success is then
/// remembered with [`remember`].
pub fn before_read(address: usize) -> Seen {
    let page = page_of(address);
    Seen {
        page,
        slot: slot_of(page).load(Ordering::Acquire),
        generation: generation(),
    }
}

fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// Whether the page holding `address` was read under the current generation.
pub fn known_readable(address: usize) -> bool {
    let page = page_of(address);
    page != 0 && slot_of(page).load(Ordering::Acquire) == tag(page, generation())
}

/// The page `seen` was taken of was read whole (to its end) since: kept, unless its slot
/// changed meanwhile (a range forgotten, another page remembered).
pub fn remember(seen: Seen) {
    let _ = slot_of(seen.page).compare_exchange(
        seen.slot,
        tag(seen.page, seen.generation),
        Ordering::AcqRel,
        Ordering::Relaxed,
    );
}

/// Values that forgetting writes: page 0 (never a remembered page) and a number not
/// written before (it wraps only after half a million forgotten ranges, far more than fit
/// between a reader's look at its slot and its `remember`).
static FORGOTTEN: AtomicU64 = AtomicU64::new(0);

fn forget(pages: std::ops::Range<u64>) {
    let mark = 1 + FORGOTTEN.fetch_add(1, Ordering::Relaxed) % GENERATION_MASK;
    for page in pages {
        slot_of(page).store(tag(0, mark), Ordering::Release);
    }
}

/// The pages of `start..start + len`, where they are no more than the slots.
fn pages_of(start: u64, len: u64) -> Option<std::ops::Range<u64>> {
    let first = page_of(start as usize);
    if len == 0 {
        return Some(first..first);
    }
    let last = start.checked_add(len - 1)?;
    let pages = first..page_of(last as usize) + 1;
    (pages.end - pages.start <= SLOTS as u64).then_some(pages)
}

/// Pages of a growing heap remembered at most per brk: malloc grows it by 132 KiB (33
/// pages) at a time.
const MAX_GAINED_PAGES: usize = 64;

/// The program break as the last brk returned it (0: not known yet).
static BREAK: AtomicU64 = AtomicU64::new(0);

/// brk(2) to `requested`, made by `call`: around a mapping change unless it asks for no
/// less than the break it last returned (a query, or the heap growing). The pages a
/// growing heap gains are readable (brk maps them read-write): they are remembered as if
/// read, as malloc hands them out (`find` of the bench tree read 539 pages with
/// `process_vm_readv`, most of them its heap's, as its names came to lie on them).
pub fn brk(requested: u64, call: impl FnOnce() -> i64) -> i64 {
    let last = BREAK.load(Ordering::Acquire);
    let grows = requested == 0 || (last != 0 && requested >= last);
    let result = if grows {
        // Seen before the call (a change of these pages by another thread meanwhile keeps
        // them from being remembered), on the stack: malloc is what calls brk.
        let mut gained = [None; MAX_GAINED_PAGES];
        if last != 0 && requested > last {
            let first = page_of(last as usize + PAGE_BYTES - 1);
            let pages = first..page_of(requested as usize).min(first + MAX_GAINED_PAGES as u64);
            for (slot, page) in gained.iter_mut().zip(pages) {
                *slot = Some(before_read(page as usize * PAGE_BYTES));
            }
        }
        let result = call();
        if let Ok(now) = u64::try_from(result) {
            let within = |seen: &Seen| (seen.page + 1) * PAGE_BYTES as u64 <= now;
            gained
                .into_iter()
                .flatten()
                .filter(within)
                .for_each(remember);
        }
        result
    } else if last > requested {
        around_range_change(requested, last - requested, call)
    } else {
        around_mapping_change(call)
    };
    if let Ok(now) = u64::try_from(result) {
        BREAK.store(now, Ordering::Release);
    }
    result
}

/// Runs `change`, a call that may unmap memory or take away read access in
/// `start..start + len` only, forgetting those pages before and after it.
pub fn around_range_change(start: u64, len: u64, change: impl FnOnce() -> i64) -> i64 {
    let Some(pages) = pages_of(start, len) else {
        return around_mapping_change(change);
    };
    forget(pages.clone());
    let result = change();
    forget(pages);
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

    /// The generation and the slots are process-wide: these tests take turns.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    fn read(address: usize) {
        remember(before_read(address));
    }

    #[test]
    fn a_page_is_known_only_under_the_generation_it_was_read_in() {
        let _turn = ONE_AT_A_TIME.lock();
        let buffer = [7u8; 64];
        let address = buffer.as_ptr() as usize;
        let before = before_read(address);
        remember(before);
        assert!(known_readable(address));
        around_mapping_change(|| 0);
        assert!(!known_readable(address), "a mapping change forgets it");
        remember(before);
        assert!(
            !known_readable(address),
            "a read from before the change stays stale"
        );
        read(address);
        assert!(known_readable(address));
    }

    #[test]
    fn a_read_during_a_change_is_stale_after_it() {
        let _turn = ONE_AT_A_TIME.lock();
        let buffer = [7u8; 64];
        let address = buffer.as_ptr() as usize;
        around_mapping_change(|| {
            read(address);
            0
        });
        assert!(!known_readable(address));
        let page = address as u64 & !(PAGE_BYTES as u64 - 1);
        around_range_change(page, PAGE_BYTES as u64, || {
            read(address);
            0
        });
        assert!(!known_readable(address), "nor during a change of its range");
    }

    #[test]
    fn a_read_that_began_before_a_change_of_its_range_is_not_kept() {
        let _turn = ONE_AT_A_TIME.lock();
        let buffer = [7u8; 64];
        let address = buffer.as_ptr() as usize;
        let page = address as u64 & !(PAGE_BYTES as u64 - 1);
        // Seen before the change began, remembered while it runs and after it.
        let seen = before_read(address);
        around_range_change(page, 1, || {
            remember(seen);
            0
        });
        assert!(!known_readable(address));
        let seen = before_read(address);
        around_range_change(page, 1, || 0);
        remember(seen);
        assert!(!known_readable(address));
    }

    #[test]
    fn a_change_of_a_range_forgets_only_its_pages() {
        let _turn = ONE_AT_A_TIME.lock();
        let buffer = [7u8; 3 * PAGE_BYTES];
        let first = (buffer.as_ptr() as usize).next_multiple_of(PAGE_BYTES);
        let second = first + PAGE_BYTES;
        read(first);
        read(second);
        around_range_change(second as u64, 1, || 0);
        assert!(known_readable(first), "outside the range");
        assert!(!known_readable(second), "its last page, rounded up");
        read(second);
        around_range_change(first as u64 - 1, 2, || 0);
        assert!(!known_readable(first), "a range that ends on the page");
        assert!(known_readable(second));
        read(first);
        around_range_change(first as u64, u64::MAX, || 0);
        assert!(
            !known_readable(first) && !known_readable(second),
            "a range past the end of memory forgets everything"
        );
        read(first);
        around_range_change(0, (SLOTS * PAGE_BYTES) as u64, || 0);
        assert!(!known_readable(first), "so does one larger than the slots");
    }

    #[test]
    fn a_growing_brk_keeps_what_is_known_and_a_shrinking_one_forgets_its_pages() {
        let _turn = ONE_AT_A_TIME.lock();
        let buffer = [7u8; 64];
        let address = buffer.as_ptr() as usize;
        // The made-up heap's pages take slots the stack buffer's page does not (slots are
        // shared: a page of the heap whose slot it took made it forgotten, in 1 run of 60).
        let heap_slots = |heap: usize| heap / PAGE_BYTES..(heap + 0x20_0000) / PAGE_BYTES;
        let buffer_slot = page_of(address) as usize & (SLOTS - 1);
        let heap = if heap_slots(0x10_0000).contains(&buffer_slot) {
            0x50_0000
        } else {
            0x10_0000
        };
        assert!(!heap_slots(heap).contains(&buffer_slot));
        brk(heap as u64, || heap as i64);
        read(address);
        assert_eq!(brk(0, || heap as i64), heap as i64, "a query");
        let top = heap + 0x10_0000;
        assert_eq!(brk(top as u64, || top as i64), top as i64);
        assert!(
            known_readable(address),
            "growing the heap takes nothing away"
        );
        let gained = |page: usize| known_readable(heap + page * PAGE_BYTES);
        assert!(
            gained(0) && gained(MAX_GAINED_PAGES - 1) && !gained(MAX_GAINED_PAGES),
            "the pages it gains are known readable, as many as a brk remembers"
        );
        brk((heap + 0x20_0000) as u64, || -i64::from(libc::ENOMEM));
        assert!(!known_readable(top), "a failed brk gains nothing");
        let lower = heap + 0x8_0000;
        brk(lower as u64, || lower as i64);
        assert!(
            known_readable(address),
            "shrinking it takes only the pages above the new break"
        );
        let heap_page = heap + 0x7_0000 + PAGE_BYTES;
        read(heap_page);
        brk((heap + 0x7_0000) as u64, || -i64::from(libc::ENOMEM));
        assert!(
            !known_readable(heap_page),
            "a failed shrink may have done part"
        );
        brk(0, || 0);
        assert!(known_readable(address));
        let lowest = heap + 0x6_0000;
        brk(lowest as u64, || lowest as i64);
        assert!(
            !known_readable(address),
            "from an unknown break, a shrink forgets every page"
        );
    }

    #[test]
    fn the_null_page_is_never_known() {
        let _turn = ONE_AT_A_TIME.lock();
        read(8);
        assert!(!known_readable(8));
    }
}
