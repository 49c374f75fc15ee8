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

    /// Heap bytes of the shards' tables, estimated from hashbrown's layout: a power-of-two
    /// number of slots (at most 7/8 full), each one (ino, count) pair plus one control byte.
    /// It follows the table's high-water mark: std maps do not shrink on remove.
    pub fn table_bytes(&self) -> u64 {
        let slot_bytes = (std::mem::size_of::<(u64, u64)>() + 1) as u64;
        self.shards
            .iter()
            .map(|shard| {
                let capacity = shard.lock().capacity() as u64;
                if capacity == 0 {
                    0
                } else {
                    (capacity * 8 / 7).next_power_of_two() * slot_bytes
                }
            })
            .sum()
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

    #[test]
    fn table_bytes_grow_with_entries() {
        let counts = LookupCounts::default();
        assert_eq!(counts.table_bytes(), 0);
        for ino in 0..10_000 {
            counts.add(ino);
        }
        let bytes = counts.table_bytes();
        assert!(bytes >= 10_000 * 17, "{bytes} bytes for 10000 entries");
        assert!(bytes <= 10_000 * 17 * 4, "{bytes} bytes for 10000 entries");
    }
}
