//! A write answered before it is applied (`answered_early`) and held back until the
//! connection's next request: when that one is the next write of the same handle, right
//! where this one ends, it is answered too and the two are applied as one. `tar x` writes
//! each file in records of 10 KiB and a chunk of a file (64 KiB) is one value in the store:
//! applied one by one, each record rewrote its chunk so far, so the bench tree's 188 MB of
//! files went into the journal and memtable as 384 MB of chunk values, 300 MB of it copied
//! to extend chunks.
//!
//! Held, it is in flight as any write answered early (`RepliedWrites`): every other request
//! of either door waits for it. So the thread applies it as soon as one does or the kernel
//! comes to hold the file (its spin for the next request looks: `held_is_awaited`), before
//! it sleeps, and before it serves anything that does not go on with it; and a held write
//! grows to `HELD_WRITE_MAX_BYTES` at most.

use shoal_fastpath::{Reply, Request, Status};

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

/// A write answered and not yet applied, with the writes that went on with it.
pub(crate) struct HeldWrite<'a> {
    /// The first write's request, its data grown by each one that went on with it.
    request: Request,
    early: AnsweredEarly<'a>,
}

impl HeldWrite<'_> {
    /// The file it writes.
    pub(crate) fn ino(&self) -> u64 {
        self.early.apply.changed().0
    }
}

impl Server {
    /// `early`, answered for `request`: held when it is a write that ends on a multiple of
    /// `HOLD_END_ALIGN`, else applied now.
    pub(crate) fn hold_or_apply<'a>(
        &'a self,
        caller: &Credentials,
        process: &Process,
        request: Request,
        early: AnsweredEarly<'a>,
    ) -> Option<HeldWrite<'a>> {
        if let Request::Write { offset, data, .. } = &request {
            let end = offset.saturating_add(data.len() as u64);
            if end.is_multiple_of(HOLD_END_ALIGN) && matches!(early.apply, Apply::Write { .. }) {
                return Some(HeldWrite { request, early });
            }
        }
        self.apply_early(caller, process, &request, early);
        None
    }

    /// Whether `next` went on with the held write (answered with `answer`, to be applied
    /// with it); else the held write, if any, is applied now, before `next` is served.
    pub(crate) fn held_goes_on<'a>(
        &'a self,
        caller: &Credentials,
        process: &Process,
        held: &mut Option<HeldWrite<'a>>,
        next: Option<&Request>,
        answer: &mut dyn FnMut(Status, &Reply),
    ) -> bool {
        let Some(write) = held.as_mut() else {
            return false;
        };
        if self.join(caller, process, write, next, answer) {
            return true;
        }
        self.apply_held(caller, process, held.take());
        false
    }

    /// `held` grown by `next`, answered with `answer`, when `next` is a plain write of the
    /// same handle that starts where it ends and may be answered early itself.
    fn join(
        &self,
        caller: &Credentials,
        process: &Process,
        held: &mut HeldWrite<'_>,
        next: Option<&Request>,
        answer: &mut dyn FnMut(Status, &Reply),
    ) -> bool {
        let Request::Write {
            handle: held_handle,
            offset: held_offset,
            data: held_data,
            ..
        } = &mut held.request
        else {
            unreachable!("only writes are held");
        };
        let Some(
            next @ Request::Write {
                handle,
                offset,
                data,
                ..
            },
        ) = next
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
        let Some(early) = self.answered_early(&session, next) else {
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

    /// Whether a write held on `ino` must be applied now rather than at the next request:
    /// another request of either door waits for it, or the kernel holds `ino` since (a
    /// lookup under way at the answer), whose cached attributes go only once it is applied.
    pub(crate) fn held_is_awaited(&self, ino: u64) -> bool {
        self.engine.replied_writes().awaited() || self.kernel.holds(ino)
    }

    /// Applies a held write, if any.
    pub(crate) fn apply_held(
        &self,
        caller: &Credentials,
        process: &Process,
        held: Option<HeldWrite<'_>>,
    ) {
        if let Some(HeldWrite { request, early }) = held {
            self.apply_early(caller, process, &request, early);
        }
    }
}
