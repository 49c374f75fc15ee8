//! `shoal du`: a directory's recursive usage (names, regular files, bytes, newest change)
//! read in one step from the counters the engine keeps, however big the tree. On a mount
//! it reads the virtual `shoal.dir.*` attributes; on an unmounted store it opens the store
//! read-only.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use shoal_engine::{
    format_rctime, Engine, FileKind, Timestamp, TreeUsage, ROOT_INO, XATTR_RBYTES, XATTR_RCTIME,
    XATTR_RENTRIES, XATTR_RFILES,
};

pub struct DuArgs {
    pub paths: Vec<PathBuf>,
    /// With a store directory: the directory inside the store.
    pub inside: Option<String>,
    pub json: bool,
}

pub fn run(args: &DuArgs) -> Result<ExitCode> {
    let mut rows = Vec::new();
    for path in &args.paths {
        if shoal_engine::store_dir::read_format(path).is_ok() {
            let inside = args.inside.as_deref().unwrap_or("/");
            let usage = store_usage(path, inside)?;
            rows.push((format!("{}:{inside}", path.display()), usage));
        } else if args.inside.is_some() {
            bail!("{}: --path needs a store directory", path.display());
        } else {
            rows.push((path.display().to_string(), mount_usage(path)?));
        }
    }
    if args.json {
        let list: Vec<_> = rows
            .iter()
            .map(|(path, usage)| {
                serde_json::json!({
                    "path": path,
                    "entries": usage.entries,
                    "files": usage.files,
                    "bytes": usage.bytes,
                    "rctime": format_rctime(usage.rctime),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        println!(
            "{:>12} {:>12} {:>16} {:>21}  PATH",
            "ENTRIES", "FILES", "BYTES", "RCTIME"
        );
        for (path, usage) in &rows {
            println!(
                "{:>12} {:>12} {:>16} {:>21}  {path}",
                usage.entries,
                usage.files,
                usage.bytes,
                format_rctime(usage.rctime)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads the virtual attributes of a directory on a shoal mount.
fn mount_usage(path: &Path) -> Result<TreeUsage> {
    let number = |name: &[u8]| -> Result<u64> {
        let text = getxattr(path, name)?;
        text.trim()
            .parse()
            .map_err(|_| anyhow!("{}: bad value {text:?}", path.display()))
    };
    let entries = number(XATTR_RENTRIES)?;
    let files = number(XATTR_RFILES)?;
    let bytes = number(XATTR_RBYTES)?;
    let rctime = parse_rctime(&getxattr(path, XATTR_RCTIME)?)
        .ok_or_else(|| anyhow!("{}: bad rctime", path.display()))?;
    Ok(TreeUsage {
        entries,
        files,
        bytes,
        rctime,
    })
}

fn parse_rctime(text: &str) -> Option<Timestamp> {
    let (secs, nanos) = text.trim().split_once('.')?;
    Some(Timestamp {
        secs: secs.parse().ok()?,
        nanos: nanos.parse().ok()?,
    })
}

fn getxattr(path: &Path, name: &[u8]) -> Result<String> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| anyhow!("{}: path holds a NUL byte", path.display()))?;
    let c_name = CString::new(name).map_err(|_| anyhow!("attribute name holds a NUL byte"))?;
    let mut buffer = vec![0u8; 64];
    // SAFETY: both strings are NUL-terminated and the buffer is as long as we say.
    let length = unsafe {
        libc::getxattr(
            c_path.as_ptr(),
            c_name.as_ptr(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
        )
    };
    if length < 0 {
        let error = std::io::Error::last_os_error();
        return Err(match error.raw_os_error() {
            Some(libc::ENODATA | libc::EOPNOTSUPP) => anyhow!(
                "{}: not a directory on a shoal mount (nor a shoal store directory)",
                path.display()
            ),
            _ => anyhow!("{}: {error}", path.display()),
        });
    }
    buffer.truncate(length as usize);
    String::from_utf8(buffer).map_err(|_| anyhow!("{}: value is not text", path.display()))
}

/// Opens an unmounted store read-only and reads the usage of the directory at `inside`.
fn store_usage(store: &Path, inside: &str) -> Result<TreeUsage> {
    let engine = crate::offline_store::open(
        store,
        true,
        "if it is mounted, give a directory in the mount",
    )?;
    let dir = resolve(&engine, inside).with_context(|| format!("{inside} in the store"))?;
    Ok(engine.tree_usage(dir)?)
}

/// The inode of the directory at `path` (from the store's root; symlinks not followed).
pub fn resolve(engine: &Engine, path: &str) -> Result<u64> {
    let mut ino = ROOT_INO;
    for component in path
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
    {
        let inode = engine
            .lookup(ino, component.as_bytes())
            .map_err(|error| anyhow!("{component}: {error}"))?;
        ino = inode.ino;
    }
    if engine.getattr(ino)?.kind != FileKind::Directory {
        bail!("not a directory");
    }
    Ok(ino)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rctime_text_round_trips() {
        let time = Timestamp {
            secs: 1_700_000_000,
            nanos: 5,
        };
        assert_eq!(parse_rctime(&format_rctime(time)), Some(time));
        assert_eq!(parse_rctime("12"), None);
    }
}
