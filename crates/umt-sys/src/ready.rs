//! Per-core ready counts, and the per-thread state machine that keeps them exact.
//!
//! The ready count of a core is the number of monitored threads running or runnable on it
//! (the paper's meaning). It only ever changes through [`Events`]: an unblock adds one, a block
//! subtracts one. The kernel backend gets those events from the kernel; the perf backend makes
//! them from context-switch records with a [`Tracker`] per thread. See `monitor/README.md`.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::abi::Events;
use crate::cpu::CpuId;
use crate::event::Cause;

/// Per-core ready counts shared by every thread that drains the monitor.
#[derive(Debug)]
pub(crate) struct ReadyCounts {
    counts: Box<[AtomicI64]>,
}

impl ReadyCounts {
    /// Zeroed counts for `cpus` CPU ids.
    pub(crate) fn new(cpus: usize) -> Self {
        ReadyCounts {
            counts: (0..cpus).map(|_| AtomicI64::new(0)).collect(),
        }
    }

    /// Applies a batch of events of one CPU. Events of a CPU beyond the table are ignored.
    pub(crate) fn apply(&self, cpu: CpuId, events: Events) {
        if let Some(c) = self.counts.get(cpu) {
            c.fetch_add(events.ready_delta(), Ordering::AcqRel);
        }
    }

    /// The ready count of `cpu` (0 for a CPU beyond the table).
    #[inline]
    pub(crate) fn get(&self, cpu: CpuId) -> i64 {
        self.counts
            .get(cpu)
            .map_or(0, |c| c.load(Ordering::Acquire))
    }

    /// All counts, indexed by CPU id.
    pub(crate) fn snapshot(&self) -> Vec<i64> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Acquire))
            .collect()
    }
}

/// What a tracker believes about its thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThreadState {
    /// Running or runnable on this CPU: counted in that CPU's ready count.
    Ready(CpuId),
    /// Blocked in the kernel: counted nowhere.
    Blocked,
}

/// Turns one thread's context switches into per-core block/unblock events.
///
/// Every transition emits events such that the sum over cores of the emitted ready deltas
/// equals the thread's contribution: +1 on the core it is ready on, 0 when blocked. The input
/// may be any sequence (records can be lost), and the accounting stays exact.
#[derive(Debug, Clone)]
pub(crate) struct Tracker {
    state: ThreadState,
}

impl Tracker {
    /// A thread that starts being monitored while running on `cpu`.
    pub(crate) fn start(cpu: CpuId, emit: &mut impl FnMut(CpuId, Events, Cause)) -> Self {
        emit(cpu, Events::UNBLOCK, Cause::Register);
        Tracker {
            state: ThreadState::Ready(cpu),
        }
    }

    /// The thread was switched out on `cpu`; `preempted` when it stays runnable.
    pub(crate) fn switch_out(
        &mut self,
        cpu: CpuId,
        preempted: bool,
        emit: &mut impl FnMut(CpuId, Events, Cause),
    ) {
        // It ran on `cpu` until now: make sure it is counted there first.
        self.arrive(cpu, Cause::Migration, emit);
        if !preempted {
            emit(cpu, Events::BLOCK, Cause::Switch);
            self.state = ThreadState::Blocked;
        }
    }

    /// The thread was switched in on `cpu`.
    pub(crate) fn switch_in(&mut self, cpu: CpuId, emit: &mut impl FnMut(CpuId, Events, Cause)) {
        self.arrive(cpu, Cause::Switch, emit);
    }

    /// Records were lost: adopt the state observed from outside (for example `/proc`).
    pub(crate) fn resync(
        &mut self,
        observed: ThreadState,
        emit: &mut impl FnMut(CpuId, Events, Cause),
    ) {
        match observed {
            ThreadState::Ready(cpu) => self.arrive(cpu, Cause::Resync, emit),
            ThreadState::Blocked => {
                if let ThreadState::Ready(old) = self.state {
                    emit(old, Events::BLOCK, Cause::Resync);
                }
                self.state = ThreadState::Blocked;
            }
        }
    }

    /// The thread stops being monitored: whatever it contributed is taken back.
    pub(crate) fn stop(self, emit: &mut impl FnMut(CpuId, Events, Cause)) {
        if let ThreadState::Ready(cpu) = self.state {
            emit(cpu, Events::BLOCK, Cause::Unregister);
        }
    }

    /// Makes the thread ready on `cpu`. From blocked, that is an unblock with `cause_if_blocked`
    /// (a wake-up, or a resync); from ready on another core, a migration.
    fn arrive(
        &mut self,
        cpu: CpuId,
        cause_if_blocked: Cause,
        emit: &mut impl FnMut(CpuId, Events, Cause),
    ) {
        match self.state {
            ThreadState::Ready(old) if old == cpu => {}
            ThreadState::Ready(old) => {
                let cause = if cause_if_blocked == Cause::Resync {
                    Cause::Resync
                } else {
                    Cause::Migration
                };
                emit(old, Events::BLOCK, cause);
                emit(cpu, Events::UNBLOCK, cause);
            }
            ThreadState::Blocked => emit(cpu, Events::UNBLOCK, cause_if_blocked),
        }
        self.state = ThreadState::Ready(cpu);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CPUS: usize = 4;

    #[derive(Debug, Clone)]
    enum Op {
        Out { cpu: CpuId, preempted: bool },
        In { cpu: CpuId },
        Resync(Option<CpuId>),
    }

    fn op() -> impl Strategy<Value = (usize, Op)> {
        let op = prop_oneof![
            (0..CPUS, any::<bool>()).prop_map(|(cpu, preempted)| Op::Out { cpu, preempted }),
            (0..CPUS).prop_map(|cpu| Op::In { cpu }),
            proptest::option::of(0..CPUS).prop_map(Op::Resync),
        ];
        (0..3usize, op)
    }

    proptest! {
        /// Any sequence of switch records, including impossible ones (lost records), keeps the
        /// per-core counts equal to a model that just remembers where each thread is.
        #[test]
        fn counts_match_the_model(start in proptest::collection::vec(0..CPUS, 3), ops in proptest::collection::vec(op(), 0..200)) {
            let counts = ReadyCounts::new(CPUS);
            let mut totals = Events::default();
            let mut emit = |cpu: CpuId, ev: Events, _cause: Cause| {
                counts.apply(cpu, ev);
                totals = totals.saturating_add(ev);
            };
            let mut trackers: Vec<Tracker> = start.iter().map(|&c| Tracker::start(c, &mut emit)).collect();
            let mut model: Vec<Option<CpuId>> = start.iter().map(|&c| Some(c)).collect();
            for (t, op) in ops {
                match op {
                    Op::Out { cpu, preempted } => {
                        trackers[t].switch_out(cpu, preempted, &mut emit);
                        model[t] = if preempted { Some(cpu) } else { None };
                    }
                    Op::In { cpu } => {
                        trackers[t].switch_in(cpu, &mut emit);
                        model[t] = Some(cpu);
                    }
                    Op::Resync(seen) => {
                        let obs = seen.map_or(ThreadState::Blocked, ThreadState::Ready);
                        trackers[t].resync(obs, &mut emit);
                        model[t] = seen;
                    }
                }
                for cpu in 0..CPUS {
                    let want = model.iter().filter(|m| **m == Some(cpu)).count() as i64;
                    prop_assert_eq!(counts.get(cpu), want, "cpu {}", cpu);
                }
            }
            for tr in trackers {
                tr.stop(&mut emit);
            }
            prop_assert_eq!(counts.snapshot(), vec![0; CPUS]);
            // Every block is matched by an unblock once all threads are gone.
            prop_assert_eq!(totals.blocked, totals.unblocked);
        }
    }

    #[test]
    fn preemption_emits_nothing() {
        let mut seen = Vec::new();
        let mut emit = |cpu, ev, cause| seen.push((cpu, ev, cause));
        let mut tr = Tracker::start(1, &mut emit);
        tr.switch_out(1, true, &mut emit);
        tr.switch_in(1, &mut emit);
        assert_eq!(seen, vec![(1, Events::UNBLOCK, Cause::Register)]);
    }

    #[test]
    fn blocking_and_waking_elsewhere() {
        let mut seen = Vec::new();
        let mut emit = |cpu, ev, cause| seen.push((cpu, ev, cause));
        let mut tr = Tracker::start(0, &mut emit);
        tr.switch_out(0, false, &mut emit);
        tr.switch_in(1, &mut emit);
        tr.switch_out(1, true, &mut emit);
        tr.switch_in(2, &mut emit);
        assert_eq!(
            seen,
            vec![
                (0, Events::UNBLOCK, Cause::Register),
                (0, Events::BLOCK, Cause::Switch),
                (1, Events::UNBLOCK, Cause::Switch),
                (1, Events::BLOCK, Cause::Migration),
                (2, Events::UNBLOCK, Cause::Migration),
            ]
        );
    }

    #[test]
    fn cpus_beyond_the_table_are_ignored() {
        let counts = ReadyCounts::new(2);
        counts.apply(5, Events::UNBLOCK);
        assert_eq!(counts.get(5), 0);
        assert_eq!(counts.snapshot(), vec![0, 0]);
    }
}
