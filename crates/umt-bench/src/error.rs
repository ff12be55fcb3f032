//! What can go wrong in a benchmark run, and how the tasks of one run report it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Errors of the benchmark applications.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A parameter is out of range.
    #[error("invalid parameter: {0}")]
    InvalidParam(String),
    /// The directory's filesystem refuses `O_DIRECT` (tmpfs did before Linux 6.6, for
    /// example).
    #[error(
        "{dir} does not support O_DIRECT ({source}): pick a directory on a disk with --dir, \
         or use buffered I/O (--buffered)"
    )]
    NoDirectIo {
        /// The directory.
        dir: PathBuf,
        /// What open(2) said.
        source: std::io::Error,
    },
    /// A runtime could not be built (its monitor backend is unavailable, for example).
    #[error("cannot start the runtime {0}")]
    Runtime(String),
    /// A picture could not be drawn or written.
    #[error("drawing {path}: {why}: check that its directory exists and is writable")]
    Plot {
        /// The file.
        path: PathBuf,
        /// What the plotting library said.
        why: String,
    },
    /// Data read back differs from what was written.
    #[error("verification failed: {0}")]
    Corrupt(String),
    /// The process ran out of file descriptors.
    #[error("{what} {path}: out of file descriptors: raise the limit with `ulimit -n`")]
    OutOfFiles {
        /// The operation.
        what: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// A socket operation of the service benchmark failed (`serve`: loopback only).
    #[error(
        "serve: {what}: {source}: check that 127.0.0.1 is up and the descriptor limit \
             (`ulimit -n`) covers two per client"
    )]
    Net {
        /// The operation.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// A system call of umt-sys failed (reading a thread's CPU time, for example).
    #[error(transparent)]
    System(#[from] umt_sys::Error),
    /// A file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl BenchError {
    /// A file operation on `path` failed (out of file descriptors is told apart: its fix is
    /// known).
    pub fn io(what: &'static str, path: &Path, source: std::io::Error) -> BenchError {
        let path = path.to_path_buf();
        match source.raw_os_error() {
            Some(libc::EMFILE | libc::ENFILE) => BenchError::OutOfFiles { what, path },
            _ => BenchError::Io { what, path, source },
        }
    }

    /// [`BenchError::io`] for an error of [`umt_rt::io`]; the kernel's errno is kept.
    pub fn wait(what: &'static str, path: &Path, e: umt_rt::io::IoError) -> BenchError {
        match e {
            umt_rt::io::IoError::Os { source, .. } => BenchError::io(what, path, source),
            other => BenchError::io(what, path, std::io::Error::other(other)),
        }
    }
}

/// The errors the tasks of one run report. Tasks cannot return errors to the runtime, so they
/// push them here and the run returns the first one once every task has finished.
#[derive(Debug, Default)]
pub struct Errors(Mutex<Vec<BenchError>>);

impl Errors {
    /// Records an error of a task.
    pub fn push(&self, e: BenchError) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(e);
    }

    /// Records the error of `result`, if any.
    pub fn check(&self, result: Result<(), BenchError>) {
        if let Err(e) = result {
            self.push(e);
        }
    }

    /// `Err` with the first error recorded, else `Ok`; the others are dropped.
    pub fn first(&self) -> Result<(), BenchError> {
        let mut errors = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.swap_remove(0))
        }
    }
}
