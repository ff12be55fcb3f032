//! Running one loop: participants (one per core) take chunks of `0..len` from a
//! [`Dispenser`] and fold each into an accumulator; the accumulators are combined in index
//! order. Steps D1–D4 of `README.md`.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, Location, catch_unwind, resume_unwind};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::registry::Registry;
use crate::schedule::{Cursor, Dispenser, Schedule, auto_pick, auto_record};
use crate::worker::with_current;

/// How a loop folds: a fresh accumulator, folding a range of indices into one, combining two
/// adjacent ones (left, right).
pub(crate) struct Fold<I, F, C> {
    pub(crate) identity: I,
    pub(crate) fold: F,
    pub(crate) combine: C,
    /// Whether `combine` needs its operands in index order (`reduce`, `collect`, first/last
    /// wins): then a participant keeps one accumulator per contiguous run of chunks it took;
    /// otherwise one in all (`for_each`, `sum`, `count`).
    pub(crate) ordered: bool,
}

/// Runs the loop `0..len` under `schedule` (the program's default when `None`) on the calling
/// worker's runtime, or the global one, and returns the combined accumulator.
pub(crate) fn drive<A, I, F, C>(
    len: usize,
    schedule: Option<Schedule>,
    site: &'static Location<'static>,
    how: Fold<I, F, C>,
) -> A
where
    A: Send,
    I: Fn() -> A + Sync,
    F: Fn(A, Range<usize>) -> A + Sync,
    C: Fn(A, A) -> A + Sync,
{
    let reg = crate::global::current_or_global();
    let cores = reg.as_ref().map_or(1, |r| r.cores());
    // D1: a loop that one participant can do alone runs inline, without tasks.
    let participants = cores.min(len);
    let Some(reg) = reg.filter(|_| participants > 1) else {
        return (how.fold)((how.identity)(), 0..len);
    };
    let schedule = schedule.unwrap_or_else(Schedule::program_default);
    let (schedule, auto) = match schedule {
        Schedule::Auto => {
            let (s, k) = auto_pick(site);
            (s, Some(k))
        }
        s => (s, None),
    };
    let started = Instant::now();
    let result = how.run(&reg, len, schedule, participants);
    if let Some(k) = auto {
        auto_record(site, k, started.elapsed().as_nanos() as f64 / len as f64);
    }
    result
}

impl<A, I, F, C> Fold<I, F, C>
where
    A: Send,
    I: Fn() -> A + Sync,
    F: Fn(A, Range<usize>) -> A + Sync,
    C: Fn(A, A) -> A + Sync,
{
    fn run(&self, reg: &Arc<Registry>, len: usize, schedule: Schedule, participants: usize) -> A {
        let how = self;
        let dispenser = Dispenser::new(schedule, len, participants);
        let results: Mutex<Vec<(usize, A)>> = Mutex::new(Vec::new());
        let participate = |p: usize| how.participant(p, &dispenser, &results);
        // D2: a worker of this runtime is participant 0 itself; any other thread only waits.
        let on_worker = with_current(|ctx| ctx.is_some_and(|c| Arc::ptr_eq(c.registry(), reg)));
        crate::scope::run_scope(Some(reg), |s| {
            let first = usize::from(on_worker);
            for p in first..participants {
                let participate = &participate;
                s.spawn(move |_| participate(p));
            }
            if on_worker {
                participate(0);
            }
        });
        // D4: combine in index order.
        let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
        results.sort_unstable_by_key(|r| r.0);
        results
            .into_iter()
            .map(|r| r.1)
            .reduce(&how.combine)
            .unwrap_or_else(&how.identity)
    }

    /// D3: one participant's part: chunks until the dispenser has none, folded into one
    /// accumulator per contiguous run (ordered) or one in all; a panic stops the loop's other
    /// participants at their next chunk and is re-raised by the scope.
    fn participant(&self, p: usize, dispenser: &Dispenser, results: &Mutex<Vec<(usize, A)>>) {
        let how = self;
        let mut cursor = Cursor::new(p);
        let mut done: Vec<(usize, A)> = Vec::new();
        // The accumulator being built: where its run starts and ends.
        let mut current: Option<(usize, usize, A)> = None;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            while let Some(r) = dispenser.next(&mut cursor) {
                let (start, acc) = match current.take() {
                    Some((start, end, acc)) if end == r.start || !how.ordered => (start, acc),
                    Some((start, _, acc)) => {
                        done.push((start, acc));
                        (r.start, (how.identity)())
                    }
                    None => (r.start, (how.identity)()),
                };
                let end = r.end;
                current = Some((start, end, (how.fold)(acc, r)));
            }
        }));
        if let Err(panic) = outcome {
            dispenser.stop();
            resume_unwind(panic);
        }
        done.extend(current.map(|(start, _, acc)| (start, acc)));
        results
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .append(&mut done);
    }
}
