//! Typed errors. Every message says what went wrong and what to do about it.

use std::io;

use crate::backend::Unavailable;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of `umt-sys`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The requested backend cannot run here.
    #[error(transparent)]
    Unavailable(#[from] Unavailable),

    /// UMT is already enabled in this process by another [`Monitor`](crate::Monitor).
    #[error(
        "UMT is already enabled in this process: keep one Monitor with the Kernel backend per \
         process and share it (drop the other one first)"
    )]
    KernelBusy,

    /// `UMT_KERNEL_MODE` names no mode of the Kernel backend.
    #[error(
        "UMT_KERNEL_MODE is {value:?}, not a mode of the Kernel backend: set it to `idle-only` \
         (the default: a signal only when a core runs out of ready threads) or `events` (every \
         block and unblock signalled), or unset it"
    )]
    InvalidKernelMode {
        /// The variable's value.
        value: String,
    },

    /// A CPU this process may not run on was named.
    #[error("CPU {cpu} is not in this process's affinity mask {allowed:?}: use one of those CPUs")]
    CpuNotInMask {
        /// The CPU that was asked for.
        cpu: usize,
        /// The CPUs the process may run on.
        allowed: Vec<usize>,
    },

    /// A CPU id beyond the machine's possible CPUs was named.
    #[error("CPU {cpu} does not exist: this machine's CPU ids are 0..{possible}")]
    NoSuchCpu {
        /// The CPU that was asked for.
        cpu: usize,
        /// Number of possible CPU ids.
        possible: usize,
    },

    /// The thread is registered with this monitor already.
    #[error("thread {tid} is already registered with this monitor: register each thread once")]
    AlreadyRegistered {
        /// Kernel thread id.
        tid: i32,
    },

    /// The thread is not registered with this monitor.
    #[error("thread {tid} is not registered with this monitor: call register_current_thread first")]
    NotRegistered {
        /// Kernel thread id.
        tid: i32,
    },

    /// The perf ring size is not a power of two.
    #[error("ring_pages must be a power of two of at least 1, got {pages}")]
    InvalidRingPages {
        /// The size that was asked for.
        pages: usize,
    },

    /// The Bpf backend's thread table is full.
    #[error(
        "the Bpf monitor already has {max} threads registered: unregister threads that no \
         longer need monitoring, or use one monitor per {max} threads"
    )]
    TooManyThreads {
        /// The table's size.
        max: u32,
    },

    /// The process ran out of file descriptors (`EMFILE`, or the system's, `ENFILE`).
    #[error(
        "{what} failed: out of file descriptors: raise the limit with `ulimit -n` (each \
         monitored thread holds one with the Perf backend, each CPU watched one with the \
         Kernel backend, each CPU's wait set one)"
    )]
    OutOfFiles {
        /// The operation that failed.
        what: &'static str,
    },

    /// A system call failed unexpectedly.
    #[error("{what} failed: {source}")]
    Os {
        /// The operation that failed.
        what: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn os(what: &'static str, source: impl Into<io::Error>) -> Self {
        let source = source.into();
        match source.raw_os_error() {
            Some(libc::EMFILE | libc::ENFILE) => Error::OutOfFiles { what },
            _ => Error::Os { what, source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_descriptors_says_what_to_do() {
        let e = Error::os("epoll_create1", io::Error::from_raw_os_error(libc::EMFILE));
        assert!(matches!(
            e,
            Error::OutOfFiles {
                what: "epoll_create1"
            }
        ));
        assert!(e.to_string().contains("ulimit -n"), "{e}");
        let e = Error::os("read", io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(e, Error::Os { .. }));
    }
}
