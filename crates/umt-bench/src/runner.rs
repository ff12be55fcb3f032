//! The runtimes a workload runs on, and one timed run of a workload on one of them.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use nix::sys::resource::{UsageWho, getrusage};
use umt_rt::{BackendKind, LeaderPolicy, Runtime};
use umt_sys::Monitor;

use crate::error::BenchError;

/// A runtime to compare. The same kernels and I/O code run on each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Runner {
    /// umt-rt with the monitor off: one worker per core, blocking I/O idles the core.
    Baseline,
    /// umt-rt with the perf backend (context-switch records, any Linux), with the library's
    /// default leaders for it (polling: [`LeaderPolicy::default_for`]).
    UmtPerf,
    /// umt-rt with the UMT kernel extension (the patched kernel of `kernel-patch/`).
    UmtKernel,
    /// umt-rt with the Bpf backend (stock kernel, CAP_BPF + CAP_PERFMON): ready counts kept
    /// by BPF programs in shared memory, a wake-up only when a core runs out of ready workers.
    UmtBpf,
    /// rayon, one thread per core.
    Rayon,
    /// rayon with twice as many threads as cores (the usual cure for blocking I/O).
    Rayon2x,
    /// rayon with four threads per core: plain oversubscription, the peer a user would try
    /// before a runtime that knows when a thread blocks.
    Rayon4x,
    /// rayon with eight threads per core.
    Rayon8x,
    /// tokio's multi-thread runtime for the computation, `spawn_blocking` for the I/O.
    Tokio,
    /// The baseline runtime for the computation, the I/O submitted through io_uring.
    IoUring,
    /// umt-rt with the perf backend, the I/O through its scheduler-centric wait
    /// ([`umt_rt::io`]): the waiting task's worker runs other tasks and reaps its core's
    /// io_uring between them, and blocks in it only when nothing else can run.
    UmtIo,
}

/// How the umt-rt runners with a monitor run, beyond their backend (the
/// [`umt_rt::Builder`] options a comparison may change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UmtOptions {
    /// The leader policy, instead of the library's default for the backend.
    pub leader: Option<LeaderPolicy>,
    /// [`umt_rt::Builder::handoff`].
    pub handoff: bool,
    /// [`umt_rt::Builder::lend_workers`] (on unless asked otherwise).
    pub lend_workers: bool,
    /// [`umt_rt::Builder::leader_runs_tasks`].
    pub leader_runs_tasks: bool,
    /// [`umt_rt::Builder::max_workers_per_core`], instead of the library's default.
    pub max_workers_per_core: Option<usize>,
    /// Heat's checkpoints written from staged copies ([`crate::heat::run_staged`]) instead of
    /// in place, on the umt-rt runners with a monitor.
    pub staged_checkpoints: bool,
    /// Every umt-rt runtime (also baseline's and io-uring's) records a trace
    /// ([`umt_rt::Builder::trace`]), which each [`Sample`] carries.
    pub trace: bool,
}

impl Default for UmtOptions {
    /// The library's defaults.
    fn default() -> Self {
        UmtOptions {
            leader: None,
            handoff: false,
            lend_workers: true,
            leader_runs_tasks: false,
            max_workers_per_core: None,
            staged_checkpoints: false,
            trace: false,
        }
    }
}

/// A built runtime of some kind, ready for one run.
#[derive(Debug)]
pub enum Engine {
    /// umt-rt (baseline, umt-perf, umt-kernel, umt-bpf).
    Umt(Runtime),
    /// A rayon pool.
    Rayon(rayon::ThreadPool),
    /// A tokio runtime.
    Tokio(tokio::runtime::Runtime),
    /// The baseline umt-rt runtime, for the io-uring runner.
    Uring(Runtime),
    /// A monitored umt-rt runtime whose workloads wait for I/O through [`umt_rt::io`].
    UmtIo(Runtime),
}

impl Runner {
    /// Every runner, in table order.
    pub const ALL: [Runner; 11] = [
        Runner::Baseline,
        Runner::UmtPerf,
        Runner::UmtKernel,
        Runner::UmtBpf,
        Runner::Rayon,
        Runner::Rayon2x,
        Runner::Rayon4x,
        Runner::Rayon8x,
        Runner::Tokio,
        Runner::IoUring,
        Runner::UmtIo,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Runner::Baseline => "baseline",
            Runner::UmtPerf => "umt-perf",
            Runner::UmtKernel => "umt-kernel",
            Runner::UmtBpf => "umt-bpf",
            Runner::Rayon => "rayon",
            Runner::Rayon2x => "rayon-2x",
            Runner::Rayon4x => "rayon-4x",
            Runner::Rayon8x => "rayon-8x",
            Runner::Tokio => "tokio",
            Runner::IoUring => "io-uring",
            Runner::UmtIo => "umt-io",
        }
    }

    fn backend(self) -> Option<BackendKind> {
        match self {
            Runner::Baseline => Some(BackendKind::Disabled),
            Runner::UmtPerf => Some(BackendKind::Perf),
            Runner::UmtKernel => Some(BackendKind::Kernel),
            Runner::UmtBpf => Some(BackendKind::Bpf),
            Runner::UmtIo => Some(BackendKind::Perf),
            _ => None,
        }
    }

    /// `Err(reason and fix)` when this machine cannot run it.
    pub fn available(self) -> Result<(), String> {
        match (self, self.backend()) {
            (Runner::UmtIo, Some(b)) => {
                Monitor::probe(b).map_err(|u| u.to_string())?;
                umt_sys::uring::Ring::new(2)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            (_, Some(b)) => Monitor::probe(b).map_err(|u| u.to_string()),
            (Runner::IoUring, _) => crate::port_uring::Uring::new()
                .map(|_| ())
                .map_err(|e| e.to_string()),
            _ => Ok(()),
        }
    }

    /// A fresh runtime for one run, with one worker per core of this process.
    pub fn engine(self) -> Result<Engine, BenchError> {
        self.engine_with(&UmtOptions::default())
    }

    /// [`Runner::engine`], with `umt`'s options for the umt-rt runners with a monitor.
    pub fn engine_with(self, umt: &UmtOptions) -> Result<Engine, BenchError> {
        let cores = cores();
        let umt = || {
            let mut b = Runtime::builder()
                .monitor(self.backend().unwrap_or(BackendKind::Disabled))
                .handoff(umt.handoff)
                .lend_workers(umt.lend_workers)
                .leader_runs_tasks(umt.leader_runs_tasks)
                .trace(umt.trace);
            if let Some(policy) = umt.leader {
                b = b.leader_policy(policy);
            }
            if let Some(n) = umt.max_workers_per_core {
                b = b.max_workers_per_core(n);
            }
            b.build()
                .map_err(|e| BenchError::Runtime(format!("{}: {e}", self.name())))
        };
        match self {
            Runner::Rayon => crate::port_rayon::pool(cores).map(Engine::Rayon),
            Runner::Rayon2x => crate::port_rayon::pool(2 * cores).map(Engine::Rayon),
            Runner::Rayon4x => crate::port_rayon::pool(4 * cores).map(Engine::Rayon),
            Runner::Rayon8x => crate::port_rayon::pool(8 * cores).map(Engine::Rayon),
            Runner::Tokio => crate::port_tokio::runtime(cores).map(Engine::Tokio),
            Runner::IoUring => umt().map(Engine::Uring),
            Runner::UmtIo => umt().map(Engine::UmtIo),
            Runner::Baseline | Runner::UmtPerf | Runner::UmtKernel | Runner::UmtBpf => {
                umt().map(Engine::Umt)
            }
        }
    }
}

/// CPUs of this process's affinity mask (at least 1).
fn cores() -> usize {
    umt_sys::cpu::process_cpus()
        .map(|c| c.len())
        .unwrap_or(1)
        .max(1)
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
    engine: &Engine,
    p: &crate::heat::HeatParams,
    umt: &UmtOptions,
) -> Result<crate::heat::HeatRun, BenchError> {
    match engine {
        Engine::Umt(rt) if umt.staged_checkpoints && rt.backend() != BackendKind::Disabled => {
            crate::heat::run_staged(rt, p)
        }
        Engine::Umt(rt) => crate::heat::run(rt, p),
        Engine::Rayon(pool) => crate::port_rayon::heat(pool, p),
        Engine::Tokio(rt) => crate::port_tokio::heat(rt, p),
        Engine::Uring(rt) => crate::port_uring::heat(rt, p),
        Engine::UmtIo(rt) => crate::heat::run_io(rt, p),
    }
}

/// The FWI mock-up on `engine` (the full workload of a runtime's run).
pub fn run_fwi(
    engine: &Engine,
    p: &crate::fwi::FwiParams,
) -> Result<crate::fwi::FwiRun, BenchError> {
    match engine {
        Engine::Umt(rt) => crate::fwi::run(rt, p, crate::fwi::Part::All),
        Engine::Rayon(pool) => crate::port_rayon::fwi(pool, p),
        Engine::Tokio(rt) => crate::port_tokio::fwi(rt, p),
        Engine::Uring(rt) => crate::port_uring::fwi(rt, p),
        Engine::UmtIo(rt) => crate::fwi::run_io(rt, p, crate::fwi::Part::All),
    }
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
    /// Time cores had more than one ready worker, over wall time times cores, in percent, as
    /// umt-rt's leaders saw it (an estimate: see `umt_rt::CoreStats::oversubscribed`).
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
    /// ([`umt_sys::MonitorStats::wakeups`]): every block and unblock without a counter
    /// page; with one (Bpf, Kernel ABI 2), the drops to zero that found the leader asleep.
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

/// Runs `work` on a fresh runtime of `runner` (with `umt`'s options, for the umt-rt runners
/// with a monitor) and measures it. `work` returns the wall time of the part to measure and
/// the bytes of I/O it did.
pub fn measure(
    runner: Runner,
    umt: &UmtOptions,
    work: impl FnOnce(&Engine) -> Result<(Duration, u64), BenchError>,
) -> Result<Sample, BenchError> {
    let engine = runner.engine_with(umt)?;
    let cores = cores() as f64;
    let stats = |e: &Engine| match e {
        Engine::Umt(rt) | Engine::Uring(rt) | Engine::UmtIo(rt) => Some(rt.stats()),
        _ => None,
    };
    let cpu_before = cpu_time();
    let before = stats(&engine);
    let queue_before = disk_time_in_queue_ms();
    let (elapsed, io_bytes) = work(&engine)?;
    let queue_after = disk_time_in_queue_ms();
    let after = stats(&engine);
    let trace = match &engine {
        Engine::Umt(rt) | Engine::Uring(rt) | Engine::UmtIo(rt) => {
            rt.take_trace().map(std::sync::Arc::new)
        }
        _ => None,
    };
    drop(engine);
    if let Some(st) = &after
        && runner.backend().is_some_and(|b| b != BackendKind::Disabled)
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
        let err = "rayon-3x".parse::<Runner>().unwrap_err();
        assert!(
            err.contains("baseline, umt-perf, umt-kernel, umt-bpf, rayon"),
            "{err}"
        );
    }

    #[test]
    fn baseline_is_always_available_and_measures() {
        assert!(Runner::Baseline.available().is_ok());
        let s = measure(Runner::Baseline, &UmtOptions::default(), |e| {
            let Engine::Umt(rt) = e else {
                panic!("baseline is umt-rt")
            };
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
}
