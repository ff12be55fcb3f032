//! The synchronisation primitives of the scheduler core, swapped for loom's under `cfg(loom)`
//! so the park / unpark / surrender protocol can be model-checked (`pool.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread::{Thread, ThreadId, park, yield_now};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread::{Thread, ThreadId, park, yield_now};

/// Locks a mutex. The scheduler's mutexes guard plain counters and lists, updated in single
/// steps, so the data is consistent even if a holder panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(loom)]
    {
        m.lock().unwrap()
    }
    #[cfg(not(loom))]
    {
        m.lock().unwrap_or_else(|p| p.into_inner())
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
