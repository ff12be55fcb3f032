//! What `block_on` on a worker costs now that it parks (B1–B4 of umt-rt's `src/README.md`):
//! a future that spawns a task and awaits it, again and again, run by `rt.block_on` (on a
//! worker of the runtime, which parks at each await and hands its core to another worker),
//! by a task that calls `umt_rt::block_on` for a closure it spawned, and by tokio's
//! `Runtime::block_on` (whose future runs on the calling thread) with as many workers.
//!
//! ```text
//! cargo run --release -p umt-benches --example block_on_chain -- [--awaits 20000] [--repeat 5]
//! ```
//!
//! The table gives microseconds per await, medians of `--repeat` runs, the runtimes
//! alternating run after run.

use std::time::Instant;

use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// Awaits per run.
    #[arg(long, default_value_t = 20_000)]
    awaits: u64,
    /// Runs per runtime (medians shown).
    #[arg(long, default_value_t = 5)]
    repeat: usize,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let n = args.awaits;
    let want = n * (n - 1) / 2;
    let rt = umt_rt::Runtime::builder().build()?;
    let workers = rt.install(umt_rt::current_num_threads);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .build()?;
    let per_await = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let (mut outer, mut inner, mut tok) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.repeat {
        let t = Instant::now();
        let sum = rt.block_on(async move {
            let mut sum = 0;
            for i in 0..n {
                sum += umt_rt::spawn_async(async move { i }).await;
            }
            sum
        });
        assert_eq!(sum, want);
        outer.push(per_await(t));
        let t = Instant::now();
        let sum = rt
            .spawn(move || {
                let mut sum = 0;
                for i in 0..n {
                    sum += umt_rt::block_on(umt_rt::spawn(move || i));
                }
                sum
            })
            .join();
        assert_eq!(sum, want);
        inner.push(per_await(t));
        let t = Instant::now();
        let sum = tokio.block_on(async move {
            let mut sum = 0;
            for i in 0..n {
                sum += tokio::spawn(async move { i })
                    .await
                    .expect("a task panicked");
            }
            sum
        });
        assert_eq!(sum, want);
        tok.push(per_await(t));
    }
    let st = rt.stats();
    println!(
        "{n} awaits per run, {workers} workers each, {:?} monitor, medians of {} runs (us per await)",
        rt.backend(),
        args.repeat
    );
    println!("| umt-rt `rt.block_on` | umt-rt task's `block_on` | tokio `Runtime::block_on` |");
    println!("|---|---|---|");
    println!(
        "| {:.2} | {:.2} | {:.2} |",
        median(outer),
        median(inner),
        median(tok)
    );
    println!(
        "(umt-rt: {} workers created, {} surrenders)",
        st.workers_created, st.surrenders
    );
    Ok(())
}
