//! Signals a thread takes in turn (sigwait) instead of by a handler.

use std::io;

/// A set of signals blocked in the thread that made it (and in the threads it starts
/// afterwards), to be taken one at a time with [`BlockedSignals::wait`].
pub struct BlockedSignals {
    set: libc::sigset_t,
}

impl BlockedSignals {
    /// Blocks `signals` in the calling thread; threads started after this inherit the mask,
    /// so only a thread that waits on the set sees them.
    pub fn block(signals: &[libc::c_int]) -> io::Result<Self> {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it below.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: a writable sigset_t.
        unsafe { libc::sigemptyset(&mut set) };
        for &signal in signals {
            // SAFETY: an initialised sigset_t; an invalid signal number is EINVAL, not UB.
            if unsafe { libc::sigaddset(&mut set, signal) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: an initialised set; a null old-set pointer is allowed.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(Self { set })
    }

    /// Waits for one of the signals and returns its number.
    pub fn wait(&self) -> io::Result<libc::c_int> {
        let mut signal: libc::c_int = 0;
        // SAFETY: an initialised set and a writable int.
        let rc = unsafe { libc::sigwait(&self.set, &mut signal) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(signal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_signal_sent_to_the_thread_is_taken_by_wait() {
        std::thread::spawn(|| {
            let blocked = BlockedSignals::block(&[libc::SIGUSR2]).unwrap();
            // SAFETY: raise(3) sends a signal to the calling thread, where it is blocked.
            assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
            assert_eq!(blocked.wait().unwrap(), libc::SIGUSR2);
        })
        .join()
        .unwrap();
        assert!(BlockedSignals::block(&[10_000]).is_err());
    }
}
