//! `shoal umount`: unmount, then wait until the daemon has synced and exited, so the store
//! is durable and free when this returns.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::mounts;

/// A daemon flushing a large memtable may take a while; past this we report it.
const DAEMON_EXIT_WAIT: Duration = Duration::from_secs(300);

pub fn run(mountpoint: &Path) -> Result<ExitCode> {
    let mountpoint = mounts::shoal_mount_at(mountpoint)?;
    let daemons = mounts::daemon_pids(&mountpoint);
    let dead = matches!(std::fs::metadata(&mountpoint), Err(e) if e.raw_os_error() == Some(libc::ENOTCONN));
    unmount(&mountpoint, dead)?;
    wait_for_exit(&daemons)?;
    // The daemon's final sync happens after the unmount: only it knows how that went.
    let mut code = ExitCode::SUCCESS;
    for pid in daemons {
        if let Some(failure) = crate::exit_report::take_failure(pid) {
            eprintln!(
                "shoal: {} unmounted, but its daemon {pid} failed: {failure}",
                mountpoint.display()
            );
            code = ExitCode::from(1);
        }
    }
    Ok(code)
}

/// Unmounts; `lazy` detaches even when busy (used for dead mounts and on signals).
pub fn unmount(mountpoint: &Path, lazy: bool) -> Result<()> {
    if shoal_sys::identity::is_root() {
        let Err(error) = shoal_sys::mount_calls::unmount(mountpoint, lazy) else {
            return Ok(());
        };
        if error.raw_os_error() == Some(libc::EBUSY) {
            bail!(
                "{} is busy (files are open or a process has its cwd there)",
                mountpoint.display()
            );
        }
        return Err(error).with_context(|| format!("umount {}", mountpoint.display()));
    }
    let flag = if lazy { "-uz" } else { "-u" };
    let status = Command::new("fusermount3")
        .arg(flag)
        .arg(mountpoint)
        .status()
        .context("running fusermount3")?;
    if !status.success() {
        bail!("fusermount3 {flag} {} failed", mountpoint.display());
    }
    Ok(())
}

fn wait_for_exit(pids: &[u32]) -> Result<()> {
    let started = Instant::now();
    for pid in pids {
        while Path::new(&format!("/proc/{pid}")).exists() && !has_exited(*pid) {
            if started.elapsed() > DAEMON_EXIT_WAIT {
                bail!(
                    "unmounted, but daemon {pid} has not exited after {:?}",
                    DAEMON_EXIT_WAIT
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}

/// Whether `pid` has exited with all its threads: its main thread can be a zombie while
/// others still exit, and those keep the process's files, the store's lock among them,
/// so a `shoal mount` or `shoal fsck` right after would find the store in use.
fn has_exited(pid: u32) -> bool {
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false);
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count);
    zombie && threads <= 1
}
