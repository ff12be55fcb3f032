//! A thread's ring: the records the kernel writes for its switches, consumed into events by
//! one drainer at a time, and a second mapping to see without a lock whether it holds any.

use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::mman;
use perf_event::Sampler;
use perf_event_open_sys::bindings::{
    PERF_RECORD_LOST, PERF_RECORD_MISC_SWITCH_OUT, PERF_RECORD_MISC_SWITCH_OUT_PREEMPT,
    PERF_RECORD_SWITCH, perf_event_mmap_page,
};

use super::parse::{MAX_RECORD_LEN, parse_lost, parse_sample_id, proc_thread_state};
use crate::abi::Events;
use crate::cpu::CpuId;
use crate::error::{Error, Result};
use crate::event::{Cause, MonitorEvent};
use crate::ready::Tracker;

/// A second mapping of a thread's ring, for a look at whether it holds records without taking
/// the slot's lock (`Monitor::drain_current_thread` calls it at every scheduling point of a
/// polling runtime). The kernel lets a ring be mapped again at its size, sharing the same
/// buffer; the mapping keeps the buffer alive even after the event's descriptor is closed.
pub(super) struct RingPeek {
    page: std::ptr::NonNull<perf_event_mmap_page>,
    len: std::num::NonZeroUsize,
}

impl RingPeek {
    /// Maps `len` bytes (header page and data) of the ring of the perf event `fd`.
    pub(super) fn new(fd: BorrowedFd<'_>, len: usize) -> Result<RingPeek> {
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
    pub(super) fn has_records(&self) -> bool {
        self.fill() != 0
    }

    /// The bytes of records the kernel has written and the drains have not consumed yet.
    pub(super) fn fill(&self) -> u64 {
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
        head.wrapping_sub(tail)
    }
}

// SAFETY: the mapping belongs to the `RingPeek` alone (unmapped once, in `drop`), and every
// access through it is an atomic load, so it may be used from, and moved to, any thread.
unsafe impl Send for RingPeek {}

impl Drop for RingPeek {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `new` with this length and is not used afterwards.
        let _ = unsafe { mman::munmap(self.page.cast(), self.len.get()) };
    }
}

/// `PERF_EVENT_IOC_PAUSE_OUTPUT` on the calling thread's own event: while paused, the kernel
/// drops its records (counting them, and reporting the count in a `PERF_RECORD_LOST` before
/// the next record) without writing or waking anything. Unlike `PERF_EVENT_IOC_DISABLE`, which
/// reschedules the thread's whole perf context (about 1.5 us in a VM), it only sets a flag.
pub(super) fn set_paused(fd: RawFd, paused: bool) -> Result<()> {
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

/// The part of a slot one drainer owns at a time: for one record (see [`SlotInner::take_one`]).
pub(super) struct SlotInner {
    pub(super) sampler: Sampler,
    pub(super) tracker: Option<Tracker>,
    /// The slot's own look at the ring's fill level (a mapping of its own: the thread's
    /// [`RingPeek`] lives in its thread-local entry).
    pub(super) peek: RingPeek,
    /// A drainer found the ring (nearly) full, and the `PERF_RECORD_LOST` that reports what the
    /// kernel dropped meanwhile has not been read yet (the kernel writes it once a record fits).
    pub(super) overflow_pending: bool,
    /// A drainer found the ring (nearly) full: whoever finds it empty next re-reads the
    /// thread's state from `/proc`.
    pub(super) resync_due: bool,
}

/// How many of a `PERF_RECORD_LOST`'s `lost` records are real losses, given whether the ring
/// is still being emptied after it was found full (`ring_full`) and whether such a report is
/// awaited (`pending`, updated).
///
/// The kernel drops a record when the ring is full, and also while the thread is muted (its
/// output paused): both are reported the same way, by a LOST record before the next record
/// that fits. Only the first is a loss, and it always comes with a full ring, which every
/// drainer checks before it takes a record; so a LOST record decides nothing, and counts only
/// after an overflow. The report comes once the drains made room, possibly before the ring is
/// empty: until then a report does not close the overflow, so that a mute's report read
/// first does not hide it. (A flag set at the first mute, which made every later LOST record
/// the mutes', hid every real loss from `lost_records` once the thread had muted.)
pub(super) fn real_losses(lost: u64, ring_full: bool, pending: &mut bool) -> u64 {
    if !*pending {
        return 0;
    }
    if !ring_full {
        *pending = false;
    }
    lost
}

pub(super) fn sink_for<'a>(
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

/// What a drainer found in a ring besides events.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Consumed {
    /// Records the kernel reported lost (`PERF_RECORD_LOST` after an overflow).
    pub(super) lost: u64,
    /// The ring was (nearly) full, so the kernel may have dropped records it has not reported
    /// yet: it writes the `PERF_RECORD_LOST` only once a record fits again.
    pub(super) overflowed: bool,
}

impl SlotInner {
    /// Takes the oldest record of the ring and applies it; `false` when the ring was empty
    /// (after re-reading the thread's state from `/proc` if a drainer found the ring full).
    ///
    /// One record at a time, so that a drainer holds the ring for one record only: a drainer
    /// preempted with the ring in hand (a leader at `SCHED_IDLE` on a busy core may not run
    /// again for a long time) keeps at most that record from the others. See the monitor's
    /// `README.md`, "One record at a time".
    pub(super) fn take_one(
        &mut self,
        tid: i32,
        ring_bytes: usize,
        resyncs: &AtomicU64,
        sink: &mut dyn FnMut(MonitorEvent),
        found: &mut Consumed,
    ) -> bool {
        let SlotInner {
            sampler,
            tracker,
            peek,
            overflow_pending,
            resync_due,
        } = self;
        // The fill level falls only when a drainer takes a record, always after this check: so
        // the first drainer after the kernel dropped a record finds the ring (nearly) full.
        if !*resync_due && peek.fill() + MAX_RECORD_LEN as u64 >= ring_bytes as u64 {
            *resync_due = true;
            *overflow_pending = true;
            found.overflowed = true;
        }
        let Some(record) = sampler.next_record() else {
            if *resync_due && let Some(tr) = tracker.as_mut() {
                // The ring is empty now, so the thread's present state is the one to adopt.
                tr.resync(proc_thread_state(tid), &mut sink_for(tid, sink, None));
                resyncs.fetch_add(1, Ordering::Relaxed);
            }
            *resync_due = false;
            return false;
        };
        let Some(tr) = tracker.as_mut() else {
            return true;
        };
        let body = record.to_contiguous();
        match record.ty() {
            PERF_RECORD_SWITCH => {
                let Some(id) = parse_sample_id(&body) else {
                    return true;
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
                let lost = parse_lost(&body).unwrap_or(1);
                found.lost += real_losses(lost, *resync_due, overflow_pending);
            }
            _ => {}
        }
        true
    }

    /// Consumes every record in the ring, holding it throughout (for callers that must not
    /// let another drainer in between: the thread itself as it unmutes, a retirement).
    pub(super) fn consume(
        &mut self,
        tid: i32,
        ring_bytes: usize,
        resyncs: &AtomicU64,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> Consumed {
        let mut found = Consumed::default();
        while self.take_one(tid, ring_bytes, resyncs, sink, &mut found) {}
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_records_count_only_after_an_overflow() {
        let mut pending = false;
        assert_eq!(real_losses(5, false, &mut pending), 0, "a mute's drops");
        // A drainer finds the ring full: a report is awaited.
        pending = true;
        assert_eq!(
            real_losses(2, true, &mut pending),
            2,
            "read while the ring is still full"
        );
        assert!(
            pending,
            "a report read before the ring emptied keeps it open"
        );
        assert_eq!(
            real_losses(7, false, &mut pending),
            7,
            "the overflow's report"
        );
        assert!(!pending);
        assert_eq!(
            real_losses(3, false, &mut pending),
            0,
            "a later mute's drops"
        );
    }
}
