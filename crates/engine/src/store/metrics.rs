//! What a store reports about its own machinery, for `shoal stats` and the Prometheus
//! endpoint: the struct, and the one table (`STORE_METRICS`) that names, describes and
//! reads each of its fields.

use serde::{Deserialize, Serialize};

use crate::metric::{exposed as metric, Kind, Metric, Unit};

/// Store figures, zero where a store has no such thing (the memory store has no memtables,
/// journal or cache). Each field is described once, in `STORE_METRICS`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StoreMetrics {
    pub write_buffer_bytes: u64,
    pub write_buffer_counted_bytes: u64,
    pub sealed_memtables: u64,
    pub pending_flushes: u64,
    pub journal_count: u64,
    pub journal_bytes: u64,
    pub disk_bytes: u64,
    pub table_count: u64,
    pub l0_table_count: u64,
    pub blob_file_count: u64,
    pub active_compactions: u64,
    pub compactions_completed: u64,
    pub compaction_time_us: u64,
    pub cache_capacity_bytes: u64,
    pub cache_used_bytes: u64,
    pub block_cache_hits: u64,
    pub block_cache_misses: u64,
    pub staged_bytes: u64,
    pub checkpoints: u64,
    pub checkpoint_write_ns: u64,
    pub checkpoint_write_max_ns: u64,
    pub held_writes: u64,
    pub held_write_ns: u64,
    pub held_write_max_ns: u64,
    pub reclaimable_bytes: u64,
    pub reclaims: u64,
    pub reclaimed_bytes: u64,
}

use Kind::{Counter, Gauge};
use Unit::{Bytes, Count, Microseconds, Nanoseconds};

/// Every field of `StoreMetrics`, in the order the exposition lists them.
pub const STORE_METRICS: &[Metric<StoreMetrics>] = &[
    // Estimated: the store's own count times what a counted byte costs in memory.
    metric(
        "write_buffer_bytes",
        "shoal_memtable_bytes",
        Gauge,
        Bytes,
        "Active and sealed memtables.",
        |m| m.write_buffer_bytes,
    ),
    metric(
        "write_buffer_counted_bytes",
        "shoal_memtable_counted_bytes",
        Gauge,
        Bytes,
        "Active and sealed memtables as the store counts them (keys, values, a fixed part per entry).",
        |m| m.write_buffer_counted_bytes,
    ),
    // fjall halts writers at 4 sealed memtables per keyspace.
    metric(
        "sealed_memtables",
        "shoal_sealed_memtables",
        Gauge,
        Count,
        "Memtables waiting to be flushed.",
        |m| m.sealed_memtables,
    ),
    metric(
        "pending_flushes",
        "shoal_pending_flushes",
        Gauge,
        Count,
        "Memtable flushes queued.",
        |m| m.pending_flushes,
    ),
    metric(
        "staged_bytes",
        "shoal_staged_bytes",
        Gauge,
        Bytes,
        "Bytes of operations staged in memory, not yet checkpointed to the store.",
        |m| m.staged_bytes,
    ),
    metric(
        "checkpoints",
        "shoal_checkpoints_total",
        Counter,
        Count,
        "Checkpoints: staged operations written to the store as one batch.",
        |m| m.checkpoints,
    ),
    metric(
        "checkpoint_write_ns",
        "shoal_checkpoint_write_seconds_total",
        Counter,
        Nanoseconds,
        "Time checkpoints spent writing staged operations into the store.",
        |m| m.checkpoint_write_ns,
    ),
    metric(
        "checkpoint_write_max_ns",
        "shoal_checkpoint_write_max_seconds",
        Gauge,
        Nanoseconds,
        "Longest time one checkpoint spent writing into the store since mount.",
        |m| m.checkpoint_write_max_ns,
    ),
    metric(
        "held_writes",
        "shoal_held_writes_total",
        Counter,
        Count,
        "Writes that found twice checkpoint= staged and waited for the checkpoint in progress.",
        |m| m.held_writes,
    ),
    metric(
        "held_write_ns",
        "shoal_held_write_seconds_total",
        Counter,
        Nanoseconds,
        "Time writes waited for a held-up checkpoint.",
        |m| m.held_write_ns,
    ),
    metric(
        "held_write_max_ns",
        "shoal_held_write_max_seconds",
        Gauge,
        Nanoseconds,
        "Longest time one write waited for a held-up checkpoint since mount.",
        |m| m.held_write_max_ns,
    ),
    metric(
        "journal_count",
        "shoal_journals",
        Gauge,
        Count,
        "Journal files on disk.",
        |m| m.journal_count,
    ),
    metric(
        "journal_bytes",
        "shoal_journal_bytes",
        Gauge,
        Bytes,
        "Journal bytes on disk.",
        |m| m.journal_bytes,
    ),
    metric(
        "disk_bytes",
        "shoal_store_disk_bytes",
        Gauge,
        Bytes,
        "Bytes the store occupies on disk.",
        |m| m.disk_bytes,
    ),
    metric(
        "table_count",
        "shoal_tables",
        Gauge,
        Count,
        "LSM tables (SST files).",
        |m| m.table_count,
    ),
    // fjall slows writers from 20 L0 runs on and halts them at 30.
    metric(
        "l0_table_count",
        "shoal_l0_tables",
        Gauge,
        Count,
        "Level-0 tables (writers slow down as they pile up).",
        |m| m.l0_table_count,
    ),
    metric(
        "blob_file_count",
        "shoal_blob_files",
        Gauge,
        Count,
        "Blob files (separated file data).",
        |m| m.blob_file_count,
    ),
    metric(
        "active_compactions",
        "shoal_active_compactions",
        Gauge,
        Count,
        "Compactions running.",
        |m| m.active_compactions,
    ),
    metric(
        "compactions_completed",
        "shoal_compactions_total",
        Counter,
        Count,
        "Compactions completed.",
        |m| m.compactions_completed,
    ),
    metric(
        "compaction_time_us",
        "shoal_compaction_seconds_total",
        Counter,
        Microseconds,
        "Time spent compacting.",
        |m| m.compaction_time_us,
    ),
    metric(
        "cache_capacity_bytes",
        "shoal_cache_capacity_bytes",
        Gauge,
        Bytes,
        "Block cache capacity.",
        |m| m.cache_capacity_bytes,
    ),
    metric(
        "cache_used_bytes",
        "shoal_cache_used_bytes",
        Gauge,
        Bytes,
        "Block cache in use.",
        |m| m.cache_used_bytes,
    ),
    metric(
        "block_cache_hits",
        "shoal_cache_hits_total",
        Counter,
        Count,
        "Block reads served by the block cache.",
        |m| m.block_cache_hits,
    ),
    metric(
        "block_cache_misses",
        "shoal_cache_misses_total",
        Counter,
        Count,
        "Block reads that went to the OS.",
        |m| m.block_cache_misses,
    ),
    // An estimate: each deleted chunk counted whole (`blob_reclaim`).
    metric(
        "reclaimable_bytes",
        "shoal_reclaimable_bytes",
        Gauge,
        Bytes,
        "Deleted file data not yet returned to the device (estimate).",
        |m| m.reclaimable_bytes,
    ),
    metric(
        "reclaims",
        "shoal_reclaims_total",
        Counter,
        Count,
        "Reclaims run to return deleted file data to the device.",
        |m| m.reclaims,
    ),
    metric(
        "reclaimed_bytes",
        "shoal_reclaimed_bytes_total",
        Counter,
        Bytes,
        "Disk bytes the reclaims returned to the device.",
        |m| m.reclaimed_bytes,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_and_reads_every_field_once() {
        let json = serde_json::to_value(StoreMetrics::default()).unwrap();
        let fields: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
        let numbered: serde_json::Map<String, serde_json::Value> = fields
            .iter()
            .enumerate()
            .map(|(index, field)| (field.clone(), (index as u64 + 1).into()))
            .collect();
        let numbered: StoreMetrics = serde_json::from_value(numbered.into()).unwrap();
        crate::metric::check_table(STORE_METRICS, &fields, &numbered).unwrap();
    }
}
