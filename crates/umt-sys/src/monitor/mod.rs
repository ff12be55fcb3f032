//! The [`Monitor`]: per-core block/unblock events of registered threads, from whichever
//! backend this machine supports. The protocol is described step by step in `README.md` beside
//! this file.

#[cfg(target_os = "linux")]
mod bpf;
#[cfg(all(target_os = "linux", umt_bpf))]
mod bpf_loader;
mod handoff;
#[cfg(target_os = "linux")]
mod kernel;
mod ops;
#[cfg_attr(not(all(target_os = "linux", umt_bpf)), allow(dead_code))]
mod over;
#[cfg(target_os = "linux")]
mod perf;
mod select;
#[cfg(target_os = "linux")]
mod shared;
mod waitset;

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use waitset::{Epoll, EpollEvent, EpollTimeout};

use crate::backend::{BackendKind, Selection, Unavailable};
use crate::cpu::{self, CpuId};
use crate::error::{Error, Result};
use crate::event::MonitorEvent;
use ops::{Backend, Context, Held};

#[cfg(target_os = "linux")]
pub use bpf::BPF_MAX_THREADS;
pub use handoff::{HANDOFF_ENABLED, HANDOFF_IN_TASK, HANDOFF_SIGNAL_VALUE, Handoff, HandoffFlags};
#[cfg(target_os = "linux")]
pub use perf::DEFAULT_RING_PAGES;

/// Most threads one monitor can register at once with the Bpf backend (which runs only on
/// Linux: the same value everywhere, so that code using it builds on every OS).
#[cfg(not(target_os = "linux"))]
pub const BPF_MAX_THREADS: u32 = 16384;
/// Default data pages per perf ring (the Perf backend runs only on Linux).
#[cfg(not(target_os = "linux"))]
pub const DEFAULT_RING_PAGES: usize = 16;

/// Counters of what a monitor has seen since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MonitorStats {
    /// Block events (from the kernel or from switch records).
    pub blocks: u64,
    /// Unblock events.
    pub unblocks: u64,
    /// Migrations of runnable threads that were compensated.
    pub migrations: u64,
    /// Ring records the kernel reported dropped because a ring was full.
    pub lost_records: u64,
    /// Times a ring was found full: records may have been dropped, so the thread's state was
    /// re-read from `/proc` (a sign that `ring_pages` is too small or drains too rare).
    pub overflows: u64,
    /// Times a thread's state was re-read from `/proc` because records may have been lost
    /// (Perf only), whether or not that changed a count.
    pub resyncs: u64,
    /// Threads currently registered.
    pub registered: u64,
    /// Notifications the backend sent to user space: the Bpf backend's wake-ups (one each
    /// time a CPU whose waiter had armed it ran out of ready threads), the Kernel backend's
    /// signals in idle-only mode (a drop to zero that found the CPU's file empty, which it is
    /// once its waiter read it before sleeping). In its events mode and with the Perf backend
    /// every event is signalled: `blocks + unblocks`. Each one may wake a
    /// leader; reads batch the ones that arrive while it runs.
    pub wakeups: u64,
    /// Times a core's ready count dropped to zero, where the backend counts them (Bpf, and
    /// Kernel in idle-only mode; 0 elsewhere): what a runtime that is told of every idle core would
    /// be told, against [`MonitorStats::wakeups`], what it was.
    pub drops: u64,
    /// Signals the directed handoff sent ([`MonitorBuilder::directed_handoff`]): each asked
    /// a thread running inside a task to step aside for one woken onto its CPU.
    pub handoff_signals: u64,
}

/// Configures and builds a [`Monitor`].
#[derive(Debug, Clone)]
pub struct MonitorBuilder {
    backend: BackendKind,
    ring_pages: usize,
    signal_each_event: bool,
    handoff_signal: Option<i32>,
}

impl Default for MonitorBuilder {
    fn default() -> Self {
        MonitorBuilder {
            backend: BackendKind::Auto,
            ring_pages: DEFAULT_RING_PAGES,
            signal_each_event: true,
            handoff_signal: None,
        }
    }
}

impl MonitorBuilder {
    /// The backend to use (default [`BackendKind::Auto`]).
    pub fn backend(mut self, backend: BackendKind) -> Self {
        self.backend = backend;
        self
    }

    /// Data pages of each thread's perf ring (a power of two; default
    /// [`DEFAULT_RING_PAGES`]). Each context switch takes 32 bytes of ring.
    pub fn ring_pages(mut self, pages: usize) -> Self {
        self.ring_pages = pages;
        self
    }

    /// Whether every event wakes the waiters of [`Monitor::wait`] and [`Monitor::wait_cpu`]
    /// (default `true`).
    ///
    /// With `false`, the Perf backend asks the kernel to wake waiters only when a thread's
    /// ring is half full. A context switch then writes its record and nothing else, where it
    /// would also raise an irq_work self-interrupt: a VM exit in a virtual machine, which
    /// costs ten times the record itself (measured figures: `src/monitor/README.md`, "What a
    /// record costs"). Waiters then sleep through events, so
    /// whoever turns this off must poll: [`Monitor::drain_with`] from a thread that runs when
    /// a core idles, [`Monitor::drain_current_thread`] from the monitored threads. The Kernel
    /// backend signals its files either way: its signal raises no interrupt.
    pub fn signal_each_event(mut self, signal: bool) -> Self {
        self.signal_each_event = signal;
        self
    }

    /// Asks for the directed handoff (`README.md`, "Directed handoff"): when a registered
    /// thread that blocked inside a task ([`HANDOFF_IN_TASK`]) is woken onto a CPU where
    /// another registered thread runs inside a task, that one gets `signal`, so that it can
    /// step aside. The caller must handle `signal` before any thread sets its flags
    /// ([`Monitor::set_handoff_flags`]). Only the Bpf backend on Linux 6.13 or later (the
    /// `bpf_send_signal_task` kfunc) runs it; elsewhere the monitor opens without it and
    /// [`Monitor::handoff`] says why.
    pub fn directed_handoff(mut self, signal: i32) -> Self {
        self.handoff_signal = Some(signal);
        self
    }

    /// Builds the monitor. With `Auto` this never fails for lack of kernel support: it falls
    /// back to Disabled and says why in [`Monitor::selection`].
    pub fn build(self) -> Result<Monitor> {
        if self.ring_pages == 0 || !self.ring_pages.is_power_of_two() {
            return Err(Error::InvalidRingPages {
                pages: self.ring_pages,
            });
        }
        let possible = cpu::possible_cpus()?;
        let cx = Context::new(possible)?;
        let options = select::Options {
            possible_cpus: possible,
            ring_pages: self.ring_pages,
            signal_each_event: self.signal_each_event,
            handoff_signal: self.handoff_signal,
        };
        let (backend, selection) = select::open(self.backend, &options, &cx.epoll)?;
        Ok(Monitor {
            id: NEXT_MONITOR_ID.fetch_add(1, Ordering::Relaxed),
            backend,
            handoff_asked: self.handoff_signal.is_some(),
            selection,
            cx,
        })
    }
}

/// Watches registered threads and keeps per-core ready counts.
///
/// Create one per process (the Kernel backend allows only one), register the threads to watch
/// from the threads themselves, and drain it from anywhere: the leader after waiting on
/// [`Monitor::as_fd`] (or [`Monitor::wait`]), workers at their scheduling points.
///
/// ```no_run
/// use umt_sys::{BackendKind, Monitor};
///
/// let monitor = Monitor::new(BackendKind::Auto)?;
/// println!("{}", monitor.selection());
/// std::thread::scope(|s| {
///     s.spawn(|| {
///         monitor.register_current_thread()?;
///         std::thread::sleep(std::time::Duration::from_millis(5)); // blocks: one event
///         monitor.unregister_current_thread()
///     });
///     while monitor.wait(Some(std::time::Duration::from_millis(50)))? {
///         monitor.drain_with(|ev| println!("{ev:?}"))?;
///     }
///     Ok::<_, umt_sys::Error>(())
/// })?;
/// # Ok::<_, umt_sys::Error>(())
/// ```
pub struct Monitor {
    /// Names this monitor in the calling thread's [`REGISTERED_HERE`].
    id: u64,
    /// Where the events come from: every operation is delegated to it. Dropped before `cx`,
    /// whose wait sets hold its descriptors.
    backend: Box<dyn Backend>,
    /// Whether the directed handoff was asked for.
    handoff_asked: bool,
    /// How `backend` was chosen.
    selection: Selection,
    /// What every backend gets from the monitor: the wait sets, the drained ready counts, the
    /// registered threads (whether the calling thread is registered is [`REGISTERED_HERE`]'s
    /// answer, not theirs), the events kept for the next drainer, the statistics.
    cx: Context,
}

impl fmt::Debug for Monitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Monitor")
            .field("selection", &self.selection)
            .field("ready", &self.cx.counts.snapshot())
            .finish_non_exhaustive()
    }
}

impl Monitor {
    /// A monitor with the given backend and default options.
    pub fn new(backend: BackendKind) -> Result<Monitor> {
        Monitor::builder().backend(backend).build()
    }

    /// A builder for the options.
    pub fn builder() -> MonitorBuilder {
        MonitorBuilder::default()
    }

    /// Whether `backend` can run on this machine, and if not why and how to fix it.
    pub fn probe(backend: BackendKind) -> std::result::Result<(), Unavailable> {
        select::probe(backend)
    }

    /// The backend in use (never `Auto`).
    pub fn backend(&self) -> BackendKind {
        self.selection.chosen
    }

    /// How the backend was chosen, with the reasons better ones were rejected.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// [`MonitorBuilder::signal_each_event`] after the backend is known, for the threads that
    /// register from now on (those registered keep their setting). For a user whose choice
    /// depends on the backend `Auto` picked: the signal per event is what the Perf backend
    /// costs most in a virtual machine, and the Kernel backend signals its files either way.
    pub fn set_signal_each_event(&self, signal: bool) {
        self.backend.set_signal_each_event(signal);
    }

    /// `true` unless the backend is Disabled.
    pub fn is_active(&self) -> bool {
        self.selection.chosen != BackendKind::Disabled
    }

    /// `true` when the ready counts live in memory the kernel updates (Bpf, and Kernel in its
    /// default, idle-only mode): [`Monitor::ready`]
    /// is then current without a drain, drains only consume wake-ups, and a wait returns only
    /// when a CPU runs out of ready threads (not at every event). The other backends deliver
    /// events, which a drain applies to the counts.
    pub fn counts_are_live(&self) -> bool {
        self.backend.counts_are_live()
    }

    /// Starts monitoring the calling thread. It counts as ready on its current core.
    pub fn register_current_thread(&self) -> Result<()> {
        let tid = cpu::current_tid();
        if self.registered_here() {
            return Err(Error::AlreadyRegistered { tid });
        }
        // Threads that exited registered give back their slots and their ids (Bpf), which a
        // new thread (this one) may be reusing.
        self.backend.reap_exited(&self.cx);
        if !self.cx.lock_registered().insert(tid) {
            // A thread that exited registered had this id, and its exit is not reaped yet:
            // its registration goes now (this thread is not registered, so it is not its),
            // and what it still counted goes, as at an exit. `tid` stays in the registered
            // set, now for the caller.
            self.backend.retire_stale(&self.cx, tid);
        }
        let res = self.backend.register(&self.cx, tid);
        match res {
            Ok(()) => REGISTERED_HERE.with_borrow_mut(|here| here.push(self.id)),
            Err(_) => {
                self.cx.lock_registered().remove(&tid);
            }
        }
        res
    }

    /// Whether the calling thread registered with this monitor (and has not unregistered).
    fn registered_here(&self) -> bool {
        REGISTERED_HERE.with_borrow(|here| here.contains(&self.id))
    }

    /// Stops monitoring the calling thread; its contribution to the ready counts is removed.
    pub fn unregister_current_thread(&self) -> Result<()> {
        let tid = cpu::current_tid();
        if !self.registered_here() {
            return Err(Error::NotRegistered { tid });
        }
        REGISTERED_HERE.with_borrow_mut(|here| here.retain(|&id| id != self.id));
        let res = self.backend.unregister(&self.cx, tid);
        self.cx.lock_registered().remove(&tid);
        res
    }

    /// Stops reporting the calling thread's context switches until
    /// [`Monitor::unmute_current_thread`]. The thread keeps counting as ready on its core.
    ///
    /// For a registered thread about to spin or yield while it looks for work: its switches are
    /// then preemptions, which change no count, but with the Perf backend each one still costs
    /// a ring record, an interrupt and a wake-up of whoever waits on the core (see
    /// `src/monitor/README.md`, "Muting"). An idle worker that yields to another thread pays
    /// that twice per yield. Unmute before anything that may block: a block while muted is not
    /// reported, and the thread counts as ready until it unmutes.
    ///
    /// With the Kernel backend, which never reports preemptions, and with Disabled, this does
    /// nothing. Muting a muted thread does nothing. With the Perf backend, a thread not
    /// registered with this monitor gets [`Error::NotRegistered`].
    #[inline]
    pub fn mute_current_thread(&self) -> Result<()> {
        self.backend.mute()
    }

    /// Reports the calling thread's context switches again after
    /// [`Monitor::mute_current_thread`]. If the thread now runs on another core than when it
    /// muted, its count moves there (a migration). Unmuting a thread that is not muted does
    /// nothing; errors as for muting.
    #[inline]
    pub fn unmute_current_thread(&self) -> Result<()> {
        self.backend.unmute(&self.cx)
    }

    /// `true` when the calling thread is registered.
    pub fn is_current_thread_registered(&self) -> bool {
        self.registered_here()
    }

    /// Reads every pending event without blocking, applies it to the ready counts and hands it
    /// to `on_event`. Any thread may call it, concurrently with others: each event is seen by
    /// exactly one drainer. Returns the number of events handed out.
    pub fn drain_with(&self, mut on_event: impl FnMut(&MonitorEvent)) -> Result<usize> {
        let mut n = 0;
        for ev in &self.cx.take_pending() {
            on_event(ev);
            n += 1;
        }
        // The backend applies each event to the counts (where they are not live) before it
        // hands it out here.
        self.backend.drain(&self.cx, &mut |ev| {
            on_event(&ev);
            n += 1;
        })?;
        Ok(n)
    }

    /// Drains only what concerns the calling thread, into the ready counts: its own ring
    /// (Perf), or the file of the CPU it runs on (Kernel, events mode). Returns the number of events
    /// applied; they are counted in the statistics but handed to no one.
    ///
    /// For a monitored thread at its scheduling points when the waiters are not signalled
    /// (see [`MonitorBuilder::signal_each_event`]): a thread that has just come back from a
    /// block finds its own unblock here, so its core's count shows whether another thread
    /// took its place meanwhile. With the Perf backend it costs two loads when
    /// the ring is empty; with the Kernel backend in events mode, one `read`. A ring another
    /// drainer is reading is skipped: that drainer applies it. Where the counts are live (Bpf,
    /// Kernel in idle-only mode) and with Disabled it does nothing and returns 0. With the Perf
    /// backend, a thread not registered with this monitor gets [`Error::NotRegistered`].
    pub fn drain_current_thread(&self) -> Result<usize> {
        self.backend.drain_current_thread(&self.cx)
    }

    /// Drains what concerns `cpu` into the ready counts, without blocking: with the Kernel
    /// backend in events mode the file of `cpu`, with Perf the rings of the threads that registered
    /// while running on `cpu` (pinned threads: those of that core). Returns the number of
    /// events applied; they are counted in the statistics but handed to no one
    /// ([`Monitor::drain_with`] hands out every event, for watchers). Where the counts are
    /// live it only notes what [`Monitor::wait_cpu`] compares against: with the Bpf backend
    /// it reads `cpu`'s wake-ups and returns how many; with the Kernel backend (idle-only) it
    /// returns how many times `cpu` ran out of ready threads since its last drain, without a
    /// system call.
    ///
    /// For a runtime with one waiter per core ([`Monitor::wait_cpu`]): each drains its own
    /// core, so the work of a drain does not grow with the number of cores. A thread that
    /// registered on one CPU and runs on another (not pinned) still has its events applied
    /// where they happened, by the drains of the CPU it registered on.
    pub fn drain_cpu(&self, cpu: CpuId) -> Result<usize> {
        self.backend.drain_cpu(&self.cx, cpu, Held::Skip)
    }

    /// [`Monitor::drain_cpu`], for a reader that needs every event the kernel had reported
    /// for `cpu`'s threads when it was called: with the Perf backend, a ring another drainer
    /// holds is waited for, a record at a time, instead of passed by. That drainer may be
    /// preempted with a record in hand (a waiter at `SCHED_IDLE` on a core another program
    /// keeps busy may not run for a long time), so this may block: call it where exact
    /// counts matter more than a prompt return (statistics), never at a scheduling point.
    /// With every other backend it is [`Monitor::drain_cpu`].
    pub fn settle_cpu(&self, cpu: CpuId) -> Result<usize> {
        self.backend.drain_cpu(&self.cx, cpu, Held::Wait)
    }

    /// [`Monitor::drain_with`], collecting the events.
    pub fn drain(&self) -> Result<Vec<MonitorEvent>> {
        let mut out = Vec::new();
        self.drain_with(|e| out.push(*e))?;
        Ok(out)
    }

    /// Waits until events may be pending or `timeout` passes (`None`: forever). Returns `true`
    /// when woken by the kernel, `false` on timeout or signal. Drain afterwards.
    ///
    /// epoll counts whole milliseconds: the timeout is rounded up, so a sub-millisecond one
    /// waits a millisecond instead of returning at once.
    ///
    /// With the Bpf backend, and the Kernel backend in idle-only mode ([`Monitor::counts_are_live`]),
    /// it returns early only when a CPU ran out of ready threads since the last
    /// [`Monitor::drain_with`].
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        let woken = self.backend.arm_all()? || wait_on(&self.cx.epoll, timeout)?;
        self.backend.disarm_all();
        Ok(woken)
    }

    /// [`Monitor::wait`], woken only by what concerns `cpu`: with the Kernel backend, its
    /// file; with Perf, the rings of the threads registered while running on `cpu`
    /// (pinned workers: that core's workers). A thread that waits here pinned to `cpu` at
    /// `SCHED_IDLE` runs exactly when that core has nothing else to run: when its workers have
    /// blocked. Another waiter's drain may consume the readiness first (perf rings report it
    /// once); that drain has then applied the events.
    ///
    /// With the Bpf backend, and the Kernel backend in idle-only mode, it returns early only
    /// when `cpu` ran out of ready threads since its last [`Monitor::drain_cpu`] (then at
    /// once, with no system call with the Kernel backend), or does so while this waits: the one moment its waiter
    /// must act. Every other change is in [`Monitor::ready`] already. Only a waiter that
    /// sleeps here is signalled: one that is awake, or preempted, finds the drops in the
    /// counters when it next looks (steps B3 and K2 of `src/monitor/README.md`).
    pub fn wait_cpu(&self, cpu: CpuId, timeout: Option<Duration>) -> Result<bool> {
        let set = self.cx.cpu_set(cpu, &*self.backend)?;
        let woken = self.backend.arm_cpu(cpu)? || wait_on(set, timeout)?;
        self.backend.disarm_cpu(cpu);
        Ok(woken)
    }

    /// Announces that the monitor's owner is shutting it down:
    /// - every wait ([`Monitor::wait`], [`Monitor::wait_cpu`]) returns at once, now and from
    ///   now on, so the threads that wait on the monitor need not wait out their timeouts;
    /// - with the Kernel backend, a monitor opened in this process while this one is still
    ///   alive (a thread may hold it a moment longer) waits for it to be dropped, up to 5 s,
    ///   instead of failing at once with [`Error::KernelBusy`].
    ///
    /// Drains are unaffected.
    pub fn shut_down(&self) -> Result<()> {
        self.backend.shut_down();
        self.cx.interrupt_waits()
    }

    /// The ready count of `cpu`: monitored threads running or runnable there, as of the last
    /// drain (with the Bpf backend: now, read from the shared counters).
    #[inline]
    pub fn ready(&self, cpu: CpuId) -> i64 {
        self.backend.ready(&self.cx, cpu)
    }

    /// All ready counts, indexed by CPU id (one entry per possible CPU).
    pub fn ready_counts(&self) -> Vec<i64> {
        self.backend.ready_counts(&self.cx)
    }

    /// How long `cpu` has had more than one ready monitored thread since the monitor
    /// started, where the backend keeps it at every change of the count: the Bpf backend's
    /// programs do, in the kernel, each end of an episode within the few instructions of the
    /// change that made it (the monitor README's "Time above one"). `None` for the other
    /// backends, whose counts change only at a drain (a caller estimates it from its drains
    /// then), for a CPU out of range, and where the kernel's clock cannot be read from the
    /// process (a time namespace of its own that it has left for its children). A reading
    /// taken while one of the process's own changes of that CPU's count is under way (a
    /// thread registering there, preempted in the middle) gives the last whole one.
    ///
    /// ```no_run
    /// let m = umt_sys::Monitor::new(umt_sys::BackendKind::Bpf)?;
    /// m.register_current_thread()?;
    /// println!("{:?}", m.oversubscribed(0)); // Some(0ns): one thread
    /// # Ok::<(), umt_sys::Error>(())
    /// ```
    pub fn oversubscribed(&self, cpu: CpuId) -> Option<std::time::Duration> {
        self.backend.oversubscribed(cpu)
    }

    /// Whether the directed handoff runs ([`MonitorBuilder::directed_handoff`]), and if it
    /// was asked for and does not, why. Always [`Handoff::Off`] when not asked for.
    pub fn handoff(&self) -> Handoff {
        self.backend.handoff(self.handoff_asked)
    }

    /// The calling thread's handle for its handoff flags: `None` unless the handoff runs and
    /// the thread is registered.
    pub fn handoff_flags(&self) -> Option<HandoffFlags> {
        let slot = self.backend.handoff_slot(cpu::current_tid())?;
        Some(HandoffFlags { slot })
    }

    /// Sets a registered thread's handoff flags ([`HANDOFF_ENABLED`], [`HANDOFF_IN_TASK`]):
    /// one store to memory the programs read. A thread that registers again starts with none.
    #[inline]
    pub fn set_handoff_flags(&self, thread: HandoffFlags, flags: u32) {
        self.backend.set_handoff_flags(thread.slot, flags);
    }

    /// Counters of what the monitor has seen.
    pub fn stats(&self) -> MonitorStats {
        let s = &self.cx.stats;
        self.backend.reap_exited(&self.cx);
        // The counters the backend keeps itself, where it does (else the drains count).
        let kept = self.backend.totals();
        MonitorStats {
            blocks: kept.map_or_else(|| s.blocks.load(Ordering::Relaxed), |t| t.blocks),
            unblocks: kept.map_or_else(|| s.unblocks.load(Ordering::Relaxed), |t| t.unblocks),
            migrations: kept.map_or_else(|| s.migrations.load(Ordering::Relaxed), |t| t.migrations),
            wakeups: match kept {
                Some(t) => t.notes,
                None => s.blocks.load(Ordering::Relaxed) + s.unblocks.load(Ordering::Relaxed),
            },
            drops: kept.map_or(0, |t| t.drops),
            handoff_signals: kept.map_or(0, |t| t.handoffs),
            lost_records: s.lost_records.load(Ordering::Relaxed),
            overflows: s.overflows.load(Ordering::Relaxed),
            resyncs: self.backend.resyncs(),
            registered: self.cx.lock_registered().len() as u64,
        }
    }
}

/// Source of [`Monitor`]'s `id`.
static NEXT_MONITOR_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The monitors (their ids) the calling thread is registered with. It dies with the
    /// thread, so a new thread that the kernel gave the id of one that exited registered is
    /// not taken for it.
    static REGISTERED_HERE: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Waits on `epoll` until a descriptor is ready (`true`) or `timeout` passes (`false`).
fn wait_on(epoll: &Epoll, timeout: Option<Duration>) -> Result<bool> {
    let timeout = match timeout {
        None => EpollTimeout::NONE,
        Some(d) => {
            EpollTimeout::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(EpollTimeout::MAX)
        }
    };
    let mut events = [EpollEvent::empty(); 1];
    match epoll.wait(&mut events, timeout) {
        Ok(n) => Ok(n > 0),
        Err(Errno::EINTR) => Ok(false),
        Err(e) => Err(Error::os("epoll_wait", e)),
    }
}

impl AsFd for Monitor {
    /// The descriptor to put in the leader's epoll: readable when events may be pending.
    ///
    /// With the Kernel backend it holds the files of the CPUs the monitor has opened so far:
    /// those the registered threads may run on (their affinity masks when they registered)
    /// and those waited on or drained (see `src/monitor/README.md`, "The Kernel backend").
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.cx.epoll.0.as_fd()
    }
}
