//! A unit of work in the queues: a type-erased pointer and the function that runs it.
//!
//! Two kinds. A *boxed* job owns its closure on the heap (spawns). A *stack* job points to a
//! [`StackJob`] in the frame of a `join` that waits for it, which saves an allocation per join.

use std::cell::UnsafeCell;

/// A job in a queue.
pub(crate) struct Job {
    data: *const (),
    execute: unsafe fn(*const ()),
    /// `join` recognises its own job by this when it pops it back; 0 for others.
    tag: usize,
}

// SAFETY: jobs are only built from `Send` closures (every constructor requires `F: Send`), so
// moving a job to another thread moves a `Send` closure, or a pointer to a `StackJob` of one,
// whose frame stays alive until the job has run.
unsafe impl Send for Job {}

impl Job {
    /// A job that borrows nothing.
    pub(crate) fn new(f: impl FnOnce() + Send + 'static) -> Job {
        // SAFETY: `'static` closures borrow nothing that could end.
        unsafe { Job::new_scoped(f, 0) }
    }

    /// A boxed job that may borrow from the caller's stack for `'a`.
    ///
    /// # Safety
    /// The caller must not let `'a` end (return, or unwind past the borrowed frames) before the
    /// job has finished running. Scopes and `install` guarantee that by waiting on a latch the
    /// job sets as its last action.
    pub(crate) unsafe fn new_scoped<'a, F: FnOnce() + Send + 'a>(f: F, tag: usize) -> Job {
        unsafe fn execute<F: FnOnce()>(data: *const ()) {
            // SAFETY: `data` came from `Box::into_raw` of a `Box<F>` in `new_scoped`, and each
            // job runs exactly once.
            let f = unsafe { Box::from_raw(data as *mut F) };
            f()
        }
        Job {
            data: Box::into_raw(Box::new(f)) as *const (),
            execute: execute::<F>,
            tag,
        }
    }

    pub(crate) fn tag(&self) -> usize {
        self.tag
    }

    /// Runs the job. Every job this crate builds catches its own panics.
    pub(crate) fn run(self) {
        // SAFETY: `execute` matches `data` (both set by one constructor), and `run` takes the
        // job by value, so it runs once.
        unsafe { (self.execute)(self.data) }
    }
}

/// A closure waiting in its creator's frame to be run as a job.
pub(crate) struct StackJob<F> {
    f: UnsafeCell<Option<F>>,
}

impl<F: FnOnce() + Send> StackJob<F> {
    pub(crate) fn new(f: F) -> Self {
        StackJob {
            f: UnsafeCell::new(Some(f)),
        }
    }

    /// A job that runs this closure in place.
    ///
    /// # Safety
    /// `self` must not move or be dropped until the job has finished running; the caller waits
    /// for a latch the closure sets as its last action. The job must be run at most once.
    pub(crate) unsafe fn as_job(&self, tag: usize) -> Job {
        unsafe fn execute<F: FnOnce()>(data: *const ()) {
            // SAFETY: `data` points to a live `StackJob<F>` (contract of `as_job`), and only
            // this one run touches its cell.
            let f = unsafe { (*(*(data as *const StackJob<F>)).f.get()).take() };
            if let Some(f) = f {
                f()
            }
        }
        Job {
            data: self as *const Self as *const (),
            execute: execute::<F>,
            tag,
        }
    }
}
