//! Criterion benchmarks of umt live in this crate's `benches/` directory:
//!
//! ```text
//! cargo bench -p umt-benches --bench runtime
//! ```
//!
//! - `spawn/*`: spawn-and-run overhead of empty tasks in a scope, umt-rt against rayon, and
//!   umt-rt with the trace recorder on (`-traced`);
//! - `join/*`: a binary tree of `join`s, umt-rt against rayon;
//! - `compute/*`: a compute-only workload with the monitor on and off (the monitor must cost
//!   nothing measurable when nothing blocks);
//! - `blocking_mix/*`: tasks that alternate computation and blocking sleeps, where the monitor
//!   pays off;
//! - `loop/*` (`--bench loops`): each loop schedule against rayon's `par_iter` on
//!   load-imbalanced loops (rising, random, heavy-tailed iteration costs);
//! - `chain/*` (`--bench chains`): parallel-iterator chains written once for both preludes
//!   (sum of hashes, filter-map-collect, fold-reduce, zip, position_first, sort), umt-rt against rayon;
//!   and a chain whose body blocks, against rayon with 1, 4 and 8 threads per core.
#![deny(missing_docs)]

/// Busy work that the optimiser cannot remove: about `n` multiply-xor steps.
pub fn burn(n: u64) -> u64 {
    let mut acc = n;
    for i in 0..n {
        acc = std::hint::black_box(acc.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i);
    }
    acc
}

/// A binary tree of `umt_rt::join`s with `2^depth` leaves; returns the number of leaves.
pub fn tree_umt(depth: u32) -> u64 {
    if depth == 0 {
        return std::hint::black_box(1);
    }
    let (a, b) = umt_rt::join(|| tree_umt(depth - 1), || tree_umt(depth - 1));
    a + b
}

/// The same tree with `rayon::join`.
pub fn tree_rayon(depth: u32) -> u64 {
    if depth == 0 {
        return std::hint::black_box(1);
    }
    let (a, b) = rayon::join(|| tree_rayon(depth - 1), || tree_rayon(depth - 1));
    a + b
}

/// The median of `v` (the upper one of an even count); `v` must not be empty.
pub fn median(mut v: Vec<std::time::Duration>) -> std::time::Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Runs each contender once per round, in turn, `rounds` times; each run warms up once, then
/// repeats the workload `inner` times. Returns the median time of one workload per contender.
pub fn alternate(
    rounds: usize,
    inner: usize,
    contenders: &mut [(&str, &mut dyn FnMut())],
) -> Vec<std::time::Duration> {
    let mut times = vec![Vec::new(); contenders.len()];
    for _ in 0..rounds {
        for (i, (_, f)) in contenders.iter_mut().enumerate() {
            // Untimed: let the previous contender's threads finish spinning and park, so each
            // one runs on a quiet machine (on 2 cores their spinning would be measured).
            std::thread::sleep(std::time::Duration::from_millis(20));
            f();
            let t = std::time::Instant::now();
            for _ in 0..inner {
                f();
            }
            times[i].push(t.elapsed() / inner.max(1) as u32);
        }
    }
    times.into_iter().map(median).collect()
}

/// A umt-rt runtime without a monitor, one worker per core: the unmonitored peer.
pub fn unmonitored() -> umt_rt::Runtime {
    umt_rt::Runtime::builder()
        .monitor(umt_rt::BackendKind::Disabled)
        .build()
        .expect("an unmonitored umt-rt runtime")
}

/// A rayon pool of `threads` threads.
pub fn rayon_pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a rayon pool")
}

/// The median, p90, p99 and maximum of `gaps_ns` (nanoseconds, sorted here), in microseconds,
/// as four right-aligned columns: the latency columns of the `refill` and `return_gap`
/// examples.
pub fn gap_columns(gaps_ns: &mut [u64]) -> String {
    gaps_ns.sort_unstable();
    let at = |p: f64| {
        let i = ((gaps_ns.len() as f64 - 1.0) * p).round() as usize;
        gaps_ns.get(i).copied().unwrap_or(0) as f64 / 1000.0
    };
    format!(
        "{:>8.1} {:>8.1} {:>8.1} {:>8.1}",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    )
}
