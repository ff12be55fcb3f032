//! Per-core idle pools and the park / unpark / surrender handshake.
//!
//! Each core has a pool: how many of its workers are *active* (not parked), which of its workers
//! are parked, and how many were created. Every change happens under the core's lock, so these
//! three always agree. [`Pools::idle_cores`] counts cores with no active worker, for the cheap
//! check a spawner makes after pushing work. The protocol is in `README.md`; the steps of both
//! sides (a worker's [`Pools::sleep`], [`Pools::park`] and [`Pools::surrender`], a spawner's
//! [`Pools::wake_for_work`], the leader's [`Pools::leader_view`] and [`Pools::fill`]) are
//! functions here, which the workers, the leaders and the loom models at the bottom of this
//! file all call.

use crossbeam_utils::CachePadded;

use crate::drive::{Driver, Waited};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, Thread, fence, lock, park};

/// Wakes one parked thread exactly once per notification, whatever the interleaving.
pub(crate) struct Notifier {
    notified: AtomicBool,
    /// The owner waits in the I/O driver, not on its futex (D2 of `drive.rs`): a notification
    /// also kicks the driver.
    driving: AtomicBool,
    /// The driver the owner waits in, set before `driving` is first raised.
    driver: std::sync::OnceLock<&'static dyn Driver>,
    thread: Thread,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("notified", &self.notified)
            .field("driving", &self.driving)
            .finish_non_exhaustive()
    }
}

/// How [`Notifier::wait_or_drive`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// Notified (the notification is consumed).
    Notified,
    /// Drove and took I/O events: the caller dispatches them once active (D6 of `drive.rs`).
    Events,
    /// `stop()` held: the caller looks for what it announced.
    Stopped,
}

impl Notifier {
    pub(crate) fn new(thread: Thread) -> Self {
        Notifier {
            notified: AtomicBool::new(false),
            driving: AtomicBool::new(false),
            driver: std::sync::OnceLock::new(),
            thread,
        }
    }

    /// Makes the next (or current) [`Notifier::wait`] of the owner return.
    pub(crate) fn notify(&self) {
        if !self.notified.swap(true, Ordering::AcqRel) {
            self.thread.unpark();
            // D4 of `drive.rs`: the fence pairs with D2's in `wait_or_drive` (a Dekker pair:
            // either the owner sees `notified` or this sees `driving`).
            fence(Ordering::SeqCst);
            if self.driving.load(Ordering::Acquire)
                && crate::sync::current_thread_id() != self.thread.id()
                && let Some(driver) = self.driver.get()
            {
                driver.kick();
            }
        }
    }

    /// Called by the owner thread: parks until notified, and consumes the notification.
    pub(crate) fn wait(&self) {
        while !self.notified.swap(false, Ordering::AcqRel) {
            park();
        }
    }

    /// [`Notifier::wait`] for an idle worker: waits in `driver` instead when it gets the turn
    /// (D1–D5 of `drive.rs`), and returns early when `stop()` holds after a wait in it.
    pub(crate) fn wait_or_drive(
        &self,
        driver: Option<&'static dyn Driver>,
        stop: &dyn Fn() -> bool,
    ) -> Woke {
        if let Some(driver) = driver
            && driver.try_take()
        {
            let _ = self.driver.set(driver);
            // D2: the fence pairs with D4's in `notify`.
            self.driving.store(true, Ordering::Release);
            fence(Ordering::SeqCst);
            let mut woke = Woke::Stopped;
            while !self.notified.load(Ordering::Acquire) && !stop() {
                match driver.wait() {
                    Waited::Events => {
                        woke = Woke::Events;
                        break;
                    }
                    Waited::Nothing => {}
                    Waited::Failed => break,
                }
            }
            // D5.
            self.driving.store(false, Ordering::Relaxed);
            driver.release();
            if self.notified.swap(false, Ordering::AcqRel) {
                return if woke == Woke::Events {
                    Woke::Events
                } else {
                    Woke::Notified
                };
            }
            if woke == Woke::Events || stop() {
                return woke;
            }
        }
        self.wait();
        Woke::Notified
    }

    /// [`Notifier::wait`], returning at `deadline` at the latest. A notification that comes
    /// after it stays for the next wait, which then returns at once: every waiter looks again
    /// after a wait (a notification is a hint, never a hand-over of state).
    pub(crate) fn wait_until(&self, deadline: std::time::Instant) {
        #[cfg(loom)]
        {
            let _ = deadline;
            self.wait();
        }
        #[cfg(not(loom))]
        while !self.notified.swap(false, Ordering::AcqRel) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::park_timeout(left);
        }
    }
}

/// How a worker with no work waits in its core's pool ([`Pools::sleep`]).
#[derive(Clone, Copy)]
pub(crate) enum Wait {
    /// Until woken; in the process's I/O driver (D1–D5 of `drive.rs`) when there is one and
    /// the core has no other active worker.
    Driver(Option<&'static dyn Driver>),
    /// Until woken or this deadline, whichever comes first, then it looks again by itself
    /// (N3 of `README.md`); never in the driver.
    Until(std::time::Instant),
}

#[derive(Debug, Default)]
struct PoolInner {
    /// Workers of this core that are not parked in the pool, nor in `block_on` (B2 of
    /// `README.md`).
    active: usize,
    /// Parked workers (indices into the runtime's worker slots), most recent last, each with
    /// whether it surrendered in the middle of a task (and so still has work in progress).
    parked: Vec<(usize, bool)>,
    /// Worker slots of this core handed out (started, or reserved and not yet started).
    created: usize,
    /// Slots below `created` whose reservation was undone (the thread could not be
    /// started): handed out again before a new one.
    free: Vec<usize>,
    /// Times a worker of this core became active (woken, left the pool, or reserved); the
    /// leader compares it to tell whether a worker started running since it looked.
    activations: u64,
    /// Workers a waker took out of the pool (or reserved) that have not run yet: their unblock
    /// is not in the monitor's counts, so the leader must not fill their place again.
    waking: usize,
}

/// What [`Pools::fill`] did for a core with no ready worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fill {
    /// A worker of the core became active since the leader looked: its drain may not show it
    /// running yet, so the leader does nothing now and looks again.
    Changed,
    /// Took this parked worker out of the pool; the caller must notify it.
    Woke(usize),
    /// Reserved a new worker, this index among the core's workers; the caller starts it.
    Reserved(usize),
    /// Every worker of the core is active (blocked) and the cap, the spare limit or the
    /// budget of spares allows no more.
    Full,
}

/// The bit of a core's leader in [`Pools::stealable`]: the last one (a core has at most 63
/// workers).
pub(crate) const LEADER_BIT: usize = 63;

/// The idle pools of all cores.
#[derive(Debug)]
pub(crate) struct Pools {
    /// One lock per core, each on its own cache line.
    cores: Vec<CachePadded<Mutex<PoolInner>>>,
    /// Cores whose `active` is 0. Read on every push; padded away from the core locks.
    idle_cores: CachePadded<AtomicUsize>,
    /// Per core, the workers whose deques may hold jobs, bit `k` for the core's `k`-th
    /// worker: the active ones and those parked as surrendered. A worker that parks for lack
    /// of work has emptied its own deque, and only it pushes there, so thieves and the
    /// leaders' look for pending work skip it (see [`Pools::stealable`]). Changed under the
    /// core's lock, read without it.
    stealable: Vec<CachePadded<AtomicU64>>,
    /// Per core, its `active` count, readable without the lock (see [`Pools::active`]).
    active: Vec<CachePadded<AtomicUsize>>,
    /// Most workers per core.
    cap: usize,
    /// Most active workers per core the leaders make (1 to `cap`; `cap` unless
    /// `Runtime::set_spare_limit` lowered it): a leader wakes or starts no worker for a core
    /// with this many active already, blocked ones included.
    limit: AtomicUsize,
    /// Spares active now, over all cores: the active workers of each core beyond its first.
    /// Changed under the changed core's lock.
    spares: CachePadded<AtomicUsize>,
    /// Most spares the leaders make, over all cores (`Runtime::set_max_spares`; unlimited by
    /// default): a leader wakes or starts no worker for a core that has an active worker
    /// while this many spares are active. Soft: leaders that look at once may each add one,
    /// and workers that become active by themselves ([`Pools::leave`]) are not held back.
    max_spares: AtomicUsize,
}

impl Pools {
    /// Pools for `cores` cores with one active worker each (the initial workers).
    pub(crate) fn new(cores: usize, cap: usize) -> Self {
        Pools {
            cores: (0..cores)
                .map(|_| {
                    CachePadded::new(Mutex::new(PoolInner {
                        active: 1,
                        parked: Vec::new(),
                        created: 1,
                        free: Vec::new(),
                        activations: 0,
                        waking: 0,
                    }))
                })
                .collect(),
            idle_cores: CachePadded::new(AtomicUsize::new(0)),
            stealable: (0..cores)
                .map(|_| CachePadded::new(AtomicU64::new(1)))
                .collect(),
            active: (0..cores)
                .map(|_| CachePadded::new(AtomicUsize::new(1)))
                .collect(),
            cap,
            limit: AtomicUsize::new(cap),
            spares: CachePadded::new(AtomicUsize::new(0)),
            max_spares: AtomicUsize::new(usize::MAX),
        }
    }

    /// Sets the most spares active at once over all cores; returns what it set.
    #[cfg_attr(loom, allow(dead_code))] // its caller (the runtime) is not in the loom build
    pub(crate) fn set_max_spares(&self, n: usize) -> usize {
        self.max_spares.store(n, Ordering::Relaxed);
        n
    }

    /// The most spares active at once over all cores.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn max_spares(&self) -> usize {
        self.max_spares.load(Ordering::Relaxed)
    }

    /// Spares active now over all cores (active workers beyond each core's first).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn spares(&self) -> usize {
        self.spares.load(Ordering::Relaxed)
    }

    /// Sets the most active workers per core the leaders make, within 1 and the cap; returns
    /// what it set. A core over it keeps its workers until they park.
    #[cfg_attr(loom, allow(dead_code))] // its caller (the runtime) is not in the loom build
    pub(crate) fn set_limit(&self, n: usize) -> usize {
        let n = n.clamp(1, self.cap);
        self.limit.store(n, Ordering::Relaxed);
        n
    }

    /// The most active workers per core the leaders make.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// How many workers of `core` are active (not parked), as of the last change: read
    /// without the core's lock, so it may be one change behind.
    #[inline]
    pub(crate) fn active(&self, core: usize) -> usize {
        self.active[core].load(Ordering::Relaxed)
    }

    /// The workers of `core` whose deques may hold jobs: bit `k` for the core's `k`-th worker.
    /// A worker that becomes active sets its bit before it can push, so a thief that misses a
    /// job pushed right after its look misses only parallelism: the pusher runs its own jobs.
    #[inline]
    pub(crate) fn stealable(&self, core: usize) -> u64 {
        self.stealable[core].load(Ordering::Acquire)
    }

    fn bit(&self, worker: usize) -> u64 {
        1 << (worker % self.cap)
    }

    /// Marks whether the deque of `core`'s leader may hold jobs ([`LEADER_BIT`] of
    /// [`Pools::stealable`]): while it runs tasks, and after, until its deque is empty.
    #[cfg_attr(loom, allow(dead_code))] // its caller (the leader) is not in the loom build
    pub(crate) fn set_leader_stealable(&self, core: usize, on: bool) {
        let bit = 1 << LEADER_BIT;
        if on {
            self.stealable[core].fetch_or(bit, Ordering::Release);
        } else {
            self.stealable[core].fetch_and(!bit, Ordering::Release);
        }
    }

    /// Cores with no active worker. Read after a `SeqCst` fence by spawners.
    pub(crate) fn idle_cores(&self) -> usize {
        self.idle_cores.load(Ordering::SeqCst)
    }

    fn deactivate(&self, p: &mut PoolInner, core: usize, worker: usize, surrendered: bool) {
        self.count_out(p, core);
        p.parked.push((worker, surrendered));
        // A surrendered worker's deque may still hold jobs (the one it was about to run).
        if !surrendered {
            self.stealable[core].fetch_and(!self.bit(worker), Ordering::Release);
        }
    }

    fn activate(&self, p: &mut PoolInner, core: usize, worker: usize) {
        self.count_in(p, core);
        p.activations = p.activations.wrapping_add(1);
        self.stealable[core].fetch_or(self.bit(worker), Ordering::Release);
    }

    /// One active worker fewer: the counts only (`active`, `spares`, `idle_cores`). Alone, B2
    /// of `README.md`: a worker parking in `block_on` stops counting as active without
    /// entering the pool, and its stealable bit stays (its deque may hold jobs, the core's
    /// other workers take them).
    fn count_out(&self, p: &mut PoolInner, core: usize) {
        if p.active > 1 {
            self.spares.fetch_sub(1, Ordering::Relaxed);
        }
        p.active -= 1;
        self.active[core].store(p.active, Ordering::Relaxed);
        if p.active == 0 {
            self.idle_cores.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// One active worker more: the counts only. Alone, it undoes [`Pools::count_out`]
    /// without counting an activation.
    fn count_in(&self, p: &mut PoolInner, core: usize) {
        if p.active == 0 {
            self.idle_cores.fetch_sub(1, Ordering::SeqCst);
        } else {
            self.spares.fetch_add(1, Ordering::Relaxed);
        }
        p.active += 1;
        self.active[core].store(p.active, Ordering::Relaxed);
    }

    /// A waker activates a worker that has not run yet (taken out of the pool, or reserved):
    /// a wake in flight until the worker calls [`Pools::woken`].
    fn activate_waking(&self, p: &mut PoolInner, core: usize, worker: usize) {
        self.activate(p, core, worker);
        p.waking += 1;
    }

    /// What the leader reads before draining (step L2): how many times a worker of `core`
    /// became active so far, and whether a woken worker has yet to run. See [`Pools::fill`].
    pub(crate) fn leader_view(&self, core: usize) -> (u64, bool) {
        let p = lock(&self.cores[core]);
        (p.activations, p.waking > 0)
    }

    /// Leader step 3 for a core it saw with no ready worker: unless a worker of the core became
    /// active since `seen` (read from [`Pools::leader_view`] before the drain), takes a parked
    /// worker out (preferring one that surrendered mid-task), else reserves a new one if the
    /// cap allows. One lock, so no waker can slip between the check and the take.
    pub(crate) fn fill(&self, core: usize, seen: u64) -> Fill {
        let mut p = lock(&self.cores[core]);
        if p.activations != seen {
            return Fill::Changed;
        }
        self.fill_locked(&mut p, core, true)
    }

    /// B2 of `README.md`: a worker of `core` parks in `block_on`. It stops counting as
    /// active (as in the pool, but not findable by wakers, and its deque stays stealable),
    /// and another worker of the core becomes active in its place, as [`Pools::fill`] gives
    /// one, a worker parked for lack of work first: `Woke` (the caller notifies it) or
    /// `Reserved` (the caller has it started, or [`Pools::unreserve`]s it). Where the
    /// limits allow none, `Full`, and the worker is active again, as before the call (it
    /// runs the core's work itself: another active worker may be blocked in the kernel, or
    /// a reservation that never starts). Never `Changed`.
    #[cfg_attr(loom, allow(dead_code))] // its caller (worker.rs) is not in the loom build
    pub(crate) fn replace(&self, core: usize) -> Fill {
        let mut p = lock(&self.cores[core]);
        self.count_out(&mut p, core);
        let got = self.fill_locked(&mut p, core, false);
        if got == Fill::Full {
            // Undone, not a new activation: a leader's look since stays valid.
            self.count_in(&mut p, core);
        }
        got
    }

    /// B3 of `README.md`: `worker`, parked in `block_on` after [`Pools::replace`], is active
    /// again, whatever the limits (it holds a task in progress).
    #[cfg_attr(loom, allow(dead_code))] // its caller (worker.rs) is not in the loom build
    pub(crate) fn back_from_block_on(&self, core: usize, worker: usize) {
        let mut p = lock(&self.cores[core]);
        self.activate(&mut p, core, worker);
    }

    /// [`Pools::fill`] under the core's lock. `surrendered_first`: which parked worker to
    /// take (see [`Pools::take_parked`]).
    fn fill_locked(&self, p: &mut PoolInner, core: usize, surrendered_first: bool) -> Fill {
        if p.active >= self.limit.load(Ordering::Relaxed)
            || (p.active > 0
                && self.spares.load(Ordering::Relaxed) >= self.max_spares.load(Ordering::Relaxed))
        {
            return Fill::Full;
        }
        if let Some(w) = Self::take_parked(p, surrendered_first) {
            self.activate_waking(p, core, w);
            return Fill::Woke(w);
        }
        let k = match p.free.pop() {
            Some(k) => k,
            None if p.created < self.cap => {
                p.created += 1;
                p.created - 1
            }
            None => return Fill::Full,
        };
        self.activate_waking(p, core, core * self.cap + k);
        Fill::Reserved(k)
    }

    /// [`Pools::fill`] with a fresh look, for tests: what the leader does for a core it saw
    /// starved when nothing changed since.
    #[cfg(test)]
    pub(crate) fn fill_now(&self, core: usize) -> Fill {
        self.fill(core, self.leader_view(core).0)
    }

    /// Removes the parked worker to wake: with `surrendered_first` (the leader's fill), the
    /// latest that surrendered mid-task, else the latest parked; without (a worker parking
    /// in `block_on`, which needs one that runs the core's queued work now, not its own task
    /// first), the latest that did not surrender, else the latest parked.
    fn take_parked(p: &mut PoolInner, surrendered_first: bool) -> Option<usize> {
        let i = p
            .parked
            .iter()
            .rposition(|&(_, surrendered)| surrendered == surrendered_first)
            .or_else(|| p.parked.len().checked_sub(1))?;
        Some(p.parked.swap_remove(i).0)
    }

    /// Step 1 of going to sleep: `worker` of `core` stops being active and enters the pool.
    ///
    /// If that leaves the core with no active worker while a worker that surrendered mid-task is
    /// parked, that worker is taken out and returned: the caller must notify it. A task in
    /// progress is work, and the core must not idle while it waits.
    pub(crate) fn enter(&self, core: usize, worker: usize) -> Option<usize> {
        let mut p = lock(&self.cores[core]);
        self.deactivate(&mut p, core, worker, false);
        if p.active == 0 {
            let i = p.parked.iter().position(|&(_, surrendered)| surrendered)?;
            let (w, _) = p.parked.swap_remove(i);
            self.activate_waking(&mut p, core, w);
            return Some(w);
        }
        None
    }

    /// A worker a waker took out of the pool runs now: the monitor counts it from here on.
    /// Called once per take, once the worker runs: after it consumed the waker's
    /// notification, or after a wait in the I/O driver returned first (the notification then
    /// stays for its next wait, which returns at once).
    pub(crate) fn woken(&self, core: usize) {
        let mut p = lock(&self.cores[core]);
        p.waking = p.waking.saturating_sub(1);
    }

    /// The worker leaves the pool by itself (it found work, its latch was set). Returns `false`
    /// when a waker already took it out: that waker's notification is on its way.
    pub(crate) fn leave(&self, core: usize, worker: usize) -> bool {
        let mut p = lock(&self.cores[core]);
        match p.parked.iter().position(|&(w, _)| w == worker) {
            Some(i) => {
                p.parked.swap_remove(i);
                self.activate(&mut p, core, worker);
                true
            }
            None => false,
        }
    }

    /// Surrender: when `core` has more than one active worker, `worker` becomes parked and the
    /// call returns `true`. A core never loses its last active worker this way.
    pub(crate) fn try_surrender(&self, core: usize, worker: usize) -> bool {
        let mut p = lock(&self.cores[core]);
        if p.active > 1 {
            self.deactivate(&mut p, core, worker, true);
            true
        } else {
            false
        }
    }

    /// Whether a worker of `core` surrendered mid-task and waits in the pool: pending work.
    pub(crate) fn has_surrendered(&self, core: usize) -> bool {
        lock(&self.cores[core]).parked.iter().any(|&(_, s)| s)
    }

    /// Takes a parked worker from some core that has no active worker (to run new work).
    /// The caller must notify it.
    pub(crate) fn take_from_idle_core(&self) -> Option<usize> {
        for core in 0..self.cores.len() {
            let mut p = lock(&self.cores[core]);
            if p.active == 0
                && let Some((w, _)) = p.parked.pop()
            {
                self.activate_waking(&mut p, core, w);
                return Some(w);
            }
        }
        None
    }

    /// Takes a parked worker of `core` if the core has no active worker (to run work only
    /// it may run). The caller must notify it.
    #[cfg_attr(loom, allow(dead_code))] // its caller (broadcast) is not in the loom build
    pub(crate) fn take_from_core(&self, core: usize) -> Option<usize> {
        let mut p = lock(&self.cores[core]);
        if p.active != 0 {
            return None;
        }
        let (w, _) = p.parked.pop()?;
        self.activate_waking(&mut p, core, w);
        Some(w)
    }

    /// Undoes reservation `k` of [`Pools::fill`] or [`Pools::replace`] when its thread could
    /// not be started. Its slot is handed out again first (other reservations may have come
    /// after it: `created` stays).
    #[cfg_attr(loom, allow(dead_code))] // its callers (leader, starter) are not in the loom build
    pub(crate) fn unreserve(&self, core: usize, k: usize) {
        let mut p = lock(&self.cores[core]);
        p.free.push(k);
        self.count_out(&mut p, core);
        p.waking = p.waking.saturating_sub(1);
        self.stealable[core].fetch_and(!(1 << k), Ordering::Release);
    }

    /// Active and created workers of `core` (reservations undone not counted).
    pub(crate) fn counts(&self, core: usize) -> (usize, usize) {
        let p = lock(&self.cores[core]);
        (p.active, p.created - p.free.len())
    }

    /// Steps S1–S4 of `README.md`: `worker` of `core`, which found no work, parks in the pool
    /// until woken. `notify(w)` wakes worker `w` (S1 may hand the core to a surrendered
    /// worker); `recheck()` says whether work, the awaited latch or shutdown appeared meanwhile
    /// (S3); `wait()`, asked after S3, says how it waits (N3 of `README.md`: a look at the
    /// other workers' next slots after the fence, paired with the one after a put). Returns
    /// whether the worker parked; either way it is active again on return.
    pub(crate) fn sleep(
        &self,
        core: usize,
        worker: usize,
        me: &Notifier,
        notify: impl FnOnce(usize),
        recheck: impl Fn() -> bool,
        wait: impl FnOnce() -> Wait,
    ) -> Option<Woke> {
        // S1: stop being active, become findable by wakers. If the core would idle while a
        // worker that surrendered mid-task waits, hand the core to it.
        if let Some(w) = self.enter(core, worker) {
            notify(w);
        }
        // S2: pairs with the fence in `Pools::wake_for_work`.
        fence(Ordering::SeqCst);
        // S3: re-check everything that could have happened before we were findable.
        if recheck() && self.leave(core, worker) {
            return None;
        }
        // S4: park (or wait in the I/O driver, D1–D5 of `drive.rs`, if the core has no other
        // active worker: events then wake a thread whose CPU is free). Either nobody woke us
        // yet, or a waker took us out of the pool and its notification is on its way: consume
        // it either way (a wait in the driver may return first, leaving it for the next wait).
        // A wait with a deadline (N3 of `README.md`) is never in the driver: it returns by
        // itself, as a latch's wake does.
        let woke = match wait() {
            Wait::Until(deadline) => {
                me.wait_until(deadline);
                Woke::Notified
            }
            Wait::Driver(driver) => {
                me.wait_or_drive(driver.filter(|_| self.counts(core).0 == 0), &recheck)
            }
        };
        self.back(core, worker);
        Some(woke)
    }

    /// Waits for a notification while in the pool, then is active again ([`Pools::back`]).
    pub(crate) fn park(&self, core: usize, worker: usize, me: &Notifier) {
        me.wait();
        self.back(core, worker);
    }

    /// After a wait in the pool: leaves the pool if woken by a latch, at shutdown or by I/O
    /// events; if a waker took it out instead, ends that wake in flight ([`Pools::woken`]),
    /// now that the worker runs and the monitor has seen it unblock.
    fn back(&self, core: usize, worker: usize) {
        if !self.leave(core, worker) {
            self.woken(core);
        }
    }

    /// Step L4 of `README.md`: parks `worker` as surrendered unless it is the core's last
    /// active worker ([`Pools::try_surrender`]), calling `surrendered()` before it parks.
    /// Returns whether it did; it is active again on return.
    pub(crate) fn surrender(
        &self,
        core: usize,
        worker: usize,
        me: &Notifier,
        surrendered: impl FnOnce(),
    ) -> bool {
        if !self.try_surrender(core, worker) {
            return false;
        }
        surrendered();
        self.park(core, worker, me);
        true
    }

    /// A spawner's side, after it pushed work: if some core has no active worker, takes one
    /// of its parked workers out and calls `notify` with it. The fence pairs with S2 of
    /// [`Pools::sleep`], so that either the sleeper sees the work or this sees the sleeper.
    pub(crate) fn wake_for_work(&self, notify: impl FnOnce(usize)) {
        fence(Ordering::SeqCst);
        self.wake_idle_core(notify);
    }

    /// [`Pools::wake_for_work`] without the fence, for a push onto the pusher's own deque: a
    /// wake-up missed in the race with a worker going to sleep costs parallelism only (the
    /// pusher is active and pops the job itself; see `README.md`).
    #[inline]
    pub(crate) fn wake_idle_core(&self, notify: impl FnOnce(usize)) {
        if self.idle_cores() > 0
            && let Some(w) = self.take_from_idle_core()
        {
            notify(w);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_core_never_idles_while_a_surrendered_worker_waits() {
        let pools = Pools::new(1, 3);
        assert_eq!(pools.fill_now(0), Fill::Reserved(1));
        assert!(pools.try_surrender(0, 1));
        assert!(pools.has_surrendered(0));
        // The last active worker runs out of work: it hands the core to the surrendered one.
        assert_eq!(pools.enter(0, 0), Some(1));
        assert_eq!(pools.counts(0), (1, 2));
        assert!(!pools.has_surrendered(0));
        assert_eq!(pools.idle_cores(), 0);
    }

    #[test]
    fn the_leader_prefers_surrendered_workers() {
        let pools = Pools::new(1, 3);
        assert_eq!(pools.fill_now(0), Fill::Reserved(1));
        assert_eq!(pools.fill_now(0), Fill::Reserved(2));
        assert!(pools.try_surrender(0, 1));
        assert_eq!(pools.enter(0, 2), None); // still one active (worker 0)
        assert_eq!(pools.fill_now(0), Fill::Woke(1));
        assert_eq!(pools.fill_now(0), Fill::Woke(2));
        assert_eq!(pools.fill_now(0), Fill::Full);
        assert_eq!(pools.counts(0), (3, 3));
    }

    #[test]
    fn the_leader_does_not_fill_a_core_whose_worker_a_spawner_just_woke() {
        let pools = Pools::new(1, 4);
        assert_eq!(pools.enter(0, 0), None);
        // The leader looks: the core's only worker is parked, nothing is in flight.
        let (seen, in_flight) = pools.leader_view(0);
        assert!(!in_flight);
        // A spawner wakes that worker before the leader acts on its (now stale) drain.
        assert_eq!(pools.take_from_idle_core(), Some(0));
        assert_eq!(pools.fill(0, seen), Fill::Changed);
        assert_eq!(pools.counts(0), (1, 1), "no spare reserved");
        // Until the woken worker runs, the wake is in flight for the next look.
        let (seen, in_flight) = pools.leader_view(0);
        assert!(in_flight);
        pools.woken(0);
        assert_eq!(pools.leader_view(0), (seen, false));
        // With nothing changed since its look, the leader fills: a new worker, then the cap.
        assert_eq!(pools.fill(0, seen), Fill::Reserved(1));
        let (seen, in_flight) = pools.leader_view(0);
        assert!(in_flight);
        pools.unreserve(0, 1);
        assert_eq!(pools.leader_view(0), (seen, false));
        assert_eq!(pools.counts(0), (1, 1));
    }

    #[test]
    fn the_limit_stops_fills_below_the_cap() {
        let pools = Pools::new(1, 4);
        assert_eq!(pools.set_limit(0), 1, "at least one");
        assert_eq!(pools.set_limit(9), 4, "at most the cap");
        assert_eq!(pools.set_limit(2), 2);
        // The core's one worker is blocked: a second one, then the limit.
        assert_eq!(pools.fill_now(0), Fill::Reserved(1));
        pools.woken(0);
        assert_eq!(pools.fill_now(0), Fill::Full);
        assert_eq!(pools.counts(0), (2, 2));
        pools.set_limit(4);
        assert_eq!(pools.fill_now(0), Fill::Reserved(2));
    }

    /// The budget of spares is one count for all cores: a core whose worker blocked gets no
    /// spare while another core holds the budget, and gets one once that spare parks. A core
    /// with no active worker is not taking a spare: its first worker comes back regardless.
    #[test]
    fn the_budget_of_spares_is_shared_by_the_cores() {
        let pools = Pools::new(2, 4); // core 1's workers are slots 4..8
        assert_eq!(pools.max_spares(), usize::MAX, "unlimited by default");
        assert_eq!(pools.set_max_spares(1), 1);
        assert_eq!(pools.fill_now(0), Fill::Reserved(1));
        pools.woken(0);
        assert_eq!(pools.spares(), 1);
        assert_eq!(pools.fill_now(1), Fill::Full, "core 0 holds the budget");
        assert_eq!(pools.fill_now(0), Fill::Full);
        // Core 0's spare runs out of work and parks: the budget is free for core 1.
        assert_eq!(pools.enter(0, 1), None);
        assert_eq!(pools.spares(), 0);
        assert_eq!(pools.fill_now(1), Fill::Reserved(1));
        pools.woken(1);
        // Core 0's last worker parks too; its leader may bring one back although core 1
        // holds the budget: that is the core's first worker, not a spare.
        assert_eq!(pools.enter(0, 0), None);
        assert!(matches!(pools.fill_now(0), Fill::Woke(_)));
        assert_eq!(pools.spares(), 1);
        assert_eq!(pools.set_max_spares(0), 0);
        assert_eq!(pools.fill_now(1), Fill::Full);
    }

    /// One step of [`spares_count_what_is_active_beyond_each_cores_first`]: an operation on
    /// core `core`'s worker number `pick` (modulo those it applies to).
    #[derive(Debug, Clone)]
    enum Op {
        Fill {
            core: usize,
            unreserve: bool,
        },
        Enter {
            core: usize,
            pick: usize,
        },
        Surrender {
            core: usize,
            pick: usize,
        },
        Leave {
            core: usize,
            pick: usize,
        },
        TakeFromIdleCore,
        Budget(usize),
        BlockOn {
            core: usize,
            pick: usize,
            unreserve: bool,
        },
        BackFromBlockOn {
            core: usize,
            pick: usize,
        },
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            3 => (0..3usize, any::<bool>()).prop_map(|(core, unreserve)| Op::Fill { core, unreserve }),
            2 => (0..3usize, 0..8usize).prop_map(|(core, pick)| Op::Enter { core, pick }),
            1 => (0..3usize, 0..8usize).prop_map(|(core, pick)| Op::Surrender { core, pick }),
            1 => (0..3usize, 0..8usize).prop_map(|(core, pick)| Op::Leave { core, pick }),
            1 => Just(Op::TakeFromIdleCore),
            1 => (0..5usize).prop_map(Op::Budget),
            2 => (0..3usize, 0..8usize, any::<bool>())
                .prop_map(|(core, pick, unreserve)| Op::BlockOn { core, pick, unreserve }),
            1 => (0..3usize, 0..8usize).prop_map(|(core, pick)| Op::BackFromBlockOn { core, pick }),
        ]
    }

    proptest::proptest! {
        /// Whatever the wakes, parks and surrenders, the count of spares is the sum over the
        /// cores of their active workers beyond the first, and a leader's fill never adds a
        /// spare past the budget (one caller at a time, as here, makes it exact).
        #[test]
        fn spares_count_what_is_active_beyond_each_cores_first(
            ops in proptest::collection::vec(op(), 1..200)
        ) {
            const CORES: usize = 3;
            const CAP: usize = 4;
            let pools = Pools::new(CORES, CAP);
            // The model: each core's active and parked workers.
            let mut active: Vec<Vec<usize>> = (0..CORES).map(|c| vec![c * CAP]).collect();
            let mut parked: Vec<Vec<usize>> = vec![Vec::new(); CORES];
            // Workers parked in `block_on` (B2): neither active nor in the pool.
            let mut blocked_on: Vec<Vec<usize>> = vec![Vec::new(); CORES];
            let take = |v: &mut Vec<usize>, w: usize| {
                let i = v.iter().position(|&x| x == w).expect("the model knows the worker");
                v.swap_remove(i);
            };
            for op in ops {
                let spares_before = pools.spares();
                match op {
                    Op::Fill { core, unreserve } => {
                        let had = active[core].len();
                        let got = pools.fill_now(core);
                        if had > 0 && spares_before >= pools.max_spares() {
                            proptest::prop_assert_eq!(got, Fill::Full);
                        }
                        match got {
                            Fill::Woke(w) => {
                                take(&mut parked[core], w);
                                active[core].push(w);
                                pools.woken(core);
                            }
                            Fill::Reserved(k) if unreserve => pools.unreserve(core, k),
                            Fill::Reserved(k) => {
                                active[core].push(core * CAP + k);
                                pools.woken(core);
                            }
                            Fill::Changed | Fill::Full => {}
                        }
                    }
                    Op::Enter { core, pick } if !active[core].is_empty() => {
                        let w = active[core][pick % active[core].len()];
                        take(&mut active[core], w);
                        parked[core].push(w);
                        if let Some(s) = pools.enter(core, w) {
                            take(&mut parked[core], s);
                            active[core].push(s);
                            pools.woken(core);
                        }
                    }
                    Op::Surrender { core, pick } if !active[core].is_empty() => {
                        let w = active[core][pick % active[core].len()];
                        let done = pools.try_surrender(core, w);
                        proptest::prop_assert_eq!(done, active[core].len() > 1);
                        if done {
                            take(&mut active[core], w);
                            parked[core].push(w);
                        }
                    }
                    Op::Leave { core, pick } if !parked[core].is_empty() => {
                        let w = parked[core][pick % parked[core].len()];
                        proptest::prop_assert!(pools.leave(core, w));
                        take(&mut parked[core], w);
                        active[core].push(w);
                    }
                    Op::TakeFromIdleCore => {
                        if let Some(w) = pools.take_from_idle_core() {
                            let core = w / CAP;
                            take(&mut parked[core], w);
                            active[core].push(w);
                            pools.woken(core);
                        }
                    }
                    Op::Budget(n) => {
                        pools.set_max_spares(n);
                    }
                    Op::BlockOn { core, pick, unreserve } if !active[core].is_empty() => {
                        let w = active[core][pick % active[core].len()];
                        let others = active[core].len() - 1;
                        let got = pools.replace(core);
                        // Out of the count first: the budget is looked at without it.
                        if others > 0 && spares_before > pools.max_spares() {
                            proptest::prop_assert_eq!(got, Fill::Full);
                        }
                        let parks = match got {
                            Fill::Woke(x) => {
                                proptest::prop_assert!(x != w);
                                take(&mut parked[core], x);
                                active[core].push(x);
                                pools.woken(core);
                                true
                            }
                            Fill::Reserved(k) if unreserve => {
                                pools.unreserve(core, k);
                                pools.back_from_block_on(core, w);
                                false
                            }
                            Fill::Reserved(k) => {
                                active[core].push(core * CAP + k);
                                pools.woken(core);
                                true
                            }
                            Fill::Changed => {
                                proptest::prop_assert!(false, "replace never says Changed");
                                false
                            }
                            Fill::Full => false,
                        };
                        if parks {
                            take(&mut active[core], w);
                            blocked_on[core].push(w);
                        }
                    }
                    Op::BackFromBlockOn { core, pick } if !blocked_on[core].is_empty() => {
                        let w = blocked_on[core][pick % blocked_on[core].len()];
                        take(&mut blocked_on[core], w);
                        active[core].push(w);
                        pools.back_from_block_on(core, w);
                    }
                    Op::Enter { .. }
                    | Op::Surrender { .. }
                    | Op::Leave { .. }
                    | Op::BlockOn { .. }
                    | Op::BackFromBlockOn { .. } => {}
                }
                let want: usize = active.iter().map(|a| a.len().saturating_sub(1)).sum();
                proptest::prop_assert_eq!(pools.spares(), want);
                for (core, a) in active.iter().enumerate() {
                    proptest::prop_assert_eq!(pools.counts(core).0, a.len());
                    proptest::prop_assert_eq!(pools.idle_cores() > 0, active.iter().any(Vec::is_empty));
                    // B2: a worker parked in `block_on` keeps its deque in reach.
                    for &w in &blocked_on[core] {
                        proptest::prop_assert!(pools.stealable(core) & (1 << (w % CAP)) != 0);
                    }
                }
            }
        }
    }

    #[test]
    fn fill_wakes_parked_workers_before_creating_and_stops_at_the_cap() {
        let pools = Pools::new(1, 2);
        assert_eq!(pools.fill_now(0), Fill::Reserved(1));
        assert!(pools.try_surrender(0, 1));
        assert_eq!(pools.fill_now(0), Fill::Woke(1));
        assert_eq!(pools.fill_now(0), Fill::Full);
        assert_eq!(pools.counts(0), (2, 2));
    }

    /// Two fills from the same look (a leader acting twice on one drain, say): only the first
    /// fills the hole; the second sees the activation and does nothing.
    #[test]
    fn two_fills_from_one_look_fill_one_hole() {
        let pools = Pools::new(1, 4);
        let (seen_a, _) = pools.leader_view(0);
        let (seen_b, _) = pools.leader_view(0);
        assert_eq!(pools.fill(0, seen_a), Fill::Reserved(1));
        assert_eq!(pools.fill(0, seen_b), Fill::Changed);
        assert_eq!(pools.counts(0), (2, 2), "one spare, not two");
    }

    /// Thieves skip the workers that parked for lack of work (their deques are empty), and
    /// look at the active ones and those parked as surrendered (which may hold a job).
    #[test]
    fn stealable_workers_are_the_active_and_the_surrendered() {
        let pools = Pools::new(2, 4); // core 1's workers are slots 4..8
        assert_eq!(pools.stealable(1), 0b0001);
        assert_eq!(pools.fill_now(1), Fill::Reserved(1));
        assert_eq!(pools.fill_now(1), Fill::Reserved(2));
        assert_eq!(pools.stealable(1), 0b0111);
        assert!(pools.try_surrender(1, 5));
        assert_eq!(
            pools.stealable(1),
            0b0111,
            "a surrendered worker keeps its job"
        );
        assert_eq!(pools.enter(1, 6), None);
        assert_eq!(
            pools.stealable(1),
            0b0011,
            "a worker that ran dry has an empty deque"
        );
        assert!(pools.leave(1, 6));
        assert_eq!(pools.stealable(1), 0b0111);
        assert_eq!(pools.fill_now(1), Fill::Woke(5));
        assert_eq!(pools.fill_now(1), Fill::Reserved(3));
        pools.unreserve(1, 3);
        assert_eq!(
            pools.stealable(1),
            0b0111,
            "a spare that never started is not looked at"
        );
        assert_eq!(pools.stealable(0), 0b0001, "other cores are untouched");
    }

    /// B2 of `README.md`: a worker parking in `block_on` stops counting as active and wakes a
    /// worker parked for lack of work before one that surrendered mid-task (which would run
    /// its own task first); back, it counts again whatever the limit.
    #[test]
    fn a_worker_parking_in_block_on_hands_its_place_to_an_idle_one() {
        let pools = Pools::new(1, 4);
        // Workers 1 and 2 active, then 1 parks for lack of work and 2 surrenders.
        assert_eq!(pools.fill_now(0), Fill::Reserved(1));
        pools.woken(0);
        assert_eq!(pools.fill_now(0), Fill::Reserved(2));
        pools.woken(0);
        assert_eq!(pools.enter(0, 1), None);
        assert!(pools.try_surrender(0, 2));
        assert_eq!(pools.counts(0), (1, 3));
        assert_eq!(
            pools.replace(0),
            Fill::Woke(1),
            "the idle one, not the surrendered"
        );
        pools.woken(0);
        assert_eq!(pools.counts(0), (1, 3), "0 is out, 1 is in");
        assert_eq!(pools.stealable(0) & 1, 1, "0's deque stays in reach");
        pools.set_limit(1);
        pools.back_from_block_on(0, 0);
        assert_eq!(pools.counts(0), (2, 3), "back whatever the limit");
        // At the limit, 1 gets no replacement and stays active (0 may be blocked).
        assert_eq!(pools.replace(0), Fill::Full);
        assert_eq!(pools.counts(0), (2, 3));
        // At the cap with nobody else active, the same.
        let lone = Pools::new(1, 1);
        assert_eq!(lone.replace(0), Fill::Full);
        assert_eq!(lone.counts(0), (1, 1));
    }

    /// A reservation undone after another was made frees its own slot, which the next
    /// reservation gets, and leaves the other's bit alone (two workers of a core may reserve
    /// at once since B2).
    #[test]
    fn a_reservation_undone_out_of_order_frees_its_own_slot() {
        let pools = Pools::new(1, 4);
        assert_eq!(pools.fill_now(0), Fill::Reserved(1));
        assert_eq!(pools.replace(0), Fill::Reserved(2));
        pools.woken(0);
        pools.unreserve(0, 1);
        assert_eq!(
            pools.stealable(0) & 0b110,
            0b100,
            "slot 2's bit stays, 1's goes"
        );
        assert_eq!(pools.counts(0), (1, 2), "worker 2 active, 0 in block_on");
        assert_eq!(pools.fill_now(0), Fill::Reserved(1), "the freed slot first");
        assert_eq!(pools.fill_now(0), Fill::Reserved(3));
        assert_eq!(pools.fill_now(0), Fill::Full, "cap reached");
    }

    #[test]
    fn surrender_never_takes_the_last_active_worker() {
        let pools = Pools::new(2, 2);
        assert!(!pools.try_surrender(0, 0));
        assert_eq!(pools.counts(0), (1, 1));
        assert_eq!(pools.enter(1, 2), None);
        assert_eq!(pools.idle_cores(), 1);
        assert_eq!(pools.take_from_idle_core(), Some(2));
        assert_eq!(pools.idle_cores(), 0);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! `RUSTFLAGS="--cfg loom" cargo test -p umt-rt --lib --release loom`
    //!
    //! Each model runs the protocol's own functions: a worker's `sleep`, `park` and
    //! `surrender`, a spawner's `wake_for_work`, the leader's `leader_view` and `fill`.
    use super::*;
    use loom::sync::Arc;

    /// Where a loom thread publishes its notifier (loom threads must not block outside loom).
    type Mailbox = Arc<Mutex<Option<Arc<Notifier>>>>;

    fn mailbox() -> Mailbox {
        Arc::new(Mutex::new(None))
    }

    fn publish(mailbox: &Mailbox) -> Arc<Notifier> {
        let me = Arc::new(Notifier::new(loom::thread::current()));
        *lock(mailbox) = Some(me.clone());
        me
    }

    fn receive(mailbox: &Mailbox) -> Arc<Notifier> {
        loop {
            if let Some(n) = lock(mailbox).clone() {
                return n;
            }
            loom::thread::yield_now();
        }
    }

    /// A worker that finds the (mock) queue empty goes to sleep while a spawner pushes a job:
    /// whatever the interleaving, the job is run (a lost wake-up deadlocks, which loom reports).
    #[test]
    fn no_lost_wakeup_between_sleep_and_spawn() {
        sleep_while_a_spawner_notifies(None, false);
    }

    /// An I/O driver for the models: a wait returns on a kick (sticky, as an eventfd) or on
    /// a posted event; one turn.
    struct ModelDriver {
        /// The turn is held, kicks not yet read, events not yet taken.
        state: Mutex<(bool, bool, usize)>,
        changed: loom::sync::Condvar,
    }

    impl ModelDriver {
        fn leaked() -> &'static ModelDriver {
            Box::leak(Box::new(ModelDriver {
                state: Mutex::new((false, false, 0)),
                changed: loom::sync::Condvar::new(),
            }))
        }

        fn post_event(&self) {
            lock(&self.state).2 += 1;
            self.changed.notify_all();
        }
    }

    impl Driver for ModelDriver {
        fn try_take(&self) -> bool {
            let mut s = lock(&self.state);
            !std::mem::replace(&mut s.0, true)
        }

        fn wait(&self) -> Waited {
            let mut s = self.state.lock().unwrap();
            while !s.1 && s.2 == 0 {
                s = self.changed.wait(s).unwrap();
            }
            if std::mem::take(&mut s.1) {
                Waited::Nothing
            } else {
                s.2 -= 1;
                Waited::Events
            }
        }

        fn is_free(&self) -> bool {
            !lock(&self.state).0
        }

        fn release(&self) {
            lock(&self.state).0 = false;
        }

        fn dispatch(&self) {}

        fn kick(&self) {
            lock(&self.state).1 = true;
            self.changed.notify_all();
        }

        fn end_standby(&self) {}

        fn look(&self) -> Option<Waited> {
            if !self.try_take() {
                return None;
            }
            // The turn is seen held between these two steps. A stale kick is read as the
            // real one would be.
            let mut s = lock(&self.state);
            let looked = if std::mem::take(&mut s.1) {
                Waited::Nothing
            } else if s.2 > 0 {
                s.2 -= 1;
                Waited::Events
            } else {
                Waited::Nothing
            };
            s.0 = false;
            Some(looked)
        }
    }

    /// D7 of `drive.rs`: a busy worker looks into the driver (it takes the turn for a moment
    /// and may read a kick) while another worker goes to sleep and a spawner pushes a job and
    /// notifies it: whatever the interleaving, the sleeper runs the job, with no wake left in
    /// flight, and the turn ends free.
    #[test]
    fn a_busy_look_keeps_no_notification_from_a_parking_worker() {
        sleep_while_a_spawner_notifies(Some(false), true);
    }

    /// A worker goes to sleep (with the I/O driver, if `driven`) while a spawner pushes a job
    /// and notifies it (and, with `Some(true)`, an I/O event arrives too; with `looker`,
    /// another thread looks into the driver, D7). Whatever the interleaving, the worker runs
    /// the job, ends active with no wake left in flight, and gives the turn back.
    fn sleep_while_a_spawner_notifies(driven: Option<bool>, looker: bool) {
        loom::model(move || {
            let pools = Arc::new(Pools::new(1, 2));
            let model = driven.map(|_| ModelDriver::leaked());
            let driver = model.map(|m| m as &'static dyn Driver);
            let jobs = Arc::new(AtomicUsize::new(0));
            let mb = mailbox();
            let worker = {
                let (pools, jobs, mb) = (pools.clone(), jobs.clone(), mb.clone());
                loom::thread::spawn(move || {
                    let me = publish(&mb);
                    while jobs.load(Ordering::SeqCst) == 0 {
                        let no_handoff = |_| panic!("nobody surrendered");
                        let recheck = || jobs.load(Ordering::SeqCst) > 0;
                        pools.sleep(0, 0, &me, no_handoff, recheck, || Wait::Driver(driver));
                    }
                    jobs.fetch_sub(1, Ordering::SeqCst);
                })
            };
            if let (Some(true), Some(model)) = (driven, model) {
                model.post_event();
            }
            let looker = driver
                .filter(|_| looker)
                .map(|d| loom::thread::spawn(move || d.look()));
            jobs.fetch_add(1, Ordering::SeqCst);
            pools.wake_for_work(|_| receive(&mb).notify());
            worker.join().unwrap();
            if let Some(looker) = looker {
                looker.join().unwrap();
            }
            assert_eq!(pools.counts(0), (1, 1));
            assert_eq!(pools.idle_cores(), 0);
            assert!(!pools.leader_view(0).1, "no wake left in flight");
            if let Some(driver) = driver {
                assert!(driver.try_take(), "the turn was given back");
            }
        });
    }

    /// D1–D5 of `drive.rs`: the notification reaches a worker that waits in the driver (a
    /// kick) wherever it is in its turn. A lost kick leaves it waiting forever, which loom
    /// reports.
    #[test]
    fn a_notification_reaches_a_driving_worker() {
        sleep_while_a_spawner_notifies(Some(false), false);
    }

    /// D6 and the race of events with a notification: the worker may wake for the event,
    /// leave the pool, and sleep again, or take both at once.
    #[test]
    fn events_and_a_notification_race_for_a_driving_worker() {
        sleep_while_a_spawner_notifies(Some(true), false);
    }

    /// Two workers of one core both see oversubscription and try to surrender at once:
    /// exactly one parks, the core never loses its last active worker, and the other, which
    /// stays, plays the leader: it finds the core with a surrendered worker and wakes it,
    /// which comes back active with no wake left in flight.
    #[test]
    fn surrender_keeps_one_active_and_leader_wake_returns_it() {
        loom::model(|| {
            let pools = Arc::new(Pools::new(1, 2));
            assert_eq!(pools.fill_now(0), Fill::Reserved(1));
            pools.woken(0); // the spare runs
            let boxes = [mailbox(), mailbox()];
            let handles: Vec<_> = (0..2)
                .map(|w| {
                    let (pools, boxes) = (pools.clone(), boxes.clone());
                    loom::thread::spawn(move || {
                        let me = publish(&boxes[w]);
                        if pools.surrender(0, w, &me, || {}) {
                            return true;
                        }
                        // The last active worker: the other one is (or is about to be) parked
                        // as surrendered, and a leader would wake it.
                        assert_eq!(pools.counts(0).0, 1);
                        assert!(pools.has_surrendered(0));
                        assert_eq!(pools.fill_now(0), Fill::Woke(1 - w));
                        receive(&boxes[1 - w]).notify();
                        false
                    })
                })
                .collect();
            let surrendered: Vec<bool> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            assert_eq!(surrendered.iter().filter(|&&s| s).count(), 1);
            assert_eq!(pools.counts(0), (2, 2));
            assert!(!pools.leader_view(0).1, "no wake left in flight");
        });
    }

    /// A spawner wakes a core's parked worker while the leader, which saw the core with no
    /// ready worker, fills it: exactly one of them wakes the worker, and the leader never
    /// creates a spare for a hole the spawner already filled.
    #[test]
    fn spawner_wake_and_leader_fill_race() {
        loom::model(|| {
            let pools = Arc::new(Pools::new(1, 2));
            assert_eq!(pools.enter(0, 0), None);
            let leader = {
                let pools = pools.clone();
                loom::thread::spawn(move || {
                    let (seen, in_flight) = pools.leader_view(0);
                    if in_flight {
                        return None;
                    }
                    Some(pools.fill(0, seen))
                })
            };
            let spawner = {
                let pools = pools.clone();
                loom::thread::spawn(move || {
                    let mut woke = false;
                    pools.wake_for_work(|_| woke = true);
                    woke
                })
            };
            let filled = leader.join().unwrap();
            let spawner_woke = spawner.join().unwrap();
            let leader_woke = filled == Some(Fill::Woke(0));
            assert!(spawner_woke != leader_woke, "{filled:?} {spawner_woke}");
            assert_ne!(filled, Some(Fill::Reserved(1)));
            assert_eq!(pools.counts(0), (1, 1));
        });
    }

    /// A parked worker is woken by its latch while the leader takes it at the same time:
    /// exactly one of them moves it out of the pool, and it ends active once, with no wake
    /// left in flight.
    #[test]
    fn latch_wake_and_leader_take_race() {
        loom::model(|| {
            // Cap 1: the leader wakes the parked worker or finds the core full, never reserves.
            let pools = Arc::new(Pools::new(1, 1));
            let latch = Arc::new(AtomicBool::new(false));
            let mb = mailbox();
            let worker = {
                let (pools, latch, mb) = (pools.clone(), latch.clone(), mb.clone());
                loom::thread::spawn(move || {
                    let me = publish(&mb);
                    while !latch.load(Ordering::SeqCst) {
                        let no_handoff = |_| panic!("nobody surrendered");
                        pools.sleep(
                            0,
                            0,
                            &me,
                            no_handoff,
                            || latch.load(Ordering::SeqCst),
                            || Wait::Driver(None),
                        );
                    }
                })
            };
            let me = receive(&mb);
            let leader = {
                let (pools, me) = (pools.clone(), me.clone());
                loom::thread::spawn(move || {
                    if let Fill::Woke(_) = pools.fill_now(0) {
                        me.notify();
                    }
                })
            };
            latch.store(true, Ordering::SeqCst);
            me.notify();
            worker.join().unwrap();
            leader.join().unwrap();
            assert_eq!(pools.counts(0), (1, 1));
            assert!(!pools.leader_view(0).1, "no wake left in flight");
        });
    }
}
