//! Quota requests, executed against an engine: in the daemon for a live mount (they arrive
//! on the control socket) or in this process on an unmounted store. One code path, so a
//! live and an offline answer cannot differ.

use serde::{Deserialize, Serialize};
use shoal_engine::{Engine, QuotaEntry, QuotaKind, QuotaLimits, QuotaSettings};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaKindArg {
    User,
    Group,
    Project,
}

impl From<QuotaKindArg> for QuotaKind {
    fn from(kind: QuotaKindArg) -> Self {
        match kind {
            QuotaKindArg::User => QuotaKind::User,
            QuotaKindArg::Group => QuotaKind::Group,
            QuotaKindArg::Project => QuotaKind::Project,
        }
    }
}

/// New limits for one id; `None` keeps the current value, `Some(0)` removes that limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsChange {
    pub bytes_soft: Option<u64>,
    pub bytes_hard: Option<u64>,
    pub inodes_soft: Option<u64>,
    pub inodes_hard: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsChange {
    pub bytes_grace_secs: Option<u64>,
    pub inodes_grace_secs: Option<u64>,
    pub enforce_root: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "quota", rename_all = "snake_case")]
pub enum QuotaRequest {
    Report {
        kind: QuotaKindArg,
    },
    SetLimits {
        kind: QuotaKindArg,
        id: u32,
        change: LimitsChange,
    },
    Settings {
        change: SettingsChange,
    },
    /// Tags the tree at inode `ino` with `project` (0 clears).
    SetProject {
        ino: u64,
        project: u32,
    },
    /// Verifies every counter against a parallel scan of a snapshot.
    VerifyCounters {
        threads: usize,
    },
}

impl QuotaRequest {
    pub fn mutates(&self) -> bool {
        match self {
            QuotaRequest::Report { .. } | QuotaRequest::VerifyCounters { .. } => false,
            QuotaRequest::SetLimits { .. } => true,
            QuotaRequest::SetProject { .. } => true,
            QuotaRequest::Settings { change } => *change != SettingsChange::default(),
        }
    }
}

/// One line of a report, as sent over the wire and printed by `--json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaLine {
    pub kind: QuotaKindArg,
    pub id: u32,
    pub bytes_used: u64,
    pub bytes_soft: u64,
    pub bytes_hard: u64,
    /// Seconds since the epoch when the byte soft limit starts to be enforced.
    pub bytes_grace_ends: Option<i64>,
    pub inodes_used: u64,
    pub inodes_soft: u64,
    pub inodes_hard: u64,
    pub inodes_grace_ends: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsLine {
    pub bytes_grace_secs: u64,
    pub inodes_grace_secs: u64,
    pub enforce_root: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CountersLine {
    pub clean: bool,
    pub inodes_scanned: u64,
    pub counters_checked: usize,
    pub threads: usize,
    pub elapsed_secs: f64,
    pub inodes_per_sec: f64,
    pub mismatches: Vec<String>,
    pub summary: String,
}

fn kind_arg(kind: QuotaKind) -> QuotaKindArg {
    match kind {
        QuotaKind::User => QuotaKindArg::User,
        QuotaKind::Group => QuotaKindArg::Group,
        QuotaKind::Project => QuotaKindArg::Project,
    }
}

pub fn line_of(entry: &QuotaEntry) -> QuotaLine {
    let limits = entry.record.limits;
    QuotaLine {
        kind: kind_arg(entry.kind),
        id: entry.id,
        bytes_used: entry.usage.bytes,
        bytes_soft: limits.bytes_soft,
        bytes_hard: limits.bytes_hard,
        bytes_grace_ends: entry.record.bytes_grace_ends,
        inodes_used: entry.usage.inodes,
        inodes_soft: limits.inodes_soft,
        inodes_hard: limits.inodes_hard,
        inodes_grace_ends: entry.record.inodes_grace_ends,
    }
}

fn settings_line(settings: QuotaSettings) -> SettingsLine {
    SettingsLine {
        bytes_grace_secs: settings.bytes_grace_secs,
        inodes_grace_secs: settings.inodes_grace_secs,
        enforce_root: settings.enforce_root,
    }
}

fn changed_limits(current: QuotaLimits, change: LimitsChange) -> QuotaLimits {
    QuotaLimits {
        bytes_soft: change.bytes_soft.unwrap_or(current.bytes_soft),
        bytes_hard: change.bytes_hard.unwrap_or(current.bytes_hard),
        inodes_soft: change.inodes_soft.unwrap_or(current.inodes_soft),
        inodes_hard: change.inodes_hard.unwrap_or(current.inodes_hard),
    }
}

/// Runs a request; the answer is JSON (the same for a live mount and a store).
pub fn execute(engine: &Engine, request: &QuotaRequest) -> Result<serde_json::Value, String> {
    let fail = |error: shoal_engine::FsError| error.to_string();
    let value = match request {
        QuotaRequest::Report { kind } => {
            let lines: Vec<QuotaLine> = engine
                .quota_report((*kind).into())
                .iter()
                .map(line_of)
                .collect();
            serde_json::to_value(lines)
        }
        QuotaRequest::SetLimits { kind, id, change } => {
            let kind = QuotaKind::from(*kind);
            let current = engine.quota_entry(kind, *id).record.limits;
            let entry = engine
                .set_quota_limits(kind, *id, changed_limits(current, *change))
                .map_err(fail)?;
            serde_json::to_value(line_of(&entry))
        }
        QuotaRequest::Settings { change } => {
            let current = engine.quota_settings();
            let updated = QuotaSettings {
                bytes_grace_secs: change.bytes_grace_secs.unwrap_or(current.bytes_grace_secs),
                inodes_grace_secs: change
                    .inodes_grace_secs
                    .unwrap_or(current.inodes_grace_secs),
                enforce_root: change.enforce_root.unwrap_or(current.enforce_root),
            };
            if updated != current {
                engine.set_quota_settings(updated).map_err(fail)?;
            }
            serde_json::to_value(settings_line(updated))
        }
        QuotaRequest::SetProject { ino, project } => {
            let changed = engine.set_project_tree(*ino, *project).map_err(fail)?;
            // Tagging is an administrative act: make it durable before answering.
            engine.sync().map_err(fail)?;
            serde_json::to_value(serde_json::json!({ "changed_inodes": changed }))
        }
        QuotaRequest::VerifyCounters { threads } => {
            let report = engine.verify_counters(*threads).map_err(fail)?;
            serde_json::to_value(CountersLine {
                clean: report.is_clean(),
                inodes_scanned: report.inodes_scanned,
                counters_checked: report.counters_checked,
                threads: report.threads,
                elapsed_secs: report.elapsed.as_secs_f64(),
                inodes_per_sec: report.inodes_per_second(),
                mismatches: report.mismatches.clone(),
                summary: report.summary(),
            })
        }
    };
    value.map_err(|error| format!("cannot encode the answer: {error}"))
}
