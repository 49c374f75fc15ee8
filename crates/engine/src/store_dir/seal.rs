//! What the key-value store's files held at a clean close, to notice damage that fjall
//! and lsm-tree do not: they checksum every block, but not the last bytes of a table,
//! blob or version file, nor the `current` file (a bad one they replace by themselves).
//! Nothing changes a closed store's files, so a file gone or holding other bytes at the
//! next open was damaged.
//!
//! A seal is a file's length and an XXH3 hash of its first and last `EDGE_BYTES` (the
//! whole file when it is small): the middle of a table or blob file is checksummed block
//! by block already, and reading every byte of a large store at each unmount would cost
//! too much.

use std::fmt;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// Bytes hashed at each end of a file.
const EDGE_BYTES: u64 = 4096;
/// Files this small are hashed whole.
const WHOLE_FILE_BYTES: u64 = 64 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSeal {
    /// Relative to the key-value store's folder, `/`-separated.
    pub path: String,
    pub bytes: u64,
    pub hash: u64,
}

impl fmt::Display for FileSeal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:016x} {}", self.bytes, self.hash, self.path)
    }
}

impl FileSeal {
    /// Reads what `Display` wrote.
    pub fn parse(text: &str) -> Option<FileSeal> {
        let mut fields = text.splitn(3, ' ');
        let bytes = fields.next()?.parse().ok()?;
        let hash = u64::from_str_radix(fields.next()?, 16).ok()?;
        let path = fields.next()?.to_string();
        Some(FileSeal { path, bytes, hash })
    }
}

/// Seals every file of the key-value store in `kv_dir` but its journals (checked by
/// `journal_check` and `store_state`) and its lock file.
pub fn seal_files(kv_dir: &Path) -> io::Result<Vec<FileSeal>> {
    let mut seals = Vec::new();
    let mut pending = vec![String::new()];
    while let Some(relative) = pending.pop() {
        for entry in fs::read_dir(kv_dir.join(&relative))? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = if relative.is_empty() {
                name.clone()
            } else {
                format!("{relative}/{name}")
            };
            if entry.file_type()?.is_dir() {
                pending.push(path);
            } else if relative.is_empty() && (name == "lock" || name.ends_with(".jnl")) {
                continue;
            } else {
                let (bytes, hash) = hash_edges(&entry.path())?;
                seals.push(FileSeal { path, bytes, hash });
            }
        }
    }
    seals.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(seals)
}

/// One line per sealed file that is gone or holds other bytes.
pub fn check_seals(kv_dir: &Path, seals: &[FileSeal]) -> io::Result<Vec<String>> {
    let mut problems = Vec::new();
    for seal in seals {
        let path = kv_dir.join(&seal.path);
        match hash_edges(&path) {
            Ok((bytes, hash)) if (bytes, hash) == (seal.bytes, seal.hash) => {}
            Ok((bytes, _)) => problems.push(format!(
                "{}: {bytes} bytes, {} at the last clean unmount, and other bytes \
                 (damaged or changed since)",
                path.display(),
                seal.bytes
            )),
            Err(error) if error.kind() == io::ErrorKind::NotFound => problems.push(format!(
                "{}: held {} bytes at the last clean unmount and is gone (deleted?)",
                path.display(),
                seal.bytes
            )),
            Err(error) => return Err(error),
        }
    }
    Ok(problems)
}

/// The file's length and the hash of its first and last `EDGE_BYTES`.
fn hash_edges(path: &Path) -> io::Result<(u64, u64)> {
    let mut file = fs::File::open(path)?;
    let bytes = file.metadata()?.len();
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buffer = Vec::new();
    if bytes <= WHOLE_FILE_BYTES {
        file.read_to_end(&mut buffer)?;
        hasher.update(&buffer);
    } else {
        buffer.resize(EDGE_BYTES as usize, 0);
        file.read_exact(&mut buffer)?;
        hasher.update(&buffer);
        file.seek(SeekFrom::Start(bytes - EDGE_BYTES))?;
        file.read_exact(&mut buffer)?;
        hasher.update(&buffer);
    }
    Ok((bytes, hasher.digest()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_byte_at_either_end_or_a_missing_file_breaks_the_seal() {
        let dir = tempfile::tempdir().unwrap();
        let kv = dir.path();
        fs::create_dir_all(kv.join("keyspaces/1/tables")).unwrap();
        fs::write(kv.join("0.jnl"), b"journal").unwrap();
        fs::write(kv.join("lock"), b"").unwrap();
        fs::write(kv.join("keyspaces/1/current"), b"v3").unwrap();
        let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        fs::write(kv.join("keyspaces/1/tables/7"), &big).unwrap();
        let seals = seal_files(kv).unwrap();
        let paths: Vec<_> = seals.iter().map(|seal| seal.path.as_str()).collect();
        assert_eq!(paths, ["keyspaces/1/current", "keyspaces/1/tables/7"]);
        for seal in &seals {
            assert_eq!(FileSeal::parse(&seal.to_string()).as_ref(), Some(seal));
        }
        assert!(check_seals(kv, &seals).unwrap().is_empty());
        for at in [0, big.len() - 1] {
            let mut damaged = big.clone();
            damaged[at] ^= 1;
            fs::write(kv.join("keyspaces/1/tables/7"), &damaged).unwrap();
            assert_eq!(check_seals(kv, &seals).unwrap().len(), 1, "byte {at}");
        }
        fs::write(kv.join("keyspaces/1/tables/7"), &big).unwrap();
        fs::write(kv.join("keyspaces/1/current"), b"v").unwrap();
        assert_eq!(check_seals(kv, &seals).unwrap().len(), 1);
        fs::remove_file(kv.join("keyspaces/1/current")).unwrap();
        let problems = check_seals(kv, &seals).unwrap();
        assert!(problems[0].contains("is gone"), "{problems:?}");
    }
}
