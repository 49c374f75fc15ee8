//! The scan's result kept on disk, per libc and per build of this library: every
//! preloaded process would otherwise decode libc's syscall functions again before `main`
//! (0.85 ms of the 1.6 ms a process under `shoal run` spent starting on the 2-core VM; a
//! shell script or `git` starts many).
//!
//! Trust: the file lives in a directory of the process's effective user, mode 0700, and
//! is itself that user's and writable by nobody else, so only a process that could
//! already patch this one's memory could have written it. Even so, every site read back
//! is checked against libc's bytes (`mov $nr,%eax`, the replayed bytes, `syscall`) before
//! it is used; anything that does not match, or a file in another form, means a fresh
//! scan, which then replaces the file. A process that cannot read or write the cache
//! just scans.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use super::image::LibcImage;
use super::scan::{self, ScanResult, Site, SkipReason, Skipped};

/// The file's first bytes; a new layout gets a new tag.
const MAGIC: &[u8; 8] = b"SHOALSC1";
/// A larger file is not ours (libc has a few hundred syscall sites).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// What a process of the same libc and library found before.
pub(crate) struct Kept {
    pub scan: ScanResult,
    /// Offsets in the text of the functions found safe to hook at their entry (their
    /// check decodes the whole function: the decoder's tables alone take 0.4 ms to set
    /// up, which the kept scan otherwise saves).
    pub hookable: Vec<u64>,
}

/// The kept result of scanning `image`, if there is one and it matches libc's bytes.
pub(crate) fn load(image: &LibcImage) -> Option<Kept> {
    let path = file_path(image)?;
    let bytes = read_own_file(&path)?;
    let kept = decode(&bytes, image)?;
    matches_text(&kept.scan, image.text(), image.text_start).then_some(kept)
}

/// Keeps `result` and `hookable` for the next process (best effort: errors leave no file
/// behind).
pub(crate) fn store(image: &LibcImage, result: &ScanResult, hookable: &[u64]) {
    let Some(path) = file_path(image) else {
        return;
    };
    let bytes = encode(result, hookable, image);
    let temporary = path.with_extension(format!("{}.tmp", std::process::id()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&temporary)
        .and_then(|mut file| file.write_all(&bytes));
    if written
        .and_then(|()| fs::rename(&temporary, &path))
        .is_err()
    {
        let _ = fs::remove_file(&temporary);
        return;
    }
    forget_other_builds(&path);
}

/// Removes what other builds of this library kept for the same libc (each build of it
/// names a file of its own; they would pile up).
fn forget_other_builds(path: &std::path::Path) {
    let (Some(directory), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let name = name.to_string_lossy();
    let Some((libc_id, _)) = name.split_once('-') else {
        return;
    };
    let Ok(entries) = fs::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        let other = entry.file_name().to_string_lossy().into_owned();
        let same_libc = other.split_once('-').is_some_and(|(id, _)| id == libc_id);
        if same_libc && other != name && !other.ends_with(".tmp") {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// `<cache directory>/<libc build id>-<this library's build id>`; None where no private
/// directory can be had, in a setuid-like (AT_SECURE) process, or without build ids.
fn file_path(image: &LibcImage) -> Option<PathBuf> {
    // SAFETY: getauxval reads the process's auxiliary vector.
    if unsafe { libc::getauxval(libc::AT_SECURE) } != 0 {
        return None;
    }
    let libc_id = image.build_id.as_deref()?;
    let own_id = super::image::own_build_id()?;
    Some(private_directory()?.join(format!("{}-{}", hex(libc_id), hex(&own_id))))
}

/// `$XDG_RUNTIME_DIR/shoal-preload`, else (unset or unusable) `/tmp/shoal-preload-<euid>`:
/// made 0700 if missing, and used only if it is a directory of this user that nobody else
/// may enter.
fn private_directory() -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(|runtime| PathBuf::from(runtime).join("shoal-preload"));
    // A runtime directory that is gone (a session that ended) or not the user's: /tmp.
    runtime
        .into_iter()
        .chain([PathBuf::from(format!("/tmp/shoal-preload-{euid}"))])
        .find(|directory| {
            let _ = fs::DirBuilder::new().mode(0o700).create(directory);
            fs::symlink_metadata(directory)
                .is_ok_and(|meta| meta.is_dir() && meta.uid() == euid && meta.mode() & 0o077 == 0)
        })
}

/// The file's bytes, if it is a plain file of this user that nobody else may write.
fn read_own_file(path: &std::path::Path) -> Option<Vec<u8>> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = File::metadata(&file).ok()?;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != euid || meta.mode() & 0o022 != 0 {
        return None;
    }
    if meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether every site still describes libc's text: `mov $nr,%eax`, then the bytes the
/// trampoline replays, then `syscall`, all inside the text.
pub(crate) fn matches_text(result: &ScanResult, text: &[u8], text_start: u64) -> bool {
    let at = |addr: u64, len: usize| {
        let offset = usize::try_from(addr.checked_sub(text_start)?).ok()?;
        text.get(offset..offset.checked_add(len)?)
    };
    result.sites.iter().all(|site| {
        let mut mov = [0xb8u8; scan::MOV_LEN];
        let Ok(nr) = u32::try_from(site.nr) else {
            return false;
        };
        mov[1..].copy_from_slice(&nr.to_le_bytes());
        let moved_at = site.mov_addr + scan::MOV_LEN as u64;
        site.syscall_addr == moved_at + site.moved.len() as u64
            && at(site.mov_addr, scan::MOV_LEN) == Some(&mov[..])
            && at(moved_at, site.moved.len()) == Some(&site.moved[..])
            && at(site.syscall_addr, 2) == Some(&[0x0f, 0x05][..])
    })
}

/// The file's layout, every address as an offset from libc's text: MAGIC, the text's
/// length, then sites (nr, mov, syscall, replayed bytes), skipped sites (nr, syscall,
/// function, reason), dynamic sites, the count of `0f 05` outside functions, and the
/// hookable functions; each list led by its length. Integers little-endian.
fn encode(result: &ScanResult, hookable: &[u64], image: &LibcImage) -> Vec<u8> {
    let start = image.text_start;
    let mut out = MAGIC.to_vec();
    let u64_ = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
    u64_(&mut out, image.text_len);
    u64_(&mut out, result.sites.len() as u64);
    for site in &result.sites {
        u64_(&mut out, site.nr as u64);
        u64_(&mut out, site.mov_addr - start);
        u64_(&mut out, site.syscall_addr - start);
        u64_(&mut out, site.moved.len() as u64);
        out.extend_from_slice(&site.moved);
    }
    u64_(&mut out, result.skipped.len() as u64);
    for skipped in &result.skipped {
        u64_(&mut out, skipped.nr as u64);
        u64_(&mut out, skipped.syscall_addr - start);
        u64_(&mut out, skipped.function - start);
        u64_(
            &mut out,
            match skipped.reason {
                SkipReason::NotRelocatable => 0,
                SkipReason::SetByXor => 1,
            },
        );
    }
    u64_(&mut out, result.dynamic.len() as u64);
    for &addr in &result.dynamic {
        u64_(&mut out, addr - start);
    }
    u64_(&mut out, result.outside_functions as u64);
    u64_(&mut out, hookable.len() as u64);
    for &offset in hookable {
        u64_(&mut out, offset);
    }
    out
}

/// `encode`'s inverse; None for anything else (another layout, another libc's length, a
/// cut or overlong file).
fn decode(bytes: &[u8], image: &LibcImage) -> Option<Kept> {
    let mut reader = Reader(bytes.strip_prefix(MAGIC)?);
    let start = image.text_start;
    let address = |offset: u64| (offset < image.text_len).then_some(start + offset);
    if reader.u64()? != image.text_len {
        return None;
    }
    let mut result = ScanResult::default();
    for _ in 0..reader.count()? {
        let nr = reader.u64()? as i64;
        let mov_addr = address(reader.u64()?)?;
        let syscall_addr = address(reader.u64()?)?;
        let moved_len = usize::try_from(reader.u64()?).ok()?;
        let moved = reader.bytes(moved_len)?.to_vec();
        result.sites.push(Site {
            nr,
            mov_addr,
            moved,
            syscall_addr,
        });
    }
    for _ in 0..reader.count()? {
        let nr = reader.u64()? as i64;
        let syscall_addr = address(reader.u64()?)?;
        let function = address(reader.u64()?)?;
        let reason = match reader.u64()? {
            0 => SkipReason::NotRelocatable,
            1 => SkipReason::SetByXor,
            _ => return None,
        };
        result.skipped.push(Skipped {
            nr,
            syscall_addr,
            function,
            reason,
        });
    }
    for _ in 0..reader.count()? {
        result.dynamic.push(address(reader.u64()?)?);
    }
    result.outside_functions = usize::try_from(reader.u64()?).ok()?;
    let mut hookable = Vec::new();
    for _ in 0..reader.count()? {
        let offset = reader.u64()?;
        address(offset)?;
        hookable.push(offset);
    }
    reader.0.is_empty().then_some(Kept {
        scan: result,
        hookable,
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, len: usize) -> Option<&'a [u8]> {
        let (taken, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        Some(taken)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }

    /// A list's length, bounded by what the rest of the file could hold (8 bytes or more
    /// per element).
    fn count(&mut self) -> Option<usize> {
        let count = usize::try_from(self.u64()?).ok()?;
        (count <= self.0.len() / 8).then_some(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intercept::unwind::loaded_libc;

    #[test]
    fn a_kept_scan_reads_back_as_it_was_and_matches_libc() {
        let (image, table) = loaded_libc();
        let scanned = scan::scan(image.text(), image.text_start, &table);
        assert!(!scanned.sites.is_empty());
        let decoded = decode(&encode(&scanned, &[16, 32], &image), &image).expect("decodes");
        assert_eq!(decoded.scan, scanned);
        assert_eq!(decoded.hookable, [16, 32]);
        assert!(matches_text(&decoded.scan, image.text(), image.text_start));
    }

    #[test]
    fn a_cut_a_foreign_or_a_lying_file_is_not_used() {
        let (image, table) = loaded_libc();
        let scanned = scan::scan(image.text(), image.text_start, &table);
        let bytes = encode(&scanned, &[], &image);
        for cut in [0, 7, 8, 16, bytes.len() / 2, bytes.len() - 1] {
            assert!(decode(&bytes[..cut], &image).is_none(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer, &image).is_none());
        let mut other_layout = bytes.clone();
        other_layout[7] = b'9';
        assert!(decode(&other_layout, &image).is_none());
        // A site moved by one byte, or given another number, decodes but no longer
        // describes libc's bytes.
        let mut moved = decode(&bytes, &image).expect("decodes").scan;
        moved.sites[0].mov_addr += 1;
        moved.sites[0].syscall_addr += 1;
        assert!(!matches_text(&moved, image.text(), image.text_start));
        let mut renumbered = decode(&bytes, &image).expect("decodes").scan;
        renumbered.sites[0].nr += 1;
        assert!(!matches_text(&renumbered, image.text(), image.text_start));
        // An offset past libc's text is refused while reading.
        let mut past = bytes.clone();
        let first_mov = MAGIC.len() + 8 + 8 + 8;
        past[first_mov..first_mov + 8].copy_from_slice(&image.text_len.to_le_bytes());
        assert!(decode(&past, &image).is_none());
    }
}
