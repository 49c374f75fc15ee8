//! CPU time of a workload: this process and its waited-for children (getrusage: user +
//! system, so kernel filesystem work done inside our syscalls counts), plus the shoal daemon
//! serving the target (/proc/PID/stat). Kernel background threads (kworker, xfsaild, ...)
//! are not attributed to anyone.

use std::fs;
use std::time::Duration;

use shoal_sys::cpu::{cpu_time, CpuOf};
use shoal_sys::process;

/// A point-in-time reading; subtract two with [`CpuSnapshot::since`].
#[derive(Clone, Debug)]
pub struct CpuSnapshot {
    self_and_children: Duration,
    daemon: Duration,
    spin: Duration,
}

/// CPU spent between two snapshots.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuUsage {
    pub workload: Duration,
    /// The daemon's work: every thread but its keep-awake spinners.
    pub daemon: Duration,
    /// The daemon's keep-awake spinners (`shoal mount -o spin=`) and its ring threads'
    /// polling for a followed caller (`follow=`, from `shoal stats`): CPU time that would
    /// otherwise have been idle, kept apart from the work on requests.
    pub spin: Duration,
}

impl CpuUsage {
    pub fn total(&self) -> Duration {
        self.workload + self.daemon
    }
}

impl CpuSnapshot {
    pub fn take(daemon_pids: &[u32]) -> Self {
        CpuSnapshot {
            self_and_children: cpu_time(CpuOf::ThisProcess) + cpu_time(CpuOf::WaitedChildren),
            daemon: daemon_pids.iter().map(|&pid| work_cpu(pid)).sum(),
            spin: daemon_pids.iter().map(|&pid| spinner_cpu(pid)).sum(),
        }
    }

    pub fn since(&self, earlier: &CpuSnapshot) -> CpuUsage {
        CpuUsage {
            workload: self
                .self_and_children
                .saturating_sub(earlier.self_and_children),
            daemon: self.daemon.saturating_sub(earlier.daemon),
            spin: self.spin.saturating_sub(earlier.spin),
        }
    }
}

/// utime + stime of a process (all its threads), zero if it is gone.
pub fn process_cpu(pid: u32) -> Duration {
    stat_cpu(&format!("/proc/{pid}/stat"))
}

/// Thread names of the shoal daemon's keep-awake spinners (`shoal-spin-CPU`).
const SPINNER_THREAD_PREFIX: &str = "shoal-spin-";

/// A process's CPU without its keep-awake spinners.
/// A daemon counts as idle once it used less than this share of one CPU over a window.
const IDLE_SHARE_PERCENT: u32 = 5;
const IDLE_WINDOW: Duration = Duration::from_millis(200);

/// Waits until the daemons' work (spinners aside) drops below `IDLE_SHARE_PERCENT` of a
/// CPU over `IDLE_WINDOW`, or `limit` passed: background work a step left behind (flushes,
/// reclaim of what it removed) then does not land in the next step's timing. Returns how
/// long it waited.
pub fn wait_until_daemons_idle(daemon_pids: &[u32], limit: Duration) -> Duration {
    let start = std::time::Instant::now();
    let work = || -> Duration { daemon_pids.iter().map(|&pid| work_cpu(pid)).sum() };
    let mut before = work();
    while start.elapsed() < limit {
        std::thread::sleep(IDLE_WINDOW);
        let now = work();
        if now.saturating_sub(before) * 100 < IDLE_WINDOW * IDLE_SHARE_PERCENT {
            break;
        }
        before = now;
    }
    start.elapsed()
}

fn work_cpu(pid: u32) -> Duration {
    process_cpu(pid).saturating_sub(spinner_cpu(pid))
}

/// CPU of the keep-awake spinner threads of a shoal daemon (zero for other processes).
fn spinner_cpu(pid: u32) -> Duration {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    tasks
        .flatten()
        .filter(|task| {
            fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.starts_with(SPINNER_THREAD_PREFIX))
        })
        .map(|task| stat_cpu(&task.path().join("stat").to_string_lossy()))
        .sum()
}

fn stat_cpu(path: &str) -> Duration {
    let Ok(stat) = fs::read_to_string(path) else {
        return Duration::ZERO;
    };
    parse_stat_ticks(&stat)
        .map(|ticks| {
            Duration::from_secs_f64(ticks as f64 / process::clock_ticks_per_second() as f64)
        })
        .unwrap_or(Duration::ZERO)
}

/// utime + stime in clock ticks from a /proc/PID/stat line. The command name may contain
/// spaces and parentheses, so fields are counted after the last ')'.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3 of the man page; utime is 14 and stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Resident memory of a process in bytes (VmRSS), if it is alive.
pub fn process_rss_bytes(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    meminfo_field(&status, "VmRSS:")
}

/// Memory in use on the machine (MemTotal - MemAvailable), for targets without a daemon.
pub fn system_used_bytes() -> Option<u64> {
    let meminfo = fs::read_to_string("/proc/meminfo").ok()?;
    let total = meminfo_field(&meminfo, "MemTotal:")?;
    let available = meminfo_field(&meminfo, "MemAvailable:")?;
    Some(total.saturating_sub(available))
}

pub fn system_total_bytes() -> Option<u64> {
    meminfo_field(&fs::read_to_string("/proc/meminfo").ok()?, "MemTotal:")
}

/// A "Name:   1234 kB" line of /proc/meminfo or /proc/PID/status, in bytes.
fn meminfo_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with(name))?;
    let kib: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_survive_odd_command_names() {
        let line = "4242 (shoal (x) y) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 3 0";
        assert_eq!(parse_stat_ticks(line), Some(300));
    }

    #[test]
    fn meminfo_fields_are_bytes() {
        let text = "MemTotal:       1000 kB\nMemAvailable:    400 kB\n";
        assert_eq!(meminfo_field(text, "MemTotal:"), Some(1_024_000));
        assert_eq!(meminfo_field(text, "Nope:"), None);
    }

    #[test]
    fn own_cpu_moves_forward() {
        let before = CpuSnapshot::take(&[std::process::id()]);
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let used = CpuSnapshot::take(&[std::process::id()]).since(&before);
        assert!(used.workload >= Duration::ZERO);
    }
}
