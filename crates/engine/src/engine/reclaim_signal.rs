//! What the engine holds of the background deletion of detached trees (`reclaim`): the
//! signal that wakes and stops its thread, and the trees it must leave alone.

use std::collections::HashSet;

use parking_lot::{Condvar, Mutex};

/// Wakes and stops the reclaimer thread; lives outside the engine so the waiting thread
/// does not keep it alive.
#[derive(Default)]
pub(crate) struct ReclaimSignal {
    pub(crate) state: Mutex<ReclaimState>,
    pub(crate) wake: Condvar,
    /// Trees with a reclaim key that are being built, not deleted (see `bulk`): the
    /// reclaimer leaves them alone while this process holds them; after a crash nobody
    /// does, and they are deleted like any detached tree.
    pub(crate) held: Mutex<HashSet<u64>>,
}

#[derive(Default)]
pub(crate) struct ReclaimState {
    pub(crate) running: bool,
    pub(crate) work: bool,
    pub(crate) stopped: bool,
}

impl ReclaimSignal {
    pub(crate) fn stop(&self) {
        self.state.lock().stopped = true;
        self.wake.notify_all();
    }

    pub(crate) fn hold(&self, root: u64) {
        self.held.lock().insert(root);
    }

    pub(crate) fn release(&self, root: u64) {
        self.held.lock().remove(&root);
    }
}
