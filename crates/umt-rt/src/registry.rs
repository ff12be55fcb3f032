//! The state a runtime's threads share: queues, worker slots, pools, monitor and counters.
//! Decisions live elsewhere: the leader's in `leader.rs`, a worker's in `worker.rs`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_deque::{Injector, Stealer, Worker};
use crossbeam_utils::CachePadded;
use umt_sys::Monitor;

use crate::config::Config;
use crate::core_time::CoreTime;
use crate::job::Job;
use crate::pool::{Notifier, Pools};
use crate::sync::{AtomicBool, Mutex};

/// One worker thread's place: its deque, its notifier, its counters. Slots of all possible
/// workers (cores x cap) exist from the start; threads are created on demand.
pub(crate) struct Slot {
    /// Index of the core (in the runtime's core list) the worker is bound to.
    pub(crate) core: usize,
    /// `false` for the initial worker of its core.
    pub(crate) spare: bool,
    /// Other workers steal from here, also while this worker is parked.
    pub(crate) stealer: Stealer<Job>,
    /// The owning end, moved into the thread when it starts.
    pub(crate) deque: Mutex<Option<Worker<Job>>>,
    /// Set by the thread when it starts.
    pub(crate) notifier: OnceLock<Notifier>,
    /// The thread runs (its deque may hold work).
    pub(crate) started: AtomicBool,
    /// Tasks this worker ran. Written by the worker only.
    pub(crate) tasks_run: AtomicU64,
    /// Times this worker surrendered its core. Written by the worker only.
    pub(crate) surrenders: AtomicU64,
}

/// Counters of the leaders, the starter and the workers' drains.
#[derive(Default)]
pub(crate) struct Counters {
    /// Parked workers a leader woke because their core had no ready worker.
    pub(crate) leader_wakeups: AtomicU64,
    /// Spare workers the starter thread created (at a leader's request).
    pub(crate) workers_created: AtomicU64,
    /// Times a leader woke up (events, scan timer, or a poll).
    pub(crate) leader_iterations: AtomicU64,
    /// Monitor events drained: by the leaders, and with polling leaders by the workers at
    /// their scheduling points.
    pub(crate) monitor_events: AtomicU64,
    /// Nanoseconds of CPU the leaders spent in polling iterations that found nothing to do.
    pub(crate) leader_poll_ns: AtomicU64,
}

/// Everything the runtime's threads share.
pub(crate) struct Registry {
    /// The options the runtime was built with.
    pub(crate) config: Config,
    /// Idle pools and active counts.
    pub(crate) pools: Pools,
    /// `cpus.len() * cap` slots; slot `core * cap + k` is the k-th worker of `core`.
    pub(crate) slots: Box<[CachePadded<Slot>]>,
    /// Per core, one more than the highest `k` whose worker has started: scans of the slots
    /// (stealing, looking for work) stop there instead of touching every slot the cap allows.
    pub(crate) started_per_core: Box<[AtomicUsize]>,
    /// Work pushed from outside the pool.
    pub(crate) injector: Injector<Job>,
    /// Block/unblock events and ready counts of the workers.
    pub(crate) monitor: Monitor,
    /// Set when the runtime is dropped.
    pub(crate) terminate: AtomicBool,
    /// Leader counters. Padded, as `core_time`: the leader writes them every iteration, and
    /// they must not share a cache line with what workers read on every push.
    pub(crate) counters: CachePadded<Counters>,
    /// Per-core time accounting, written by the leaders.
    pub(crate) core_time: Box<[CachePadded<CoreTime>]>,
    /// Handles of every thread started, joined at shutdown.
    pub(crate) threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The leader of each core, set once all have started; with polling leaders a worker
    /// that becomes active unparks its core's leader (see [`Registry::poke_leader`]).
    pub(crate) leaders: OnceLock<Vec<std::thread::Thread>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Registry {
    pub(crate) fn new(config: Config, monitor: Monitor) -> Registry {
        let (cores, cap) = (config.cpus.len(), config.cap);
        let slots: Box<[CachePadded<Slot>]> = (0..cores * cap)
            .map(|i| {
                let deque = Worker::new_lifo();
                CachePadded::new(Slot {
                    core: i / cap,
                    spare: i % cap != 0,
                    stealer: deque.stealer(),
                    deque: Mutex::new(Some(deque)),
                    notifier: OnceLock::new(),
                    started: AtomicBool::new(false),
                    tasks_run: AtomicU64::new(0),
                    surrenders: AtomicU64::new(0),
                })
            })
            .collect();
        Registry {
            pools: Pools::new(cores, cap),
            started_per_core: (0..cores).map(|_| AtomicUsize::new(0)).collect(),
            core_time: (0..cores)
                .map(|_| CachePadded::new(CoreTime::new()))
                .collect(),
            config,
            slots,
            injector: Injector::new(),
            monitor,
            terminate: AtomicBool::new(false),
            counters: CachePadded::default(),
            threads: Mutex::new(Vec::new()),
            leaders: OnceLock::new(),
        }
    }

    /// Number of cores.
    #[inline]
    pub(crate) fn cores(&self) -> usize {
        self.config.cpus.len()
    }

    /// With polling leaders: a worker of `core` has become active, so its leader must poll
    /// again if it sleeps for lack of active workers (step L1 of `README.md`). An unpark of a
    /// leader that is not parked only leaves a token: its next sleep returns at once, one
    /// extra iteration.
    pub(crate) fn poke_leader(&self, core: usize) {
        if self.config.polling()
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
        self.injector.push(job);
        self.pools.wake_for_work(|w| self.notify(w));
    }

    /// Whether any queue holds a job.
    pub(crate) fn has_work(&self) -> bool {
        !self.injector.is_empty()
            || (0..self.cores()).any(|core| {
                self.started_slots(core, 0)
                    .any(|i| !self.slots[i].stealer.is_empty())
            })
    }

    /// The slots of `core` whose workers have started, from its `first`-th on (wrapping).
    pub(crate) fn started_slots(&self, core: usize, first: usize) -> impl Iterator<Item = usize> {
        let hi = self.started_per_core[core].load(Ordering::Acquire);
        let cap = self.config.cap;
        (0..hi)
            .map(move |j| core * cap + (first + j) % hi)
            .filter(|&i| self.slots[i].started.load(Ordering::Acquire))
    }

    /// Marks slot `index` started (its worker runs and its deque may be stolen from).
    pub(crate) fn mark_started(&self, index: usize) {
        let cap = self.config.cap;
        self.slots[index].started.store(true, Ordering::Release);
        self.started_per_core[index / cap].fetch_max(index % cap + 1, Ordering::Release);
    }

    /// Whether the runtime monitors its workers (the backend is not Disabled).
    pub(crate) fn monitored(&self) -> bool {
        self.monitor.is_active()
    }
}
