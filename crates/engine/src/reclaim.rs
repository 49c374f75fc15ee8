//! Whole-tree removal (`rmtree`): the tree leaves the namespace in one batch, then is
//! deleted in the background.
//!
//! `detach_tree` removes the directory's entry and its recursive usage from every ancestor,
//! sets its `parent` to 0 (so no later change below it reaches the live tree) and records
//! it under a reclaim key, all in one batch. A reclaimer thread then deletes the tree in
//! small batches, each exactly what unlink and rmdir would do (so quota counters, link
//! counts of files also named outside the tree, and files still open, which become
//! orphans, stay right, and fsck is clean between any two batches), pausing between
//! batches. Its memory is one directory listing plus the path from the detached root to
//! the directory it works in. The reclaim keys are the persistent work list: after a
//! crash the next read-write open resumes.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::engine::reclaim_signal::ReclaimSignal;
use crate::engine::tree_usage::TreeDelta;
use crate::engine::{Engine, Txn};
use crate::error::{FsError, FsResult};
use crate::keys;
use crate::records::inode::{FileKind, TreeUsage, ROOT_INO};
use crate::store::{Scan, Space};

/// Names deleted per batch: the writer lock is held for one batch at a time.
const RECLAIM_BATCH_NAMES: usize = 512;
/// Pause between batches, so foreground operations get the writer lock and the store's
/// background work keeps up.
const RECLAIM_PAUSE: Duration = Duration::from_millis(2);
/// Steps in a row that delete nothing (each moves down or restarts from the root) before
/// the reclaim of a tree is given up as stuck: far more than any tree's depth changes.
const MAX_IDLE_STEPS: u32 = 10_000;
/// Bound on directory depth when walking up; deeper means a cycle, i.e. corruption.
const MAX_DEPTH: usize = 1 << 20;

/// A tree `detach_tree` took out of the namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetachedTree {
    /// The detached directory, now reclaimed in the background.
    pub ino: u64,
    /// What was below it when detached.
    pub usage: TreeUsage,
}

/// What is still to be reclaimed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReclaimBacklog {
    /// Detached trees not yet fully deleted.
    pub trees: u64,
    /// Names (and the detached directories themselves) still to delete.
    pub entries: u64,
    /// Bytes of regular files still to delete (one per name).
    pub bytes: u64,
}

impl Engine {
    /// Takes the directory `parent/name` and everything below it out of the namespace in
    /// one batch; it is then deleted in the background (see the module comment). A
    /// non-directory is simply unlinked.
    pub fn detach_tree(self: &Arc<Self>, parent: u64, name: &[u8]) -> FsResult<DetachedTree> {
        let mut txn = self.begin()?;
        let mut parent_inode = txn.directory(parent)?;
        let (ino, kind) = txn.entry(parent, name)?.ok_or(FsError::NotFound)?;
        if kind != FileKind::Directory {
            drop(txn);
            let inode = self.getattr(ino)?;
            self.unlink(parent, name)?;
            let usage = TreeUsage {
                rctime: inode.ctime,
                ..TreeUsage::default()
            };
            return Ok(DetachedTree { ino, usage });
        }
        let mut dir = txn.inode(ino)?;
        let delta = txn.subtree_delta(&dir)?;
        let usage = txn.subtree_usage(ino)?;
        txn.delete_entry(parent, name);
        txn.touch_parent(&mut parent_inode, -1, -1);
        txn.name_removed(parent, delta);
        dir.parent = 0;
        dir.ctime = txn.now;
        txn.put_inode(&dir);
        txn.dir_moved(ino);
        txn.inode_changed(&dir, dir.size)?;
        txn.put(Space::Meta, keys::reclaim_key(ino), Vec::new());
        txn.commit()?;
        self.start_reclaim();
        Ok(DetachedTree { ino, usage })
    }

    /// Detached trees still being deleted (not those being built by a bulk load).
    pub fn reclaim_roots(&self) -> FsResult<Vec<u64>> {
        let (start, end) = keys::all_reclaims_range();
        let held = self.reclaim_signal().held.lock().clone();
        let mut roots = Vec::new();
        let mut decode_error = None;
        self.store()
            .scan(Space::Meta, &start, &end, &mut |key, _| {
                match keys::decode_reclaim_key(key) {
                    Ok(dir) if held.contains(&dir) => {}
                    Ok(dir) => roots.push(dir),
                    Err(error) => {
                        decode_error = Some(error);
                        return Scan::Stop;
                    }
                }
                Scan::Continue
            })?;
        decode_error.map_or(Ok(roots), Err)
    }

    /// What is still to be reclaimed, exact: the recursive usage of every detached tree.
    pub fn reclaim_backlog(&self) -> FsResult<ReclaimBacklog> {
        let mut backlog = ReclaimBacklog::default();
        for root in self.reclaim_roots()? {
            let usage = match self.tree_usage(root) {
                Ok(usage) => usage,
                // Deleted between the two reads.
                Err(FsError::NotFound) => continue,
                Err(error) => return Err(error),
            };
            backlog.trees += 1;
            backlog.entries += usage.entries + 1;
            backlog.bytes += usage.bytes;
        }
        Ok(backlog)
    }

    /// Starts the reclaimer thread if it is not running, and wakes it.
    pub(crate) fn start_reclaim(self: &Arc<Self>) {
        let signal = self.reclaim_signal();
        let mut state = signal.state.lock();
        state.work = true;
        signal.wake.notify_all();
        if state.running || state.stopped {
            return;
        }
        state.running = true;
        let engine = Arc::downgrade(self);
        let thread_signal = signal.clone();
        let poison = self.poison().clone();
        let spawned = std::thread::Builder::new()
            .name("shoal-reclaim".into())
            .spawn(move || {
                // Nothing waits for the reclaimer: only later operations are refused.
                let _poison_on_panic = poison.guard("reclaim", || {});
                reclaim_loop(&engine, &thread_signal);
            });
        if let Err(error) = spawned {
            state.running = false;
            tracing::error!("cannot start the reclaimer thread: {error}; detached trees wait");
        }
    }

    /// Deletes every detached tree now, in this thread; `progress` hears the names deleted
    /// so far after each batch. For an unmounted store (`shoal rmtree` offline).
    pub fn reclaim_all(&self, mut progress: impl FnMut(u64)) -> FsResult<()> {
        let mut deleted = 0;
        for root in self.reclaim_roots()? {
            let mut path = Vec::new();
            let mut idle_steps = 0;
            loop {
                match self.reclaim_step(root, &mut path)? {
                    Step::Deleted(0) => {
                        idle_steps += 1;
                        if idle_steps > MAX_IDLE_STEPS {
                            return Err(no_progress(root));
                        }
                    }
                    Step::Deleted(names) => {
                        idle_steps = 0;
                        deleted += names;
                        progress(deleted);
                    }
                    Step::Done => break,
                }
            }
        }
        Ok(())
    }

    /// One batch of the deletion of the tree detached at `root`. `path` is where the
    /// previous step left off (directories from `root` down), kept by the caller.
    fn reclaim_step(&self, root: u64, path: &mut Vec<u64>) -> FsResult<Step> {
        let dir = path.last().copied().unwrap_or(root);
        // Listed outside the writer lock; each entry is checked again inside it.
        let entries = match self.readdir(dir, None, RECLAIM_BATCH_NAMES) {
            Ok(entries) => entries,
            // Deleted by an earlier step (another reclaimer's, too); the reclaim key went
            // with the root.
            Err(FsError::NotFound) if dir == root => return Ok(Step::Done),
            Err(FsError::NotFound) => {
                path.clear();
                return Ok(Step::Deleted(0));
            }
            Err(error) => return Err(error),
        };
        let mut txn = self.begin()?;
        let mut dir_inode = match txn.directory(dir) {
            Ok(inode) => inode,
            Err(FsError::NotFound) => {
                path.pop();
                return Ok(Step::Deleted(0));
            }
            Err(error) => return Err(error),
        };
        // A process still inside the tree may have moved this directory back into the
        // live namespace (rename from a detached directory it has open): start over.
        if dir != root && !is_below(&txn, dir, root)? {
            path.clear();
            return Ok(Step::Deleted(0));
        }
        let mut deleted = 0;
        for entry in &entries {
            if txn.entry(dir, &entry.name)? != Some((entry.ino, entry.kind)) {
                continue;
            }
            let inode = txn.inode(entry.ino)?;
            if inode.kind == FileKind::Directory {
                if inode.size > 0 {
                    // Its children go first, in the next steps.
                    path.push(inode.ino);
                    break;
                }
                txn.delete_entry(dir, &entry.name);
                txn.touch_parent(&mut dir_inode, -1, -1);
                txn.name_removed(dir, TreeDelta::one_name(&inode));
                txn.purge_inode(inode.ino)?;
            } else {
                txn.delete_entry(dir, &entry.name);
                txn.touch_parent(&mut dir_inode, -1, 0);
                txn.name_removed(dir, TreeDelta::one_name(&inode));
                txn.drop_link(inode, dir)?;
            }
            deleted += 1;
        }
        let finished = entries.is_empty() && dir_inode.size == 0;
        if finished {
            if dir == root {
                // The last batch of this tree: the reclaim key goes with the directory.
                txn.purge_inode(root)?;
                txn.delete(Space::Meta, keys::reclaim_key(root));
                txn.commit()?;
                self.finish_purges();
                return Ok(Step::Done);
            }
            // Its parent deletes it in the next step.
            path.pop();
        }
        txn.commit()?;
        self.finish_purges();
        Ok(Step::Deleted(deleted + u64::from(finished)))
    }
}

fn no_progress(root: u64) -> FsError {
    FsError::Corrupt(format!(
        "reclaim of detached tree {root} makes no progress (run shoal fsck)"
    ))
}

/// Whether directory `dir` is (still) below `root`.
fn is_below(txn: &Txn<'_>, dir: u64, root: u64) -> FsResult<bool> {
    let mut current = dir;
    for _ in 0..MAX_DEPTH {
        current = match txn.inode(current) {
            Ok(inode) => inode.parent,
            Err(FsError::NotFound) => return Ok(false),
            Err(error) => return Err(error),
        };
        if current == root {
            return Ok(true);
        }
        if current == 0 || current == ROOT_INO {
            return Ok(false);
        }
    }
    Err(FsError::Corrupt(format!(
        "directory cycle above inode {dir}"
    )))
}

enum Step {
    Deleted(u64),
    Done,
}

/// Reclaims detached trees until none is left, then waits to be woken.
fn reclaim_loop(engine: &Weak<Engine>, signal: &ReclaimSignal) {
    loop {
        {
            let mut state = signal.state.lock();
            while !state.work && !state.stopped {
                signal.wake.wait(&mut state);
            }
            if state.stopped {
                state.running = false;
                return;
            }
            state.work = false;
        }
        let Some(strong) = engine.upgrade() else {
            return;
        };
        let roots = match strong.reclaim_roots() {
            Ok(roots) => roots,
            Err(error) => {
                tracing::error!("reclaim: cannot list detached trees: {error}");
                return;
            }
        };
        drop(strong);
        for root in roots {
            let mut path = Vec::new();
            let mut idle_steps = 0;
            loop {
                if signal.state.lock().stopped {
                    return;
                }
                let Some(strong) = engine.upgrade() else {
                    return;
                };
                match strong.reclaim_step(root, &mut path) {
                    Ok(Step::Deleted(0)) if idle_steps >= MAX_IDLE_STEPS => {
                        tracing::error!("{}", no_progress(root));
                        break;
                    }
                    Ok(Step::Deleted(0)) => idle_steps += 1,
                    Ok(Step::Deleted(_)) => idle_steps = 0,
                    Ok(Step::Done) => break,
                    Err(FsError::ReadOnly) => return,
                    Err(error) => {
                        // Retried when next woken (a detach, or the next open).
                        tracing::error!("reclaim of detached tree {root}: {error}");
                        break;
                    }
                }
                drop(strong);
                std::thread::sleep(RECLAIM_PAUSE);
            }
        }
    }
}
