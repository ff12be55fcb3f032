//! `umt_sys::uring` on another OS than Linux: io_uring exists only there, so [`Ring::new`]
//! fails, saying so, and no ring is ever made. The entries can still be built, so that code
//! written for Linux (umt-rt's `io`) builds unchanged and takes its path for a missing ring:
//! it blocks in `pread`, `pwrite` or `poll`.
//!
//! ```
//! use umt_sys::uring::Ring;
//! # #[cfg(not(target_os = "linux"))]
//! assert_eq!(Ring::new(64).err().map(|e| e.kind()), Some(std::io::ErrorKind::Unsupported));
//! ```

use std::io;
use std::time::{Duration, Instant};

/// A request for a ring (none can be made here: see [`Ring::new`]).
#[derive(Clone, Debug)]
pub struct Entry(());

impl Entry {
    /// Tags the request with `user_data`, which its completion carries.
    pub fn user_data(self, _user_data: u64) -> Entry {
        self
    }
}

/// The descriptors a request names.
pub mod types {
    /// A file descriptor of the process.
    #[derive(Clone, Copy, Debug)]
    pub struct Fd(pub std::os::fd::RawFd);
}

/// The requests umt-rt makes, as the io-uring crate builds them.
pub mod opcode {
    use super::Entry;
    use super::types::Fd;

    /// A request that does nothing.
    #[derive(Debug)]
    pub struct Nop;

    impl Nop {
        /// The request.
        pub fn new() -> Nop {
            Nop
        }

        /// The entry to queue.
        pub fn build(self) -> Entry {
            Entry(())
        }
    }

    impl Default for Nop {
        fn default() -> Nop {
            Nop::new()
        }
    }

    /// A read of `len` bytes into `buf` (`pread`).
    #[derive(Debug)]
    pub struct Read;

    impl Read {
        /// The request.
        pub fn new(_fd: Fd, _buf: *mut u8, _len: u32) -> Read {
            Read
        }

        /// At `offset` of the file.
        pub fn offset(self, _offset: u64) -> Read {
            self
        }

        /// The entry to queue.
        pub fn build(self) -> Entry {
            Entry(())
        }
    }

    /// A write of `len` bytes from `buf` (`pwrite`).
    #[derive(Debug)]
    pub struct Write;

    impl Write {
        /// The request.
        pub fn new(_fd: Fd, _buf: *const u8, _len: u32) -> Write {
            Write
        }

        /// At `offset` of the file.
        pub fn offset(self, _offset: u64) -> Write {
            self
        }

        /// The entry to queue.
        pub fn build(self) -> Entry {
            Entry(())
        }
    }

    /// A wait for `flags` (`POLLIN`, `POLLOUT`, ...) on a descriptor.
    #[derive(Debug)]
    pub struct PollAdd;

    impl PollAdd {
        /// The request.
        pub fn new(_fd: Fd, _flags: u32) -> PollAdd {
            PollAdd
        }

        /// The entry to queue.
        pub fn build(self) -> Entry {
            Entry(())
        }
    }
}

/// A point in time for [`Ring::push_until`].
#[derive(Debug, Clone, Copy)]
pub struct RingDeadline(());

impl RingDeadline {
    /// The deadline `at`.
    pub fn at(_at: Instant) -> RingDeadline {
        RingDeadline(())
    }
}

/// A shared io_uring: none exists on this OS.
#[derive(Debug)]
pub enum Ring {}

impl Ring {
    /// Fails: io_uring exists only on Linux.
    pub fn new(_entries: u32) -> io::Result<Ring> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "io_uring exists only on Linux: waits block in their system calls here",
        ))
    }

    /// Queues `entry` (never called: no ring exists).
    ///
    /// # Safety
    ///
    /// As on Linux: what `entry` points to must stay valid until its completion is reaped.
    pub unsafe fn push(&self, _entry: &Entry) -> bool {
        match *self {}
    }

    /// Queues `entry` with a deadline (never called: no ring exists).
    ///
    /// # Safety
    ///
    /// As on Linux: what `entry` and `deadline` point to must stay valid until its completion
    /// is reaped.
    pub unsafe fn push_until(
        &self,
        _entry: &Entry,
        _deadline: &RingDeadline,
        _timeout_data: u64,
    ) -> bool {
        match *self {}
    }

    /// Entries queued and not yet handed to the kernel.
    pub fn unsubmitted(&self) -> u32 {
        match *self {}
    }

    /// Hands the queued entries to the kernel.
    pub fn submit(&self) -> io::Result<usize> {
        match *self {}
    }

    /// Blocks until a completion waits or `timeout` passes.
    pub fn wait(&self, _timeout: Option<Duration>) -> io::Result<()> {
        match *self {}
    }

    /// Whether a completion waits to be reaped.
    pub fn has_completions(&self) -> bool {
        match *self {}
    }

    /// Takes every waiting completion.
    pub fn reap(&self, _f: impl FnMut(u64, i32)) -> usize {
        match *self {}
    }
}
