//! Ctrl-C: the first SIGINT/SIGTERM sets a flag the workloads poll, so they stop between
//! operations and every made target is torn down by its Drop guard. Running tools (tar, rm)
//! get the terminal's SIGINT themselves and fail, which unwinds the same way.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{BenchError, Result};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only an atomic store: anything else is not async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGINT, SIGTERM and SIGHUP (once per process is enough).
pub fn install() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(
                signal,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Err(Interrupted) once a signal came; call between operations.
pub fn check() -> Result<()> {
    if interrupted() {
        Err(BenchError::Interrupted)
    } else {
        Ok(())
    }
}
