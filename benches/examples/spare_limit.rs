//! Does adapting the spare-worker limit help? Heat with checkpoints on one monitored umt-rt
//! runtime, the limit fixed at each value the controller chooses among (1, no spare: a
//! blocked worker's core idles; 2, 4, ... and the cap), and adapted by DYON's controller
//! (`DyonBuilder::start_spare_limit`) from the checkpoint bytes written per second (the
//! application's progress), side by side with the same runtime unmonitored and rayon.
//!
//! ```text
//! cargo run --release -p umt-benches --example spare_limit -- [--rounds 5] [--period-ms 50]
//! ```
//!
//! Configurations alternate round after round, so drift hits all alike; the table shows the
//! median time of each and, for the adapted one, how often the controller chose each limit.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use umt_bench::heat::HeatParams;
use umt_bench::io::IoMode;
use umt_rt::Runtime;
use umt_rt::onload::{Dyon, Metric, Strategy};

#[derive(Parser, Debug)]
struct Args {
    /// Rounds (each runs every configuration once).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// The controller's period, in milliseconds.
    #[arg(long, default_value_t = 50)]
    period_ms: u64,
    /// Most workers per core.
    #[arg(long, default_value_t = 4)]
    cap: usize,
    /// Heat iterations per run (a checkpoint every 2).
    #[arg(long, default_value_t = 20)]
    iters: usize,
}

/// Checkpoint bytes this process wrote per second since the previous call (`/proc/self/io`).
fn write_rate() -> impl Fn() -> f64 + Send + Sync + 'static {
    let last = Mutex::new((Instant::now(), written()));
    move || {
        let mut l = last.lock().unwrap_or_else(|e| e.into_inner());
        let (now, bytes) = (Instant::now(), written());
        let rate = (bytes - l.1) / now.duration_since(l.0).as_secs_f64().max(1e-6);
        *l = (now, bytes);
        rate
    }
}

fn written() -> f64 {
    std::fs::read_to_string("/proc/self/io")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() {
    let args = Args::parse();
    // A private directory (mode 700, swept if a run is killed): nobody can plant links where
    // the checkpoints go.
    let run_dir = umt_bench::rundir::RunDir::create(&std::env::temp_dir())
        .expect("a private directory in the temporary directory");
    let dir = run_dir.path().to_path_buf();
    let io = IoMode::for_dir(&dir);
    let p = HeatParams {
        n: 4096,
        block: 512,
        iters: args.iters,
        iof: Some(2),
        dir,
        io,
    };
    let rt = Runtime::builder()
        .max_workers_per_core(args.cap)
        .build()
        .expect("a monitored runtime");
    let backend = rt.backend();
    let baseline = umt_benches::unmonitored();
    let pool = umt_benches::rayon_pool(rt.cpus().len());
    // The limits the controller chooses among, each also run fixed.
    let limits = umt_rt::onload::spare_limit_arms(args.cap);
    let mut names: Vec<String> = vec!["baseline".into(), "rayon".into()];
    names.extend(limits.iter().map(|l| format!("limit {l}")));
    names.push("adapted".into());
    let mut times = vec![Vec::new(); names.len()];
    let mut chosen = vec![0u64; limits.len()];
    let time = |f: &dyn Fn()| {
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64()
    };
    for _ in 0..args.rounds {
        let run = |rt: &Runtime| {
            umt_bench::heat::run(rt, &p).expect("heat");
        };
        times[0].push(time(&|| run(&baseline)));
        times[1].push(time(&|| {
            umt_bench::port_rayon::heat(&pool, &p).expect("heat");
        }));
        for (k, &l) in limits.iter().enumerate() {
            rt.set_spare_limit(l);
            times[2 + k].push(time(&|| run(&rt)));
        }
        let dyon = Dyon::builder()
            .period(Duration::from_millis(args.period_ms))
            .metric(Metric::App(Arc::new(write_rate())))
            .strategy(Strategy::EpsilonGreedy { epsilon: 0.1 })
            .start_spare_limit(&rt);
        times[2 + limits.len()].push(time(&|| run(&rt)));
        for (c, n) in chosen.iter_mut().zip(dyon.bandit().counts()) {
            *c += n;
        }
        drop(dyon);
    }
    println!(
        "heat {0}^2, block {1}, {2} iterations, a checkpoint every 2 ({3:?}), {4} cores, \
         {backend:?}, cap {5}, {6} rounds",
        p.n,
        p.block,
        p.iters,
        p.io,
        rt.cpus().len(),
        args.cap,
        args.rounds
    );
    let base = median(&mut times[0].clone());
    for (name, t) in names.iter().zip(&mut times) {
        let m = median(t);
        println!("{name:<10} {m:>8.3} s  {:>5.2}x", base / m);
    }
    let total: u64 = chosen.iter().sum();
    let shares: Vec<String> = chosen
        .iter()
        .zip(&limits)
        .map(|(&n, l)| format!("limit {l}: {:.0}%", 100.0 * n as f64 / total.max(1) as f64))
        .collect();
    println!("adapted: periods per limit {}", shares.join(", "));
}
