//! Choosing a backend: the first of the requested order that opens, and why each one before
//! it could not. [`BACKENDS`] is the one place that lists the backends.

use super::ops::{Backend, Disabled};
use super::waitset::Epoll;
#[cfg(target_os = "linux")]
use super::{bpf, kernel, perf};
use crate::backend::{BackendKind, Selection, Unavailable};
use crate::error::{Error, Result};

/// What opening a backend may need, besides the monitor's wait set.
pub(super) struct Options {
    /// Possible CPUs: one count, file or wake-up buffer each.
    pub(super) possible_cpus: usize,
    /// Data pages of each perf ring (`MonitorBuilder::ring_pages`).
    pub(super) ring_pages: usize,
    /// `MonitorBuilder::signal_each_event`.
    pub(super) signal_each_event: bool,
    /// `MonitorBuilder::directed_handoff`: its signal.
    pub(super) handoff_signal: Option<i32>,
}

/// One backend a monitor can run on.
struct Row {
    kind: BackendKind,
    /// Whether it can run here, and if not why and how to fix it (`Monitor::probe`).
    probe: fn() -> std::result::Result<(), Unavailable>,
    /// Opens it, putting what signals events in the monitor's wait set.
    open: fn(&Options, &Epoll) -> Result<Box<dyn Backend>>,
    /// Why `Auto` must not even try it here (asked for by name, it is tried anyway).
    auto_skip: fn() -> Option<Unavailable>,
}

/// Every backend, best first: `Auto` tries them in this order and stops at the first that
/// opens; the last, Disabled, always does.
#[cfg(target_os = "linux")]
const BACKENDS: [Row; 4] = [
    Row {
        kind: BackendKind::Kernel,
        probe: kernel::probe,
        auto_skip: kernel::auto_skip,
        open: |o, epoll| {
            Ok(Box::new(kernel::KernelBackend::open(
                o.possible_cpus,
                epoll,
            )?))
        },
    },
    Row {
        kind: BackendKind::Bpf,
        probe: bpf::probe,
        auto_skip: || None,
        open: |o, epoll| {
            Ok(Box::new(bpf::BpfBackend::open(
                o.possible_cpus,
                Some(epoll),
                o.handoff_signal,
            )?))
        },
    },
    Row {
        kind: BackendKind::Perf,
        probe: perf::probe,
        auto_skip: || None,
        open: |o, _epoll| {
            Ok(Box::new(perf::PerfBackend::open(
                o.possible_cpus,
                o.ring_pages,
                o.signal_each_event,
            )?))
        },
    },
    DISABLED,
];

/// The same order elsewhere: each backend but Disabled is refused, saying it needs Linux.
#[cfg(not(target_os = "linux"))]
const BACKENDS: [Row; 4] = [
    Row {
        kind: BackendKind::Kernel,
        probe: || Err(not_linux(BackendKind::Kernel)),
        auto_skip: || None,
        open: |_, _| Err(not_linux(BackendKind::Kernel).into()),
    },
    Row {
        kind: BackendKind::Bpf,
        probe: || Err(not_linux(BackendKind::Bpf)),
        auto_skip: || None,
        open: |_, _| Err(not_linux(BackendKind::Bpf).into()),
    },
    Row {
        kind: BackendKind::Perf,
        probe: || Err(not_linux(BackendKind::Perf)),
        auto_skip: || None,
        open: |_, _| Err(not_linux(BackendKind::Perf).into()),
    },
    DISABLED,
];

/// Why a backend cannot run on another OS than Linux.
#[cfg(not(target_os = "linux"))]
fn not_linux(kind: BackendKind) -> Unavailable {
    Unavailable::new(kind, "it counts blocks with Linux's scheduler, and this is another OS")
        .with_fix("run on Linux to overlap blocking with computation; here umt-rt is a plain work-stealing pool")
}

/// The backend that always opens, last in every order.
const DISABLED: Row = Row {
    kind: BackendKind::Disabled,
    probe: || Ok(()),
    auto_skip: || None,
    open: |_, _| Ok(Box::new(Disabled)),
};

/// Whether `kind` can run on this machine (`Auto` always can: it falls back to Disabled).
pub(super) fn probe(kind: BackendKind) -> std::result::Result<(), Unavailable> {
    BACKENDS
        .iter()
        .find(|row| row.kind == kind)
        .map_or(Ok(()), |row| (row.probe)())
}

/// Opens the backend `requested` asks for: `Auto` tries Kernel, then Bpf, then Perf, and falls
/// back to Disabled, recording why each was rejected; an explicit backend that cannot run is an
/// error.
pub(super) fn open(
    requested: BackendKind,
    options: &Options,
    epoll: &Epoll,
) -> Result<(Box<dyn Backend>, Selection)> {
    let auto = requested == BackendKind::Auto;
    let mut rejected = Vec::new();
    for row in BACKENDS.iter().filter(|row| auto || row.kind == requested) {
        if auto && let Some(u) = (row.auto_skip)() {
            rejected.push(u);
            continue;
        }
        match (row.open)(options, epoll) {
            Ok(backend) => {
                let selection = Selection {
                    requested,
                    chosen: row.kind,
                    rejected,
                };
                return Ok((backend, selection));
            }
            Err(Error::Unavailable(u)) if auto => rejected.push(u),
            // Another Monitor of this process holds the kernel's one UMT state.
            Err(Error::KernelBusy) if auto => rejected.push(
                Unavailable::new(
                    BackendKind::Kernel,
                    "UMT is already enabled in this process by another Monitor".to_string(),
                )
                .with_fix("share one Monitor (one runtime) per process to get the Kernel backend"),
            ),
            Err(e) => return Err(e),
        }
    }
    // Not reached: the table ends with Disabled, which always opens.
    let selection = Selection {
        requested,
        chosen: BackendKind::Disabled,
        rejected,
    };
    Ok((Box::new(Disabled), selection))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_every_backend_once_best_first_and_ends_with_disabled() {
        let kinds: Vec<BackendKind> = BACKENDS.iter().map(|row| row.kind).collect();
        assert_eq!(
            kinds,
            [
                BackendKind::Kernel,
                BackendKind::Bpf,
                BackendKind::Perf,
                BackendKind::Disabled
            ]
        );
    }

    #[test]
    fn auto_and_disabled_need_nothing() {
        assert!(probe(BackendKind::Auto).is_ok());
        assert!(probe(BackendKind::Disabled).is_ok());
    }

    #[test]
    fn disabled_is_chosen_when_asked_for() -> Result<()> {
        let epoll = Epoll::new(crate::monitor::waitset::EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| Error::os("epoll_create1", e))?;
        let options = Options {
            possible_cpus: 1,
            ring_pages: 1,
            signal_each_event: true,
            handoff_signal: None,
        };
        let (backend, selection) = open(BackendKind::Disabled, &options, &epoll)?;
        assert_eq!(selection.chosen, BackendKind::Disabled);
        assert!(selection.rejected.is_empty());
        assert!(!backend.counts_are_live());
        Ok(())
    }
}
