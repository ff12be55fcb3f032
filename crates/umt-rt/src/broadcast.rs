//! `broadcast`: one call per core of a runtime, each on a worker of that core.
//!
//! Each call is a task in its core's inbox (`Registry::inboxes`), which only that core's
//! workers take from and nobody steals from; a core with no active worker gets one woken for
//! it. The caller waits as for a scope (a worker runs other tasks meanwhile, its own core's
//! call among them). The worker running a call is not lent to another core until it returns,
//! and does not give its core up at the call's start, which would put the call on its deque,
//! where other cores steal (M5 of `README.md`, "Lending"): the call stays on its core's CPU.
//! Except during the runtime's drop: any call still queued then goes to the shared queue and
//! is run by whichever worker is left (a core's workers may have left, or be the dropping
//! thread; "A job for a core at shutdown" in `README.md`).

use std::sync::Arc;

use crate::registry::Registry;
use crate::scope::run_scope;

/// What a [`broadcast`](crate::broadcast) call knows about where it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BroadcastContext {
    index: usize,
    num_threads: usize,
    cpu: crate::CpuId,
}

impl BroadcastContext {
    /// The context of the one call made on the calling thread when no runtime could start.
    pub(crate) fn here() -> Self {
        BroadcastContext {
            index: 0,
            num_threads: 1,
            cpu: umt_sys::cpu::current_cpu().unwrap_or(0),
        }
    }

    /// The core this call runs for: `0..num_threads()`, as
    /// [`current_thread_index`](crate::current_thread_index).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The number of calls: the runtime's cores.
    pub fn num_threads(&self) -> usize {
        self.num_threads
    }

    /// The CPU this call runs for, and on from its start to its end (a worker running a call
    /// is not lent to another core meanwhile); a call still queued while its runtime is being
    /// dropped may run on another core's worker.
    pub fn cpu(&self) -> crate::CpuId {
        self.cpu
    }
}

/// Calls `f` once per core of `reg`'s runtime, on a worker of that core, and returns the
/// results by core.
pub(crate) fn broadcast_on<F, R>(reg: &Arc<Registry>, f: F) -> Vec<R>
where
    F: Fn(BroadcastContext) -> R + Sync,
    R: Send,
{
    let cores = reg.cores();
    let mut results: Vec<Option<R>> = (0..cores).map(|_| None).collect();
    let f = &f;
    let scoped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_scope(Some(reg), |s| {
            for (core, slot) in results.iter_mut().enumerate() {
                let cpu = reg.config.cpus[core];
                // Not lent to another core while the call runs (M5 of `README.md`, "Lending").
                s.spawn_on_core(core, move |_| {
                    *slot = Some(crate::worker::on_own_core(reg, || {
                        f(BroadcastContext {
                            index: core,
                            num_threads: cores,
                            cpu,
                        })
                    }));
                });
            }
        })
    }));
    if let Err(panic) = scoped {
        // The other cores' results go before the panic: dropped while it unwinds, one whose
        // drop panics too would abort the process.
        for r in results {
            crate::diag::run_quietly(move || drop(r));
        }
        std::panic::resume_unwind(panic);
    }
    results
        .into_iter()
        .map(|r| r.expect("the scope ran every call (a panic would have been re-raised)"))
        .collect()
}

// `Runtime::broadcast`: once per core of this runtime.
impl crate::Runtime {
    /// Calls `f` once per core of this runtime, each on a worker of that core (see
    /// [`broadcast`](crate::broadcast)).
    pub fn broadcast<F, R>(&self, f: F) -> Vec<R>
    where
        F: Fn(crate::BroadcastContext) -> R + Sync,
        R: Send,
    {
        crate::broadcast::broadcast_on(self.registry(), f)
    }
}
