//! Quota administration on a live engine: reports, limits, settings, project tagging.

use crate::engine::Engine;
use crate::error::{FsError, FsResult};
use crate::records::inode::{FileKind, Usage, UsageKey};
use crate::records::quota::{QuotaEntry, QuotaKind, QuotaLimits, QuotaRecord, QuotaSettings};

/// Inodes re-tagged per transaction by `set_project_tree`: each batch is atomic and keeps
/// the counters exact, and the writer lock is released between batches.
const PROJECT_BATCH_INODES: usize = 256;

/// What `statfs` reports inside a directory tagged with a limited project (as XFS does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProjectQuota {
    pub project: u32,
    pub limits: QuotaLimits,
    pub usage: Usage,
}

impl Engine {
    /// Every id of `kind` with usage or limits, in id order. Exact: read from the counters
    /// under the writer lock, no scan.
    pub fn quota_report(&self, kind: QuotaKind) -> Vec<QuotaEntry> {
        self.write_state().quotas.report(kind)
    }

    pub fn quota_entry(&self, kind: QuotaKind, id: u32) -> QuotaEntry {
        let state = self.write_state();
        QuotaEntry {
            kind,
            id,
            usage: state.quotas.usage_of(kind, id),
            record: state.quotas.record(kind, id).unwrap_or_default(),
        }
    }

    /// Sets (all zero: removes) the limits of one id. Limits below current usage are
    /// accepted and enforced from the next allocation on; a soft limit already exceeded
    /// starts its grace timer now.
    pub fn set_quota_limits(
        &self,
        kind: QuotaKind,
        id: u32,
        limits: QuotaLimits,
    ) -> FsResult<QuotaEntry> {
        let mut txn = self.begin()?;
        let quotas = txn.quotas();
        let usage = quotas.usage_of(kind, id);
        let running = quotas.record(kind, id).unwrap_or_default();
        let record = quotas.with_timers(QuotaRecord { limits, ..running }, usage, txn.now);
        txn.put_quota_record(kind, id, record);
        txn.commit()?;
        Ok(QuotaEntry {
            kind,
            id,
            usage,
            record,
        })
    }

    /// Whether writes to `ino` may hit a byte limit. The FUSE adapter then bypasses the
    /// kernel's writeback cache for the file, so EDQUOT reaches the `write` that causes it
    /// instead of a later, asynchronous writeback.
    pub fn bytes_limited(&self, ino: u64) -> FsResult<bool> {
        if !self.quota_records_exist() {
            return Ok(false);
        }
        let owners = UsageKey::of(&self.read_inode(ino)?);
        Ok(self.write_state().quotas.bytes_limited(owners))
    }

    /// Whether any byte limit exists: while one does, the FUSE adapter keeps per-open
    /// requests so that limited files can bypass the writeback cache (`bytes_limited`).
    pub fn byte_limits_exist(&self) -> bool {
        self.quota_records_exist() && self.write_state().quotas.any_bytes_limited()
    }

    pub fn quota_settings(&self) -> QuotaSettings {
        self.write_state().quotas.settings
    }

    pub fn set_quota_settings(&self, settings: QuotaSettings) -> FsResult<()> {
        let mut txn = self.begin()?;
        txn.put_quota_settings(settings);
        txn.commit()
    }

    /// The limited project `ino` belongs to, if any: `statfs` then reports its limits and
    /// usage instead of the whole filesystem's.
    pub fn project_quota(&self, ino: u64) -> FsResult<Option<ProjectQuota>> {
        let project = self.read_inode(ino)?.project;
        if project == 0 {
            return Ok(None);
        }
        let state = self.write_state();
        Ok(state
            .quotas
            .record(QuotaKind::Project, project)
            .map(|record| ProjectQuota {
                project,
                limits: record.limits,
                usage: state.quotas.usage_of(QuotaKind::Project, project),
            }))
    }

    /// Tags `ino` and everything below it with `project` (0 clears), moving their usage to
    /// it, like `xfs_quota -x -c 'project -s'`. New children inherit a directory's project.
    /// Works in atomic batches, so a crash leaves a partly tagged tree with exact counters;
    /// running it again finishes the job. Returns how many inodes changed project.
    pub fn set_project_tree(&self, ino: u64, project: u32) -> FsResult<u64> {
        let top = self.read_inode(ino)?;
        let mut changed = self.set_project_of(&[ino], project)?;
        let mut directories = Vec::new();
        if top.kind == FileKind::Directory {
            directories.push(ino);
        }
        while let Some(dir) = directories.pop() {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let page = match self.readdir(dir, after.as_deref(), PROJECT_BATCH_INODES) {
                    Ok(page) => page,
                    // Removed while we walked: nothing left to tag there.
                    Err(FsError::NotFound | FsError::NotDir) => break,
                    Err(error) => return Err(error),
                };
                let Some(last) = page.last() else { break };
                after = Some(last.name.clone());
                let inos: Vec<u64> = page.iter().map(|entry| entry.ino).collect();
                directories.extend(
                    page.iter()
                        .filter(|entry| entry.kind == FileKind::Directory)
                        .map(|entry| entry.ino),
                );
                changed += self.set_project_of(&inos, project)?;
                if page.len() < PROJECT_BATCH_INODES {
                    break;
                }
            }
        }
        Ok(changed)
    }

    fn set_project_of(&self, inos: &[u64], project: u32) -> FsResult<u64> {
        let mut txn = self.begin()?;
        txn.force_quota();
        let mut changed = 0;
        for &ino in inos {
            let mut inode = match txn.inode(ino) {
                Ok(inode) => inode,
                Err(FsError::NotFound) => continue,
                Err(error) => return Err(error),
            };
            if inode.project == project {
                continue;
            }
            let bytes = inode.allocated_bytes as i64;
            txn.charge(&inode, -1, -bytes);
            inode.project = project;
            inode.ctime = txn.now;
            txn.charge(&inode, 1, bytes);
            txn.put_inode(&inode);
            txn.inode_changed(&inode, inode.size)?;
            changed += 1;
        }
        txn.commit()?;
        Ok(changed)
    }
}
