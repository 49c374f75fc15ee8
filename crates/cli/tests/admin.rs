//! What an administrator does around the filesystem: install it, mount it with mount(8)
//! from the command line, /etc/fstab and systemd, format and mount it as a plain user, and
//! read about it (man pages, --version, info, human-readable quota).

#![allow(clippy::unwrap_used)] // a test stops at the line that failed

mod common;

use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::unix::fs::{symlink, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use common::*;

const HELPER: &str = "/sbin/mount.fuse.shoal";
const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// Serialises the tests that need the mount helper in /sbin (mount(8) looks nowhere else):
/// within this binary by the mutex, across test processes by a lock file.
static HELPER_LOCK: Mutex<()> = Mutex::new(());

/// The helper at /sbin/mount.fuse.shoal, pointing to the binary under test, for as long as
/// this lives; whatever was there before (an installed shoal) is put back on drop.
struct HelperInstalled {
    saved: Option<PathBuf>,
    _lock_file: File,
    _guard: std::sync::MutexGuard<'static, ()>,
}

impl HelperInstalled {
    fn new() -> HelperInstalled {
        let guard = HELPER_LOCK
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let lock_file = File::create("/tmp/shoal-test-mount-helper.lock").expect("lock file");
        assert_eq!(
            // SAFETY: flock on a file we own; released when it closes.
            unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock_file), libc::LOCK_EX) },
            0
        );
        let saved = fs::symlink_metadata(HELPER).ok().map(|_| {
            let saved = PathBuf::from(format!("{HELPER}.saved-by-shoal-test"));
            fs::rename(HELPER, &saved).expect("move the installed helper aside");
            saved
        });
        symlink(SHOAL, HELPER).expect("link the helper to the shoal under test");
        HelperInstalled {
            saved,
            _lock_file: lock_file,
            _guard: guard,
        }
    }
}

impl Drop for HelperInstalled {
    fn drop(&mut self) {
        let _ = fs::remove_file(HELPER);
        if let Some(saved) = &self.saved {
            let _ = fs::rename(saved, HELPER);
        }
    }
}

/// A formatted store and an empty mountpoint, unmounted on drop.
struct Unmounted {
    store: PathBuf,
    mnt: PathBuf,
    dir: tempfile::TempDir,
}

impl Unmounted {
    fn new() -> Unmounted {
        let dir = test_dir();
        let store = dir.path().join("store");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        shoal_ok(&[OsStr::new("mkfs"), store.as_os_str()]);
        Unmounted { store, mnt, dir }
    }

    fn mounted(&self) -> bool {
        is_mounted(&self.mnt)
    }

    fn stats(&self) -> serde_json::Value {
        let out = shoal_ok(&[
            OsStr::new("stats"),
            OsStr::new("--json"),
            self.mnt.as_os_str(),
        ]);
        serde_json::from_str(&out.stdout).expect("stats --json")
    }

    /// `shoal umount`, then fsck: everything written is there and consistent.
    fn umount_and_check(&self) {
        shoal_ok(&[OsStr::new("umount"), self.mnt.as_os_str()]);
        assert!(!self.mounted());
        let out = run(
            Command::new(SHOAL).arg("fsck").arg(&self.store),
            FSCK_TIMEOUT,
        );
        assert!(out.success(), "{}", out.describe());
    }
}

impl Drop for Unmounted {
    fn drop(&mut self) {
        if self.mounted() {
            force_unmount(Some(&self.store), &self.mnt);
        }
    }
}

#[test]
fn fstab_line_mounts_through_the_helper_and_drops_fstab_only_options() {
    let _helper = HelperInstalled::new();
    let fs = Unmounted::new();
    let fstab = fs.dir.path().join("fstab");
    fs::write(
        &fstab,
        format!(
            "# a comment, as in /etc/fstab\n{} {} fuse.shoal \
             defaults,nofail,_netdev,noauto,x-systemd.requires=network.target,comment=x,cache=64M,commit=1s 0 0\n",
            fs.store.display(),
            fs.mnt.display()
        ),
    )
    .unwrap();
    let out = run(
        Command::new("mount").arg("-T").arg(&fstab).arg(&fs.mnt),
        SHOAL_TIMEOUT,
    );
    assert!(out.success(), "{}", out.describe());
    assert!(fs.mounted(), "mount -T returned before the mount was live");
    // The options reached the daemon: a 64 MiB block cache instead of the default.
    assert_eq!(fs.stats()["store"]["cache_capacity_bytes"], 64u64 << 20);
    fs::write(fs.mnt.join("from-fstab"), b"hello").unwrap();
    let info = shoal_ok(&[OsStr::new("info"), fs.mnt.as_os_str()]);
    assert!(
        info.stdout.contains(&fs.store.display().to_string()),
        "{}",
        info.describe()
    );
    fs.umount_and_check();
}

#[test]
fn mount_t_fuse_shoal_passes_options_and_refuses_unknown_ones() {
    let _helper = HelperInstalled::new();
    let fs = Unmounted::new();
    let mount = |options: &str| {
        run(
            Command::new("mount")
                .args(["-t", "fuse.shoal"])
                .arg(&fs.store)
                .arg(&fs.mnt)
                .args(["-o", options]),
            SHOAL_TIMEOUT,
        )
    };
    let refused = mount("cache=32M,bogus");
    assert_eq!(refused.code, Some(32), "{}", refused.describe());
    assert!(refused.stderr.contains("bogus"), "{}", refused.describe());
    assert!(!fs.mounted());

    let out = mount("cache=32M,memory=1G");
    assert!(out.success(), "{}", out.describe());
    assert!(fs.mounted());
    assert_eq!(fs.stats()["store"]["cache_capacity_bytes"], 32u64 << 20);
    fs::write(fs.mnt.join("f"), b"data").unwrap();
    // A plain umount(8), as systemd does at shutdown: the daemon syncs and exits.
    let daemon = find_daemon_pid(Some(&fs.store), &fs.mnt).expect("the daemon");
    run_ok(Command::new("umount").arg(&fs.mnt), SHOAL_TIMEOUT);
    wait_for("the daemon to exit", SHOAL_TIMEOUT, || {
        !process_alive(daemon)
    });
    let out = mount("ro");
    assert!(out.success(), "{}", out.describe());
    assert_eq!(fs::read(fs.mnt.join("f")).unwrap(), b"data");
    fs.umount_and_check();
}

/// `mount -o remount,ro` and `remount,rw` go through the helper too: the kernel switches
/// the mount and the daemon serves on.
#[test]
fn remount_read_only_and_back_through_mount_8() {
    let _helper = HelperInstalled::new();
    let fs = Unmounted::new();
    let out = run(
        Command::new("mount")
            .args(["-t", "fuse.shoal"])
            .arg(&fs.store)
            .arg(&fs.mnt),
        SHOAL_TIMEOUT,
    );
    assert!(out.success(), "{}", out.describe());
    fs::write(fs.mnt.join("before"), b"1").unwrap();
    let remount = |how: &str| {
        let out = run(
            Command::new("mount").args(["-o", how]).arg(&fs.mnt),
            SHOAL_TIMEOUT,
        );
        assert!(out.success(), "mount -o {how}: {}", out.describe());
    };
    remount("remount,ro");
    let refused = fs::write(fs.mnt.join("while-ro"), b"2").unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EROFS), "{refused}");
    assert_eq!(fs::read(fs.mnt.join("before")).unwrap(), b"1");
    remount("remount,rw");
    fs::write(fs.mnt.join("after"), b"3").unwrap();
    fs.umount_and_check();
}

/// The per-mount flags of the mount at `mnt`, as mountinfo lists them ("rw", "nosuid", ...).
fn mount_flags(mnt: &Path) -> Vec<String> {
    let info = shoal_sys::mounts::mount_at(mnt).expect("mounted");
    let per_mount = info.options.split(' ').next().unwrap_or("");
    per_mount.split(',').map(str::to_string).collect()
}

/// A line appended to /etc/fstab for as long as this lives; the file is put back byte for
/// byte on drop (or removed if there was none). Taken with `HelperInstalled`, which
/// serialises the tests that use mount(8).
struct FstabLine {
    saved: Option<Vec<u8>>,
}

const FSTAB: &str = "/etc/fstab";

impl FstabLine {
    fn add(line: &str) -> FstabLine {
        let saved = fs::read(FSTAB).ok();
        let mut text = saved.clone().unwrap_or_default();
        if !text.is_empty() && !text.ends_with(b"\n") {
            text.push(b'\n');
        }
        text.extend_from_slice(line.as_bytes());
        text.push(b'\n');
        fs::write(FSTAB, text).unwrap();
        FstabLine { saved }
    }
}

impl Drop for FstabLine {
    fn drop(&mut self) {
        match &self.saved {
            Some(bytes) => fs::write(FSTAB, bytes).expect("restore /etc/fstab"),
            None => fs::remove_file(FSTAB).expect("remove the test's /etc/fstab"),
        }
    }
}

/// `mount -o remount,...` keeps nosuid, nodev and every other flag the mount has unless
/// the command changes it, for a mount made from an fstab line that does not repeat them
/// and for one made by `mount -t fuse.shoal`: mount(2) clears every flag a remount leaves
/// out, and the helper used to pass only the ones it was given. (With an fstab line,
/// mount(8) does not hand `suid` and `exec` to the helper: those stay as they were.)
#[test]
fn remount_keeps_every_flag_the_command_does_not_change() {
    let _helper = HelperInstalled::new();
    for with_fstab in [false, true] {
        let fs = Unmounted::new();
        let _fstab = with_fstab.then(|| {
            FstabLine::add(&format!(
                "{} {} fuse.shoal nofail 0 0",
                fs.store.display(),
                fs.mnt.display()
            ))
        });
        let mut mount = Command::new("mount");
        if with_fstab {
            mount.arg(&fs.mnt);
        } else {
            mount.args(["-t", "fuse.shoal"]).arg(&fs.store).arg(&fs.mnt);
        }
        let out = run(&mut mount, SHOAL_TIMEOUT);
        assert!(out.success(), "{}", out.describe());
        let has = |flags: &[String], wanted: &[&str], absent: &[&str]| {
            wanted.iter().all(|flag| flags.iter().any(|f| f == flag))
                && absent.iter().all(|flag| flags.iter().all(|f| f != flag))
        };
        let initial = mount_flags(&fs.mnt);
        assert!(
            has(&initial, &["rw", "nosuid", "nodev"], &[]),
            "{initial:?}"
        );
        let lifted: (&[&str], &[&str]) = if with_fstab {
            (&["rw", "nodev", "noexec", "nosuid"], &[])
        } else {
            (&["rw", "nodev"], &["noexec", "nosuid"])
        };
        let steps: [(&str, &[&str], &[&str]); 7] = [
            ("remount,ro", &["ro", "nosuid", "nodev", "noatime"], &["rw"]),
            ("remount,rw", &["rw", "nosuid", "nodev", "noatime"], &["ro"]),
            ("remount,noexec", &["rw", "nosuid", "nodev", "noexec"], &[]),
            ("remount", &["rw", "nosuid", "nodev", "noexec"], &[]),
            ("remount,exec,suid", lifted.0, lifted.1),
            (
                "remount,nosuid,noexec",
                &["rw", "nosuid", "nodev", "noexec"],
                &[],
            ),
            ("remount,ro", &["ro", "nosuid", "nodev", "noexec"], &["rw"]),
        ];
        for (options, wanted, absent) in steps {
            let out = run(
                Command::new("mount").args(["-o", options]).arg(&fs.mnt),
                SHOAL_TIMEOUT,
            );
            assert!(out.success(), "mount -o {options}: {}", out.describe());
            let flags = mount_flags(&fs.mnt);
            assert!(
                has(&flags, wanted, absent),
                "fstab line: {with_fstab}; after {options}: {flags:?}, want {wanted:?} and not {absent:?}"
            );
            // Every flag the mount had and the command did not name is still there.
            for flag in &initial {
                let named = options
                    .split(',')
                    .any(|option| ["ro", "rw", "suid"].contains(&option));
                let named = named && (flag == "rw" || flag == "nosuid");
                assert!(
                    named || flags.contains(flag),
                    "fstab line: {with_fstab}; {options} dropped {flag}: {flags:?}"
                );
            }
        }
        fs.umount_and_check();
    }
}

/// The `key=value` lines of a unit file's section entries.
fn unit_value(unit: &str, key: &str) -> Option<String> {
    unit.lines()
        .find_map(|line| line.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "fstab line, generated unit, systemd-analyze verify, mount and unmount: one scenario"
)]
fn systemd_mount_unit_from_fstab_verifies_and_mounts() {
    let generator = Path::new("/lib/systemd/system-generators/systemd-fstab-generator");
    let have_analyze = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !generator.exists() || !have_analyze {
        eprintln!("skipped: systemd-fstab-generator or systemd-analyze is not installed");
        return;
    }
    let _helper = HelperInstalled::new();
    let fs = Unmounted::new();
    let fstab = fs.dir.path().join("fstab");
    fs::write(
        &fstab,
        format!(
            "{} {} fuse.shoal nofail,_netdev,x-systemd.requires=network.target,commit=2s 0 0\n",
            fs.store.display(),
            fs.mnt.display()
        ),
    )
    .unwrap();
    // What systemd does with /etc/fstab at boot, on our file instead.
    let units = fs.dir.path().join("units");
    fs::create_dir(&units).unwrap();
    run_ok(
        Command::new(generator)
            .args([&units, &units, &units])
            .env("SYSTEMD_FSTAB", &fstab)
            .env("SYSTEMD_PROC_CMDLINE", ""),
        TOOL_TIMEOUT,
    );
    let name = run_ok(
        Command::new("systemd-escape")
            .args(["--path", "--suffix=mount"])
            .arg(&fs.mnt),
        TOOL_TIMEOUT,
    )
    .stdout
    .trim()
    .to_string();
    let unit_path = units.join(&name);
    let unit = fs::read_to_string(&unit_path).expect("the generated .mount unit");
    assert!(unit.contains("Requires=network.target"), "{unit}");
    assert_eq!(unit_value(&unit, "Type").as_deref(), Some("fuse.shoal"));
    // nofail: wanted by remote-fs.target (a failure does not fail the boot), not required.
    assert!(units.join("remote-fs.target.wants").join(&name).exists());
    assert!(!units.join("remote-fs.target.requires").join(&name).exists());

    let verify = run(
        Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit_path)
            .current_dir(&units),
        TOOL_TIMEOUT,
    );
    assert!(verify.success(), "{}", verify.describe());
    assert!(
        !verify.stderr.contains(&name),
        "systemd-analyze complained about the unit: {}",
        verify.describe()
    );
    // The check is real: a unit whose name does not match its Where= is refused.
    let misnamed = units.join("misnamed.mount");
    fs::copy(&unit_path, &misnamed).unwrap();
    let refused = run(
        Command::new("systemd-analyze")
            .arg("verify")
            .arg(&misnamed)
            .current_dir(&units),
        TOOL_TIMEOUT,
    );
    assert!(!refused.success(), "{}", refused.describe());

    // systemd runs `mount What Where -t Type -o Options` for the unit.
    let out = run(
        Command::new("mount")
            .arg(unit_value(&unit, "What").unwrap())
            .arg(unit_value(&unit, "Where").unwrap())
            .arg("-t")
            .arg(unit_value(&unit, "Type").unwrap())
            .arg("-o")
            .arg(unit_value(&unit, "Options").unwrap()),
        SHOAL_TIMEOUT,
    );
    assert!(out.success(), "{}", out.describe());
    assert!(fs.mounted());
    fs.umount_and_check();
}

/// uid and gid of `nobody`, a user that exists on every Debian-like system; fusermount3
/// refuses users without a passwd entry, such as the posix tests' numeric ones.
fn nobody() -> Option<(u32, u32)> {
    let out = Command::new("getent")
        .args(["passwd", "nobody"])
        .output()
        .ok()?;
    let line = String::from_utf8(out.stdout).ok()?;
    let fields: Vec<&str> = line.trim().split(':').collect();
    Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?))
}

/// `command` run as uid:gid with no supplementary groups.
fn as_user(command: &mut Command, uid: u32, gid: u32) -> &mut Command {
    // SAFETY: only async-signal-safe calls between fork and exec; groups and gid first,
    // while we still are root.
    unsafe {
        command.pre_exec(move || {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

fn shoal_as(uid: u32, gid: u32, args: &[&OsStr]) -> CmdOutput {
    run(
        as_user(&mut Command::new(SHOAL), uid, gid)
            .args(args)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"),
        SHOAL_TIMEOUT,
    )
}

#[test]
fn a_user_formats_owns_and_mounts_a_filesystem() {
    let Some((uid, gid)) = nobody() else {
        eprintln!("skipped: no user nobody");
        return;
    };
    let dir = test_dir();
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    let store = dir.path().join("store");
    let mnt = dir.path().join("mnt");
    let _guard = MountGuard {
        store: Some(store.clone()),
        mnt: mnt.clone(),
    };
    let out = shoal_as(uid, gid, &[OsStr::new("mkfs"), store.as_os_str()]);
    assert!(out.success(), "{}", out.describe());
    fs::create_dir(&mnt).unwrap();
    std::os::unix::fs::chown(&mnt, Some(uid), Some(gid)).unwrap();

    let mount = shoal_as(
        uid,
        gid,
        &[OsStr::new("mount"), store.as_os_str(), mnt.as_os_str()],
    );
    // fusermount3 opens /dev/fuse with the user's rights: "others" must read and write.
    let dev_fuse_open_to_users =
        fs::metadata("/dev/fuse").is_ok_and(|meta| meta.mode() & 0o006 == 0o006);
    if !dev_fuse_open_to_users {
        assert!(!mount.success(), "{}", mount.describe());
        assert!(
            mount.stderr.contains("/dev/fuse") && !mount.stderr.contains("mountpoint"),
            "the error must name /dev/fuse, not the mountpoint: {}",
            mount.describe()
        );
        eprintln!("partly skipped: /dev/fuse is not open to users (scripts/setup makes it so)");
        return;
    }
    assert!(mount.success(), "{}", mount.describe());
    assert!(is_mounted(&mnt));
    // As the user: without allow_other, FUSE lets no one else in, root included. The
    // root directory is theirs, and they can write in it.
    let session = run(
        as_user(&mut Command::new("sh"), uid, gid)
            .arg("-c")
            .arg("stat -c %u:%g \"$1\" && echo mine > \"$1\"/file && mkdir \"$1\"/dir && cat \"$1\"/file")
            .arg("sh")
            .arg(&mnt),
        TOOL_TIMEOUT,
    );
    assert!(session.success(), "{}", session.describe());
    assert_eq!(
        session.stdout,
        format!("{uid}:{gid}\nmine\n"),
        "mkfs gives the root to its caller"
    );
    let umount = shoal_as(uid, gid, &[OsStr::new("umount"), mnt.as_os_str()]);
    assert!(umount.success(), "{}", umount.describe());
    assert!(!is_mounted(&mnt));
    let fsck = run(Command::new(SHOAL).arg("fsck").arg(&store), FSCK_TIMEOUT);
    assert!(fsck.success(), "{}", fsck.describe());
}

#[test]
fn a_user_without_fusermount3_is_told_so() {
    let Some((uid, gid)) = nobody() else {
        eprintln!("skipped: no user nobody");
        return;
    };
    let fs = Unmounted::new();
    let out = run(
        as_user(&mut Command::new(SHOAL), uid, gid)
            .arg("mount")
            .arg(&fs.store)
            .arg(&fs.mnt)
            .env("PATH", fs.dir.path()),
        SHOAL_TIMEOUT,
    );
    assert!(!out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("fusermount3") && !out.stderr.contains("mountpoint"),
        "the error must name fusermount3, not the mountpoint: {}",
        out.describe()
    );
    assert!(!fs.mounted());
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "scripts/install into a scratch prefix, then each installed file checked"
)]
fn install_puts_binary_helper_man_pages_and_completions_in_place() {
    let stage = test_dir();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install");
    run_ok(
        Command::new(&script)
            .args(["--binary", SHOAL])
            .env("DESTDIR", stage.path()),
        TOOL_TIMEOUT,
    );
    let root = stage.path();
    let binary = root.join("usr/local/bin/shoal");
    assert!(binary.is_file());
    // The fast path library, where the installed `shoal run` looks for it.
    assert!(root
        .join("usr/local/lib/shoal/libshoal_preload.so")
        .is_file());
    let run = run_ok(
        Command::new(&binary)
            .args(["run", "--", "sh", "-c", "echo $LD_PRELOAD"])
            .env_remove("SHOAL_PRELOAD"),
        TOOL_TIMEOUT,
    );
    assert!(
        run.stdout
            .contains("usr/local/bin/../lib/shoal/libshoal_preload.so"),
        "{}",
        run.describe()
    );
    assert_eq!(
        fs::read_link(root.join("sbin/mount.fuse.shoal")).unwrap(),
        PathBuf::from("/usr/local/bin/shoal")
    );
    let man_dir = root.join("usr/local/share/man/man8");
    let mut pages: Vec<String> = fs::read_dir(&man_dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for expected in [
        "shoal.8",
        "shoal-mkfs.8",
        "shoal-mount.8",
        "shoal-umount.8",
        "shoal-fsck.8",
        "shoal-info.8",
        "shoal-stats.8",
        "shoal-quota-report.8",
        "shoal-quota-set.8",
        "shoal-run.8",
    ] {
        assert!(
            pages.contains(&expected.to_string()),
            "{expected} missing from {pages:?}"
        );
    }
    assert!(
        !pages.iter().any(|page| page.starts_with("shoal-man")),
        "hidden commands get no page"
    );
    let bash = root.join("usr/local/share/bash-completion/completions/shoal");
    run_ok(Command::new("bash").arg("-n").arg(&bash), TOOL_TIMEOUT);
    assert!(fs::read_to_string(&bash).unwrap().contains("quota"));
    assert!(root
        .join("usr/local/share/zsh/site-functions/_shoal")
        .is_file());
    assert!(root
        .join("usr/local/share/fish/vendor_completions.d/shoal.fish")
        .is_file());

    if Command::new("man").arg("--version").output().is_err() {
        eprintln!(
            "skipped the man -l listing: man is not installed (scripts/setup installs man-db)"
        );
    } else {
        for page in &pages {
            let out = run_ok(
                Command::new("man")
                    .arg("-l")
                    .arg(man_dir.join(page))
                    .env("MANPAGER", "cat")
                    .env("MANWIDTH", "100"),
                TOOL_TIMEOUT,
            );
            let name = page.trim_end_matches(".8");
            assert!(out.stdout.contains("NAME"), "{page}: {}", out.describe());
            assert!(out.stdout.contains(name), "{page}: {}", out.describe());
        }
        let mount_page = run_ok(
            Command::new("man")
                .arg("-l")
                .arg(man_dir.join("shoal-mount.8"))
                .env("MANPAGER", "cat"),
            TOOL_TIMEOUT,
        );
        assert!(
            mount_page.stdout.contains("cache=SIZE"),
            "{}",
            mount_page.describe()
        );
    }

    run_ok(
        Command::new(&script)
            .arg("--uninstall")
            .env("DESTDIR", stage.path()),
        TOOL_TIMEOUT,
    );
    assert!(!binary.exists() && !man_dir.join("shoal.8").exists());
}

#[test]
fn version_names_the_commit() {
    let out = shoal_ok(&["--version"]);
    let version = out.stdout.trim();
    let commit = version
        .strip_prefix(&format!("shoal {} (commit ", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected --version: {version}"));
    let in_git = Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .is_ok_and(|out| out.status.success());
    if !in_git {
        assert_eq!(commit, "unknown");
        return;
    }
    // HEAD, or an ancestor of it when a commit landed between the build and this test.
    let ancestor = Command::new("git")
        .args(["merge-base", "--is-ancestor", commit, "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("git merge-base");
    assert!(
        commit.len() == 12 && ancestor.success(),
        "{commit} is not a commit of this checkout"
    );
}

/// `shoal info` says whether a store keeps file data compressed, as mkfs chose: from the
/// store itself when unmounted, from the daemon on a mountpoint.
#[test]
fn info_says_whether_file_data_is_compressed() {
    let dir = test_dir();
    let compressed = dir.path().join("compressed");
    shoal_ok(&[
        OsStr::new("mkfs"),
        OsStr::new("--compress"),
        compressed.as_os_str(),
    ]);
    let info = shoal_ok(&[
        OsStr::new("info"),
        OsStr::new("--json"),
        compressed.as_os_str(),
    ]);
    let info: serde_json::Value = serde_json::from_str(&info.stdout).unwrap();
    assert_eq!(info["data_compressed"], true, "{info}");
    let text = shoal_ok(&[OsStr::new("info"), compressed.as_os_str()]);
    assert!(
        text.stdout.contains("file data:      lz4-compressed"),
        "{}",
        text.stdout
    );

    let m = Mounted::new();
    let info = shoal_ok(&[OsStr::new("info"), OsStr::new("--json"), m.mnt.as_os_str()]);
    let info: serde_json::Value = serde_json::from_str(&info.stdout).unwrap();
    assert_eq!(info["data_compressed"], false, "{info}");
    m.finish();
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one labelled store whose info and quota report outputs are checked line by line"
)]
fn info_and_human_quota_report_on_a_labelled_store() {
    let dir = test_dir();
    let store = dir.path().join("store");
    let out = shoal_ok(&[
        OsStr::new("mkfs"),
        OsStr::new("--label"),
        OsStr::new("team photos"),
        store.as_os_str(),
    ]);
    let uuid = out
        .stdout
        .split("uuid ")
        .nth(1)
        .map(|rest| rest.trim_end_matches([')', '\n']).to_string())
        .expect("mkfs prints the uuid");
    let info = shoal_ok(&[OsStr::new("info"), OsStr::new("--json"), store.as_os_str()]);
    let info: serde_json::Value = serde_json::from_str(&info.stdout).unwrap();
    assert_eq!(info["uuid"], uuid.as_str());
    assert_eq!(info["label"], "team photos");
    assert_eq!(info["format_version"], 2, "format 2: recursive usage");
    assert_eq!(info["inodes"], 1, "the root directory");
    let created = info["created_secs"].as_i64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((now - 600..=now).contains(&created), "{created} vs {now}");
    let text = shoal_ok(&[OsStr::new("info"), store.as_os_str()]);
    assert!(
        text.stdout.contains("label:          team photos"),
        "{}",
        text.stdout
    );

    shoal_ok(&[
        OsStr::new("quota"),
        OsStr::new("set"),
        OsStr::new("-u"),
        OsStr::new("0"),
        OsStr::new("--bhard"),
        OsStr::new("1G"),
        OsStr::new("--bsoft"),
        OsStr::new("1536K"),
        store.as_os_str(),
    ]);
    let plain = shoal_ok(&[OsStr::new("quota"), OsStr::new("report"), store.as_os_str()]);
    assert!(plain.stdout.contains("1073741824"), "{}", plain.stdout);
    let human = shoal_ok(&[
        OsStr::new("quota"),
        OsStr::new("report"),
        OsStr::new("--human"),
        store.as_os_str(),
    ]);
    assert!(
        human.stdout.contains(" 1G ") && human.stdout.contains(" 1.5M "),
        "{}",
        human.stdout
    );
    assert!(!human.stdout.contains("1073741824"), "{}", human.stdout);
    let bad = shoal(&[
        OsStr::new("quota"),
        OsStr::new("set"),
        OsStr::new("-u"),
        OsStr::new("0"),
        OsStr::new("--bhard"),
        OsStr::new("1X"),
        store.as_os_str(),
    ]);
    assert!(
        !bad.success() && bad.stderr.contains("not a size"),
        "{}",
        bad.describe()
    );
}
