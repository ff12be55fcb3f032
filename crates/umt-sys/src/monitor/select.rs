//! Choosing a backend: the first of the requested order that opens, and why each one before
//! it could not.

use nix::sys::epoll::Epoll;

use super::{bpf, kernel, perf};
use crate::backend::{BackendKind, Selection, Unavailable};
use crate::error::{Error, Result};

/// The backend a monitor runs on.
pub(super) enum Backend {
    Kernel(kernel::KernelBackend),
    Bpf(Box<bpf::BpfBackend>),
    Perf(perf::PerfBackend),
    Disabled,
}

/// Opens the backend `requested` asks for: `Auto` tries Kernel, then Bpf, then Perf, and falls back to
/// Disabled, recording why each was rejected; an explicit backend that cannot run is an error.
pub(super) fn open(
    requested: BackendKind,
    possible_cpus: usize,
    epoll: &Epoll,
    ring_pages: usize,
    signal_each_event: bool,
) -> Result<(Backend, Selection)> {
    let order: &[BackendKind] = match requested {
        BackendKind::Auto => &[BackendKind::Kernel, BackendKind::Bpf, BackendKind::Perf],
        BackendKind::Kernel => &[BackendKind::Kernel],
        BackendKind::Bpf => &[BackendKind::Bpf],
        BackendKind::Perf => &[BackendKind::Perf],
        BackendKind::Disabled => &[],
    };
    let mut rejected = Vec::new();
    let mut chosen = None;
    for &kind in order {
        let attempt = match kind {
            BackendKind::Kernel => {
                kernel::KernelBackend::open(possible_cpus, epoll).map(Backend::Kernel)
            }
            BackendKind::Bpf => {
                bpf::BpfBackend::open(possible_cpus, Some(epoll)).map(|b| Backend::Bpf(Box::new(b)))
            }
            _ => perf::PerfBackend::open(possible_cpus, ring_pages, signal_each_event)
                .map(Backend::Perf),
        };
        match attempt {
            Ok(b) => {
                chosen = Some((kind, b));
                break;
            }
            Err(Error::Unavailable(u)) if requested == BackendKind::Auto => rejected.push(u),
            // Another Monitor of this process holds the kernel's one UMT state.
            Err(Error::KernelBusy) if requested == BackendKind::Auto => rejected.push(
                Unavailable::new(
                    BackendKind::Kernel,
                    "UMT is already enabled in this process by another Monitor".to_string(),
                )
                .with_fix("share one Monitor (one runtime) per process to get the Kernel backend"),
            ),
            Err(e) => return Err(e),
        }
    }
    let (chosen, backend) = chosen.unwrap_or((BackendKind::Disabled, Backend::Disabled));
    Ok((
        backend,
        Selection {
            requested,
            chosen,
            rejected,
        },
    ))
}
