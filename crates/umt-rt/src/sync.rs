//! The synchronisation primitives of the scheduler core, swapped for loom's under `cfg(loom)`
//! so the park / unpark / surrender protocol can be model-checked (`pool.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread::{Thread, ThreadId, park, yield_now};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread::{Thread, ThreadId, park, yield_now};

/// Locks a mutex. The scheduler's mutexes guard plain counters and lists, updated in single
/// steps, so the data is consistent even if a holder panicked.
///
/// While the guard lives (and while the thread waits for the lock), the thread counts as
/// holding a runtime lock ([`holds_runtime_lock`]): a worker does not step aside then (H3 of
/// the directed handoff), since whoever needs the lock would wait for its resume.
pub(crate) fn lock<T>(m: &Mutex<T>) -> Locked<'_, T> {
    let held = Held::new();
    #[cfg(loom)]
    let guard = m.lock().unwrap();
    #[cfg(not(loom))]
    let guard = m.lock().unwrap_or_else(|p| p.into_inner());
    Locked { guard, _held: held }
}

/// A mutex guard from [`lock`]; the thread holds a runtime lock while it lives.
pub(crate) struct Locked<'a, T> {
    guard: MutexGuard<'a, T>,
    _held: Held,
}

impl<T> std::ops::Deref for Locked<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(not(loom))]
thread_local! {
    /// Runtime locks the thread holds or waits for (a const thread-local without a
    /// destructor: a signal handler may read it).
    static HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// One runtime lock held (or waited for) by the calling thread, from its creation to its drop.
/// [`lock`] makes one; a runtime lock taken otherwise (a std mutex outside the loom model)
/// makes one before it locks.
pub(crate) struct Held;

impl Held {
    pub(crate) fn new() -> Held {
        #[cfg(not(loom))]
        HELD.with(|h| h.set(h.get() + 1));
        Held
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        #[cfg(not(loom))]
        HELD.with(|h| h.set(h.get().saturating_sub(1)));
    }
}

/// Whether the calling thread holds or waits for a lock taken with [`lock`].
/// Async-signal-safe (one thread-local load).
pub(crate) fn holds_runtime_lock() -> bool {
    #[cfg(not(loom))]
    {
        HELD.with(std::cell::Cell::get) > 0
    }
    #[cfg(loom)]
    {
        false
    }
}

/// The calling thread's id, to tell a notifier from the thread it notifies.
pub(crate) fn current_thread_id() -> ThreadId {
    #[cfg(loom)]
    {
        loom::thread::current().id()
    }
    #[cfg(not(loom))]
    {
        std::thread::current().id()
    }
}
