//! Quota records: the limits and grace settings stored under `L` and `Q` keys, and one
//! line of a quota report. What enforces them is `engine::quota`.

use crate::records::inode::{Usage, UsageKey};

/// Whose usage a limit applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaKind {
    User,
    Group,
    Project,
}

impl QuotaKind {
    pub const ALL: [QuotaKind; 3] = [QuotaKind::User, QuotaKind::Group, QuotaKind::Project];

    pub fn name(self) -> &'static str {
        match self {
            QuotaKind::User => "user",
            QuotaKind::Group => "group",
            QuotaKind::Project => "project",
        }
    }

    /// The id this kind charges for one owner combination.
    pub fn id_of(self, owners: UsageKey) -> u32 {
        match self {
            QuotaKind::User => owners.uid,
            QuotaKind::Group => owners.gid,
            QuotaKind::Project => owners.project,
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// Soft and hard limits of one user, group or project; 0 means no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotaLimits {
    pub bytes_soft: u64,
    pub bytes_hard: u64,
    pub inodes_soft: u64,
    pub inodes_hard: u64,
}

impl QuotaLimits {
    pub fn is_unlimited(&self) -> bool {
        *self == QuotaLimits::default()
    }
}

/// What the store keeps per limited id: the limits and the running grace timers (seconds
/// since the epoch at which the soft limit starts to be enforced).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotaRecord {
    pub limits: QuotaLimits,
    pub bytes_grace_ends: Option<i64>,
    pub inodes_grace_ends: Option<i64>,
}

/// Filesystem-wide quota settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaSettings {
    /// How long usage may stay over a soft limit (XFS default: 7 days).
    pub bytes_grace_secs: u64,
    pub inodes_grace_secs: u64,
    /// Whether usage charged to id 0 (root, group 0, project 0) is limited too.
    pub enforce_root: bool,
}

pub const DEFAULT_GRACE_SECS: u64 = 7 * 24 * 3600;

impl Default for QuotaSettings {
    fn default() -> Self {
        Self {
            bytes_grace_secs: DEFAULT_GRACE_SECS,
            inodes_grace_secs: DEFAULT_GRACE_SECS,
            enforce_root: false,
        }
    }
}

/// One line of a quota report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaEntry {
    pub kind: QuotaKind,
    pub id: u32,
    pub usage: Usage,
    pub record: QuotaRecord,
}
