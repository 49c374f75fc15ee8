//! `shoal import` and `shoal export`: tar archives applied to and read from a tree inside
//! the engine (see `tar_import` and `tar_export`). On a mount the daemon does the work,
//! the archive streamed over its control socket; on an unmounted store this process
//! opens the store. Only root and the daemon's user may ask a mount (the per-file
//! permission checks are not made, as for any administrative command).

use std::fs::File;
use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use shoal_engine::{BulkAttrs, Engine, Timestamp, ROOT_INO};
use shoal_sys::identity;

use crate::control::{self, ControlRequest, PeerCredentials};
use crate::tar_export::{self, Exported};
use crate::tar_import::{self, Imported};
use crate::{decompress, mounts, progress_bar, rmtree_cmd};

pub struct ImportArgs {
    /// The directory to create, on a mount or (with `inside`) an unmounted store.
    pub dir: PathBuf,
    /// The archive; `None` or `-`: standard input.
    pub from: Option<PathBuf>,
    pub inside: Option<String>,
}

pub struct ExportArgs {
    pub dir: PathBuf,
    /// Where the archive goes; `None` or `-`: standard output.
    pub to: Option<PathBuf>,
    pub inside: Option<String>,
}

pub fn run_import(args: &ImportArgs) -> Result<ExitCode> {
    let (input, size) = open_input(args.from.as_deref())?;
    let bar = progress_bar::bytes("import", size);
    // The bar counts the bytes read from the source, compressed or not.
    let (mut input, _) = decompress::by_magic(Box::new(bar.wrap_read(input)))
        .context("reading the start of the archive")?;
    let imported = if is_store(&args.dir) {
        let inside = store_path(args.inside.as_deref())?;
        import_offline(&args.dir, inside, &mut input)?
    } else {
        if args.inside.is_some() {
            bail!("{}: --path needs a store directory", args.dir.display());
        }
        let (mountpoint, inside) = rmtree_cmd::locate_in_mount(&args.dir)?;
        let daemon = crate::stats_cmd::find_daemon(&mountpoint)?;
        let answer = control::stream_request(
            daemon,
            &ControlRequest::Import { path: inside },
            Some(&mut input),
            &mut io::sink(),
            &mut |_| {},
        )?;
        serde_json::from_value(answer)?
    };
    bar.finish_and_clear();
    println!(
        "imported {}: {} members ({} files, {} bytes){}",
        shown(&args.dir, args.inside.as_deref()),
        imported.members,
        imported.files,
        imported.bytes,
        skipped_note(
            imported.skipped_xattrs,
            "xattrs in namespaces shoal does not store"
        )
    );
    Ok(ExitCode::SUCCESS)
}

pub fn run_export(args: &ExportArgs) -> Result<ExitCode> {
    let to = args.to.as_deref().filter(|path| *path != Path::new("-"));
    if to.is_none() && io::stdout().is_terminal() {
        bail!("refusing to write an archive to a terminal (give --to FILE or redirect)");
    }
    let bar = progress_bar::bytes("export", None);
    let mut output: Box<dyn Write> = match to {
        Some(path) => Box::new(io::BufWriter::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(io::stdout().lock()),
    };
    let mut counted = CountingWriter {
        inner: &mut output,
        bar: &bar,
    };
    let exported = export_to(args, &mut counted).and_then(|exported| {
        output.flush().context("writing the archive")?;
        Ok(exported)
    });
    bar.finish_and_clear();
    let exported = match exported {
        Ok(exported) => exported,
        Err(error) => {
            // A partial archive would look whole to a reader that stops early.
            if let Some(path) = to {
                let _ = std::fs::remove_file(path);
            }
            return Err(error);
        }
    };
    eprintln!(
        "exported {}: {} members ({} files, {} bytes){}",
        shown(&args.dir, args.inside.as_deref()),
        exported.members,
        exported.files,
        exported.bytes,
        skipped_note(
            exported.skipped,
            "sockets or non-UTF-8 xattr names tar cannot store"
        )
    );
    Ok(ExitCode::SUCCESS)
}

fn export_to(args: &ExportArgs, output: &mut dyn Write) -> Result<Exported> {
    if is_store(&args.dir) {
        let inside = store_path(args.inside.as_deref())?;
        return export_offline(&args.dir, inside, output);
    }
    if args.inside.is_some() {
        bail!("{}: --path needs a store directory", args.dir.display());
    }
    let (mountpoint, inside) = locate_existing(&args.dir)?;
    let daemon = crate::stats_cmd::find_daemon(&mountpoint)?;
    let answer = control::stream_request(
        daemon,
        &ControlRequest::Export { path: inside },
        None,
        output,
        &mut |_| {},
    )?;
    Ok(serde_json::from_value(answer)?)
}

/// Shows the archive's bytes as they are written.
struct CountingWriter<'a> {
    inner: &'a mut dyn Write,
    bar: &'a indicatif::ProgressBar,
}

impl Write for CountingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.bar.inc(written as u64);
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The directory as the user named it: a path, or a store and the path inside it.
fn shown(dir: &Path, inside: Option<&str>) -> String {
    match inside {
        Some(inside) => format!("{}:{inside}", dir.display()),
        None => dir.display().to_string(),
    }
}

fn skipped_note(count: u64, what: &str) -> String {
    if count == 0 {
        String::new()
    } else {
        format!("; skipped {count} {what}")
    }
}

fn is_store(path: &Path) -> bool {
    shoal_engine::store_dir::read_format(path).is_ok()
}

fn store_path(inside: Option<&str>) -> Result<&str> {
    inside.ok_or_else(|| anyhow!("give the directory inside the store with --path"))
}

fn open_input(from: Option<&Path>) -> Result<(Box<dyn Read>, Option<u64>)> {
    match from.filter(|path| *path != Path::new("-")) {
        Some(path) => {
            let file =
                File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
            let size = file.metadata().ok().map(|meta| meta.len());
            Ok((Box::new(file), size))
        }
        None => Ok((Box::new(io::stdin().lock()), None)),
    }
}

/// The shoal mount holding the existing `path`, and the path inside it ("/" for its
/// root).
fn locate_existing(path: &Path) -> Result<(PathBuf, String)> {
    let absolute = std::fs::canonicalize(path).with_context(|| format!("{}", path.display()))?;
    let (mountpoint, inside) = mounts::shoal_mount_holding(&absolute, path)?;
    Ok((mountpoint, format!("/{inside}")))
}

/// The new directory's attributes when the archive has no `./` member: as `mkdir` by
/// the caller with umask 022.
fn default_root_attrs(uid: u32, gid: u32) -> BulkAttrs {
    let now = Timestamp::now();
    BulkAttrs {
        perm: 0o755,
        uid,
        gid,
        atime: now,
        mtime: now,
    }
}

/// The directory at `path` from the root.
fn resolve_dir(engine: &Engine, path: &str) -> Result<u64> {
    let mut dir = ROOT_INO;
    for component in path.split('/').filter(|part| !part.is_empty()) {
        dir = engine
            .lookup(dir, component.as_bytes())
            .map_err(|error| anyhow!("{path}: {component}: {error}"))?
            .ino;
    }
    Ok(dir)
}

/// The daemon's side of `import`: the archive arrives on `input`.
pub fn serve_import(
    engine: &Arc<Engine>,
    invalidator: Option<&shoal_fuse::EntryInvalidator>,
    path: &str,
    peer: PeerCredentials,
    input: &mut dyn Read,
) -> Result<serde_json::Value, String> {
    let (parent, name) =
        rmtree_cmd::resolve_parent(engine, path).map_err(|error| format!("{error:#}"))?;
    let attrs = default_root_attrs(peer.uid, peer.gid);
    let started = std::time::Instant::now();
    let imported = tar_import::import(engine, parent, name.as_bytes(), attrs, input, &mut |_| {})
        .map_err(|error| format!("{path}: {error}"))?;
    let applied = started.elapsed();
    // As `tar xf` followed by `sync`: what was imported survives a crash from now on.
    engine
        .sync()
        .map_err(|error| format!("{path}: sync: {error}"))?;
    let synced = started.elapsed() - applied;
    if let Some(invalidator) = invalidator {
        // The kernel may hold "no such name" for it, and the parent's old attributes.
        let forgotten = invalidator
            .forget_name(parent, name.as_bytes())
            .and_then(|()| invalidator.forget_attrs(parent));
        if let Err(error) = forgotten {
            tracing::warn!("import {path}: the kernel kept its cached entries: {error}");
        }
    }
    tracing::info!(
        path,
        members = imported.members,
        bytes = imported.bytes,
        applied_ms = applied.as_millis() as u64,
        sync_ms = synced.as_millis() as u64,
        "import: done"
    );
    serde_json::to_value(imported).map_err(|error| error.to_string())
}

/// The daemon's side of `export`: the archive goes to `output`.
pub fn serve_export(
    engine: &Engine,
    path: &str,
    output: &mut dyn Write,
) -> Result<serde_json::Value, String> {
    let dir = resolve_dir(engine, path).map_err(|error| format!("{error:#}"))?;
    let exported = tar_export::export(engine, dir, output, &mut |_| {})
        .map_err(|error| format!("{path}: {error}"))?;
    serde_json::to_value(exported).map_err(|error| error.to_string())
}

fn open_store(store: &Path, read_only: bool) -> Result<Arc<Engine>> {
    crate::offline_store::open(
        store,
        read_only,
        "if it is mounted, give the path in the mount",
    )
}

/// `shoal import STORE --path P`: the archive applied here; a failed import's staged tree
/// is deleted before this returns.
fn import_offline(store: &Path, inside: &str, input: &mut dyn Read) -> Result<Imported> {
    let engine = open_store(store, false)?;
    let (parent, name) = rmtree_cmd::resolve_parent(&engine, inside)?;
    let (uid, gid) = (identity::real_uid(), identity::real_gid());
    let attrs = default_root_attrs(uid, gid);
    match tar_import::import(&engine, parent, name.as_bytes(), attrs, input, &mut |_| {}) {
        Ok(imported) => {
            engine.sync().context("syncing the store")?;
            Ok(imported)
        }
        Err(error) => {
            engine
                .reclaim_all(|_| {})
                .context("deleting the partly imported tree")?;
            engine.sync().context("syncing the store")?;
            Err(anyhow!("{inside}: {error}"))
        }
    }
}

fn export_offline(store: &Path, inside: &str, output: &mut dyn Write) -> Result<Exported> {
    let engine = open_store(store, true)?;
    let dir = resolve_dir(&engine, inside)?;
    tar_export::export(&engine, dir, output, &mut |_| {})
        .map_err(|error| anyhow!("{inside}: {error}"))
}
