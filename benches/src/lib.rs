//! Criterion benchmarks of umt live in this crate's `benches/` directory:
//!
//! ```text
//! cargo bench -p umt-benches --bench runtime
//! ```
//!
//! - `spawn/*`: spawn-and-run overhead of empty tasks in a scope, umt-rt against rayon;
//! - `join/*`: a binary tree of `join`s, umt-rt against rayon;
//! - `compute/*`: a compute-only workload with the monitor on and off (the monitor must cost
//!   nothing measurable when nothing blocks);
//! - `blocking_mix/*`: tasks that alternate computation and blocking sleeps, where the monitor
//!   pays off.
#![deny(missing_docs)]

/// Busy work that the optimiser cannot remove: about `n` multiply-xor steps.
pub fn burn(n: u64) -> u64 {
    let mut acc = n;
    for i in 0..n {
        acc = std::hint::black_box(acc.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i);
    }
    acc
}
