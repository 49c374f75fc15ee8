//! Answers a thread gives itself from what the daemon told it with a walk's witness
//! (`Reply::Exists`): the same call on the same path by the same caller gets the same
//! answer while the version of every inode the walk read stays (see the daemon's
//! `walk::Witness`). `mkdir -p` and fs_mark ask for directories that exist again and again.

use std::cell::RefCell;

use shoal_fastpath::state::MountState;
use shoal_fastpath::At;

use crate::channel::{self, Who};
use crate::mounts;

/// Paths one thread remembers.
const REMEMBERED: usize = 8;

struct Existing {
    mount: usize,
    at: At,
    who: Who,
    witness: Vec<(u64, u32)>,
}

thread_local! {
    static EXISTING: RefCell<Vec<Existing>> = const { RefCell::new(Vec::new()) };
}

/// Whether `at` on `mount` names an existing entry for this caller, as the daemon said
/// (with a witness that still holds).
pub fn exists(mount: usize, at: &At) -> bool {
    let Some(state) = mounts::all().get(mount).and_then(|m| m.state.get()) else {
        return false;
    };
    let who = channel::who();
    EXISTING
        .try_with(|existing| {
            existing.try_borrow().is_ok_and(|existing| {
                existing.iter().any(|known| {
                    known.mount == mount
                        && known.at == *at
                        && known.who == who
                        && holds(state, &known.witness)
                })
            })
        })
        .unwrap_or(false)
}

/// Whether every inode of `witness` still has the version the walk read.
pub fn holds(state: &MountState, witness: &[(u64, u32)]) -> bool {
    witness
        .iter()
        .all(|&(ino, version)| state.version(ino) == version)
}

/// Keeps the daemon's word that `at` exists, with the witness of its walk.
pub fn remember_exists(mount: usize, at: &At, witness: Vec<(u64, u32)>) {
    let who = channel::who();
    let _ = EXISTING.try_with(|existing| {
        let Ok(mut existing) = existing.try_borrow_mut() else {
            return;
        };
        existing.retain(|known| !(known.mount == mount && known.at == *at));
        if existing.len() >= REMEMBERED {
            existing.remove(0);
        }
        existing.push(Existing {
            mount,
            at: at.clone(),
            who,
            witness,
        });
    });
}
