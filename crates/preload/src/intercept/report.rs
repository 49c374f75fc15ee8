//! What `install` did (for `shoal run --stats`), and why it could fail.

use std::fmt;

use super::image::LibcImage;
use super::numbers;
use super::scan::{ScanResult, SkipReason};

/// Why `install` patched nothing. The library should then disable itself: the program
/// runs on the kernel alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallError {
    /// `install` ran before (successfully or not).
    AlreadyInstalled,
    /// A number outside 0..512.
    BadNumber(i64),
    /// A number that must never go through a handler (clone, fork, exit, ...).
    RefusedNumber(i64),
    /// No loaded object named `libc.so.6` (a static binary, or another libc).
    LibcNotFound,
    /// libc has no executable PT_LOAD segment.
    NoExecutableSegment,
    /// libc's `.eh_frame_hdr` is missing or in a form this reader does not know.
    BadUnwindTables(&'static str),
    /// No free memory within ±2 GiB of libc for the trampolines.
    NoMemoryNearLibc,
    /// mprotect failed with this errno.
    Mprotect(i32),
    /// A consistency check of this module failed.
    Internal(&'static str),
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstallError::AlreadyInstalled => write!(f, "interception was already installed"),
            InstallError::BadNumber(nr) => write!(f, "system call number {nr} is out of range"),
            InstallError::RefusedNumber(nr) => {
                write!(
                    f,
                    "system call {} cannot be intercepted (process/thread creation or exit)",
                    label(*nr)
                )
            }
            InstallError::LibcNotFound => write!(f, "libc.so.6 is not loaded"),
            InstallError::NoExecutableSegment => write!(f, "libc has no executable segment"),
            InstallError::BadUnwindTables(what) => {
                write!(f, "libc's .eh_frame_hdr is unusable: {what}")
            }
            InstallError::NoMemoryNearLibc => {
                write!(f, "no memory free within 2 GiB of libc for trampolines")
            }
            InstallError::Mprotect(errno) => write!(f, "mprotect failed: errno {errno}"),
            InstallError::Internal(what) => write!(f, "internal error: {what}"),
        }
    }
}

impl std::error::Error for InstallError {}

/// A `syscall` instruction with a requested number that is not intercepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedSite {
    /// Offset of the `syscall` instruction from libc's load address (as in `objdump -d`).
    pub libc_offset: u64,
    /// Offset of the enclosing function's start, likewise.
    pub function_offset: u64,
    pub reason: SkipReason,
    /// The enclosing function's entry is hooked, so the call reaches the handler anyway.
    pub covered_by_entry_hook: bool,
}

/// What `install` did for one requested number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberReport {
    pub nr: i64,
    /// Sites now routed to the handler.
    pub patched: usize,
    /// Of those, sites whose trampoline replays instructions that sat between the `mov`
    /// and the `syscall`.
    pub patched_with_replay: usize,
    /// Sites left to the kernel.
    pub skipped: Vec<SkippedSite>,
}

impl NumberReport {
    /// Sites that reach neither a trampoline nor an entry hook.
    pub fn missed(&self) -> usize {
        self.skipped
            .iter()
            .filter(|s| !s.covered_by_entry_hook)
            .count()
    }
}

/// Whether a libc function's entry was redirected to a shim of ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookStatus {
    /// Its entry jumps to our shim.
    Hooked { libc_offset: u64 },
    /// Left alone, for this reason.
    NotHooked(&'static str),
}

/// A libc function hooked at its entry: `syscall()` (requested numbers reach the
/// handler), and functions whose own `syscall` cannot be patched (`read`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryHookReport {
    pub function: &'static str,
    /// The number the shim routes, or None for `syscall()` (any requested number).
    pub nr: Option<i64>,
    pub status: HookStatus,
}

/// What `install` patched and what it misses; `Display` gives the text for `--stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallReport {
    pub libc_path: String,
    /// One entry per requested number, in the order given.
    pub numbers: Vec<NumberReport>,
    /// Offsets (from libc's load address) of the `syscall` instructions whose number is
    /// computed at run time rather than set by a nearby constant; never intercepted
    /// (except `syscall()`'s own, when its entry is hooked).
    pub dynamic_sites: Vec<u64>,
    pub entry_hooks: Vec<EntryHookReport>,
    /// Bytes of trampoline code written.
    pub trampoline_bytes: usize,
}

impl InstallReport {
    /// Sites patched for `nr` (0 if it was not requested).
    pub fn patched(&self, nr: i64) -> usize {
        self.numbers
            .iter()
            .filter(|n| n.nr == nr)
            .map(|n| n.patched)
            .sum()
    }

    /// Sites with number `nr` that reach neither a trampoline nor an entry hook.
    pub fn missed(&self, nr: i64) -> usize {
        self.numbers
            .iter()
            .filter(|n| n.nr == nr)
            .map(NumberReport::missed)
            .sum()
    }

    /// Whether libc function `name` (e.g. "syscall", "read") is hooked at its entry.
    pub fn entry_hooked(&self, name: &str) -> bool {
        self.entry_hooks
            .iter()
            .any(|h| h.function == name && matches!(h.status, HookStatus::Hooked { .. }))
    }
}

/// "openat (257)" or "nr 300".
fn label(nr: i64) -> String {
    match numbers::name(nr) {
        Some(name) => format!("{name} ({nr})"),
        None => format!("nr {nr}"),
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::NotRelocatable => {
                write!(f, "an instruction between mov and syscall cannot be moved")
            }
            SkipReason::SetByXor => write!(f, "number set by a 2-byte xor, too short for a jump"),
        }
    }
}

impl fmt::Display for InstallReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "interception in {}:", self.libc_path)?;
        for n in &self.numbers {
            write!(f, "  {}: {} site(s) patched", label(n.nr), n.patched)?;
            if n.patched_with_replay > 0 {
                write!(
                    f,
                    " ({} replaying moved instructions)",
                    n.patched_with_replay
                )?;
            }
            writeln!(f, ", {} missed", n.missed())?;
            for s in &n.skipped {
                let what = if s.covered_by_entry_hook {
                    "covered by entry hook"
                } else {
                    "missed"
                };
                writeln!(
                    f,
                    "    {what}: syscall at +{:#x} in function +{:#x}: {}",
                    s.libc_offset, s.function_offset, s.reason
                )?;
            }
        }
        for hook in &self.entry_hooks {
            let routes = hook.nr.map_or_else(
                || "requested numbers go".to_string(),
                |nr| format!("{} goes", label(nr)),
            );
            match &hook.status {
                HookStatus::Hooked { libc_offset } => writeln!(
                    f,
                    "  {}() at +{libc_offset:#x}: entry hooked ({routes} to the handler)",
                    hook.function
                )?,
                HookStatus::NotHooked(why) => {
                    writeln!(f, "  {}(): not hooked: {why}", hook.function)?
                }
            }
        }
        write!(
            f,
            "  {} syscall instruction(s) with a number computed at run time, not intercepted:",
            self.dynamic_sites.len()
        )?;
        for offset in &self.dynamic_sites {
            write!(f, " +{offset:#x}")?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "  not scanned: the dynamic loader (ld.so), other libraries, the program itself, vDSO"
        )?;
        write!(f, "  trampolines: {} bytes", self.trampoline_bytes)
    }
}

/// Assembles the report from the scan, for the requested `numbers`.
pub(super) fn build(
    image: &LibcImage,
    numbers: &[i64],
    scanned: &ScanResult,
    entry_hooks: &[EntryHookReport],
    trampoline_bytes: usize,
) -> InstallReport {
    let per_number = |nr: i64| NumberReport {
        nr,
        patched: scanned.sites.iter().filter(|s| s.nr == nr).count(),
        patched_with_replay: scanned
            .sites
            .iter()
            .filter(|s| s.nr == nr && !s.moved.is_empty())
            .count(),
        skipped: scanned
            .skipped
            .iter()
            .filter(|s| s.nr == nr)
            .map(|s| SkippedSite {
                libc_offset: s.syscall_addr - image.base,
                function_offset: s.function - image.base,
                reason: s.reason,
                covered_by_entry_hook: entry_hooks.iter().any(|h| {
                    h.nr == Some(nr)
                        && h.status
                            == HookStatus::Hooked {
                                libc_offset: s.function - image.base,
                            }
                }),
            })
            .collect(),
    };
    let mut seen = Vec::new();
    let numbers = numbers.iter().filter(|nr| {
        !seen.contains(*nr) && {
            seen.push(**nr);
            true
        }
    });
    InstallReport {
        libc_path: image.path.clone(),
        numbers: numbers.map(|&nr| per_number(nr)).collect(),
        dynamic_sites: scanned.dynamic.iter().map(|a| a - image.base).collect(),
        entry_hooks: entry_hooks.to_vec(),
        trampoline_bytes,
    }
}
