//! What the trace recorder (`umt_rt::Builder::trace`) costs, measured in one run with the
//! contenders alternating (A B C A B C ...):
//!
//! ```text
//! cargo run --release -p umt-benches --example trace_overhead -- [rounds]
//! ```
//!
//! Workloads, compute only (where a per-task cost shows most) and heat:
//! - `spawn`: 2^16 tasks of about 2 us each spawned in a scope (each one recorded twice,
//!   start and end: as fine as tasks get);
//! - `join-tree`: a tree of `join`s with 2^16 leaves of about 2 us each (only the halves
//!   that other workers steal run as recorded tasks; the rest run inline, as in rayon);
//! - `loop`: `parallel_for` over 20 000 iterations of about 20 us;
//! - `heat`: the paper's heat with O_DIRECT checkpoints (2048^2 cells, 8 iterations, one
//!   checkpoint every 2), umt-rt with the monitor on.
//!
//! Contenders: umt-rt (monitor `Auto`) with the recorder off and on, and, for the compute-only
//! workloads, rayon and rayon with 4 threads per core. Each traced run's records are taken
//! (`Runtime::take_trace`) after it, outside the timed part, as an application would.

use std::hint::black_box;
use std::time::{Duration, Instant};

use umt_bench::heat::{self, HeatParams};
use umt_bench::io::IoMode;
use umt_benches::{burn, median};
use umt_rt::{BackendKind, Runtime};

/// Calibrated so that `burn(STEPS_PER_US)` takes about a microsecond.
fn steps_per_us() -> u64 {
    let n = 1_000_000;
    let t = Instant::now();
    black_box(burn(n));
    (n as f64 / t.elapsed().as_secs_f64() / 1e6).max(1.0) as u64
}

fn tree(depth: u32, leaf: u64) -> u64 {
    if depth == 0 {
        return black_box(burn(leaf));
    }
    let (a, b) = umt_rt::join(|| tree(depth - 1, leaf), || tree(depth - 1, leaf));
    a ^ b
}

fn tree_rayon(depth: u32, leaf: u64) -> u64 {
    if depth == 0 {
        return black_box(burn(leaf));
    }
    let (a, b) = rayon::join(
        || tree_rayon(depth - 1, leaf),
        || tree_rayon(depth - 1, leaf),
    );
    a ^ b
}

fn umt(trace: bool) -> Runtime {
    Runtime::builder()
        .monitor(BackendKind::Auto)
        .trace(trace)
        .build()
        .expect("a runtime")
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(7);
    let us = steps_per_us();
    let cores = umt_sys::cpu::process_cpus().map_or(1, |c| c.len());
    let off = umt(false);
    let on = umt(true);
    println!(
        "backend: {:?}, {cores} cores, {rounds} rounds",
        off.backend()
    );
    let pool = |n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("a rayon pool")
    };
    let (rayon1, rayon4) = (pool(cores), pool(4 * cores));
    // A private directory (mode 700, swept if a run is killed): nobody can plant links where
    // the checkpoints go.
    let run_dir = umt_bench::rundir::RunDir::create(&std::env::temp_dir())
        .expect("a private directory in the temporary directory");
    let dir = run_dir.path().to_path_buf();
    let io = IoMode::for_dir(&dir);
    let hp = HeatParams {
        n: 2048,
        block: 256,
        iters: 8,
        iof: Some(2),
        dir,
        io,
    };
    type Run<'a> = Box<dyn Fn() + 'a>;
    let spawn_umt = |rt: &Runtime| {
        rt.scope(|s| {
            for _ in 0..1 << 16 {
                s.spawn(|_| {
                    black_box(burn(2 * us));
                });
            }
        })
    };
    let spawn_rayon = |pool: &rayon::ThreadPool| {
        pool.scope(|s| {
            for _ in 0..1 << 16 {
                s.spawn(|_| {
                    black_box(burn(2 * us));
                });
            }
        })
    };
    let workloads: Vec<(&str, Vec<(&str, Run<'_>)>)> = vec![
        (
            "spawn",
            vec![
                ("umt-rt, trace off", Box::new(|| spawn_umt(&off))),
                ("umt-rt, trace on", Box::new(|| spawn_umt(&on))),
                ("rayon", Box::new(|| spawn_rayon(&rayon1))),
                ("rayon-4x", Box::new(|| spawn_rayon(&rayon4))),
            ],
        ),
        (
            "join-tree",
            vec![
                (
                    "umt-rt, trace off",
                    Box::new(|| {
                        black_box(off.install(|| tree(16, 2 * us)));
                    }),
                ),
                (
                    "umt-rt, trace on",
                    Box::new(|| {
                        black_box(on.install(|| tree(16, 2 * us)));
                    }),
                ),
                (
                    "rayon",
                    Box::new(|| {
                        black_box(rayon1.install(|| tree_rayon(16, 2 * us)));
                    }),
                ),
                (
                    "rayon-4x",
                    Box::new(|| {
                        black_box(rayon4.install(|| tree_rayon(16, 2 * us)));
                    }),
                ),
            ],
        ),
        (
            "loop",
            vec![
                (
                    "umt-rt, trace off",
                    Box::new(|| {
                        off.parallel_for(0..20_000, |_| {
                            black_box(burn(20 * us));
                        })
                    }),
                ),
                (
                    "umt-rt, trace on",
                    Box::new(|| {
                        on.parallel_for(0..20_000, |_| {
                            black_box(burn(20 * us));
                        })
                    }),
                ),
                (
                    "rayon",
                    Box::new(|| {
                        use rayon::prelude::*;
                        rayon1.install(|| {
                            (0..20_000u64).into_par_iter().for_each(|_| {
                                black_box(burn(20 * us));
                            })
                        })
                    }),
                ),
                (
                    "rayon-4x",
                    Box::new(|| {
                        use rayon::prelude::*;
                        rayon4.install(|| {
                            (0..20_000u64).into_par_iter().for_each(|_| {
                                black_box(burn(20 * us));
                            })
                        })
                    }),
                ),
            ],
        ),
        (
            "heat",
            vec![
                (
                    "umt-rt, trace off",
                    Box::new(|| {
                        heat::run(&off, &hp).expect("heat");
                    }),
                ),
                (
                    "umt-rt, trace on",
                    Box::new(|| {
                        heat::run(&on, &hp).expect("heat");
                    }),
                ),
            ],
        ),
    ];
    for (name, contenders) in &workloads {
        let mut times = vec![Vec::new(); contenders.len()];
        let mut records = 0;
        for _ in 0..rounds {
            for (k, (_, run)) in contenders.iter().enumerate() {
                let t = Instant::now();
                run();
                times[k].push(t.elapsed());
                if let Some(trace) = on.take_trace() {
                    records = records.max(trace.records().len());
                }
            }
        }
        let medians: Vec<Duration> = times.into_iter().map(median).collect();
        println!("{name} (median of {rounds}; {records} records per traced run):");
        for ((label, _), m) in contenders.iter().zip(&medians) {
            println!(
                "  {label:<20} {:>9.2} ms   {:.3}x of trace off",
                m.as_secs_f64() * 1e3,
                m.as_secs_f64() / medians[0].as_secs_f64()
            );
        }
    }
}
