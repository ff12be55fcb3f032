//! What a runtime did: [`Runtime::stats`](crate::Runtime::stats).

use std::sync::atomic::Ordering;
use std::time::Duration;

use umt_sys::{BackendKind, CpuId};

use crate::registry::Registry;

/// A snapshot of a runtime's counters.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// The monitor backend in use.
    pub backend: BackendKind,
    /// Tasks started by all workers (once a scope or join returns, all of its tasks are counted).
    pub tasks_run: u64,
    /// Block and unblock events drained from the monitor: by the leaders, and by the workers
    /// at their scheduling points (their own events with
    /// [`LeaderPolicy::Poll`](crate::LeaderPolicy::Poll), their core's when its count shows
    /// more ready workers than active ones).
    pub monitor_events: u64,
    /// Times the leaders woke (on events or their scan timers), summed over cores.
    pub leader_iterations: u64,
    /// Parked workers the leader woke because their core had no ready worker.
    pub leader_wakeups: u64,
    /// Runnable workers of an oversubscribed core that a leader moved to its own core, whose
    /// workers were all blocked with none to wake ([`Builder::lend_workers`]).
    ///
    /// [`Builder::lend_workers`]: crate::Builder::lend_workers
    pub workers_lent: u64,
    /// CPU time the leaders spent polling without finding anything to do
    /// ([`LeaderPolicy::Poll`](crate::LeaderPolicy::Poll) only; zero otherwise). It is time
    /// their cores would have idled: subtract it from the process's CPU time to see what
    /// the work used.
    pub leader_poll_time: Duration,
    /// Times a worker surrendered its core because the core had more than one ready worker.
    pub surrenders: u64,
    /// Handoffs at scheduling points ([`Builder::handoff`](crate::Builder::handoff)): yields
    /// because an active worker of the core was not counted ready or, directed, hand-overs
    /// of the core back to a worker that stepped aside.
    pub handoffs: u64,
    /// Whether the handoff is directed: the monitor signals a worker running a task to step
    /// aside for a returned one ([`Builder::handoff`](crate::Builder::handoff) with the Bpf
    /// backend on Linux 6.13 or later). `false` without the handoff, and where it yields.
    pub directed_handoff: bool,
    /// Times a worker stepped aside mid-task for a worker of its core back from a block
    /// (the directed handoff, [`Builder::handoff`](crate::Builder::handoff)).
    pub handoff_parks: u64,
    /// Of those, the ones that ended at the 4 ms limit rather than by a resume (its core
    /// never had a free moment: the kernel then shared it, as without the handoff).
    pub handoff_expired: u64,
    /// Of those, the ones a leader resumed because their core had no ready worker (the others
    /// were handed the core back at a scheduling point, or expired).
    pub handoff_leader_resumes: u64,
    /// Spare workers started (beyond the initial one per core): by the starter thread, at a
    /// leader's request.
    pub workers_created: u64,
    /// Tasks cancelled instead of run, because a task whose data they read or write panicked
    /// ([`Scope::spawn_with`](crate::Scope::spawn_with)).
    pub tasks_cancelled: u64,
    /// Tasks the leaders ran themselves ([`Builder::leader_runs_tasks`]; counted in
    /// `tasks_run` too).
    ///
    /// [`Builder::leader_runs_tasks`]: crate::Builder::leader_runs_tasks
    pub leader_tasks: u64,
    /// Worker threads registered with the monitor, of those started (`workers`, leaders
    /// that run tasks aside: they are never monitored). All of them when the monitor is on and
    /// nothing went wrong; none with the monitor off. A worker
    /// that could not register (out of file descriptors, say) leaves its core idle when it
    /// blocks; the runtime says so once on stderr.
    pub monitored_workers: usize,
    /// What the monitor saw: blocks, unblocks, migrations, and the ring overflows that forced
    /// a resynchronisation (make `Builder::ring_pages` larger if they are frequent).
    pub monitor: umt_sys::MonitorStats,
    /// Time since the runtime was built.
    pub elapsed: Duration,
    /// Per core.
    pub cores: Vec<CoreStats>,
    /// Per worker thread started.
    pub workers: Vec<WorkerStats>,
}

impl Stats {
    /// The coefficient of variation across cores of a per-core figure (standard deviation
    /// over mean; 0 when the mean is 0): how unevenly the cores fared, as in the
    /// OS-versus-runtime study (seed 003). For example
    /// `stats.cov(|c| c.cpu_time.as_secs_f64())`.
    pub fn cov(&self, f: impl Fn(&CoreStats) -> f64) -> f64 {
        coefficient_of_variation(&self.cores.iter().map(f).collect::<Vec<_>>())
    }
}

/// Standard deviation (of the population) over mean; 0 for no values or a zero mean.
pub fn coefficient_of_variation(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if mean == 0.0 {
        return 0.0;
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    var.sqrt() / mean.abs()
}

/// Counters of one core.
#[derive(Debug, Clone, PartialEq)]
pub struct CoreStats {
    /// The CPU.
    pub cpu: CpuId,
    /// Worker threads created for it.
    pub workers: usize,
    /// Workers not parked in its idle pool, nor in `block_on` (whose place another worker
    /// took: see [`block_on`](crate::block_on)).
    pub active_workers: usize,
    /// Its ready count: monitored workers running or runnable there, as of the last drain
    /// of its events (0 with the monitor off).
    pub ready_workers: i64,
    /// Tasks run by its workers.
    pub tasks_run: u64,
    /// Time with more than one ready worker on its CPU (the price UMT pays). With the Bpf
    /// monitor, kept by its programs at every change of the CPU's ready count, in the kernel
    /// (umt-sys's `Monitor::oversubscribed`): each end of an episode within the few
    /// instructions of the change that made it (a snapshot taken while a worker of the core
    /// registers gives the last whole reading; where the process cannot read the kernel's
    /// clock, the estimate below). With the others, as the leaders and workers
    /// see it: a state counts from the
    /// drain that found it to the next one, so a short episode may count until the next
    /// drain, and one that begins and ends between two drains is missed; read it as an
    /// estimate there, and a trace (`Builder::trace`) for each core's states. (There is no
    /// "idle with work" estimate any more: with live counts it was charged until the leader's
    /// next drain, which only a drop to zero causes, and showed cores 98 % busy as 35-49 %
    /// idle.)
    pub oversubscribed: Duration,
    /// CPU time its workers used (exact, from the kernel: the sum of its workers'
    /// [`WorkerStats::sched`]).
    pub cpu_time: Duration,
    /// Time none of its workers ran: [`Stats::elapsed`] less `cpu_time` (its leader, other
    /// processes, or nothing ran: on a machine shared with other work, much of it may be
    /// time its workers were runnable and waited behind another process, which
    /// `runqueue_wait` counts).
    pub idle_time: Duration,
    /// Time its workers waited on the run queue while runnable, summed over them (from the
    /// kernel's `schedstat`; `None` on a kernel without `CONFIG_SCHED_INFO`): with workers
    /// pinned, the time one waited for another of the core (exact oversubscription) or for
    /// any other thread on that CPU, another process's included. Two workers waiting at once
    /// count twice, so it can exceed [`Stats::elapsed`].
    pub runqueue_wait: Option<Duration>,
    /// Context switches of its workers by blocking (I/O, locks, parking).
    pub voluntary_switches: u64,
    /// Context switches of its workers by preemption.
    pub involuntary_switches: u64,
    /// Storage I/O its workers caused (bytes read from and written or dirtied towards
    /// storage, from the kernel's task I/O accounting; page-cache hits count nothing): with
    /// `cpu_time`, the compute and I/O progress of seed 002's CPIO, per core. `None` where
    /// no worker's figures could be read (a kernel without `CONFIG_TASK_IO_ACCOUNTING`).
    pub io: Option<umt_sys::cpu::ThreadIo>,
    /// CPU time of its onload thread (work run by [`Runtime::onload`]; zero before the
    /// first onload): the threads of the runtime's features that run on this core, which
    /// are not workers.
    ///
    /// [`Runtime::onload`]: crate::Runtime::onload
    pub onload_cpu_time: Duration,
    /// Storage I/O of its onload thread, as `io` (`None` before the first onload).
    pub onload_io: Option<umt_sys::cpu::ThreadIo>,
}

impl CoreStats {
    /// CPU time of every thread the runtime runs work on here: its workers and its onload
    /// thread.
    pub fn total_cpu_time(&self) -> Duration {
        self.cpu_time + self.onload_cpu_time
    }

    /// Storage I/O of the same threads, in bytes (read and written).
    pub fn total_io_bytes(&self) -> u64 {
        let io = |x: Option<umt_sys::cpu::ThreadIo>| x.map_or(0, |x| x.total());
        io(self.io).saturating_add(io(self.onload_io))
    }
}

/// Counters of one worker thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerStats {
    /// The CPU it is bound to.
    pub cpu: CpuId,
    /// `false` for the initial worker of its core, `true` for spares the leader created.
    pub spare: bool,
    /// It registered with the monitor (see [`Stats::monitored_workers`]).
    pub monitored: bool,
    /// `true` for a core's leader, listed when leaders run tasks
    /// ([`Builder::leader_runs_tasks`](crate::Builder::leader_runs_tasks)).
    pub leader: bool,
    /// Tasks it ran.
    pub tasks_run: u64,
    /// Times it surrendered its core.
    pub surrenders: u64,
    /// What the kernel's scheduler did with the thread (`None` if `/proc` could not be
    /// read).
    pub sched: Option<umt_sys::cpu::ThreadSched>,
}

/// Reads every counter of `reg`. Monitor events not drained yet are drained first, so that
/// the counts are current whatever the leaders did (a `SCHED_IDLE` leader of a busy core may
/// not have run for a long time), with `settle_cpu`: a ring such a leader holds, preempted in
/// the middle of its drain, is waited for, not passed by (umt-sys's monitor `README.md`, "One
/// record at a time").
pub(crate) fn snapshot(reg: &Registry) -> Stats {
    let cpus = &reg.config.cpus;
    if !reg.config.caps.live_counts {
        for &cpu in cpus {
            if let Ok(n) = reg.monitor.settle_cpu(cpu)
                && n > 0
            {
                reg.counters
                    .monitor_events
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
    let elapsed = reg.started.elapsed();
    let workers: Vec<(usize, WorkerStats, Option<umt_sys::cpu::ThreadIo>)> = reg
        .slots
        .iter()
        .filter(|s| s.started.load(Ordering::Acquire))
        .map(|s| {
            let w = WorkerStats {
                cpu: cpus[s.core],
                spare: s.spare,
                monitored: s.monitored.load(Ordering::Relaxed),
                leader: s.leader,
                tasks_run: s.tasks_run.load(Ordering::Relaxed),
                surrenders: s.surrenders.load(Ordering::Relaxed),
                sched: match s.tid.load(Ordering::Relaxed) {
                    0 => None,
                    tid => umt_sys::cpu::thread_sched(tid).ok(),
                },
            };
            let io = match s.tid.load(Ordering::Relaxed) {
                0 => None,
                tid => umt_sys::cpu::thread_io(tid).ok(),
            };
            (s.core, w, io)
        })
        .collect();
    // The features' threads of each core (the onload thread, once a first onload started
    // it): (CPU time, I/O).
    let onload: Vec<(Duration, Option<umt_sys::cpu::ThreadIo>)> = (0..cpus.len())
        .map(|core| {
            let tids = reg.feature_threads(core);
            let cpu_time = tids
                .iter()
                .filter_map(|&tid| umt_sys::cpu::thread_sched(tid).ok())
                .map(|s| s.cpu_time)
                .sum();
            let ios: Vec<umt_sys::cpu::ThreadIo> = tids
                .iter()
                .filter_map(|&tid| umt_sys::cpu::thread_io(tid).ok())
                .collect();
            (cpu_time, (!ios.is_empty()).then(|| ios.into_iter().sum()))
        })
        .collect();
    let cores = cpus
        .iter()
        .enumerate()
        .map(|(core, &cpu)| {
            let (active, created) = reg.pools.counts(core);
            let t = &reg.core_time[core];
            let ns =
                |n: &std::sync::atomic::AtomicU64| Duration::from_nanos(n.load(Ordering::Relaxed));
            let sched: Vec<umt_sys::cpu::ThreadSched> = workers
                .iter()
                .filter(|(c, _, _)| *c == core)
                .filter_map(|(_, w, _)| w.sched)
                .collect();
            let ios: Vec<umt_sys::cpu::ThreadIo> = workers
                .iter()
                .filter(|(c, _, _)| *c == core)
                .filter_map(|(_, _, io)| *io)
                .collect();
            let (onload_cpu_time, onload_io) =
                onload.get(core).copied().unwrap_or((Duration::ZERO, None));
            let cpu_time: Duration = sched.iter().map(|s| s.cpu_time).sum();
            CoreStats {
                cpu_time,
                idle_time: elapsed.saturating_sub(cpu_time),
                runqueue_wait: sched.iter().map(|s| s.runqueue_wait).sum(),
                voluntary_switches: sched.iter().map(|s| s.voluntary_switches).sum(),
                involuntary_switches: sched.iter().map(|s| s.involuntary_switches).sum(),
                cpu,
                workers: created,
                active_workers: active,
                ready_workers: reg.monitor.ready(cpu),
                tasks_run: workers
                    .iter()
                    .filter(|(c, _, _)| *c == core)
                    .map(|(_, w, _)| w.tasks_run)
                    .sum(),
                // Kept by the monitor where it can (Bpf), else the drains' estimate.
                oversubscribed: reg
                    .monitor
                    .oversubscribed(cpu)
                    .unwrap_or_else(|| ns(&t.oversubscribed_ns)),
                io: (!ios.is_empty()).then(|| ios.into_iter().sum()),
                onload_cpu_time,
                onload_io,
            }
        })
        .collect();
    let c = &reg.counters;
    let workers: Vec<WorkerStats> = workers.into_iter().map(|(_, w, _)| w).collect();
    Stats {
        backend: reg.monitor.backend(),
        tasks_run: workers.iter().map(|w| w.tasks_run).sum(),
        monitor_events: c.monitor_events.load(Ordering::Relaxed),
        leader_iterations: c.leader_iterations.load(Ordering::Relaxed),
        leader_wakeups: c.leader_wakeups.load(Ordering::Relaxed),
        workers_lent: c.workers_lent.load(Ordering::Relaxed),
        leader_poll_time: Duration::from_nanos(c.leader_poll_ns.load(Ordering::Relaxed)),
        surrenders: workers.iter().map(|w| w.surrenders).sum(),
        monitored_workers: workers.iter().filter(|w| w.monitored && !w.leader).count(),
        monitor: reg.monitor.stats(),
        handoffs: reg
            .slots
            .iter()
            .map(|s| s.handoffs.load(Ordering::Relaxed))
            .sum(),
        directed_handoff: reg.handoff.directed(),
        handoff_parks: reg.handoff.parks.load(Ordering::Relaxed),
        handoff_expired: reg.handoff.expired.load(Ordering::Relaxed),
        handoff_leader_resumes: reg.handoff.leader_resumes.load(Ordering::Relaxed),
        workers_created: c.workers_created.load(Ordering::Relaxed),
        leader_tasks: workers
            .iter()
            .filter(|w| w.leader)
            .map(|w| w.tasks_run)
            .sum(),
        tasks_cancelled: c.tasks_cancelled.load(Ordering::Relaxed),
        elapsed,
        cores,
        workers,
    }
}

/// CPU time and storage bytes (read and written) of every thread the runtime runs work on:
/// its workers and its features' per-core threads (E4). Lighter than [`snapshot`]: three
/// `/proc` files per thread and no monitor drain. `None` if a started thread's figures could
/// not be read (a transient `/proc` failure, or a thread gone at shutdown): a sum without it
/// would look like the totals went backwards. On a kernel without task I/O accounting (no
/// `/proc/self/io`) the bytes are 0, and the CPU time is still summed.
pub(crate) fn cpu_and_io(reg: &Registry) -> Option<(Duration, u64)> {
    let mut tids: Vec<i32> = reg
        .slots
        .iter()
        .filter(|s| s.started.load(Ordering::Acquire))
        .map(|s| s.tid.load(Ordering::Relaxed))
        .filter(|&tid| tid != 0)
        .collect();
    tids.extend((0..reg.cores()).flat_map(|core| reg.feature_threads(core)));
    let mut cpu = Duration::ZERO;
    let mut bytes = 0u64;
    let accounted = std::path::Path::new("/proc/self/io").exists();
    for tid in tids {
        cpu += umt_sys::cpu::thread_sched(tid).ok()?.cpu_time;
        if accounted {
            bytes = bytes.saturating_add(umt_sys::cpu::thread_io(tid).ok()?.total());
        }
    }
    Some((cpu, bytes))
}

// `Runtime::stats`.
impl crate::Runtime {
    /// A snapshot of the runtime's counters. It drains the monitor events no leader has
    /// drained yet, and reads three `/proc` files per worker (its per-core figures): tens of
    /// microseconds, for a monitoring loop rather than a hot path.
    pub fn stats(&self) -> Stats {
        crate::stats::snapshot(self.registry())
    }
}
