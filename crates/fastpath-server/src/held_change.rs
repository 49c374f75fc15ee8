//! A change answered before it is applied (`answered_early`) and held back until the
//! connection's next request, so that the changes a caller makes to one file one after
//! the other are applied as one:
//! - a write, when the next request is the next write of the same handle, right where it
//!   ends: `tar x` writes each file in records of 10 KiB and a chunk of a file (64 KiB) is
//!   one value in the store; applied one by one, each record rewrote its chunk so far, so
//!   the bench tree's 188 MB of files went into the journal and memtable as 384 MB of chunk
//!   values, 300 MB of it copied to extend chunks;
//! - a change of an open file's mode, owner or times, when the next request changes the
//!   same file's attributes too: `tar x` sets each file's times and then its mode, `cp -a`
//!   its times and then its access ACL (its mode). Each applied alone read and rewrote the
//!   inode and the usage records of every directory above it (`tree_usage`).
//!
//! Held, it is in flight as any change answered early (`RepliedWrites`): every other
//! request of either door waits for it. So the thread applies it as soon as one does or the
//! kernel comes to hold the file (its spin for the next request looks: `held_is_awaited`),
//! before it sleeps, and before it serves anything that does not go on with it; and a held
//! write grows to `HELD_WRITE_MAX_BYTES` at most.

use shoal_engine::{Inode, SetAttr};
use shoal_fastpath::{Reply, Request, Status, Target};

use crate::answered_early::{AnsweredEarly, Apply};
use crate::credentials::Credentials;
use crate::handles::Process;
use crate::ops::Session;
use crate::server::Server;

/// Only a write that ends on a multiple of this is held: holding one that nothing joins
/// costs the overlap of its apply with the caller's next call (one-thread creates of
/// 100-byte files, each written once, lost a quarter of their rate when every write was
/// held). A tool writes from a buffer of whole blocks until the last, short, write: of
/// `tar x`'s 46k writes of the bench tree, all 17.7k that another followed ended on a
/// 512-byte boundary, 54 of the 28.7k last ones did.
const HOLD_END_ALIGN: u64 = 512;

/// The most a held write grows to: a bound on what another request may wait for (applying
/// 256 KiB takes well under a millisecond).
const HELD_WRITE_MAX_BYTES: usize = 256 * 1024;

/// The most attribute changes held together (a bound, as for writes; tools make two).
const HELD_ATTR_CHANGES_MAX: usize = 8;

/// A change answered and not yet applied, with the changes that went on with it.
pub(crate) enum HeldChange<'a> {
    /// The first write's request, its data grown by each one that went on with it.
    Write {
        request: Request,
        early: AnsweredEarly<'a>,
    },
    /// Attribute changes of one file, in the order they were answered.
    Attrs(HeldAttrs<'a>),
}

pub(crate) struct HeldAttrs<'a> {
    ino: u64,
    /// The requests, for the statistics, and the engine's changes they make.
    requests: Vec<Request>,
    changes: Vec<SetAttr>,
    /// The file as the last answer said it is: the next change is checked and answered
    /// against it, as it would be once the ones before it are applied.
    after: Inode,
    /// The first answer's: holds every other request until the changes are applied.
    early: AnsweredEarly<'a>,
}

impl HeldChange<'_> {
    /// The file it changes.
    pub(crate) fn ino(&self) -> u64 {
        match self {
            HeldChange::Write { early, .. } => early.apply.changed().0,
            HeldChange::Attrs(attrs) => attrs.ino,
        }
    }
}

impl Server {
    /// `early`, answered for `request`: held when it is a write that ends on a multiple of
    /// `HOLD_END_ALIGN` or an attribute change, else applied now.
    pub(crate) fn hold_or_apply<'a>(
        &'a self,
        caller: &Credentials,
        process: &Process,
        request: Request,
        mut early: AnsweredEarly<'a>,
    ) -> Option<HeldChange<'a>> {
        match (&request, &mut early.apply) {
            (Request::Write { offset, data, .. }, Apply::Write { .. }) => {
                let end = offset.saturating_add(data.len() as u64);
                if end.is_multiple_of(HOLD_END_ALIGN) {
                    return Some(HeldChange::Write { request, early });
                }
            }
            (_, Apply::SetAttr { ino, change, after }) => {
                // The change moves into the held list; the answer's file is copied, once a
                // group (the apply keeps its own for `changed`).
                let (ino, change, after) = (*ino, std::mem::take(&mut **change), (**after).clone());
                return Some(HeldChange::Attrs(HeldAttrs {
                    ino,
                    requests: vec![request],
                    changes: vec![change],
                    after,
                    early,
                }));
            }
            _ => {}
        }
        self.apply_early(caller, process, &request, early);
        None
    }

    /// Whether `next` went on with the held change (answered with `answer`, to be applied
    /// with it); else the held change, if any, is applied now, before `next` is served.
    pub(crate) fn held_goes_on<'a>(
        &'a self,
        caller: &Credentials,
        process: &Process,
        held: &mut Option<HeldChange<'a>>,
        next: Option<&Request>,
        answer: &mut dyn FnMut(Status, &Reply),
    ) -> bool {
        let joined = match (held.as_mut(), next) {
            (Some(HeldChange::Write { request, early }), Some(next)) => {
                self.join_write(caller, process, (request, early), next, answer)
            }
            (Some(HeldChange::Attrs(attrs)), Some(next)) => {
                let joined = self.join_attrs(caller, process, attrs, next, answer);
                // Tools make two (times then mode): applied at once, while the caller goes
                // on to its next file, as a lone change is. Held until the next request,
                // the changes made that request wait for their apply (`tar x` and `cp -a`
                // took 2-7% longer).
                if joined {
                    self.apply_held(caller, process, held.take());
                }
                joined
            }
            _ => false,
        };
        if !joined {
            self.apply_held(caller, process, held.take());
        }
        joined
    }

    /// The held write grown by `next`, answered with `answer`, when `next` is a plain write
    /// of the same handle that starts where it ends and may be answered early itself.
    fn join_write(
        &self,
        caller: &Credentials,
        process: &Process,
        (held_request, held_early): (&mut Request, &AnsweredEarly<'_>),
        next: &Request,
        answer: &mut dyn FnMut(Status, &Reply),
    ) -> bool {
        let Request::Write {
            handle: held_handle,
            offset: held_offset,
            data: held_data,
            ..
        } = held_request
        else {
            unreachable!("a held write is a write request");
        };
        let Request::Write {
            handle,
            offset,
            data,
            ..
        } = next
        else {
            return false;
        };
        let held_end = *held_offset + held_data.len() as u64;
        let grown = held_data.len() + data.len();
        if handle != held_handle || *offset != held_end || grown > HELD_WRITE_MAX_BYTES {
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
            early.apply.changed() == held_early.apply.changed(),
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

    /// The held attribute changes and `next`, answered with `answer`, when `next` changes
    /// the attributes of the same file through a handle and may be answered early itself,
    /// checked against the file as the held changes leave it.
    fn join_attrs(
        &self,
        caller: &Credentials,
        process: &Process,
        held: &mut HeldAttrs<'_>,
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
        if !same_file || held.changes.len() >= HELD_ATTR_CHANGES_MAX {
            return false;
        }
        let session = Session::plain(caller, process);
        let Some(early) = self.answered_early(&session, next, Some(&held.after)) else {
            return false;
        };
        let Apply::SetAttr { ino, change, after } = early.apply else {
            unreachable!("an attribute change is answered as one");
        };
        assert_eq!(
            ino, held.ino,
            "a change that goes on with held ones changes their file"
        );
        answer(Status::Ok, &early.reply);
        self.stats.count_joined_attr_change();
        // The first held change keeps every other request waiting until all are applied.
        drop(early.in_flight);
        held.requests.push(next.clone());
        held.changes.push(*change);
        held.after = *after;
        true
    }

    /// Whether a change held on `ino` must be applied now rather than at the next request:
    /// another request of either door waits for it, or the kernel holds `ino` since (a
    /// lookup under way at the answer), whose cached attributes go only once it is applied.
    pub(crate) fn held_is_awaited(&self, ino: u64) -> bool {
        self.engine.replied_writes().awaited() || self.kernel.holds(ino)
    }

    /// Applies a held change, if any.
    pub(crate) fn apply_held(
        &self,
        caller: &Credentials,
        process: &Process,
        held: Option<HeldChange<'_>>,
    ) {
        match held {
            Some(HeldChange::Write { request, early }) => {
                self.apply_early(caller, process, &request, early);
            }
            Some(HeldChange::Attrs(attrs)) => self.apply_held_attrs(caller, process, attrs),
            None => {}
        }
    }

    /// Applies held attribute changes as one (`Engine::setattrs`).
    fn apply_held_attrs(&self, caller: &Credentials, process: &Process, held: HeldAttrs<'_>) {
        let applied = self.engine.setattrs(held.ino, &held.changes);
        let failed = applied.as_ref().err().map(shoal_engine::FsError::errno);
        for request in &held.requests {
            // What each answered, when applied: the statistics count the change once.
            let result = match failed {
                None => Ok(held.early.reply.clone()),
                Some(errno) => Err(crate::refusal::Refusal::Errno(errno)),
            };
            self.stats.record(request, &result);
        }
        self.after_applied(caller, process, failed, held.early);
    }
}
