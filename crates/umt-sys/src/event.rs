//! What a drain hands out: a batch of events of one core, and why it was produced.

use crate::abi::Events;
use crate::cpu::CpuId;

/// One batch of events of one core, with where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorEvent {
    /// The core the events are accounted on.
    pub cpu: CpuId,
    /// How many monitored threads blocked and unblocked there.
    pub events: Events,
    /// Why the events were produced.
    pub cause: Cause,
    /// The thread, when the backend knows it (Perf does, Kernel does not).
    pub tid: Option<i32>,
    /// `CLOCK_MONOTONIC` time of the context switch in nanoseconds, when the backend knows it.
    pub time_ns: Option<u64>,
}

impl MonitorEvent {
    /// The [`Cause::Counted`] event of `cpu`, whose cumulative blocks and unblocks went from
    /// `last` to `now` (each difference saturating at `u32::MAX`); `None` if neither moved.
    pub(crate) fn counted(cpu: CpuId, last: [u64; 2], now: [u64; 2]) -> Option<MonitorEvent> {
        let delta = |i: usize| u32::try_from(now[i].wrapping_sub(last[i])).unwrap_or(u32::MAX);
        (now != last).then(|| MonitorEvent {
            cpu,
            events: Events {
                blocked: delta(0),
                unblocked: delta(1),
            },
            cause: Cause::Counted,
            tid: None,
            time_ns: None,
        })
    }
}

/// Why an event was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// Counted by the UMT kernel extension and read from a CPU file (events mode; the kernel
    /// does not say which thread).
    Kernel,
    /// The thread blocked in the kernel, or ran again after blocking.
    Switch,
    /// The thread moved between cores while runnable: a block on the old core and an unblock
    /// on the new one keep both counts exact.
    Migration,
    /// The thread started being monitored (it counts as ready on its core).
    Register,
    /// The thread stopped being monitored.
    Unregister,
    /// The thread exited while registered; what it contributed was taken back.
    Exit,
    /// Counted in shared memory, by the Bpf backend's programs or in the UMT kernel's counter
    /// page (idle-only mode): what changed since the last drain (neither says which thread).
    Counted,
    /// Records were lost; the thread's state was re-read from `/proc` and the counts fixed.
    Resync,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_events_are_the_differences() {
        assert_eq!(MonitorEvent::counted(3, [5, 7], [5, 7]), None);
        let ev = MonitorEvent::counted(3, [5, 7], [9, 8]).unwrap();
        assert_eq!((ev.cpu, ev.cause, ev.tid), (3, Cause::Counted, None));
        assert_eq!(
            ev.events,
            Events {
                blocked: 4,
                unblocked: 1
            }
        );
        // A difference too large for the word saturates, as a saturated file half does.
        let big = MonitorEvent::counted(0, [0, 0], [u64::from(u32::MAX) + 9, 1]).unwrap();
        assert_eq!(big.events.blocked, u32::MAX);
    }
}
