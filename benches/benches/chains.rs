//! Parallel-iterator chains a rayon user writes, on umt-rt and on rayon, on the same data
//! (issue 33): compute-only chains (umt-rt unmonitored against rayon with one thread per
//! core), and a chain whose body blocks in the kernel (umt-rt with its monitor and without,
//! against rayon with 1, 4 and 8 threads per core).
//!
//! ```text
//! cargo bench -p umt-benches --bench chains
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use umt_benches::burn;
use umt_rt::Runtime;

/// The same chains written against each library's prelude: the import is the only difference.
macro_rules! chains {
    ($name:ident, $krate:ident) => {
        mod $name {
            use $krate::prelude::*;

            /// A sum the compiler cannot put in closed form (a hash per item).
            pub fn sum_of_hashes(n: u64) -> u64 {
                (0..n)
                    .into_par_iter()
                    .map(|x| (x ^ (x >> 7)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 11)
                    .sum()
            }

            pub fn filter_map_collect(v: &[u64]) -> Vec<u64> {
                v.par_iter()
                    .filter(|x| *x % 3 == 0)
                    .map(|x| x * 2)
                    .collect()
            }

            pub fn fold_reduce(v: &[u64]) -> u64 {
                v.par_iter()
                    .fold(|| 0u64, |a, x| a ^ x.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                    .reduce(|| 0, |a, b| a ^ b)
            }

            pub fn zip_dot(a: &[u64], b: &[u64]) -> u64 {
                a.par_iter()
                    .zip(b.par_iter())
                    .map(|(x, y)| x.wrapping_mul(*y))
                    .sum()
            }

            pub fn position_first(v: &[u64], target: u64) -> Option<usize> {
                v.par_iter().position_first(|x| *x == target)
            }

            pub fn sort(v: &mut [u64]) {
                v.par_sort();
            }

            /// Each item computes, then blocks in the kernel (a 200 us sleep), then computes.
            pub fn blocking(items: u64, work: u64) -> u64 {
                (0..items)
                    .into_par_iter()
                    .map(|i| {
                        let a = umt_benches::burn(work + i);
                        std::thread::sleep(std::time::Duration::from_micros(200));
                        a ^ umt_benches::burn(work)
                    })
                    .reduce(|| 0, |a, b| a ^ b)
            }
        }
    };
}

chains!(umt, umt_rt);
chains!(ray, rayon);

/// Data of `n` pseudo-random values.
fn data(n: usize) -> Vec<u64> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % 1_000_000
        })
        .collect()
}

fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    g
}

fn chains(c: &mut Criterion) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = umt_benches::unmonitored();
    let monitored = Runtime::builder().build().expect("runtime");
    let rayon_with = |per_core: usize| umt_benches::rayon_pool(per_core * cores);
    let pool = rayon_with(1);
    let v = data(1 << 20);
    let w = data(1 << 20);
    let target = v[v.len() * 7 / 8];

    macro_rules! both {
        ($group:expr, $umt:expr, $ray:expr) => {{
            let mut g = group(c, $group);
            g.bench_function("umt", |b| b.iter(|| rt.install(|| black_box($umt))));
            g.bench_function("rayon", |b| b.iter(|| pool.install(|| black_box($ray))));
            g.finish();
        }};
    }
    both!(
        "chain/sum-of-hashes",
        umt::sum_of_hashes(1 << 22),
        ray::sum_of_hashes(1 << 22)
    );
    both!(
        "chain/filter-map-collect",
        umt::filter_map_collect(&v),
        ray::filter_map_collect(&v)
    );
    both!(
        "chain/fold-reduce",
        umt::fold_reduce(&v),
        ray::fold_reduce(&v)
    );
    both!("chain/zip-dot", umt::zip_dot(&v, &w), ray::zip_dot(&v, &w));
    both!(
        "chain/position-first",
        umt::position_first(&v, target),
        ray::position_first(&v, target)
    );
    {
        let mut g = group(c, "chain/sort");
        g.bench_function("umt", |b| {
            b.iter_batched_ref(
                || v.clone(),
                |x| rt.install(|| umt::sort(x)),
                criterion::BatchSize::LargeInput,
            )
        });
        g.bench_function("rayon", |b| {
            b.iter_batched_ref(
                || v.clone(),
                |x| pool.install(|| ray::sort(x)),
                criterion::BatchSize::LargeInput,
            )
        });
        g.finish();
    }
    // About as long computing as sleeping, per item.
    let (items, work) = (64 * cores as u64, 60_000);
    let mut g = group(c, "chain/blocking");
    g.bench_function("umt", |b| {
        b.iter(|| monitored.install(|| black_box(umt::blocking(items, work))))
    });
    g.bench_function("umt-unmonitored", |b| {
        b.iter(|| rt.install(|| black_box(umt::blocking(items, work))))
    });
    for per_core in [1, 4, 8] {
        let pool = rayon_with(per_core);
        let name = if per_core == 1 {
            "rayon".to_string()
        } else {
            format!("rayon-{per_core}x")
        };
        g.bench_function(name, |b| {
            b.iter(|| pool.install(|| black_box(ray::blocking(items, work))))
        });
    }
    g.finish();
    black_box(burn(1));
}

criterion_group!(benches, chains);
criterion_main!(benches);
