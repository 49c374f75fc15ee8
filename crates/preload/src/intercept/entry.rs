//! Where intercepted calls arrive: the assembly entry that the trampolines call, the
//! `syscall()` shim, the re-entrancy guard and the dispatcher that calls the handler.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::numbers::{MAX_NR, NO_RETURN};
use super::raw;
use super::Handler;

/// The handler, set once by `install` before any site is patched.
static HANDLER: OnceLock<Handler> = OnceLock::new();

/// What sees the calls in `OBSERVED` that the handler itself makes (`observe_reentered`).
static OBSERVER: OnceLock<Handler> = OnceLock::new();
static OBSERVED: [AtomicU64; (MAX_NR / 64) as usize] = [const { AtomicU64::new(0) }; 8];

/// Bit set of the numbers routed to the handler; `syscall()` consults it because, unlike a
/// patched site, it carries every number.
static ROUTED: [AtomicU64; (MAX_NR / 64) as usize] = [const { AtomicU64::new(0) }; 8];

thread_local! {
    /// Set while this thread runs the handler: a system call made meanwhile (by the
    /// handler's own malloc, or a signal handler that interrupts it) goes to the kernel,
    /// past the observer where one watches its number (`observe_reentered`).
    /// `const` and free of `Drop`, so access is a plain TLS load with no lazy registration.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// Stores the handler; false if one was stored before.
pub(crate) fn set_handler(handler: Handler) -> bool {
    HANDLER.set(handler).is_ok()
}

/// Marks `nr` (already checked to be below `MAX_NR` and not negative) as routed.
pub(crate) fn route_number(nr: i64) {
    mark(&ROUTED, nr);
}

fn is_routed(nr: i64) -> bool {
    is_marked(&ROUTED, nr)
}

fn mark(set: &[AtomicU64; 8], nr: i64) {
    let bit = nr as u64;
    set[(bit / 64) as usize].fetch_or(1 << (bit % 64), Ordering::Relaxed);
}

fn is_marked(set: &[AtomicU64; 8], nr: i64) -> bool {
    if !(0..MAX_NR).contains(&nr) {
        return false;
    }
    let bit = nr as u64;
    set[(bit / 64) as usize].load(Ordering::Relaxed) & (1 << (bit % 64)) != 0
}

/// Stores `observer` for `numbers` (routed ones, below `MAX_NR`): see `super::observe_reentered`.
/// False if one was stored before.
pub(crate) fn set_observer(observer: Handler, numbers: &[i64]) -> bool {
    if OBSERVER.set(observer).is_err() {
        return false;
    }
    numbers.iter().for_each(|&nr| mark(&OBSERVED, nr));
    true
}

/// Sends one call to the handler, or to the kernel when this thread is already inside the
/// handler or no handler is set.
fn route(nr: i64, args: [i64; 6]) -> i64 {
    let Some(handler) = HANDLER.get() else {
        // SAFETY: the program asked for exactly this call (it reached a patched site).
        return unsafe { raw::syscall6(nr, args) };
    };
    if IN_HANDLER.get() {
        if let Some(observer) = OBSERVER.get().filter(|_| is_marked(&OBSERVED, nr)) {
            return observer(nr, args);
        }
        // SAFETY: as above; re-entered from the handler or a signal handler.
        return unsafe { raw::syscall6(nr, args) };
    }
    IN_HANDLER.set(true);
    // A panic must not unwind into libc's frames (that would abort); the program sees
    // an I/O error for this one call instead.
    let result =
        catch_unwind(AssertUnwindSafe(|| handler(nr, args))).unwrap_or(-(libc::EIO as i64));
    IN_HANDLER.set(false);
    result
}

/// The handler's way to reach the kernel; see `super::raw_syscall`.
///
/// # Safety
/// As for `raw::syscall6`.
pub(crate) unsafe fn raw_from_handler(nr: i64, args: [i64; 6]) -> i64 {
    if !(NO_RETURN.contains(&nr) && IN_HANDLER.get()) {
        // SAFETY: the caller vouches for the call.
        return unsafe { raw::syscall6(nr, args) };
    }
    // A successful execve or exit never returns, and in a vfork child the flag is the
    // parent's: clear it first so the parent resumes with its handler on.
    IN_HANDLER.set(false);
    // SAFETY: the caller vouches for the call.
    let result = unsafe { raw::syscall6(nr, args) };
    IN_HANDLER.set(true);
    result
}

/// Called by `shoal_intercept_entry` with the number and a pointer to the six argument
/// registers it saved (rdi, rsi, rdx, r10, r8, r9, in that order).
extern "C" fn dispatch(nr: i64, args: *const [i64; 6]) -> i64 {
    // SAFETY: the entry passes a pointer to six saved registers on its own stack frame,
    // valid and aligned for the whole call.
    let args = unsafe { *args };
    route(nr, args)
}

/// Where libc's `syscall()` lands (through the entry thunk, by a tail jump, so this runs
/// as `syscall()` itself with C's calling convention): routed numbers go through the
/// handler, others straight to the kernel; errors become -1 and errno as `syscall(2)` says.
extern "C" fn syscall_fn(nr: i64, a0: i64, a1: i64, a2: i64, a3: i64, a4: i64, a5: i64) -> i64 {
    let args = [a0, a1, a2, a3, a4, a5];
    let result = if is_routed(nr) {
        route(nr, args)
    } else {
        // SAFETY: the program asked for exactly this call through syscall().
        unsafe { raw::syscall6(nr, args) }
    };
    kernel_to_libc(result)
}

/// Where libc's `read` and `__read_nocancel` land when `read` is routed (their own
/// `syscall` cannot be patched: see `SkipReason::SetByXor`). Runs as `read` itself.
extern "C" fn read_fn(fd: i64, buf: i64, count: i64) -> i64 {
    kernel_to_libc(route(libc::SYS_read, [fd, buf, count, 0, 0, 0]))
}

/// The address of the `read` shim.
pub(crate) fn read_fn_address() -> u64 {
    read_fn as *const () as usize as u64
}

/// Where libc's `fchmodat` lands when fchmodat2 is routed. glibc before 2.39 emulates
/// AT_SYMLINK_NOFOLLOW with an O_PATH open, a stat and a chmod of /proc/self/fd/N, three
/// calls the handler can only send to the kernel door (tar does it for every directory it
/// makes); as the fchmodat2 call (Linux 6.6) that newer glibc makes, it is one request.
/// Flags the call rejects are left to the handler, as fchmodat2 rejects them (EINVAL).
extern "C" fn fchmodat_fn(dirfd: i64, path: i64, mode: i64, flags: i64) -> i64 {
    let result = if flags == 0 {
        route(libc::SYS_fchmodat, [dirfd, path, mode, 0, 0, 0])
    } else if flags & !i64::from(libc::AT_SYMLINK_NOFOLLOW) != 0 && !libc_passes_fchmodat2_flags() {
        // What the replaced function answers: before 2.39 glibc took NOFOLLOW alone.
        -i64::from(libc::EINVAL)
    } else {
        route(super::FCHMODAT2, [dirfd, path, mode, flags, 0, 0])
    };
    kernel_to_libc(result)
}

/// Whether this glibc (2.39 or later) hands fchmodat's flags to fchmodat2 as they are.
fn libc_passes_fchmodat2_flags() -> bool {
    static NEWER: OnceLock<bool> = OnceLock::new();
    *NEWER.get_or_init(|| {
        // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
        let version = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
        let mut parts = version.to_bytes().split(|&b| b == b'.');
        let mut number = || {
            parts
                .next()
                .and_then(|p| std::str::from_utf8(p).ok()?.parse::<u32>().ok())
                .unwrap_or(0)
        };
        (number(), number()) >= (2, 39)
    })
}

/// The address of the `fchmodat` shim.
pub(crate) fn fchmodat_fn_address() -> u64 {
    fchmodat_fn as *const () as usize as u64
}

/// Turns a kernel result into libc's: -1 with errno for -4095..=-1, the value otherwise.
extern "C" fn kernel_to_libc(result: i64) -> i64 {
    if !(-4095..0).contains(&result) {
        return result;
    }
    // SAFETY: __errno_location returns this thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = -result as i32 };
    -1
}

// The entry every trampoline calls with the system call number in eax and the arguments
// in the kernel's registers. It keeps what the `syscall` instruction keeps (every general
// register except rax, rcx, r11, and xmm0-15, which libc's compiled code may hold live
// across an inline system call), aligns the stack for Rust, clears DF as the C ABI
// requires, and returns the dispatcher's result in rax.
//
// `shoal_intercept_syscall_fn` is where libc's `syscall()` jumps. Numbers that create or
// end a process or thread, or restore a signal frame, are done right here exactly as libc
// does (no frames of ours on the stack); the rest tail-jump into `syscall_fn`.
std::arch::global_asm!(
    ".pushsection .text.shoal_intercept_entry,\"ax\",@progbits",
    ".globl shoal_intercept_entry",
    ".hidden shoal_intercept_entry",
    ".type shoal_intercept_entry,@function",
    ".p2align 4",
    "shoal_intercept_entry:",
    "push rbp",
    "mov rbp, rsp",
    "push r9",
    "push r8",
    "push r10",
    "push rdx",
    "push rsi",
    "push rdi",
    "mov rsi, rsp",
    "and rsp, -16",
    "sub rsp, 256",
    "movdqa [rsp + 0], xmm0",
    "movdqa [rsp + 16], xmm1",
    "movdqa [rsp + 32], xmm2",
    "movdqa [rsp + 48], xmm3",
    "movdqa [rsp + 64], xmm4",
    "movdqa [rsp + 80], xmm5",
    "movdqa [rsp + 96], xmm6",
    "movdqa [rsp + 112], xmm7",
    "movdqa [rsp + 128], xmm8",
    "movdqa [rsp + 144], xmm9",
    "movdqa [rsp + 160], xmm10",
    "movdqa [rsp + 176], xmm11",
    "movdqa [rsp + 192], xmm12",
    "movdqa [rsp + 208], xmm13",
    "movdqa [rsp + 224], xmm14",
    "movdqa [rsp + 240], xmm15",
    "mov edi, eax",
    "cld",
    "call {dispatch}",
    "movdqa xmm0, [rsp + 0]",
    "movdqa xmm1, [rsp + 16]",
    "movdqa xmm2, [rsp + 32]",
    "movdqa xmm3, [rsp + 48]",
    "movdqa xmm4, [rsp + 64]",
    "movdqa xmm5, [rsp + 80]",
    "movdqa xmm6, [rsp + 96]",
    "movdqa xmm7, [rsp + 112]",
    "movdqa xmm8, [rsp + 128]",
    "movdqa xmm9, [rsp + 144]",
    "movdqa xmm10, [rsp + 160]",
    "movdqa xmm11, [rsp + 176]",
    "movdqa xmm12, [rsp + 192]",
    "movdqa xmm13, [rsp + 208]",
    "movdqa xmm14, [rsp + 224]",
    "movdqa xmm15, [rsp + 240]",
    "lea rsp, [rbp - 48]",
    "pop rdi",
    "pop rsi",
    "pop rdx",
    "pop r10",
    "pop r8",
    "pop r9",
    "pop rbp",
    "ret",
    ".size shoal_intercept_entry, . - shoal_intercept_entry",
    "",
    ".globl shoal_intercept_syscall_fn",
    ".hidden shoal_intercept_syscall_fn",
    ".type shoal_intercept_syscall_fn,@function",
    ".p2align 4",
    "shoal_intercept_syscall_fn:",
    "cmp rdi, {rt_sigreturn}",
    "je 2f",
    "cmp rdi, {clone}",
    "je 2f",
    "cmp rdi, {fork}",
    "je 2f",
    "cmp rdi, {vfork}",
    "je 2f",
    "cmp rdi, {exit}",
    "je 2f",
    "cmp rdi, {exit_group}",
    "je 2f",
    "cmp rdi, {clone3}",
    "je 2f",
    "jmp {syscall_fn}",
    "2:",
    "mov rax, rdi",
    "mov rdi, rsi",
    "mov rsi, rdx",
    "mov rdx, rcx",
    "mov r10, r8",
    "mov r8, r9",
    "mov r9, [rsp + 8]",
    // A clone that shares this memory is counted while in flight, as the trampolines of
    // libc's own clone sites count it (`clones`); the child leaves the count raised.
    // A child that neither holds its parent (CLONE_VFORK) nor is its thread may run on
    // beside it: counted for good (8).
    "cmp rax, {vfork}",
    "je 5f",
    "cmp rax, {clone}",
    "jne 4f",
    "test edi, {clone_vm}",
    "jz 6f",
    "test edi, {clone_ends}",
    "jnz 5f",
    "jmp 8f",
    "4:",
    "cmp rax, {clone3}",
    "jne 6f",
    "test dword ptr [rdi], {clone_vm}",
    "jz 6f",
    "test dword ptr [rdi], {clone_ends}",
    "jnz 5f",
    "8:",
    "lock inc qword ptr [rip + {clones_in_flight}]",
    "syscall",
    "jmp 7f",
    "5:",
    "lock inc qword ptr [rip + {clones_in_flight}]",
    "syscall",
    "test rax, rax",
    "jz 7f",
    "lock dec qword ptr [rip + {clones_in_flight}]",
    "jmp 7f",
    "6:",
    "syscall",
    "7:",
    "cmp rax, -4095",
    "jae 3f",
    "ret",
    "3:",
    "mov rdi, rax",
    "jmp {kernel_to_libc}",
    ".size shoal_intercept_syscall_fn, . - shoal_intercept_syscall_fn",
    ".popsection",
    dispatch = sym dispatch,
    syscall_fn = sym syscall_fn,
    kernel_to_libc = sym kernel_to_libc,
    rt_sigreturn = const libc::SYS_rt_sigreturn,
    clone = const libc::SYS_clone,
    fork = const libc::SYS_fork,
    vfork = const libc::SYS_vfork,
    exit = const libc::SYS_exit,
    exit_group = const libc::SYS_exit_group,
    clone3 = const libc::SYS_clone3,
    clone_vm = const libc::CLONE_VM,
    clone_ends = const libc::CLONE_VFORK | libc::CLONE_THREAD,
    clones_in_flight = sym super::clones::IN_FLIGHT,
);

extern "C" {
    fn shoal_intercept_entry();
    fn shoal_intercept_syscall_fn();
}

/// The address the trampolines call.
pub(crate) fn entry_address() -> u64 {
    shoal_intercept_entry as *const () as usize as u64
}

/// The address libc's `syscall()` is redirected to.
pub(crate) fn syscall_fn_address() -> u64 {
    shoal_intercept_syscall_fn as *const () as usize as u64
}
