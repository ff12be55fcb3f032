//! MPI requests as an event source of [`umt_rt::io`]: one `MPI_Test` per request, or one
//! `MPI_Testsome` for all the requests waiting on a core (the group poll).

use std::os::raw::{c_int, c_void};

use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use umt_rt::io::Source;

/// A communicator's handle, for the tasks of every worker.
#[derive(Debug, Clone, Copy)]
pub(super) struct RawComm(ffi::MPI_Comm);

// SAFETY: MPI is initialised with MPI_THREAD_MULTIPLE (`Cluster::init`): any thread may use
// the communicator, which outlives every run (the `Cluster` owns it).
unsafe impl Send for RawComm {}
// SAFETY: as above; MPI synchronises concurrent calls on one communicator itself.
unsafe impl Sync for RawComm {}

impl RawComm {
    pub(super) fn of(world: &SimpleCommunicator) -> RawComm {
        RawComm(world.as_raw())
    }
}

/// An MPI request handle of an immediate call in flight.
#[repr(transparent)]
#[derive(Debug)]
pub struct RawRequest(ffi::MPI_Request);

// SAFETY: MPI is initialised with MPI_THREAD_MULTIPLE (`Cluster::init`), so any thread may
// test or wait for a request; the handle is an opaque pointer MPI owns.
unsafe impl Send for RawRequest {}

/// The MPI requests tasks wait for ([`super::Link`] in [`super::Comm::Waiting`]; its
/// `poll` is also the test of [`super::Comm::Sleeping`] and of the sends in flight).
#[derive(Debug, Default)]
pub struct MpiRequests;

impl Source for MpiRequests {
    type Request = RawRequest;
    type Output = ();

    fn poll(&self, request: &mut RawRequest) -> Option<()> {
        let mut flag: c_int = 0;
        // SAFETY: `request` is a live request handle (MPI sets it to MPI_REQUEST_NULL once
        // complete, and a completed request is never tested again: its waiter left).
        unsafe { ffi::MPI_Test(&mut request.0, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        (flag != 0).then_some(())
    }

    fn poll_group(&self, requests: &mut [RawRequest], done: &mut dyn FnMut(usize, ())) {
        let n = requests.len();
        let mut indices: Vec<c_int> = vec![0; n];
        let mut outcount: c_int = 0;
        // SAFETY: `RawRequest` is a transparent wrapper, so `requests` is an array of `n`
        // live handles; `indices` has room for `n` completions.
        unsafe {
            ffi::MPI_Testsome(
                n as c_int,
                requests.as_mut_ptr().cast::<ffi::MPI_Request>(),
                &mut outcount,
                indices.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
        // MPI_UNDEFINED (negative) when no request was active.
        for &i in indices.iter().take(outcount.max(0) as usize) {
            done(i as usize, ());
        }
    }
}

/// Starts sending `data` to `to` with `tag`.
///
/// # Safety
///
/// `data` must stay valid, unchanged, until the request completes.
pub(super) unsafe fn isend(world: RawComm, to: i32, tag: i32, data: &[f64]) -> RawRequest {
    let mut req = std::mem::MaybeUninit::<ffi::MPI_Request>::uninit();
    // SAFETY: `data` is `data.len()` doubles, kept alive by the caller's contract; MPI writes
    // the handle into `req` before returning (errors abort, MPI's default handler).
    unsafe {
        ffi::MPI_Isend(
            data.as_ptr().cast::<c_void>(),
            data.len() as c_int,
            ffi::RSMPI_DOUBLE,
            to,
            tag,
            world.0,
            req.as_mut_ptr(),
        );
        RawRequest(req.assume_init())
    }
}

/// Starts receiving `out.len()` values from `from` with `tag` into `out`.
///
/// # Safety
///
/// `out` must stay valid, and not be read or written, until the request completes.
pub(super) unsafe fn irecv(world: RawComm, from: i32, tag: i32, out: &mut [f64]) -> RawRequest {
    let mut req = std::mem::MaybeUninit::<ffi::MPI_Request>::uninit();
    // SAFETY: as in `isend`; MPI writes at most `out.len()` doubles into `out`.
    unsafe {
        ffi::MPI_Irecv(
            out.as_mut_ptr().cast::<c_void>(),
            out.len() as c_int,
            ffi::RSMPI_DOUBLE,
            from,
            tag,
            world.0,
            req.as_mut_ptr(),
        );
        RawRequest(req.assume_init())
    }
}

/// Waits, blocking the caller in MPI, until `request` completes.
pub(super) fn wait(request: &mut RawRequest) {
    // SAFETY: `request` is a live handle (or MPI_REQUEST_NULL, which MPI_Wait accepts).
    unsafe { ffi::MPI_Wait(&mut request.0, ffi::RSMPI_STATUS_IGNORE) };
}

/// Receives `out.len()` values from `from` with `tag` into `out`, blocking (`MPI_Recv`).
pub(super) fn recv(world: RawComm, from: i32, tag: i32, out: &mut [f64]) {
    // SAFETY: MPI writes at most `out.len()` doubles into `out`, borrowed for the call.
    unsafe {
        ffi::MPI_Recv(
            out.as_mut_ptr().cast::<c_void>(),
            out.len() as c_int,
            ffi::RSMPI_DOUBLE,
            from,
            tag,
            world.0,
            ffi::RSMPI_STATUS_IGNORE,
        )
    };
}
