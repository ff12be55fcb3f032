//! What a runtime was built with: the leader policy and the validated options every thread
//! reads. Nothing here imports the rest of the crate, so any file may read the configuration.

use std::time::Duration;

use umt_sys::CpuId;

/// How the leader threads (one per core, pinned there) are scheduled. The default follows the
/// monitor's backend ([`LeaderPolicy::default_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderPolicy {
    /// `SCHED_IDLE`, waiting for the monitor's signal: a leader runs only when its core has
    /// nothing else to run,
    /// which is exactly when the core's workers have blocked, and its wake-ups never preempt a
    /// worker. Its cost on busy cores is nil. On a machine saturated by *other* processes it
    /// runs rarely, but then no core is idle to refill. Only the leader has this policy: spare
    /// workers are started by a helper thread with the builder's policy (an unprivileged
    /// thread could not leave `SCHED_IDLE` again), so they compete with other processes like
    /// the initial ones. The default with the Kernel backend.
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
    /// self-interrupt and a VM exit, paid by the monitored threads on every switch. The cost:
    /// a core whose active workers all block runs its leader's loop instead of halting (time
    /// no other thread of the machine wanted, but the core never sleeps). After 64 scan
    /// periods without an event the leader polls once per scan period instead, or, with no
    /// active worker on its core, sleeps until one becomes active.
    /// [`crate::Stats::leader_poll_time`] says how much CPU the polling took. Each scheduling
    /// point costs a look at the worker's own ring. The default with the Perf backend; the
    /// measured trade-offs are in the protocol notes (`src/README.md`, "Polling leaders").
    Poll,
}

impl LeaderPolicy {
    /// Every policy.
    pub const ALL: [LeaderPolicy; 3] =
        [LeaderPolicy::Idle, LeaderPolicy::Normal, LeaderPolicy::Poll];

    /// The policy a runtime uses unless told otherwise, for the monitor backend it runs on:
    /// [`LeaderPolicy::Poll`] with Perf, whose signal per event is a self-interrupt (a VM exit
    /// in a virtual machine) paid at every context switch of a worker; [`LeaderPolicy::Idle`]
    /// with Kernel, which raises no interrupt and, idle-only (its default), signals a leader
    /// only when its core runs out of ready workers while it sleeps (in events mode every
    /// block and unblock, and polling would cost a `read` per scheduling point);
    /// [`LeaderPolicy::Idle`] with Bpf, which signals like Kernel idle-only. Polling leaders there cut the signals further (to
    /// almost none) at the price of cores that spin instead of halting when idle: measured in
    /// `src/README.md`, "Which policy".
    pub const fn default_for(backend: umt_sys::BackendKind) -> LeaderPolicy {
        match backend {
            umt_sys::BackendKind::Perf => LeaderPolicy::Poll,
            _ => LeaderPolicy::Idle,
        }
    }

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

/// Names a worker thread from its CPU and its index among the core's workers.
/// The default of [`Builder::io_poll_interval`](crate::Builder::io_poll_interval).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_micros(20);

pub(crate) type NameFn = Box<dyn Fn(CpuId, usize) -> String + Send + Sync>;

/// Called on a worker thread as it starts or ends, with its index (`Builder::start_handler`,
/// `Builder::exit_handler`).
pub(crate) type ThreadFn = Box<dyn Fn(usize) + Send + Sync>;

/// Receives the panic of a detached task (`Builder::panic_handler`).
pub(crate) type PanicFn = Box<dyn Fn(Box<dyn std::any::Any + Send>) + Send + Sync>;

/// The options of a built runtime, validated by the builder and read by every thread.
pub(crate) struct Config {
    /// The CPU of each core, by core index.
    pub(crate) cpus: Vec<CpuId>,
    /// Most workers per core.
    pub(crate) cap: usize,
    /// Leader period.
    pub(crate) scan_period: Duration,
    /// Scheduling policy of the leader threads.
    pub(crate) leader_policy: LeaderPolicy,
    /// Names worker threads.
    pub(crate) thread_name: NameFn,
    /// Stack size of worker threads, bytes (`None`: the standard library's default).
    pub(crate) stack_size: Option<usize>,
    /// Called on each worker thread as it starts.
    pub(crate) start_handler: Option<ThreadFn>,
    /// Called on each worker thread as it ends.
    pub(crate) exit_handler: Option<ThreadFn>,
    /// Handoff (`Builder::handoff`): a worker hands its core to a worker of the core back
    /// from a block (by a yield at scheduling points, or directed: see `handoff_signal`).
    pub(crate) handoff: bool,
    /// The directed handoff's signal, when the monitor sends it and the runtime handles it
    /// (`handoff.rs`); `None`: the yields only.
    pub(crate) handoff_signal: Option<i32>,
    /// Idle workers wait in the process's I/O driver, one at a time (`Builder::drive_io`).
    pub(crate) drive_io: bool,
    /// What the leader policy and the monitor's backend imply, computed once.
    pub(crate) caps: Capabilities,
    /// A leader that finds its core starved runs tasks itself instead of waking a worker
    /// (`Builder::leader_runs_tasks`).
    pub(crate) leader_runs_tasks: bool,
    /// Receives the panics of detached tasks; `None`: they are said on stderr.
    pub(crate) panic_handler: Option<PanicFn>,
    /// Threads record [`crate::TraceRecord`]s (`Builder::trace`).
    pub(crate) trace: bool,
    /// Least time between two polls of a core's I/O waits (`Builder::io_poll_interval`).
    pub(crate) io_poll_interval: Duration,
}

/// What the leader policy and the monitor's backend imply for the leaders and the workers,
/// computed once by the builder (`Capabilities::of`) and read wherever a thread decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// Leaders poll instead of waiting on the monitor, workers drain their own events at
    /// scheduling points, and the monitor signals no event (`LeaderPolicy::Poll`).
    pub(crate) polling: bool,
    /// The monitor's counts follow each thread live (Bpf, Kernel idle-only): any core's count can
    /// be read without a drain, and a moved thread's count moves with it.
    pub(crate) live_counts: bool,
    /// Leaders lend runnable workers of oversubscribed cores to their own: asked for
    /// (`Builder::lend_workers`), live counts, and more than one core to lend between.
    pub(crate) lend: bool,
}

impl Capabilities {
    /// What `policy`, a backend whose counts are `live_counts` or not, and `cores` cores
    /// allow; `lend_asked` is `Builder::lend_workers`.
    pub(crate) fn of(
        policy: LeaderPolicy,
        live_counts: bool,
        lend_asked: bool,
        cores: usize,
    ) -> Capabilities {
        Capabilities {
            polling: policy == LeaderPolicy::Poll,
            live_counts,
            lend: lend_asked && live_counts && cores > 1,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("cpus", &self.cpus)
            .field("cap", &self.cap)
            .field("scan_period", &self.scan_period)
            .field("leader_policy", &self.leader_policy)
            .field("handoff", &self.handoff)
            .field("handoff_signal", &self.handoff_signal)
            .field("drive_io", &self.drive_io)
            .field("caps", &self.caps)
            .field("leader_runs_tasks", &self.leader_runs_tasks)
            .field("trace", &self.trace)
            .field("io_poll_interval", &self.io_poll_interval)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod capability_tests {
    use super::*;

    #[test]
    fn lending_needs_live_counts_and_two_cores_and_polling_is_the_policy() {
        for policy in [LeaderPolicy::Idle, LeaderPolicy::Normal, LeaderPolicy::Poll] {
            for live in [false, true] {
                for asked in [false, true] {
                    for cores in [1, 2, 16] {
                        let c = Capabilities::of(policy, live, asked, cores);
                        assert_eq!(c.polling, policy == LeaderPolicy::Poll);
                        assert_eq!(c.live_counts, live);
                        assert_eq!(c.lend, asked && live && cores > 1, "{c:?} {cores}");
                    }
                }
            }
        }
    }
}
