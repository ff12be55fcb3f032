//! A worker that never idles still serves I/O events: whoever takes the event (the worker
//! between its jobs, D7 in `src/drive.rs`, or the reactor thread, R9 in `src/async_io.rs`),
//! the worker's main loop takes a woken future now and then before its own deque. One test
//! in this binary: the reactor and its turn are the process's.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use umt_rt::async_io::Async;
use umt_rt::{BackendKind, Runtime};

/// A job that spawns the next one until `done`: its worker's own deque never empties, so the
/// worker never idles and never waits in the reactor's set.
fn chain(done: Arc<AtomicBool>, jobs: Arc<AtomicUsize>) {
    jobs.fetch_add(1, Ordering::SeqCst);
    std::hint::black_box((0..2_000u64).fold(0u64, |a, i| a.wrapping_mul(31) ^ i));
    if !done.load(Ordering::SeqCst) {
        let _detached = umt_rt::spawn(move || chain(done, jobs));
    }
}

/// Waits until `jobs` reaches `at_least`. Panics after a minute: a guard against a hang, not
/// a time being measured.
fn wait_for_jobs(jobs: &AtomicUsize, at_least: usize) {
    let start = Instant::now();
    while jobs.load(Ordering::SeqCst) < at_least {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the busy chain did not run"
        );
        std::thread::yield_now();
    }
}

#[test]
fn a_future_woken_while_its_only_worker_never_idles_runs_before_the_busy_work_ends() {
    let (mut client, server) = UnixStream::pair().unwrap();
    // Starts the process's reactor.
    let server = Arc::new(Async::new(server).unwrap());
    let rt = Runtime::builder()
        .num_threads(1)
        .monitor(BackendKind::Disabled)
        .drive_io(true)
        .build()
        .unwrap();
    let jobs = Arc::new(AtomicUsize::new(0));
    for round in 0..20u8 {
        let done = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let (server, done) = (server.clone(), done.clone());
            rt.spawn_async(async move {
                server.readable().await.unwrap();
                let mut byte = [0u8; 1];
                let mut stream: &UnixStream = server.get_ref();
                stream.read_exact(&mut byte).unwrap();
                done.store(true, Ordering::SeqCst);
                tx.send(byte[0]).unwrap();
            })
        };
        let before = jobs.load(Ordering::SeqCst);
        let _chain = {
            let (done, jobs) = (done.clone(), jobs.clone());
            rt.spawn(move || chain(done, jobs))
        };
        // The worker is in the chain, its deque never empty, when the event comes.
        wait_for_jobs(&jobs, before + 100);
        client.write_all(&[round]).unwrap();
        // The chain ends only once the future ran: its worker's deque never empties, so
        // without a woken future taken before the deque now and then (whichever thread took
        // the event: a look between jobs or the reactor thread), this waits for ever.
        let got = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                done.store(true, Ordering::SeqCst);
                panic!("round {round}: the event's future never ran while its worker was busy")
            });
        assert_eq!(got, round);
        waiter.join();
        assert!(done.load(Ordering::SeqCst));
    }
}
