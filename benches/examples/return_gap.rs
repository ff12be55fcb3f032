//! How long a worker back from a block waits for its core while a spare runs there: from the
//! end of its block to it running again, with the handoff off, yielding, and directed.
//!
//! ```text
//! cargo run --release -p umt-benches --example return_gap -- [--rounds 400] [--sleep-us 500] [--compute-us 2000]
//! ```
//!
//! One core (the last CPU of the process). A task sleeps `--sleep-us` (a block in the kernel),
//! then computes `--compute-us`, round after round; while it sleeps, a spare of its core runs
//! a chain of compute tasks of `--compute-us` each. The gap of a round is the time from the
//! sleep's end (its start plus its length) to the task running again: the timer's slack, then
//! the wait for the core. A returned worker that computes most of the time has used more than
//! its share of the core, so without a handoff the kernel lets the spare finish its slice
//! first (`crates/umt-rt/src/README.md`, "Handoff"). With the directed handoff the monitor
//! signals the spare at the wake-up and it steps aside (H1-H6 there). Runtimes take turns every
//! 20 rounds, so drift hits all alike. The per-round columns: steps aside, those that ended at
//! the 4 ms limit, those the leader ended, yields or hand-overs at scheduling points.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use umt_rt::{BackendKind, Runtime, Scope, Stats};

#[derive(Parser, Debug)]
struct Args {
    /// Rounds measured per configuration (after 20 of warm-up).
    #[arg(long, default_value_t = 400)]
    rounds: usize,
    /// Length of each block, in microseconds.
    #[arg(long, default_value_t = 500)]
    sleep_us: u64,
    /// Compute after each block, and the length of each of the spare's tasks, in microseconds.
    #[arg(long, default_value_t = 2000)]
    compute_us: u64,
    /// Monitor backend.
    #[arg(long, default_value = "auto")]
    backend: BackendKind,
}

/// Rounds in a row on one runtime before the next takes its turn.
const TURN: usize = 20;

struct Config {
    name: &'static str,
    rt: Runtime,
    gaps_ns: Vec<u64>,
    before: Stats,
}

fn spin_for(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

/// The spare's work: compute, then queue the next piece, until `stop`.
fn chain<'s>(s: &Scope<'s>, stop: &'s AtomicBool, compute: Duration) {
    spin_for(compute);
    if !stop.load(Ordering::Relaxed) {
        s.spawn(move |s| chain(s, stop, compute));
    }
}

/// `rounds` rounds on `rt`: the gap of each.
fn rounds(rt: &Runtime, n: usize, sleep: Duration, compute: Duration) -> Vec<u64> {
    let stop = AtomicBool::new(false);
    let mut gaps = Vec::with_capacity(n);
    rt.scope(|s| {
        let stop = &stop;
        let gaps = &mut gaps;
        s.spawn(move |s| {
            // Queued behind this task: a spare takes it when this one blocks.
            s.spawn(move |s| chain(s, stop, compute));
            for _ in 0..n {
                let due = Instant::now() + sleep;
                std::thread::sleep(sleep);
                gaps.push(Instant::now().saturating_duration_since(due).as_nanos() as u64);
                spin_for(compute);
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    gaps
}

fn main() {
    let args = Args::parse();
    let cpu = *umt_sys::cpu::process_cpus()
        .expect("affinity")
        .last()
        .expect("a CPU");
    let (sleep, compute) = (
        Duration::from_micros(args.sleep_us),
        Duration::from_micros(args.compute_us),
    );
    let mut configs: Vec<Config> = [("off", false), ("handoff", true)]
        .into_iter()
        .map(|(name, handoff)| {
            let rt = Runtime::builder()
                .cores([cpu])
                .monitor(args.backend)
                .handoff(handoff)
                .build()
                .expect("runtime");
            let before = rt.stats();
            Config {
                name,
                rt,
                gaps_ns: Vec::new(),
                before,
            }
        })
        .collect();
    if configs[0].rt.backend() == BackendKind::Disabled {
        eprintln!("no monitor here: {}", configs[0].rt.selection());
        std::process::exit(2);
    }
    if configs[1].rt.stats().directed_handoff {
        configs[1].name = "handoff (directed)";
    } else {
        configs[1].name = "handoff (yields)";
    }
    for c in &mut configs {
        rounds(&c.rt, TURN, sleep, compute);
        c.before = c.rt.stats();
    }
    let mut done = 0;
    while done < args.rounds {
        let n = TURN.min(args.rounds - done);
        for c in &mut configs {
            c.gaps_ns.extend(rounds(&c.rt, n, sleep, compute));
        }
        done += n;
    }
    println!(
        "CPU {cpu}, {} backend, {} rounds per configuration: blocks of {} us, then {} us of \
         compute; the spare's tasks {} us each",
        configs[0].rt.backend(),
        args.rounds,
        args.sleep_us,
        args.compute_us,
        args.compute_us
    );
    println!("gap from the block's end to the task running again (us):");
    println!(
        "{:<20} {:>8} {:>8} {:>8} {:>8} | per round: {:>7} {:>7} {:>7} {:>9}",
        "configuration", "median", "p90", "p99", "max", "aside", "expired", "leader", "handoffs"
    );
    for c in &mut configs {
        let now = c.rt.stats();
        let per = |a: u64, b: u64| (a - b) as f64 / args.rounds as f64;
        println!(
            "{:<20} {} | {:>18.2} {:>7.2} {:>7.2} {:>9.2}",
            c.name,
            umt_benches::gap_columns(&mut c.gaps_ns),
            per(now.handoff_parks, c.before.handoff_parks),
            per(now.handoff_expired, c.before.handoff_expired),
            per(now.handoff_leader_resumes, c.before.handoff_leader_resumes),
            per(now.handoffs, c.before.handoffs),
        );
    }
}
