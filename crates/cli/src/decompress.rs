//! Compressed archives for `shoal import`, told apart by their magic bytes (never by a
//! file name: standard input has none): gzip, zstd and xz, each read by its own crate.

use std::io::{self, Read};

/// What an archive's first bytes say it is compressed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
    Xz,
}

/// The magic numbers: RFC 1952 (gzip), RFC 8878 (zstd frame), the xz file format 1.0.
const MAGICS: [(Compression, &[u8]); 3] = [
    (Compression::Gzip, &[0x1f, 0x8b]),
    (Compression::Zstd, &[0x28, 0xb5, 0x2f, 0xfd]),
    (Compression::Xz, &[0xfd, b'7', b'z', b'X', b'Z', 0x00]),
];

/// Bytes read ahead to recognise a format: the longest magic.
const MAGIC_BYTES: usize = 6;

impl Compression {
    pub fn of(prefix: &[u8]) -> Compression {
        MAGICS
            .iter()
            .find(|(_, magic)| prefix.starts_with(magic))
            .map_or(Compression::None, |(kind, _)| *kind)
    }
}

/// `input` decompressed as its first bytes say (or as it is, when they name no format
/// shoal knows). The bytes read to decide are put back in front.
pub fn by_magic<'a>(
    mut input: Box<dyn Read + 'a>,
) -> io::Result<(Box<dyn Read + 'a>, Compression)> {
    let prefix = read_prefix(&mut input)?;
    let kind = Compression::of(&prefix);
    let whole = io::Cursor::new(prefix).chain(input);
    let reader: Box<dyn Read + 'a> = match kind {
        Compression::None => Box::new(whole),
        // Multi-member: `cat a.gz b.gz` is one gzip stream to gzip(1), and so it is here.
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(whole)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(whole)?),
        Compression::Xz => Box::new(xz2::read::XzDecoder::new_multi_decoder(whole)),
    };
    Ok((reader, kind))
}

/// Up to `MAGIC_BYTES` from the start of `input` (fewer only at its end): a pipe may
/// hand them over in several reads.
fn read_prefix(input: &mut dyn Read) -> io::Result<Vec<u8>> {
    let mut prefix = Vec::with_capacity(MAGIC_BYTES);
    input.take(MAGIC_BYTES as u64).read_to_end(&mut prefix)?;
    Ok(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_bytes_name_the_format() {
        assert_eq!(Compression::of(&[0x1f, 0x8b, 8, 0]), Compression::Gzip);
        assert_eq!(
            Compression::of(&[0x28, 0xb5, 0x2f, 0xfd, 0]),
            Compression::Zstd
        );
        assert_eq!(Compression::of(b"\xfd7zXZ\0"), Compression::Xz);
        // The xz magic cut short is not xz; a tar header starts with a name.
        assert_eq!(Compression::of(b"\xfd7zX"), Compression::None);
        assert_eq!(Compression::of(b"./dir/"), Compression::None);
        assert_eq!(Compression::of(b""), Compression::None);
    }

    #[test]
    fn each_format_round_trips_and_plain_input_passes_through() {
        let text = b"a tar archive would be here".repeat(100);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        io::Write::write_all(&mut gz, &text).unwrap();
        let gz = gz.finish().unwrap();
        let zst = zstd::encode_all(&text[..], 3).unwrap();
        let mut xz = xz2::write::XzEncoder::new(Vec::new(), 6);
        io::Write::write_all(&mut xz, &text).unwrap();
        let xz = xz.finish().unwrap();
        for (bytes, kind) in [
            (gz, Compression::Gzip),
            (zst, Compression::Zstd),
            (xz, Compression::Xz),
            (text.clone(), Compression::None),
        ] {
            let (mut reader, found) = by_magic(Box::new(&bytes[..])).unwrap();
            assert_eq!(found, kind);
            let mut out = Vec::new();
            reader.read_to_end(&mut out).unwrap();
            assert_eq!(out, text, "{kind:?}");
        }
        // Shorter than any magic: passed through whole.
        let (mut reader, found) = by_magic(Box::new(&b"ab"[..])).unwrap();
        let mut out = Vec::new();
        reader.read_to_end(&mut out).unwrap();
        assert_eq!((out.as_slice(), found), (&b"ab"[..], Compression::None));
    }
}
