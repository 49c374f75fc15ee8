//! Hooks at the entry of whole libc functions: `syscall()`, whose number is an argument,
//! and `read`, whose `syscall` is set up by a 2-byte `xor %eax,%eax` that no jump fits in.

use std::ffi::CStr;

use super::entry;
use super::image::LibcImage;
use super::report::{EntryHookReport, HookStatus};
use super::scan;
use super::unwind::FunctionTable;

/// Bytes written at a hooked entry: `jmp rel32`.
const JMP_LEN: u64 = 5;

/// A libc function to redirect, and where to.
pub(crate) struct EntryHook {
    pub name: &'static str,
    symbol: &'static CStr,
    /// The number the shim routes; None for `syscall()`.
    pub nr: Option<i64>,
    pub shim: u64,
}

/// The hooks that serve `numbers`: `syscall()` always, `read`'s two functions when read
/// is requested, `fchmodat` when fchmodat2 is.
pub(crate) fn wanted(numbers: &[i64]) -> Vec<EntryHook> {
    let mut hooks = vec![EntryHook {
        name: "syscall",
        symbol: c"syscall",
        nr: None,
        shim: entry::syscall_fn_address(),
    }];
    if numbers.contains(&libc::SYS_read) {
        let read = |name, symbol| EntryHook {
            name,
            symbol,
            nr: Some(libc::SYS_read),
            shim: entry::read_fn_address(),
        };
        hooks.push(read("read", c"read"));
        hooks.push(read("__read_nocancel", c"__read_nocancel"));
    }
    if numbers.contains(&super::FCHMODAT2) {
        hooks.push(EntryHook {
            name: "fchmodat",
            symbol: c"fchmodat",
            nr: Some(super::FCHMODAT2),
            shim: entry::fchmodat_fn_address(),
        });
    }
    hooks
}

/// The runtime address of `hook`'s function, if a jump can safely replace its first
/// bytes: it lies in libc's text, is at least 5 bytes long, starts a function in the
/// unwind tables, and no direct branch in that function lands inside those 5 bytes.
/// `hookable`: offsets in the text of functions a process of this same libc and library
/// found so (`scan_cache`): their branches need no decoding again.
pub(crate) fn locate(
    image: &LibcImage,
    table: &FunctionTable,
    hook: &EntryHook,
    hookable: &[u64],
) -> Result<u64, &'static str> {
    let addr = lookup(hook.symbol)?;
    if addr < image.text_start || addr + JMP_LEN > image.text_start + image.text_len {
        return Err("lies outside libc's text");
    }
    // The unwind tables' range, not the symbol's size: dladdr1 searches libc's symbol
    // table linearly, a tenth of a millisecond before every preloaded program's main.
    let function = table.function_at(addr).ok_or("no unwind information")?;
    if function.0 != addr {
        return Err("does not start a function in the unwind tables");
    }
    if function.1 - function.0 < JMP_LEN {
        return Err("shorter than a jump");
    }
    if !hookable.contains(&(addr - image.text_start))
        && scan::branch_into(image.text(), image.text_start, function, addr, JMP_LEN)
    {
        return Err("a branch lands inside its first 5 bytes");
    }
    Ok(addr)
}

/// The report line for `hook`, given what `locate` said.
pub(crate) fn report(
    image: &LibcImage,
    hook: &EntryHook,
    located: &Result<u64, &'static str>,
) -> EntryHookReport {
    let status = match located {
        Ok(addr) => HookStatus::Hooked {
            libc_offset: addr - image.base,
        },
        Err(why) => HookStatus::NotHooked(why),
    };
    EntryHookReport {
        function: hook.name,
        nr: hook.nr,
        status,
    }
}

/// libc's definition of `symbol` (not an interposed one: looked up in libc's handle).
pub(crate) fn lookup(symbol: &CStr) -> Result<u64, &'static str> {
    // SAFETY: dlopen with RTLD_NOLOAD only looks up the already loaded libc (adding a
    // reference, dropped below); the name is a NUL-terminated literal.
    let handle = unsafe { libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return Err("dlopen(libc.so.6) failed");
    }
    // SAFETY: `handle` is a live handle; `symbol` is NUL-terminated.
    let addr = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
    // SAFETY: drops the reference taken above; libc itself stays loaded.
    unsafe { libc::dlclose(handle) };
    if addr.is_null() {
        return Err("dlsym found nothing");
    }
    Ok(addr as u64)
}
