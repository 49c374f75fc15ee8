//! This process and others: signals, the umask, sync, page size, clock ticks, memory.

use std::io;

use crate::c_path::check;

/// Sends `signal` to process `pid` (kill(2)).
pub fn send_signal(pid: i32, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    check(unsafe { libc::kill(pid, signal) })
}

/// Sets this process's file creation mask; returns the one it replaces.
pub fn set_umask(mask: u32) -> u32 {
    // SAFETY: umask(2) takes an integer, cannot fail and touches no memory of ours.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

/// Writes every dirty page and inode of every filesystem to its device (sync(2)).
pub fn sync_all() {
    // SAFETY: sync(2) takes nothing and cannot fail.
    unsafe { libc::sync() };
}

/// The size of a memory page in bytes.
pub fn page_bytes() -> u64 {
    // SAFETY: sysconf takes an integer name and touches no memory of ours.
    let bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    // POSIX requires the page size; 4096 is every Linux target's smallest page.
    u64::try_from(bytes).unwrap_or(4096)
}

/// The unit of the tick counts in /proc/PID/stat (USER_HZ).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf takes an integer name and touches no memory of ours.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // 100 is USER_HZ on every Linux architecture.
    u64::try_from(ticks)
        .ok()
        .filter(|&ticks| ticks > 0)
        .unwrap_or(100)
}

/// The machine's memory as sysinfo(2) reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    pub total_bytes: u64,
    /// Free plus buffers: what can be had without reclaiming the page cache.
    pub free_bytes: u64,
}

pub fn memory() -> io::Result<Memory> {
    // SAFETY: sysinfo is plain data (integers); all-zero is a valid value.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: a writable sysinfo of the right type.
    check(unsafe { libc::sysinfo(&mut info) })?;
    let unit = u64::from(info.mem_unit.max(1));
    // The field types differ between targets (u32 or u64); `as` widens on every one.
    #[allow(clippy::unnecessary_cast)]
    Ok(Memory {
        total_bytes: info.totalram as u64 * unit,
        free_bytes: (info.freeram as u64 + info.bufferram as u64) * unit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_figures_are_sane() {
        assert!(page_bytes().is_power_of_two() && page_bytes() >= 4096);
        assert!(clock_ticks_per_second() > 0);
        let memory = memory().unwrap();
        assert!(memory.total_bytes > 0 && memory.free_bytes <= memory.total_bytes);
    }

    #[test]
    fn the_umask_is_set_and_given_back_and_signal_zero_probes() {
        let old = set_umask(0o027);
        assert_eq!(set_umask(old), 0o027);
        send_signal(std::process::id() as i32, 0).unwrap();
        let gone = send_signal(i32::MAX, 0).unwrap_err();
        assert_eq!(gone.raw_os_error(), Some(libc::ESRCH));
    }
}
