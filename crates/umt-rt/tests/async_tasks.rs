//! Futures on the runtime (`spawn_async`, `block_on`) and cancellation (`JoinHandle::abort`):
//! every future completes exactly once whatever wakes it; a future that blocks in the kernel
//! inside `poll` does not stop its core's other futures (monitor on); abort for each task
//! kind; shutdown cancels the futures that wait; tokio awaits umt's handles and umt awaits
//! tokio's.
//!
//! The tests run one at a time: the monitored one counts on its core being otherwise idle
//! (its leader runs at `SCHED_IDLE`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use umt_rt::{BackendKind, JoinError, Runtime};

mod common;
use common::{Bomb, PanicsWithABomb, monitored_backend, one_core_monitored};

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A runtime of one core (the process's last CPU) with the monitor off: a worker that blocks
/// holds the core, so what is queued stays queued.
fn one_core_unmonitored() -> Runtime {
    let cpu = *umt_sys::cpu::process_cpus().unwrap().last().unwrap();
    Runtime::builder()
        .cores([cpu])
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap()
}

/// Sets its flag when dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A future that returns `Pending` `left` times before it is ready, woken each time in one of
/// four ways (picked by `how`): during its own poll; by a thread outside the runtime; by
/// another future of the runtime; by the end of a child future it awaits.
struct Wakes {
    id: usize,
    left: u32,
    how: u64,
    foreign: mpsc::Sender<Waker>,
    done: Arc<Vec<AtomicU8>>,
    child: Option<umt_rt::JoinHandle<u64>>,
}

impl Future for Wakes {
    type Output = usize;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
        if let Some(child) = self.child.as_mut() {
            match Pin::new(child).poll(cx) {
                Poll::Ready(v) => {
                    assert_eq!(v, self.id as u64);
                    self.child = None;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        if self.left == 0 {
            // Ready once: a second poll after this would count twice.
            self.done[self.id].fetch_add(1, Ordering::SeqCst);
            return Poll::Ready(self.id);
        }
        self.left -= 1;
        // xorshift: the next way to be woken.
        self.how ^= self.how << 13;
        self.how ^= self.how >> 7;
        self.how ^= self.how << 17;
        if self.how.is_multiple_of(997) {
            // Now and then a block in the kernel inside `poll`.
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        match self.how % 4 {
            0 => cx.waker().wake_by_ref(),
            1 => self.foreign.send(cx.waker().clone()).unwrap(),
            2 => {
                let w = cx.waker().clone();
                drop(umt_rt::spawn_async(async move { w.wake() }));
            }
            _ => {
                let id = self.id as u64;
                self.child = Some(umt_rt::spawn_async(async move { id }));
                cx.waker().wake_by_ref();
            }
        }
        Poll::Pending
    }
}

#[test]
fn every_future_completes_exactly_once_however_it_is_woken() {
    let _serial = serial();
    const FUTURES: usize = 100_000;
    let rt = Runtime::builder()
        .monitor(monitored_backend())
        .build()
        .unwrap();
    let done: Arc<Vec<AtomicU8>> = Arc::new((0..FUTURES).map(|_| AtomicU8::new(0)).collect());
    let (tx, rx) = mpsc::channel::<Waker>();
    // The thread outside the runtime that wakes what it is sent.
    let waker_thread = std::thread::spawn(move || {
        for w in rx {
            w.wake();
        }
    });
    let handles: Vec<_> = (0..FUTURES)
        .map(|id| {
            rt.spawn_async(Wakes {
                id,
                left: (id % 5) as u32,
                how: 0x9e37_79b9_7f4a_7c15 ^ (id as u64 + 1),
                foreign: tx.clone(),
                done: done.clone(),
                child: None,
            })
        })
        .collect();
    drop(tx);
    for (id, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join(), id);
    }
    assert!(done.iter().all(|d| d.load(Ordering::SeqCst) == 1));
    drop(rt);
    waker_thread.join().unwrap();
}

#[test]
fn a_future_blocked_in_poll_leaves_its_core_to_the_others() {
    use std::io::{Read, Write};
    let _serial = serial();
    let Some(rt) = one_core_monitored() else {
        return;
    };
    let (mut reader, mut writer) = std::io::pipe().unwrap();
    let (started_tx, started_rx) = mpsc::channel();
    // A: blocks in the kernel inside its poll until B has run. One core, and its one worker
    // is in A's read: only a spare can run B.
    let a = rt.spawn_async(async move {
        started_tx.send(umt_sys::cpu::current_tid()).unwrap();
        let mut byte = [0u8; 1];
        reader.read_exact(&mut byte).unwrap();
        (byte[0], umt_sys::cpu::current_tid())
    });
    let a_tid = started_rx.recv().unwrap();
    let b = rt.spawn_async(async move {
        writer.write_all(&[7]).unwrap();
        umt_sys::cpu::current_tid()
    });
    let b_tid = b.join();
    let (byte, a_end) = a.join();
    assert_eq!(byte, 7);
    assert_eq!(a_end, a_tid);
    assert_ne!(
        b_tid, a_tid,
        "B ran on another worker of the core while A blocked"
    );
    assert!(rt.stats().workers.len() >= 2);
}

#[test]
fn abort_stops_a_queued_closure_before_it_runs() {
    let _serial = serial();
    let rt = one_core_unmonitored();
    let (started_tx, started_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let holder = rt.spawn(move || {
        started_tx.send(()).unwrap();
        go_rx.recv().unwrap();
    });
    started_rx.recv().unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let queued = {
        let ran = ran.clone();
        rt.spawn(move || ran.store(true, Ordering::SeqCst))
    };
    queued.abort();
    go_tx.send(()).unwrap();
    holder.join();
    assert!(matches!(queued.try_join(), Err(JoinError::Cancelled)));
    // The queue is empty now: a task spawned after it has run, and the aborted one did not.
    rt.spawn(|| ()).join();
    assert!(!ran.load(Ordering::SeqCst));
}

#[test]
fn abort_lets_a_running_closure_finish_and_drops_its_result() {
    let _serial = serial();
    let rt = one_core_unmonitored();
    let (started_tx, started_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let finished = Arc::new(AtomicBool::new(false));
    let result_dropped = Arc::new(AtomicBool::new(false));
    let running = {
        let (finished, result_dropped) = (finished.clone(), result_dropped.clone());
        rt.spawn(move || {
            started_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            finished.store(true, Ordering::SeqCst);
            DropFlag(result_dropped)
        })
    };
    started_rx.recv().unwrap();
    running.abort();
    go_tx.send(()).unwrap();
    assert!(matches!(running.try_join(), Err(JoinError::Cancelled)));
    assert!(finished.load(Ordering::SeqCst));
    assert!(result_dropped.load(Ordering::SeqCst));
}

/// A value whose drop panics.
struct PanicsInDrop;

impl Drop for PanicsInDrop {
    fn drop(&mut self) {
        panic!("a task's value panicked in its drop (on purpose)");
    }
}

/// A detached task's value is dropped by the worker that finishes it (its handle is gone); a
/// panic in that drop must not end the worker. On one unmonitored core no other worker would
/// ever run the next task (found by a review: the worker thread unwound and exited).
#[test]
fn a_detached_tasks_value_that_panics_in_its_drop_leaves_the_worker_serving() {
    let _serial = serial();
    let rt = one_core_unmonitored();
    let wait = std::time::Duration::from_secs(60);
    // A closure: its handle dropped while it runs.
    let (go_tx, go_rx) = mpsc::channel::<()>();
    drop(rt.spawn(move || {
        go_rx.recv().unwrap();
        PanicsInDrop
    }));
    go_tx.send(()).unwrap();
    let (next_tx, next_rx) = mpsc::channel();
    drop(rt.spawn(move || next_tx.send(()).unwrap()));
    assert!(
        next_rx.recv_timeout(wait).is_ok(),
        "the worker died dropping a closure's value"
    );
    // A future: its handle dropped while it waits.
    let go = OneShot::default();
    drop(rt.spawn_async({
        let go = go.clone();
        async move {
            go.recv().await;
            PanicsInDrop
        }
    }));
    go.send(1);
    let (next_tx, next_rx) = mpsc::channel();
    drop(rt.spawn_async(async move { next_tx.send(()).unwrap() }));
    assert!(
        next_rx.recv_timeout(wait).is_ok(),
        "the worker died dropping a future's value"
    );
    // A value whose drop panics with a payload whose own drop panics (`panic_any`): the
    // payload is leaked, not dropped on the worker (where its panic would end the thread).
    drop(rt.spawn(|| PanicsWithABomb));
    let (next_tx, next_rx) = mpsc::channel();
    drop(rt.spawn(move || next_tx.send(()).unwrap()));
    assert!(
        next_rx.recv_timeout(wait).is_ok(),
        "the worker died dropping a panic's payload"
    );
    // The same payload from a detached task with no panic handler, which is said and dropped.
    rt.spawn_detached(|| std::panic::panic_any(Bomb));
    let (next_tx, next_rx) = mpsc::channel();
    drop(rt.spawn(move || next_tx.send(()).unwrap()));
    assert!(
        next_rx.recv_timeout(wait).is_ok(),
        "the worker died dropping a detached task's panic"
    );
    // A handle dropped after its task ended drops the value on the caller's thread: the
    // panic is dropped there too, as tokio does.
    let h = rt.spawn(|| PanicsInDrop);
    while !h.is_finished() {
        std::thread::yield_now();
    }
    drop(h);
}

#[test]
fn abort_drops_a_waiting_future_at_once() {
    let _serial = serial();
    let rt = one_core_unmonitored();
    let dropped = Arc::new(AtomicBool::new(false));
    let guard = DropFlag(dropped.clone());
    let h = rt.spawn_async(async move {
        let _guard = guard;
        std::future::pending::<()>().await;
    });
    // Let it reach its wait (the worker runs nothing else).
    rt.spawn(|| ()).join();
    h.abort();
    assert!(matches!(h.try_join(), Err(JoinError::Cancelled)));
    assert!(dropped.load(Ordering::SeqCst));
}

/// Polls once: counts the poll, tells the test it is polling, waits (blocking its worker)
/// until the test has aborted it, wakes itself and returns `Pending`.
struct AbortedWhilePolled {
    polls: Arc<AtomicUsize>,
    polling: mpsc::Sender<()>,
    aborted: Arc<Mutex<mpsc::Receiver<()>>>,
    _guard: DropFlag,
}

impl Future for AbortedWhilePolled {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.polling.send(()).unwrap();
        self.aborted.lock().unwrap().recv().unwrap();
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn abort_drops_a_running_future_at_its_next_poll() {
    let _serial = serial();
    let rt = one_core_unmonitored();
    let polls = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicBool::new(false));
    let (polling_tx, polling_rx) = mpsc::channel();
    let (aborted_tx, aborted_rx) = mpsc::channel();
    let h = rt.spawn_async(AbortedWhilePolled {
        polls: polls.clone(),
        polling: polling_tx,
        aborted: Arc::new(Mutex::new(aborted_rx)),
        _guard: DropFlag(dropped.clone()),
    });
    polling_rx.recv().unwrap();
    h.abort();
    aborted_tx.send(()).unwrap();
    assert!(matches!(h.try_join(), Err(JoinError::Cancelled)));
    assert_eq!(
        polls.load(Ordering::SeqCst),
        1,
        "polled again after the abort"
    );
    assert!(dropped.load(Ordering::SeqCst));
}

#[test]
fn abort_after_the_end_changes_nothing_and_join_reraises_a_cancel() {
    let _serial = serial();
    let rt = one_core_unmonitored();
    let h = rt.spawn_async(async { 5 });
    while !h.is_finished() {
        std::thread::yield_now();
    }
    h.abort();
    assert_eq!(h.join(), 5);
    let h = rt.spawn_async(std::future::pending::<u8>());
    h.abort();
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.join())).unwrap_err();
    assert!(matches!(
        err.downcast_ref::<JoinError>(),
        Some(JoinError::Cancelled)
    ));
    // A panic in a future reaches whoever joins it; the runtime lives on.
    let h = rt.spawn_async(async { panic!("boom") });
    assert!(matches!(h.try_join(), Err(JoinError::Panicked(_))));
    assert_eq!(rt.spawn_async(async { 1 }).join(), 1);
}

#[test]
fn dropping_the_runtime_cancels_the_futures_that_wait() {
    let _serial = serial();
    let rt = one_core_unmonitored();
    let dropped = Arc::new(AtomicBool::new(false));
    let guard = DropFlag(dropped.clone());
    let waiting = rt.spawn_async(async move {
        let _guard = guard;
        std::future::pending::<()>().await;
    });
    let ready = rt.spawn_async(async { 3 });
    rt.spawn(|| ()).join();
    drop(rt);
    assert!(matches!(waiting.try_join(), Err(JoinError::Cancelled)));
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(ready.join(), 3);
}

/// On one monitored core, a `block_on` of a future that awaits what it spawned returns, and a
/// runtime dropped while a task waits in `block_on` for a task it spawned still ends: with a
/// worker to hand the core to (B2 of `src/README.md`; no spare budget, which a parked
/// `block_on` does not use) and with none (`max_workers_per_core(1)`: the wait runs those
/// tasks itself, B4). A guard for any wait that parks: the first parked wait hung on both.
#[test]
fn block_on_runs_its_own_jobs_and_lets_its_runtime_end() {
    let _serial = serial();
    for workers_per_core in [None, Some(1)] {
        let (tx, rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let test = std::thread::spawn(move || {
            let cpu = *umt_sys::cpu::process_cpus().unwrap().last().unwrap();
            let mut b = Runtime::builder().cores([cpu]).monitor(monitored_backend());
            if let Some(n) = workers_per_core {
                b = b.max_workers_per_core(n);
            }
            let rt = b.build().unwrap();
            if common::skip_unmonitored(&rt) {
                let _ = done_tx.send(None);
                return;
            }
            rt.set_max_spares(0);
            let got = rt.block_on(async {
                umt_rt::spawn_async(async { 20 }).await + umt_rt::spawn(|| 22).await
            });
            rt.spawn_detached(move || {
                std::thread::sleep(std::time::Duration::from_millis(5));
                tx.send(umt_rt::block_on(umt_rt::spawn(|| 1))).unwrap();
            });
            drop(rt);
            let _ = done_tx.send(Some(got));
        });
        // A hang detector, not a speed bound.
        match done_rx.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(Some(got)) => {
                assert_eq!(got, 42);
                assert_eq!(rx.recv().unwrap(), 1);
                test.join().unwrap();
            }
            Ok(None) => test.join().unwrap(),
            Err(_) => panic!(
                "block_on ({workers_per_core:?} workers per core), or the runtime's drop, \
                 never returned"
            ),
        }
    }
}

/// A one-shot value whose receiver is a future (std only: the dev tokio has no `sync`).
#[derive(Clone, Default)]
struct OneShot(Arc<Mutex<(Option<u32>, Option<Waker>)>>);

impl OneShot {
    fn send(&self, v: u32) {
        let waker = {
            let mut g = self.0.lock().unwrap();
            g.0 = Some(v);
            g.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn recv(self) -> impl Future<Output = u32> {
        std::future::poll_fn(move |cx| {
            let mut g = self.0.lock().unwrap();
            match g.0 {
                Some(v) => Poll::Ready(v),
                None => {
                    g.1 = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
    }
}

/// B1–B4 of `src/README.md`: a task's `block_on` on a monitored worker waits parked, and no
/// task runs on top of its frame. On one core, task A waits in `block_on` for a value sent
/// from outside, and task B, started while A waits, waits in `block_on` for what A sends
/// next. Had A's worker run B on top of A's frame, B would wait for A, and A (below B on the
/// stack) for B to return: both for ever (found by a user's trial). The worker A's wait
/// woke for its core runs B instead, and both finish once A gets its value.
#[test]
fn tasks_whose_block_on_waits_for_each_other_finish() {
    let _serial = serial();
    let Some(rt) = one_core_monitored() else {
        return;
    };
    for pairs in [1usize, 3] {
        let b_waits = Arc::new(AtomicUsize::new(0));
        let mut feeds = Vec::new();
        let mut handles = Vec::new();
        for _ in 0..pairs {
            let (a, b) = (OneShot::default(), OneShot::default());
            feeds.push(a.clone());
            let to_b = b.clone();
            let first = rt.spawn_async(async move {
                let v = umt_rt::block_on(a.recv());
                to_b.send(v + 1);
                v
            });
            let waits = b_waits.clone();
            let second = rt.spawn_async(async move {
                waits.fetch_add(1, Ordering::SeqCst);
                umt_rt::block_on(b.recv())
            });
            handles.push((first, second));
        }
        // Every B waits (each A is waiting already: B started after it, on the same core).
        while b_waits.load(Ordering::SeqCst) < pairs {
            std::thread::yield_now();
        }
        for (i, a) in feeds.iter().enumerate() {
            a.send(10 * i as u32);
        }
        // A hang detector, not a speed bound: a deadlock would wait for ever.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let got: Vec<(u32, u32)> = handles
                .into_iter()
                .map(|(a, b)| (a.join(), b.join()))
                .collect();
            let _ = tx.send(got);
        });
        let Ok(got) = rx.recv_timeout(std::time::Duration::from_secs(120)) else {
            // Dropping the runtime would wait for the stuck workers: fail instead.
            std::mem::forget(rt);
            panic!("tasks waiting in block_on for each other never finished ({pairs} pairs)");
        };
        let want: Vec<(u32, u32)> = (0..pairs as u32).map(|i| (10 * i, 10 * i + 1)).collect();
        assert_eq!(got, want);
    }
}

/// B1–B4 of `src/README.md` with closures, as a library's sync wrapper over async code is
/// called (`fn get() { block_on(get_async()) }`): on one monitored core, task A waits in
/// `block_on` for a timer and then sets a flag; task B, queued after it, waits in `block_on`
/// for the flag. Run on top of A's frame, B would wait for ever (a user's trial).
#[test]
fn sync_wrappers_over_async_called_from_tasks_finish() {
    let _serial = serial();
    let Some(rt) = one_core_monitored() else {
        return;
    };
    let flag = Arc::new(AtomicBool::new(false));
    let a_waits = Arc::new(AtomicBool::new(false));
    let (f1, f2, waits) = (flag.clone(), flag.clone(), a_waits.clone());
    let a = rt.spawn(move || {
        waits.store(true, Ordering::SeqCst);
        umt_rt::block_on(umt_rt::time::sleep(std::time::Duration::from_millis(20)));
        f1.store(true, Ordering::SeqCst);
    });
    // B is queued once A runs, so that the core's worker is A's.
    while !a_waits.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let b = rt.spawn(move || {
        umt_rt::block_on(std::future::poll_fn(|cx| {
            if f2.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                // A timer-less poll loop: woken again at once, as a flag-polling future is.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }))
    });
    // A hang detector, not a speed bound.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        a.join();
        b.join();
        let _ = tx.send(());
    });
    if rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .is_err()
    {
        std::mem::forget(rt);
        panic!("a sync wrapper's block_on run on top of another's never finished");
    }
}

#[test]
fn block_on_runs_futures_on_a_worker_and_outside_one() {
    let _serial = serial();
    let rt = Runtime::builder()
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap();
    // On a worker: awaiting tasks it spawned (they run on this runtime meanwhile).
    let total = rt.block_on(async {
        let hs: Vec<_> = (0..100u64)
            .map(|i| umt_rt::spawn_async(async move { i }))
            .collect();
        let mut total = 0;
        for h in hs {
            total += h.await;
        }
        total + umt_rt::spawn(|| 1).await
    });
    assert_eq!(total, 4951);
    // Outside: a future woken by another thread; it need not be `Send`.
    let (tx, rx) = mpsc::channel::<Waker>();
    let waker_thread = std::thread::spawn(move || rx.recv().unwrap().wake());
    let not_send = std::rc::Rc::new(9);
    let mut sent = false;
    let got = umt_rt::block_on(std::future::poll_fn(|cx| {
        if sent {
            Poll::Ready(*not_send)
        } else {
            sent = true;
            tx.send(cx.waker().clone()).unwrap();
            Poll::Pending
        }
    }));
    assert_eq!(got, 9);
    waker_thread.join().unwrap();
}

#[test]
fn tokio_awaits_umt_handles_and_umt_awaits_tokio_handles() {
    let _serial = serial();
    let rt = Runtime::builder()
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap();
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let from_umt = rt.spawn_async(async { 40 });
    let from_closure = rt.spawn(|| 2);
    let sum = tokio_rt.block_on(async { from_umt.await + from_closure.await });
    assert_eq!(sum, 42);
    let from_tokio = tokio_rt.spawn(async { 7 });
    assert_eq!(rt.block_on(async { from_tokio.await.unwrap() }), 7);
    // `result()`: the outcome as tokio's handles give it, a value, a panic or a cancel, in
    // tokio's executor and in umt's alike; the awaiting task does not panic.
    let value = rt.spawn_async(async { 3 });
    let panicked = rt.spawn_async(async { panic!("boom") });
    let cancelled = rt.spawn_async(std::future::pending::<u8>());
    cancelled.abort();
    let (v, p) = tokio_rt.block_on(async { (value.result().await, panicked.result().await) });
    assert_eq!(v.unwrap(), 3);
    assert!(matches!(p, Err(JoinError::Panicked(_))));
    let c = rt.block_on(async move { cancelled.result().await });
    assert!(matches!(c, Err(JoinError::Cancelled)));
}

#[test]
fn many_sleeps_each_end_at_or_after_their_deadline() {
    use std::time::{Duration, Instant};
    let _serial = serial();
    let rt = Runtime::builder()
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap();
    let handles: Vec<_> = (0..10_000u64)
        .map(|i| {
            rt.spawn_async(async move {
                let sleep = umt_rt::time::sleep(Duration::from_micros((i * 7919) % 5000));
                let deadline = sleep.deadline();
                sleep.await;
                Instant::now() >= deadline
            })
        })
        .collect();
    assert!(handles.into_iter().all(|h| h.join()));
}

#[test]
fn a_timeout_gives_the_value_or_drops_the_future_at_its_deadline() {
    use std::time::Duration;
    use umt_rt::time::{Elapsed, timeout};
    let _serial = serial();
    let rt = one_core_unmonitored();
    assert_eq!(
        rt.block_on(timeout(Duration::from_secs(60), async { 5 })),
        Ok(5)
    );
    let dropped = Arc::new(AtomicBool::new(false));
    let guard = DropFlag(dropped.clone());
    let late = rt.spawn_async(timeout(Duration::from_millis(2), async move {
        let _guard = guard;
        std::future::pending::<()>().await;
    }));
    assert_eq!(late.join(), Err(Elapsed));
    assert!(dropped.load(Ordering::SeqCst));
    // The same timers serve other executors.
    let tokio_rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    tokio_rt.block_on(umt_rt::time::sleep(Duration::from_millis(1)));
}

/// A loopback echo service written as a tokio user would write it: a task per connection,
/// clients as tasks of the same runtime; every byte comes back, whichever side waits. One
/// handler in ten blocks in the kernel first (a sleep standing in for a blocking driver).
#[test]
fn an_echo_service_on_async_sockets_answers_every_request() {
    use umt_rt::async_io::Async;
    let _serial = serial();
    const CLIENTS: usize = 64;
    const ROUNDS: usize = 40;
    let rt = Runtime::builder()
        .monitor(monitored_backend())
        .build()
        .unwrap();
    let listener = match Async::<std::net::TcpListener>::bind("127.0.0.1:0") {
        Ok(l) => l,
        // The minimal kernel of the CI guest has no IPv4.
        Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
            eprintln!("skipped: this kernel has no IPv4 ({e})");
            return;
        }
        Err(e) => panic!("cannot listen on 127.0.0.1: {e}"),
    };
    let addr = listener.get_ref().local_addr().unwrap();
    let server = rt.spawn_async(async move {
        let mut handlers = Vec::new();
        for i in 0..CLIENTS {
            let (stream, _) = listener.accept().await.unwrap();
            handlers.push(umt_rt::spawn_async(async move {
                let mut buf = [0u8; 64];
                loop {
                    let n = stream.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    if i % 10 == 0 {
                        std::thread::sleep(std::time::Duration::from_micros(100));
                    }
                    stream.write_all(&buf[..n]).await.unwrap();
                }
            }));
        }
        for h in handlers {
            h.await;
        }
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            rt.spawn_async(async move {
                let stream = Async::<std::net::TcpStream>::connect(addr).await.unwrap();
                for r in 0..ROUNDS {
                    let msg = format!("client {c} round {r}");
                    stream.write_all(msg.as_bytes()).await.unwrap();
                    let mut back = vec![0u8; msg.len()];
                    stream.read_exact(&mut back).await.unwrap();
                    assert_eq!(back, msg.as_bytes());
                }
                ROUNDS
            })
        })
        .collect();
    let answered: usize = clients.into_iter().map(|c| c.join()).sum();
    assert_eq!(answered, CLIENTS * ROUNDS);
    server.join();
}

#[test]
fn a_pipe_read_waits_for_the_write_that_comes_after_it_would_block() {
    use umt_rt::async_io::Async;
    let _serial = serial();
    let rt = one_core_unmonitored();
    let (reader, writer) = std::io::pipe().unwrap();
    let reader = Async::new(reader).unwrap();
    let (tried_tx, tried_rx) = mpsc::channel();
    let read = rt.spawn_async(async move {
        // Nothing written yet: the first try would block, so the read waits (R2).
        let mut byte = [0u8; 1];
        let n = reader
            .read_with(|mut r| {
                let got = std::io::Read::read(&mut r, &mut byte);
                let _ = tried_tx.send(());
                got
            })
            .await
            .unwrap();
        (n, byte[0])
    });
    tried_rx.recv().unwrap();
    std::io::Write::write_all(&mut &writer, &[9]).unwrap();
    assert_eq!(read.join(), (1, 9));
}

#[test]
fn a_cancelled_scope_drops_every_task_that_has_not_started() {
    let _serial = serial();
    let rt = one_core_unmonitored();
    let ran = AtomicUsize::new(0);
    let saw_cancel = AtomicBool::new(false);
    rt.scope(|s| {
        let (ran, saw_cancel) = (&ran, &saw_cancel);
        s.spawn(move |s| {
            // One core: the children queue behind this task.
            for i in 0..100 {
                let access = [umt_rt::Access::write(i % 3)];
                s.spawn_with(access, move |_| {
                    ran.fetch_add(1, Ordering::SeqCst);
                });
            }
            s.cancel();
            saw_cancel.store(s.is_cancelled(), Ordering::SeqCst);
        });
        s.wait().unwrap();
        assert!(s.is_cancelled());
        s.spawn(move |_| {
            ran.fetch_add(1, Ordering::SeqCst);
        });
    });
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert!(saw_cancel.load(Ordering::SeqCst));
    // The runtime and new scopes are unaffected.
    let after = AtomicUsize::new(0);
    rt.scope(|s| {
        s.spawn(|_| {
            after.fetch_add(1, Ordering::SeqCst);
        })
    });
    assert_eq!(after.into_inner(), 1);
}

/// Returns `Pending` once after waking itself: the `yield_now` of async code.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn a_future_that_yields_in_a_loop_lets_the_others_run() {
    let _serial = serial();
    let rt = one_core_unmonitored();
    let flag = Arc::new(AtomicBool::new(false));
    let spinner = {
        let flag = flag.clone();
        rt.spawn_async(async move {
            // Bounded, so that a starving runtime fails the test instead of hanging it.
            for _ in 0..1_000_000 {
                if flag.load(Ordering::SeqCst) {
                    return true;
                }
                YieldOnce(false).await;
            }
            false
        })
    };
    let setter = {
        let flag = flag.clone();
        rt.spawn_async(async move { flag.store(true, Ordering::SeqCst) })
    };
    assert!(spinner.join(), "the yielding future kept its only worker");
    setter.join();
}

/// Runs `hog` (which loops until `flag` is set, or gives up after a minute: a guard against a
/// hang, not a time being measured, and returns whether the flag stopped it) alone on a
/// one-worker runtime; once it has started, queues `setter` from outside the runtime, which
/// sets the flag. Returns whether the flag stopped the hog.
fn hog_then_setter<H>(
    hog: impl FnOnce(Arc<AtomicBool>, mpsc::Sender<()>) -> H,
    setter: impl FnOnce(&Runtime, Arc<AtomicBool>) -> umt_rt::JoinHandle<()>,
) -> bool
where
    H: Future<Output = bool> + Send + 'static,
{
    let _serial = serial();
    let rt = one_core_unmonitored();
    let flag = Arc::new(AtomicBool::new(false));
    let (started, on_start) = mpsc::channel();
    let hog = rt.spawn_async(hog(flag.clone(), started));
    on_start.recv().unwrap();
    let setter = setter(&rt, flag);
    let stopped = hog.join();
    setter.join();
    stopped
}

/// Whether a minute has gone by since `start` (the hogs' guard).
fn given_up(start: std::time::Instant) -> bool {
    start.elapsed() > std::time::Duration::from_secs(60)
}

#[test]
fn a_future_that_yields_in_a_loop_lets_a_closure_spawned_from_outside_run() {
    // The yielding future is always in the queue of woken futures; the closure is in the
    // injector, which its only worker looks at before that queue every other time.
    let stopped = hog_then_setter(
        |flag, started| async move {
            started.send(()).unwrap();
            let start = std::time::Instant::now();
            while !flag.load(Ordering::SeqCst) {
                if given_up(start) {
                    return false;
                }
                YieldOnce(false).await;
            }
            true
        },
        |rt, flag| rt.spawn(move || flag.store(true, Ordering::SeqCst)),
    );
    assert!(
        stopped,
        "the closure waited behind a future that yields in a loop"
    );
}

/// A baton two futures pass to each other: side `i` takes it when it is its turn, hands the
/// turn to the other side and wakes it; once stopped, every pass returns at once.
#[derive(Default)]
struct Baton {
    /// Whose turn it is, each side's waker while it waits, and whether it is stopped.
    state: Mutex<(usize, [Option<Waker>; 2], bool)>,
}

impl Baton {
    fn pass(self: &Arc<Self>, side: usize) -> impl Future<Output = ()> + Send + 'static {
        let baton = self.clone();
        std::future::poll_fn(move |cx| {
            let mut state = baton.state.lock().unwrap();
            if state.2 {
                return Poll::Ready(());
            }
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

    fn stop(&self) {
        let mut state = self.state.lock().unwrap();
        state.2 = true;
        let wakers: Vec<Waker> = state.1.iter_mut().filter_map(Option::take).collect();
        drop(state);
        wakers.into_iter().for_each(Waker::wake);
    }

    fn is_stopped(&self) -> bool {
        self.state.lock().unwrap().2
    }
}

#[test]
fn two_futures_that_wake_each_other_let_a_closure_spawned_from_outside_run() {
    // Each wakes the other from its worker, which queues it on that worker's deque: without
    // a bound on such a chain the deque never empties and the worker never reaches the
    // injector, where the closure waits.
    let stopped = hog_then_setter(
        |flag, started| async move {
            let baton = Arc::new(Baton::default());
            let partner = {
                let (baton, flag) = (baton.clone(), flag.clone());
                umt_rt::spawn_async(async move {
                    while !flag.load(Ordering::SeqCst) && !baton.is_stopped() {
                        baton.pass(1).await;
                    }
                    baton.stop();
                })
            };
            started.send(()).unwrap();
            let start = std::time::Instant::now();
            let mut stopped = true;
            while !flag.load(Ordering::SeqCst) && !baton.is_stopped() {
                if given_up(start) {
                    stopped = false;
                    break;
                }
                baton.pass(0).await;
            }
            baton.stop();
            partner.await;
            stopped
        },
        |rt, flag| rt.spawn(move || flag.store(true, Ordering::SeqCst)),
    );
    assert!(
        stopped,
        "the closure waited behind two futures that wake each other"
    );
}

/// A one-shot signal: `set` wakes the future waiting for it.
#[derive(Default)]
struct Signal(Mutex<(bool, Option<Waker>)>);

impl Signal {
    fn set(&self) {
        let waker = {
            let mut state = self.0.lock().unwrap();
            state.0 = true;
            state.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn wait(self: &Arc<Self>) -> impl Future<Output = ()> + Send + 'static {
        let signal = self.clone();
        std::future::poll_fn(move |cx| {
            let mut state = signal.0.lock().unwrap();
            if state.0 {
                return Poll::Ready(());
            }
            state.1 = Some(cx.waker().clone());
            Poll::Pending
        })
    }
}

/// A hog that hands each step to a closure on its worker, which wakes it: the closure is not
/// a poll, so no chain of wakes grows, and the worker's deque never empties. Before the loop
/// it runs `first` (which may queue a job below the pair).
async fn spawn_and_await_loop(
    flag: Arc<AtomicBool>,
    started: mpsc::Sender<()>,
    first: impl FnOnce(),
) -> bool {
    first();
    // Nobody may listen (a starter queued with others).
    let _ = started.send(());
    let start = std::time::Instant::now();
    while !flag.load(Ordering::SeqCst) {
        if given_up(start) {
            return false;
        }
        let signal = Arc::new(Signal::default());
        let setter = signal.clone();
        umt_rt::spawn_detached(move || setter.set());
        signal.wait().await;
    }
    true
}

#[test]
fn a_future_woken_by_the_closures_it_spawns_lets_a_closure_spawned_from_outside_run() {
    let stopped = hog_then_setter(
        |flag, started| spawn_and_await_loop(flag, started, || ()),
        |rt, flag| rt.spawn(move || flag.store(true, Ordering::SeqCst)),
    );
    assert!(
        stopped,
        "the closure from outside waited behind a future woken by its own closures"
    );
}

#[test]
fn a_future_woken_by_the_closures_it_spawns_lets_the_job_below_them_run() {
    // The flag's setter is queued on the worker's deque before the pair starts taking turns
    // on top of it.
    let stopped = hog_then_setter(
        |flag, started| {
            let below = flag.clone();
            spawn_and_await_loop(flag, started, move || {
                umt_rt::spawn_detached(move || below.store(true, Ordering::SeqCst))
            })
        },
        |rt, _| rt.spawn(|| ()),
    );
    assert!(
        stopped,
        "the job below a future and its closures waited for ever"
    );
}

#[test]
fn a_future_woken_by_the_closures_it_spawns_lets_a_broadcast_run() {
    // A broadcast's call for the core waits in the core's inbox, which only its workers take.
    let _serial = serial();
    let rt = one_core_unmonitored();
    let flag = Arc::new(AtomicBool::new(false));
    let (started, on_start) = mpsc::channel();
    let hog = rt.spawn_async(spawn_and_await_loop(flag.clone(), started, || ()));
    on_start.recv().unwrap();
    let stopped = std::thread::scope(|s| {
        s.spawn(|| rt.broadcast(|_| flag.store(true, Ordering::SeqCst)));
        hog.join()
    });
    assert!(
        stopped,
        "the broadcast waited in the inbox behind a future woken by its own closures"
    );
}

#[test]
fn a_future_woken_by_the_closures_it_spawns_lets_the_jobs_queued_after_its_starter_run() {
    // While a gate holds the only worker, a closure that starts the pair and seven setters
    // are queued from outside, in that order. The worker takes the starter first; the
    // setters must not then wait below the pair, nor in the injector behind it.
    let _serial = serial();
    let rt = one_core_unmonitored();
    let (flag, go) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (gate_started, on_gate) = mpsc::channel();
    let gate = {
        let go = go.clone();
        rt.spawn(move || {
            gate_started.send(()).unwrap();
            while !go.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
        })
    };
    on_gate.recv().unwrap();
    let (hog_tx, hog_rx) = mpsc::channel();
    let starter = {
        let flag = flag.clone();
        rt.spawn(move || {
            let (started, _) = mpsc::channel();
            hog_tx
                .send(umt_rt::spawn_async(spawn_and_await_loop(
                    flag,
                    started,
                    || (),
                )))
                .unwrap();
        })
    };
    let setters: Vec<_> = (0..7)
        .map(|_| {
            let flag = flag.clone();
            rt.spawn(move || flag.store(true, Ordering::SeqCst))
        })
        .collect();
    go.store(true, Ordering::SeqCst);
    gate.join();
    starter.join();
    let stopped = hog_rx.recv().unwrap().join();
    setters.into_iter().for_each(|s| s.join());
    assert!(
        stopped,
        "the setters waited behind a future woken by its own closures"
    );
}

#[test]
fn a_future_whose_io_is_always_ready_yields_its_worker_to_the_others() {
    use std::os::unix::net::UnixStream;
    use umt_rt::async_io::Async;
    // Each read finds the byte just written: the hog never sees `WouldBlock`, so without a
    // turn (`coop.rs`) its poll never returns and the other future waits for the minute.
    let stopped = hog_then_setter(
        |flag, started| async move {
            let (a, b) = UnixStream::pair().unwrap();
            let (a, b) = (Async::new(a).unwrap(), Async::new(b).unwrap());
            started.send(()).unwrap();
            let start = std::time::Instant::now();
            let mut byte = [0u8; 1];
            while !flag.load(Ordering::SeqCst) {
                if given_up(start) {
                    return false;
                }
                a.write_all(&[7]).await.unwrap();
                b.read_exact(&mut byte).await.unwrap();
                assert_eq!(byte, [7]);
            }
            true
        },
        |rt, flag| rt.spawn_async(async move { flag.store(true, Ordering::SeqCst) }),
    );
    assert!(
        stopped,
        "a future whose I/O was always ready kept its only worker"
    );
}

#[test]
fn a_select_loop_over_always_ready_sockets_yields_its_worker_to_the_others() {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use umt_rt::async_io::Async;
    // Each round polls a read of `a` and, when that is refused, one of `b`; both always have
    // a byte. A spent turn must refuse the second read too, or the loop never returns.
    let stopped = hog_then_setter(
        |flag, started| async move {
            let (mut wa, a) = UnixStream::pair().unwrap();
            let (mut wb, b) = UnixStream::pair().unwrap();
            let (a, b) = (Async::new(a).unwrap(), Async::new(b).unwrap());
            started.send(()).unwrap();
            let start = std::time::Instant::now();
            let (mut byte_a, mut byte_b) = ([0u8; 1], [0u8; 1]);
            // Each socket holds one byte at every round's start.
            wa.write_all(&[1]).unwrap();
            wb.write_all(&[2]).unwrap();
            while !flag.load(Ordering::SeqCst) {
                if given_up(start) {
                    return false;
                }
                let mut read_a = std::pin::pin!(a.read(&mut byte_a));
                let mut read_b = std::pin::pin!(b.read(&mut byte_b));
                let from_a = std::future::poll_fn(|cx| match read_a.as_mut().poll(cx) {
                    Poll::Ready(r) => Poll::Ready((true, r)),
                    Poll::Pending => read_b.as_mut().poll(cx).map(|r| (false, r)),
                })
                .await;
                assert_eq!(from_a.1.unwrap(), 1);
                if from_a.0 { &mut wa } else { &mut wb }
                    .write_all(&[3])
                    .unwrap();
            }
            true
        },
        |rt, flag| rt.spawn_async(async move { flag.store(true, Ordering::SeqCst) }),
    );
    assert!(
        stopped,
        "a select loop over always-ready sockets kept its only worker"
    );
}

#[test]
fn a_join_polled_in_order_lets_its_last_future_read_while_the_others_are_always_ready() {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use umt_rt::async_io::Async;
    // `join` as `futures::join!` and `std::future::join!` poll: every future, in order. The
    // first four read sockets that always have a byte, so they spend every turn; the last
    // has one byte waiting: a spent turn still lets each other socket read once per poll.
    const BUSY: usize = 4;
    let _serial = serial();
    let rt = one_core_unmonitored();
    let read_last = rt.spawn_async(async move {
        let last_done = AtomicBool::new(false);
        let start = std::time::Instant::now();
        let pairs: Vec<_> = (0..=BUSY)
            .map(|_| {
                let (mut w, r) = UnixStream::pair().unwrap();
                w.write_all(&[1]).unwrap();
                (w, Async::new(r).unwrap())
            })
            .collect();
        let (last_pair, busy_pairs) = pairs.split_last().unwrap();
        let mut futures: Vec<std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>>> = busy_pairs
            .iter()
            .map(|(w, r)| {
                let last_done = &last_done;
                Box::pin(async move {
                    let mut byte = [0u8; 1];
                    while !last_done.load(Ordering::SeqCst) && !given_up(start) {
                        r.read(&mut byte).await.unwrap();
                        (&*w).write_all(&[1]).unwrap();
                    }
                }) as std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>>
            })
            .collect();
        futures.push(Box::pin(async {
            let mut byte = [0u8; 1];
            last_pair.1.read(&mut byte).await.unwrap();
            last_done.store(true, Ordering::SeqCst);
        }));
        let mut done = vec![false; futures.len()];
        std::future::poll_fn(|cx| {
            for (f, d) in futures.iter_mut().zip(done.iter_mut()) {
                *d = *d || f.as_mut().poll(cx).is_ready();
            }
            if done.iter().all(|d| *d) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        !given_up(start)
    });
    assert!(
        read_last.join(),
        "the last future's ready read was refused on every poll"
    );
}

#[test]
fn a_poll_that_computes_past_its_turn_before_its_first_read_still_reads() {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use umt_rt::async_io::Async;
    let _serial = serial();
    let rt = one_core_unmonitored();
    let (mut a, b) = UnixStream::pair().unwrap();
    a.write_all(&[5]).unwrap();
    let b = Async::new(b).unwrap();
    // Each poll computes for longer than a turn (C2 of `coop.rs`: 50 us) before its first
    // operation, a read of a byte already there: that operation tries, however long the
    // poll ran before it, so the first poll reads it. Bounded, so that a read that yields
    // every time fails the test instead of hanging it.
    let polls = rt
        .spawn_async(async move {
            let mut polls = 0u32;
            std::future::poll_fn(|cx| {
                polls += 1;
                let start = std::time::Instant::now();
                while start.elapsed() < std::time::Duration::from_micros(200) {
                    std::hint::spin_loop();
                }
                let mut byte = [0u8; 1];
                let read = std::pin::pin!(b.read(&mut byte)).poll(cx);
                match read {
                    Poll::Ready(r) => {
                        assert_eq!((r.unwrap(), byte), (1, [5]));
                        Poll::Ready(Some(polls))
                    }
                    Poll::Pending if polls >= 1000 => Poll::Ready(None),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await
        })
        .join();
    assert_eq!(
        polls,
        Some(1),
        "the read waited behind a turn spent before it"
    );
}

#[test]
fn two_futures_waiting_on_one_descriptor_are_both_woken() {
    use std::time::Duration;
    use umt_rt::async_io::Async;
    let _serial = serial();
    let rt = Runtime::builder()
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    let reader = Arc::new(Async::new(reader).unwrap());
    let (waiting_tx, waiting_rx) = mpsc::channel();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let (reader, waiting_tx) = (reader.clone(), waiting_tx.clone());
            rt.spawn_async(async move {
                let _ = waiting_tx.send(());
                umt_rt::time::timeout(Duration::from_secs(30), reader.readable()).await
            })
        })
        .collect();
    waiting_rx.recv().unwrap();
    waiting_rx.recv().unwrap();
    std::io::Write::write_all(&mut &writer, &[1]).unwrap();
    for w in waiters {
        assert!(matches!(w.join(), Ok(Ok(()))), "a waiter was not woken");
    }
}

#[test]
fn readable_waits_again_once_the_data_is_gone() {
    use umt_rt::async_io::Async;
    let _serial = serial();
    let (reader, writer) = std::io::pipe().unwrap();
    let reader = Async::new(reader).unwrap();
    std::io::Write::write_all(&mut &writer, &[5]).unwrap();
    umt_rt::block_on(reader.readable()).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        std::io::Read::read(&mut reader.get_ref(), &mut byte).unwrap(),
        1
    );
    // Nothing left: a second `readable` waits instead of returning at once (a loop of
    // `readable` and a read of its own would spin otherwise).
    let mut again = std::pin::pin!(reader.readable());
    let mut cx = Context::from_waker(Waker::noop());
    assert!(again.as_mut().poll(&mut cx).is_pending());
    std::io::Write::write_all(&mut &writer, &[6]).unwrap();
    umt_rt::block_on(again).unwrap();
}

/// A waker that counts its wakes.
#[derive(Default)]
struct CountWakes(AtomicUsize);

impl std::task::Wake for CountWakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// R11 of `async_io`: a readiness wait given up (dropped before its event) leaves no waker in
/// its source, a wait polled again with another waker keeps one entry, and a wait still
/// pending is woken by the next event. Polled by hand, outside any runtime (found by a
/// review: each dropped wait's waker stayed until the socket's next event).
#[test]
fn a_readiness_wait_given_up_leaves_no_waker_behind() {
    use std::io::Write;
    use umt_rt::async_io::Async;
    let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
    let a = Async::new(a).unwrap();
    let mut buf = [0u8; 1];
    let given_up: Vec<Arc<CountWakes>> = (0..1000).map(|_| Arc::default()).collect();
    for w in &given_up {
        let waker = Waker::from(w.clone());
        let mut fut = std::pin::pin!(a.read(&mut buf));
        assert!(
            fut.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
    }
    let kept = given_up.iter().filter(|w| Arc::strong_count(w) > 1).count();
    assert_eq!(kept, 0, "{kept} wakers of dropped waits still held");
    // One wait polled with many wakers in turn holds only the last.
    let mut waiting = Box::pin(a.read(&mut buf));
    let polled_with: Vec<Arc<CountWakes>> = (0..100).map(|_| Arc::default()).collect();
    for w in &polled_with {
        let waker = Waker::from(w.clone());
        assert!(
            waiting
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
    }
    let held = polled_with
        .iter()
        .filter(|w| Arc::strong_count(w) > 1)
        .count();
    assert_eq!(held, 1, "a wait polled 100 times holds {held} wakers");
    let last = polled_with.last().unwrap();
    assert!(
        Arc::strong_count(last) > 1,
        "the last waker is the one kept"
    );
    // The event wakes it (the reactor thread takes it).
    b.write_all(b"x").unwrap();
    let start = std::time::Instant::now();
    while last.0.load(Ordering::SeqCst) == 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the event never woke the wait"
        );
        std::thread::yield_now();
    }
    let waker = Waker::from(last.clone());
    assert!(matches!(
        waiting.as_mut().poll(&mut Context::from_waker(&waker)),
        Poll::Ready(Ok(1))
    ));
    drop(waiting);
    assert_eq!(buf, *b"x");
    assert!(given_up.iter().all(|w| w.0.load(Ordering::SeqCst) == 0));
}

/// Waits until `value`'s receiver has polled and waits (its waker is kept): an event, not a
/// time.
fn wait_until_received_waits(value: &OneShot) {
    while value.0.lock().unwrap().1.is_none() {
        std::thread::yield_now();
    }
}

/// N1–N4 of `src/README.md`: a future woken by the future a worker polls waits in that
/// worker's next slot. When the waker then blocks in the kernel inside the same poll, a spare
/// of the core takes it from there: the leader counts the slot as its core's work. One
/// core, whose one worker is in A's read: only a spare can run B.
#[test]
fn a_future_woken_by_a_poll_that_then_blocks_runs_on_a_spare() {
    use std::io::{Read, Write};
    let _serial = serial();
    let Some(rt) = one_core_monitored() else {
        return;
    };
    let (mut reader, mut writer) = std::io::pipe().unwrap();
    let mut rescue = writer.try_clone().unwrap();
    let value = OneShot::default();
    let b = rt.spawn_async({
        let value = value.clone();
        async move {
            let v = value.recv().await;
            writer.write_all(&[v as u8]).unwrap();
            umt_sys::cpu::current_tid()
        }
    });
    wait_until_received_waits(&value);
    let a = rt.spawn_async(async move {
        // B goes to this worker's next slot; this worker then blocks until B has run.
        value.send(7);
        let mut byte = [0u8; 1];
        reader.read_exact(&mut byte).unwrap();
        (byte[0], umt_sys::cpu::current_tid())
    });
    let (done_tx, done_rx) = mpsc::channel();
    let joiner = std::thread::spawn(move || done_tx.send((b.join(), a.join())).unwrap());
    let Ok((b_tid, (byte, a_tid))) = done_rx.recv_timeout(std::time::Duration::from_secs(60))
    else {
        // Let A end, so that the runtime's drop returns, then fail.
        rescue.write_all(&[0]).unwrap();
        panic!("B stayed in the next slot of A's worker while A blocked");
    };
    joiner.join().unwrap();
    assert_eq!(byte, 7);
    assert_ne!(b_tid, a_tid, "B ran on a spare of the core while A blocked");
}

/// Two cores of the process, monitor off (no spare can take over), or `None` (skipped, said).
fn two_cores_unmonitored() -> Option<Runtime> {
    let rt = Runtime::builder()
        .cores(common::two_cpus()?)
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap();
    Some(rt)
}

/// Future B of the next slot's tests, spawned on `rt` and waiting for the value: the value's
/// sender, the flag B sets once it ran, and B's handle.
fn b_waiting(rt: &Runtime) -> (OneShot, Arc<AtomicBool>, umt_rt::JoinHandle<()>) {
    let value = OneShot::default();
    let ran = Arc::new(AtomicBool::new(false));
    let b = rt.spawn_async({
        let (value, ran) = (value.clone(), ran.clone());
        async move {
            value.recv().await;
            ran.store(true, Ordering::SeqCst);
        }
    });
    wait_until_received_waits(&value);
    (value, ran, b)
}

/// One round of the next slot's liveness tests: future A (spawned after B waits) wakes the
/// other worker with a closure, computes for `compute`, wakes B (which goes to A's worker's
/// next slot) and spins until B ran. Returns whether B ran: 30 s is a fail-safe, not a
/// measure (B runs within milliseconds once taken).
fn a_wakes_b_then_spins_until_it_ran(rt: &Runtime, compute: std::time::Duration) -> bool {
    let (value, ran, b) = b_waiting(rt);
    let a = rt.spawn_async(async move {
        let _other = umt_rt::spawn(|| ());
        let until = std::time::Instant::now() + compute;
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        value.send(1);
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !ran.load(Ordering::SeqCst) {
            if std::time::Instant::now() > give_up {
                return false;
            }
            std::hint::spin_loop();
        }
        true
    });
    let ran = a.join();
    b.join();
    ran
}

/// N3 of `src/README.md`: a future woken by a poll that runs on for long is taken from its
/// waker's next slot by a worker of another core once it has waited there a while, with the
/// I/O driver installed first, so that an idle worker would wait in it after a few rounds
/// (a first version left B there for ever once it was).
#[test]
fn a_future_woken_by_a_poll_that_runs_on_is_taken_by_another_core() {
    let _serial = serial();
    // A Unix socket: a test guest may have no IPv4.
    let _driver =
        umt_rt::async_io::Async::new(std::os::unix::net::UnixDatagram::unbound().unwrap()).unwrap();
    let Some(rt) = two_cores_unmonitored() else {
        return;
    };
    for round in 0..20 {
        assert!(
            a_wakes_b_then_spins_until_it_ran(&rt, std::time::Duration::ZERO),
            "round {round}: B stayed in the next slot of A's worker while A ran"
        );
    }
}

/// N3 of `src/README.md`: another core's worker that saw a woken future young in its last
/// look before it parked, or looked just before the put, looks again soon (found in review:
/// it parked for good, and B waited for the end of A, which waited for B; 34-38 rounds of
/// 3 000 stranded B). A computes for a time that varies from round to round, so that the
/// other worker's spinning ends at every point of A's.
#[test]
fn a_future_woken_while_another_core_stops_spinning_is_not_left_to_wait() {
    let _serial = serial();
    let Some(rt) = two_cores_unmonitored() else {
        return;
    };
    let mut seed = 0x1234_5678_9abc_def0u64;
    for round in 0..3000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let compute = std::time::Duration::from_nanos(seed % 300_000);
        assert!(
            a_wakes_b_then_spins_until_it_ran(&rt, compute),
            "round {round}: B stayed in the next slot of A's worker"
        );
    }
}

/// N3 of `src/README.md`, with a monitor: while every other core's worker is blocked in the
/// kernel, no core is idle for the put to wake; that core's leader counts another core's
/// next job as its work once it has seen it wait (found in review: it did not, and B waited
/// for the end of A, which waited for B). Core 0's call blocks in a pipe read; core 1's call
/// (A) wakes B, then spins until B ran, then lets core 0's read end.
#[test]
fn a_future_woken_beside_a_core_whose_worker_blocked_runs_on_that_core() {
    use std::io::{Read, Write};
    let _serial = serial();
    let Some(cpus) = common::two_cpus() else {
        return;
    };
    let rt = Runtime::builder()
        .cores(cpus)
        .monitor(monitored_backend())
        .build()
        .unwrap();
    if common::skip_unmonitored(&rt) {
        return;
    }
    for round in 0..5 {
        let (reader, writer) = std::io::pipe().unwrap();
        let (reader, writer) = (Mutex::new(reader), Mutex::new(writer));
        let reader_tid = std::sync::atomic::AtomicI32::new(0);
        let (value, ran, b) = b_waiting(&rt);
        let outcome = rt.broadcast(|ctx| {
            if ctx.index() == 0 {
                reader_tid.store(umt_sys::cpu::current_tid(), Ordering::SeqCst);
                let mut byte = [0u8; 1];
                reader.lock().unwrap().read_exact(&mut byte).unwrap();
                return true;
            }
            // A: once core 0's worker sleeps in its read, wake B and wait for it.
            let tid = loop {
                match reader_tid.load(Ordering::SeqCst) {
                    0 => std::hint::spin_loop(),
                    tid => break tid,
                }
            };
            // Where `/proc` cannot say, A goes on after a while (the test then may not see
            // the block first, and still passes or fails on B).
            let look_until = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while common::thread_syscall(tid).is_none() && std::time::Instant::now() < look_until {
                std::hint::spin_loop();
            }
            value.send(1);
            // A fail-safe, not a measure: B runs within milliseconds once taken.
            let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !ran.load(Ordering::SeqCst) && std::time::Instant::now() < give_up {
                std::hint::spin_loop();
            }
            writer.lock().unwrap().write_all(&[0]).unwrap();
            ran.load(Ordering::SeqCst)
        });
        assert!(
            outcome[1],
            "round {round}: B stayed in the next slot of A's worker while core 0's blocked"
        );
        b.join();
    }
}
