//! The state a runtime's threads share: queues, worker slots, pools, monitor and counters.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_deque::{Injector, Stealer, Worker};
use crossbeam_utils::CachePadded;
use umt_sys::{CpuId, Monitor};

use crate::job::Job;
use crate::pool::{Fill, Notifier, Pools};
use crate::starter::StartRequests;
use crate::sync::{AtomicBool, Mutex, fence, lock};

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
    /// Tasks this worker ran.
    pub(crate) tasks_run: AtomicU64,
    /// Times this worker surrendered its core.
    pub(crate) surrenders: AtomicU64,
}

/// Counters of the leader and the pools.
#[derive(Default)]
pub(crate) struct Counters {
    /// Parked workers the leader woke because their core had no ready worker.
    pub(crate) leader_wakeups: AtomicU64,
    /// Spare workers created by the leader.
    pub(crate) workers_created: AtomicU64,
    /// Times the leader woke up (events or scan timer).
    pub(crate) leader_iterations: AtomicU64,
    /// Monitor events drained by the leaders (and, when they poll, by the workers).
    pub(crate) monitor_events: AtomicU64,
    /// Nanoseconds of CPU the leaders spent in polling iterations that found nothing to do.
    pub(crate) leader_poll_ns: AtomicU64,
}

/// Per-core time accounting, kept by the leaders. The ready counts change only when someone
/// drains the monitor, so the state a leader sees after its drain holds until the next drain,
/// by any leader: each leader observes every core after each drain.
pub(crate) struct CoreTime {
    /// Since when the core has been in which state: (ready count, no ready worker while work
    /// was queued). A std mutex: the leaders are not part of the loom model.
    state: std::sync::Mutex<(Instant, i64, bool)>,
    /// Nanoseconds with no ready worker while work was queued.
    pub(crate) idle_with_work_ns: AtomicU64,
    /// Nanoseconds with more than one ready worker.
    pub(crate) oversubscribed_ns: AtomicU64,
}

impl CoreTime {
    fn new() -> Self {
        CoreTime {
            state: std::sync::Mutex::new((Instant::now(), 1, false)),
            idle_with_work_ns: AtomicU64::new(0),
            oversubscribed_ns: AtomicU64::new(0),
        }
    }

    /// A drain at `now` left the core with `ready` ready workers, `starved` if none while work
    /// is queued: the previous state lasted until `now`.
    pub(crate) fn observe(&self, now: Instant, ready: i64, starved: bool) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (since, was_ready, was_starved) = *state;
        // Two leaders may observe out of order: a later `now` was already accounted.
        let Some(dt) = now.checked_duration_since(since) else {
            return;
        };
        let dt = dt.as_nanos() as u64;
        if was_starved {
            self.idle_with_work_ns.fetch_add(dt, Ordering::Relaxed);
        }
        if was_ready > 1 {
            self.oversubscribed_ns.fetch_add(dt, Ordering::Relaxed);
        }
        *state = (now, ready, starved);
    }
}

/// Everything the runtime's threads share.
pub(crate) struct Registry {
    /// The CPU of each core, by core index.
    pub(crate) cpus: Vec<CpuId>,
    /// Most workers per core.
    pub(crate) cap: usize,
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
    /// Per-core time accounting.
    pub(crate) core_time: Box<[CachePadded<CoreTime>]>,
    /// Leader period.
    pub(crate) scan_period: Duration,
    /// Scheduling policy of the leader threads.
    pub(crate) leader_policy: crate::runtime::LeaderPolicy,
    /// Names worker threads from (cpu, index among the core's workers).
    pub(crate) thread_name: Box<dyn Fn(CpuId, usize) -> String + Send + Sync>,
    /// Handles of every thread started, joined at shutdown.
    pub(crate) threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The leader of each core, set once all have started; with
    /// [`LeaderPolicy::Poll`](crate::LeaderPolicy::Poll) a worker that becomes active
    /// unparks its core's leader (see `Registry::poke_leader`).
    pub(crate) leaders: OnceLock<Vec<std::thread::Thread>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("cpus", &self.cpus)
            .field("cap", &self.cap)
            .finish_non_exhaustive()
    }
}

impl Registry {
    pub(crate) fn new(
        cpus: Vec<CpuId>,
        cap: usize,
        monitor: Monitor,
        scan_period: Duration,
        leader_policy: crate::runtime::LeaderPolicy,
        thread_name: Box<dyn Fn(CpuId, usize) -> String + Send + Sync>,
    ) -> Registry {
        let slots: Box<[CachePadded<Slot>]> = (0..cpus.len() * cap)
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
            pools: Pools::new(cpus.len(), cap),
            started_per_core: cpus.iter().map(|_| AtomicUsize::new(0)).collect(),
            core_time: cpus
                .iter()
                .map(|_| CachePadded::new(CoreTime::new()))
                .collect(),
            cpus,
            cap,
            slots,
            injector: Injector::new(),
            monitor,
            terminate: AtomicBool::new(false),
            counters: CachePadded::default(),
            scan_period,
            leader_policy,
            thread_name,
            threads: Mutex::new(Vec::new()),
            leaders: OnceLock::new(),
        }
    }

    /// With [`LeaderPolicy::Poll`](crate::LeaderPolicy::Poll): a worker of `core` has become
    /// active, so its leader must poll again if it sleeps for lack of active workers (step L1
    /// of `README.md`). An unpark of a leader that is not parked only leaves a token: its
    /// next sleep returns at once, one extra iteration.
    pub(crate) fn poke_leader(&self, core: usize) {
        if self.leader_policy == crate::runtime::LeaderPolicy::Poll
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

    /// After work was pushed: if some core has no active worker, wake one of its parked workers.
    /// The fence pairs with the one a worker makes between entering the pool and re-checking
    /// for work, so that one of the two always sees the other.
    pub(crate) fn notify_work(&self) {
        fence(std::sync::atomic::Ordering::SeqCst);
        self.notify_work_local();
    }

    /// After a worker pushed onto its *own* deque: the same check without the fence. A
    /// wake-up missed in the race with a worker going to sleep costs parallelism only, never
    /// progress: the pusher is active and will pop the job itself (see `README.md`).
    #[inline]
    pub(crate) fn notify_work_local(&self) {
        if self.pools.idle_cores() > 0
            && let Some(w) = self.pools.take_from_idle_core()
        {
            self.notify(w);
        }
    }

    /// Pushes a job from outside the pool.
    pub(crate) fn inject(&self, job: Job) {
        self.injector.push(job);
        self.notify_work();
    }

    /// Whether any queue holds a job.
    pub(crate) fn has_work(&self) -> bool {
        !self.injector.is_empty()
            || (0..self.cpus.len()).any(|core| {
                self.started_slots(core, 0)
                    .any(|i| !self.slots[i].stealer.is_empty())
            })
    }

    /// The slots of `core` whose workers have started, from its `first`-th on (wrapping).
    pub(crate) fn started_slots(&self, core: usize, first: usize) -> impl Iterator<Item = usize> {
        let hi = self.started_per_core[core].load(Ordering::Acquire);
        (0..hi)
            .map(move |j| core * self.cap + (first + j) % hi)
            .filter(|&i| self.slots[i].started.load(Ordering::Acquire))
    }

    /// Marks slot `index` started (its worker runs and its deque may be stolen from).
    pub(crate) fn mark_started(&self, index: usize) {
        self.slots[index].started.store(true, Ordering::Release);
        self.started_per_core[index / self.cap].fetch_max(index % self.cap + 1, Ordering::Release);
    }

    /// Starts the thread of slot `index`.
    pub(crate) fn start_worker(self: &Arc<Self>, index: usize) -> std::io::Result<()> {
        let slot = &self.slots[index];
        let cpu = self.cpus[slot.core];
        let name = (self.thread_name)(cpu, index % self.cap);
        let reg = self.clone();
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || crate::worker::worker_main(reg, index))?;
        lock(&self.threads).push(handle);
        Ok(())
    }

    /// Leader step 3: gives `core` a running worker: a parked one if it has any, else a new
    /// one if the cap allows, started by the starter thread (see `starter.rs` for why the
    /// leader never starts threads itself). Does nothing if a worker of the core became active
    /// since `seen` (see [`Pools::fill`]).
    pub(crate) fn wake_or_create(&self, core: usize, seen: u64, starter: &StartRequests) {
        match self.pools.fill(core, seen) {
            Fill::Woke(w) => {
                self.counters.leader_wakeups.fetch_add(1, Ordering::Relaxed);
                self.notify(w);
            }
            Fill::Reserved(k) => {
                if !starter.request(core * self.cap + k) {
                    self.pools.unreserve(core);
                }
            }
            Fill::Changed | Fill::Full => {}
        }
    }

    /// Whether the runtime monitors its workers (the backend is not Disabled).
    pub(crate) fn monitored(&self) -> bool {
        self.monitor.is_active()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Each state is charged for the time until the next observation, whoever observes; an
    /// observation older than the last one (a slower leader) changes nothing.
    #[test]
    fn core_time_charges_each_state_until_the_next_drain() {
        let t = CoreTime::new();
        let t0 = lock_state(&t).0;
        let ms = Duration::from_millis;
        t.observe(t0 + ms(1), 2, false); // (ready 1 until +1: nothing charged)
        t.observe(t0 + ms(4), 0, true); // oversubscribed for 3 ms
        t.observe(t0 + ms(3), 1, false); // late: ignored
        t.observe(t0 + ms(9), 1, false); // starved for 5 ms
        t.observe(t0 + ms(10), 1, false);
        assert_eq!(t.oversubscribed_ns.load(Ordering::Relaxed), 3_000_000);
        assert_eq!(t.idle_with_work_ns.load(Ordering::Relaxed), 5_000_000);
    }

    fn lock_state(t: &CoreTime) -> std::sync::MutexGuard<'_, (Instant, i64, bool)> {
        t.state.lock().unwrap()
    }
}
