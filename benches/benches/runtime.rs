//! umt-rt against rayon, the monitor on against off, and the trace recorder on (`spawn`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use umt_benches::{burn, tree_rayon, tree_umt};
use umt_rt::{BackendKind, Runtime};

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn umt(backend: BackendKind) -> Runtime {
    Runtime::builder()
        .monitor(backend)
        .build()
        .expect("runtime")
}

fn rayon_pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool")
}

const SPAWNS: u64 = 1000;

fn spawn(c: &mut Criterion) {
    let mut g = c.benchmark_group("spawn");
    g.throughput(Throughput::Elements(SPAWNS));
    for backend in [BackendKind::Disabled, BackendKind::Auto] {
        let rt = umt(backend);
        g.bench_function(format!("umt-{}", rt.backend()), |b| {
            b.iter(|| {
                rt.scope(|s| {
                    for i in 0..SPAWNS {
                        s.spawn(move |_| {
                            black_box(i);
                        });
                    }
                })
            })
        });
    }
    // The trace recorder on (`Builder::trace`): two records per task. Each batch's records
    // are taken outside the timed part, as an application would take them.
    let traced = Runtime::builder()
        .monitor(BackendKind::Auto)
        .trace(true)
        .build()
        .expect("runtime");
    g.bench_function(format!("umt-{}-traced", traced.backend()), |b| {
        b.iter_custom(|iters| {
            let start = std::time::Instant::now();
            for _ in 0..iters {
                traced.scope(|s| {
                    for i in 0..SPAWNS {
                        s.spawn(move |_| {
                            black_box(i);
                        });
                    }
                });
            }
            let elapsed = start.elapsed();
            black_box(traced.take_trace());
            elapsed
        })
    });
    let ry = rayon_pool(cores());
    g.bench_function("rayon", |b| {
        b.iter(|| {
            ry.scope(|s| {
                for i in 0..SPAWNS {
                    s.spawn(move |_| {
                        black_box(i);
                    });
                }
            })
        })
    });
    g.finish();
}

fn join(c: &mut Criterion) {
    const DEPTH: u32 = 12;
    let mut g = c.benchmark_group("join");
    g.throughput(Throughput::Elements(1 << DEPTH));
    for backend in [BackendKind::Disabled, BackendKind::Auto] {
        let rt = umt(backend);
        g.bench_function(format!("umt-{}", rt.backend()), |b| {
            b.iter(|| rt.install(|| tree_umt(DEPTH)))
        });
    }
    let ry = rayon_pool(cores());
    g.bench_function("rayon", |b| b.iter(|| ry.install(|| tree_rayon(DEPTH))));
    g.finish();
}

/// 256 tasks of ~50 us of computation each, nothing blocks.
fn compute(c: &mut Criterion) {
    let mut g = c.benchmark_group("compute");
    g.throughput(Throughput::Elements(256));
    for backend in [BackendKind::Disabled, BackendKind::Auto] {
        let rt = umt(backend);
        let name = format!("umt-{}", rt.backend());
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                rt.scope(|s| {
                    for _ in 0..256 {
                        s.spawn(|_| {
                            black_box(burn(20_000));
                        });
                    }
                })
            })
        });
    }
    g.finish();
}

/// 64 tasks: half compute ~1 ms, half sleep 1 ms (a blocking call). With one worker per core
/// the sleeps leave cores idle; with the monitor on, spares fill them.
fn blocking_mix(c: &mut Criterion) {
    let mut g = c.benchmark_group("blocking_mix");
    g.throughput(Throughput::Elements(64));
    g.sample_size(20);
    let work = |i: usize| {
        if i.is_multiple_of(2) {
            std::thread::sleep(Duration::from_millis(1));
        } else {
            black_box(burn(400_000));
        }
    };
    for backend in [BackendKind::Disabled, BackendKind::Auto] {
        let rt = umt(backend);
        g.bench_function(format!("umt-{}", rt.backend()), |b| {
            b.iter(|| {
                rt.scope(|s| {
                    for i in 0..64 {
                        s.spawn(move |_| work(i));
                    }
                })
            })
        });
    }
    let ry = rayon_pool(cores());
    g.bench_function("rayon", |b| {
        b.iter(|| {
            ry.scope(|s| {
                for i in 0..64 {
                    s.spawn(move |_| work(i));
                }
            })
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = spawn, join, compute, blocking_mix
}
criterion_main!(benches);
