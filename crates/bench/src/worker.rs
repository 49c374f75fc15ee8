//! Samples on a preloaded target (`--make shoal-run`). The bench process is not preloaded
//! (no other target may pay for the fast path library), so such a sample runs whole in a
//! child, `shoal bench --worker`, started with the library in LD_PRELOAD: the work the
//! bench does itself (create, stat, unlink ... in Rust) then goes through the library, and
//! its tools get it from [`Target::tool`], as they would in the parent. The worker measures
//! its timed sections itself: its own CPU and its tools' (getrusage), the daemon's (by pid).
//!
//! The job goes to the worker's stdin as JSON and its [`Outcome`] comes back on stdout as
//! JSON; its stderr carries progress lines (after [`PROGRESS_PREFIX`]), anything else it
//! printed, and on failure the error.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{BenchError, IoContext, Result};
use crate::interrupt;
use crate::target::Target;
use crate::workload::{self, Ctx, Outcome, Params, Workload};

/// The arguments of `shoal` that start a worker (the CLI's hidden flag).
pub const WORKER_ARGS: [&str; 2] = ["bench", "--worker"];
/// Starts a worker's stderr line that reports progress.
pub const PROGRESS_PREFIX: &str = "progress: ";
/// A worker's exit status after Ctrl-C (128 + SIGINT, as a shell reports it).
pub const INTERRUPTED_EXIT: u8 = 130;
/// How long an interrupted worker may take to stop before it is killed: one stuck in a
/// call must not keep the session from tearing its targets down.
const INTERRUPT_GRACE: Duration = Duration::from_secs(5);

/// One sample, as the parent sends it.
#[derive(Serialize)]
struct Job<'a> {
    workload: Workload,
    target: &'a Target,
    dir: &'a Path,
    params: &'a Params,
    run: usize,
    tarball: Option<&'a Path>,
    git_repo: Option<&'a Path>,
}

/// The same sample, as the worker reads it.
#[derive(Deserialize)]
struct OwnedJob {
    workload: Workload,
    target: Target,
    dir: PathBuf,
    params: Params,
    run: usize,
    tarball: Option<PathBuf>,
    git_repo: Option<PathBuf>,
}

/// Runs the sample of `ctx` in a preloaded worker and returns its outcome.
pub fn run_sample(workload: Workload, ctx: &Ctx) -> Result<Outcome> {
    let target = ctx.target;
    let shoal = target
        .shoal_bin
        .as_ref()
        .ok_or_else(|| BenchError::Invalid("no shoal binary for the worker".into()))?;
    let job = serde_json::to_vec(&Job {
        workload,
        target,
        dir: &ctx.dir,
        params: ctx.params,
        run: ctx.run,
        tarball: ctx.tarball,
        git_repo: ctx.git_repo,
    })
    .map_err(|error| BenchError::Invalid(format!("worker job: {error}")))?;
    let mut command = Command::new(shoal);
    command.args(WORKER_ARGS);
    target.preload_into(&mut command);
    let describe = format!(
        "shoal bench --worker ({} on {})",
        workload.name(),
        target.label
    );
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context(|| format!("starting {describe}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // Dropped at the end of this block: the worker sees the end of its job.
        stdin
            .write_all(&job)
            .context(|| format!("sending the job to {describe}"))?;
    }
    let (output, diagnostics) = read_worker(&mut child, ctx);
    let status = child.wait().context(|| format!("waiting for {describe}"))?;
    if status.code() == Some(i32::from(INTERRUPTED_EXIT)) {
        return Err(BenchError::Interrupted);
    }
    if !status.success() {
        return Err(BenchError::Tool {
            command: describe,
            detail: format!("{status}: {}", diagnostics.join("\n")),
        });
    }
    let mut outcome: Outcome = serde_json::from_str(output.trim()).map_err(|error| {
        BenchError::Invalid(format!("{describe} answered no outcome: {error}: {output}"))
    })?;
    // What the worker printed besides (the library's own warnings among it) is kept.
    outcome.notes.extend(
        diagnostics
            .into_iter()
            .map(|line| format!("worker: {line}")),
    );
    Ok(outcome)
}

/// After Ctrl-C (or SIGTERM to the bench alone), passes SIGTERM on to the worker, and
/// SIGKILL if it has not ended within `INTERRUPT_GRACE`. Returns once `finished` is set.
fn stop_when_interrupted(pid: u32, finished: &AtomicBool) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    let mut interrupted_at: Option<Instant> = None;
    while !finished.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(50));
        let signal = match interrupted_at {
            None if interrupt::interrupted() => {
                interrupted_at = Some(Instant::now());
                libc::SIGTERM
            }
            Some(at) if at.elapsed() > INTERRUPT_GRACE => libc::SIGKILL,
            _ => continue,
        };
        // The worker is not reaped before `finished` is set, so the pid is still its own;
        // a worker that has just exited makes this fail, which is what we want anyway.
        let _ = shoal_sys::process::send_signal(pid, signal);
        if signal == libc::SIGKILL {
            return;
        }
    }
}

/// The worker's stdout (its outcome) and its stderr lines but progress, which go to
/// `ctx.progress` as they come; stops the worker if the user interrupts meanwhile.
fn read_worker(child: &mut Child, ctx: &Ctx) -> (String, Vec<String>) {
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let pid = child.id();
        let finished = &finished;
        scope.spawn(move || stop_when_interrupted(pid, finished));
        let reader = scope.spawn(move || {
            let mut text = String::new();
            if let Some(mut stdout) = stdout {
                let _ = stdout.read_to_string(&mut text);
            }
            text
        });
        let mut diagnostics = Vec::new();
        for line in stderr.into_iter().flat_map(|s| BufReader::new(s).lines()) {
            let Ok(line) = line else { break };
            match line.strip_prefix(PROGRESS_PREFIX) {
                Some(progress) => (ctx.progress)(progress),
                None => diagnostics.push(line),
            }
        }
        let output = reader.join().unwrap_or_default();
        // The worker closed its stdout and stderr: it is exiting (or was killed).
        finished.store(true, Ordering::Release);
        (output, diagnostics)
    })
}

/// The worker's side: reads a job from stdin, runs it, writes its outcome to stdout.
/// Returns the exit status.
pub fn serve() -> u8 {
    // The library was loaded at exec and stays. From here on the worker's tools get it from
    // `Target::tool`, as in the parent, and shoal's own commands (stats, umount, import)
    // run without it, as they do for every target.
    std::env::remove_var("LD_PRELOAD");
    std::env::remove_var("SHOAL_RUN_MOUNT");
    interrupt::install();
    match serve_job(std::io::stdin().lock(), std::io::stdout().lock()) {
        Ok(()) => 0,
        Err(BenchError::Interrupted) => INTERRUPTED_EXIT,
        Err(error) => {
            eprintln!("{error}");
            1
        }
    }
}

fn serve_job(input: impl Read, mut output: impl Write) -> Result<()> {
    let job: OwnedJob = serde_json::from_reader(input)
        .map_err(|error| BenchError::Invalid(format!("worker job: {error}")))?;
    let library = job
        .target
        .preload
        .as_deref()
        .ok_or_else(|| BenchError::Invalid("worker job for a target without preload".into()))?;
    // A library that did not load (a wrong path, a setuid binary) would measure the kernel
    // path under the fast path's name.
    if !is_loaded(library) {
        return Err(BenchError::Invalid(format!(
            "the fast path library {} is not loaded in the worker",
            library.display()
        )));
    }
    let progress = |line: &str| eprintln!("{PROGRESS_PREFIX}{line}");
    let ctx = Ctx {
        target: &job.target,
        dir: job.dir.clone(),
        params: &job.params,
        run: job.run,
        tarball: job.tarball.as_deref(),
        git_repo: job.git_repo.as_deref(),
        progress: &progress,
        fastpath: Default::default(),
    };
    let outcome = workload::run(job.workload, &ctx)?;
    let text = serde_json::to_string(&outcome)
        .map_err(|error| BenchError::Invalid(format!("worker outcome: {error}")))?;
    writeln!(output, "{text}").context(|| "writing the worker's outcome".into())
}

/// Whether `library` is mapped into this process.
fn is_loaded(library: &Path) -> bool {
    let wanted = std::fs::canonicalize(library).unwrap_or_else(|_| library.to_path_buf());
    std::fs::read_to_string("/proc/self/maps").is_ok_and(|maps| {
        maps.lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .any(|path| Path::new(path) == wanted)
    })
}
