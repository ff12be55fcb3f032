//! Idle workers wait for I/O events themselves: the turn to drive the process's I/O driver.
//!
//! The driver is a feature above the core (`async_io.rs`'s epoll reactor), which installs
//! itself here when it starts; the core only sees this trait. Without it, a request that
//! arrives on a socket costs two wake-ups before its handler runs: the reactor thread's, then
//! the worker's it queues the task for. With it, an idle worker that parks waits in the
//! reactor's epoll set instead of on its own futex, so the event wakes the worker that runs
//! the handler (tokio's workers do the same). One worker at a time holds the *turn*; the
//! others park as before; the reactor thread stays in the set throughout and covers the
//! events that come while no idle worker waits (every worker busy, or blocked in the kernel).
//!
//! Steps (a worker's side in `pool.rs`, `Notifier::wait_or_drive`; the driver's in
//! `async_io.rs`, R5–R8):
//!
//! 0. **D0 — go to the driver soon.** A worker that found no work spins and yields for a
//!    while before it parks (`WorkerCtx::spin_for_work`), to catch work without a wake-up.
//!    One that would take the turn (it is its core's last active worker, and
//!    [`Driver::is_free`] says nobody holds it) and waits for no latch of its own (a latch is
//!    set by another thread, often soon) spins only a few short rounds and parks: new
//!    work reaches it in the driver (events, or a kick for a push), and while it spun no
//!    worker waited in the set, so requests that came meanwhile went through the reactor
//!    thread, one wake-up more. (`serve --rate 6000 --cold-files 0`, no blocking: p50 92-94
//!    us before, 50-73 after, tokio 54-59.) The look is a hint: a turn taken meanwhile only
//!    sends the worker to its futex, as before.
//! 1. **D1 — take the turn.** A worker about to park (S4 of `README.md`), the last active one
//!    of its core (so that events wake a thread whose CPU is free), asks
//!    [`Driver::try_take`]. If another worker holds the turn, it parks on its futex as before.
//! 2. **D2 — announce.** It sets its notifier's `driving` flag, then reads `notified`; both
//!    sequentially consistent.
//! 3. **D3 — wait.** Unless notified (or its `stop` holds), it waits in the driver
//!    ([`Driver::wait`]) for events or a kick. Events are taken (their sources marked ready,
//!    their wakers collected in the worker's thread), not woken yet.
//! 4. **D4 — a notification while driving.** `Notifier::notify` sets `notified`, then reads
//!    `driving`, and if it is set (and it is not the owner itself) calls [`Driver::kick`],
//!    which makes the driver's current or next wait return (an eventfd in the set,
//!    edge-triggered: one waiter wakes per kick, and a kick no waiter took stays ready for
//!    the next wait).
//! 5. **D5 — give the turn back.** On events, a notification or `stop`, the worker clears
//!    `driving` and calls [`Driver::release`]; then it leaves the pool as a woken worker does.
//! 6. **D6 — dispatch.** Once active again, the worker wakes the collected wakers
//!    ([`Driver::dispatch`]): a task of its own runtime goes to its next slot (N1 of
//!    `README.md`; the one it displaces to its deque), and it runs it next, with no other
//!    thread in between. The first wakes no idle core (a core woken
//!    for it would only race this worker to it, and spin when it lost), unless the worker
//!    slept waiting for a latch of its own, to which it goes back; further ones do, as any
//!    push. No push makes a scheduling point meanwhile, so the worker cannot surrender with
//!    wakers still in its hands.
//! 7. **D7 — a busy look.** Between two jobs, a worker with no work at hand (its own deque
//!    and the queue of woken futures are empty: it is about to look for work elsewhere), or
//!    whose last look is 50 us old, takes the turn if nobody holds it, takes the events that
//!    came without waiting ([`Driver::look`]), gives the turn back, and wakes their futures
//!    onto the runtime's queue of woken futures, in their events' order, waking idle cores
//!    for them. Workers take from that queue one future at a
//!    time, first woken first polled, and every 61st job of a worker's main loop comes from
//!    it before its own deque (tokio's workers look at their global queue as often), so a
//!    worker whose deque never empties still serves them. While workers look,
//!    the reactor thread stays out of the set (R9 of `async_io.rs`), so under load an event
//!    costs no thread a wake-up: it waits for the next look. A leader whose core has no ready
//!    worker and nothing queued ends that stand-by ([`Driver::end_standby`], L3 in
//!    `leader.rs`), so that the events of futures a spare would run reach the queue while
//!    every worker of the core is blocked in the kernel. The leader does not look itself: at
//!    `SCHED_IDLE`, preempted by the worker its first wake-up woke, it held the other futures
//!    for milliseconds (found in review). Looks also happen while a worker waits for a latch
//!    (its spin looks for work), as D6's dispatch does.
//!    (`serve --cold-files 0`, closed loop, 2 cores: the reactor thread woke 1.4 times per
//!    request before, and umt served 0.84-0.90x tokio's requests without blocking and
//!    1.92-1.97x with one request in 10 blocking; after, 0.96x and 2.09-2.13x.) Woken futures
//!    one at a time, not into the looker's deque (served newest first: under load the
//!    connections heard from last were served again and again before the others, p99 2.4x
//!    tokio's) nor in batches (a batch waits in one worker's deque while that worker runs, or
//!    blocks in, the first: p99 10-11 ms in the same runs, one at a time 3.3-3.9 ms, tokio's
//!    13).
//!
//! Races:
//! - **A notification between D1 and D3** (the lost wake-up): D2 and D4 are a Dekker pair,
//!   so either the worker sees `notified` and does not wait, or the notifier sees `driving`
//!   and kicks; the kick stays in the eventfd until read, so a wait that starts after it
//!   returns at once. Loom: `loom_tests::a_notification_reaches_a_driving_worker`.
//! - **The reactor thread gets the kick** (epoll wakes one waiter, the newest, and the
//!   reactor thread is the newest after each of its own wake-ups): it reads it, and if a
//!   worker holds the turn it writes it again, a new edge for that worker, then waits for the
//!   turn to be given back (R7). It reads before it looks at the turn: looking first, a kick
//!   written between the look and the read would be read by it and lost to the worker (found
//!   in review; a stall within a few hundred spawns with the window widened).
//! - **A `fork` child** shares the set and the eventfd: the driver refuses the turn in any
//!   process but the one that made it.
//! - **A kick that comes after the turn was given back** (the notifier read `driving` just
//!   before D5) stays in the eventfd: the next waiter (the reactor thread, or the next worker
//!   to drive) reads it and goes on. A stale kick costs one spurious wake-up, never a lost one.
//! - **A look beside a worker going to park**: the look holds the turn, so the parking worker
//!   (D1) finds it taken; it waits the look out (spinning, then yielding), and if the look
//!   lasts (its thread preempted) parks on its futex; the looker wakes an idle core for each
//!   future it queues, and any other new work notifies the parked worker as before. A look never takes a kick meant
//!   for a driving worker (that worker holds the turn); a stale kick it reads was a hint, the
//!   `notified` flag stays set. Loom:
//!   `loom_tests::a_busy_look_keeps_no_notification_from_a_parking_worker`.
//! - **Events while every worker is busy and none looks** (all blocked in the kernel, or in
//!   long jobs): they wait in the set until the reactor thread's stand-by ends (R9: a
//!   stand-by with no look, a driving worker's turn given back, or a leader whose core has
//!   nothing to run), and are never lost: an edge stays in epoll's ready list until a wait
//!   reports it. A future of this runtime could not run meanwhile anyway (no worker is free
//!   to); one of another executor (a `block_on` thread) waits that long.
//! - **Events seen by a worker whose wake was already in flight** (a waker took it out of the
//!   pool meanwhile): it ends that wake (`Pools::woken`) and dispatches them; the waker's
//!   notification stays for its next wait, which returns at once (a notification is a hint).
//!   Nothing is lost: the sources' ready flags were set under their locks.

// Its one driver, `async_io`'s reactor, is Linux's (epoll): elsewhere workers always park.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use std::sync::OnceLock;

/// What a driver's wait found ([`Driver::wait`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    /// Events, taken; the caller's [`Driver::dispatch`] wakes their futures.
    Events,
    /// Nothing to dispatch: a kick, a signal, or events that woke nobody.
    Nothing,
    /// The driver failed (said once, on the process's diagnostics): stop driving.
    #[cfg_attr(loom, allow(dead_code))] // the loom models' driver never fails
    Failed,
}

/// An I/O driver that idle workers may wait in, one at a time (see the module's docs).
pub(crate) trait Driver: Sync {
    /// D1: takes the turn; `false` while another thread holds it.
    fn try_take(&self) -> bool;
    /// Whether [`Driver::try_take`] would take the turn now: a hint, read without taking it
    /// (an idle worker that could drive stops spinning for work sooner, D0).
    fn is_free(&self) -> bool;
    /// D3: waits (turn held) until events come or [`Driver::kick`] is called, and takes the
    /// events into the calling thread's list.
    fn wait(&self) -> Waited;
    /// D5: gives the turn back.
    fn release(&self);
    /// D6: wakes what the calling thread's last waits took (any thread, no turn needed).
    fn dispatch(&self);
    /// D4: makes the current or the next [`Driver::wait`] return.
    fn kick(&self);
    /// D7: takes the turn if nobody holds it, takes the events that came without waiting
    /// (as [`Driver::wait`] does), and gives the turn back; `None` if the turn was held. The
    /// caller's [`Driver::dispatch`] wakes their futures.
    fn look(&self) -> Option<Waited>;
    /// D7: a leader's core has no ready worker and nothing queued: the driver's own thread, if
    /// it stands by while busy workers look, waits for events again (cheap when it does not).
    fn end_standby(&self);
}

/// The process's driver, once a feature started one.
static DRIVER: OnceLock<&'static dyn Driver> = OnceLock::new();

/// Makes `driver` the one idle workers wait in (the first call wins; a process has one).
pub(crate) fn install(driver: &'static dyn Driver) {
    let _ = DRIVER.set(driver);
}

/// The process's driver, if one was started.
pub(crate) fn installed() -> Option<&'static dyn Driver> {
    DRIVER.get().copied()
}
