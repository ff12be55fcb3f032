//! The runtimes a workload runs on (the runners' table, [`Runner::ALL`]), and one timed run
//! of a workload on one of them.
//!
//! A runner is a row of the table: a name and the [`Port`] that builds its runtime and runs
//! each workload on it. A new runtime is its port's file and one row.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::time::Duration;

use nix::sys::resource::{UsageWho, getrusage};
use umt_rt::BackendKind;

use crate::error::BenchError;
use crate::port::{Engine, Port, cores};
use crate::port_rayon::RayonPort;
use crate::port_tokio::TokioPort;
use crate::port_umt::{UmtIoPort, UmtPort};
use crate::port_uring::UringPort;

pub use crate::port::UmtOptions;

/// A runtime to compare: a row of [`Runner::ALL`]. The same kernels and I/O code run on each.
/// Two runners are equal when their names are.
#[derive(Clone, Copy)]
pub struct Runner(&'static dyn Port);

/// The runners' table, in table order: one row per runtime.
const TABLE: &[Runner] = &[
    Runner::BASELINE,
    // umt-rt with the perf backend (context-switch records, any Linux), with the library's
    // default leaders for it (polling: `LeaderPolicy::default_for`).
    Runner(&UmtPort {
        name: "umt-perf",
        backend: BackendKind::Perf,
    }),
    // umt-rt with the UMT kernel extension (the patched kernel of `kernel-patch/`).
    Runner(&UmtPort {
        name: "umt-kernel",
        backend: BackendKind::Kernel,
    }),
    // umt-rt with the Bpf backend (stock kernel, CAP_BPF + CAP_PERFMON): ready counts kept by
    // BPF programs in shared memory, a wake-up only when a core runs out of ready workers.
    Runner(&UmtPort {
        name: "umt-bpf",
        backend: BackendKind::Bpf,
    }),
    // rayon, one thread per core.
    Runner(&RayonPort {
        name: "rayon",
        per_core: 1,
    }),
    // rayon with twice as many threads as cores (the usual cure for blocking I/O).
    Runner(&RayonPort {
        name: "rayon-2x",
        per_core: 2,
    }),
    // rayon with four threads per core: plain oversubscription, the peer a user would try
    // before a runtime that knows when a thread blocks.
    Runner(&RayonPort {
        name: "rayon-4x",
        per_core: 4,
    }),
    // rayon with eight threads per core.
    Runner(&RayonPort {
        name: "rayon-8x",
        per_core: 8,
    }),
    // tokio's multi-thread runtime for the computation, `spawn_blocking` for the I/O.
    Runner(&TokioPort { name: "tokio" }),
    // The baseline runtime for the computation, the I/O submitted through io_uring.
    Runner(&UringPort { name: "io-uring" }),
    // umt-rt with the perf backend, the I/O through its scheduler-centric wait (`umt_rt::io`).
    Runner(&UmtIoPort { name: "umt-io" }),
];

impl Runner {
    /// Every runner, in table order (the table as an array: its length follows the table's).
    pub const ALL: [Runner; TABLE.len()] = {
        let mut all = [Runner::BASELINE; TABLE.len()];
        let mut i = 0;
        while i < TABLE.len() {
            all[i] = TABLE[i];
            i += 1;
        }
        all
    };

    /// umt-rt with the monitor off: one worker per core, blocking I/O idles the core. The
    /// reference of speedups, and the runtime of calibration and of the compute-only run.
    pub const BASELINE: Runner = Runner(&UmtPort {
        name: "baseline",
        backend: BackendKind::Disabled,
    });

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// What builds its runtime and runs each workload on it.
    pub fn port(self) -> &'static dyn Port {
        self.0
    }

    /// How its tasks wait for messages across MPI ranks under `umt`'s options, or `None`
    /// where it cannot run there (tokio): its port's [`Port::comm`]. umt-io's receives wait
    /// through `umt_rt::io`; those of the umt-rt runners with a monitor test and sleep, unless
    /// `busy_mpi_recv` (`--busy-mpi-recv`) gives them `MPI_Recv`; the others block in MPI
    /// (baseline's and the io-uring port's tasks, rayon's loops, as a rayon program would).
    pub fn comm(self, umt: &UmtOptions) -> Option<crate::port::Comm> {
        use crate::port::Comm;
        match self.port().comm()? {
            Comm::Sleeping if umt.busy_mpi_recv => Some(Comm::Blocking),
            c => Some(c),
        }
    }

    /// `Err(reason and fix)` when this machine cannot run it.
    pub fn available(self) -> Result<(), String> {
        self.0.available()
    }

    /// A fresh runtime for one run, with one worker per core of this process.
    pub fn engine(self) -> Result<Box<dyn Engine>, BenchError> {
        self.engine_with(&UmtOptions::default())
    }

    /// [`Runner::engine`], with `umt`'s options for the umt-rt runners.
    pub fn engine_with(self, umt: &UmtOptions) -> Result<Box<dyn Engine>, BenchError> {
        self.0.engine(umt)
    }
}

impl PartialEq for Runner {
    fn eq(&self, other: &Runner) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Runner {}

impl Hash for Runner {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl fmt::Debug for Runner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Runner").field(&self.name()).finish()
    }
}

impl fmt::Display for Runner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Runner {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Runner::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Runner::ALL.iter().map(|r| r.name()).collect();
                format!("unknown runtime {s:?} (one of {})", names.join(", "))
            })
    }
}

/// Heat diffusion with checkpoints on `engine` (the full workload of a runtime's run).
///
/// With `umt.staged_checkpoints`, the umt-rt runners with a monitor write staged copies.
pub fn run_heat(
    engine: &dyn Engine,
    p: &crate::heat::HeatParams,
    umt: &UmtOptions,
) -> Result<crate::heat::HeatRun, BenchError> {
    engine.heat(p, umt)
}

/// The FWI mock-up on `engine` (the full workload of a runtime's run).
pub fn run_fwi(
    engine: &dyn Engine,
    p: &crate::fwi::FwiParams,
) -> Result<crate::fwi::FwiRun, BenchError> {
    engine.fwi(p)
}

/// What one timed run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Wall time.
    pub seconds: f64,
    /// Process CPU time (user + system) over wall time times cores, in 0..=1 (more when
    /// threads outside the cores ran). Polling leaders' idle polling is left out: it only
    /// fills time the cores would have idled ([`umt_rt::Stats::leader_poll_time`]).
    pub cpu_utilisation: f64,
    /// Bytes written or read by the workload's I/O.
    pub io_bytes: u64,
    /// Time cores had more than one ready worker, over wall time times cores, in percent.
    /// With the Bpf monitor its programs keep it; with the others it is what umt-rt's
    /// leaders saw, an estimate (see `umt_rt::CoreStats::oversubscribed`).
    pub oversubscription_percent: f64,
    /// The disks' average queue depth during the run: the growth of their `time_in_queue`
    /// (`/sys/block/*/stat`, milliseconds weighted by requests in flight) over the wall time
    /// (`None` where the file cannot be read). Covers the whole call of the workload, setup
    /// included, and every process's I/O.
    pub disk_queue_depth: Option<f64>,
    /// What umt-rt's monitor and leaders did, for the umt-rt runners with a monitor.
    pub activity: Option<Activity>,
    /// Per core, what its workers did during the run (umt-rt runners only; empty otherwise).
    pub cores: Vec<CoreSample>,
    /// The run's trace, with [`UmtOptions::trace`] on a umt-rt runner.
    pub trace: Option<std::sync::Arc<umt_rt::Trace>>,
}

/// One core during one run, from umt-rt's per-core statistics (the kernel's figures of its
/// workers) and, when traced, the trace's exact accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct CoreSample {
    /// The CPU.
    pub cpu: usize,
    /// CPU time of its workers, in seconds.
    pub cpu_seconds: f64,
    /// Time its workers waited on the run queue, in seconds (`None` without schedstat).
    pub runqueue_wait_seconds: Option<f64>,
    /// Context switches of its workers by blocking.
    pub voluntary_switches: u64,
    /// Context switches of its workers by preemption.
    pub involuntary_switches: u64,
    /// Tasks its workers ran.
    pub tasks: u64,
    /// The trace's time in each state, in seconds: application, blocked, oversubscribed,
    /// idle (`None` when not traced).
    pub states: Option<[f64; 4]>,
}

impl CoreSample {
    /// The per-core figures between two snapshots, with the trace's accounting if any.
    fn between(
        before: &umt_rt::CoreStats,
        after: &umt_rt::CoreStats,
        account: Option<&umt_rt::CoreAccount>,
    ) -> CoreSample {
        let secs = |a: Duration, b: Duration| a.saturating_sub(b).as_secs_f64();
        CoreSample {
            cpu: after.cpu,
            cpu_seconds: secs(after.cpu_time, before.cpu_time),
            runqueue_wait_seconds: after
                .runqueue_wait
                .zip(before.runqueue_wait)
                .map(|(a, b)| secs(a, b)),
            voluntary_switches: after
                .voluntary_switches
                .saturating_sub(before.voluntary_switches),
            involuntary_switches: after
                .involuntary_switches
                .saturating_sub(before.involuntary_switches),
            tasks: after.tasks_run.saturating_sub(before.tasks_run),
            states: account.map(|a| umt_rt::CoreState::ALL.map(|s| a.time(s).as_secs_f64())),
        }
    }
}

/// What umt-rt did during a run, per second and per core: the per-event work that grows with
/// how often workers block.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Activity {
    /// Reads of the monitor that found events (a read takes every event that arrived since
    /// the last one).
    pub monitor_events: f64,
    /// Notifications the monitor's backend sent to the runtime
    /// ([`umt_sys::MonitorStats::wakeups`]): every block and unblock with events (Perf,
    /// Kernel in events mode); with live counts (Bpf, Kernel idle-only), the drops to zero that
    /// found the leader asleep.
    pub signals: f64,
    /// Times a core's ready count dropped to zero ([`umt_sys::MonitorStats::drops`]; 0 where
    /// the backend does not count them).
    pub drops: f64,
    /// Iterations of the leaders.
    pub leader_iterations: f64,
    /// Parked workers the leaders woke for a core with no ready worker.
    pub leader_wakeups: f64,
    /// Spare workers started.
    pub spares_started: f64,
    /// Workers that surrendered an oversubscribed core.
    pub surrenders: f64,
    /// Handoff yields ([`umt_rt::Builder::handoff`]).
    pub handoffs: f64,
    /// Workers lent to a starved core ([`umt_rt::Builder::lend_workers`]).
    pub workers_lent: f64,
    /// Tasks the leaders ran themselves ([`umt_rt::Builder::leader_runs_tasks`]).
    pub leader_tasks: f64,
}

impl Activity {
    /// What happened between two snapshots, per second of `seconds` and per core of `cores`.
    pub fn between(
        before: &umt_rt::Stats,
        after: &umt_rt::Stats,
        seconds: f64,
        cores: f64,
    ) -> Self {
        let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / (seconds * cores);
        Activity {
            monitor_events: rate(after.monitor_events, before.monitor_events),
            signals: rate(after.monitor.wakeups, before.monitor.wakeups),
            drops: rate(after.monitor.drops, before.monitor.drops),
            leader_iterations: rate(after.leader_iterations, before.leader_iterations),
            leader_wakeups: rate(after.leader_wakeups, before.leader_wakeups),
            spares_started: rate(after.workers_created, before.workers_created),
            surrenders: rate(after.surrenders, before.surrenders),
            handoffs: rate(after.handoffs, before.handoffs),
            workers_lent: rate(after.workers_lent, before.workers_lent),
            leader_tasks: rate(after.leader_tasks, before.leader_tasks),
        }
    }
}

/// The sum of every disk's `time_in_queue` (the 11th field of `/sys/block/DEV/stat`:
/// milliseconds spent with requests in flight, weighted by their number), loop, RAM and zram
/// devices left out; `None` if none can be read.
fn disk_time_in_queue_ms() -> Option<u64> {
    let mut total = None;
    for entry in std::fs::read_dir("/sys/block").ok()?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if ["loop", "ram", "zram"].iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some(ms) = stat
            .split_whitespace()
            .nth(10)
            .and_then(|f| f.parse::<u64>().ok())
        {
            total = Some(total.unwrap_or(0) + ms);
        }
    }
    total
}

/// CPU time of the whole process so far.
fn cpu_time() -> Duration {
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let tv = |t: nix::sys::time::TimeVal| {
                Duration::new(t.tv_sec().max(0) as u64, (t.tv_usec().max(0) as u32) * 1000)
            };
            tv(u.user_time()) + tv(u.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// Runs `work` on a fresh runtime of `runner` (with `umt`'s options, for the umt-rt runners) and measures it. `work` returns the wall time of the part to measure and
/// the bytes of I/O it did.
pub fn measure(
    runner: Runner,
    umt: &UmtOptions,
    work: impl FnOnce(&dyn Engine) -> Result<(Duration, u64), BenchError>,
) -> Result<Sample, BenchError> {
    let engine = runner.engine_with(umt)?;
    let cores = cores() as f64;
    let stats = |e: &dyn Engine| e.runtime().map(|rt| rt.stats());
    let cpu_before = cpu_time();
    let before = stats(&*engine);
    let queue_before = disk_time_in_queue_ms();
    let (elapsed, io_bytes) = work(&*engine)?;
    let queue_after = disk_time_in_queue_ms();
    let after = stats(&*engine);
    let trace = engine
        .runtime()
        .and_then(|rt| rt.take_trace())
        .map(std::sync::Arc::new);
    drop(engine);
    if let Some(st) = &after
        && runner.port().monitor().is_some()
    {
        let workers = st.workers.iter().filter(|w| !w.leader).count();
        if st.monitored_workers < workers {
            return Err(BenchError::Runtime(format!(
                "{runner}: only {} of its {workers} workers could be monitored (see the \
                 warning above: out of file descriptors? raise the limit with `ulimit -n`), \
                 so its row would not show what umt does",
                st.monitored_workers
            )));
        }
    }
    let seconds = elapsed.as_secs_f64().max(1e-9);
    let (polled, oversubscribed, activity) = match (&before, &after) {
        (Some(b), Some(a)) => (
            a.leader_poll_time.saturating_sub(b.leader_poll_time),
            a.cores
                .iter()
                .map(|c| c.oversubscribed)
                .sum::<Duration>()
                .saturating_sub(b.cores.iter().map(|c| c.oversubscribed).sum()),
            (a.backend != BackendKind::Disabled).then(|| Activity::between(b, a, seconds, cores)),
        ),
        _ => (Duration::ZERO, Duration::ZERO, None),
    };
    let accounts = trace.as_ref().map(|t| t.accounting());
    let per_core = match (&before, &after) {
        (Some(b), Some(a)) => b
            .cores
            .iter()
            .zip(&a.cores)
            .enumerate()
            .map(|(i, (b, a))| {
                CoreSample::between(b, a, accounts.as_ref().and_then(|acc| acc.get(i)))
            })
            .collect(),
        _ => Vec::new(),
    };
    let cpu = cpu_time().saturating_sub(cpu_before).saturating_sub(polled);
    Ok(Sample {
        seconds,
        cpu_utilisation: cpu.as_secs_f64() / (seconds * cores),
        io_bytes,
        oversubscription_percent: 100.0 * oversubscribed.as_secs_f64() / (seconds * cores),
        disk_queue_depth: queue_before
            .zip(queue_after)
            .map(|(b, a)| a.saturating_sub(b) as f64 / (seconds * 1e3)),
        activity,
        cores: per_core,
        trace,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for r in Runner::ALL {
            assert_eq!(r.name().parse::<Runner>(), Ok(r));
        }
        let mut names: Vec<&str> = Runner::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Runner::ALL.len(), "one row per name");
        let err = "rayon-3x".parse::<Runner>().unwrap_err();
        assert!(
            err.contains("baseline, umt-perf, umt-kernel, umt-bpf, rayon"),
            "{err}"
        );
    }

    /// Across MPI ranks, a runner with a monitor sleeps between tests of its receives (a
    /// block its monitor sees), unless `--busy-mpi-recv`; the unmonitored baseline and the
    /// peers block in MPI_Recv; umt-io waits through umt_rt::io; tokio cannot run there.
    #[test]
    fn monitored_runners_sleep_between_tests_of_their_receives() {
        use crate::port::Comm;
        let busy = UmtOptions {
            busy_mpi_recv: true,
            ..UmtOptions::default()
        };
        for r in Runner::ALL {
            let (by_default, with_busy) = match r.name() {
                "umt-perf" | "umt-bpf" | "umt-kernel" => (Comm::Sleeping, Comm::Blocking),
                "umt-io" => (Comm::Waiting, Comm::Waiting),
                "tokio" => {
                    assert_eq!(r.port().comm(), None, "tokio");
                    continue;
                }
                _ => (Comm::Blocking, Comm::Blocking),
            };
            let name = r.name();
            let default = r.comm(&UmtOptions::default());
            assert_eq!(default, Some(by_default), "{name}");
            assert_eq!(r.comm(&busy), Some(with_busy), "{name}");
        }
    }

    #[test]
    fn baseline_is_always_available_and_measures() {
        assert!(Runner::BASELINE.available().is_ok());
        let s = measure(Runner::BASELINE, &UmtOptions::default(), |e| {
            let rt = e.runtime().expect("baseline is umt-rt");
            let start = std::time::Instant::now();
            rt.parallel_for(0..1000, |i| {
                std::hint::black_box(i * 2);
            });
            Ok((start.elapsed(), 42))
        })
        .unwrap();
        assert_eq!(s.io_bytes, 42);
        assert!(s.seconds > 0.0 && s.cpu_utilisation >= 0.0);
        assert_eq!(s.oversubscription_percent, 0.0);
        assert_eq!(s.activity, None, "no monitor, no activity");
    }

    /// A boxed engine, as [`Runner::engine`] returns it, is an engine with every method of
    /// the one in the box, the provided ones included.
    #[test]
    fn a_boxed_engine_is_its_engine() {
        let engine = Runner::BASELINE.engine().unwrap();
        let boxed: &dyn Engine = &engine;
        assert!(boxed.runtime().is_some());
        assert!(matches!(
            boxed.rank(),
            Some(crate::port::RankEngine::Tasks(_))
        ));
    }
}
