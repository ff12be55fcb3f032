//! The paper's workloads at small sizes, one group per workload, one `BenchmarkId` per runtime
//! (every runtime this machine can run), throughput in cells updated.
//!
//! `cargo bench -p umt-benches --bench workloads`. The `umt-bench` CLI is the tool for the
//! real comparison (sizes where I/O and computation balance, the overlap bound, alternation);
//! these track regressions.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use umt_bench::fwi::FwiParams;
use umt_bench::heat::HeatParams;
use umt_bench::io::IoMode;
use umt_bench::runner::{self, Runner, UmtOptions};

fn available() -> Vec<Runner> {
    Runner::ALL
        .into_iter()
        .filter(|r| r.available().is_ok())
        .collect()
}

fn heat(c: &mut Criterion) {
    // A private directory (mode 700, swept if a run is killed): nobody can plant links where
    // the checkpoints go.
    let run_dir = umt_bench::rundir::RunDir::create(&std::env::temp_dir())
        .expect("a private directory in the temporary directory");
    let dir = run_dir.path().to_path_buf();
    let p = HeatParams {
        n: 1024,
        block: 128,
        iters: 6,
        iof: Some(2),
        io: IoMode::for_dir(&dir),
        dir,
    };
    let mut g = c.benchmark_group("heat");
    g.throughput(Throughput::Elements((p.n * p.n * p.iters) as u64));
    g.measurement_time(Duration::from_secs(5)).sample_size(10);
    for r in available() {
        let engine = r.engine().expect("runtime");
        g.bench_function(BenchmarkId::from_parameter(r.name()), |b| {
            b.iter(|| {
                let out = runner::run_heat(&engine, &p, &UmtOptions::default()).expect("heat run");
                for (_, path) in &out.checkpoints {
                    let _ = std::fs::remove_file(path);
                }
            })
        });
    }
    g.finish();
}

fn fwi(c: &mut Criterion) {
    // A private directory (mode 700, swept if a run is killed): nobody can plant links where
    // the checkpoints go.
    let run_dir = umt_bench::rundir::RunDir::create(&std::env::temp_dir())
        .expect("a private directory in the temporary directory");
    let dir = run_dir.path().to_path_buf();
    let p = FwiParams {
        nz: 64,
        nx: 64,
        ny: 32,
        steps: 6,
        iof: 2,
        io: IoMode::for_dir(&dir),
        dir,
    };
    let mut g = c.benchmark_group("fwi");
    g.throughput(Throughput::Elements(p.cell_updates() as u64));
    g.measurement_time(Duration::from_secs(5)).sample_size(10);
    for r in available() {
        let engine = r.engine().expect("runtime");
        g.bench_function(BenchmarkId::from_parameter(r.name()), |b| {
            b.iter(|| runner::run_fwi(&engine, &p).expect("fwi run"))
        });
    }
    g.finish();
}

criterion_group!(workloads, heat, fwi);
criterion_main!(workloads);
