//! Loop schedules against rayon on balanced and load-imbalanced loops (as in the
//! OS-vs-runtime scheduling study, seed 003), and the parallel sorts, measured in one run with
//! the contenders alternating (A B C A B C ...) so that machine drift hits all alike:
//!
//! ```text
//! cargo run --release -p umt-benches --example schedules -- [rounds]
//! ```
//!
//! Loops (each iteration `burn`s a cost; the same costs for every contender):
//! - `balanced`: every iteration the same;
//! - `fine`: a sum of squares over 10^7 elements (scheduling overhead shows);
//! - `rising`: the cost grows linearly with the index (the last iteration is 2x the mean);
//! - `random`: costs uniform in 0..2x the mean, fixed seed;
//! - `heavy-tail`: Pareto costs (alpha 1.5, capped at 100x the mean): a few iterations tens
//!   of times the mean.
//!
//! Contenders: umt-rt with each schedule (monitor off: nothing blocks here), umt-rt with the
//! monitor on (`Auto`) and the default schedule, rayon's `par_iter`, and rayon with 4 threads
//! per core.

use std::hint::black_box;
use std::time::{Duration, Instant};

use umt_benches::{burn, median, rayon_pool, unmonitored};
use umt_rt::Runtime;
use umt_rt::prelude::*;

/// The rayon side, in its own module: both crates name their traits alike (a user picks one).
mod ray {
    use rayon::prelude::*;
    use std::hint::black_box;
    use umt_benches::burn;

    pub fn burn_all(pool: &rayon::ThreadPool, c: &[u64]) {
        pool.install(|| {
            c.par_iter().for_each(|&x| {
                black_box(burn(x));
            })
        })
    }

    pub fn sum_squares(pool: &rayon::ThreadPool, v: &[u64]) -> u64 {
        pool.install(|| v.par_iter().map(|&x| x * x).sum::<u64>())
    }

    pub fn sort_unstable(pool: &rayon::ThreadPool, v: &mut [u32]) {
        pool.install(|| v.par_sort_unstable())
    }

    pub fn sort(pool: &rayon::ThreadPool, v: &mut [u32]) {
        pool.install(|| v.par_sort())
    }
}

/// xorshift64: deterministic costs.
fn rng(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Per-iteration costs (in `burn` steps) of each imbalanced loop, mean `mean`.
fn costs(kind: &str, n: usize, mean: u64) -> Vec<u64> {
    let mut seed = 0x2545_f491_4f6c_dd1d;
    match kind {
        "balanced" => vec![mean; n],
        "rising" => (0..n).map(|i| 2 * mean * i as u64 / n as u64).collect(),
        "random" => (0..n).map(|_| rng(&mut seed) % (2 * mean)).collect(),
        "heavy-tail" => {
            // Pareto(alpha = 1.5, x_m = mean / 3): mean 3 x_m = `mean`; capped at 100x.
            (0..n)
                .map(|_| {
                    let u = (rng(&mut seed) >> 11) as f64 / (1u64 << 53) as f64;
                    let x = (mean as f64 / 3.0) / (1.0 - u).max(1e-12).powf(1.0 / 1.5);
                    (x as u64).min(100 * mean)
                })
                .collect()
        }
        _ => unreachable!("unknown loop {kind}"),
    }
}

type Contender<'a> = (String, Box<dyn FnMut() + 'a>);

/// Each contender once per round, in turn; each run is warmed up once. Medians.
fn alternate(rounds: usize, contenders: &mut [Contender<'_>]) -> Vec<Duration> {
    let mut times = vec![Vec::new(); contenders.len()];
    for _ in 0..rounds {
        for (i, (_, f)) in contenders.iter_mut().enumerate() {
            std::thread::sleep(Duration::from_millis(10));
            f();
            let t = Instant::now();
            f();
            times[i].push(t.elapsed());
        }
    }
    times.into_iter().map(median).collect()
}

fn report(title: &str, contenders: &[Contender<'_>], med: &[Duration], base: usize) {
    println!("{title}");
    for ((n, _), m) in contenders.iter().zip(med) {
        println!(
            "  {n:<22} {:>9.2} ms   {:.3}x {}",
            m.as_secs_f64() * 1e3,
            m.as_secs_f64() / med[base].as_secs_f64(),
            contenders[base].0
        );
    }
}

const SCHEDULES: [Schedule; 8] = [
    Schedule::Static,
    Schedule::StaticSteal,
    Schedule::Dynamic(1),
    Schedule::Dynamic(64),
    Schedule::Guided(1),
    Schedule::Fac2,
    Schedule::Af,
    Schedule::Auto,
];

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(11);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let off = unmonitored();
    let on = Runtime::builder().build().expect("runtime");
    let rayon1 = rayon_pool(cores);
    let rayon4 = rayon::ThreadPoolBuilder::new()
        .num_threads(4 * cores)
        .build()
        .expect("rayon");
    println!(
        "{cores} cores, {rounds} rounds, medians; umt-rt monitor on: {}",
        on.backend()
    );

    let n = 1 << 10;
    for kind in ["balanced", "rising", "random", "heavy-tail"] {
        let c = costs(kind, n, 32_000);
        let c = &c;
        let mut contenders: Vec<Contender<'_>> = Vec::new();
        contenders.push((
            "rayon par_iter".into(),
            Box::new(|| ray::burn_all(&rayon1, c)),
        ));
        contenders.push((
            "rayon 4x par_iter".into(),
            Box::new(|| ray::burn_all(&rayon4, c)),
        ));
        for s in SCHEDULES {
            let off = &off;
            contenders.push((
                format!("umt {s}"),
                Box::new(move || {
                    off.install(|| {
                        c.par_iter().schedule(s).for_each(|&x| {
                            black_box(burn(x));
                        })
                    })
                }),
            ));
        }
        let on = &on;
        contenders.push((
            "umt monitored default".into(),
            Box::new(move || {
                on.install(|| {
                    c.par_iter().for_each(|&x| {
                        black_box(burn(x));
                    })
                })
            }),
        ));
        let med = alternate(rounds, &mut contenders);
        report(&format!("{kind}: {n} iterations"), &contenders, &med, 0);
    }

    // Fine-grained: the overhead of handing out chunks.
    let v: Vec<u64> = (0..10_000_000).collect();
    let v = &v;
    let mut contenders: Vec<Contender<'_>> = vec![(
        "rayon par_iter".into(),
        Box::new(|| {
            black_box(ray::sum_squares(&rayon1, v));
        }),
    )];
    for s in SCHEDULES {
        let off = &off;
        contenders.push((
            format!("umt {s}"),
            Box::new(move || {
                black_box(off.install(|| v.par_iter().schedule(s).map(|&x| x * x).sum::<u64>()));
            }),
        ));
    }
    let med = alternate(rounds, &mut contenders);
    report("fine: sum of squares of 10^7 u64", &contenders, &med, 0);

    // Sorts of 10^7 u32.
    let mut seed = 0x9e37_79b9_7f4a_7c15;
    let input: Vec<u32> = (0..10_000_000).map(|_| rng(&mut seed) as u32).collect();
    let input = &input;
    let mut contenders: Vec<Contender<'_>> = vec![
        (
            "rayon par_sort_unstable".into(),
            Box::new(|| {
                let mut v = input.clone();
                ray::sort_unstable(&rayon1, &mut v);
                black_box(v);
            }),
        ),
        (
            "umt par_sort_unstable".into(),
            Box::new(|| {
                let mut v = input.clone();
                off.install(|| v.par_sort_unstable());
                black_box(v);
            }),
        ),
        (
            "rayon par_sort".into(),
            Box::new(|| {
                let mut v = input.clone();
                ray::sort(&rayon1, &mut v);
                black_box(v);
            }),
        ),
        (
            "umt par_sort".into(),
            Box::new(|| {
                let mut v = input.clone();
                off.install(|| v.par_sort());
                black_box(v);
            }),
        ),
        (
            "std sort_unstable (1 core)".into(),
            Box::new(|| {
                let mut v = input.clone();
                v.sort_unstable();
                black_box(v);
            }),
        ),
    ];
    let med = alternate(rounds, &mut contenders);
    report(
        "sort: 10^7 random u32 (copy included)",
        &contenders,
        &med,
        0,
    );
}
