//! A unit of work in the queues: a type-erased pointer and the function that runs it.
//!
//! Two kinds. A *boxed* job owns its closure on the heap (spawns). A *stack* job points to a
//! [`StackJob`] in the frame of a `join` that waits for it, which saves an allocation per join.

use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::latch::JoinLatch;

/// A job in a queue.
pub(crate) struct Job {
    data: *const (),
    execute: unsafe fn(*const ()),
}

// SAFETY: jobs are only built from `Send` closures (every constructor requires `F: Send`), so
// moving a job to another thread moves a `Send` closure, or a pointer to a `StackJob` of one,
// whose frame stays alive until the job has run.
unsafe impl Send for Job {}

impl Job {
    /// A job that borrows nothing.
    pub(crate) fn new(f: impl FnOnce() + Send + 'static) -> Job {
        // SAFETY: `'static` closures borrow nothing that could end.
        unsafe { Job::new_scoped(f) }
    }

    /// A boxed job that may borrow from the caller's stack for `'a`.
    ///
    /// # Safety
    /// The caller must not let `'a` end (return, or unwind past the borrowed frames) before the
    /// job has finished running. Scopes and `install` guarantee that by waiting on a latch the
    /// job sets as its last action.
    pub(crate) unsafe fn new_scoped<'a, F: FnOnce() + Send + 'a>(f: F) -> Job {
        unsafe fn execute<F: FnOnce()>(data: *const ()) {
            // SAFETY: `data` came from `Box::into_raw` of a `Box<F>` in `new_scoped`, and each
            // job runs exactly once.
            let f = unsafe { Box::from_raw(data as *mut F) };
            f()
        }
        Job {
            data: Box::into_raw(Box::new(f)) as *const (),
            execute: execute::<F>,
        }
    }

    /// Whether this job runs `target` in place (see [`StackJob::as_job`]): how `join` recognises
    /// its own job when it pops it back. A boxed job's data is on the heap, never equal.
    #[inline]
    pub(crate) fn is<T>(&self, target: &T) -> bool {
        std::ptr::eq(self.data, target as *const T as *const ())
    }

    /// Runs the job. Every job this crate builds catches its own panics.
    pub(crate) fn run(self) {
        // SAFETY: `execute` matches `data` (both set by one constructor), and `run` takes the
        // job by value, so it runs once.
        unsafe { (self.execute)(self.data) }
    }
}

/// The second closure of a `join`, waiting in the joining frame: run by a thief as a job, which
/// stores the result and sets the latch, or by the joiner itself, inline, when it pops the job
/// back (no latch, no result slot: the common case costs a push and a pop).
pub(crate) struct StackJob<F, R> {
    f: UnsafeCell<Option<F>>,
    result: UnsafeCell<Option<std::thread::Result<R>>>,
    latch: JoinLatch,
}

impl<F: FnOnce() -> R + Send, R: Send> StackJob<F, R> {
    pub(crate) fn new(f: F, latch: JoinLatch) -> Self {
        StackJob {
            f: UnsafeCell::new(Some(f)),
            result: UnsafeCell::new(None),
            latch,
        }
    }

    /// Set once a job run finished (never by [`StackJob::run_inline`]).
    pub(crate) fn latch(&self) -> &JoinLatch {
        &self.latch
    }

    /// A job that runs the closure in place (see [`Job::is`]).
    ///
    /// # Safety
    /// `self` must not move or be dropped while the job is queued or running: the caller waits
    /// for the latch, which the job sets as its last action, unless it pops the job back
    /// itself. The job must be run at most once.
    pub(crate) unsafe fn as_job(&self) -> Job {
        unsafe fn execute<F: FnOnce() -> R, R>(data: *const ()) {
            // SAFETY: `data` points to a live `StackJob<F, R>` (contract of `as_job`), and only
            // this one run touches its cells until the latch is set.
            let this = unsafe { &*(data as *const StackJob<F, R>) };
            // SAFETY: as above; the joiner reads `result` only after seeing the latch set.
            unsafe {
                if let Some(f) = (*this.f.get()).take() {
                    *this.result.get() = Some(catch_unwind(AssertUnwindSafe(f)));
                }
            }
            this.latch.set();
        }
        Job {
            data: self as *const Self as *const (),
            execute: execute::<F, R>,
        }
    }

    /// Runs the closure on the calling thread, catching a panic; `None` if a job run took it.
    ///
    /// # Safety
    /// The job of [`StackJob::as_job`] must not be queued or running: the caller popped it back
    /// (and drops it unrun) or never queued it.
    pub(crate) unsafe fn run_inline(&self) -> Option<std::thread::Result<R>> {
        // SAFETY: no job run can touch the cell (contract above), and only the joiner's thread
        // calls this.
        let f = unsafe { (*self.f.get()).take() }?;
        Some(catch_unwind(AssertUnwindSafe(f)))
    }

    /// The result a job run stored; call after seeing the latch set.
    pub(crate) fn into_result(self) -> Option<std::thread::Result<R>> {
        self.result.into_inner()
    }
}
