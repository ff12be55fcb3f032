//! Building a runtime: the options, their validation, and starting its threads.

use std::sync::Arc;
use std::time::Duration;

use umt_sys::{BackendKind, CpuId, Monitor};

use crate::config::{Capabilities, Config, LeaderPolicy, NameFn, PanicFn, ThreadFn};
use crate::diag::Warning;
use crate::registry::Registry;
use crate::runtime::Runtime;

/// The most workers a core can have ([`Builder::max_workers_per_core`]): the runtime keeps
/// which of a core's workers may hold queued tasks in one 64-bit word, the last bit of which is
/// the leader's.
pub const MAX_WORKERS_PER_CORE: usize = 63;

/// The workers one runtime may have in all, spares included, when its backend keeps live
/// counts and [`Builder::max_workers_per_core`] says nothing: each core's cap is this shared
/// among the cores, at least 16 and at most [`MAX_WORKERS_PER_CORE`]
/// ([`default_workers_per_core`]; past 16 cores the floor of 16 per core exceeds it).
pub const DEFAULT_WORKERS_IN_ALL: usize = 256;

/// The default cap of workers per core on `cores` cores. With a backend that keeps live counts
/// (`live_counts`: Bpf, and the patched kernel idle-only; [`umt_sys::Monitor::counts_are_live`])
/// it is [`DEFAULT_WORKERS_IN_ALL`] shared among the cores, at least 16 and at most
/// [`MAX_WORKERS_PER_CORE`] (63 up to 4 cores, 32 at 8, 16 from 16 on); otherwise 16.
///
/// Why a share of one budget and not a fixed number per core: a task blocked in a read keeps
/// requests in flight, so the cap bounds the I/O concurrency a runtime can reach, and a disk
/// wants the same depth whether 4 or 16 cores feed it. On a 16-core machine (a virtio disk,
/// `umt-bench scan --front tasks --cores 4`: 400 cold files of 4 MiB read buffered and hashed)
/// a cap of 16 held umt-bpf at a disk queue depth of 31 and 1.23 s, where tokio's blocking
/// pool (512 threads) reached 136 and 1.06 s in the same invocation; in the next, a cap of 63
/// reached 132 and 1.11 s, tokio 1.04 s (one invocation each: the disk moved by up to 30 %
/// between invocations, so read the ratios to tokio, 1.16 and 1.07). At 8 cores the two caps
/// ran level, and at 16 cores the cap of 16 already reached tokio's depth (153 against 160);
/// on the 2-core development VM umt-bpf ran level with either cap.
///
/// More workers are more threads: up to 252 at 4 cores, each with its stack reserved
/// ([`Builder::stack_size`]), which a low cgroup `pids.max` or an `RLIMIT_AS` may refuse (a
/// spare that cannot start is said once, as a warning, and the core goes on without it).
///
/// Why only with live counts: the Perf backend records every context switch of every
/// worker and its leaders poll every ring, so each extra worker costs at each switch; on the
/// 2-core VM the same scan ran 12 % slower on umt-perf with 63 workers per core than with 16
/// (1.28 against 1.14 s, twice).
pub fn default_workers_per_core(cores: usize, live_counts: bool) -> usize {
    if !live_counts {
        return 16;
    }
    (DEFAULT_WORKERS_IN_ALL / cores.max(1)).clamp(16, MAX_WORKERS_PER_CORE)
}

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
    /// More workers per core than the runtime tracks.
    #[error(
        "max_workers_per_core is {0}, more than the {MAX_WORKERS_PER_CORE} a core can have: use at most {MAX_WORKERS_PER_CORE}"
    )]
    TooManyWorkersPerCore(usize),
    /// A zero scan period.
    #[error("the leader's scan period must be longer than zero")]
    ZeroScanPeriod,
    /// The monitor could not be created with the requested backend.
    #[error("monitor: {0}")]
    Monitor(#[from] umt_sys::Error),
    /// A thread could not be started.
    #[error("could not start a runtime thread: {0}")]
    Spawn(#[from] std::io::Error),
    /// No monitor could run, and [`Builder::require_monitor`] was set.
    #[error(
        "no monitor can run here and the runtime requires one ({0}): grant what the reasons \
         name, or drop Builder::require_monitor to run without one"
    )]
    MonitorRequired(umt_sys::Selection),
    /// [`Builder::build_global`] after the global runtime was built (by an earlier
    /// `build_global`, or on first use by a free function outside a runtime).
    #[error(
        "the global runtime is already built: call Builder::build_global once, before the \
         first join, scope or spawn outside a runtime"
    )]
    GlobalAlreadyBuilt,
    /// [`Builder::num_threads`] with more threads than the process has CPUs, on a runtime
    /// without a monitor (with one, it runs on every CPU and says so: the spares stand in for
    /// the threads beyond them).
    #[error(
        "{asked} threads asked for, but this process may run on {}: ask for at most {available}, or run with a monitor (its spares stand in for the threads beyond the CPUs)",
        crate::env::cpus_text(*.available)
    )]
    TooManyThreads {
        /// The number asked for.
        asked: usize,
        /// The CPUs of the process's affinity mask.
        available: usize,
    },
    /// Both [`Builder::cores`] and [`Builder::num_threads`].
    #[error("both cores and num_threads were given: give one of them")]
    CoresAndNumThreads,
}

/// Configures a [`Runtime`].
pub struct Builder {
    cores: Option<Vec<CpuId>>,
    num_threads: Option<usize>,
    /// `None`: `UMT_BACKEND`, else Auto.
    monitor: Option<BackendKind>,
    /// `None`: [`default_workers_per_core`] of the cores and the backend.
    max_workers_per_core: Option<usize>,
    scan_period: Duration,
    leader_policy: Option<LeaderPolicy>,
    ring_pages: usize,
    thread_name: NameFn,
    stack_size: Option<usize>,
    start_handler: Option<ThreadFn>,
    exit_handler: Option<ThreadFn>,
    panic_handler: Option<PanicFn>,
    handoff: bool,
    drive_io: bool,
    lend_workers: bool,
    leader_runs_tasks: bool,
    require_monitor: bool,
    trace: bool,
    io_poll_interval: Duration,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("cores", &self.cores)
            .field("num_threads", &self.num_threads)
            .field("monitor", &self.monitor)
            .field("max_workers_per_core", &self.max_workers_per_core)
            .field("scan_period", &self.scan_period)
            .field("leader_policy", &self.leader_policy)
            .field("handoff", &self.handoff)
            .field("drive_io", &self.drive_io)
            .field("lend_workers", &self.lend_workers)
            .field("leader_runs_tasks", &self.leader_runs_tasks)
            .field("require_monitor", &self.require_monitor)
            .field("trace", &self.trace)
            .field("io_poll_interval", &self.io_poll_interval)
            .finish_non_exhaustive()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            cores: None,
            num_threads: None,
            monitor: None,
            max_workers_per_core: None,
            scan_period: Duration::from_millis(1),
            leader_policy: None,
            ring_pages: umt_sys::DEFAULT_RING_PAGES,
            thread_name: Box::new(|cpu, k| format!("umt-worker-{cpu}.{k}")),
            stack_size: None,
            start_handler: None,
            exit_handler: None,
            panic_handler: None,
            handoff: false,
            drive_io: true,
            lend_workers: true,
            leader_runs_tasks: false,
            require_monitor: false,
            trace: false,
            io_poll_interval: crate::config::DEFAULT_POLL_INTERVAL,
        }
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
}

impl Builder {
    /// A builder with every default: [`Runtime::builder()`] (rayon's
    /// `ThreadPoolBuilder::new()`; [`ThreadPoolBuilder`](crate::ThreadPoolBuilder) names this
    /// type).
    ///
    /// ```
    /// let pool = umt_rt::ThreadPoolBuilder::new().num_threads(1).build()?;
    /// assert_eq!(pool.install(umt_rt::current_num_threads), 1);
    /// # Ok::<(), umt_rt::BuildError>(())
    /// ```
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Runs on the first `n` CPUs of the process's affinity mask, one pinned worker each
    /// (rayon's `num_threads`; spares come on top of those, one core at a time). Instead of
    /// [`Builder::cores`]. `0` is the default, as if it was not called (as rayon's). More
    /// than the mask holds runs on every CPU of the mask and says so (rayon would start that
    /// many threads, which code does to overlap its blocking: the spares do that here), or,
    /// without a monitor (so without spares), is [`BuildError::TooManyThreads`].
    ///
    /// When neither this nor [`Builder::cores`] is called: `UMT_NUM_THREADS` if set (as
    /// `RAYON_NUM_THREADS`, which is read when it is not; `0` means the default), else as
    /// many CPUs as the cgroup's CPU quota allows ([`umt_sys::cpu::cgroup_cpu_limit`],
    /// rounded up), else every CPU of the mask. A value that cannot be used, or a quota that
    /// binds, is said once.
    ///
    /// ```
    /// // A command-line option whose 0 means "the default", as rayon users write it.
    /// let asked = 0;
    /// let pool = umt_rt::ThreadPoolBuilder::new().num_threads(asked).build()?;
    /// assert!(pool.current_num_threads() >= 1);
    /// # Ok::<(), umt_rt::BuildError>(())
    /// ```
    pub fn num_threads(mut self, n: usize) -> Self {
        self.num_threads = Some(n);
        self
    }

    /// The CPUs to run on, one pinned worker each (default: every CPU of the process mask).
    pub fn cores(mut self, cpus: impl IntoIterator<Item = CpuId>) -> Self {
        self.cores = Some(cpus.into_iter().collect());
        self
    }

    /// The monitor backend (default: `UMT_BACKEND` if set, `auto`, `kernel`, `bpf`, `perf` or
    /// `off`, else [`BackendKind::Auto`]; `Disabled` gives a classic one-worker-per-core pool).
    /// A backend named here that the host cannot give fails [`Builder::build`]; one named by
    /// `UMT_BACKEND` is said on the warning line and the monitor chosen as for `auto`.
    pub fn monitor(mut self, backend: BackendKind) -> Self {
        self.monitor = Some(backend);
        self
    }

    /// Most workers per core, the initial one included (default: [`default_workers_per_core`],
    /// 16, or 16 to 63 by the number of cores with a backend that keeps live counts; at most
    /// [`MAX_WORKERS_PER_CORE`]). Spares are started only when a core has no ready worker while
    /// work is queued, so a program that never blocks keeps one per core. The cap matters when blocking tasks come in bursts: heat's
    /// checkpoints put many write tasks in flight at once, and with a cap of 4 a core whose
    /// four workers all waited for the disk sat idle (CPU use 84-98 %, against 99-103 % with
    /// 16, and runs about 5 % longer).
    pub fn max_workers_per_core(mut self, n: usize) -> Self {
        self.max_workers_per_core = Some(n);
        self
    }

    /// How often the leader scans the cores when no event wakes it (default 1 ms; epoll counts
    /// whole milliseconds, so shorter periods round up to 1 ms).
    pub fn scan_period(mut self, period: Duration) -> Self {
        self.scan_period = period;
        self
    }

    /// How often, at most, a core's workers look for completed I/O waits at their scheduling
    /// points while other tasks run ([`crate::io`], step W2; default 20 us). Zero: at every
    /// scheduling point of a core with waits.
    pub fn io_poll_interval(mut self, interval: Duration) -> Self {
        self.io_poll_interval = interval;
        self
    }

    /// How the leader threads are scheduled (default: [`LeaderPolicy::default_for`] the
    /// backend the monitor runs on).
    pub fn leader_policy(mut self, policy: LeaderPolicy) -> Self {
        self.leader_policy = Some(policy);
        self
    }

    /// Data pages of each worker's perf ring (perf backend only).
    pub fn ring_pages(mut self, pages: usize) -> Self {
        self.ring_pages = pages;
        self
    }

    /// Handoff, after the nanothreads kernel (default off): a worker of a core whose worker
    /// comes back from a block hands the core to it.
    ///
    /// **Directed**, with the Bpf backend on Linux 6.13 or later: when a worker that blocked
    /// inside a task is woken, the monitor signals (`SIGURG`) the worker running a task on its
    /// core, which steps aside at once, mid-task, and the core runs the returned worker next;
    /// the one that stepped aside runs again when the core has no other ready worker (the
    /// leader resumes it), when a worker of the core reaches a scheduling point and hands the
    /// core back, or after 4 ms at most. [`Stats::handoff_parks`](crate::Stats::handoff_parks)
    /// counts the steps aside. A program that handles `SIGURG` itself keeps its handler and
    /// gets the yields below instead (said once on stderr). The signal interrupts system calls
    /// the way any handled signal does: those that `SA_RESTART` restarts go on, the others
    /// (`epoll_wait`, `poll`, `nanosleep`, socket calls with a timeout) return `EINTR`: std's
    /// `thread::sleep`, `read_exact`, `write_all` and `read_to_end` retry, a plain `read` or
    /// `write` returns `ErrorKind::Interrupted` (as with any handled signal). A `SIGURG` that
    /// is not the monitor's is ignored, as by default.
    ///
    /// **Yields** elsewhere: at every scheduling point and while it spins for work, a worker
    /// whose core has an active worker the monitor does not count as ready yields its core.
    /// That worker is blocked in the kernel (the yield returns at once) or back from a block
    /// and waiting for the core: the yield lets it run now instead of at the end of this
    /// worker's time slice. Costs a `sched_yield` per scheduling point while a worker of the
    /// core is blocked; [`Stats::handoffs`](crate::Stats::handoffs) counts them.
    pub fn handoff(mut self, on: bool) -> Self {
        self.handoff = on;
        self
    }

    /// Workers wait for I/O events (default on): once a future uses
    /// [`async_io::Async`](crate::async_io::Async), an idle worker, one at a time, waits in
    /// the reactor's epoll set instead of parking, so a socket's event wakes the worker that
    /// runs its future, with no hop through the reactor thread; busy workers take the events
    /// between their jobs, and the reactor thread covers those that come while no worker
    /// waits or looks. Off: this runtime's workers park and never look (the reactor thread,
    /// and other runtimes' workers, take the events). Steps and races:
    /// `crates/umt-rt/src/drive.rs`.
    pub fn drive_io(mut self, on: bool) -> Self {
        self.drive_io = on;
        self
    }

    /// Lending (default on): a leader whose core has no ready worker, and can wake none (every
    /// worker of the core is blocked and the spare limit is reached, or nothing is queued),
    /// moves a runnable worker of the most oversubscribed other core to its own, as the
    /// kernel's load balancer moves the threads of an unpinned pool; the worker goes home
    /// once that core's own workers are back, or before it parks. Without it, a core whose
    /// workers all wait for the device idles while another core's returned workers share
    /// their core (measured: `umt-bench scan`, 8 % of the cores' time on 2 cores). Only with
    /// counts that follow a thread to its new CPU and that another core can read at any time
    /// (the Bpf backend, the Kernel backend idle-only: `Monitor::counts_are_live`); elsewhere
    /// it does nothing. [`Stats::workers_lent`](crate::Stats::workers_lent) counts the loans.
    pub fn lend_workers(mut self, on: bool) -> Self {
        self.lend_workers = on;
        self
    }

    /// Leader-follower, the UMT paper's future work (default off): a leader that finds its
    /// core with no ready worker while tasks are queued runs them itself, at once, instead of
    /// waking a parked worker, until a worker of its core is ready again. It saves the wake-up
    /// on the way to a refilled core; a task it runs that blocks leaves the core idle until
    /// it returns (the leader is not monitored), and its tasks run at the leader's policy.
    pub fn leader_runs_tasks(mut self, on: bool) -> Self {
        self.leader_runs_tasks = on;
        self
    }

    /// Whether a runtime without a monitor is an error (default `false`). With
    /// [`BackendKind::Auto`], a machine where neither the UMT kernel nor perf events can run
    /// gets a runtime without a monitor, a classic pool whose blocked workers leave their
    /// cores idle, and a warning on stderr that says why and how to fix it. With this set, it
    /// gets [`BuildError::MonitorRequired`] instead.
    pub fn require_monitor(mut self, required: bool) -> Self {
        self.require_monitor = required;
        self
    }

    /// Records what every worker and leader does, with times, for
    /// [`Runtime::take_trace`](crate::Runtime::take_trace) (default off). Each thread writes
    /// to a buffer of its own: a clock read and a store per task start and end, park,
    /// surrender and drain, and a lock per 4096 records or park. Off, it costs a test of a
    /// flag. The records stay in memory until taken: take them regularly in a long run.
    pub fn trace(mut self, on: bool) -> Self {
        self.trace = on;
        self
    }

    /// Receives the panic of every task started with
    /// [`Runtime::spawn_detached`](crate::Runtime::spawn_detached) or
    /// [`spawn_detached`](crate::spawn_detached), which have nobody to re-raise it to. Without
    /// one, each such panic is said on stderr; either way the runtime goes on (a panic in
    /// the handler itself is caught and said once).
    pub fn panic_handler(
        mut self,
        handler: impl Fn(Box<dyn std::any::Any + Send>) + Send + Sync + 'static,
    ) -> Self {
        self.panic_handler = Some(Box::new(handler));
        self
    }

    /// Names worker threads from their CPU and their index among the core's workers (each
    /// core counts its own from 0: name them by both, as the default `umt-worker-{cpu}.{i}`
    /// does; rayon's `|i| format!("name-{i}")` becomes `|cpu, i| format!("name-{cpu}.{i}")`).
    pub fn thread_name(
        mut self,
        f: impl Fn(CpuId, usize) -> String + Send + Sync + 'static,
    ) -> Self {
        self.thread_name = Box::new(f);
        self
    }

    /// The stack size of worker threads, in bytes (default: the standard library's, 2 MiB
    /// unless `RUST_MIN_STACK` says otherwise), as rayon's `ThreadPoolBuilder::stack_size`.
    /// Tasks run on their worker's stack, and a worker waiting in `join` or a scope runs
    /// other tasks on top of the waiting one.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Calls `f` on each worker thread as it starts, before it runs any task, with its index
    /// (`core * cap + k` for the `k`-th worker of a core, spares too, where `cap` is
    /// [`Runtime::max_workers_per_core`]), as rayon's `start_handler`: to set up thread-local
    /// state, a profiler, an allocator arena. A panic in `f` is said and the worker goes on.
    pub fn start_handler(mut self, f: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.start_handler = Some(Box::new(f));
        self
    }

    /// Calls `f` on each worker thread as it ends (the runtime is dropped), after its last
    /// task, with its index (see [`Builder::start_handler`]).
    pub fn exit_handler(mut self, f: impl Fn(usize) + Send + Sync + 'static) -> Self {
        self.exit_handler = Some(Box::new(f));
        self
    }

    /// Builds the runtime and makes it the global one, which [`join`](crate::join),
    /// [`scope`](crate::scope) and [`spawn`](crate::spawn) use outside a runtime (otherwise
    /// built on first use with the defaults). Once per process:
    /// [`BuildError::GlobalAlreadyBuilt`] after that, or after the first such use.
    ///
    /// ```no_run
    /// umt_rt::Runtime::builder().num_threads(2).build_global()?;
    /// let (a, b) = umt_rt::join(|| 1 + 1, || 2 + 2); // on the global runtime's workers
    /// assert_eq!((a, b), (2, 4));
    /// # Ok::<(), umt_rt::BuildError>(())
    /// ```
    pub fn build_global(self) -> Result<(), BuildError> {
        if crate::global::is_set() {
            return Err(BuildError::GlobalAlreadyBuilt);
        }
        crate::global::set(self.build()?)
    }

    /// Validates the configuration and starts the workers and, with the monitor on, one leader
    /// per core.
    pub fn build(self) -> Result<Runtime, BuildError> {
        let allowed = umt_sys::cpu::process_cpus()?;
        // What the environment decided, said once the runtime exists.
        let mut notes = Vec::new();
        // rayon's `num_threads(0)`: the default, as if it had not been called.
        let num_threads = self.num_threads.filter(|&n| n > 0);
        // `num_threads` beyond the mask: what was asked, for the check once the monitor is open.
        let oversubscribed = num_threads.filter(|&n| self.cores.is_none() && n > allowed.len());
        let cpus = match (self.cores, num_threads) {
            (Some(_), Some(_)) => return Err(BuildError::CoresAndNumThreads),
            (Some(cpus), None) => cpus,
            (None, Some(n)) if n > allowed.len() => {
                // rayon's pools oversubscribe: code written for one asks for more threads
                // than cores to overlap its blocking, which the spares do here.
                notes.push((
                    Warning::NumThreads,
                    format!(
                        "num_threads({n}), but this process may run on {}: runs on all of \
                         them, one pinned worker each (spares take a blocked worker's core)",
                        crate::env::cpus_text(allowed.len())
                    ),
                ));
                allowed.to_vec()
            }
            (None, Some(n)) => allowed[..n].to_vec(),
            (None, None) => crate::env::default_cpus(
                &allowed,
                crate::env::num_threads_var()
                    .as_ref()
                    .map(|(name, text)| (*name, text.as_str())),
                umt_sys::cpu::cgroup_cpu_limit(),
                &mut notes,
            ),
        };
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
        match self.max_workers_per_core {
            Some(0) => return Err(BuildError::ZeroWorkersPerCore),
            Some(cap) if cap > MAX_WORKERS_PER_CORE => {
                return Err(BuildError::TooManyWorkersPerCore(cap));
            }
            _ => {}
        }
        if self.scan_period.is_zero() {
            return Err(BuildError::ZeroScanPeriod);
        }
        let backend = self.monitor.unwrap_or_else(|| {
            crate::env::default_backend(crate::env::var("UMT_BACKEND").as_deref(), &mut notes)
        });
        let open = |backend: BackendKind| {
            let mut monitor = Monitor::builder()
                .backend(backend)
                .ring_pages(self.ring_pages);
            if self.handoff {
                // H1: the Bpf backend signals a worker to step aside; elsewhere (and where the
                // kernel lacks the kfunc) the monitor opens without it and handoff yields.
                monitor = monitor.directed_handoff(crate::handoff::HANDOFF_SIGNAL);
            }
            monitor.build()
        };
        let monitor = match open(backend) {
            Ok(monitor) => monitor,
            // A backend the environment named and this host cannot give: the monitor is
            // chosen as for auto, said once, rather than no runtime at all (the global one
            // would run every loop on its caller). `Builder::monitor` fails as asked.
            Err(e) if self.monitor.is_none() && backend != BackendKind::Auto => {
                notes.push((
                    Warning::EnvBackend,
                    format!("UMT_BACKEND={backend}: {e}; the monitor is chosen as for auto"),
                ));
                open(BackendKind::Auto)?
            }
            Err(e) => return Err(e.into()),
        };
        let handoff_signal = match monitor.handoff() {
            umt_sys::Handoff::Active { signal } => {
                match crate::handoff::install(signal, crate::worker::on_handoff_signal) {
                    Ok(()) => Some(signal),
                    Err(why) => {
                        notes.push((
                            Warning::Handoff,
                            format!(
                                "handoff only yields at scheduling points, no directed \
                                 handoff: {why}"
                            ),
                        ));
                        None
                    }
                }
            }
            _ => None,
        };
        let cap = self
            .max_workers_per_core
            .unwrap_or_else(|| default_workers_per_core(cpus.len(), monitor.counts_are_live()));
        let fell_back = !monitor.is_active() && backend != BackendKind::Disabled;
        if fell_back && self.require_monitor {
            return Err(BuildError::MonitorRequired(monitor.selection().clone()));
        }
        // Without a monitor no spare comes: the threads asked for beyond the CPUs would not
        // exist, and code that counts on them (n tasks that wait for each other) would hang.
        if let Some(asked) = oversubscribed.filter(|_| !monitor.is_active()) {
            return Err(BuildError::TooManyThreads {
                asked,
                available: allowed.len(),
            });
        }
        let leader_policy = self
            .leader_policy
            .unwrap_or(LeaderPolicy::default_for(monitor.backend()));
        // Polling leaders need no signal per event (no thread has registered yet).
        let caps = Capabilities::of(
            leader_policy,
            monitor.counts_are_live(),
            self.lend_workers,
            cpus.len(),
        );
        monitor.set_signal_each_event(!caps.polling);
        let config = Config {
            cpus,
            cap,
            scan_period: self.scan_period,
            leader_policy,
            thread_name: self.thread_name,
            stack_size: self.stack_size,
            start_handler: self.start_handler,
            exit_handler: self.exit_handler,
            panic_handler: self.panic_handler,
            handoff: self.handoff,
            handoff_signal,
            drive_io: self.drive_io,
            caps,
            leader_runs_tasks: self.leader_runs_tasks,
            trace: self.trace,
            io_poll_interval: self.io_poll_interval,
        };
        // From here on, dropping `rt` on an error stops whatever was started.
        let rt = Runtime::from_registry(Arc::new(Registry::new(config, monitor)));
        let reg = rt.registry();
        for (kind, note) in notes {
            reg.warnings.warn(kind, || note);
        }
        if fell_back {
            reg.warnings.warn(Warning::NoMonitor, || {
                format!(
                    "runs without a monitor, so a worker that blocks leaves its core idle: {} \
                     (Builder::require_monitor makes this an error)",
                    reg.monitor.selection()
                )
            });
        }
        for core in 0..reg.cores() {
            crate::worker::start(reg, core * reg.config.cap)?;
        }
        if reg.monitored() {
            // Started from this thread, so spare workers get the builder's scheduling policy.
            let starter = crate::starter::start(reg)?;
            let _ = reg.starter.set(starter.clone());
            let leaders = (0..reg.cores())
                .map(|core| crate::leader::start(reg, &starter, core))
                .collect::<std::io::Result<Vec<_>>>()?;
            // Before this, a poke finds no leader to unpark: a leader's first sleep is bounded
            // by its timeout.
            let _ = reg.leaders.set(leaders);
        }
        Ok(rt)
    }
}
