//! Metadata bytes per empty file: one writer makes `--files` empty files, 1000 to a
//! directory, with 32-hex-digit names (an object store's layout), then the filesystem is
//! synced. XFS, ext4 and other filesystems: `df` used after, minus before (XFS allocates
//! inodes on demand; ext4's inode tables were preallocated by mkfs and count as used
//! before, so its figure is directory blocks only). shoal: its store's tables (journal
//! apart: a fixed-size file set, not a per-file cost) after the writes, from
//! `shoal stats`, and, on a store made by `--make shoal`, after a whole compaction
//! (`shoal compact` on the unmounted store).

use std::fs::{self, File};
use std::path::Path;
use std::process::Command;

use super::rmtree::shoal_of;
use super::{Better, Ctx, Outcome};
use crate::error::{BenchError, IoContext, Result};
use crate::interrupt;
use crate::tools::{run_capture, run_silent};
use shoal_sys::statvfs::device_space as free_space;

const FILES_PER_DIR: usize = 1000;

/// Store sizes as `shoal stats --json` and `shoal compact` give them.
struct StoreBytes {
    disk: u64,
    journal: u64,
}

impl StoreBytes {
    fn from_json(store: &serde_json::Value) -> Result<StoreBytes> {
        let field = |name: &str| {
            store[name]
                .as_u64()
                .ok_or_else(|| BenchError::Invalid(format!("store size without {name}")))
        };
        Ok(StoreBytes {
            disk: field("disk_bytes")?,
            journal: field("journal_bytes")?,
        })
    }

    fn tables(&self) -> u64 {
        self.disk.saturating_sub(self.journal)
    }
}

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let files = ctx.params.files_per_thread;
    let mut outcome = Outcome::default();
    let used_before = df_used(ctx)?;
    make_files(&ctx.dir, files, ctx)?;
    let used_after = df_used(ctx)?;
    outcome.count("files", files as u64);
    let per_file = |bytes: u64| bytes as f64 / files as f64;
    let Some((shoal, mountpoint)) = shoal_of(ctx.target) else {
        let grown = used_after.saturating_sub(used_before);
        outcome.metric(
            "metadata bytes per file",
            "B/file",
            Better::Lower,
            per_file(grown),
        );
        outcome
            .notes
            .push("df used after sync, minus before".into());
        return Ok(outcome);
    };
    let stats = run_capture(
        Command::new(shoal)
            .args(["stats", "--json"])
            .arg(mountpoint),
    )?;
    let stats: serde_json::Value = serde_json::from_str(&stats)
        .map_err(|error| BenchError::Invalid(format!("shoal stats --json: {error}")))?;
    let written = StoreBytes::from_json(&stats["store"])?;
    outcome.metric(
        "metadata bytes per file",
        "B/file",
        Better::Lower,
        per_file(written.tables()),
    );
    outcome.metric(
        "store bytes per file, with the journal",
        "B/file",
        Better::Lower,
        per_file(written.disk),
    );
    outcome
        .notes
        .push("shoal: store tables (whole store), from shoal stats".into());
    // Offline, so last: the target is remounted afterwards.
    let compacted = ctx.target.while_unmounted(|store| {
        let text = run_capture(Command::new(shoal).arg("compact").arg(store))?;
        let sizes: serde_json::Value = serde_json::from_str(&text)
            .map_err(|error| BenchError::Invalid(format!("shoal compact: {error}")))?;
        StoreBytes::from_json(&sizes["after"])
    })?;
    match compacted {
        Some(settled) => {
            outcome.metric(
                "metadata bytes per file, compacted",
                "B/file",
                Better::Lower,
                per_file(settled.tables()),
            );
            outcome.metric(
                "store bytes per file, with the journal, compacted",
                "B/file",
                Better::Lower,
                per_file(settled.disk),
            );
        }
        None => outcome
            .notes
            .push("not compacted: only a --make shoal store can be".into()),
    }
    Ok(outcome)
}

/// `df` used of the target's filesystem once everything is written out.
fn df_used(ctx: &Ctx) -> Result<u64> {
    run_silent(ctx.tool("sync").arg("-f").arg(&ctx.dir))?;
    let space = free_space(&ctx.dir).context(|| format!("statvfs {}", ctx.dir.display()))?;
    Ok(space.used_bytes)
}

/// `files` empty files, 1000 to a directory, named as an object store names them.
fn make_files(root: &Path, files: usize, ctx: &Ctx) -> Result<()> {
    let mut dir = root.to_path_buf();
    for index in 0..files {
        if index % FILES_PER_DIR == 0 {
            interrupt::check()?;
            (ctx.progress)(&format!("{index} of {files} files"));
            dir = root.join(format!("{:03x}", index / FILES_PER_DIR));
            fs::create_dir(&dir).context(|| format!("mkdir {}", dir.display()))?;
        }
        // A 32-hex-digit hash, as Swift's .data files carry.
        let name = format!(
            "{:032x}",
            (index as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
        );
        let path = dir.join(name);
        File::create_new(&path).context(|| format!("create {}", path.display()))?;
    }
    Ok(())
}
