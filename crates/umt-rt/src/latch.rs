//! Latches: one-shot "done" flags with a known waiter to wake.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Thread;

use crate::registry::Registry;

/// Something a waiting thread polls: `true` once the awaited work is complete.
pub(crate) trait Probe {
    fn probe(&self) -> bool;
}

/// Who waits for a latch, and so must be woken when it is set.
#[derive(Debug, Clone)]
pub(crate) enum Waiter {
    /// A worker of a runtime, which sleeps through its notifier.
    Worker(Arc<Registry>, usize),
    /// A worker of the runtime whose workers set the latch (the `join` case: only workers of
    /// the same runtime run the job). Woken through the setter's registry, so creating the
    /// latch touches no shared reference count.
    SameRuntime(usize),
    /// A thread outside any runtime, which sleeps in `thread::park`.
    Thread(Thread),
}

impl Waiter {
    /// The waiter for the calling thread.
    pub(crate) fn current() -> Waiter {
        match crate::worker::WorkerCtx::current() {
            Some(ctx) => Waiter::Worker(ctx.registry().clone(), ctx.index()),
            None => Waiter::Thread(std::thread::current()),
        }
    }

    pub(crate) fn wake(&self) {
        match self {
            Waiter::Worker(reg, index) => reg.notify(*index),
            Waiter::SameRuntime(index) => {
                // The owner running its own job needs no wake-up.
                if let Some(ctx) = crate::worker::WorkerCtx::current()
                    && ctx.index() != *index
                {
                    ctx.registry().notify(*index);
                }
            }
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
}

impl Probe for Latch {
    fn probe(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }
}

/// Blocks the calling thread until `probe` is true. Workers run other tasks meanwhile; other
/// threads park (they must be the waiter the completing side wakes).
pub(crate) fn wait_until(probe: &dyn Probe) {
    if probe.probe() {
        return;
    }
    match crate::worker::WorkerCtx::current() {
        Some(ctx) => ctx.wait_until(probe),
        None => {
            while !probe.probe() {
                std::thread::park();
            }
        }
    }
}
