//! Free space kept back on the store's device, so the key-value store itself never runs
//! out of it.
//!
//! fjall treats a failed journal write as fatal: it marks the whole database poisoned,
//! and every later write, fsync and flush fails until it is reopened (a flush or
//! compaction worker that fails poisons it the same way). A full device must therefore
//! never reach fjall. The engine asks this reserve before each batch, as XFS and ext4
//! keep reserved blocks:
//!
//! - an operation that needs room (it adds inodes or bytes, or writes file data) is
//!   refused with ENOSPC unless the device keeps, after it, the floor plus what the store
//!   still has to write out (memtables and staged operations: a flush writes them to
//!   tables again before their journal goes);
//! - an operation that frees or moves things (unlink, rmdir, truncate, rename, chmod) may
//!   use half of the floor, so the filesystem can always be cleaned up.
//!
//! Before refusing, the store is asked to write out its memtables, which lets their
//! journals go and returns their space (`Store::release_space`).
//!
//! `statvfs` is asked at most every `RESAMPLE_INTERVAL`, or sooner when the bytes
//! admitted since bring the estimate near the bound.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The floor: this fraction of the device (1/`FLOOR_DIVISOR`), within the bounds below.
const FLOOR_DIVISOR: u64 = 16;
const MIN_FLOOR_BYTES: u64 = 8 << 20;
const MAX_FLOOR_BYTES: u64 = 2 << 30;
const RESAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// What a batch asks of the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Adds inodes or bytes, or writes file data: the whole floor stays free.
    Room,
    /// Frees or moves things: may use half of the floor.
    Cleanup,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Bytes available to us on the device when sampled.
    available_bytes: u64,
    /// What the store still has to write out (memtables, staged operations) then.
    pending_bytes: u64,
    /// Batch bytes admitted since: each reaches the journal and later a table.
    admitted_bytes: u64,
    taken: Instant,
}

pub struct SpaceReserve {
    dir: PathBuf,
    floor_bytes: u64,
    sample: Mutex<Option<Sample>>,
}

pub use shoal_sys::statvfs::device_space;

/// The floor kept free on a device of `total_bytes`.
pub fn floor_bytes(total_bytes: u64) -> u64 {
    (total_bytes / FLOOR_DIVISOR).clamp(MIN_FLOOR_BYTES, MAX_FLOOR_BYTES)
}

impl SpaceReserve {
    pub fn new(dir: &Path) -> std::io::Result<Self> {
        let space = device_space(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            floor_bytes: floor_bytes(space.total_bytes),
            sample: Mutex::new(None),
        })
    }

    pub fn floor_bytes(&self) -> u64 {
        self.floor_bytes
    }

    fn required_bytes(&self, need: Need, pending_bytes: u64) -> u64 {
        match need {
            Need::Room => self.floor_bytes + pending_bytes,
            Need::Cleanup => self.floor_bytes / 2,
        }
    }

    /// Whether a batch of `batch_bytes` fits. `pending` reads what the store still has
    /// to write out; `release` asks the store to write it out now (then the device is
    /// sampled again). Called under the engine's writer lock, so admissions are serial.
    pub fn admit(
        &self,
        need: Need,
        batch_bytes: u64,
        pending: &dyn Fn() -> u64,
        release: &dyn Fn(),
    ) -> bool {
        let mut sample = self.sample.lock();
        if let Some(current) = sample.as_mut() {
            let fresh = current.taken.elapsed() < RESAMPLE_INTERVAL;
            if fresh && self.fits(current, need, batch_bytes, 2) {
                current.admitted_bytes += batch_bytes;
                return true;
            }
        }
        let mut current = self.take_sample(pending);
        if !self.fits(&current, need, batch_bytes, 1) && current.pending_bytes > 0 {
            release();
            current = self.take_sample(pending);
        }
        let fits = self.fits(&current, need, batch_bytes, 1);
        if fits {
            current.admitted_bytes += batch_bytes;
        }
        *sample = Some(current);
        fits
    }

    /// Whether a batch of `batch_bytes` needing room would surely be admitted now: the
    /// last sample is fresh and leaves twice the required space after it, as `admit` asks
    /// of a fresh sample (the second floor covers writes answered meanwhile, each at most
    /// 128 KiB, before their own `admit`). Samples nothing: `false` means "ask `admit`".
    pub fn has_room_for(&self, batch_bytes: u64) -> bool {
        let sample = self.sample.lock();
        sample.as_ref().is_some_and(|current| {
            current.taken.elapsed() < RESAMPLE_INTERVAL
                && self.fits(current, Need::Room, batch_bytes, 2)
        })
    }

    /// Whether the batch leaves the required space free; `margin` multiplies the space
    /// asked of an estimate (a stale sample), so a fresh sample is taken near the bound.
    fn fits(&self, sample: &Sample, need: Need, batch_bytes: u64, margin: u64) -> bool {
        let used = 2 * (sample.admitted_bytes + batch_bytes);
        let left = sample.available_bytes.saturating_sub(used);
        left >= self.required_bytes(need, sample.pending_bytes) * margin
    }

    fn take_sample(&self, pending: &dyn Fn() -> u64) -> Sample {
        // A device that cannot be asked is taken as full: refusing is safe, writing is not.
        let available_bytes = device_space(&self.dir).map_or(0, |space| space.available_bytes);
        Sample {
            available_bytes,
            pending_bytes: pending(),
            admitted_bytes: 0,
            taken: Instant::now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_a_sixteenth_of_the_device_within_bounds() {
        assert_eq!(floor_bytes(64 << 20), MIN_FLOOR_BYTES);
        assert_eq!(floor_bytes(1 << 30), 64 << 20);
        assert_eq!(floor_bytes(1 << 50), MAX_FLOOR_BYTES);
    }

    #[test]
    fn room_needs_the_floor_and_pending_bytes_cleanup_half_the_floor() {
        let dir = tempfile::tempdir().unwrap();
        let available = device_space(dir.path()).unwrap().available_bytes;
        let mut reserve = SpaceReserve::new(dir.path()).unwrap();
        // Pretend the floor is almost all that is left.
        reserve.floor_bytes = available.saturating_sub(1 << 20);
        let released = std::cell::Cell::new(0);
        let release = || released.set(released.get() + 1);
        assert!(reserve.admit(Need::Room, 4096, &|| 0, &release));
        assert!(!reserve.admit(Need::Room, 4 << 20, &|| 0, &release));
        assert_eq!(released.get(), 0, "nothing pending: nothing to release");
        assert!(!reserve.admit(Need::Room, 4096, &|| 2 << 20, &release));
        assert_eq!(
            released.get(),
            1,
            "pending bytes are written out before a refusal"
        );
        assert!(reserve.admit(Need::Cleanup, 4 << 20, &|| 2 << 20, &release));
    }
}
