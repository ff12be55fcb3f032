//! A scheduler stress in the manner of `hackbench -T -p`: groups of 10 sender and 10 receiver
//! threads, each sender writing `--loops` 100-byte messages to every receiver of its group
//! through a pipe per receiver. No thread is monitored: `cargo xtask vm bench` runs it on the
//! patched and on the stock kernel (and with UMT enabled by another process) to show what
//! UMT costs the rest of the system.
//!
//! ```text
//! cargo run --release -p umt-sys --example hackbench -- --groups 4 --loops 100
//! hackbench: 123.4 ms (4 groups x 20 threads, 100 loops, 400000 messages)
//! ```

use std::io::{Read, Write};
use std::time::Instant;

use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Groups of 10 senders and 10 receivers.
    #[arg(long, default_value_t = 4)]
    groups: usize,
    /// Messages each sender sends to each receiver of its group.
    #[arg(long, default_value_t = 100)]
    loops: usize,
}

const PER_GROUP: usize = 10;
const MESSAGE: usize = 100;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let start = Instant::now();
    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
        for _ in 0..args.groups {
            let mut writers = Vec::new();
            for _ in 0..PER_GROUP {
                let (reader, writer) = std::io::pipe()?;
                writers.push(writer);
                let expect = PER_GROUP * args.loops * MESSAGE;
                s.spawn(move || {
                    let mut reader = reader;
                    let mut buf = [0u8; MESSAGE];
                    let mut got = 0;
                    while got < expect {
                        match reader.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got += n,
                        }
                    }
                });
            }
            let writers = std::sync::Arc::new(writers);
            for _ in 0..PER_GROUP {
                let writers = writers.clone();
                let loops = args.loops;
                s.spawn(move || {
                    let msg = [7u8; MESSAGE];
                    for _ in 0..loops {
                        for w in writers.iter() {
                            if (&*w).write_all(&msg).is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        }
        Ok(())
    })?;
    let elapsed = start.elapsed();
    println!(
        "hackbench: {:.1} ms ({} groups x {} threads, {} loops, {} messages)",
        elapsed.as_secs_f64() * 1e3,
        args.groups,
        2 * PER_GROUP,
        args.loops,
        args.groups * PER_GROUP * PER_GROUP * args.loops
    );
    Ok(())
}
