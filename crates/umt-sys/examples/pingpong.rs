//! Context-switch cost for processes that do not use UMT: this process and a child it starts,
//! both pinned to one CPU, bounce a byte through two pipes (the child's stdin and stdout).
//! `cargo xtask vm bench` runs it on the patched and on the stock kernel to show that UMT
//! costs other processes nothing measurable.
//!
//! ```text
//! cargo run --release -p umt-sys --example pingpong -- --round-trips 20000
//! pingpong: 4321.0 ns per round trip (20000 round trips between 2 processes on CPU 1)
//! ```

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Parser;
use umt_sys::cpu;

#[derive(Parser)]
struct Args {
    /// Round trips to time (after 1000 of warm-up).
    #[arg(long, default_value_t = 20000)]
    round_trips: u32,
    /// Run as the echoing child on this CPU (used internally).
    #[arg(long, hide = true)]
    echo_on: Option<usize>,
    /// Instead: enable UMT (the Kernel backend, which turns the kernel's hooks on for every
    /// process) and hold it this many seconds, for measuring the others meanwhile.
    #[arg(long, value_name = "SECONDS")]
    hold_umt: Option<u64>,
}

const WARMUP: u32 = 1000;

fn echo(cpu: usize, total: u64) -> Result<(), Box<dyn std::error::Error>> {
    cpu::pin_current_thread(cpu)?;
    let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
    let mut byte = [0u8; 1];
    for _ in 0..total {
        input.read_exact(&mut byte)?;
        output.write_all(&byte)?;
        output.flush()?;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if let Some(seconds) = args.hold_umt {
        let monitor = umt_sys::Monitor::new(umt_sys::BackendKind::Kernel)?;
        monitor.register_current_thread()?;
        println!("pingpong: holding UMT enabled for {seconds} s");
        std::thread::sleep(std::time::Duration::from_secs(seconds));
        return Ok(());
    }
    let total = u64::from(WARMUP + args.round_trips);
    if let Some(cpu) = args.echo_on {
        return echo(cpu, total);
    }
    let target = *cpu::process_cpus()?
        .last()
        .ok_or("no CPU in the affinity mask")?;
    cpu::pin_current_thread(target)?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--round-trips", &args.round_trips.to_string()])
        .args(["--echo-on", &target.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let (mut to_child, mut from_child) = (
        child.stdin.take().ok_or("no child stdin")?,
        child.stdout.take().ok_or("no child stdout")?,
    );
    let mut byte = [7u8; 1];
    let mut start = Instant::now();
    for i in 0..total {
        if i == u64::from(WARMUP) {
            start = Instant::now();
        }
        to_child.write_all(&byte)?;
        from_child.read_exact(&mut byte)?;
    }
    let elapsed = start.elapsed();
    if !child.wait()?.success() {
        return Err("the echoing child failed".into());
    }
    println!(
        "pingpong: {:.1} ns per round trip ({} round trips between 2 processes on CPU {target})",
        elapsed.as_nanos() as f64 / f64::from(args.round_trips),
        args.round_trips
    );
    Ok(())
}
