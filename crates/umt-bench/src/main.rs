//! `umt-bench`: the paper's applications on each runtime, side by side.
//!
//! ```text
//! cargo run --release -p umt-bench -- heat [--size N] [--block B] [--iters I] [--iof K]
//!     [--runtimes baseline,umt-perf,umt-kernel] [--repeat N] [--dir PATH] [--json FILE]
//! cargo run --release -p umt-bench -- fwi [--nz N] [--nx N] [--ny N] [--steps S] [--iof K] ...
//! cargo run --release -p umt-bench -- scan [--files N] [--file-mib M] [--rounds R] [--front iter|tasks|both] ...
//! cargo run --release -p umt-bench -- compare      # every workload
//! cargo run --release -p umt-bench -- onload [--rounds N] [--size N] ...  # a service beside heat
//! ```
//!
//! The command line only: what a comparison does is in the library (`umt_bench::compare`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use umt_bench::calibrate::{self, Calibration};
use umt_bench::compare::{self, Options};
use umt_bench::error::BenchError;
use umt_bench::fwi::FwiParams;
use umt_bench::heat::HeatParams;
use umt_bench::io::{
    IoMode, check_memory, check_writable, memory_filesystem, probe_direct,
    remove_files_on_interrupt, write_atomically,
};
use umt_bench::report::Report;
use umt_bench::rundir::RunDir;
use umt_bench::runner::{Runner, UmtOptions};
use umt_rt::LeaderPolicy;

/// `println!` for the commands' results, through [`umt_bench::io::say`]: a closed standard
/// output is noted, not a panic.
macro_rules! say {
    ($($arg:tt)*) => {
        umt_bench::io::say(format_args!("{}\n", format_args!($($arg)*)))?
    };
}

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
    /// Many cold files read and hashed, written as a parallel loop and as a task per file.
    Scan(ScanArgs),
    /// Every workload with its defaults (the README's main command).
    Compare(Common),
    /// The cores sweep: heat, FWI and scan with the same parameters at 1, 2, 4, ... N cores
    /// of the affinity mask, every runtime at each; JSON, Markdown and an SVG plot in --out.
    Scale(ScaleArgs),
    /// A compression service beside heat: none, onloaded (idle cores only), spawned as
    /// ordinary tasks; heat's time for each and what the service did.
    Onload(OnloadArgs),
    /// A request/response service on loopback, a task per connection, whose handlers block
    /// in the kernel one request in N, unannotated: umt-rt futures with and without the
    /// monitor, tokio as written and with spawn_blocking; throughput and latency.
    Serve(ServeArgs),
}

#[derive(Args, Clone)]
struct ServeArgs {
    /// Connections, one client thread each.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Requests per client and run.
    #[arg(long, default_value_t = 300)]
    requests: usize,
    /// In the blocking scenario, one request in this many blocks in its handler.
    #[arg(long, default_value_t = 10)]
    block_every: u64,
    /// How long a blocking request sleeps in its handler, in microseconds.
    #[arg(long, default_value_t = 1000)]
    block_us: u64,
    /// Compute per request, in rounds of a hash (about a nanosecond each).
    #[arg(long, default_value_t = 20_000)]
    work: u64,
    /// Runs of each server per scenario (they alternate; the table shows the median of each
    /// figure).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Worker threads of each server (default: the CPUs of the affinity mask).
    #[arg(long)]
    cores: Option<usize>,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also draw throughput and p99 latency into this SVG file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Files of 1 MiB for the cold-read scenario, in which a blocking request reads one with
    /// std::fs::read after dropping it from the page cache (0: no such scenario).
    #[arg(long, default_value_t = 256)]
    cold_files: usize,
    /// Directory for the cold files (default: the temporary directory; it must be on a
    /// disk, not in memory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Accept a --dir on a memory-backed filesystem (tmpfs, ramfs): its reads are memory
    /// copies, so the cold-read scenario blocks on nothing.
    #[arg(long)]
    allow_memory_dir: bool,
    /// Open loop: send this many requests per second in all, each when it is due, and count
    /// its latency from then (no coordinated omission); below every server's capacity it
    /// shows the tail a blocked handler causes. Default: closed loop, each client sends its
    /// next request when the last is answered.
    #[arg(long)]
    rate: Option<f64>,
    /// umt's idle workers park instead of waiting for socket events themselves
    /// (`Builder::drive_io(false)`): every event goes through the reactor thread.
    #[arg(long)]
    no_drive_io: bool,
    /// umt-rt's handoff (`Builder::handoff`; directed with the Bpf backend on Linux 6.13 or
    /// later): a handler back from its block gets its core at once.
    #[arg(long)]
    handoff: bool,
    /// Closed loop: the client threads run at nice -10 (needs CAP_SYS_NICE: root), so a client
    /// reads its answer as soon as it is written and a latency is the server's alone, not
    /// also its thread's wait for a CPU shared with the server.
    #[arg(long)]
    clients_first: bool,
}

#[derive(Args, Clone)]
struct OnloadArgs {
    /// Rounds (the ways alternate; the table shows medians) [default: 7; 3 with --dyon, each
    /// a pass over every static partition].
    #[arg(long)]
    rounds: Option<usize>,
    /// Heat's matrix side.
    #[arg(long, default_value_t = 4096)]
    size: usize,
    /// Heat's block side.
    #[arg(long, default_value_t = 512)]
    block: usize,
    /// Heat's iterations (a checkpoint after each).
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// A chunk is offered every this many compression times (4: a quarter of a core's
    /// worth of work on offer).
    #[arg(long, default_value_t = 4.0)]
    offer_every: f64,
    /// Directory for the checkpoint files (needs O_DIRECT unless --buffered).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write checkpoints through the page cache instead of O_DIRECT.
    #[arg(long)]
    buffered: bool,
    /// Accept a --dir on a memory-backed filesystem (tmpfs, ramfs).
    #[arg(long)]
    allow_memory_dir: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Seed 002's experiment instead of the three ways: the service (onloaded, archiving what
    /// it compresses) under every static partition of the cores, `--rounds` times, then under
    /// DYON guided by the runtime's CPIO; says which partition DYON settled on.
    #[arg(long)]
    dyon: bool,
    /// DYON's period in milliseconds (with --dyon; the paper warns that a period too short
    /// for the workload's own rhythm, here a heat run of --iters checkpoints, cannot learn).
    #[arg(long, requires = "dyon", default_value_t = 1000)]
    period_ms: u64,
    /// Periods each static partition holds per round (with --dyon).
    #[arg(long, requires = "dyon", default_value_t = 4)]
    hold_periods: usize,
    /// DYON's periods (with --dyon).
    #[arg(long, requires = "dyon", default_value_t = 60)]
    periods: usize,
}

fn run_serve(a: &ServeArgs) -> Result<(), BenchError> {
    use umt_bench::scan::{FileSet, ScanParams};
    use umt_bench::serve::{self, Blocking, ServeParams, Server};
    for (flag, path) in [("--json", &a.json), ("--svg", &a.svg)] {
        if let Some(path) = path {
            umt_bench::io::check_writable(flag, path)?;
        }
    }
    let requests = a.clients.saturating_mul(a.requests);
    if a.clients == 0
        || a.clients > 4096
        || a.requests == 0
        || requests > 100_000_000
        || a.block_us > 60_000_000
        || a.work > 1 << 40
        || a.rounds == 0
        || a.rounds > 1000
        || a.cores.is_some_and(|c| c == 0 || c > 4096)
        || a.cold_files > 1 << 16
        || a.rate.is_some_and(|r| r > 1e7)
    {
        return Err(BenchError::InvalidParam(
            "serve: --clients 1 to 4096, --requests at least 1 and at most 10^8 in all, \
             --block-us at most 60 s, --work at most 2^40, --rounds 1 to 1000, --cores 1 to \
             4096, --cold-files at most 65536, --rate at most 10^7"
                .into(),
        ));
    }
    serve::check_rate(a.rate, requests)?;
    // Before the cold files are made; `serve::run` checks again for its other callers.
    serve::check_clients_first(a.clients_first, a.rate)?;
    let files = if a.cold_files > 0 && a.block_every > 0 {
        let dir = a.dir.clone().unwrap_or_else(std::env::temp_dir);
        if let Some(fs) = memory_filesystem(&dir)
            && !a.allow_memory_dir
        {
            return Err(BenchError::InvalidParam(format!(
                "{} is on {fs}, in memory: a cold read would block on nothing; use a \
                 directory on a disk with --dir, pass --allow-memory-dir, or --cold-files 0",
                dir.display()
            )));
        }
        Some(std::sync::Arc::new(FileSet::create(&ScanParams {
            files: a.cold_files,
            file_mib: 1,
            rounds: 1,
            dir,
        })?))
    } else {
        None
    };
    let cores = a
        .cores
        .unwrap_or_else(|| umt_sys::cpu::process_cpus().map_or(1, |c| c.len()));
    let base = ServeParams {
        clients: a.clients,
        requests: a.requests,
        block_every: a.block_every,
        blocking: Blocking::Sleep(std::time::Duration::from_micros(a.block_us)),
        work: a.work,
        cores,
        rate: a.rate,
        drive_io: !a.no_drive_io,
        handoff: a.handoff,
        clients_first: a.clients_first,
    };
    let mut scenarios = vec![(
        format!("1 in {} blocks {} us", a.block_every, a.block_us),
        base,
    )];
    if files.is_some() {
        scenarios.push((
            format!("1 in {} reads 1 MiB cold", a.block_every),
            ServeParams {
                blocking: Blocking::ColdRead,
                ..base
            },
        ));
    }
    scenarios.push((
        "no blocking".to_string(),
        ServeParams {
            block_every: 0,
            ..base
        },
    ));
    let mut table = Vec::new();
    for (name, p) in &scenarios {
        let mut runs: Vec<Vec<serve::ServeRun>> = vec![Vec::new(); Server::ALL.len()];
        for _ in 0..a.rounds {
            for (k, s) in Server::ALL.into_iter().enumerate() {
                runs[k].push(serve::run(s, *p, files.as_ref())?);
            }
        }
        // Each figure's own median over the rounds.
        let medians: Vec<serve::ServeRun> = runs
            .into_iter()
            .map(|r| {
                let med = |f: &dyn Fn(&serve::ServeRun) -> f64| {
                    umt_bench::report::median(&r.iter().map(f).collect::<Vec<_>>())
                };
                serve::ServeRun {
                    server: r[0].server,
                    throughput: med(&|x| x.throughput),
                    p50_us: med(&|x| x.p50_us),
                    p99_us: med(&|x| x.p99_us),
                    p999_us: med(&|x| x.p999_us),
                    p99_others_us: med(&|x| x.p99_others_us),
                    p99_late_us: a.rate.map(|_| med(&|x| x.p99_late_us.unwrap_or(f64::NAN))),
                    monitor: r[0].monitor.clone(),
                }
            })
            .collect();
        table.push(serve::ServeScenario {
            scenario: name.clone(),
            params: *p,
            runs: medians,
        });
    }
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&table)
            .map_err(|e| BenchError::InvalidParam(format!("JSON: {e}")))?;
        umt_bench::io::write_atomically(path, text.as_bytes())?;
    }
    if let Some(path) = &a.svg {
        umt_bench::plot::serve(&table, path)?;
        umt_bench::note!("wrote {}", path.display());
    }
    say!(
        "{} clients x {} requests, {} rounds of hash per request, {cores} worker threads \
         per server, loopback, {}",
        a.clients,
        a.requests,
        a.work,
        match a.rate {
            Some(r) => format!("open loop at {r} requests/s (latency from when each was due)"),
            None if a.clients_first => format!(
                "closed loop, clients first (nice {})",
                serve::CLIENTS_FIRST_NICE
            ),
            None => "closed loop".to_string(),
        }
    );
    // Which monitor umt ran with: without clang (Bpf) or root, silently Perf otherwise.
    if let Some(m) = table
        .iter()
        .flat_map(|sc| &sc.runs)
        .find_map(|r| r.monitor.as_deref())
    {
        say!("{}: {m}", Server::UmtMonitor.name());
    }
    // Closed loop: throughput against tokio's; open loop (the same load for every server):
    // p99 against tokio's, and how late the clients sent (the measurement's own error).
    say!(
        "{:<24} {:<24} {:>10} {:>9} {:>9} {:>10} {:>13} {:>12}{}",
        "scenario",
        "server",
        "req/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "p99 others us",
        if a.rate.is_some() {
            "p99/tokio's"
        } else {
            "vs tokio"
        },
        if a.rate.is_some() {
            "  sent late p99 us"
        } else {
            ""
        }
    );
    for sc in &table {
        let tokio = sc.runs.iter().find(|r| r.server == Server::Tokio);
        for r in &sc.runs {
            let (ratio, late) = match r.p99_late_us {
                Some(late) => (
                    r.p99_us / tokio.map_or(f64::NAN, |t| t.p99_us),
                    format!(" {late:>17.0}"),
                ),
                None => (
                    r.throughput / tokio.map_or(f64::NAN, |t| t.throughput),
                    String::new(),
                ),
            };
            say!(
                "{:<24} {:<24} {:>10.0} {:>9.0} {:>9.0} {:>10.0} {:>13.0} {:>11.2}x{}",
                sc.scenario,
                r.server.name(),
                r.throughput,
                r.p50_us,
                r.p99_us,
                r.p999_us,
                r.p99_others_us,
                ratio,
                late
            );
        }
    }
    Ok(())
}

fn run_onload(a: &OnloadArgs) -> Result<(), BenchError> {
    let (dir, io) = checkpoint_io(a.dir.clone(), a.buffered, a.allow_memory_dir)?;
    let p = HeatParams {
        n: a.size,
        block: a.block,
        iters: a.iters,
        iof: Some(1),
        io,
        dir,
    };
    p.validate()?;
    check_memory(
        &format!("onload --size {}", p.n),
        p.memory_bytes().unwrap_or(u64::MAX),
    )?;
    if let Some(path) = &a.json {
        check_writable("--json", path)?;
    }
    let rt = std::sync::Arc::new(
        umt_rt::Runtime::builder()
            .build()
            .map_err(|e| BenchError::Runtime(e.to_string()))?,
    );
    if a.dyon {
        return run_dyon(a, &rt, &p);
    }
    let (cost, ways) = umt_bench::service::compare(&rt, &p, a.rounds.unwrap_or(7), a.offer_every)?;
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&ways)
            .map_err(|e| BenchError::InvalidParam(format!("JSON: {e}")))?;
        write_atomically(path, text.as_bytes())?;
    }
    say!(
        "heat {}^2, {} iterations, a checkpoint each ({:?}), umt-rt on {} cores ({}); a chunk \
         compresses in {:.1} ms, one offered every {:.1} ms",
        p.n,
        p.iters,
        p.io,
        rt.cpus().len(),
        rt.backend(),
        cost.as_secs_f64() * 1e3,
        cost.as_secs_f64() * 1e3 * a.offer_every
    );
    say!(
        "{:<8} {:>10} {:>9} {:>8} {:>8} {:>9}",
        "service",
        "heat s",
        "vs none",
        "offered",
        "done",
        "rejected"
    );
    for w in &ways {
        say!(
            "{:<8} {:>10.3} {:>8.3}x {:>8} {:>8} {:>9}",
            format!("{:?}", w.way).to_lowercase(),
            w.heat_seconds,
            w.slowdown,
            w.offered,
            w.done,
            w.rejected
        );
    }
    Ok(())
}

fn run_dyon(
    a: &OnloadArgs,
    rt: &std::sync::Arc<umt_rt::Runtime>,
    p: &HeatParams,
) -> Result<(), BenchError> {
    let r = umt_bench::service::dyon(
        rt,
        p,
        a.rounds.unwrap_or(3),
        a.offer_every,
        std::time::Duration::from_millis(a.period_ms),
        a.hold_periods,
        a.periods,
    )?;
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&r)
            .map_err(|e| BenchError::InvalidParam(format!("JSON: {e}")))?;
        write_atomically(path, text.as_bytes())?;
    }
    say!(
        "heat {}^2 ({:?}) and the archiving service onloaded beside it, umt-rt on {} cores \
         ({}); each static partition held {} periods of {} ms, {} rounds (every other one in \
         reverse); DYON (the runtime's CPIO) for {} periods",
        p.n,
        p.io,
        rt.cpus().len(),
        rt.backend(),
        r.hold_periods,
        a.period_ms,
        r.rounds,
        r.periods
    );
    if p.io == umt_bench::io::IoMode::Buffered {
        say!(
            "(buffered: a page rewritten while still dirty counts as I/O once, so CPIO follows \
             the writeback timers as well as the work; direct I/O counts every write)"
        );
    }
    say!(
        "{:<10} {:>9} {:>19} {:>12} {:>9} {:>9} {:>6}",
        "partition",
        "CPIO us",
        "rounds min-max",
        "heat iter/s",
        "chunks/s",
        "rejected",
        "DYON"
    );
    let cores = rt.cpus().len().max(1);
    let total_pulls: u64 = r.pulls.iter().sum();
    for (arm, f) in r.sweep.iter().enumerate() {
        let lo = f.cpio_us_runs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = f.cpio_us_runs.iter().copied().fold(0.0, f64::max);
        say!(
            "{:<10} {:>9.3} {:>19} {:>12.2} {:>9.1} {:>8.0}% {:>6}",
            format!("{} %", arm * 100 / cores),
            f.cpio_us,
            format!("{lo:.3}-{hi:.3}"),
            f.heat_iters_per_s,
            f.chunks_per_s,
            100.0 * f.rejected as f64 / f.offered.max(1) as f64,
            r.pulls.get(arm).copied().unwrap_or(0)
        );
    }
    say!(
        "{:<10} {:>9.3} {:>19} {:>12.2} {:>9.1} {:>8.0}% {:>6}",
        "DYON",
        r.dyon.cpio_us,
        "",
        r.dyon.heat_iters_per_s,
        r.dyon.chunks_per_s,
        100.0 * r.dyon.rejected as f64 / r.dyon.offered.max(1) as f64,
        total_pulls
    );
    let per_period = r
        .sweep
        .iter()
        .map(|f| f.heat_iters_per_s)
        .fold(f64::INFINITY, f64::min)
        * r.period_seconds;
    say!(
        "a period holds about {per_period:.1} heat iterations (a checkpoint each){}",
        if per_period < 4.0 {
            ": few, so each period's CPIO depends on how many checkpoints it caught; the \
             paper warns that such a period cannot learn (a longer --period-ms, or a smaller \
             --size)"
        } else {
            ""
        }
    );
    say!(
        "best static partition {} %; DYON settled on {} %, where it held most ({} of {} judged \
         periods; {:.0} % on the best): its static CPIO {:.3}x the best's, {} (tolerance {:.2}x); DYON's own \
         CPIO {:.3}x the best static{}",
        r.best_arm * 100 / cores,
        r.chosen_arm * 100 / cores,
        r.pulls.get(r.chosen_arm).copied().unwrap_or(0),
        total_pulls,
        100.0 * r.share_on_best,
        r.chosen_over_best,
        if r.converged {
            "converged"
        } else if total_pulls == 0 {
            "NOT converged: no period was judged (too few periods?)"
        } else {
            "NOT converged"
        },
        r.tolerance,
        r.dyon_over_best,
        if r.inconclusive {
            "; inconclusive: every static partition is within the tolerance of the best"
        } else {
            ""
        }
    );
    Ok(())
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
    /// How the leaders of umt-perf and umt-kernel run: idle, normal or poll (default: the
    /// library's for the backend, poll for perf and idle for kernel; see
    /// umt_rt::LeaderPolicy::default_for).
    #[arg(long)]
    leader: Option<LeaderPolicy>,
    /// umt-rt runners with a monitor: a worker yields its core at scheduling points while an
    /// active worker of the core is not ready (umt_rt::Builder::handoff).
    #[arg(long)]
    handoff: bool,
    /// umt-rt runners with live counts (umt-bpf, umt-kernel idle-only): leaders do not lend
    /// runnable workers of an oversubscribed core to a starved one
    /// (umt_rt::Builder::lend_workers(false)), to measure what lending gives.
    #[arg(long)]
    no_lending: bool,
    /// umt-rt runners with a monitor: a leader runs the queued tasks of its starved core
    /// itself (umt_rt::Builder::leader_runs_tasks).
    #[arg(long)]
    leader_runs_tasks: bool,
    /// umt-rt runners with a monitor: the most workers a core may have, spares included
    /// (umt_rt::Builder::max_workers_per_core; default: the library's, 16, or with Bpf and
    /// the patched kernel 256 shared among the cores, 16 to 63 each)
    #[arg(long)]
    max_workers_per_core: Option<usize>,
    /// umt-rt runners with a monitor: the most spare workers active at once over all cores
    /// (umt_rt::Runtime::set_max_spares; default: unlimited)
    #[arg(long)]
    max_spares: Option<usize>,
    /// umt-rt runners with a monitor: heat writes each checkpoint block from a staged copy,
    /// as io-uring does, instead of in place from the grid.
    #[arg(long)]
    staged_checkpoints: bool,
    /// With heat's or fwi's --mpi, umt-rt runners with a monitor receive halos with MPI_Recv,
    /// which Open MPI busy-polls (the monitor sees no block), instead of MPI_Test and a sleep
    /// between tests.
    #[arg(long)]
    busy_mpi_recv: bool,
    /// Run on the first N CPUs of this process's affinity mask (default: all of them).
    #[arg(long)]
    cores: Option<usize>,
    /// Accept a --dir on a memory-backed filesystem (tmpfs, ramfs): its I/O is a memory
    /// copy, so the comparison shows no overlap of computation with a device.
    #[arg(long)]
    allow_memory_dir: bool,
    /// Also check every runner's result against the sequential reference, bit for bit.
    #[arg(long)]
    verify: bool,
    /// Trace the umt-rt runtimes and write, per workload and runtime, an SVG timeline of
    /// every core (`WORKLOAD-RUNTIME.svg`: the state of each core over time) and a
    /// Chrome trace (`WORKLOAD-RUNTIME.json`, for https://ui.perfetto.dev) of its last repeat
    /// into this directory (with heat's or fwi's --mpi, each rank its own: `WORKLOAD-RUNTIME-rankN.*`; with
    /// scale, each core count its own: `WORKLOAD-RUNTIME-Ncores.*`).
    #[arg(long, value_name = "DIR")]
    timeline: Option<PathBuf>,
    /// Draw the speedup over baseline and the % of the tight bound of every runtime, side by
    /// side, into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

#[derive(Args, Clone)]
struct HeatArgs {
    /// Matrix side, in cells.
    #[arg(long, default_value_t = 4096)]
    size: usize,
    /// Block side, in cells (must divide --size).
    #[arg(long, default_value_t = 512)]
    block: usize,
    /// Iterations (default: 10 checkpoint periods).
    #[arg(long)]
    iters: Option<usize>,
    /// Checkpoint every this many iterations (default: calibrated, so that computing a
    /// period takes about as long as writing its checkpoint on this machine).
    #[arg(long)]
    iof: Option<usize>,
    /// Run across the ranks of `mpirun -np N umt-bench heat --mpi ...`: each rank a band of
    /// block rows on its own cores, halo rows as MPI messages; rank 0 prints the table. Every
    /// runtime but tokio (umt-io's messages wait through umt_rt::io); --iof defaults to 2
    /// and --iters to 20 (no calibration). Needs a build with `--features mpi`.
    #[arg(long)]
    mpi: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Clone)]
struct ScanArgs {
    /// Files.
    #[arg(long, default_value_t = 400)]
    files: usize,
    /// Size of each file, in MiB.
    #[arg(long, default_value_t = 4)]
    file_mib: usize,
    /// Hash rounds per 8-byte word (default: calibrated, so that hashing on every core takes
    /// about as long as reading the files cold).
    #[arg(long)]
    rounds: Option<u32>,
    /// The program's front ends: iter (a parallel loop over the files), tasks (a task per
    /// file), or both.
    #[arg(long, default_value = "both", value_parser = ["iter", "tasks", "both"])]
    front: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Clone)]
struct ScaleArgs {
    /// Directory for scale.json, scale.md and scale.svg (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Core counts, comma-separated (default: 1, 2, 4, ... and all of the affinity mask).
    #[arg(long, value_delimiter = ',')]
    cores_list: Vec<usize>,
    /// Workloads, comma-separated: heat, fwi, scan (default: all three).
    #[arg(long, value_delimiter = ',', value_parser = ["heat", "fwi", "scan"])]
    workloads: Vec<String>,
    /// Heat's matrix side.
    #[arg(long, default_value_t = 4096)]
    size: usize,
    /// Heat's block side.
    #[arg(long, default_value_t = 512)]
    block: usize,
    /// FWI's cells along Z.
    #[arg(long, default_value_t = 256)]
    nz: usize,
    /// FWI's cells along X.
    #[arg(long, default_value_t = 256)]
    nx: usize,
    /// FWI's Y-slices.
    #[arg(long, default_value_t = 64)]
    ny: usize,
    /// Heat's and FWI's period, in steps (default: each calibrated on every core).
    #[arg(long)]
    iof: Option<usize>,
    /// Heat's iterations (default: 10 periods).
    #[arg(long)]
    iters: Option<usize>,
    /// FWI's steps (default: 10 periods).
    #[arg(long)]
    steps: Option<usize>,
    /// Scan's files.
    #[arg(long, default_value_t = 400)]
    files: usize,
    /// Scan's MiB per file.
    #[arg(long, default_value_t = 4)]
    file_mib: usize,
    /// Scan's hash rounds per word (default: calibrated at the first core count).
    #[arg(long)]
    rounds: Option<u32>,
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
    /// Time steps of each phase (forward and backward; default: 10 snapshot periods).
    #[arg(long)]
    steps: Option<usize>,
    /// Snapshot every this many steps (default: calibrated, so that computing a period takes
    /// about as long as writing and reading back its snapshot on this machine).
    #[arg(long)]
    iof: Option<usize>,
    /// Run across the ranks of `mpirun -np N umt-bench fwi --mpi ...`: each rank a slab of
    /// Y-slices on its own cores, the 4 slices next to each face as MPI messages before every
    /// half step; rank 0 prints the table. Every runtime but tokio (umt-io's messages and
    /// snapshots wait through umt_rt::io); --iof defaults to 2 and --steps to 20 (no
    /// calibration). Needs a build with `--features mpi`.
    #[arg(long)]
    mpi: bool,
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
            umt: UmtOptions {
                leader: self.leader,
                handoff: self.handoff,
                lend_workers: !self.no_lending,
                leader_runs_tasks: self.leader_runs_tasks,
                max_workers_per_core: self.max_workers_per_core,
                max_spares: self.max_spares,
                staged_checkpoints: self.staged_checkpoints,
                trace: self.timeline.is_some(),
                busy_mpi_recv: self.busy_mpi_recv,
            },
            progress: true,
            verify: self.verify,
        })
    }

    /// The checkpoint directory and how to write there. A directory in memory is refused
    /// unless asked for: since Linux 6.6 tmpfs accepts O_DIRECT, and its I/O is a memcpy.
    fn io(&self) -> Result<(PathBuf, IoMode), BenchError> {
        checkpoint_io(self.dir.clone(), self.buffered, self.allow_memory_dir)
    }

    /// Checks what can be checked before any run: the repeat count, and that the outputs can
    /// be written at the end (`--json` and `--plot` files are not touched now: a refused run
    /// leaves an earlier run's results as they were; the `--timeline` directory is made).
    fn check(&self) -> Result<(), BenchError> {
        if self.repeat == 0 {
            return Err(BenchError::InvalidParam(
                "--repeat must be at least 1: each runner runs that many times".into(),
            ));
        }
        if let Some(path) = &self.json {
            check_writable("--json", path)?;
        }
        if let Some(path) = &self.plot {
            check_writable("--plot", path)?;
        }
        if let Some(dir) = &self.timeline {
            std::fs::create_dir_all(dir)
                .map_err(|e| BenchError::io("--timeline: creating", dir, e))?;
            check_writable("--timeline", &dir.join("check"))?;
        }
        Ok(())
    }
}

/// The checkpoint directory (default: the temporary one) and how to write there. A directory
/// in memory is refused unless allowed: since Linux 6.6 tmpfs accepts O_DIRECT, and its I/O
/// is a memcpy.
fn checkpoint_io(
    dir: Option<PathBuf>,
    buffered: bool,
    allow_memory_dir: bool,
) -> Result<(PathBuf, IoMode), BenchError> {
    let dir = dir.unwrap_or_else(std::env::temp_dir);
    if let Some(fs) = memory_filesystem(&dir)
        && !allow_memory_dir
    {
        return Err(BenchError::InvalidParam(format!(
            "{} is on {fs}, in memory: its I/O would be a memory copy and the comparison \
             would show no I/O to overlap; use a directory on a disk with --dir, or pass \
             --allow-memory-dir",
            dir.display()
        )));
    }
    if buffered {
        return Ok((dir, IoMode::Buffered));
    }
    probe_direct(&dir)?;
    Ok((dir, IoMode::Direct))
}

/// The period and the length of a run: as given, else calibrated (and said on stderr).
fn period_and_length(
    iof: Option<usize>,
    steps: Option<usize>,
    calibrate: impl FnOnce() -> Result<Calibration, BenchError>,
) -> Result<(usize, usize), BenchError> {
    let iof = match iof {
        Some(iof) => iof,
        None => {
            let c = calibrate()?;
            umt_bench::note!("{c}");
            match steps {
                // An explicit length bounds what calibration picks: the same command must
                // not run on one machine state and refuse on another (issue 30, item 7).
                Some(steps) if c.iof > steps => {
                    umt_bench::note!(
                        "(a period of {} steps is longer than the {steps} asked for: one period \
                         of {steps})",
                        c.iof
                    );
                    steps.max(1)
                }
                _ => c.iof,
            }
        }
    };
    Ok((iof, steps.unwrap_or(iof.saturating_mul(calibrate::PERIODS))))
}

fn run_heat(a: &HeatArgs) -> Result<Report, BenchError> {
    let opts = a.common.options()?;
    let (dir, io) = a.common.io()?;
    let mut p = HeatParams {
        n: a.size,
        block: a.block,
        // Checked now as far as given; the period and the length may be calibrated below.
        iters: a.iters.unwrap_or(a.iof.unwrap_or(1).max(1)),
        iof: a.iof,
        io,
        dir,
    };
    p.validate()?;
    // Before calibration, which allocates the grid too.
    check_memory(
        &format!("heat --size {}", p.n),
        p.memory_bytes().unwrap_or(u64::MAX),
    )?;
    let (iof, iters) = period_and_length(a.iof, a.iters, || calibrate::heat(&p))?;
    p.iof = Some(iof);
    p.iters = iters;
    p.validate()?;
    compare::heat(&p, &opts)
}

/// `heat --mpi`: the comparison across MPI ranks (`umt_bench::dist`).
#[cfg(feature = "mpi")]
fn run_heat_mpi(a: &HeatArgs) -> Result<(), BenchError> {
    use umt_bench::dist::{Cluster, heat};
    let cluster = Cluster::init()?;
    let (dir, io) = a.common.io()?;
    let iof = a.iof.unwrap_or(2);
    let p = HeatParams {
        n: a.size,
        block: a.block,
        iters: a.iters.unwrap_or(10 * iof),
        iof: Some(iof),
        io,
        dir,
    };
    p.validate()?;
    let runners = mpi_runners(&a.common);
    let runs = heat::compare(
        &cluster,
        &p,
        &a.common.runs("heat", &runners)?,
        a.common.verify,
    );
    print_or_abort(&cluster, runs, |runs| {
        heat::table(&p, cluster.size() as usize, runs)
    });
    Ok(())
}

/// `fwi --mpi`: the comparison across MPI ranks (`umt_bench::dist::fwi`).
#[cfg(feature = "mpi")]
fn run_fwi_mpi(a: &FwiArgs) -> Result<(), BenchError> {
    use umt_bench::dist::{Cluster, fwi};
    let cluster = Cluster::init()?;
    let (dir, io) = a.common.io()?;
    let iof = a.iof.unwrap_or(2);
    let p = FwiParams {
        nz: a.nz,
        nx: a.nx,
        ny: a.ny,
        steps: a.steps.unwrap_or(10 * iof),
        iof,
        io,
        dir,
    };
    let runners = mpi_runners(&a.common);
    let runs = fwi::compare(
        &cluster,
        &p,
        &a.common.runs("fwi", &runners)?,
        a.common.verify,
    );
    print_or_abort(&cluster, runs, |runs| {
        fwi::table(&p, cluster.size() as usize, runs)
    });
    Ok(())
}

#[cfg(feature = "mpi")]
impl Common {
    /// What `--mpi` runs of `workload`: `runners`, the repeats, the umt-rt options, the
    /// timeline directory.
    fn runs<'a>(
        &'a self,
        workload: &'static str,
        runners: &'a [Runner],
    ) -> Result<umt_bench::dist::Runs<'a>, BenchError> {
        Ok(umt_bench::dist::Runs {
            workload,
            runners,
            repeat: self.repeat,
            umt: self.options()?.umt,
            timeline: self.timeline.as_deref(),
        })
    }
}

/// The runners asked for, or every runner that can run across ranks here.
#[cfg(feature = "mpi")]
fn mpi_runners(common: &Common) -> Vec<Runner> {
    if common.runtimes.is_empty() {
        Runner::ALL
            .into_iter()
            .filter(|&r| r.port().comm().is_some() && r.available().is_ok())
            .collect()
    } else {
        common.runtimes.clone()
    }
}

/// Rank 0 prints the table; on an error, every rank is stopped.
#[cfg(feature = "mpi")]
fn print_or_abort(
    cluster: &umt_bench::dist::Cluster,
    runs: Result<Option<Vec<umt_bench::dist::RankedRun>>, BenchError>,
    table: impl FnOnce(&[umt_bench::dist::RankedRun]) -> String,
) {
    match runs {
        Ok(Some(runs)) => {
            if let Err(e) = umt_bench::io::say(format_args!("{}", table(&runs))) {
                umt_bench::note!("umt-bench: {e}");
            }
        }
        Ok(None) => {}
        // The other ranks may wait for this one in a message or a barrier: stop them all
        // rather than leave them (and MPI_Finalize here) waiting forever.
        Err(e) => {
            umt_bench::note!("umt-bench: rank {}: {e}", cluster.rank());
            cluster.abort(2);
        }
    }
}

#[cfg(not(feature = "mpi"))]
fn run_heat_mpi(_: &HeatArgs) -> Result<(), BenchError> {
    Err(no_mpi())
}

#[cfg(not(feature = "mpi"))]
fn run_fwi_mpi(_: &FwiArgs) -> Result<(), BenchError> {
    Err(no_mpi())
}

#[cfg(not(feature = "mpi"))]
fn no_mpi() -> BenchError {
    BenchError::InvalidParam(
        "this umt-bench was built without MPI: build it with `cargo build --release -p \
         umt-bench --features mpi` (needs an MPI, e.g. Debian's libopenmpi-dev and \
         openmpi-bin, and libclang-dev) and run it under mpirun"
            .into(),
    )
}

fn run_fwi(a: &FwiArgs) -> Result<Report, BenchError> {
    let opts = a.common.options()?;
    let (dir, io) = a.common.io()?;
    let mut p = FwiParams {
        nz: a.nz,
        nx: a.nx,
        ny: a.ny,
        // Checked now as far as given; the period and the length may be calibrated below.
        steps: a.steps.unwrap_or(a.iof.unwrap_or(1).max(1)),
        iof: a.iof.unwrap_or(1),
        io,
        dir,
    };
    p.validate()?;
    let what = format!("fwi --nz {} --nx {} --ny {}", p.nz, p.nx, p.ny);
    check_memory(&what, p.memory_bytes().unwrap_or(u64::MAX))?;
    let (iof, steps) = period_and_length(a.iof, a.steps, || calibrate::fwi(&p))?;
    p.iof = iof;
    p.steps = steps;
    p.validate()?;
    compare::fwi(&p, &opts)
}

fn run_scan(a: &ScanArgs) -> Result<Vec<Report>, BenchError> {
    use umt_bench::scan::{self, FileSet, Front, ScanParams};
    let opts = a.common.options()?;
    let dir = a.common.dir.clone().unwrap_or_else(std::env::temp_dir);
    if let Some(fs) = memory_filesystem(&dir)
        && !a.common.allow_memory_dir
    {
        return Err(BenchError::InvalidParam(format!(
            "{} is on {fs}, in memory: the scan would read no device; use a directory on a \
             disk with --dir, or pass --allow-memory-dir",
            dir.display()
        )));
    }
    let mut p = ScanParams {
        files: a.files,
        file_mib: a.file_mib,
        rounds: a.rounds.unwrap_or(1),
        dir,
    };
    p.validate()?;
    let fronts: &[Front] = match a.front.as_str() {
        "iter" => &[Front::Iter],
        "tasks" => &[Front::Tasks],
        _ => &[Front::Iter, Front::Tasks],
    };
    let set = FileSet::create(&p)?;
    if a.rounds.is_none() {
        let (rounds, io) = scan::calibrate(&set, &p)?;
        p.rounds = rounds;
        umt_bench::note!(
            "scan: calibrated: {} files of {} MiB read cold in {:.3} s: --rounds {rounds}",
            p.files,
            p.file_mib,
            io.as_secs_f64()
        );
    }
    fronts
        .iter()
        .map(|&front| compare::scan(&p, &set, front, &opts))
        .collect()
}

/// The cores sweep. The periods (heat, FWI) and the hash rounds (scan) are calibrated once,
/// on every core, and kept at every core count: each column is the same problem.
fn run_scale(a: &ScaleArgs) -> Result<(), BenchError> {
    use umt_bench::scale::{self, ScalePoint};
    let cpus = umt_sys::cpu::process_cpus()
        .map_err(|e| BenchError::InvalidParam(format!("the affinity mask: {e}")))?;
    let counts = if a.cores_list.is_empty() {
        scale::core_counts(cpus.len())
    } else {
        scale::check_counts(a.cores_list.clone(), cpus.len()).map_err(BenchError::InvalidParam)?
    };
    scale_refuses(&a.common)?;
    let all = ["heat", "fwi", "scan"];
    let wanted = |w: &str| a.workloads.is_empty() || a.workloads.iter().any(|x| x == w);
    std::fs::create_dir_all(&a.out).map_err(|e| BenchError::io("creating", &a.out, e))?;
    // Calibrated on every core, once.
    let mut heat: HeatArgs = defaults(&a.common, |h: &mut HeatArgs, c| h.common = c);
    (heat.size, heat.block, heat.iof, heat.iters) = (a.size, a.block, a.iof, a.iters);
    let mut fwi: FwiArgs = defaults(&a.common, |f: &mut FwiArgs, c| f.common = c);
    (fwi.nz, fwi.nx, fwi.ny, fwi.iof, fwi.steps) = (a.nz, a.nx, a.ny, a.iof, a.steps);
    let mut scan: ScanArgs = defaults(&a.common, |s: &mut ScanArgs, c| s.common = c);
    (scan.files, scan.file_mib, scan.rounds) = (a.files, a.file_mib, a.rounds);
    if wanted("heat") && heat.iof.is_none() {
        let (dir, io) = a.common.io()?;
        let p = HeatParams {
            n: heat.size,
            block: heat.block,
            iters: 1,
            iof: None,
            io,
            dir,
        };
        p.validate()?;
        let (iof, iters) = period_and_length(None, None, || calibrate::heat(&p))?;
        (heat.iof, heat.iters) = (Some(iof), Some(iters));
    }
    if wanted("fwi") && fwi.iof.is_none() {
        let (dir, io) = a.common.io()?;
        let p = FwiParams {
            nz: fwi.nz,
            nx: fwi.nx,
            ny: fwi.ny,
            steps: 1,
            iof: 1,
            io,
            dir,
        };
        p.validate()?;
        let (iof, steps) = period_and_length(None, None, || calibrate::fwi(&p))?;
        (fwi.iof, fwi.steps) = (Some(iof), Some(steps));
    }
    let mut points = Vec::new();
    for &k in &counts {
        umt_sys::cpu::pin_current_thread_to(&cpus[..k])
            .map_err(|e| BenchError::InvalidParam(format!("running on {k} cores: {e}")))?;
        umt_bench::note!("scale: {k} of {} cores", cpus.len());
        let mut reports = Vec::new();
        for w in all.into_iter().filter(|w| wanted(w)) {
            match w {
                "heat" => reports.push(run_heat(&heat)?),
                "fwi" => reports.push(run_fwi(&fwi)?),
                _ => {
                    let r = run_scan(&scan)?;
                    if scan.rounds.is_none() {
                        // Calibrated at the first count; kept for the others.
                        scan.rounds = r
                            .first()
                            .and_then(|r| r.params["rounds"].as_u64())
                            .map(|n| n as u32);
                    }
                    reports.extend(r);
                }
            }
        }
        for r in &reports {
            say!("{k} cores: {}", r.table());
        }
        if let Some(dir) = &a.common.timeline {
            write_timelines(dir, &reports, &format!("-{k}cores"))?;
        }
        points.push(ScalePoint { cores: k, reports });
        // After every count, so a sweep stopped part way (a machine lent for minutes, a
        // Ctrl-C) keeps the counts it finished.
        write_scale(&a.out, &points)?;
    }
    umt_sys::cpu::pin_current_thread_to(&cpus)
        .map_err(|e| BenchError::InvalidParam(format!("restoring the affinity mask: {e}")))?;
    umt_bench::io::say(format_args!("{}", scale::markdown(&points)))?;
    umt_bench::note!(
        "wrote scale.json, scale.md and scale.svg in {}",
        a.out.display()
    );
    Ok(())
}

/// `--json` and `--plot` are the single comparisons' outputs: the sweep writes its own
/// (`scale.json`, `scale.svg`) into `--out`, and took both without writing anything.
fn scale_refuses(common: &Common) -> Result<(), BenchError> {
    let (flag, instead) = if common.json.is_some() {
        ("--json", "scale.json")
    } else if common.plot.is_some() {
        ("--plot", "scale.svg")
    } else {
        return Ok(());
    };
    Err(BenchError::InvalidParam(format!(
        "{flag} does not apply to scale: it writes {instead} into --out; leave {flag} out"
    )))
}

/// Writes the sweep's `points` so far as `scale.json`, `scale.md` and `scale.svg` in `out`,
/// each replaced whole (a reader never sees half a file).
fn write_scale(
    out: &std::path::Path,
    points: &[umt_bench::scale::ScalePoint],
) -> Result<(), BenchError> {
    let text = serde_json::to_string_pretty(points)
        .map_err(|e| BenchError::InvalidParam(format!("JSON: {e}")))?;
    write_atomically(&out.join("scale.json"), text.as_bytes())?;
    let table = umt_bench::scale::markdown(points);
    write_atomically(&out.join("scale.md"), table.as_bytes())?;
    umt_bench::plot::scaling(points, &out.join("scale.svg"))
}

/// Restricts this process, and so every thread it starts from now on, to the first `n`
/// CPUs of its affinity mask.
fn use_cores(n: usize) -> Result<(), BenchError> {
    let cpus = umt_sys::cpu::process_cpus()
        .map_err(|e| BenchError::InvalidParam(format!("--cores: {e}")))?;
    if n == 0 || n > cpus.len() {
        return Err(BenchError::InvalidParam(format!(
            "--cores {n}: this process may run on {} CPUs ({cpus:?}): give 1 to {}",
            cpus.len(),
            cpus.len()
        )));
    }
    umt_sys::cpu::pin_current_thread_to(&cpus[..n])
        .map_err(|e| BenchError::InvalidParam(format!("--cores {n}: {e}")))
}

/// `--json` with `--mpi` is refused before the run: rank 0 prints the table across ranks, and
/// nothing writes it as JSON yet (an empty file was left where the results should be).
/// Refuses the options that only apply across MPI ranks, on a run without `--mpi`.
fn mpi_only(common: &Common) -> Result<(), BenchError> {
    if common.busy_mpi_recv {
        return Err(BenchError::InvalidParam(
            "--busy-mpi-recv applies only with --mpi (heat or fwi across ranks); leave it out"
                .into(),
        ));
    }
    Ok(())
}

fn no_json_with_mpi(common: &Common) -> Result<(), BenchError> {
    match &common.json {
        Some(path) => Err(BenchError::InvalidParam(format!(
            "--json {} with --mpi: the comparison across ranks is printed by rank 0 and not \
             written as JSON; leave --json out and keep the printed table",
            path.display()
        ))),
        None => Ok(()),
    }
}

fn emit(reports: &[Report], common: &Common) -> Result<(), BenchError> {
    let json = common.json.as_ref();
    for r in reports {
        say!("{}", r.table());
    }
    // The JSON first, and whole or not at all: a failing plot or timeline afterwards does
    // not cost the results.
    if let Some(path) = json {
        let value = if reports.len() == 1 {
            serde_json::to_value(&reports[0])
        } else {
            serde_json::to_value(reports)
        }
        .map_err(|e| BenchError::InvalidParam(format!("JSON: {e}")))?;
        let text = serde_json::to_string_pretty(&value)
            .map_err(|e| BenchError::InvalidParam(format!("JSON: {e}")))?;
        write_atomically(path, text.as_bytes())?;
    }
    if let Some(dir) = &common.timeline {
        write_timelines(dir, reports, "")?;
    }
    if let Some(path) = &common.plot {
        umt_bench::plot::comparison(reports, path)?;
        umt_bench::note!("wrote {}", path.display());
    }
    Ok(())
}

/// Writes the timeline (SVG) and Chrome trace of every traced run of `reports` into `dir`, as
/// `WORKLOAD-RUNTIME{suffix}.svg` and `.json`.
fn write_timelines(dir: &Path, reports: &[Report], suffix: &str) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io("creating", dir, e))?;
    for report in reports {
        for run in &report.runs {
            let Some(trace) = &run.trace else { continue };
            let stem = dir.join(format!("{}-{}{suffix}", report.workload, run.runtime));
            let title = format!(
                "{} on {}{suffix}: {:.3} s, per core (last repeat)",
                report.workload, run.runtime, run.median_seconds
            );
            let (svg, chrome) = umt_bench::plot::timeline_files(trace, &title, &stem)?;
            umt_bench::note!("wrote {} and {}", svg.display(), chrome.display());
        }
    }
    Ok(())
}

/// The command's `--dir`.
fn dir_flag(command: &mut Cmd) -> &mut Option<PathBuf> {
    match command {
        Cmd::Heat(a) => &mut a.common.dir,
        Cmd::Fwi(a) => &mut a.common.dir,
        Cmd::Scan(a) => &mut a.common.dir,
        Cmd::Scale(a) => &mut a.common.dir,
        Cmd::Compare(c) => &mut c.dir,
        Cmd::Onload(a) => &mut a.dir,
        Cmd::Serve(a) => &mut a.dir,
    }
}

/// Replaces the command's `--dir` (default: the temporary directory) with a private run
/// directory inside it, after sweeping the ones runs killed there left (`rundir.rs`): every
/// file the run makes goes in it, and it goes at the end.
fn private_dir(command: &mut Cmd) -> Result<RunDir, BenchError> {
    let dir = dir_flag(command);
    let parent = dir.clone().unwrap_or_else(std::env::temp_dir);
    let run = RunDir::create(&parent)?;
    *dir = Some(run.path().to_path_buf());
    Ok(run)
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    let common = match &cli.command {
        Cmd::Heat(a) => Some(&a.common),
        Cmd::Fwi(a) => Some(&a.common),
        Cmd::Scan(a) => Some(&a.common),
        Cmd::Scale(a) => Some(&a.common),
        Cmd::Compare(c) => Some(c),
        Cmd::Onload(_) | Cmd::Serve(_) => None,
    };
    let prepared = common
        .map_or(Ok(()), |c| {
            c.cores.map_or(Ok(()), use_cores).and_then(|()| c.check())
        })
        .and_then(|()| remove_files_on_interrupt());
    // Dropped at the end of `main`, with what is left in it.
    let _run_dir = match prepared.and_then(|()| private_dir(&mut cli.command)) {
        Ok(run) => run,
        Err(e) => {
            umt_bench::note!("umt-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Cmd::Heat(a) if a.mpi => no_json_with_mpi(&a.common).and_then(|()| run_heat_mpi(&a)),
        Cmd::Fwi(a) if a.mpi => no_json_with_mpi(&a.common).and_then(|()| run_fwi_mpi(&a)),
        Cmd::Heat(a) => mpi_only(&a.common)
            .and_then(|()| run_heat(&a))
            .and_then(|r| emit(&[r], &a.common)),
        Cmd::Fwi(a) => mpi_only(&a.common)
            .and_then(|()| run_fwi(&a))
            .and_then(|r| emit(&[r], &a.common)),
        Cmd::Scan(a) => mpi_only(&a.common)
            .and_then(|()| run_scan(&a))
            .and_then(|r| emit(&r, &a.common)),
        Cmd::Scale(a) => run_scale(&a),
        Cmd::Compare(common) => {
            let heat: HeatArgs = defaults(&common, |a: &mut HeatArgs, c| a.common = c);
            let fwi: FwiArgs = defaults(&common, |a: &mut FwiArgs, c| a.common = c);
            let scan: ScanArgs = defaults(&common, |a: &mut ScanArgs, c| a.common = c);
            mpi_only(&common)
                .and_then(|()| run_heat(&heat))
                .and_then(|h| Ok(vec![h, run_fwi(&fwi)?]))
                .and_then(|mut reports| {
                    reports.extend(run_scan(&scan)?);
                    Ok(reports)
                })
                .and_then(|reports| emit(&reports, &common))
        }
        Cmd::Onload(a) => run_onload(&a),
        Cmd::Serve(a) => run_serve(&a),
    };
    match result {
        // `umt-bench ... | head`: the run went on to write its files (--json, --plot); 128 +
        // SIGPIPE, as a shell reports a process the closed pipe ended.
        Ok(()) if umt_bench::io::output_closed() => ExitCode::from(141),
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            umt_bench::note!("umt-bench: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calibrated(iof: usize) -> impl FnOnce() -> Result<Calibration, BenchError> {
        move || {
            Ok(Calibration {
                workload: "heat",
                cores: 2,
                step_seconds: 0.01,
                io_seconds: 0.01 * iof as f64,
                iof,
                steps: iof * calibrate::PERIODS,
            })
        }
    }

    /// A calibrated period longer than an explicit length becomes that length; otherwise the
    /// calibration and the explicit values are kept (issue 30, item 7).
    #[test]
    fn an_explicit_length_bounds_the_calibrated_period() {
        assert_eq!(
            period_and_length(None, Some(2), calibrated(5)).unwrap(),
            (2, 2)
        );
        assert_eq!(
            period_and_length(None, Some(8), calibrated(5)).unwrap(),
            (5, 8)
        );
        assert_eq!(
            period_and_length(None, None, calibrated(5)).unwrap(),
            (5, 5 * calibrate::PERIODS)
        );
        assert_eq!(
            period_and_length(Some(3), Some(2), calibrated(5)).unwrap(),
            (3, 2)
        );
    }
}
