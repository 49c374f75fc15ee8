//! A change answered before it is applied (`answered_early`) and held back until the
//! connection's next request, so that the changes a caller makes to one file one after
//! the other are applied as one:
//! - a write, when the next request is the next write of the same handle, right where it
//!   ends: `tar x` writes each file in records of 10 KiB and a chunk of a file (64 KiB) is
//!   one value in the store; applied one by one, each record rewrote its chunk so far, so
//!   the bench tree's 188 MB of files went into the journal and memtable as 384 MB of chunk
//!   values, 300 MB of it copied to extend chunks;
//! - changes of an open file's mode, owner or times after it (or after a write of it):
//!   `tar x` writes each file, then sets its times, then its mode; `cp -a` sets its times
//!   and then an access ACL that is its mode. Each applied alone read and rewrote the inode
//!   and the usage records of every directory above it (`tree_usage`), and the caller's
//!   next call waited for each apply in turn.
//!
//! Held, it is in flight as any change answered early (`RepliedWrites`): every other
//! request of either door waits for it. So the thread applies it as soon as one does or the
//! kernel comes to hold the file (its spin for the next request looks: `held_is_awaited`),
//! before it sleeps, and before it serves anything that does not go on with it; a held
//! write grows to `HELD_WRITE_MAX_BYTES` at most, and a change of the mode is applied with
//! what it joined as soon as it is answered.

use shoal_engine::{perm_without_privileges, Inode, SetAttr, Timestamp};
use shoal_fastpath::{Reply, Request, Status, Target};

use crate::answered_early::{copied_as_answered, AnsweredEarly, Apply, Pending};
use crate::credentials::Credentials;
use crate::handles::Process;
use crate::ops::Session;
use crate::refusal::Refusal;
use crate::server::Server;

/// A write that ends on a multiple of this is held: a tool writes from a buffer of whole
/// blocks until the last, short, write. Of `tar x`'s 46k writes of the bench tree, all
/// 17.7k that another followed ended on a 512-byte boundary, 54 of the 28.7k last ones did.
/// A short write is held only while this connection's short writes are followed by
/// attribute changes (`JoinOdds`).
const HOLD_END_ALIGN: u64 = 512;

/// The most a held write grows to: a bound on what another request may wait for (applying
/// 256 KiB takes well under a millisecond).
const HELD_WRITE_MAX_BYTES: usize = 256 * 1024;

/// Attribute changes held at most. Tools set the mode last (`tar x`: times, owner, mode;
/// `cp -a`: times, then an ACL that is a mode), so a change of the mode is applied at once
/// with what it joined, while the caller goes on to its next file. Held until the next
/// request instead, they made the next file's create wait for their apply (`tar x` and
/// `cp -a` took 2-7% longer).
const HELD_ATTR_CHANGES: usize = 4;

/// A change answered and not yet applied, with the changes that went on with it.
pub(crate) struct HeldChange<'a> {
    ino: u64,
    /// The write it began with, if any, its data grown by each write that went on with it.
    write: Option<Request>,
    /// A short write (not on `HOLD_END_ALIGN`), held on the bet that attribute changes
    /// follow it (`JoinOdds`).
    short_write: bool,
    /// The attribute changes answered after it, in order: their requests (for the
    /// statistics) and the engine's changes.
    attrs: Vec<(Request, SetAttr)>,
    /// The file as the last change answered leaves it: the next attribute change is
    /// checked against it, as it would be once the ones before are applied. For a held
    /// write, the file before it with the privileges the write kills gone (its size and
    /// times are not known before it is applied: such answers carry no attributes).
    after: Option<Inode>,
    /// When the held write took effect: fixed when the first attribute change joined it,
    /// so the write's times come before that change's, as they would applied one by one.
    written_at: Option<Timestamp>,
    /// The first answer's: holds every other request until all are applied.
    early: AnsweredEarly<'a>,
}

impl HeldChange<'_> {
    /// The file it changes.
    pub(crate) fn ino(&self) -> u64 {
        self.ino
    }
}

/// Whether holding a kind of change is worth it, from whether the last ones held were
/// joined: a held change that nothing joins costs the overlap of its apply with the
/// caller's next call. Short writes: one-thread creates of 100-byte files, each written
/// once and closed, lost a quarter of their rate when every write was held. Removals: a
/// program that unlinks one file and goes on to other calls (a mail spool's delivery)
/// finds each unlink written at its next call instead of while it prepares it.
pub(crate) struct JoinOdds {
    /// Above zero: held; set when others joined one, down by one when none did.
    score: u8,
    /// Changes not held since the score fell to zero: every `PROBE_EVERY`th is held
    /// anyway, to notice a caller that turned to making them in runs.
    passed: u32,
}

/// How often a connection whose held changes go unjoined holds one anyway.
const PROBE_EVERY: u32 = 64;

impl Default for JoinOdds {
    fn default() -> Self {
        JoinOdds {
            score: 1,
            passed: 0,
        }
    }
}

impl JoinOdds {
    fn hold(&mut self) -> bool {
        if self.score > 0 {
            return true;
        }
        self.passed += 1;
        self.passed.is_multiple_of(PROBE_EVERY)
    }

    fn learn(&mut self, joined: bool) {
        self.score = if joined {
            2
        } else {
            self.score.saturating_sub(1)
        };
    }
}

/// A connection's held change and what it learned about holding them.
#[derive(Default)]
pub(crate) struct Holding<'a> {
    pub held: Option<HeldChange<'a>>,
    short_writes: JoinOdds,
    /// An unlink or rmdir answered once decided and not yet written, with the unlinks
    /// joined to it (`Server::join_removal`): written as soon as a request that does not
    /// join it comes, one waits for it, or the thread sleeps.
    pub removal: Option<Pending<'a>>,
    removals: JoinOdds,
}

impl Server {
    /// `early`, answered for `request`: held when it is a write or an attribute change
    /// (a short write only while this connection's are followed by attribute changes),
    /// else applied now.
    pub(crate) fn hold_or_apply<'a>(
        &'a self,
        caller: &Credentials,
        process: &Process,
        holding: &mut Holding<'a>,
        request: Request,
        mut early: AnsweredEarly<'a>,
    ) {
        assert!(holding.held.is_none(), "a held change is applied first");
        let ino = early.apply.changed().0;
        // Held as a write: whether a short one (held on `JoinOdds`' bet).
        let held_as_write = match (&request, &mut early.apply) {
            (Request::Write { offset, data, .. }, Apply::Write { .. }) => {
                let end = offset.saturating_add(data.len() as u64);
                let short_write = !end.is_multiple_of(HOLD_END_ALIGN);
                (!short_write || holding.short_writes.hold()).then_some(short_write)
            }
            // As a short write: `cp` copies a file with one, then sets its attributes.
            (Request::CopyRange { .. }, Apply::Copy { .. }) => {
                holding.short_writes.hold().then_some(true)
            }
            (_, Apply::SetAttr { change, after, .. }) => {
                // The change moves into the held list; the answer's file is copied, once a
                // group (the apply keeps its own for `changed`).
                let change = std::mem::take(&mut **change);
                let after = Some((**after).clone());
                holding.held = Some(HeldChange {
                    ino,
                    write: None,
                    short_write: false,
                    attrs: vec![(request, change)],
                    after,
                    written_at: None,
                    early,
                });
                return;
            }
            _ => None,
        };
        if let Some(short_write) = held_as_write {
            holding.held = Some(HeldChange {
                ino,
                write: Some(request),
                short_write,
                attrs: Vec::new(),
                after: None,
                written_at: None,
                early,
            });
            return;
        }
        self.apply_early(caller, process, &request, early);
    }

    /// Whether `next` was answered going on with the held write or attribute changes
    /// (`held_goes_on`). Else, once this returns, what the connection holds is applied
    /// but a removal that `next` may join, and changes other connections answered early
    /// have landed (a held removal goes on only while none other is in flight).
    pub(crate) fn goes_on_with_held<'a>(
        &'a self,
        caller: &Credentials,
        process: &Process,
        holding: &mut Holding<'a>,
        next: Option<&Request>,
        answer: &mut dyn FnMut(Status, &Reply),
    ) -> bool {
        if !self.removal_goes_on(holding, next) {
            self.write_held_removal(process, holding);
        }
        if self.held_goes_on(caller, process, holding, next, answer) {
            return true;
        }
        if holding.removal.is_none() {
            self.engine.replied_writes().wait_applied();
        }
        false
    }

    /// Whether `next` went on with the held change (answered with `answer`, to be applied
    /// with it); else the held change, if any, is applied now, before `next` is served.
    fn held_goes_on<'a>(
        &'a self,
        caller: &Credentials,
        process: &Process,
        holding: &mut Holding<'a>,
        next: Option<&Request>,
        answer: &mut dyn FnMut(Status, &Reply),
    ) -> bool {
        let joined = match (holding.held.as_mut(), next) {
            (Some(held), Some(next @ Request::Write { .. })) => {
                self.join_write(caller, process, held, next, answer)
            }
            (Some(held), Some(next)) => self.join_attrs(caller, process, held, next, answer),
            _ => false,
        };
        let complete = holding.held.as_ref().is_some_and(|held| {
            held.attrs.len() >= HELD_ATTR_CHANGES
                || held
                    .attrs
                    .last()
                    .is_some_and(|(_, change)| change.perm.is_some())
        });
        if !joined || complete {
            self.apply_held_change(caller, process, holding);
        }
        joined
    }

    /// The held write grown by `next`, answered with `answer`, when `next` is a plain write
    /// of the same handle that starts where it ends and may be answered early itself.
    fn join_write(
        &self,
        caller: &Credentials,
        process: &Process,
        held: &mut HeldChange<'_>,
        next: &Request,
        answer: &mut dyn FnMut(Status, &Reply),
    ) -> bool {
        let Some(Request::Write {
            handle: held_handle,
            offset: held_offset,
            data: held_data,
            ..
        }) = held.write.as_mut()
        else {
            return false;
        };
        let Request::Write {
            handle,
            offset,
            data,
            ..
        } = next
        else {
            unreachable!("only a write joins a write");
        };
        let held_end = *held_offset + held_data.len() as u64;
        let grown = held_data.len() + data.len();
        if !held.attrs.is_empty()
            || handle != held_handle
            || *offset != held_end
            || grown > HELD_WRITE_MAX_BYTES
        {
            return false;
        }
        if !self.engine.write_surely_fits(grown as u64) {
            return false;
        }
        // Its own checks, announcement and count, as any write answered early; refused
        // while a request waits (a stream of writes cannot keep it waiting).
        let session = Session::plain(caller, process);
        let Some(early) = self.answered_early(&session, next, None) else {
            return false;
        };
        assert!(
            early.apply.changed() == held.early.apply.changed(),
            "a write that goes on with a held one changes the same file"
        );
        answer(Status::Ok, &early.reply);
        self.stats.record(next, &Ok(early.reply));
        self.stats.count_joined_write();
        // The held write keeps every other request waiting until it is applied.
        drop(early.in_flight);
        held_data.extend_from_slice(data);
        true
    }

    /// `next` added to the held change, answered with `answer`, when it changes the
    /// attributes of the same file through a handle and may be answered early itself,
    /// checked against the file as the held changes leave it.
    fn join_attrs(
        &self,
        caller: &Credentials,
        process: &Process,
        held: &mut HeldChange<'_>,
        next: &Request,
        answer: &mut dyn FnMut(Status, &Reply),
    ) -> bool {
        let (Request::SetAttr { target, .. } | Request::SetAccessAclMode { target, .. }) = next
        else {
            return false;
        };
        let Target::Handle(handle) = target else {
            return false;
        };
        let same_file = process.get(*handle).is_some_and(|h| h.ino == held.ino);
        if !same_file || held.attrs.len() >= HELD_ATTR_CHANGES {
            return false;
        }
        let Some(before) = self.before_next_change(held) else {
            return false;
        };
        let session = Session::plain(caller, process);
        let Some(early) = self.answered_early(&session, next, Some(&before)) else {
            return false;
        };
        let Apply::SetAttr { ino, change, after } = early.apply else {
            unreachable!("an attribute change is answered as one");
        };
        assert_eq!(
            ino, held.ino,
            "a change that goes on with held ones changes their file"
        );
        // After a held write the size, blocks and times the answer would carry are not
        // known before the write is applied: the answer carries none (the caller's next
        // fstat asks, and waits for the apply).
        let reply = if held.write.is_some() {
            Reply::Empty
        } else {
            early.reply
        };
        answer(Status::Ok, &reply);
        self.stats.count_joined_attr_change();
        // The first held change keeps every other request waiting until all are applied.
        drop(early.in_flight);
        held.attrs.push((next.clone(), *change));
        held.after = Some(*after);
        true
    }

    /// The file the next attribute change is checked against: as the last one answered
    /// left it, or before a held write, without the privileges the write kills (the
    /// write's time fixed now, before the change is answered). `None`: not known.
    fn before_next_change(&self, held: &mut HeldChange<'_>) -> Option<Inode> {
        if let Some(after) = &held.after {
            return Some(after.clone());
        }
        let kill = match held.early.apply {
            Apply::Write { kill, .. } => kill,
            // A copy kills nothing: a caller without the privilege copies to no set-id file
            // on the fast path (`copy_checked`).
            Apply::Copy { .. } => false,
            Apply::SetAttr { .. } => return None,
        };
        let mut inode = self.engine.getattr(held.ino).ok()?;
        if kill {
            inode.perm = perm_without_privileges(&inode);
        }
        held.written_at = Some(Timestamp::now());
        Some(inode)
    }

    /// `pending`, a change answered once decided: held when it removes a name and holding
    /// removals pays on this connection (`JoinOdds`; one that others joined is held on),
    /// else written now.
    pub(crate) fn hold_or_write_pending<'a>(
        &'a self,
        process: &Process,
        holding: &mut Holding<'a>,
        pending: Pending<'a>,
    ) {
        assert!(
            holding.removal.is_none(),
            "a held removal is served with its session"
        );
        let joined = pending.joined() > 0;
        if joined {
            holding.removals.learn(true);
        }
        if pending.removes() && (joined || holding.removals.hold()) {
            holding.removal = Some(pending);
            return;
        }
        self.write_pending(process, pending);
    }

    /// Whether the held removal, if any, goes on with `next`: an unlink that may join it
    /// (`join_removal`), while no other request waits and no other change is in flight.
    pub(crate) fn removal_goes_on(&self, holding: &Holding, next: Option<&Request>) -> bool {
        let replied_writes = self.engine.replied_writes();
        holding.removal.is_some()
            && matches!(next, Some(Request::Unlink { dir: false, .. }))
            && !replied_writes.awaited()
            && replied_writes.in_flight() == 1
    }

    /// Writes the held removal, if any, learning whether holding it paid.
    pub(crate) fn write_held_removal(&self, process: &Process, holding: &mut Holding) {
        if let Some(pending) = holding.removal.take() {
            holding.removals.learn(pending.joined() > 0);
            self.write_pending(process, pending);
        }
    }

    /// Whether what a connection holds, a change of `held_ino` or a removal, must be
    /// applied now rather than at the next request (`held_is_awaited`).
    pub(crate) fn holding_is_awaited(&self, held_ino: Option<u64>, removal_held: bool) -> bool {
        held_ino.is_some_and(|ino| self.held_is_awaited(ino))
            || (removal_held && self.engine.replied_writes().awaited())
    }

    /// Whether a change held on `ino` must be applied now rather than at the next request:
    /// another request of either door waits for it, or the kernel holds `ino` since (a
    /// lookup under way at the answer), whose cached attributes go only once it is applied.
    pub(crate) fn held_is_awaited(&self, ino: u64) -> bool {
        self.engine.replied_writes().awaited() || self.kernel.holds(ino)
    }

    /// Writes or applies whatever the connection holds: before its thread sleeps, as soon
    /// as another request waits, and once its client is gone.
    pub(crate) fn apply_held(
        &self,
        caller: &Credentials,
        process: &Process,
        holding: &mut Holding,
    ) {
        self.write_held_removal(process, holding);
        self.apply_held_change(caller, process, holding);
    }

    /// Applies the held write or attribute changes, if any, as one, and learns from it
    /// whether short writes are worth holding.
    fn apply_held_change(&self, caller: &Credentials, process: &Process, holding: &mut Holding) {
        let Some(held) = holding.held.take() else {
            return;
        };
        if held.short_write {
            holding.short_writes.learn(!held.attrs.is_empty());
        }
        let HeldChange {
            ino,
            write,
            attrs,
            written_at,
            early,
            ..
        } = held;
        let (requests, changes): (Vec<Request>, Vec<SetAttr>) = attrs.into_iter().unzip();
        let applied = match (&write, &early.apply) {
            (Some(request), _) if changes.is_empty() => {
                self.apply_early(caller, process, request, early);
                return;
            }
            (Some(Request::Write { offset, data, .. }), Apply::Write { kill, .. }) => {
                let written_at = written_at.expect("fixed when the first change joined");
                self.engine
                    .write_then_setattrs(ino, (*offset, data), *kill, written_at, &changes)
                    .map(drop)
            }
            (
                Some(Request::CopyRange { .. }),
                Apply::Copy {
                    from, offset, len, ..
                },
            ) => {
                let written_at = written_at.expect("fixed when the first change joined");
                self.engine
                    .copy_then_setattrs(*from, (ino, *offset), *len, written_at, &changes)
                    .and_then(|copied| copied_as_answered(copied, *len))
            }
            (None, _) => self.engine.setattrs(ino, &changes).map(drop),
            _ => unreachable!("a held write or copy is its request, answered as one"),
        };
        let failed = applied.as_ref().err().map(shoal_engine::FsError::errno);
        for request in write.iter().chain(&requests) {
            // What each answered, once applied: the statistics count the change then.
            let result = match failed {
                None => Ok(Reply::Empty),
                Some(errno) => Err(Refusal::Errno(errno)),
            };
            self.stats.record(request, &result);
        }
        self.after_applied(caller, process, failed, early);
    }
}
