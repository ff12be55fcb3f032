//! The runtime: building it, the task API, shutdown.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use umt_sys::{BackendKind, CpuId, Monitor, Selection};

use crate::job::Job;
use crate::latch::{Latch, Waiter, wait_until};
use crate::registry::Registry;
use crate::scope::{Scope, run_scope};
use crate::spawn::{JoinHandle, JoinState};
use crate::stats::{CoreStats, Stats, WorkerStats};
use crate::sync::lock;
use crate::worker::with_current;

/// Why a runtime could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The core list is empty.
    #[error("no cores to run on: give at least one CPU to Builder::cores")]
    NoCores,
    /// A core is not in the process affinity mask.
    #[error("CPU {cpu} is not in this process's affinity mask {allowed:?}: use one of those CPUs")]
    CpuNotInMask {
        /// The CPU asked for.
        cpu: CpuId,
        /// The CPUs the process may run on.
        allowed: Vec<CpuId>,
    },
    /// A core was given twice.
    #[error("CPU {0} is listed twice: give each core once")]
    DuplicateCpu(CpuId),
    /// `max_workers_per_core(0)`.
    #[error("max_workers_per_core must be at least 1 (1 disables spare workers)")]
    ZeroWorkersPerCore,
    /// A zero scan period.
    #[error("the leader's scan period must be longer than zero")]
    ZeroScanPeriod,
    /// The monitor could not be created with the requested backend.
    #[error("monitor: {0}")]
    Monitor(#[from] umt_sys::Error),
    /// A thread could not be started.
    #[error("could not start a runtime thread: {0}")]
    Spawn(#[from] std::io::Error),
}

type NameFn = Box<dyn Fn(CpuId, usize) -> String + Send + Sync>;

/// How the leader threads (one per core, pinned there) are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeaderPolicy {
    /// `SCHED_IDLE` (the default): a leader runs only when its core has nothing else to run,
    /// which is exactly when the core's workers have blocked, and its wake-ups never preempt a
    /// worker. Its cost
    /// on busy cores is nil. On a machine saturated by *other* processes it runs rarely, but
    /// then no core is idle to refill. Only the leader has this policy: spare workers are
    /// started by a helper thread with the builder's policy (an unprivileged thread could not
    /// leave `SCHED_IDLE` again), so they compete with other processes like the initial ones.
    #[default]
    Idle,
    /// The normal policy, as in the paper: the leader also runs its periodic scan on busy
    /// cores, preempting a worker each time (and, with the perf backend, is woken again by the
    /// switch records that preemption produces).
    Normal,
    /// `SCHED_IDLE`, and the leader polls instead of waiting for the monitor's signal: while
    /// its core has an active worker, it runs whenever the core would otherwise idle, and the
    /// monitor signals nobody per event (`MonitorBuilder::signal_each_event(false)`). Workers
    /// drain their own events at their scheduling points, so oversubscription is still seen.
    ///
    /// For the perf backend in a virtual machine: there, the signal per context switch is a
    /// self-interrupt and a VM exit (about 20 us per record measured here), paid by the
    /// monitored threads on every switch. In the heat benchmark on a 2-core VM, polling made
    /// umt-perf about 8 % faster than `Idle`. The cost: a core whose active workers all
    /// block runs its leader's loop instead of halting (time no other thread of the machine
    /// wanted, but the core never sleeps). After 64 scan periods without an event the leader
    /// polls once per scan period instead, or, with no active worker on its core, sleeps until
    /// one becomes active. [`crate::Stats::leader_poll_time`] says how much CPU the polling
    /// took. Each scheduling point costs a look at the worker's own ring: fine-grained
    /// fork-join is slower (a `join` tree of 4096 leaves: about 1.6x the time with `Idle`).
    Poll,
}

impl LeaderPolicy {
    /// Every policy.
    pub const ALL: [LeaderPolicy; 3] =
        [LeaderPolicy::Idle, LeaderPolicy::Normal, LeaderPolicy::Poll];

    /// The lowercase name used on command lines and in reports.
    pub const fn name(self) -> &'static str {
        match self {
            LeaderPolicy::Idle => "idle",
            LeaderPolicy::Normal => "normal",
            LeaderPolicy::Poll => "poll",
        }
    }
}

impl std::fmt::Display for LeaderPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of parsing a [`LeaderPolicy`] from text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown leader policy {0:?}: use idle, normal or poll")]
pub struct ParseLeaderPolicyError(String);

impl std::str::FromStr for LeaderPolicy {
    type Err = ParseLeaderPolicyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        LeaderPolicy::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| ParseLeaderPolicyError(s.to_owned()))
    }
}

/// Configures a [`Runtime`].
pub struct Builder {
    cores: Option<Vec<CpuId>>,
    monitor: BackendKind,
    max_workers_per_core: usize,
    scan_period: Duration,
    leader_policy: LeaderPolicy,
    ring_pages: usize,
    thread_name: NameFn,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("cores", &self.cores)
            .field("monitor", &self.monitor)
            .field("max_workers_per_core", &self.max_workers_per_core)
            .field("scan_period", &self.scan_period)
            .finish_non_exhaustive()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            cores: None,
            monitor: BackendKind::Auto,
            max_workers_per_core: 16,
            scan_period: Duration::from_millis(1),
            leader_policy: LeaderPolicy::Idle,
            ring_pages: umt_sys::DEFAULT_RING_PAGES,
            thread_name: Box::new(|cpu, k| format!("umt-worker-{cpu}.{k}")),
        }
    }
}

impl Builder {
    /// The CPUs to run on, one pinned worker each (default: every CPU of the process mask).
    pub fn cores(mut self, cpus: impl IntoIterator<Item = CpuId>) -> Self {
        self.cores = Some(cpus.into_iter().collect());
        self
    }

    /// The monitor backend (default [`BackendKind::Auto`]; `Disabled` gives a classic
    /// one-worker-per-core pool).
    pub fn monitor(mut self, backend: BackendKind) -> Self {
        self.monitor = backend;
        self
    }

    /// Most workers per core, the initial one included (default 16). Spares are started only
    /// when a core has no ready worker while work is queued, so a program that never blocks
    /// keeps one per core. The cap matters when blocking tasks come in bursts: heat's
    /// checkpoints put many write tasks in flight at once, and with a cap of 4 a core whose
    /// four workers all waited for the disk sat idle (CPU use 84-98 %, against 99-103 % with
    /// 16, and runs about 5 % longer).
    pub fn max_workers_per_core(mut self, n: usize) -> Self {
        self.max_workers_per_core = n;
        self
    }

    /// How often the leader scans the cores when no event wakes it (default 1 ms; epoll counts
    /// whole milliseconds, so shorter periods round up to 1 ms).
    pub fn scan_period(mut self, period: Duration) -> Self {
        self.scan_period = period;
        self
    }

    /// How the leader threads are scheduled (default [`LeaderPolicy::Idle`]).
    pub fn leader_policy(mut self, policy: LeaderPolicy) -> Self {
        self.leader_policy = policy;
        self
    }

    /// Data pages of each worker's perf ring (perf backend only).
    pub fn ring_pages(mut self, pages: usize) -> Self {
        self.ring_pages = pages;
        self
    }

    /// Names worker threads from their CPU and their index among the core's workers.
    pub fn thread_name(
        mut self,
        f: impl Fn(CpuId, usize) -> String + Send + Sync + 'static,
    ) -> Self {
        self.thread_name = Box::new(f);
        self
    }

    /// Validates the configuration and starts the workers and, with the monitor on, one leader
    /// per core.
    pub fn build(self) -> Result<Runtime, BuildError> {
        let allowed = umt_sys::cpu::process_cpus()?;
        let cpus = self.cores.unwrap_or_else(|| allowed.clone());
        if cpus.is_empty() {
            return Err(BuildError::NoCores);
        }
        for (i, &cpu) in cpus.iter().enumerate() {
            if !allowed.contains(&cpu) {
                return Err(BuildError::CpuNotInMask { cpu, allowed });
            }
            if cpus[..i].contains(&cpu) {
                return Err(BuildError::DuplicateCpu(cpu));
            }
        }
        if self.max_workers_per_core == 0 {
            return Err(BuildError::ZeroWorkersPerCore);
        }
        if self.scan_period.is_zero() {
            return Err(BuildError::ZeroScanPeriod);
        }
        let monitor = Monitor::builder()
            .backend(self.monitor)
            .ring_pages(self.ring_pages)
            .signal_each_event(self.leader_policy != LeaderPolicy::Poll)
            .build()?;
        let reg = Arc::new(Registry::new(
            cpus,
            self.max_workers_per_core,
            monitor,
            self.scan_period,
            self.leader_policy,
            self.thread_name,
        ));
        let rt = Runtime { reg };
        for core in 0..rt.reg.cpus.len() {
            rt.reg.start_worker(core * rt.reg.cap)?;
        }
        if rt.reg.monitored() {
            // Started from this thread, so spare workers get the builder's scheduling policy.
            let starter = crate::starter::start(&rt.reg)?;
            let mut leaders = Vec::new();
            for (core, cpu) in rt.reg.cpus.iter().enumerate() {
                let (reg, starter) = (rt.reg.clone(), starter.clone());
                let leader = std::thread::Builder::new()
                    .name(format!("umt-leader-{cpu}"))
                    .spawn(move || crate::leader::leader_main(reg, starter, core))?;
                leaders.push(leader.thread().clone());
                lock(&rt.reg.threads).push(leader);
            }
            // Before this, a poke finds no leader to unpark: a leader's first sleep is bounded
            // by its timeout.
            let _ = rt.reg.leaders.set(leaders);
        }
        Ok(rt)
    }
}

/// A pool of pinned workers, one per core, plus spares the leader wakes when a worker blocks.
///
/// Dropping it runs every queued task, then joins every thread and closes the monitor's
/// descriptors.
pub struct Runtime {
    reg: Arc<Registry>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("cpus", &self.reg.cpus)
            .field("backend", &self.backend())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime with the default configuration.
    pub fn new() -> Result<Runtime, BuildError> {
        Builder::default().build()
    }

    /// A builder.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The CPUs the runtime runs on.
    pub fn cpus(&self) -> &[CpuId] {
        &self.reg.cpus
    }

    /// What the runtime's threads share, for the crate's tests.
    #[cfg(test)]
    pub(crate) fn registry(&self) -> &Registry {
        &self.reg
    }

    /// The monitor backend in use.
    pub fn backend(&self) -> BackendKind {
        self.reg.monitor.backend()
    }

    /// How the backend was chosen, with the reasons better ones were rejected.
    pub fn selection(&self) -> &Selection {
        self.reg.monitor.selection()
    }

    fn on_own_worker(&self) -> bool {
        with_current(|ctx| ctx.is_some_and(|ctx| Arc::ptr_eq(ctx.registry(), &self.reg)))
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
        wait_until(&latch);
        match result {
            Some(Ok(r)) => r,
            Some(Err(p)) => resume_unwind(p),
            None => unreachable!("the latch is set after the result is stored"),
        }
    }

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
        self.install(|| run_scope(Some(&self.reg), f))
    }

    /// Runs `a` and `b` in parallel on this runtime and returns both results.
    pub fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        self.install(|| crate::join(a, b))
    }

    /// Starts a task that owns its data; the handle waits for it (blocking or as a future).
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let state = JoinState::new();
        let job = {
            let state = state.clone();
            Job::new(move || state.complete(catch_unwind(AssertUnwindSafe(f))))
        };
        with_current(|ctx| match ctx {
            Some(ctx) if Arc::ptr_eq(ctx.registry(), &self.reg) => ctx.push(job),
            _ => self.reg.inject(job),
        });
        JoinHandle::new(state)
    }

    /// Calls `body(i)` for every `i` in `range`, split into one static chunk per core.
    pub fn parallel_for<F>(&self, range: Range<usize>, body: F)
    where
        F: Fn(usize) + Sync + Send,
    {
        let chunks = self.reg.cpus.len();
        self.scope(|s| crate::parallel::spawn_static(s, range, chunks, &body));
    }

    /// Like [`Runtime::parallel_for`] with chunks of `chunk` iterations (the last may be shorter).
    pub fn parallel_for_chunked<F>(&self, range: Range<usize>, chunk: usize, body: F)
    where
        F: Fn(usize) + Sync + Send,
    {
        let len = range.end.saturating_sub(range.start);
        let chunks = len.div_ceil(chunk.max(1));
        self.scope(|s| crate::parallel::spawn_static(s, range, chunks, &body));
    }

    /// A snapshot of the runtime's counters.
    pub fn stats(&self) -> Stats {
        let reg = &self.reg;
        let workers: Vec<(usize, WorkerStats)> = reg
            .slots
            .iter()
            .filter(|s| s.started.load(Ordering::Acquire))
            .map(|s| {
                (
                    s.core,
                    WorkerStats {
                        cpu: reg.cpus[s.core],
                        spare: s.spare,
                        tasks_run: s.tasks_run.load(Ordering::Relaxed),
                        surrenders: s.surrenders.load(Ordering::Relaxed),
                    },
                )
            })
            .collect();
        let cores = reg
            .cpus
            .iter()
            .enumerate()
            .map(|(core, &cpu)| {
                let (active, created) = reg.pools.counts(core);
                let t = &reg.core_time[core];
                CoreStats {
                    cpu,
                    workers: created,
                    active_workers: active,
                    tasks_run: workers
                        .iter()
                        .filter(|(c, _)| *c == core)
                        .map(|(_, w)| w.tasks_run)
                        .sum(),
                    idle_with_work: Duration::from_nanos(
                        t.idle_with_work_ns.load(Ordering::Relaxed),
                    ),
                    oversubscribed: Duration::from_nanos(
                        t.oversubscribed_ns.load(Ordering::Relaxed),
                    ),
                }
            })
            .collect();
        let c = &reg.counters;
        let workers: Vec<WorkerStats> = workers.into_iter().map(|(_, w)| w).collect();
        Stats {
            backend: self.backend(),
            tasks_run: workers.iter().map(|w| w.tasks_run).sum(),
            monitor_events: c.monitor_events.load(Ordering::Relaxed),
            leader_iterations: c.leader_iterations.load(Ordering::Relaxed),
            leader_wakeups: c.leader_wakeups.load(Ordering::Relaxed),
            leader_poll_time: Duration::from_nanos(c.leader_poll_ns.load(Ordering::Relaxed)),
            surrenders: workers.iter().map(|w| w.surrenders).sum(),
            workers_created: c.workers_created.load(Ordering::Relaxed),
            cores,
            workers,
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let reg = &self.reg;
        reg.terminate.store(true, Ordering::Release);
        // A polling leader may sleep until a worker of its core becomes active.
        for leader in reg.leaders.get().into_iter().flatten() {
            leader.unpark();
        }
        // Threads may still be started by the leader until it has exited: repeat until none
        // is left. Wake everyone each round so parked workers see `terminate`.
        loop {
            for i in 0..reg.slots.len() {
                reg.notify(i);
            }
            let handles: Vec<_> = std::mem::take(&mut *lock(&reg.threads));
            if handles.is_empty() {
                break;
            }
            let me = std::thread::current().id();
            for h in handles {
                if h.thread().id() == me {
                    // Dropped from inside one of our own workers: it cannot join itself.
                    continue;
                }
                let _ = h.join();
            }
        }
    }
}
