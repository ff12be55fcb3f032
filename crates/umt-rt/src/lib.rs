//! # umt-rt: a task runtime that never leaves a core idle because a worker blocked
//!
//! One worker thread per core, pinned, runs tasks from work-stealing deques, as in rayon. The
//! difference: a **leader thread** per core, pinned there and running only when the core would
//! otherwise idle, watches, through [`umt_sys::Monitor`], how many workers of each core are
//! ready. When a task blocks in the kernel (an `O_DIRECT` write, a read, a page fault) and its
//! core has no ready worker left while tasks are queued, the core's leader wakes a
//! spare worker bound to that core from the core's **idle pool** (creating one up to a cap).
//! When the blocked worker returns, the core has two ready workers, and one of them
//! **surrenders** at its next scheduling point (task start or end, spawn, yield, wait) and
//! parks in the pool. Queued tasks stay stealable throughout. The protocol is in
//! `src/README.md`, as numbered steps.
//!
//! With the monitor off ([`BackendKind::Disabled`]) it is a classic one-worker-per-core pool,
//! the baseline the benchmarks compare against.
//!
//! When the runtime cannot do its whole job it says so, once per kind and runtime: through
//! `tracing` if the application installed a subscriber, else one line on stderr (no monitor
//! could run, and why; a worker not monitored or not pinned; a leader that failed).
//! [`Stats::monitored_workers`] and [`Stats::monitor`] show the same at run time, and
//! [`Builder::require_monitor`] turns a missing monitor into [`BuildError::MonitorRequired`]
//! for applications that would rather not start than lose the overlap.
//!
//! How the leaders learn of a block follows the monitor's backend
//! ([`LeaderPolicy::default_for`]): with the UMT kernel they wait for its per-core file;
//! with the perf backend, whose signal per event is an interrupt (a VM exit in a virtual
//! machine) at every context switch, they poll whenever their core idles instead, and
//! fine-grained fork-join pays a little per scheduling point. Each leader looks after its own
//! core only, so what it does per event does not grow with the number of cores.
//!
//! ## Example: overlap blocking writes with computation
//!
//! ```
//! use std::io::Write;
//! use umt_rt::{Access, Runtime};
//!
//! let rt = Runtime::new()?; // monitor: Auto (the UMT kernel, else BPF, else perf events, else off)
//! // A directory of our own (mkdtemp): no other user can plant a link where we write.
//! let dir = tempfile::tempdir().expect("a private directory");
//! let mut results = vec![0u64; 8];
//! rt.scope(|s| {
//!     for (i, r) in results.iter_mut().enumerate() {
//!         // Compute a block...
//!         s.spawn_with([Access::write(i)], move |_| {
//!             *r = (0..200_000u64).map(|x| x ^ i as u64).sum();
//!         });
//!     }
//!     for i in 0..8 {
//!         // ...and write a checkpoint of it as soon as it is ready. While this task blocks in
//!         // the kernel, the leader gives its core to another worker that keeps computing.
//!         let path = dir.path().join(format!("checkpoint-{i}.bin"));
//!         s.spawn_with([Access::read(i)], move |_| {
//!             let mut f = std::fs::File::create(&path).expect("create");
//!             f.write_all(&[i as u8; 1 << 16]).expect("write");
//!             f.sync_all().expect("sync"); // blocks until the data is on disk
//!             std::fs::remove_file(&path).expect("remove");
//!         });
//!     }
//! });
//! assert!(results.iter().all(|&r| r > 0));
//! let stats = rt.stats();
//! assert_eq!(stats.tasks_run, 16 + 1); // the 16 tasks and the scope's body
//! println!("{:?}: {} surrenders, {} leader wake-ups", stats.backend, stats.surrenders, stats.leader_wakeups);
//! # Ok::<(), umt_rt::BuildError>(())
//! ```
//!
//! (`tempfile` stands in for wherever an application keeps its files.)
//!
//! Coming from rayon? [`coming_from_rayon`] says what is the same, what differs, and each
//! rayon call's counterpart.
//!
//! As in rayon, [`join`], [`scope`], [`spawn`], [`broadcast`] and the parallel iterators
//! also work outside a runtime: they then run on the global runtime, built on first use with
//! the defaults, or configured once with [`Builder::build_global`].
//!
//! ## Example: parallel iterators and loop schedules
//!
//! ```
//! use umt_rt::prelude::*;
//!
//! let mut pixels = vec![0u32; 1 << 16];
//! // Rows whose cost varies: a schedule that rebalances (seed 003 of the papers).
//! pixels
//!     .par_chunks_mut(256)
//!     .enumerate()
//!     .schedule(Schedule::Fac2)
//!     .for_each(|(row, px)| px.iter_mut().for_each(|p| *p = row as u32));
//! let lit = pixels.par_iter().filter(|&&p| p % 2 == 1).count();
//! assert_eq!(lit, 1 << 15);
//! pixels.par_sort_unstable();
//! assert!(pixels.windows(2).all(|w| w[0] <= w[1]));
//! ```
//!
//! `UMT_SCHEDULE` (`static`, `static_steal`, `dynamic,CHUNK`, `guided,MIN`, `fac2`, `af`,
//! `auto`) sets the schedule of every loop that does not choose one.
//!
//! ## Futures that may block
//!
//! [`Runtime::spawn_async`] runs a `Send` future as a task of the runtime; [`block_on`] runs
//! one on the calling thread. A future that calls something blocking inside `poll` (a
//! `std::fs` read, a blocking driver, a page fault on a mapped file) blocks its worker, and
//! the monitor gives the core to a spare that polls the core's other futures: no
//! `spawn_blocking` to remember. [`JoinHandle::abort`] cancels any task. A future whose I/O
//! (`async_io::Async`) is always ready when it asks still lets the others run: once a poll
//! has done I/O for 50 us, its next operation yields (as tokio's budget does, by time here).
//!
//! ```
//! let rt = umt_rt::Runtime::new()?;
//! let len = rt.spawn_async(async {
//!     // A blocking call inside a future: the core's other tasks go on meanwhile.
//!     std::fs::read("/proc/self/status").map(|b| b.len()).unwrap_or(0)
//! });
//! assert!(len.join() > 0);
//! # Ok::<(), umt_rt::BuildError>(())
//! ```
//!
//! ## The environment
//!
//! What the code leaves unset, a deployer can set: `UMT_NUM_THREADS` (cores, as rayon's
//! `RAYON_NUM_THREADS`, which is read when it is unset; `0` for one per CPU), `UMT_BACKEND`
//! (`auto`, `kernel`, `bpf`, `perf` or `off`, also spelt `disabled` or `none`) and
//! `UMT_SCHEDULE` (above). Without `UMT_NUM_THREADS`, a runtime runs on as many
//! CPUs as the cgroup's CPU quota allows (a container's `--cpus`, a unit's `CPUQuota=`;
//! [`umt_sys::cpu::cgroup_cpu_limit`]) when that is fewer than the affinity mask holds, and
//! says so. Explicit [`Builder`] calls win; an unusable value is said once and left out (a
//! `UMT_BACKEND` this host cannot give too: the monitor is then chosen as for `auto`).
//!
//! ## Seeing what the cores did, and using their idle time
//!
//! [`Runtime::stats`] gives per core the kernel's figures of its workers (CPU time, run-queue
//! wait, context switches) and their variation across cores ([`Stats::cov`]);
//! [`Builder::trace`] records every task, park, surrender and drain, and
//! [`Runtime::take_trace`] turns them into per-core states ([`CoreState`]) and their exact
//! times ([`Trace::accounting`]), or a Perfetto trace (feature `json`). [`Runtime::onload`]
//! runs work only on cores the application leaves idle, and [`onload::Dyon`] adapts how many
//! cores such work may take (seed 002), or how many workers a core may keep active
//! ([`Runtime::set_spare_limit`]).
//!
//! ## Waiting for I/O: the scheduler chooses how
//!
//! [`io`] gives tasks one way to wait for file reads and writes, descriptor readiness and
//! events of the application's own sources ([`io::Source`], such as MPI requests): the
//! runtime runs other tasks meanwhile and tests the waits between them, with one poll for all
//! of a core's waiters, and blocks in the kernel (on the core's io_uring) only when nothing
//! else can run there (seed 004).
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Items left out of the loom build (`RUSTFLAGS="--cfg loom"`), which checks the handshakes of
/// the files declared first below and needs no thread, monitor or runtime: one gate for the
/// crate root's own items. Modules are gated one by one with `#[cfg(not(loom))]` instead:
/// rustfmt does not look into a macro's body, so it would not format their files.
macro_rules! not_loom {
    ($($item:item)*) => { $( #[cfg(not(loom))] $item )* };
}

// The handshakes loom checks, and the shim they are written against.
mod blocker;
mod drive;
mod handoff;
mod lend;
mod offer;
mod pool;
mod scope_count;
mod sync;
mod task_state;

pub use umt_sys::{BackendKind, CpuId, Error as MonitorError, Selection, Unavailable};

/// What [`yield_now`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Yield {
    /// Another task ran.
    Executed,
    /// No other task ran: none was available, or this worker surrendered its oversubscribed
    /// core before starting one (the task stays queued for others).
    Idle,
}

// The runtime, left out of the loom build.

// Readiness through one epoll reactor: Linux's epoll (another OS would need kqueue).
#[cfg(target_os = "linux")]
#[cfg_attr(docsrs, doc(cfg(target_os = "linux")))]
#[cfg(not(loom))]
pub mod async_io;
#[cfg(not(loom))]
mod async_task;
#[cfg(not(loom))]
mod broadcast;
#[cfg(not(loom))]
mod builder;
#[cfg(not(loom))]
mod config;
#[cfg(not(loom))]
mod coop;
#[cfg(not(loom))]
mod core_time;
#[cfg(not(loom))]
mod deps;
#[cfg(not(loom))]
mod diag;
#[cfg(not(loom))]
mod env;
#[cfg(not(loom))]
mod fork;
#[cfg(not(loom))]
mod global;
#[cfg(not(loom))]
pub mod io;
#[cfg(not(loom))]
pub mod iter;
#[cfg(not(loom))]
mod job;
#[cfg(not(loom))]
mod join;
#[cfg(not(loom))]
mod latch;
#[cfg(not(loom))]
mod leader;
#[cfg(not(loom))]
mod next;
#[cfg(not(loom))]
pub mod onload;
#[cfg(not(loom))]
mod registry;
#[cfg(not(loom))]
mod runtime;
#[cfg(not(loom))]
mod schedule;
#[cfg(not(loom))]
mod scope;
#[cfg(not(loom))]
mod sort;
#[cfg(not(loom))]
mod spawn;
#[cfg(not(loom))]
mod starter;
#[cfg(not(loom))]
mod stats;
#[cfg(not(loom))]
pub mod time;
#[cfg(not(loom))]
mod trace;
#[cfg(not(loom))]
mod worker;

not_loom! {
    pub use async_task::block_on;
    pub use broadcast::BroadcastContext;
    pub use builder::{
        BuildError, Builder, DEFAULT_WORKERS_IN_ALL, MAX_WORKERS_PER_CORE, default_workers_per_core,
    };
    pub use config::{LeaderPolicy, ParseLeaderPolicyError};
    pub use deps::{Access, Mode};
    pub use diag::set_warning_hook;
    pub use join::{FnContext, join, join_context};
    pub use onload::{Onload, OnloadContext, OnloadHandle, OnloadOptions};
    pub use runtime::Runtime;
    pub use schedule::{ParseScheduleError, Schedule};
    pub use scope::{NotTheBody, Scope, ScopeFifo};
    pub use spawn::{JoinError, JoinHandle, JoinResult};
    pub use stats::{CoreStats, Stats, WorkerStats};
    pub use trace::{CoreAccount, CoreState, Span, Trace, TraceKind, TraceRecord, TraceThread};

    /// Building blocks for tools and tests, beside the everyday API: what the loop schedules
    /// hand out, traces made from records, the statistics the figures use.
    ///
    /// ```
    /// use umt_rt::Schedule;
    /// use umt_rt::advanced::chunk_sequence;
    ///
    /// // Guided self-scheduling of 100 iterations over 4 participants: ceil(R / 4) each time.
    /// let sizes = chunk_sequence(Schedule::Guided(1), 100, 4).unwrap();
    /// assert_eq!(&sizes[..3], &[25, 19, 14]);
    /// assert_eq!(sizes.iter().sum::<usize>(), 100);
    /// ```
    pub mod advanced {
        pub use crate::schedule::{
            AUTO_REEXPLORE, STEAL_CHUNK_TIME, af_chunk, chunk_sequence, fac2_chunk, guided_chunk,
        };
        pub use crate::stats::coefficient_of_variation;

        /// A trace of the given records (sorted here by time), for `cpus` (a record's `core`
        /// indexes it), ending at `end_ns`: one read back from disk, or a test's. `monitored`
        /// says whether the ready counts are real (without a monitor, a blocked worker cannot be
        /// told from a running one). Records of cores beyond `cpus` are dropped.
        pub fn trace_from_records(
            cpus: Vec<crate::CpuId>,
            monitored: bool,
            records: Vec<crate::TraceRecord>,
            end_ns: u64,
        ) -> crate::Trace {
            crate::Trace::new(cpus, monitored, records, end_ns)
        }
    }

    #[doc = include_str!("coming_from_rayon.md")]
    pub mod coming_from_rayon {}

    /// rayon's paths to the slice traits (`use rayon::slice::ParallelSliceMut;` becomes
    /// `use umt_rt::slice::ParallelSliceMut;`); the prelude has them too.
    pub mod slice {
        pub use crate::iter::{ParallelSlice, ParallelSliceMut};
    }

    /// rayon's path to the string trait (`use umt_rt::str::ParallelString;`); the prelude has
    /// it too.
    pub mod str {
        pub use crate::iter::ParallelString;
    }

    /// rayon's name for a pool: a [`Runtime`] (`ThreadPoolBuilder::new().num_threads(n)
    /// .build()?` gives one, `pool.install(..)` runs in it).
    pub type ThreadPool = Runtime;

    /// rayon's name for the pool builder: a [`Builder`] (`ThreadPoolBuilder::new()` is
    /// [`Runtime::builder()`]; [`Builder::thread_name`] takes the CPU and the worker's index
    /// on its core, where rayon's takes one index: name threads by both).
    pub type ThreadPoolBuilder = Builder;

    /// rayon's name for what building a pool may fail with: a [`BuildError`] (its message
    /// says what to do).
    pub type ThreadPoolBuildError = BuildError;

    /// Everything a parallel loop needs, in one import: `use umt_rt::prelude::*;`.
    pub mod prelude {
        pub use crate::Schedule;
        pub use crate::iter::{
            FromParallelIterator, IndexedParallelIterator, IntoParallelIterator,
            IntoParallelRefIterator, IntoParallelRefMutIterator, ParIter, ParallelBridge,
            ParallelDrainFull, ParallelDrainRange, ParallelExtend, ParallelIterator, ParallelSlice,
            ParallelSliceMut, ParallelString,
        };
    }

    /// A task scheduling point (the taskyield): checks for oversubscription, then runs one other
    /// pending task if there is one. Returns `None` outside a worker thread.
    pub fn yield_now() -> Option<Yield> {
        worker::with_current(|ctx| {
            let ctx = ctx?;
            ctx.sched_point();
            Some(match ctx.find_work().map(|job| ctx.execute(job)) {
                Some(true) => Yield::Executed,
                _ => Yield::Idle,
            })
        })
    }

    /// rayon's `yield_local`: runs one task of the calling worker's own deque, if it has one
    /// (no other queue is looked at, and no surrender checked: [`yield_now`] does both).
    /// Returns `None` outside a worker thread.
    pub fn yield_local() -> Option<Yield> {
        worker::with_current(|ctx| {
            let ctx = ctx?;
            Some(match ctx.pop_local().map(|job| ctx.execute(job)) {
                Some(true) => Yield::Executed,
                _ => Yield::Idle,
            })
        })
    }

    /// The most cores a runtime of this process can have: the CPUs of its affinity mask
    /// (1 if they cannot be read). rayon's `max_num_threads`: a larger
    /// [`Builder::num_threads`] runs on that many, with spares standing in for the threads
    /// beyond them when a worker blocks (see there).
    pub fn max_num_threads() -> usize {
        umt_sys::cpu::process_cpus().map_or(1, |cpus| cpus.len().max(1))
    }

    /// Creates a scope on the runtime of the calling worker and waits for its tasks (a nested
    /// taskwait region). Outside a worker, the body runs on the calling thread and the tasks on
    /// the global runtime ([`Builder::build_global`]; built on first use).
    pub fn scope<'scope, F, R>(f: F) -> R
    where
        F: FnOnce(&Scope<'scope>) -> R,
    {
        scope::run_scope(global::current_or_global().as_ref(), f)
    }

    /// [`scope`] for rayon's `scope_fifo`: spawn with [`Scope::spawn_fifo`] for tasks queued
    /// first in, first out.
    pub fn scope_fifo<'scope, F, R>(f: F) -> R
    where
        F: FnOnce(&Scope<'scope>) -> R,
    {
        scope(f)
    }

    /// [`spawn_detached`] through the runtime's shared queue, first in, first out (rayon's
    /// `spawn_fifo`: [`Runtime::spawn_fifo`]), on the calling worker's runtime or outside a
    /// worker on the global runtime.
    pub fn spawn_fifo<F>(f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        match global::current_or_global() {
            Some(reg) => runtime::spawn_detached_in(&reg, f, true),
            None => spawn_detached(f),
        }
    }

    /// [`scope`] under rayon's other name: the body always runs on the calling thread, as
    /// [`scope`]'s does (rayon's `in_place_scope`, for code that calls it).
    ///
    /// ```
    /// let mut parts = [0u32; 3];
    /// umt_rt::in_place_scope(|s| {
    ///     for (i, p) in parts.iter_mut().enumerate() {
    ///         s.spawn(move |_| *p = i as u32 * 10);
    ///     }
    /// });
    /// assert_eq!(parts, [0, 10, 20]);
    /// ```
    pub fn in_place_scope<'scope, F, R>(f: F) -> R
    where
        F: FnOnce(&Scope<'scope>) -> R,
    {
        scope(f)
    }

    /// [`in_place_scope`] for rayon's `in_place_scope_fifo`: spawn with
    /// [`Scope::spawn_fifo`] for tasks queued first in, first out.
    pub fn in_place_scope_fifo<'scope, F, R>(f: F) -> R
    where
        F: FnOnce(&Scope<'scope>) -> R,
    {
        scope(f)
    }

    /// Starts a task that owns its data on the calling worker's runtime, or outside a worker on
    /// the global runtime ([`Builder::build_global`]; built on first use). The handle waits for
    /// it; dropping the handle detaches it (it still runs).
    ///
    /// ```
    /// let h = umt_rt::spawn(|| (1..=10u64).product::<u64>());
    /// assert_eq!(h.join(), 3_628_800);
    /// ```
    pub fn spawn<F, T>(f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        match global::current_or_global() {
            Some(reg) => runtime::spawn_on(&reg, f),
            // The global runtime could not start (said on stderr): run it here.
            None => {
                let state = spawn::JoinState::new();
                state.complete(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).into());
                JoinHandle::new(state)
            }
        }
    }

    /// Starts a task with nothing to wait on (rayon's `spawn`) on the calling worker's runtime,
    /// or outside a worker on the global runtime. A panic goes to that runtime's
    /// [`Builder::panic_handler`], or to stderr.
    pub fn spawn_detached<F>(f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        match global::current_or_global() {
            Some(reg) => runtime::spawn_detached_on(&reg, f),
            // The global runtime could not start (said on stderr): run it here.
            None => {
                if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                    diag::detached_panic(p);
                }
            }
        }
    }

    /// Starts `future` as a task on the calling worker's runtime, or outside a worker on the
    /// global runtime ([`Runtime::spawn_async`]); await the handle or join it.
    ///
    /// ```
    /// let h = umt_rt::spawn_async(async { "done" });
    /// assert_eq!(h.join(), "done");
    /// ```
    pub fn spawn_async<F>(future: F) -> JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match global::current_or_global() {
            Some(reg) => async_task::spawn_async_on(&reg, future),
            // The global runtime could not start (said on stderr): a thread of its own runs it.
            None => {
                let state = spawn::JoinState::new();
                let done = state.clone();
                let run = move || {
                    let r =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| block_on(future)));
                    done.complete(r.into());
                };
                if let Err(e) = std::thread::Builder::new()
                    .name("umt-async".into())
                    .spawn(run)
                {
                    diag::emit(&format!("umt-rt: cannot start a thread for a future: {e}"));
                    state.complete(spawn::Outcome::Cancelled);
                }
                JoinHandle::new(state)
            }
        }
    }

    /// Calls `f` once per core of the calling worker's runtime (or of the global runtime outside
    /// one), each call on a worker of its core, and returns the results in core order (rayon's
    /// `broadcast`: per-core setup, per-core statistics). A call still queued while its
    /// runtime is being dropped may run on another core's worker: that core's may have left.
    ///
    /// ```
    /// let cpus = umt_rt::broadcast(|ctx| (ctx.index(), umt_rt::current_cpu()));
    /// assert_eq!(cpus.len(), umt_rt::current_num_threads());
    /// for (i, (index, cpu)) in cpus.iter().enumerate() {
    ///     assert_eq!(*index, i);
    ///     assert!(cpu.is_some());
    /// }
    /// ```
    pub fn broadcast<F, R>(f: F) -> Vec<R>
    where
        F: Fn(BroadcastContext) -> R + Sync,
        R: Send,
    {
        match global::current_or_global() {
            Some(reg) => broadcast::broadcast_on(&reg, f),
            // The global runtime could not start (said on stderr): one call, here.
            None => vec![f(BroadcastContext::here())],
        }
    }

    /// The number of cores (one active worker each) of the calling worker's runtime, or of the
    /// global runtime outside one (building it on first use); 1 if it could not start. Spare
    /// workers that stand in for blocked ones are not counted: at most this many run at once.
    pub fn current_num_threads() -> usize {
        global::current_or_global().map_or(1, |reg| reg.cores())
    }

    /// The index (`0..current_num_threads()`) of the core the calling worker serves, or `None`
    /// outside a worker. A spare standing in for a blocked worker has its core's index.
    pub fn current_thread_index() -> Option<usize> {
        worker::with_current(|ctx| ctx.map(|ctx| ctx.core()))
    }

    /// The CPU the calling worker is bound to, or `None` outside a worker.
    pub fn current_cpu() -> Option<CpuId> {
        worker::with_current(|ctx| ctx.map(|ctx| ctx.cpu()))
    }
}

/// The crate's `README.md`, whose examples run as doc tests (what crates.io shows compiles).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
