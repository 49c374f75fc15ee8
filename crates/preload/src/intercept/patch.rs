//! Writing the jumps into libc's text.

use super::raw;
use super::InstallError;

/// Five bytes to write at an address in libc's text.
pub(crate) struct Patch {
    pub addr: u64,
    pub bytes: [u8; 5],
}

/// Makes `[start, start + len)` of libc's text writable (and not executable), writes every
/// patch, and makes it read-only and executable again.
///
/// While the text is not executable no libc function may run, on any thread: the process
/// must be single-threaded, and between the two `mprotect` calls this function only uses
/// raw system calls and volatile byte stores (which the compiler cannot turn into a call
/// to libc's `memcpy`).
pub(crate) fn apply(start: u64, len: u64, patches: &[Patch]) -> Result<(), InstallError> {
    let page_start = start & !4095;
    let page_len = (start + len).div_ceil(4096) * 4096 - page_start;
    let range = [page_start as i64, page_len as i64];
    let rw = (libc::PROT_READ | libc::PROT_WRITE) as i64;
    let rx = (libc::PROT_READ | libc::PROT_EXEC) as i64;
    if patches
        .iter()
        .any(|p| p.addr < start || p.addr + 5 > start + len)
    {
        return Err(InstallError::Internal("patch outside libc's text"));
    }
    // SAFETY: only the protection of libc's own text pages changes; until it is restored
    // below, nothing here calls into libc (see above).
    let rc = unsafe { raw::syscall6(libc::SYS_mprotect, [range[0], range[1], rw, 0, 0, 0]) };
    if rc != 0 {
        return Err(InstallError::Mprotect(-rc as i32));
    }
    for patch in patches {
        for (i, &byte) in patch.bytes.iter().enumerate() {
            // SAFETY: the address lies in libc's text (checked above), writable now; each
            // patch overwrites exactly one whole `mov` or the entry of `syscall()`, which
            // no thread is executing (the process is single-threaded).
            unsafe { std::ptr::write_volatile((patch.addr as *mut u8).add(i), byte) };
        }
    }
    // SAFETY: restores the protection the loader gave libc's text.
    let rc = unsafe { raw::syscall6(libc::SYS_mprotect, [range[0], range[1], rx, 0, 0, 0]) };
    if rc != 0 {
        // The text stays non-executable: returning into libc would crash, so stop here
        // with a clear status instead. (This mprotect undoes the first one and cannot fail
        // short of the kernel running out of memory.)
        // SAFETY: ends the process without touching libc.
        unsafe { raw::syscall6(libc::SYS_exit_group, [127, 0, 0, 0, 0, 0]) };
    }
    Ok(())
}
