//! The leaders: one per core, pinned there; each watches its own core's part of the monitor
//! and gives that core a running worker while work is queued (steps L0–L3 of `README.md`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::config::LeaderPolicy;
use crate::diag::Warning;
use crate::pool::Fill;
use crate::registry::{Registry, StartRequests};
use crate::trace::{LocalTrace, TraceKind, TraceThread};
use crate::worker::WorkerCtx;

/// Starts the leader of core `core`; its handle joins the registry's, for shutdown.
pub(crate) fn start(
    reg: &Arc<Registry>,
    starter: &StartRequests,
    core: usize,
) -> std::io::Result<std::thread::Thread> {
    let (r, starter) = (reg.clone(), starter.clone());
    let handle = std::thread::Builder::new()
        .name(format!("umt-leader-{}", reg.config.cpus[core]))
        .spawn(move || leader_main(r, starter, core))?;
    let thread = handle.thread().clone();
    crate::sync::lock(&reg.leader_threads).push(handle);
    Ok(thread)
}

/// The leader of core `own` (an index into the runtime's cores): L0 once, then L1–L3, the
/// lending steps M1–M2 and the pacing of the next wait, until shutdown. (L4 in `README.md`
/// is the workers' surrender, not a leader's step.)
fn leader_main(reg: Arc<Registry>, starter: StartRequests, own: usize) {
    let mut leader = Leader::new(&reg, starter, own);
    while !reg.terminate.load(Ordering::Acquire) {
        leader.flush_trace();
        leader.wait();
        let _ = leader.resume_aside();
        let mut look = leader.drain();
        leader.fill_hole(&mut look);
        leader.borrow_if_starved(&mut look);
        leader.pace(&look);
    }
    // Shutdown runs every task queued before it: one a following leader put back on its deque
    // (its core had a ready worker) just as the workers made their last look runs here.
    if let Some(ctx) = &leader.follower
        && ctx.has_pending_tasks()
    {
        ctx.follow();
    }
    leader.flush_trace();
}

/// One leader's state between its iterations.
struct Leader<'r> {
    reg: &'r Arc<Registry>,
    starter: StartRequests,
    own: usize,
    cpu: umt_sys::CpuId,
    /// Leaders poll instead of waiting on the monitor (`Capabilities::polling`).
    poll: bool,
    /// The wait's timeout: the scan period, doubled while looks find nothing (L1).
    timeout: Duration,
    max_timeout: Duration,
    /// Poll: when an iteration last drained an event or acted, and the thread's CPU time at
    /// the start of this iteration (for `Stats::leader_poll_time`).
    last_busy: Instant,
    cpu_at_start: Duration,
    /// Looks in a row that found the own core starved and no donor (M1).
    starved_looks: u32,
    /// Leader-follower: the context in which this leader runs tasks itself.
    follower: Option<WorkerCtx>,
    /// This thread's trace records (`Builder::trace`), handed over before each wait.
    trace: LocalTrace,
    /// N3: the other cores' workers' next jobs this leader saw waiting, per slot.
    sightings: crate::next::Sightings,
}

/// What one iteration saw and did, from L2 on.
struct Look {
    /// The core's activation count and whether a wake was in flight, read before the drain.
    seen: u64,
    in_flight: bool,
    /// The core's ready count after the drain.
    ready: i64,
    /// The drain brought no event.
    quiet_drain: bool,
    /// Nothing happened: no event, no action (the next wait's timeout doubles).
    quiet: bool,
    /// A worker was woken or asked for (L3).
    woke: bool,
}

impl<'r> Leader<'r> {
    /// L0: run on the own core, and only when it would otherwise idle. A core whose workers
    /// all blocked has just gone idle, so its leader runs there at once; and its wake-ups never
    /// preempt a busy worker, whose switch records would wake it again (a feedback loop with
    /// the perf backend). One unpinned leader instead sat queued behind the busy worker of the
    /// core that woke it, while the core that needed it idled until the next load balance
    /// (1-3 ms).
    fn new(reg: &'r Arc<Registry>, starter: StartRequests, own: usize) -> Leader<'r> {
        let cfg = &reg.config;
        let cpu = cfg.cpus[own];
        if let Err(e) = umt_sys::cpu::pin_current_thread(cpu) {
            reg.warnings.warn(Warning::Unpinned, || {
                format!("the leader of CPU {cpu} runs unpinned: {e}")
            });
        }
        if cfg.leader_policy != LeaderPolicy::Normal
            && let Err(e) = umt_sys::cpu::set_current_thread_idle_policy()
        {
            reg.warnings.warn(Warning::LeaderPolicy, || {
                format!(
                    "the leader of CPU {cpu} keeps the normal policy, so it preempts busy \
                     workers: {e}"
                )
            });
        }
        let poll = cfg.caps.polling;
        Leader {
            reg,
            starter,
            own,
            cpu,
            poll,
            // The periodic scan only corrects counts that missed an event. While scans find
            // nothing, the timeout doubles (up to 64 periods) so a busy, non-blocking program
            // is not interrupted every period; any event or action resets it. Events wake
            // the leader anyway.
            timeout: cfg.scan_period,
            max_timeout: cfg.scan_period * 64,
            sightings: crate::next::Sightings::new(reg.slots.len()),
            last_busy: Instant::now(),
            cpu_at_start: if poll {
                thread_cpu_time()
            } else {
                Duration::ZERO
            },
            starved_looks: 0,
            follower: if cfg.leader_runs_tasks {
                WorkerCtx::for_leader(reg, own)
            } else {
                None
            },
            trace: LocalTrace::default(),
        }
    }

    /// Records `kind` with `ready`: the count the leader acted on where it acted (a spare
    /// woken for a core at 0 says 0, even if the spare already runs when the record is
    /// written, as it may with live counts).
    fn record_with(&self, kind: TraceKind, ready: i64) {
        if let Some(rec) = &self.reg.trace {
            self.trace
                .record(rec, self.own, TraceThread::Leader, kind, ready);
        }
    }

    /// Records `kind` with the count when recorded.
    fn record(&self, kind: TraceKind) {
        if self.reg.trace.is_some() {
            self.record_with(kind, self.reg.monitor.ready(self.cpu));
        }
    }

    /// Hands this thread's trace records over.
    fn flush_trace(&self) {
        if let Some(rec) = &self.reg.trace {
            self.trace.flush(rec);
        }
    }

    /// L1: waits for events of the own core or the scan timeout; or polls (see `poll_pause`).
    fn wait(&self) {
        let reg = self.reg;
        if self.poll {
            poll_pause(
                reg,
                self.own,
                self.last_busy.elapsed() < self.max_timeout,
                self.max_timeout,
            );
        } else if let Err(e) = reg.monitor.wait_cpu(self.cpu, Some(self.timeout)) {
            let cpu = self.cpu;
            reg.warnings.warn(Warning::Leader, || {
                format!("the leader of CPU {cpu} cannot wait on the monitor, it polls: {e}")
            });
            std::thread::sleep(reg.config.scan_period);
        }
        reg.counters
            .leader_iterations
            .fetch_add(1, Ordering::Relaxed);
        // A polling leader's iterations are too many to record; its drains are recorded.
        if !self.poll {
            self.record(TraceKind::LeaderWake);
        }
    }

    /// H6 (directed handoff): the own core has no ready worker while a worker of it stepped
    /// aside mid-task: that one runs again. Returns whether it resumed one. First thing after
    /// the wait, lock-free (though a worker never steps aside holding a runtime lock), and
    /// again at L3: the leader, at `SCHED_IDLE`, may have been kept off its core since that
    /// first look, until a drop it was not armed for (it did not wait) left the core idle.
    fn resume_aside(&self) -> bool {
        let reg = self.reg;
        if reg.handoff.aside(self.own) > 0
            && reg.monitor.ready(self.cpu) <= 0
            && reg.handoff.resume_one(self.own)
        {
            reg.handoff.leader_resumes.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// L2: reads the core's activation count and wake in flight, then drains the own core's
    /// events into its ready count.
    fn drain(&self) -> Look {
        let reg = self.reg;
        // Read before draining: a woken worker ends its wake in flight only once it runs,
        // when its unblock is in the kernel's counts, so with no wake in flight here every
        // woken worker is in the drain below. A wake that starts after this read changes the
        // core's activation count, which `fill` checks under the core's lock.
        let (seen, in_flight) = reg.pools.leader_view(self.own);
        // Only the own core's events: the work of an iteration does not grow with the number
        // of cores, and no other leader consumes what woke this one.
        let mut quiet_drain = true;
        match reg.monitor.drain_cpu(self.cpu) {
            Ok(n) => {
                quiet_drain = n == 0;
                if n > 0 {
                    reg.counters
                        .monitor_events
                        .fetch_add(n as u64, Ordering::Relaxed);
                    self.record(TraceKind::Drained);
                }
            }
            Err(e) => {
                let cpu = self.cpu;
                reg.warnings.warn(Warning::Leader, || {
                    format!("the leader of CPU {cpu} cannot drain the monitor: {e}")
                });
            }
        }
        let ready = reg.monitor.ready(self.cpu);
        // Time accounting: the state this drain leaves holds until the next drain.
        reg.core_time[self.own].observe(Instant::now(), ready);
        Look {
            seen,
            in_flight,
            ready,
            quiet_drain,
            quiet: quiet_drain,
            woke: false,
        }
    }

    /// L3: the own core, with no ready worker while work is queued (or a task of a
    /// surrendered worker waits), gets one. Whether work is queued is read only then: it
    /// reads the deques, whose cache lines the workers write.
    fn fill_hole(&self, look: &mut Look) {
        let (reg, own) = (self.reg, self.own);
        if look.ready > 0 || look.in_flight {
            return;
        }
        // A worker that stepped aside holds a task in progress: it runs before any other.
        if self.resume_aside() {
            look.woke = true;
            look.quiet = false;
            return;
        }
        let pending = reg.has_work_for(own) || self.aged_next_elsewhere();
        if !pending && !reg.pools.has_surrendered(own) {
            if reg.config.drive_io
                && let Some(driver) = crate::drive::installed()
            {
                driver.end_standby();
            }
            return;
        }
        // If a worker of the core started since `seen` (`Fill::Changed`), the drain may not
        // show it yet: nothing is done, and the next iteration looks again.
        match &self.follower {
            // Leader-follower: run the queued tasks here, at once, instead of waking a
            // worker (a surrendered worker's task is its own: it is woken for it).
            Some(ctx) if pending && reg.pools.leader_view(own).0 == look.seen => {
                ctx.follow();
            }
            _ => {
                if fill(reg, own, look.seen, &self.starter) {
                    self.record_with(TraceKind::SpareWoken, look.ready);
                    look.woke = true;
                }
            }
        }
        look.quiet = false;
    }

    /// N3 of `README.md`, for this core with no ready worker: whether a worker of another core
    /// has a next job that this leader has seen wait there for `next::AGED` (its owner runs
    /// on; a worker woken here takes it, as a thief of another core may), or whose owner is
    /// lent here (taken at once); this core's own workers lent away count as another core's.
    /// A job seen young changes nothing else: the next look comes at the usual timeout (kept
    /// at the scan period by a young job, an idle core's leader polled without rest for as
    /// long as any pair of futures passed a baton anywhere, found in review). Found in review
    /// too: with every other core's worker blocked in the kernel, no idle core was woken for
    /// the job, and this leader did not count it, so it waited for the end of the job that
    /// woke it, which could wait for it.
    fn aged_next_elsewhere(&self) -> bool {
        let (reg, own) = (self.reg, self.own);
        reg.every_stealable_slot().any(|(core, i)| {
            let slot = &reg.slots[i];
            let runs_on = slot.runs_on(core);
            if core == own && runs_on == own {
                // Counted by `has_work_for`.
                return false;
            }
            slot.next
                .peek()
                .is_some_and(|put| runs_on == own || self.sightings.aged(i, put, Instant::now))
        })
    }

    /// M1–M2 of "Lending" in `README.md`: still no ready worker, and none woken (every worker of the
    /// core blocked and the spare limit reached, or nothing queued): a runnable worker of an
    /// oversubscribed core moves here.
    fn borrow_if_starved(&mut self, look: &mut Look) {
        // A new drop to zero (a drained signal), a ready worker or a wake starts the count
        // of starved looks again.
        if look.ready > 0 || look.woke || !look.quiet_drain {
            self.starved_looks = 0;
        }
        if !self.reg.config.caps.lend || look.ready > 0 || look.in_flight || look.woke {
            return;
        }
        match lend(self.reg, self.own) {
            Loan::Lent => {
                self.starved_looks = 0;
                // With the count the loan left (the worker counts here once moved).
                self.record(TraceKind::Lent);
                // Handed over now: the worker keeps this leader (at `SCHED_IDLE`) off the
                // core, perhaps until the run ends.
                self.flush_trace();
                look.quiet = false;
            }
            // Look again soon: the donor's workers may be runnable at the next look.
            Loan::Refused => look.quiet = false,
            // Nobody signals this leader when another core's workers come back, so while
            // this core's own workers are blocked (it has active ones, none ready) it looks
            // every scan period, not at a doubling timeout: a look that came 64 periods late
            // left a core idle for tens of milliseconds beside a core whose returned workers
            // shared it. The core idles meanwhile, so the looks cost no worker any time.
            Loan::NoDonor => {
                self.starved_looks += 1;
                look.quiet &=
                    self.reg.pools.active(self.own) == 0 || self.starved_looks > MAX_STARVED_LOOKS;
            }
        }
    }

    /// The next wait's timeout (doubled after a quiet look, else the scan period) and, when
    /// polling, the CPU time of quiet looks (`Stats::leader_poll_time`).
    fn pace(&mut self, look: &Look) {
        self.timeout = if look.quiet {
            (self.timeout * 2).min(self.max_timeout)
        } else {
            self.reg.config.scan_period
        };
        if self.poll {
            let now_cpu = thread_cpu_time();
            if look.quiet {
                let spent = now_cpu.saturating_sub(self.cpu_at_start).as_nanos() as u64;
                self.reg
                    .counters
                    .leader_poll_ns
                    .fetch_add(spent, Ordering::Relaxed);
            } else {
                self.last_busy = Instant::now();
            }
            self.cpu_at_start = now_cpu;
        }
    }
}

/// Step L3 for `core`, seen with no ready worker while work is queued: gives it a running
/// worker, a parked one if it has any, else a new one if the cap allows, started by the
/// starter thread (see `starter.rs` for why the leader never starts threads itself). Does
/// nothing if a worker of the core became active since `seen` (see [`Pools::fill`]).
///
/// [`Pools::fill`]: crate::pool::Pools::fill
/// Returns whether a worker was woken or asked for.
fn fill(reg: &Registry, core: usize, seen: u64, starter: &StartRequests) -> bool {
    match reg.pools.fill(core, seen) {
        Fill::Woke(w) => {
            reg.counters.leader_wakeups.fetch_add(1, Ordering::Relaxed);
            reg.notify(w);
            true
        }
        Fill::Reserved(k) => {
            let asked = starter.request(core * reg.config.cap + k, None);
            if !asked {
                reg.pools.unreserve(core, k);
            }
            asked
        }
        Fill::Changed | Fill::Full => false,
    }
}

/// How many looks in a row a starved leader makes every scan period before its timeout
/// doubles again (M1): a core whose workers wait in the kernel for long (an idle server's
/// I/O waits) would otherwise wake its leader every period for as long as they wait.
const MAX_STARVED_LOOKS: u32 = 64;

/// What a leader's look for a worker to borrow found (M1).
enum Loan {
    /// A worker of another core now runs here.
    Lent,
    /// Another core has more than one ready worker, but none could be moved now (none
    /// runnable at the look, or each lent, being lent, staying for a `broadcast` call (M5) or
    /// exiting).
    Refused,
    /// No other core has more than one ready worker.
    NoDonor,
}

/// M1–M2 of `README.md`, "Lending": moves a runnable worker of the other core with the
/// most ready workers (at least two) to core `own`, which has none. Live counts only
/// (`Capabilities::lend`): another core's count is read without a drain, and it follows the moved
/// thread to its new CPU.
fn lend(reg: &Registry, own: usize) -> Loan {
    let cpus = &reg.config.cpus;
    let donor = (0..reg.cores())
        .filter(|&c| c != own)
        .map(|c| (c, reg.monitor.ready(cpus[c])))
        .max_by_key(|&(_, ready)| ready);
    let Some((donor, _)) = donor.filter(|&(_, ready)| ready >= 2) else {
        return Loan::NoDonor;
    };
    // M2: an active worker of the donor (parked ones are skipped) that is running or waiting
    // for its CPU, not one blocked in the kernel (which would only wake here later).
    for i in reg.stealable_slots(donor, 0) {
        let slot = &reg.slots[i];
        let tid = slot.tid.load(Ordering::Relaxed);
        // Unmonitored workers are not lent: their count would not follow them.
        if slot.leader
            || slot.core != donor
            || tid == 0
            || !slot.monitored.load(Ordering::Relaxed)
            || !slot.lend.lendable()
        {
            continue;
        }
        if !umt_sys::cpu::thread_runnable(tid).unwrap_or(false) {
            continue;
        }
        // The worker cannot exit meanwhile: `Lend::retire` waits for a lend in progress.
        // Counted before the move: once moved, the worker keeps this leader (at `SCHED_IDLE`)
        // off the core, and a count made after would show late.
        reg.counters.workers_lent.fetch_add(1, Ordering::Relaxed);
        let moved = slot.lend.lend(
            own,
            &reg.guests[own],
            || umt_sys::cpu::pin_thread(tid, cpus[own]).is_ok(),
            || {
                let _ = umt_sys::cpu::pin_thread(tid, cpus[donor]);
            },
        );
        if moved {
            return Loan::Lent;
        }
        reg.counters.workers_lent.fetch_sub(1, Ordering::Relaxed);
    }
    Loan::Refused
}

/// The pause between two polling iterations: about what 8 `sched_yield`s took on an idle
/// core, so that a drain does not bounce the workers' cache lines more often than the
/// reaction needs.
const POLL_PAUSE: Duration = Duration::from_micros(4);

/// L1 with [`LeaderPolicy::Poll`]. The leader runs at `SCHED_IDLE`, so it runs only when the
/// core has nothing else to run, and a worker that wakes preempts it at once: the next
/// iteration comes when the core's workers have blocked, within a few microseconds, with no
/// signal from the monitor.
/// - Recently `busy` (an event or an action within 64 scan periods): spin for [`POLL_PAUSE`]
///   and go on, even if every worker of the core is parked: a runtime between two bursts of
///   work would otherwise pay a leader wake-up (`Registry::poke_leader`) per burst. It spins
///   rather than yields: each `sched_yield` of a `SCHED_IDLE` thread pushes its deadline a
///   whole weighted slice back, and under load from other processes the leader then got no
///   turn for seconds, at shutdown too (20 runtimes dropped under two `yes`: 36.8 s).
/// - Quiet, and no active worker on the core: nothing there can block. Sleep until a worker
///   becomes active, or `max_sleep`.
/// - Quiet with active workers (blocked for long, or never blocking): poll once per scan
///   period.
fn poll_pause(reg: &Registry, own: usize, busy: bool, max_sleep: Duration) {
    if busy {
        let start = Instant::now();
        while start.elapsed() < POLL_PAUSE && !reg.terminate.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    } else if reg.pools.counts(own).0 == 0 {
        std::thread::park_timeout(max_sleep);
    } else {
        std::thread::park_timeout(reg.config.scan_period);
    }
}

/// CPU time of the calling thread so far (zero if the clock cannot be read).
fn thread_cpu_time() -> Duration {
    umt_sys::cpu::current_thread_cpu_time().unwrap_or_default()
}
