//! Interception of the system calls libc makes, its internal ones included.
//!
//! `install` rewrites libc's own code: each `mov $NR,%eax` that sets up a `syscall`
//! instruction for a requested number becomes a `jmp` to a trampoline that calls the
//! handler (the `syscall` itself stays in place, so code that jumps straight to it still
//! works, unintercepted). The entries of libc's `syscall()` and, when read is requested,
//! of `read` and `__read_nocancel` (whose `syscall` is set up by a 2-byte `xor`, too short
//! for a jump) and of `fchmodat` (whose NOFOLLOW emulation takes three calls) are
//! redirected to shims. See `install` for the conditions, and
//! `InstallReport` for what is caught and what is missed.
//!
//! Not covered: system calls made outside libc (the dynamic loader's own, those of other
//! libraries, statically linked or Go programs, the vDSO's clock calls), and libc's
//! `syscall` instructions whose number is computed at run time (the report lists them:
//! futex in pthread code, `_exit`, `syscall()` itself, which is hooked at its entry).

mod clones;
mod entry;
mod hooks;
mod image;
mod numbers;
mod patch;
mod raw;
mod report;
mod scan;
mod scan_cache;
mod trampoline;
mod unwind;

use std::sync::atomic::{AtomicBool, Ordering};

/// fchmodat2 (Linux 6.6; not in the libc crate): a handler that requests it also gets
/// libc's `fchmodat` at its entry (see `entry::fchmodat_fn`).
pub const FCHMODAT2: i64 = 452;

pub use clones::{forget_in_flight, may_share_parents_memory};
pub use report::{
    EntryHookReport, HookStatus, InstallError, InstallReport, NumberReport, SkippedSite,
};
pub use scan::SkipReason;

use patch::Patch;
use scan::Site;
use trampoline::Block;

/// Decides one intercepted system call: gets its number and the six argument registers
/// (rdi, rsi, rdx, r10, r8, r9) and returns what the kernel would: `>= 0`, or `-errno`.
///
/// It runs on the thread that made the call, on that thread's stack (in a `posix_spawn`
/// or `vfork` child: a small stack shared with the parent's memory, 32 KiB or so). A
/// system call it makes itself, directly or through libc, goes to the kernel; it should
/// use [`raw_syscall`] to perform the original call. A panic is caught, and the program
/// sees `-EIO`.
pub type Handler = fn(nr: i64, args: [i64; 6]) -> i64;

/// Makes `observer` see the calls with a number in `numbers` (routed by `install`) that the
/// handler itself makes, directly or through libc (its own malloc's brk, mmap and munmap),
/// which otherwise go to the kernel unseen. It runs on the handler's stack, in the middle
/// of the handler, maybe inside libc's malloc: it must not allocate, lock or call the
/// handler's code, and does the call itself with [`raw_syscall`]. Set once; false if one
/// was set before.
pub fn observe_reentered(observer: Handler, numbers: &[i64]) -> bool {
    numbers.iter().all(|nr| (0..numbers::MAX_NR).contains(nr))
        && entry::set_observer(observer, numbers)
}

/// Set by the first `install`, successful or not.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Routes the calls libc makes with a number in `numbers` through `handler`, from now on.
///
/// Call it once, from the library's constructor, while the process has a single thread:
/// libc's text is briefly not executable while it is patched. On error nothing was patched
/// and the program keeps running on the kernel alone. Numbers that create or end a process
/// or thread, or return from a signal handler (clone, clone3, fork, vfork, exit,
/// exit_group, rt_sigreturn), are refused with [`InstallError::RefusedNumber`].
pub fn install(handler: Handler, numbers: &[i64]) -> Result<Installed, InstallError> {
    for &nr in numbers {
        if numbers::REFUSED.contains(&nr) {
            return Err(InstallError::RefusedNumber(nr));
        }
        if !(0..numbers::MAX_NR).contains(&nr) {
            return Err(InstallError::BadNumber(nr));
        }
    }
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Err(InstallError::AlreadyInstalled);
    }
    let image = image::find_libc()?;
    let table = unwind::FunctionTable::new(
        image.unwind_segment(),
        image.unwind_start,
        image.eh_frame_hdr,
    )?;
    let hooks = hooks::wanted(numbers);
    let (scanned, located) = scan_and_locate(&image, &table, &hooks);
    let of = |wanted: &[i64]| -> Vec<Site> {
        let found = scanned.sites.iter();
        found.filter(|s| wanted.contains(&s.nr)).cloned().collect()
    };
    let (sites, clone_sites) = (of(numbers), of(&numbers::CLONES));
    let hooked: Vec<_> = hooks.iter().zip(&located).collect();
    let (patches, trampoline_bytes) = trampolines(&image, &sites, &clone_sites, &hooked)?;

    if !entry::set_handler(handler) {
        return Err(InstallError::AlreadyInstalled);
    }
    numbers.iter().for_each(|&nr| entry::route_number(nr));
    patch::apply(image.text_start, image.text_len, &patches)?;
    clones::set_complete(clones_counted_whole(&scanned, &clone_sites, &hooked));
    Ok(Installed {
        image,
        numbers: numbers.to_vec(),
        scanned,
        hooks,
        located,
        trampoline_bytes,
    })
}

/// What `install` found and patched, for its report (`Installed::report`), built only when
/// asked: every process paid 0.15-0.2 ms for one nobody read.
pub struct Installed {
    image: image::LibcImage,
    numbers: Vec<i64>,
    scanned: scan::ScanResult,
    hooks: Vec<hooks::EntryHook>,
    located: Vec<Result<u64, &'static str>>,
    trampoline_bytes: usize,
}

impl Installed {
    /// What is caught and what is missed.
    pub fn report(&self) -> InstallReport {
        let entry_hooks: Vec<_> = self
            .hooks
            .iter()
            .zip(&self.located)
            .map(|(hook, at)| hooks::report(&self.image, hook, at))
            .collect();
        report::build(
            &self.image,
            &self.numbers,
            &self.scanned,
            &entry_hooks,
            self.trampoline_bytes,
        )
    }
}

/// The trampolines for `sites` (through the handler), `clone_sites` (counting) and the
/// hooks located, written near libc, and the jumps to them to write into libc; the bytes
/// of trampoline code.
fn trampolines(
    image: &image::LibcImage,
    sites: &[Site],
    clone_sites: &[Site],
    hooked: &[(&hooks::EntryHook, &Result<u64, &'static str>)],
) -> Result<(Vec<Patch>, usize), InstallError> {
    let text_end = image.text_start + image.text_len;
    let len = trampoline::block_len(sites, hooked.len()) + trampoline::clone_block_len(clone_sites);
    let mut block = Block::near(image.text_start, text_end, len)?;
    let mut patches = Vec::with_capacity(sites.len() + clone_sites.len() + hooked.len());
    let mut jump_from = |addr: u64, trampoline: u64| -> Result<(), InstallError> {
        let bytes = trampoline::jmp_rel32(addr, trampoline)?;
        patches.push(Patch { addr, bytes });
        Ok(())
    };
    for site in sites {
        jump_from(
            site.mov_addr,
            block.emit_site(site, entry::entry_address())?,
        )?;
    }
    for site in clone_sites {
        let counter = clones::counter_address();
        jump_from(site.mov_addr, block.emit_clone_site(site, counter)?)?;
    }
    for (hook, located) in hooked {
        if let Ok(addr) = **located {
            jump_from(addr, block.emit_abs_jmp(hook.shim))?;
        }
    }
    Ok((patches, block.seal()?))
}

/// Whether every clone this libc can make is counted (`clones`): glibc clones through
/// `clone`, `clone3` (threads, posix_spawn, system, popen) and `vfork`, and `syscall()`;
/// a libc where any of them was not found, or a site was left alone, is not.
fn clones_counted_whole(
    scanned: &scan::ScanResult,
    clone_sites: &[Site],
    hooked: &[(&hooks::EntryHook, &Result<u64, &'static str>)],
) -> bool {
    let syscall_fn_hooked = hooked
        .iter()
        .any(|(hook, at)| hook.nr.is_none() && at.is_ok());
    let clone_skipped = scanned
        .skipped
        .iter()
        .any(|s| numbers::CLONES.contains(&s.nr));
    let each_found = numbers::CLONES
        .iter()
        .all(|&nr| clone_sites.iter().any(|site| site.nr == nr));
    syscall_fn_hooked && !clone_skipped && each_found
}

/// Every `syscall` site of libc, and where each hook goes (or why it cannot): as a process
/// of this libc and library found them before (`scan_cache`), else scanned and kept.
fn scan_and_locate(
    image: &image::LibcImage,
    table: &unwind::FunctionTable,
    hooks: &[hooks::EntryHook],
) -> (scan::ScanResult, Vec<Result<u64, &'static str>>) {
    let kept = scan_cache::load(image);
    let fresh = kept.is_none();
    let kept = kept.unwrap_or_else(|| scan_cache::Kept {
        scan: scan::scan(image.text(), image.text_start, table),
        hookable: Vec::new(),
    });
    let located: Vec<_> = hooks
        .iter()
        .map(|hook| hooks::locate(image, table, hook, &kept.hookable))
        .collect();
    if fresh {
        let hookable: Vec<u64> = located
            .iter()
            .filter_map(|at| at.as_ref().ok().map(|addr| addr - image.text_start))
            .collect();
        scan_cache::store(image, &kept.scan, &hookable);
    }
    (kept.scan, located)
}

/// Performs system call `nr` in the kernel, bypassing libc and the handler: the handler's
/// way to do the original call. Returns `>= 0` or `-errno`.
///
/// Inside the handler, an `execve`, `execveat`, `exit` or `exit_group` made through this
/// function first clears the thread's re-entrancy flag (a `vfork` child shares it with its
/// parent, which must not resume with its handler switched off); do those calls through
/// here rather than through libc.
///
/// # Safety
/// A system call can do anything the process can (unmap memory, write through the
/// pointers in `args`, end the process): the caller vouches for the call as it would for
/// the same call through libc.
pub unsafe fn raw_syscall(nr: i64, args: [i64; 6]) -> i64 {
    // SAFETY: the caller vouches for the call.
    unsafe { entry::raw_from_handler(nr, args) }
}
