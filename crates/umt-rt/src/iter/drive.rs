//! Running one loop: participants (one per core) take chunks of `0..len` from a
//! [`Dispenser`] and fold each into an accumulator; the accumulators are combined in index
//! order. Steps D1–D4 of `README.md`.

use std::ops::Range;
use std::panic::{AssertUnwindSafe, Location, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use crate::job::Job;
use crate::offer::{Gate, Offer};
use crate::registry::Registry;
use crate::schedule::{ChunkLimits, Cursor, Dispenser, Schedule, auto_pick, auto_record};
use crate::scope::Scope;
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

/// Runs the loop `0..len` under `schedule` (the program's default when `None`), in chunks
/// within `limits`, on the calling worker's runtime, or the global one, and returns the
/// combined accumulator.
///
/// `wanted()` is asked before each chunk is taken: no chunk that starts at or past it is
/// handed out from then on (`usize::MAX`: all are wanted; a search that has decided says
/// less, so that a loop over a huge range ends once it has, D3).
pub(crate) fn drive<A, I, F, C>(
    len: usize,
    schedule: Option<Schedule>,
    limits: ChunkLimits,
    site: &'static Location<'static>,
    how: Fold<I, F, C>,
    wanted: &(dyn Fn() -> usize + Sync),
) -> A
where
    A: Send,
    I: Fn() -> A + Sync,
    F: Fn(A, Range<usize>) -> A + Sync,
    C: Fn(A, A) -> A + Sync,
{
    let reg = crate::global::current_or_global();
    let cores = reg.as_ref().map_or(1, |r| r.cores());
    // D1: a loop that one participant can do alone runs inline, without tasks (one that is
    // shorter than twice the limits' `min` too), unless it could be split and its runtime,
    // of one core, is monitored: then it runs there, one participant, whose blocks the
    // monitor sees and whose loop's offer lets a spare join meanwhile (D5). Inline on the
    // caller it got no overlap on one core. Unmonitored, it stays inline: nothing could join,
    // and from outside it would queue behind whatever the one worker runs.
    let participants = limits.participants(len, cores);
    let on_one_core = |r: &Arc<Registry>| limits.participants(len, 2) > 1 && r.monitored();
    let Some(reg) = reg.filter(|r| participants > 1 || on_one_core(r)) else {
        // In chunks as long as the limits allow (the whole loop unless `with_max_len`).
        let step = limits.apply(len);
        return (0..len.max(1))
            .step_by(step)
            .take_while(|&at| at < wanted())
            .fold((how.identity)(), |acc, at| {
                (how.fold)(acc, at..len.min(at.saturating_add(step)))
            });
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
    let result = how.run(&reg, len, schedule, participants, limits, wanted);
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
    fn run(
        &self,
        reg: &Arc<Registry>,
        len: usize,
        schedule: Schedule,
        participants: usize,
        limits: ChunkLimits,
        wanted: &(dyn Fn() -> usize + Sync),
    ) -> A {
        let how = self;
        // As many joiners as the runtime may have spares (every blocked participant, and
        // every blocked joiner, may get one), up to MAX_JOINERS.
        let joiners = (reg.cores() * reg.config.cap.saturating_sub(1)).min(MAX_JOINERS);
        let results: Mutex<Vec<(usize, A)>> = Mutex::new(Vec::new());
        // D5: the loop's offer, listed while it runs (not under `static`: nothing to join).
        // It owns the dispenser and the free joiner numbers, so that a look at it (`has_work`)
        // can ask both without entering its gate.
        let offer = Arc::new(LoopOffer::new(
            Dispenser::new(schedule, len, participants, joiners, limits),
            joiners,
        ));
        let dispenser = &offer.dispenser;
        let participate = |p: usize, joined: bool| {
            how.participant(p, joined, dispenser, wanted, &results, &offer.gate)
        };
        let join = Join {
            dispenser,
            participate: &participate,
            first: participants,
            free: &offer.free,
            scope: OnceLock::new(),
        };
        let offered = dispenser.joinable().then(|| {
            offer.set_target(&join);
            Withdraw {
                reg,
                offer: offer.clone(),
            }
        });
        // D2: a worker of this runtime is participant 0 itself; any other thread only waits.
        let on_worker = with_current(|ctx| ctx.is_some_and(|c| Arc::ptr_eq(c.registry(), reg)));
        let scoped = catch_unwind(AssertUnwindSafe(|| {
            crate::scope::run_scope(Some(reg), |s| {
                if let Some(w) = &offered {
                    let _ = join.scope.set(s.handle());
                    w.reg.offers.add(w.offer.clone());
                }
                let first = usize::from(on_worker);
                for p in first..participants {
                    let participate = &participate;
                    s.spawn(move |_| participate(p, false));
                }
                if on_worker {
                    participate(0, false);
                }
            })
        }));
        // Closed by every participant that saw the loop handed out; the scope has waited for
        // them all. Closed again here, and withdrawn, whether the scope returned or panicked.
        drop(offered);
        let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Err(panic) = scoped {
            // What the other participants folded goes before the panic: dropped while it
            // unwinds, an accumulator whose drop panics too would abort the process.
            for (_, acc) in results {
                crate::diag::run_quietly(move || drop(acc));
            }
            resume_unwind(panic);
        }
        // D4: combine in index order.
        results.sort_unstable_by_key(|r| r.0);
        results
            .into_iter()
            .map(|r| r.1)
            .reduce(&how.combine)
            .unwrap_or_else(&how.identity)
    }

    /// D3: one participant's part: chunks until the dispenser has none, folded into one
    /// accumulator per contiguous run (ordered) or one in all; before each chunk it passes
    /// what the loop still wants on to the dispenser (`wanted()`, a search's verdict), so that
    /// no participant takes a chunk past it. A panic stops the loop's other
    /// participants at their next chunk and is re-raised by the scope. A participant that
    /// `joined` the running loop (D5) also stops between two chunks once its core counts
    /// more than one ready worker: the one it stood in for is back.
    fn participant(
        &self,
        p: usize,
        joined: bool,
        dispenser: &Dispenser,
        wanted: &(dyn Fn() -> usize + Sync),
        results: &Mutex<Vec<(usize, A)>>,
        gate: &Gate,
    ) {
        let how = self;
        let mut cursor = Cursor::new(p);
        let mut done: Vec<(usize, A)> = Vec::new();
        // The accumulator being built: where its run starts and ends.
        let mut current: Option<(usize, usize, A)> = None;
        let mut handed_out = false;
        // Traced: a sample of the core's count between chunks (`TraceKind::Chunk`).
        let sampling = with_current(|c| c.is_some_and(|c| c.tracing()));
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            loop {
                if joined && with_current(|c| c.is_some_and(|c| c.oversubscribed())) {
                    break;
                }
                if sampling {
                    with_current(|c| c.map(|c| c.record(crate::trace::TraceKind::Chunk)));
                }
                dispenser.cut(wanted());
                let Some(r) = dispenser.next(&mut cursor) else {
                    handed_out = true;
                    break;
                };
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
        if outcome.is_err() || handed_out {
            // D5: nothing left to join (or the loop stops): no worker takes part from now on.
            gate.close();
        }
        if let Err(panic) = outcome {
            dispenser.cut(0);
            // This part's accumulators go first: dropped while the panic unwinds, one whose
            // drop panics too would abort the process.
            crate::diag::run_quietly(move || drop(current));
            for (_, acc) in done {
                crate::diag::run_quietly(move || drop(acc));
            }
            resume_unwind(panic);
        }
        done.extend(current.map(|(start, _, acc)| (start, acc)));
        crate::sync::lock_std(results).append(&mut done);
    }
}

/// Most participants that may join one running loop at a time (D5): as many as the runtime
/// may have spares, up to this many (one bit each in a word).
const MAX_JOINERS: usize = 64;

/// What a loop's offer reaches in [`Fold::run`]'s frame (D5).
trait Joinable: Sync {
    /// A job that runs one more participant, if chunks are left and a participant number free.
    fn join(&self) -> Option<Job>;
}

/// A running loop's chunks, offered to the runtime's idle workers (D5).
struct Join<'a, P> {
    dispenser: &'a Dispenser,
    participate: &'a P,
    /// The first joiner's participant number.
    first: usize,
    /// Joiner numbers not in use, one bit each (`first + bit`).
    free: &'a AtomicU64,
    /// The loop's scope, set by its body before the offer is listed.
    scope: OnceLock<Scope<'a>>,
}

impl<'a, P> Joinable for Join<'a, P>
where
    P: Fn(usize, bool) + Sync,
{
    fn join(&self) -> Option<Job> {
        if !self.dispenser.has_chunks() {
            return None;
        }
        let scope = self.scope.get()?;
        let mut free = self.free.load(Ordering::Acquire);
        let bit = loop {
            if free == 0 {
                return None;
            }
            let bit = free.trailing_zeros();
            match self.free.compare_exchange_weak(
                free,
                free & !(1 << bit),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break bit,
                Err(now) => free = now,
            }
        };
        let (participate, free) = (self.participate, self.free);
        let p = self.first + bit as usize;
        Some(scope.job(move |_| {
            // Frees the number even if the participant panics (the scope re-raises it).
            struct Release<'f>(&'f AtomicU64, u32);
            impl Drop for Release<'_> {
                fn drop(&mut self) {
                    self.0.fetch_or(1 << self.1, Ordering::AcqRel);
                }
            }
            let _release = Release(free, bit);
            participate(p, true);
        }))
    }
}

/// The offer a running loop lists in its runtime (D5). It outlives the loop (a worker may
/// still hold it), but reaches the loop's frame only inside its gate, which every
/// participant that finds the loop handed out closes, and [`Withdraw`] closes again before
/// the frame goes.
struct LoopOffer {
    gate: Gate,
    /// The loop's chunks.
    dispenser: Dispenser,
    /// Joiner numbers not in use, one bit each (see [`Join::free`]).
    free: AtomicU64,
    /// The loop's [`Join`], in [`Fold::run`]'s frame; its lifetime erased (see the type).
    target: OnceLock<ErasedJoin>,
}

/// A pointer to a loop's [`Join`] with its lifetime erased.
struct ErasedJoin(*const (dyn Joinable + 'static));

// SAFETY: the pointee is `Sync` (a `Joinable`), and is used only through shared references
// inside the offer's gate (see `LoopOffer`).
unsafe impl Send for ErasedJoin {}
// SAFETY: as above.
unsafe impl Sync for ErasedJoin {}

impl LoopOffer {
    /// The offer of a loop whose chunks `dispenser` hands out, to `joiners` joiners at most
    /// (up to [`MAX_JOINERS`]; the dispenser made for as many).
    fn new(dispenser: Dispenser, joiners: usize) -> LoopOffer {
        let joiners = joiners.min(MAX_JOINERS);
        LoopOffer {
            gate: Gate::default(),
            dispenser,
            free: AtomicU64::new(if joiners == 64 {
                u64::MAX
            } else {
                (1u64 << joiners) - 1
            }),
            target: OnceLock::new(),
        }
    }

    /// Points the offer at `join`. The caller closes the gate before `join` goes (the
    /// [`Withdraw`] guard does, in the same frame).
    fn set_target<'a>(&self, join: &'a (dyn Joinable + 'a)) {
        let ptr: *const (dyn Joinable + 'a) = join;
        // SAFETY: only the lifetime is erased (same layout); the pointer is dereferenced
        // only between a successful `Gate::enter` and its `leave`, and the gate is closed
        // (which waits for those inside) before the frame that holds `join` goes.
        let ptr: *const (dyn Joinable + 'static) = unsafe { std::mem::transmute(ptr) };
        let _ = self.target.set(ErasedJoin(ptr));
    }

    /// Runs `f` on the loop's [`Join`] if the gate lets this caller in.
    fn with_join<R>(&self, f: impl FnOnce(&dyn Joinable) -> Option<R>) -> Option<R> {
        let target = self.target.get()?;
        if !self.gate.enter() {
            return None;
        }
        // SAFETY: inside the gate, the loop's frame is alive (see `set_target`).
        let r = f(unsafe { &*target.0 });
        self.gate.leave();
        r
    }
}

impl Offer for LoopOffer {
    /// Open (no participant has found the loop handed out yet), chunks left and a joiner
    /// number free: `take` would give a job. A look that does not enter the gate, since the
    /// leaders look (L3) and one at `SCHED_IDLE` preempted inside the gate would hold up the
    /// participant that closes it for as long as its core stays busy; the dispenser and the
    /// numbers belong to the offer, not to the loop's frame, so it needs none.
    ///
    /// The gate alone is not enough (`src/README.md`, "Offers": a look that says "work" must
    /// be one a take can honour): once the last chunk is
    /// handed out, the gate stays open until a participant asks for one more, and the
    /// participants holding the last chunks may be surrendered. Idle workers that saw the
    /// open gate as work never parked, their core never emptied, and its leader never woke
    /// the surrendered participants again: the loop hung.
    fn has_work(&self) -> bool {
        self.target.get().is_some()
            && !self.gate.is_closed()
            && self.free.load(Ordering::Acquire) != 0
            && self.dispenser.has_chunks()
    }

    fn take(&self) -> Option<Job> {
        self.with_join(|j| j.join())
    }
}

/// Closes a loop's offer and takes it off its runtime's list when the loop's frame goes,
/// whether the loop returned or unwinds.
struct Withdraw<'r> {
    reg: &'r Arc<Registry>,
    offer: Arc<LoopOffer>,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.offer.gate.close();
        let offer: Arc<dyn Offer> = self.offer.clone();
        self.reg.offers.remove(&offer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoJoin;
    impl Joinable for NoJoin {
        fn join(&self) -> Option<Job> {
            None
        }
    }

    /// The offer says "work" only while a take could give some: not once the chunks are all
    /// handed out, even with its gate still open (no participant has asked for one more), and
    /// not while every joiner number is in use.
    #[test]
    fn an_offer_has_work_only_while_chunks_and_joiner_numbers_are_left() {
        for schedule in [
            Schedule::Dynamic(3),
            Schedule::Guided(1),
            Schedule::StaticSteal,
            Schedule::Fac2,
            Schedule::Af,
        ] {
            let offer = LoopOffer::new(
                Dispenser::new(schedule, 10, 2, 2, ChunkLimits::default()),
                2,
            );
            assert!(!offer.has_work(), "{schedule:?}: no target yet");
            let target = NoJoin;
            offer.set_target(&target);
            assert!(offer.has_work(), "{schedule:?}: chunks left");
            let taken = offer.free.swap(0, Ordering::AcqRel);
            assert!(
                !offer.has_work(),
                "{schedule:?}: every joiner number in use"
            );
            offer.free.store(taken, Ordering::Release);
            let mut cursors = [Cursor::new(0), Cursor::new(1)];
            let mut left = 10;
            while left > 0 {
                for c in &mut cursors {
                    if let Some(r) = offer.dispenser.next(c) {
                        left -= r.len();
                    }
                }
            }
            assert!(!offer.gate.is_closed());
            assert!(
                !offer.has_work(),
                "{schedule:?}: all handed out, gate still open"
            );
            offer.gate.close();
        }
        let none = LoopOffer::new(
            Dispenser::new(Schedule::Dynamic(1), 10, 2, 0, ChunkLimits::default()),
            0,
        );
        none.set_target(&NoJoin);
        assert!(
            !none.has_work(),
            "a runtime without spares has no joiner numbers"
        );
    }
}
