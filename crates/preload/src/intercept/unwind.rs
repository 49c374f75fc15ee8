//! Function boundaries from `.eh_frame_hdr`: its binary-search table lists the start of
//! every function that has unwind information (hidden and internal ones included), and the
//! FDE each entry points at gives the function's length.

use super::InstallError;

// DWARF pointer encodings (DW_EH_PE_*) that libc's tables use.
const PE_OMIT: u8 = 0xff;
const PE_ABSPTR: u8 = 0x00;
const PE_ULEB128: u8 = 0x01;
const PE_UDATA2: u8 = 0x02;
const PE_UDATA4: u8 = 0x03;
const PE_UDATA8: u8 = 0x04;
const PE_SLEB128: u8 = 0x09;
const PE_SDATA2: u8 = 0x0a;
const PE_SDATA4: u8 = 0x0b;
const PE_SDATA8: u8 = 0x0c;
const PE_PCREL: u8 = 0x10;
const PE_DATAREL: u8 = 0x30;
/// The table encoding this reader supports: 32-bit signed, relative to the header.
const TABLE_ENC: u8 = PE_DATAREL | PE_SDATA4;

/// A bounds-checked reader over a segment mapped at runtime address `base`.
struct Cursor<'a> {
    data: &'a [u8],
    base: u64,
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at runtime address `addr`, if it lies inside the segment.
    fn at(data: &'a [u8], base: u64, addr: u64) -> Option<Self> {
        let pos = usize::try_from(addr.checked_sub(base)?).ok()?;
        (pos <= data.len()).then_some(Cursor { data, base, pos })
    }

    fn addr(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn bytes<const N: usize>(&mut self) -> Option<[u8; N]> {
        let out: [u8; N] = self.data.get(self.pos..self.pos + N)?.try_into().ok()?;
        self.pos += N;
        Some(out)
    }

    fn u8(&mut self) -> Option<u8> {
        self.bytes::<1>().map(|b| b[0])
    }

    fn u32(&mut self) -> Option<u32> {
        self.bytes().map(u32::from_le_bytes)
    }

    fn uleb(&mut self) -> Option<u64> {
        let (mut value, mut shift) = (0u64, 0u32);
        loop {
            let byte = self.u8()?;
            value |= u64::from(byte & 0x7f).checked_shl(shift)?;
            shift += 7;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
    }

    fn sleb(&mut self) -> Option<i64> {
        let (mut value, mut shift) = (0i64, 0u32);
        loop {
            let byte = self.u8()?;
            value |= i64::from(byte & 0x7f).checked_shl(shift)?;
            shift += 7;
            if byte & 0x80 == 0 {
                if shift < 64 && byte & 0x40 != 0 {
                    value |= -1i64 << shift;
                }
                return Some(value);
            }
        }
    }

    fn cstr(&mut self) -> Option<&'a [u8]> {
        let rest = self.data.get(self.pos..)?;
        let len = rest.iter().position(|&b| b == 0)?;
        self.pos += len + 1;
        Some(&rest[..len])
    }

    /// Reads a value in DWARF pointer encoding `enc`; `datarel` is the base for
    /// DW_EH_PE_datarel (the start of `.eh_frame_hdr`).
    fn encoded(&mut self, enc: u8, datarel: u64) -> Option<u64> {
        let field = self.addr();
        let raw = match enc & 0x0f {
            PE_ABSPTR | PE_UDATA8 => u64::from_le_bytes(self.bytes()?),
            PE_ULEB128 => self.uleb()?,
            PE_UDATA2 => u64::from(u16::from_le_bytes(self.bytes()?)),
            PE_UDATA4 => u64::from(self.u32()?),
            PE_SLEB128 => self.sleb()? as u64,
            PE_SDATA2 => i16::from_le_bytes(self.bytes()?) as i64 as u64,
            PE_SDATA4 => i32::from_le_bytes(self.bytes()?) as i64 as u64,
            PE_SDATA8 => i64::from_le_bytes(self.bytes()?) as u64,
            _ => return None,
        };
        let base = match enc & 0x70 {
            0 => 0,
            PE_PCREL => field,
            PE_DATAREL => datarel,
            _ => return None,
        };
        Some(base.wrapping_add(raw))
    }
}

/// libc's functions, by start address.
pub(crate) struct FunctionTable {
    segment: &'static [u8],
    segment_base: u64,
    hdr: u64,
    /// Runtime address of the first (initial_location, fde) pair.
    table: u64,
    count: usize,
}

impl FunctionTable {
    /// Reads the header of `.eh_frame_hdr` at `hdr`, inside the segment at `segment_base`.
    pub fn new(segment: &'static [u8], segment_base: u64, hdr: u64) -> Result<Self, InstallError> {
        let bad = InstallError::BadUnwindTables;
        let mut cur =
            Cursor::at(segment, segment_base, hdr).ok_or(bad("header outside its segment"))?;
        let [version, frame_ptr_enc, count_enc, table_enc] =
            cur.bytes().ok_or(bad("short header"))?;
        if version != 1 || frame_ptr_enc == PE_OMIT || count_enc == PE_OMIT {
            return Err(bad("unsupported eh_frame_hdr version or encoding"));
        }
        if table_enc != TABLE_ENC {
            return Err(bad("search table encoding is not datarel|sdata4"));
        }
        cur.encoded(frame_ptr_enc, hdr).ok_or(bad("eh_frame_ptr"))?;
        let count = cur.encoded(count_enc, hdr).ok_or(bad("fde_count"))?;
        let count = usize::try_from(count).map_err(|_| bad("fde_count"))?;
        let table = cur.addr();
        let table_bytes = count.checked_mul(8).ok_or(bad("fde_count"))?;
        if cur.pos + table_bytes > segment.len() {
            return Err(bad("search table runs past its segment"));
        }
        Ok(FunctionTable {
            segment,
            segment_base,
            hdr,
            table,
            count,
        })
    }

    /// Entry `i` of the table: (function start, FDE address), both runtime addresses.
    fn entry(&self, i: usize) -> Option<(u64, u64)> {
        let mut cur = Cursor::at(self.segment, self.segment_base, self.table + 8 * i as u64)?;
        Some((
            cur.encoded(TABLE_ENC, self.hdr)?,
            cur.encoded(TABLE_ENC, self.hdr)?,
        ))
    }

    /// The function containing `addr`: `[start, end)`, from the last table entry starting
    /// at or before `addr` whose FDE's range covers it.
    pub fn function_at(&self, addr: u64) -> Option<(u64, u64)> {
        // The table is sorted by start address: find the first entry past `addr`.
        let (mut lo, mut hi) = (0usize, self.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.entry(mid)?.0 <= addr {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let (start, fde) = self.entry(lo.checked_sub(1)?)?;
        let len = self.fde_range(fde)?;
        let end = start.checked_add(len)?;
        (addr < end).then_some((start, end))
    }

    /// The `pc_range` of the FDE at `fde`, read with the pointer encoding its CIE declares.
    fn fde_range(&self, fde: u64) -> Option<u64> {
        let mut cur = Cursor::at(self.segment, self.segment_base, fde)?;
        if cur.u32()? == u32::MAX {
            return None; // 64-bit DWARF: libc does not use it.
        }
        let cie_field = cur.addr();
        let cie = cie_field.checked_sub(u64::from(cur.u32()?))?;
        let enc = self.cie_pointer_encoding(cie)?;
        cur.encoded(enc, self.hdr)?; // pc_begin, already known from the table
        cur.encoded(enc & 0x0f, self.hdr)
    }

    /// The FDE pointer encoding (augmentation 'R') of the CIE at `cie`; absptr if none.
    fn cie_pointer_encoding(&self, cie: u64) -> Option<u8> {
        let mut cur = Cursor::at(self.segment, self.segment_base, cie)?;
        if cur.u32()? == u32::MAX || cur.u32()? != 0 {
            return None;
        }
        let version = cur.u8()?;
        let augmentation = cur.cstr()?;
        if augmentation.first() != Some(&b'z') {
            return (augmentation.is_empty()).then_some(PE_ABSPTR);
        }
        cur.uleb()?; // code alignment
        cur.sleb()?; // data alignment
        if version == 1 {
            cur.u8()?; // return address register
        } else {
            cur.uleb()?;
        }
        cur.uleb()?; // augmentation data length
        for &letter in &augmentation[1..] {
            match letter {
                b'R' => return cur.u8(),
                b'P' => {
                    let enc = cur.u8()?;
                    cur.encoded(enc & 0x7f, self.hdr)?;
                }
                b'L' => {
                    cur.u8()?;
                }
                b'S' | b'B' | b'G' => {}
                _ => return None,
            }
        }
        Some(PE_ABSPTR)
    }
}

/// The loaded libc and its function table, for tests.
#[cfg(test)]
pub(crate) fn loaded_libc() -> (super::image::LibcImage, FunctionTable) {
    let libc_image = super::image::find_libc().unwrap();
    let table = FunctionTable::new(
        libc_image.unwind_segment(),
        libc_image.unwind_start,
        libc_image.eh_frame_hdr,
    )
    .unwrap();
    (libc_image, table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leb128_decodes_dwarf_examples() {
        let data = [0xe5, 0x8e, 0x26, 0xc0, 0xbb, 0x78, 0x7f];
        let mut cur = Cursor::at(&data, 0x1000, 0x1000).unwrap();
        assert_eq!(cur.uleb(), Some(624_485));
        assert_eq!(cur.sleb(), Some(-123_456));
        assert_eq!(cur.sleb(), Some(-1));
        assert_eq!(cur.u8(), None, "reads stop at the end of the segment");
    }

    #[test]
    fn finds_libc_functions_by_address() {
        let (libc_image, table) = loaded_libc();
        for name in [c"getppid", c"openat", c"opendir"] {
            // SAFETY: dlsym with a valid handle constant and a NUL-terminated name.
            let addr = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as u64;
            let (start, end) = table.function_at(addr).unwrap();
            assert_eq!(start, addr, "{name:?}");
            assert!(
                end > start && end - start < 4096,
                "{name:?}: {start:#x}..{end:#x}"
            );
            assert_eq!(table.function_at(addr + 1), Some((start, end)));
        }
        assert_eq!(table.function_at(libc_image.text_start - 1), None);
    }
}
