//! What one latency record costs (the FUSE adapter pays it on every request, twice reading
//! the clock): `cargo run --release -p shoal-engine --example histogram_cost -- [THREADS]`.

use std::time::{Duration, Instant};

use shoal_engine::histogram::Histogram;

const RECORDS_PER_THREAD: u64 = 10_000_000;

fn main() {
    let threads: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let histogram = Histogram::default();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                for i in 0..RECORDS_PER_THREAD {
                    histogram.record_ns(1_000 + (i & 0xffff) * 37);
                }
            });
        }
    });
    let record_ns = started.elapsed().as_nanos() as f64 / RECORDS_PER_THREAD as f64;
    let started = Instant::now();
    for _ in 0..RECORDS_PER_THREAD {
        let timer = Instant::now();
        histogram.record(timer.elapsed());
    }
    let timed_ns = started.elapsed().as_nanos() as f64 / RECORDS_PER_THREAD as f64;
    let snapshot = histogram.snapshot();
    println!(
        "{threads} thread(s): record {record_ns:.1} ns per value per thread; \
         clock + record {timed_ns:.1} ns; {} values, p99 {:?}",
        snapshot.count,
        Duration::from_nanos(snapshot.quantile(0.99))
    );
}
