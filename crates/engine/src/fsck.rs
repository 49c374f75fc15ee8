//! Offline consistency check and repair: every invariant the engine keeps, proven from a
//! full scan (`check`, one pass per kind of record), and `fsck --repair`, which salvages
//! what is readable and rebuilds what can be derived (`repair`).

mod check;
pub(crate) mod counters;
mod lost_found;
pub mod progress;
mod repair;
mod salvage;
mod store_files;
pub(crate) mod tree_usage;

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use crate::error::FsError;
use crate::store::{FjallStore, FjallTuning, Store};
use crate::store_dir::open::OpenError;
use crate::store_dir::shadow::StoreShadow;
use crate::store_dir::state as store_state;
use crate::store_dir::{self, SharedStoreLock};

pub use check::check;
pub use repair::repair_store_dir;

/// Stop listing problems past this many; the count stays exact.
const MAX_LISTED_PROBLEMS: usize = 100;

#[derive(Debug, Default)]
pub struct FsckReport {
    pub inodes: u64,
    pub directories: u64,
    pub entries: u64,
    pub chunks: u64,
    pub xattrs: u64,
    pub orphans: u64,
    /// Trees detached by rmtree, still being deleted.
    pub reclaims: u64,
    /// Truncates and hole punches cut short, finished at the next read-write open.
    pub trims: u64,
    pub data_bytes: u64,
    pub problem_count: u64,
    pub problems: Vec<String>,
    /// Worth saying but not damage: a torn journal tail after a crash, what a repair did.
    pub notes: Vec<String>,
    pub elapsed: Duration,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.problem_count == 0
    }

    pub(super) fn problem(&mut self, text: String) {
        self.problem_count += 1;
        if self.problems.len() < MAX_LISTED_PROBLEMS {
            self.problems.push(text);
        }
    }

    /// Adds what a pass run on its own found (its counts, then its problems after ours).
    fn absorb(&mut self, part: FsckReport) {
        assert!(
            part.elapsed.is_zero(),
            "a pass's report has no time of its own"
        );
        self.inodes += part.inodes;
        self.directories += part.directories;
        self.entries += part.entries;
        self.chunks += part.chunks;
        self.xattrs += part.xattrs;
        self.orphans += part.orphans;
        self.reclaims += part.reclaims;
        self.trims += part.trims;
        self.data_bytes += part.data_bytes;
        let unlisted = part.problem_count - part.problems.len() as u64;
        for problem in part.problems {
            self.problem(problem);
        }
        self.problem_count += unlisted;
        self.notes.extend(part.notes);
    }

    pub fn summary(&self) -> String {
        let seconds = self.elapsed.as_secs_f64().max(1e-9);
        let mut text = format!(
            "{} inodes ({} directories), {} entries, {} chunks ({} data bytes), {} xattrs, {} orphans, {} detached trees; \
             checked in {:.3} s ({:.0} inodes/s)\n",
            self.inodes,
            self.directories,
            self.entries,
            self.chunks,
            self.data_bytes,
            self.xattrs,
            self.orphans,
            self.reclaims,
            seconds,
            self.inodes as f64 / seconds,
        );
        for note in &self.notes {
            let _ = writeln!(text, "note: {note}");
        }
        if self.is_clean() {
            text.push_str("clean\n");
        } else {
            let _ = writeln!(text, "{} problem(s):", self.problem_count);
            for problem in &self.problems {
                let _ = writeln!(text, "  - {problem}");
            }
            if self.problem_count as usize > self.problems.len() {
                let _ = writeln!(
                    text,
                    "  ... and {} more",
                    self.problem_count as usize - self.problems.len()
                );
            }
        }
        text
    }
}

/// Checks the store in `dir`, which must not be mounted, without changing it: the
/// journals are read as they are (`journal_check`), and the key-value store is opened
/// from a private copy (`store_shadow`), since fjall's recovery writes. Works on a
/// read-only or full device. Damage of any kind is a problem in the report (exit 1);
/// only what is not a store at all (or is in use) is an error.
pub fn fsck_store_dir(dir: &Path) -> Result<FsckReport, OpenError> {
    fsck_store_dir_observed(dir, &|_| {})
}

/// [`fsck_store_dir`], telling `progress` how many pairs the check has read so far.
pub fn fsck_store_dir_observed(
    dir: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<FsckReport, OpenError> {
    store_dir::read_format(dir)?;
    let _lock = SharedStoreLock::acquire(dir)?;
    let kv = store_dir::kv_path(dir);
    let io = |error| OpenError::StoreDir(store_dir::StoreDirError::Io(dir.to_path_buf(), error));
    // The journals are read on their own (to classify their damage) while the shadow is
    // made and fjall replays them there: neither needs the other.
    let (findings, report) = std::thread::scope(|scope| {
        let findings = scope.spawn(|| store_state::check_store_journals(dir, &kv));
        let report = check_shadow(&kv, progress);
        (check::joined(findings), report)
    });
    let findings = findings.map_err(io)?;
    let mut report = report.map_err(io)?;
    for problem in findings.all_problems() {
        report.problem(problem.clone());
    }
    report.notes.extend(findings.notes);
    Ok(report)
}

/// The check of a private copy of the key-value store in `kv` (fjall's recovery writes).
fn check_shadow(kv: &Path, progress: &(dyn Fn(u64) + Sync)) -> std::io::Result<FsckReport> {
    let shadow = StoreShadow::of(kv)?;
    let report = match FjallStore::open(shadow.path(), &check_tuning()) {
        Ok(store) => checked(&progress::Counting::new(&store, progress)),
        Err(error) => {
            let mut report = FsckReport::default();
            report.problem(format!(
                "the key-value store cannot be opened: {error} (a damaged or missing table, \
                 blob, manifest or `current` file)"
            ));
            report
        }
    };
    Ok(report)
}

fn check_tuning() -> FjallTuning {
    FjallTuning {
        worker_threads: 1,
        ..FjallTuning::default()
    }
}

/// `check`, with a store that fails to read (a checksum, an I/O error, an undecodable
/// record) as a problem of the report rather than an error.
fn checked(store: &dyn Store) -> FsckReport {
    match check(store) {
        Ok(report) => report,
        // A record that reads but makes no sense (see `keys::decode_inode`).
        Err(FsError::Corrupt(problem)) => {
            let mut report = FsckReport::default();
            report.problem(format!("a damaged record: {problem}"));
            report
        }
        Err(error) => {
            let mut report = FsckReport::default();
            report.problem(format!(
                "reading the store failed: {error} (damage in a table or blob file: \
                 checksum, truncation or a deleted file)"
            ));
            report
        }
    }
}

pub(crate) use crate::store::scan_all;
