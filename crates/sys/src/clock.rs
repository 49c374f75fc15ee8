//! The clock the kernel stamps file times with.

/// `CLOCK_REALTIME_COARSE` as (seconds, nanoseconds): the time at the last tick, what the
/// kernel's `current_time()` gives file times. `None` if the clock cannot be read.
pub fn realtime_coarse() -> Option<(i64, u32)> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a valid out-parameter.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut now) } != 0 {
        return None;
    }
    Some((now.tv_sec, u32::try_from(now.tv_nsec).ok()?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_coarse_clock_is_near_the_system_clock() {
        let (secs, nanos) = super::realtime_coarse().expect("readable");
        let system = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs() as i64;
        assert!((secs - system).abs() <= 1 && nanos < 1_000_000_000);
    }
}
