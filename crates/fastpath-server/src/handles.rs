//! Open files of each connected process. A handle is the fast path's file description: it
//! carries the access the open granted, so a read or write is checked against the open,
//! as the kernel checks the file's mode, not against the inode's current permissions.
//! A process's handles live as long as any of its connections (one per thread); the last
//! one to close releases them all, so a killed process leaves nothing open.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use shoal_engine::Engine;

#[derive(Clone, Copy, Debug)]
pub struct Handle {
    pub ino: u64,
    pub readable: bool,
    pub writable: bool,
    pub directory: bool,
}

/// Open handles a process holds at most: a bound on what one client can make us keep.
const MAX_HANDLES_PER_PROCESS: usize = 1 << 20;

#[derive(Default)]
pub struct Process {
    handles: Mutex<HashMap<u64, Handle>>,
    connections: AtomicUsize,
}

impl Process {
    pub fn get(&self, id: u64) -> Option<Handle> {
        self.handles.lock().get(&id).copied()
    }

    /// Keeps `handle` under a new id; `None` when the process holds too many.
    pub fn insert(&self, ids: &AtomicU64, handle: Handle) -> Option<u64> {
        let mut handles = self.handles.lock();
        if handles.len() >= MAX_HANDLES_PER_PROCESS {
            return None;
        }
        let id = ids.fetch_add(1, Ordering::Relaxed);
        handles.insert(id, handle);
        Some(id)
    }

    pub fn remove(&self, id: u64) -> Option<Handle> {
        self.handles.lock().remove(&id)
    }

    fn release_all(&self, engine: &Engine) {
        let handles: Vec<Handle> = self.handles.lock().drain().map(|(_, h)| h).collect();
        for handle in handles {
            release(engine, &handle);
        }
    }
}

/// What closing a handle gives back to the engine (an unlinked file's last close deletes it).
pub fn release(engine: &Engine, handle: &Handle) {
    if handle.directory {
        return;
    }
    if let Err(error) = engine.unpin_file(handle.ino) {
        tracing::warn!(ino = handle.ino, %error, "fast path: releasing a closed file failed");
    }
}

/// Every connected process, by pid (the kernel's, from SO_PEERCRED).
#[derive(Default)]
pub struct Processes {
    by_pid: Mutex<HashMap<u32, Arc<Process>>>,
}

impl Processes {
    pub fn join(&self, pid: u32) -> Arc<Process> {
        let mut by_pid = self.by_pid.lock();
        let process = by_pid.entry(pid).or_default().clone();
        process.connections.fetch_add(1, Ordering::AcqRel);
        process
    }

    /// A connection of `pid` closed: the last one releases the process's handles.
    pub fn leave(&self, pid: u32, process: &Arc<Process>, engine: &Engine) {
        let mut by_pid = self.by_pid.lock();
        if process.connections.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        if by_pid.get(&pid).is_some_and(|p| Arc::ptr_eq(p, process)) {
            by_pid.remove(&pid);
        }
        drop(by_pid);
        process.release_all(engine);
    }
}
