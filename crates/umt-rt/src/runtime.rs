//! The runtime handle: what it runs on, `install`, `spawn`, its trace, and shutdown. Building
//! one is in `builder.rs`; the features above the core add their methods in their own files
//! (`Runtime::scope` in `scope.rs`, `Runtime::parallel_for` in `iter/`, `Runtime::onload` in
//! `onload/`, ...).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use umt_sys::{BackendKind, CpuId, Selection};

use crate::job::Job;
use crate::latch::{Latch, Waiter};
use crate::registry::Registry;
use crate::spawn::{JoinHandle, JoinState, Outcome};
use crate::sync::lock;
use crate::worker::with_current;

/// A pool of pinned workers, one per core, plus spares the leader wakes when a worker blocks.
///
/// Dropping it runs every queued task, then joins every thread and closes the monitor's
/// descriptors.
///
/// In a child of `fork` none of its threads exists: work given to it there runs on the
/// calling thread, inside the call that gives it (said once), and dropping it returns at
/// once; the global runtime is built again in the child. Build a runtime in the child for
/// parallel work there (timers and async I/O stay the parent's: futures that wait for them
/// never wake in a child; `src/README.md`, F1–F3, lists the limits).
pub struct Runtime {
    reg: Arc<Registry>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("cpus", &self.reg.config.cpus)
            .field("backend", &self.backend())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Wraps a registry whose threads the caller starts next (see `builder.rs`).
    pub(crate) fn from_registry(reg: Arc<Registry>) -> Runtime {
        Runtime { reg }
    }

    /// What the runtime's threads share.
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.reg
    }

    /// The CPUs the runtime runs on.
    pub fn cpus(&self) -> &[CpuId] {
        &self.reg.config.cpus
    }

    /// The monitor backend in use.
    pub fn backend(&self) -> BackendKind {
        self.reg.monitor.backend()
    }

    /// How the leaders run: as asked, else the default for the backend
    /// ([`LeaderPolicy::default_for`](crate::LeaderPolicy::default_for)).
    pub fn leader_policy(&self) -> crate::LeaderPolicy {
        self.reg.config.leader_policy
    }

    /// Whether the leaders lend workers of oversubscribed cores to starved ones
    /// ([`Builder::lend_workers`](crate::Builder::lend_workers), which needs live counts: the
    /// Bpf backend, or the Kernel backend in idle-only mode; and more than one core).
    pub fn lends_workers(&self) -> bool {
        self.reg.config.caps.lend
    }

    /// How the backend was chosen, with the reasons better ones were rejected.
    pub fn selection(&self) -> &Selection {
        self.reg.monitor.selection()
    }

    /// The number of cores (one active worker each) of this runtime: rayon's
    /// `ThreadPool::current_num_threads`. Spares that stand in for blocked workers are not
    /// counted: at most this many run at once.
    pub fn current_num_threads(&self) -> usize {
        self.reg.cores()
    }

    /// The index (`0..current_num_threads()`) of the core the calling worker of this runtime
    /// serves, or `None` on any other thread (a worker of another runtime included): rayon's
    /// `ThreadPool::current_thread_index`.
    pub fn current_thread_index(&self) -> Option<usize> {
        self.on_own_worker_do(|ctx| ctx.core())
    }

    /// Whether the calling worker of this runtime has tasks of its own queued (its deque),
    /// `None` on any other thread: rayon's `ThreadPool::current_thread_has_pending_tasks`.
    pub fn current_thread_has_pending_tasks(&self) -> Option<bool> {
        self.on_own_worker_do(|ctx| ctx.has_pending_tasks())
    }

    /// `f` of the calling thread's worker context, if it is a worker of this runtime.
    fn on_own_worker_do<R>(&self, f: impl FnOnce(&crate::worker::WorkerCtx) -> R) -> Option<R> {
        with_current(|ctx| {
            ctx.filter(|ctx| Arc::ptr_eq(ctx.registry(), &self.reg))
                .map(f)
        })
    }

    fn on_own_worker(&self) -> bool {
        self.on_own_worker_do(|_| ()).is_some()
    }

    /// Runs `f` on a worker of this runtime and returns its result (directly when called from
    /// one). A panic in `f` is re-raised here.
    pub fn install<F, R>(&self, f: F) -> R
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        if self.on_own_worker() {
            return f();
        }
        let latch = Latch::new(Waiter::current());
        let mut result: Option<std::thread::Result<R>> = None;
        let job = {
            let (latch, result) = (&latch, &mut result);
            move || {
                *result = Some(catch_unwind(AssertUnwindSafe(f)));
                latch.set();
            }
        };
        // SAFETY: we wait for the latch before returning; the job sets it as its last action.
        let job = unsafe { Job::new_scoped(job) };
        self.reg.inject(job);
        latch.wait();
        match result {
            Some(Ok(r)) => r,
            Some(Err(p)) => resume_unwind(p),
            None => unreachable!("the latch is set after the result is stored"),
        }
    }

    /// Starts a task that owns its data; the handle waits for it (blocking or as a future).
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        spawn_on(&self.reg, f)
    }

    /// Starts a task that owns its data, with nothing to wait on (rayon's `spawn`). A panic
    /// goes to [`Builder::panic_handler`](crate::Builder::panic_handler), or to stderr; the
    /// runtime runs every queued task before it stops, detached ones included.
    pub fn spawn_detached<F>(&self, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        spawn_detached_on(&self.reg, f);
    }

    /// [`spawn_detached`](Runtime::spawn_detached) through the runtime's shared queue, first
    /// in, first out (rayon's `spawn_fifo`): the workers take its tasks one at a time in the
    /// order they were queued, so on one worker they start in that order, and on several
    /// their starts interleave (a task put back by a worker that gives up its core may start
    /// after later ones). A worker's own tasks
    /// ([`spawn`](Runtime::spawn) from a task) come before the shared queue's; rayon keeps a
    /// FIFO queue per worker instead.
    pub fn spawn_fifo<F>(&self, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        spawn_detached_in(&self.reg, f, true);
    }

    /// Sets the most workers per core the leaders keep active, blocked ones included (not
    /// those parked in [`block_on`](crate::block_on), which hand their place on), between
    /// 1 (no spare: a blocked worker's core idles) and [`Builder::max_workers_per_core`], and
    /// returns what it set. A core that has more active workers keeps them until they park.
    /// [`crate::onload::DyonBuilder::start_spare_limit`] sets it from measurements.
    ///
    /// [`Builder::max_workers_per_core`]: crate::Builder::max_workers_per_core
    pub fn set_spare_limit(&self, workers: usize) -> usize {
        self.reg.pools.set_limit(workers)
    }

    /// The most workers per core the leaders keep active ([`Runtime::set_spare_limit`]).
    pub fn spare_limit(&self) -> usize {
        self.reg.pools.limit()
    }

    /// Sets the most spare workers the leaders make active at once over all cores (a spare: a
    /// core's active worker beyond its first, blocked ones included, not those parked in
    /// [`block_on`](crate::block_on)), and returns it.
    /// Unlimited by default; at `0` the leaders wake or start no spare. It bounds the leaders
    /// only: a worker that becomes active by itself (its latch was set, it found work as it
    /// was parking) is not held back, so the count may pass the budget until such workers
    /// park again, and leaders that look at the same moment may each add one past it. Where
    /// many blocked workers only deepen a saturated disk's queue, a budget for the whole
    /// process bounds them where a cap per core cannot ([`Runtime::set_spare_limit`] allows
    /// one spare per core at the least). It bounds active spares, not the threads started:
    /// a spare that parks stays, for the next time one is needed.
    pub fn set_max_spares(&self, spares: usize) -> usize {
        self.reg.pools.set_max_spares(spares)
    }

    /// The most spare workers active at once over all cores ([`Runtime::set_max_spares`];
    /// `usize::MAX` when unlimited).
    pub fn max_spares(&self) -> usize {
        self.reg.pools.max_spares()
    }

    /// Spare workers active now over all cores.
    pub fn spares(&self) -> usize {
        self.reg.pools.spares()
    }

    /// The most workers a core can have, spares included: the runtime's cap, as built
    /// ([`crate::Builder::max_workers_per_core`], or its default
    /// [`crate::default_workers_per_core`] for the cores and the backend). The thread handlers
    /// ([`crate::Builder::start_handler`]) see worker `k` of `core` as `core * this + k`.
    pub fn max_workers_per_core(&self) -> usize {
        self.reg.config.cap
    }

    /// The trace records handed over since the last call, by time ([`crate::Trace`]), or
    /// `None` if the runtime was built without [`Builder::trace`](crate::Builder::trace).
    /// The trace spans its first to its last record.
    ///
    /// A worker hands its records over when it parks, a leader at the start of its next
    /// iteration. Called outside the runtime's tasks, this first waits until every worker is
    /// parked and every leader has handed its records over (at most 100 ms), so the trace of a
    /// computation that has returned is whole unless a thread could not run for that long (a
    /// leader at `SCHED_IDLE` on a core another program keeps busy); from inside a task it
    /// holds what was handed over so far. What is missing comes with the next call, and
    /// [`Trace::append`](crate::Trace::append) joins the two.
    pub fn take_trace(&self) -> Option<crate::Trace> {
        let rec = self.reg.trace.as_ref()?;
        if !with_current(|w| w.is_some()) {
            let deadline = Instant::now() + Duration::from_millis(100);
            while ((0..self.reg.cores()).any(|c| self.reg.pools.counts(c).0 > 0) || rec.some_held())
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        let records = rec.take();
        // The window ends with the last record (a worker parking, usually), not now: the
        // caller's time since then is not the runtime's.
        let end = records
            .iter()
            .map(|r| r.time_ns)
            .max()
            .unwrap_or_else(|| rec.now());
        Some(crate::Trace::new(
            self.reg.config.cpus.clone(),
            self.reg.monitor.is_active(),
            records,
            end,
        ))
    }
}

/// How long `Drop` waits for the leaders to exit before it lets them exit on their own.
const LEADER_EXIT_WAIT: Duration = Duration::from_millis(20);

impl Drop for Runtime {
    /// Stops the runtime: the workers run every queued task, then every worker and the
    /// starter thread are joined. The leaders are woken and joined too, unless they cannot
    /// get a CPU within 20 ms (`LEADER_EXIT_WAIT`): at `SCHED_IDLE` a leader runs only when its core
    /// has nothing else to run, and under load from other processes that can take a second
    /// or more (20 runtimes dropped under two `yes`: 36.8 s when every drop waited). Those exit
    /// at their next turn, and release the monitor then. A leader that runs tasks
    /// ([`Builder::leader_runs_tasks`](crate::Builder::leader_runs_tasks)) and holds some when
    /// the drop begins is waited for until it has run them, however long its turns take, as
    /// the workers' tasks are.
    fn drop(&mut self) {
        let reg = &self.reg;
        // F2: in a child of `fork` none of the threads to stop or join is here (joining one
        // panicked in the standard library, a child that returned from `main` exited 101).
        // The registry stays, as the parent's threads' references do in this copy of memory.
        if reg.forked() {
            return;
        }
        // H6: whoever stepped aside finishes its task now, before anything below waits on
        // what it may hold.
        reg.handoff.resume_all();
        // Features first (onloaded work: what runs finishes, what waits goes back to its
        // waiters).
        reg.shut_down_extensions(false);
        // SeqCst: a job queued for a core from here on goes to the shared queue (see
        // `Registry::inject_to_core`).
        reg.terminate.store(true, Ordering::SeqCst);
        // Jobs already queued for a core go to the shared queue too: the core's workers may
        // have left, be this very thread (dropped from inside a task), wait in a join, or be
        // lent away. A push that read `terminate` unset came before the store, so this sweep
        // sees it (README, "Races": a job for a core at shutdown).
        std::sync::atomic::fence(Ordering::SeqCst);
        for core in 0..reg.cores() {
            reg.reroute_inbox(core);
        }
        // None steps aside from here on; one that checked just before waits 4 ms at most.
        reg.handoff.resume_all();
        // Leaders waiting on the monitor return at once, polling leaders that sleep until a
        // worker of their core becomes active are unparked.
        if let Err(e) = reg.monitor.shut_down() {
            reg.warnings.warn(crate::diag::Warning::Shutdown, || {
                format!("cannot wake the leaders for shutdown: {e}")
            });
        }
        for leader in reg.leaders.get().into_iter().flatten() {
            leader.unpark();
        }
        if let Some(starter) = reg.starter.get() {
            starter.stop();
        }
        // The starter may still start the spares it was asked for before it stopped: repeat
        // until no thread is left. Wake everyone each round so parked workers see `terminate`.
        let me = std::thread::current().id();
        loop {
            for i in 0..reg.slots.len() {
                reg.notify(i);
            }
            let handles: Vec<_> = std::mem::take(&mut *lock(&reg.threads));
            if handles.is_empty() {
                break;
            }
            for h in handles {
                if h.thread().id() == me {
                    // Dropped from inside one of our own workers: it cannot join itself.
                    continue;
                }
                let _ = h.join();
            }
        }
        // With `leader_runs_tasks`, a leader that holds tasks (it runs them, or some are left
        // on its deque) runs them before the features' last shutdown (`leader_main`), as the
        // workers ran theirs above. Not when dropped from inside one of the runtime's own
        // threads: a leader's task may wait for the dropping task, which would wait for it.
        let inside = with_current(|ctx| ctx.is_some_and(|c| Arc::ptr_eq(c.registry(), reg)))
            || lock(&reg.leader_threads)
                .iter()
                .any(|h| h.thread().id() == me);
        while !inside
            && (0..reg.cores()).any(|core| reg.leader_holds(core))
            && lock(&reg.leader_threads).iter().any(|h| !h.is_finished())
        {
            std::thread::sleep(Duration::from_micros(100));
        }
        // A task that ran during shutdown may have made a feature after the first call (E3).
        reg.shut_down_extensions(true);
        let mut leaders: Vec<_> = std::mem::take(&mut *lock(&reg.leader_threads));
        let deadline = Instant::now() + LEADER_EXIT_WAIT;
        while !leaders.is_empty() && Instant::now() < deadline {
            let (done, running): (Vec<_>, Vec<_>) =
                leaders.into_iter().partition(|h| h.is_finished());
            for h in done {
                let _ = h.join();
            }
            leaders = running;
            if !leaders.is_empty() {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        // Whoever is left is detached: it exits at its next turn on its core.
    }
}

/// Starts `f` on `reg`'s runtime: on the calling worker's deque when it is one of that
/// runtime's, else through the injector.
pub(crate) fn spawn_on<F, T>(reg: &Arc<Registry>, f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let state = JoinState::new();
    let job = {
        let state = state.clone();
        Job::new(move || {
            // An aborted task that has not started never runs; what it captured is dropped
            // here, on a worker that must go on whatever that drop does.
            let outcome = if state.is_aborted() {
                crate::diag::run_quietly(move || drop(f));
                Outcome::Cancelled
            } else {
                catch_unwind(AssertUnwindSafe(f)).into()
            };
            state.complete(outcome)
        })
    };
    with_current(|ctx| match ctx {
        Some(ctx) if Arc::ptr_eq(ctx.registry(), reg) => ctx.push(job),
        _ => reg.inject(job),
    });
    JoinHandle::new(state)
}

/// Starts `f` on `reg`'s runtime with nothing to wait on; its panic goes to the runtime's
/// panic handler.
pub(crate) fn spawn_detached_on<F>(reg: &Arc<Registry>, f: F)
where
    F: FnOnce() + Send + 'static,
{
    spawn_detached_in(reg, f, false);
}

/// [`spawn_detached_on`], queued on the runtime's shared queue when `fifo` (so that tasks
/// queued so start in the order they were queued, rayon's `spawn_fifo`), else on the calling
/// worker's deque when it is one of `reg`'s.
pub(crate) fn spawn_detached_in<F>(reg: &Arc<Registry>, f: F, fifo: bool)
where
    F: FnOnce() + Send + 'static,
{
    let job = {
        let reg = reg.clone();
        Job::new(move || {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
                match &reg.config.panic_handler {
                    // A handler that panics itself would unwind out of the worker's loop
                    // and end the thread: its core's queue unserved, and with no monitor
                    // nothing ever runs there again (a user's trial: one worker, every
                    // later `install` hung). Said once; the worker goes on.
                    Some(handler) => {
                        if !crate::diag::run_quietly(|| handler(payload)) {
                            reg.warnings.warn(crate::diag::Warning::PanicHandler, || {
                                "the panic handler panicked; the worker goes on".to_owned()
                            });
                        }
                    }
                    None => crate::diag::detached_panic(payload),
                }
            }
        })
    };
    with_current(|ctx| match ctx {
        Some(ctx) if !fifo && Arc::ptr_eq(ctx.registry(), reg) => ctx.push(job),
        _ => reg.inject(job),
    });
}
