//! CPUs and CPU time: affinity, the idle scheduling class, getrusage and thread clocks.

use std::io;
use std::time::Duration;

use crate::c_path::check;

/// The CPUs the calling thread may run on.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a writable cpu_set_t of the size we pass, for the calling thread (0).
    check(unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) })?;
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` < CPU_SETSIZE, so CPU_ISSET reads inside the set.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    set_allowed_cpus(&[cpu])
}

/// Lets the calling thread run on `cpus` only (EINVAL for a CPU past the set's size or
/// none at all).
pub fn set_allowed_cpus(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() || cpus.iter().any(|&cpu| cpu >= libc::CPU_SETSIZE as usize) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `cpu` < CPU_SETSIZE (checked above), so CPU_SET writes inside the set.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: a cpu_set_t of the size we pass, for the calling thread (0).
    check(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) })
}

/// Moves the calling thread to SCHED_IDLE: below every nice level, preempted at once by
/// any other thread.
pub fn enter_idle_class() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a valid sched_param for SCHED_IDLE (priority 0), for the calling thread (0).
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) })
}

/// CPU time the calling thread has used, `None` if the clock cannot be read.
pub fn thread_cpu_time() -> Option<Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a writable timespec.
    check(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) }).ok()?;
    Some(Duration::new(
        u64::try_from(now.tv_sec).ok()?,
        u32::try_from(now.tv_nsec).ok()?,
    ))
}

/// Whose CPU time `cpu_time` reads (getrusage's `who`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuOf {
    /// Every thread of this process.
    ThisProcess,
    /// The children this process has waited for.
    WaitedChildren,
}

/// User plus system time, zero if getrusage fails.
pub fn cpu_time(of: CpuOf) -> Duration {
    let who = match of {
        CpuOf::ThisProcess => libc::RUSAGE_SELF,
        CpuOf::WaitedChildren => libc::RUSAGE_CHILDREN,
    };
    // SAFETY: rusage is plain data (integers); all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a writable rusage of the right type.
    if check(unsafe { libc::getrusage(who, &mut usage) }).is_err() {
        return Duration::ZERO;
    }
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

fn timeval(time: libc::timeval) -> Duration {
    Duration::from_secs(time.tv_sec.max(0) as u64)
        + Duration::from_micros(time.tv_usec.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_to_an_allowed_cpu_runs_and_its_clock_moves() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let cpu = cpus[0];
        std::thread::spawn(move || {
            pin_to_cpu(cpu).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![cpu]);
            let start = thread_cpu_time().unwrap();
            let mut spun = 0u64;
            while thread_cpu_time().unwrap() == start {
                spun = std::hint::black_box(spun + 1);
            }
        })
        .join()
        .unwrap();
        assert!(pin_to_cpu(libc::CPU_SETSIZE as usize).is_err());
        assert!(set_allowed_cpus(&[]).is_err());
        assert!(cpu_time(CpuOf::ThisProcess) > Duration::ZERO);
    }
}
