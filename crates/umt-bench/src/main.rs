//! `umt-bench`: the paper's applications on each runtime, side by side.
//!
//! ```text
//! cargo run --release -p umt-bench -- heat [--size N] [--block B] [--iters I] [--iof K]
//!     [--runtimes baseline,umt-perf,umt-kernel] [--repeat N] [--dir PATH] [--json FILE]
//! cargo run --release -p umt-bench -- fwi [--nz N] [--nx N] [--ny N] [--steps S] [--iof K] ...
//! cargo run --release -p umt-bench -- compare      # every workload
//! ```
//!
//! The command line only: what a comparison does is in the library (`umt_bench::compare`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use umt_bench::compare::{self, Options};
use umt_bench::error::BenchError;
use umt_bench::fwi::FwiParams;
use umt_bench::heat::HeatParams;
use umt_bench::io::{IoMode, probe_direct};
use umt_bench::report::Report;
use umt_bench::runner::Runner;
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

impl Common {
    fn options(&self) -> Result<Options, BenchError> {
        Ok(Options {
            runners: Options::available_runners(&self.runtimes)?,
            repeat: self.repeat,
            leader: self.leader,
            progress: true,
        })
    }

    /// The checkpoint directory and how to write there.
    fn io(&self) -> Result<(PathBuf, IoMode), BenchError> {
        let dir = self.dir.clone().unwrap_or_else(std::env::temp_dir);
        if self.buffered {
            return Ok((dir, IoMode::Buffered));
        }
        probe_direct(&dir)?;
        Ok((dir, IoMode::Direct))
    }
}

fn run_heat(a: &HeatArgs) -> Result<Report, BenchError> {
    let (dir, io) = a.common.io()?;
    let p = HeatParams {
        n: a.size,
        block: a.block,
        iters: a.iters,
        iof: Some(a.iof),
        io,
        dir,
    };
    p.validate()?;
    compare::heat(&p, &a.common.options()?)
}

fn run_fwi(a: &FwiArgs) -> Result<Report, BenchError> {
    let (dir, io) = a.common.io()?;
    let p = FwiParams {
        nz: a.nz,
        nx: a.nx,
        ny: a.ny,
        steps: a.steps,
        iof: a.iof,
        io,
        dir,
    };
    p.validate()?;
    compare::fwi(&p, &a.common.options()?)
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
        std::fs::write(path, text).map_err(|e| BenchError::io("writing", path, e))?;
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
