//! `mount.fuse.shoal`: the helper mount(8) runs for `mount -t fuse.shoal STORE MNT`, for
//! /etc/fstab lines and for systemd `.mount` units. It is the `shoal` binary itself under
//! that name (scripts/install makes the link), as mount(8) calls it:
//!
//! `mount.fuse.shoal STORE MOUNTPOINT [-sfnv] [-N NAMESPACE] [-o OPTIONS] [-t TYPE]`
//!
//! Options that only mean something to mount(8), fstab or systemd are dropped here; the rest
//! go to `shoal mount -o`, which refuses what it does not know.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

/// The name mount(8) looks for: `/sbin/mount.<type>` with type `fuse.shoal`.
pub const HELPER_NAME: &str = "mount.fuse.shoal";

/// mount(8)'s exit status for "mount failure" (its helpers use the same codes).
const MOUNT_FAILURE: u8 = 32;

/// Whether this process was started as the mount helper (by its name).
pub fn invoked_as_helper() -> bool {
    std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|path| path.file_name().map(|name| name == HELPER_NAME))
        .unwrap_or(false)
}

/// What mount(8) asked for.
#[derive(Debug, PartialEq)]
struct HelperRequest {
    store: PathBuf,
    mountpoint: PathBuf,
    /// What is left for `shoal mount -o` once the fstab-only options are dropped.
    options: Vec<String>,
    /// `-f`: mount(8)'s "fake": do everything but the mount.
    fake: bool,
}

pub fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let result = parse_args(&args).and_then(|request| {
        if request.fake {
            return Ok(ExitCode::SUCCESS);
        }
        if request.options.iter().any(|option| option == "remount") {
            return remount(&request);
        }
        run_shoal_mount(&request)
    });
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("{HELPER_NAME}: {error:#}");
            ExitCode::from(MOUNT_FAILURE)
        }
    }
}

/// Runs `shoal mount STORE MOUNTPOINT -o OPTIONS` (which returns once the mount is live):
/// the daemon then carries the command line by which `shoal umount`, `stats` and `quota`
/// find it (`mounts::daemon_pids`). Its messages go straight to mount(8)'s stderr.
fn run_shoal_mount(request: &HelperRequest) -> Result<ExitCode> {
    let shoal = std::env::current_exe().context("cannot find the shoal binary")?;
    let mut command = std::process::Command::new(&shoal);
    command
        .arg0("shoal")
        .arg("mount")
        .arg(&request.store)
        .arg(&request.mountpoint);
    if !request.options.is_empty() {
        command.arg("-o").arg(request.options.join(","));
    }
    let status = command
        .status()
        .with_context(|| format!("cannot run {}", shoal.display()))?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(MOUNT_FAILURE)
    })
}

/// `mount -o remount,... MNT`: mount(8) runs the helper for remounts too. The daemon
/// keeps serving; the kernel switches the mount (mount(2) with MS_REMOUNT). mount(2) sets
/// every per-mount flag from the call, so one left out is cleared: the flags the mount has
/// now (statvfs) are passed on unless an option changes them, or `remount,ro` would drop
/// nosuid and nodev and honour set-uid files and device nodes from then on. FUSE's own
/// options (user_id=, default_permissions, ...) and shoal's (cache=, commit=, ...) that
/// mount(8) repeats from fstab cannot change and are left as they are.
fn remount(request: &HelperRequest) -> Result<ExitCode> {
    let current = shoal_sys::statvfs::statvfs(&request.mountpoint)
        .with_context(|| format!("cannot read the flags of {}", request.mountpoint.display()))?
        .f_flag;
    let flags = remount_flags(current, &request.options);
    if let Err(error) = shoal_sys::mount_calls::remount(&request.mountpoint, flags) {
        bail!("cannot remount {}: {error}", request.mountpoint.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The flags of a mount that a remount keeps unless told otherwise. statvfs reports them
/// as ST_* bits, which Linux defines equal to the MS_* bits (ST_RDONLY = MS_RDONLY, ...).
/// The atime flags are not among them: the kernel keeps those itself when a remount names
/// none.
const KEPT_FLAGS: libc::c_ulong =
    libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_SYNCHRONOUS;

/// mount(2) flags of a remount: the mount's `current` flags (statvfs's `f_flag`), changed
/// by the options in order (the last of ro/rw, nosuid/suid, ... wins).
///
/// What mount(8) hands over differs. Without an fstab line it passes the mount's whole
/// option list from mountinfo (FUSE's `user_id=` among them) with the command's changes
/// made, and drops `suid`, `dev` and `exec` once applied: a flag missing from that list
/// was cleared, so the list alone says it all. With an fstab line it passes only the
/// line's and the command's options, `suid`, `dev` and `exec` again dropped: what is
/// missing says nothing, so the mount's current flags stay (the protective ones can then
/// only be lifted by an unmount and a mount).
fn remount_flags(current: libc::c_ulong, options: &[String]) -> libc::c_ulong {
    let whole_list = options.iter().any(|option| option.starts_with("user_id="));
    let kept = if whole_list { 0 } else { current & KEPT_FLAGS };
    let mut flags = libc::MS_REMOUNT | kept;
    for option in options {
        let (set, clear) = match option.as_str() {
            "ro" => (libc::MS_RDONLY, 0),
            "rw" => (0, libc::MS_RDONLY),
            "nosuid" => (libc::MS_NOSUID, 0),
            "suid" => (0, libc::MS_NOSUID),
            "nodev" => (libc::MS_NODEV, 0),
            "dev" => (0, libc::MS_NODEV),
            "noexec" => (libc::MS_NOEXEC, 0),
            "exec" => (0, libc::MS_NOEXEC),
            "sync" => (libc::MS_SYNCHRONOUS, 0),
            "async" => (0, libc::MS_SYNCHRONOUS),
            "noatime" => (libc::MS_NOATIME, 0),
            // mount(8)'s "atime" only clears noatime, which the kernel reads as "keep the
            // atime flags": name the default so that it takes effect.
            "atime" | "relatime" => (libc::MS_RELATIME, libc::MS_NOATIME),
            "strictatime" => (libc::MS_STRICTATIME, libc::MS_NOATIME),
            "nodiratime" => (libc::MS_NODIRATIME, 0),
            _ => (0, 0),
        };
        flags = (flags | set) & !clear;
    }
    flags
}

fn parse_args(args: &[OsString]) -> Result<HelperRequest> {
    let mut paths = Vec::new();
    let mut options = Vec::new();
    let mut fake = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        match text.as_ref() {
            "-o" => {
                let value = args.next().context("-o needs a value")?;
                options.extend(kept_options(&value.to_string_lossy()));
            }
            "-t" => {
                let value = args.next().context("-t needs a value")?;
                let fstype = value.to_string_lossy();
                if fstype != "fuse.shoal" && fstype != "shoal" {
                    bail!("asked to mount type {fstype}; this helper mounts fuse.shoal");
                }
            }
            "-N" => bail!("mounting into another mount namespace (-N) is not supported"),
            "-h" | "--help" => bail!(
                "usage: {HELPER_NAME} STORE_DIR MOUNTPOINT [-o OPTIONS] (run by mount -t fuse.shoal)"
            ),
            _ if text.starts_with("-o") => options.extend(kept_options(&text[2..])),
            _ if text.starts_with('-') && text.len() > 1 => {
                for flag in text[1..].chars() {
                    match flag {
                        'f' => fake = true,
                        // sloppy, no mtab, verbose: nothing to do for a FUSE mount.
                        's' | 'n' | 'v' => {}
                        other => bail!("unknown flag -{other}"),
                    }
                }
            }
            _ => paths.push(PathBuf::from(arg)),
        }
    }
    let [store, mountpoint] = <[PathBuf; 2]>::try_from(paths)
        .map_err(|_| anyhow::anyhow!("give STORE_DIR and MOUNTPOINT (as mount(8) does)"))?;
    Ok(HelperRequest {
        store,
        mountpoint,
        options,
        fake,
    })
}

/// Options for mount(8), fstab and systemd, not for the filesystem: `nofail`, `_netdev`,
/// `noauto`/`auto`, `user`/`users`/`owner`/`group`/`nouser`, `defaults`, `comment=`,
/// and every `x-` option (`x-systemd.requires=`, `x-systemd.automount`, ...).
fn is_fstab_only(option: &str) -> bool {
    let key = option.split_once('=').map_or(option, |(key, _)| key);
    matches!(
        key,
        "nofail"
            | "_netdev"
            | "noauto"
            | "auto"
            | "user"
            | "users"
            | "nouser"
            | "owner"
            | "group"
            | "defaults"
            | "comment"
    ) || key.starts_with("x-")
}

fn kept_options(list: &str) -> impl Iterator<Item = String> + '_ {
    list.split(',')
        .filter(|option| !option.is_empty() && !is_fstab_only(option))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<HelperRequest> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse_args(&args)
    }

    #[test]
    fn drops_fstab_only_options_and_keeps_the_rest() {
        let request = parse(&[
            "/srv/store",
            "/mnt/x",
            "-o",
            "rw,nofail,_netdev,x-systemd.requires=network.target,noauto,user,comment=hi,cache=64M,defaults",
            "-t",
            "fuse.shoal",
        ])
        .unwrap();
        assert_eq!(request.store, PathBuf::from("/srv/store"));
        assert_eq!(request.mountpoint, PathBuf::from("/mnt/x"));
        assert_eq!(request.options, ["rw", "cache=64M"]);
        assert!(!request.fake);
    }

    #[test]
    fn accepts_the_flags_mount_passes() {
        let request = parse(&["-sfnv", "-ocommit=1", "/s", "/m"]).unwrap();
        assert!(request.fake);
        assert_eq!(request.options, ["commit=1"]);
        assert_eq!(parse(&["/s", "/m"]).unwrap().options, Vec::<String>::new());
    }

    #[test]
    fn remount_flags_keep_the_mounts_flags_unless_an_option_changes_them() {
        let options = |list: &[&str]| list.iter().map(|o| o.to_string()).collect::<Vec<_>>();
        let ro = remount_flags(0, &options(&["remount", "rw", "nosuid", "ro"]));
        assert_eq!(ro, libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID);
        let rw = remount_flags(0, &options(&["remount", "ro", "user_id=0", "rw"]));
        assert_eq!(rw, libc::MS_REMOUNT);
        // A nosuid,nodev mount (statvfs's ST_* bits, 1024 = ST_NOATIME) stays so.
        let mounted = libc::ST_NOSUID | libc::ST_NODEV | libc::ST_NOATIME;
        let kept = remount_flags(mounted, &options(&["remount", "ro"]));
        assert_eq!(
            kept,
            libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV
        );
        let changed = remount_flags(mounted, &options(&["remount", "suid", "noexec"]));
        assert_eq!(changed, libc::MS_REMOUNT | libc::MS_NODEV | libc::MS_NOEXEC);
        // mount(8)'s merged list (no fstab line), `exec,suid` applied: nosuid left out.
        let merged = options(&[
            "rw",
            "nodev",
            "noatime",
            "remount",
            "user_id=0",
            "group_id=0",
        ]);
        assert_eq!(
            remount_flags(mounted, &merged),
            libc::MS_REMOUNT | libc::MS_NODEV | libc::MS_NOATIME
        );
    }

    /// statvfs reports the flags a remount keeps with the values mount(2) takes.
    #[test]
    fn st_flags_are_ms_flags() {
        assert_eq!(libc::ST_RDONLY, libc::MS_RDONLY);
        assert_eq!(libc::ST_NOSUID, libc::MS_NOSUID);
        assert_eq!(libc::ST_NODEV, libc::MS_NODEV);
        assert_eq!(libc::ST_NOEXEC, libc::MS_NOEXEC);
        assert_eq!(libc::ST_SYNCHRONOUS, libc::MS_SYNCHRONOUS);
    }

    #[test]
    fn refuses_what_it_cannot_do() {
        for bad in [
            &["/s"][..],
            &["/s", "/m", "/extra"],
            &["/s", "/m", "-t", "ext4"],
            &["/s", "/m", "-N", "1234"],
            &["/s", "/m", "-x"],
            &["/s", "/m", "-o"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
