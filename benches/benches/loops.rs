//! Loop schedules against rayon's `par_iter` on load-imbalanced loops (seed 003): the cost of
//! iteration `i` rises with `i`, or is random, or heavy-tailed. The `schedules` example prints
//! the same comparison as a table of ratios.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use umt_benches::burn;
use umt_rt::prelude::*;

/// Per-iteration costs, mean `mean` burn steps.
fn costs(kind: &str, n: usize, mean: u64) -> Vec<u64> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    match kind {
        "rising" => (0..n).map(|i| 2 * mean * i as u64 / n as u64).collect(),
        "random" => (0..n).map(|_| next() % (2 * mean)).collect(),
        _ => (0..n)
            .map(|_| {
                let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
                let x = (mean as f64 / 3.0) / (1.0 - u).max(1e-12).powf(1.0 / 1.5);
                (x as u64).min(100 * mean)
            })
            .collect(),
    }
}

mod ray {
    use rayon::prelude::*;

    pub fn burn_all(pool: &rayon::ThreadPool, c: &[u64]) {
        pool.install(|| {
            c.par_iter().for_each(|&x| {
                std::hint::black_box(umt_benches::burn(x));
            })
        })
    }
}

fn loops(c: &mut Criterion) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = umt_benches::unmonitored();
    let pool = umt_benches::rayon_pool(cores);
    for kind in ["rising", "random", "heavy-tail"] {
        let work = costs(kind, 512, 16_000);
        let mut g = c.benchmark_group(format!("loop/{kind}"));
        g.sample_size(20);
        g.bench_function("rayon", |b| b.iter(|| ray::burn_all(&pool, &work)));
        for s in [
            Schedule::Static,
            Schedule::StaticSteal,
            Schedule::Dynamic(1),
            Schedule::Guided(1),
            Schedule::Fac2,
            Schedule::Af,
            Schedule::Auto,
        ] {
            g.bench_function(format!("umt-{s}"), |b| {
                b.iter(|| {
                    rt.install(|| {
                        work.par_iter().schedule(s).for_each(|&x| {
                            black_box(burn(x));
                        })
                    })
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, loops);
criterion_main!(benches);
