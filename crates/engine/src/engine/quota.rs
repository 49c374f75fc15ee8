//! Quotas: limits on the usage the counters already keep exact, checked inside the same
//! transaction that moves the usage. Nothing is ever scanned to enforce them.
//!
//! Semantics follow XFS: a limit of 0 means none; a hard limit may be reached but not
//! exceeded; going over a soft limit starts a grace timer, and once it has run out the soft
//! limit is enforced like a hard one until usage drops back to it. Usage charged to id 0 is
//! never limited unless `QuotaSettings::enforce_root` is set (XFS never enforces id 0).
//! Ownership changes (chown, project tagging) move usage without being refused, as XFS
//! does for privileged callers; the new owner's next allocation is then checked.

use std::collections::HashMap;

use crate::engine::UsageDeltas;
use crate::error::{FsError, FsResult};
use crate::records::inode::{Timestamp, Usage, UsageKey};
use crate::records::quota::{QuotaEntry, QuotaKind, QuotaRecord, QuotaSettings};

/// Per-id usage totals and limits, kept in memory under the writer lock.
#[derive(Default)]
pub(crate) struct QuotaState {
    totals: [HashMap<u32, Usage>; 3],
    total: Usage,
    records: HashMap<(QuotaKind, u32), QuotaRecord>,
    pub(crate) settings: QuotaSettings,
}

/// Net change of one id's usage within one transaction.
type OwnerDeltas = HashMap<(QuotaKind, u32), (i64, i64)>;

impl QuotaState {
    pub(crate) fn new(
        usage: &HashMap<UsageKey, Usage>,
        records: HashMap<(QuotaKind, u32), QuotaRecord>,
        settings: QuotaSettings,
    ) -> Self {
        let mut state = QuotaState {
            records,
            settings,
            ..QuotaState::default()
        };
        for (&owners, &counted) in usage {
            state.add(owners, counted.inodes as i64, counted.bytes as i64);
        }
        state
    }

    fn add(&mut self, owners: UsageKey, inodes: i64, bytes: i64) {
        for kind in QuotaKind::ALL {
            let id = kind.id_of(owners);
            let totals = &mut self.totals[kind.index()];
            let usage = totals.entry(id).or_default();
            *usage = shifted(*usage, inodes, bytes);
            if *usage == Usage::default() {
                totals.remove(&id);
            }
        }
        self.total = shifted(self.total, inodes, bytes);
    }

    pub(crate) fn usage_of(&self, kind: QuotaKind, id: u32) -> Usage {
        self.totals[kind.index()]
            .get(&id)
            .copied()
            .unwrap_or_default()
    }

    pub(crate) fn total(&self) -> Usage {
        self.total
    }

    pub(crate) fn record(&self, kind: QuotaKind, id: u32) -> Option<QuotaRecord> {
        self.records.get(&(kind, id)).copied()
    }

    /// Every id of `kind` with usage or limits, in id order.
    pub(crate) fn report(&self, kind: QuotaKind) -> Vec<QuotaEntry> {
        let mut ids: Vec<u32> = self.totals[kind.index()].keys().copied().collect();
        ids.extend(
            self.records
                .keys()
                .filter(|(k, _)| *k == kind)
                .map(|&(_, id)| id),
        );
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .map(|id| QuotaEntry {
                kind,
                id,
                usage: self.usage_of(kind, id),
                record: self.record(kind, id).unwrap_or_default(),
            })
            .collect()
    }

    pub(crate) fn has_records(&self) -> bool {
        !self.records.is_empty()
    }

    /// Whether any byte limit applies to usage charged to `owners`.
    pub(crate) fn bytes_limited(&self, owners: UsageKey) -> bool {
        QuotaKind::ALL.into_iter().any(|kind| {
            let id = kind.id_of(owners);
            self.limits_apply(id)
                && self.records.get(&(kind, id)).is_some_and(|record| {
                    record.limits.bytes_soft > 0 || record.limits.bytes_hard > 0
                })
        })
    }

    /// Whether any byte limit applies to anyone.
    pub(crate) fn any_bytes_limited(&self) -> bool {
        self.records.iter().any(|(&(_, id), record)| {
            self.limits_apply(id) && (record.limits.bytes_soft > 0 || record.limits.bytes_hard > 0)
        })
    }

    fn limits_apply(&self, id: u32) -> bool {
        id != 0 || self.settings.enforce_root
    }

    /// Checks a transaction's usage changes against the limits. Returns the records whose
    /// grace timers start or stop with this change (to be written in the same batch), or
    /// `QuotaExceeded` when an increase would pass a hard limit or an expired soft limit.
    /// `forced` changes (ownership moves) are never refused.
    pub(crate) fn check(
        &self,
        deltas: &UsageDeltas,
        now: Timestamp,
        forced: bool,
    ) -> FsResult<Vec<((QuotaKind, u32), QuotaRecord)>> {
        if self.records.is_empty() {
            return Ok(Vec::new());
        }
        let mut changed = Vec::new();
        for ((kind, id), (inodes, bytes)) in owner_deltas(deltas) {
            let Some(record) = self.records.get(&(kind, id)) else {
                continue;
            };
            if !self.limits_apply(id) {
                continue;
            }
            let after = shifted(self.usage_of(kind, id), inodes, bytes);
            let limits = &record.limits;
            if !forced {
                if inodes > 0 {
                    check_limit(
                        after.inodes,
                        limits.inodes_soft,
                        limits.inodes_hard,
                        record.inodes_grace_ends,
                        now,
                    )?;
                }
                if bytes > 0 {
                    check_limit(
                        after.bytes,
                        limits.bytes_soft,
                        limits.bytes_hard,
                        record.bytes_grace_ends,
                        now,
                    )?;
                }
            }
            let updated = self.with_timers(*record, after, now);
            if updated != *record {
                changed.push(((kind, id), updated));
            }
        }
        Ok(changed)
    }

    /// A record's grace timers for the given usage: started when usage first goes over a
    /// soft limit, cleared when it comes back under.
    pub(crate) fn with_timers(
        &self,
        record: QuotaRecord,
        usage: Usage,
        now: Timestamp,
    ) -> QuotaRecord {
        QuotaRecord {
            limits: record.limits,
            bytes_grace_ends: timer(
                usage.bytes,
                record.limits.bytes_soft,
                record.bytes_grace_ends,
                now,
                self.settings.bytes_grace_secs,
            ),
            inodes_grace_ends: timer(
                usage.inodes,
                record.limits.inodes_soft,
                record.inodes_grace_ends,
                now,
                self.settings.inodes_grace_secs,
            ),
        }
    }

    /// Applies a committed transaction.
    pub(crate) fn apply(
        &mut self,
        deltas: &UsageDeltas,
        changed: Vec<((QuotaKind, u32), QuotaRecord)>,
    ) {
        for (&owners, &(inodes, bytes)) in deltas {
            self.add(owners, inodes, bytes);
        }
        for (owner, record) in changed {
            self.set_record(owner, record);
        }
    }

    pub(crate) fn set_record(&mut self, owner: (QuotaKind, u32), record: QuotaRecord) {
        if record.limits.is_unlimited() {
            self.records.remove(&owner);
        } else {
            self.records.insert(owner, record);
        }
    }
}

fn owner_deltas(deltas: &UsageDeltas) -> OwnerDeltas {
    let mut by_owner = OwnerDeltas::new();
    for (&owners, &(inodes, bytes)) in deltas {
        for kind in QuotaKind::ALL {
            let delta = by_owner.entry((kind, kind.id_of(owners))).or_default();
            delta.0 += inodes;
            delta.1 += bytes;
        }
    }
    by_owner
}

fn check_limit(
    after: u64,
    soft: u64,
    hard: u64,
    grace_ends: Option<i64>,
    now: Timestamp,
) -> FsResult<()> {
    if hard > 0 && after > hard {
        return Err(FsError::QuotaExceeded);
    }
    let soft_expired = grace_ends.is_some_and(|ends| now.secs >= ends);
    if soft > 0 && after > soft && soft_expired {
        return Err(FsError::QuotaExceeded);
    }
    Ok(())
}

fn timer(
    usage: u64,
    soft: u64,
    running: Option<i64>,
    now: Timestamp,
    grace_secs: u64,
) -> Option<i64> {
    if soft == 0 || usage <= soft {
        return None;
    }
    Some(running.unwrap_or(now.secs.saturating_add(grace_secs as i64)))
}

fn shifted(usage: Usage, inodes: i64, bytes: i64) -> Usage {
    Usage {
        inodes: usage.inodes.saturating_add_signed(inodes),
        bytes: usage.bytes.saturating_add_signed(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::quota::{QuotaLimits, DEFAULT_GRACE_SECS};

    fn owners(uid: u32) -> UsageKey {
        UsageKey {
            uid,
            gid: 100,
            project: 0,
        }
    }

    fn state_with(limits: QuotaLimits, usage_inodes: u64) -> QuotaState {
        let usage = HashMap::from([(
            owners(7),
            Usage {
                inodes: usage_inodes,
                bytes: 0,
            },
        )]);
        let records = HashMap::from([(
            (QuotaKind::User, 7),
            QuotaRecord {
                limits,
                ..QuotaRecord::default()
            },
        )]);
        QuotaState::new(&usage, records, QuotaSettings::default())
    }

    fn one_more_inode() -> UsageDeltas {
        UsageDeltas::from_iter([(owners(7), (1, 0))])
    }

    #[test]
    fn hard_limit_may_be_reached_but_not_passed() {
        let limits = QuotaLimits {
            inodes_hard: 3,
            ..QuotaLimits::default()
        };
        let now = Timestamp::now();
        assert!(state_with(limits, 2)
            .check(&one_more_inode(), now, false)
            .is_ok());
        assert!(matches!(
            state_with(limits, 3).check(&one_more_inode(), now, false),
            Err(FsError::QuotaExceeded)
        ));
        assert!(state_with(limits, 3)
            .check(&one_more_inode(), now, true)
            .is_ok());
    }

    #[test]
    fn soft_limit_starts_a_timer_and_is_enforced_after_it() {
        let limits = QuotaLimits {
            inodes_soft: 2,
            ..QuotaLimits::default()
        };
        let now = Timestamp::now();
        let mut state = state_with(limits, 2);
        let changed = state.check(&one_more_inode(), now, false).unwrap();
        let expected_end = now.secs + DEFAULT_GRACE_SECS as i64;
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].1.inodes_grace_ends, Some(expected_end));
        state.apply(&one_more_inode(), changed);
        // Still within grace: allowed, the timer keeps its end.
        assert!(state
            .check(&one_more_inode(), now, false)
            .unwrap()
            .is_empty());
        let later = Timestamp {
            secs: expected_end,
            nanos: 0,
        };
        assert!(matches!(
            state.check(&one_more_inode(), later, false),
            Err(FsError::QuotaExceeded)
        ));
        // Dropping back to the soft limit clears the timer.
        let two_fewer = UsageDeltas::from_iter([(owners(7), (-2, 0))]);
        let changed = state.check(&two_fewer, later, false).unwrap();
        assert_eq!(changed[0].1.inodes_grace_ends, None);
    }

    #[test]
    fn id_zero_is_limited_only_when_configured() {
        let limits = QuotaLimits {
            inodes_hard: 1,
            ..QuotaLimits::default()
        };
        let usage = HashMap::from([(
            owners(0),
            Usage {
                inodes: 1,
                bytes: 0,
            },
        )]);
        let records = HashMap::from([(
            (QuotaKind::User, 0),
            QuotaRecord {
                limits,
                ..QuotaRecord::default()
            },
        )]);
        let delta = UsageDeltas::from_iter([(owners(0), (1, 0))]);
        let mut state = QuotaState::new(&usage, records, QuotaSettings::default());
        assert!(state.check(&delta, Timestamp::now(), false).is_ok());
        state.settings.enforce_root = true;
        assert!(state.check(&delta, Timestamp::now(), false).is_err());
    }

    #[test]
    fn totals_follow_applied_changes_per_kind() {
        let mut state = QuotaState::new(&HashMap::new(), HashMap::new(), QuotaSettings::default());
        let a = UsageKey {
            uid: 1,
            gid: 10,
            project: 5,
        };
        let b = UsageKey {
            uid: 1,
            gid: 20,
            project: 0,
        };
        state.apply(
            &UsageDeltas::from_iter([(a, (2, 100)), (b, (1, 50))]),
            Vec::new(),
        );
        assert_eq!(
            state.usage_of(QuotaKind::User, 1),
            Usage {
                inodes: 3,
                bytes: 150
            }
        );
        assert_eq!(
            state.usage_of(QuotaKind::Group, 20),
            Usage {
                inodes: 1,
                bytes: 50
            }
        );
        assert_eq!(
            state.usage_of(QuotaKind::Project, 5),
            Usage {
                inodes: 2,
                bytes: 100
            }
        );
        assert_eq!(
            state.total(),
            Usage {
                inodes: 3,
                bytes: 150
            }
        );
        state.apply(&UsageDeltas::from_iter([(b, (-1, -50))]), Vec::new());
        assert_eq!(state.report(QuotaKind::Group).len(), 1);
    }
}
