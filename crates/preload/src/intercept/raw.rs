//! System calls issued straight to the kernel, never through libc (whose wrappers are the
//! very code we patch).

use std::arch::asm;

/// Issues system call `nr` with six arguments and returns the kernel's result
/// (`>= 0`, or `-errno`).
///
/// # Safety
/// A system call can do anything the process can do (unmap memory, write through the
/// pointers in `args`, end the process): the caller vouches for the arguments as for the
/// same call through libc.
#[inline(always)]
pub(crate) unsafe fn syscall6(nr: i64, args: [i64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: the caller vouches for the call itself (see above); the asm follows the
    // kernel's x86_64 convention: number in rax, arguments in rdi, rsi, rdx, r10, r8, r9,
    // rcx and r11 clobbered; the kernel does not touch the user stack.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}
