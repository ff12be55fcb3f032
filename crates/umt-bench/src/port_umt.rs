//! The umt-rt runners: the applications as written ([`crate::heat`], [`crate::fwi`],
//! [`crate::scan`]) on umt-rt, with the monitor off (baseline) or one of its backends
//! ([`UmtPort`]), or with their I/O waited for through [`umt_rt::io`] ([`UmtIoPort`]).

use umt_rt::{BackendKind, Runtime};
use umt_sys::Monitor;

use crate::error::BenchError;
use crate::fwi::{self, FwiParams, FwiRun, Part};
use crate::heat::{self, HeatParams, HeatRun};
use crate::port::{Comm, DiskWait, Engine, Port, UmtOptions};
use crate::scan::{self, FileSet, Front, ScanParams, ScanRun};

/// umt-rt with `backend`'s monitor (`Disabled`: one worker per core, blocking I/O idles the
/// core). Across ranks its tasks receive with `MPI_Recv` without a monitor, and test and sleep
/// with one ([`Comm::Sleeping`]).
#[derive(Debug)]
pub struct UmtPort {
    /// The runner's name.
    pub name: &'static str,
    /// The monitor's backend.
    pub backend: BackendKind,
}

impl Port for UmtPort {
    fn name(&self) -> &'static str {
        self.name
    }

    fn available(&self) -> Result<(), String> {
        Monitor::probe(self.backend).map_err(|u| u.to_string())
    }

    fn engine(&self, umt: &UmtOptions) -> Result<Box<dyn Engine>, BenchError> {
        Ok(Box::new(UmtEngine(umt.runtime(self.name, self.backend)?)))
    }

    fn monitor(&self) -> Option<BackendKind> {
        (self.backend != BackendKind::Disabled).then_some(self.backend)
    }

    fn comm(&self) -> Option<Comm> {
        // A monitor sees a worker that sleeps between tests; one busy in MPI_Recv it does not.
        Some(if self.backend == BackendKind::Disabled {
            Comm::Blocking
        } else {
            Comm::Sleeping
        })
    }
}

/// A runtime of a [`UmtPort`].
#[derive(Debug)]
struct UmtEngine(Runtime);

impl Engine for UmtEngine {
    fn heat(&self, p: &HeatParams, umt: &UmtOptions) -> Result<HeatRun, BenchError> {
        if umt.staged_checkpoints && self.0.backend() != BackendKind::Disabled {
            heat::run_staged(&self.0, p)
        } else {
            heat::run(&self.0, p)
        }
    }

    fn fwi(&self, p: &FwiParams) -> Result<FwiRun, BenchError> {
        fwi::run(&self.0, p, Part::All)
    }

    fn scan(&self, set: &FileSet, p: &ScanParams, front: Front) -> Result<ScanRun, BenchError> {
        scan::run(&self.0, set, p, front)
    }

    fn runtime(&self) -> Option<&Runtime> {
        Some(&self.0)
    }
}

/// umt-rt with the perf backend, the I/O through its scheduler-centric wait
/// ([`umt_rt::io`]): the waiting task's worker runs other tasks and reaps its core's io_uring
/// between them, and blocks in it only when nothing else can run. Across ranks its receives
/// and its disk I/O wait the same way.
#[derive(Debug)]
pub struct UmtIoPort {
    /// The runner's name.
    pub name: &'static str,
}

/// The backend of [`UmtIoPort`]'s monitor.
const UMT_IO_BACKEND: BackendKind = BackendKind::Perf;

impl Port for UmtIoPort {
    fn name(&self) -> &'static str {
        self.name
    }

    fn available(&self) -> Result<(), String> {
        Monitor::probe(UMT_IO_BACKEND).map_err(|u| u.to_string())?;
        umt_sys::uring::Ring::new(2)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn engine(&self, umt: &UmtOptions) -> Result<Box<dyn Engine>, BenchError> {
        Ok(Box::new(UmtIoEngine(
            umt.runtime(self.name, UMT_IO_BACKEND)?,
        )))
    }

    fn monitor(&self) -> Option<BackendKind> {
        Some(UMT_IO_BACKEND)
    }

    fn comm(&self) -> Option<Comm> {
        Some(Comm::Waiting)
    }

    fn disk(&self) -> DiskWait {
        DiskWait::Waiting
    }
}

/// A runtime of a [`UmtIoPort`].
#[derive(Debug)]
struct UmtIoEngine(Runtime);

impl Engine for UmtIoEngine {
    fn heat(&self, p: &HeatParams, _: &UmtOptions) -> Result<HeatRun, BenchError> {
        heat::run_io(&self.0, p)
    }

    fn fwi(&self, p: &FwiParams) -> Result<FwiRun, BenchError> {
        fwi::run_io(&self.0, p, Part::All)
    }

    fn scan(&self, set: &FileSet, p: &ScanParams, front: Front) -> Result<ScanRun, BenchError> {
        scan::run_io(&self.0, set, p, front)
    }

    fn runtime(&self) -> Option<&Runtime> {
        Some(&self.0)
    }
}
