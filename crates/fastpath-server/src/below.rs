//! Directories opened and listed ahead of an `opendir` (`Request::OpenDir::below`). A
//! program that walks a tree (`find`, `du`, `tar c`, `git status`'s search for untracked
//! files) opens every directory it lists; on the kernel door each open is answered from
//! the dentry cache, on the fast path each was a round trip. So an `opendir` brings the
//! directories under it too, breadth first, each opened for the caller exactly as its own
//! `opendir` would open it (the walk from its parent checks search permission there, the
//! open read permission on it) and listed; the client opens them without asking while
//! nothing has changed on the mount (`preload/src/below.rs`), and closes those it never
//! used.

use std::collections::VecDeque;
use std::sync::Arc;

use shoal_engine::FileKind;
use shoal_fastpath::{
    At, Attr, DirBelow, DirEntryWire, Reply, Walk, DIR_BELOW_EXTRA_BYTES, ENTRIES_HEADER_BYTES,
};

use crate::ops::{Page, Session};
use crate::permission::{check, MAY_EXEC, MAY_READ};
use crate::server::Server;

/// Bytes of reply a directory below needs left for its page, at least: below that, the
/// walk stops (a page of dots alone is no use).
const MIN_PAGE_BYTES: usize = 4096;

/// Part of the reply's bytes (in eighths) left when the client is nudged awake
/// (`SharedChannel::nudge_client`): a full reply takes a few hundred microseconds to make
/// on the 2-core VM, whose idle CPUs take 20-50 µs to wake; the client sleeps through most
/// of it rather than spin, and is awake again when the reply comes.
const NUDGE_AT_EIGHTHS_LEFT: usize = 1;

/// What an `opendir` asked to have opened ahead, and within what.
pub struct Ahead {
    /// Directories at most.
    pub wanted: u32,
    /// Entries per page, as the `opendir` asked.
    pub max: u32,
    /// Bytes of reply left.
    pub budget: usize,
    /// The mount's change count read before the first listing: the walk stops when it
    /// moves, as everything sent holds only while it stays.
    pub changes: u64,
    /// Whether they stay open for the caller (a walk's `opendir`s take them); else each is
    /// closed once listed (a listing asked for by stats).
    pub keep_open: bool,
}

impl Server {
    /// Opens and lists, in the order a walk of the tree visits them (depth first, names in
    /// byte order, as the listings give them), the directories under directory `top`
    /// (whose first page is `page`), then those still to visit in `lower` (the frames
    /// below it on the walk's stack: its later siblings, theirs, and so on up), those the
    /// caller may open and whose parent it may search, within `ahead`'s bounds. Returns
    /// them and the stack left: where the walk goes on (`Speculation`).
    pub(crate) fn open_below<'a>(
        &'a self,
        s: &Session<'a>,
        top: Frame,
        lower: Vec<Frame>,
        ahead: &Ahead,
    ) -> (Vec<DirBelow>, Vec<Frame>) {
        let mut below = Vec::new();
        let mut budget = ahead.budget;
        let mut nudged = false;
        let mut frames = lower;
        frames.push(top);
        while below.len() < ahead.wanted as usize {
            let Some(frame) = frames.last_mut() else {
                break;
            };
            let Some(name) = frame.names.pop_front() else {
                frames.pop();
                continue;
            };
            let fixed = DIR_BELOW_EXTRA_BYTES + name.len();
            if budget < fixed + MIN_PAGE_BYTES {
                frame.names.push_front(name);
                break;
            }
            let parent = frame.dir;
            let via = frame.via.child(&name);
            let at = frame.entry_at(&name);
            let first_try = !std::mem::replace(&mut frame.tried, true);
            let Some((dir, subdirs)) =
                self.open_one_below(s, (parent, name), at, ahead.max, budget - fixed)
            else {
                if first_try {
                    // Its parent is no start the caller holds, or it may not open there.
                    frames.pop();
                }
                continue;
            };
            if self.engine.changes() != ahead.changes {
                // Nothing read from here on would hold: what is open goes back.
                let _ = self.close(s, dir.opened.handle);
                frames.clear();
                break;
            }
            budget -= dir.encoded_len();
            frames.push(Frame::of(dir.opened.attr.ino, via, subdirs));
            below.push(dir);
            let nearly_full = budget <= ahead.budget / 8 * NUDGE_AT_EIGHTHS_LEFT
                || below.len() + 4 >= ahead.wanted as usize;
            if nearly_full && !std::mem::replace(&mut nudged, true) {
                if let Some(channel) = s.channel {
                    channel.nudge_client();
                }
            }
        }
        if !ahead.keep_open {
            // Open until here: the walk below each one started from it (`starts`).
            for dir in &mut below {
                let _ = self.close(s, dir.opened.handle);
                dir.opened.handle = 0;
            }
        }
        frames.retain(|frame| !frame.names.is_empty());
        (below, frames)
    }

    /// The subdirectories after `at`'s last name in the directory that holds it (`dir` is
    /// what `at` opened), when that name is the directory's own entry there and the caller
    /// may list and search that parent: a walk opens them next.
    pub(crate) fn later_siblings(
        &self,
        s: &Session,
        at: &At,
        walk: Walk,
        dir: &Attr,
        max: u32,
    ) -> Option<Frame> {
        let path = at.path.as_slice();
        let end = path.iter().rposition(|&b| b != b'/')? + 1;
        let name = &path[path[..end]
            .iter()
            .rposition(|&b| b == b'/')
            .map_or(0, |i| i + 1)..end];
        if name == b"." || name == b".." {
            return None;
        }
        let parent = self
            .engine
            .getattr(self.engine.getattr(dir.ino).ok()?.parent)
            .ok()?;
        if parent.ino == dir.ino || self.engine.lookup_child(parent.ino, name).ok()?.ino != dir.ino
        {
            // The root, or a name that led elsewhere (a symlink).
            return None;
        }
        // The directory the path's last name is in, as the walk reached it: the parent
        // itself, not a symlink's target that happens to hold an entry of that name.
        let container = &path[..path[..end].iter().rposition(|&b| b == b'/').unwrap_or(0)];
        let reached = if trimmed(container).is_empty() {
            at.base
        } else {
            let up = At {
                base: at.base,
                path: container.to_vec(),
                follow: true,
            };
            self.resolve_directory(s, &up)
                .ok()
                .and_then(|reply| match reply {
                    Reply::Attr(attr) => Some(attr.ino),
                    _ => None,
                })?
        };
        if reached != parent.ino {
            return None;
        }
        check(&self.engine, s.caller, &parent, MAY_READ | MAY_EXEC).ok()?;
        // The parent is no start the caller holds (unless it is the base itself): its
        // entries are opened by the path that reached it.
        let container = trimmed(container);
        let reached = (!container.is_empty()).then(|| (at.base, container.to_vec()));
        let entries = self
            .engine
            .readdir(parent.ino, Some(name), max as usize)
            .ok()?;
        let names = entries
            .into_iter()
            .filter(|entry| entry.kind == FileKind::Directory)
            .map(|entry| entry.name)
            .collect();
        Some(Frame {
            dir: parent.ino,
            via: Via::of(at, walk).parent(),
            names,
            tried: false,
            reached,
        })
    }

    /// Directory `name` in `parent`, opened read-only as `opendir` opens it and listed
    /// within `page_bytes`; `None` (nothing left open) where the caller's own `opendir`
    /// would not succeed or the daemon would not decide it.
    fn open_one_below<'a>(
        &'a self,
        s: &Session<'a>,
        (parent, name): (u64, Vec<u8>),
        at: At,
        max: u32,
        page_bytes: usize,
    ) -> Option<(DirBelow, Vec<Vec<u8>>)> {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        // Read before the open, so the listing holds as one made after it would; the
        // directory's inode is the one the open read (`open_below` checks that the count
        // has not moved since the walk's first listing).
        let changes = self.engine.changes();
        let Ok((opened, dir)) = self.open_inode(s, &at, flags, (0, 0), None) else {
            return None;
        };
        let with_attrs = self.lists_attributes(s, &dir, true);
        let below = |entries, done, dir_version, encoded| DirBelow {
            parent,
            name,
            opened,
            entries,
            done,
            dir_version,
            encoded,
        };
        let version_of = |ino| self.version_of(ino);
        let kept = self
            .pages
            .get(dir.ino, with_attrs, version_of)
            .filter(|kept| {
                kept.count <= max as usize && kept.page.len() + ENTRIES_HEADER_BYTES <= page_bytes
            });
        if let Some(kept) = kept {
            let page = below(Vec::new(), true, Some(kept.dir_version), Some(kept.page));
            return Some((page, kept.subdirs.to_vec()));
        }
        let page = Page {
            after: None,
            max,
            asked_attrs: true,
            message_bytes: page_bytes,
        };
        match self.list(s, &dir, changes, &page) {
            Ok(Reply::Entries {
                entries,
                done,
                dir_version,
                ..
            }) => {
                let subdirs = crate::pages::subdirectories(&entries);
                let kept = match (done, dir_version) {
                    (true, Some(version)) => {
                        self.keep_page(dir.ino, with_attrs, changes, &entries, version, &subdirs)
                    }
                    _ => None,
                };
                // A page kept goes out as kept: encoded once.
                let page = match kept {
                    Some(page) => below(Vec::new(), done, dir_version, Some(page)),
                    None => below(entries, done, dir_version, None),
                };
                Some((page, subdirs))
            }
            _ => {
                let _ = self.close(s, opened.handle);
                None
            }
        }
    }

    /// Keeps directory `dir`'s whole listing `entries`, read at `dir_version`, as a reply
    /// carries it (`pages`), and gives it; not if an entry's attributes came without their
    /// version.
    fn keep_page(
        &self,
        dir: u64,
        with_attrs: bool,
        changes: u64,
        entries: &[DirEntryWire],
        dir_version: u32,
        subdirs: &[Vec<u8>],
    ) -> Option<Arc<[u8]>> {
        let versions: Vec<(u64, u32)> = entries
            .iter()
            .filter(|entry| entry.attr.is_some())
            .map(|entry| Some((entry.ino, entry.version?)))
            .collect::<Option<_>>()?;
        let page = shoal_fastpath::encode_page(entries, true, changes, Some(dir_version));
        let kept = crate::pages::KeptPage {
            page: page.clone(),
            count: entries.len(),
            dir_version,
            versions: Arc::from(versions),
            subdirs: Arc::from(subdirs),
        };
        self.pages.keep(dir, with_attrs, kept);
        Some(page)
    }
}

/// Directories still to open under directory `dir`, in order: one level of a walk's
/// stack.
pub(crate) struct Frame {
    dir: u64,
    via: Via,
    names: VecDeque<Vec<u8>>,
    /// Whether one was tried: when the first fails, so would the rest.
    tried: bool,
    /// How `dir` was reached, when it is no directory open for the caller (the one that
    /// holds a listed directory, reached from the listing's start: `later_siblings`): a
    /// start the caller holds and the path from it. Its entries are opened by that path,
    /// so the walk checks search permission all the way down as the caller's own `opendir`
    /// would; from `dir` itself the start check (`starts`) refused them, after reading
    /// the caller's /proc/PID/fd each time (131 times per 30k stats of `git status`'s
    /// index, each prefetch losing the directories after its own).
    reached: Option<(u64, Vec<u8>)>,
}

/// How a walk names what is in a directory: by a descriptor of it (`fts`:
/// `openat(fd, name)`), or by a path from where the walk started (`git status`:
/// `opendir("a/b/name")`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    Descriptor,
    Path { base: u64, path: Vec<u8> },
}

impl Via {
    /// How a walk (`walk`) that asked for `at` names what is in the directory `at` opened.
    pub(crate) fn of(at: &At, walk: Walk) -> Via {
        match walk {
            Walk::ByPath => Via::Path {
                base: at.base,
                path: trimmed(&at.path).to_vec(),
            },
            Walk::No | Walk::ByDescriptor => Via::Descriptor,
        }
    }

    /// Where the walk opens entry `name` of directory `dir` (named this way).
    pub(crate) fn at(&self, dir: u64, name: Vec<u8>, follow: bool) -> At {
        match self {
            Via::Descriptor => At {
                base: dir,
                path: name,
                follow,
            },
            Via::Path { base, path } => At {
                base: *base,
                path: joined(path, &name),
                follow,
            },
        }
    }

    /// How it names what is in subdirectory `name`.
    fn child(&self, name: &[u8]) -> Via {
        match self {
            Via::Descriptor => Via::Descriptor,
            Via::Path { base, path } => Via::Path {
                base: *base,
                path: joined(path, name),
            },
        }
    }

    /// How it names what is in the parent of the directory it names this way.
    fn parent(&self) -> Via {
        match self {
            Via::Descriptor => Via::Descriptor,
            Via::Path { base, path } => Via::Path {
                base: *base,
                path: path[..path.iter().rposition(|&b| b == b'/').unwrap_or(0)].to_vec(),
            },
        }
    }
}

/// `path` without the slashes it ends with.
pub(crate) fn trimmed(path: &[u8]) -> &[u8] {
    &path[..path
        .iter()
        .rposition(|&b| b != b'/')
        .map_or(0, |last| last + 1)]
}

fn joined(path: &[u8], name: &[u8]) -> Vec<u8> {
    if path.is_empty() {
        return name.to_vec();
    }
    [path, b"/", name].concat()
}

impl Frame {
    /// Where the daemon opens entry `name` of the frame's directory for the caller.
    fn entry_at(&self, name: &[u8]) -> At {
        let (base, path) = match &self.reached {
            Some((base, path)) => (*base, joined(path, name)),
            None => (self.dir, name.to_vec()),
        };
        At {
            base,
            path,
            follow: false,
        }
    }

    /// The directory a walk with `stack` (as `open_below` leaves it) opens next, as it
    /// names it (`follow` as its last open), and the stack below it.
    pub(crate) fn next(mut stack: Vec<Frame>, follow: bool) -> Option<(At, Vec<Frame>)> {
        let top = stack.last_mut()?;
        let name = top.names.pop_front()?;
        let at = top.via.at(top.dir, name, follow);
        stack.retain(|frame| !frame.names.is_empty());
        Some((at, stack))
    }

    /// Directory `dir`'s subdirectories `subdirs` (`pages::subdirectories`), which the walk
    /// names `via`.
    pub(crate) fn of(dir: u64, via: Via, subdirs: Vec<Vec<u8>>) -> Frame {
        Frame {
            dir,
            via,
            names: subdirs.into(),
            tried: true,
            reached: None,
        }
    }
}
