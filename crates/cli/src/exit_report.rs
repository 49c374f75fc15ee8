//! How a detached daemon tells `shoal umount` whether its final sync succeeded. The daemon
//! is nobody's child once it has detached, so its exit status is lost; it writes the
//! outcome to a file named after its pid in a runtime directory (not the store, which may
//! be read-only or gone: the very faults worth reporting), and `shoal umount`, having
//! waited for the daemon to exit, reads and removes it.

use std::fs;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

/// `/run/shoal` for root, else `$XDG_RUNTIME_DIR/shoal`, else `/tmp/shoal-<uid>`.
fn directory() -> PathBuf {
    let uid = shoal_sys::identity::effective_uid();
    if uid == 0 {
        return PathBuf::from("/run/shoal");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(runtime) => PathBuf::from(runtime).join("shoal"),
        None => PathBuf::from(format!("/tmp/shoal-{uid}")),
    }
}

fn path(pid: u32) -> PathBuf {
    directory().join(format!("daemon-{pid}.exit"))
}

/// Records this daemon's outcome: `None` for a clean exit (no record: daemons unmounted
/// by other tools leave nothing behind; a stale record of an earlier process with this
/// pid is removed), else what went wrong and was lost. Best effort: a daemon that cannot
/// write it has logged the same text.
pub fn record(failure: Option<&str>) {
    let path = path(std::process::id());
    let Some(failure) = failure else {
        let _ = fs::remove_file(&path);
        return;
    };
    let _ = fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(directory());
    let Ok(mut file) = fs::File::create(path) else {
        return;
    };
    let _ = file.write_all(failure.as_bytes());
}

/// The failure a daemon recorded before exiting, if it recorded one; removes the record.
pub fn take_failure(pid: u32) -> Option<String> {
    let path = path(pid);
    let text = fs::read_to_string(&path).ok()?;
    let _ = fs::remove_file(&path);
    Some(text)
}
