//! Onload (seed 002, the Onload Framework and DYON): work that runs only where a core would
//! otherwise idle, submitted with [`Runtime::onload`](crate::Runtime::onload).
//!
//! A submission either starts at once on idle cores ([`Onload::Started`]), waits for one up to
//! its deadline ([`Onload::Queued`]), or comes back unrun ([`Onload::Rejected`]). The steps
//! (`README.md` in this directory names the races):
//!
//! O1. A core is *free for onload* when its onload thread runs nothing and either the core is
//!     idle for the application (no ready worker in the monitor's count, or no active worker
//!     without a monitor, and no queued work it could run) or the current partition dedicates
//!     it to onloaded work ([`Runtime::set_onload_partition`](crate::Runtime::set_onload_partition),
//!     which [`Dyon`] drives).
//! O2. A submission claims between `min` and `max` free cores of its CPU set (a compare-and-swap
//!     on each core's busy flag), or none: fewer than `min` are released at once.
//! O3. Claimed: the closure runs once per claimed core, on that core's onload thread, with an
//!     [`OnloadContext`] saying which part it is. Not claimed: without a deadline it is handed
//!     back; with one it is queued.
//! O4. Onload threads run at `SCHED_IDLE` (normal priority on dedicated cores): the kernel runs
//!     them only when nothing else of any program is runnable there, and an application worker
//!     that wakes preempts them at once. While requests are queued, idle onload threads retry
//!     the queue every 200 us; being `SCHED_IDLE`, they run (and retry) only in idle time.
//! O5. A queued request starts only before its deadline (checked when claimed); once the
//!     deadline has passed it is expired, by the queue or by its waiter, and the closure goes
//!     back to the waiter unrun. Exactly one of the two happens: the request's state moves
//!     from queued to running or to expired under its lock, once.

mod bandit;
mod dyon;

use std::any::Any;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use umt_sys::CpuId;

use crate::registry::{Extension, Feature, Hooks, Registry};

pub use bandit::{Bandit, Strategy};
pub use dyon::{Dyon, DyonBuilder, Metric, spare_limit_arms};

fn lock<T>(m: &Mutex<T>) -> crate::sync::Counted<MutexGuard<'_, T>> {
    crate::sync::lock_std(m)
}

/// Where and how long an onloaded closure may wait to run
/// ([`Runtime::onload_with`](crate::Runtime::onload_with)).
#[derive(Debug, Clone)]
pub struct OnloadOptions {
    cpus: Option<Vec<CpuId>>,
    min: usize,
    max: usize,
    deadline: Option<Duration>,
}

impl Default for OnloadOptions {
    fn default() -> Self {
        OnloadOptions {
            cpus: None,
            min: 1,
            max: 1,
            deadline: None,
        }
    }
}

impl OnloadOptions {
    /// One core, any of the runtime's, now or never.
    pub fn new() -> OnloadOptions {
        OnloadOptions::default()
    }

    /// Only these CPUs (of the runtime's; others are ignored).
    pub fn cpus(mut self, cpus: impl IntoIterator<Item = CpuId>) -> OnloadOptions {
        self.cpus = Some(cpus.into_iter().collect());
        self
    }

    /// At least `min` cores at once, up to `max` (parallel onloaded work: the closure runs
    /// once per core it gets). `min` is at least 1 and `max` at least `min`.
    pub fn cores(mut self, min: usize, max: usize) -> OnloadOptions {
        self.min = min.max(1);
        self.max = max.max(self.min);
        self
    }

    /// Waits up to `deadline` for free cores, then is handed back unrun (never run late).
    pub fn deadline(mut self, deadline: Duration) -> OnloadOptions {
        self.deadline = Some(deadline);
        self
    }
}

/// What one run of an onloaded closure is (step O3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnloadContext {
    /// Which of the parallel runs this is, `0..count`.
    pub index: usize,
    /// How many cores the submission got.
    pub count: usize,
    /// The CPU it runs on (its onload thread is pinned there).
    pub cpu: CpuId,
    /// The core was dedicated to onloaded work by the partition (it may take time from the
    /// application), not merely idle.
    pub dedicated: bool,
    /// The core's ready count when it was claimed: at most 0 unless `dedicated` (0 without a
    /// monitor).
    pub ready_at_claim: i64,
}

/// The answer to a submission.
#[must_use = "a rejected closure comes back in `Rejected`, and a handle says when the work ran"]
pub enum Onload<F> {
    /// Runs now on free cores.
    Started(OnloadHandle<F>),
    /// No core was free; it waits for one until its deadline.
    Queued(OnloadHandle<F>),
    /// No core was free and it had no deadline: the closure, unrun.
    Rejected(F),
}

impl<F> std::fmt::Debug for Onload<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Onload::Started(_) => "Started",
            Onload::Queued(_) => "Queued",
            Onload::Rejected(_) => "Rejected",
        })
    }
}

/// A submission that started or waits ([`Onload`]).
pub struct OnloadHandle<F> {
    shared: Arc<Shared<F>>,
}

impl<F> std::fmt::Debug for OnloadHandle<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnloadHandle")
            .field("finished", &self.is_finished())
            .finish_non_exhaustive()
    }
}

enum State<F> {
    Queued(F),
    Running {
        left: usize,
        panic: Option<Box<dyn Any + Send>>,
    },
    Done(Option<Box<dyn Any + Send>>),
    Expired(F),
    Collected,
}

struct Shared<F> {
    state: Mutex<State<F>>,
    changed: Condvar,
    /// The closure once running (moved out of `State::Queued`).
    running: OnceLock<F>,
    /// Allowed cores (indices into the runtime's cores), `None`: all.
    cores: Option<Vec<usize>>,
    min: usize,
    max: usize,
    deadline: Option<Instant>,
    /// The pool's count of expired requests: the waiter that expires its request counts it.
    expired: Arc<AtomicU64>,
}

impl<F> Drop for Shared<F> {
    /// The last reference may be an onload thread's, or the pool's, whose threads must go on:
    /// the closure and a panic nobody collected are dropped under a catch (a payload whose own
    /// drop panics is leaked, `diag::drop_panic`).
    fn drop(&mut self) {
        let state = std::mem::replace(
            self.state.get_mut().unwrap_or_else(PoisonError::into_inner),
            State::Collected,
        );
        let running = self.running.take();
        // One at a time: the second dropped while the first's panic unwinds would abort.
        crate::diag::run_quietly(move || drop(state));
        crate::diag::run_quietly(move || drop(running));
    }
}

impl<F> OnloadHandle<F> {
    /// Waits until the work ran on every core it got (`Ok`; a panic in it is raised here), or
    /// its deadline passed before it started (`Err(closure)`, unrun).
    pub fn wait(self) -> Result<(), F> {
        let s = &self.shared;
        // Counted by hand: a condition variable needs the plain guard.
        let _held = crate::sync::Held::new();
        let mut state = s.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match std::mem::replace(&mut *state, State::Collected) {
                State::Done(None) => return Ok(()),
                State::Done(Some(panic)) => {
                    drop(state);
                    resume_unwind(panic)
                }
                State::Expired(f) => return Err(f),
                State::Queued(f) => {
                    let deadline = s.deadline.unwrap_or_else(Instant::now);
                    let now = Instant::now();
                    if now >= deadline {
                        // O5: the waiter expires it; the queue drops it when it next looks.
                        s.expired.fetch_add(1, Ordering::Relaxed);
                        return Err(f);
                    }
                    *state = State::Queued(f);
                    state = s
                        .changed
                        .wait_timeout(state, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                other => {
                    *state = other;
                    state = s
                        .changed
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }

    /// Whether it ran to the end or expired.
    pub fn is_finished(&self) -> bool {
        matches!(
            *lock(&self.shared.state),
            State::Done(_) | State::Expired(_) | State::Collected
        )
    }
}

/// A request as the pool sees it, whatever its closure's type.
trait Request: Send + Sync {
    fn allows(&self, core: usize) -> bool;
    fn min_max(&self) -> (usize, usize);
    fn deadline(&self) -> Option<Instant>;
    fn is_queued(&self) -> bool;
    /// O5: queued to expired, and counted; nothing if it was not queued any more (its waiter
    /// expired it, or it started).
    fn expire(&self);
    /// Queued to running on `count` cores; `false` if it was not queued any more.
    fn start(&self, count: usize) -> bool;
    /// One run, on one claimed core.
    fn run(&self, ctx: OnloadContext);
}

impl<F: Fn(OnloadContext) + Send + Sync> Request for Shared<F> {
    fn allows(&self, core: usize) -> bool {
        self.cores.as_ref().is_none_or(|c| c.contains(&core))
    }

    fn min_max(&self) -> (usize, usize) {
        (self.min, self.max)
    }

    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn is_queued(&self) -> bool {
        matches!(*lock(&self.state), State::Queued(_))
    }

    fn expire(&self) {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut *state, State::Collected) {
            State::Queued(f) => {
                // Counted before the waiter can see it: once `wait` returns, the stats hold it.
                self.expired.fetch_add(1, Ordering::Relaxed);
                *state = State::Expired(f);
                self.changed.notify_all();
            }
            other => *state = other,
        }
    }

    fn start(&self, count: usize) -> bool {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut *state, State::Collected) {
            State::Queued(f) => {
                let _ = self.running.set(f);
                *state = State::Running {
                    left: count,
                    panic: None,
                };
                true
            }
            other => {
                *state = other;
                false
            }
        }
    }

    fn run(&self, ctx: OnloadContext) {
        let result = match self.running.get() {
            Some(f) => catch_unwind(AssertUnwindSafe(|| f(ctx))),
            None => Ok(()),
        };
        let mut state = lock(&self.state);
        // A panic after the first is dropped, out of the lock: its drop is the user's code.
        let mut later = result.err();
        if let State::Running { left, panic } = &mut *state {
            if panic.is_none() {
                *panic = later.take();
            }
            *left -= 1;
            if *left == 0 {
                let panic = panic.take();
                *state = State::Done(panic);
                self.changed.notify_all();
            }
        }
        drop(state);
        if let Some(p) = later {
            crate::diag::drop_panic(p);
        }
    }
}

/// What the onload pool did ([`Runtime::onload_stats`](crate::Runtime::onload_stats)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OnloadStats {
    /// Submissions that started at once.
    pub started: u64,
    /// Submissions that waited in the queue and then started.
    pub started_late: u64,
    /// Submissions handed back at once (no free core, no deadline).
    pub rejected: u64,
    /// Queued submissions handed back because their deadline passed.
    pub expired: u64,
    /// Runs (one per core a submission got), per core.
    pub runs: Vec<u64>,
    /// The partition: how many cores are dedicated to onloaded work (0: idle time only).
    pub dedicated_cores: usize,
}

/// One core's onload thread and its assignment.
struct CoreSlot {
    /// Claimed: runs, or is about to run, an assignment (step O2).
    busy: AtomicBool,
    job: Mutex<Option<(Arc<dyn Request>, OnloadContext)>>,
    thread: OnceLock<Thread>,
    /// The thread's kernel id, once it has started (0 before): for its CPU time and I/O in
    /// [`crate::Stats`].
    tid: AtomicI32,
    runs: AtomicU64,
}

/// The onload threads of a runtime, made on its first onload.
pub(crate) struct OnloadPool {
    slots: Box<[CoreSlot]>,
    pending: Mutex<VecDeque<Arc<dyn Request>>>,
    pending_len: AtomicUsize,
    /// The last `dedicated` cores run onloaded work at normal priority, free or not.
    dedicated: AtomicUsize,
    terminate: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Where the next claim starts looking, so that cores share the work.
    next: AtomicUsize,
    /// Set once the first user has spawned the threads and filled the slots' handles.
    ready: AtomicBool,
    started: AtomicU64,
    started_late: AtomicU64,
    rejected: AtomicU64,
    expired: Arc<AtomicU64>,
}

/// How often idle onload threads retry the queue while requests wait (step O4).
const RETRY: Duration = Duration::from_micros(200);

impl OnloadPool {
    fn new(cores: usize) -> OnloadPool {
        OnloadPool {
            slots: (0..cores)
                .map(|_| CoreSlot {
                    busy: AtomicBool::new(false),
                    job: Mutex::new(None),
                    thread: OnceLock::new(),
                    tid: AtomicI32::new(0),
                    runs: AtomicU64::new(0),
                })
                .collect(),
            pending: Mutex::new(VecDeque::new()),
            pending_len: AtomicUsize::new(0),
            dedicated: AtomicUsize::new(0),
            terminate: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
            ready: AtomicBool::new(false),
            started: AtomicU64::new(0),
            started_late: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            expired: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The pool of `reg`, its threads started on first use.
    pub(crate) fn of(reg: &Arc<Registry>) -> &OnloadPool {
        let mut fresh = false;
        let pool = reg.extension_or_init(|| {
            fresh = true;
            OnloadPool::new(reg.cores())
        });
        if fresh {
            let mut handles = Vec::new();
            for core in 0..reg.cores() {
                let r = reg.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("umt-onload-{}", reg.config.cpus[core]))
                    .spawn(move || onload_main(&r, core));
                match spawned {
                    // The slot gets its thread's handle here, not from the thread: a thread
                    // that `SCHED_IDLE` keeps from running yet can already be handed work.
                    Ok(h) => {
                        let _ = pool.slots[core].thread.set(h.thread().clone());
                        handles.push(h);
                    }
                    Err(e) => reg.warnings.warn(crate::diag::Warning::Onload, || {
                        format!(
                            "no onload thread for core {core}, which takes no onloaded work: {e}"
                        )
                    }),
                }
            }
            *lock(&pool.threads) = handles;
            pool.ready.store(true, Ordering::Release);
        }
        // A concurrent first use: the spawning takes no longer than the thread creations.
        while !pool.ready.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        pool
    }

    fn dedicated_from(&self) -> usize {
        self.slots
            .len()
            .saturating_sub(self.dedicated.load(Ordering::Relaxed))
    }

    /// Step O1 for `core`: whether the application leaves it idle.
    fn app_idle(reg: &Registry, core: usize) -> (bool, i64) {
        let cpu = reg.config.cpus[core];
        let (busy, ready) = if reg.monitored() {
            let ready = reg.monitor.ready(cpu);
            (ready > 0, ready)
        } else {
            (reg.pools.counts(core).0 > 0, 0)
        };
        (!busy && !reg.has_work_for(core), ready)
    }

    /// Step O2: claims between `min` and `max` free cores `req` allows, or none.
    fn claim(&self, reg: &Registry, req: &dyn Request) -> Vec<OnloadContext> {
        let (min, max) = req.min_max();
        let n = self.slots.len();
        let from = self.dedicated_from();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut got: Vec<OnloadContext> = Vec::new();
        for k in 0..n {
            if got.len() == max {
                break;
            }
            let core = (start + k) % n;
            if !req.allows(core) || self.slots[core].thread.get().is_none() {
                continue;
            }
            let dedicated = core >= from;
            let (idle, ready) = Self::app_idle(reg, core);
            if !(dedicated || idle) {
                continue;
            }
            if self.slots[core]
                .busy
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                got.push(OnloadContext {
                    index: core,
                    count: 0,
                    cpu: reg.config.cpus[core],
                    dedicated,
                    ready_at_claim: ready,
                });
            }
        }
        if got.len() < min {
            for c in &got {
                self.slots[c.index].busy.store(false, Ordering::Release);
            }
            got.clear();
        }
        got
    }

    /// Step O3: hands `req` to the claimed cores and counts it in `started`, or releases them
    /// if it is not queued.
    fn dispatch(
        &self,
        req: &Arc<dyn Request>,
        claimed: Vec<OnloadContext>,
        started: &AtomicU64,
    ) -> bool {
        let count = claimed.len();
        if !req.start(count) {
            for c in &claimed {
                self.slots[c.index].busy.store(false, Ordering::Release);
            }
            return false;
        }
        // Counted before any core runs it: once its waiter returns, the stats hold it.
        started.fetch_add(1, Ordering::Relaxed);
        for (i, mut ctx) in claimed.into_iter().enumerate() {
            let core = ctx.index;
            ctx.index = i;
            ctx.count = count;
            *lock(&self.slots[core].job) = Some((req.clone(), ctx));
            if let Some(t) = self.slots[core].thread.get() {
                t.unpark();
            }
        }
        true
    }

    /// A submission: started, queued, or back.
    fn submit<F>(&self, reg: &Registry, f: F, opts: &OnloadOptions) -> Onload<F>
    where
        F: Fn(OnloadContext) + Send + Sync + 'static,
    {
        let cores = opts.cpus.as_ref().map(|cpus| {
            (0..reg.cores())
                .filter(|&c| cpus.contains(&reg.config.cpus[c]))
                .collect::<Vec<_>>()
        });
        let shared = Arc::new(Shared {
            state: Mutex::new(State::Queued(f)),
            changed: Condvar::new(),
            running: OnceLock::new(),
            cores,
            min: opts.min.max(1),
            max: opts.max.max(opts.min.max(1)),
            deadline: opts.deadline.map(|d| Instant::now() + d),
            expired: self.expired.clone(),
        });
        let req: Arc<dyn Request> = shared.clone();
        let claimed = self.claim(reg, &*req);
        if !claimed.is_empty() && self.dispatch(&req, claimed, &self.started) {
            return Onload::Started(OnloadHandle { shared });
        }
        if opts.deadline.is_some_and(|d| !d.is_zero()) {
            let mut q = lock(&self.pending);
            q.push_back(req);
            self.pending_len.store(q.len(), Ordering::Release);
            drop(q);
            for s in self.slots.iter() {
                if let Some(t) = s.thread.get() {
                    t.unpark();
                }
            }
            return Onload::Queued(OnloadHandle { shared });
        }
        drop(req);
        let mut state = lock(&shared.state);
        match std::mem::replace(&mut *state, State::Collected) {
            State::Queued(f) => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                Onload::Rejected(f)
            }
            // Not queued any more means it started (only its submitter held it).
            other => {
                *state = other;
                drop(state);
                Onload::Started(OnloadHandle { shared })
            }
        }
    }

    /// Steps O4 and O5: starts the queued requests that can start, drops the expired ones.
    fn pump(&self, reg: &Registry) {
        if self.pending_len.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut q = lock(&self.pending);
        let now = Instant::now();
        q.retain(|req| {
            if !req.is_queued() {
                // Its waiter expired it (and counted it).
                return false;
            }
            if req.deadline().is_some_and(|d| now >= d) {
                // Counted by `expire` when it was still queued, else by its waiter.
                req.expire();
                return false;
            }
            let claimed = self.claim(reg, &**req);
            if claimed.is_empty() {
                return true;
            }
            // Not dispatched: its waiter expired it meanwhile (and counted it).
            self.dispatch(req, claimed, &self.started_late);
            false
        });
        self.pending_len.store(q.len(), Ordering::Release);
    }

    pub(crate) fn stats(&self) -> OnloadStats {
        OnloadStats {
            started: self.started.load(Ordering::Relaxed),
            started_late: self.started_late.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            expired: self.expired.load(Ordering::Relaxed),
            runs: self
                .slots
                .iter()
                .map(|s| s.runs.load(Ordering::Relaxed))
                .collect(),
            dedicated_cores: self.dedicated.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn set_dedicated(&self, cores: usize) {
        self.dedicated
            .store(cores.min(self.slots.len()), Ordering::Relaxed);
    }
}

impl Extension for OnloadPool {
    const FEATURE: Feature = Feature::Onload;
}

impl Hooks for OnloadPool {
    /// Its onload thread of `core`, once started.
    fn core_thread(&self, core: usize) -> Option<i32> {
        match self.slots.get(core)?.tid.load(Ordering::Relaxed) {
            0 => None,
            tid => Some(tid),
        }
    }

    /// Stops the onload threads (after their running work) and hands every queued request
    /// back to its waiter.
    fn shut_down(&self, _workers_joined: bool) {
        self.terminate.store(true, Ordering::Release);
        for req in lock(&self.pending).drain(..) {
            req.expire();
        }
        self.pending_len.store(0, Ordering::Release);
        for s in self.slots.iter() {
            if let Some(t) = s.thread.get() {
                t.unpark();
            }
        }
        let me = std::thread::current().id();
        for h in std::mem::take(&mut *lock(&self.threads)) {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
        // A queue pass that was dispatching while the threads stopped may have left an
        // assignment behind: it started, so it runs, here.
        for s in self.slots.iter() {
            if let Some((req, ctx)) = lock(&s.job).take() {
                s.runs.fetch_add(1, Ordering::Relaxed);
                req.run(ctx);
                s.busy.store(false, Ordering::Release);
            }
        }
    }
}

/// An onload thread: pinned to its core, `SCHED_IDLE` unless the core is dedicated (O4).
fn onload_main(reg: &Arc<Registry>, core: usize) {
    let cpu = reg.config.cpus[core];
    let _ = umt_sys::cpu::pin_current_thread(cpu);
    let mut idle_policy = umt_sys::cpu::set_current_thread_idle_policy().is_ok();
    let Some(pool) = reg.extension::<OnloadPool>() else {
        return;
    };
    let slot = &pool.slots[core];
    slot.tid
        .store(umt_sys::cpu::current_tid(), Ordering::Relaxed);
    // However the thread ends, its id stops naming it (E4): the kernel may give it to
    // another thread, whose figures are not this one's.
    struct Forget<'a>(&'a AtomicI32);
    impl Drop for Forget<'_> {
        fn drop(&mut self) {
            self.0.store(0, Ordering::Relaxed);
        }
    }
    let _forget = Forget(&slot.tid);
    loop {
        let job = lock(&slot.job).take();
        let Some((req, ctx)) = job else {
            // An assignment made before shutdown runs first (above); one made after this
            // check runs on the thread that shuts down (`shut_down`).
            if pool.terminate.load(Ordering::Acquire) {
                break;
            }
            pool.pump(reg);
            if lock(&slot.job).is_some() {
                continue;
            }
            if pool.pending_len.load(Ordering::Acquire) > 0 {
                std::thread::park_timeout(RETRY);
            } else {
                std::thread::park();
            }
            continue;
        };
        // Dedicated cores run onloaded work at the application's priority.
        if ctx.dedicated == idle_policy {
            idle_policy = if ctx.dedicated {
                let normal = umt_sys::cpu::set_current_thread_normal_policy();
                if let Err(e) = &normal {
                    reg.warnings.warn(crate::diag::Warning::Onload, || {
                        format!(
                            "onload on the dedicated CPU {cpu} stays at SCHED_IDLE, so the \
                             application's threads there still preempt it: {e} (leaving \
                             SCHED_IDLE needs CAP_SYS_NICE or an RLIMIT_NICE of 20, \
                             `ulimit -e 20`)"
                        )
                    });
                }
                normal.is_err()
            } else {
                umt_sys::cpu::set_current_thread_idle_policy().is_ok()
            };
        }
        // Counted first: the waiter may read the counts as soon as the run ends.
        slot.runs.fetch_add(1, Ordering::Relaxed);
        req.run(ctx);
        slot.busy.store(false, Ordering::Release);
        if !idle_policy {
            idle_policy = umt_sys::cpu::set_current_thread_idle_policy().is_ok();
        }
    }
}

/// `Runtime::onload_with`.
pub(crate) fn onload<F>(reg: &Arc<Registry>, f: F, opts: &OnloadOptions) -> Onload<F>
where
    F: Fn(OnloadContext) + Send + Sync + 'static,
{
    OnloadPool::of(reg).submit(reg, f, opts)
}

// Onloading on a `Runtime`: work for the cores its application leaves idle.
impl crate::Runtime {
    /// Runs `f` on a core the application leaves idle, now or never: [`crate::Onload::Started`]
    /// or [`crate::Onload::Rejected`] with `f` back, unrun ([`crate::onload`], steps O1–O5).
    /// `f` runs on an onload thread of that core at `SCHED_IDLE`, which any application
    /// thread preempts.
    ///
    /// ```
    /// use umt_rt::{Onload, OnloadOptions, Runtime};
    /// use std::time::Duration;
    ///
    /// let rt = Runtime::builder().num_threads(2).build()?;
    /// // Nothing runs: both cores are idle.
    /// match rt.onload(|ctx| println!("checksumming on CPU {}", ctx.cpu)) {
    ///     Onload::Started(h) | Onload::Queued(h) => h.wait().ok().expect("not expired"),
    ///     Onload::Rejected(f) => f(umt_rt::OnloadContext { index: 0, count: 1, cpu: 0, dedicated: false, ready_at_claim: 0 }),
    /// }
    /// // Up to 2 cores at once, waiting up to 10 ms for them.
    /// let opts = OnloadOptions::new().cores(1, 2).deadline(Duration::from_millis(10));
    /// if let Onload::Started(h) | Onload::Queued(h) = rt.onload_with(&opts, |ctx| {
    ///     let _part = (ctx.index, ctx.count);
    /// }) {
    ///     let _ = h.wait(); // Err(f) if the deadline passed first
    /// }
    /// # Ok::<(), umt_rt::BuildError>(())
    /// ```
    pub fn onload<F>(&self, f: F) -> crate::Onload<F>
    where
        F: Fn(crate::OnloadContext) + Send + Sync + 'static,
    {
        crate::onload::onload(self.registry(), f, &crate::OnloadOptions::default())
    }

    /// [`Runtime::onload`](crate::Runtime::onload) with a CPU set, a range of cores and a deadline.
    pub fn onload_with<F>(&self, opts: &crate::OnloadOptions, f: F) -> crate::Onload<F>
    where
        F: Fn(crate::OnloadContext) + Send + Sync + 'static,
    {
        crate::onload::onload(self.registry(), f, opts)
    }

    /// What onloaded work did so far (all zero before the first [`Runtime::onload`](crate::Runtime::onload)).
    pub fn onload_stats(&self) -> crate::onload::OnloadStats {
        match self.registry().extension::<OnloadPool>() {
            Some(pool) => pool.stats(),
            None => crate::onload::OnloadStats {
                runs: vec![0; self.registry().cores()],
                ..Default::default()
            },
        }
    }

    /// Dedicates `cores` of the runtime's cores (the last ones) to onloaded work, which then
    /// runs there at the application's priority whether the application needs the core or
    /// not; on the others, only in idle time (the default, 0). DYON
    /// ([`crate::onload::Dyon`]) sets it from measurements.
    pub fn set_onload_partition(&self, cores: usize) {
        crate::onload::OnloadPool::of(self.registry()).set_dedicated(cores);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic payload that panics when dropped.
    struct Bomb;

    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("a payload panicked in its drop (on purpose)");
        }
    }

    /// A value whose drop panics with a [`Bomb`].
    struct PanicsWithABomb;

    impl Drop for PanicsWithABomb {
        fn drop(&mut self) {
            std::panic::panic_any(Bomb);
        }
    }

    /// A request's last reference may be an onload thread's: its end drops the closure and a
    /// panic nobody collected without a panic escaping (found in review: with the handle
    /// dropped, an onload thread died dropping a payload whose drop panicked, and later work
    /// for its core never ran).
    #[test]
    fn a_requests_end_drops_its_closure_and_uncollected_panic_quietly() {
        let captured = PanicsWithABomb;
        let work = move |_: OnloadContext| {
            let _keep = &captured;
        };
        let shared = Shared {
            state: Mutex::new(State::Done(Some(Box::new(PanicsWithABomb)))),
            changed: Condvar::new(),
            running: OnceLock::from(work),
            cores: None,
            min: 1,
            max: 1,
            deadline: None,
            expired: Arc::new(AtomicU64::new(0)),
        };
        let r = catch_unwind(AssertUnwindSafe(move || drop(shared)));
        assert!(r.is_ok(), "a panic escaped the request's end");
    }
}
