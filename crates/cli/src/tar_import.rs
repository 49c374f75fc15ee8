//! A tar stream applied to the engine in large batches (`shoal import`).
//!
//! The archive is read as it arrives (ustar, pax and GNU as GNU tar writes them: long
//! names, hard links, symlinks, devices, fifos, `SCHILY.xattr.*`, nanosecond times) and
//! turned into `BulkOp`s, applied `BATCH_OPS` or `BATCH_BYTES` at a time, into a staged
//! tree that has no name (see the engine's `bulk`). Only a complete archive is named, in
//! one batch; a bad or truncated one is abandoned to the reclaimer, so no half-imported
//! tree is ever visible, even after a crash.
//!
//! What it restores is what `tar xf` run by root restores: kinds, permission bits
//! (setuid and all), numeric owners, mtimes to the nanosecond, xattrs, hard links.
//! Differences: owners are the archive's numbers (as `--numeric-owner`), atimes are the
//! time of the import (as tar leaves them), and xattrs outside `user.`, `trusted.`,
//! `security.` and the POSIX ACLs are skipped (counted in the summary).
//!
//! The archive is read and turned into batches on the calling thread while a second
//! thread applies the batch before (`apply_batches`): reading, parsing and copying file
//! data overlap with building and committing the engine's batches. A batch refers to what
//! the one before it made through `NodeRef::Earlier`, so it can be built before that one
//! is applied.
//!
//! Memory: two batches (one being built, one being applied), plus one map entry per
//! directory of the archive (names resolve to directories through it; a hard link's target
//! is found through its directory).

use std::collections::HashMap;
use std::io::{self, Read};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use shoal_engine::defaults::{BATCH_BYTES, BATCH_OPS};
use shoal_engine::{BulkAttrs, BulkOp, Engine, FileKind, FsError, NodeRef, SharedBytes, Timestamp};
use tar::EntryType;

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{0} already exists")]
    Exists(String),
    #[error("{path}: {error}")]
    Target { path: String, error: FsError },
    #[error("reading the archive: {} (bad or truncated archive?)", readable(.0))]
    Archive(io::Error),
    #[error("archive member {path:?}: {problem}")]
    Member { path: String, problem: String },
    #[error("archive member {path:?}: {error}")]
    Apply { path: String, error: FsError },
    #[error("{0}")]
    Engine(FsError),
    #[error("cannot start the thread applying the archive: {0}")]
    ApplierStart(io::Error),
    #[error("the thread applying the archive stopped")]
    ApplierStopped,
}

/// An archive error's text fit for a terminal: the tar parser quotes the bytes it could
/// not read, which for garbage are anything.
fn readable(error: &io::Error) -> String {
    const LIMIT: usize = 160;
    let text = error.to_string();
    let mut shown: String = text
        .chars()
        .take(LIMIT)
        .map(|c| {
            if c.is_control() || c == char::REPLACEMENT_CHARACTER {
                '?'
            } else {
                c
            }
        })
        .collect();
    if text.chars().count() > LIMIT {
        shown.push_str("...");
    }
    shown
}

/// What an import brought in.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Imported {
    /// Archive members applied (the root's own `./` included).
    pub members: u64,
    pub files: u64,
    pub bytes: u64,
    /// Xattrs whose namespace shoal does not store.
    pub skipped_xattrs: u64,
}

/// Imports the archive `input` as the new directory `parent/name`; `root_attrs` are the
/// directory's attributes unless the archive has a `./` member. `progress` hears the
/// members applied so far after each batch.
pub fn import(
    engine: &Arc<Engine>,
    parent: u64,
    name: &[u8],
    root_attrs: BulkAttrs,
    input: impl Read,
    progress: &mut dyn FnMut(u64),
) -> Result<Imported, ImportError> {
    let shown = String::from_utf8_lossy(name).into_owned();
    match engine.lookup(parent, name) {
        Ok(_) => return Err(ImportError::Exists(shown)),
        Err(FsError::NotFound) => {}
        Err(error) => return Err(ImportError::Target { path: shown, error }),
    }
    let root = engine
        .stage_tree(parent, &root_attrs)
        .map_err(ImportError::Engine)?;
    let loaded =
        load_beside_applier(engine, root, root_attrs, input, progress).and_then(|summary| {
            engine
                .attach_tree(root, parent, name)
                .map_err(|error| ImportError::Target {
                    path: shown.clone(),
                    error,
                })?;
            Ok(summary)
        });
    if loaded.is_err() {
        engine.abandon_tree(root);
    }
    loaded
}

/// Reads the archive into the staged tree `root`, its batches applied by a second thread;
/// returns once every batch is applied (or one failed, and the applier has stopped).
fn load_beside_applier(
    engine: &Engine,
    root: u64,
    root_attrs: BulkAttrs,
    input: impl Read,
    progress: &mut dyn FnMut(u64),
) -> Result<Imported, ImportError> {
    // Bounds: the loader sends a batch only once the applier has answered for the one
    // before (see `Loader::collect`), so each channel holds at most one message.
    let (batches, to_apply) = mpsc::sync_channel(1);
    let (answer, answers) = mpsc::sync_channel(1);
    std::thread::scope(|scope| {
        let applier = std::thread::Builder::new()
            .name("shoal-import".into())
            .spawn_scoped(scope, move || apply_batches(engine, &to_apply, &answer))
            .map_err(ImportError::ApplierStart)?;
        let mut loader = Loader::new(engine, root, root_attrs, batches, answers);
        let loaded = loader
            .load(input, progress)
            .and_then(|()| loader.finish())
            .map(|()| loader.summary);
        // Closes the batch channel: the applier ends after the batch in hand.
        drop(loader);
        applier.join().map_err(|_| ImportError::ApplierStopped)?;
        loaded
    })
}

/// A batch on its way to the applier, with the archive member each operation comes from
/// (for error messages).
struct Batch {
    ops: Vec<BulkOp>,
    members: Vec<Arc<str>>,
}

/// What the applier answers for each batch: the inodes it made (see `Engine::apply`).
type Applied = Result<Vec<u64>, ImportError>;

/// The applier thread: applies each batch, `NodeRef::Earlier` resolved through the one
/// before, and answers for it; stops at the first failure.
fn apply_batches(engine: &Engine, batches: &Receiver<Batch>, answers: &SyncSender<Applied>) {
    let mut earlier = Vec::new();
    for Batch { ops, members } in batches {
        let applied = engine
            .apply_after(ops, &earlier)
            .map_err(|failure| ImportError::Apply {
                path: members
                    .get(failure.op)
                    .map_or_else(String::new, |member| member.to_string()),
                error: failure.error,
            });
        let failed = applied.is_err();
        if let Ok(made) = &applied {
            earlier.clone_from(made);
        }
        if answers.send(applied).is_err() || failed {
            return;
        }
    }
}

/// A directory of the archive, by its path below the root.
struct Dir {
    node: NodeRef,
    /// Attributes to set once everything is in it (tar sets directory times last).
    attrs: BulkAttrs,
}

struct Loader<'a> {
    engine: &'a Engine,
    dirs: HashMap<Vec<u8>, Dir>,
    /// Directories made in the batch being built (`NodeRef::New`).
    new_dirs: Vec<Vec<u8>>,
    /// Directories made in the batch the applier has (`NodeRef::Earlier`), resolved to
    /// inodes once it answers.
    sent_dirs: Vec<Vec<u8>>,
    ops: Vec<BulkOp>,
    /// The archive member each operation comes from, for error messages.
    op_members: Vec<Arc<str>>,
    ops_bytes: usize,
    batches: SyncSender<Batch>,
    answers: Receiver<Applied>,
    /// A batch was sent and not yet answered for.
    in_flight: bool,
    /// Attributes of directories the archive creates implicitly (`a/b/c` without `a/`).
    implicit: BulkAttrs,
    summary: Imported,
}

impl<'a> Loader<'a> {
    fn new(
        engine: &'a Engine,
        root: u64,
        root_attrs: BulkAttrs,
        batches: SyncSender<Batch>,
        answers: Receiver<Applied>,
    ) -> Self {
        let mut dirs = HashMap::new();
        dirs.insert(
            Vec::new(),
            Dir {
                node: NodeRef::Ino(root),
                attrs: root_attrs,
            },
        );
        Loader {
            engine,
            dirs,
            new_dirs: Vec::new(),
            sent_dirs: Vec::new(),
            ops: Vec::new(),
            op_members: Vec::new(),
            ops_bytes: 0,
            batches,
            answers,
            in_flight: false,
            implicit: root_attrs,
            summary: Imported::default(),
        }
    }

    fn load(&mut self, input: impl Read, progress: &mut dyn FnMut(u64)) -> Result<(), ImportError> {
        let mut archive = tar::Archive::new(input);
        let entries = archive.entries().map_err(ImportError::Archive)?;
        for entry in entries {
            let mut entry = entry.map_err(ImportError::Archive)?;
            self.member(&mut entry)?;
            progress(self.summary.members);
        }
        // The end-of-archive blocks and tar's padding to its record size: read them, so
        // the sender is not cut off mid-write.
        let mut rest = archive.into_inner();
        io::copy(&mut rest, &mut io::sink()).map_err(ImportError::Archive)?;
        self.flush()?;
        progress(self.summary.members);
        Ok(())
    }

    /// Gives every directory its attributes, then applies the last batch and waits for
    /// the applier to be done.
    fn finish(&mut self) -> Result<(), ImportError> {
        let member: Arc<str> = Arc::from("(directory attributes)");
        let paths: Vec<Vec<u8>> = self.dirs.keys().cloned().collect();
        for path in paths {
            // Read after `make_room`: a flush moves the directory's reference along.
            self.make_room(std::mem::size_of::<BulkOp>())?;
            if let Some(dir) = self.dirs.get(&path) {
                let op = BulkOp::Attrs {
                    node: dir.node,
                    attrs: dir.attrs,
                };
                self.push(op, &member);
            }
        }
        self.flush()?;
        self.collect().map(|_| ())
    }

    fn member<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<(), ImportError> {
        let raw_path = entry.path_bytes().into_owned();
        let shown: Arc<str> = Arc::from(String::from_utf8_lossy(&raw_path).as_ref());
        let problem = |problem: &str| ImportError::Member {
            path: shown.to_string(),
            problem: problem.to_string(),
        };
        let kind = entry.header().entry_type();
        if matches!(kind, EntryType::XGlobalHeader) {
            return Ok(());
        }
        let path = normalize(&raw_path).map_err(&problem)?;
        let meta = Meta::read(entry).map_err(ImportError::Archive)?;
        if meta.sparse {
            return Err(problem(
                "pax sparse files (tar -S --format=posix) are not supported",
            ));
        }
        let attrs = meta.attrs;
        self.summary.members += 1;
        if path.is_empty() {
            // The archive's `./`: the imported directory itself.
            if let Some(root) = self.dirs.get_mut(&Vec::new()) {
                root.attrs = attrs;
            }
            return self.xattrs(NodeRef::Ino(self.root_ino()), &meta.xattrs, &shown);
        }
        let (dir_path, name) = split_last(&path);
        self.directory(dir_path, &shown)?;
        let node = match kind {
            EntryType::Directory => {
                let node = self.make_plain(dir_path, name, FileKind::Directory, attrs, &shown)?;
                self.add_dir(path.clone(), node, attrs);
                node
            }
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                let node = self.make_plain(dir_path, name, FileKind::Regular, attrs, &shown)?;
                // Its data may cut batches: the xattrs below refer to it as the last has.
                self.data(entry, node, &shown)?
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| problem("symlink without a target"))?
                    .into_owned();
                self.make(dir_path, name, FileKind::Symlink, 0, target, attrs, &shown)?
            }
            EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| problem("hard link without a target"))?
                    .into_owned();
                return self.link(dir_path, name, &target, &shown);
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                let (file_kind, rdev) =
                    device(entry.header(), kind).map_err(ImportError::Archive)?;
                self.make(dir_path, name, file_kind, rdev, Vec::new(), attrs, &shown)?
            }
            other => {
                return Err(problem(&format!(
                    "unsupported entry type {:?}",
                    other.as_byte() as char
                )))
            }
        };
        self.xattrs(node, &meta.xattrs, &shown)
    }

    fn root_ino(&self) -> u64 {
        match self.dirs.get(&Vec::new()).map(|dir| dir.node) {
            Some(NodeRef::Ino(ino)) => ino,
            _ => 0,
        }
    }

    /// The directory at `path` (below the root), made with default attributes if the
    /// archive did not list it before its contents.
    fn directory(&mut self, path: &[u8], member: &Arc<str>) -> Result<(), ImportError> {
        if self.dirs.contains_key(path) {
            return Ok(());
        }
        let (above, name) = split_last(path);
        self.directory(above, member)?;
        let attrs = self.implicit;
        let node = self.make(
            above,
            name,
            FileKind::Directory,
            0,
            Vec::new(),
            attrs,
            member,
        )?;
        self.add_dir(path.to_vec(), node, attrs);
        Ok(())
    }

    fn add_dir(&mut self, path: Vec<u8>, node: NodeRef, attrs: BulkAttrs) {
        if let NodeRef::New(_) = node {
            self.new_dirs.push(path.clone());
        }
        self.dirs.insert(path, Dir { node, attrs });
    }

    /// A directory or regular file: no device number, no link target.
    fn make_plain(
        &mut self,
        dir_path: &[u8],
        name: &[u8],
        kind: FileKind,
        attrs: BulkAttrs,
        member: &Arc<str>,
    ) -> Result<NodeRef, ImportError> {
        self.make(dir_path, name, kind, 0, Vec::new(), attrs, member)
    }

    /// Adds the making of `dir_path/name`. The directory is looked up after any flush
    /// this causes, so its reference is valid in the batch the operation lands in.
    #[allow(clippy::too_many_arguments)]
    fn make(
        &mut self,
        dir_path: &[u8],
        name: &[u8],
        kind: FileKind,
        rdev: u32,
        target: Vec<u8>,
        attrs: BulkAttrs,
        member: &Arc<str>,
    ) -> Result<NodeRef, ImportError> {
        if kind == FileKind::Regular {
            self.summary.files += 1;
        }
        self.make_room(name.len() + target.len() + std::mem::size_of::<BulkOp>())?;
        let parent = self.known_dir(dir_path, member)?;
        let index = self.ops.len();
        let op = BulkOp::Make {
            parent,
            name: name.to_vec(),
            kind,
            rdev,
            target,
            attrs,
        };
        self.push(op, member);
        Ok(NodeRef::New(index))
    }

    /// The directory at `path`, made (or found) earlier.
    fn known_dir(&self, path: &[u8], member: &Arc<str>) -> Result<NodeRef, ImportError> {
        self.dirs
            .get(path)
            .map(|dir| dir.node)
            .ok_or_else(|| ImportError::Member {
                path: member.to_string(),
                problem: format!(
                    "{:?} is not a directory of the archive",
                    String::from_utf8_lossy(path)
                ),
            })
    }

    fn link(
        &mut self,
        dir_path: &[u8],
        name: &[u8],
        target: &[u8],
        member: &Arc<str>,
    ) -> Result<(), ImportError> {
        let target = normalize(target).map_err(|problem| ImportError::Member {
            path: member.to_string(),
            problem: format!("hard link target: {problem}"),
        })?;
        let (target_dir, target_name) = split_last(&target);
        if !self.dirs.contains_key(target_dir) {
            return Err(ImportError::Member {
                path: member.to_string(),
                problem: format!(
                    "hard link to {:?}, which is not earlier in the archive",
                    String::from_utf8_lossy(&target)
                ),
            });
        }
        self.make_room(name.len() + target_name.len() + std::mem::size_of::<BulkOp>())?;
        let op = BulkOp::Link {
            parent: self.known_dir(dir_path, member)?,
            name: name.to_vec(),
            target_dir: self.known_dir(target_dir, member)?,
            target_name: target_name.to_vec(),
        };
        self.push(op, member);
        Ok(())
    }

    /// Streams a regular file's bytes into the batches, in the pieces the engine stores
    /// without copying them (its chunks); returns the file's reference in the batch being
    /// built.
    fn data<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        mut file: NodeRef,
        member: &Arc<str>,
    ) -> Result<NodeRef, ImportError> {
        let piece_bytes = self.engine.bulk_piece_bytes() as u64;
        // The header's size: exact, except that a GNU sparse member reads longer.
        let stored = entry.size();
        let sparse = entry.header().entry_type() == EntryType::GNUSparse;
        let mut offset = 0u64;
        loop {
            let want = match stored.saturating_sub(offset) {
                0 if !sparse => return Ok(file),
                0 => piece_bytes,
                left => left.min(piece_bytes),
            };
            let piece = if offset < stored {
                // Exactly `want` bytes, read straight into the buffer the store keeps.
                SharedBytes::from_reader(entry, want as usize)
            } else {
                read_sparse_tail(entry, want as usize)
            }
            .map_err(ImportError::Archive)?;
            let read = piece.len();
            if read == 0 {
                return Ok(file);
            }
            // A flush sends the Make of this file away: refer to it as the batch after has.
            if let Some(cut) = self.make_room(read + std::mem::size_of::<BulkOp>())? {
                file = cut.carry(file);
            }
            self.summary.bytes += read as u64;
            self.push(
                BulkOp::Write {
                    file,
                    offset,
                    data: piece,
                },
                member,
            );
            offset += read as u64;
        }
    }

    fn xattrs(
        &mut self,
        node: NodeRef,
        xattrs: &[(Vec<u8>, Vec<u8>)],
        member: &Arc<str>,
    ) -> Result<(), ImportError> {
        let mut node = node;
        for (name, value) in xattrs {
            if !stored_xattr(name) {
                self.summary.skipped_xattrs += 1;
                continue;
            }
            if let Some(cut) = self.make_room(name.len() + value.len() + 64)? {
                node = cut.carry(node);
            }
            self.push(
                BulkOp::Xattr {
                    node,
                    name: name.clone(),
                    value: value.clone(),
                },
                member,
            );
        }
        Ok(())
    }

    /// Sends the batch to the applier first if `bytes` more would pass its bounds; returns
    /// the cut, to move the caller's own references along.
    fn make_room(&mut self, bytes: usize) -> Result<Option<Cut>, ImportError> {
        if self.ops.len() < BATCH_OPS && self.ops_bytes + bytes <= BATCH_BYTES {
            return Ok(None);
        }
        self.flush()
    }

    fn push(&mut self, op: BulkOp, member: &Arc<str>) {
        self.ops_bytes += op.bytes();
        self.ops.push(op);
        self.op_members.push(member.clone());
    }

    /// Sends the gathered operations to the applier as one batch, once it has answered
    /// for the one before: references into that one become inodes, and references into
    /// this one `NodeRef::Earlier`.
    fn flush(&mut self) -> Result<Option<Cut>, ImportError> {
        if self.ops.is_empty() {
            return Ok(None);
        }
        let cut = Cut {
            earlier_made: self.collect()?,
        };
        for path in self.new_dirs.drain(..) {
            if let Some(dir) = self.dirs.get_mut(&path) {
                dir.node = cut.carry(dir.node);
            }
            self.sent_dirs.push(path);
        }
        let batch = Batch {
            ops: std::mem::take(&mut self.ops),
            members: std::mem::take(&mut self.op_members),
        };
        self.ops_bytes = 0;
        // A closed channel: the applier stopped, and says why in its last answer.
        if self.batches.send(batch).is_err() {
            return Err(self.applier_error());
        }
        self.in_flight = true;
        Ok(Some(cut))
    }

    /// Waits for the applier's answer for the batch it has, if any; the directories that
    /// batch made get their inodes. Returns what it made.
    fn collect(&mut self) -> Result<Option<Vec<u64>>, ImportError> {
        if !std::mem::take(&mut self.in_flight) {
            return Ok(None);
        }
        let made = self
            .answers
            .recv()
            .map_err(|_| ImportError::ApplierStopped)??;
        for path in self.sent_dirs.drain(..) {
            if let Some(dir) = self.dirs.get_mut(&path) {
                if let NodeRef::Earlier(index) = dir.node {
                    dir.node = NodeRef::Ino(made[index]);
                }
            }
        }
        Ok(Some(made))
    }

    /// Why the applier stopped: its failure, or that it is gone.
    fn applier_error(&mut self) -> ImportError {
        match self.answers.recv() {
            Ok(Err(error)) => error,
            _ => ImportError::ApplierStopped,
        }
    }
}

/// A batch sent to the applier, and what the one before it made.
struct Cut {
    earlier_made: Option<Vec<u64>>,
}

impl Cut {
    /// A reference made before the cut, as the next batch has it: into the batch sent,
    /// `NodeRef::Earlier`; into the one before it, its inode.
    fn carry(&self, node: NodeRef) -> NodeRef {
        match (node, &self.earlier_made) {
            (NodeRef::New(index), _) => NodeRef::Earlier(index),
            (NodeRef::Earlier(index), Some(made)) => NodeRef::Ino(made[index]),
            (node, _) => node,
        }
    }
}

/// Up to `want` bytes of a GNU sparse member past its header's size (it reads longer):
/// fewer only at its end.
fn read_sparse_tail(entry: &mut impl Read, want: usize) -> io::Result<SharedBytes> {
    let mut piece = vec![0u8; want];
    let mut filled = 0;
    while filled < want {
        match entry.read(&mut piece[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(SharedBytes::from(&piece[..filled]))
}

/// A member's attributes and xattrs, from its header and pax records.
struct Meta {
    attrs: BulkAttrs,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    sparse: bool,
}

const XATTR_PREFIX: &[u8] = b"SCHILY.xattr.";

impl Meta {
    fn read<R: Read>(entry: &mut tar::Entry<'_, R>) -> io::Result<Meta> {
        let header = entry.header();
        let mut uid = header.uid()?;
        let mut gid = header.gid()?;
        let perm = (header.mode()? & 0o7777) as u16;
        let mut mtime = Timestamp {
            secs: header.mtime()? as i64,
            nanos: 0,
        };
        let mut xattrs = Vec::new();
        let mut sparse = false;
        if let Some(extensions) = entry.pax_extensions()? {
            for extension in extensions {
                let extension = extension?;
                let key = extension.key_bytes();
                let value = extension.value_bytes();
                if let Some(name) = key.strip_prefix(XATTR_PREFIX) {
                    xattrs.push((name.to_vec(), value.to_vec()));
                } else if key == b"mtime" {
                    mtime = parse_pax_time(value).ok_or_else(|| bad_record("mtime", value))?;
                } else if key == b"uid" {
                    uid = parse_number(value).ok_or_else(|| bad_record("uid", value))?;
                } else if key == b"gid" {
                    gid = parse_number(value).ok_or_else(|| bad_record("gid", value))?;
                } else if key.starts_with(b"GNU.sparse.") {
                    sparse = true;
                }
            }
        }
        let owner = |id: u64, what: &str| {
            u32::try_from(id).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{what} {id} is out of range"),
                )
            })
        };
        Ok(Meta {
            attrs: BulkAttrs {
                perm,
                uid: owner(uid, "uid")?,
                gid: owner(gid, "gid")?,
                // As tar xf leaves it: the time of the extraction.
                atime: Timestamp::now(),
                mtime,
            },
            xattrs,
            sparse,
        })
    }
}

fn bad_record(key: &str, value: &[u8]) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("bad pax {key} record {:?}", String::from_utf8_lossy(value)),
    )
}

fn parse_number(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// A pax time: decimal seconds with an optional fraction (`1700000000.123456789`), maybe
/// negative.
fn parse_pax_time(value: &[u8]) -> Option<Timestamp> {
    let text = std::str::from_utf8(value).ok()?;
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let secs: i64 = whole.parse().ok()?;
    if !fraction.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let digits: String = fraction
        .chars()
        .chain(std::iter::repeat('0'))
        .take(9)
        .collect();
    let nanos: u32 = digits.parse().ok()?;
    if !negative {
        return Some(Timestamp { secs, nanos });
    }
    Some(if nanos == 0 {
        Timestamp {
            secs: -secs,
            nanos: 0,
        }
    } else {
        Timestamp {
            secs: -secs - 1,
            nanos: 1_000_000_000 - nanos,
        }
    })
}

/// The xattr namespaces the engine stores (others are skipped, as tar skips what the
/// target filesystem refuses).
fn stored_xattr(name: &[u8]) -> bool {
    [&b"user."[..], b"trusted.", b"security."]
        .iter()
        .any(|prefix| name.starts_with(prefix))
        || name == b"system.posix_acl_access"
        || name == b"system.posix_acl_default"
}

/// A member path as components below the root, joined by '/': leading '/' and `.`
/// components dropped (as tar does), `..` refused.
pub fn normalize(path: &[u8]) -> Result<Vec<u8>, &'static str> {
    let mut out = Vec::with_capacity(path.len());
    for component in path.split(|&byte| byte == b'/') {
        match component {
            b"" | b"." => {}
            b".." => return Err("a member name with '..' is refused"),
            name => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(name);
            }
        }
    }
    Ok(out)
}

/// `a/b/c` -> (`a/b`, `c`); `c` -> (``, `c`).
fn split_last(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&byte| byte == b'/') {
        Some(slash) => (&path[..slash], &path[slash + 1..]),
        None => (&[], path),
    }
}

/// The kind and device number of a device or fifo member, the number encoded as the
/// kernel hands it to FUSE (`new_encode_dev`).
fn device(header: &tar::Header, kind: EntryType) -> io::Result<(FileKind, u32)> {
    let file_kind = match kind {
        EntryType::Char => FileKind::CharDevice,
        EntryType::Block => FileKind::BlockDevice,
        _ => return Ok((FileKind::Fifo, 0)),
    };
    let major = header.device_major()?.unwrap_or(0);
    let minor = header.device_minor()?.unwrap_or(0);
    Ok((file_kind, encode_dev(major, minor)))
}

pub fn encode_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

pub fn decode_dev(rdev: u32) -> (u32, u32) {
    let major = (rdev & 0xfff00) >> 8;
    let minor = (rdev & 0xff) | ((rdev >> 12) & 0xfff00);
    (major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pax_times_keep_nanoseconds_and_sign() {
        assert_eq!(
            parse_pax_time(b"1700000000.123456789"),
            Some(Timestamp {
                secs: 1_700_000_000,
                nanos: 123_456_789
            })
        );
        assert_eq!(
            parse_pax_time(b"5.5"),
            Some(Timestamp {
                secs: 5,
                nanos: 500_000_000
            })
        );
        assert_eq!(
            parse_pax_time(b"-1.25"),
            Some(Timestamp {
                secs: -2,
                nanos: 750_000_000
            })
        );
        assert_eq!(parse_pax_time(b"12x"), None);
    }

    #[test]
    fn member_names_are_normalized_and_dotdot_refused() {
        assert_eq!(normalize(b"./a//b/").unwrap(), b"a/b");
        assert_eq!(normalize(b"/etc/passwd").unwrap(), b"etc/passwd");
        assert_eq!(normalize(b"./").unwrap(), b"");
        assert!(normalize(b"a/../../x").is_err());
    }

    #[test]
    fn device_numbers_round_trip_through_the_kernel_encoding() {
        for (major, minor) in [(1, 3), (8, 17), (259, 70000), (0, 0)] {
            assert_eq!(decode_dev(encode_dev(major, minor)), (major, minor));
        }
    }
}
