//! What one drain costs as the number of monitored threads grows: a drain of every thread
//! (`Monitor::drain_with`, what each of umt-rt's leaders did per iteration before they each
//! took only their own core) against a drain of one CPU's threads (`Monitor::drain_cpu`).
//!
//! ```text
//! cargo run --release -p umt-sys --example drain_cost -- [--threads 32,128,256] [--backend perf]
//! ```
//!
//! The threads register pinned round-robin over this process's CPUs, then sleep, so every
//! ring is empty: the figures are the fixed cost of looking, which a leader pays at every
//! iteration. A machine with `C` cores and `W` workers per core has `C x W` threads; with one
//! leader per core each draining every thread, the machine as a whole does `C x C x W` ring
//! looks per round of leader iterations, against `C x W` when each drains its own core.

use std::sync::mpsc;
use std::time::Instant;

use clap::Parser;
use umt_sys::{BackendKind, Monitor, cpu};

#[derive(Parser, Debug)]
struct Args {
    /// Numbers of monitored threads to measure with.
    #[arg(long, value_delimiter = ',', default_value = "32,128,256")]
    threads: Vec<usize>,
    /// Drains timed per measurement.
    #[arg(long, default_value_t = 20000)]
    drains: u32,
    /// Monitor backend.
    #[arg(long, default_value = "perf")]
    backend: BackendKind,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let cpus = cpu::process_cpus()?;
    println!("{} CPUs, {} drains per figure", cpus.len(), args.drains);
    println!(
        "{:>8} {:>22} {:>22} {:>14}",
        "threads", "drain_with (all) ns", "drain_cpu (one) ns", "ns per ring"
    );
    for &n in &args.threads {
        let monitor = Monitor::new(args.backend)?;
        if !monitor.is_active() {
            return Err(format!("no monitor here: {}", monitor.selection()).into());
        }
        let (all, one) = std::thread::scope(|s| -> Result<_, Box<dyn std::error::Error>> {
            let (ready_tx, ready_rx) = mpsc::channel();
            let mut stops = Vec::new();
            for i in 0..n {
                let (stop_tx, stop_rx) = mpsc::channel::<()>();
                stops.push(stop_tx);
                let (monitor, ready_tx, cpu) = (&monitor, ready_tx.clone(), cpus[i % cpus.len()]);
                s.spawn(move || {
                    let registered = cpu::pin_current_thread(cpu)
                        .and_then(|()| monitor.register_current_thread());
                    let ok = registered.is_ok();
                    let _ = ready_tx.send(registered.map_err(|e| e.to_string()));
                    let _ = stop_rx.recv();
                    if ok {
                        let _ = monitor.unregister_current_thread();
                    }
                });
            }
            for _ in 0..n {
                ready_rx.recv()??;
            }
            // Let every thread reach its sleep, then empty the rings.
            std::thread::sleep(std::time::Duration::from_millis(50));
            monitor.drain()?;
            let time = |f: &dyn Fn() -> umt_sys::Result<usize>| -> umt_sys::Result<f64> {
                let start = Instant::now();
                for _ in 0..args.drains {
                    f()?;
                }
                Ok(start.elapsed().as_nanos() as f64 / f64::from(args.drains))
            };
            let all = time(&|| monitor.drain_with(|_| {}))?;
            let one = time(&|| monitor.drain_cpu(cpus[0]))?;
            drop(stops);
            Ok((all, one))
        })?;
        println!("{n:>8} {all:>22.0} {one:>22.0} {:>14.1}", all / n as f64);
    }
    Ok(())
}
