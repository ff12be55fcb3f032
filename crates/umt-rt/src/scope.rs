//! Scopes: spawn tasks that borrow from the enclosing stack, wait for all of them.

use std::any::Any;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::deps::{Access, DepNode, DepTable};
use crate::job::Job;
use crate::latch::{Latch, Waiter};
use crate::registry::Registry;
use crate::scope_count::{Completed, ScopeCount};
use crate::worker::with_current;

/// rayon's name for the scope of `scope_fifo`: here the same [`Scope`], whose
/// [`spawn_fifo`](Scope::spawn_fifo) queues first in, first out.
pub type ScopeFifo<'scope> = Scope<'scope>;

/// A scope in which tasks may borrow anything that outlives it. Created by
/// [`Runtime::scope`](crate::Runtime::scope) or [`scope`](crate::scope); it returns once every
/// task spawned in it has finished (the taskwait).
pub struct Scope<'scope> {
    /// Points into `run_scope`'s frame, which outlives every task of the scope (it waits for
    /// `pending` to reach zero): the same guarantee that lets tasks borrow for `'scope`. A
    /// pointer rather than an `Arc` spares every task a shared reference-count round trip.
    state: *const ScopeState,
    /// This is the handle the scope's body got (tasks get their own).
    body: bool,
    /// Invariant in `'scope`, as `std::thread::Scope`.
    _marker: PhantomData<&'scope mut &'scope ()>,
}

// SAFETY: a `Scope` only gives shared access to `ScopeState`, which is `Sync` (atomics, mutexes,
// and `Send + Sync` handles), and the pointee outlives every `Scope` (see the field).
unsafe impl Send for Scope<'_> {}
// SAFETY: as above.
unsafe impl Sync for Scope<'_> {}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("pending", &self.state().pending.count())
            .finish()
    }
}

struct ScopeState {
    /// Tasks not yet finished, plus one for the scope's body, and the mark of a body waiting
    /// in [`Scope::wait`].
    pending: ScopeCount,
    /// Set when `pending` reaches zero.
    latch: Latch,
    /// The thread that runs the body (the only one [`Scope::wait`] serves).
    body_thread: std::thread::ThreadId,
    /// The first panic of a task, re-raised by the scope.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Tasks cancelled because a task they depend on failed.
    cancelled: AtomicUsize,
    /// Set by [`Scope::cancel`]: tasks that have not started are dropped unrun.
    stopped: AtomicBool,
    /// Dataflow dependencies between this scope's tasks.
    deps: Mutex<DepTable>,
    /// The runtime the tasks run on; `None` runs each task on the spawning thread, at once.
    registry: Option<Arc<Registry>>,
}

impl ScopeState {
    fn complete_one(&self) {
        match self.pending.complete(|| self.latch.waiter()) {
            Completed::Last => self.latch.set(),
            // W2: only the body is left, and it waits for that; the waiter was cloned while
            // the state surely lived.
            Completed::WakeBody(waiter) => waiter.wake(),
            Completed::Other => {}
        }
    }

    fn store_panic(&self, p: Box<dyn Any + Send>) {
        let mut slot = crate::sync::lock_std(&self.panic);
        if slot.is_none() {
            *slot = Some(p);
        } else {
            // Only the first is re-raised; the others go, on whichever worker failed.
            drop(slot);
            crate::diag::drop_panic(p);
        }
    }

    /// Queues a ready job: on the current worker's deque when it belongs to this runtime,
    /// unless `fifo` (then on the runtime's shared queue, first in, first out).
    fn submit(&self, job: Job, fifo: bool) {
        let Some(registry) = &self.registry else {
            return job.run();
        };
        with_current(|ctx| match ctx {
            Some(ctx) if !fifo && Arc::ptr_eq(ctx.registry(), registry) => ctx.push(job),
            _ => registry.inject(job),
        })
    }
}

/// Runs `f` with a new scope on `registry` (or inline when `None`) and waits for its tasks.
pub(crate) fn run_scope<'scope, F, R>(registry: Option<&Arc<Registry>>, f: F) -> R
where
    F: FnOnce(&Scope<'scope>) -> R,
{
    let state = ScopeState {
        pending: ScopeCount::new(),
        latch: Latch::new(Waiter::current()),
        body_thread: std::thread::current().id(),
        panic: Mutex::new(None),
        cancelled: AtomicUsize::new(0),
        stopped: AtomicBool::new(false),
        deps: Mutex::new(DepTable::default()),
        registry: registry.cloned(),
    };
    let scope = Scope {
        state: &state,
        body: true,
        _marker: PhantomData,
    };
    let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    state.complete_one();
    // Even if the body panicked: tasks may borrow from frames the panic would unwind.
    state.latch.wait();
    let task_panic = crate::sync::lock_std(&state.panic).take();
    let cancelled = state.cancelled.load(Ordering::Acquire);
    if cancelled > 0 {
        crate::diag::emit(&format!(
            "a task panicked: {cancelled} tasks of its scope that depend on its data were \
             cancelled, not run; the scope re-raises the panic"
        ));
    }
    // The body's own panic first, then the first task's.
    // What is not re-raised goes first: dropped while the panic unwinds, a drop that
    // panics too would abort the process.
    match (result, task_panic) {
        (Err(p), later) => {
            if let Some(q) = later {
                crate::diag::drop_panic(q);
            }
            resume_unwind(p)
        }
        (Ok(r), Some(p)) => {
            crate::diag::run_quietly(move || drop(r));
            resume_unwind(p)
        }
        (Ok(r), None) => r,
    }
}

/// [`Scope::wait`] called from a task of the scope instead of its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "Scope::wait waits for the scope's tasks from its body only: a task waiting for its siblings \
     could wait for itself; open a scope inside the task for its own children"
)]
pub struct NotTheBody;

impl<'scope> Scope<'scope> {
    fn state(&self) -> &ScopeState {
        // SAFETY: the state lives in `run_scope`'s frame until every task has finished, and
        // every `Scope` is used only by the scope's body or its tasks (see the field).
        unsafe { &*self.state }
    }

    /// Waits until every task spawned in this scope so far has finished, and the tasks they
    /// spawned (the taskwait of the paper's runtime, mid-scope): the body's phases, one after
    /// the other, in one scope. A worker runs other tasks meanwhile. The first panic of a task
    /// is still re-raised when the scope ends.
    ///
    /// For the scope's body only: a task of the scope waiting for its siblings could wait for
    /// a frame below its own on the same stack, forever. A task that needs to wait for its own
    /// children opens a scope of its own for them ([`crate::scope`]); on a task's handle this
    /// returns [`NotTheBody`] at once.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// let done = AtomicUsize::new(0);
    /// umt_rt::scope(|s| {
    ///     for _ in 0..8 {
    ///         s.spawn(|_| {
    ///             done.fetch_add(1, Ordering::Relaxed);
    ///         });
    ///     }
    ///     s.wait().expect("called from the body");
    ///     assert_eq!(done.load(Ordering::Relaxed), 8); // phase one is over
    ///     s.spawn(|_| {
    ///         done.fetch_add(1, Ordering::Relaxed);
    ///     });
    /// });
    /// assert_eq!(done.into_inner(), 9);
    /// ```
    pub fn wait(&self) -> Result<(), NotTheBody> {
        let state = self.state();
        if !self.body || std::thread::current().id() != state.body_thread {
            return Err(NotTheBody);
        }
        // W1: the mark and the look are one operation, so the task that brings the count
        // down to the body's 1 sees the mark (W2 in `complete_one`) and wakes the body.
        if state.pending.mark() {
            return Ok(());
        }
        // W3 (`scope_count.rs`).
        crate::latch::wait_until(&|| state.pending.body_alone());
        Ok(())
    }

    /// Cancels the scope: every task of it that has not started, queued or spawned later, is
    /// dropped without running; running tasks go on, and may look at
    /// [`is_cancelled`](Scope::is_cancelled) to stop early. The scope still returns once its
    /// running tasks have finished. A scope opened inside a task is not cancelled with it
    /// (pass the flag on if it should be). Any task or the body may call it.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// let found = AtomicUsize::new(0);
    /// umt_rt::scope(|s| {
    ///     for i in 0..1000usize {
    ///         let found = &found;
    ///         s.spawn(move |s| {
    ///             if i == 10 {
    ///                 found.store(i, Ordering::Relaxed);
    ///                 s.cancel(); // the search is over: the rest need not run
    ///             }
    ///         });
    ///     }
    /// });
    /// assert_eq!(found.into_inner(), 10);
    /// ```
    pub fn cancel(&self) {
        self.state().stopped.store(true, Ordering::Release);
    }

    /// Whether [`cancel`](Scope::cancel) was called on this scope.
    pub fn is_cancelled(&self) -> bool {
        self.state().stopped.load(Ordering::Acquire)
    }

    /// Spawns a task into the scope. It may borrow anything that outlives the scope, and spawn
    /// more tasks through the `&Scope` it receives.
    ///
    /// The task is queued on the calling worker's deque: the caller goes on with what follows
    /// (the body, say) and the task starts when a worker takes it, another core's by
    /// stealing, or the caller once it is done. To overlap a blocking call with computation,
    /// start the blocking side first (spawn the computation, then block; or
    /// [`join`](crate::join) with the blocking side first): on one core a blocking task
    /// spawned before computation in the body runs only after it.
    pub fn spawn<F>(&self, f: F)
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        let job = self.make_job(f, None);
        self.state().submit(job, false);
    }

    /// [`spawn`](Scope::spawn) through the runtime's shared queue, first in, first out
    /// (rayon's `ScopeFifo::spawn_fifo`): on one worker the tasks start in the order they were
    /// spawned; on several, the workers take them one at a time in that order, so their
    /// starts interleave ([`Runtime::spawn_fifo`](crate::Runtime::spawn_fifo)).
    ///
    /// ```
    /// use std::sync::Mutex;
    ///
    /// let rt = umt_rt::Runtime::builder()
    ///     .num_threads(1)
    ///     .monitor(umt_rt::BackendKind::Disabled)
    ///     .build()
    ///     .unwrap();
    /// let order = Mutex::new(Vec::new());
    /// rt.install(|| {
    ///     umt_rt::scope_fifo(|s| {
    ///         for i in 0..5 {
    ///             let order = &order;
    ///             s.spawn_fifo(move |_| order.lock().unwrap().push(i));
    ///         }
    ///     })
    /// });
    /// assert_eq!(order.into_inner().unwrap(), [0, 1, 2, 3, 4]);
    /// ```
    pub fn spawn_fifo<F>(&self, f: F)
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        let job = self.make_job(f, None);
        self.state().submit(job, true);
    }

    /// Spawns a task that runs only after every earlier task of this scope that conflicts with
    /// its `accesses` has finished (read after write, write after read, write after write).
    ///
    /// If one of those panicked (or was itself cancelled), this task is cancelled instead of
    /// run: the data it would use is partial. The scope re-raises the first panic once every
    /// task has finished, says how many were cancelled on stderr, and
    /// [`Stats::tasks_cancelled`](crate::Stats::tasks_cancelled) counts them.
    ///
    /// ```
    /// use std::sync::Mutex;
    /// use umt_rt::{Access, Runtime};
    ///
    /// let rt = Runtime::builder().monitor(umt_rt::BackendKind::Disabled).build().unwrap();
    /// let log = Mutex::new(Vec::new());
    /// rt.scope(|s| {
    ///     s.spawn_with([Access::write("x")], |_| log.lock().unwrap().push("produce"));
    ///     s.spawn_with([Access::read("x")], |_| log.lock().unwrap().push("consume"));
    /// });
    /// assert_eq!(log.into_inner().unwrap(), ["produce", "consume"]);
    /// ```
    pub fn spawn_with<F, I>(&self, accesses: I, f: F)
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
        I: IntoIterator<Item = Access>,
    {
        let accesses: Vec<Access> = accesses.into_iter().collect();
        let node = DepNode::new();
        let job = self.make_job(f, Some(node.clone()));
        node.set_job(job);
        crate::sync::lock_std(&self.state().deps).register(&node, &accesses);
        if let Some(job) = node.release() {
            self.state().submit(job, false);
        }
    }

    /// Spawns a task that only a worker of the runtime's `core`-th core may run (inline when
    /// the scope has no runtime).
    pub(crate) fn spawn_on_core<F>(&self, core: usize, f: F)
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        let job = self.make_job(f, None);
        match &self.state().registry {
            Some(reg) => reg.inject_to_core(core, job),
            None => job.run(),
        }
    }

    /// A task of this scope as a job, counted in the scope but queued nowhere: the caller
    /// runs or queues it (a worker joining a running loop, `iter/drive.rs`).
    pub(crate) fn job<F>(&self, f: F) -> Job
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        self.make_job(f, None)
    }

    /// Another handle on this scope, for a part of its body that outlives the `&Scope` it was
    /// given but not the scope (an offer closed before the scope's tasks finish).
    pub(crate) fn handle(&self) -> Scope<'scope> {
        Scope {
            state: self.state,
            body: self.body,
            _marker: PhantomData,
        }
    }

    fn make_job<F>(&self, f: F, node: Option<Arc<DepNode>>) -> Job
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        self.state().pending.add();
        let scope = Scope {
            state: self.state,
            body: false,
            _marker: PhantomData,
        };
        let task = move || {
            let state = scope.state();
            // Drops `f` unrun; a panic in what it captured is the scope's, as a panic in its
            // body would be (true: it failed).
            let drop_unrun = |f: F| match catch_unwind(AssertUnwindSafe(move || drop(f))) {
                Ok(()) => false,
                Err(p) => {
                    state.store_panic(p);
                    true
                }
            };
            // A task that depends on a failed one is cancelled: what it would read is partial.
            let failed = if node.as_ref().is_some_and(|n| n.is_cancelled()) {
                state.cancelled.fetch_add(1, Ordering::AcqRel);
                if let Some(reg) = &state.registry {
                    reg.counters.tasks_cancelled.fetch_add(1, Ordering::Relaxed);
                }
                drop_unrun(f);
                true
            } else if state.stopped.load(Ordering::Acquire) {
                // The scope was cancelled before this task started: dropped unrun, which is
                // no failure (its successors are released, and skipped the same way).
                drop_unrun(f)
            } else if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(&scope))) {
                state.store_panic(p);
                true
            } else {
                false
            };
            if let Some(node) = node {
                // Successors are released even after a failure (cancelled if so): the scope
                // re-raises the panic once all have finished.
                for job in node.finish(failed) {
                    state.submit(job, false);
                }
            }
            // Last: once the count reaches zero the scope may return and free what `f` borrowed.
            state.complete_one();
        };
        // SAFETY: `pending` counts this job from now until `complete_one` above, its last
        // action (`complete_one` touches the state only before the latch store that lets the
        // scope return); `run_scope` does not return (or unwind) before `pending` is zero, so every
        // borrow of lifetime 'scope outlives the job. A job that is never run (impossible: the
        // runtime runs every queued job before shutting down) would keep the scope waiting,
        // never free its borrows early.
        unsafe { Job::new_scoped(task) }
    }
}

// `Runtime::scope`: a scope whose body runs on this runtime.
impl crate::Runtime {
    /// Creates a scope on this runtime: `f` runs on a worker, may spawn tasks that borrow from
    /// the caller's stack, and `scope` returns once all of them have finished.
    ///
    /// ```
    /// let rt = umt_rt::Runtime::builder().monitor(umt_rt::BackendKind::Disabled).build().unwrap();
    /// let mut parts = vec![0u64; 4];
    /// rt.scope(|s| {
    ///     for (i, p) in parts.iter_mut().enumerate() {
    ///         s.spawn(move |_| *p = (i as u64 + 1) * 10);
    ///     }
    /// });
    /// assert_eq!(parts, [10, 20, 30, 40]);
    /// ```
    pub fn scope<'scope, F, R>(&self, f: F) -> R
    where
        F: FnOnce(&Scope<'scope>) -> R + Send,
        R: Send,
    {
        self.install(|| run_scope(Some(self.registry()), f))
    }

    /// [`scope`](crate::Runtime::scope) for rayon's `ThreadPool::scope_fifo`: spawn with
    /// [`Scope::spawn_fifo`] for tasks queued first in, first out.
    pub fn scope_fifo<'scope, F, R>(&self, f: F) -> R
    where
        F: FnOnce(&Scope<'scope>) -> R + Send,
        R: Send,
    {
        self.scope(f)
    }

    /// A scope whose body runs on the calling thread and whose tasks run on this runtime
    /// (rayon's `ThreadPool::in_place_scope`).
    ///
    /// ```
    /// let rt = umt_rt::Runtime::builder().monitor(umt_rt::BackendKind::Disabled).build().unwrap();
    /// let caller = std::thread::current().id();
    /// let mut ran_here = false;
    /// rt.in_place_scope(|s| {
    ///     ran_here = std::thread::current().id() == caller;
    ///     s.spawn(|_| assert!(umt_rt::current_thread_index().is_some()));
    /// });
    /// assert!(ran_here);
    /// ```
    pub fn in_place_scope<'scope, F, R>(&self, f: F) -> R
    where
        F: FnOnce(&Scope<'scope>) -> R,
    {
        run_scope(Some(self.registry()), f)
    }

    /// [`in_place_scope`](crate::Runtime::in_place_scope) for rayon's
    /// `ThreadPool::in_place_scope_fifo`.
    pub fn in_place_scope_fifo<'scope, F, R>(&self, f: F) -> R
    where
        F: FnOnce(&Scope<'scope>) -> R,
    {
        self.in_place_scope(f)
    }
}
