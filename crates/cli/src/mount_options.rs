//! `-o` options of `shoal mount`, parsed strictly: an unknown or malformed option is an
//! error, never ignored.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use shoal_engine::defaults;
use shoal_engine::staged_memory_bound;
use shoal_fuse::KernelFlag;

use crate::units;

/// Defaults of the options that are the mount's own (the storage ones are
/// `shoal_engine::defaults`).
pub const DEFAULT_THREADS: usize = 2;
pub const DEFAULT_MEMORY_BYTES: u64 = 1 << 30;

#[derive(Clone, Debug, PartialEq)]
pub struct MountOptions {
    /// Group commit interval; 0 disables the timer (sync on fsync and unmount only).
    pub commit: Duration,
    pub read_only: bool,
    pub allow_other: bool,
    pub threads: usize,
    pub cache_bytes: u64,
    pub memtable_bytes: u64,
    /// fjall's background workers (memtable flushes and compactions).
    pub compaction_threads: usize,
    /// Journal size that forces memtable flushes so old journals can be deleted.
    pub journal_bytes: u64,
    /// Operations staged in memory before a checkpoint writes them to the store together.
    pub checkpoint_bytes: u64,
    /// Bound on the daemon's table of kernel-referenced inodes plus the block cache.
    pub memory_bytes: u64,
    /// Where to serve Prometheus metrics (`metrics=ADDR:PORT`); off by default.
    pub metrics: Option<SocketAddr>,
    /// The kernel's writeback cache (`writeback=on|off`).
    pub writeback: bool,
    /// FUSE over io_uring when the kernel allows it (`uring=on|off`).
    pub uring: bool,
    /// How long the keep-awake spinners go on after the last request (`spin=MICROSECONDS`;
    /// 0: no spinners); `None`: decided from the machine (`shoal_fuse::BusyWait`).
    pub spin: Option<Duration>,
    /// Serve a lone caller's requests from another CPU (`follow=on|off`); `None`: decided
    /// from the machine (`shoal_fuse::BusyWait`).
    pub follow: Option<bool>,
    /// Serve `shoal run` processes over the fast path (`fastpath=on|off`).
    pub fastpath: bool,
    /// The mount's source in /proc/mounts (`fsname=`); `None`: the store's path.
    pub fsname: Option<String>,
    /// The mount's type is `fuse.SUBTYPE` (`subtype=`).
    pub subtype: String,
    /// Generic mount flags the kernel applies (`nosuid`, `noexec`, ...), in the order given.
    pub kernel_flags: Vec<KernelFlag>,
}

/// Every option `shoal mount -o` accepts: the one list the parser, its error message and
/// helpers that translate fstab lines (`mount.fuse.shoal`) go by.
pub const KNOWN_OPTIONS: &[&str] = &[
    "commit=DURATION",
    "ro",
    "rw",
    "allow_other",
    "threads=N",
    "cache=SIZE",
    "memtable=SIZE",
    "compaction_threads=N",
    "journal=SIZE",
    "checkpoint=SIZE",
    "memory=SIZE",
    "metrics[=IP:PORT]",
    "writeback=on|off",
    "uring=on|off",
    "spin=MICROSECONDS",
    "follow=on|off",
    "fastpath=on|off",
    "fsname=NAME",
    "subtype=NAME",
    "defaults",
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "noexec",
    "atime",
    "noatime",
    "relatime",
    "strictatime",
];

/// What a shell completes after `-o`: every word of `KNOWN_OPTIONS`, a valued option as
/// `key=` (`writeback=on` and `writeback=off` for the on|off ones). The value itself is
/// taken as it is and checked by `parse`, which knows comma-separated lists.
#[derive(Clone, Copy, Debug)]
pub struct OptionWords;

impl OptionWords {
    fn words() -> impl Iterator<Item = String> {
        KNOWN_OPTIONS.iter().flat_map(|option| {
            let option = option.replace("[=IP:PORT]", "");
            match option.split_once('=') {
                Some((key, "on|off")) => vec![format!("{key}=on"), format!("{key}=off")],
                Some((key, _)) => vec![format!("{key}=")],
                None => vec![option],
            }
        })
    }
}

impl clap::builder::TypedValueParser for OptionWords {
    type Value = String;

    fn parse_ref(
        &self,
        _command: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        value
            .to_str()
            .map(str::to_string)
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidUtf8))
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            Self::words().map(clap::builder::PossibleValue::new),
        ))
    }
}

/// The generic flags: applied by the kernel to the mount, passed through as they are.
/// FUSE marks every inode `S_NOATIME`, so shoal never updates access times whichever of
/// the atime flags is given; they change only what /proc/mounts shows.
fn kernel_flag(key: &str) -> Option<KernelFlag> {
    Some(match key {
        "dev" => KernelFlag::Dev,
        "nodev" => KernelFlag::NoDev,
        "suid" => KernelFlag::Suid,
        "nosuid" => KernelFlag::NoSuid,
        "exec" => KernelFlag::Exec,
        "noexec" => KernelFlag::NoExec,
        "atime" | "relatime" | "strictatime" => KernelFlag::Atime,
        "noatime" => KernelFlag::NoAtime,
        _ => return None,
    })
}

/// A name for the mount's source or type: the kernel separates options by commas and
/// /proc/mounts fields by whitespace.
fn mount_name(key: &str, value: Option<&str>) -> Result<String> {
    let value = value.with_context(|| format!("option {key} needs a value ({key}=NAME)"))?;
    if value.is_empty() || value.contains(|c: char| c == ',' || c.is_whitespace() || c == '\0') {
        bail!("option {key}={value:?}: must be non-empty, without commas or whitespace");
    }
    Ok(value.to_string())
}

impl Default for MountOptions {
    fn default() -> Self {
        Self {
            commit: defaults::COMMIT_INTERVAL,
            read_only: false,
            allow_other: false,
            threads: DEFAULT_THREADS,
            cache_bytes: defaults::CACHE_BYTES,
            memtable_bytes: defaults::MEMTABLE_BYTES,
            compaction_threads: defaults::WORKER_THREADS,
            journal_bytes: defaults::JOURNAL_BYTES,
            checkpoint_bytes: defaults::CHECKPOINT_BYTES,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            metrics: None,
            writeback: true,
            uring: true,
            spin: None,
            follow: None,
            fastpath: true,
            fsname: None,
            subtype: "shoal".into(),
            kernel_flags: Vec::new(),
        }
    }
}

/// The `-o` help of `shoal mount` (and so its man page), with the defaults above.
pub fn help() -> String {
    let defaults = MountOptions::default();
    let size = crate::units::human_bytes;
    format!(
        "Comma-separated options (defaults in brackets): commit=DURATION [{commit}s], ro, rw, \
         allow_other, threads=N [{threads}], cache=SIZE [{cache}], memtable=SIZE [{memtable}], \
         compaction_threads=N [{workers}], journal=SIZE [{journal}], checkpoint=SIZE \
         [{checkpoint}], memory=SIZE [{memory}], metrics[=IP:PORT] [off; bare: 127.0.0.1:{metrics_port}], writeback=on|off [on], \
         uring=on|off [on], spin=MICROSECONDS [{spin} where idle CPUs wake slowly, else 0], \
         follow=on|off [on where idle CPUs wake slowly, else off], fastpath=on|off [on], fsname=NAME [the store's path], \
         subtype=NAME [{subtype}], the generic nosuid, nodev, noexec, suid, dev, exec, noatime, \
         atime, relatime, defaults. SIZE: bytes, or a number with a K, M, G or T suffix \
         (256M, 1G). DURATION: seconds, or a number with s, m, h (5s, 1m). An unknown \
         option prints the full list.",
        commit = defaults.commit.as_secs(),
        metrics_port = DEFAULT_METRICS_PORT,
        threads = defaults.threads,
        cache = size(defaults.cache_bytes),
        memtable = size(defaults.memtable_bytes),
        workers = defaults.compaction_threads,
        journal = size(defaults.journal_bytes),
        checkpoint = size(defaults.checkpoint_bytes),
        memory = size(defaults.memory_bytes),
        spin = shoal_fuse::SPIN_WINDOW.as_micros(),
        subtype = defaults.subtype,
    )
}

fn number(key: &str, value: Option<&str>, min: u64, max: u64) -> Result<u64> {
    let value = value.with_context(|| format!("option {key} needs a value ({key}=N)"))?;
    let parsed: u64 = value
        .parse()
        .with_context(|| format!("option {key}={value}: not a whole number"))?;
    if parsed < min || parsed > max {
        bail!("option {key}={value}: must be between {min} and {max}");
    }
    Ok(parsed)
}

/// A size option in bytes: `cache=256` (MiB, as always), `cache=256M`, `cache=1G`
/// (crate::units), bounded in MiB.
fn size(key: &str, value: Option<&str>, min_mib: u64, max_mib: u64) -> Result<u64> {
    let value = value.with_context(|| format!("option {key} needs a size ({key}=256M)"))?;
    let bytes = units::parse_size(value)
        .map_err(|error| anyhow::anyhow!("option {key}={value}: {error}"))?;
    if bytes < min_mib << 20 || bytes > max_mib << 20 {
        // Before sizes had one meaning a plain number here was MiB: say how to write that.
        let plain = value.bytes().all(|byte| byte.is_ascii_digit());
        let hint = if plain {
            format!(" (a plain number is bytes: {value}M is {value} MiB)")
        } else {
            String::new()
        };
        bail!("option {key}={value}: must be between {min_mib}M and {max_mib}M{hint}");
    }
    Ok(bytes)
}

/// A duration option in seconds: `commit=5`, `commit=5s`, `commit=1m` (crate::units).
fn duration(key: &str, value: Option<&str>, max_secs: u64) -> Result<Duration> {
    let value = value.with_context(|| format!("option {key} needs a duration ({key}=5s)"))?;
    let secs = units::parse_duration_secs(value)
        .map_err(|error| anyhow::anyhow!("option {key}={value}: {error}"))?;
    if secs > max_secs {
        bail!("option {key}={value}: must be at most {max_secs} seconds");
    }
    Ok(Duration::from_secs(secs))
}

/// The metrics endpoint's port when `metrics` is given without one. Outside 9100-9999,
/// the range Prometheus hands out to exporters (node_exporter has 9100), which is full, so
/// a shoal mount does not take the port of an exporter already on the host.
pub const DEFAULT_METRICS_PORT: u16 = 10190;

/// `metrics` (loopback, `DEFAULT_METRICS_PORT`), `metrics=127.0.0.1:10190` or
/// `metrics=[::1]:10190`: an IP address and a port (no host names: the daemon must not
/// depend on name resolution at mount time).
fn socket_address(key: &str, value: Option<&str>) -> Result<SocketAddr> {
    let Some(value) = value else {
        return Ok(SocketAddr::from((
            std::net::Ipv4Addr::LOCALHOST,
            DEFAULT_METRICS_PORT,
        )));
    };
    value.parse().with_context(|| {
        format!(
            "option {key}={value}: not an IP address and port (e.g. 127.0.0.1:{DEFAULT_METRICS_PORT} or [::1]:{DEFAULT_METRICS_PORT})"
        )
    })
}

fn on_off(key: &str, value: Option<&str>) -> Result<bool> {
    match value {
        Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => bail!("option {key}={other}: must be on or off"),
        None => bail!("option {key} needs a value ({key}=on or {key}=off)"),
    }
}

pub fn parse(groups: &[String]) -> Result<MountOptions> {
    let mut options = MountOptions::default();
    for option in groups
        .iter()
        .flat_map(|group| group.split(','))
        .filter(|o| !o.is_empty())
    {
        let (key, value) = match option.split_once('=') {
            Some((key, value)) => (key, Some(value)),
            None => (option, None),
        };
        match key {
            "commit" => options.commit = duration(key, value, 3600)?,
            "threads" => options.threads = number(key, value, 1, 64)? as usize,
            "cache" => options.cache_bytes = size(key, value, 1, 1 << 20)?,
            "memtable" => options.memtable_bytes = size(key, value, 1, 4096)?,
            "compaction_threads" => {
                options.compaction_threads = number(key, value, 1, 64)? as usize
            }
            "journal" => {
                let min_mib = shoal_engine::MIN_JOURNAL_BYTES >> 20;
                options.journal_bytes = size(key, value, min_mib, 1 << 20)?
            }
            "checkpoint" => options.checkpoint_bytes = size(key, value, 0, 1024)?,
            "metrics" => options.metrics = Some(socket_address(key, value)?),
            "memory" => options.memory_bytes = size(key, value, 2, 1 << 24)?,
            "writeback" => options.writeback = on_off(key, value)?,
            "uring" => options.uring = on_off(key, value)?,
            "spin" => {
                options.spin = Some(Duration::from_micros(number(key, value, 0, 1_000_000)?));
            }
            "follow" => options.follow = Some(on_off(key, value)?),
            "fastpath" => options.fastpath = on_off(key, value)?,
            "fsname" => options.fsname = Some(mount_name(key, value)?),
            "subtype" => options.subtype = mount_name(key, value)?,
            _ if value.is_some() && KNOWN_OPTIONS.contains(&key) => {
                bail!("option {key} takes no value")
            }
            "ro" => options.read_only = true,
            "rw" => options.read_only = false,
            "allow_other" => options.allow_other = true,
            // fstab's "the usual": rw and nothing else; FUSE mounts are nosuid,nodev
            // unless suid or dev is given.
            "defaults" => {}
            _ => match kernel_flag(key) {
                Some(flag) => options.kernel_flags.push(flag),
                None => bail!(
                    "unknown mount option {option:?} (known: {})",
                    KNOWN_OPTIONS.join(", ")
                ),
            },
        }
    }
    // The block cache, the two keyspaces' memtables and the staged operations count
    // against the budget; at or over it, every kernel reference would be evicted as soon
    // as they filled.
    let store_bytes = options.cache_bytes
        + 2 * options.memtable_bytes
        + staged_memory_bound(options.checkpoint_bytes);
    if options.memory_bytes <= store_bytes {
        bail!(
            "option memory={} must exceed cache + 2 x memtable + {} x checkpoint = {} (MiB): the block cache, the write buffers and staged operations count against the memory budget",
            options.memory_bytes >> 20,
            staged_memory_bound(1 << 20) >> 20,
            store_bytes >> 20
        );
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_options() {
        let options = parse(&[
            "commit=1,ro".into(),
            "threads=4,allow_other,cache=64M".into(),
        ])
        .unwrap();
        assert_eq!(options.commit, Duration::from_secs(1));
        assert!(options.read_only && options.allow_other);
        assert_eq!(options.threads, 4);
        assert_eq!(options.cache_bytes, 64 << 20);
        let options = parse(&[
            "compaction_threads=3,journal=128M,metrics=127.0.0.1:9100".into(),
            "metrics=[::1]:0".into(),
        ])
        .unwrap();
        assert_eq!(options.compaction_threads, 3);
        assert_eq!(options.journal_bytes, 128 << 20);
        assert_eq!(options.metrics, Some("[::1]:0".parse().unwrap()));
        let bare = parse(&["metrics".into()]).unwrap();
        assert_eq!(
            bare.metrics,
            Some(SocketAddr::from(([127, 0, 0, 1], DEFAULT_METRICS_PORT)))
        );
        let options = parse(&["cache=1M,memtable=1M,checkpoint=0,memory=4M".into()]).unwrap();
        assert_eq!(options.memory_bytes, 4 << 20);
        assert_eq!(options.checkpoint_bytes, 0);
        let options = parse(&["cache=256M,memtable=1G,memory=4G,commit=2m".into()]).unwrap();
        assert_eq!(options.cache_bytes, 256 << 20);
        assert_eq!(options.memtable_bytes, 1 << 30);
        assert_eq!(options.memory_bytes, 4 << 30);
        assert_eq!(options.commit, Duration::from_secs(120));
        let options = parse(&["checkpoint=2M".into()]).unwrap();
        assert_eq!(options.checkpoint_bytes, 2 << 20);
        assert!(options.writeback, "writeback cache on by default");
        assert!(!parse(&["writeback=off".into()]).unwrap().writeback);
        assert!(options.uring, "io_uring offered by default");
        assert!(!parse(&["uring=off".into()]).unwrap().uring);
        assert_eq!(options.follow, None, "following decided by the machine");
        assert_eq!(parse(&["follow=off".into()]).unwrap().follow, Some(false));
        assert_eq!(options.spin, None, "spinning decided by the machine");
        assert_eq!(
            parse(&["spin=0".into()]).unwrap().spin,
            Some(Duration::ZERO)
        );
        assert!(parse(&["spin=2000000".into()]).is_err());
        assert!(
            parse(&["writeback=off,writeback=on".into()])
                .unwrap()
                .writeback
        );
    }

    #[test]
    fn parses_generic_options() {
        let options = parse(&[
            "defaults,noatime,nosuid,nodev,noexec,fsname=/srv/a,subtype=objects".into(),
            "relatime,dev,suid,exec,atime".into(),
        ])
        .unwrap();
        assert_eq!(options.fsname.as_deref(), Some("/srv/a"));
        assert_eq!(options.subtype, "objects");
        assert_eq!(
            options.kernel_flags,
            [
                KernelFlag::NoAtime,
                KernelFlag::NoSuid,
                KernelFlag::NoDev,
                KernelFlag::NoExec,
                KernelFlag::Atime,
                KernelFlag::Dev,
                KernelFlag::Suid,
                KernelFlag::Exec,
                KernelFlag::Atime,
            ]
        );
        // A plain number is bytes, as everywhere; too small a size says how to write MiB.
        let options = parse(&["cache=268435456".into()]).unwrap();
        assert_eq!(options.cache_bytes, 256 << 20);
        let error = parse(&["cache=64".into()]).unwrap_err().to_string();
        assert!(error.contains("a plain number is bytes: 64M"), "{error}");
        let defaults = parse(&[]).unwrap();
        assert_eq!(defaults.fsname, None);
        assert_eq!(defaults.subtype, "shoal");
    }

    #[test]
    fn refuses_bad_options() {
        for bad in [
            "commit",
            "commit=-1",
            "commit=x",
            "threads=0",
            "threads=1000",
            "bogus",
            "ro=1",
            "compaction_threads=0",
            "journal=1M",
            "journal=x",
            "metrics=localhost:9100",
            "metrics=127.0.0.1",
            "metrics=127.0.0.1:99999",
            "memory=1M",
            "memory=256M",
            "writeback",
            "writeback=1",
            "writeback=yes",
            "cache=64M,memory=32M",
            "cache=64M,memtable=64M,memory=150M",
            "cache=1M,memtable=1M,memory=4M",
            "checkpoint=-1",
            "checkpoint=2000M",
            "fsname",
            "fsname=",
            "fsname=a,b",
            "fsname=a b",
            "subtype=",
            "nosuid=1",
            "defaults=1",
            "noatime=yes",
            "cache=256X",
            "cache=0M",
            "commit=2h",
        ] {
            assert!(parse(&[bad.into()]).is_err(), "{bad} accepted");
        }
    }
}
