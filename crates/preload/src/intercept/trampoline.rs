//! Trampolines: code placed within ±2 GiB of libc so that a 5-byte `jmp rel32` in libc can
//! reach it and it can jump back.

use super::scan::Site;
use super::InstallError;

/// Bytes of a trampoline besides the replayed instructions (see `emit_site`).
const SITE_FIXED_LEN: usize = 5 + 5 + 10 + 3 + 8 + 5;
/// `clone_block_len`'s part for one site: the counted call, from the first `movabs` to
/// the `lock decq`.
const CLONE_COUNTED_LEN: usize = 10 + 4 + 2 + 3 + 2 + 6 + 2 + 10 + 4;
/// `mov $nr,%eax`, the test of CLONE_VM and its `jz`, the jump back after the counted
/// call, and the plain call with its jump back.
const CLONE_FIXED_LEN: usize = 5 + 6 + 2 + CLONE_COUNTED_LEN + JMP_REL32_LEN + 2 + JMP_REL32_LEN;
const JMP_REL32_LEN: usize = 5;
/// `jmp *0(%rip)` followed by the 8-byte target.
const ABS_JMP_LEN: usize = 14;
const PAGE: u64 = 4096;
/// Spacing of the addresses tried around libc, and how many on each side.
const STEP: u64 = 16 << 20;
const TRIES: u64 = 96;
/// Reach of a rel32 displacement, with a margin.
const REACH: u64 = (1 << 31) - (1 << 20);
const MAP_FIXED_NOREPLACE: i32 = 0x10_0000;

/// A block of memory near libc holding the trampolines.
pub(crate) struct Block {
    addr: u64,
    len: usize,
    code: Vec<u8>,
}

impl Block {
    /// Maps `len` bytes (rounded up to pages) such that every byte is within `REACH` of
    /// every byte of `[lo, hi)`.
    pub fn near(lo: u64, hi: u64, len: usize) -> Result<Block, InstallError> {
        let len = (len as u64).div_ceil(PAGE) * PAGE;
        let below =
            (1..=TRIES).filter_map(|i| lo.checked_sub(i * STEP + len).map(|a| a & !(PAGE - 1)));
        let above = (1..=TRIES).map(|i| (hi + i * STEP).div_ceil(PAGE) * PAGE);
        for hint in below.zip(above).flat_map(|(b, a)| [b, a]) {
            let fits = hint.max(hi) - hint.min(lo) + len < REACH;
            if !fits {
                continue;
            }
            if let Some(addr) = map_at(hint, len as usize) {
                return Ok(Block {
                    addr,
                    len: len as usize,
                    code: Vec::with_capacity(len as usize),
                });
            }
        }
        Err(InstallError::NoMemoryNearLibc)
    }

    /// Where the next emitted byte will run.
    pub fn cursor(&self) -> u64 {
        self.addr + self.code.len() as u64
    }

    /// Appends what every site's trampoline starts with, `mov $nr,%eax; <moved>`, and
    /// returns its address.
    fn emit_number_and_moved(&mut self, site: &Site) -> Result<u64, InstallError> {
        let start = self.cursor();
        let nr = u32::try_from(site.nr).map_err(|_| InstallError::BadNumber(site.nr))?;
        self.code.push(0xb8);
        self.code.extend_from_slice(&nr.to_le_bytes());
        self.code.extend_from_slice(&site.moved);
        Ok(start)
    }

    /// Appends the trampoline for `site`, calling `entry`, and returns its address:
    /// `mov $nr,%eax; <moved>; lea -128(%rsp),%rsp; movabs $entry,%r11; call *%r11;
    /// lea 128(%rsp),%rsp; jmp syscall+2`. The red zone below rsp may hold live data of
    /// the patched function, hence the 128 bytes; r11 is free (the kernel clobbers it).
    pub fn emit_site(&mut self, site: &Site, entry: u64) -> Result<u64, InstallError> {
        let start = self.emit_number_and_moved(site)?;
        self.code.extend_from_slice(&[0x48, 0x8d, 0x64, 0x24, 0x80]);
        self.code.extend_from_slice(&[0x49, 0xbb]);
        self.code.extend_from_slice(&entry.to_le_bytes());
        self.code.extend_from_slice(&[0x41, 0xff, 0xd3]);
        self.code
            .extend_from_slice(&[0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00]);
        let jmp = jmp_rel32(self.cursor(), site.syscall_addr + 2)?;
        self.code.extend_from_slice(&jmp);
        Ok(start)
    }

    /// Appends the trampoline for a `clone`, `clone3` or `vfork` site (`clones`), which
    /// counts the call in the 8 bytes at `counter` while it is in flight when the child
    /// shares this memory, and returns its address. It calls nothing and touches no stack
    /// (a child comes back through it on its own stack), only r11, which the kernel
    /// clobbers anyway:
    /// `mov $nr,%eax; <moved>; [test $CLONE_VM,%edi | test $CLONE_VM,(%rdi); jz plain;]
    /// movabs $counter,%r11; lock incq (%r11); syscall; test %rax,%rax; jz back;
    /// [test $(CLONE_VFORK|CLONE_THREAD),... ; jz back;]
    /// movabs $counter,%r11; lock decq (%r11); back: jmp syscall+2;
    /// plain: syscall; jmp syscall+2`. The child (rax 0) leaves the count raised, and so
    /// does the parent of a child that may run on beside it.
    pub fn emit_clone_site(&mut self, site: &Site, counter: u64) -> Result<u64, InstallError> {
        let start = self.emit_number_and_moved(site)?;
        // `test $imm32,%edi` (clone's flags) or `testl $imm32,(%rdi)` (clone3's), of
        // CLONE_VM, then of CLONE_VFORK | CLONE_THREAD.
        let (vm_test, ends_test): (&[u8], &[u8]) = match site.nr {
            libc::SYS_clone => (
                &[0xf7, 0xc7, 0x00, 0x01, 0x00, 0x00],
                &[0xf7, 0xc7, 0x00, 0x40, 0x01, 0x00],
            ),
            libc::SYS_clone3 => (
                &[0xf7, 0x07, 0x00, 0x01, 0x00, 0x00],
                &[0xf7, 0x07, 0x00, 0x40, 0x01, 0x00],
            ),
            libc::SYS_vfork => (&[], &[]),
            _ => {
                return Err(InstallError::Internal(
                    "a clone trampoline for another call",
                ))
            }
        };
        const _: () = assert!(libc::CLONE_VM == 0x100);
        const _: () = assert!(libc::CLONE_VFORK | libc::CLONE_THREAD == 0x1_4000);
        let movabs_counter = |code: &mut Vec<u8>| {
            code.extend_from_slice(&[0x49, 0xbb]);
            code.extend_from_slice(&counter.to_le_bytes());
        };
        let mut counted = Vec::with_capacity(CLONE_COUNTED_LEN);
        movabs_counter(&mut counted);
        counted.extend_from_slice(&[0xf0, 0x49, 0xff, 0x03]);
        counted.extend_from_slice(&[0x0f, 0x05]);
        counted.extend_from_slice(&[0x48, 0x85, 0xc0]);
        // The child: jz over the decrement (the ends test and its jz, movabs 10, lock
        // decq 4).
        let ends_len = if ends_test.is_empty() {
            0
        } else {
            ends_test.len() + 2
        };
        counted.extend_from_slice(&[0x74, (ends_len + 14) as u8]);
        if !ends_test.is_empty() {
            // A child that neither holds its parent (CLONE_VFORK) nor is its thread may
            // run on, sharing the memory, after the call returns: counted for good.
            counted.extend_from_slice(ends_test);
            counted.extend_from_slice(&[0x74, 14]);
        }
        movabs_counter(&mut counted);
        counted.extend_from_slice(&[0xf0, 0x49, 0xff, 0x0b]);
        if !vm_test.is_empty() {
            self.code.extend_from_slice(vm_test);
            // jz over the counted call and its jump back.
            self.code
                .extend_from_slice(&[0x74, (counted.len() + JMP_REL32_LEN) as u8]);
        }
        self.code.extend_from_slice(&counted);
        let back = jmp_rel32(self.cursor(), site.syscall_addr + 2)?;
        self.code.extend_from_slice(&back);
        if !vm_test.is_empty() {
            self.code.extend_from_slice(&[0x0f, 0x05]);
            let back = jmp_rel32(self.cursor(), site.syscall_addr + 2)?;
            self.code.extend_from_slice(&back);
        }
        Ok(start)
    }

    /// Appends `jmp *0(%rip)` to `target` (an address anywhere) and returns its address.
    pub fn emit_abs_jmp(&mut self, target: u64) -> u64 {
        let start = self.cursor();
        self.code.extend_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
        self.code.extend_from_slice(&target.to_le_bytes());
        start
    }

    /// Copies the code in and makes the block read-only and executable (never both
    /// writable and executable).
    pub fn seal(self) -> Result<usize, InstallError> {
        if self.code.len() > self.len {
            return Err(InstallError::Internal("trampolines overflow their block"));
        }
        // SAFETY: `addr..addr+len` is our own fresh read-write mapping, `code` fits in it,
        // and nothing runs from it yet.
        unsafe {
            std::ptr::copy_nonoverlapping(self.code.as_ptr(), self.addr as *mut u8, self.code.len())
        };
        // SAFETY: changes the protection of our own mapping only.
        let rc = unsafe {
            libc::mprotect(
                self.addr as *mut _,
                self.len,
                libc::PROT_READ | libc::PROT_EXEC,
            )
        };
        if rc != 0 {
            return Err(InstallError::Mprotect(
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            ));
        }
        Ok(self.code.len())
    }
}

/// Size of the block for `sites` plus `abs_jmps` absolute jumps.
pub(crate) fn block_len(sites: &[Site], abs_jmps: usize) -> usize {
    sites
        .iter()
        .map(|s| SITE_FIXED_LEN + s.moved.len())
        .sum::<usize>()
        + abs_jmps * ABS_JMP_LEN
}

/// Size of the block's part for the clone sites `sites` (`emit_clone_site`).
pub(crate) fn clone_block_len(sites: &[Site]) -> usize {
    sites.iter().map(|s| CLONE_FIXED_LEN + s.moved.len()).sum()
}

/// `jmp rel32` placed at `from` and landing on `to`, if in reach.
pub(crate) fn jmp_rel32(from: u64, to: u64) -> Result<[u8; 5], InstallError> {
    let delta = (to as i64).wrapping_sub(from as i64 + 5);
    let rel = i32::try_from(delta).map_err(|_| InstallError::NoMemoryNearLibc)?;
    let [a, b, c, d] = rel.to_le_bytes();
    Ok([0xe9, a, b, c, d])
}

/// Maps `len` read-write bytes exactly at `hint`, or nothing.
fn map_at(hint: u64, len: usize) -> Option<u64> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; a kernel that predates
    // it treats the address as a hint, and any other placement is unmapped below.
    let got = unsafe { libc::mmap(hint as *mut _, len, prot, flags, -1, 0) };
    if got == libc::MAP_FAILED {
        return None;
    }
    if got as u64 != hint {
        // SAFETY: `got` is the mapping just made, unused.
        unsafe { libc::munmap(got, len) };
        return None;
    }
    Some(hint)
}
