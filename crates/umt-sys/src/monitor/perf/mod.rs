//! The Perf backend: UMT events on a stock kernel, from `perf_event_open`
//! context-switch records.
//!
//! Each registered thread gets a dummy software event with `context_switch = 1` and
//! `exclude_kernel = 1` (allowed unprivileged at `perf_event_paranoid <= 2`), an mmap'd ring, and
//! `watermark = 1, wakeup_watermark = 1` so every record wakes the poller (side-band records
//! ignore `wakeup_events`); or, with `MonitorBuilder::signal_each_event(false)`, a wake-up only
//! at half a ring, for users that poll (see the monitor's `README.md`). A switch-out without
//! `PERF_RECORD_MISC_SWITCH_OUT_PREEMPT` means the thread blocked; the next switch-in means it
//! runs again. A per-thread [`Tracker`] turns that
//! into per-core events and compensates migrations. A `PERF_RECORD_LOST` makes the drain re-read
//! the thread's state from `/proc/self/task/<tid>/stat`, so counts are never silently wrong.
//!
//! Cost: the kernel writes a record at *every* switch of a monitored thread, preemptions and
//! yields included, and each record that crosses the watermark queues an irq_work, a
//! self-interrupt. On bare metal that is cheap; in a virtual machine without posted interrupts
//! it is a VM exit, which costs ten times the record (see the monitor's `README.md`, "What a
//! record costs"). Workers that switch rarely, as pinned HPC workers do, hardly pay it; the
//! kernel backend, which signals only blocks and unblocks, never does. A thread that spins or
//! yields waiting for work can mute itself (`Monitor::mute_current_thread`: the ring is paused,
//! one ioctl each way), so its preemptions cost nothing; umt-rt's idle workers do (see the
//! monitor's `README.md`, "Muting").

mod parse;
mod probe;
mod ring;

use std::cell::RefCell;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, TryLockError, Weak};

use crossbeam_utils::CachePadded;
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags, EpollTimeout};

use crate::cpu::{self, CpuId};
use crate::error::{Error, Result};
use crate::event::{Cause, MonitorEvent};
use crate::monitor::ops::{Backend, Context, Held};
use crate::ready::Tracker;
pub(crate) use probe::probe;
use probe::{classify_open_error, open_sampler, page_size, read_paranoid};
use ring::{RingPeek, SlotInner, set_paused, sink_for};

/// Default data pages per thread ring: 16 pages hold about 2000 context switches.
pub const DEFAULT_RING_PAGES: usize = 16;

/// What one drain found besides events.
#[derive(Debug, Default)]
pub(crate) struct DrainOutcome {
    /// Records the kernel reported as lost.
    pub lost: u64,
    /// Rings found (nearly) full: records may have been dropped, the thread was resynchronised.
    pub overflows: u64,
    /// Threads that exited while registered (now forgotten).
    pub exited: Vec<i32>,
}

pub(crate) struct PerfBackend {
    /// Tells this backend's entries in `OWN` from other monitors'.
    id: u64,
    /// Bytes of ring data per thread.
    ring_bytes: usize,
    /// Whether the rings of threads registering from now on wake their waiters at every
    /// record, or only at half a ring (see `MonitorBuilder::signal_each_event`).
    signal_each_event: AtomicBool,
    /// Times a thread's state was re-read from `/proc` because records may have been lost.
    resyncs: AtomicU64,
    /// Source of [`Slot::key`].
    next_key: AtomicU64,
    /// Registered threads, by the CPU they registered on (their core, when pinned): a drain
    /// of one CPU reads only its threads' rings.
    buckets: Box<[CachePadded<Bucket>]>,
}

/// The threads registered on one CPU.
#[derive(Default)]
struct Bucket {
    /// Read-locked by drains, write-locked by (un)registration.
    threads: RwLock<Vec<Arc<Slot>>>,
    /// Drains of this CPU alone so far: every [`EXIT_CHECK_EVERY`]th also looks for exited
    /// threads.
    drains: AtomicU32,
}

/// How often a drain of one CPU also looks for threads that exited while registered: that
/// look is a system call, several times the cost of the rest of the drain, and an exit needs
/// no prompt answer (the thread's last switch-out is an ordinary block, which the ring still
/// reports: retiring it only frees its ring and forgets it).
const EXIT_CHECK_EVERY: u32 = 64;

/// Source of [`PerfBackend::id`].
static NEXT_BACKEND_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The calling thread's registrations, one per backend it is registered with (usually
    /// one): muting finds its event here without taking the `threads` lock.
    static OWN: RefCell<Vec<Own>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's registration with one backend.
struct Own {
    /// [`PerfBackend::id`].
    backend: u64,
    /// The event's descriptor. Valid whenever the backend can be reached: the entry is removed
    /// when the thread unregisters, and the slot (owner of the descriptor) lives in the
    /// backend until then.
    fd: RawFd,
    /// The CPU the thread was on when it muted, while it is muted.
    muted_on: Option<CpuId>,
    /// The slot, for the rare unmute that must re-read the ring. Weak: a monitor dropped with
    /// its threads still registered must still close their descriptors.
    slot: Weak<Slot>,
    /// The ring, to see whether there is anything to drain without locking the slot.
    peek: RingPeek,
}

/// One monitored thread.
struct Slot {
    tid: i32,
    /// This registration's tag in the wait sets, unique in the backend: a thread id is not.
    /// Once a thread exits, the kernel may give its id to a new thread, which may register
    /// before the exit is seen; the rings that report an exit name the slot, never the id,
    /// so the new thread's slot is not retired for the old one's exit.
    key: u64,
    /// The CPU it registered on: its bucket in [`PerfBackend::buckets`].
    cpu: CpuId,
    inner: Mutex<SlotInner>,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the ring's records one at a time, each under the slot's lock, until the ring is
    /// empty or (with [`Held::Skip`]) another drainer holds it.
    fn consume(
        &self,
        held: Held,
        ring_bytes: usize,
        resyncs: &AtomicU64,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> ring::Consumed {
        let mut found = ring::Consumed::default();
        loop {
            let mut inner = match held {
                Held::Wait => self.lock(),
                Held::Skip => match self.inner.try_lock() {
                    Ok(inner) => inner,
                    Err(TryLockError::Poisoned(p)) => p.into_inner(),
                    Err(TryLockError::WouldBlock) => break,
                },
            };
            if !inner.take_one(self.tid, ring_bytes, resyncs, sink, &mut found) {
                break;
            }
        }
        found
    }
}

impl PerfBackend {
    pub(crate) fn open(
        possible_cpus: usize,
        ring_pages: usize,
        signal_each_event: bool,
    ) -> Result<PerfBackend> {
        probe()?;
        let ring_bytes = ring_pages * page_size();
        Ok(PerfBackend {
            id: NEXT_BACKEND_ID.fetch_add(1, Ordering::Relaxed),
            ring_bytes,
            signal_each_event: AtomicBool::new(signal_each_event),
            resyncs: AtomicU64::new(0),
            next_key: AtomicU64::new(0),
            buckets: (0..possible_cpus).map(|_| CachePadded::default()).collect(),
        })
    }

    /// The threads registered on `cpu` (none for a CPU beyond the table).
    fn threads_read(&self, cpu: CpuId) -> Option<std::sync::RwLockReadGuard<'_, Vec<Arc<Slot>>>> {
        let bucket = self.buckets.get(cpu)?;
        Some(bucket.threads.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Removes the slot of thread `tid` from bucket `cpu`, or from any bucket when `cpu` is
    /// `None` (or does not hold it).
    fn take_slot(&self, tid: i32, cpu: Option<CpuId>) -> Option<Arc<Slot>> {
        self.take_slot_where(|s| s.tid == tid, cpu)
    }

    /// Removes the first slot that `is` picks, from bucket `cpu` first, then from any.
    fn take_slot_where(&self, is: impl Fn(&Slot) -> bool, cpu: Option<CpuId>) -> Option<Arc<Slot>> {
        let take = |bucket: &CachePadded<Bucket>| {
            let mut threads = bucket.threads.write().unwrap_or_else(|p| p.into_inner());
            let i = threads.iter().position(|s| is(s))?;
            Some(threads.swap_remove(i))
        };
        cpu.and_then(|c| self.buckets.get(c))
            .and_then(take)
            .or_else(|| self.buckets.iter().find_map(take))
    }

    pub(crate) fn register<'m>(
        &self,
        tid: i32,
        epoll: &Epoll,
        cpu_set: &dyn Fn(CpuId) -> Result<&'m Epoll>,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> Result<()> {
        let wakeup_bytes = if self.signal_each_event.load(Ordering::Relaxed) {
            1
        } else {
            self.ring_bytes / 2
        };
        let sampler = open_sampler(tid, self.ring_bytes, wakeup_bytes).map_err(|e| {
            match e.raw_os_error() {
                Some(errno) if errno != libc::ENOMEM => {
                    Error::Unavailable(classify_open_error(errno, read_paranoid()))
                }
                _ => Error::os("perf_event_open", e),
            }
        })?;
        // SAFETY: the sampler owns this descriptor and outlives the borrow (used only here).
        let fd = unsafe { BorrowedFd::borrow_raw(sampler.as_raw_fd()) };
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        epoll
            .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, key))
            .map_err(|e| Error::os("epoll_ctl(ADD)", e))?;
        let cpu = cpu::current_cpu()?;
        // Also in the wait set of the CPU the thread registers on (its core, when pinned). It
        // leaves that set when the sampler's descriptor is closed, with the slot.
        cpu_set(cpu)?
            .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, key))
            .map_err(|e| Error::os("epoll_ctl(ADD)", e))?;
        let peek = RingPeek::new(fd, page_size() + self.ring_bytes)?;
        let slot_peek = RingPeek::new(fd, page_size() + self.ring_bytes)?;
        let tracker = Tracker::start(cpu, &mut sink_for(tid, sink, None));
        let fd = sampler.as_raw_fd();
        let slot = Arc::new(Slot {
            tid,
            key,
            cpu,
            inner: Mutex::new(SlotInner {
                sampler,
                tracker: Some(tracker),
                peek: slot_peek,
                overflow_pending: false,
                resync_due: false,
            }),
        });
        OWN.with_borrow_mut(|all| {
            all.push(Own {
                backend: self.id,
                fd,
                muted_on: None,
                slot: Arc::downgrade(&slot),
                peek,
            })
        });
        let bucket = self.buckets.get(cpu).ok_or(Error::NoSuchCpu {
            cpu,
            possible: self.buckets.len(),
        })?;
        let mut threads = bucket.threads.write().unwrap_or_else(|p| p.into_inner());
        threads.push(slot);
        Ok(())
    }

    /// Calls `f` with the calling thread's registration, or fails with `NotRegistered`.
    fn with_own<R>(&self, f: impl FnOnce(&mut Own) -> Result<R>) -> Result<R> {
        OWN.with_borrow_mut(|all| match all.iter_mut().find(|o| o.backend == self.id) {
            Some(own) => f(own),
            None => Err(Error::NotRegistered {
                tid: cpu::current_tid(),
            }),
        })
    }

    /// Stops the calling thread's switch records (see `Monitor::mute_current_thread`): one
    /// ioctl. The thread keeps counting as ready where its records left it: the CPU it runs on.
    pub(crate) fn mute(&self) -> Result<()> {
        self.with_own(|own| {
            if own.muted_on.is_some() {
                return Ok(());
            }
            // Read before pausing: a move after the read is still recorded, so the records
            // leave the thread on `cpu`, or on a CPU that `unmute` will see differ from it.
            let cpu = cpu::current_cpu()?;
            set_paused(own.fd, true)?;
            own.muted_on = Some(cpu);
            Ok(())
        })
    }

    /// Resumes the calling thread's switch records: one ioctl when it is still on the CPU it
    /// muted on. If it moved, it first consumes its ring and moves its count to where it runs
    /// now (a migration), under the slot's lock so no drainer interleaves.
    pub(crate) fn unmute(&self, sink: &mut dyn FnMut(MonitorEvent)) -> Result<()> {
        self.with_own(|own| {
            let Some(muted_on) = own.muted_on else {
                return Ok(());
            };
            let cpu = cpu::current_cpu()?;
            if cpu != muted_on
                && let Some(slot) = own.slot.upgrade()
            {
                let mut inner = slot.lock();
                inner.consume(slot.tid, self.ring_bytes, &self.resyncs, sink);
                if let Some(tr) = inner.tracker.as_mut() {
                    tr.switch_in(cpu, &mut sink_for(slot.tid, sink, None));
                }
            }
            set_paused(own.fd, false)?;
            own.muted_on = None;
            Ok(())
        })
    }

    /// Consumes the calling thread's own ring, unless another drainer holds it (see
    /// `Monitor::drain_current_thread`).
    pub(crate) fn drain_own(&self, sink: &mut dyn FnMut(MonitorEvent)) -> Result<DrainOutcome> {
        // Usually empty: then a look at the ring's head and tail is all it costs.
        let slot = self.with_own(|own| {
            Ok(if own.peek.has_records() {
                own.slot.upgrade()
            } else {
                None
            })
        })?;
        let mut outcome = DrainOutcome::default();
        if let Some(slot) = slot {
            let c = slot.consume(Held::Skip, self.ring_bytes, &self.resyncs, sink);
            outcome.lost = c.lost;
            outcome.overflows = u64::from(c.overflowed);
        }
        Ok(outcome)
    }

    pub(crate) fn unregister(
        &self,
        tid: i32,
        epoll: &Epoll,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> Result<()> {
        let cpu = OWN.with_borrow(|all| {
            all.iter()
                .find(|o| o.backend == self.id)
                .and_then(|o| o.slot.upgrade())
                .map(|s| s.cpu)
        });
        let slot = self
            .take_slot(tid, cpu)
            .ok_or(Error::NotRegistered { tid })?;
        OWN.with_borrow_mut(|all| all.retain(|o| o.backend != self.id));
        self.retire(&slot, &[epoll], Cause::Unregister, sink);
        Ok(())
    }

    /// Retires the slot of a thread that exited registered with id `tid`, before a new thread
    /// that the kernel gave the same id registers (the caller is that thread, so the slot
    /// found is not its own). `true` if there was one.
    pub(crate) fn retire_stale(
        &self,
        tid: i32,
        epoll: &Epoll,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> bool {
        match self.take_slot(tid, None) {
            Some(slot) => {
                self.retire(&slot, &[epoll], Cause::Exit, sink);
                true
            }
            None => false,
        }
    }

    /// Stops a slot: disables its event, consumes what is left, takes back its contribution,
    /// and takes its ring out of `sets` (it leaves the others when it is closed).
    fn retire(
        &self,
        slot: &Slot,
        sets: &[&Epoll],
        cause: Cause,
        sink: &mut dyn FnMut(MonitorEvent),
    ) {
        let mut inner = slot.lock();
        // Best effort: the event may already be dead if the thread exited.
        let _ = inner.sampler.as_counter_mut().disable();
        inner.consume(slot.tid, self.ring_bytes, &self.resyncs, sink);
        if let Some(tr) = inner.tracker.take() {
            tr.stop(&mut |cpu, events, _| {
                sink(MonitorEvent {
                    cpu,
                    events,
                    cause,
                    tid: Some(slot.tid),
                    time_ns: None,
                })
            });
        }
        // SAFETY: the sampler still owns the descriptor while we hold the lock.
        let fd = unsafe { BorrowedFd::borrow_raw(inner.sampler.as_raw_fd()) };
        for set in sets {
            let _ = set.delete(fd);
        }
    }

    /// Consumes every ring not being drained by another thread, then retires the threads whose
    /// events report that they exited.
    pub(crate) fn drain(
        &self,
        epoll: &Epoll,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> Result<DrainOutcome> {
        let mut outcome = DrainOutcome::default();
        for cpu in 0..self.buckets.len() {
            self.consume_bucket(cpu, Held::Skip, &mut outcome, sink);
        }
        self.retire_exited((epoll, None), epoll, &mut outcome, sink)?;
        Ok(outcome)
    }

    /// [`PerfBackend::drain`] of the threads registered on `cpu` only, whose rings are in
    /// `cpu_set` (see `Monitor::drain_cpu`); one drain in [`EXIT_CHECK_EVERY`] looks for exits.
    /// `epoll` is the monitor's descriptor, which an exited thread's ring leaves.
    /// With [`Held::Wait`] it waits for each record another drainer holds.
    pub(crate) fn drain_cpu(
        &self,
        cpu: CpuId,
        held: Held,
        epoll: &Epoll,
        cpu_set: Option<&Epoll>,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> Result<DrainOutcome> {
        let mut outcome = DrainOutcome::default();
        self.consume_bucket(cpu, held, &mut outcome, sink);
        let Some(cpu_set) = cpu_set else {
            return Ok(outcome);
        };
        let drains = self.buckets.get(cpu).map_or(0, |b| {
            let n = b.drains.load(Ordering::Relaxed);
            b.drains.store(n.wrapping_add(1), Ordering::Relaxed);
            n
        });
        if drains.is_multiple_of(EXIT_CHECK_EVERY) {
            self.retire_exited((cpu_set, Some(cpu)), epoll, &mut outcome, sink)?;
        }
        Ok(outcome)
    }

    /// Consumes the rings of the threads registered on `cpu`. A ring another drainer holds is
    /// passed by ([`Held::Skip`]: that drainer hands out what it takes, and takes the rest
    /// unless it meets a third) or waited for, a record at a time ([`Held::Wait`]).
    fn consume_bucket(
        &self,
        cpu: CpuId,
        held: Held,
        outcome: &mut DrainOutcome,
        sink: &mut dyn FnMut(MonitorEvent),
    ) {
        let Some(threads) = self.threads_read(cpu) else {
            return;
        };
        let mut consume = |slot: &Slot| {
            let c = slot.consume(held, self.ring_bytes, &self.resyncs, sink);
            outcome.lost += c.lost;
            outcome.overflows += u64::from(c.overflowed);
        };
        match held {
            Held::Skip => threads.iter().for_each(|slot| consume(slot)),
            Held::Wait => {
                // Waits without the bucket's lock: a registration waiting to write it would
                // hold up every other drain of this CPU meanwhile.
                let slots: Vec<Arc<Slot>> = threads.clone();
                drop(threads);
                slots.iter().for_each(|slot| consume(slot));
            }
        }
    }

    /// Retires the threads whose rings in `set` poll `EPOLLHUP` (they exited while
    /// registered; the state is level-triggered until the ring is closed), looking for their
    /// slots in bucket `cpu` first. Their rings leave `epoll`, the monitor's descriptor, and
    /// `set`. One pass: an exit beyond the first 64 ready rings is found by the next drain.
    fn retire_exited(
        &self,
        (set, cpu): (&Epoll, Option<CpuId>),
        epoll: &Epoll,
        outcome: &mut DrainOutcome,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> Result<()> {
        let mut ready = [EpollEvent::empty(); 64];
        let n = match set.wait(&mut ready, EpollTimeout::ZERO) {
            Ok(n) => n,
            Err(Errno::EINTR) => 0,
            Err(e) => return Err(Error::os("epoll_wait", e)),
        };
        for ev in &ready[..n] {
            if !ev.events().contains(EpollFlags::EPOLLHUP) {
                continue;
            }
            if let Some(slot) = self.take_slot_where(|s| s.key == ev.data(), cpu) {
                self.retire(&slot, &[epoll, set], Cause::Exit, sink);
                outcome.exited.push(slot.tid);
            }
        }
        Ok(())
    }
}

impl Backend for PerfBackend {
    fn counts_are_live(&self) -> bool {
        false
    }

    /// Sets whether threads registering from now on signal every event.
    fn set_signal_each_event(&self, signal: bool) {
        self.signal_each_event.store(signal, Ordering::Relaxed);
    }

    fn register(&self, cx: &Context, tid: i32) -> Result<()> {
        self.register(tid, &cx.epoll, &|cpu| cx.cpu_set(cpu, self), &mut |e| {
            cx.record_pending(e)
        })
    }

    fn unregister(&self, cx: &Context, tid: i32) -> Result<()> {
        self.unregister(tid, &cx.epoll, &mut |e| cx.record_pending(e))
    }

    fn retire_stale(&self, cx: &Context, tid: i32) {
        self.retire_stale(tid, &cx.epoll, &mut |e| cx.record_pending(e));
    }

    fn mute(&self) -> Result<()> {
        self.mute()
    }

    fn unmute(&self, cx: &Context) -> Result<()> {
        self.unmute(&mut |e| cx.record_pending(e))
    }

    fn drain(&self, cx: &Context, out: &mut dyn FnMut(MonitorEvent)) -> Result<()> {
        let outcome = self.drain(&cx.epoll, &mut |ev| {
            cx.record(ev);
            out(ev);
        })?;
        cx.count_losses(outcome.lost, outcome.overflows);
        cx.forget_exited(outcome.exited);
        Ok(())
    }

    fn drain_current_thread(&self, cx: &Context) -> Result<usize> {
        let mut n = 0;
        let outcome = self.drain_own(&mut |ev| {
            cx.record(ev);
            n += 1;
        })?;
        cx.count_losses(outcome.lost, outcome.overflows);
        Ok(n)
    }

    fn drain_cpu(&self, cx: &Context, cpu: CpuId, held: Held) -> Result<usize> {
        let mut n = 0;
        // No wait set yet: no thread ever registered on `cpu`, nothing to retire.
        let set = cx.cpu_set_made(cpu);
        let outcome = self.drain_cpu(cpu, held, &cx.epoll, set, &mut |ev| {
            cx.record(ev);
            n += 1;
        })?;
        cx.count_losses(outcome.lost, outcome.overflows);
        cx.forget_exited(outcome.exited);
        Ok(n)
    }

    /// Times a thread's state was re-read from `/proc`.
    fn resyncs(&self) -> u64 {
        self.resyncs.load(Ordering::Relaxed)
    }
}
