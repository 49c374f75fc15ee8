//! Open files of each connected process. A handle is the fast path's file description: it
//! carries the access the open granted, so a read or write is checked against the open,
//! as the kernel checks the file's mode, not against the inode's current permissions.
//! A process's handles live as long as the process: its connections (one per thread) may
//! all close while it lives on (a thread that opened a file ended; another thread then
//! reads it), so the last one to close releases them only once the process is gone or
//! exiting, and a later one releases those of processes that went since. A pid is known
//! by its start time as well, so a process that gets a pid again never sees the handles of
//! the one before: a killed process leaves nothing open, and nothing to anyone else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use shoal_engine::Engine;

use crate::starts::Starts;

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
    handles: Mutex<Table>,
    connections: AtomicUsize,
    /// The process's start time when it first connected (`None`: unknown, so its handles
    /// go with its last connection, as they did before processes were followed).
    started: Option<u64>,
    /// Directories its requests' paths may start from (`starts`).
    pub starts: Starts,
    /// The errno of a write answered before it was applied that then failed (0: none):
    /// the process's next fsync or sync returns it, as the kernel returns a writeback error.
    replied_write_error: AtomicI32,
}

/// A process's handles by id, and how many of them are open directories, by inode.
#[derive(Default)]
struct Table {
    by_id: HashMap<u64, Handle>,
    directories: HashMap<u64, usize>,
}

impl Process {
    /// A write of this process answered before it was applied failed with `errno`.
    pub fn replied_write_failed(&self, errno: i32) {
        self.replied_write_error.store(errno, Ordering::SeqCst);
    }

    /// The errno of a replied write that failed since the last call, if any.
    pub fn take_replied_write_error(&self) -> Option<i32> {
        match self.replied_write_error.swap(0, Ordering::SeqCst) {
            0 => None,
            errno => Some(errno),
        }
    }

    pub fn get(&self, id: u64) -> Option<Handle> {
        self.handles.lock().by_id.get(&id).copied()
    }

    /// Keeps `handle` under a new id; `None` when the process holds too many.
    pub fn insert(&self, ids: &AtomicU64, handle: Handle) -> Option<u64> {
        let mut table = self.handles.lock();
        if table.by_id.len() >= MAX_HANDLES_PER_PROCESS {
            return None;
        }
        let id = ids.fetch_add(1, Ordering::Relaxed);
        table.by_id.insert(id, handle);
        if handle.directory {
            *table.directories.entry(handle.ino).or_default() += 1;
            self.starts.remember(handle.ino);
        }
        Some(id)
    }

    pub fn remove(&self, id: u64) -> Option<Handle> {
        let mut table = self.handles.lock();
        let handle = table.by_id.remove(&id)?;
        if handle.directory {
            if let Some(count) = table.directories.get_mut(&handle.ino) {
                *count -= 1;
                if *count == 0 {
                    table.directories.remove(&handle.ino);
                }
            }
        }
        Some(handle)
    }

    /// Whether the process has directory `ino` open on the fast path.
    pub fn holds_directory(&self, ino: u64) -> bool {
        self.handles.lock().directories.contains_key(&ino)
    }

    fn release_all(&self, engine: &Engine) {
        let handles: Vec<Handle> = {
            let mut table = self.handles.lock();
            table.directories.clear();
            table.by_id.drain().map(|(_, h)| h).collect()
        };
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
    /// Processes replaced by a later one with their pid, none of their connections open:
    /// released at the next `leave` (which has the engine).
    replaced: Mutex<Vec<Arc<Process>>>,
}

impl Processes {
    pub fn join(&self, pid: u32) -> Arc<Process> {
        let started = live_start_time(pid);
        let mut by_pid = self.by_pid.lock();
        if let Some(known) = by_pid.get(&pid) {
            if known.started != started {
                // Another process had this pid: its handles are not this one's.
                let earlier = by_pid.remove(&pid);
                if let Some(earlier) =
                    earlier.filter(|p| p.connections.load(Ordering::Acquire) == 0)
                {
                    self.replaced.lock().push(earlier);
                }
            }
        }
        let process = by_pid
            .entry(pid)
            .or_insert_with(|| {
                Arc::new(Process {
                    started,
                    ..Process::default()
                })
            })
            .clone();
        process.connections.fetch_add(1, Ordering::AcqRel);
        process
    }

    /// A connection of `pid` closed. The last one releases the process's handles once the
    /// process is gone; while it lives, they wait for its next connection.
    pub fn leave(&self, pid: u32, process: &Arc<Process>, engine: &Engine) {
        let mut by_pid = self.by_pid.lock();
        if process.connections.fetch_sub(1, Ordering::AcqRel) == 1 {
            let current = by_pid.get(&pid).is_some_and(|p| Arc::ptr_eq(p, process));
            let lives = process.started.is_some() && live_start_time(pid) == process.started;
            if !(current && lives) {
                if current {
                    by_pid.remove(&pid);
                }
                drop(by_pid);
                process.release_all(engine);
                by_pid = self.by_pid.lock();
            }
        }
        let gone = take_gone(&mut by_pid);
        drop(by_pid);
        let replaced = std::mem::take(&mut *self.replaced.lock());
        for process in gone.iter().chain(&replaced) {
            process.release_all(engine);
        }
    }
}

/// Removes the processes without a connection that are gone or exiting since.
fn take_gone(by_pid: &mut HashMap<u32, Arc<Process>>) -> Vec<Arc<Process>> {
    let gone: Vec<u32> = by_pid
        .iter()
        .filter(|(pid, p)| {
            p.connections.load(Ordering::Acquire) == 0 && live_start_time(**pid) != p.started
        })
        .map(|(pid, _)| *pid)
        .collect();
    gone.iter().filter_map(|pid| by_pid.remove(pid)).collect()
}

/// The start time of process `pid` (field 22 of /proc/PID/stat, in clock ticks since
/// boot), or `None` when it is gone, a zombie, or exiting: a killed process's connections
/// close while it exits, and its handles must go with them.
fn live_start_time(pid: u32) -> Option<u64> {
    /// PF_EXITING in the flags (field 9).
    const PF_EXITING: u64 = 0x4;
    let stat = crate::credentials::read_proc_file(&format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which may itself hold ") ": state is field 3.
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split_whitespace().collect();
    let state = *fields.first()?;
    let flags: u64 = fields.get(9 - 3)?.parse().ok()?;
    if matches!(state, "Z" | "X" | "x") || flags & PF_EXITING != 0 {
        return None;
    }
    fields.get(22 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_process_has_a_start_time_and_a_gone_one_none() {
        let me = std::process::id();
        let started = live_start_time(me);
        assert!(started.is_some());
        assert_eq!(live_start_time(me), started);
        assert_eq!(live_start_time(u32::MAX - 1), None);
    }
}
