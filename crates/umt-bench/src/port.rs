//! What a runtime adapter (a *port*) provides: whether this machine can run it, a runtime
//! built for one run, each workload on that runtime, and how its tasks wait across MPI ranks.
//!
//! A runtime to compare is a type that implements [`Port`] and [`Engine`], in its own file,
//! and one row of the runners' table ([`crate::runner::Runner::ALL`]). Nothing else matches
//! on the runners: every caller (the comparison, the timed run, the runs across ranks) asks
//! the port.

use std::fmt;

use umt_rt::{BackendKind, LeaderPolicy, Runtime};

use crate::error::BenchError;
use crate::fwi::{FwiParams, FwiRun};
use crate::heat::{HeatParams, HeatRun};
use crate::scan::{FileSet, Front, ScanParams, ScanRun};

/// A runtime to compare, as a row of the runners' table names it.
pub trait Port: fmt::Debug + Sync {
    /// Its name on the command line and in reports (one row per name).
    fn name(&self) -> &'static str;

    /// `Err(reason and fix)` when this machine cannot run it (`Ok` unless it says otherwise).
    fn available(&self) -> Result<(), String> {
        Ok(())
    }

    /// A fresh runtime for one run, sized to the cores of this process ([`cores`]); `umt`
    /// says how umt-rt runtimes run, and the others ignore it.
    fn engine(&self, umt: &UmtOptions) -> Result<Box<dyn Engine>, BenchError>;

    /// The monitor its umt-rt runtime asks for; `None` when it runs without one (the default).
    /// A run of a monitored runner whose workers were not all monitored is an error.
    fn monitor(&self) -> Option<BackendKind> {
        None
    }

    /// How its tasks wait for messages across MPI ranks; `None` (the default) when it cannot
    /// run across ranks.
    fn comm(&self) -> Option<Comm> {
        None
    }

    /// How its tasks wait for the disk across MPI ranks (blocking, unless it says otherwise).
    fn disk(&self) -> DiskWait {
        DiskWait::Blocking
    }
}

/// A runtime built for one run: every workload on it. Dropping it stops the runtime.
pub trait Engine: fmt::Debug {
    /// Heat diffusion with checkpoints (the full workload of a run). With
    /// `umt.staged_checkpoints`, a umt-rt runtime with a monitor writes staged copies.
    fn heat(&self, p: &HeatParams, umt: &UmtOptions) -> Result<HeatRun, BenchError>;

    /// The FWI mock-up (the full workload of a run).
    fn fwi(&self, p: &FwiParams) -> Result<FwiRun, BenchError>;

    /// One scan of `set` written as `front`; the files are dropped from the page cache
    /// first, outside the timed part ([`crate::scan::timed`]).
    fn scan(&self, set: &FileSet, p: &ScanParams, front: Front) -> Result<ScanRun, BenchError>;

    /// Its umt-rt runtime, if it has one (`None` by default): a timed run reads its
    /// statistics and trace, and the bound runs run on it.
    fn runtime(&self) -> Option<&Runtime> {
        None
    }

    /// What a rank's workload runs on across MPI ranks: by default its umt-rt runtime's
    /// tasks, and nothing without one.
    fn rank(&self) -> Option<RankEngine<'_>> {
        self.runtime().map(RankEngine::Tasks)
    }
}

/// A boxed engine (what [`Port::engine`] returns) is an engine: every method, the provided
/// ones included, is the boxed engine's.
impl<E: Engine + ?Sized> Engine for Box<E> {
    fn heat(&self, p: &HeatParams, umt: &UmtOptions) -> Result<HeatRun, BenchError> {
        (**self).heat(p, umt)
    }

    fn fwi(&self, p: &FwiParams) -> Result<FwiRun, BenchError> {
        (**self).fwi(p)
    }

    fn scan(&self, set: &FileSet, p: &ScanParams, front: Front) -> Result<ScanRun, BenchError> {
        (**self).scan(set, p, front)
    }

    fn runtime(&self) -> Option<&Runtime> {
        (**self).runtime()
    }

    fn rank(&self) -> Option<RankEngine<'_>> {
        (**self).rank()
    }
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
    /// [`umt_rt::Runtime::set_max_spares`]: the most spares active at once over all cores.
    pub max_spares: Option<usize>,
    /// Heat's checkpoints written from staged copies ([`crate::heat::run_staged`]) instead of
    /// in place, on the umt-rt runners with a monitor.
    pub staged_checkpoints: bool,
    /// Every umt-rt runtime (also baseline's and io-uring's) records a trace
    /// ([`umt_rt::Builder::trace`]), which each timed run's sample carries.
    pub trace: bool,
    /// Across MPI ranks, the umt-rt runners with a monitor receive with `MPI_Recv`
    /// ([`Comm::Blocking`], busy-polled by Open MPI) instead of testing and sleeping
    /// ([`Comm::Sleeping`]).
    pub busy_mpi_recv: bool,
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
            max_spares: None,
            staged_checkpoints: false,
            trace: false,
            busy_mpi_recv: false,
        }
    }
}

impl UmtOptions {
    /// A umt-rt runtime with `backend`'s monitor and these options, for the runner `name`
    /// (which its error names).
    pub fn runtime(&self, name: &str, backend: BackendKind) -> Result<Runtime, BenchError> {
        let mut b = Runtime::builder()
            .monitor(backend)
            .handoff(self.handoff)
            .lend_workers(self.lend_workers)
            .leader_runs_tasks(self.leader_runs_tasks)
            .trace(self.trace);
        if let Some(policy) = self.leader {
            b = b.leader_policy(policy);
        }
        if let Some(n) = self.max_workers_per_core {
            b = b.max_workers_per_core(n);
        }
        let rt = b
            .build()
            .map_err(|e| BenchError::Runtime(format!("{name}: {e}")))?;
        if let Some(n) = self.max_spares {
            rt.set_max_spares(n);
        }
        Ok(rt)
    }
}

/// CPUs of this process's affinity mask (at least 1).
pub fn cores() -> usize {
    umt_sys::cpu::process_cpus()
        .map(|c| c.len())
        .unwrap_or(1)
        .max(1)
}

/// How tasks wait for their messages across MPI ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comm {
    /// `MPI_Recv` in the task.
    Blocking,
    /// `MPI_Irecv`, waited for through [`umt_rt::io`] with `MPI_Testsome` group polls.
    Waiting,
    /// `MPI_Irecv`, then `MPI_Test` and a sleep in the kernel between tests (from
    /// [`SLEEP_FIRST`] doubling up to [`SLEEP_MOST`]): a blocking progress mode for the
    /// monitored runtimes, whose monitor sees the sleep as a block and gives the core to a
    /// spare meanwhile. Open MPI 4.1 has none of its own: `MPI_Recv` busy-polls.
    Sleeping,
}

impl Comm {
    /// How the table names it.
    pub fn name(self) -> &'static str {
        match self {
            Comm::Blocking => "MPI_Recv",
            Comm::Waiting => "umt_rt::io",
            Comm::Sleeping => "test+sleep",
        }
    }
}

/// The first sleep of a [`Comm::Sleeping`] receive between two tests.
pub const SLEEP_FIRST: std::time::Duration = std::time::Duration::from_micros(50);
/// The longest sleep of a [`Comm::Sleeping`] receive between two tests. A receive sees its
/// message up to a nap after it could have, plus the time its thread takes to run again;
/// MPI makes no progress while every waiter sleeps, so a message in several steps (a
/// rendezvous) may pay a nap per step.
pub const SLEEP_MOST: std::time::Duration = std::time::Duration::from_millis(1);

/// How a rank's checkpoint or snapshot I/O waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskWait {
    /// `pwrite` / `pread` in the task.
    Blocking,
    /// Through [`umt_rt::io`].
    Waiting,
    /// Submitted to an io_uring of the run, the task returning at once.
    Uring,
}

/// What a rank's workload runs on.
#[derive(Debug, Clone, Copy)]
pub enum RankEngine<'a> {
    /// A umt-rt runtime: the workload's tasks with dataflow dependencies.
    Tasks(&'a Runtime),
    /// A rayon pool: the workload's loops, as a rayon program would write them.
    Rayon(&'a rayon::ThreadPool),
}
