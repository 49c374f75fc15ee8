//! libshoal_preload.so: serves the file system calls of unmodified, dynamically linked
//! programs from the shoal daemon of the mount they name, without the kernel's FUSE round
//! trip (`shoal run`). Everything else, and anything it cannot serve exactly as the kernel
//! would, goes to the kernel.
//!
//! Layers, one way: `intercept` catches libc's system calls and hands them to `calls`,
//! which routes paths (`resolve`, `mounts`), keeps fast descriptors (`fds`) and asks the
//! daemon (`channel`, the wire format of `shoal_fastpath`).
//!
//! Switches (environment): `SHOAL_RUN=off` leaves every call to the kernel;
//! `SHOAL_RUN_MOUNT=PATH` serves only the mount at PATH; `SHOAL_RUN_STATS=FILE` appends
//! each process's counts to FILE at exit.

mod below;
mod calls;
mod channel;
mod fds;
pub mod intercept;
mod internal_fds;
mod listings;
mod lock_tries;
mod mounts;
mod process_state;
mod readable_pages;
mod resolve;
mod setxid;
mod spawn;
mod stats;
mod sys;
mod turns;
mod whole_file;
mod witnessed;

/// Loaded as LD_PRELOAD: set up and install the interception before main.
extern "C" fn load() {
    let env = |name: &str| {
        std::env::var_os(name)
            .map(|v| std::os::unix::ffi::OsStrExt::as_bytes(v.as_os_str()).to_vec())
    };
    // Only when preloaded (by `shoal run`, or LD_PRELOAD by hand, inherited by children):
    // not in a program that links the crate (its own tests scan and patch libc themselves).
    if cfg!(test) || !env("LD_PRELOAD").is_some_and(|v| contains(&v, b"shoal_preload")) {
        return;
    }
    if env("SHOAL_RUN").is_some_and(|v| v == b"off" || v == b"0") {
        return;
    }
    stats::configure(env("SHOAL_RUN_STATS"));
    mounts::load(env("SHOAL_RUN_MOUNT").as_deref());
    if mounts::all().is_empty() {
        return;
    }
    process_state::start();
    internal_fds::grow_table_early();
    spawn::resolve();
    setxid::resolve();
    // SAFETY: registering plain extern "C" functions with no preconditions.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        )
    };
    intercept::observe_reentered(calls::mapping_change_within, calls::MAPPING_CHANGES);
    match intercept::install(calls::handle, calls::NUMBERS) {
        Ok(_) => {}
        Err(error) => {
            process_state::turn_off();
            if env("SHOAL_RUN_STATS").is_some() {
                eprintln!("shoal run: the fast path is off in this process: {error}");
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

extern "C" fn unload() {
    stats::write_report();
}

/// Before fork: fast descriptors become kernel ones, so parent and child share them (and
/// their offsets) as the kernel shares a file description.
extern "C" fn before_fork() {
    if process_state::fast_path_on() {
        fds::all_to_kernel(false);
    }
}

extern "C" fn after_fork_parent() {}

extern "C" fn after_fork_child() {
    process_state::forked();
    stats::forget_inherited();
    below::forget_inherited();
    channel::forget_inherited();
    turns::forget_inherited();
}

#[used]
#[link_section = ".init_array"]
static LOAD: extern "C" fn() = load;

#[used]
#[link_section = ".fini_array"]
static UNLOAD: extern "C" fn() = unload;
