//! From a core's records to the states it went through (the UMT paper's per-core timelines)
//! and the time in each.
//!
//! T1. A worker is *in a task* from a `TaskStart` to its matching `TaskEnd` (tasks nest), and
//!     *running* while in a task and not parked (a worker that surrenders in the middle of a
//!     nested task is parked with it).
//! T2. The core's ready count is the last record's `ready` (every record carries it). Records
//!     come at the events of the runtime (tasks, parks, the leader's wake-ups and drains) and,
//!     inside a parallel loop's long task, between two chunks (`Chunk`): a count that rises
//!     inside a chunk (a blocked worker back while another computes, which the Bpf backend
//!     does not signal) shows from the next record on.
//! T3. The state from one record to the next: `Oversubscribed` if ready >= 2; else
//!     `Application` if a worker runs and ready >= 1; else `Blocked` if a worker runs and
//!     ready <= 0 (its task waits in the kernel and the core idles); else `Idle`. Without a
//!     monitor: `Application` if a worker runs, else `Idle`.
//! T4. States partition the window: their durations sum to its length exactly.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use umt_sys::CpuId;

use super::{TraceKind, TraceRecord, TraceThread};

/// What a core was doing (step T3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoreState {
    /// One ready worker, running tasks: useful work.
    Application,
    /// A task is in progress but its worker is blocked in the kernel and no other worker of
    /// the core is ready: the core idles while work waits (what UMT removes).
    Blocked,
    /// Two or more ready workers share the core (the price of waking a spare).
    Oversubscribed,
    /// No task in progress: the core's workers look for work or are parked.
    Idle,
}

impl CoreState {
    /// Every state, in the order pictures and tables show them.
    pub const ALL: [CoreState; 4] = [
        CoreState::Application,
        CoreState::Blocked,
        CoreState::Oversubscribed,
        CoreState::Idle,
    ];

    /// Its name in tables, legends and traces.
    pub fn name(self) -> &'static str {
        match self {
            CoreState::Application => "application",
            CoreState::Blocked => "blocked",
            CoreState::Oversubscribed => "oversubscribed",
            CoreState::Idle => "idle",
        }
    }
}

/// A core in one state, from `start_ns` to `end_ns` (nanoseconds since the runtime was built).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Start.
    pub start_ns: u64,
    /// End (exclusive).
    pub end_ns: u64,
    /// The state.
    pub state: CoreState,
}

/// A core's time over a trace, by state, with the tasks it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CoreAccount {
    /// The CPU.
    pub cpu: CpuId,
    /// Time in [`CoreState::Application`].
    pub application: Duration,
    /// Time in [`CoreState::Blocked`].
    pub blocked: Duration,
    /// Time in [`CoreState::Oversubscribed`].
    pub oversubscribed: Duration,
    /// Time in [`CoreState::Idle`].
    pub idle: Duration,
    /// Worker-time spent blocked inside tasks: the integral of (workers running a task minus
    /// ready workers), when positive. Over `blocked` when several workers are blocked at once.
    pub blocked_workers: Duration,
    /// Tasks its workers started.
    pub tasks: u64,
}

impl CoreAccount {
    /// The time in `state`.
    pub fn time(&self, state: CoreState) -> Duration {
        match state {
            CoreState::Application => self.application,
            CoreState::Blocked => self.blocked,
            CoreState::Oversubscribed => self.oversubscribed,
            CoreState::Idle => self.idle,
        }
    }

    /// The length of the window: the sum of the four states.
    pub fn total(&self) -> Duration {
        CoreState::ALL.iter().map(|&s| self.time(s)).sum()
    }
}

/// The folding state of steps T1 and T2.
#[derive(Default)]
struct Fold {
    depth: HashMap<TraceThread, u32>,
    parked: HashSet<TraceThread>,
    ready: i64,
}

impl Fold {
    fn apply(&mut self, r: &TraceRecord) {
        self.ready = r.ready;
        match r.kind {
            TraceKind::TaskStart => *self.depth.entry(r.thread).or_default() += 1,
            TraceKind::TaskEnd => {
                let d = self.depth.entry(r.thread).or_default();
                *d = d.saturating_sub(1);
            }
            TraceKind::Park => {
                self.parked.insert(r.thread);
            }
            TraceKind::Unpark => {
                self.parked.remove(&r.thread);
            }
            _ => {}
        }
    }

    fn running(&self) -> i64 {
        self.depth
            .iter()
            .filter(|(t, d)| **d > 0 && !self.parked.contains(t))
            .count() as i64
    }

    fn state(&self, monitored: bool) -> CoreState {
        let running = self.running();
        match (monitored, running > 0) {
            (false, true) => CoreState::Application,
            (false, false) => CoreState::Idle,
            _ if self.ready >= 2 => CoreState::Oversubscribed,
            (true, true) if self.ready >= 1 => CoreState::Application,
            (true, true) => CoreState::Blocked,
            (true, false) => CoreState::Idle,
        }
    }

    fn blocked_workers(&self, monitored: bool) -> u64 {
        if monitored {
            (self.running() - self.ready.max(0)).max(0) as u64
        } else {
            0
        }
    }
}

/// Walks one core's records (sorted by time) over `[from, to)`, calling `each(start, end,
/// state, blocked workers)` for every stretch between records.
fn walk(records: &[TraceRecord], from: u64, to: u64, mut each: impl FnMut(u64, u64, &Fold)) {
    let mut fold = Fold::default();
    let mut t = from;
    for r in records {
        let at = r.time_ns.clamp(from, to);
        if at > t {
            each(t, at, &fold);
            t = at;
        }
        fold.apply(r);
    }
    if to > t {
        each(t, to, &fold);
    }
}

/// The spans of one core's records (sorted by time) over `[from, to)`, merged where the
/// state does not change.
pub(crate) fn spans(records: &[TraceRecord], from: u64, to: u64, monitored: bool) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    walk(records, from, to, |start, end, fold| {
        let state = fold.state(monitored);
        match out.last_mut() {
            Some(last) if last.state == state && last.end_ns == start => last.end_ns = end,
            _ => out.push(Span {
                start_ns: start,
                end_ns: end,
                state,
            }),
        }
    });
    out
}

/// The account of one core's records (sorted by time) over `[from, to)`.
pub(crate) fn account(
    cpu: CpuId,
    records: &[TraceRecord],
    from: u64,
    to: u64,
    monitored: bool,
) -> CoreAccount {
    let mut a = CoreAccount {
        cpu,
        tasks: records
            .iter()
            .filter(|r| r.kind == TraceKind::TaskStart && r.time_ns >= from && r.time_ns <= to)
            .count() as u64,
        ..CoreAccount::default()
    };
    walk(records, from, to, |start, end, fold| {
        let d = Duration::from_nanos(end - start);
        match fold.state(monitored) {
            CoreState::Application => a.application += d,
            CoreState::Blocked => a.blocked += d,
            CoreState::Oversubscribed => a.oversubscribed += d,
            CoreState::Idle => a.idle += d,
        }
        a.blocked_workers += d * fold.blocked_workers(monitored) as u32;
    });
    a
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn rec(time_ns: u64, worker: usize, kind: TraceKind, ready: i64) -> TraceRecord {
        TraceRecord {
            time_ns,
            core: 0,
            thread: TraceThread::Worker(worker),
            kind,
            ready,
        }
    }

    #[test]
    fn a_block_in_a_task_then_a_spare_then_oversubscription() {
        use TraceKind::*;
        let r = [
            rec(10, 0, TaskStart, 1),
            // The worker blocks; the leader's drain shows the core empty.
            TraceRecord {
                thread: TraceThread::Leader,
                ..rec(20, 0, Drained, 0)
            },
            // A spare wakes and runs a task.
            rec(30, 1, Unpark, 1),
            rec(31, 1, TaskStart, 1),
            // The blocked worker is back: two ready.
            rec(40, 1, Drained, 2),
            rec(50, 1, TaskEnd, 2),
            rec(51, 1, Surrender, 2),
            rec(52, 1, Park, 1),
            rec(60, 0, TaskEnd, 1),
        ];
        let s = spans(&r, 0, 100, true);
        let got: Vec<(u64, u64, CoreState)> =
            s.iter().map(|s| (s.start_ns, s.end_ns, s.state)).collect();
        assert_eq!(
            got,
            vec![
                (0, 10, CoreState::Idle),
                (10, 20, CoreState::Application),
                // The spare is ready from 30: the core works again.
                (20, 30, CoreState::Blocked),
                (30, 40, CoreState::Application),
                (40, 52, CoreState::Oversubscribed),
                (52, 60, CoreState::Application),
                (60, 100, CoreState::Idle),
            ]
        );
        let a = account(3, &r, 0, 100, true);
        assert_eq!(a.blocked, Duration::from_nanos(10));
        assert_eq!(a.tasks, 2);
        // Worker 0 was blocked in its task from 20 to 30 (ready 0) and from 31 to 40 (two
        // running, one ready); from 30 to 31 the one ready was the spare, still searching,
        // which a count cannot tell from worker 0.
        assert_eq!(a.blocked_workers, Duration::from_nanos(19));
        // Without a monitor, the same records show only work and idleness.
        let off = account(3, &r, 0, 100, false);
        assert_eq!(off.application, Duration::from_nanos(50));
        assert_eq!(off.blocked + off.oversubscribed, Duration::ZERO);
    }

    fn kinds() -> impl Strategy<Value = TraceKind> {
        prop_oneof![
            Just(TraceKind::TaskStart),
            Just(TraceKind::TaskEnd),
            Just(TraceKind::Park),
            Just(TraceKind::Unpark),
            Just(TraceKind::Surrender),
            Just(TraceKind::SpareWoken),
            Just(TraceKind::LeaderWake),
            Just(TraceKind::Drained),
        ]
    }

    proptest! {
        /// Step T4: whatever the records, the spans tile the window and the account sums to it.
        #[test]
        fn states_partition_the_window(
            mut raw in proptest::collection::vec((0u64..1000, 0usize..3, kinds(), -1i64..4), 0..60),
            from in 0u64..200,
            len in 0u64..1200,
            monitored: bool,
        ) {
            raw.sort_by_key(|r| r.0);
            let records: Vec<TraceRecord> =
                raw.iter().map(|&(t, w, k, ready)| rec(t, w, k, ready)).collect();
            let to = from + len;
            let s = spans(&records, from, to, monitored);
            let mut t = from;
            for span in &s {
                prop_assert_eq!(span.start_ns, t);
                prop_assert!(span.end_ns > span.start_ns);
                t = span.end_ns;
            }
            prop_assert_eq!(t, to);
            for w in s.windows(2) {
                prop_assert!(w[0].state != w[1].state);
            }
            let a = account(0, &records, from, to, monitored);
            prop_assert_eq!(a.total(), Duration::from_nanos(len));
            for state in CoreState::ALL {
                let from_spans: u64 = s
                    .iter()
                    .filter(|x| x.state == state)
                    .map(|x| x.end_ns - x.start_ns)
                    .sum();
                prop_assert_eq!(a.time(state), Duration::from_nanos(from_spans));
            }
            if !monitored {
                prop_assert_eq!(a.blocked + a.oversubscribed, Duration::ZERO);
            }
        }
    }
}
