//! Finding the patchable `mov $NR,%eax; ...; syscall` sequences in libc's text.
//!
//! A byte scan finds every `0f 05`; the enclosing function (from the unwind tables) is then
//! decoded from its start, so only real `syscall` instructions count. The number is the
//! immediate of the nearest `mov $imm32,%eax` before it on the straight-line path; the
//! instructions between the two must be ones a trampoline can run from anywhere.

use std::collections::{BTreeMap, VecDeque};

use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register,
};

use super::unwind::FunctionTable;

/// How far back from a `syscall` the `mov` that sets its number may be.
const MAX_LOOKBACK: usize = 6;
/// Length of `mov $imm32,%eax` (b8 imm32): exactly the `jmp rel32` that replaces it.
pub(crate) const MOV_LEN: usize = 5;

/// A sequence to patch: `mov $nr,%eax` at `mov_addr`, then `moved` (bytes of the
/// instructions the trampoline replays), then the 2-byte `syscall` at `syscall_addr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Site {
    pub nr: i64,
    pub mov_addr: u64,
    pub moved: Vec<u8>,
    pub syscall_addr: u64,
}

/// Why a real `syscall` instruction whose number is known was left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// An instruction between the `mov` and the `syscall` cannot run in a trampoline
    /// (it branches, addresses memory relative to rip, or touches rax).
    NotRelocatable,
    /// The number is set by `xor %eax,%eax` (read, number 0): two bytes, too short for a
    /// jump. The functions that do this are hooked at their entry instead.
    SetByXor,
}

/// A real `syscall` with a known number that is not patched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skipped {
    pub nr: i64,
    pub syscall_addr: u64,
    pub function: u64,
    pub reason: SkipReason,
}

/// Everything the scan found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ScanResult {
    pub sites: Vec<Site>,
    pub skipped: Vec<Skipped>,
    /// Real `syscall` instructions whose number is computed, not a nearby constant (libc's
    /// `syscall()` itself, and wrappers that take the number in a register).
    pub dynamic: Vec<u64>,
    /// `0f 05` pairs outside every function with unwind information (almost all are bytes
    /// inside other instructions; none can be proven to be code).
    pub outside_functions: usize,
}

/// Scans `text` (mapped at `text_start`) for every real `syscall` instruction.
///
/// Every process that loads the library pays for this before `main`, so it does the least
/// that proves a site: a vectorised search for the two bytes, then each function holding
/// one decoded from its start only as far as its last candidate, keeping just the few
/// instructions before each `syscall` that `classify` looks back at.
pub(crate) fn scan(text: &[u8], text_start: u64, functions: &FunctionTable) -> ScanResult {
    // Function start -> (end, address of its last `0f 05`).
    let mut by_function: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut result = ScanResult::default();
    for offset in memchr::memmem::find_iter(text, &SYSCALL_BYTES) {
        let addr = text_start + offset as u64;
        match functions.function_at(addr) {
            Some((start, end)) => {
                let last = by_function.entry(start).or_insert((end, addr));
                last.1 = last.1.max(addr);
            }
            None => match functions.function_at(addr.wrapping_sub(1)) {
                Some((start, end)) if end == addr => {
                    scan_unwound_syscall(text, text_start, start, end, &mut result)
                }
                _ => result.outside_functions += 1,
            },
        }
    }
    for (start, (end, last_candidate)) in by_function {
        // Nothing past the last candidate's two bytes can change what is found.
        let until = end.min(last_candidate + SYSCALL_BYTES.len() as u64);
        scan_function(text, text_start, start, until, &mut result);
    }
    result
}

/// `syscall`: 0f 05.
const SYSCALL_BYTES: [u8; 2] = [0x0f, 0x05];

/// Decodes `[start, until)` of one function from its start and classifies each `syscall`
/// in it, keeping only the last `MAX_LOOKBACK` instructions before it.
fn scan_function(text: &[u8], text_start: u64, start: u64, until: u64, out: &mut ScanResult) {
    let (Some(from), Some(to)) = (start.checked_sub(text_start), until.checked_sub(text_start))
    else {
        return;
    };
    let Some(bytes) = text.get(from as usize..(to as usize).min(text.len())) else {
        return;
    };
    let mut window: VecDeque<Instruction> = VecDeque::with_capacity(MAX_LOOKBACK + 1);
    for ins in Decoder::with_ip(64, bytes, start, DecoderOptions::NONE).iter() {
        if window.len() > MAX_LOOKBACK {
            window.pop_front();
        }
        window.push_back(ins);
        if ins.code() == Code::Syscall {
            let code = window.make_contiguous();
            classify(code, code.len() - 1, bytes, start, out);
        }
    }
}

/// The `syscall` at `end`, just past the unwind range of the function `[start, end)`:
/// glibc's `clone` and `clone3` end their unwind information right before it (the child's
/// would be wrong). It is a site when the function, decoded from its start, ends with
/// `mov $nr,%eax` (the `syscall` is then the instruction after it); else it counts as
/// outside every function.
fn scan_unwound_syscall(text: &[u8], text_start: u64, start: u64, end: u64, out: &mut ScanResult) {
    let bytes = start
        .checked_sub(text_start)
        .zip(end.checked_sub(text_start))
        .and_then(|(from, to)| text.get(from as usize..to as usize));
    let last = bytes.and_then(|bytes| {
        Decoder::with_ip(64, bytes, start, DecoderOptions::NONE)
            .iter()
            .last()
    });
    match last
        .filter(|ins| ins.next_ip() == end)
        .as_ref()
        .and_then(mov_eax_imm)
    {
        Some(nr) => out.sites.push(Site {
            nr,
            mov_addr: end - MOV_LEN as u64,
            moved: Vec::new(),
            syscall_addr: end,
        }),
        None => out.outside_functions += 1,
    }
}

/// Files the `syscall` at `code[j]` as a site, a skipped site, or a dynamic one.
fn classify(code: &[Instruction], j: usize, bytes: &[u8], function: u64, out: &mut ScanResult) {
    let syscall_addr = code[j].ip();
    let lowest = j.saturating_sub(MAX_LOOKBACK);
    for k in (lowest..j).rev() {
        let ins = &code[k];
        if let Some(nr) = mov_eax_imm(ins) {
            let between = &code[k + 1..j];
            if !between.iter().all(relocatable) {
                let reason = SkipReason::NotRelocatable;
                out.skipped.push(Skipped {
                    nr,
                    syscall_addr,
                    function,
                    reason,
                });
                return;
            }
            let moved_from = (ins.next_ip() - function) as usize;
            let moved_to = (syscall_addr - function) as usize;
            let moved = bytes[moved_from..moved_to].to_vec();
            out.sites.push(Site {
                nr,
                mov_addr: ins.ip(),
                moved,
                syscall_addr,
            });
            return;
        }
        if zeroes_eax(ins) {
            let reason = SkipReason::SetByXor;
            out.skipped.push(Skipped {
                nr: 0,
                syscall_addr,
                function,
                reason,
            });
            return;
        }
        if ins.flow_control() != FlowControl::Next || touches_rax(ins) {
            break;
        }
    }
    out.dynamic.push(syscall_addr);
}

/// The immediate of `mov $imm32,%eax` in its 5-byte form (b8 imm32).
fn mov_eax_imm(ins: &Instruction) -> Option<i64> {
    let is = ins.code() == Code::Mov_r32_imm32
        && ins.op0_register() == Register::EAX
        && ins.len() == MOV_LEN;
    is.then(|| i64::from(ins.immediate32()))
}

/// `xor %eax,%eax` (either encoding).
fn zeroes_eax(ins: &Instruction) -> bool {
    matches!(ins.code(), Code::Xor_rm32_r32 | Code::Xor_r32_rm32)
        && ins.op_kind(0) == OpKind::Register
        && ins.op_kind(1) == OpKind::Register
        && ins.op0_register() == Register::EAX
        && ins.op1_register() == Register::EAX
}

/// Whether a direct jump or call anywhere in `[start, end)` of `text` (mapped at
/// `text_start`) lands strictly inside `(addr, addr + len)`: code there would land in the
/// middle of a jump written at `addr`.
pub(crate) fn branch_into(
    text: &[u8],
    text_start: u64,
    (start, end): (u64, u64),
    addr: u64,
    len: u64,
) -> bool {
    let from = (start - text_start) as usize;
    let to = ((end - text_start) as usize).min(text.len());
    let Some(bytes) = text.get(from..to) else {
        return true;
    };
    Decoder::with_ip(64, bytes, start, DecoderOptions::NONE)
        .iter()
        .any(|ins| {
            (0..ins.op_count()).any(|i| {
                matches!(ins.op_kind(i), OpKind::NearBranch64)
                    && (addr + 1..addr + len).contains(&ins.near_branch_target())
            })
        })
}

/// Whether a trampoline can replay `ins` unchanged: a plain integer instruction that
/// neither branches, nor addresses memory relative to rip, nor mentions rax (which holds
/// the number by then), nor has implicit register operands.
fn relocatable(ins: &Instruction) -> bool {
    const PLAIN: [Mnemonic; 11] = [
        Mnemonic::Mov,
        Mnemonic::Movsxd,
        Mnemonic::Movzx,
        Mnemonic::Movsx,
        Mnemonic::Xor,
        Mnemonic::Lea,
        Mnemonic::And,
        Mnemonic::Or,
        Mnemonic::Add,
        Mnemonic::Sub,
        Mnemonic::Nop,
    ];
    PLAIN.contains(&ins.mnemonic())
        && ins.flow_control() == FlowControl::Next
        && !ins.is_ip_rel_memory_operand()
        && !touches_rax(ins)
}

/// Whether any explicit operand of `ins` (registers, memory base or index) is rax or a
/// part of it.
fn touches_rax(ins: &Instruction) -> bool {
    let is_rax = |reg: Register| reg != Register::None && reg.full_register() == Register::RAX;
    (0..ins.op_count()).any(|i| match ins.op_kind(i) {
        OpKind::Register => is_rax(ins.op_register(i)),
        OpKind::Memory => is_rax(ins.memory_base()) || is_rax(ins.memory_index()),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intercept::hooks::lookup;
    use crate::intercept::unwind::loaded_libc;

    #[test]
    fn finds_adjacent_and_replayed_sites_in_libc() {
        let (libc_image, table) = loaded_libc();
        let found = scan(libc_image.text(), libc_image.text_start, &table);
        // SAFETY: dlsym with a valid handle constant and a NUL-terminated name.
        let getppid = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"getppid".as_ptr()) } as u64;
        let site = found
            .sites
            .iter()
            .find(|s| s.nr == libc::SYS_getppid)
            .unwrap();
        assert_eq!(
            (site.mov_addr, site.syscall_addr, site.moved.len()),
            (getppid, getppid + 5, 0)
        );
        let replayed = found
            .sites
            .iter()
            .find(|s| s.nr == libc::SYS_openat && !s.moved.is_empty())
            .unwrap();
        assert_eq!(
            replayed.syscall_addr,
            replayed.mov_addr + 5 + replayed.moved.len() as u64
        );
        for s in &found.sites {
            // SAFETY: the site lies in libc's text, readable.
            let bytes = unsafe { std::slice::from_raw_parts(s.mov_addr as *const u8, 5) };
            assert_eq!(bytes[0], 0xb8);
            // SAFETY: as above.
            let syscall = unsafe { std::slice::from_raw_parts(s.syscall_addr as *const u8, 2) };
            assert_eq!(syscall, [0x0f, 0x05]);
        }
    }

    /// The scan as first written: every `0f 05` by a plain byte walk, each function holding
    /// one decoded whole. The shortcuts of `scan` must find exactly what this finds.
    fn scan_by_full_decode(text: &[u8], text_start: u64, table: &FunctionTable) -> ScanResult {
        let mut by_function = BTreeMap::new();
        let mut result = ScanResult::default();
        for (offset, _) in text
            .windows(2)
            .enumerate()
            .filter(|(_, w)| *w == SYSCALL_BYTES)
        {
            let addr = text_start + offset as u64;
            match table.function_at(addr) {
                Some((start, end)) => {
                    by_function.insert(start, end);
                }
                None => match table.function_at(addr - 1) {
                    Some((start, end)) if end == addr => {
                        scan_unwound_syscall(text, text_start, start, end, &mut result)
                    }
                    _ => result.outside_functions += 1,
                },
            }
        }
        for (start, end) in by_function {
            let bytes = &text[(start - text_start) as usize..(end - text_start) as usize];
            let code: Vec<Instruction> = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE)
                .iter()
                .collect();
            for (j, ins) in code.iter().enumerate() {
                if ins.code() == Code::Syscall {
                    classify(&code, j, bytes, start, &mut result);
                }
            }
        }
        result
    }

    #[test]
    fn finds_in_libc_what_a_full_decode_finds() {
        let (libc_image, table) = loaded_libc();
        let (text, start) = (libc_image.text(), libc_image.text_start);
        let fast = scan(text, start, &table);
        let full = scan_by_full_decode(text, start, &table);
        assert!(!full.sites.is_empty());
        assert_eq!(fast.sites, full.sites);
        assert_eq!(fast.skipped, full.skipped);
        assert_eq!(fast.dynamic, full.dynamic);
        assert_eq!(fast.outside_functions, full.outside_functions);
    }

    /// glibc's `clone` and `clone3` end their unwind range right before their `syscall`
    /// (the child's would be wrong); `vfork` does not. All three are found, each where
    /// its function is.
    #[test]
    fn finds_the_clone_sites_past_their_unwind_ranges() {
        let (libc_image, table) = loaded_libc();
        let found = scan(libc_image.text(), libc_image.text_start, &table);
        // libc's own, not the library's `vfork`, which this test binary links.
        let function_of = |name| table.function_at(lookup(name).unwrap()).unwrap();
        let site_in = |nr: i64, (start, end): (u64, u64)| {
            found
                .sites
                .iter()
                .any(|s| s.nr == nr && s.mov_addr >= start && s.syscall_addr <= end)
        };
        let clone = function_of(c"clone");
        assert!(
            site_in(libc::SYS_clone, clone),
            "no clone site in {clone:x?}"
        );
        let vfork = function_of(c"vfork");
        assert!(
            site_in(libc::SYS_vfork, vfork),
            "no vfork site in {vfork:x?}"
        );
        assert!(found.sites.iter().any(|s| s.nr == libc::SYS_clone3));
    }

    #[test]
    fn classifies_synthetic_code() {
        // mov $257,%eax; mov %rdi,%rsi; syscall | mov $0,%eax; lea 0(%rip),%rsi; syscall |
        // mov %edx,%eax; syscall | xor %eax,%eax; syscall
        let code = [
            0xb8, 0x01, 0x01, 0, 0, 0x48, 0x89, 0xfe, 0x0f, 0x05, //
            0xb8, 0, 0, 0, 0, 0x48, 0x8d, 0x35, 0, 0, 0, 0, 0x0f, 0x05, //
            0x89, 0xd0, 0x0f, 0x05, //
            0x31, 0xc0, 0x0f, 0x05,
        ];
        let mut out = ScanResult::default();
        let base = 0x1000;
        let decoded: Vec<Instruction> = Decoder::with_ip(64, &code, base, DecoderOptions::NONE)
            .iter()
            .collect();
        for (j, ins) in decoded.iter().enumerate() {
            if ins.code() == Code::Syscall {
                classify(&decoded, j, &code, base, &mut out);
            }
        }
        assert_eq!(out.sites.len(), 1);
        assert_eq!(
            (out.sites[0].nr, out.sites[0].moved.as_slice()),
            (257, &[0x48, 0x89, 0xfe][..])
        );
        let reasons: Vec<_> = out.skipped.iter().map(|s| (s.nr, s.reason)).collect();
        assert_eq!(
            reasons,
            [(0, SkipReason::NotRelocatable), (0, SkipReason::SetByXor)]
        );
        assert_eq!(out.dynamic, [base + 26]);
    }

    #[test]
    fn sees_branches_into_a_patch() {
        // jmp +1 (lands at 3); nop x4
        let code = [0xeb, 0x01, 0x90, 0x90, 0x90, 0x90];
        assert!(branch_into(&code, 0x1000, (0x1000, 0x1006), 0x1000, 5));
        assert!(!branch_into(&code, 0x1000, (0x1000, 0x1006), 0x1003, 2));
    }
}
