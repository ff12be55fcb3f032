//! Worker threads: the run loop, finding work, waiting, sleeping, surrendering.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crossbeam_deque::{Steal, Worker};
use umt_sys::CpuId;

use crate::diag::Warning;
use crate::job::Job;
use crate::pool::{Notifier, Woke};
use crate::registry::{Registry, Slot};
use crate::sync::lock;
use crate::trace::{LocalTrace, TraceKind, TraceThread};

thread_local! {
    /// The context of the worker running on this thread, null outside `WorkerCtx::main_loop`.
    /// A raw pointer in a `Cell`: reading it is one load, with no reference count to touch on
    /// every `join` and `spawn`.
    static CURRENT: Cell<*const WorkerCtx> = const { Cell::new(std::ptr::null()) };
}

/// Clears `CURRENT` when the worker's context goes away, also if its loop unwinds.
struct CurrentGuard;

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(std::ptr::null()));
    }
}

/// Calls `f` with the context of the worker the calling thread is, or `None` outside a worker.
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&WorkerCtx>) -> R) -> R {
    let ptr = CURRENT.with(Cell::get);
    // SAFETY: `ptr` is null or points to the context `worker_main` keeps on its stack, set
    // just before `main_loop` and cleared by `CurrentGuard` before the context is dropped
    // (also on unwind). Only this thread reads it, and any code that does runs inside
    // `main_loop`, so the context outlives `f`; the reference cannot escape `f`.
    f(unsafe { ptr.as_ref() })
}

/// Who runs tasks on a [`WorkerCtx`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A worker thread: a member of its core's pool, monitored.
    Worker,
    /// A core's leader, running tasks because its core had no ready worker
    /// (`Builder::leader_runs_tasks`). Not in the pool, not monitored: it stops at a task's
    /// start once a worker of its core is ready, and waits by yielding, never by parking
    /// (it runs at `SCHED_IDLE`, so a yield hands the core to anything else).
    Leader,
}

/// The run state a worker thread owns: its deque and where it belongs.
pub(crate) struct WorkerCtx {
    reg: Arc<Registry>,
    role: Role,
    /// Slot index.
    index: usize,
    /// Core index.
    core: usize,
    /// CPU of the core.
    cpu: CpuId,
    /// This worker's end of its deque.
    deque: Worker<Job>,
    /// Whether scheduling points check for oversubscription.
    monitored: bool,
    /// Whether the worker mutes its switch records while it spins for work: monitored, and
    /// no mute failed yet.
    muting: Cell<bool>,
    /// State of the victim-selection generator (xorshift).
    rng: Cell<u64>,
    /// This thread's trace records not handed over yet (`Builder::trace`).
    trace: LocalTrace,
    /// I/O waits (`crate::io`) this worker is inside, nested on its stack.
    io_depth: Cell<u32>,
    /// Whether this worker is waking the futures of I/O events (D6 of `drive.rs`).
    dispatch: Cell<Dispatch>,
    /// When this worker last looked into the I/O driver (D7 of `drive.rs`).
    last_look: Cell<Option<Instant>>,
    /// Jobs looked for by the main loop so far (`WorkerCtx::shared_first`).
    ticks: Cell<u32>,
    /// Whether this worker's next [`WorkerCtx::find_work`] looks at the woken futures before
    /// the injector and the other deques (it alternates): a future that wakes itself in a loop,
    /// or a busy server's connections, keep that queue from ever emptying.
    wakes_first: Cell<bool>,
    /// The length of the chain of futures, each woken onto a worker by the poll before, that
    /// led to the future this worker polls now (A2 of `README.md`); 0 outside a poll (a
    /// closure that a wait inside a poll runs sees the poll's).
    wake_chain: Cell<u8>,
    /// Whether [`WorkerCtx::find_work`] found the own deque empty since the last
    /// [`SHARED_FIRST`]-th job of the main loop (`WorkerCtx::shared_first`).
    seen_empty: Cell<bool>,
    /// Which queue a starved tick looks at first (`WorkerCtx::shared_first`), in turn.
    starved_first: Cell<u8>,
    /// N3: the next jobs of other cores' workers this worker saw waiting, per slot.
    sightings: crate::next::Sightings,
    /// N3: whether its last look for work saw another core's next job not yet aged.
    young_next: Cell<bool>,
    /// N3: its last sleep had a deadline (another worker's next job waited): it looks once
    /// when it comes back, without spinning, before it parks again.
    rechecking: Cell<bool>,
    /// Whether a task runs on this worker's stack (H2: the signal handler reads it).
    in_task: Cell<bool>,
    /// Whether the job this worker is about to start came from its core's inbox (set by
    /// [`WorkerCtx::take_inbox`], read at the job's start by [`WorkerCtx::execute`]).
    from_inbox: Cell<bool>,
    /// Its handoff flags in the monitor, when the handoff is directed (H1).
    handoff_flags: Option<umt_sys::HandoffFlags>,
}

/// H3: the directed handoff's signal handler. The worker it interrupts, if it runs a task,
/// steps aside until resumed ([`crate::handoff::Handoffs::step_aside`]). A signal not from the
/// monitor is ignored (its default action). Async-signal-safe: thread-local loads, atomics,
/// futex calls; `errno` is kept for the interrupted code.
pub(crate) extern "C" fn on_handoff_signal(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    if !crate::handoff::from_monitor(info) {
        return;
    }
    let errno = nix::errno::Errno::last_raw();
    with_current(|ctx| {
        if let Some(ctx) = ctx {
            ctx.step_aside();
        }
    });
    nix::errno::Errno::set_raw(errno);
}

/// Clears the in-task flag when the outermost task on a worker's stack ends, also when it
/// unwinds.
struct TaskGuard<'a>(&'a WorkerCtx);

impl Drop for TaskGuard<'_> {
    fn drop(&mut self) {
        self.0.set_in_task(false);
    }
}

/// B3 of `README.md`: a worker back from its park in `block_on` counts as active again, and
/// its core's leader looks (a polling leader may sleep while the core has no active worker).
struct BackFromBlockOn<'a>(&'a WorkerCtx);

impl Drop for BackFromBlockOn<'_> {
    fn drop(&mut self) {
        let ctx = self.0;
        ctx.reg.pools.back_from_block_on(ctx.core, ctx.index);
        ctx.reg.poke_leader(ctx.core);
    }
}

/// Ends the outermost [`WorkerCtx::staying`] call, also when it unwinds: leaders may lend the
/// worker again.
struct StayGuard<'a>(&'a WorkerCtx);

impl Drop for StayGuard<'_> {
    fn drop(&mut self) {
        self.0.slot().lend.unstay();
    }
}

/// Runs `f` on the calling worker's own core if it is a worker of `reg`, not lent meanwhile
/// ([`WorkerCtx::staying`]); elsewhere just runs it.
pub(crate) fn on_own_core<R>(reg: &Arc<Registry>, f: impl FnOnce() -> R) -> R {
    with_current(|ctx| match ctx {
        Some(ctx) if Arc::ptr_eq(&ctx.reg, reg) => ctx.staying(f),
        _ => f(),
    })
}

/// A worker's main loop takes every this-many-th job from the woken futures first
/// (`WorkerCtx::shared_first`).
const SHARED_FIRST: u32 = 61;

/// D7 of `drive.rs`: the least time between two looks of a busy worker into the I/O driver.
/// An event waits about this long, plus the job in progress, for a busy worker to take it.
const LOOK_GAP: std::time::Duration = std::time::Duration::from_micros(50);

/// What a push does while a worker wakes the futures of I/O events (D6 of `drive.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dispatch {
    /// Not waking any: a push wakes an idle core and makes a scheduling point.
    Off,
    /// Waking them, and the next push is this worker's own next task: it wakes no idle core.
    /// No push makes a scheduling point, so the worker cannot surrender with wakers still in
    /// its hands.
    KeepNext,
    /// Waking them, the first pushed: pushes wake idle cores, make no scheduling point.
    On,
    /// Waking the futures of a busy look (D7 of `drive.rs`): they go to the runtime's queue of
    /// woken futures, in their events' order, and wake idle cores. This worker has work of its
    /// own queued; its deque, newest first, would serve the last connection heard from before
    /// the others.
    Shared,
}

/// `steal()` until it succeeds or finds its queue empty.
fn until_decided(steal: impl Fn() -> Steal<Job>) -> Option<Job> {
    loop {
        match steal() {
            Steal::Success(job) => return Some(job),
            Steal::Retry => continue,
            Steal::Empty => return None,
        }
    }
}

/// Starts the thread of slot `index`; its handle joins the registry's, for shutdown.
pub(crate) fn start(reg: &Arc<Registry>, index: usize) -> std::io::Result<()> {
    let slot = &reg.slots[index];
    let cfg = &reg.config;
    let (cpu, k) = (cfg.cpus[slot.core], index % cfg.cap);
    // The application's naming runs here, on the starter thread for a spare: a panic in it,
    // or a name with a NUL byte (which makes the standard library's spawn panic), gives the
    // default name instead of ending the thread that starts the spares.
    let mut named = None;
    let ok = crate::diag::run_quietly(|| named = Some((cfg.thread_name)(cpu, k)));
    let name = match named {
        Some(name) if ok && !name.contains('\0') => name,
        _ => {
            reg.warnings.warn(Warning::ThreadName, || {
                "the thread_name function panicked or gave a name with a NUL byte; workers \
                 get the default name"
                    .to_owned()
            });
            format!("umt-worker-{cpu}.{k}")
        }
    };
    let mut builder = std::thread::Builder::new().name(name);
    if let Some(bytes) = cfg.stack_size {
        builder = builder.stack_size(bytes);
    }
    let handle = builder.spawn({
        let reg = reg.clone();
        move || worker_main(reg, index)
    })?;
    lock(&reg.threads).push(handle);
    Ok(())
}

/// Entry point of a worker thread.
fn worker_main(reg: Arc<Registry>, index: usize) {
    let slot = &reg.slots[index];
    let _ = slot.notifier.set(Notifier::new(std::thread::current()));
    let cpu = reg.config.cpus[slot.core];
    if let Err(e) = umt_sys::cpu::pin_current_thread(cpu) {
        reg.warnings.warn(Warning::Unpinned, || {
            format!("worker {index} runs unpinned, not only on CPU {cpu}: {e}")
        });
    }
    let monitored = reg.monitored() && {
        match reg.monitor.register_current_thread() {
            Ok(()) => true,
            Err(e) => {
                reg.warnings.warn(Warning::Unmonitored, || {
                    format!(
                        "worker {index} on CPU {cpu} is not monitored, so its core idles when \
                         it blocks: {e} (Stats::monitored_workers counts the monitored ones)"
                    )
                });
                false
            }
        }
    };
    slot.monitored.store(monitored, Ordering::Relaxed);
    slot.tid
        .store(umt_sys::cpu::current_tid(), Ordering::Relaxed);
    // However this thread ends, no leader moves its id afterwards (`Lend::retire`).
    struct Retire<'a>(&'a crate::lend::Lend);
    impl Drop for Retire<'_> {
        fn drop(&mut self) {
            self.0.retire();
        }
    }
    let _retire = Retire(&slot.lend);
    let Some(deque) = lock(&slot.deque).take() else {
        return;
    };
    reg.mark_started(index);
    // A spare runs for the first time: its reservation was a wake in flight (see `Pools`).
    if slot.spare {
        reg.pools.woken(slot.core);
    }
    call_handler(&reg, reg.config.start_handler.as_ref(), "start", index);
    // H1: a monitored worker takes part in the directed handoff.
    let handoff_flags = (monitored && reg.handoff.directed())
        .then(|| reg.monitor.handoff_flags())
        .flatten();
    if let Some(flags) = handoff_flags {
        reg.monitor
            .set_handoff_flags(flags, umt_sys::HANDOFF_ENABLED);
    }
    let ctx = WorkerCtx {
        role: Role::Worker,
        core: slot.core,
        cpu,
        deque,
        monitored,
        muting: Cell::new(monitored),
        rng: Cell::new(0x9e37_79b9_7f4a_7c15 ^ (index as u64 + 1)),
        index,
        reg: reg.clone(),
        trace: LocalTrace::default(),
        io_depth: Cell::new(0),
        dispatch: Cell::new(Dispatch::Off),
        last_look: Cell::new(None),
        ticks: Cell::new(0),
        wakes_first: Cell::new(true),
        wake_chain: Cell::new(0),
        seen_empty: Cell::new(true),
        starved_first: Cell::new(0),
        sightings: crate::next::Sightings::new(reg.slots.len()),
        young_next: Cell::new(false),
        rechecking: Cell::new(false),
        in_task: Cell::new(false),
        from_inbox: Cell::new(false),
        handoff_flags,
    };
    {
        CURRENT.with(|c| c.set(&ctx));
        let _clear = CurrentGuard;
        ctx.main_loop();
    }
    ctx.flush_trace();
    call_handler(&reg, reg.config.exit_handler.as_ref(), "exit", index);
    if monitored {
        let _ = reg.monitor.unregister_current_thread();
    }
}

/// Calls the application's start or exit handler on worker `index`; a panic in it is said,
/// and the worker goes on (a worker lost there would leave its core's queue unserved).
fn call_handler(
    reg: &Registry,
    handler: Option<&crate::config::ThreadFn>,
    which: &str,
    index: usize,
) {
    let Some(handler) = handler else {
        return;
    };
    if !crate::diag::run_quietly(|| handler(index)) {
        reg.warnings.warn(Warning::Handler, || {
            format!("the {which} handler panicked on worker {index}; the worker goes on")
        });
    }
}

impl WorkerCtx {
    /// The context in which the leader of `core`, the calling thread, runs tasks
    /// (`Builder::leader_runs_tasks`); `None` if its deque was already taken.
    pub(crate) fn for_leader(reg: &Arc<Registry>, core: usize) -> Option<WorkerCtx> {
        let index = reg.leader_slot(core);
        let slot = &reg.slots[index];
        let _ = slot.notifier.set(Notifier::new(std::thread::current()));
        let deque = lock(&slot.deque).take()?;
        reg.mark_started(index);
        Some(WorkerCtx {
            role: Role::Leader,
            core,
            cpu: reg.config.cpus[core],
            deque,
            monitored: false,
            muting: Cell::new(false),
            rng: Cell::new(0x9e37_79b9_7f4a_7c15 ^ (index as u64 + 1)),
            index,
            reg: reg.clone(),
            trace: LocalTrace::default(),
            io_depth: Cell::new(0),
            dispatch: Cell::new(Dispatch::Off),
            last_look: Cell::new(None),
            ticks: Cell::new(0),
            wakes_first: Cell::new(true),
            wake_chain: Cell::new(0),
            seen_empty: Cell::new(true),
            starved_first: Cell::new(0),
            sightings: crate::next::Sightings::new(reg.slots.len()),
            young_next: Cell::new(false),
            rechecking: Cell::new(false),
            in_task: Cell::new(false),
            from_inbox: Cell::new(false),
            handoff_flags: None,
        })
    }

    /// Leader-follower: the core's leader runs tasks until a worker of its core is ready or
    /// no task is left. Returns the number of tasks it ran.
    pub(crate) fn follow(&self) -> usize {
        let pools = &self.reg.pools;
        pools.set_leader_stealable(self.core, true);
        self.reg.leader_following[self.core].store(true, Ordering::Release);
        let mut ran = 0;
        {
            CURRENT.with(|c| c.set(self));
            let _clear = CurrentGuard;
            // A task's start is a scheduling point: `execute` puts the task back and returns
            // `false` once a worker of the core is ready.
            while let Some(job) = self.find_work()
                && self.execute(job)
            {
                ran += 1;
            }
        }
        // Whatever its tasks pushed and it did not run stays stealable until taken.
        if self.deque.is_empty() {
            pools.set_leader_stealable(self.core, false);
        }
        self.reg.leader_following[self.core].store(false, Ordering::Release);
        self.flush_trace();
        ran
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.reg
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }

    pub(crate) fn cpu(&self) -> CpuId {
        self.cpu
    }

    /// The index of the core this worker serves in its runtime.
    pub(crate) fn core(&self) -> usize {
        self.core
    }

    /// Whether this worker's own deque holds jobs.
    pub(crate) fn has_pending_tasks(&self) -> bool {
        !self.deque.is_empty()
    }

    /// Records `kind` with the ready count of the core it runs on, if the runtime traces.
    #[inline]
    /// Whether this runtime records a trace.
    pub(crate) fn tracing(&self) -> bool {
        self.reg.trace.is_some()
    }

    /// Records `kind` in the trace, with the core's ready count, if the runtime traces.
    pub(crate) fn record(&self, kind: TraceKind) {
        if let Some(rec) = &self.reg.trace {
            let thread = match self.role {
                Role::Leader => TraceThread::Leader,
                Role::Worker => TraceThread::Worker(self.index),
            };
            // On the core where it runs: the one it is lent to, if any.
            let core = self.lent_to().unwrap_or(self.core);
            let ready = self.reg.monitor.ready(self.reg.config.cpus[core]);
            self.trace.record(rec, core, thread, kind, ready);
        }
    }

    /// Hands this thread's trace records over (before it parks, when it exits).
    pub(crate) fn flush_trace(&self) {
        if let Some(rec) = &self.reg.trace {
            self.trace.flush(rec);
        }
    }

    fn slot(&self) -> &Slot {
        &self.reg.slots[self.index]
    }

    fn main_loop(&self) {
        loop {
            if let Some(job) = self.shared_first().or_else(|| self.find_work_or_spin(None)) {
                self.execute(job);
                continue;
            }
            if self.reg.terminate.load(Ordering::Acquire) {
                // Shutdown runs every task queued before it. The spin returns as soon as it
                // sees `terminate`, possibly after its last look for work came before the
                // jobs were queued (and `terminate` set): look once more after seeing it.
                // (Jobs for one core are in the shared queue by then: `Runtime`'s drop.)
                match self.find_work() {
                    Some(job) => {
                        self.execute(job);
                        continue;
                    }
                    None => return,
                }
            }
            self.sleep(None);
        }
    }

    /// Looks for work for a short while before giving up: work often appears within
    /// microseconds (the other side of a `join`), and parking and waking cost a futex call and,
    /// when monitored, two events. Spins first, then yields the CPU, then gives up.
    ///
    /// Muted meanwhile (see `README.md`, "Finding work"): a worker that spins and yields only
    /// gets preempted, which changes no ready count, but with the perf backend each of its
    /// switches would cost a record, an interrupt and a wake-up of its core's leader.
    fn find_work_or_spin(&self, done: Option<&dyn Fn() -> bool>) -> Option<Job> {
        self.look_for_events();
        if let Some(job) = self.find_work() {
            self.rechecking.set(false);
            return Some(job);
        }
        // N3: back from a sleep with a deadline, one look is enough: the job it came for
        // has aged by now or is gone (a pair of futures passing a baton on one worker costs
        // an idle worker one look a `RECHECK`, not a spin).
        if self.rechecking.replace(false) {
            return None;
        }
        let muted = self.mute();
        let found = self.spin_for_work(done);
        if muted {
            self.unmute();
        }
        found
    }

    /// The idle part of [`WorkerCtx::find_work_or_spin`], after a first look found nothing.
    fn spin_for_work(&self, done: Option<&dyn Fn() -> bool>) -> Option<Job> {
        const SPIN_ROUNDS: u32 = 16;
        const YIELD_ROUNDS: u32 = 16;
        /// D0 of `drive.rs`: the rounds of a worker that would wait in the I/O driver.
        const DRIVER_ROUNDS: u32 = 4;
        // A polling leader is runnable at SCHED_IDLE: a yield would hand it the core for a
        // whole iteration each time. Those rounds spin instead.
        let may_yield = !self.reg.config.caps.polling;
        // A worker waiting for a latch of its own keeps spinning: the latch is set by a
        // thread, not by I/O, and often soon.
        let rounds = if done.is_none() && self.would_drive() {
            DRIVER_ROUNDS
        } else {
            SPIN_ROUNDS + YIELD_ROUNDS
        };
        for round in 0..SPIN_ROUNDS + YIELD_ROUNDS {
            // N3: a worker that would drive spins on while another core's next job it saw
            // has not aged yet: parked in the driver, it would leave that job to wait for the
            // end of the job that woke it (a future that wakes another, then spins until
            // that one ran, waited for ever: found by
            // `a_future_woken_by_a_poll_that_runs_on_is_taken_by_another_core`).
            if round >= rounds && !self.young_next.get() {
                return None;
            }
            if done.is_some_and(|d| d()) || self.reg.terminate.load(Ordering::Relaxed) {
                return None;
            }
            if self.hand_off(false) {
                // Yielded to a worker of this core back from a block, or resumed one that
                // stepped aside: let it have the core (this one has no work).
                if self.reg.handoff.directed() {
                    std::thread::yield_now();
                }
            } else if round < SPIN_ROUNDS || !may_yield {
                for _ in 0..(1u32 << round.min(6)) {
                    std::hint::spin_loop();
                }
            } else {
                std::thread::yield_now();
            }
            if let Some(job) = self.find_work() {
                return Some(job);
            }
        }
        None
    }

    /// D7 of `drive.rs`: between two jobs, a worker of a runtime that drives I/O takes the
    /// events that came meanwhile, without waiting, if no other thread holds the turn, when
    /// it has no work at hand (its own deque and the woken futures are empty: it is about to
    /// look for work elsewhere) or its last look is [`LOOK_GAP`] old. Their futures go to the
    /// runtime's queue of woken futures (`Dispatch::Shared`).
    fn look_for_events(&self) {
        if self.role != Role::Worker || !self.reg.config.drive_io {
            return;
        }
        let Some(driver) = crate::drive::installed() else {
            return;
        };
        // Woken futures queued: the events a look would take now would queue behind them,
        // first woken first served, so they can wait for the gap too (one `epoll_wait` per
        // job otherwise, under load, where tokio's workers make one per many).
        if !self.deque.is_empty() || !self.reg.wakes.is_empty() {
            let now = Instant::now();
            let recent = |t: Instant| now.saturating_duration_since(t) < LOOK_GAP;
            if self.last_look.get().is_some_and(recent) {
                return;
            }
            self.last_look.set(Some(now));
        }
        if driver.look() == Some(crate::drive::Waited::Events) {
            self.dispatch.set(Dispatch::Shared);
            driver.dispatch();
            self.dispatch.set(Dispatch::Off);
        }
    }

    /// The length of the chain of wakes behind the future this worker polls now (A2).
    pub(crate) fn wake_chain(&self) -> u8 {
        self.wake_chain.get()
    }

    /// Sets [`WorkerCtx::wake_chain`] for a poll; returns the value to put back after it.
    pub(crate) fn set_wake_chain(&self, chain: u8) -> u8 {
        self.wake_chain.replace(chain)
    }

    /// Whether a future woken on this worker goes to its next slot; not while it wakes those of
    /// a busy look (D7 of `drive.rs`), which go to the shared queue.
    pub(crate) fn queues_wakes_here(&self) -> bool {
        self.dispatch.get() != Dispatch::Shared
    }

    /// D0 of `drive.rs`: whether this worker, parking now, would wait in the I/O driver (the
    /// turn is free and it is its core's last active worker). New work then reaches it
    /// through the driver's events or a kick, so it stops spinning for work sooner.
    fn would_drive(&self) -> bool {
        self.role == Role::Worker
            && self.lent_to().is_none()
            && self.reg.config.drive_io
            && self.reg.pools.active(self.core) <= 1
            && crate::drive::installed().is_some_and(|d| d.is_free())
    }

    /// Stops this worker's switch reports while it spins; returns whether it did. A worker
    /// whose mute fails once stops trying (it only costs the records).
    fn mute(&self) -> bool {
        if !self.muting.get() {
            return false;
        }
        match self.reg.monitor.mute_current_thread() {
            Ok(()) => true,
            Err(e) => {
                self.reg.warnings.warn(Warning::Mute, || {
                    format!(
                        "worker {} cannot mute its switch records: {e}; it pays a record per \
                         context switch while it looks for work",
                        self.index
                    )
                });
                self.muting.set(false);
                false
            }
        }
    }

    /// Reports this worker's switches again, before it runs a job or sleeps.
    fn unmute(&self) {
        if let Err(e) = self.reg.monitor.unmute_current_thread() {
            self.reg.warnings.warn(Warning::Mute, || {
                format!(
                    "worker {} cannot unmute its switch records: {e}",
                    self.index
                )
            });
            self.muting.set(false);
        }
    }

    /// Pushes a job on this worker's deque (a scheduling point). Inlined: built in registers,
    /// a job passed by reference costs a store-forwarding stall when it is copied into the deque.
    #[inline]
    pub(crate) fn push(&self, job: Job) {
        self.deque.push(job);
        self.pushed();
    }

    /// What follows a push (and a put in the next slot that displaced nothing): a wake of an
    /// idle core, unless it is the first future that events woke on this worker (D6 of
    /// `drive.rs`), and a scheduling point outside a dispatch of events.
    #[inline]
    fn pushed(&self) {
        match self.dispatch.get() {
            Dispatch::Off => {
                self.reg.pools.wake_idle_core(|w| self.reg.notify(w));
                self.sched_point();
            }
            Dispatch::KeepNext => self.dispatch.set(Dispatch::On),
            Dispatch::On | Dispatch::Shared => {
                self.reg.pools.wake_idle_core(|w| self.reg.notify(w))
            }
        }
    }

    /// N1 of `README.md`: queues a future woken by this worker's running job as its next
    /// job, which it runs when that job returns; a job that waited there before goes on the
    /// deque. Then what follows a push (idle cores woken, a scheduling point): other cores'
    /// workers take the job only once it has waited there a while (N3), when this worker is
    /// still busy.
    #[inline]
    pub(crate) fn push_next(&self, job: Job) {
        if let Some(older) = self.slot().next.put(job) {
            self.deque.push(older);
        }
        // N3: pairs with S2 of `Pools::sleep`: either a worker that makes its core idle sees
        // the job (and parks for `RECHECK` only) or the one it displaced, or this sees the
        // core idle and wakes it (a core whose workers all blocked is not idle: its leader
        // counts the job once it has aged). A push onto the deque alone needs no such
        // pairing: the pusher takes that job itself whenever it runs, but the job that put
        // this one may wait for it.
        std::sync::atomic::fence(Ordering::SeqCst);
        self.pushed();
    }

    /// Pops the newest job of the own deque.
    #[inline]
    pub(crate) fn pop_local(&self) -> Option<Job> {
        self.deque.pop()
    }

    /// Own next slot (N2 of `README.md`) and deque, then the core's inbox, then the woken
    /// futures (one), the injector (one) and the other workers' deques and next slots (the
    /// woken futures first and last in turn), then the offers (a running loop's chunks: this
    /// worker joins it, `offer.rs`).
    pub(crate) fn find_work(&self) -> Option<Job> {
        // N2: the future the last job woke, before anything queued before it.
        if let Some(job) = self.slot().next.take() {
            return Some(job);
        }
        if let Some(job) = self.deque.pop() {
            return Some(job);
        }
        self.seen_empty.set(true);
        if let Some(job) = self.take_inbox() {
            return Some(job);
        }
        // Woken futures one at a time, in the order they were woken: a batch moved into this
        // worker's deque waits there while the worker runs the first, or blocks in it, and
        // the connections in it wait behind the ones the other workers take after them
        // (closed-loop `serve`, 1 in 10 requests blocking: p99 3.3-3.9 ms one at a time
        // against 10-11 ms in batches, tokio's 13). Every other time before the injector and
        // the other deques, every other time after them: that queue may never empty (a
        // future that wakes itself in a loop, a future that yields its turn, `coop.rs`, busy
        // connections), and the tasks spawned from outside and those queued behind a blocked
        // worker would wait for ever.
        let wakes_first = self.wakes_first.get();
        self.wakes_first.set(!wakes_first);
        if wakes_first && let Some(job) = self.take_wake() {
            return Some(job);
        }
        if let Some(job) = self.take_injected() {
            return Some(job);
        }
        if let Some(job) = self.steal() {
            return Some(job);
        }
        if !wakes_first && let Some(job) = self.take_wake() {
            return Some(job);
        }
        // Not a leader running tasks: at `SCHED_IDLE`, preempted inside an offer's gate, it
        // would hold up the participant that closes it (`offer.rs`).
        match self.role {
            Role::Leader => None,
            Role::Worker => self.reg.offers.take(),
        }
    }

    /// Every [`SHARED_FIRST`]-th job of the main loop is the first woken future, if any,
    /// before the own deque: a worker whose own deque never empties (a job that spawns the
    /// next) would leave the futures woken by I/O waiting for ever (tokio's workers look at
    /// their global queue every 61 polls for the same reason). Not in waits for a latch,
    /// whose own deque holds the job waited for.
    ///
    /// A **starved** tick is one whose worker has not found its own deque empty since the
    /// last (a future woken by the closure it spawned, again and again, kept its worker from
    /// its core's inbox, the injector and the jobs below that pair for ever). It takes the
    /// core's inbox first (unless the worker is lent), then, in turn first, the first woken
    /// future, the injector's first job or the own deque's oldest. The injector's jobs are
    /// taken one at a time, never moved into a deque in bulk, so its first job is the next
    /// in `spawn_fifo`'s order (but for one put back by a worker that gives up its core,
    /// `execute`).
    fn shared_first(&self) -> Option<Job> {
        let tick = self.ticks.get().wrapping_add(1);
        self.ticks.set(tick);
        if !tick.is_multiple_of(SHARED_FIRST) {
            return None;
        }
        self.look_for_events();
        if self.seen_empty.replace(false) || self.deque.is_empty() {
            return self.take_wake();
        }
        if let Some(job) = self.take_inbox() {
            return Some(job);
        }
        let first = self.starved_first.get();
        self.starved_first.set((first + 1) % 3);
        (0..3).find_map(|k| match (first + k) % 3 {
            0 => self.take_wake(),
            1 => self.take_injected(),
            _ => self.take_oldest(),
        })
    }

    /// The first job of the core's inbox (broadcast calls, which must run on that core's
    /// CPU), if any; none for a worker lent to another core, which leaves them to the workers
    /// there.
    fn take_inbox(&self) -> Option<Job> {
        let inbox = &self.reg.inboxes[self.core];
        if inbox.is_empty() || self.lent_to().is_some() {
            return None;
        }
        let job = until_decided(|| inbox.steal());
        self.from_inbox.set(job.is_some());
        job
    }

    /// The injector's first job, if any: one at a time, so that it is always the next in
    /// `spawn_fifo`'s order.
    fn take_injected(&self) -> Option<Job> {
        until_decided(|| self.reg.injector.steal())
    }

    /// The oldest job of the own deque, taken from its stealing end.
    fn take_oldest(&self) -> Option<Job> {
        until_decided(|| self.slot().stealer.steal())
    }

    /// The first woken future of [`Registry::wakes`], if any.
    fn take_wake(&self) -> Option<Job> {
        until_decided(|| self.reg.wakes.steal())
    }

    fn steal(&self) -> Option<Job> {
        /// Victim deques longer than this are stolen from in batches.
        const BATCH_STEAL_MIN_LEN: usize = 32;
        let reg = &*self.reg;
        let cores = reg.cores();
        // xorshift64: a random first victim spreads thieves over the deques.
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        let (first_core, first_k) = ((x % cores as u64) as usize, (x >> 32) as usize);
        loop {
            let mut retry = false;
            for core in (0..cores).map(|j| (first_core + j) % cores) {
                for i in reg.stealable_slots(core, first_k) {
                    if i == self.index {
                        continue;
                    }
                    let victim = &reg.slots[i].stealer;
                    // A long deque holds many small independent tasks (a spawn loop): take up
                    // to half of them at once, which cuts the steals (and their cache-line
                    // traffic) per task. A short one is fork-join (each job is a large
                    // subtree): take one.
                    let stolen = if victim.len() > BATCH_STEAL_MIN_LEN {
                        victim.steal_batch_and_pop(&self.deque)
                    } else {
                        victim.steal()
                    };
                    match stolen {
                        Steal::Success(job) => return Some(job),
                        Steal::Retry => retry = true,
                        Steal::Empty => {}
                    }
                }
            }
            if !retry {
                return self.steal_next();
            }
        }
    }

    /// N3–N4 of `README.md`: another worker's next job, when every deque is empty: at once
    /// from a worker of this core (this worker runs, so that one does not: it blocked,
    /// surrendered or was preempted), from another core's only once the same job was seen
    /// waiting there for [`crate::next::AGED`] (its worker is still in the job that woke it).
    fn steal_next(&self) -> Option<Job> {
        let reg = &*self.reg;
        let cores = reg.cores();
        let here = self.lent_to().unwrap_or(self.core);
        // At shutdown every worker takes them at once: its last look for work would leave
        // a young one to be cancelled (a drop from inside a task, whose worker holds it).
        let ending = reg.terminate.load(Ordering::Relaxed);
        self.young_next.set(false);
        let first = (self.rng.get() % cores as u64) as usize;
        for core in (0..cores).map(|j| (first + j) % cores) {
            for i in reg.stealable_slots(core, 0) {
                if i == self.index {
                    continue;
                }
                let victim = &reg.slots[i];
                let Some(put) = victim.next.peek() else {
                    continue;
                };
                // Where the owner runs: its own core, or the one it is lent to.
                let mine = ending || victim.runs_on(core) == here;
                if !mine && !self.sightings.aged(i, put, Instant::now) {
                    self.young_next.set(true);
                    continue;
                }
                if let Some(job) = victim.next.steal(if mine { None } else { Some(put) }) {
                    return Some(job);
                }
            }
        }
        None
    }

    /// N2: moves this worker's next job to its deque, where other workers steal it, before
    /// it stops running for a while without looking for work (it surrenders, parks in
    /// `block_on`, blocks for I/O at the nesting limit): in the slot, only its core's other
    /// workers would take it, and only once every queue is empty (found in review).
    fn spill_next(&self) {
        if let Some(job) = self.slot().next.take() {
            self.deque.push(job);
        }
    }

    /// Runs one job between two scheduling points (task start, task end). Counted when it
    /// starts: its last action may release a waiter, who must find it counted. Returns `false`
    /// when the worker surrendered at the start instead: the job is back on its deque.
    pub(crate) fn execute(&self, job: Job) -> bool {
        // Task start. A worker that surrenders here first puts the job back on its deque,
        // where others can steal it: a task must not wait, unseen, in a parked worker's hands
        // while its core runs something long. Not a job of its core's inbox (a `broadcast`
        // call, bound to this core's CPU): on the deque, a worker of another core would steal
        // it and run it there; back in the inbox, it would wait for a worker of this core,
        // and the one that came back may be inside a long task (its every block woke this
        // worker, which gave the call back again: one call waited 137 s under load). So the
        // call runs now, beside that worker, and this worker surrenders at its end.
        let from_inbox = self.from_inbox.replace(false);
        let job = if !from_inbox && self.oversubscribed() {
            self.deque.push(job);
            if self.surrender() {
                return false;
            }
            // The core's last active worker may not surrender: run a job after all (this one,
            // unless a thief took it meanwhile).
            match self.deque.pop() {
                Some(job) => job,
                None => return false,
            }
        } else {
            job
        };
        // Only this worker writes its counter: a plain increment, no locked instruction.
        let run = &self.slot().tasks_run;
        run.store(run.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        self.record(TraceKind::TaskStart);
        // H2: the outermost task on this stack marks the worker in a task while it runs.
        let outermost = self.handoff_flags.is_some() && !self.in_task.get();
        if outermost {
            self.set_in_task(true);
            let _end = TaskGuard(self);
            job.run();
        } else {
            job.run();
        }
        self.record(TraceKind::TaskEnd);
        self.reg.sched_point(self.core);
        self.sched_point();
        true
    }

    /// Runs other jobs until `done()` is true, sleeping when there are none.
    pub(crate) fn wait_until(&self, done: &dyn Fn() -> bool) {
        self.sched_point();
        while !done() {
            if let Some(job) = self.find_work_or_spin(Some(done)) {
                self.execute(job);
            } else if !done() {
                self.sleep(Some(done));
            }
        }
    }

    /// B1 of `README.md` (`block_on` on a worker): whether this worker's `block_on` parks
    /// while its future waits, leaving the core's other tasks to a worker it wakes for them,
    /// rather than running them on top of its own frame: a monitored worker (whose runtime
    /// has a starter for the worker it may need, and whose core's spare surrenders once it is
    /// back), not a leader, while the runtime is not shutting down, and not in a child of
    /// `fork` (F1: the runtime's other threads are not there).
    pub(crate) fn parks_in_block_on(&self) -> bool {
        self.role == Role::Worker
            && self.monitored
            && !self.reg.terminate.load(Ordering::Acquire)
            && !self.reg.forked()
    }

    /// B1–B4 of `README.md`: waits for `done()` without running any task on top of the
    /// waiting frame (a task run there could wait for what only that frame, below it on the
    /// stack, does next: both would wait for ever). On its own core, where no leader lends it
    /// meanwhile (M5), it looks at `done()` a few dozen times, then stops counting as active,
    /// gives the core another worker (B2) and parks until `done()`; where it can give none,
    /// once that worker cannot be started, or once the runtime shuts down, it waits as `join`
    /// does (B4), no longer staying.
    pub(crate) fn wait_parked(&self, done: &dyn Fn() -> bool) {
        /// Looks at `done()` before parking: a future woken within microseconds (its task
        /// ran on another core) costs no park and no other worker.
        const SPIN_ROUNDS: u32 = 64;
        self.sched_point();
        let helps = self.staying(|| {
            for _ in 0..SPIN_ROUNDS {
                if done() {
                    return false;
                }
                std::hint::spin_loop();
            }
            self.spill_next();
            let slot = self.slot();
            let wait = slot.block_on_waits.load(Ordering::Relaxed) + 1;
            slot.block_on_waits.store(wait, Ordering::Relaxed);
            if !self.replace_me(wait) {
                return true;
            }
            // Active again however this ends (`done` is the caller's: it could panic).
            let _back = BackFromBlockOn(self);
            if self.reg.trace.is_some() {
                self.record(TraceKind::Park);
                self.flush_trace();
            }
            // B3: the future's waker notifies this worker. Other notifications (a latch of a
            // frame below, `Drop`'s, the starter's) make it look again.
            let mut helps = false;
            while !done() {
                if self.reg.terminate.load(Ordering::Acquire)
                    || slot.replacement_failed.load(Ordering::Acquire) == wait
                {
                    helps = true;
                    break;
                }
                self.park_notified();
            }
            self.record(TraceKind::Unpark);
            helps
        });
        if helps {
            self.wait_until(done);
        }
    }

    /// B2 of `README.md`: this worker stops counting as active, and another worker of its core
    /// becomes active in its place: a parked one, notified here, else a new one, which the
    /// starter starts (and, if it cannot, tells this worker, naming `wait`: B4). Returns
    /// `false`, this worker active again, where the limits allow none (the core's limit or
    /// cap, the runtime's most spares) or the starter is gone.
    fn replace_me(&self, wait: u64) -> bool {
        let reg = &self.reg;
        match reg.pools.replace(self.core) {
            crate::pool::Fill::Woke(w) => {
                reg.notify(w);
                true
            }
            crate::pool::Fill::Reserved(k) => {
                let index = self.core * reg.config.cap + k;
                let asked = reg
                    .starter
                    .get()
                    .is_some_and(|s| s.request(index, Some((self.index, wait))));
                if !asked {
                    reg.pools.unreserve(self.core, k);
                    reg.pools.back_from_block_on(self.core, self.index);
                }
                asked
            }
            crate::pool::Fill::Changed | crate::pool::Fill::Full => false,
        }
    }

    /// Waits for an I/O event (`crate::io`, steps W2 and W4): runs other work while `done()`
    /// is false (`done` also looks at the core's waits), and calls `block` when there is none.
    ///
    /// A worker already `MAX_IO_NESTING` waits deep runs no more tasks in this one: each task
    /// run in a wait sits on the waiter's stack until it returns (step W2a).
    #[cfg(not(loom))]
    pub(crate) fn wait_io(&self, done: &dyn Fn() -> bool, block: &dyn Fn(&WorkerCtx)) {
        /// Deepest nesting of waits in which a worker still runs other tasks.
        const MAX_IO_NESTING: u32 = 32;
        self.sched_point();
        let depth = self.io_depth.get();
        self.io_depth.set(depth + 1);
        // Spins for work only until the first block: a blocker that wakes without its event
        // looks once and blocks again.
        let mut spin = true;
        while !done() {
            let job = match (depth < MAX_IO_NESTING, spin) {
                (false, _) => None,
                (true, true) => self.find_work_or_spin(Some(done)),
                (true, false) => self.find_work(),
            };
            if let Some(job) = job {
                self.execute(job);
                spin = true;
            } else if !done() {
                self.spill_next();
                block(self);
                spin = false;
            }
        }
        self.io_depth.set(depth);
    }

    /// Parks until notified (a latch of this worker set, or a hand-over of `crate::io`'s
    /// blocker role). Not in the pool: the worker stays active.
    pub(crate) fn park_notified(&self) {
        self.notifier().wait();
    }

    /// [`WorkerCtx::park_notified`], returning at `deadline` at the latest.
    pub(crate) fn park_notified_until(&self, deadline: std::time::Instant) {
        self.notifier().wait_until(deadline);
    }

    /// Parks in the core's idle pool until woken: by new work when the core has no active
    /// worker, by the leader, by `done()` becoming true, or at shutdown (steps S1–S4 of
    /// `README.md`, in [`crate::pool::Pools::sleep`]).
    fn sleep(&self, done: Option<&dyn Fn() -> bool>) {
        if self.role == Role::Leader {
            // Not in the pool: at `SCHED_IDLE`, a yield runs anything else first.
            std::thread::yield_now();
            return;
        }
        // M4: a worker parks on its own core only.
        self.go_home();
        let reg = &*self.reg;
        let recheck = || {
            done.is_some_and(|d| d())
                || reg.has_work_for(self.core)
                || (done.is_none() && reg.terminate.load(Ordering::Acquire))
        };
        if reg.trace.is_some() {
            self.record(TraceKind::Park);
            self.flush_trace();
        }
        // D1 of `drive.rs`: an idle worker may wait in the process's I/O driver.
        let driver = if reg.config.drive_io {
            crate::drive::installed()
        } else {
            None
        };
        // N3: a worker that sees another worker's next job waiting, once it is findable in
        // the pool (after S2's fence, paired with the one after a put), parks for a while
        // only: nobody wakes it for that job, whose owner may not come back to it for long
        // (found in review: a worker whose last look came just before the put, or saw it
        // young, parked for good, and the job waited for the end of the one that woke it,
        // which waited for it). A job its last look saw and that is gone since was taken.
        let wait = || {
            if reg.has_next_job() {
                self.rechecking.set(true);
                crate::pool::Wait::Until(Instant::now() + crate::next::RECHECK)
            } else {
                crate::pool::Wait::Driver(driver)
            }
        };
        let woke = reg.pools.sleep(
            self.core,
            self.index,
            self.notifier(),
            |w| reg.notify(w),
            recheck,
            wait,
        );
        self.record(TraceKind::Unpark);
        if let Some(woke) = woke {
            // Lent while it parked (M4): woken for its own core.
            self.go_home();
            reg.poke_leader(self.core);
            if let (Woke::Events, Some(driver)) = (woke, driver) {
                // D6: active again; the tasks it wakes go to this worker (N1), the first
                // without waking an idle core for it (this worker runs it next: an idle core
                // woken for it would only race it to the job), the others as any push.
                // A worker waiting for its own latch (`done`) goes back to it instead.
                self.dispatch.set(if done.is_none() {
                    Dispatch::KeepNext
                } else {
                    Dispatch::On
                });
                driver.dispatch();
                self.dispatch.set(Dispatch::Off);
            }
        }
    }

    /// M4 of `README.md`, "Lending": if a leader lent this worker to its core, back to its
    /// own. Before it parks (a parked worker is its own core's), when it was lent while it
    /// parked, and when the core it was lent to has its own workers back.
    fn go_home(&self) {
        if self.role != Role::Worker || !self.reg.config.caps.lend {
            return;
        }
        let lend = &self.slot().lend;
        if let Some(to) = lend.take_home() {
            if let Err(e) = umt_sys::cpu::pin_current_thread(self.cpu) {
                self.reg.warnings.warn(Warning::Unpinned, || {
                    format!(
                        "worker {} could not go back to CPU {} after a loan: {e}",
                        self.index, self.cpu
                    )
                });
            }
            self.reg.guests[to].fetch_sub(1, Ordering::AcqRel);
            lend.arrived();
            self.record(TraceKind::Home);
        }
    }

    /// M5 of `README.md`, "Lending": runs `f` on this worker's own core, where no leader
    /// lends it until `f` returns (a `broadcast` call, bound to its core's CPU). A worker
    /// lent when the call starts (a leader may lend it between taking the call from its
    /// core's inbox and running it) goes home first. Nested calls keep the outermost's stay.
    pub(crate) fn staying<R>(&self, f: impl FnOnce() -> R) -> R {
        if self.role != Role::Worker || !self.reg.config.caps.lend {
            return f();
        }
        let lend = &self.slot().lend;
        // Only this worker marks itself staying: a nested call finds the outermost's mark.
        if lend.staying() {
            return f();
        }
        loop {
            self.go_home();
            // Fails only if a leader lent it since `go_home`: home again, and again.
            if lend.stay() || lend.lent_to().is_none() {
                break;
            }
        }
        let _stay = StayGuard(self);
        f()
    }

    /// The core this worker is lent to (`lend.rs`), if any: never where the runtime does not
    /// lend (no load then), nor for a leader running tasks.
    #[inline]
    fn lent_to(&self) -> Option<usize> {
        if !self.reg.config.caps.lend || self.role != Role::Worker {
            return None;
        }
        self.slot().lend.lent_to()
    }

    /// The ready workers of core `core` that are its own: its ready count less the workers
    /// of other cores lent to it (who leave first when its own come back, M3).
    fn own_ready(&self, core: usize) -> i64 {
        self.reg.monitor.ready(self.reg.config.cpus[core])
            - self.reg.guests[core].load(Ordering::Acquire) as i64
    }

    fn notifier(&self) -> &Notifier {
        self.slot()
            .notifier
            .get()
            .expect("the notifier is set before the worker runs")
    }

    /// A scheduling point: if the core has more than one ready worker, this one returns to the
    /// core's idle pool until the leader (or new work for an idle core) wakes it.
    ///
    /// Not once the runtime is shutting down: the leader is gone and nobody would wake a
    /// surrendered worker again (`Drop`'s notification may already have been consumed).
    #[inline]
    pub(crate) fn sched_point(&self) {
        if self.oversubscribed() {
            self.surrender();
        } else {
            self.hand_off(true);
        }
    }

    /// H2: marks this worker in a task or out of it, here (for its signal handler) and in the
    /// monitor (for the programs that decide whom to signal).
    #[inline]
    fn set_in_task(&self, on: bool) {
        if let Some(flags) = self.handoff_flags {
            self.in_task.set(on);
            let bits = if on {
                umt_sys::HANDOFF_ENABLED | umt_sys::HANDOFF_IN_TASK
            } else {
                umt_sys::HANDOFF_ENABLED
            };
            self.reg.monitor.set_handoff_flags(flags, bits);
        }
    }

    /// H3, in the signal handler: a worker running a task on its own core, holding no
    /// runtime lock, while its core has another ready worker (the one back from its block:
    /// a signal that came late, after that one blocked again, finds it alone) steps aside.
    /// Not counted in a task meanwhile: its own wake-up is no return from a block, and
    /// signals nobody (P4).
    fn step_aside(&self) {
        let Some(flags) = self.handoff_flags else {
            return;
        };
        if self.role != Role::Worker
            || !self.in_task.get()
            || crate::sync::holds_runtime_lock()
            || self.lent_to().is_some()
            || self.reg.terminate.load(Ordering::Acquire)
            || self.reg.monitor.ready(self.cpu) < 2
        {
            return;
        }
        let monitor = &self.reg.monitor;
        monitor.set_handoff_flags(flags, umt_sys::HANDOFF_ENABLED);
        self.reg.handoff.step_aside(self.core, self.index);
        monitor.set_handoff_flags(flags, umt_sys::HANDOFF_ENABLED | umt_sys::HANDOFF_IN_TASK);
    }

    /// Handoff (`Builder::handoff`, see `README.md`, "Handoff"). Directed: if a worker of
    /// this core stepped aside mid-task (H3), resume it, and at a scheduling point
    /// (`at_point`) surrender, so the core runs it next (H6). Otherwise: if an active worker
    /// of this core is not counted ready, it is blocked in the kernel or back from a block and
    /// waiting for the core (with counts that see a thread again only once it runs). Yield, so
    /// that in the second case it runs now rather than at the end of this worker's time slice;
    /// in the first the yield returns at once. Returns whether it handed the core over.
    #[inline]
    fn hand_off(&self, at_point: bool) -> bool {
        if !self.reg.config.handoff || !self.monitored {
            return false;
        }
        let lent = self.lent_to();
        if self.reg.handoff.directed() {
            // On the core it runs on: a worker lent there resumes that core's worker too,
            // and goes home at its next scheduling point (M3) instead of surrendering.
            if !self.reg.handoff.resume_one(lent.unwrap_or(self.core)) {
                return false;
            }
            let n = &self.slot().handoffs;
            n.store(n.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            if at_point && lent.is_none() {
                self.surrender();
            }
            return true;
        }
        // Not lent: its home core's counts say nothing of the core it runs on.
        if lent.is_some() {
            return false;
        }
        let active = self.reg.pools.active(self.core) as i64;
        if active <= self.reg.monitor.ready(self.cpu) {
            return false;
        }
        let n = &self.slot().handoffs;
        n.store(n.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        std::thread::yield_now();
        true
    }

    /// Whether this worker should leave its core: monitored, its core has more than one ready
    /// worker, and the runtime is not shutting down. A leader running tasks should stop once
    /// its core has one ready worker.
    #[inline]
    pub(crate) fn oversubscribed(&self) -> bool {
        let monitor = &self.reg.monitor;
        if self.role == Role::Leader {
            self.drained(monitor.drain_cpu(self.cpu));
            // At shutdown it runs what it took: the workers may have made their last look.
            return monitor.ready(self.cpu) >= 1 && !self.reg.terminate.load(Ordering::Acquire);
        }
        if !self.monitored {
            return false;
        }
        // M3: lent to another core, the worker stays there until one of that core's own
        // workers is ready again, and then goes home (guests leave first; the core's own
        // workers count only each other, below).
        let lending = self.reg.config.caps.lend;
        if let Some(to) = self.lent_to() {
            if self.own_ready(to) < 1 {
                return false;
            }
            self.go_home();
        }
        if self.reg.config.caps.polling {
            // Nobody is signalled per event: this worker's own unblock, if it just came back
            // from a block, is still in its ring (two loads when there is none).
            self.drained(monitor.drain_current_thread());
        }
        let mut ready = monitor.ready(self.cpu);
        // More ready workers than active ones: the count is stale. A worker of this core
        // parked (surrendered, or out of work) and its block is still in its ring, which only
        // its core's leader drains, and the leader runs when the core idles. Drain the core
        // now, or every scheduling point would try to surrender, in vain. (Live counts, Bpf:
        // never stale, and their drain would take the leader's wake-ups.)
        if ready > self.reg.pools.active(self.core) as i64 && !self.reg.config.caps.live_counts {
            self.drained(monitor.drain_cpu(self.cpu));
            ready = monitor.ready(self.cpu);
        }
        // Workers lent here do not count: they leave when this one is back (M3).
        if lending {
            ready -= self.reg.guests[self.core].load(Ordering::Acquire) as i64;
        }
        ready > 1 && !self.reg.terminate.load(Ordering::Acquire)
    }

    /// Counts the events a drain of this worker applied; if there were any, the core's time
    /// accounting records the state they left (the leader sees it only when the core idles).
    #[inline]
    fn drained(&self, drain: umt_sys::Result<usize>) {
        if let Ok(n) = drain
            && n > 0
        {
            let reg = &self.reg;
            reg.counters
                .monitor_events
                .fetch_add(n as u64, Ordering::Relaxed);
            self.record(TraceKind::Drained);
            let ready = reg.monitor.ready(self.cpu);
            reg.core_time[self.core].observe(std::time::Instant::now(), ready);
        }
    }

    /// Parks as surrendered unless this is the core's last active worker. Returns whether it
    /// did (it runs again when this returns). A leader running tasks does not park: it stops
    /// following at the next task start.
    fn surrender(&self) -> bool {
        if self.role == Role::Leader {
            return true;
        }
        let count = || {
            let n = &self.slot().surrenders;
            n.store(n.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            // The oversubscription ends here, although the count shows it only once this
            // worker's block is drained.
            let ready = self.reg.monitor.ready(self.cpu) - 1;
            self.reg.core_time[self.core].observe(std::time::Instant::now(), ready);
            if self.reg.trace.is_some() {
                self.record(TraceKind::Surrender);
                self.record(TraceKind::Park);
                self.flush_trace();
            }
        };
        self.spill_next();
        let pools = &self.reg.pools;
        if !pools.surrender(self.core, self.index, self.notifier(), count) {
            return false;
        }
        self.go_home();
        self.record(TraceKind::Unpark);
        self.reg.poke_leader(self.core);
        true
    }
}
