//! Turning samples into the comparison table and its JSON form.

use std::fmt::Write as _;

use serde::Serialize;

use crate::runner::{Activity, CoreSample, Sample};

/// The comparison of one workload on several runtimes (the `--json` document).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `heat` or `fwi`.
    pub workload: String,
    /// The workload's parameters.
    pub params: serde_json::Value,
    /// Unit of the figure of merit.
    pub fom_unit: String,
    /// Wall time of the computation alone: the fastest of its runs.
    pub compute_seconds: f64,
    /// Wall time of the I/O alone: the fastest of its runs.
    pub io_seconds: f64,
    /// Every run of the computation alone (one per round, alternating with the runners).
    pub compute_runs_seconds: Vec<f64>,
    /// Every run of the I/O alone (one per round, alternating with the runners).
    pub io_runs_seconds: Vec<f64>,
    /// The overlap bound: the larger of the two (perfect overlap can do no better).
    pub bound_seconds: f64,
    /// The tight bound: the overlap bound plus what no runner can overlap (see
    /// [`crate::bound`]).
    pub tight_bound_seconds: f64,
    /// One entry per runtime, in the order they ran.
    pub runs: Vec<RunReport>,
}

/// One runtime's line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Runner name.
    pub runtime: String,
    /// Median wall time.
    pub median_seconds: f64,
    /// Every repeat's wall time.
    pub seconds: Vec<f64>,
    /// Figure of merit at the median time.
    pub fom: f64,
    /// `baseline` median over this median (`null` without a baseline run).
    pub speedup_vs_baseline: Option<f64>,
    /// Bound over this median, in percent (100 = perfect overlap).
    pub percent_of_bound: f64,
    /// Tight bound over this median, in percent.
    pub percent_of_tight_bound: f64,
    /// Median CPU utilisation, 0..=1.
    pub cpu_utilisation: f64,
    /// I/O throughput at the median time.
    pub io_mib_per_s: f64,
    /// Median share of core time with more than one ready worker, in percent.
    pub oversubscription_percent: f64,
    /// Median of the disks' average queue depth during the runs (see
    /// [`Sample::disk_queue_depth`]).
    pub disk_queue_depth: Option<f64>,
    /// Share of core time in [`umt_rt::CoreState::Blocked`] (a task in progress, its worker
    /// blocked, no other worker ready), exact from the trace of the median run, in percent
    /// (`None` when not traced).
    pub blocked_percent: Option<f64>,
    /// What umt-rt did, per second per core, field by field the median of the repeats (umt-rt
    /// runners with a monitor only).
    pub activity: Option<Activity>,
    /// Per core, the run with the median time (umt-rt runners only).
    pub cores: Vec<CoreSample>,
    /// How unevenly the cores fared in that run: coefficients of variation across cores.
    pub cores_cov: Option<CoresCov>,
    /// The last repeat's trace, when traced (not in the JSON: `--timeline` writes it).
    #[serde(skip)]
    pub trace: Option<std::sync::Arc<umt_rt::Trace>>,
}

/// Coefficients of variation across cores (standard deviation over mean), of one run's
/// per-core figures, as in the OS-versus-runtime study (seed 003).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CoresCov {
    /// Of the workers' CPU time.
    pub cpu_time: f64,
    /// Of the time no worker ran (wall time less CPU time).
    pub idle: f64,
    /// Of the context switches (voluntary and involuntary).
    pub context_switches: f64,
    /// Of the tasks run.
    pub tasks: f64,
    /// Of the time blocked while work waited (traced runs only).
    pub blocked: Option<f64>,
}

impl CoresCov {
    fn of(cores: &[CoreSample], seconds: f64) -> Option<CoresCov> {
        if cores.is_empty() {
            return None;
        }
        let cov = |f: &dyn Fn(&CoreSample) -> f64| {
            umt_rt::advanced::coefficient_of_variation(&cores.iter().map(f).collect::<Vec<_>>())
        };
        Some(CoresCov {
            cpu_time: cov(&|c| c.cpu_seconds),
            idle: cov(&|c| (seconds - c.cpu_seconds).max(0.0)),
            context_switches: cov(&|c| (c.voluntary_switches + c.involuntary_switches) as f64),
            tasks: cov(&|c| c.tasks as f64),
            blocked: cores
                .iter()
                .all(|c| c.states.is_some())
                .then(|| cov(&|c| c.states.map_or(0.0, |s| s[1]))),
        })
    }
}

/// Median of `v` (the upper middle for an even count); NaN when empty.
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

impl RunReport {
    /// Summarises the samples of one runtime. `work` is the amount of work of one run in the
    /// figure of merit's unit times seconds (cells updated, for example); `bounds` are the
    /// overlap and the tight bound, in seconds.
    pub fn new(runtime: &str, samples: &[Sample], work: f64, bounds: (f64, f64)) -> RunReport {
        let (bound_seconds, tight_seconds) = bounds;
        let seconds: Vec<f64> = samples.iter().map(|s| s.seconds).collect();
        let med = median(&seconds);
        let io_bytes = samples.first().map_or(0, |s| s.io_bytes) as f64;
        let median_sample = median_of(samples);
        RunReport {
            runtime: runtime.to_string(),
            median_seconds: med,
            seconds,
            fom: work / med,
            speedup_vs_baseline: None,
            percent_of_bound: 100.0 * bound_seconds / med,
            percent_of_tight_bound: 100.0 * tight_seconds / med,
            cpu_utilisation: median(
                &samples
                    .iter()
                    .map(|s| s.cpu_utilisation)
                    .collect::<Vec<_>>(),
            ),
            io_mib_per_s: io_bytes / (1024.0 * 1024.0) / med,
            oversubscription_percent: median(
                &samples
                    .iter()
                    .map(|s| s.oversubscription_percent)
                    .collect::<Vec<_>>(),
            ),
            disk_queue_depth: {
                let depths: Vec<f64> = samples.iter().filter_map(|s| s.disk_queue_depth).collect();
                (!depths.is_empty()).then(|| median(&depths))
            },
            activity: median_activity(samples),
            blocked_percent: median_sample.and_then(|s| {
                let states: Vec<[f64; 4]> =
                    s.cores.iter().map(|c| c.states).collect::<Option<_>>()?;
                let total: f64 = states.iter().flatten().sum();
                let blocked: f64 = states.iter().map(|s| s[1]).sum();
                (total > 0.0).then(|| 100.0 * blocked / total)
            }),
            cores: median_sample.map(|s| s.cores.clone()).unwrap_or_default(),
            cores_cov: median_sample.and_then(|s| CoresCov::of(&s.cores, s.seconds)),
            trace: samples.last().and_then(|s| s.trace.clone()),
        }
    }
}

/// The sample whose time is the median (as [`median`] picks it).
fn median_of(samples: &[Sample]) -> Option<&Sample> {
    let mut by_time: Vec<&Sample> = samples.iter().collect();
    by_time.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    by_time.get(by_time.len() / 2).copied()
}

/// Field by field, the median of the samples' activities (`None` if a sample has none).
fn median_activity(samples: &[Sample]) -> Option<Activity> {
    let all: Vec<Activity> = samples.iter().map(|s| s.activity).collect::<Option<_>>()?;
    let m = |f: fn(&Activity) -> f64| median(&all.iter().map(f).collect::<Vec<_>>());
    (!all.is_empty()).then(|| Activity {
        monitor_events: m(|a| a.monitor_events),
        signals: m(|a| a.signals),
        drops: m(|a| a.drops),
        leader_iterations: m(|a| a.leader_iterations),
        leader_wakeups: m(|a| a.leader_wakeups),
        spares_started: m(|a| a.spares_started),
        surrenders: m(|a| a.surrenders),
        handoffs: m(|a| a.handoffs),
        workers_lent: m(|a| a.workers_lent),
        leader_tasks: m(|a| a.leader_tasks),
    })
}

impl Report {
    /// Fills in the speedups against the `baseline` run, if there is one.
    pub fn with_speedups(mut self) -> Report {
        let base = self
            .runs
            .iter()
            .find(|r| r.runtime == "baseline")
            .map(|r| r.median_seconds);
        for r in &mut self.runs {
            r.speedup_vs_baseline = base.map(|b| b / r.median_seconds);
        }
        self
    }

    /// The fastest runtime by median time.
    pub fn fastest(&self) -> Option<&RunReport> {
        self.runs
            .iter()
            .min_by(|a, b| a.median_seconds.total_cmp(&b.median_seconds))
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}: bound {:.3} s, tight bound {:.3} s (fastest runs: compute only {:.3} s, I/O \
             only {:.3} s)",
            self.workload,
            self.bound_seconds,
            self.tight_bound_seconds,
            self.compute_seconds,
            self.io_seconds
        );
        let _ = writeln!(
            out,
            "{:<12} {:>9} {:>12} {:>8} {:>9} {:>9} {:>6} {:>9} {:>8} {:>8}",
            "runtime",
            "median s",
            &self.fom_unit,
            "speedup",
            "% bound",
            "% tight",
            "CPU",
            "I/O MiB/s",
            "oversub",
            "disk QD",
        );
        for r in &self.runs {
            let speedup = r
                .speedup_vs_baseline
                .map_or("-".to_string(), |s| format!("{s:.2}x"));
            let _ = writeln!(
                out,
                "{:<12} {:>9.3} {:>12.4e} {:>8} {:>8.1}% {:>8.1}% {:>5.0}% {:>9.0} {:>7.1}% {:>8}",
                r.runtime,
                r.median_seconds,
                r.fom,
                speedup,
                r.percent_of_bound,
                r.percent_of_tight_bound,
                100.0 * r.cpu_utilisation,
                r.io_mib_per_s,
                r.oversubscription_percent,
                r.disk_queue_depth.map_or("-".into(), |d| format!("{d:.1}")),
            );
        }
        for r in &self.runs {
            if let Some(c) = &r.cores_cov {
                let _ = write!(out, "{}, per core: ", r.runtime);
                if let (Some(b), Some(_)) = (r.blocked_percent, r.activity) {
                    let _ = write!(out, "blocked {b:.1}% of the time (traced), ");
                }
                let _ = write!(
                    out,
                    "variation across cores (c.o.v.): CPU time {:.2}, idle {:.2}, \
                     context switches {:.2}, tasks {:.2}",
                    c.cpu_time, c.idle, c.context_switches, c.tasks
                );
                if let Some(b) = c.blocked {
                    let _ = write!(out, ", blocked {b:.2}");
                }
                out.push('\n');
            }
        }
        for r in &self.runs {
            if let Some(a) = &r.activity {
                let _ = write!(
                    out,
                    "{}, per core per second: {:.0} signals",
                    r.runtime, a.signals
                );
                if a.drops > 0.0 {
                    let _ = write!(out, " ({:.0} drops to zero)", a.drops);
                }
                let _ = write!(
                    out,
                    ", {:.0} monitor events, {:.0} leader iterations, {:.1} wake-ups, \
                     {:.2} spares started, {:.1} surrenders",
                    a.monitor_events,
                    a.leader_iterations,
                    a.leader_wakeups,
                    a.spares_started,
                    a.surrenders
                );
                if a.workers_lent > 0.0 {
                    let _ = write!(out, ", {:.1} workers lent", a.workers_lent);
                }
                if a.handoffs > 0.0 {
                    let _ = write!(out, ", {:.0} handoffs", a.handoffs);
                }
                if a.leader_tasks > 0.0 {
                    let _ = write!(out, ", {:.1} tasks run by leaders", a.leader_tasks);
                }
                out.push('\n');
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(seconds: f64) -> Sample {
        Sample {
            seconds,
            cpu_utilisation: 0.5,
            io_bytes: 1 << 20,
            oversubscription_percent: 1.0,
            disk_queue_depth: None,
            activity: Some(Activity {
                monitor_events: seconds * 100.0,
                ..Activity::default()
            }),
            cores: vec![
                CoreSample {
                    cpu: 0,
                    cpu_seconds: seconds,
                    tasks: 10,
                    ..CoreSample::default()
                },
                CoreSample {
                    cpu: 1,
                    cpu_seconds: seconds / 2.0,
                    tasks: 30,
                    ..CoreSample::default()
                },
            ],
            trace: None,
        }
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn report_fields_follow_the_samples() {
        let base = RunReport::new(
            "baseline",
            &[sample(2.0), sample(2.2), sample(1.8)],
            100.0,
            (1.0, 1.1),
        );
        let umt = RunReport::new(
            "umt-perf",
            &[sample(1.0), sample(1.1), sample(1.2)],
            100.0,
            (1.0, 1.1),
        );
        let r = Report {
            workload: "heat".into(),
            params: serde_json::json!({"n": 8}),
            fom_unit: "cells/s".into(),
            compute_seconds: 1.0,
            compute_runs_seconds: vec![1.0],
            io_runs_seconds: vec![1.0],
            io_seconds: 0.5,
            bound_seconds: 1.0,
            tight_bound_seconds: 1.1,
            runs: vec![base, umt],
        }
        .with_speedups();
        assert_eq!(r.runs[0].median_seconds, 2.0);
        assert_eq!(r.runs[0].speedup_vs_baseline, Some(1.0));
        assert_eq!(r.runs[1].speedup_vs_baseline, Some(2.0 / 1.1));
        assert!((r.runs[1].percent_of_bound - 100.0 / 1.1).abs() < 1e-9);
        assert!((r.runs[1].percent_of_tight_bound - 100.0).abs() < 1e-9);
        assert_eq!(r.runs[1].fom, 100.0 / 1.1);
        assert!((r.runs[0].io_mib_per_s - 0.5).abs() < 1e-12);
        assert_eq!(r.fastest().unwrap().runtime, "umt-perf");
        let json = serde_json::to_value(&r).unwrap();
        for key in [
            "workload",
            "params",
            "bound_seconds",
            "tight_bound_seconds",
            "runs",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
        let run = &json["runs"][1];
        for key in [
            "runtime",
            "median_seconds",
            "seconds",
            "fom",
            "speedup_vs_baseline",
            "percent_of_bound",
            "percent_of_tight_bound",
            "cpu_utilisation",
            "io_mib_per_s",
            "oversubscription_percent",
        ] {
            assert!(run.get(key).is_some(), "{key}");
        }
        assert!(r.table().contains("umt-perf"));
        // Medians of the activity too: 100, 110, 120 events per second.
        assert!((r.runs[1].activity.unwrap().monitor_events - 110.0).abs() < 1e-9);
        assert!(
            r.table()
                .contains("umt-perf, per core per second: 0 signals, 110 monitor events")
        );
        // Two cores, one with twice the CPU time and a third of the tasks of the other.
        let cov = r.runs[1].cores_cov.unwrap();
        assert!((cov.cpu_time - 1.0 / 3.0).abs() < 1e-9, "{cov:?}");
        assert!((cov.tasks - 0.5).abs() < 1e-9, "{cov:?}");
        assert!(
            r.table()
                .contains("umt-perf, per core: variation across cores (c.o.v.): CPU time 0.33")
        );
    }
}
