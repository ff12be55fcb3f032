//! `umt-bench`: the paper's applications on each runtime, side by side.
//!
//! ```text
//! cargo run --release -p umt-bench -- heat [--size N] [--block B] [--iters I] [--iof K]
//!     [--runtimes baseline,umt-perf,umt-kernel] [--repeat N] [--dir PATH] [--json FILE]
//! cargo run --release -p umt-bench -- fwi [--nz N] [--nx N] [--ny N] [--steps S] [--iof K] ...
//! cargo run --release -p umt-bench -- compare      # every workload
//! ```
//!
//! Each repeat runs every runtime once, in turn (A B C A B C ...), plus the compute-only and
//! I/O-only runs that give the overlap bound, so drift of the machine hits all of them alike.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

use umt_bench::fwi::{self, FwiParams, Part};
use umt_bench::heat::{self, HeatParams};
use umt_bench::io::{BenchError, IoMode, probe_direct};
use umt_bench::report::{Report, RunReport, median};
use umt_bench::runner::{self, Engine, Runner, Sample, measure};
use umt_rt::LeaderPolicy;

#[derive(Parser)]
#[command(
    name = "umt-bench",
    about = "The UMT paper's applications on every runtime"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// 2D Gauss-Seidel heat diffusion with O_DIRECT checkpoints.
    Heat(HeatArgs),
    /// FWI mock-up: 3D velocity/stress propagation with O_DIRECT snapshots read back.
    Fwi(FwiArgs),
    /// Every workload with its defaults (the README's main command).
    Compare(Common),
}

#[derive(Args, Clone)]
struct Common {
    /// Runtimes to compare, comma-separated (default: every one this machine can run).
    #[arg(long, value_delimiter = ',')]
    runtimes: Vec<Runner>,
    /// Repeats of each runtime (the table shows medians).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Directory for the checkpoint files (needs O_DIRECT unless --buffered).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write checkpoints through the page cache instead of O_DIRECT.
    #[arg(long)]
    buffered: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// How the leaders of umt-perf and umt-kernel run: idle, normal or poll (default: poll
    /// for umt-perf, idle for umt-kernel; see umt_rt::LeaderPolicy).
    #[arg(long)]
    leader: Option<LeaderPolicy>,
}

#[derive(Args, Clone)]
struct HeatArgs {
    /// Matrix side, in cells.
    #[arg(long, default_value_t = 4096)]
    size: usize,
    /// Block side, in cells (must divide --size).
    #[arg(long, default_value_t = 512)]
    block: usize,
    /// Iterations.
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Checkpoint every this many iterations.
    #[arg(long, default_value_t = 2)]
    iof: usize,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Clone)]
struct FwiArgs {
    /// Cells along Z.
    #[arg(long, default_value_t = 256)]
    nz: usize,
    /// Cells along X.
    #[arg(long, default_value_t = 256)]
    nx: usize,
    /// Y-slices.
    #[arg(long, default_value_t = 64)]
    ny: usize,
    /// Time steps of each phase (forward and backward).
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Snapshot every this many steps.
    #[arg(long, default_value_t = 2)]
    iof: usize,
    #[command(flatten)]
    common: Common,
}

/// The defaults of a subcommand's arguments, with `common` in place of its own.
fn defaults<T: Args + Clone>(common: &Common, set: impl Fn(&mut T, Common)) -> T {
    #[derive(Parser)]
    struct Only<T: Args> {
        #[command(flatten)]
        inner: T,
    }
    let mut t = Only::<T>::parse_from(["umt-bench"]).inner;
    set(&mut t, common.clone());
    t
}

fn runners(common: &Common) -> Result<Vec<Runner>, BenchError> {
    if common.runtimes.is_empty() {
        let mut out = Vec::new();
        for r in Runner::ALL {
            match r.available() {
                Ok(()) => out.push(r),
                Err(why) => eprintln!("skipping {r}: {why}"),
            }
        }
        return Ok(out);
    }
    for r in &common.runtimes {
        r.available()
            .map_err(|why| BenchError::Runtime(format!("{r}: {why}")))?;
    }
    Ok(common.runtimes.clone())
}

fn io_mode(common: &Common, dir: &std::path::Path) -> Result<IoMode, BenchError> {
    if common.buffered {
        return Ok(IoMode::Buffered);
    }
    probe_direct(dir)?;
    Ok(IoMode::Direct)
}

fn remove_checkpoints(run: &heat::HeatRun) {
    for (_, path) in &run.checkpoints {
        let _ = std::fs::remove_file(path);
    }
}

/// One measured run kind: a runtime, or one of the two bound runs.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Runtime(Runner),
    ComputeOnly,
    IoOnly,
}

/// Runs every kind `repeat` times, alternating, and builds the report. `once` runs one kind on
/// a runtime and returns the measured wall time and the bytes of I/O.
fn compare(
    workload: &str,
    fom_unit: &str,
    work: f64,
    params: serde_json::Value,
    common: &Common,
    once: impl Fn(Kind, &Engine) -> Result<(Duration, u64), BenchError>,
) -> Result<Report, BenchError> {
    let runners = runners(common)?;
    let mut kinds: Vec<Kind> = runners.iter().map(|&r| Kind::Runtime(r)).collect();
    kinds.extend([Kind::ComputeOnly, Kind::IoOnly]);
    let repeat = common.repeat.max(1);
    let bar = ProgressBar::new((repeat * kinds.len()) as u64).with_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    // No bar without a real terminal (the guest's serial console has no TERM).
    if std::env::var("TERM").map_or(true, |t| t.is_empty() || t == "dumb") {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_prefix(workload.to_string());
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); kinds.len()];
    for _ in 0..repeat {
        for (k, &kind) in kinds.iter().enumerate() {
            let (runner, label) = match kind {
                Kind::Runtime(r) => (r, r.name()),
                Kind::ComputeOnly => (Runner::Baseline, "compute only"),
                Kind::IoOnly => (Runner::Baseline, "I/O only"),
            };
            bar.set_message(label);
            samples[k].push(measure(runner, common.leader, |rt| once(kind, rt))?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let secs = |k: usize| median(&samples[k].iter().map(|s| s.seconds).collect::<Vec<_>>());
    let compute = secs(runners.len());
    let io = secs(runners.len() + 1);
    let bound = compute.max(io);
    let runs = runners
        .iter()
        .enumerate()
        .map(|(k, r)| RunReport::new(r.name(), &samples[k], work, bound))
        .collect();
    let mut params = params;
    params["repeat"] = repeat.into();
    params["leader"] = common.leader.map_or("default", LeaderPolicy::name).into();
    Ok(Report {
        workload: workload.into(),
        params,
        fom_unit: fom_unit.into(),
        compute_seconds: compute,
        io_seconds: io,
        bound_seconds: bound,
        runs,
    }
    .with_speedups())
}

fn run_heat(a: &HeatArgs) -> Result<Report, BenchError> {
    let dir = a.common.dir.clone().unwrap_or_else(std::env::temp_dir);
    let p = HeatParams {
        n: a.size,
        block: a.block,
        iters: a.iters,
        iof: Some(a.iof),
        io: io_mode(&a.common, &dir)?,
        dir,
    };
    p.validate()?;
    let params = serde_json::json!({
        "size": p.n, "block": p.block, "iters": p.iters, "iof": a.iof,
        "io": format!("{:?}", p.io), "dir": p.dir,
        "checkpoint_bytes": p.checkpoint_bytes() * p.checkpoint_iters().len() as u64,
    });
    let work = (p.n * p.n * p.iters) as f64;
    compare(
        "heat",
        "cells/s",
        work,
        params,
        &a.common,
        |kind, engine| {
            let out = match (kind, engine) {
                (Kind::Runtime(_), e) => runner::run_heat(e, &p)?,
                (Kind::ComputeOnly, Engine::Umt(rt)) => heat::run(
                    rt,
                    &HeatParams {
                        iof: None,
                        ..p.clone()
                    },
                )?,
                (Kind::IoOnly, Engine::Umt(rt)) => heat::io_only(rt, &p)?,
                _ => return Err(BenchError::Runtime("bound runs use umt-rt".into())),
            };
            remove_checkpoints(&out);
            Ok((out.elapsed, out.bytes_written))
        },
    )
}

fn run_fwi(a: &FwiArgs) -> Result<Report, BenchError> {
    let dir = a.common.dir.clone().unwrap_or_else(std::env::temp_dir);
    let p = FwiParams {
        nz: a.nz,
        nx: a.nx,
        ny: a.ny,
        steps: a.steps,
        iof: a.iof,
        io: io_mode(&a.common, &dir)?,
        dir,
    };
    p.validate()?;
    let params = serde_json::json!({
        "nz": p.nz, "nx": p.nx, "ny": p.ny, "steps": p.steps, "iof": p.iof,
        "io": format!("{:?}", p.io), "dir": p.dir, "snapshot_bytes": p.snapshot_bytes(),
    });
    let work = p.cell_updates() / 1000.0;
    compare(
        "fwi",
        "kcells/s",
        work,
        params,
        &a.common,
        |kind, engine| {
            let part = match kind {
                Kind::Runtime(_) => Part::All,
                Kind::ComputeOnly => Part::ComputeOnly,
                Kind::IoOnly => Part::IoOnly,
            };
            let out = match (part, engine) {
                (Part::All, e) => runner::run_fwi(e, &p)?,
                (part, Engine::Umt(rt)) => fwi::run(rt, &p, part)?,
                _ => return Err(BenchError::Runtime("bound runs use umt-rt".into())),
            };
            Ok((out.elapsed, out.io_bytes))
        },
    )
}

fn emit(reports: &[Report], json: Option<&PathBuf>) -> Result<(), BenchError> {
    for r in reports {
        println!("{}", r.table());
    }
    if let Some(path) = json {
        let value = if reports.len() == 1 {
            serde_json::to_value(&reports[0])
        } else {
            serde_json::to_value(reports)
        }
        .map_err(|e| BenchError::InvalidParam(format!("JSON: {e}")))?;
        let text = serde_json::to_string_pretty(&value)
            .map_err(|e| BenchError::InvalidParam(format!("JSON: {e}")))?;
        std::fs::write(path, text).map_err(|source| BenchError::Io {
            what: "writing",
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Heat(a) => run_heat(&a).and_then(|r| emit(&[r], a.common.json.as_ref())),
        Cmd::Fwi(a) => run_fwi(&a).and_then(|r| emit(&[r], a.common.json.as_ref())),
        Cmd::Compare(common) => {
            let heat: HeatArgs = defaults(&common, |a: &mut HeatArgs, c| a.common = c);
            let fwi: FwiArgs = defaults(&common, |a: &mut FwiArgs, c| a.common = c);
            run_heat(&heat)
                .and_then(|h| Ok(vec![h, run_fwi(&fwi)?]))
                .and_then(|reports| emit(&reports, common.json.as_ref()))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("umt-bench: {e}");
            ExitCode::from(2)
        }
    }
}
