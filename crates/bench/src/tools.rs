//! Running the real tools (tar, cp, find, du, rm, mkfs, mount, fs_mark, bonnie++).

use std::path::Path;
use std::process::{Command, Stdio};

use crate::error::{BenchError, Result};

fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Runs `cmd` to completion; its stdout is returned, its stderr goes into the error.
/// Waiting through `output()` reaps the child, so its CPU lands in RUSAGE_CHILDREN.
pub fn run_capture(cmd: &mut Command) -> Result<String> {
    let command = describe(cmd);
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|error| BenchError::Tool {
            command: command.clone(),
            detail: error.to_string(),
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(BenchError::Tool {
            command,
            detail: format!("{}: {}", output.status, stderr.trim()),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs `cmd` with stdout discarded (find -ls prints a line per entry: writing it to a
/// pipe we then drop would measure the pipe, /dev/null measures the filesystem).
pub fn run_silent(cmd: &mut Command) -> Result<()> {
    let command = describe(cmd);
    let output = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|error| BenchError::Tool {
            command: command.clone(),
            detail: error.to_string(),
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(BenchError::Tool {
            command,
            detail: format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        })
    }
}

/// Whether `name` is an executable in $PATH (or an executable path).
pub fn has_tool(name: &str) -> bool {
    if name.contains('/') {
        return is_executable(Path::new(name));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| is_executable(&dir.join(name))))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// First line of `tool --version`, for the report's environment.
pub fn version_line(tool: &str) -> Option<String> {
    let output = Command::new(tool)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().next().map(|line| line.trim().to_string())
}

/// `sync` then drop the page, dentry and inode caches (root only; FUSE mounts drop their
/// kernel-side caches too, a daemon's own caches stay). Returns whether caches were dropped.
pub fn drop_caches() -> bool {
    shoal_sys::process::sync_all();
    shoal_sys::identity::is_root() && std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}
