//! git on the generated tree: `git clone` of a local bare repository into the target
//! (then `sync`, so the clone is durable, as `tar x + sync` is), `git status` twice (the
//! first after a clone checks its racily clean entries) and `git fsck` in the clone. The
//! repository is staged once per session outside the targets, untimed ([`stage_repo`]):
//! one commit of the same tree as the `tree` workload's, packed as a fetch leaves it. git reads no user or system configuration here, so every target
//! runs the same commands.

use std::path::Path;
use std::process::Command;

use super::{count_tree, Better, Ctx, Outcome};
use crate::error::{BenchError, Result};
use crate::tools::{has_tool, run_capture, run_silent};

/// A fixed author, committer and date: the same tree gives the same commit.
const IDENTITY: [(&str, &str); 6] = [
    ("GIT_AUTHOR_NAME", "shoal bench"),
    ("GIT_AUTHOR_EMAIL", "bench@shoal.invalid"),
    ("GIT_AUTHOR_DATE", "2025-01-01T00:00:00Z"),
    ("GIT_COMMITTER_NAME", "shoal bench"),
    ("GIT_COMMITTER_EMAIL", "bench@shoal.invalid"),
    ("GIT_COMMITTER_DATE", "2025-01-01T00:00:00Z"),
];

/// `cmd` (a `git` command) without the machine's or the user's configuration, and without
/// automatic gc: a commit of more than 6700 loose objects starts `git gc --auto` detached,
/// which went on writing into the staged tree while the session removed it ("Directory not
/// empty").
fn plain(cmd: &mut Command) -> &mut Command {
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "gc.auto")
        .env("GIT_CONFIG_VALUE_0", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .envs(IDENTITY)
}

/// Makes the index of the clone at `clone` one written in a later second than any entry
/// checked out, untimed: waits for the next second after the index's, then runs `git` (a
/// plain git command) `status`, which writes it. An index written in the checkout's last
/// second (a clone and a status within one second) leaves its entries racily clean, read
/// and hashed again by every status until one writes it a second later: a target that
/// clones faster met that in both timed statuses (56 ms against 130-180 in one session's
/// samples of the second, as luck had it).
fn settle(clone: &Path, git: &mut Command) -> Result<()> {
    use crate::error::IoContext;
    let index = clone.join(".git/index");
    let written = std::fs::metadata(&index)
        .and_then(|meta| meta.modified())
        .context(|| format!("reading {}", index.display()))?;
    let second_after = written
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() + 1);
    let until = std::time::UNIX_EPOCH + std::time::Duration::from_secs(second_after);
    if let Ok(wait) = until.duration_since(std::time::SystemTime::now()) {
        std::thread::sleep(wait);
    }
    git.arg("-C").arg(clone).args(["status", "--porcelain"]);
    run_silent(git)
}

pub fn is_installed() -> bool {
    has_tool("git")
}

/// Makes `tree` a repository with everything in one commit, then `bare`, a bare clone of it
/// made through git's transport (`--no-local`), so its objects are in one pack.
pub fn stage_repo(tree: &Path, bare: &Path) -> Result<()> {
    let git = |args: &[&str]| {
        let mut cmd = Command::new("git");
        plain(&mut cmd).arg("-C").arg(tree).args(args);
        run_silent(&mut cmd)
    };
    git(&["init", "-q"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-q", "-m", "generated tree"])?;
    let mut clone = Command::new("git");
    plain(&mut clone)
        .args(["clone", "-q", "--bare", "--no-local"])
        .arg(tree)
        .arg(bare);
    run_silent(&mut clone)
}

pub fn run(ctx: &Ctx) -> Result<Outcome> {
    let mut outcome = Outcome::default();
    let Some(repo) = ctx.git_repo else {
        if !is_installed() {
            outcome.notes.push("git is not installed: skipped".into());
            return Ok(outcome);
        }
        return Err(BenchError::Invalid(
            "git workload without its repository".into(),
        ));
    };
    let clone = ctx.dir.join("clone");
    let git = || {
        let mut cmd = ctx.tool("git");
        plain(&mut cmd);
        cmd
    };
    // A local clone copies the objects (hard links cannot cross into the target) and
    // checks the tree out.
    let mut cmd = git();
    cmd.args(["clone", "-q", "--no-hardlinks"])
        .arg(repo)
        .arg(&clone);
    let ((), cloned) = ctx.timed(|| run_silent(&mut cmd))?;
    outcome.seconds("git clone", &cloned);
    let ((), synced) = ctx.timed(|| run_silent(ctx.tool("sync").arg("-f").arg(&clone)))?;
    outcome.seconds("sync after git clone", &synced);
    outcome.metric(
        "git clone + sync",
        "s",
        Better::Lower,
        (cloned.elapsed + synced.elapsed).as_secs_f64(),
    );
    // The checked-out entries and the repository's files, counted independently (untimed).
    let entries = count_tree(&clone)? + 1;
    outcome.rate_and_cpu("git clone", "entry", entries, &cloned);
    outcome.count("entries", entries);

    let status = || {
        let mut cmd = git();
        cmd.arg("-C").arg(&clone).args(["status", "--porcelain"]);
        ctx.timed(|| run_capture(&mut cmd))
    };
    let (changes, timed) = status()?;
    outcome.seconds("git status", &timed);
    outcome.requests_per("git status", entries, &timed);
    // A fresh clone is clean: anything listed is a file the target did not keep as written.
    outcome.count("status_changes", changes.lines().count() as u64);
    // The first status reads and hashes every file written in the same second as the index
    // (git compares seconds: "racily clean" entries), then writes the index: how many that
    // is depends on where the second ended during the checkout (on XFS 1254 of 30k in one
    // clone, the first status 0.06-0.48 s in one session's runs), not on the filesystem.
    // The second is the status of every day after: of an index written in a later second
    // than its entries (`settle`).
    settle(&clone, &mut git())?;
    let (again, timed) = status()?;
    outcome.seconds("git status again", &timed);
    outcome.count("status_changes_again", again.lines().count() as u64);

    let mut cmd = git();
    cmd.arg("-C").arg(&clone).args(["fsck", "--no-progress"]);
    let ((), timed) = ctx.timed(|| run_silent(&mut cmd))?;
    outcome.seconds("git fsck", &timed);
    outcome.requests_per("git fsck", entries, &timed);
    Ok(outcome)
}
