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
//! at the next look or block. Outside a runtime's workers, and where io_uring is unavailable
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
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use umt_sys::uring::{Entry, opcode, types};

use crate::latch::{Latch, Waiter};
use crate::worker::with_current;

pub(crate) use per_core::IoCores;
pub use source::{EventSource, Source};

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

    fn os(op: &'static str, errno: i32) -> IoError {
        IoError::Os {
            op,
            source: std::io::Error::from_raw_os_error(errno),
        }
    }
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
pub(crate) struct Op {
    pub(crate) result: AtomicI32,
    pub(crate) latch: Latch,
}

impl Op {
    /// Called by the reaper, once, with the kernel's result.
    pub(crate) fn complete(&self, result: i32) {
        self.result.store(result, Ordering::Relaxed);
        self.latch.set();
    }
}

/// Runs `entry` on the calling worker's core ring and waits for it (steps W1–W6); `None` when
/// there is no ring to use (not on a worker, or no io_uring), and the caller blocks instead.
///
/// # Safety
///
/// Whatever `entry` points to must stay valid until this returns (it returns only once the
/// kernel completed the operation, also when a task it ran meanwhile unwinds).
unsafe fn on_ring(entry: Entry) -> Option<i32> {
    with_current(|ctx| {
        let ctx = ctx?;
        let reg = ctx.registry();
        let cores = IoCores::of(reg);
        let core = cores.core(ctx.core());
        let ring = core.ring(reg)?;
        let op = Op {
            result: AtomicI32::new(0),
            latch: Latch::new(Waiter::Worker(reg.clone(), ctx.index())),
        };
        let entry = entry.user_data(&op as *const Op as u64);
        // W1: queue it. The guard keeps `op` (and the caller's buffers) alive until the kernel
        // is done with them, whatever happens below.
        let guard = core.register(reg, &op);
        // SAFETY: `entry` points to the caller's memory, valid until we return (the caller's
        // contract), and to `op`, which `guard` keeps until its completion is reaped.
        while !unsafe { ring.push(&entry) } {
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
            &|ctx| core.block(reg, ctx, &|| op.latch.is_set()),
        );
        drop(guard);
        Some(op.result.load(Ordering::Relaxed))
    })
}

/// The result of a ring wait (W3), or, without a ring, of `blocking`, the system call (W6).
fn finish<T>(
    op: &'static str,
    on_ring: Option<i32>,
    ok: impl FnOnce(i32) -> T,
    blocking: impl FnOnce() -> Result<T, IoError>,
) -> Result<T, IoError> {
    match on_ring {
        Some(r) if r < 0 => Err(IoError::os(op, -r)),
        Some(r) => Ok(ok(r)),
        None => {
            per_core::fallback();
            blocking()
        }
    }
}

fn len32(len: usize) -> u32 {
    len.min(u32::MAX as usize & !4095) as u32
}

/// Reads up to `buf.len()` bytes at `offset` of `fd` (like `pread`); returns how many (0 at end
/// of file). See the module's documentation for how the task waits.
pub fn read_at(fd: &impl AsFd, buf: &mut [u8], offset: u64) -> Result<usize, IoError> {
    let raw = fd.as_fd().as_raw_fd();
    let entry = opcode::Read::new(types::Fd(raw), buf.as_mut_ptr(), len32(buf.len()))
        .offset(offset)
        .build();
    // SAFETY: `buf` is borrowed mutably for the whole call, which returns only once the kernel
    // completed the read.
    let r = unsafe { on_ring(entry) };
    finish(
        "read",
        r,
        |n| n as usize,
        || {
            nix::sys::uio::pread(fd.as_fd(), buf, offset as i64)
                .map_err(|e| IoError::os("read", e as i32))
        },
    )
}

/// Writes up to `buf.len()` bytes at `offset` of `fd` (like `pwrite`); returns how many.
pub fn write_at(fd: &impl AsFd, buf: &[u8], offset: u64) -> Result<usize, IoError> {
    let raw = fd.as_fd().as_raw_fd();
    let entry = opcode::Write::new(types::Fd(raw), buf.as_ptr(), len32(buf.len()))
        .offset(offset)
        .build();
    // SAFETY: `buf` is borrowed for the whole call, which returns only once the kernel
    // completed the write.
    let r = unsafe { on_ring(entry) };
    finish(
        "write",
        r,
        |n| n as usize,
        || {
            nix::sys::uio::pwrite(fd.as_fd(), buf, offset as i64)
                .map_err(|e| IoError::os("write", e as i32))
        },
    )
}

/// Reads exactly `buf.len()` bytes at `offset`, in as many reads as it takes.
pub fn read_exact_at(fd: &impl AsFd, mut buf: &mut [u8], mut offset: u64) -> Result<(), IoError> {
    let wanted = buf.len();
    while !buf.is_empty() {
        match read_at(fd, buf, offset)? {
            0 => {
                return Err(IoError::UnexpectedEof {
                    read: wanted - buf.len(),
                    wanted,
                });
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
pub fn write_all_at(fd: &impl AsFd, mut buf: &[u8], mut offset: u64) -> Result<(), IoError> {
    while !buf.is_empty() {
        match write_at(fd, buf, offset)? {
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
/// it has.
pub fn poll_fd(fd: &impl AsFd, events: i16) -> Result<i16, IoError> {
    let raw = fd.as_fd().as_raw_fd();
    let entry = opcode::PollAdd::new(types::Fd(raw), events as u16 as u32).build();
    // SAFETY: a poll entry points to no memory of ours.
    let r = unsafe { on_ring(entry) };
    finish(
        "poll",
        r,
        |got| got as i16,
        || {
            use nix::poll::{PollFd, PollFlags, PollTimeout};
            let mut fds = [PollFd::new(
                fd.as_fd(),
                PollFlags::from_bits_truncate(events),
            )];
            loop {
                match nix::poll::poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) => break,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => return Err(IoError::os("poll", e as i32)),
                }
            }
            let got = fds[0].revents().map_or(0, |r| r.bits());
            if got & libc::POLLNVAL != 0 {
                return Err(IoError::os("poll", libc::EBADF));
            }
            Ok(got)
        },
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
