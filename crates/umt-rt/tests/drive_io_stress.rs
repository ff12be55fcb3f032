//! Stress for the kick that wakes a worker waiting in the I/O driver (`src/drive.rs`, D4;
//! `src/async_io.rs`, R7): tasks spawned one at a time onto a one-core runtime whose idle
//! worker waits in the reactor's set, while edges on a socket nobody waits on keep waking it
//! and the reactor thread. A kick lost between them leaves the worker in `epoll_wait` and the
//! next task unrun (found in review: the reactor thread read a kick meant for the worker).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use umt_rt::async_io::Async;

#[test]
fn every_spawn_reaches_a_worker_waiting_in_the_driver() {
    let (mut a, b) = UnixStream::pair().unwrap();
    let b = Arc::new(Async::new(b).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let edges = {
        let (b, stop) = (b.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::Relaxed) {
                let _ = a.write(&[0]);
                let _ = b.get_ref().read(&mut buf);
                std::thread::sleep(Duration::from_micros(50));
            }
        })
    };
    let rt = umt_rt::Runtime::builder()
        .num_threads(1)
        .drive_io(true)
        .build()
        .unwrap();
    for i in 0..3000 {
        let (tx, rx) = std::sync::mpsc::channel();
        let _task = rt.spawn_async(async move {
            let _ = tx.send(());
        });
        // A guard against a hang, not a time being measured.
        rx.recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("spawn {i} never ran: its worker missed the kick"));
        if i % 4 == 0 {
            // Lets the worker run out of work and wait in the set again.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    stop.store(true, Ordering::Relaxed);
    edges.join().unwrap();
}
