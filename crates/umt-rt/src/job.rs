//! A unit of work in the queues: a type-erased pointer and the function that runs it.
//!
//! Three kinds. A *boxed* job owns its closure on the heap (spawns). A *stack* job points to a
//! `StackJob` in the frame of a `join` that waits for it (see `join.rs`), which saves an
//! allocation per join. A *task* job is a counted reference to a future's task
//! (`async_task.rs`), which saves an allocation per wake. A job has no destructor: one that
//! never runs leaks what it owns.

/// A job in a queue.
pub(crate) struct Job {
    data: *const (),
    execute: unsafe fn(*const ()),
}

// SAFETY: a job is built from a `Send` closure (`new`, `new_scoped` require `F: Send`), a
// pointer to a `StackJob` of one, whose frame stays alive until the job has run, or (through
// `from_raw`, whose contract says so) a reference to a `Send + Sync` task; moving any of them
// to another thread is sound.
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

    /// A job that runs `execute(data)`: how `join` makes a stack job, and a future's task
    /// its job.
    ///
    /// # Safety
    /// `execute` must be sound to call once with `data`, on any thread, until the job runs:
    /// `data` points to a `Send` closure that outlives the job, or owns a reference to
    /// something `Send + Sync` that `execute` takes back.
    pub(crate) unsafe fn from_raw(data: *const (), execute: unsafe fn(*const ())) -> Job {
        Job { data, execute }
    }

    /// The job's two words, for a slot that stores them in atomics (`next.rs`); the job
    /// is rebuilt from them with [`Job::from_raw`].
    pub(crate) fn into_raw(self) -> (*const (), unsafe fn(*const ())) {
        (self.data, self.execute)
    }

    /// Whether this job runs `target` in place (see `join.rs`'s `StackJob`): how `join` recognises
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
