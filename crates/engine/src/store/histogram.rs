//! Latency histograms: lock-free, fixed memory, cheap enough to record on every request.
//!
//! Log-linear buckets over nanoseconds, as HdrHistogram does with 3 significant bits: values
//! below 8 ns have a bucket each; above, every power of two `[2^k, 2^(k+1))` is split into 8
//! equal sub-buckets, so a bucket is at most 1/8 (12.5%) of its lower bound wide. Values of
//! 2^MAX_EXPONENT ns (~137 s) and above share the last bucket; `max_ns` stays exact.
//! Recording is four relaxed atomic adds and one `fetch_max`: no lock, no allocation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sub-buckets per power of two: 2^SUB_BITS.
const SUB_BITS: u32 = 3;
const SUB_BUCKETS: usize = 1 << SUB_BITS;
/// Values from 2^MAX_EXPONENT ns on (~137 s) land in the last bucket.
const MAX_EXPONENT: u32 = 37;
/// 8 linear buckets for 0..8 ns, then 8 per power of two from 2^3 up to 2^MAX_EXPONENT.
pub const BUCKETS: usize = SUB_BUCKETS * (MAX_EXPONENT - SUB_BITS + 1) as usize;

/// The bucket a value falls in.
pub fn bucket_index(value_ns: u64) -> usize {
    if value_ns < SUB_BUCKETS as u64 {
        return value_ns as usize;
    }
    let exponent = 63 - value_ns.leading_zeros();
    if exponent >= MAX_EXPONENT {
        return BUCKETS - 1;
    }
    let sub = (value_ns >> (exponent - SUB_BITS)) as usize & (SUB_BUCKETS - 1);
    (exponent - SUB_BITS + 1) as usize * SUB_BUCKETS + sub
}

/// The smallest value of a bucket.
pub fn bucket_lower_ns(index: usize) -> u64 {
    if index < SUB_BUCKETS {
        return index as u64;
    }
    let group = (index / SUB_BUCKETS) as u32;
    let sub = (index % SUB_BUCKETS) as u64;
    let exponent = group + SUB_BITS - 1;
    (1u64 << exponent) + (sub << (exponent - SUB_BITS))
}

/// The largest value of a bucket (the last one is open-ended: `u64::MAX`).
pub fn bucket_upper_ns(index: usize) -> u64 {
    if index + 1 >= BUCKETS {
        return u64::MAX;
    }
    bucket_lower_ns(index + 1) - 1
}

pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    count: AtomicU64,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Values recorded so far (one relaxed load; for watchers that only need activity).
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn record(&self, duration: Duration) {
        self.record_ns(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn record_ns(&self, value_ns: u64) {
        self.buckets[bucket_index(value_ns)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(value_ns, Ordering::Relaxed);
        self.max_ns.fetch_max(value_ns, Ordering::Relaxed);
    }

    /// A copy of the counts. Taken while others record, it may be off by the few records in
    /// flight (count and buckets are separate atomics); `count` is recomputed from the
    /// buckets so quantiles stay consistent.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .map(|bucket| bucket.load(Ordering::Relaxed))
            .collect();
        HistogramSnapshot {
            count: buckets.iter().sum(),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
            max_ns: self.max_ns.load(Ordering::Relaxed),
            buckets,
        }
    }
}

/// A point-in-time copy of a histogram; `buckets[i]` counts values in bucket `i`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub count: u64,
    pub sum_ns: u64,
    pub max_ns: u64,
    pub buckets: Vec<u64>,
}

impl Default for HistogramSnapshot {
    fn default() -> Self {
        Self {
            count: 0,
            sum_ns: 0,
            max_ns: 0,
            buckets: vec![0; BUCKETS],
        }
    }
}

impl HistogramSnapshot {
    /// The value at quantile `q` (0..=1): the upper bound of the bucket holding that rank,
    /// capped at the exact maximum, so `quantile(a) <= quantile(b) <= max_ns` for `a <= b`.
    /// 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, &in_bucket) in self.buckets.iter().enumerate() {
            seen += in_bucket;
            if seen >= rank {
                return bucket_upper_ns(index).min(self.max_ns);
            }
        }
        self.max_ns
    }

    pub fn mean_ns(&self) -> u64 {
        self.sum_ns.checked_div(self.count).unwrap_or(0)
    }

    /// Adds another histogram's counts (e.g. several threads' or mounts').
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// What was recorded between `earlier` and `self` (two snapshots of one histogram).
    /// The maximum of the interval is not known exactly: it is the upper bound of the
    /// highest bucket that grew, capped at the overall maximum.
    pub fn since(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .zip(&earlier.buckets)
            .map(|(now, then)| now.saturating_sub(*then))
            .collect();
        let max_ns = buckets
            .iter()
            .rposition(|&count| count > 0)
            .map_or(0, |index| bucket_upper_ns(index).min(self.max_ns));
        HistogramSnapshot {
            count: buckets.iter().sum(),
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
            max_ns,
            buckets,
        }
    }

    /// Non-empty buckets as (index, count): the compact form for the wire.
    pub fn sparse_buckets(&self) -> Vec<(usize, u64)> {
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, &count)| count > 0)
            .map(|(index, &count)| (index, count))
            .collect()
    }

    /// The inverse of `sparse_buckets`; indexes out of range are ignored.
    pub fn from_sparse(sum_ns: u64, max_ns: u64, sparse: &[(usize, u64)]) -> Self {
        let mut snapshot = HistogramSnapshot {
            sum_ns,
            max_ns,
            ..HistogramSnapshot::default()
        };
        for &(index, count) in sparse {
            if let Some(bucket) = snapshot.buckets.get_mut(index) {
                *bucket += count;
                snapshot.count += count;
            }
        }
        snapshot
    }

    /// How many values were at most `limit_ns`, counting whole buckets whose upper bound is
    /// at most the limit (exact when the limit is a bucket boundary, e.g. a power of two
    /// minus one).
    pub fn count_at_most(&self, limit_ns: u64) -> u64 {
        self.buckets
            .iter()
            .enumerate()
            .take_while(|(index, _)| bucket_upper_ns(*index) <= limit_ns)
            .map(|(_, &count)| count)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic spread of latencies over six decades (xorshift).
    fn sample_values(n: usize) -> Vec<u64> {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let decade = state % 6;
                100 * 10u64.pow(decade as u32) + state % (10u64.pow(decade as u32 + 2))
            })
            .collect()
    }

    #[test]
    fn buckets_cover_values_in_order_without_gaps() {
        for index in 0..BUCKETS - 1 {
            assert_eq!(bucket_upper_ns(index) + 1, bucket_lower_ns(index + 1));
            assert_eq!(bucket_index(bucket_lower_ns(index)), index);
            assert_eq!(bucket_index(bucket_upper_ns(index)), index);
        }
        assert_eq!(bucket_index(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_index(1 << MAX_EXPONENT), BUCKETS - 1);
    }

    #[test]
    fn buckets_are_at_most_an_eighth_wide() {
        for index in SUB_BUCKETS..BUCKETS - 1 {
            let width = bucket_upper_ns(index) - bucket_lower_ns(index) + 1;
            assert!(width * 8 <= bucket_lower_ns(index), "bucket {index}");
        }
    }

    #[test]
    fn quantiles_match_a_sorted_vector_within_bucket_error() {
        let values = sample_values(100_000);
        let histogram = Histogram::default();
        for &value in &values {
            histogram.record_ns(value);
        }
        let mut sorted = values.clone();
        sorted.sort_unstable();
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count, values.len() as u64);
        assert_eq!(snapshot.sum_ns, values.iter().sum::<u64>());
        for q in [0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
            let truth = sorted[rank - 1];
            let estimate = snapshot.quantile(q);
            assert!(estimate >= truth, "q={q}: {estimate} < truth {truth}");
            assert!(
                estimate - truth <= truth / 8,
                "q={q}: {estimate} too far above truth {truth}"
            );
        }
    }

    #[test]
    fn max_is_exact_and_bounds_every_quantile() {
        let histogram = Histogram::default();
        for value in [1_000, 2_000, 123_456_789] {
            histogram.record_ns(value);
        }
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.max_ns, 123_456_789);
        assert_eq!(snapshot.quantile(1.0), 123_456_789);
        assert!(snapshot.quantile(0.5) <= snapshot.quantile(0.99));
        assert!(snapshot.quantile(0.99) <= snapshot.max_ns);
        histogram.record(Duration::from_secs(1_000));
        assert_eq!(histogram.snapshot().max_ns, 1_000_000_000_000);
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        let snapshot = Histogram::default().snapshot();
        assert_eq!(snapshot.count, 0);
        assert_eq!(snapshot.quantile(0.5), 0);
        assert_eq!(snapshot.quantile(1.0), 0);
        assert_eq!(snapshot.mean_ns(), 0);
        assert!(snapshot.sparse_buckets().is_empty());
    }

    #[test]
    fn concurrent_recording_loses_nothing() {
        let histogram = Histogram::default();
        let threads = 4;
        let per_thread = 50_000u64;
        std::thread::scope(|scope| {
            for thread in 0..threads {
                let histogram = &histogram;
                scope.spawn(move || {
                    for i in 0..per_thread {
                        histogram.record_ns(thread * 1_000 + i);
                    }
                });
            }
        });
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.count, threads * per_thread);
        let expected_sum: u64 = (0..threads)
            .map(|t| per_thread * t * 1_000 + per_thread * (per_thread - 1) / 2)
            .sum();
        assert_eq!(snapshot.sum_ns, expected_sum);
        assert_eq!(snapshot.max_ns, 3 * 1_000 + per_thread - 1);
    }

    #[test]
    fn merge_since_and_sparse_round_trip() {
        let first = Histogram::default();
        let second = Histogram::default();
        for value in [10, 500, 70_000] {
            first.record_ns(value);
        }
        second.record_ns(9_000_000);
        let mut merged = first.snapshot();
        merged.merge(&second.snapshot());
        assert_eq!(merged.count, 4);
        assert_eq!(merged.max_ns, 9_000_000);
        assert_eq!(merged.sum_ns, 10 + 500 + 70_000 + 9_000_000);

        let before = first.snapshot();
        first.record_ns(2_000);
        let interval = first.snapshot().since(&before);
        assert_eq!(interval.count, 1);
        assert_eq!(interval.sum_ns, 2_000);
        assert_eq!(bucket_index(interval.quantile(0.5)), bucket_index(2_000));
        assert!(interval.max_ns >= 2_000 && interval.max_ns <= 70_000);

        let wire = merged.sparse_buckets();
        assert_eq!(wire.len(), 4);
        let back = HistogramSnapshot::from_sparse(merged.sum_ns, merged.max_ns, &wire);
        assert_eq!(back, merged);
        assert_eq!(back.count_at_most(1023), 2);
    }
}
