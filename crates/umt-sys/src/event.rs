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

/// Why an event was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// Counted by the UMT kernel extension (the kernel does not say which thread).
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
    /// Counted in shared memory by the Bpf backend's programs: what changed since the last
    /// drain (the programs do not say which thread).
    Counted,
    /// Records were lost; the thread's state was re-read from `/proc` and the counts fixed.
    Resync,
}
