use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use shoal_engine::store_dir::StoreDirError;
use shoal_engine::OpenError;

/// Exit 0 when clean, 1 when the store is damaged or an invariant fails (the report says
/// which), 2 when the directory is not a store we can check (missing, foreign, newer, in
/// use). `repair` repairs in place; its exit code is that of the repaired store's check.
pub fn run(store_dir: &Path, repair: bool) -> Result<ExitCode> {
    let checked = if repair {
        // A repair writes files into the store (STATE, a salvaged key-value store).
        crate::mkfs_cmd::set_private_umask();
        shoal_engine::fsck::repair_store_dir(store_dir)
    } else {
        let bar = crate::progress_bar::count("fsck", "pairs");
        let checked =
            shoal_engine::fsck::progress::fsck_store_dir_with_progress(store_dir, &|pairs| {
                bar.set_position(pairs)
            });
        bar.finish_and_clear();
        checked
    };
    match checked {
        Ok(report) => {
            print!("{}: {}", store_dir.display(), report.summary());
            if !report.is_clean() && !repair {
                println!(
                    "`shoal fsck --repair {}` keeps what is readable and drops the rest",
                    store_dir.display()
                );
            }
            Ok(if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Err(error @ OpenError::StoreDir(_)) => {
            eprintln!(
                "shoal: fsck {}: {error}{}",
                store_dir.display(),
                mounted_note(&error)
            );
            Ok(ExitCode::from(2))
        }
        Err(error) => {
            eprintln!("shoal: fsck {}: damaged: {error}", store_dir.display());
            Ok(ExitCode::from(1))
        }
    }
}

/// For a store in use: where the daemon holding it has it mounted, and what to run.
fn mounted_note(error: &OpenError) -> String {
    let OpenError::StoreDir(StoreDirError::Locked(_, owner)) = error else {
        return String::new();
    };
    owner
        .parse::<u32>()
        .ok()
        .and_then(shoal_sys::mounts::served_mountpoint)
        .map(|mountpoint| {
            format!(
                "; it is mounted on {0}: `shoal umount {0}` first, or `shoal fsck --counters {0}` checks the counters live",
                mountpoint.display()
            )
        })
        .unwrap_or_default()
}

/// `fsck --counters`: on a mountpoint the daemon checks a snapshot while writes go on; on a
/// store directory this process does. Same exit codes as a full fsck.
pub fn run_counters(target: &Path, threads: Option<usize>) -> Result<ExitCode> {
    let threads = threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|cores| cores.get())
            .unwrap_or(1)
    });
    let quota_target = match crate::quota_cmd::QuotaTarget::resolve(target) {
        Ok(resolved) => resolved,
        Err(error) => {
            eprintln!("shoal: fsck {}: {error:#}", target.display());
            return Ok(ExitCode::from(2));
        }
    };
    let request = crate::quota_protocol::QuotaRequest::VerifyCounters { threads };
    let answer = match quota_target.request(&request) {
        Ok(answer) => answer,
        Err(error) => {
            eprintln!("shoal: fsck {}: {error:#}", target.display());
            return Ok(ExitCode::from(2));
        }
    };
    let report: crate::quota_protocol::CountersLine = serde_json::from_value(answer)?;
    print!("{}: {}", target.display(), report.summary);
    Ok(if report.clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
