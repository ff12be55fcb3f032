//! Latches: one-shot "done" flags with a known waiter to wake.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Thread;

use crate::registry::Registry;
use crate::worker::with_current;

/// Something a waiting thread polls: `true` once the awaited work is complete.
pub(crate) trait Probe {
    fn probe(&self) -> bool;
}

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
}

impl Probe for Latch {
    fn probe(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }
}

/// The latch of a `join`'s second closure. Only workers of the joiner's runtime run that job
/// (it sits in the joiner's deque), so the setter wakes the joiner through its own registry:
/// creating the latch touches no reference count, and dropping it is free.
#[derive(Debug)]
pub(crate) struct JoinLatch {
    set: AtomicBool,
    /// Slot index of the joining worker.
    owner: usize,
}

impl JoinLatch {
    pub(crate) fn new(owner: usize) -> Self {
        JoinLatch {
            set: AtomicBool::new(false),
            owner,
        }
    }

    /// Marks the latch set and wakes the joiner, unless the joiner set it itself. The joiner
    /// may free the latch as soon as it sees the flag: only a copy of `owner` is used after.
    pub(crate) fn set(&self) {
        let owner = self.owner;
        self.set.store(true, Ordering::Release);
        with_current(|ctx| {
            if let Some(ctx) = ctx
                && ctx.index() != owner
            {
                ctx.registry().notify(owner);
            }
        })
    }
}

impl Probe for JoinLatch {
    #[inline]
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
    with_current(|ctx| match ctx {
        Some(ctx) => ctx.wait_until(probe),
        None => {
            while !probe.probe() {
                std::thread::park();
            }
        }
    })
}
