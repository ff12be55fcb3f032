//! A comparison: every runner and the two bound runs (compute alone, I/O alone), alternating,
//! `repeat` times, summarised in a [`Report`].
//!
//! Each repeat runs every runtime once, in turn (A B C A B C ...), plus the compute-only and
//! I/O-only runs that give the overlap bound, so drift of the machine hits all of them alike.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use umt_rt::LeaderPolicy;

use crate::bound;
use crate::error::BenchError;
use crate::fwi::{self, FwiParams, Part};
use crate::heat::{self, HeatParams};
use crate::port::Engine;
use crate::report::{Report, RunReport};
use crate::runner::{Runner, Sample, UmtOptions, measure};
use crate::scan::{self, FileSet, Front, ScanParams};

/// How to compare, whatever the workload.
#[derive(Debug, Clone)]
pub struct Options {
    /// The runners, in table order (see [`Options::available_runners`]).
    pub runners: Vec<Runner>,
    /// Runs of each runner (the table shows medians); at least 1.
    pub repeat: usize,
    /// How umt-rt's monitored runners run.
    pub umt: UmtOptions,
    /// Show a progress bar on a terminal.
    pub progress: bool,
    /// Check every runner's result against the sequential reference, bit for bit (computed
    /// once per comparison, outside the timed runs).
    pub verify: bool,
}

impl Options {
    /// `asked`, or every runner this machine can run when it is empty (the others are named
    /// on stderr with the reason). A runner asked for that cannot run is an error.
    pub fn available_runners(asked: &[Runner]) -> Result<Vec<Runner>, BenchError> {
        if asked.is_empty() {
            let mut out = Vec::new();
            for r in Runner::ALL {
                match r.available() {
                    Ok(()) => out.push(r),
                    Err(why) => crate::note!("skipping {r}: {why}"),
                }
            }
            return Ok(out);
        }
        for (i, r) in asked.iter().enumerate() {
            if asked[..i].contains(r) {
                return Err(BenchError::InvalidParam(format!(
                    "runtime {r} is named twice: name each once"
                )));
            }
            r.available()
                .map_err(|why| BenchError::Runtime(format!("{r}: {why}")))?;
        }
        Ok(asked.to_vec())
    }
}

/// One measured run kind: a runtime, or one of the two bound runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Runtime(Runner),
    ComputeOnly,
    IoOnly,
}

/// Compares heat on every runner of `opts`.
pub fn heat(p: &HeatParams, opts: &Options) -> Result<Report, BenchError> {
    p.validate()?;
    let params = serde_json::json!({
        "size": p.n, "block": p.block, "iters": p.iters, "iof": p.iof,
        "io": format!("{:?}", p.io), "dir": p.dir,
        "checkpoint_bytes": p.checkpoint_bytes() * p.checkpoint_iters().len() as u64,
    });
    let work = (p.n * p.n * p.iters) as f64;
    let (iters, iof) = (p.iters, p.iof.unwrap_or(0));
    let blocks = p.blocks() * p.blocks();
    let tight = |compute, io| bound::heat_tight(compute, io, iters, iof, blocks);
    let reference = opts.verify.then(|| heat::sequential(p, p.iters));
    let checked = AtomicUsize::new(0);
    let once = |kind, engine: &dyn Engine| {
        let out = match (kind, engine.runtime()) {
            (Kind::Runtime(r), _) => {
                let out = engine.heat(p, &opts.umt)?;
                if let Some(want) = &reference {
                    check_same(r, "grid", &out.matrix, want)?;
                    checked.fetch_add(1, Ordering::Relaxed);
                }
                out
            }
            (Kind::ComputeOnly, Some(rt)) => heat::run(
                rt,
                &HeatParams {
                    iof: None,
                    ..p.clone()
                },
            )?,
            (Kind::IoOnly, Some(rt)) => heat::io_only(rt, p)?,
            _ => return Err(BenchError::Runtime("bound runs use umt-rt".into())),
        };
        Ok((out.elapsed, out.bytes_written))
    };
    compare("heat", "cells/s", work, params, opts, tight, once, &checked)
}

/// Compares the FWI mock-up on every runner of `opts`.
pub fn fwi(p: &FwiParams, opts: &Options) -> Result<Report, BenchError> {
    p.validate()?;
    let params = serde_json::json!({
        "nz": p.nz, "nx": p.nx, "ny": p.ny, "steps": p.steps, "iof": p.iof,
        "io": format!("{:?}", p.io), "dir": p.dir, "snapshot_bytes": p.snapshot_bytes(),
    });
    let work = p.cell_updates() / 1000.0;
    let tight = |compute, io| bound::fwi_tight(compute, io, p.steps, p.iof, p.ny);
    let reference = opts.verify.then(|| fwi::sequential(p));
    let checked = AtomicUsize::new(0);
    let once = |kind, engine: &dyn Engine| {
        let part = match kind {
            Kind::Runtime(_) => Part::All,
            Kind::ComputeOnly => Part::ComputeOnly,
            Kind::IoOnly => Part::IoOnly,
        };
        let out = match (kind, engine.runtime()) {
            (Kind::Runtime(r), _) => {
                let out = engine.fwi(p)?;
                if let Some((v, s, img)) = &reference {
                    check_same(r, "velocity", &out.velocity, v)?;
                    check_same(r, "stress", &out.stress, s)?;
                    check_same(r, "image", &out.image, img)?;
                    checked.fetch_add(1, Ordering::Relaxed);
                }
                out
            }
            (_, Some(rt)) => fwi::run(rt, p, part)?,
            _ => return Err(BenchError::Runtime("bound runs use umt-rt".into())),
        };
        Ok((out.elapsed, out.io_bytes))
    };
    compare("fwi", "kcells/s", work, params, opts, tight, once, &checked)
}

/// Compares the scan of `set`, written as `front`, on every runner of `opts`. Every runner's
/// digest must equal the first run's (or, with `verify`, the sequential one's). The bound's
/// I/O-only run reads at the highest concurrency of the comparison (`scan::io_only`).
pub fn scan(
    p: &ScanParams,
    set: &FileSet,
    front: Front,
    opts: &Options,
) -> Result<Report, BenchError> {
    p.validate()?;
    let params = serde_json::json!({
        "files": p.files, "file_mib": p.file_mib, "rounds": p.rounds,
        "dir": set.dir(), "front": front,
    });
    let work = p.bytes() as f64 / f64::from(1u32 << 20);
    let digest: std::sync::Mutex<Option<u64>> = std::sync::Mutex::new(None);
    if opts.verify {
        set.drop_cache()?;
        let want = scan::sequential_digest(set, p.rounds)?;
        *digest.lock().unwrap_or_else(|e| e.into_inner()) = Some(want);
    }
    let checked = AtomicUsize::new(0);
    let once = |kind, engine: &dyn Engine| match (kind, engine.runtime()) {
        (Kind::Runtime(r), _) => {
            let out = engine.scan(set, p, front)?;
            let mut want = digest.lock().unwrap_or_else(|e| e.into_inner());
            check_digest(r, out.digest, &mut want, opts.verify)?;
            if opts.verify {
                checked.fetch_add(1, Ordering::Relaxed);
            }
            Ok((out.elapsed, out.bytes))
        }
        (Kind::ComputeOnly, Some(rt)) => Ok((scan::compute_only(rt, set, p)?, 0)),
        (Kind::IoOnly, _) => Ok((scan::io_only(set)?, p.bytes())),
        _ => Err(BenchError::Runtime("bound runs use umt-rt".into())),
    };
    // The files are read once a run: whatever is read is its own period, so no runner can
    // overlap more than the longer of the two.
    compare(
        front.workload(),
        "MiB/s",
        work,
        params,
        opts,
        bound::overlap,
        once,
        &checked,
    )
}

/// A scan's `digest` by `runner` against the one every run must give: the sequential scan's
/// (`verify`), else the first run's, which `want` keeps.
fn check_digest(
    runner: Runner,
    digest: u64,
    want: &mut Option<u64>,
    verify: bool,
) -> Result<(), BenchError> {
    match *want {
        Some(d) if d != digest => Err(BenchError::Corrupt(format!(
            "{runner}: its digest {digest:#x} differs from {d:#x}, {}",
            if verify {
                "the sequential scan's"
            } else {
                "the first run's"
            }
        ))),
        _ => {
            *want = Some(digest);
            Ok(())
        }
    }
}

/// `got`, a runner's `what`, is bit for bit the sequential reference `want`.
fn check_same(runner: Runner, what: &str, got: &[f64], want: &[f64]) -> Result<(), BenchError> {
    if got.len() != want.len() {
        return Err(BenchError::Corrupt(format!(
            "{runner}: its {what} has {} values, the sequential reference {}",
            got.len(),
            want.len()
        )));
    }
    match got
        .iter()
        .zip(want)
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        None => Ok(()),
        Some(i) => Err(BenchError::Corrupt(format!(
            "{runner}: its {what} differs from the sequential reference at value {i} ({} \
             against {})",
            got[i], want[i]
        ))),
    }
}

/// Runs every kind `repeat` times, alternating, and builds the report. `once` runs one kind on
/// a runtime and returns the measured wall time and the bytes of I/O; `tight` is the tight
/// bound from the compute-only and I/O-only times; `checked` counts the runs `once` checked
/// against the sequential reference.
#[allow(clippy::too_many_arguments)]
fn compare(
    workload: &str,
    fom_unit: &str,
    work: f64,
    mut params: serde_json::Value,
    opts: &Options,
    tight: impl Fn(f64, f64) -> f64,
    once: impl Fn(Kind, &dyn Engine) -> Result<(Duration, u64), BenchError>,
    checked: &AtomicUsize,
) -> Result<Report, BenchError> {
    let runners = &opts.runners;
    let mut kinds: Vec<Kind> = runners.iter().map(|&r| Kind::Runtime(r)).collect();
    kinds.extend([Kind::ComputeOnly, Kind::IoOnly]);
    if opts.repeat == 0 {
        return Err(BenchError::InvalidParam(
            "repeat must be at least 1: each runner runs that many times".into(),
        ));
    }
    let repeat = opts.repeat;
    let io_runner = io_only_runner(runners);
    let bar = progress_bar(workload, (repeat * kinds.len()) as u64, opts.progress);
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); kinds.len()];
    for _ in 0..repeat {
        for (k, &kind) in kinds.iter().enumerate() {
            let (runner, label) = match kind {
                Kind::Runtime(r) => (r, r.name()),
                Kind::ComputeOnly => (Runner::BASELINE, "compute only"),
                Kind::IoOnly => (io_runner, "I/O only"),
            };
            bar.set_message(label);
            samples[k].push(measure(runner, &opts.umt, |rt| once(kind, rt))?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    // The bound's parts are the fastest of their runs, not the medians: one run of each per
    // round, alternating with the runners, so the disk's fast moments set the I/O-only part,
    // and a runner's median beats it only if it overlapped better than a perfect overlap of
    // the fastest pure runs (beyond noise, it cannot).
    let times = |k: usize| samples[k].iter().map(|s| s.seconds).collect::<Vec<_>>();
    let (compute_runs, io_runs) = (times(runners.len()), times(runners.len() + 1));
    let fastest = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let (compute, io) = (fastest(&compute_runs), fastest(&io_runs));
    let bound = bound::overlap(compute, io);
    let tight = tight(compute, io);
    let runs = runners
        .iter()
        .enumerate()
        .map(|(k, r)| RunReport::new(r.name(), &samples[k], work, (bound, tight)))
        .collect();
    params["repeat"] = repeat.into();
    params["io_only_runtime"] = io_runner.name().into();
    // `verified` says that every run was checked against the sequential reference, counted
    // where the check ran, not echoed from the flag.
    let checked = checked.load(Ordering::Relaxed);
    if opts.verify && checked != repeat * runners.len() {
        return Err(BenchError::Runtime(format!(
            "--verify: only {checked} of the {} runs were checked against the sequential \
             reference",
            repeat * runners.len()
        )));
    }
    params["verified"] = (opts.verify && checked > 0).into();
    params["checked_runs"] = checked.into();
    params["leader"] = opts.umt.leader.map_or("default", LeaderPolicy::name).into();
    params["handoff"] = opts.umt.handoff.into();
    params["lend_workers"] = opts.umt.lend_workers.into();
    params["leader_runs_tasks"] = opts.umt.leader_runs_tasks.into();
    params["max_workers_per_core"] = opts.umt.max_workers_per_core.into();
    params["max_spares"] = opts.umt.max_spares.into();
    params["staged_checkpoints"] = opts.umt.staged_checkpoints.into();
    Ok(Report {
        workload: workload.into(),
        params,
        fom_unit: fom_unit.into(),
        compute_seconds: compute,
        io_seconds: io,
        compute_runs_seconds: compute_runs,
        io_runs_seconds: io_runs,
        bound_seconds: bound,
        tight_bound_seconds: tight,
        runs,
    }
    .with_speedups())
}

/// The runtime of the I/O-only run of the bound: a monitored umt-rt runtime when one is in
/// the comparison (Bpf first, then Perf, then Kernel), else the baseline.
///
/// The bound must be one no runner passes: its I/O-only run must reach the I/O concurrency of
/// the best runner. With its workers blocked on the device and its cores idle, a monitored
/// runtime starts spares up to its cap (16 to 63 workers per core by default), more writers or
/// readers at once than any peer (rayon-8x: 8 per core); the baseline runtime has one per
/// core, and with it heat's umt-bpf ran at 115 % of the "bound" (issue 29).
fn io_only_runner(runners: &[Runner]) -> Runner {
    ["umt-bpf", "umt-perf", "umt-kernel"]
        .into_iter()
        .find_map(|name| runners.iter().find(|r| r.name() == name).copied())
        .unwrap_or(Runner::BASELINE)
}

/// A progress bar on stderr, drawn only when asked and on a real terminal (the guest's serial
/// console has no TERM).
fn progress_bar(workload: &str, len: u64, shown: bool) -> ProgressBar {
    let bar = ProgressBar::new(len).with_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    if !shown || std::env::var("TERM").map_or(true, |t| t.is_empty() || t == "dumb") {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_prefix(workload.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::IoMode;

    /// A heat small enough for a unit test, checkpointing through the page cache.
    fn small_heat() -> HeatParams {
        HeatParams {
            n: 64,
            block: 32,
            iters: 4,
            iof: Some(2),
            dir: std::env::temp_dir(),
            io: IoMode::Buffered,
        }
    }

    /// A tiny comparison of two runners: one row each, medians of their repeats, and bounds
    /// from the two bound runs.
    #[test]
    fn a_small_comparison_reports_every_runner() {
        let opts = Options {
            runners: vec![Runner::BASELINE, "rayon".parse().unwrap()],
            repeat: 2,
            umt: UmtOptions::default(),
            progress: false,
            verify: true,
        };
        let p = small_heat();
        let r = heat(&p, &opts).unwrap();
        assert_eq!(r.runs.len(), 2);
        assert!(r.runs.iter().all(|run| run.seconds.len() == 2));
        assert_eq!(r.bound_seconds, r.compute_seconds.max(r.io_seconds));
        assert!(r.tight_bound_seconds >= r.bound_seconds);
        assert_eq!(r.runs[0].speedup_vs_baseline, Some(1.0));
        assert_eq!(r.params["repeat"], 2);
    }

    /// The checkers refuse a wrong result, saying which runner and where, and `verified`
    /// counts the runs they checked.
    #[test]
    fn a_wrong_result_is_refused() {
        let r = Runner::BASELINE;
        assert!(check_same(r, "grid", &[1.0, 2.0], &[1.0, 2.0]).is_ok());
        let e = check_same(r, "grid", &[1.0, 2.5], &[1.0, 2.0]).unwrap_err();
        assert!(matches!(e, BenchError::Corrupt(_)), "{e}");
        assert!(e.to_string().contains("at value 1"), "{e}");
        // -0.0 == 0.0, but not bit for bit: a result that differs in any bit is refused.
        assert!(check_same(r, "grid", &[-0.0], &[0.0]).is_err());
        let e = check_same(r, "grid", &[1.0], &[1.0, 2.0]).unwrap_err();
        assert!(e.to_string().contains("1 values"), "{e}");
        let mut want = None;
        check_digest(r, 7, &mut want, false).unwrap();
        check_digest(r, 7, &mut want, false).unwrap();
        let e = check_digest(r, 8, &mut want, false).unwrap_err();
        assert!(e.to_string().contains("the first run's"), "{e}");
        let mut want = Some(7);
        let e = check_digest(r, 8, &mut want, true).unwrap_err();
        assert!(e.to_string().contains("the sequential scan's"), "{e}");
        assert_eq!(want, Some(7));
    }

    /// With `verify`, every run of every runner is checked, and the report says how many.
    #[test]
    fn verify_checks_every_run() {
        let runners: Vec<Runner> = vec![Runner::BASELINE, "rayon".parse().unwrap()];
        let p = small_heat();
        for verify in [true, false] {
            let opts = Options {
                runners: runners.clone(),
                repeat: 3,
                umt: UmtOptions::default(),
                progress: false,
                verify,
            };
            let r = heat(&p, &opts).unwrap();
            assert_eq!(r.params["verified"], verify);
            assert_eq!(r.params["checked_runs"], if verify { 6 } else { 0 });
        }
    }

    #[test]
    fn a_runner_asked_for_must_be_available() {
        assert_eq!(
            Options::available_runners(&[Runner::BASELINE]).unwrap(),
            [Runner::BASELINE]
        );
        let twice = Options::available_runners(&[Runner::BASELINE, Runner::BASELINE]);
        assert!(twice.unwrap_err().to_string().contains("named twice"));
        assert!(!Options::available_runners(&[]).unwrap().is_empty());
    }
}
