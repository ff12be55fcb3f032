//! The state a runtime's threads share: queues, worker slots, pools, monitor and counters.
//! Decisions live elsewhere: the leader's in `leader.rs`, a worker's in `worker.rs`.

use crate::handoff::Handoffs;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_deque::{Injector, Stealer, Worker};
use crossbeam_utils::CachePadded;
use umt_sys::Monitor;

use crate::config::Config;
use crate::core_time::CoreTime;
use crate::diag::{Warning, Warnings};
use crate::job::Job;
use crate::lend::Lend;
use crate::next::NextSlot;
use crate::offer::Offers;
use crate::pool::{LEADER_BIT, Notifier, Pools};
use crate::sync::{AtomicBool, Mutex};

/// One worker thread's place: its deque, its notifier, its counters. Slots of all possible
/// workers (cores x cap) exist from the start; threads are created on demand.
pub(crate) struct Slot {
    /// Index of the core (in the runtime's core list) the worker is bound to.
    pub(crate) core: usize,
    /// `false` for the initial worker of its core and for its leader.
    pub(crate) spare: bool,
    /// The slot of the core's leader, which runs tasks only with `leader_runs_tasks`.
    pub(crate) leader: bool,
    /// Other workers steal from here, also while this worker is parked.
    pub(crate) stealer: Stealer<Job>,
    /// The owning end, moved into the thread when it starts.
    pub(crate) deque: Mutex<Option<Worker<Job>>>,
    /// The future its running job woke, which it runs next (`next.rs`).
    pub(crate) next: NextSlot,
    /// Set by the thread when it starts.
    pub(crate) notifier: OnceLock<Notifier>,
    /// The thread runs (its deque may hold work).
    pub(crate) started: AtomicBool,
    /// Tasks this worker ran. Written by the worker only.
    pub(crate) tasks_run: AtomicU64,
    /// Times this worker surrendered its core. Written by the worker only.
    pub(crate) surrenders: AtomicU64,
    /// Times this worker yielded its core at a scheduling point for handoff. Written by the
    /// worker only.
    pub(crate) handoffs: AtomicU64,
    /// The worker registered with the monitor. Set by the worker when it starts.
    pub(crate) monitored: std::sync::atomic::AtomicBool,
    /// The thread's kernel id, for its `/proc` figures; 0 until it starts.
    pub(crate) tid: std::sync::atomic::AtomicI32,
    /// Whether a leader lent this worker to its own core (`lend.rs`).
    pub(crate) lend: Lend,
    /// B2 of `README.md`: how many times this worker handed its place on in `block_on` (the
    /// number of its latest such wait). Written by the worker only.
    pub(crate) block_on_waits: AtomicU64,
    /// B4: the number of the `block_on` wait whose replacement could not be started (0:
    /// none). Set by the starter, which then notifies this worker.
    pub(crate) replacement_failed: AtomicU64,
}

/// The leaders' end of the starter thread (`starter.rs`): requests to start the worker of a
/// slot.
#[derive(Clone)]
pub(crate) struct StartRequests(std::sync::mpsc::Sender<StartRequest>);

/// One request to the starter: the slot to start, and the worker parked in `block_on` that
/// reserved it (B2 of `README.md`), to tell if it cannot be started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StartRequest {
    /// The slot to start.
    pub(crate) index: usize,
    /// The slot of the worker waiting for it in `block_on`, and the number of that wait
    /// (`Slot::block_on_waits`), if any.
    pub(crate) for_block_on: Option<(usize, u64)>,
}

/// The request that stops the starter.
pub(crate) const STOP_STARTER: StartRequest = StartRequest {
    index: usize::MAX,
    for_block_on: None,
};

impl StartRequests {
    /// The sending end of the starter's channel.
    pub(crate) fn new(tx: std::sync::mpsc::Sender<StartRequest>) -> StartRequests {
        StartRequests(tx)
    }

    /// Asks for the worker of slot `index` (already reserved in its core's pool) to be started,
    /// for the worker of slot `for_block_on` if it parks in `block_on` meanwhile. Returns
    /// `false` when the starter is gone (the runtime is shutting down).
    pub(crate) fn request(&self, index: usize, for_block_on: Option<(usize, u64)>) -> bool {
        self.0
            .send(StartRequest {
                index,
                for_block_on,
            })
            .is_ok()
    }

    /// Stops the starter once it has served every request sent before (shutdown: the leaders
    /// may still be running, so the starter cannot wait for them to drop their senders).
    pub(crate) fn stop(&self) {
        let _ = self.0.send(STOP_STARTER);
    }
}

/// The features above the core that keep state in a runtime, one slot each (E1).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Feature {
    /// `io/`: the per-core rings and waits.
    Io,
    /// `onload/`: the onload threads.
    Onload,
    /// `async_task.rs`: the futures not yet done.
    Async,
}

/// How many [`Feature`]s there are.
const FEATURES: usize = 3;

/// What the core calls on a feature's state (E2, E3); each does nothing by default.
pub(crate) trait Hooks: std::any::Any + Send + Sync {
    /// At every scheduling point of a worker of `core` (after each task): must be cheap when
    /// the feature has nothing to do there.
    fn sched_point(&self, _reg: &Registry, _core: usize) {}

    /// At shutdown, before the workers are stopped (`workers_joined` false) and again once
    /// they are joined (true): what runs finishes, what waits is handed back. A second call
    /// finds nothing left to do, unless a task that ran during shutdown gave it something (or
    /// made the feature: then its first call is the one with `workers_joined`).
    fn shut_down(&self, _workers_joined: bool) {}

    /// The kernel id of the thread of the feature's own that runs its work on `core` (the
    /// onload thread), once started: `Runtime::stats` reads its CPU time and I/O (E4).
    fn core_thread(&self, _core: usize) -> Option<i32> {
        None
    }
}

/// A feature's state, kept in the registry's slot of its [`Feature`].
pub(crate) trait Extension: Hooks + Sized {
    /// Its slot; no two extensions share one.
    const FEATURE: Feature;
}

/// Counters of the leaders, the starter and the workers' drains.
#[derive(Default)]
pub(crate) struct Counters {
    /// Parked workers a leader woke because their core had no ready worker.
    pub(crate) leader_wakeups: AtomicU64,
    /// Workers a leader lent to its core (`lend.rs`).
    pub(crate) workers_lent: AtomicU64,
    /// Spare workers the starter thread created (at a leader's request).
    pub(crate) workers_created: AtomicU64,
    /// Times a leader woke up (events, scan timer, or a poll).
    pub(crate) leader_iterations: AtomicU64,
    /// Monitor events drained: by the leaders, and by the workers at their scheduling points
    /// (their own ring when leaders poll, their core's when its count is stale).
    pub(crate) monitor_events: AtomicU64,
    /// Nanoseconds of CPU the leaders spent in polling iterations that found nothing to do.
    pub(crate) leader_poll_ns: AtomicU64,
    /// Tasks cancelled because a task they depend on panicked.
    pub(crate) tasks_cancelled: AtomicU64,
}

/// Everything the runtime's threads share.
pub(crate) struct Registry {
    /// The options the runtime was built with.
    pub(crate) config: Config,
    /// Idle pools and active counts.
    pub(crate) pools: Pools,
    /// `cores * (cap + 1)` slots: slot `core * cap + k` is the k-th worker of `core`, and
    /// slot `cores * cap + core` its leader's (see [`Registry::leader_slot`]).
    pub(crate) slots: Box<[CachePadded<Slot>]>,
    /// Work pushed from outside the pool.
    pub(crate) injector: Injector<Job>,
    /// Futures woken outside a worker's own deque (by I/O events, another thread, or
    /// themselves), taken one at a time, first woken first polled (A2 of `async_task.rs`).
    pub(crate) wakes: Injector<Job>,
    /// Per core, work only that core's workers may run (`broadcast`); not stolen.
    pub(crate) inboxes: Box<[Injector<Job>]>,
    /// Work offered outside the queues (a running loop's chunks: `offer.rs`).
    pub(crate) offers: Offers,
    /// Block/unblock events and ready counts of the workers.
    pub(crate) monitor: Monitor,
    /// Set when the runtime is dropped.
    pub(crate) terminate: AtomicBool,
    /// The directed handoff's workers that stepped aside (`handoff.rs`).
    pub(crate) handoff: Handoffs,
    /// Leader counters. Padded, as `core_time`: the leader writes them every iteration, and
    /// they must not share a cache line with what workers read on every push.
    pub(crate) counters: CachePadded<Counters>,
    /// Per-core time accounting, written by the leaders.
    pub(crate) core_time: Box<[CachePadded<CoreTime>]>,
    /// Per core, the workers of other cores lent to it (`lend.rs`): its ready count minus
    /// these is its own ready workers.
    pub(crate) guests: Box<[CachePadded<std::sync::atomic::AtomicUsize>]>,
    /// Per core, whether its leader runs tasks now (`WorkerCtx::follow`): the drop waits for
    /// it (see [`Registry::leader_holds`]).
    pub(crate) leader_following: Box<[AtomicBool]>,
    /// The warnings already said (each kind once).
    pub(crate) warnings: Warnings,
    /// Handles of the workers and the starter thread, joined at shutdown.
    pub(crate) threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Handles of the leaders, joined at shutdown if they exit in time (see `Runtime`'s
    /// `Drop`).
    pub(crate) leader_threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Where leaders send requests to start spares; shutdown stops the starter through it.
    pub(crate) starter: OnceLock<StartRequests>,
    /// The leader of each core, set once all have started; with polling leaders a worker
    /// that becomes active unparks its core's leader (see [`Registry::poke_leader`]).
    pub(crate) leaders: OnceLock<Vec<std::thread::Thread>>,
    /// What the features above the core keep in this runtime, one slot per [`Feature`], each
    /// made by its feature on first use (steps E1–E4 in `README.md`).
    extensions: [OnceLock<Box<dyn Hooks>>; FEATURES],
    /// When the runtime was built (`Stats::elapsed`).
    pub(crate) started: std::time::Instant,
    /// Where threads hand their trace records over (`Builder::trace`); `None` when off.
    pub(crate) trace: Option<crate::trace::Recorder>,
    /// The process that built the runtime: a child of `fork` has none of its threads
    /// ([`Registry::forked`]).
    made: crate::fork::ForkMark,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Slot {
    /// The core this slot's worker runs on: `home` (its own, the core of the slot's
    /// `stealable_slots`) unless a leader lent it to another (`lend.rs`).
    pub(crate) fn runs_on(&self, home: usize) -> usize {
        self.lend.lent_to().unwrap_or(home)
    }
}

impl Registry {
    pub(crate) fn new(config: Config, monitor: Monitor) -> Registry {
        let (cores, cap) = (config.cpus.len(), config.cap);
        let config_trace = config.trace;
        let config_handoff = config.handoff_signal.is_some();
        let slots: Box<[CachePadded<Slot>]> = (0..cores * (cap + 1))
            .map(|i| {
                let deque = Worker::new_lifo();
                let leader = i >= cores * cap;
                CachePadded::new(Slot {
                    core: if leader { i - cores * cap } else { i / cap },
                    spare: !leader && i % cap != 0,
                    leader,
                    stealer: deque.stealer(),
                    deque: Mutex::new(Some(deque)),
                    next: NextSlot::default(),
                    notifier: OnceLock::new(),
                    started: AtomicBool::new(false),
                    tasks_run: AtomicU64::new(0),
                    surrenders: AtomicU64::new(0),
                    handoffs: AtomicU64::new(0),
                    monitored: std::sync::atomic::AtomicBool::new(false),
                    tid: std::sync::atomic::AtomicI32::new(0),
                    lend: Lend::default(),
                    block_on_waits: AtomicU64::new(0),
                    replacement_failed: AtomicU64::new(0),
                })
            })
            .collect();
        Registry {
            pools: Pools::new(cores, cap),
            core_time: (0..cores)
                .map(|_| CachePadded::new(CoreTime::new()))
                .collect(),
            guests: (0..cores).map(|_| CachePadded::default()).collect(),
            leader_following: (0..cores).map(|_| AtomicBool::new(false)).collect(),
            config,
            slots,
            injector: Injector::new(),
            wakes: Injector::new(),
            inboxes: (0..cores).map(|_| Injector::new()).collect(),
            offers: Offers::default(),
            monitor,
            terminate: AtomicBool::new(false),
            handoff: Handoffs::new(cores, cap, config_handoff),
            counters: CachePadded::default(),
            warnings: Warnings::default(),
            threads: Mutex::new(Vec::new()),
            leader_threads: Mutex::new(Vec::new()),
            starter: OnceLock::new(),
            leaders: OnceLock::new(),
            extensions: std::array::from_fn(|_| OnceLock::new()),
            started: std::time::Instant::now(),
            trace: config_trace.then(crate::trace::Recorder::new),
            made: crate::fork::ForkMark::here(),
        }
    }

    /// The state of feature `T`, if it was made (E1).
    #[inline]
    pub(crate) fn extension<T: Extension>(&self) -> Option<&T> {
        let hooks: &dyn std::any::Any = &**self.extensions[T::FEATURE as usize].get()?;
        hooks.downcast_ref::<T>()
    }

    /// The state of feature `T`, made by `init` if it was not yet; several threads may race
    /// here, one `init` runs (E1).
    pub(crate) fn extension_or_init<T: Extension>(&self, init: impl FnOnce() -> T) -> &T {
        let slot = &self.extensions[T::FEATURE as usize];
        let hooks: &dyn std::any::Any = &**slot.get_or_init(|| Box::new(init()));
        match hooks.downcast_ref::<T>() {
            Some(t) => t,
            // Each slot is only ever filled here, by its own `T::FEATURE`.
            None => unreachable!("two extensions share the slot of {:?}", T::FEATURE),
        }
    }

    /// Every feature's hook at a scheduling point of a worker of `core` (E2): one load per
    /// feature when none is in use.
    #[inline]
    pub(crate) fn sched_point(&self, core: usize) {
        for slot in &self.extensions {
            if let Some(hooks) = slot.get() {
                hooks.sched_point(self, core);
            }
        }
    }

    /// The threads of the features made so far that run their work on `core` (E4).
    pub(crate) fn feature_threads(&self, core: usize) -> Vec<i32> {
        self.extensions
            .iter()
            .filter_map(|slot| slot.get()?.core_thread(core))
            .collect()
    }

    /// Every feature's shutdown hook (E3), in [`Feature`] order.
    pub(crate) fn shut_down_extensions(&self, workers_joined: bool) {
        for slot in &self.extensions {
            if let Some(hooks) = slot.get() {
                hooks.shut_down(workers_joined);
            }
        }
    }

    /// Number of cores.
    #[inline]
    pub(crate) fn cores(&self) -> usize {
        self.config.cpus.len()
    }

    /// Whether `core`'s leader holds tasks: it runs them (`WorkerCtx::follow`), or some are
    /// left on its deque, which it runs as it exits (`leader_main`). Not its bit in
    /// [`Pools::stealable`], which stays set after thieves emptied the deque.
    pub(crate) fn leader_holds(&self, core: usize) -> bool {
        self.leader_following[core].load(Ordering::Acquire)
            || !self.slots[self.leader_slot(core)].stealer.is_empty()
    }

    /// The slot of `core`'s leader.
    pub(crate) fn leader_slot(&self, core: usize) -> usize {
        self.cores() * self.config.cap + core
    }

    /// With polling leaders: a worker of `core` has become active, so its leader must poll
    /// again if it sleeps for lack of active workers (step L1 of `README.md`). An unpark of a
    /// leader that is not parked only leaves a token: its next sleep returns at once, one
    /// extra iteration.
    pub(crate) fn poke_leader(&self, core: usize) {
        if self.config.caps.polling
            && let Some(leader) = self.leaders.get().and_then(|l| l.get(core))
        {
            leader.unpark();
        }
    }

    /// Wakes worker `index` if it waits on its notifier (or makes its next wait return).
    pub(crate) fn notify(&self, index: usize) {
        if let Some(n) = self.slots.get(index).and_then(|s| s.notifier.get()) {
            n.notify();
        }
    }

    /// Pushes a job from outside the pool, and wakes a worker of a core that has none active
    /// ([`Pools::wake_for_work`]).
    pub(crate) fn inject(&self, job: Job) {
        let Some(job) = self.unless_forked(job) else {
            return;
        };
        {
            // A push onto a shared queue is not interrupted for long (H3 of the directed
            // handoff): its readers wait for a slot being written by spinning.
            let _held = crate::sync::Held::new();
            self.injector.push(job);
        }
        self.pools.wake_for_work(|w| self.notify(w));
    }

    /// Whether the calling process is a `fork` child of the one that built the runtime: it
    /// has only the thread that called `fork`, none of the runtime's.
    pub(crate) fn forked(&self) -> bool {
        self.made.is_copy()
    }

    /// F1 (`README.md`, "A runtime in a child of fork"): `job` back, to queue, in the process
    /// that built the runtime; in a `fork` child, where no worker would ever take it (a task,
    /// an `install`, a loop's participants, all waited for by the caller for ever), it runs
    /// here, on the calling thread, said once.
    #[inline]
    fn unless_forked(&self, job: Job) -> Option<Job> {
        if !self.forked() {
            return Some(job);
        }
        self.run_forked(job);
        None
    }

    /// F1, the child's side of [`Registry::unless_forked`], out of the queueing path.
    #[cold]
    #[inline(never)]
    fn run_forked(&self, job: Job) {
        self.warnings.warn(Warning::Forked, || {
            "this runtime was built before this process was forked: its threads are not in \
             this process, so its tasks run on the calling thread, one at a time (build a \
             runtime in the child for parallel work; the global runtime is built again there)"
                .to_owned()
        });
        job.run();
    }

    /// Queues a woken future's `job` on [`Registry::wakes`], and wakes a worker as
    /// [`Registry::inject`] does.
    pub(crate) fn inject_wake(&self, job: Job) {
        let Some(job) = self.unless_forked(job) else {
            return;
        };
        {
            let _held = crate::sync::Held::new();
            self.wakes.push(job);
        }
        self.pools.wake_for_work(|w| self.notify(w));
    }

    /// Queues `job` for the workers of `core` only, and wakes one if the core has none
    /// active. The fence pairs with S2 of `Pools::sleep`, as in [`Registry::inject`]: either a
    /// worker going to sleep sees the job (its recheck reads its core's inbox), or this sees
    /// it in the pool.
    pub(crate) fn inject_to_core(&self, core: usize, job: Job) {
        let Some(job) = self.unless_forked(job) else {
            return;
        };
        {
            let _held = crate::sync::Held::new();
            self.inboxes[core].push(job);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        // Shutdown: the core's workers may have made their last look and left, and a task
        // that waits for this job (a broadcast from a task during the drop) would wait for
        // ever. Its inbox goes to the shared queue, which whoever is left takes from, the
        // waiting task's own worker included. With the fences, either this sees `terminate`,
        // or the drop's sweep of every inbox, after it stored `terminate`, sees the job (see
        // "Races", a job for a core at shutdown, in `README.md`).
        if self.terminate.load(Ordering::SeqCst) {
            self.reroute_inbox(core);
            return;
        }
        if let Some(w) = self.pools.take_from_core(core) {
            self.notify(w);
        }
    }

    /// Moves the jobs of `core`'s inbox to the shared queue (at shutdown: a job for a core
    /// runs on any worker left), and wakes a worker for them.
    pub(crate) fn reroute_inbox(&self, core: usize) {
        let mut moved = false;
        loop {
            match self.inboxes[core].steal() {
                crossbeam_deque::Steal::Success(job) => {
                    let _held = crate::sync::Held::new();
                    self.injector.push(job);
                    moved = true;
                }
                crossbeam_deque::Steal::Retry => {}
                crossbeam_deque::Steal::Empty => break,
            }
        }
        if moved {
            self.pools.wake_for_work(|w| self.notify(w));
        }
    }

    /// Whether a queue that a worker of `core` may take from holds a job, or a worker of
    /// `core` not lent elsewhere has a next job (N4 of `README.md`: a worker of the same core
    /// takes it at once; a lent one's is its host core's, where it runs).
    pub(crate) fn has_work_for(&self, core: usize) -> bool {
        !self.inboxes[core].is_empty()
            || self.stealable_slots(core, 0).any(|i| {
                let slot = &self.slots[i];
                slot.next.peek().is_some() && slot.runs_on(core) == core
            })
            || self.has_work()
    }

    /// Whether any worker's next slot holds a job (N3 of `README.md`: a worker about to park
    /// parks for a while only then).
    pub(crate) fn has_next_job(&self) -> bool {
        self.every_stealable_slot()
            .any(|(_, i)| self.slots[i].next.peek().is_some())
    }

    /// Every core's [`Registry::stealable_slots`], with the core: `(core, slot)`.
    pub(crate) fn every_stealable_slot(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.cores())
            .flat_map(move |core| self.stealable_slots(core, 0).map(move |i| (core, i)))
    }

    /// Whether any shared queue holds a job (the cores' inboxes aside), or an offer has one
    /// (a running loop with chunks left: `offer.rs`).
    pub(crate) fn has_work(&self) -> bool {
        !self.injector.is_empty()
            || !self.wakes.is_empty()
            || self
                .every_stealable_slot()
                .any(|(_, i)| !self.slots[i].stealer.is_empty())
            || self.offers.has_work()
    }

    /// The slots of `core` whose deques may hold jobs ([`Pools::stealable`]), from its
    /// `first`-th worker on (wrapping). Parked workers, whose deques are empty, are skipped:
    /// with a cap of 16 per core, looking at every slot a core ever started cost a failed
    /// look 16 cache lines per core.
    pub(crate) fn stealable_slots(
        &self,
        core: usize,
        first: usize,
    ) -> impl Iterator<Item = usize> + use<> {
        let cap = self.config.cap;
        let leader = self.leader_slot(core);
        let mask = self.pools.stealable(core);
        let start = (first % cap) as u32;
        let from_start = mask & (u64::MAX << start);
        Bits(from_start)
            .chain(Bits(mask & !from_start))
            .map(move |k| {
                if k == LEADER_BIT {
                    leader
                } else {
                    core * cap + k
                }
            })
    }

    /// Marks slot `index` started (its worker runs: it is listed in the stats).
    pub(crate) fn mark_started(&self, index: usize) {
        self.slots[index].started.store(true, Ordering::Release);
    }

    /// Whether the runtime monitors its workers (the backend is not Disabled).
    pub(crate) fn monitored(&self) -> bool {
        self.monitor.is_active()
    }
}

/// The set bits of a word, lowest first.
struct Bits(u64);

impl Iterator for Bits {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let k = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_listed_lowest_first() {
        assert_eq!(Bits(0).collect::<Vec<_>>(), Vec::<usize>::new());
        assert_eq!(Bits(0b1010_0001).collect::<Vec<_>>(), [0, 5, 7]);
        assert_eq!(Bits(1 << 63).collect::<Vec<_>>(), [63]);
    }
}

#[cfg(all(test, not(loom)))]
mod extension_tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;
    use crate::config::LeaderPolicy;

    fn registry(cores: usize) -> Registry {
        let config = Config {
            cpus: umt_sys::cpu::process_cpus().unwrap()[..1]
                .iter()
                .copied()
                .cycle()
                .take(cores)
                .collect(),
            cap: 2,
            scan_period: Duration::from_millis(1),
            leader_policy: LeaderPolicy::Idle,
            thread_name: Box::new(|_, i| format!("t{i}")),
            stack_size: None,
            start_handler: None,
            exit_handler: None,
            panic_handler: None,
            handoff: false,
            handoff_signal: None,
            drive_io: false,
            caps: crate::config::Capabilities::of(LeaderPolicy::Idle, false, false, cores),
            leader_runs_tasks: false,
            trace: false,
            io_poll_interval: Duration::from_micros(20),
        };
        let monitor = Monitor::builder()
            .backend(umt_sys::BackendKind::Disabled)
            .build()
            .unwrap();
        Registry::new(config, monitor)
    }

    /// Counts the hooks the core calls on it.
    #[derive(Default)]
    struct Probe {
        points: [AtomicUsize; 2],
        shut: AtomicUsize,
    }
    impl Hooks for Probe {
        fn sched_point(&self, _reg: &Registry, core: usize) {
            self.points[core].fetch_add(1, Ordering::Relaxed);
        }
        fn shut_down(&self, _workers_joined: bool) {
            self.shut.fetch_add(1, Ordering::Relaxed);
        }
    }
    impl Extension for Probe {
        const FEATURE: Feature = Feature::Io;
    }

    /// Only made, never called back.
    struct Quiet(u32);
    impl Hooks for Quiet {}
    impl Extension for Quiet {
        const FEATURE: Feature = Feature::Onload;
    }

    #[test]
    fn one_init_wins_and_every_hook_reaches_the_made_extensions() {
        let reg = registry(2);
        assert!(reg.extension::<Probe>().is_none());
        reg.sched_point(0);
        reg.shut_down_extensions(false);
        let inits = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    reg.extension_or_init(|| {
                        inits.fetch_add(1, Ordering::Relaxed);
                        Probe::default()
                    });
                });
            }
        });
        assert_eq!(inits.into_inner(), 1);
        assert!(reg.extension::<Quiet>().is_none());
        assert_eq!(reg.extension_or_init(|| Quiet(7)).0, 7);
        assert_eq!(reg.extension_or_init(|| Quiet(8)).0, 7, "made once");
        reg.sched_point(1);
        reg.sched_point(1);
        reg.sched_point(0);
        reg.shut_down_extensions(true);
        let probe = reg.extension::<Probe>().unwrap();
        let points: Vec<usize> = probe
            .points
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .collect();
        assert_eq!(points, [1, 2]);
        assert_eq!(probe.shut.load(Ordering::Relaxed), 1);
    }
}
