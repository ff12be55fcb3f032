//! The PerfSwitch backend: UMT events on a stock kernel, from `perf_event_open`
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
//! it is a VM exit, about 8 us per record in the Firecracker guest this was measured in (a
//! `join` tree installed from outside 40,000 times: 3.1 IRQ-work interrupts per install, and
//! the monitored runtime took as long as the unmonitored one once the wake-ups were batched
//! away). Workers that switch rarely, as pinned HPC workers do, hardly pay it; the kernel
//! backend, which signals only blocks and unblocks, never does. A thread that spins or yields
//! waiting for work can mute itself (`Monitor::mute_current_thread`: the ring is paused, one
//! ioctl each way), so its preemptions cost nothing; umt-rt's idle workers do (see the
//! monitor's `README.md`, "Muting").

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::mman;
use perf_event::events::Software;
use perf_event::{Builder, Clock, SampleFlag, Sampler};
use perf_event_open_sys::bindings::{
    PERF_RECORD_LOST, PERF_RECORD_MISC_SWITCH_OUT, PERF_RECORD_MISC_SWITCH_OUT_PREEMPT,
    PERF_RECORD_SWITCH, perf_event_mmap_page,
};

use super::{BackendKind, MonitorEvent};
use crate::abi::Events;
use crate::cpu::{self, CpuId};
use crate::error::{Error, Result, Unavailable};
use crate::ready::{Cause, ThreadState, Tracker};

/// Default data pages per thread ring: 16 pages hold about 2000 context switches.
pub const DEFAULT_RING_PAGES: usize = 16;

/// Size of the `sample_id` trailer with `TID | TIME | CPU`: pid, tid, time, cpu, reserved.
const SAMPLE_ID_LEN: usize = 24;

/// Largest record we configure: a `PERF_RECORD_LOST` (header, id, lost, sample_id).
const MAX_RECORD_LEN: usize = 8 + 16 + SAMPLE_ID_LEN;

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

/// A second mapping of a thread's ring, for a look at whether it holds records without taking
/// the slot's lock (`Monitor::drain_current_thread` calls it at every scheduling point of a
/// polling runtime). The kernel lets a ring be mapped again at its size, sharing the same
/// buffer; the mapping keeps the buffer alive even after the event's descriptor is closed.
struct RingPeek {
    page: std::ptr::NonNull<perf_event_mmap_page>,
    len: std::num::NonZeroUsize,
}

impl RingPeek {
    /// Maps `len` bytes (header page and data) of the ring of the perf event `fd`.
    fn new(fd: BorrowedFd<'_>, len: usize) -> Result<RingPeek> {
        let len = std::num::NonZeroUsize::new(len).ok_or_else(|| {
            Error::os(
                "mmap(perf ring)",
                io::Error::from(io::ErrorKind::InvalidInput),
            )
        })?;
        // SAFETY: a new shared mapping chosen by the kernel (no address given), so it replaces
        // nothing; the descriptor is a perf event whose ring of this size is already mapped by
        // its sampler, so the kernel maps the same buffer again. We only ever read it.
        let ptr = unsafe {
            mman::mmap(
                None,
                len,
                mman::ProtFlags::PROT_READ | mman::ProtFlags::PROT_WRITE,
                mman::MapFlags::MAP_SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| Error::os("mmap(perf ring)", e))?;
        Ok(RingPeek {
            page: ptr.cast(),
            len,
        })
    }

    /// Whether the kernel has written records the drains have not consumed yet. A record
    /// written right after this look is found by the next one.
    fn has_records(&self) -> bool {
        let page = self.page.as_ptr();
        // SAFETY: `page` is the ring's header page, mapped readable and writable for as long
        // as `self` lives; both fields are aligned u64s. The kernel writes `data_head` (with a
        // release store after the record) and drainers write `data_tail`, so both are read
        // atomically; only loads happen through this mapping.
        let (head, tail) = unsafe {
            (
                AtomicU64::from_ptr(&raw mut (*page).data_head).load(Ordering::Acquire),
                AtomicU64::from_ptr(&raw mut (*page).data_tail).load(Ordering::Relaxed),
            )
        };
        head != tail
    }
}

impl Drop for RingPeek {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `new` with this length and is not used afterwards.
        let _ = unsafe { mman::munmap(self.page.cast(), self.len.get()) };
    }
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

/// `PERF_EVENT_IOC_PAUSE_OUTPUT` on the calling thread's own event: while paused, the kernel
/// drops its records (counting them, and reporting the count in a `PERF_RECORD_LOST` before
/// the next record) without writing or waking anything. Unlike `PERF_EVENT_IOC_DISABLE`, which
/// reschedules the thread's whole perf context (about 1.5 us in a VM), it only sets a flag.
fn set_paused(fd: RawFd, paused: bool) -> Result<()> {
    // SAFETY: `fd` comes from the calling thread's `Own` entry of a backend the caller borrows,
    // so the slot's sampler keeps it open (see `Own::fd`); the ioctl takes no pointer.
    let r = unsafe { perf_event_open_sys::ioctls::PAUSE_OUTPUT(fd, u32::from(paused)) };
    if r < 0 {
        return Err(Error::os(
            "ioctl(PERF_EVENT_IOC_PAUSE_OUTPUT)",
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// The part of a slot one drainer owns at a time.
struct SlotInner {
    sampler: Sampler,
    tracker: Option<Tracker>,
    /// Set once the thread has muted. Every mute in which the kernel dropped records is then
    /// reported by a `PERF_RECORD_LOST`, which needs no resync: a muted thread is running.
    has_muted: Arc<AtomicBool>,
}

fn sink_for<'a>(
    tid: i32,
    sink: &'a mut dyn FnMut(MonitorEvent),
    time_ns: Option<u64>,
) -> impl FnMut(CpuId, Events, Cause) + 'a {
    move |cpu, events, cause| {
        sink(MonitorEvent {
            cpu,
            events,
            cause,
            tid: Some(tid),
            time_ns,
        })
    }
}

fn open_sampler(tid: i32, ring_bytes: usize, wakeup_bytes: usize) -> io::Result<Sampler> {
    let mut b = Builder::new(Software::DUMMY);
    b.observe_pid(tid)
        .any_cpu()
        .exclude_kernel(true)
        .exclude_hv(true)
        .context_switch(true)
        .sample_id_all(true)
        .sample(SampleFlag::TID | SampleFlag::TIME | SampleFlag::CPU)
        .wakeup_watermark(wakeup_bytes)
        .clockid(Clock::MONOTONIC)
        .enabled(true);
    b.build()?.sampled(ring_bytes)
}

/// Checks that this process may open context-switch events on its own threads.
pub(crate) fn probe() -> std::result::Result<(), Unavailable> {
    match open_sampler(cpu::current_tid(), page_size(), 1) {
        Ok(_) => Ok(()),
        Err(e) => Err(classify_open_error(
            e.raw_os_error().unwrap_or(0),
            read_paranoid(),
        )),
    }
}

fn page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|p| usize::try_from(p).ok())
        .unwrap_or(4096)
}

fn read_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Explains a `perf_event_open` failure, with the fix spelled out.
pub(crate) fn classify_open_error(errno: i32, paranoid: Option<i32>) -> Unavailable {
    let u = |reason: String| Unavailable::new(BackendKind::Perf, reason);
    match Errno::from_raw(errno) {
        Errno::EACCES | Errno::EPERM => match paranoid {
            Some(p) if p > 2 => u(format!("perf_event_paranoid is {p}")).with_fix(
                "run `sysctl kernel.perf_event_paranoid=2` as root, or give the program CAP_PERFMON",
            ),
            _ => u(format!(
                "perf_event_open denied (seccomp or a container policy; perf_event_paranoid is {})",
                paranoid.map_or_else(|| "unknown".to_owned(), |p| p.to_string())
            ))
            .with_fix(
                "allow perf_event_open in the seccomp profile (for Docker: \
                 --security-opt seccomp=unconfined or --cap-add PERFMON)",
            ),
        },
        Errno::ENOSYS => u("perf_event_open is not implemented by this kernel".to_owned())
            .with_fix("use a kernel built with CONFIG_PERF_EVENTS=y"),
        Errno::ENOENT | Errno::EOPNOTSUPP | Errno::EINVAL | Errno::E2BIG => u(format!(
            "this kernel cannot report context switches to user space ({})",
            Errno::from_raw(errno).desc()
        ))
        .with_fix("use Linux 4.3 or newer"),
        Errno::EMFILE | Errno::ENFILE => u("out of file descriptors".to_owned())
            .with_fix("raise the limit with `ulimit -n`"),
        other => u(format!("perf_event_open failed: {}", other.desc())),
    }
}

/// Fields of a switch or lost record's `sample_id` trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SampleId {
    pub tid: u32,
    pub time_ns: u64,
    pub cpu: u32,
}

/// Parses the `sample_id` at the end of a record body (`TID | TIME | CPU`).
pub(crate) fn parse_sample_id(body: &[u8]) -> Option<SampleId> {
    let start = body.len().checked_sub(SAMPLE_ID_LEN)?;
    let t = &body[start..];
    Some(SampleId {
        tid: u32::from_ne_bytes(t[4..8].try_into().ok()?),
        time_ns: u64::from_ne_bytes(t[8..16].try_into().ok()?),
        cpu: u32::from_ne_bytes(t[16..20].try_into().ok()?),
    })
}

/// Parses the `lost` field of a `PERF_RECORD_LOST` body (`u64 id; u64 lost; sample_id`).
pub(crate) fn parse_lost(body: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(body.get(8..16)?.try_into().ok()?))
}

/// A thread's state as `/proc/self/task/<tid>/stat` shows it: ready on its CPU when `R`,
/// blocked otherwise (or when it has exited).
pub(crate) fn proc_thread_state(tid: i32) -> ThreadState {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|s| parse_proc_stat(&s))
        .unwrap_or(ThreadState::Blocked)
}

/// Parses the state (field 3) and last CPU (field 39) of a `/proc/.../stat` line.
pub(crate) fn parse_proc_stat(stat: &str) -> Option<ThreadState> {
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?;
    let cpu: CpuId = fields.get(36)?.parse().ok()?;
    Some(if *state == "R" {
        ThreadState::Ready(cpu)
    } else {
        ThreadState::Blocked
    })
}

/// What one pass over a ring found besides events.
#[derive(Debug, Default, Clone, Copy)]
struct Consumed {
    /// Records the kernel reported lost (`PERF_RECORD_LOST`).
    lost: u64,
    /// The ring was (nearly) full, so the kernel may have dropped records it has not reported
    /// yet: it writes the `PERF_RECORD_LOST` only once a record fits again.
    overflowed: bool,
}

impl SlotInner {
    /// Consumes every record in the ring; resynchronises the thread if records may be missing.
    fn consume(
        &mut self,
        tid: i32,
        ring_bytes: usize,
        resyncs: &AtomicU64,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> Consumed {
        let SlotInner {
            sampler,
            tracker,
            has_muted,
        } = self;
        let mut lost = 0u64;
        let mut saw_lost = false;
        let mut bytes = 0usize;
        while let Some(record) = sampler.next_record() {
            bytes += record.len() + std::mem::size_of::<u64>();
            let Some(tr) = tracker.as_mut() else { continue };
            let body = record.to_contiguous();
            match record.ty() {
                PERF_RECORD_SWITCH => {
                    let Some(id) = parse_sample_id(&body) else {
                        continue;
                    };
                    let misc = u32::from(record.misc());
                    let mut emit = sink_for(tid, sink, Some(id.time_ns));
                    let cpu = id.cpu as CpuId;
                    if misc & PERF_RECORD_MISC_SWITCH_OUT != 0 {
                        let preempted = misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0;
                        tr.switch_out(cpu, preempted, &mut emit);
                    } else {
                        tr.switch_in(cpu, &mut emit);
                    }
                }
                PERF_RECORD_LOST => {
                    saw_lost = true;
                    lost += parse_lost(&body).unwrap_or(1);
                }
                _ => {}
            }
        }
        // The fill level only grows between passes, so a pass that found less than a full ring
        // minus one record proves no record was dropped since the previous pass.
        let overflowed = bytes + MAX_RECORD_LEN >= ring_bytes;
        // Records dropped while the thread was muted are reported lost; a real loss comes with a
        // full ring, which `overflowed` catches whatever the LOST records say.
        if saw_lost && has_muted.load(Ordering::Relaxed) {
            saw_lost = false;
            lost = 0;
        }
        if (saw_lost || overflowed)
            && let Some(tr) = tracker.as_mut()
        {
            // The ring is empty now, so the thread's present state is the one to adopt.
            tr.resync(proc_thread_state(tid), &mut sink_for(tid, sink, None));
            resyncs.fetch_add(1, Ordering::Relaxed);
        }
        Consumed { lost, overflowed }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paranoid_3_says_how_to_fix_it() {
        let u = classify_open_error(libc::EACCES, Some(3));
        assert_eq!(u.backend, BackendKind::Perf);
        assert_eq!(u.reason, "perf_event_paranoid is 3");
        assert!(
            u.fix
                .unwrap()
                .contains("sysctl kernel.perf_event_paranoid=2")
        );
    }

    #[test]
    fn denied_at_low_paranoid_is_seccomp() {
        let u = classify_open_error(libc::EPERM, Some(2));
        assert!(u.reason.contains("seccomp"), "{u}");
        assert!(u.fix.unwrap().contains("seccomp"));
    }

    #[test]
    fn missing_support_is_explained() {
        assert!(
            classify_open_error(libc::ENOSYS, None)
                .fix
                .unwrap()
                .contains("CONFIG_PERF_EVENTS")
        );
        assert!(
            classify_open_error(libc::EINVAL, Some(2))
                .fix
                .unwrap()
                .contains("4.3")
        );
    }

    #[test]
    fn sample_id_trailer_parses() {
        let mut body = Vec::new();
        body.extend_from_slice(&7u32.to_ne_bytes()); // pid
        body.extend_from_slice(&9u32.to_ne_bytes()); // tid
        body.extend_from_slice(&123_456u64.to_ne_bytes()); // time
        body.extend_from_slice(&3u32.to_ne_bytes()); // cpu
        body.extend_from_slice(&0u32.to_ne_bytes()); // reserved
        assert_eq!(
            parse_sample_id(&body),
            Some(SampleId {
                tid: 9,
                time_ns: 123_456,
                cpu: 3
            })
        );
        assert_eq!(parse_sample_id(&body[..10]), None);
        let mut lost = Vec::new();
        lost.extend_from_slice(&1u64.to_ne_bytes());
        lost.extend_from_slice(&42u64.to_ne_bytes());
        lost.extend_from_slice(&body);
        assert_eq!(parse_lost(&lost), Some(42));
    }

    #[test]
    fn proc_stat_parses_even_with_odd_names() {
        let line = "123 (a) b (c)) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 \
                    24 25 26 27 28 29 30 31 32 33 34 35 5 0 0";
        assert_eq!(parse_proc_stat(line), Some(ThreadState::Ready(5)));
        let sleeping = line.replace(") R ", ") S ");
        assert_eq!(parse_proc_stat(&sleeping), Some(ThreadState::Blocked));
        assert_eq!(parse_proc_stat("garbage"), None);
    }

    #[test]
    fn own_thread_state_is_running() {
        let cpu = cpu::current_cpu().unwrap();
        match proc_thread_state(cpu::current_tid()) {
            ThreadState::Ready(c) => assert!(c < cpu::possible_cpus().unwrap(), "{c} vs {cpu}"),
            ThreadState::Blocked => panic!("the reading thread must be running"),
        }
    }
}
