//! Beyond one machine: heat across MPI ranks (feature `mpi`, through rsmpi and the system's
//! MPI; tested with Open MPI 4.1 from Debian 12's packages).
//!
//! Each rank owns a band of block rows and runs them on its own umt-rt runtime; the halo rows
//! travel every iteration as tasks with dataflow dependencies, one message per block column
//! and direction, as the public OmpSs-2 heat does. How a task waits for its message is the
//! [`Comm`] of the run:
//! - [`Comm::Blocking`]: `MPI_Recv` in the task; a send copies its data and posts an
//!   `MPI_Isend`, completed by [`Link::finish`]. Open MPI busy-polls inside `MPI_Recv` (or
//!   yields, with `OMPI_MCA_mpi_yield_when_idle=1`): the worker stays runnable, so a monitor
//!   sees no block and cannot give its core to other tasks;
//! - [`Comm::Waiting`]: `MPI_Isend` / `MPI_Irecv`, then [`umt_rt::io`]'s wait on an
//!   [`MpiRequests`] source: the worker runs other tasks and tests every waiting request of
//!   its core with one `MPI_Testsome` between them, and sleeps only when nothing else can run.
//!
//! ```text
//! cargo build --release -p umt-bench --features mpi
//! mpirun -np 2 target/release/umt-bench heat --mpi --runtimes baseline,umt-perf,umt-io
//! ```

pub mod heat;
mod source;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use mpi::topology::{Communicator, SimpleCommunicator};
use umt_rt::io::EventSource;

use crate::error::BenchError;
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

/// How tasks wait for their messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comm {
    /// `MPI_Recv` in the task; sends posted and completed at the end ([`Link::finish`]).
    Blocking,
    /// Immediate calls, waited for through [`umt_rt::io`] with `MPI_Testsome` group polls.
    Waiting,
}

/// Point-to-point messages of `f64`s on the world communicator, as a run's [`Comm`] says,
/// timing how long tasks spend in them.
pub struct Link {
    world: source::RawComm,
    comm: Comm,
    requests: EventSource<MpiRequests>,
    /// [`Comm::Blocking`]'s sends in flight, each with its copy of the data.
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

    /// Sends `data` to rank `to` with `tag`; returns once `data` may be reused. With
    /// [`Comm::Blocking`] the send only starts (from a copy): a task never waits for a
    /// neighbour to receive, so a rank blocked in a receive has posted what others wait for.
    pub fn send(&self, to: i32, tag: i32, data: &[f64]) {
        self.timed(|| match self.comm {
            Comm::Blocking => {
                let copy = data.to_vec();
                // SAFETY: the copy moves into `posted` (its heap buffer does not move), which
                // keeps it, unchanged, until `finish` waited for the request.
                let req = unsafe { source::isend(self.world, to, tag, &copy) };
                lock_posted(&self.posted).push((req, copy));
            }
            Comm::Waiting => {
                // SAFETY: `data` is borrowed until `wait` returns, which it does once the
                // request completed (tasks run inside the wait catch their own panics).
                let req = unsafe { source::isend(self.world, to, tag, data) };
                self.requests.wait(req);
            }
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
