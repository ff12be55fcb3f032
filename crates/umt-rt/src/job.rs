//! A unit of work in the queues.

/// A boxed closure with an optional tag (`join` uses it to recognise its own job when it pops
/// it back).
pub(crate) struct Job {
    run: Box<dyn FnOnce() + Send + 'static>,
    tag: usize,
}

impl Job {
    /// A job that borrows nothing.
    pub(crate) fn new(f: impl FnOnce() + Send + 'static) -> Job {
        Job {
            run: Box::new(f),
            tag: 0,
        }
    }

    /// A job that may borrow from the caller's stack for `'a`.
    ///
    /// # Safety
    /// The caller must not let `'a` end (return, or unwind past the borrowed frames) before the
    /// job has finished running. Scopes, `join` and `install` guarantee that by waiting on a
    /// latch the job sets as its last action.
    pub(crate) unsafe fn new_scoped<'a>(f: impl FnOnce() + Send + 'a, tag: usize) -> Job {
        let run: Box<dyn FnOnce() + Send + 'a> = Box::new(f);
        // SAFETY: only the lifetime changes (same layout); the caller guarantees the borrows
        // outlive the job's execution, as documented above.
        let run = unsafe {
            std::mem::transmute::<Box<dyn FnOnce() + Send + 'a>, Box<dyn FnOnce() + Send + 'static>>(
                run,
            )
        };
        Job { run, tag }
    }

    pub(crate) fn tag(&self) -> usize {
        self.tag
    }

    /// Runs the job. Every job this crate builds catches its own panics.
    pub(crate) fn run(self) {
        (self.run)()
    }
}
