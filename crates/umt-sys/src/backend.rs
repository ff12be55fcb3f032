//! The backends a [`Monitor`](crate::Monitor) can use, how one was chosen, and why another
//! could not run.

use std::fmt;
use std::str::FromStr;

/// Which backend to use, as asked by the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BackendKind {
    /// The best available: Kernel, else Bpf, else Perf, else Disabled.
    #[default]
    Auto,
    /// The UMT kernel extension (`umt_enable`, `umt_thread_ctrl`, a counter page and per-core
    /// files).
    Kernel,
    /// BPF programs on the scheduler's tracepoints keep per-CPU ready counts in shared memory
    /// and wake a waiter only when a CPU it watches runs out of ready threads; for stock
    /// kernels (Linux >= 5.18 with BTF), with CAP_BPF and CAP_PERFMON.
    Bpf,
    /// Context-switch records from `perf_event_open`, for stock kernels (Linux >= 4.3).
    Perf,
    /// No monitoring: no events, ready counts stay 0 (the benchmark baseline).
    Disabled,
}

impl BackendKind {
    /// The lowercase name used on command lines and in reports.
    pub const fn name(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Kernel => "kernel",
            BackendKind::Bpf => "bpf",
            BackendKind::Perf => "perf",
            BackendKind::Disabled => "disabled",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of parsing a [`BackendKind`] from text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown monitor backend {0:?}: use auto, kernel, bpf, perf or off")]
pub struct ParseBackendError(String);

impl FromStr for BackendKind {
    type Err = ParseBackendError;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(BackendKind::Auto),
            "kernel" | "umt" => Ok(BackendKind::Kernel),
            "bpf" | "ebpf" => Ok(BackendKind::Bpf),
            "perf" | "perf-switch" | "perfswitch" => Ok(BackendKind::Perf),
            "off" | "disabled" | "none" => Ok(BackendKind::Disabled),
            _ => Err(ParseBackendError(s.to_owned())),
        }
    }
}

/// How a backend was chosen: the one in use and why each better one was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// What the user asked for.
    pub requested: BackendKind,
    /// The backend in use (never `Auto`).
    pub chosen: BackendKind,
    /// Backends tried before `chosen`, each with the reason it could not run and the fix.
    pub rejected: Vec<Unavailable>,
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "backend: {} (requested {})", self.chosen, self.requested)?;
        for r in &self.rejected {
            write!(f, "; {r}")?;
        }
        Ok(())
    }
}

/// Why a monitoring backend cannot run on this machine, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// The backend that was rejected.
    pub backend: BackendKind,
    /// What was found.
    pub reason: String,
    /// What the user can do about it, when something can be done.
    pub fix: Option<String>,
}

impl Unavailable {
    pub(crate) fn new(backend: BackendKind, reason: impl Into<String>) -> Self {
        Unavailable {
            backend,
            reason: reason.into(),
            fix: None,
        }
    }

    pub(crate) fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} backend unavailable: {}", self.backend, self.reason)?;
        if let Some(fix) = &self.fix {
            write!(f, " ({fix})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Unavailable {}
