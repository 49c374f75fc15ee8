//! posix_spawn, posix_spawnp and vfork as the program calls them (symbol interposition):
//! fast descriptors become kernel ones in the parent before the child exists, so a child
//! that writes to an inherited descriptor moves the parent's offset, as the kernel's
//! shared file description does. (A `vfork` child shares the parent's memory but not its
//! descriptors; converting in the child would give it a file description of its own.)
//! libc's internal spawns (`system`, `popen`) are not seen here: their children convert
//! at exec, in their own descriptor table.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{fds, process_state};

static REAL_POSIX_SPAWN: AtomicUsize = AtomicUsize::new(0);
static REAL_POSIX_SPAWNP: AtomicUsize = AtomicUsize::new(0);
/// Read by `vfork`'s shim with a plain load: written once at load, before main. Not
/// exported, so the shim reaches it rip-relative.
static mut REAL_VFORK: usize = 0;

/// Finds libc's own functions (the next definitions after this library's).
pub fn resolve() {
    let next = |name: &std::ffi::CStr| {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
        unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
    };
    REAL_POSIX_SPAWN.store(next(c"posix_spawn"), Ordering::Release);
    REAL_POSIX_SPAWNP.store(next(c"posix_spawnp"), Ordering::Release);
    // SAFETY: written once, while the process has one thread, before anything reads it.
    unsafe { REAL_VFORK = next(c"vfork") };
}

extern "C" fn before_child() {
    // A program that links this crate (its tests) calls these without the loader's setup.
    // SAFETY: read of a value written once, before any child exists.
    if unsafe { REAL_VFORK } == 0 || REAL_POSIX_SPAWN.load(Ordering::Acquire) == 0 {
        resolve();
    }
    if process_state::fast_path_on() && !process_state::in_vfork_child() {
        fds::all_to_kernel(false);
    }
}

type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const libc::c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *mut libc::c_char,
    *const *mut libc::c_char,
) -> libc::c_int;

unsafe fn spawn_through(
    real: &AtomicUsize,
    pid: *mut libc::pid_t,
    path: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attributes: *const libc::posix_spawnattr_t,
    argv: *const *mut libc::c_char,
    envp: *const *mut libc::c_char,
) -> libc::c_int {
    before_child();
    let address = real.load(Ordering::Acquire);
    if address == 0 {
        return libc::ENOSYS;
    }
    // SAFETY: `address` is libc's function of this exact signature (dlsym at load).
    let real: SpawnFn = unsafe { std::mem::transmute::<usize, SpawnFn>(address) };
    // SAFETY: the program's own arguments, passed on unchanged.
    unsafe { real(pid, path, actions, attributes, argv, envp) }
}

/// # Safety
/// As posix_spawn(3).
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attributes: *const libc::posix_spawnattr_t,
    argv: *const *mut libc::c_char,
    envp: *const *mut libc::c_char,
) -> libc::c_int {
    // SAFETY: the caller's contract is posix_spawn's.
    unsafe {
        spawn_through(
            &REAL_POSIX_SPAWN,
            pid,
            path,
            actions,
            attributes,
            argv,
            envp,
        )
    }
}

/// # Safety
/// As posix_spawnp(3).
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const libc::c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attributes: *const libc::posix_spawnattr_t,
    argv: *const *mut libc::c_char,
    envp: *const *mut libc::c_char,
) -> libc::c_int {
    // SAFETY: the caller's contract is posix_spawnp's.
    unsafe {
        spawn_through(
            &REAL_POSIX_SPAWNP,
            pid,
            file,
            actions,
            attributes,
            argv,
            envp,
        )
    }
}

/// vfork(2): converts, then jumps to libc's vfork with the caller's stack exactly as it
/// was (a vfork child returns through its caller's frames, so no frame of ours may be
/// left on the stack: a naked shim, not a wrapper).
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn vfork() -> libc::pid_t {
    core::arch::naked_asm!(
        "sub rsp, 8",
        "call {convert}",
        "add rsp, 8",
        "jmp qword ptr [rip + {real}]",
        convert = sym before_child,
        real = sym REAL_VFORK,
    )
}
