//! DYON (seed 002): the share of cores dedicated to onloaded work, chosen every period by a
//! [`Bandit`] from a system metric.
//!
//! D1. The arms are the partitions `0, 1/(n-1), ..., 1` of the runtime's cores (`n` steps; the
//!     default 5 gives 0 %, 25 %, 50 %, 75 %, 100 %). 0 % is plain onload: idle time only.
//! D2. Every `period`, the metric is read; its change over the period, for the partition that
//!     held during it, is that arm's reward; the bandit chooses the next partition, which
//!     [`Runtime::set_onload_partition`](crate::Runtime::set_onload_partition) applies.
//! D3. The metric is CPIO (cycles per I/O, lower is better: the CPU time spent per block of
//!     I/O; without I/O in a period, the inverse of the CPU time, as the paper extends it),
//!     of the runtime's own threads (the default: summed from its per-core counts, each core's
//!     workers and onload thread), of this process or of the whole system, or an
//!     application's own figure (higher is better). Once the workload does I/O, a period
//!     with CPU time and no I/O extends into the next under the same partition (up to 8),
//!     since the CPU-only form is on another scale; a period where nothing ran, or where a
//!     thread's figures could not be read, is not judged; each judged measurement is
//!     weighted by its blocks (`onload/README.md`, D3).
//! D4. The same controller can adapt the spare-worker limit instead
//!     ([`DyonBuilder::start_spare_limit`]): the arms are the limits 1 (no spare), 2, 4, 8,
//!     ... and the cap ([`spare_limit_arms`]): a handful even with a cap of 63, so the bandit's
//!     first pass over them stays short.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Bandit, Strategy};

/// What guides [`Dyon`] (step D3).
#[derive(Clone)]
pub enum Metric {
    /// CPIO of the runtime, from its own per-core counts ([`crate::CoreStats`]): the CPU
    /// time of every core's workers and onload thread, per 4 KiB block of storage I/O those
    /// threads caused (the compute and I/O progress of seed 002's formula, summed over the
    /// cores). Threads of the process outside the runtime (a producer, a logger) do not
    /// count; on a kernel without I/O accounting, the CPU-only form applies.
    RuntimeCpio,
    /// CPIO of this process: its CPU time (`CLOCK_PROCESS_CPUTIME_ID`) per 4 KiB block it read or
    /// wrote from storage (`/proc/self/io`; on a kernel without I/O accounting, none is seen
    /// and the CPU-only form applies).
    ProcessCpio,
    /// CPIO of the machine: CPU time of every CPU (`/proc/stat`) per 512-byte sector read or
    /// written on every disk (`/proc/diskstats`).
    SystemCpio,
    /// The application's figure, higher is better, read once per period (a rate it keeps:
    /// records per second, say).
    App(Arc<dyn Fn() -> f64 + Send + Sync>),
}

impl std::fmt::Debug for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Metric::RuntimeCpio => "RuntimeCpio",
            Metric::ProcessCpio => "ProcessCpio",
            Metric::SystemCpio => "SystemCpio",
            Metric::App(_) => "App",
        })
    }
}

/// Cumulative CPU seconds and I/O blocks, for CPIO over a period.
fn cpio_counters(system: bool) -> Option<(f64, f64)> {
    let tick = 100.0; // USER_HZ: /proc reports CPU time in clock ticks of 1/100 s
    if system {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: f64 = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .take(3) // user, nice, system
            .filter_map(|v| v.parse::<f64>().ok())
            .sum();
        let disks = std::fs::read_to_string("/proc/diskstats").ok()?;
        let sectors: f64 = disks
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                // Whole disks only (those in /sys/block): partitions would count twice.
                let name = f.get(2)?;
                if !std::path::Path::new(&format!("/sys/block/{name}")).exists() {
                    return None;
                }
                let r: f64 = f.get(5)?.parse().ok()?;
                let w: f64 = f.get(9)?.parse().ok()?;
                Some(r + w)
            })
            .sum();
        Some((cpu / tick, sectors))
    } else {
        let cpu = umt_sys::cpu::process_cpu_time().ok()?.as_secs_f64();
        // A kernel without CONFIG_TASK_IO_ACCOUNTING has no /proc/self/io: no I/O is seen,
        // and the metric is the CPU-only one (D3).
        let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        let bytes: f64 = io
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                matches!(k, "read_bytes" | "write_bytes").then(|| v.trim().parse::<f64>().ok())?
            })
            .sum();
        Some((cpu, bytes / 4096.0))
    }
}

/// Cumulative CPU seconds and 4 KiB I/O blocks of the runtime's threads, from its per-core
/// counts (`None` when a thread's figures could not be read: that period is not judged).
fn runtime_counters(reg: &crate::registry::Registry) -> Option<(f64, f64)> {
    let (cpu, bytes) = crate::stats::cpu_and_io(reg)?;
    Some((cpu.as_secs_f64(), bytes as f64 / 4096.0))
}

/// CPIO over a measurement (one period, or several under the same partition, see
/// [`run`]) from two counter readings, as a reward (higher is better) and its weight, or
/// `None` when it says nothing about the partition (step D3): without I/O once the workload
/// does I/O (`io_form`), since the CPU-only form is on another scale (seconds^-1 against
/// seconds per block); or when the threads used no CPU and did no I/O (nothing ran). The
/// weight is the measurement's blocks (its CPU time in the CPU-only form), so that an arm's
/// mean is its CPIO over all its periods together, the ratio of the sums, as a static run
/// of it would measure.
fn cpio_reward(before: (f64, f64), after: (f64, f64), io_form: bool) -> Option<(f64, f64)> {
    let cpu = (after.0 - before.0).max(0.0);
    let io = (after.1 - before.1).max(0.0);
    if io > 0.0 {
        Some((-(cpu / io), io))
    } else if io_form || cpu <= 0.0 {
        None
    } else {
        // A workload without I/O: (cpu)^-1, lower is better, so its negation.
        Some((-(1.0 / cpu), cpu))
    }
}

/// Periods a measurement with CPU time but no I/O extends under the same partition, once the
/// workload does I/O, before DYON takes it that the I/O has stopped (D3).
const EXTEND: u32 = 8;

/// What a period's CPIO reading means (D3).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Judged {
    /// CPU time without I/O in the I/O form: the measurement goes on into the next period,
    /// under the same partition.
    Extend,
    /// The measurement is over: its reward and weight, if it says anything; `forget` when
    /// the form changed (the means so far are on the other scale).
    Over {
        reward: Option<(f64, f64)>,
        forget: bool,
    },
}

/// DYON's state between CPIO readings: which form the rewards are in, and how many periods
/// the current measurement has run past its first.
#[derive(Debug, Default)]
struct CpioJudge {
    io_form: bool,
    extended: u32,
}

impl CpioJudge {
    /// The reading `after` against `before`, the start of the current measurement.
    fn judge(&mut self, before: (f64, f64), after: (f64, f64)) -> Judged {
        let io = after.1 > before.1;
        if self.io_form && !io && after.0 > before.0 && self.extended < EXTEND {
            self.extended += 1;
            return Judged::Extend;
        }
        // The first I/O, or none for a whole extension: a change of form.
        let forget = io != self.io_form && (io || self.extended >= EXTEND);
        if forget {
            self.io_form = io;
        }
        self.extended = 0;
        Judged::Over {
            reward: cpio_reward(before, after, self.io_form),
            forget,
        }
    }
}

/// Configures a [`Dyon`].
#[derive(Debug, Clone)]
pub struct DyonBuilder {
    steps: usize,
    period: Duration,
    metric: Metric,
    strategy: Strategy,
    seed: u64,
}

impl Default for DyonBuilder {
    fn default() -> Self {
        DyonBuilder {
            steps: 5,
            period: Duration::from_secs(1),
            metric: Metric::RuntimeCpio,
            strategy: Strategy::default(),
            seed: 0x5eed,
        }
    }
}

impl DyonBuilder {
    /// Partitions in `steps` steps from 0 % to 100 % (at least 2; default 5).
    pub fn steps(mut self, steps: usize) -> Self {
        self.steps = steps.max(2);
        self
    }

    /// How long each partition holds before it is judged (default 1 s; the paper warns that
    /// a period shorter than the workload's phases cannot learn them).
    pub fn period(mut self, period: Duration) -> Self {
        self.period = period.max(Duration::from_millis(1));
        self
    }

    /// The metric (default [`Metric::RuntimeCpio`]).
    pub fn metric(mut self, metric: Metric) -> Self {
        self.metric = metric;
        self
    }

    /// The bandit's strategy (default epsilon-greedy, epsilon 0.1).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// The seed of the bandit's random choices.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Starts adapting `rt`'s partition on a thread of its own, until the [`Dyon`] is
    /// dropped or stopped.
    pub fn start(self, rt: &crate::Runtime) -> Dyon {
        let reg = rt.registry().clone();
        super::OnloadPool::of(&reg);
        let (cores, steps) = (reg.cores(), self.steps);
        let partition = move |arm: usize| (arm * cores + (steps - 1) / 2) / (steps - 1);
        let apply = move |arm: Option<usize>| {
            if let Some(pool) = reg.extension::<super::OnloadPool>() {
                pool.set_dedicated(arm.map_or(0, partition));
            }
        };
        self.spawn(rt.registry().clone(), steps, apply)
    }

    /// Starts adapting `rt`'s spare-worker limit ([`crate::Runtime::set_spare_limit`]) the
    /// same way: the arms are the limits [`spare_limit_arms`] of the runtime's cap (1, 2, 4,
    /// ... and [`crate::Runtime::max_workers_per_core`]; the builder's `steps` does not
    /// apply), the metric judges each. Stopping it restores the limit to the cap.
    pub fn start_spare_limit(self, rt: &crate::Runtime) -> Dyon {
        let reg = rt.registry().clone();
        let metric_reg = reg.clone();
        let cap = reg.config.cap;
        let limits = spare_limit_arms(cap);
        let arms = limits.len();
        let apply = move |arm: Option<usize>| {
            reg.pools
                .set_limit(arm.and_then(|a| limits.get(a).copied()).unwrap_or(cap));
        };
        self.spawn(metric_reg, arms, apply)
    }

    /// The controller thread over `arms` arms of `reg`'s runtime, applying each choice with
    /// `apply` (`None`: the setting to restore when it stops).
    fn spawn(
        self,
        reg: Arc<crate::registry::Registry>,
        arms: usize,
        apply: impl Fn(Option<usize>) + Send + 'static,
    ) -> Dyon {
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(std::sync::Mutex::new(Bandit::new(
            arms,
            self.strategy,
            self.seed,
        )));
        let thread = {
            let (stop, state) = (stop.clone(), state.clone());
            std::thread::Builder::new()
                .name("umt-dyon".into())
                .spawn(move || run(&self, &reg, &stop, &state, &apply))
                .ok()
        };
        Dyon {
            stop,
            thread,
            bandit: state,
            made: crate::fork::ForkMark::here(),
        }
    }
}

/// The controller thread (step D2).
fn run(
    cfg: &DyonBuilder,
    reg: &crate::registry::Registry,
    stop: &AtomicBool,
    bandit: &std::sync::Mutex<Bandit>,
    apply: &dyn Fn(Option<usize>),
) {
    let read = || match &cfg.metric {
        Metric::RuntimeCpio => runtime_counters(reg),
        Metric::ProcessCpio => cpio_counters(false),
        Metric::SystemCpio => cpio_counters(true),
        // The application's code, on this thread: a panic in it loses that reading (the
        // round gives no reward), not the controller, which would leave the partition or
        // the limit where it was and never restore it.
        Metric::App(f) => {
            let mut value = None;
            if !crate::diag::run_quietly(|| value = Some(f())) {
                reg.warnings.warn(crate::diag::Warning::Metric, || {
                    "the DYON metric function panicked; that reading is skipped".to_owned()
                });
            }
            value.map(|v| (v, 0.0))
        }
    };
    let mut arm = super::lock(bandit).choose();
    apply(Some(arm));
    let mut before = read();
    let mut judge = CpioJudge::default();
    while !stop.load(Ordering::Acquire) {
        std::thread::park_timeout(cfg.period);
        if stop.load(Ordering::Acquire) {
            break;
        }
        let after = read();
        let reward = match (&cfg.metric, before, after) {
            (Metric::App(_), _, Some((v, _))) => Some((v, 1.0)),
            (Metric::App(_), _, None) => None,
            (_, Some(b), Some(a)) => match judge.judge(b, a) {
                // The partition holds and the measurement goes on, so that its CPU time is
                // not lost to it.
                Judged::Extend => continue,
                Judged::Over { reward, forget } => {
                    if forget {
                        super::lock(bandit).forget();
                    }
                    reward
                }
            },
            _ => None,
        };
        let mut b = super::lock(bandit);
        if let Some((r, weight)) = reward {
            b.update_weighted(arm, r, weight);
        }
        arm = b.choose();
        drop(b);
        apply(Some(arm));
        before = after;
    }
    apply(None);
}

/// A running DYON controller ([`DyonBuilder::start`]); dropping it stops it and returns the
/// runtime to plain onload (idle time only).
#[derive(Debug)]
pub struct Dyon {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    bandit: Arc<std::sync::Mutex<Bandit>>,
    /// The process that started the controller: a child of `fork` does not have its thread.
    made: crate::fork::ForkMark,
}

impl Dyon {
    /// A builder with the defaults (5 steps, 1 s, the runtime's CPIO, epsilon-greedy 0.1).
    pub fn builder() -> DyonBuilder {
        DyonBuilder::default()
    }

    /// The bandit's state so far: pulls and mean reward of each partition.
    pub fn bandit(&self) -> Bandit {
        super::lock(&self.bandit).clone()
    }

    /// Stops the controller (also on drop).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            if self.made.is_copy() {
                // F2 of `../README.md`: not in this process; joining it would panic.
                std::mem::forget(t);
                return;
            }
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Dyon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The spare limits [`DyonBuilder::start_spare_limit`] chooses among for a cap of `cap`
/// workers per core: 1 (no spare), then the powers of two below `cap`, then `cap`.
pub fn spare_limit_arms(cap: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |k| k.checked_mul(2))
        .take_while(|&k| k < cap)
        .collect();
    v.push(cap.max(1));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpio_rewards_less_cpu_per_io() {
        let cheap = cpio_reward((0.0, 0.0), (1.0, 1000.0), false).unwrap();
        let dear = cpio_reward((0.0, 0.0), (2.0, 1000.0), true).unwrap();
        assert!(cheap.0 > dear.0);
        assert_eq!(cheap.1, 1000.0, "weighted by its blocks");
        // Without I/O ever, more CPU time is better.
        let r = |cpu| cpio_reward((0.0, 0.0), (cpu, 0.0), false).unwrap().0;
        assert!(r(2.0) > r(1.0));
        // In the I/O form, a measurement without I/O is not judged; nor one where nothing ran.
        assert_eq!(cpio_reward((0.0, 0.0), (1.0, 0.0), true), None);
        assert_eq!(cpio_reward((1.0, 5.0), (1.0, 5.0), false), None);
        // Counters that went backwards (a thread gone) count as no progress.
        assert_eq!(cpio_reward((2.0, 5.0), (1.0, 5.0), false), None);
        assert!(cpio_counters(false).is_some());
    }

    /// D3's judge: CPU-only rewards until the first I/O, which starts the means over; then a
    /// period without I/O extends the measurement (its CPU time is kept) up to `EXTEND`
    /// periods, after which the form goes back to CPU-only, starting over again.
    #[test]
    fn the_judge_keeps_cpu_time_of_periods_without_io() {
        let mut j = CpioJudge::default();
        let over = |r: Option<(f64, f64)>, forget| Judged::Over { reward: r, forget };
        // CPU only: the CPU-only form, weighted by CPU time.
        assert_eq!(
            j.judge((0.0, 0.0), (2.0, 0.0)),
            over(Some((-0.5, 2.0)), false)
        );
        // The first I/O: the I/O form, and the means start over.
        assert_eq!(
            j.judge((2.0, 0.0), (3.0, 10.0)),
            over(Some((-0.1, 10.0)), true)
        );
        // No I/O: the measurement from (3, 10) goes on; its CPU counts when I/O comes.
        assert_eq!(j.judge((3.0, 10.0), (4.0, 10.0)), Judged::Extend);
        assert_eq!(
            j.judge((3.0, 10.0), (5.0, 20.0)),
            over(Some((-0.2, 10.0)), false)
        );
        // Nothing ran: not judged, no extension.
        assert_eq!(j.judge((5.0, 20.0), (5.0, 20.0)), over(None, false));
        // I/O stops for good: EXTEND extensions, then the CPU-only form again.
        for k in 1..=EXTEND {
            assert_eq!(j.judge((5.0, 20.0), (5.0 + k as f64, 20.0)), Judged::Extend);
        }
        let end = 6.0 + EXTEND as f64;
        assert_eq!(
            j.judge((5.0, 20.0), (end, 20.0)),
            over(Some((-1.0 / (end - 5.0), end - 5.0)), true)
        );
        assert!(!j.io_form);
    }

    /// The runtime's CPIO counters grow by the CPU time its workers spend.
    #[test]
    fn runtime_counters_follow_the_workers_cpu_time() {
        let me = umt_sys::cpu::current_tid();
        if umt_sys::cpu::thread_sched(me).is_ok_and(|s| s.runqueue_wait.is_none()) {
            eprintln!("skipped: CPU time in whole ticks here (no schedstat), too coarse");
            return;
        }
        let rt = crate::Runtime::builder()
            .num_threads(1)
            .monitor(umt_sys::BackendKind::Disabled)
            .build()
            .unwrap();
        let before = runtime_counters(rt.registry()).unwrap();
        let spent = rt.install(|| {
            let start = umt_sys::cpu::current_thread_cpu_time().unwrap();
            let mut x = 1u64;
            loop {
                let t = umt_sys::cpu::current_thread_cpu_time().unwrap() - start;
                if t >= std::time::Duration::from_millis(5) {
                    return t;
                }
                x = std::hint::black_box(x.wrapping_mul(3).wrapping_add(1));
            }
        });
        // The kernel folds a running thread's time in at its next tick or switch: the worker
        // may still run (looking for work) right after the task, so wait for the figure.
        let guard = std::time::Instant::now();
        loop {
            let after = runtime_counters(rt.registry()).unwrap();
            assert!(after.1 >= before.1);
            if after.0 - before.0 >= spent.as_secs_f64() * 0.999 {
                break;
            }
            assert!(
                guard.elapsed() < std::time::Duration::from_secs(60),
                "{before:?} {after:?} {spent:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn spare_limit_arms_double_up_to_the_cap() {
        assert_eq!(spare_limit_arms(1), [1]);
        assert_eq!(spare_limit_arms(3), [1, 2, 3]);
        assert_eq!(spare_limit_arms(16), [1, 2, 4, 8, 16]);
        assert_eq!(spare_limit_arms(63), [1, 2, 4, 8, 16, 32, 63]);
        assert_eq!(spare_limit_arms(0), [1]);
    }
}
