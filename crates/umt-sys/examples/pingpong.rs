//! Context-switch cost of a process that does not use UMT: two threads pinned to one CPU
//! bounce a byte through two pipes. `cargo xtask vm bench` runs it on the patched and on the
//! stock kernel to show that UMT costs unmonitored processes nothing measurable.
//!
//! ```text
//! cargo run --release -p umt-sys --example pingpong -- --round-trips 20000
//! pingpong: 4321.0 ns per round trip (20000 round trips on CPU 1)
//! ```

use std::io::{Read, Write};
use std::time::Instant;

use clap::Parser;
use umt_sys::cpu;

#[derive(Parser)]
struct Args {
    /// Round trips to time (after 1000 of warm-up).
    #[arg(long, default_value_t = 20000)]
    round_trips: u32,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let target = *cpu::process_cpus()?
        .last()
        .ok_or("no CPU in the affinity mask")?;
    let (mut a_rx, mut a_tx) = std::io::pipe()?;
    let (mut b_rx, mut b_tx) = std::io::pipe()?;
    let warmup = 1000;
    let total = warmup + args.round_trips;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        cpu::pin_current_thread(target).map_err(std::io::Error::other)?;
        let mut byte = [0u8; 1];
        for _ in 0..total {
            a_rx.read_exact(&mut byte)?;
            b_tx.write_all(&byte)?;
        }
        Ok(())
    });
    cpu::pin_current_thread(target)?;
    let mut byte = [7u8; 1];
    let mut start = Instant::now();
    for i in 0..total {
        if i == warmup {
            start = Instant::now();
        }
        a_tx.write_all(&byte)?;
        b_rx.read_exact(&mut byte)?;
    }
    let elapsed = start.elapsed();
    echo.join().map_err(|_| "echo thread panicked")??;
    println!(
        "pingpong: {:.1} ns per round trip ({} round trips on CPU {target})",
        elapsed.as_nanos() as f64 / f64::from(args.round_trips),
        args.round_trips
    );
    Ok(())
}
