//! What a context switch of a monitored thread costs, by monitoring mode.
//!
//! ```text
//! cargo run --release -p umt-sys --example switch_cost -- [--round-trips 20000] [--backend perf]
//! ```
//!
//! Two threads pinned to one CPU bounce a byte through two pipes, so every round trip is two
//! blocks and two context switches. Each mode runs in turn, several times, and the table shows
//! the median time per switch:
//!
//! - `off`: the threads are not registered (what any program pays);
//! - `signal`: registered, every record signals the monitor's waiters
//!   (`MonitorBuilder::signal_each_event(true)`), each thread drains its own ring after each
//!   read, as a worker at its scheduling points does;
//! - `no-signal`: the same without the per-record signal (`signal_each_event(false)`, what
//!   umt-rt's polling leaders use);
//! - `muted`: registered, but muted (`Monitor::mute_current_thread`): the kernel drops the
//!   records.
//!
//! With the perf backend each switch writes two records (the switch-out of one thread, the
//! switch-in of the other), so half the difference between two modes is the cost per record.

use std::io::{PipeReader, PipeWriter, Read, Write};
use std::time::{Duration, Instant};

use clap::Parser;
use umt_sys::{BackendKind, Monitor, cpu};

#[derive(Parser, Debug)]
struct Args {
    /// Round trips per run (after 1000 of warm-up).
    #[arg(long, default_value_t = 20000)]
    round_trips: u32,
    /// Runs of each mode (the table shows medians).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Monitor backend of the monitored modes.
    #[arg(long, default_value = "perf")]
    backend: BackendKind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Off,
    Signal,
    NoSignal,
    Muted,
}

const MODES: [Mode; 4] = [Mode::Off, Mode::Signal, Mode::NoSignal, Mode::Muted];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Signal => "signal",
            Mode::NoSignal => "no-signal",
            Mode::Muted => "muted",
        }
    }
}
const WARMUP: u32 = 1000;

/// One side of the ping-pong: `rounds` times, optionally write first, then read one byte.
fn side(
    monitor: Option<&Monitor>,
    mode: Mode,
    cpu: usize,
    (mut rx, mut tx): (PipeReader, PipeWriter),
    serve: bool,
    rounds: u32,
) -> Result<Duration, Box<dyn std::error::Error + Send + Sync>> {
    cpu::pin_current_thread(cpu)?;
    if let Some(m) = monitor {
        m.register_current_thread()?;
        if mode == Mode::Muted {
            m.mute_current_thread()?;
        }
    }
    let mut byte = [0u8; 1];
    let mut start = Instant::now();
    for i in 0..WARMUP + rounds {
        if i == WARMUP {
            start = Instant::now();
        }
        if !serve {
            tx.write_all(&byte)?;
        }
        rx.read_exact(&mut byte)?;
        if let Some(m) = monitor
            && mode != Mode::Muted
        {
            m.drain_current_thread()?;
        }
        if serve {
            tx.write_all(&byte)?;
        }
    }
    let elapsed = start.elapsed();
    if let Some(m) = monitor {
        if mode == Mode::Muted {
            m.unmute_current_thread()?;
        }
        m.unregister_current_thread()?;
    }
    Ok(elapsed)
}

/// Nanoseconds per context switch of one run in `mode`.
fn run(args: &Args, mode: Mode, cpu: usize) -> Result<f64, Box<dyn std::error::Error>> {
    let monitor = match mode {
        Mode::Off => None,
        _ => Some(
            Monitor::builder()
                .backend(args.backend)
                .signal_each_event(mode == Mode::Signal)
                .build()?,
        ),
    };
    let (a_rx, b_tx) = std::io::pipe()?;
    let (b_rx, a_tx) = std::io::pipe()?;
    let rounds = args.round_trips;
    let elapsed = std::thread::scope(|s| {
        let m = monitor.as_ref();
        let server = s.spawn(move || side(m, mode, cpu, (b_rx, b_tx), true, rounds));
        let client = side(m, mode, cpu, (a_rx, a_tx), false, rounds);
        let server = server.join().map_err(|_| "server panicked")?;
        server.map_err(|e| e.to_string())?;
        client.map_err(|e| e.to_string())
    })?;
    Ok(elapsed.as_nanos() as f64 / (2.0 * f64::from(rounds)))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let probe = Monitor::new(args.backend)?;
    println!("{}", probe.selection());
    drop(probe);
    let cpu = *cpu::process_cpus()?.last().ok_or("no CPU")?;
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    for _ in 0..args.repeat.max(1) {
        for (i, &mode) in MODES.iter().enumerate() {
            times[i].push(run(&args, mode, cpu)?);
        }
    }
    let med: Vec<f64> = times.into_iter().map(median).collect();
    println!(
        "{} round trips x {} runs on CPU {cpu}, median per context switch:",
        args.round_trips, args.repeat
    );
    for (mode, ns) in MODES.iter().zip(&med) {
        println!(
            "  {:<10} {:>8.2} us  (+{:.2} us over off)",
            mode.name(),
            ns / 1000.0,
            (ns - med[0]) / 1000.0
        );
    }
    Ok(())
}
