//! What every backend does, one signature per operation ([`Backend`]), and what it gets from
//! the [`Monitor`](super::Monitor) to do it ([`Context`]: the wait sets, the drained counts,
//! the statistics, the registered threads and the events kept for the next drainer).
//! [`Disabled`] is the backend that does nothing. Which backends exist, and in which order
//! `Auto` tries them, is the table in `select.rs`.

use super::handoff::Handoff;
use std::collections::HashSet;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::waitset::{EfdFlags, Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EventFd};
use nix::errno::Errno;

use crate::cpu::CpuId;
use crate::error::{Error, Result};
use crate::event::{Cause, MonitorEvent};
use crate::ready::ReadyCounts;

/// One source of block/unblock events: Kernel, Bpf, Perf or [`Disabled`]. The
/// [`Monitor`](super::Monitor) delegates every operation to it, with its [`Context`]; the steps
/// each backend takes are in `README.md`.
///
/// Two ways to keep the ready counts: a backend whose counts live in memory the kernel
/// updates ([`Backend::counts_are_live`]) answers [`Backend::ready`] itself; every other one
/// applies the events it reads to the context's counts ([`Context::record`]) and answers from
/// them.
pub(super) trait Backend: Send + Sync {
    /// Whether the ready counts live in memory the kernel updates (see
    /// `Monitor::counts_are_live`).
    fn counts_are_live(&self) -> bool;

    /// Whether threads registering from now on signal every event
    /// (`Monitor::set_signal_each_event`).
    fn set_signal_each_event(&self, _signal: bool) {}

    /// Starts following the calling thread, `tid`: it counts as ready on its CPU. Events this
    /// consumes go through [`Context::record_pending`].
    fn register(&self, cx: &Context, tid: i32) -> Result<()>;

    /// Stops following the calling thread, `tid`, and takes back what it counted.
    fn unregister(&self, cx: &Context, tid: i32) -> Result<()>;

    /// Takes back the registration of a thread that exited registered with id `tid`, which
    /// the calling thread now has and is about to register (see `README.md`, "Exit while
    /// registered").
    fn retire_stale(&self, _cx: &Context, _tid: i32) {}

    /// Gives back what threads that exited registered still hold, where the backend learns
    /// of exits without a drain (Bpf), and forgets them in the context.
    fn reap_exited(&self, _cx: &Context) {}

    /// Stops reporting the calling thread's switches (`Monitor::mute_current_thread`).
    fn mute(&self) -> Result<()> {
        Ok(())
    }

    /// Reports them again (`Monitor::unmute_current_thread`).
    fn unmute(&self, _cx: &Context) -> Result<()> {
        Ok(())
    }

    /// Reads every pending event without blocking, applies those the counts need, and hands
    /// every one to `out` (`Monitor::drain_with`).
    fn drain(&self, cx: &Context, out: &mut dyn FnMut(MonitorEvent)) -> Result<()>;

    /// Drains what concerns the calling thread into the counts; returns the events applied
    /// (`Monitor::drain_current_thread`).
    fn drain_current_thread(&self, cx: &Context) -> Result<usize>;

    /// Drains what concerns `cpu` into the counts (`Monitor::drain_cpu`, and with
    /// [`Held::Wait`] `Monitor::settle_cpu`).
    fn drain_cpu(&self, cx: &Context, cpu: CpuId, held: Held) -> Result<usize>;

    /// Puts what signals `cpu` in `set`, `cpu`'s wait set, when it is made.
    fn watch_cpu(&self, _cpu: CpuId, _set: &Epoll) -> Result<()> {
        Ok(())
    }

    /// Before a wait on the monitor's descriptor: `true` when the caller must not sleep.
    fn arm_all(&self) -> Result<bool> {
        Ok(false)
    }

    /// After that wait, whatever it returned.
    fn disarm_all(&self) {}

    /// Before a wait on `cpu`'s wait set: `true` when the caller must not sleep.
    fn arm_cpu(&self, _cpu: CpuId) -> Result<bool> {
        Ok(false)
    }

    /// After that wait, whatever it returned.
    fn disarm_cpu(&self, _cpu: CpuId) {}

    /// The ready count of `cpu`.
    fn ready(&self, cx: &Context, cpu: CpuId) -> i64 {
        cx.counts.get(cpu)
    }

    /// Every ready count, one per possible CPU.
    fn ready_counts(&self, cx: &Context) -> Vec<i64> {
        cx.counts.snapshot()
    }

    /// The counters the backend keeps itself, where it does (Bpf, Kernel with the counter
    /// page); `None`: the context's statistics have them.
    fn totals(&self) -> Option<Totals> {
        None
    }

    /// How long `cpu`'s ready count has been above one, where the backend keeps it at each
    /// change of the count (Bpf); `None` elsewhere.
    fn oversubscribed(&self, _cpu: CpuId) -> Option<std::time::Duration> {
        None
    }

    /// Times a thread's state was re-read because records may have been lost.
    fn resyncs(&self) -> u64 {
        0
    }

    /// The monitor's owner is shutting it down (`Monitor::shut_down`).
    fn shut_down(&self) {}

    /// The directed handoff's state; `asked` says whether the monitor asked for it (a
    /// backend without it answers from that alone).
    fn handoff(&self, asked: bool) -> Handoff {
        if asked {
            Handoff::Unavailable(
                "only the Bpf backend runs the directed handoff (on Linux 6.13 or later)".into(),
            )
        } else {
            Handoff::Off
        }
    }

    /// The slot of registered thread `tid` for its handoff flags, when the handoff runs.
    fn handoff_slot(&self, _tid: i32) -> Option<u32> {
        None
    }

    /// Sets the handoff flags of `slot`.
    fn set_handoff_flags(&self, _slot: u32, _flags: u32) {}
}

/// What a drainer does with a reader another drainer holds (a Perf ring).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    /// Passes it by: the holder applies what it takes (every drain that must not block).
    Skip,
    /// Waits for the holder's record, then goes on (see `Monitor::settle_cpu`).
    Wait,
}

/// Sums over every CPU of counters a backend keeps itself, for [`crate::MonitorStats`].
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Totals {
    pub(super) blocks: u64,
    pub(super) unblocks: u64,
    pub(super) migrations: u64,
    /// Notifications sent to user space.
    pub(super) notes: u64,
    pub(super) drops: u64,
    /// Directed handoff signals sent.
    pub(super) handoffs: u64,
}

/// Running totals of what the drains applied, for `Monitor::stats`.
#[derive(Debug, Default)]
pub(super) struct StatCounters {
    pub(super) blocks: AtomicU64,
    pub(super) unblocks: AtomicU64,
    pub(super) migrations: AtomicU64,
    pub(super) lost_records: AtomicU64,
    pub(super) overflows: AtomicU64,
}

/// What every backend gets from the monitor, the same for all of them.
pub(super) struct Context {
    /// Ready count per possible CPU, updated by every drain (unless the counts are live).
    pub(super) counts: ReadyCounts,
    /// The one pollable descriptor: holds the per-core files, wake-up buffers or the
    /// per-thread perf rings.
    pub(super) epoll: Epoll,
    /// Per possible CPU, created on first use: the same descriptors as `epoll`, but only those
    /// of that CPU (its file or wake-up buffer, or the rings of threads registered while
    /// running there), for `Monitor::wait_cpu`.
    cpu_sets: Box<[OnceLock<Epoll>]>,
    /// In every wait set: once written (`Monitor::shut_down`), every wait returns at once.
    /// Never read, so it stays readable.
    interrupt: EventFd,
    /// Thread ids registered now (for the statistics, and to find a registration that a
    /// thread which exited registered left behind). Whether the calling thread is registered
    /// is the monitor's thread-local record, not this set's: a new thread may carry the id of
    /// one that exited registered before anything reaped it.
    registered: Mutex<HashSet<i32>>,
    /// Events consumed outside a drain (by register/unregister/unmute): already applied to
    /// `counts`, handed to the next drainer so that watchers see every event.
    pending: Mutex<Vec<MonitorEvent>>,
    /// Running totals for `Monitor::stats`.
    pub(super) stats: StatCounters,
}

impl Context {
    /// The context of a monitor of `possible` CPUs: its descriptor, with the interrupt in it.
    pub(super) fn new(possible: usize) -> Result<Context> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| Error::os("epoll_create1", e))?;
        let interrupt =
            EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .map_err(|e| Error::os("eventfd", e))?;
        watch_interrupt(&epoll, &interrupt)?;
        Ok(Context {
            counts: ReadyCounts::new(possible),
            epoll,
            cpu_sets: (0..possible).map(|_| OnceLock::new()).collect(),
            interrupt,
            registered: Mutex::new(HashSet::new()),
            pending: Mutex::new(Vec::new()),
            stats: StatCounters::default(),
        })
    }

    /// The possible CPUs.
    pub(super) fn possible_cpus(&self) -> usize {
        self.cpu_sets.len()
    }

    /// The wait set of `cpu`, created on first use with the interrupt and what `backend`
    /// watches for `cpu` ([`Backend::watch_cpu`]) in it.
    pub(super) fn cpu_set(&self, cpu: CpuId, backend: &dyn Backend) -> Result<&Epoll> {
        let cell = self.cpu_sets.get(cpu).ok_or(Error::NoSuchCpu {
            cpu,
            possible: self.cpu_sets.len(),
        })?;
        if let Some(set) = cell.get() {
            return Ok(set);
        }
        let set = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| Error::os("epoll_create1", e))?;
        watch_interrupt(&set, &self.interrupt)?;
        backend.watch_cpu(cpu, &set)?;
        // Two first uses at once: the loser's set is closed here, and everyone gets (and adds
        // rings to) the winner's.
        Ok(cell.get_or_init(|| set))
    }

    /// The wait set of `cpu` if it was made already (none for a CPU out of range).
    pub(super) fn cpu_set_made(&self, cpu: CpuId) -> Option<&Epoll> {
        self.cpu_sets.get(cpu).and_then(OnceLock::get)
    }

    /// Makes every wait return at once, now and from now on.
    pub(super) fn interrupt_waits(&self) -> Result<()> {
        match self.interrupt.write(1) {
            Ok(_) | Err(Errno::EAGAIN) => Ok(()),
            Err(e) => Err(Error::os("write(eventfd)", e)),
        }
    }

    /// The thread ids registered now.
    pub(super) fn lock_registered(&self) -> MutexGuard<'_, HashSet<i32>> {
        lock(&self.registered)
    }

    /// Forgets the registration of threads that exited while registered.
    pub(super) fn forget_exited(&self, exited: Vec<i32>) {
        if !exited.is_empty() {
            let mut registered = self.lock_registered();
            for tid in exited {
                registered.remove(&tid);
            }
        }
    }

    /// The events consumed outside a drain since the last call.
    pub(super) fn take_pending(&self) -> Vec<MonitorEvent> {
        std::mem::take(&mut *lock(&self.pending))
    }

    /// Applies an event consumed outside a drain and queues it for the next drainer.
    pub(super) fn record_pending(&self, ev: MonitorEvent) {
        self.record(ev);
        lock(&self.pending).push(ev);
    }

    /// Applies one event to the counts and statistics.
    pub(super) fn record(&self, ev: MonitorEvent) {
        self.counts.apply(ev.cpu, ev.events);
        let s = &self.stats;
        match ev.cause {
            Cause::Kernel | Cause::Switch | Cause::Counted => {
                s.blocks
                    .fetch_add(u64::from(ev.events.blocked), Ordering::Relaxed);
                s.unblocks
                    .fetch_add(u64::from(ev.events.unblocked), Ordering::Relaxed);
            }
            Cause::Migration => {
                s.migrations
                    .fetch_add(u64::from(ev.events.unblocked), Ordering::Relaxed);
            }
            Cause::Resync | Cause::Register | Cause::Unregister | Cause::Exit => {}
        }
    }

    /// Counts one overflow: counts were lost (see `MonitorStats::overflows`).
    pub(super) fn count_overflow(&self) {
        self.stats.overflows.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds a drain's lost records and overflows to the statistics. Only what is not zero:
    /// the counters are shared by every thread, and a polling runtime drains at every
    /// scheduling point.
    pub(super) fn count_losses(&self, lost: u64, overflows: u64) {
        if lost > 0 {
            self.stats.lost_records.fetch_add(lost, Ordering::Relaxed);
        }
        if overflows > 0 {
            self.stats.overflows.fetch_add(overflows, Ordering::Relaxed);
        }
    }
}

/// No monitoring: no events, every count stays 0, every operation does nothing.
pub(super) struct Disabled;

impl Backend for Disabled {
    fn counts_are_live(&self) -> bool {
        false
    }
    fn register(&self, _cx: &Context, _tid: i32) -> Result<()> {
        Ok(())
    }
    fn unregister(&self, _cx: &Context, _tid: i32) -> Result<()> {
        Ok(())
    }
    fn drain(&self, _cx: &Context, _out: &mut dyn FnMut(MonitorEvent)) -> Result<()> {
        Ok(())
    }
    fn drain_current_thread(&self, _cx: &Context) -> Result<usize> {
        Ok(0)
    }
    fn drain_cpu(&self, _cx: &Context, _cpu: CpuId, _held: Held) -> Result<usize> {
        Ok(0)
    }
}

/// The epoll tag of the interrupt descriptor: no CPU index or thread id takes it.
const INTERRUPT_TAG: u64 = u64::MAX;

/// Puts the interrupt descriptor in a wait set.
fn watch_interrupt(set: &Epoll, interrupt: &EventFd) -> Result<()> {
    set.add(
        interrupt.as_fd(),
        EpollEvent::new(EpollFlags::EPOLLIN, INTERRUPT_TAG),
    )
    .map_err(|e| Error::os("epoll_ctl(ADD)", e))
}

/// Locks a mutex whose data stays consistent even if a holder panicked (every update is a
/// single call).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poison| poison.into_inner())
}
