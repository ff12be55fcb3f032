//! The trace recorder: what every worker and leader did, when, for timelines and for exact
//! per-core accounting ([`Builder::trace`](crate::Builder::trace), off by default).
//!
//! Each thread appends [`TraceRecord`]s to a buffer of its own, without a lock or an atomic
//! read-modify-write; it hands the buffer over (one lock) when it is full, before it parks,
//! and when it exits. [`Runtime::take_trace`](crate::Runtime::take_trace) collects what was
//! handed over, sorted by time, as a [`Trace`]: its [`Trace::spans`] say in which
//! [`CoreState`] each core was from one record to the next, [`Trace::accounting`] sums them
//! per core, and `Trace::to_chrome_json` (feature `json`) writes the trace-event JSON that
//! Perfetto (<https://ui.perfetto.dev>) and `chrome://tracing` open.
//!
//! ```
//! let rt = umt_rt::Runtime::builder().num_threads(2).trace(true).build()?;
//! rt.scope(|s| {
//!     for _ in 0..8 {
//!         s.spawn(|_| {
//!             std::hint::black_box((0..10_000u64).sum::<u64>());
//!         });
//!     }
//! });
//! let trace = rt.take_trace().expect("tracing is on");
//! let starts = trace
//!     .records()
//!     .iter()
//!     .filter(|r| r.kind == umt_rt::TraceKind::TaskStart)
//!     .count();
//! assert!(starts >= 8); // the scope's own task, and the eight
//! for core in trace.accounting() {
//!     println!("CPU {}: {:?} running tasks, {:?} idle", core.cpu, core.application, core.idle);
//! }
//! #[cfg(feature = "json")]
//! std::fs::write("/tmp/umt-trace.json", trace.to_chrome_json()).unwrap(); // open in Perfetto
//! # Ok::<(), umt_rt::BuildError>(())
//! ```

#[cfg(feature = "json")]
mod chrome;
mod timeline;

use std::cell::{Cell, RefCell};

use umt_sys::CpuId;

use crate::sync::{AtomicUsize, Mutex, Ordering, lock};

pub use timeline::{CoreAccount, CoreState, Span};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TraceKind {
    /// A worker started a task.
    TaskStart,
    /// The task it started last ended (tasks nest: a task that waits for a `join` runs
    /// others meanwhile).
    TaskEnd,
    /// A worker parked in its core's idle pool (no work, or it surrendered).
    Park,
    /// A parked worker runs again.
    Unpark,
    /// A worker surrendered its core, which had more than one ready worker; it parks next.
    Surrender,
    /// The core's leader woke a parked worker (or asked for a new spare) because the core had
    /// no ready worker while work waited.
    SpareWoken,
    /// The core's leader woke up: on a monitor signal, its scan timer, or a poll.
    LeaderWake,
    /// A drain applied monitor events; the record's `ready` is the count they left.
    Drained,
    /// The core's leader lent it a runnable worker of another, oversubscribed core, because
    /// its own workers were all blocked and none could be woken (`Runtime` docs, "Lending").
    Lent,
    /// A worker lent to another core went back to its own; recorded on its own core.
    Home,
    /// A worker of a parallel loop between two chunks: no event, a sample of the core's ready
    /// count (a loop's task lasts, and blocked workers come back inside it: without these the
    /// timeline would hold the count of the task's start).
    Chunk,
}

/// The thread that recorded a [`TraceRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TraceThread {
    /// A worker, by its index among the runtime's worker slots (stable for the runtime's
    /// life; [`crate::Stats::workers`] lists the started ones).
    Worker(usize),
    /// The leader of the record's core (its tasks, with
    /// [`Builder::leader_runs_tasks`](crate::Builder::leader_runs_tasks), are recorded as
    /// the leader's too).
    Leader,
}

/// One event of a [`Trace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRecord {
    /// Nanoseconds since the runtime was built (`umt_sys::clock::FastClock`: the CPU's
    /// time-stamp counter where the kernel trusts it, else `CLOCK_MONOTONIC`).
    pub time_ns: u64,
    /// The core (index into [`Trace::cpus`]).
    pub core: usize,
    /// Who recorded it.
    pub thread: TraceThread,
    /// What happened.
    pub kind: TraceKind,
    /// The core's ready count as the monitor showed it at that moment (0 with the monitor
    /// off). It lags the kernel by a drain: backends whose counts live in shared memory
    /// (the UMT kernel's counter page, Bpf) show them as they are, the others as of the
    /// last drain, which a leader does as soon as the monitor signals it.
    pub ready: i64,
}

/// A collected trace ([`Runtime::take_trace`](crate::Runtime::take_trace)).
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    cpus: Vec<CpuId>,
    monitored: bool,
    end_ns: u64,
    records: Vec<TraceRecord>,
}

impl Trace {
    /// A trace of the given records (sorted here by time), for `cpus` (a record's `core`
    /// indexes it), ending at `end_ns`. `monitored` says whether the ready counts are real:
    /// without a monitor, a blocked worker cannot be told from a running one. Records of
    /// cores beyond `cpus` are dropped.
    pub(crate) fn new(
        cpus: Vec<CpuId>,
        monitored: bool,
        mut records: Vec<TraceRecord>,
        end_ns: u64,
    ) -> Trace {
        records.retain(|r| r.core < cpus.len());
        records.sort_by_key(|r| r.time_ns);
        let end_ns = records.last().map_or(end_ns, |r| r.time_ns.max(end_ns));
        Trace {
            cpus,
            monitored,
            end_ns,
            records,
        }
    }

    /// Adds the records of `later`, a trace taken after this one from the same runtime, so
    /// the two read as one: records by time, the end the later of the two. A thread hands its
    /// records over when it parks (or, a leader, between iterations), so a take can miss
    /// records that a later take brings, with times inside this trace: a leader at
    /// `SCHED_IDLE` on a core that another program keeps busy can hold them for longer than
    /// [`Runtime::take_trace`](crate::Runtime::take_trace) waits.
    ///
    /// Traces of other runtimes (other CPUs) are not joined: `later` is dropped, and
    /// `false` returned.
    pub fn append(&mut self, later: Trace) -> bool {
        if later.cpus != self.cpus {
            return false;
        }
        self.monitored |= later.monitored;
        self.end_ns = self.end_ns.max(later.end_ns);
        self.records.extend(later.records);
        // Both halves are sorted: a stable sort keeps each thread's order among equal times.
        self.records.sort_by_key(|r| r.time_ns);
        true
    }

    /// The CPU of each core.
    pub fn cpus(&self) -> &[CpuId] {
        &self.cpus
    }

    /// Whether the runtime had a monitor (ready counts are real).
    pub fn monitored(&self) -> bool {
        self.monitored
    }

    /// Every record, by time.
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// The time of the first record (0 if there is none).
    pub fn start_ns(&self) -> u64 {
        self.records.first().map_or(0, |r| r.time_ns)
    }

    /// When the trace was taken (at least its last record's time).
    pub fn end_ns(&self) -> u64 {
        self.end_ns
    }

    /// The states of `core` from [`Trace::start_ns`] to [`Trace::end_ns`], back to back.
    /// Before its first record a core counts as idle (a trace taken from a runtime with no
    /// work in flight starts so).
    pub fn spans(&self, core: usize) -> Vec<Span> {
        timeline::spans(
            &self.core_records(core),
            self.start_ns(),
            self.end_ns,
            self.monitored,
        )
    }

    /// The records of `core`, by time.
    fn core_records(&self, core: usize) -> Vec<TraceRecord> {
        self.records
            .iter()
            .filter(|r| r.core == core)
            .copied()
            .collect()
    }

    /// Per core, the time in each state and the tasks started, over the whole trace.
    pub fn accounting(&self) -> Vec<CoreAccount> {
        (0..self.cpus.len())
            .map(|core| {
                timeline::account(
                    self.cpus[core],
                    &self.core_records(core),
                    self.start_ns(),
                    self.end_ns,
                    self.monitored,
                )
            })
            .collect()
    }

    /// The trace as Chrome trace-event JSON: one process per core (named `core N (CPU c)`),
    /// in it one thread per worker with its tasks as slices and its parks, surrenders and
    /// drains as instants, one for the leader, one named `state` with the core's
    /// [`CoreState`] spans, and a `ready` counter. Times in microseconds from the first record.
    ///
    /// With the `json` feature (off by default: serde_json's comparison impls for integers
    /// make `assert_eq!(x, iter.sum())` ambiguous in crates that depend on it).
    #[cfg(feature = "json")]
    pub fn to_chrome_json(&self) -> String {
        chrome::to_json(self)
    }
}

/// A record as threads write it: 24 bytes, a third of a [`TraceRecord`], since their stores
/// are the recorder's cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawRecord {
    time_ns: u64,
    ready: i32,
    core: u32,
    /// The worker's slot index, or [`LEADER`].
    thread: u32,
    kind: TraceKind,
}

/// [`RawRecord::thread`] of a leader.
const LEADER: u32 = u32::MAX;

impl RawRecord {
    fn expand(self) -> TraceRecord {
        TraceRecord {
            time_ns: self.time_ns,
            core: self.core as usize,
            thread: match self.thread {
                LEADER => TraceThread::Leader,
                w => TraceThread::Worker(w as usize),
            },
            kind: self.kind,
            ready: i64::from(self.ready),
        }
    }
}

/// Where a runtime's threads hand their trace buffers over.
#[derive(Debug)]
pub(crate) struct Recorder {
    /// Time zero of the records, and the clock they are read from.
    clock: umt_sys::clock::FastClock,
    /// Buffers handed over since the last `take`, whole (nothing is copied).
    handed: Mutex<Vec<Vec<RawRecord>>>,
    /// Threads holding records not handed over yet: `Runtime::take_trace` waits for them
    /// (a leader flushes at the start of its next iteration, which on a busy core can come
    /// after the work it traced has returned).
    holding: AtomicUsize,
}

/// A thread's buffer is handed over when it holds this many records.
const BUFFER: usize = 4096;

impl Recorder {
    pub(crate) fn new() -> Recorder {
        Recorder {
            clock: umt_sys::clock::FastClock::new(),
            handed: Mutex::new(Vec::new()),
            holding: AtomicUsize::new(0),
        }
    }

    /// Nanoseconds since the runtime was built.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Takes `buf`'s records, leaving it empty.
    fn hand_over(&self, buf: &mut Vec<RawRecord>) {
        if !buf.is_empty() {
            let full = std::mem::take(buf);
            lock(&self.handed).push(full);
        }
    }

    /// Whether some thread holds records it has not handed over yet.
    pub(crate) fn some_held(&self) -> bool {
        self.holding.load(Ordering::Acquire) > 0
    }

    /// Everything handed over since the last call.
    pub(crate) fn take(&self) -> Vec<TraceRecord> {
        let chunks = std::mem::take(&mut *lock(&self.handed));
        chunks
            .into_iter()
            .flatten()
            .map(RawRecord::expand)
            .collect()
    }
}

/// A thread's own trace buffer: appends need no synchronisation.
#[derive(Debug, Default)]
pub(crate) struct LocalTrace {
    buf: RefCell<Vec<RawRecord>>,
    /// Whether this thread counts in [`Recorder::holding`]: from its first record after a
    /// flush to the next flush.
    held: Cell<bool>,
}

impl LocalTrace {
    /// Appends a record, handing the buffer over when it is full.
    #[inline]
    pub(crate) fn record(
        &self,
        rec: &Recorder,
        core: usize,
        thread: TraceThread,
        kind: TraceKind,
        ready: i64,
    ) {
        if !self.held.replace(true) {
            rec.holding.fetch_add(1, Ordering::Relaxed);
        }
        let mut buf = self.buf.borrow_mut();
        if buf.capacity() == 0 {
            buf.reserve_exact(BUFFER);
        }
        buf.push(RawRecord {
            time_ns: rec.now(),
            ready: ready.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
            core: core as u32,
            thread: match thread {
                TraceThread::Worker(w) => w as u32,
                TraceThread::Leader => LEADER,
            },
            kind,
        });
        if buf.len() >= BUFFER {
            rec.hand_over(&mut buf);
        }
    }

    /// Hands everything over (before parking, at exit).
    pub(crate) fn flush(&self, rec: &Recorder) {
        rec.hand_over(&mut self.buf.borrow_mut());
        if self.held.replace(false) {
            // Release: whoever sees the count drop sees the records handed over.
            rec.holding.fetch_sub(1, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(time_ns: u64, thread: TraceThread, kind: TraceKind) -> TraceRecord {
        TraceRecord {
            time_ns,
            core: 0,
            thread,
            kind,
            ready: 1,
        }
    }

    /// A leader's records handed over late come back in time order, inside the first
    /// trace's window; a trace of other CPUs is refused.
    #[test]
    fn append_joins_late_records_in_time_order() {
        let cpus = vec![3];
        let w = TraceThread::Worker(0);
        let mut first = Trace::new(
            cpus.clone(),
            true,
            vec![
                rec(10, w, TraceKind::TaskStart),
                rec(40, w, TraceKind::TaskEnd),
            ],
            50,
        );
        let late = Trace::new(
            cpus,
            true,
            vec![
                rec(20, TraceThread::Leader, TraceKind::SpareWoken),
                rec(60, w, TraceKind::Park),
            ],
            70,
        );
        assert!(first.append(late));
        let times: Vec<u64> = first.records().iter().map(|r| r.time_ns).collect();
        assert_eq!(times, [10, 20, 40, 60]);
        assert_eq!((first.start_ns(), first.end_ns()), (10, 70));
        let other = Trace::new(vec![4], true, vec![], 80);
        assert!(!first.append(other));
        assert_eq!(first.records().len(), 4);
        assert_eq!(first.end_ns(), 70);
    }
}
