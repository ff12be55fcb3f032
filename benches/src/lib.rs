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
