//! A background thread that panics poisons what it served (as fjall's `poison.rs` does):
//! the state it left is unknown, so every later operation fails with
//! `StoreError::Poisoned` (EIO through FUSE) instead of waiting for a thread that is gone or
//! writing on top of a half-done step. What was synced before the panic is on disk; reopening
//! the store recovers as after a kill -9.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::error_seq::WriteErrors;
use super::{Batch, Scan, SharedBytes, Space, Store, StoreError, StoreMetrics, StoreView};

/// Whether a background thread panicked, and which.
#[derive(Debug, Default)]
pub struct Poison {
    poisoned: AtomicBool,
    thread: Mutex<Option<String>>,
}

impl Poison {
    /// `Err(StoreError::Poisoned)` once a guarded thread panicked.
    pub fn check(&self) -> Result<(), StoreError> {
        if !self.is_poisoned() {
            return Ok(());
        }
        let thread = self.thread.lock().clone().unwrap_or_default();
        Err(StoreError::Poisoned(thread))
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    fn poison(&self, thread: &str) {
        self.thread.lock().get_or_insert_with(|| thread.to_owned());
        self.poisoned.store(true, Ordering::Release);
        tracing::error!(
            thread,
            "a background thread panicked: every later operation fails with EIO; \
             unmount and mount again (the store recovers as after a crash)"
        );
    }

    /// A guard for a background thread's whole run: if the thread unwinds, the guard
    /// poisons and then calls `wake`, which must wake everything that waits for the
    /// thread (they then see the poison instead of waiting forever).
    pub fn guard<'a>(&'a self, thread: &'static str, wake: impl Fn() + 'a) -> PoisonOnPanic<'a> {
        PoisonOnPanic {
            poison: self,
            thread,
            wake: Box::new(wake),
        }
    }
}

/// See [`Poison::guard`].
pub struct PoisonOnPanic<'a> {
    poison: &'a Poison,
    thread: &'static str,
    wake: Box<dyn Fn() + 'a>,
}

impl Drop for PoisonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.poison.poison(self.thread);
            (self.wake)();
        }
    }
}

/// The engine's store: every operation first checks the engine's poison (its own threads)
/// and the store's (the store's threads), so after a panic anywhere nothing is read from a
/// cache or written on top of it.
pub struct PoisonChecked {
    inner: Box<dyn Store>,
    poison: Arc<Poison>,
}

impl PoisonChecked {
    pub fn new(inner: Box<dyn Store>, poison: Arc<Poison>) -> Self {
        Self { inner, poison }
    }
}

impl StoreView for PoisonChecked {
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> Scan,
    ) -> Result<(), StoreError> {
        self.poisoned()?;
        self.inner.scan(space, start, end, visit)
    }

    fn scan_lengths(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], u64) -> Scan,
    ) -> Result<(), StoreError> {
        self.poisoned()?;
        self.inner.scan_lengths(space, start, end, visit)
    }

    fn last_key(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.poisoned()?;
        self.inner.last_key(space, start, end)
    }
}

impl Store for PoisonChecked {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.poisoned()?;
        self.inner.get(space, key)
    }

    fn get_shared(&self, space: Space, key: &[u8]) -> Result<Option<SharedBytes>, StoreError> {
        self.poisoned()?;
        self.inner.get_shared(space, key)
    }

    fn write(&self, batch: Batch) -> Result<(), StoreError> {
        self.poisoned()?;
        self.inner.write(batch)
    }

    fn write_borrowed(&self, batch: &Batch) -> Result<(), StoreError> {
        self.poisoned()?;
        self.inner.write_borrowed(batch)
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.poisoned()?;
        self.inner.sync()
    }

    fn disk_bytes(&self) -> u64 {
        self.inner.disk_bytes()
    }

    fn data_compressed(&self) -> Option<bool> {
        self.inner.data_compressed()
    }

    fn metrics(&self) -> StoreMetrics {
        self.inner.metrics()
    }

    fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes()
    }

    fn snapshot(&self) -> Box<dyn StoreView> {
        self.inner.snapshot()
    }

    fn pending_bytes(&self) -> u64 {
        self.inner.pending_bytes()
    }

    fn release_space(&self) -> Result<(), StoreError> {
        self.poisoned()?;
        self.inner.release_space()
    }

    fn background_errors(&self) -> WriteErrors {
        self.inner.background_errors()
    }

    fn compact(&self) -> Result<(), StoreError> {
        self.poisoned()?;
        self.inner.compact()
    }

    fn poisoned(&self) -> Result<(), StoreError> {
        self.poison.check()?;
        self.inner.poisoned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_under_the_guard_poisons_and_wakes() {
        let poison = Poison::default();
        let woken = AtomicBool::new(false);
        assert!(poison.check().is_ok());
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _guard = poison.guard("test-thread", || woken.store(true, Ordering::SeqCst));
            panic!("injected");
        }));
        assert!(unwound.is_err());
        assert!(woken.load(Ordering::SeqCst), "the guard wakes the waiters");
        match poison.check() {
            Err(StoreError::Poisoned(thread)) => assert_eq!(thread, "test-thread"),
            other => panic!("expected poisoned, got {other:?}"),
        }
    }

    #[test]
    fn a_thread_that_returns_does_not_poison() {
        let poison = Poison::default();
        drop(poison.guard("test-thread", || panic!("no wake without a panic")));
        assert!(poison.check().is_ok());
    }
}
