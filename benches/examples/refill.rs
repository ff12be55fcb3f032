//! How long a core stays idle when a task blocks: from the moment a task enters a blocking
//! call to the moment another task starts on the same core, for each way umt-rt can run.
//!
//! ```text
//! cargo run --release -p umt-benches --example refill -- [--blocks 2000] [--sleep-us 500]
//! ```
//!
//! One core (the last CPU of the process). In each round a task notes the time and sleeps
//! (`nanosleep`, a block in the kernel), with a second task queued behind it; the second task
//! notes when it starts. Its start means a spare worker of the same core took over: the
//! monitor reported the block, the core's leader woke the spare, the spare found the task.
//! The table shows the distribution of that gap and what the runtime did per round: monitor
//! events drained, leader iterations, leader wake-ups of parked workers, surrenders, tasks the
//! leader ran itself.
//! Configurations run in turn, round after round, so drift hits all alike.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use umt_rt::{BackendKind, LeaderPolicy, Runtime, Stats};

#[derive(Parser, Debug)]
struct Args {
    /// Blocks measured per configuration (after 50 of warm-up).
    #[arg(long, default_value_t = 2000)]
    blocks: usize,
    /// Length of each block, in microseconds.
    #[arg(long, default_value_t = 500)]
    sleep_us: u64,
    /// Monitor backend.
    #[arg(long, default_value = "auto")]
    backend: BackendKind,
}

/// A runtime configuration to measure.
struct Config {
    name: String,
    rt: Runtime,
    gaps_ns: Vec<u64>,
    before: Stats,
}

/// Every leader policy, and with the idle and polling leaders, handoff and leader-follower.
fn configs(backend: BackendKind, cpu: usize) -> Vec<Config> {
    let mut out = Vec::new();
    let mut variants: Vec<(LeaderPolicy, bool, bool)> = LeaderPolicy::ALL
        .iter()
        .map(|&p| (p, false, false))
        .collect();
    for p in [LeaderPolicy::Idle, LeaderPolicy::Poll] {
        variants.extend([(p, true, false), (p, false, true)]);
    }
    for (policy, handoff, follow) in variants {
        let rt = Runtime::builder()
            .cores([cpu])
            .monitor(backend)
            .leader_policy(policy)
            .handoff(handoff)
            .leader_runs_tasks(follow)
            .build()
            .expect("runtime");
        let before = rt.stats();
        let option = match (handoff, follow) {
            (true, _) => "+handoff",
            (_, true) => "+follow",
            _ => "",
        };
        out.push(Config {
            name: format!("{}-{policy}{option}", rt.backend()),
            rt,
            gaps_ns: Vec::new(),
            before,
        });
    }
    out
}

/// One round on `rt`: returns the gap from the block to the next task's start.
fn round(rt: &Runtime, sleep: Duration, epoch: Instant) -> u64 {
    let blocked_at = AtomicU64::new(0);
    let started_at = AtomicU64::new(0);
    rt.scope(|s| {
        // Spawned first, so it runs second: the scope's worker pops its newest task first.
        s.spawn(|_| {
            started_at.store(epoch.elapsed().as_nanos() as u64, Ordering::SeqCst);
        });
        s.spawn(|_| {
            blocked_at.store(epoch.elapsed().as_nanos() as u64, Ordering::SeqCst);
            std::thread::sleep(sleep);
        });
    });
    let (b, s) = (
        blocked_at.load(Ordering::SeqCst),
        started_at.load(Ordering::SeqCst),
    );
    s.saturating_sub(b)
}

fn main() {
    let args = Args::parse();
    let cpu = *umt_sys::cpu::process_cpus()
        .expect("affinity")
        .last()
        .expect("a CPU");
    let mut configs = configs(args.backend, cpu);
    if configs[0].rt.backend() == BackendKind::Disabled {
        eprintln!("no monitor here: {}", configs[0].rt.selection());
        std::process::exit(2);
    }
    let sleep = Duration::from_micros(args.sleep_us);
    let epoch = Instant::now();
    for c in &mut configs {
        for _ in 0..50 {
            round(&c.rt, sleep, epoch);
        }
        c.before = c.rt.stats();
    }
    for _ in 0..args.blocks {
        for c in &mut configs {
            c.gaps_ns.push(round(&c.rt, sleep, epoch));
        }
    }
    println!(
        "CPU {cpu}, {} blocks of {} us per configuration; gap from block to the next task (us):",
        args.blocks, args.sleep_us
    );
    println!(
        "{:<20} {:>8} {:>8} {:>8} {:>8} | per block: {:>7} {:>7} {:>7} {:>7} {:>7}",
        "configuration",
        "median",
        "p90",
        "p99",
        "max",
        "events",
        "iters",
        "wakeups",
        "surr.",
        "led"
    );
    for c in &mut configs {
        let now = c.rt.stats();
        let per = |a: u64, b: u64| (a - b) as f64 / args.blocks as f64;
        println!(
            "{:<20} {} | {:>18.1} {:>7.1} {:>7.2} {:>7.2} {:>7.2}",
            c.name,
            umt_benches::gap_columns(&mut c.gaps_ns),
            per(now.monitor_events, c.before.monitor_events),
            per(now.leader_iterations, c.before.leader_iterations),
            per(now.leader_wakeups, c.before.leader_wakeups),
            per(now.surrenders, c.before.surrenders),
            per(now.leader_tasks, c.before.leader_tasks),
        );
    }
}
