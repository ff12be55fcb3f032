//! Latches: one-shot "done" flags with a known waiter to wake, and how a thread waits for
//! a condition (a worker runs other tasks meanwhile, any other thread parks).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Thread;

use crate::registry::Registry;
use crate::worker::with_current;

/// Who waits for a latch, and so must be woken when it is set.
#[derive(Debug, Clone)]
pub(crate) enum Waiter {
    /// A worker of a runtime, which sleeps through its notifier.
    Worker(Arc<Registry>, usize),
    /// A thread outside any runtime, which sleeps in `thread::park`.
    Thread(Thread),
}

impl Waiter {
    /// The waiter for the calling thread.
    pub(crate) fn current() -> Waiter {
        with_current(|ctx| match ctx {
            Some(ctx) => Waiter::Worker(ctx.registry().clone(), ctx.index()),
            None => Waiter::Thread(std::thread::current()),
        })
    }

    pub(crate) fn wake(&self) {
        match self {
            Waiter::Worker(reg, index) => reg.notify(*index),
            Waiter::Thread(t) => t.unpark(),
        }
    }
}

/// Set once by the completing side; the waiter is woken when it is.
#[derive(Debug)]
pub(crate) struct Latch {
    set: AtomicBool,
    waiter: Waiter,
}

impl Latch {
    pub(crate) fn new(waiter: Waiter) -> Self {
        Latch {
            set: AtomicBool::new(false),
            waiter,
        }
    }

    /// Marks the latch set and wakes the waiter. The waiter may free the latch as soon as it
    /// sees the flag, so the waiter is cloned out first.
    pub(crate) fn set(&self) {
        let waiter = self.waiter.clone();
        self.set.store(true, Ordering::Release);
        waiter.wake();
    }

    /// Who waits, for a condition it waits for besides the latch (`Scope::wait`).
    pub(crate) fn waiter(&self) -> Waiter {
        self.waiter.clone()
    }

    /// Whether [`Latch::set`] was called.
    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Blocks the calling thread until the latch is set (see [`wait_until`]).
    pub(crate) fn wait(&self) {
        wait_until(&|| self.is_set());
    }
}

/// `block_on`'s wait (B1–B4 of `README.md`): until `done()` is true, a monitored worker parks
/// and another worker of its core runs the core's tasks
/// ([`crate::worker::WorkerCtx::wait_parked`]); other workers run tasks meanwhile, as
/// [`wait_until`]; other threads park.
pub(crate) fn wait_for_wake(done: &dyn Fn() -> bool) {
    if done() {
        return;
    }
    let parked = with_current(|ctx| {
        ctx.filter(|ctx| ctx.parks_in_block_on())
            .map(|ctx| ctx.wait_parked(done))
            .is_some()
    });
    if !parked {
        wait_until(done);
    }
}

/// Blocks the calling thread until `done()` is true. Workers run other tasks meanwhile; other
/// threads park, so whoever makes `done()` true must wake them (a [`Waiter`]).
pub(crate) fn wait_until(done: &dyn Fn() -> bool) {
    if done() {
        return;
    }
    with_current(|ctx| match ctx {
        Some(ctx) => ctx.wait_until(done),
        None => {
            while !done() {
                std::thread::park();
            }
        }
    })
}
