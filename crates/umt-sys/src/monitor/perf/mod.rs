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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags, EpollTimeout};

use crate::cpu::{self, CpuId};
use crate::error::{Error, Result};
use crate::event::{Cause, MonitorEvent};
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
    /// Bytes of records after which the kernel wakes the ring's waiters: 1 (every record) or
    /// half the ring (see `MonitorBuilder::signal_each_event`).
    wakeup_bytes: usize,
    /// Times a thread's state was re-read from `/proc` because records may have been lost.
    resyncs: AtomicU64,
    /// Registered threads. Read-locked by drains, write-locked by (un)registration.
    threads: RwLock<Vec<Arc<Slot>>>,
}

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
    /// `SlotInner::has_muted`.
    has_muted: Arc<AtomicBool>,
    /// The slot, for the rare unmute that must re-read the ring. Weak: a monitor dropped with
    /// its threads still registered must still close their descriptors.
    slot: Weak<Slot>,
    /// The ring, to see whether there is anything to drain without locking the slot.
    peek: RingPeek,
}

/// One monitored thread.
struct Slot {
    tid: i32,
    inner: Mutex<SlotInner>,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl PerfBackend {
    pub(crate) fn open(ring_pages: usize, signal_each_event: bool) -> Result<PerfBackend> {
        probe()?;
        let ring_bytes = ring_pages * page_size();
        Ok(PerfBackend {
            id: NEXT_BACKEND_ID.fetch_add(1, Ordering::Relaxed),
            ring_bytes,
            wakeup_bytes: if signal_each_event { 1 } else { ring_bytes / 2 },
            resyncs: AtomicU64::new(0),
            threads: RwLock::new(Vec::new()),
        })
    }

    /// Times a thread's state was re-read from `/proc` (see [`PerfBackend::resyncs`]).
    pub(crate) fn resyncs(&self) -> u64 {
        self.resyncs.load(Ordering::Relaxed)
    }

    fn threads_read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Arc<Slot>>> {
        self.threads.read().unwrap_or_else(|p| p.into_inner())
    }

    fn threads_write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Arc<Slot>>> {
        self.threads.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn register<'m>(
        &self,
        tid: i32,
        epoll: &Epoll,
        cpu_set: &dyn Fn(CpuId) -> Result<&'m Epoll>,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> Result<()> {
        let sampler = open_sampler(tid, self.ring_bytes, self.wakeup_bytes).map_err(|e| match e
            .raw_os_error()
        {
            Some(errno) if errno != libc::ENOMEM => {
                Error::Unavailable(classify_open_error(errno, read_paranoid()))
            }
            _ => Error::os("perf_event_open", e),
        })?;
        // SAFETY: the sampler owns this descriptor and outlives the borrow (used only here).
        let fd = unsafe { BorrowedFd::borrow_raw(sampler.as_raw_fd()) };
        epoll
            .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, tid as u64))
            .map_err(|e| Error::os("epoll_ctl(ADD)", e))?;
        let cpu = cpu::current_cpu()?;
        // Also in the wait set of the CPU the thread registers on (its core, when pinned). It
        // leaves that set when the sampler's descriptor is closed, with the slot.
        cpu_set(cpu)?
            .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, tid as u64))
            .map_err(|e| Error::os("epoll_ctl(ADD)", e))?;
        let peek = RingPeek::new(fd, page_size() + self.ring_bytes)?;
        let tracker = Tracker::start(cpu, &mut sink_for(tid, sink, None));
        let fd = sampler.as_raw_fd();
        let has_muted = Arc::new(AtomicBool::new(false));
        let slot = Arc::new(Slot {
            tid,
            inner: Mutex::new(SlotInner {
                sampler,
                tracker: Some(tracker),
                has_muted: has_muted.clone(),
            }),
        });
        OWN.with_borrow_mut(|all| {
            all.push(Own {
                backend: self.id,
                fd,
                muted_on: None,
                has_muted,
                slot: Arc::downgrade(&slot),
                peek,
            })
        });
        self.threads_write().push(slot);
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
            own.has_muted.store(true, Ordering::Relaxed);
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
        if let Some(slot) = slot
            && let Ok(mut inner) = slot.inner.try_lock()
        {
            let c = inner.consume(slot.tid, self.ring_bytes, &self.resyncs, sink);
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
        let slot = {
            let mut threads = self.threads_write();
            let Some(i) = threads.iter().position(|s| s.tid == tid) else {
                return Err(Error::NotRegistered { tid });
            };
            threads.swap_remove(i)
        };
        OWN.with_borrow_mut(|all| all.retain(|o| o.backend != self.id));
        self.retire(&slot, epoll, Cause::Unregister, sink);
        Ok(())
    }

    /// Stops a slot: disables its event, consumes what is left, takes back its contribution.
    fn retire(&self, slot: &Slot, epoll: &Epoll, cause: Cause, sink: &mut dyn FnMut(MonitorEvent)) {
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
        let _ = epoll.delete(fd);
    }

    /// Consumes every ring not being drained by another thread, then retires the threads whose
    /// events report that they exited.
    pub(crate) fn drain(
        &self,
        epoll: &Epoll,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> Result<DrainOutcome> {
        let mut outcome = DrainOutcome::default();
        for slot in self.threads_read().iter() {
            // Another drainer has this ring: it will hand those events out.
            if let Ok(mut inner) = slot.inner.try_lock() {
                let c = inner.consume(slot.tid, self.ring_bytes, &self.resyncs, sink);
                outcome.lost += c.lost;
                outcome.overflows += u64::from(c.overflowed);
            }
        }
        // An exited thread's event polls as EPOLLHUP, level-triggered, until removed.
        let mut ready = [EpollEvent::empty(); 8];
        let n = match epoll.wait(&mut ready, EpollTimeout::ZERO) {
            Ok(n) => n,
            Err(Errno::EINTR) => 0,
            Err(e) => return Err(Error::os("epoll_wait", e)),
        };
        for ev in &ready[..n] {
            if ev.events().contains(EpollFlags::EPOLLHUP) {
                let tid = ev.data() as i32;
                let slot = {
                    let mut threads = self.threads_write();
                    threads
                        .iter()
                        .position(|s| s.tid == tid)
                        .map(|i| threads.swap_remove(i))
                };
                if let Some(slot) = slot {
                    self.retire(&slot, epoll, Cause::Exit, sink);
                    outcome.exited.push(tid);
                }
            }
        }
        Ok(outcome)
    }
}
