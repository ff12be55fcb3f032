//! What it costs that a chain of futures waking each other on one worker is bounded (A2 of
//! umt-rt's `src/README.md`): pairs of futures pass a baton back and forth, each pass a wake
//! of the other future from the worker that polls the first, on umt-rt and on tokio's
//! multi-thread runtime with as many workers.
//!
//! ```text
//! cargo run --release -p umt-benches --example wake_chain -- [--passes 200000] [--pairs 1,4]
//! ```
//!
//! A wake on a worker puts the woken future in that worker's next slot, where it runs next
//! and other cores' workers leave it for 5 us (N1–N4 of umt-rt's `src/README.md`); after 31
//! such wakes in a row the next goes to the runtime's shared queue of woken futures
//! instead, so that two futures that wake each other cannot keep their worker from the
//! injector and from the jobs queued below them. tokio bounds its LIFO slot the same way (3
//! polls). The table gives nanoseconds per pass, medians of `--repeat` runs, the runtimes
//! alternating run after run.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Instant;

use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// Passes of the baton per pair and run.
    #[arg(long, default_value_t = 200_000)]
    passes: usize,
    /// Numbers of pairs passing at once, one row each.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pairs: Vec<usize>,
    /// Runs per runtime and row (medians shown).
    #[arg(long, default_value_t = 7)]
    repeat: usize,
}

/// A baton two futures pass to each other: side `i` takes it on its turn, hands the turn to
/// the other side and wakes it.
#[derive(Default)]
struct Baton {
    state: Mutex<(usize, [Option<Waker>; 2])>,
}

impl Baton {
    fn pass(self: &Arc<Self>, side: usize) -> impl Future<Output = ()> + Send + 'static {
        let baton = self.clone();
        std::future::poll_fn(move |cx| {
            let mut state = baton.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.0 != side {
                state.1[side] = Some(cx.waker().clone());
                return Poll::Pending;
            }
            state.0 = 1 - side;
            let other = state.1[1 - side].take();
            drop(state);
            if let Some(other) = other {
                other.wake();
            }
            Poll::Ready(())
        })
    }
}

/// The two sides of one pair, as futures.
fn pair(passes: usize) -> [impl Future<Output = ()> + Send + 'static; 2] {
    let baton = Arc::new(Baton::default());
    [0, 1].map(|side| {
        let baton = baton.clone();
        async move {
            for _ in 0..passes {
                baton.pass(side).await;
            }
        }
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let rt = umt_rt::Runtime::builder().build()?;
    let workers = rt.install(umt_rt::current_num_threads);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .build()?;
    println!(
        "{} passes per pair, {workers} workers each, medians of {} runs (ns per pass)",
        args.passes, args.repeat
    );
    println!("| pairs | umt-rt | tokio | umt / tokio |");
    println!("|---|---|---|---|");
    for &pairs in &args.pairs {
        let (mut umt, mut tok) = (Vec::new(), Vec::new());
        let per_pass = |t: Instant| t.elapsed().as_nanos() as f64 / (args.passes * pairs) as f64;
        for _ in 0..args.repeat {
            let t = Instant::now();
            let handles: Vec<_> = (0..pairs)
                .flat_map(|_| pair(args.passes).map(|f| rt.spawn_async(f)))
                .collect();
            handles.into_iter().for_each(|h| h.join());
            umt.push(per_pass(t));
            let t = Instant::now();
            tokio.block_on(async {
                let handles: Vec<_> = (0..pairs)
                    .flat_map(|_| pair(args.passes).map(|f| tokio::spawn(f)))
                    .collect();
                for h in handles {
                    h.await.expect("a side panicked");
                }
            });
            tok.push(per_pass(t));
        }
        let (u, t) = (median(umt), median(tok));
        println!("| {pairs} | {u:.0} | {t:.0} | {:.2} |", u / t);
    }
    Ok(())
}
