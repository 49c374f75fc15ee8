use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

/// Exit 0 when clean, 1 when an invariant fails (the report says which), 2 when the store
/// cannot be read at all.
pub fn run(store_dir: &Path) -> Result<ExitCode> {
    match shoal_engine::fsck::fsck_store_dir(store_dir) {
        Ok(report) => {
            print!("{}: {}", store_dir.display(), report.summary());
            Ok(if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Err(error) => {
            eprintln!("shoal: fsck {}: {error}", store_dir.display());
            Ok(ExitCode::from(2))
        }
    }
}
