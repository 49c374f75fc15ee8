//! A tree read from the engine as a tar stream (`shoal export`).
//!
//! GNU headers (long names and link targets as GNU tar writes them), with a pax header
//! before any member that has xattrs or a time with nanoseconds, so GNU tar and `shoal
//! import` restore them (`SCHILY.xattr.*`, `mtime=secs.nanos`). Owners are numeric (no
//! user or group names), hard links are links to the first name met, sockets are skipped
//! (tar cannot store them). Names are `./` for DIR itself and `path` below it.
//!
//! Memory: one directory page per level of depth, plus the first name of every multiply
//! linked file met so far (to write the later names as links).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use shoal_engine::{DirEntry, Engine, FileKind, FsError, Inode};
use tar::{EntryType, Header};

use crate::tar_import::decode_dev;

/// Entries read from a directory at a time.
const PAGE: usize = 1024;
/// File bytes read from the engine at a time.
const READ_BYTES: u32 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{path}: {error}")]
    Engine { path: String, error: FsError },
    #[error("writing the archive: {0}")]
    Write(io::Error),
}

/// What an export wrote.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Exported {
    pub members: u64,
    pub files: u64,
    pub bytes: u64,
    /// Sockets, which tar cannot store.
    pub skipped: u64,
}

/// Writes the tree at directory `root` to `out` as a tar archive; `progress` hears the
/// members written so far.
pub fn export(
    engine: &Engine,
    root: u64,
    out: impl Write,
    progress: &mut dyn FnMut(u64),
) -> Result<Exported, ExportError> {
    let mut writer = Writer {
        engine,
        builder: tar::Builder::new(out),
        links: HashMap::new(),
        summary: Exported::default(),
    };
    let root_inode = engine.getattr(root).map_err(|error| ExportError::Engine {
        path: ".".into(),
        error,
    })?;
    if root_inode.kind != FileKind::Directory {
        return Err(ExportError::Engine {
            path: ".".into(),
            error: FsError::NotDir,
        });
    }
    writer.member(b"./", &root_inode)?;
    writer.tree(root, progress)?;
    writer.builder.finish().map_err(ExportError::Write)?;
    Ok(writer.summary)
}

struct Writer<'a, W: Write> {
    engine: &'a Engine,
    builder: tar::Builder<W>,
    /// Multiply linked files met: inode -> the member name they were written under.
    links: HashMap<u64, Vec<u8>>,
    summary: Exported,
}

/// A directory being listed: its inode, member path prefix (`a/b/`) and where its
/// listing stopped.
struct Level {
    dir: u64,
    prefix: Vec<u8>,
    page: std::vec::IntoIter<(DirEntry, Inode)>,
    /// The last name of the page, where the next one starts.
    last: Vec<u8>,
    /// Whether the page was full, so more may follow.
    more: bool,
}

impl Level {
    fn refill(&mut self, page: Vec<(DirEntry, Inode)>) {
        self.more = page.len() >= PAGE;
        if let Some((entry, _)) = page.last() {
            self.last = entry.name.clone();
        }
        self.page = page.into_iter();
    }
}

impl<W: Write> Writer<'_, W> {
    /// Every member below `root`, depth first, each directory before what it holds.
    fn tree(&mut self, root: u64, progress: &mut dyn FnMut(u64)) -> Result<(), ExportError> {
        // Below the root, names without `./`: the tar crate drops it from short names but
        // not from GNU long ones, and GNU tar, which matches names as strings, would then
        // not restore the times of a directory written under both spellings.
        let mut stack = vec![self.level(root, Vec::new())?];
        while let Some(level) = stack.last_mut() {
            let Some((entry, inode)) = level.page.next() else {
                if !level.more {
                    stack.pop();
                    continue;
                }
                let page = self.page(level.dir, &level.prefix, Some(&level.last))?;
                level.refill(page);
                continue;
            };
            let mut path = level.prefix.clone();
            path.extend_from_slice(&entry.name);
            if inode.kind == FileKind::Directory {
                path.push(b'/');
                self.member(&path, &inode)?;
                let child = self.level(inode.ino, path)?;
                stack.push(child);
            } else {
                self.member(&path, &inode)?;
            }
            progress(self.summary.members);
        }
        Ok(())
    }

    fn level(&self, dir: u64, prefix: Vec<u8>) -> Result<Level, ExportError> {
        let page = self.page(dir, &prefix, None)?;
        let mut level = Level {
            dir,
            prefix,
            page: Vec::new().into_iter(),
            last: Vec::new(),
            more: false,
        };
        level.refill(page);
        Ok(level)
    }

    fn page(
        &self,
        dir: u64,
        prefix: &[u8],
        after: Option<&[u8]>,
    ) -> Result<Vec<(DirEntry, Inode)>, ExportError> {
        self.engine
            .readdir_plus(dir, after, PAGE)
            .map_err(|error| ExportError::Engine {
                path: String::from_utf8_lossy(prefix).into_owned(),
                error,
            })
    }

    /// Writes one member: its pax records if needed, its header, its data.
    fn member(&mut self, path: &[u8], inode: &Inode) -> Result<(), ExportError> {
        let shown = || String::from_utf8_lossy(path).into_owned();
        let engine_error = |error| ExportError::Engine {
            path: shown(),
            error,
        };
        if inode.kind == FileKind::Socket {
            self.summary.skipped += 1;
            return Ok(());
        }
        if self.hard_link(path, inode)? {
            return Ok(());
        }
        self.pax_records(inode).map_err(|error| match error {
            PaxError::Engine(error) => engine_error(error),
            PaxError::Write(error) => ExportError::Write(error),
        })?;
        let write = ExportError::Write;
        match inode.kind {
            FileKind::Regular => {
                let mut header = self.header(inode, EntryType::Regular);
                header.set_size(inode.size);
                let data = FileReader {
                    engine: self.engine,
                    ino: inode.ino,
                    offset: 0,
                    size: inode.size,
                };
                self.builder
                    .append_data(&mut header, as_path(path), data)
                    .map_err(write)?;
                self.summary.files += 1;
                self.summary.bytes += inode.size;
            }
            FileKind::Symlink => {
                let target = self.engine.readlink(inode.ino).map_err(engine_error)?;
                let mut header = self.header(inode, EntryType::Symlink);
                header.set_size(0);
                self.builder
                    .append_link(&mut header, as_path(path), as_path(&target))
                    .map_err(write)?;
            }
            kind => {
                let entry_type = match kind {
                    FileKind::Directory => EntryType::Directory,
                    FileKind::CharDevice => EntryType::Char,
                    FileKind::BlockDevice => EntryType::Block,
                    _ => EntryType::Fifo,
                };
                let mut header = self.header(inode, entry_type);
                header.set_size(0);
                if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
                    let (major, minor) = decode_dev(inode.rdev);
                    header.set_device_major(major).map_err(write)?;
                    header.set_device_minor(minor).map_err(write)?;
                }
                self.builder
                    .append_data(&mut header, as_path(path), io::empty())
                    .map_err(write)?;
            }
        }
        self.summary.members += 1;
        Ok(())
    }

    /// A second name of a file already written is a link member to the first; returns
    /// whether `path` was written so.
    fn hard_link(&mut self, path: &[u8], inode: &Inode) -> Result<bool, ExportError> {
        if inode.kind == FileKind::Directory || inode.nlink <= 1 {
            return Ok(false);
        }
        let Some(first) = self.links.get(&inode.ino).cloned() else {
            self.links.insert(inode.ino, path.to_vec());
            return Ok(false);
        };
        let mut header = self.header(inode, EntryType::Link);
        header.set_size(0);
        self.builder
            .append_link(&mut header, as_path(path), as_path(&first))
            .map_err(ExportError::Write)?;
        self.summary.members += 1;
        Ok(true)
    }

    fn header(&self, inode: &Inode, entry_type: EntryType) -> Header {
        let mut header = Header::new_gnu();
        header.set_entry_type(entry_type);
        header.set_mode(u32::from(inode.perm));
        header.set_uid(u64::from(inode.uid));
        header.set_gid(u64::from(inode.gid));
        header.set_mtime(inode.mtime.secs.max(0) as u64);
        header
    }

    /// The pax header carrying a member's nanoseconds and xattrs, when it has any.
    fn pax_records(&mut self, inode: &Inode) -> Result<(), PaxError> {
        let mut records: Vec<(String, Vec<u8>)> = Vec::new();
        if inode.mtime.nanos != 0 || inode.mtime.secs < 0 {
            records.push((
                "mtime".into(),
                format!("{}.{:09}", inode.mtime.secs, inode.mtime.nanos).into_bytes(),
            ));
        }
        if inode.may_have_xattrs {
            for name in self.engine.listxattr(inode.ino).map_err(PaxError::Engine)? {
                let value = match self.engine.getxattr(inode.ino, &name) {
                    Ok(value) => value,
                    // Removed between the two reads.
                    Err(FsError::NoXattr) => continue,
                    Err(error) => return Err(PaxError::Engine(error)),
                };
                match String::from_utf8(name) {
                    Ok(name) => records.push((format!("SCHILY.xattr.{name}"), value)),
                    // A pax keyword is UTF-8; GNU tar cannot store this name either.
                    Err(_) => self.summary.skipped += 1,
                }
            }
        }
        self.builder
            .append_pax_extensions(
                records
                    .iter()
                    .map(|(key, value)| (key.as_str(), value.as_slice())),
            )
            .map_err(PaxError::Write)
    }
}

enum PaxError {
    Engine(FsError),
    Write(io::Error),
}

fn as_path(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

/// A file's bytes, read from the engine in pieces. Exactly `size` bytes: a file that
/// shrank while being read ends in zeros, as the header already promised its size.
struct FileReader<'a> {
    engine: &'a Engine,
    ino: u64,
    offset: u64,
    size: u64,
}

impl Read for FileReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let remaining = self.size - self.offset;
        if remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = remaining.min(buf.len() as u64).min(u64::from(READ_BYTES)) as usize;
        let data = self
            .engine
            .read(self.ino, self.offset, want as u32)
            .map_err(|error| io::Error::other(format!("reading inode {}: {error}", self.ino)))?;
        let got = data.len().min(want);
        buf[..got].copy_from_slice(&data[..got]);
        // Past a shrunken end: zeros up to the promised size.
        buf[got..want].fill(0);
        self.offset += want as u64;
        Ok(want)
    }
}
