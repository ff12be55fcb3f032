//! What the Perf backend's drain costs per record it consumes.
//!
//! ```text
//! cargo run --release -p umt-sys --example record_cost -- [--blocks 400] [--rounds 200]
//! ```
//!
//! A thread registers and blocks `--blocks` times (1 us sleeps: a switch-out and a switch-in
//! record each), then one `drain_cpu` consumes its ring; the figure is the drain's time divided
//! by the records it applied, as a median over `--rounds` rounds. The drain takes the ring's
//! lock once per record (see the monitor's `README.md`, "One record at a time"), so this is
//! where that design's cost shows.

use std::time::{Duration, Instant};

use clap::Parser;
use umt_sys::{BackendKind, Monitor, cpu};

#[derive(Parser, Debug)]
struct Args {
    /// Blocks per round (two records each); the default ring holds about 1300 records.
    #[arg(long, default_value_t = 400)]
    blocks: u32,
    /// Rounds measured.
    #[arg(long, default_value_t = 200)]
    rounds: u32,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let monitor = Monitor::new(BackendKind::Perf)?;
    let cpu = *cpu::process_cpus()?
        .last()
        .ok_or("no CPU in the affinity mask")?;
    cpu::pin_current_thread(cpu)?;
    monitor.register_current_thread()?;
    monitor.drain_cpu(cpu)?;
    let mut per_record = Vec::new();
    let mut records = 0;
    for _ in 0..args.rounds {
        for _ in 0..args.blocks {
            std::thread::sleep(Duration::from_micros(1));
        }
        let t = Instant::now();
        let n = monitor.drain_cpu(cpu)?;
        let ns = t.elapsed().as_nanos() as f64;
        if n > 0 {
            per_record.push(ns / n as f64);
            records = n;
        }
    }
    monitor.unregister_current_thread()?;
    per_record.sort_by(f64::total_cmp);
    let median = per_record
        .get(per_record.len() / 2)
        .copied()
        .unwrap_or(f64::NAN);
    let stats = monitor.stats();
    println!(
        "drain_cpu: {median:.1} ns per record (median of {} rounds of about {records} records; \
         overflows {}, lost {})",
        per_record.len(),
        stats.overflows,
        stats.lost_records
    );
    Ok(())
}
