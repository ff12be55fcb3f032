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
pub(crate) fn lock<T>(m: &Mutex<T>) -> Counted<MutexGuard<'_, T>> {
    let held = Held::new();
    #[cfg(loom)]
    let guard = m.lock().unwrap();
    #[cfg(not(loom))]
    let guard = m.lock().unwrap_or_else(|p| p.into_inner());
    Counted { guard, _held: held }
}

/// [`lock`] for a std mutex outside the loom model (the features' locks: a task's result, a
/// scope's dependences, a loop's state, a source's readiness): counted the same way.
pub(crate) fn lock_std<T>(m: &std::sync::Mutex<T>) -> Counted<std::sync::MutexGuard<'_, T>> {
    let held = Held::new();
    let guard = m.lock().unwrap_or_else(|p| p.into_inner());
    Counted { guard, _held: held }
}

/// A mutex guard from [`lock`] or [`lock_std`]; the thread holds a runtime lock while it
/// lives.
pub(crate) struct Counted<G> {
    guard: G,
    _held: Held,
}

impl<G: std::ops::Deref> std::ops::Deref for Counted<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: std::ops::DerefMut> std::ops::DerefMut for Counted<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

#[cfg(not(loom))]
thread_local! {
    /// Runtime locks the thread holds or waits for (a const thread-local without a
    /// destructor: a signal handler may read it).
    static HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// One runtime lock held (or waited for) by the calling thread, from its creation to its drop
/// (or a step that must not be interrupted for long: a push onto a shared queue, whose
/// readers wait for it by spinning). [`lock`] and [`lock_std`] make one; a lock whose guard
/// must stay plain (a condition variable's) makes one before it locks. Not `Send`: it counts
/// for the thread that made it.
pub(crate) struct Held(std::marker::PhantomData<*const ()>);

impl Held {
    pub(crate) fn new() -> Held {
        #[cfg(not(loom))]
        HELD.with(|h| h.set(h.get() + 1));
        Held(std::marker::PhantomData)
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
