//! Beyond one machine: heat and FWI across MPI ranks (feature `mpi`, through rsmpi and the
//! system's MPI; tested with Open MPI 4.1 from Debian 12's packages).
//!
//! Each rank owns a part of the domain and runs it on its own runtime (a [`RankRunner`]: a
//! umt-rt runtime, or a rayon pool for the peers); on umt-rt the halos travel as tasks with
//! dataflow dependencies: in [`heat`] a band of block rows, one message per block column and
//! direction per iteration, as the public OmpSs-2 heat does; in [`fwi`] a slab of Y-slices,
//! one message per halo slice and direction per half step. How a task waits for its message
//! is the [`Comm`] of the run, how it waits for its file I/O the [`Disk`]:
//! - [`Comm::Blocking`]: `MPI_Recv` in the task. Open MPI busy-polls inside `MPI_Recv` (or
//!   yields, with `OMPI_MCA_mpi_yield_when_idle=1`): the worker stays runnable, so a monitor
//!   sees no block and cannot give its core to other tasks;
//! - [`Comm::Waiting`]: `MPI_Irecv`, then [`umt_rt::io`]'s wait on an [`MpiRequests`]
//!   source: the worker runs other tasks and tests every waiting request of its core with
//!   one `MPI_Testsome` between them, and sleeps only when nothing else can run;
//! - [`Comm::Sleeping`]: `MPI_Irecv`, then `MPI_Test` and a sleep in the kernel between
//!   tests (50 us doubling up to 1 ms): the monitored runtimes' blocking progress mode. The
//!   sleep is a block their monitor sees, so the core's spare runs other tasks meanwhile.
//!   Nothing drives MPI's progress while every waiter sleeps, so a message that takes several
//!   steps (a rendezvous, over the eager limit) may wait up to a nap per step.
//!
//! Whatever the receive, a send copies its data, posts an `MPI_Isend` and returns
//! ([`Link::send`]).
//!
//! ```text
//! cargo build --release -p umt-bench --features mpi
//! mpirun -np 2 target/release/umt-bench heat --mpi --runtimes baseline,umt-perf,umt-io
//! mpirun -np 2 target/release/umt-bench fwi --mpi --runtimes baseline,umt-perf,umt-io
//! ```

pub mod fwi;
pub mod heat;
mod source;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mpi::datatype::Equivalence;
use mpi::traits::Root;

use mpi::topology::{Communicator, SimpleCommunicator};
use umt_rt::io::{EventSource, Source as _};

use crate::error::BenchError;
pub use crate::port::{Comm, RankEngine};
use crate::port::{DiskWait, SLEEP_FIRST, SLEEP_MOST};
use crate::port_uring::Uring;
pub use source::MpiRequests;

/// This process's MPI: the world communicator, initialised for calls from any thread.
pub struct Cluster {
    _universe: mpi::environment::Universe,
    world: SimpleCommunicator,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("rank", &self.rank())
            .field("size", &self.size())
            .finish()
    }
}

impl Cluster {
    /// Initialises MPI with `MPI_THREAD_MULTIPLE` (every worker may communicate). Fails if MPI
    /// was initialised already or offers less.
    pub fn init() -> Result<Cluster, BenchError> {
        let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Multiple)
            .ok_or_else(|| BenchError::Runtime("MPI is initialised already".into()))?;
        if threading != mpi::Threading::Multiple {
            return Err(BenchError::Runtime(format!(
                "this MPI offers {threading:?}, not MPI_THREAD_MULTIPLE, which umt's workers \
                 need: use an MPI built with thread support (Open MPI and MPICH are)"
            )));
        }
        let world = universe.world();
        Ok(Cluster {
            _universe: universe,
            world,
        })
    }

    /// This rank.
    pub fn rank(&self) -> i32 {
        self.world.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> i32 {
        self.world.size()
    }

    /// Ends every rank's process with `code` (`MPI_Abort`): for an error on one rank that
    /// the others would wait for forever.
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }

    /// The world communicator.
    pub fn world(&self) -> &SimpleCommunicator {
        &self.world
    }
}

/// Point-to-point messages of `f64`s on the world communicator, as a run's [`Comm`] says,
/// timing how long tasks spend in them.
pub struct Link {
    world: source::RawComm,
    comm: Comm,
    requests: EventSource<MpiRequests>,
    /// Sends in flight, each with its copy of the data.
    posted: Mutex<Vec<(source::RawRequest, Vec<f64>)>>,
    /// Nanoseconds tasks spent in sends and receives (their waits included).
    in_mpi_ns: AtomicU64,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("comm", &self.comm).finish()
    }
}

impl Link {
    /// A link on `cluster`'s world communicator that waits as `comm` says.
    pub fn new(cluster: &Cluster, comm: Comm) -> Link {
        Link {
            world: source::RawComm::of(&cluster.world),
            comm,
            requests: EventSource::new(MpiRequests),
            posted: Mutex::new(Vec::new()),
            in_mpi_ns: AtomicU64::new(0),
        }
    }

    /// Seconds tasks spent in sends and receives so far.
    pub fn seconds_in_mpi(&self) -> f64 {
        self.in_mpi_ns.load(Ordering::Relaxed) as f64 / 1e9
    }

    fn timed<R>(&self, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.in_mpi_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }

    /// Starts sending `data` to rank `to` with `tag`, from a copy, and returns at once,
    /// whatever the [`Comm`]: a send waited for in its task (a rendezvous, for a message over
    /// MPI's eager limit, completes only once the receiver posted its receive) could wait for
    /// a neighbour that waits for this rank. Sends that completed meanwhile are reaped (their
    /// copies freed) here; the rest complete in [`Link::finish`].
    pub fn send(&self, to: i32, tag: i32, data: &[f64]) {
        self.timed(|| {
            let copy = data.to_vec();
            // SAFETY: the copy moves into `posted` (its heap buffer does not move), which
            // keeps it, unchanged, until its request completed (reaped below or in `finish`).
            let req = unsafe { source::isend(self.world, to, tag, &copy) };
            let mut posted = lock_posted(&self.posted);
            // A completed request is MPI_REQUEST_NULL afterwards: it leaves the list at once.
            posted.retain_mut(|(req, _)| MpiRequests.poll(req).is_none());
            posted.push((req, copy));
        });
    }

    /// Waits, blocking in MPI, until every send still in flight completed (timed).
    pub fn finish(&self) {
        let posted = std::mem::take(&mut *lock_posted(&self.posted));
        self.timed(|| {
            for (mut req, _data) in posted {
                source::wait(&mut req);
            }
        });
    }

    /// Receives exactly `out.len()` values from rank `from` with `tag` into `out`.
    pub fn recv(&self, from: i32, tag: i32, out: &mut [f64]) {
        self.timed(|| match self.comm {
            Comm::Blocking => source::recv(self.world, from, tag, out),
            Comm::Waiting => {
                // SAFETY: as in `send`; `out` is borrowed mutably until the receive completed.
                let req = unsafe { source::irecv(self.world, from, tag, out) };
                self.requests.wait(req);
            }
            Comm::Sleeping => {
                // SAFETY: as in `send`; `out` is borrowed mutably until the receive completed.
                let mut req = unsafe { source::irecv(self.world, from, tag, out) };
                let mut nap = SLEEP_FIRST;
                while MpiRequests.poll(&mut req).is_none() {
                    std::thread::sleep(nap);
                    nap = (nap * 2).min(SLEEP_MOST);
                }
            }
        });
    }
}

fn lock_posted<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Link {
    /// Sends still in flight read their copies: wait for them before the copies go.
    fn drop(&mut self) {
        self.finish();
    }
}

/// What one rank's run produced.
#[derive(Debug)]
pub struct DistRun {
    /// Wall time between the barriers around the run (the slowest rank's time).
    pub elapsed: Duration,
    /// `fwi::checksum` of this rank's share of the result (see each workload).
    pub checksum: u64,
    /// Seconds this rank's tasks spent in sends and receives.
    pub seconds_in_mpi: f64,
}

/// One runner's result across the ranks, as rank 0 reports it.
#[derive(Debug, Clone)]
pub struct RankedRun {
    /// The runner.
    pub runtime: crate::runner::Runner,
    /// How its tasks waited for their messages.
    pub comm: Comm,
    /// Median wall time of the repeats.
    pub median_seconds: f64,
    /// Per rank, the median seconds its tasks spent in sends and receives.
    pub seconds_in_mpi: Vec<f64>,
}

/// How a rank's checkpoint or snapshot I/O waits.
#[derive(Debug, Clone, Copy)]
pub enum Disk<'a> {
    /// `pwrite` / `pread` in the task.
    Blocking,
    /// Through [`umt_rt::io`] (umt-io).
    Waiting,
    /// Submitted to this io_uring, the task returning at once (io-uring).
    Uring(&'a Uring),
}

/// What `--mpi` runs on: a umt-rt runtime or a rayon pool, with its messages and its file
/// I/O waited for as the runner says.
#[derive(Debug, Clone, Copy)]
pub struct RankRunner<'a> {
    /// The engine.
    pub engine: RankEngine<'a>,
    /// How its tasks wait for messages.
    pub comm: Comm,
    /// How its tasks wait for the disk.
    pub disk: Disk<'a>,
}

/// Runs `run` (one run of a workload on this rank) on each of `runners`, `repeat` times,
/// alternating. With `reference` (rank 0: every rank's expected checksum), fails on any run
/// whose gathered checksums differ. Every rank calls it; rank 0 gets the results, the others
/// `None`.
pub fn compare(
    cluster: &Cluster,
    how: &Runs<'_>,
    reference: Option<Vec<u64>>,
    mut run: impl FnMut(&RankRunner<'_>) -> Result<DistRun, BenchError>,
) -> Result<Option<Vec<RankedRun>>, BenchError> {
    let (runners, repeat) = (how.runners, how.repeat);
    let size = cluster.size() as usize;
    let mut times = vec![Vec::new(); runners.len()];
    let mut mpi = vec![vec![Vec::new(); size]; runners.len()];
    let cannot = |r: crate::runner::Runner| {
        BenchError::InvalidParam(format!(
            "{r} cannot run across ranks: use baseline, umt-perf, umt-bpf, umt-kernel, umt-io, \
             io-uring or rayon"
        ))
    };
    // How each runner receives, known before any run.
    let comms = runners
        .iter()
        .map(|&r| r.comm(&how.umt).ok_or_else(|| cannot(r)))
        .collect::<Result<Vec<Comm>, _>>()?;
    for round in 0..repeat {
        for (k, (&r, &comm)) in runners.iter().zip(&comms).enumerate() {
            let built = r.engine_with(&how.umt)?;
            let engine = built.rank().ok_or_else(|| cannot(r))?;
            let mut ring = None;
            let disk = match r.port().disk() {
                DiskWait::Blocking => Disk::Blocking,
                DiskWait::Waiting => Disk::Waiting,
                DiskWait::Uring => Disk::Uring(ring.insert(Uring::new()?)),
            };
            let out = run(&RankRunner { engine, comm, disk })?;
            if round + 1 == repeat
                && let (Some(dir), RankEngine::Tasks(rt)) = (how.timeline, engine)
            {
                write_timeline(dir, how.workload, (r, cluster.rank()), rt, &out)?;
            }
            drop((ring, built));
            let sums = gather(cluster, out.checksum);
            let in_mpi = gather(cluster, out.seconds_in_mpi);
            if let (Some(sums), Some(want)) = (&sums, &reference)
                && sums != want
            {
                return Err(BenchError::Runtime(format!(
                    "{r}: the ranks' checksums {sums:x?} differ from the sequential \
                     reference's {want:x?}"
                )));
            }
            times[k].push(out.elapsed.as_secs_f64());
            if let Some(in_mpi) = in_mpi {
                for (rank, s) in in_mpi.into_iter().enumerate() {
                    mpi[k][rank].push(s);
                }
            }
        }
    }
    if cluster.rank() != 0 {
        return Ok(None);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    Ok(Some(
        runners
            .iter()
            .zip(comms)
            .zip(times.into_iter().zip(mpi))
            .map(|((&runtime, comm), (t, m))| RankedRun {
                runtime,
                comm,
                median_seconds: median(t),
                seconds_in_mpi: m.into_iter().map(median).collect(),
            })
            .collect(),
    ))
}

/// What [`compare`] runs, and how.
#[derive(Debug, Clone)]
pub struct Runs<'a> {
    /// The workload's name, for titles and file names (`heat`, `fwi`).
    pub workload: &'static str,
    /// The runners, in table order.
    pub runners: &'a [crate::runner::Runner],
    /// Runs of each (alternating).
    pub repeat: usize,
    /// Options of the umt-rt runtimes (with `trace` set when `timeline` is).
    pub umt: crate::runner::UmtOptions,
    /// Where each rank writes, for the last repeat of each umt-rt runner, the timeline of its
    /// cores (`WORKLOAD-RUNTIME-rankN.svg`) and its Chrome trace (`.json`).
    pub timeline: Option<&'a std::path::Path>,
}

/// This rank's timeline and trace of `rt`'s last run, if it was traced.
fn write_timeline(
    dir: &std::path::Path,
    workload: &str,
    (runner, rank): (crate::runner::Runner, i32),
    rt: &umt_rt::Runtime,
    out: &DistRun,
) -> Result<(), BenchError> {
    let Some(trace) = rt.take_trace() else {
        return Ok(());
    };
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io("creating", dir, e))?;
    let stem = dir.join(format!("{workload}-{runner}-rank{rank}"));
    let title = format!(
        "{workload} on {runner}, rank {rank}: {:.3} s, per core (last repeat)",
        out.elapsed.as_secs_f64()
    );
    let (svg, chrome) = crate::plot::timeline_files(&trace, &title, &stem)?;
    crate::note!(
        "rank {rank}: wrote {} and {}",
        svg.display(),
        chrome.display()
    );
    Ok(())
}

/// Gathers one value per rank at rank 0 (`None` on the other ranks).
pub fn gather<T: Equivalence + Default + Clone>(cluster: &Cluster, mine: T) -> Option<Vec<T>> {
    let root = cluster.world().process_at_rank(0);
    if cluster.rank() == 0 {
        let mut all = vec![T::default(); cluster.size() as usize];
        root.gather_into_root(&mine, &mut all[..]);
        Some(all)
    } else {
        root.gather_into(&mine);
        None
    }
}

/// The table rank 0 prints: `title`, then a line per runner (median seconds, speedup over
/// the first, how it received, seconds in MPI per rank).
pub fn table(title: &str, runs: &[RankedRun]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "{title}");
    let _ = writeln!(
        s,
        "{:<10} {:>9} {:>8}  {:<10}  seconds in sends and receives per rank (waits included: \
         a sleeping or umt-io wait lets other tasks run meanwhile)",
        "runtime", "median s", "speedup", "receives"
    );
    let base = runs.first().map_or(0.0, |r| r.median_seconds);
    for r in runs {
        let per_rank: Vec<String> = r.seconds_in_mpi.iter().map(|s| format!("{s:.3}")).collect();
        let _ = writeln!(
            s,
            "{:<10} {:>9.3} {:>7.2}x  {:<10}  {}",
            r.runtime.name(),
            r.median_seconds,
            if r.median_seconds > 0.0 {
                base / r.median_seconds
            } else {
                0.0
            },
            r.comm.name(),
            per_rank.join(" ")
        );
    }
    s
}
