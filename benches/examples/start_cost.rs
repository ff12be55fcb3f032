//! What starting a runtime costs, per backend: the first `Runtime::new` of a process (with
//! Bpf, the kernel's BTF is parsed then, once per process) and the ones after it, each timed
//! from `build` to the end of a small parallel loop and the runtime's drop, beside rayon's
//! thread pool doing the same.
//!
//! ```text
//! cargo run --release -p umt-benches --example start_cost -- [--runtimes 10]
//! ```
//!
//! Each backend runs in a child process of its own (this binary, re-run with
//! `--backend NAME`), so that every one starts as a fresh process does; the table gives
//! milliseconds: the first runtime, and the median of the ones after. rayon's pool does not
//! wait for its threads when dropped; umt-rt's runtime does (its drop joins its workers).

use std::process::Command;
use std::time::Instant;

use clap::Parser;
use umt_rt::prelude::*;

#[derive(Parser, Debug)]
struct Args {
    /// Runtimes made one after another in each process.
    #[arg(long, default_value_t = 10)]
    runtimes: usize,
    /// Internal: time this backend (auto, bpf, perf, kernel, off, rayon) in this process.
    #[arg(long)]
    backend: Option<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One runtime, start to drop, in milliseconds; an error where the backend cannot run here.
fn one(backend: &str) -> Result<f64, String> {
    let t = Instant::now();
    let sum: u64 = if backend == "rayon" {
        let pool = rayon::ThreadPoolBuilder::new()
            .build()
            .map_err(|e| e.to_string())?;
        pool.install(|| {
            rayon::prelude::ParallelIterator::sum(
                rayon::prelude::IntoParallelIterator::into_par_iter(0..1000u64),
            )
        })
    } else {
        let kind = match backend {
            "auto" => umt_rt::BackendKind::Auto,
            "bpf" => umt_rt::BackendKind::Bpf,
            "perf" => umt_rt::BackendKind::Perf,
            "kernel" => umt_rt::BackendKind::Kernel,
            _ => umt_rt::BackendKind::Disabled,
        };
        let rt = umt_rt::Runtime::builder()
            .monitor(kind)
            .build()
            .map_err(|e| e.to_string())?;
        rt.install(|| (0..1000u64).into_par_iter().sum())
    };
    assert_eq!(sum, 999 * 1000 / 2);
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if let Some(backend) = &args.backend {
        let mut times = Vec::new();
        for _ in 0..args.runtimes.max(2) {
            match one(backend) {
                Ok(ms) => times.push(ms),
                Err(why) => {
                    let why: String = why.chars().take(90).collect();
                    println!("unavailable: {why}");
                    return Ok(());
                }
            }
        }
        println!("{:.1} {:.1}", times[0], median(times[1..].to_vec()));
        return Ok(());
    }
    let me = std::env::current_exe()?;
    println!("| backend | first runtime (ms) | each after (median, ms) |");
    println!("|---|---|---|");
    for backend in ["auto", "bpf", "perf", "kernel", "off", "rayon"] {
        let out = Command::new(&me)
            .args([
                "--backend",
                backend,
                "--runtimes",
                &args.runtimes.to_string(),
            ])
            .env_remove("UMT_BACKEND")
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().unwrap_or("no output");
        match line.split_once(' ') {
            Some((first, after)) if !line.starts_with("unavailable") => {
                println!("| {backend} | {first} | {after} |")
            }
            _ => println!("| {backend} | {line} | |"),
        }
    }
    Ok(())
}
