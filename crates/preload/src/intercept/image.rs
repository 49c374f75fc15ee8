//! Locating libc in memory: its executable segment and its `.eh_frame_hdr`.

use std::ffi::{c_int, c_void, CStr};

use super::InstallError;

/// libc's loaded image, as far as patching needs it.
#[derive(Debug, Clone)]
pub(crate) struct LibcImage {
    /// The path the dynamic loader recorded for libc.
    pub path: String,
    /// Load bias: runtime address = `base` + ELF virtual address.
    pub base: u64,
    /// The executable PT_LOAD segment, runtime addresses `[start, start + len)`.
    pub text_start: u64,
    pub text_len: u64,
    /// Runtime address and size of `.eh_frame_hdr`.
    pub eh_frame_hdr: u64,
    /// The read-only PT_LOAD segment holding `.eh_frame_hdr` (and, in practice, the FDEs
    /// it points at): every unwind-table read stays inside it.
    pub unwind_start: u64,
    pub unwind_len: u64,
    /// The GNU build id of libc's file (`scan_cache` keys on it).
    pub build_id: Option<Vec<u8>>,
}

impl LibcImage {
    /// The executable segment as bytes.
    pub fn text(&self) -> &'static [u8] {
        // SAFETY: the dynamic loader mapped this segment readable (r-x) for the life of the
        // process (libc is never unloaded); we only read it here, and patching happens
        // after every reader is done.
        unsafe { std::slice::from_raw_parts(self.text_start as *const u8, self.text_len as usize) }
    }

    /// The read-only segment holding the unwind tables, as bytes.
    pub fn unwind_segment(&self) -> &'static [u8] {
        // SAFETY: a PT_LOAD segment the loader mapped readable for the life of the process.
        unsafe {
            std::slice::from_raw_parts(self.unwind_start as *const u8, self.unwind_len as usize)
        }
    }
}

/// Finds the loaded object whose name contains `libc.so.6`.
pub(crate) fn find_libc() -> Result<LibcImage, InstallError> {
    let mut found: Option<Result<LibcImage, InstallError>> = None;
    // SAFETY: the callback only reads the `dl_phdr_info` the loader hands it and writes
    // through `data`, which points at `found`, alive for the whole call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut found as *mut Option<_>).cast()) };
    found.unwrap_or(Err(InstallError::LibcNotFound))
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `found` of `find_libc`, exclusively ours during the iteration;
    // `info` is valid during the callback.
    let (found, info) = unsafe {
        (
            &mut *data.cast::<Option<Result<LibcImage, InstallError>>>(),
            &*info,
        )
    };
    if info.dlpi_name.is_null() {
        return 0;
    }
    // SAFETY: a non-null dlpi_name is a NUL-terminated string owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy();
    if !name.contains("libc.so.6") {
        return 0;
    }
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: the loader gives dlpi_phnum program headers at dlpi_phdr.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    *found = Some(describe(name.into_owned(), info.dlpi_addr, phdrs));
    1
}

/// Builds the image description from libc's program headers.
fn describe(
    path: String,
    base: u64,
    phdrs: &[libc::Elf64_Phdr],
) -> Result<LibcImage, InstallError> {
    let loads = || phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD);
    let text = loads()
        .find(|p| p.p_flags & libc::PF_X != 0)
        .ok_or(InstallError::NoExecutableSegment)?;
    let hdr = phdrs
        .iter()
        .find(|p| p.p_type == libc::PT_GNU_EH_FRAME)
        .ok_or(InstallError::BadUnwindTables("no PT_GNU_EH_FRAME"))?;
    let holder = loads()
        .find(|p| p.p_vaddr <= hdr.p_vaddr && hdr.p_vaddr + hdr.p_memsz <= p.p_vaddr + p.p_filesz)
        .ok_or(InstallError::BadUnwindTables(
            "eh_frame_hdr outside any segment",
        ))?;
    Ok(LibcImage {
        path,
        base,
        text_start: base + text.p_vaddr,
        text_len: text.p_filesz,
        eh_frame_hdr: base + hdr.p_vaddr,
        unwind_start: base + holder.p_vaddr,
        unwind_len: holder.p_filesz,
        build_id: build_id(base, phdrs),
    })
}

/// The build id of the object this code is in (this library), from its notes.
pub(crate) fn own_build_id() -> Option<Vec<u8>> {
    let mut found: Option<Vec<u8>> = None;
    // SAFETY: the callback only reads the `dl_phdr_info` the loader hands it and writes
    // through `data`, which points at `found`, alive for the whole call.
    unsafe { libc::dl_iterate_phdr(Some(visit_own), (&mut found as *mut Option<_>).cast()) };
    found
}

unsafe extern "C" fn visit_own(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: as in `visit`.
    let (found, info) = unsafe { (&mut *data.cast::<Option<Vec<u8>>>(), &*info) };
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: the loader gives dlpi_phnum program headers at dlpi_phdr.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let here = own_build_id as *const () as u64;
    let holds_here = phdrs.iter().any(|p| {
        let start = info.dlpi_addr + p.p_vaddr;
        p.p_type == libc::PT_LOAD && (start..start + p.p_memsz).contains(&here)
    });
    if !holds_here {
        return 0;
    }
    *found = build_id(info.dlpi_addr, phdrs);
    1
}

/// NT_GNU_BUILD_ID from the object's PT_NOTE segments (mapped, read-only).
fn build_id(base: u64, phdrs: &[libc::Elf64_Phdr]) -> Option<Vec<u8>> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let aligned = |len: usize| len.div_ceil(4) * 4;
    phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_NOTE)
        .find_map(|note| {
            // SAFETY: a PT_NOTE segment lies inside a loaded, readable PT_LOAD segment
            // for the object's lifetime (libc and this library are never unloaded).
            let mut notes = unsafe {
                std::slice::from_raw_parts(
                    (base + note.p_vaddr) as *const u8,
                    note.p_filesz as usize,
                )
            };
            while notes.len() >= 12 {
                let word = |i: usize| {
                    u32::from_ne_bytes([notes[i], notes[i + 1], notes[i + 2], notes[i + 3]])
                };
                let (name_len, desc_len, kind) = (word(0) as usize, word(4) as usize, word(8));
                let desc_at = 12 + aligned(name_len);
                let desc = notes.get(desc_at..desc_at.checked_add(desc_len)?)?;
                if kind == NT_GNU_BUILD_ID && notes.get(12..12 + name_len) == Some(b"GNU\0") {
                    return Some(desc.to_vec());
                }
                notes = notes.get(desc_at + aligned(desc_len)..)?;
            }
            None
        })
}
