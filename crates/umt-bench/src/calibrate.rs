//! Problem sizes that fit the machine: how often heat checkpoints and FWI snapshots, so that
//! the computation alone and the I/O alone take about the same time on any number of cores.
//!
//! A comparison tells most when neither side dominates: at fixed sizes, 16 cores make heat
//! I/O-bound (the computation shrinks with the cores, the disk does not), 2 cores make it
//! compute-bound, and in both cases there is little to overlap. So, unless the user sets them,
//! the period (`--iof`) and the length (`--iters`, `--steps`) are chosen by measurement on the
//! baseline runtime: one step's computation on every core, one checkpoint's (or snapshot's)
//! I/O, and a period of as many steps as one checkpoint takes to write, for
//! [`PERIODS`] checkpoints.

use std::fmt;

use crate::error::BenchError;
use crate::fwi::{self, FwiParams, Part};
use crate::heat::{self, HeatParams};
use crate::port::Engine;
use crate::runner::Runner;

/// Checkpoints (or snapshots) of a calibrated run.
pub const PERIODS: usize = 10;

/// What calibration measured and chose.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// `heat` or `fwi`.
    pub workload: &'static str,
    /// Cores of the baseline runtime it ran on.
    pub cores: usize,
    /// Seconds of one step's computation (a heat iteration; an FWI step forward and back).
    pub step_seconds: f64,
    /// Seconds of one checkpoint's I/O (heat), or one snapshot written and read back (FWI).
    pub io_seconds: f64,
    /// Steps per checkpoint or snapshot.
    pub iof: usize,
    /// Steps of the run: `iof * PERIODS`.
    pub steps: usize,
}

impl Calibration {
    fn new(workload: &'static str, cores: usize, step_seconds: f64, io_seconds: f64) -> Self {
        let iof = period(step_seconds, io_seconds);
        Calibration {
            workload,
            cores,
            step_seconds,
            io_seconds,
            iof,
            steps: iof * PERIODS,
        }
    }
}

impl fmt::Display for Calibration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (step, io, length) = match self.workload {
            "heat" => ("an iteration", "a checkpoint", "--iters"),
            _ => ("a step", "a snapshot", "--steps"),
        };
        write!(
            f,
            "{}: calibrated on {} cores: {step} computes in {:.1} ms, {io} takes {:.1} ms of \
             I/O: --iof {} {length} {} (compute about {:.2} s, I/O about {:.2} s)",
            self.workload,
            self.cores,
            1e3 * self.step_seconds,
            1e3 * self.io_seconds,
            self.iof,
            self.steps,
            self.step_seconds * self.steps as f64,
            self.io_seconds * (self.steps / self.iof) as f64,
        )
    }
}

/// Most steps per period (a step too short to measure would otherwise ask for millions).
pub const MAX_PERIOD: usize = 10_000;

/// Steps per period so that a period's computation lasts about as long as its I/O, between 1
/// and [`MAX_PERIOD`].
pub fn period(step_seconds: f64, io_seconds: f64) -> usize {
    let ratio = io_seconds / step_seconds;
    if ratio.is_finite() {
        (ratio.round() as usize).clamp(1, MAX_PERIOD)
    } else if ratio.is_infinite() {
        MAX_PERIOD
    } else {
        1
    }
}

/// The faster of two runs of `f` (the first warms up what the second reuses).
fn best_of_two(mut f: impl FnMut() -> Result<f64, BenchError>) -> Result<f64, BenchError> {
    let first = f()?;
    Ok(first.min(f()?))
}

/// The baseline runtime calibration runs on.
fn baseline() -> Result<Box<dyn Engine>, BenchError> {
    Runner::BASELINE.engine()
}

/// The umt-rt runtime of the baseline `engine`.
fn umt(engine: &dyn Engine) -> Result<&umt_rt::Runtime, BenchError> {
    engine
        .runtime()
        .ok_or_else(|| BenchError::Runtime(format!("baseline is not umt-rt: {engine:?}")))
}

/// Calibrates heat at `p`'s grid, block, directory and I/O mode (its `iters` and `iof` are
/// ignored).
pub fn heat(p: &HeatParams) -> Result<Calibration, BenchError> {
    const ITERS: usize = 3;
    let baseline = baseline()?;
    let rt = umt(&*baseline)?;
    let compute = HeatParams {
        iters: ITERS,
        iof: None,
        ..p.clone()
    };
    let step = best_of_two(|| Ok(heat::run(rt, &compute)?.elapsed.as_secs_f64() / ITERS as f64))?;
    let one_checkpoint = HeatParams {
        iters: 1,
        iof: Some(1),
        ..p.clone()
    };
    let io = best_of_two(|| {
        let out = heat::io_only(rt, &one_checkpoint)?;
        Ok(out.elapsed.as_secs_f64())
    })?;
    Ok(Calibration::new("heat", rt.cpus().len(), step, io))
}

/// Calibrates FWI at `p`'s volume, directory and I/O mode (its `steps` and `iof` are
/// ignored).
pub fn fwi(p: &FwiParams) -> Result<Calibration, BenchError> {
    const STEPS: usize = 2;
    let baseline = baseline()?;
    let rt = umt(&*baseline)?;
    let compute = FwiParams {
        steps: STEPS,
        iof: 1,
        ..p.clone()
    };
    let step = best_of_two(|| {
        let out = fwi::run(rt, &compute, Part::ComputeOnly)?;
        Ok(out.elapsed.as_secs_f64() / STEPS as f64)
    })?;
    let one_snapshot = FwiParams {
        steps: 1,
        iof: 1,
        ..p.clone()
    };
    let io = best_of_two(|| {
        let out = fwi::run(rt, &one_snapshot, Part::IoOnly)?;
        Ok(out.elapsed.as_secs_f64())
    })?;
    Ok(Calibration::new("fwi", rt.cpus().len(), step, io))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::IoMode;

    #[test]
    fn the_period_matches_a_checkpoint_to_its_steps() {
        assert_eq!(period(0.040, 0.080), 2);
        assert_eq!(period(0.005, 0.080), 16);
        assert_eq!(period(0.065, 0.038), 1, "never less than one step");
        assert_eq!(period(0.0, 0.080), MAX_PERIOD);
        assert_eq!(period(1e-9, 0.080), MAX_PERIOD);
        assert_eq!(period(0.01, f64::NAN), 1);
    }

    /// A real calibration of a small grid: it measures both sides, and the choice follows
    /// from what it measured.
    #[test]
    fn heat_calibration_measures_and_chooses() {
        let p = HeatParams {
            n: 128,
            block: 64,
            iters: 0,
            iof: None,
            dir: std::env::temp_dir(),
            io: IoMode::Buffered,
        };
        let c = heat(&p).unwrap();
        assert!(c.step_seconds > 0.0 && c.io_seconds > 0.0, "{c:?}");
        assert_eq!(c.iof, period(c.step_seconds, c.io_seconds));
        assert_eq!(c.steps, c.iof * PERIODS);
        assert!(c.to_string().contains("--iof"), "{c}");
    }
}
