//! Scheduler-centric waits for I/O events (seed 004): a task says what it waits for with one
//! call, and the runtime decides how to wait.
//!
//! Whatever the source (a file read or write at an offset, the readiness of a descriptor, or
//! an [`EventSource`] of the application's, such as MPI requests), the calling task waits the
//! same way (steps W1–W6 in `io/README.md`):
//!
//! - while its core has other tasks, its worker runs them, and the core's workers look at the
//!   waits between tasks, at most every [`Builder::io_poll_interval`](crate::Builder::io_poll_interval)
//!   (20 us by default): one look reaps every completion of the core's io_uring and tests
//!   every waiting request of each event source at once (a group poll), whichever task waits;
//! - when nothing else can run there, the worker blocks in the kernel on the core's ring (or
//!   sleeps between group polls), so the core is given up and the monitor sees an ordinary
//!   block: a spare worker takes the core if work arrives.
//!
//! Each core has its own ring; requests queued by the core's tasks go to the kernel together
//! at the next look or block. A [`Deadline`] bounds any of these waits (the kernel cancels the
//! operation at it), and [`EventSource::wait_until`] bounds a source's. Outside a runtime's workers, and where io_uring is unavailable
//! (said once), the same calls block the caller in the corresponding system call.
//!
//! Like [`join`](crate::join), a wait runs other tasks on its worker's stack: a waiting task
//! resumes once those tasks return. Waits are for events from outside the runtime's tasks (the
//! kernel, the network, another thread): a task should not wait for an event that only another
//! task of the runtime would produce, for each worker holds at most 32 nested waits and each
//! core a bounded number of workers, and such waits can take them all (`io/README.md`).
//!
//! ```
//! use std::io::Write;
//! use umt_rt::{Runtime, io};
//!
//! let rt = Runtime::builder().num_threads(2).build()?;
//! let file = tempfile::tempfile()?; // unnamed: nobody else can reach it
//! let (reader, mut writer) = std::io::pipe()?;
//! let got = rt.install(|| {
//!     umt_rt::join(
//!         || -> Result<Vec<u8>, io::IoError> {
//!             io::write_all_at(&file, b"checkpoint", 4096)?;
//!             let mut back = vec![0; 10];
//!             io::read_exact_at(&file, &mut back, 4096)?;
//!             Ok(back)
//!         },
//!         || {
//!             writer.write_all(b"x").unwrap();
//!             io::readable(&reader) // the pipe has a byte: returns at once
//!         },
//!     )
//! });
//! assert_eq!(got.0?, b"checkpoint");
//! got.1?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod per_core;
mod source;

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use umt_sys::uring::{Entry, RingDeadline, opcode, types};

use crate::latch::{Latch, Waiter};
use crate::worker::with_current;

pub(crate) use per_core::IoCores;
pub use source::{EventSource, Expired, Source};

pub use crate::config::DEFAULT_POLL_INTERVAL;

/// Why a wait failed. Errors of the kernel come back as [`IoError::Os`], whichever way the
/// runtime waited.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// The kernel refused or failed the operation.
    #[error("{op} failed: {source}{}", hint(source))]
    Os {
        /// What was asked: "read", "write", "poll".
        op: &'static str,
        /// The kernel's error (`raw_os_error` gives the errno).
        #[source]
        source: std::io::Error,
    },
    /// A read ended before the buffer was full (`read_exact_at`).
    #[error(
        "read ended at end of file after {read} of {wanted} bytes: the file is shorter than asked"
    )]
    UnexpectedEof {
        /// Bytes read.
        read: usize,
        /// Bytes asked for.
        wanted: usize,
    },
    /// A write made no progress (`write_all_at`).
    #[error(
        "write wrote 0 of {left} remaining bytes: is the device full or the file limit reached?"
    )]
    WriteZero {
        /// Bytes not written.
        left: usize,
    },
    /// The wait reached its [`Deadline`] first: the operation was cancelled (nothing of it
    /// happened), after `transferred` bytes of earlier reads or writes of the same call
    /// (`read_exact_at`, `write_all_at`).
    #[error(
        "{op} did not complete by its deadline (cancelled after {transferred} bytes of this \
         call): give it a later deadline, or check that the peer or device is still there"
    )]
    TimedOut {
        /// What was asked: "read", "write", "poll".
        op: &'static str,
        /// Bytes moved by earlier operations of the same call.
        transferred: usize,
    },
}

impl From<IoError> for std::io::Error {
    /// The same error as a `std::io::Error`: the kernel's error itself for [`IoError::Os`],
    /// else the matching kind (`UnexpectedEof`, `WriteZero`, `TimedOut`) with this message.
    fn from(e: IoError) -> std::io::Error {
        let kind = match e {
            IoError::Os { source, .. } => return source,
            IoError::UnexpectedEof { .. } => std::io::ErrorKind::UnexpectedEof,
            IoError::WriteZero { .. } => std::io::ErrorKind::WriteZero,
            IoError::TimedOut { .. } => std::io::ErrorKind::TimedOut,
        };
        std::io::Error::new(kind, e)
    }
}

fn hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EINVAL) => {
            " (with O_DIRECT, the buffer's address, its length and the offset must be aligned to \
             the device's logical block size, usually 512 or 4096 bytes)"
        }
        Some(libc::EBADF) => " (the descriptor is closed, or not open for this direction)",
        Some(libc::ENOSPC) => " (the device is full: free space or write elsewhere)",
        _ => "",
    }
}

impl IoError {
    /// The errno of an [`IoError::Os`].
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            IoError::Os { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// Whether the wait reached its deadline ([`IoError::TimedOut`]).
    pub fn is_timeout(&self) -> bool {
        matches!(self, IoError::TimedOut { .. })
    }

    fn os(op: &'static str, errno: i32) -> IoError {
        IoError::Os {
            op,
            source: std::io::Error::from_raw_os_error(errno),
        }
    }

    /// The same error, counting `before` bytes moved earlier in the same call.
    fn after(self, before: usize) -> IoError {
        match self {
            IoError::TimedOut { op, transferred } => IoError::TimedOut {
                op,
                transferred: transferred + before,
            },
            e => e,
        }
    }
}

/// When a wait of [`crate::io`] must end: the same calls as the module's free functions, each
/// cancelled if it has not completed by then ([`IoError::TimedOut`]).
///
/// On a runtime's worker with io_uring, the kernel cancels the operation at the deadline (a
/// linked timeout on the core's ring): polls, pipe and socket reads and writes end there; a
/// file read or write already at the device cannot be cancelled and completes with its
/// result. Elsewhere (outside a runtime, no io_uring) the call first polls the descriptor
/// until the deadline, then makes the system call (a regular file is always ready: its read
/// or write then runs to the end). A deadline already past still tries the operation once:
/// what completes at once is done (on the ring, a file read that must go to the device may
/// be cancelled instead).
///
/// The deadline bounds the operation, not the call: like any wait of this module, the
/// waiting worker runs other tasks meanwhile, and the call returns once the task it is
/// running returns (as with [`join`](crate::join)).
///
/// ```
/// use std::time::Duration;
/// use umt_rt::io::Deadline;
///
/// let rt = umt_rt::Runtime::builder().num_threads(1).build()?;
/// let (reader, _writer) = std::io::pipe()?; // nobody writes
/// let err = rt.install(|| Deadline::after(Duration::from_millis(10)).readable(&reader));
/// assert!(err.unwrap_err().is_timeout());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(Instant);

impl Deadline {
    /// `timeout` from now (a timeout too large to represent is a deadline that never comes
    /// in practice: the largest representable one).
    pub fn after(timeout: Duration) -> Deadline {
        let now = Instant::now();
        Deadline(now.checked_add(timeout).unwrap_or_else(|| far_future(now)))
    }

    /// At `instant`.
    pub fn at(instant: Instant) -> Deadline {
        Deadline(instant)
    }

    /// When it is.
    pub fn instant(&self) -> Instant {
        self.0
    }

    /// Whether it has come.
    pub fn passed(&self) -> bool {
        Instant::now() >= self.0
    }

    /// The time left (zero once it has come).
    pub fn remaining(&self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    /// [`read_at`], ending at this deadline.
    pub fn read_at(&self, fd: &impl AsFd, buf: &mut [u8], offset: u64) -> Result<usize, IoError> {
        read_at_until(fd, buf, offset, Some(*self))
    }

    /// [`write_at`], ending at this deadline.
    pub fn write_at(&self, fd: &impl AsFd, buf: &[u8], offset: u64) -> Result<usize, IoError> {
        write_at_until(fd, buf, offset, Some(*self))
    }

    /// [`read_exact_at`], all of it by this deadline ([`IoError::TimedOut`] says how much came).
    pub fn read_exact_at(
        &self,
        fd: &impl AsFd,
        buf: &mut [u8],
        offset: u64,
    ) -> Result<(), IoError> {
        read_exact_at_until(fd, buf, offset, Some(*self))
    }

    /// [`write_all_at`], all of it by this deadline ([`IoError::TimedOut`] says how much went).
    pub fn write_all_at(&self, fd: &impl AsFd, buf: &[u8], offset: u64) -> Result<(), IoError> {
        write_all_at_until(fd, buf, offset, Some(*self))
    }

    /// [`poll_fd`], ending at this deadline.
    pub fn poll_fd(&self, fd: &impl AsFd, events: i16) -> Result<i16, IoError> {
        poll_fd_until(fd, events, Some(*self))
    }

    /// [`readable`], ending at this deadline.
    pub fn readable(&self, fd: &impl AsFd) -> Result<(), IoError> {
        self.poll_fd(fd, libc::POLLIN).map(|_| ())
    }

    /// [`writable`], ending at this deadline.
    pub fn writable(&self, fd: &impl AsFd) -> Result<(), IoError> {
        self.poll_fd(fd, libc::POLLOUT).map(|_| ())
    }
}

/// An instant about a century after `now` (`Instant` has no maximum).
fn far_future(now: Instant) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    now.checked_add(CENTURY).unwrap_or(now)
}

/// What the waits of a runtime did ([`Runtime::io_stats`](crate::Runtime::io_stats)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Waits that went through a core's ring or an event source (not the blocking fallback).
    pub waits: u64,
    /// Ring completions delivered to their waiters.
    pub completions: u64,
    /// Looks at a core's waits (step W2/W5): each reaps its ring and group-polls its sources.
    pub polls: u64,
    /// Times a worker with nothing else to run blocked in the kernel for its core's waits
    /// (step W4).
    pub blocks: u64,
    /// Calls of an event source's group poll (each tests all of a core's waiting requests).
    pub group_polls: u64,
    /// Calls of an event source's single-request poll (sources that do not aggregate).
    pub request_polls: u64,
    /// Waits that blocked the caller in a system call instead: outside a runtime's workers, or
    /// with io_uring unavailable.
    pub fallback_waits: u64,
}

/// A ring operation's landing place, on the waiting task's stack: the reaper stores the
/// result and sets the latch (step W3).
/// An operation with a deadline has two completions, its own and its deadline's (user data
/// `address | DEADLINE_TAG`); its latch is set once both are reaped (W1a).
pub(crate) struct Op {
    pub(crate) result: AtomicI32,
    /// Completions still to come: 1, or 2 with a deadline.
    pending: AtomicU8,
    pub(crate) latch: Latch,
}

/// The low bit of a deadline's user data: `Op`s are aligned to more than 1 byte, so an
/// operation's own user data never has it.
pub(crate) const DEADLINE_TAG: u64 = 1;
const _: () = assert!(std::mem::align_of::<Op>() > DEADLINE_TAG as usize);

impl Op {
    fn new(latch: Latch, deadline: bool) -> Op {
        Op {
            result: AtomicI32::new(0),
            pending: AtomicU8::new(1 + deadline as u8),
            latch,
        }
    }

    /// Called by the reaper, once, with the kernel's result of the operation.
    pub(crate) fn complete(&self, result: i32) {
        self.result.store(result, Ordering::Relaxed);
        self.settle();
    }

    /// One of the op's completions was reaped; the last sets the latch. Until its deadline's
    /// completion comes, the kernel may still cancel by the op's user data, which is the
    /// waiter's stack address: the waiter must not leave (and reuse it) before.
    pub(crate) fn settle(&self) {
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.latch.set();
        }
    }
}

/// Runs `entry` on the calling worker's core ring and waits for it (steps W1–W6), cancelled by
/// the kernel at `deadline` if it has one (step W1a); `None` when there is no ring to use (not
/// on a worker, or no io_uring), and the caller blocks instead.
///
/// # Safety
///
/// Whatever `entry` points to must stay valid until this returns (it returns only once the
/// kernel completed the operation, also when a task it ran meanwhile unwinds).
unsafe fn on_ring(entry: Entry, deadline: Option<Deadline>) -> Option<i32> {
    with_current(|ctx| {
        let ctx = ctx?;
        let reg = ctx.registry();
        let cores = IoCores::of(reg);
        let core = cores.core(ctx.core());
        let ring = core.ring(reg)?;
        let op = Op::new(
            Latch::new(Waiter::Worker(reg.clone(), ctx.index())),
            deadline.is_some(),
        );
        let entry = entry.user_data(&op as *const Op as u64);
        // W1a: the deadline lives here until both completions are reaped.
        let until = deadline.map(|d| RingDeadline::at(d.instant()));
        let timeout_data = &op as *const Op as u64 | DEADLINE_TAG;
        // W1: queue it. The guard keeps `op` (and the caller's buffers) alive until the kernel
        // is done with them, whatever happens below.
        let guard = core.register(reg, &op);
        // SAFETY: `entry` points to the caller's memory, valid until we return (the caller's
        // contract), and to `op`, which `guard` keeps until its completion is reaped; `until`
        // lives on this stack as long.
        while !unsafe {
            match &until {
                Some(until) => ring.push_until(&entry, until, timeout_data),
                None => ring.push(&entry),
            }
        } {
            // Full: hand the queue to the kernel and take what completed, then push again.
            core.poll_now(reg);
            if !ring.has_completions() {
                let _ = ring.wait(Some(Duration::from_millis(1)));
            }
        }
        ctx.wait_io(
            &|| {
                core.poll(reg);
                op.latch.is_set()
            },
            // A ring wait's deadline is a completion of the ring (W1a): the block needs none.
            &|ctx| core.block(reg, ctx, None, &|| op.latch.is_set()),
        );
        drop(guard);
        Some(op.result.load(Ordering::Relaxed))
    })
}

/// The result of a ring wait (W3), or, without a ring, of `blocking`, the system call (W6).
/// An operation cancelled at its deadline is [`IoError::TimedOut`].
fn finish<T>(
    op: &'static str,
    on_ring: Option<i32>,
    deadline: Option<Deadline>,
    ok: impl FnOnce(i32) -> T,
    blocking: impl FnOnce() -> Result<T, IoError>,
) -> Result<T, IoError> {
    match on_ring {
        // Cancelled at the deadline (withdrawn, or interrupted where it already ran). The
        // kernel's deadline is never before the `Instant` (`RingDeadline::at`), so a cancel of
        // another cause before it (a task exiting) stays an error of its own.
        Some(r)
            if (r == -libc::ECANCELED || r == -libc::EINTR)
                && deadline.is_some_and(|d| d.passed()) =>
        {
            Err(timed_out(op))
        }
        Some(r) if r < 0 => Err(IoError::os(op, -r)),
        Some(r) => Ok(ok(r)),
        None => {
            per_core::fallback();
            blocking()
        }
    }
}

fn timed_out(op: &'static str) -> IoError {
    IoError::TimedOut { op, transferred: 0 }
}

/// W6 with a deadline: `poll(2)` for `events` until the deadline (returns the events), so the
/// system call that follows does not block past it where waiting can be cut (pipes, sockets).
fn poll_until(
    op: &'static str,
    fd: &impl AsFd,
    events: i16,
    deadline: Option<Deadline>,
) -> Result<i16, IoError> {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(
        fd.as_fd(),
        PollFlags::from_bits_truncate(events),
    )];
    loop {
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                // Rounded up to whole milliseconds, so the poll never returns before it.
                let ms = d.remaining().as_nanos().div_ceil(1_000_000);
                PollTimeout::try_from(ms.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX)
            }
        };
        match nix::poll::poll(&mut fds, timeout) {
            Ok(0) if deadline.is_some_and(|d| d.passed()) => return Err(timed_out(op)),
            Ok(0) => continue,
            Ok(_) => break,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(IoError::os(op, e as i32)),
        }
    }
    let got = fds[0].revents().map_or(0, |r| r.bits());
    if got & libc::POLLNVAL != 0 {
        return Err(IoError::os(op, libc::EBADF));
    }
    Ok(got)
}

fn len32(len: usize) -> u32 {
    len.min(u32::MAX as usize & !4095) as u32
}

/// Reads up to `buf.len()` bytes at `offset` of `fd` (like `pread`); returns how many (0 at end
/// of file). See the module's documentation for how the task waits; [`Deadline::read_at`]
/// bounds the wait.
pub fn read_at(fd: &impl AsFd, buf: &mut [u8], offset: u64) -> Result<usize, IoError> {
    read_at_until(fd, buf, offset, None)
}

fn read_at_until(
    fd: &impl AsFd,
    buf: &mut [u8],
    offset: u64,
    deadline: Option<Deadline>,
) -> Result<usize, IoError> {
    let raw = fd.as_fd().as_raw_fd();
    let entry = opcode::Read::new(types::Fd(raw), buf.as_mut_ptr(), len32(buf.len()))
        .offset(offset)
        .build();
    // SAFETY: `buf` is borrowed mutably for the whole call, which returns only once the kernel
    // completed the read.
    let r = unsafe { on_ring(entry, deadline) };
    finish(
        "read",
        r,
        deadline,
        |n| n as usize,
        || {
            if deadline.is_some() {
                poll_until("read", fd, libc::POLLIN, deadline)?;
            }
            // A pipe or socket has no offset: read it as the ring does (from where it is).
            match nix::sys::uio::pread(fd.as_fd(), buf, offset as i64) {
                Err(nix::errno::Errno::ESPIPE) => nix::unistd::read(fd.as_fd(), buf),
                r => r,
            }
            .map_err(|e| IoError::os("read", e as i32))
        },
    )
}

/// Writes up to `buf.len()` bytes at `offset` of `fd` (like `pwrite`); returns how many.
/// [`Deadline::write_at`] bounds the wait.
pub fn write_at(fd: &impl AsFd, buf: &[u8], offset: u64) -> Result<usize, IoError> {
    write_at_until(fd, buf, offset, None)
}

fn write_at_until(
    fd: &impl AsFd,
    buf: &[u8],
    offset: u64,
    deadline: Option<Deadline>,
) -> Result<usize, IoError> {
    let raw = fd.as_fd().as_raw_fd();
    let entry = opcode::Write::new(types::Fd(raw), buf.as_ptr(), len32(buf.len()))
        .offset(offset)
        .build();
    // SAFETY: `buf` is borrowed for the whole call, which returns only once the kernel
    // completed the write.
    let r = unsafe { on_ring(entry, deadline) };
    finish(
        "write",
        r,
        deadline,
        |n| n as usize,
        || {
            if deadline.is_some() {
                poll_until("write", fd, libc::POLLOUT, deadline)?;
            }
            match nix::sys::uio::pwrite(fd.as_fd(), buf, offset as i64) {
                Err(nix::errno::Errno::ESPIPE) => nix::unistd::write(fd.as_fd(), buf),
                r => r,
            }
            .map_err(|e| IoError::os("write", e as i32))
        },
    )
}

/// Reads exactly `buf.len()` bytes at `offset`, in as many reads as it takes.
pub fn read_exact_at(fd: &impl AsFd, buf: &mut [u8], offset: u64) -> Result<(), IoError> {
    read_exact_at_until(fd, buf, offset, None)
}

fn read_exact_at_until(
    fd: &impl AsFd,
    mut buf: &mut [u8],
    mut offset: u64,
    deadline: Option<Deadline>,
) -> Result<(), IoError> {
    let wanted = buf.len();
    while !buf.is_empty() {
        let done = wanted - buf.len();
        match read_at_until(fd, buf, offset, deadline).map_err(|e| e.after(done))? {
            0 => {
                return Err(IoError::UnexpectedEof { read: done, wanted });
            }
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

/// Writes all of `buf` at `offset`, in as many writes as it takes.
pub fn write_all_at(fd: &impl AsFd, buf: &[u8], offset: u64) -> Result<(), IoError> {
    write_all_at_until(fd, buf, offset, None)
}

fn write_all_at_until(
    fd: &impl AsFd,
    mut buf: &[u8],
    mut offset: u64,
    deadline: Option<Deadline>,
) -> Result<(), IoError> {
    let wanted = buf.len();
    while !buf.is_empty() {
        let done = wanted - buf.len();
        match write_at_until(fd, buf, offset, deadline).map_err(|e| e.after(done))? {
            0 => return Err(IoError::WriteZero { left: buf.len() }),
            n => {
                buf = &buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

/// Waits until `fd` has `events` (`libc::POLLIN`, `libc::POLLOUT`, ...); returns the events
/// it has. [`Deadline::poll_fd`] bounds the wait.
pub fn poll_fd(fd: &impl AsFd, events: i16) -> Result<i16, IoError> {
    poll_fd_until(fd, events, None)
}

fn poll_fd_until(fd: &impl AsFd, events: i16, deadline: Option<Deadline>) -> Result<i16, IoError> {
    let raw = fd.as_fd().as_raw_fd();
    let entry = opcode::PollAdd::new(types::Fd(raw), events as u16 as u32).build();
    // SAFETY: a poll entry points to no memory of ours.
    let r = unsafe { on_ring(entry, deadline) };
    finish(
        "poll",
        r,
        deadline,
        |got| got as i16,
        || poll_until("poll", fd, events, deadline),
    )
}

/// Waits until `fd` can be read without blocking (or is at end of file, or has an error).
pub fn readable(fd: &impl AsFd) -> Result<(), IoError> {
    poll_fd(fd, libc::POLLIN).map(|_| ())
}

/// Waits until `fd` can be written without blocking.
pub fn writable(fd: &impl AsFd) -> Result<(), IoError> {
    poll_fd(fd, libc::POLLOUT).map(|_| ())
}

// `Runtime::io_stats`.
impl crate::Runtime {
    /// What the I/O waits of [`crate::io`] did on this runtime so far (all zero before the
    /// first).
    pub fn io_stats(&self) -> crate::io::IoStats {
        self.registry()
            .extension::<IoCores>()
            .map(IoCores::stats)
            .unwrap_or_default()
    }
}
