//! Futures on the runtime: [`Runtime::spawn_async`](crate::Runtime::spawn_async) and
//! [`block_on`]. A future is a task like the closures: polled on a worker, queued where
//! spawned tasks are queued, stolen like them. When the worker polling it blocks in the kernel
//! inside `poll` (a `std::fs` read, a page fault, a blocking driver), the monitor sees an
//! ordinary block and the core's spare runs the core's other tasks, futures included: no
//! `spawn_blocking` to remember. Steps A1–A5 and their races are in `README.md`.

use std::collections::HashMap;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Wake, Waker};

use crate::job::Job;
use crate::latch::{Waiter, wait_for_wake};
use crate::registry::{Extension, Feature, Hooks, Registry};
use crate::spawn::{Abort, JoinHandle, JoinState, Outcome};
use crate::task_state::{AfterPoll, TaskState};
use crate::worker::{WorkerCtx, with_current};

/// A2: a future woken on a worker goes to that worker's next slot (N1 of `README.md`: it runs
/// next, its data still in the core's caches) unless a chain of this many futures, each woken
/// onto a worker by the poll before, already led to the one that wakes it: then to the shared
/// queue of woken futures. Two futures that wake each other would otherwise keep the worker
/// from ever emptying its slot and deque, and from the injector and the jobs below them
/// (tokio bounds its LIFO slot the same way, at three polls).
const LOCAL_WAKES: u8 = 31;

/// The runtime's futures (A1, A5): every one not yet done, by id. The runtime owns them: a
/// future that waits with no waker kept anywhere stays here until it is aborted or the
/// runtime shuts down.
pub(crate) struct AsyncTasks {
    live: Mutex<HashMap<u64, Arc<dyn Cancel>>>,
    next_id: AtomicU64,
    /// How far shutdown went (A5): [`OPEN`], [`CLOSED`] at the first call, [`LAST`] at the
    /// call once the workers are joined.
    phase: AtomicU8,
}

/// [`AsyncTasks::phase`]: no shutdown yet.
const OPEN: u8 = 0;
/// The first shutdown call began: a spawn or a poll that ends `Pending` cancels its task; a
/// wake-up still queues it (never ends it in the waker's call).
const CLOSED: u8 = 1;
/// The call once the workers are joined began: nobody will run a queue any more, so what
/// waits or is queued is ended by this call or by a joiner (`Abort::end_unserved`).
const LAST: u8 = 2;

impl AsyncTasks {
    fn of(reg: &Registry) -> &AsyncTasks {
        reg.extension_or_init(|| AsyncTasks {
            live: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            phase: AtomicU8::new(OPEN),
        })
    }

    fn live(
        &self,
    ) -> crate::sync::Counted<std::sync::MutexGuard<'_, HashMap<u64, Arc<dyn Cancel>>>> {
        crate::sync::lock_std(&self.live)
    }

    fn is_closed(&self) -> bool {
        self.phase() != OPEN
    }

    fn phase(&self) -> u8 {
        self.phase.load(Ordering::SeqCst)
    }
}

impl Hooks for AsyncTasks {
    /// A5: the call before the workers stop closes the runtime to waiting futures and cancels
    /// those that wait; the call once they are joined also cancels those left in a queue that
    /// nobody will run (also when it is the first: a task made the slot during shutdown).
    fn shut_down(&self, workers_gone: bool) {
        // Before the look at the tasks: a poller that reads the phase after its `pending`
        // either sees it raised, or ended its poll before this call's claims, which then find
        // the task waiting or queued and end it (A5; both sides `SeqCst`).
        let before = self
            .phase
            .fetch_max(if workers_gone { LAST } else { CLOSED }, Ordering::SeqCst);
        let raised = workers_gone && before != LAST;
        if raised {
            // Joiners look while this step runs (`JoinHandle::end_unserved`): a future's drop
            // here may join another that only this step would end.
            crate::spawn::UNSERVED_RUNTIMES.fetch_add(1, Ordering::SeqCst);
        }
        let tasks: Vec<_> = self.live().values().cloned().collect();
        for task in tasks {
            task.cancel_at_shutdown(workers_gone);
        }
        if raised {
            // Every task is ended now, or being polled, and its poller ends it (A5).
            crate::spawn::UNSERVED_RUNTIMES.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for AsyncTasks {
    /// The runtime is gone. A feature made after the drop's last step (by a task of the
    /// worker that dropped the runtime from inside, as it drained its queues) had no
    /// shutdown: its futures still there are ended now, their handles completed after their
    /// futures' drops (found in review).
    fn drop(&mut self) {
        let tasks: Vec<_> = self
            .live
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain()
            .map(|(_, task)| task)
            .collect();
        for task in tasks {
            task.cancel_at_shutdown(true);
        }
    }
}

impl Extension for AsyncTasks {
    const FEATURE: Feature = Feature::Async;
}

/// `ctx`, if it is a worker of the runtime `reg` refers to. Its reference to the runtime then
/// stands for an upgrade of `reg`: one per wake and per poll moved the runtime's reference
/// count between the cores at every wake (a third of a pass of a baton between two futures,
/// `--example wake_chain`). The allocation stays while `reg` lives, so the same address is the
/// same runtime.
fn worker_of<'a>(ctx: Option<&'a WorkerCtx>, reg: &Weak<Registry>) -> Option<&'a WorkerCtx> {
    ctx.filter(|ctx| std::ptr::eq(Arc::as_ptr(ctx.registry()), reg.as_ptr()))
}

/// A future's task, without its types (shutdown cancels it).
trait Cancel: Send + Sync {
    /// Cancels the task if it waits (or, once the workers are gone, if it is queued).
    fn cancel_at_shutdown(self: Arc<Self>, workers_gone: bool);
}

/// Who queues a task ([`Task::queue`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Queuer {
    /// `spawn_async` (A1).
    Spawner,
    /// A waker (A2): its caller may hold locks that the future's drop takes.
    Waker,
    /// The task's own poller, which found it woken during the poll (A3).
    Poller,
}

/// One spawned future and its state (A1).
struct Task<F: Future> {
    state: TaskState,
    /// Taken (and dropped) when the task finishes; locked only by its one poller.
    future: Mutex<Option<Pin<Box<F>>>>,
    join: Arc<JoinState<F::Output>>,
    reg: Weak<Registry>,
    id: u64,
    /// A2: the chain of wakes behind the job queued now, written by its queuer before the
    /// push that publishes the job, read by the job before its poll (one job at a time).
    chain: AtomicU8,
}

impl<F> Task<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// A2: queues the task, whose state `by` has just set to `SCHEDULED`: in the calling
    /// worker's next slot (a waker's, N1) or on its deque (a spawner's), or from outside the
    /// runtime, from a worker's busy look for I/O events (D7 of `drive.rs`), and always when
    /// its own poller requeues it, on the runtime's queue of woken futures, behind what waits
    /// there, served first woken first polled: a future
    /// that wakes itself in a loop does not keep its worker from the others, and no connection
    /// of a busy server waits behind those woken after it. A5: a runtime that is shutting down
    /// gets a waker's task on that queue, where a worker polls it, or the last shutdown call or
    /// a joiner ends it, never in the waker's call; a spawner's or a poller's it cancels at
    /// once, as it does anyone's once the runtime is gone.
    fn queue(self: Arc<Self>, by: Queuer) {
        with_current(|ctx| {
            let ctx = worker_of(ctx, &self.reg);
            let upgraded = if ctx.is_none() {
                self.reg.upgrade()
            } else {
                None
            };
            let Some(reg) = ctx.map(WorkerCtx::registry).or(upgraded.as_ref()) else {
                return self.end_claimed();
            };
            let closed = AsyncTasks::of(reg).is_closed();
            if closed && by != Queuer::Waker {
                return self.end_claimed();
            }
            match ctx {
                Some(ctx)
                    if by != Queuer::Poller
                        && !closed
                        && ctx.queues_wakes_here()
                        && ctx.wake_chain() < LOCAL_WAKES =>
                {
                    self.chain.store(ctx.wake_chain() + 1, Ordering::Relaxed);
                    // N1: a wake-up runs next on this worker; a spawn waits on its deque.
                    if by == Queuer::Waker {
                        ctx.push_next(self.into_job())
                    } else {
                        ctx.push(self.into_job())
                    }
                }
                _ => {
                    self.chain.store(0, Ordering::Relaxed);
                    reg.inject_wake(self.into_job())
                }
            }
        })
    }

    /// A5: ends the task if it waits or is queued and nobody claimed it since (a joiner in the
    /// last shutdown step, the step itself): one end, by one owner, so that the handle
    /// completes only once the future's drop is done (found in review: a poller and a joiner
    /// both ended it).
    fn end_claimed(&self) {
        if self.state.cancel_idle(true) {
            self.finish(Outcome::Cancelled);
        }
    }

    /// The task's job: the task's own reference, no allocation per wake. A job that never
    /// runs keeps the task's allocation (A5).
    fn into_job(self: Arc<Self>) -> Job {
        /// Runs the job of `data`, a task's reference made by `into_job`.
        unsafe fn execute<F>(data: *const ())
        where
            F: Future + Send + 'static,
            F::Output: Send + 'static,
        {
            // SAFETY: `data` is the reference `into_job` leaked with `Arc::into_raw`, and a
            // job runs once, so it is taken back once.
            let task = unsafe { Arc::from_raw(data as *const Task<F>) };
            let chain = task.chain.load(Ordering::Relaxed);
            // F1 of `README.md`: in a child of `fork`, a task woken during its poll is polled
            // again here, not queued: queueing runs it inside the queueing, one stack frame
            // deeper per poll, until the stack overflows.
            let mut again = task.run(chain);
            while let Some(task) = again {
                again = task.run(chain);
            }
        }
        // SAFETY: `execute::<F>` takes the reference back as a `Task<F>`, what `data` is; the
        // task is `Send + Sync` (`run` makes a `Waker` of it, which requires both), so the job
        // may run on any worker.
        unsafe { Job::from_raw(Arc::into_raw(self) as *const (), execute::<F>) }
    }

    /// A3: one poll, by the worker that took the task's job; a chain of `chain` futures,
    /// each woken onto a worker by the poll before, led to it (A2). The task back when the
    /// caller is to poll it again at once (F1: woken during its poll, in a child of `fork`).
    fn run(self: Arc<Self>, chain: u8) -> Option<Arc<Self>> {
        if !self.state.start_poll() {
            // Cancelled at shutdown while it sat in a queue.
            return None;
        }
        if self.join.is_aborted() {
            self.finish(Outcome::Cancelled);
            return None;
        }
        // The poll's waker stands on the poller's reference (futures' `waker_ref`): a poll
        // takes and gives back no count of its own, two atomic operations on a line that the
        // wakers on other cores write (`--example wake_chain`).
        let raw = Arc::into_raw(self);
        // SAFETY: `raw` is the reference `into_raw` just gave up. `this` takes it back; the
        // waker's `Arc` of the same pointer is never dropped (`ManuallyDrop`) nor consumed (a
        // `Context` lends the waker by reference only: a wake by value needs a clone, which
        // takes a count of its own), and the waker lives in this frame, while `this` holds
        // the count both stand on.
        let (this, waker) = unsafe {
            (
                Arc::from_raw(raw),
                ManuallyDrop::new(Waker::from(Arc::from_raw(raw))),
            )
        };
        let mut cx = Context::from_waker(&waker);
        // Not counted (`sync::Held`): it is held while the future runs, which may step aside
        // (H3); only an abort of this very task waits for it.
        let mut slot = this.future.lock().unwrap_or_else(|p| p.into_inner());
        let future = slot.as_mut()?;
        // A2: the poll's wakes on this worker continue its chain.
        let outer_chain = with_current(|ctx| ctx.map(|ctx| ctx.set_wake_chain(chain)));
        let polled = catch_unwind(AssertUnwindSafe(|| {
            // C1 of `coop.rs`: the future's I/O yields once the poll has had its turn.
            let _turn = crate::coop::begin(true);
            future.as_mut().poll(&mut cx)
        }));
        if let Some(outer) = outer_chain {
            with_current(|ctx| ctx.map(|ctx| ctx.set_wake_chain(outer)));
        }
        drop(slot);
        match polled {
            Ok(Poll::Ready(v)) => this.finish(Outcome::Value(v)),
            Err(payload) => this.finish(Outcome::Panicked(payload)),
            Ok(Poll::Pending) if this.join.is_aborted() => this.finish(Outcome::Cancelled),
            Ok(Poll::Pending) => match this.state.pending() {
                // Waiting: the next wake queues it. A shutdown that began during the poll
                // may have looked before it was idle: cancel it here then.
                AfterPoll::Wait => {
                    // `None`: the runtime is gone.
                    let phase = with_current(|ctx| match worker_of(ctx, &this.reg) {
                        Some(ctx) => Some(AsyncTasks::of(ctx.registry()).phase()),
                        None => this.reg.upgrade().map(|reg| AsyncTasks::of(&reg).phase()),
                    });
                    // In the last step a waker may have queued it since, where nobody will
                    // run it: claimed queued too then (found in review: a joiner already
                    // waiting for it waited for ever).
                    let last = phase.is_none_or(|p| p == LAST);
                    if phase != Some(OPEN) && this.state.cancel_idle(last) {
                        this.finish(Outcome::Cancelled);
                    }
                }
                // Woken during the poll: its waker left the queueing to us.
                AfterPoll::Queue => {
                    // A process that never forked since the first runtime (the count is 0),
                    // or a worker of this runtime (a child has none), looks no further: no
                    // reference count touched per self-wake.
                    if crate::fork::generation().is_some_and(|forks| forks != 0)
                        && with_current(|ctx| worker_of(ctx, &this.reg).is_none())
                        && this.reg.upgrade().is_some_and(|reg| reg.forked())
                    {
                        return Some(this);
                    }
                    this.queue(Queuer::Poller)
                }
                AfterPoll::Ended => {}
            },
        }
        None
    }

    /// A4: the end, by whoever owns the task's state: the future is dropped first (a
    /// panic in its drop is dropped too), then the handle gets the outcome.
    fn finish(&self, outcome: Outcome<F::Output>) {
        self.state.end();
        let future = crate::sync::lock_std(&self.future).take();
        crate::diag::run_quietly(move || drop(future));
        if let Some(reg) = self.reg.upgrade()
            && let Some(tasks) = reg.extension::<AsyncTasks>()
        {
            tasks.live().remove(&self.id);
        }
        self.join.complete(outcome);
    }
}

impl<F: Future> Drop for Task<F> {
    /// A task dropped unfinished (its runtime gone without a shutdown) still ends its handle,
    /// after its future's drop, as A4 does.
    fn drop(&mut self) {
        let future = self
            .future
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        crate::diag::run_quietly(move || drop(future));
        self.join.complete(Outcome::Cancelled);
    }
}

impl<F> Wake for Task<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    /// A2: an idle task is queued by its waker; a running one is left to its poller.
    fn wake_by_ref(self: &Arc<Self>) {
        if self.state.wake() {
            self.clone().queue(Queuer::Waker);
        }
    }
}

impl<F> Abort for Task<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// The flag is set: a wake-up makes the next poll drop the future (at once if it waits).
    fn abort(self: Arc<Self>) {
        self.wake_by_ref();
    }

    /// A5: claimed like the last shutdown step claims it (waiting or queued), and ended here.
    fn end_unserved(self: Arc<Self>) {
        if self.unserved() {
            self.end_claimed();
        }
    }
}

impl<F> Task<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// Whether nobody but a joiner will end this task: its runtime is gone, or in its last
    /// shutdown step (workers joined: no queue is run any more).
    fn unserved(&self) -> bool {
        self.reg
            .upgrade()
            .is_none_or(|reg| AsyncTasks::of(&reg).phase() == LAST)
    }
}

impl<F> Cancel for Task<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn cancel_at_shutdown(self: Arc<Self>, workers_gone: bool) {
        if self.state.cancel_idle(workers_gone) {
            self.finish(Outcome::Cancelled);
        }
    }
}

/// A1: a task for `future` on `reg`, queued.
pub(crate) fn spawn_async_on<F>(reg: &Arc<Registry>, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let tasks = AsyncTasks::of(reg);
    let join = JoinState::new();
    let task = Arc::new(Task {
        state: TaskState::scheduled(),
        future: Mutex::new(Some(Box::pin(future))),
        join: join.clone(),
        reg: Arc::downgrade(reg),
        id: tasks.next_id.fetch_add(1, Ordering::Relaxed),
        chain: AtomicU8::new(0),
    });
    join.set_task(Arc::downgrade(&task) as Weak<dyn Abort>);
    tasks.live().insert(task.id, task.clone());
    task.queue(Queuer::Spawner);
    JoinHandle::new(join)
}

/// What a future run by [`block_on`] is woken through.
struct Signal {
    woken: AtomicBool,
    waiter: Waiter,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.waiter.wake();
    }
}

/// Runs `future` to completion on the calling thread and returns its output. The future need
/// not be `Send`.
///
/// Between polls the thread waits for the future's wake-up. On a worker of a runtime with a
/// monitor, it parks, as any blocking call in a task does, after making another worker of
/// its core active, which runs the core's other tasks meanwhile (the tasks this future
/// spawned among them): so tasks whose `block_on`s wait for each other all finish, as a
/// library's sync wrapper over async code (`fn get() -> T { block_on(get_async()) }`) called
/// from tasks needs. Where no other worker can come (a runtime without a monitor,
/// [`max_workers_per_core(1)`](crate::Builder::max_workers_per_core), every worker of the
/// core already in use, the runtime at its [most spares](crate::Runtime::set_max_spares)
/// while another worker of the core runs, a thread that cannot be started, or a runtime
/// shutting down), the worker runs other
/// tasks on top of its wait instead, as [`join`](crate::join) does, so that a runtime of one
/// worker still runs what the future waits for; a task run that way that waits for what this
/// future does next waits for ever, so there await rather than `block_on` what other tasks
/// produce. Any other thread sleeps until the future is woken (steps B1–B4 of
/// `src/README.md`).
///
/// ```
/// let h = umt_rt::spawn_async(async { 6 * 7 });
/// assert_eq!(umt_rt::block_on(h), 42);
/// ```
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let signal = Arc::new(Signal {
        woken: AtomicBool::new(false),
        waiter: Waiter::current(),
    });
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    // C1 of `coop.rs`: no turn. Outside a worker it is the thread's only future; called
    // inside a runtime future's poll, its futures' I/O does not yield the worker either.
    let _turn = crate::coop::begin(false);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        wait_for_wake(&|| signal.woken.load(Ordering::Acquire));
        // A wake from here on sets it again: the next wait returns at once.
        signal.woken.store(false, Ordering::Release);
    }
}

impl crate::Runtime {
    /// Starts `future` as a task of this runtime and returns its handle (await it, or
    /// [`join`](JoinHandle::join) it). The future is polled on the runtime's workers; a
    /// wake-up queues it again, to run next on the waking worker or, from outside the
    /// runtime, on the shared queue. When a worker blocks in the kernel inside `poll`, the monitor's
    /// spare runs the core's other tasks. Dropping the runtime cancels the futures that
    /// wait (their handles give [`JoinError::Cancelled`](crate::JoinError::Cancelled)).
    ///
    /// ```
    /// let rt = umt_rt::Runtime::new()?;
    /// let a = rt.spawn_async(async { 20 });
    /// let b = rt.spawn_async(async move { a.await + 22 });
    /// assert_eq!(b.join(), 42);
    /// # Ok::<(), umt_rt::BuildError>(())
    /// ```
    pub fn spawn_async<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        spawn_async_on(self.registry(), future)
    }

    /// Runs `future` on a worker of this runtime and returns its output: the worker runs
    /// other tasks while the future waits, and tasks it spawns go to this runtime.
    ///
    /// ```
    /// let rt = umt_rt::Runtime::new()?;
    /// let sum = rt.block_on(async {
    ///     let parts: Vec<_> = (0..4u64).map(|i| umt_rt::spawn_async(async move { i * 10 })).collect();
    ///     let mut sum = 0;
    ///     for p in parts {
    ///         sum += p.await;
    ///     }
    ///     sum
    /// });
    /// assert_eq!(sum, 60);
    /// # Ok::<(), umt_rt::BuildError>(())
    /// ```
    pub fn block_on<F>(&self, future: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        self.install(|| block_on(future))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BackendKind, Runtime};
    use std::sync::mpsc;

    /// A runtime of one unmonitored worker (the process's last CPU).
    fn one_worker() -> Runtime {
        let cpu = *umt_sys::cpu::process_cpus().unwrap().last().unwrap();
        Runtime::builder()
            .cores([cpu])
            .monitor(BackendKind::Disabled)
            .build()
            .unwrap()
    }

    /// Holds the runtime's one worker until the returned sender is dropped or sends: as a
    /// worker that left, it runs no queue.
    fn hold_the_worker(rt: &Runtime) -> mpsc::Sender<()> {
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (held_tx, held_rx) = mpsc::channel::<()>();
        drop(rt.spawn(move || {
            held_tx.send(()).unwrap();
            let _ = release_rx.recv();
        }));
        held_rx.recv().unwrap();
        release_tx
    }

    /// Two futures that never finish, each with `part(i)` in it; each tells `polled` at its
    /// first poll.
    fn two_waiting<P: Send + 'static>(
        rt: &Runtime,
        mut part: impl FnMut(usize) -> P,
        polled: mpsc::Sender<()>,
    ) -> Vec<JoinHandle<()>> {
        (0..2)
            .map(|i| {
                let (part, polled) = (part(i), polled.clone());
                rt.spawn_async(async move {
                    let _part = part;
                    let _ = polled.send(());
                    std::future::pending::<()>().await
                })
            })
            .collect()
    }

    /// The first of two futures to be dropped aborts the other and waits for its end
    /// (structured cancellation).
    struct AbortsAndJoinsTheOther {
        other: Arc<Mutex<Option<JoinHandle<()>>>>,
        first_dropped: Arc<AtomicBool>,
    }

    impl Drop for AbortsAndJoinsTheOther {
        fn drop(&mut self) {
            if self.first_dropped.swap(true, Ordering::SeqCst) {
                return;
            }
            let other = self.other.lock().unwrap().take();
            if let Some(h) = other {
                h.abort();
                let _ = h.try_join();
            }
        }
    }

    /// A5: in the last shutdown step nobody runs a queue, so a joiner ends the task it waits
    /// for. The feature made during shutdown (E3: a task's first futures spawned as the
    /// runtime drops) gets only that step, with its futures still there: the first of two to
    /// be ended aborts and joins the other, waiting or queued (found in review: the drop
    /// waited for ever). The one worker is held by a closure, as one that left would be, and
    /// the step is called directly.
    #[test]
    fn a_join_in_the_last_shutdown_call_ends_the_task_it_waits_for() {
        for polled_first in [true, false] {
            // Run aside: a regression waits for ever, and fails here instead.
            let (done_tx, done_rx) = mpsc::channel();
            std::thread::spawn(move || {
                a_join_in_the_last_step(polled_first);
                let _ = done_tx.send(());
            });
            assert!(
                done_rx
                    .recv_timeout(std::time::Duration::from_secs(120))
                    .is_ok(),
                "the last step failed or waited for ever (polled first: {polled_first})"
            );
        }
    }

    /// One case of [`a_join_in_the_last_shutdown_call_ends_the_task_it_waits_for`].
    fn a_join_in_the_last_step(polled_first: bool) {
        {
            let rt = one_worker();
            let slots = [Arc::new(Mutex::new(None)), Arc::new(Mutex::new(None))];
            let first_dropped = Arc::new(AtomicBool::new(false));
            let part = |i: usize| AbortsAndJoinsTheOther {
                other: slots[i].clone(),
                first_dropped: first_dropped.clone(),
            };
            let (polled_tx, polled_rx) = mpsc::channel();
            let (handles, release) = if polled_first {
                // Both polled once and waiting, then the worker held.
                let handles = two_waiting(&rt, part, polled_tx);
                polled_rx.recv().unwrap();
                polled_rx.recv().unwrap();
                (handles, hold_the_worker(&rt))
            } else {
                // Both queued and never polled.
                let release = hold_the_worker(&rt);
                (two_waiting(&rt, part, polled_tx), release)
            };
            let [a, b]: [JoinHandle<()>; 2] = handles.try_into().ok().unwrap();
            // Each future's part holds the other's handle.
            *slots[0].lock().unwrap() = Some(b);
            *slots[1].lock().unwrap() = Some(a);
            AsyncTasks::of(rt.registry()).shut_down(true);
            assert!(first_dropped.load(Ordering::SeqCst));
            // The other was joined; the handle left (the first's, in the other's part) is
            // done.
            let left: Vec<_> = slots
                .iter()
                .filter_map(|s| s.lock().unwrap().take())
                .collect();
            assert_eq!(left.len(), 1);
            assert!(left.iter().all(JoinHandle::is_finished));
            release.send(()).unwrap();
        }
    }

    thread_local! {
        /// Set while this thread is inside a `Waker::wake` that [`WakesTheOther`] made.
        static IN_A_WAKE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Part of a waiting future: when dropped, wakes the other such future (as a channel's end
    /// that wakes its peer under the channel's lock), and records whether it was itself
    /// dropped inside such a wake.
    struct WakesTheOther {
        other: Arc<Mutex<Option<Waker>>>,
        mine: Arc<Mutex<Option<Waker>>>,
        dropped_inside_a_wake: Arc<AtomicBool>,
    }

    impl Drop for WakesTheOther {
        fn drop(&mut self) {
            if IN_A_WAKE.with(|w| w.get()) {
                self.dropped_inside_a_wake.store(true, Ordering::SeqCst);
            }
            let waker = self.other.lock().unwrap().take();
            if let Some(w) = waker {
                IN_A_WAKE.with(|f| f.set(true));
                w.wake();
                IN_A_WAKE.with(|f| f.set(false));
            }
        }
    }

    /// A5: a wake-up once shutdown has begun never drops its future inside the waker's call,
    /// whose caller may hold a lock the future's drop takes (a channel that wakes its peer
    /// under its lock) and would deadlock on itself. Two waiting futures, each of which wakes
    /// the other when dropped: shutdown ends the first on its own thread, whose drop wakes
    /// the second while it still waits. Through the whole drop (its first step ends them),
    /// and in the last step alone (a feature made during shutdown), where the one worker is
    /// held as one that left would be (found in review, both: the second was ended inside
    /// the wake).
    #[test]
    fn a_wake_during_shutdown_never_drops_a_future_inside_the_wakers_call() {
        for last_step_only in [false, true] {
            let rt = one_worker();
            let wakers = [Arc::new(Mutex::new(None)), Arc::new(Mutex::new(None))];
            let dropped_inside_a_wake = Arc::new(AtomicBool::new(false));
            let handles: Vec<_> = (0..2)
                .map(|i| {
                    let part = WakesTheOther {
                        other: wakers[1 - i].clone(),
                        mine: wakers[i].clone(),
                        dropped_inside_a_wake: dropped_inside_a_wake.clone(),
                    };
                    rt.spawn_async(async move {
                        let part = part;
                        std::future::poll_fn(|cx| {
                            *part.mine.lock().unwrap() = Some(cx.waker().clone());
                            Poll::<()>::Pending
                        })
                        .await
                    })
                })
                .collect();
            while wakers.iter().any(|w| w.lock().unwrap().is_none()) {
                std::thread::yield_now();
            }
            // Both polls have ended once the one worker runs this: both futures wait.
            rt.spawn(|| ()).join();
            let release = if last_step_only {
                let release = hold_the_worker(&rt);
                AsyncTasks::of(rt.registry()).shut_down(true);
                Some(release)
            } else {
                drop(rt);
                None
            };
            for h in handles {
                assert!(matches!(h.try_join(), Err(crate::JoinError::Cancelled)));
            }
            assert!(
                !dropped_inside_a_wake.load(Ordering::SeqCst),
                "a future was dropped inside the waker's call (last step only: \
                 {last_step_only})"
            );
            if let Some(release) = release {
                release.send(()).unwrap();
            }
        }
    }
}
