//! Why `par_iter().fold(..).reduce(..)` on umt-rt trails rayon's on the `chains` benchmark
//! (issue 33): the per-item loop, not the runtime.
//!
//! ```text
//! cargo run --release -p umt-benches --example fold_codegen -- [values] [rounds]
//! ```
//!
//! rayon folds each part with `iter.take_while(|_| !base.full()).fold(..)`. Under `reduce`
//! the base is never full, so nothing is checked at run time, but the loop keeps
//! `take_while`'s early-exit shape and LLVM leaves it scalar (`imul`, unrolled); for a body
//! with a 64-bit multiply the scalar loop is the faster one on x86-64 without AVX-512 (the
//! vector loop emulates the multiply with three `pmuludq`). umt-rt folds each block with a
//! plain `Iterator::fold`, as sequential code does, and gets the vector loop. This example times, on one thread, the chain's body in
//! both shapes, and the two runtimes' chains on all cores, alternating, and prints each
//! runtime's parallel efficiency against its own loop shape: where the efficiencies match, the
//! gap between the runtimes is the compiled body.

use std::hint::black_box;
use std::time::Duration;

use umt_benches::{alternate, rayon_pool, unmonitored};

const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// The chain of `benches/chains.rs`, per library.
macro_rules! fold_reduce {
    ($name:ident, $krate:ident) => {
        fn $name(v: &[u64]) -> u64 {
            use $krate::prelude::*;
            v.par_iter()
                .fold(|| 0u64, |a, x| a ^ x.wrapping_mul(K))
                .reduce(|| 0, |a, b| a ^ b)
        }
    };
}
fold_reduce!(umt_chain, umt_rt);
fold_reduce!(rayon_chain, rayon);

/// umt-rt's per-block loop, as sequential code writes it.
fn plain(v: &[u64]) -> u64 {
    v.iter().fold(0, |a, x| a ^ x.wrapping_mul(K))
}

/// rayon's per-part loop: `take_while` on a consumer that is never full (rayon's reduce
/// folder answers `false`), so nothing is checked at run time; the loop's shape remains.
fn checked(v: &[u64]) -> u64 {
    v.iter()
        .take_while(|_| !never_full())
        .fold(0, |a, x| a ^ x.wrapping_mul(K))
}

/// `ReduceFolder::full` in rayon.
#[inline]
fn never_full() -> bool {
    false
}

fn main() {
    let mut args = std::env::args().skip(1);
    let values: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let v: Vec<u64> = (0..values as u64)
        .map(|i| i.wrapping_mul(2_654_435_761) % 1_000_003)
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = unmonitored();
    let pool = rayon_pool(cores);
    let passes = ((1usize << 30) / values.max(1)).clamp(10, 20_000);
    let expect = plain(&v);
    assert_eq!(rt.install(|| umt_chain(&v)), expect);
    assert_eq!(pool.install(|| rayon_chain(&v)), expect);
    assert_eq!(checked(&v), expect);

    let names = [
        "one thread, plain fold",
        "one thread, checked fold",
        "umt-rt chain",
        "rayon chain",
    ];
    let t = alternate(
        rounds,
        passes,
        &mut [
            (names[0], &mut || {
                black_box(plain(&v));
            }),
            (names[1], &mut || {
                black_box(checked(&v));
            }),
            (names[2], &mut || {
                black_box(rt.install(|| umt_chain(&v)));
            }),
            (names[3], &mut || {
                black_box(pool.install(|| rayon_chain(&v)));
            }),
        ],
    );
    println!("{values} values, {cores} cores, medians of {rounds} rounds of {passes} passes:");
    for (name, t) in names.iter().zip(&t) {
        println!("  {name:26} {:9.1} us", t.as_secs_f64() * 1e6);
    }
    let eff = |one: Duration, par: Duration| one.as_secs_f64() / (cores as f64 * par.as_secs_f64());
    println!(
        "  umt-rt / rayon {:.2}; one-thread plain / checked {:.2}",
        t[2].as_secs_f64() / t[3].as_secs_f64(),
        t[0].as_secs_f64() / t[1].as_secs_f64()
    );
    println!(
        "  parallel efficiency: umt-rt {:.0} % (against the plain fold), rayon {:.0} % (against the checked fold)",
        100.0 * eff(t[0], t[2]),
        100.0 * eff(t[1], t[3])
    );
}
