//! The kernel's references to inodes (FUSE lookup counts): +1 for each entry we hand out,
//! -n on forget. Sharded so request threads rarely contend.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

const SHARDS: usize = 16;

#[derive(Default)]
pub struct LookupCounts {
    shards: [Mutex<HashMap<u64, u64>>; SHARDS],
    referenced_inodes: AtomicU64,
}

impl LookupCounts {
    fn shard(&self, ino: u64) -> &Mutex<HashMap<u64, u64>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    pub fn add(&self, ino: u64) {
        let mut shard = self.shard(ino).lock();
        let count = shard.entry(ino).or_insert(0);
        if *count == 0 {
            self.referenced_inodes.fetch_add(1, Ordering::Relaxed);
        }
        *count += 1;
    }

    pub fn forget(&self, ino: u64, n: u64) {
        let mut shard = self.shard(ino).lock();
        let Some(count) = shard.get_mut(&ino) else {
            tracing::warn!("forget of inode {ino} the kernel never looked up");
            return;
        };
        debug_assert!(
            *count >= n,
            "kernel forgot {n} of {count} references to {ino}"
        );
        *count = count.saturating_sub(n);
        if *count == 0 {
            shard.remove(&ino);
            self.referenced_inodes.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Inodes the kernel currently holds.
    pub fn referenced_inodes(&self) -> u64 {
        self.referenced_inodes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_lookups_and_forgets() {
        let counts = LookupCounts::default();
        counts.add(5);
        counts.add(5);
        counts.add(21);
        assert_eq!(counts.referenced_inodes(), 2);
        counts.forget(5, 1);
        assert_eq!(counts.referenced_inodes(), 2);
        counts.forget(5, 1);
        counts.forget(21, 1);
        assert_eq!(counts.referenced_inodes(), 0);
    }
}
