//! Seed 004's aggregation experiment, on umt-rt's scheduler-centric wait (`umt_rt::io`): how
//! long a compute task takes on one core while 0..64 other tasks of that core wait on pipes
//! that stay silent.
//!
//! ```text
//! cargo run --release -p umt-benches --example aggregation -- [rounds]
//! ```
//!
//! The waiting tasks wait in one of three ways, each in its own runtime (one core, the
//! monitor on, so that a wait nested too deep for its worker hands the core to a spare):
//! - `group`: an [`EventSource`] whose group poll tests every waiting pipe of the core with one
//!   `poll(2)` (the paper's aggregation);
//! - `per-wait`: the same source built with `one_poll_per_request`: one `poll(2)` per waiting
//!   pipe at each look (the paper's "without aggregation");
//! - `ring`: `umt_rt::io::readable`, a poll request on the core's io_uring: the kernel posts
//!   the event, and a look only reaps the (empty) completion queue.
//!
//! The compute task is a scope of 1000 tasks of about 20 us; the core's workers look at the
//! waits between its tasks, at most every 20 us (`Builder::io_poll_interval`). Medians over
//! the rounds, the modes alternating within each round.

use std::io::{PipeReader, PipeWriter, Write};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use umt_benches::{burn, median};
use umt_rt::io::{EventSource, Source};
use umt_rt::{BackendKind, Runtime};

/// Pipes that tasks wait on, readable once written.
struct Pipes {
    readers: Vec<PipeReader>,
}

impl Source for Pipes {
    /// Which pipe.
    type Request = usize;
    type Output = ();

    fn poll(&self, i: &mut usize) -> Option<()> {
        let mut fds = [PollFd::new(self.readers[*i].as_fd(), PollFlags::POLLIN)];
        let n = nix::poll::poll(&mut fds, PollTimeout::ZERO).unwrap_or(0);
        (n > 0).then_some(())
    }

    fn poll_group(&self, requests: &mut [usize], done: &mut dyn FnMut(usize, ())) {
        let mut fds: Vec<PollFd<'_>> = requests
            .iter()
            .map(|&i| PollFd::new(self.readers[i].as_fd(), PollFlags::POLLIN))
            .collect();
        if nix::poll::poll(&mut fds, PollTimeout::ZERO).unwrap_or(0) > 0 {
            for (k, fd) in fds.iter().enumerate() {
                if fd.revents().is_some_and(|r| !r.is_empty()) {
                    done(k, ());
                }
            }
        }
    }
}

/// How the waiting tasks wait.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Group,
    PerWait,
    Ring,
}

/// Calibrated so that `burn(steps)` takes about 20 us.
fn steps_20us() -> u64 {
    let n = 2_000_000;
    let t = Instant::now();
    std::hint::black_box(burn(n));
    ((n as f64 / t.elapsed().as_secs_f64()) * 20e-6).max(1.0) as u64
}

/// One point: the compute task's time with `waiters` silent waits of `mode` on its core, and
/// the looks the core made meanwhile.
fn point(mode: Mode, waiters: usize, steps: u64) -> (Duration, umt_rt::io::IoStats) {
    let rt = Runtime::builder()
        .num_threads(1)
        .monitor(BackendKind::Auto)
        .build()
        .expect("runtime");
    let (readers, writers): (Vec<PipeReader>, Vec<PipeWriter>) =
        (0..waiters).map(|_| std::io::pipe().expect("pipe")).unzip();
    let pipes = Pipes { readers };
    let source = Arc::new(match mode {
        Mode::PerWait => EventSource::one_poll_per_request(pipes),
        _ => EventSource::new(pipes),
    });
    let waiting = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..waiters)
        .map(|i| {
            let (source, waiting) = (source.clone(), waiting.clone());
            rt.spawn(move || {
                waiting.fetch_add(1, Ordering::SeqCst);
                match mode {
                    Mode::Ring => umt_rt::io::readable(&source.source().readers[i]).expect("poll"),
                    _ => source.wait(i),
                }
            })
        })
        .collect();
    while waiting.load(Ordering::SeqCst) < waiters {
        std::thread::yield_now();
    }
    // Let the last waiter reach its block.
    std::thread::sleep(Duration::from_millis(5));
    let before = rt.io_stats();
    // The compute task: the scope runs on the runtime's worker (inside the waits' loop).
    let elapsed = rt
        .spawn(move || {
            let t = Instant::now();
            umt_rt::scope(|s| {
                for _ in 0..1000 {
                    s.spawn(move |_| {
                        std::hint::black_box(burn(steps));
                    });
                }
            });
            t.elapsed()
        })
        .join();
    let after = rt.io_stats();
    for mut w in writers {
        w.write_all(b"x").expect("write");
    }
    for h in handles {
        h.join();
    }
    let looks = umt_rt::io::IoStats {
        polls: after.polls - before.polls,
        group_polls: after.group_polls - before.group_polls,
        request_polls: after.request_polls - before.request_polls,
        ..after
    };
    (elapsed, looks)
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let steps = steps_20us();
    let modes = [Mode::Group, Mode::PerWait, Mode::Ring];
    println!(
        "compute task: 1000 tasks of about 20 us on one core; medians of {rounds} rounds; \
         looks = polls of the core's waits during it"
    );
    println!(
        "{:>8} {:>12} {:>12} {:>12} {:>10} {:>10} {:>14}",
        "waiting", "group ms", "per-wait ms", "ring ms", "looks", "group", "single polls"
    );
    // Beyond 32 waits nested on one worker, a spare worker must take the core (the nesting
    // limit of `umt_rt::io`): without a monitor the sweep stops at 32.
    let monitored = Runtime::builder()
        .num_threads(1)
        .monitor(BackendKind::Auto)
        .build()
        .is_ok_and(|rt| rt.backend() != BackendKind::Disabled);
    if !monitored {
        eprintln!("no monitor here: the sweep stops at 32 waiting tasks");
    }
    for waiters in [0, 1, 2, 4, 8, 16, 32, 64] {
        if waiters > 32 && !monitored {
            break;
        }
        let mut times = vec![Vec::new(); modes.len()];
        let mut last = Vec::new();
        for _ in 0..rounds {
            last.clear();
            for (k, &m) in modes.iter().enumerate() {
                let (t, st) = point(m, waiters, steps);
                times[k].push(t);
                last.push(st);
            }
        }
        let ms: Vec<f64> = times
            .into_iter()
            .map(|t| median(t).as_secs_f64() * 1e3)
            .collect();
        println!(
            "{:>8} {:>12.1} {:>12.1} {:>12.1} {:>10} {:>10} {:>14}",
            waiters, ms[0], ms[1], ms[2], last[1].polls, last[0].group_polls, last[1].request_polls
        );
    }
}
