//! Requests answered before they are applied (`shoal_engine::RepliedWrites`): a plain
//! write, or a change of an open file's mode, owner or times (an access ACL that says no
//! more than the mode is such a change), that cannot fail; and a
//! create, mkdir, unlink or rmdir, answered once it is decided (`shoal_engine::Decided`)
//! and written after. A caller and its daemon thread take turns; answering these first
//! lets the daemon apply them while the caller goes on to its next call (`tar x` makes
//! every file, writes it and sets its mode and times). Before the answer the inode's version and the change count
//! move, so every cache of it goes; until it is applied every other request of either
//! door waits; the caller's next request comes to this same thread, after it.

use shoal_engine::{
    set_attributes, Decided, FileKind, FsError, FsResult, InFlight, Inode, NewInode, SetAttr,
    SetTime, Timestamp, MAX_FILE_BYTES,
};
use shoal_fastpath::{Reply, Request, SetAttrWire, Target, TimeWire};

use crate::handles::Process;
use crate::ops::{attr, Session};
use crate::refusal::Served;
use crate::server::Server;
use crate::walk::Walked;

/// The longest write answered before it is applied: what a tool writes per call (tar's
/// records, cp's buffers), and a bound on the time other requests may wait for one.
const EARLY_WRITE_MAX_BYTES: u64 = 128 * 1024;

/// A request answered before it is applied.
pub(crate) struct AnsweredEarly<'a> {
    pub reply: Reply,
    pub apply: Apply,
    /// Holds every other request until dropped, once the request is applied.
    pub in_flight: InFlight<'a>,
}

/// What applying it does.
pub(crate) enum Apply {
    /// The request's bytes written at `offset` of `ino` (set-id bits killed when `kill`,
    /// as for an unprivileged writer).
    Write { ino: u64, offset: u64, kill: bool },
    /// `len` bytes of `from` at `from_offset` copied to `offset` of `ino` (the source
    /// holds them: `len` is what the answer said was copied).
    Copy {
        from: (u64, u64),
        ino: u64,
        offset: u64,
        len: u64,
    },
    /// The engine's setattr of `ino`, its times fixed when answered, and the file as it
    /// leaves it (what the answer says).
    SetAttr {
        ino: u64,
        change: Box<SetAttr>,
        after: Box<Inode>,
    },
}

impl Apply {
    /// The inode it changes, and whether its data too (what the kernel is told).
    pub fn changed(&self) -> (u64, bool) {
        match self {
            Apply::Write { ino, .. } | Apply::Copy { ino, .. } => (*ino, true),
            Apply::SetAttr { ino, .. } => (*ino, false),
        }
    }
}

/// A create, mkdir, unlink or rmdir answered before it is written (`create_early`,
/// `mkdir_early`, `removed_early`).
pub(crate) struct Pending<'a> {
    decided: Decided<'a>,
    /// Holds every other request until dropped, once the change is written.
    in_flight: InFlight<'a>,
    /// The names it adds or removes: one, and the unlinks joined to it (`join_removal`).
    names: Vec<NameChange>,
}

/// A name a pending change adds or removes, for the kernel once it is written.
struct NameChange {
    dir: u64,
    name: Vec<u8>,
    /// What the name named, for an unlink or rmdir.
    removed: Option<u64>,
}

impl Pending<'_> {
    /// Whether it removes names (an unlink or rmdir, and those joined to it).
    pub(crate) fn removes(&self) -> bool {
        self.names[0].removed.is_some()
    }

    /// The unlinks joined to it.
    pub(crate) fn joined(&self) -> usize {
        self.names.len() - 1
    }
}

/// The most unlinks joined to one pending removal: a bound on the batch, and on how long
/// another request may wait for it (a joined unlink takes the daemon 8-10 µs).
const JOINED_REMOVALS_MAX: usize = 64;

impl Server {
    /// The file an open with O_CREAT makes, decided and announced but not written: the
    /// answer goes out first, then `write_pending` writes it, while the caller goes on
    /// (`tar x`, `cp -a` and every create benchmark wait on their creates). `None`: made
    /// as any create.
    pub(crate) fn create_early<'a>(
        &'a self,
        s: &Session<'a>,
        walked: &Walked,
        new: &NewInode<'_>,
        umask: u32,
    ) -> Option<Served<Inode>> {
        let umask = (umask & 0o777) as u16;
        self.made_early(s, walked, || {
            self.engine
                .create_decided(walked.dir.ino, &walked.name, new, umask, s.owner())
        })
    }

    /// A directory `mkdir` makes, as `create_early`.
    pub(crate) fn mkdir_early<'a>(
        &'a self,
        s: &Session<'a>,
        walked: &Walked,
        perm: u16,
        umask: u32,
    ) -> Option<Served<Inode>> {
        let umask = (umask & 0o777) as u16;
        self.made_early(s, walked, || {
            self.engine
                .mkdir_decided(walked.dir.ino, &walked.name, perm, umask, s.owner())
        })
    }

    /// An unlink (or, `directory`, an rmdir) of `victim`, decided and announced but not
    /// written (as `create_early`): `rm -rf` waits on its unlinks. `None`: made as any.
    pub(crate) fn removed_early<'a>(
        &'a self,
        s: &Session<'a>,
        dir: u64,
        name: &[u8],
        victim: u64,
        directory: bool,
    ) -> Option<Served<Reply>> {
        if s.pending.borrow().is_some() {
            if let Some(joined) = self.join_removal(s, (dir, name), victim, directory) {
                return Some(joined);
            }
            // Not joined: the held removal is written first, this one decided alone.
            self.write_session_pending(s);
        }
        if self.kernel.holds(victim) {
            return None;
        }
        let in_flight = self.may_decide_early(s, dir)?;
        let decided = match if directory {
            self.engine.rmdir_decided(dir, name)
        } else {
            self.engine.unlink_decided(dir, name)
        } {
            Ok(decided) => decided,
            Err(error) => return Some(Err(error.into())),
        };
        // The name may have come to name another file since the walk: abandoned then.
        let removed = decided.inode().ino;
        if removed != victim && self.kernel.holds(removed) {
            return None;
        }
        self.announce_pending(s, in_flight, decided, (dir, name), Some(removed));
        Some(Ok(Reply::Empty))
    }

    /// The unlink of `victim`, named `name` in `dir`, joined to the removal the session
    /// holds (`Decided::join_unlink`) and answered once decided, where it may be answered
    /// early as the first was; `None`: not joined, nothing changed.
    fn join_removal(
        &self,
        s: &Session,
        (dir, name): (u64, &[u8]),
        victim: u64,
        directory: bool,
    ) -> Option<Served<Reply>> {
        let replied_writes = self.engine.replied_writes();
        // Another request waiting, or another change in flight that this one would pass.
        let alone = !replied_writes.awaited() && replied_writes.in_flight() == 1;
        let may = s.may_answer_early && !directory && !self.kernel.holds(victim);
        if !alone || !may || !self.may_answer_early(dir, 0) {
            return None;
        }
        let mut held = s.pending.borrow_mut();
        let pending = held.as_mut().filter(|pending| pending.removes())?;
        if pending.joined() >= JOINED_REMOVALS_MAX {
            return None;
        }
        let removed = match pending.decided.join_unlink(dir, name) {
            Ok(Some(inode)) => inode.ino,
            Ok(None) => return None,
            Err(error) => return Some(Err(error.into())),
        };
        self.engine.announce_change(&[dir, removed]);
        self.stats.count_answered_early();
        self.stats.count_joined_unlink();
        pending.names.push(NameChange {
            dir,
            name: name.to_vec(),
            removed: Some(removed),
        });
        // The walk saw the store as the batch found it (the writer lock is held since):
        // another file only if the store changed under the lock.
        if removed != victim && self.kernel.holds(removed) {
            // Answered once written and the kernel told, as a change not answered early.
            drop(held);
            self.write_session_pending(s);
        }
        Some(Ok(Reply::Empty))
    }

    /// Writes the change the session holds, if any (`write_pending`).
    fn write_session_pending(&self, s: &Session) {
        let held = s.pending.borrow_mut().take();
        if let Some(pending) = held {
            self.write_pending(s.process, pending);
        }
    }

    /// What `decide` makes in `walked.dir`, answered before it is written.
    fn made_early<'a>(
        &'a self,
        s: &Session<'a>,
        walked: &Walked,
        decide: impl FnOnce() -> FsResult<Decided<'a>>,
    ) -> Option<Served<Inode>> {
        let in_flight = self.may_decide_early(s, walked.dir.ino)?;
        let decided = match decide() {
            Ok(decided) => decided,
            Err(error) => return Some(Err(error.into())),
        };
        let inode = decided.inode().clone();
        self.announce_pending(s, in_flight, decided, (walked.dir.ino, &walked.name), None);
        Some(Ok(inode))
    }

    /// Whether a change in `dir` may be answered once decided: for the request a
    /// lone busy connection reads (`Session::may_answer_early`), where it cannot fail once
    /// decided (`may_answer_early`) and the kernel holds no entry of the directory to drop
    /// before the answer. Every other request waits from now (the returned `InFlight`).
    fn may_decide_early<'a>(&'a self, s: &Session<'a>, dir: u64) -> Option<InFlight<'a>> {
        if !s.may_answer_early || s.pending.borrow().is_some() || !self.may_answer_early(dir, 0) {
            return None;
        }
        self.engine.replied_writes().begin()
    }

    /// Before the answer: the caches of the directory and the file go now; the change is
    /// kept in the session to write once the answer is out.
    fn announce_pending<'a>(
        &'a self,
        s: &Session<'a>,
        in_flight: InFlight<'a>,
        decided: Decided<'a>,
        (dir, name): (u64, &[u8]),
        removed: Option<u64>,
    ) {
        self.engine.announce_change(&[dir, decided.inode().ino]);
        self.stats.count_answered_early();
        *s.pending.borrow_mut() = Some(Pending {
            decided,
            in_flight,
            names: vec![NameChange {
                dir,
                name: name.to_vec(),
                removed,
            }],
        });
    }

    /// Writes a change answered before it was written; a failure (the store failed since
    /// it was decided) is logged and returned by the process's next fsync or sync.
    pub(crate) fn write_pending(&self, process: &Process, pending: Pending<'_>) {
        let Pending {
            decided,
            in_flight,
            names,
        } = pending;
        if let Err(error) = decided.commit() {
            tracing::error!(%error, "a change answered before it was written failed");
            process.replied_write_failed(error.errno());
        }
        drop(in_flight);
        // The kernel held neither the directory nor the file when the change was decided;
        // a lookup may have begun since (told after the waiters go on, as in
        // `apply_early`).
        for NameChange { dir, name, removed } in names {
            match removed {
                None => self.kernel.name_added(dir, &name),
                Some(ino) => self.kernel.name_removed(dir, &name, ino),
            }
        }
    }

    /// `request` answered now, to be applied next, when it cannot fail; `None`: serve it
    /// as any request (its checks then give its error). An attribute change is checked
    /// against `held` when given: the file as changes answered but not yet applied leave
    /// it (`held_change`), else against the file as the engine has it.
    pub(crate) fn answered_early(
        &self,
        s: &Session,
        request: &Request,
        held: Option<&Inode>,
    ) -> Option<AnsweredEarly<'_>> {
        let (ino, early) = match request {
            Request::Write { .. } => self.write_early(s, request)?,
            Request::CopyRange { .. } => self.copy_early(s, request)?,
            Request::SetAttr { target, change } => self.set_attr_early(s, target, change, held)?,
            Request::SetAccessAclMode { target, perm } => {
                self.acl_mode_early(s, target, *perm, held)?
            }
            _ => return None,
        };
        let in_flight = self.engine.replied_writes().begin()?;
        // Before the answer: every cache of the inode, the clients' included, goes now.
        self.engine.announce_change(&[ino]);
        self.stats.count_answered_early();
        let (reply, apply) = match early {
            Early::Write(reply, apply) => (reply, apply),
            Early::SetAttr(after, change) => {
                // The version after the announcement: the caller keeps these attributes
                // until the setattr lands and moves it again.
                let reply = Reply::Changed {
                    attr: attr(&after),
                    kernel_holds: false,
                    version: self.version_of(ino),
                    no_xattrs: !after.may_have_xattrs,
                };
                let apply = Apply::SetAttr {
                    ino,
                    change: Box::new(change),
                    after: Box::new(after),
                };
                (reply, apply)
            }
        };
        Some(AnsweredEarly {
            reply,
            apply,
            in_flight,
        })
    }

    /// A plain write (not O_APPEND, not asking for the attributes after it) on a handle
    /// open for writing on a regular file, under the size limit, that the store surely
    /// takes (`may_answer_early`).
    fn write_early(&self, s: &Session, request: &Request) -> Option<(u64, Early)> {
        let Request::Write {
            handle,
            offset,
            append: false,
            data,
            with_attr: false,
        } = request
        else {
            return None;
        };
        let handle = s.process.get(*handle)?;
        let written = data.len() as u64;
        let end = offset.checked_add(written)?;
        let plain = handle.writable && !handle.directory && written > 0;
        if !plain || written > EARLY_WRITE_MAX_BYTES || end > MAX_FILE_BYTES {
            return None;
        }
        let apply = Apply::Write {
            ino: handle.ino,
            offset: *offset,
            kill: !s.caller.privileged,
        };
        self.may_answer_early(handle.ino, written).then_some((
            handle.ino,
            Early::Write(Reply::Written { written, end }, apply),
        ))
    }

    /// A copy_file_range between two regular files the caller has open, with every check
    /// of `copy_checked` passed, of at most `EARLY_WRITE_MAX_BYTES` (what it copies is
    /// known from the source's size), that the store surely takes (`may_answer_early`).
    /// `cp` copies each file with one, then sets its times and mode.
    fn copy_early(&self, s: &Session, request: &Request) -> Option<(u64, Early)> {
        let Request::CopyRange {
            from,
            from_offset,
            to,
            to_offset,
            len,
        } = request
        else {
            return None;
        };
        let (from, to) = ((*from, *from_offset), (*to, *to_offset));
        let (source, target) = self.copy_checked(s, from, to, *len).ok()?;
        let source_inode = self.engine.getattr(source).ok()?;
        if source_inode.kind != FileKind::Regular || from.1 >= source_inode.size {
            return None;
        }
        let copied = (*len).min(source_inode.size - from.1);
        let end = to.1.checked_add(copied)?;
        if copied > EARLY_WRITE_MAX_BYTES || end > MAX_FILE_BYTES {
            return None;
        }
        let apply = Apply::Copy {
            from: (source, from.1),
            ino: target,
            offset: to.1,
            len: copied,
        };
        let reply = Reply::Written {
            written: copied,
            end,
        };
        self.may_answer_early(target, copied)
            .then_some((target, Early::Write(reply, apply)))
    }

    /// A change of the mode, owner or times of a file the caller has open, with every
    /// check passed: not a truncation (it may kill privileges and free space), not of a
    /// removed file nor of one that may hold xattrs (a chmod rewrites an access ACL).
    fn set_attr_early(
        &self,
        s: &Session,
        target: &Target,
        change: &SetAttrWire,
        held: Option<&Inode>,
    ) -> Option<(u64, Early)> {
        if change.size.is_some() {
            return None;
        }
        self.set_attr_early_of(s, target, held, |_| Some(change.clone()))
    }

    /// `set_attr_early` of the change `change_of` makes of the file as it is, or as `held`
    /// changes leave it (`None`: not answered early).
    fn set_attr_early_of(
        &self,
        s: &Session,
        target: &Target,
        held: Option<&Inode>,
        change_of: impl FnOnce(&Inode) -> Option<SetAttrWire>,
    ) -> Option<(u64, Early)> {
        let Target::Handle(id) = target else {
            return None;
        };
        // The cheap refusals first: a refused one is planned again by `set_attr`.
        let handle = s.process.get(*id)?;
        if !self.may_answer_early(handle.ino, 0) {
            return None;
        }
        let inode = match held {
            Some(held) => held.clone(),
            None => self.engine.getattr(handle.ino).ok()?,
        };
        assert_eq!(
            inode.ino, handle.ino,
            "held changes are of the handle's file"
        );
        if inode.nlink == 0 || inode.may_have_xattrs {
            return None;
        }
        let change = change_of(&inode)?;
        let mut engine_change = self.plan_set_attr(s, &inode, Some(handle), &change).ok()?;
        // The change's time fixed now, so the engine leaves what the answer says.
        let now = Timestamp::now();
        let fixed = |time: Option<SetTime>| time.map(|time| SetTime::At(time.resolved(now)));
        engine_change.atime = fixed(engine_change.atime);
        engine_change.mtime = fixed(engine_change.mtime);
        engine_change.ctime = Some(now);
        let after = set_attributes(&inode, &engine_change, now);
        Some((inode.ino, Early::SetAttr(after, engine_change)))
    }
}

impl Server {
    /// An access ACL that says no more than the mode bits, set on a file the caller has
    /// open that holds no xattrs (`cp -a` sets one on every file it copies): `set_acl_mode`
    /// is then the chmod of its permission bits, answered as `set_attr_early` answers one.
    fn acl_mode_early(
        &self,
        s: &Session,
        target: &Target,
        perm: u32,
        held: Option<&Inode>,
    ) -> Option<(u64, Early)> {
        self.set_attr_early_of(s, target, held, |inode| {
            matches!(inode.kind, FileKind::Regular | FileKind::Directory).then(|| SetAttrWire {
                mode: Some(u32::from(inode.perm & !0o777) | (perm & 0o777)),
                uid: None,
                gid: None,
                size: None,
                atime: TimeWire::Omit,
                mtime: TimeWire::Omit,
            })
        })
    }

    /// Whether a change of `bytes` to `ino` may be answered before it is applied: the
    /// store surely takes it (`Engine::write_surely_fits`), and the kernel does not hold
    /// the inode (its cached pages and attributes must go before the caller goes on).
    fn may_answer_early(&self, ino: u64, bytes: u64) -> bool {
        !self.kernel.holds(ino) && self.engine.write_surely_fits(bytes)
    }
}

/// A copy answered early copies what its answer said: nothing could change the source
/// meanwhile (every other request of either door waited). Anything else is damage.
pub(crate) fn copied_as_answered(copied: u64, answered: u64) -> FsResult<()> {
    if copied == answered {
        return Ok(());
    }
    Err(FsError::Corrupt(format!(
        "a copy answered as {answered} bytes copied {copied}"
    )))
}

/// What `answered_early` answers, before the announcement.
enum Early {
    Write(Reply, Apply),
    SetAttr(shoal_engine::Inode, SetAttr),
}
