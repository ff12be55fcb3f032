//! Block-to-notification latency of a backend.
//!
//! ```text
//! cargo run --release -p umt-sys --example latency -- [--iterations 3000] [--backend perf]
//! ```
//!
//! A worker pinned to one core blocks in `nanosleep` over and over. A leader thread waits on the
//! monitor's descriptor as the runtime's leader does; when woken it reads `CLOCK_MONOTONIC`,
//! drains, and for each block event computes `now - time of the context switch` (the perf
//! backend stamps each switch with `CLOCK_MONOTONIC`). That is the time from the thread leaving
//! the CPU to the leader holding the event: what the runtime waits before it can refill the core.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Parser;
use umt_sys::{BackendKind, Cause, Monitor, cpu};

#[derive(Parser, Debug)]
struct Args {
    /// Number of blocking calls to measure.
    #[arg(long, default_value_t = 3000)]
    iterations: usize,
    /// Monitor backend (must stamp events with times: perf).
    #[arg(long, default_value = "perf")]
    backend: BackendKind,
    /// Length of each sleep, in microseconds.
    #[arg(long, default_value_t = 300)]
    sleep_us: u64,
    /// Pin the leader to this CPU (default: not pinned, like the runtime's leader).
    #[arg(long)]
    leader_cpu: Option<usize>,
    /// Run the leader at SCHED_IDLE, as umt-rt's leader does by default.
    #[arg(long)]
    idle_leader: bool,
}

fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock_gettime");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64 / 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let monitor = Monitor::new(args.backend)?;
    println!("{}", monitor.selection());
    let cpus = cpu::process_cpus()?;
    let worker_cpu = *cpus.last().ok_or("no CPU in the affinity mask")?;
    if let Some(c) = args.leader_cpu {
        cpu::pin_current_thread(c)?;
    }
    if args.idle_leader {
        cpu::set_current_thread_idle_policy()?;
    }
    let done = AtomicBool::new(false);
    let mut lat = Vec::with_capacity(args.iterations);
    let mut worker_tid = None;
    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (monitor, done, args) = (&monitor, &done, &args);
        let worker = s.spawn(move || -> Result<(), umt_sys::Error> {
            cpu::pin_current_thread(worker_cpu)?;
            monitor.register_current_thread()?;
            tx.send(cpu::current_tid()).expect("leader gone");
            for _ in 0..args.iterations {
                std::thread::sleep(Duration::from_micros(args.sleep_us));
            }
            monitor.unregister_current_thread()?;
            done.store(true, Ordering::Release);
            Ok(())
        });
        worker_tid = Some(rx.recv()?);
        while !done.load(Ordering::Acquire) {
            if !monitor.wait(Some(Duration::from_millis(100)))? {
                continue;
            }
            let now = monotonic_ns();
            monitor.drain_with(|ev| {
                if ev.tid == worker_tid
                    && ev.cause == Cause::Switch
                    && ev.events.blocked == 1
                    && let Some(t) = ev.time_ns
                {
                    lat.push(now.saturating_sub(t));
                }
            })?;
        }
        worker.join().expect("worker panicked")?;
        Ok(())
    })?;
    if lat.is_empty() {
        println!(
            "no timestamped block events: the {} backend does not stamp events",
            monitor.backend()
        );
        return Ok(());
    }
    lat.sort_unstable();
    println!(
        "worker on cpu {worker_cpu}, leader {}: {} blocks seen of {} (the rest were drained in a batch with a later one)",
        args.leader_cpu
            .map_or("unpinned".to_owned(), |c| format!("on cpu {c}")),
        lat.len(),
        args.iterations
    );
    println!(
        "block-to-notification latency (us): median {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}",
        percentile(&lat, 0.5),
        percentile(&lat, 0.9),
        percentile(&lat, 0.99),
        percentile(&lat, 1.0)
    );
    Ok(())
}
