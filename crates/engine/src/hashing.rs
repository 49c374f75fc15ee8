//! The hash of the engine's in-memory maps that are probed on every operation (the read
//! cache, a transaction's usage deltas, recursive usage, open files, directory pages):
//! foldhash, seeded per process, several times cheaper than the standard SipHash on the
//! short keys these maps hold (inode numbers, store keys).

use std::collections::{HashMap, HashSet};

pub type FastHashMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
pub type FastHashSet<K> = HashSet<K, foldhash::fast::RandomState>;
