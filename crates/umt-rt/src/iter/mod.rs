//! Parallel iterators for the everyday cases, with rayon's names where the meaning is the
//! same: sources on slices (`par_iter`, `par_chunks`, `par_chunks_exact`, `par_windows`, and
//! their `_mut` forms) and integer ranges; the adaptors `map`, `filter`, `filter_map`,
//! `flat_map_iter`, `inspect`, `copied`, `cloned`, `enumerate`, `zip`; the consumers
//! `for_each`, `for_each_init`, `try_for_each`, `sum`, `count`, `reduce`, `reduce_with`,
//! `collect`, `min`, `max`, `min_by`, `max_by`, `min_by_key`, `max_by_key`, and the ones that
//! stop early once decided, `any`, `all`, `find_any`, `position_any`.
//! Every loop runs under a [`Schedule`]. Design notes: `README.md` in this folder.
//!
//! Bodies may block (read a file, wait for a lock): while a loop runs it offers its chunks
//! not yet handed out, and the spare worker the monitor wakes for a core whose participant
//! blocked joins the loop as one more participant, until that participant is back. Under
//! every schedule but [`Schedule::Static`], whose participant `i` owns block `i`.
//!
//! ```
//! use umt_rt::prelude::*;
//!
//! let mut v: Vec<u64> = (0..1000).collect();
//! v.par_iter_mut().for_each(|x| *x *= 2);
//! let sum: u64 = v.par_iter().map(|&x| x).sum();
//! assert_eq!(sum, 999 * 1000);
//!
//! // Per loop, a schedule from the OS-vs-runtime scheduling study.
//! let odd = (0..1000usize)
//!     .into_par_iter()
//!     .schedule(Schedule::Guided(16))
//!     .filter(|i| i % 2 == 1)
//!     .collect::<Vec<_>>();
//! assert_eq!(odd.len(), 500);
//! ```

mod collect;
mod drive;
mod producer;
mod sources;

use std::cmp::Ordering as CmpOrdering;
use std::iter::{Product, Sum};
use std::ops::{ControlFlow, Range};
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub use producer::{
    Alternate, ArrayWindows, ArrayWindowsPart, Bridge, BridgePart, ByChunks, ByExactChunks,
    ByRChunks, ByRExactChunks, ByWindows, Chain, CharRange, Chunks, ChunksExact, ChunksExactMut,
    ChunksMut, Cloned, Copied, Enumerate, Filter, FilterMap, FlatMapIter, FoldBlocks,
    FoldBlocksPart, Gathered, Indexed, Inspect, Interleave, ItemChunks, Map, MapInit, MapInitPart,
    Producer, RChunks, RChunksExact, RChunksExactMut, RChunksMut, RangeInclusiveProducer,
    RangeInteger, RangeItem, RangeProducer, Ranged, RepeatN, Rev, RevPart, Slice, SliceMut, Split,
    SplitMut, StepBy, SubSlices, SubSlicesMut, TakeAny, TakeAnyIter, TreeWalk, TreeWalkPart,
    TryFoldBlocks, TryFoldBlocksPart, VecPart, VecProducer, WhileSome, WhileSomeIter, WideInteger,
    WideRange, Window, Windows, Zip,
};

pub use collect::FromParallelIterator;
pub use either::Either;
pub use sources::{
    empty, once, repeat, repeat_n, split, walk_tree, walk_tree_postfix, walk_tree_prefix,
};

/// Blocks per core of [`ParallelIterator::fold`]: enough for the loop that folds them to
/// balance, few enough that combining the accumulators costs little.
const FOLD_BLOCKS_PER_CORE: usize = 8;

use crate::schedule::{ChunkLimits, InTurn, Schedule};
use drive::{Fold, drive};
use producer::ProducerExt;

/// The parallel iterator: a [`Producer`] of items by index and the [`Schedule`] its loop runs
/// under. Made by [`IntoParallelIterator::into_par_iter`], [`IntoParallelRefIterator::par_iter`],
/// [`ParallelSlice`] or [`ParallelSliceMut`]; its adaptors and consumers are those of
/// [`ParallelIterator`] and [`IndexedParallelIterator`].
#[derive(Debug, Clone)]
#[must_use = "a parallel iterator does nothing until a consumer (for_each, sum, ...) runs it"]
pub struct ParIter<P> {
    producer: P,
    schedule: Option<Schedule>,
    limits: ChunkLimits,
    /// `by_uniform_blocks`, `by_exponential_blocks`: the loop runs as loops over blocks of
    /// its indices, one after another.
    in_turn: Option<InTurn>,
}

impl<P: Producer> ParIter<P> {
    fn new(producer: P) -> Self {
        ParIter {
            producer,
            schedule: None,
            limits: ChunkLimits::default(),
            in_turn: None,
        }
    }

    /// This loop's schedule over the producer `make` builds on this one's.
    fn adapt<Q>(self, make: impl FnOnce(P) -> Q) -> ParIter<Q> {
        ParIter {
            producer: make(self.producer),
            schedule: self.schedule,
            limits: self.limits,
            in_turn: self.in_turn,
        }
    }

    /// `fold` and `try_fold`: the producer `make` builds from this loop's, the number of
    /// blocks to cut it into, this loop's chunk limits, which become bounds on the blocks
    /// (the loop over the blocks has none), and its blocks in turn (`by_uniform_blocks`,
    /// `by_exponential_blocks`): the fold's blocks then cut each of those, and the loop over
    /// the fold's blocks runs them in the same turns.
    fn blocks<Q>(
        self,
        make: impl FnOnce(P, usize, ChunkLimits, Option<InTurn>) -> Q,
    ) -> ParIter<Q> {
        let blocks = FOLD_BLOCKS_PER_CORE * crate::current_num_threads();
        let (limits, in_turn) = (self.limits, self.in_turn);
        let mut folded = self.adapt(|p| make(p, blocks, limits, in_turn));
        folded.limits = ChunkLimits::default();
        folded.in_turn = in_turn.map(|t| InTurn::Uniform(t.fold_blocks(blocks)));
        folded
    }

    /// The producer `make` builds on this loop's and `other`'s (`chain`, `zip`), under this
    /// loop's schedule, or `other`'s when only it has one.
    fn pair<O, Q>(self, other: ParIter<O>, make: impl FnOnce(P, O) -> Q) -> ParIter<Q> {
        ParIter {
            producer: make(self.producer, other.producer),
            schedule: self.schedule.or(other.schedule),
            limits: self.limits.both(other.limits),
            in_turn: self.in_turn.or(other.in_turn),
        }
    }

    /// `partition` and `partition_map`: `f` runs in the loop; the sides are then moved into
    /// their collections in index order.
    fn sides<A, B, F, L, R>(self, site: &'static Location<'static>, f: F) -> (A, B)
    where
        A: Default + Extend<L>,
        B: Default + Extend<R>,
        F: Fn(P::Item) -> Either<L, R> + Sync,
        L: Send,
        R: Send,
    {
        let sides = self.adapt(|p| Map::new(p, f)).collect_vec(site);
        let (mut left, mut right) = (A::default(), B::default());
        for side in sides {
            match side {
                Either::Left(l) => left.extend(std::iter::once(l)),
                Either::Right(r) => right.extend(std::iter::once(r)),
            }
        }
        (left, right)
    }

    /// Runs the loop, calling `body` on each range of indices the schedule hands out.
    fn for_ranges(&self, site: &'static Location<'static>, body: impl Fn(Range<usize>) + Sync) {
        self.run(
            site,
            Fold {
                identity: || (),
                fold: |(), r| body(r),
                combine: |(), ()| (),
                ordered: false,
            },
        )
    }

    /// Runs the loop until `search` finds something in a range. From then on, ranges still
    /// handed out are skipped, and searches under way stop at their next `go_on()`: what the
    /// short-circuiting consumers share.
    fn search_any<R: Send>(
        &self,
        site: &'static Location<'static>,
        search: impl Fn(Range<usize>, &dyn Fn() -> bool) -> Option<R> + Sync,
    ) -> Option<R> {
        let stop = AtomicBool::new(false);
        let go_on = || !stop.load(Ordering::Relaxed);
        self.run_until(
            site,
            Fold {
                identity: || None,
                fold: |acc: Option<R>, r| {
                    if acc.is_some() || !go_on() {
                        return acc;
                    }
                    let found = search(r, &go_on);
                    if found.is_some() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    found
                },
                combine: |a: Option<R>, b| a.or(b),
                ordered: false,
            },
            &|| if go_on() { usize::MAX } else { 0 },
        )
    }

    /// The result `search` finds in the earliest part of the loop where it finds one. Parts
    /// after a part with a result are skipped, and a search in progress there stops
    /// (`go_on`): no later part can hold the first.
    fn search_first<R: Send>(
        &self,
        site: &'static Location<'static>,
        search: impl Fn(Range<usize>, &dyn Fn() -> bool) -> Option<R> + Sync,
    ) -> Option<R> {
        // The start of the earliest part with a result so far.
        let best = AtomicUsize::new(usize::MAX);
        self.run_until(
            site,
            Fold {
                identity: || None,
                fold: |acc: Option<R>, r: Range<usize>| {
                    if acc.is_some() || r.start > best.load(Ordering::Relaxed) {
                        return acc;
                    }
                    let start = r.start;
                    let found = search(r, &|| start <= best.load(Ordering::Relaxed));
                    if found.is_some() {
                        best.fetch_min(start, Ordering::Relaxed);
                    }
                    found
                },
                combine: |a: Option<R>, b| a.or(b),
                ordered: true,
            },
            // No chunk after the one that starts at `best` can hold the first.
            &|| best.load(Ordering::Relaxed),
        )
    }

    /// The result `search` finds in the latest part of the loop where it finds one (`search`
    /// returns the last in its part). Parts before a part with a result are skipped, and a
    /// search in progress there stops (`go_on`).
    fn search_last<R: Send>(
        &self,
        site: &'static Location<'static>,
        search: impl Fn(Range<usize>, &dyn Fn() -> bool) -> Option<R> + Sync,
    ) -> Option<R> {
        // One past the start of the latest part with a result so far (0: none yet).
        let best = AtomicUsize::new(0);
        self.run(
            site,
            Fold {
                identity: || None,
                fold: |acc: Option<R>, r: Range<usize>| {
                    let start = r.start;
                    let go_on = || start + 1 >= best.load(Ordering::Relaxed);
                    if !go_on() {
                        return acc;
                    }
                    let found = search(r, &go_on);
                    if found.is_some() {
                        best.fetch_max(start + 1, Ordering::Relaxed);
                    }
                    found.or(acc)
                },
                combine: |a: Option<R>, b: Option<R>| b.or(a),
                ordered: true,
            },
        )
    }

    /// The item that `better(compare(new, old))` prefers, scanning in index order.
    fn best_by<F>(
        self,
        site: &'static Location<'static>,
        compare: &F,
        better: fn(CmpOrdering) -> bool,
    ) -> Option<P::Item>
    where
        P::Item: Send,
        F: Fn(&P::Item, &P::Item) -> CmpOrdering + Sync + ?Sized,
    {
        let producer = &self.producer;
        let pick = |old: Option<P::Item>, new: Option<P::Item>| match (old, new) {
            (Some(o), Some(n)) => Some(if better(compare(&n, &o)) { n } else { o }),
            (o, n) => o.or(n),
        };
        self.run(
            site,
            Fold {
                identity: || None,
                fold: |acc, r| producer.items(r).map(Some).fold(acc, pick),
                combine: pick,
                ordered: true,
            },
        )
    }

    /// The item whose key `better(new, old)` prefers, scanning in index order.
    fn best_by_key<K, F>(
        self,
        site: &'static Location<'static>,
        f: F,
        better: fn(&K, &K) -> bool,
    ) -> Option<P::Item>
    where
        P::Item: Send,
        K: Ord + Send,
        F: Fn(&P::Item) -> K + Sync,
    {
        let producer = &self.producer;
        let pick = |old: Option<(K, P::Item)>, new: Option<(K, P::Item)>| match (old, new) {
            (Some(o), Some(n)) => Some(if better(&n.0, &o.0) { n } else { o }),
            (o, n) => o.or(n),
        };
        self.run(
            site,
            Fold {
                identity: || None,
                fold: |acc, r| {
                    producer
                        .items(r)
                        .map(|item| Some((f(&item), item)))
                        .fold(acc, pick)
                },
                combine: pick,
                ordered: true,
            },
        )
        .map(|(_, item)| item)
    }

    fn run<A, I, F, C>(&self, site: &'static Location<'static>, how: Fold<I, F, C>) -> A
    where
        A: Send,
        I: Fn() -> A + Sync,
        F: Fn(A, Range<usize>) -> A + Sync,
        C: Fn(A, A) -> A + Sync,
    {
        self.run_until(site, how, &|| usize::MAX)
    }

    /// [`run`](Self::run), handing out no chunk that starts at or past `wanted()` (a search
    /// that has decided says so), nor any once the producer is full (`take_any` has its count,
    /// `while_some` met a `None`): a loop over a huge range ends once its result is known.
    fn run_until<A, I, F, C>(
        &self,
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
        let producer = &self.producer;
        let wanted = || if producer.full() { 0 } else { wanted() };
        let len = producer.len();
        let Some(in_turn) = self.in_turn else {
            return drive(len, self.schedule, self.limits, site, how, &wanted);
        };
        // Blocks one after another, each a loop of its own over its indices shifted to
        // `0..size`; the results combined in index order. A block that starts where the loop
        // is no longer wanted (a search has decided) does not run.
        let mut done: Option<A> = None;
        for s in 0..in_turn.count(len) {
            let Range { start, end } = in_turn.block(s, len);
            if start >= len || start >= wanted() {
                break;
            }
            let block = Fold {
                identity: &how.identity,
                fold: |acc, r: Range<usize>| (how.fold)(acc, r.start + start..r.end + start),
                combine: &how.combine,
                ordered: how.ordered,
            };
            let shifted = || wanted().saturating_sub(start);
            let result = drive(
                end - start,
                self.schedule,
                self.limits,
                site,
                block,
                &shifted,
            );
            done = Some(match done {
                Some(before) => (how.combine)(before, result),
                None => result,
            });
        }
        done.unwrap_or_else(|| (how.identity)())
    }

    /// The items in index order (what `collect` and `par_extend` gather).
    fn collect_vec(self, site: &'static Location<'static>) -> Vec<P::Item>
    where
        P::Item: Send,
    {
        let parts = self.collect_parts(site);
        // One copy of each part into place; `Vec`'s `collect` from a `Vec` reuses it.
        let mut all = Vec::with_capacity(parts.iter().map(Vec::len).sum());
        for mut part in parts {
            all.append(&mut part);
        }
        all
    }

    /// The items in index order, as the vectors the participants filled (one per contiguous
    /// run of chunks a participant took).
    fn collect_parts(self, site: &'static Location<'static>) -> Vec<Vec<P::Item>>
    where
        P::Item: Send,
    {
        let producer = &self.producer;
        self.run(
            site,
            Fold {
                identity: Vec::new,
                fold: |mut acc: Vec<Vec<P::Item>>, r| {
                    match acc.last_mut() {
                        Some(v) => v.extend(producer.items(r)),
                        None => acc.push(producer.items(r).collect()),
                    }
                    acc
                },
                combine: |mut a: Vec<Vec<P::Item>>, mut b: Vec<Vec<P::Item>>| {
                    a.append(&mut b);
                    a
                },
                ordered: true,
            },
        )
    }
}

/// The `init` of the `_with` calls (rayon's: `for_each_with`, `fold_with`, ...): a clone of
/// `init` for each part of the loop, made from the one shared copy (`T` need only be `Send`).
fn clones_of<T: Send + Clone>(init: T) -> impl Fn() -> T + Sync {
    let init = std::sync::Mutex::new(init);
    move || crate::sync::lock_std(&init).clone()
}

/// A parallel iterator: what rayon's `ParallelIterator` is, for generic code written against
/// it (`fn f<I: ParallelIterator<Item = u64>>(it: I)`). Its one implementation is [`ParIter`],
/// a [`Producer`] of items by index and the [`Schedule`] its loop runs under; it runs when a
/// consumer (`for_each`, `sum`, ...) is called: on the calling worker's runtime, or on the
/// global one outside a runtime ([`Runtime::install`](crate::Runtime::install) picks another).
///
/// Items come in index order to `collect`, `reduce`, `reduce_with`, `min*` and `max*`
/// (`reduce`'s operation needs to be associative, not commutative); `for_each`, `sum` and
/// `count` see them in any order.
pub trait ParallelIterator: Sized {
    /// The item.
    type Item;
    /// What makes the items (this crate's; named only in return types).
    type Producer: Producer<Item = Self::Item>;

    /// The iterator as its one concrete type.
    #[doc(hidden)]
    fn into_parts(self) -> ParIter<Self::Producer>;

    /// Runs this loop under `schedule` instead of the program's (`UMT_SCHEDULE`, else
    /// [`Schedule::StaticSteal`]).
    fn schedule(self, schedule: Schedule) -> ParIter<Self::Producer> {
        let mut it = self.into_parts();
        it.schedule = Some(schedule);
        it
    }

    /// Applies `f` to each item.
    fn map<F, R>(self, f: F) -> ParIter<Map<Self::Producer, F>>
    where
        F: Fn(Self::Item) -> R + Sync,
    {
        self.into_parts().adapt(|p| Map::new(p, f))
    }

    /// Maps each item with `f` and a state of its own to the thread: `init` makes one per
    /// part of the loop a thread takes (a buffer, a random generator, a connection), so
    /// `init` may run many times, never once per item unless parts are one item long.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let lines: Vec<String> = (0..1000u32)
    ///     .into_par_iter()
    ///     .map_init(String::new, |buf, i| {
    ///         buf.clear();
    ///         buf.push_str(&i.to_string());
    ///         buf.len()
    ///     })
    ///     .map(|n| n.to_string())
    ///     .collect();
    /// assert_eq!(lines[999], "3");
    /// ```
    fn map_init<INIT, T, F, R>(self, init: INIT, f: F) -> ParIter<MapInit<Self::Producer, INIT, F>>
    where
        INIT: Fn() -> T + Sync,
        F: Fn(&mut T, Self::Item) -> R + Sync,
    {
        self.into_parts().adapt(|p| MapInit::new(p, init, f))
    }

    /// [`map_init`](ParallelIterator::map_init) with a clone of `init` as each part's state.
    #[allow(clippy::type_complexity)]
    fn map_with<T, F, R>(
        self,
        init: T,
        f: F,
    ) -> ParIter<MapInit<Self::Producer, impl Fn() -> T + Sync, F>>
    where
        T: Send + Clone,
        F: Fn(&mut T, Self::Item) -> R + Sync,
    {
        self.map_init(clones_of(init), f)
    }

    /// Keeps the items for which `f` is true.
    fn filter<F>(self, f: F) -> ParIter<Filter<Self::Producer, F>>
    where
        F: Fn(&Self::Item) -> bool + Sync,
    {
        self.into_parts().adapt(|p| Filter::new(p, f))
    }

    /// Any `n` of the items (all if there are fewer), from anywhere in the loop, in no
    /// particular order of the source (rayon's `take_any`): the first `n` that the
    /// participants reach. Once `n` have passed, no more items are made and the loop hands
    /// out no more chunks (a range of any length ends).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let some: Vec<u32> =
    ///     (0..100u32).into_par_iter().filter(|x| x % 3 == 0).take_any(5).collect();
    /// assert_eq!(some.len(), 5);
    /// assert!(some.iter().all(|x| x % 3 == 0));
    /// ```
    fn take_any(self, n: usize) -> ParIter<TakeAny<Self::Producer>> {
        self.into_parts().adapt(|p| TakeAny::new(p, n))
    }

    /// All the items but any `n` of them (none if there are fewer), as
    /// [`take_any`](ParallelIterator::take_any) leaves them (rayon's `skip_any`).
    #[allow(clippy::type_complexity)]
    fn skip_any(
        self,
        n: usize,
    ) -> ParIter<Filter<Self::Producer, impl Fn(&Self::Item) -> bool + Sync>> {
        let seen = AtomicUsize::new(0);
        self.filter(move |_| seen.fetch_add(1, Ordering::Relaxed) >= n)
    }

    /// The values of the `Some` items until a `None` is seen (rayon's `while_some`): once a
    /// participant meets a `None`, no item is made from then on; items that other
    /// participants took before it, on either side of the `None` in index order, may pass.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let all: Vec<u32> = (0..10u32).into_par_iter().map(Some).while_some().collect();
    /// assert_eq!(all.len(), 10);
    /// let cut: Vec<u32> =
    ///     (0..10u32).into_par_iter().map(|x| (x != 4).then_some(x)).while_some().collect();
    /// assert!(cut.len() < 10 && !cut.contains(&4));
    /// ```
    fn while_some<T>(self) -> ParIter<WhileSome<Self::Producer>>
    where
        Self: ParallelIterator<Item = Option<T>>,
    {
        self.into_parts().adapt(WhileSome::new)
    }

    /// The items, from anywhere in the loop, until some part meets one for which `f` is
    /// false (rayon's `take_any_while`): that item and every item made after it, in any
    /// part, are left out, and the loop stops making items (as `while_some`). Which items
    /// pass depends on the order the participants reach them; on one core, the items before
    /// the first false.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let small: Vec<u32> = (0..100u32).into_par_iter().take_any_while(|x| *x < 10).collect();
    /// assert!(small.len() <= 10 && small.iter().all(|x| *x < 10));
    /// ```
    #[allow(clippy::type_complexity)]
    fn take_any_while<F>(
        self,
        f: F,
    ) -> ParIter<WhileSome<Map<Self::Producer, impl Fn(Self::Item) -> Option<Self::Item> + Sync>>>
    where
        F: Fn(&Self::Item) -> bool + Sync,
    {
        self.into_parts()
            .map(move |x| f(&x).then_some(x))
            .while_some()
    }

    /// The items from anywhere in the loop, skipping those for which `f` is true until some
    /// part meets one for which it is false (rayon's `skip_any_while`): from then on every
    /// item passes, in every part, without a call to `f`.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let rest: Vec<u32> = (0..100u32).into_par_iter().skip_any_while(|x| *x < 10).collect();
    /// assert!(rest.len() >= 90 && (10..100).all(|x| rest.contains(&x)));
    /// ```
    #[allow(clippy::type_complexity)]
    fn skip_any_while<F>(
        self,
        f: F,
    ) -> ParIter<FilterMap<Self::Producer, impl Fn(Self::Item) -> Option<Self::Item> + Sync>>
    where
        F: Fn(&Self::Item) -> bool + Sync,
    {
        let passing = AtomicBool::new(false);
        self.into_parts().filter_map(move |x| {
            if passing.load(Ordering::Relaxed) || !f(&x) {
                passing.store(true, Ordering::Relaxed);
                Some(x)
            } else {
                None
            }
        })
    }

    /// The iterator as it is: a panic in a closure already stops the loop from handing out
    /// more items, and reaches the caller once the running parts end (rayon's `panic_fuse`,
    /// for code that calls it).
    fn panic_fuse(self) -> ParIter<Self::Producer> {
        self.into_parts()
    }

    /// Applies `f` to each item and keeps the values of the `Some`s.
    fn filter_map<F, R>(self, f: F) -> ParIter<FilterMap<Self::Producer, F>>
    where
        F: Fn(Self::Item) -> Option<R> + Sync,
    {
        self.into_parts().adapt(|p| FilterMap::new(p, f))
    }

    /// Replaces each item by the items of the sequential iterator `f` makes of it (rayon's
    /// `flat_map_iter`: the inner iterator runs where its item is, not in parallel).
    fn flat_map_iter<F, U>(self, f: F) -> ParIter<FlatMapIter<Self::Producer, F>>
    where
        F: Fn(Self::Item) -> U + Sync,
        U: IntoIterator,
    {
        self.into_parts().adapt(|p| FlatMapIter::new(p, f))
    }

    /// Replaces each item by the items of the parallel iterator `f` makes of it, in order
    /// (rayon's `flat_map`). Each inner iterator runs as a loop of its own, nested in the
    /// outer one's (its items are gathered, then passed on); where the inner iterators are
    /// small and sequential work is enough, [`flat_map_iter`](ParallelIterator::flat_map_iter)
    /// costs less.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let pairs: Vec<(u32, u32)> = (0..3u32)
    ///     .into_par_iter()
    ///     .flat_map(|i| (0..i).into_par_iter().map(move |j| (i, j)))
    ///     .collect();
    /// assert_eq!(pairs, [(1, 0), (2, 0), (2, 1)]);
    /// ```
    #[allow(clippy::type_complexity)]
    fn flat_map<F, PI>(
        self,
        f: F,
    ) -> ParIter<FlatMapIter<Self::Producer, impl Fn(Self::Item) -> Vec<PI::Item> + Sync>>
    where
        F: Fn(Self::Item) -> PI + Sync,
        PI: IntoParallelIterator,
        PI::Item: Send,
    {
        self.flat_map_iter(move |item| f(item).into_par_iter().collect::<Vec<_>>())
    }

    /// The items of each item, itself a parallel iterator, in order (rayon's `flatten`: each
    /// inner iterator runs as a nested loop, as in [`flat_map`](ParallelIterator::flat_map)).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let rows = vec![vec![1, 2], vec![], vec![3]];
    /// let flat: Vec<i32> = rows.into_par_iter().flatten().collect();
    /// assert_eq!(flat, [1, 2, 3]);
    /// ```
    #[allow(clippy::type_complexity)]
    fn flatten(
        self,
    ) -> ParIter<
        FlatMapIter<
            Self::Producer,
            impl Fn(Self::Item) -> Vec<<Self::Item as IntoParallelIterator>::Item> + Sync,
        >,
    >
    where
        Self::Item: IntoParallelIterator,
        <Self::Item as IntoParallelIterator>::Item: Send,
    {
        self.flat_map(|inner| inner)
    }

    /// The items of each item, itself iterable, in order, each iterated where its item is
    /// (rayon's `flatten_iter`).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let words = vec![vec!["a", "b"], vec!["c"]];
    /// let flat: Vec<&str> = words.par_iter().flatten_iter().copied().collect();
    /// assert_eq!(flat, ["a", "b", "c"]);
    /// ```
    #[allow(clippy::type_complexity)]
    fn flatten_iter(self) -> ParIter<FlatMapIter<Self::Producer, fn(Self::Item) -> Self::Item>>
    where
        Self::Item: IntoIterator,
    {
        self.flat_map_iter(std::convert::identity as fn(Self::Item) -> Self::Item)
    }

    /// Calls `f` on each item as it passes.
    fn inspect<F>(self, f: F) -> ParIter<Inspect<Self::Producer, F>>
    where
        F: Fn(&Self::Item) + Sync,
    {
        self.into_parts().adapt(|p| Inspect::new(p, f))
    }

    /// Changes each item in place with `f` and passes it on (rayon's `update`).
    #[allow(clippy::type_complexity)]
    fn update<F>(
        self,
        f: F,
    ) -> ParIter<Map<Self::Producer, impl Fn(Self::Item) -> Self::Item + Sync>>
    where
        F: Fn(&mut Self::Item) + Sync,
    {
        self.map(move |mut item| {
            f(&mut item);
            item
        })
    }

    /// Copies items that are references.
    fn copied<'a, T>(self) -> ParIter<Copied<Self::Producer>>
    where
        T: Copy + 'a,
        Self::Producer: Producer<Item = &'a T>,
    {
        self.into_parts().adapt(Copied::new)
    }

    /// Clones items that are references.
    fn cloned<'a, T>(self) -> ParIter<Cloned<Self::Producer>>
    where
        T: Clone + 'a,
        Self::Producer: Producer<Item = &'a T>,
    {
        self.into_parts().adapt(Cloned::new)
    }

    /// This iterator's items, then `other`'s. The schedule is this iterator's (or `other`'s
    /// when only it has one).
    ///
    /// # Panics
    ///
    /// If the two have more than `usize::MAX` items together (as rayon's `chain`).
    #[allow(clippy::type_complexity)]
    fn chain<O>(
        self,
        other: O,
    ) -> ParIter<Chain<Self::Producer, <O::Iter as ParallelIterator>::Producer>>
    where
        O: IntoParallelIterator<Item = Self::Item>,
    {
        self.into_parts()
            .pair(other.into_par_iter().into_parts(), Chain::new)
    }

    /// Calls `f` on each item.
    #[track_caller]
    fn for_each<F>(self, f: F)
    where
        F: Fn(Self::Item) + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.for_ranges(Location::caller(), |r| producer.items(r).for_each(&f))
    }

    /// Calls `f` on each item with a value `init()` made for the part of the loop that item
    /// falls in (one per chunk the schedule hands out: `init` runs several times, as rayon's).
    #[track_caller]
    fn for_each_init<INIT, T, F>(self, init: INIT, f: F)
    where
        INIT: Fn() -> T + Sync,
        F: Fn(&mut T, Self::Item) + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.for_ranges(Location::caller(), |r| {
            let mut state = init();
            producer.items(r).for_each(|item| f(&mut state, item));
        })
    }

    /// [`for_each_init`](ParallelIterator::for_each_init) with a clone of `init` as each
    /// part's state (rayon's `for_each_with`, whose `init` is often a channel's sender).
    #[track_caller]
    fn for_each_with<T, F>(self, init: T, f: F)
    where
        T: Send + Clone,
        F: Fn(&mut T, Self::Item) + Sync,
    {
        self.for_each_init(clones_of(init), f)
    }

    /// Combines the `Ok` (or `Some`) values of the items with `op`, in index order, from
    /// `identity()` in each part, and stops at the first `Err` (`None`) that an item or `op`
    /// gives, which it returns (any of them if several parts fail at once: the loop stops
    /// handing out items once one has). `op` must be associative.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let total: Result<u32, String> = ["1", "2", "3"]
    ///     .par_iter()
    ///     .map(|s| s.parse::<u32>().map_err(|e| e.to_string()))
    ///     .try_reduce(|| 0, |a, b| Ok(a + b));
    /// assert_eq!(total, Ok(6));
    /// let bad: Option<u8> = [Some(200u8), Some(100)]
    ///     .into_par_iter()
    ///     .copied()
    ///     .try_reduce(|| 0, |a, b| a.checked_add(b));
    /// assert_eq!(bad, None);
    /// ```
    #[track_caller]
    fn try_reduce<T, ID, OP>(self, identity: ID, op: OP) -> Self::Item
    where
        Self::Item: Fallible<Ok = T>,
        <Self::Item as Fallible>::Failure: Send,
        T: Send,
        ID: Fn() -> T + Sync,
        OP: Fn(T, T) -> Self::Item + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        let stop = AtomicBool::new(false);
        let go_on = || !stop.load(Ordering::Relaxed);
        let failed = |e| {
            stop.store(true, Ordering::Relaxed);
            Err(e)
        };
        let (identity, op) = (&identity, &op);
        type Acc<I> = Result<<I as Fallible>::Ok, <I as Fallible>::Failure>;
        let combined: Acc<Self::Item> = it.run_until(
            Location::caller(),
            Fold {
                identity: || Ok(identity()),
                fold: |acc: Acc<Self::Item>, r| {
                    let mut acc = acc?;
                    for item in producer.items(r).take_while(|_| go_on()) {
                        acc = match item.branch().and_then(|v| op(acc, v).branch()) {
                            Ok(acc) => acc,
                            Err(e) => return failed(e),
                        };
                    }
                    Ok(acc)
                },
                combine: |a: Acc<Self::Item>, b: Acc<Self::Item>| match (a, b) {
                    (Ok(a), Ok(b)) => op(a, b).branch().or_else(failed),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                },
                ordered: true,
            },
            &|| if go_on() { usize::MAX } else { 0 },
        );
        match combined {
            Ok(v) => Fallible::from_ok(v),
            Err(e) => Fallible::from_failure(e),
        }
    }

    /// [`try_reduce`](ParallelIterator::try_reduce) without an identity: `None` when there
    /// are no items, else the combined `Ok` (`Some`) values, or the first failure seen (any
    /// of them if several parts fail at once: the loop stops handing out items once one has).
    /// `op` must be associative.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let max: Option<Result<u32, String>> = ["4", "9", "2"]
    ///     .par_iter()
    ///     .map(|s| s.parse::<u32>().map_err(|e| e.to_string()))
    ///     .try_reduce_with(|a, b| Ok(a.max(b)));
    /// assert_eq!(max, Some(Ok(9)));
    /// let none: Option<Option<u8>> =
    ///     Vec::<Option<u8>>::new().into_par_iter().try_reduce_with(u8::checked_add);
    /// assert_eq!(none, None);
    /// ```
    #[track_caller]
    fn try_reduce_with<T, OP>(self, op: OP) -> Option<Self::Item>
    where
        Self::Item: Fallible<Ok = T>,
        <Self::Item as Fallible>::Failure: Send,
        T: Send,
        OP: Fn(T, T) -> Self::Item + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        let stop = AtomicBool::new(false);
        let go_on = || !stop.load(Ordering::Relaxed);
        let failed = |e| {
            stop.store(true, Ordering::Relaxed);
            Err(e)
        };
        type Acc<I> = Result<Option<<I as Fallible>::Ok>, <I as Fallible>::Failure>;
        let op = &op;
        let join = |a: Option<T>, b: T| match a {
            None => Ok(Some(b)),
            Some(a) => op(a, b).branch().map(Some),
        };
        let join = &join;
        let combined: Acc<Self::Item> = it.run_until(
            Location::caller(),
            Fold {
                identity: || Ok(None),
                fold: |acc: Acc<Self::Item>, r| {
                    let mut acc = acc?;
                    for item in producer.items(r).take_while(|_| go_on()) {
                        acc = match item.branch().and_then(|v| join(acc, v)) {
                            Ok(acc) => acc,
                            Err(e) => return failed(e),
                        };
                    }
                    Ok(acc)
                },
                combine: |a: Acc<Self::Item>, b: Acc<Self::Item>| match (a, b) {
                    (Ok(a), Ok(Some(b))) => join(a, b).or_else(failed),
                    (Ok(a), Ok(None)) => Ok(a),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                },
                ordered: true,
            },
            &|| if go_on() { usize::MAX } else { 0 },
        );
        match combined {
            Ok(None) => None,
            Ok(Some(v)) => Some(Fallible::from_ok(v)),
            Err(e) => Some(Fallible::from_failure(e)),
        }
    }

    /// Calls `f` on each item until one returns an error, and returns that error (any of
    /// them if several do: the loop stops handing out items once one has failed).
    #[track_caller]
    fn try_for_each<F, E>(self, f: F) -> Result<(), E>
    where
        F: Fn(Self::Item) -> Result<(), E> + Sync,
        E: Send,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        let failed = it.search_any(Location::caller(), |r, go_on| {
            producer
                .items(r)
                .take_while(|_| go_on())
                .find_map(|item| f(item).err())
        });
        failed.map_or(Ok(()), Err)
    }

    /// [`try_for_each`](ParallelIterator::try_for_each) with a state that `init` makes for
    /// each part of the loop a thread takes, passed to `f` by reference (rayon's
    /// `try_for_each_init`).
    #[track_caller]
    fn try_for_each_init<INIT, T, F, E>(self, init: INIT, f: F) -> Result<(), E>
    where
        INIT: Fn() -> T + Sync,
        F: Fn(&mut T, Self::Item) -> Result<(), E> + Sync,
        E: Send,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        let failed = it.search_any(Location::caller(), |r, go_on| {
            let mut state = init();
            producer
                .items(r)
                .take_while(|_| go_on())
                .find_map(|item| f(&mut state, item).err())
        });
        failed.map_or(Ok(()), Err)
    }

    /// [`try_for_each_init`](ParallelIterator::try_for_each_init) with a clone of `init` as
    /// each part's state (rayon's `try_for_each_with`).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let sent = (0..100u32).into_par_iter().try_for_each_with(tx, |tx, i| tx.send(i));
    /// assert!(sent.is_ok());
    /// assert_eq!(rx.iter().map(u64::from).sum::<u64>(), 4950);
    /// ```
    #[track_caller]
    fn try_for_each_with<T, F, E>(self, init: T, f: F) -> Result<(), E>
    where
        T: Send + Clone,
        F: Fn(&mut T, Self::Item) -> Result<(), E> + Sync,
        E: Send,
    {
        self.try_for_each_init(clones_of(init), f)
    }

    /// Some item for which `f` is true, if there is one: not necessarily the first (the loop
    /// stops handing out items once one is found).
    #[track_caller]
    fn find_any<F>(self, f: F) -> Option<Self::Item>
    where
        Self::Item: Send,
        F: Fn(&Self::Item) -> bool + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.search_any(Location::caller(), |r, go_on| {
            producer
                .items(r)
                .take_while(|_| go_on())
                .find(|item| f(item))
        })
    }

    /// Some `Some` that `f` returns, if it returns one: not necessarily the first (the loop
    /// stops handing out items once one is found).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let words = ["x", "12", "y"];
    /// assert_eq!(words.par_iter().find_map_any(|w| w.parse::<u32>().ok()), Some(12));
    /// ```
    #[track_caller]
    fn find_map_any<F, R>(self, f: F) -> Option<R>
    where
        F: Fn(Self::Item) -> Option<R> + Sync,
        R: Send,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.search_any(Location::caller(), |r, go_on| {
            producer.items(r).take_while(|_| go_on()).find_map(&f)
        })
    }

    /// The first item, in index order, for which `f` is true (the parts after one where it
    /// is found are skipped).
    #[track_caller]
    fn find_first<F>(self, f: F) -> Option<Self::Item>
    where
        Self::Item: Send,
        F: Fn(&Self::Item) -> bool + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.search_first(Location::caller(), |r, go_on| {
            producer
                .items(r)
                .take_while(|_| go_on())
                .find(|item| f(item))
        })
    }

    /// The last item, in index order, for which `f` is true (the parts before one where it
    /// is found are skipped).
    #[track_caller]
    fn find_last<F>(self, f: F) -> Option<Self::Item>
    where
        Self::Item: Send,
        F: Fn(&Self::Item) -> bool + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.search_last(Location::caller(), |r, go_on| {
            producer
                .items(r)
                .take_while(|_| go_on())
                .filter(|item| f(item))
                .last()
        })
    }

    /// The first `Some` that `f` makes, in index order.
    #[track_caller]
    fn find_map_first<F, R>(self, f: F) -> Option<R>
    where
        R: Send,
        F: Fn(Self::Item) -> Option<R> + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.search_first(Location::caller(), |r, go_on| {
            producer.items(r).take_while(|_| go_on()).find_map(&f)
        })
    }

    /// The last `Some` that `f` makes, in index order.
    #[track_caller]
    fn find_map_last<F, R>(self, f: F) -> Option<R>
    where
        R: Send,
        F: Fn(Self::Item) -> Option<R> + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.search_last(Location::caller(), |r, go_on| {
            producer
                .items(r)
                .take_while(|_| go_on())
                .filter_map(&f)
                .last()
        })
    }

    /// Whether `f` is true for some item (the loop stops once one is found).
    #[track_caller]
    fn any<F>(self, f: F) -> bool
    where
        F: Fn(Self::Item) -> bool + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.search_any(Location::caller(), |r, go_on| {
            producer
                .items(r)
                .take_while(|_| go_on())
                .any(&f)
                .then_some(())
        })
        .is_some()
    }

    /// Whether `f` is true for every item (the loop stops once one is false).
    #[track_caller]
    fn all<F>(self, f: F) -> bool
    where
        F: Fn(Self::Item) -> bool + Sync,
    {
        !self.any(|item| !f(item))
    }

    /// The sum of the items: each added after the one before it, in groups whose bounds are
    /// unspecified (as rayon's), so a non-commutative `Sum` gets the sequential order and an
    /// inexact one (floats) may round differently.
    #[track_caller]
    fn sum<S>(self) -> S
    where
        S: Sum<Self::Item> + Sum<S> + Send,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.run(
            Location::caller(),
            Fold {
                identity: || std::iter::empty::<S>().sum(),
                fold: |acc: S, r| [acc, producer.items(r).sum()].into_iter().sum(),
                combine: |a: S, b: S| [a, b].into_iter().sum(),
                ordered: true,
            },
        )
    }

    /// The product of the items: each multiplied after the one before it, in groups whose
    /// bounds are unspecified (as rayon's), so a non-commutative `Product` (matrices) gets the
    /// sequential order.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// assert_eq!((1..=10u64).into_par_iter().product::<u64>(), 3_628_800);
    /// ```
    #[track_caller]
    fn product<P>(self) -> P
    where
        P: Product<Self::Item> + Product<P> + Send,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.run(
            Location::caller(),
            Fold {
                identity: || std::iter::empty::<P>().product(),
                fold: |acc: P, r| [acc, producer.items(r).product()].into_iter().product(),
                combine: |a: P, b: P| [a, b].into_iter().product(),
                ordered: true,
            },
        )
    }

    /// How many items there are.
    #[track_caller]
    fn count(self) -> usize {
        let it = self.into_parts();
        let producer = &it.producer;
        it.run(
            Location::caller(),
            Fold {
                identity: || 0,
                fold: |acc: usize, r| acc + producer.items(r).count(),
                combine: |a, b| a + b,
                ordered: false,
            },
        )
    }

    /// Combines the items with `op`, in index order, starting each part from `identity()`
    /// (which must be neutral for `op`); `identity()` when there are none. `op` must be
    /// associative.
    #[track_caller]
    fn reduce<ID, OP>(self, identity: ID, op: OP) -> Self::Item
    where
        Self::Item: Send,
        ID: Fn() -> Self::Item + Sync,
        OP: Fn(Self::Item, Self::Item) -> Self::Item + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        let (identity, op) = (&identity, &op);
        it.run(
            Location::caller(),
            Fold {
                identity,
                fold: |acc, r| producer.items(r).fold(acc, op),
                combine: op,
                ordered: true,
            },
        )
    }

    /// Folds the items into accumulators made by `identity`, one per block of the items
    /// (several blocks per core, so the loop still balances), and returns a parallel iterator
    /// over those accumulators in index order (rayon's `fold`, followed as there by a
    /// `reduce`, `sum` or `collect`). Lazy: the loop of that next consumer folds the blocks.
    /// How many accumulators there are depends on the cores.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let words = ["a", "bb", "ccc", "dd"];
    /// let total = words
    ///     .par_iter()
    ///     .fold(|| 0usize, |n, w| n + w.len())
    ///     .sum::<usize>();
    /// assert_eq!(total, 8);
    /// ```
    fn fold<T, ID, F>(self, identity: ID, fold_op: F) -> ParIter<FoldBlocks<Self::Producer, ID, F>>
    where
        T: Send,
        ID: Fn() -> T + Sync,
        F: Fn(T, Self::Item) -> T + Sync,
    {
        self.into_parts().blocks(|p, blocks, limits, in_turn| {
            FoldBlocks::new(p, identity, fold_op, blocks, limits, in_turn)
        })
    }

    /// [`fold`](ParallelIterator::fold) from a clone of `init` in each block.
    #[allow(clippy::type_complexity)]
    fn fold_with<T, F>(
        self,
        init: T,
        fold_op: F,
    ) -> ParIter<FoldBlocks<Self::Producer, impl Fn() -> T + Sync, F>>
    where
        T: Send + Clone,
        F: Fn(T, Self::Item) -> T + Sync,
    {
        self.fold(clones_of(init), fold_op)
    }

    /// [`fold`](ParallelIterator::fold) with a fold that may fail: each block folds its
    /// `Ok` (`Some`) values with `fold_op` from `identity()` until an item makes it fail, and
    /// the block's item is then that failure: no item of the block after the failing one is
    /// made (rayon's `try_fold`; the blocks after it still run, each stopping at its own first
    /// failure). Combine the blocks with
    /// [`try_reduce`](ParallelIterator::try_reduce) to stop at the first failure.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let total: Option<u8> = (1..=20u8)
    ///     .into_par_iter()
    ///     .try_fold(|| 0u8, |a, x| a.checked_add(x))
    ///     .try_reduce(|| 0, |a, b| a.checked_add(b));
    /// assert_eq!(total, Some(210));
    /// ```
    #[allow(clippy::type_complexity)]
    fn try_fold<T, R, ID, F>(
        self,
        identity: ID,
        fold_op: F,
    ) -> ParIter<
        TryFoldBlocks<
            Self::Producer,
            impl Fn() -> R + Sync,
            impl Fn(R, Self::Item) -> ControlFlow<R, R> + Sync,
        >,
    >
    where
        R: Fallible<Ok = T> + Send,
        ID: Fn() -> T + Sync,
        F: Fn(T, Self::Item) -> R + Sync,
    {
        // The accumulator is a success until a step fails, which breaks the block's fold.
        let step = move |acc: R, item| match acc.branch() {
            Ok(acc) => match fold_op(acc, item).branch() {
                Ok(acc) => ControlFlow::Continue(R::from_ok(acc)),
                Err(e) => ControlFlow::Break(R::from_failure(e)),
            },
            Err(e) => ControlFlow::Break(R::from_failure(e)),
        };
        let identity = move || R::from_ok(identity());
        self.into_parts().blocks(|p, blocks, limits, in_turn| {
            TryFoldBlocks::new(p, identity, step, blocks, limits, in_turn)
        })
    }

    /// [`try_fold`](ParallelIterator::try_fold) from a clone of `init` in each block.
    #[allow(clippy::type_complexity)]
    fn try_fold_with<T, R, F>(
        self,
        init: T,
        fold_op: F,
    ) -> ParIter<
        TryFoldBlocks<
            Self::Producer,
            impl Fn() -> R + Sync,
            impl Fn(R, Self::Item) -> ControlFlow<R, R> + Sync,
        >,
    >
    where
        T: Send + Clone,
        R: Fallible<Ok = T> + Send,
        F: Fn(T, Self::Item) -> R + Sync,
    {
        self.try_fold(clones_of(init), fold_op)
    }

    /// Combines the items with `op`, in index order; `None` when there are none. `op` must be
    /// associative.
    #[track_caller]
    fn reduce_with<OP>(self, op: OP) -> Option<Self::Item>
    where
        Self::Item: Send,
        OP: Fn(Self::Item, Self::Item) -> Self::Item + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        let op = &op;
        let join = |a: Option<Self::Item>, b: Option<Self::Item>| match (a, b) {
            (Some(a), Some(b)) => Some(op(a, b)),
            (a, b) => a.or(b),
        };
        it.run(
            Location::caller(),
            Fold {
                identity: || None,
                fold: |acc, r| join(acc, producer.items(r).reduce(op)),
                combine: join,
                ordered: true,
            },
        )
    }

    /// The items, in index order, in any collection (`Vec`, `String`, `HashMap`, `Result`,
    /// ...: every [`FromParallelIterator`]).
    #[track_caller]
    fn collect<C>(self) -> C
    where
        C: FromParallelIterator<Self::Item>,
    {
        C::from_par_iter(self.into_parts())
    }

    /// The items in index order, as a list of the vectors the loop's participants filled, none
    /// empty (rayon's `collect_vec_list`: no copy into one vector).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let list = (0..1000u32).into_par_iter().collect_vec_list();
    /// assert_eq!(list.into_iter().flatten().collect::<Vec<_>>(), (0..1000).collect::<Vec<_>>());
    /// ```
    #[track_caller]
    fn collect_vec_list(self) -> std::collections::LinkedList<Vec<Self::Item>>
    where
        Self::Item: Send,
    {
        let parts = self.into_parts().collect_parts(Location::caller());
        parts.into_iter().filter(|part| !part.is_empty()).collect()
    }

    /// The pairs' first and second halves, each in index order, in two collections.
    #[track_caller]
    fn unzip<A, B, FromA, FromB>(self) -> (FromA, FromB)
    where
        Self: ParallelIterator<Item = (A, B)>,
        A: Send,
        B: Send,
        FromA: Default + Extend<A>,
        FromB: Default + Extend<B>,
    {
        let site = Location::caller();
        self.into_parts().collect_vec(site).into_iter().unzip()
    }

    /// The items for which `f` is true, and the others, each in index order. `f` runs in
    /// parallel; the items are then moved into the two collections in order.
    #[track_caller]
    fn partition<A, B, F>(self, f: F) -> (A, B)
    where
        Self::Item: Send,
        A: Default + Extend<Self::Item>,
        B: Default + Extend<Self::Item>,
        F: Fn(&Self::Item) -> bool + Sync,
    {
        let site = Location::caller();
        self.into_parts().sides(site, |item| {
            if f(&item) {
                Either::Left(item)
            } else {
                Either::Right(item)
            }
        })
    }

    /// The `Left`s and the `Right`s that `f` makes of the items, each in index order (rayon's
    /// `partition_map`). `f` runs in parallel.
    ///
    /// ```
    /// use umt_rt::iter::Either;
    /// use umt_rt::prelude::*;
    ///
    /// let (nums, words): (Vec<u32>, Vec<&str>) = ["1", "two", "3"]
    ///     .par_iter()
    ///     .partition_map(|s| match s.parse::<u32>() {
    ///         Ok(n) => Either::Left(n),
    ///         Err(_) => Either::Right(*s),
    ///     });
    /// assert_eq!((nums, words), (vec![1, 3], vec!["two"]));
    /// ```
    #[track_caller]
    fn partition_map<A, B, F, L, R>(self, f: F) -> (A, B)
    where
        A: Default + Extend<L>,
        B: Default + Extend<R>,
        F: Fn(Self::Item) -> Either<L, R> + Sync,
        L: Send,
        R: Send,
    {
        self.into_parts().sides(Location::caller(), f)
    }

    /// The smallest item; the first of several (as `Iterator::min`).
    #[track_caller]
    fn min(self) -> Option<Self::Item>
    where
        Self::Item: Ord + Send,
    {
        self.into_parts()
            .best_by(Location::caller(), &Self::Item::cmp, |o| {
                o == CmpOrdering::Less
            })
    }

    /// The largest item; the last of several (as `Iterator::max`).
    #[track_caller]
    fn max(self) -> Option<Self::Item>
    where
        Self::Item: Ord + Send,
    {
        self.into_parts()
            .best_by(Location::caller(), &Self::Item::cmp, |o| {
                o != CmpOrdering::Less
            })
    }

    /// The smallest item by `compare`; the first of several.
    #[track_caller]
    fn min_by<F>(self, compare: F) -> Option<Self::Item>
    where
        Self::Item: Send,
        F: Fn(&Self::Item, &Self::Item) -> CmpOrdering + Sync,
    {
        self.into_parts()
            .best_by(Location::caller(), &compare, |o| o == CmpOrdering::Less)
    }

    /// The largest item by `compare`; the last of several.
    #[track_caller]
    fn max_by<F>(self, compare: F) -> Option<Self::Item>
    where
        Self::Item: Send,
        F: Fn(&Self::Item, &Self::Item) -> CmpOrdering + Sync,
    {
        self.into_parts()
            .best_by(Location::caller(), &compare, |o| o != CmpOrdering::Less)
    }

    /// The item with the smallest key; the first of several.
    #[track_caller]
    fn min_by_key<K, F>(self, f: F) -> Option<Self::Item>
    where
        Self::Item: Send,
        K: Ord + Send,
        F: Fn(&Self::Item) -> K + Sync,
    {
        self.into_parts()
            .best_by_key(Location::caller(), f, |new, old| new < old)
    }

    /// The item with the largest key; the last of several (as `Iterator::max_by_key`).
    #[track_caller]
    fn max_by_key<K, F>(self, f: F) -> Option<Self::Item>
    where
        Self::Item: Send,
        K: Ord + Send,
        F: Fn(&Self::Item) -> K + Sync,
    {
        self.into_parts()
            .best_by_key(Location::caller(), f, |new, old| new >= old)
    }
}

/// A parallel iterator whose item `i` is its source's index `i` (no `filter` or `flat_map`
/// upstream): rayon's `IndexedParallelIterator`, for `len`, `enumerate`, `zip` and positions.
pub trait IndexedParallelIterator: ParallelIterator<Producer: Indexed> {
    /// The iterator as its one concrete type, by reference.
    #[doc(hidden)]
    fn as_parts(&self) -> &ParIter<Self::Producer>;

    /// How many indices the loop visits (items before any `filter`).
    fn len(&self) -> usize {
        self.as_parts().producer.len()
    }

    /// Whether the loop visits no index.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hands this loop's items out in chunks of at least `min` (rayon's `with_min_len`):
    /// fewer, longer chunks where a per-chunk cost (an accumulator, a buffer) outweighs the
    /// balance. The loop's last chunks may be shorter; a loop shorter than `2 * min` runs on
    /// one core. Where it disagrees with [`with_max_len`](Self::with_max_len), `min` wins.
    /// After [`fold`](ParallelIterator::fold) it counts items of the fold's input (fewer,
    /// longer blocks).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let sum: u64 = (0..10_000u64).into_par_iter().with_min_len(1024).sum();
    /// assert_eq!(sum, 49_995_000);
    /// ```
    fn with_min_len(self, min: usize) -> ParIter<Self::Producer> {
        let mut it = self.into_parts();
        it.limits.min = it.limits.min.max(min.max(1));
        it
    }

    /// Hands this loop's items out in chunks of at most `max` (rayon's `with_max_len`):
    /// `with_max_len(1)` makes each item its own chunk, for loops whose items cost very
    /// different times (each can then be taken by whichever core is free, or by a spare
    /// when a core's worker blocks). Under [`Schedule::Static`] each core still runs its own
    /// block, `max` at a time. After [`fold`](ParallelIterator::fold) it counts items of the
    /// fold's input (more, shorter blocks).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let lens: Vec<usize> = (1..=8usize)
    ///     .into_par_iter()
    ///     .with_max_len(1)
    ///     .map(|n| (0..n * 1000).filter(|x| x % 7 == 0).count())
    ///     .collect();
    /// assert_eq!(lens[0], 143);
    /// ```
    fn with_max_len(self, max: usize) -> ParIter<Self::Producer> {
        let mut it = self.into_parts();
        it.limits.max = it.limits.max.min(max.max(1));
        it
    }

    /// Runs the loop as a sequence of loops over blocks of `block_size` indices (0 taken as
    /// 1), one block after another, each in parallel (rayon's `by_uniform_blocks`). A search
    /// that has decided runs no further block. The blocks cut the indices the consumer sees
    /// (after every adaptor; a `fold` or `try_fold` cuts each block into blocks of its own,
    /// run in the same turns); the items and their order are the same.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let first = (0..10_000u32).into_par_iter().by_uniform_blocks(100).find_first(|x| x % 777 == 776);
    /// assert_eq!(first, Some(776));
    /// let all: Vec<u32> = (0..1000u32).into_par_iter().by_uniform_blocks(7).collect();
    /// assert_eq!(all, (0..1000).collect::<Vec<_>>());
    /// ```
    fn by_uniform_blocks(self, block_size: usize) -> ParIter<Self::Producer> {
        let mut it = self.into_parts();
        it.in_turn = Some(InTurn::Uniform(block_size.max(1)));
        it
    }

    /// Runs the loop as a sequence of loops over blocks that grow: as many indices as the
    /// runtime has cores, then twice as many each time, one block after another, each in
    /// parallel (rayon's `by_exponential_blocks`). For searches near the start of a long or
    /// endless loop (`find_first` over `iter::repeat`): no block past the decision runs.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let hit = (0..u64::MAX).into_par_iter().by_exponential_blocks().find_first(|x| x * x > 5_000);
    /// assert_eq!(hit, Some(71));
    /// ```
    fn by_exponential_blocks(self) -> ParIter<Self::Producer> {
        let mut it = self.into_parts();
        it.in_turn = Some(InTurn::Exponential(crate::current_num_threads().max(1)));
        it
    }

    /// All but the first `n` items.
    fn skip(self, n: usize) -> ParIter<Window<Self::Producer>> {
        self.into_parts().adapt(|p| Window::new(p, n, usize::MAX))
    }

    /// The first `n` items at most.
    fn take(self, n: usize) -> ParIter<Window<Self::Producer>> {
        self.into_parts().adapt(|p| Window::new(p, 0, n))
    }

    /// The items with a clone of `separator` between each two (rayon's `intersperse`), an
    /// interleaving of the items with `len - 1` separators: indexed, `2 * len - 1` items.
    /// Of more than 2^63 items (an endless `iter::repeat`) those past what `usize` counts
    /// are left out. Indexed iterators only (rayon's takes any: `collect` an unindexed one
    /// into a `Vec` first).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let s: String = ["a", "b", "c"].par_iter().copied().intersperse(", ").collect();
    /// assert_eq!(s, "a, b, c");
    /// ```
    #[allow(clippy::type_complexity)]
    fn intersperse(
        self,
        separator: Self::Item,
    ) -> ParIter<Interleave<Window<Self::Producer>, RepeatN<Self::Item>>>
    where
        Self::Item: Clone + Send,
    {
        let it = self.into_parts();
        // `2 * keep - 1` items at most `usize::MAX`.
        let keep = it.producer.len().min(usize::MAX / 2 + 1);
        let separators = ParIter::new(RepeatN::new(separator, keep.saturating_sub(1)));
        it.adapt(|p| Window::new(p, 0, keep))
            .pair(separators, Interleave::new)
    }

    /// Every `step`-th item, from the first (`step` 0 is taken as 1).
    fn step_by(self, step: usize) -> ParIter<StepBy<Self::Producer>> {
        self.into_parts().adapt(|p| StepBy::new(p, step))
    }

    /// The items last first (rayon's `rev`).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let v: Vec<u32> = (0..5u32).into_par_iter().rev().collect();
    /// assert_eq!(v, [4, 3, 2, 1, 0]);
    /// ```
    fn rev(self) -> ParIter<Rev<Self::Producer>> {
        self.into_parts().adapt(Rev::new)
    }

    /// The items gathered `size` at a time into vectors, in order, the last maybe shorter
    /// (rayon's `chunks`; `size` 0 is taken as 1).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let rows: Vec<Vec<u32>> = (0..7u32).into_par_iter().chunks(3).collect();
    /// assert_eq!(rows, [vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
    /// ```
    fn chunks(self, size: usize) -> ParIter<ItemChunks<Self::Producer>> {
        self.into_parts().adapt(|p| ItemChunks::new(p, size))
    }

    /// Each run of `size` items (the last maybe shorter) folded into one value from
    /// `identity()` with `fold_op`, in order (rayon's `fold_chunks`; here each run is
    /// gathered into a vector first, as [`chunks`](IndexedParallelIterator::chunks) does).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let sums: Vec<u32> =
    ///     (1..=7u32).into_par_iter().fold_chunks(3, || 0, |a, x| a + x).collect();
    /// assert_eq!(sums, [6, 15, 7]);
    /// ```
    #[allow(clippy::type_complexity)]
    fn fold_chunks<T, ID, F>(
        self,
        size: usize,
        identity: ID,
        fold_op: F,
    ) -> ParIter<Map<ItemChunks<Self::Producer>, impl Fn(Vec<Self::Item>) -> T + Sync>>
    where
        ID: Fn() -> T + Sync,
        F: Fn(T, Self::Item) -> T + Sync,
    {
        self.chunks(size)
            .map(move |run| run.into_iter().fold(identity(), &fold_op))
    }

    /// [`fold_chunks`](IndexedParallelIterator::fold_chunks) from a clone of `init` in each
    /// run (rayon's `fold_chunks_with`).
    #[allow(clippy::type_complexity)]
    fn fold_chunks_with<T, F>(
        self,
        size: usize,
        init: T,
        fold_op: F,
    ) -> ParIter<Map<ItemChunks<Self::Producer>, impl Fn(Vec<Self::Item>) -> T + Sync>>
    where
        T: Send + Clone,
        F: Fn(T, Self::Item) -> T + Sync,
    {
        self.fold_chunks(size, clones_of(init), fold_op)
    }

    /// Pairs each item with its index (not after `filter`).
    fn enumerate(self) -> ParIter<Enumerate<Self::Producer>> {
        self.into_parts().adapt(Enumerate::new)
    }

    /// Pairs the items of both, index by index, as long as the shorter. The schedule is this
    /// iterator's (or `other`'s when only it has one).
    #[allow(clippy::type_complexity)]
    fn zip<O>(
        self,
        other: O,
    ) -> ParIter<Zip<Self::Producer, <O::Iter as ParallelIterator>::Producer>>
    where
        O: IntoParallelIterator,
        O::Iter: IndexedParallelIterator,
    {
        self.into_parts()
            .pair(other.into_par_iter().into_parts(), Zip::new)
    }

    /// This iterator's and `other`'s items in turn, this one's first, then the rest of the
    /// longer (rayon's `interleave`).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let v: Vec<u32> = vec![1, 2, 3, 4].into_par_iter().interleave(vec![5, 6]).collect();
    /// assert_eq!(v, [1, 5, 2, 6, 3, 4]);
    /// ```
    ///
    /// # Panics
    ///
    /// If the two have more than `usize::MAX` items together (as rayon's `interleave`).
    #[allow(clippy::type_complexity)]
    fn interleave<O>(
        self,
        other: O,
    ) -> ParIter<Interleave<Self::Producer, <O::Iter as ParallelIterator>::Producer>>
    where
        O: IntoParallelIterator<Item = Self::Item>,
        O::Iter: IndexedParallelIterator,
    {
        self.into_parts()
            .pair(other.into_par_iter().into_parts(), Interleave::new)
    }

    /// [`interleave`](IndexedParallelIterator::interleave) until one of the two has no item
    /// left for its turn (rayon's `interleave_shortest`).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let v: Vec<u32> =
    ///     vec![1, 2, 3, 4].into_par_iter().interleave_shortest(vec![5, 6]).collect();
    /// assert_eq!(v, [1, 5, 2, 6, 3]);
    /// ```
    #[allow(clippy::type_complexity)]
    fn interleave_shortest<O>(
        self,
        other: O,
    ) -> ParIter<Interleave<Window<Self::Producer>, Window<<O::Iter as ParallelIterator>::Producer>>>
    where
        O: IntoParallelIterator<Item = Self::Item>,
        O::Iter: IndexedParallelIterator,
    {
        let other = other.into_par_iter();
        let (a, b) = (self.len(), other.len());
        // `a`'s turn comes first: it gives one more item than `b` when it is the longer.
        let (take_a, take_b) = if a <= b { (a, a) } else { (b + 1, b) };
        self.take(take_a).interleave(other.take(take_b))
    }

    /// The index of the first item for which `f` is true.
    #[track_caller]
    fn position_first<F>(self, f: F) -> Option<usize>
    where
        F: Fn(Self::Item) -> bool + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.search_first(Location::caller(), |r: Range<usize>, go_on| {
            r.clone()
                .zip(producer.items(r))
                .take_while(|_| go_on())
                .find_map(|(i, item)| f(item).then_some(i))
        })
    }

    /// The index of the last item for which `f` is true.
    #[track_caller]
    fn position_last<F>(self, f: F) -> Option<usize>
    where
        F: Fn(Self::Item) -> bool + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.search_last(Location::caller(), |r: Range<usize>, go_on| {
            r.clone()
                .zip(producer.items(r))
                .take_while(|_| go_on())
                .filter_map(|(i, item)| f(item).then_some(i))
                .last()
        })
    }

    /// The index of some item for which `f` is true, if there is one (see
    /// [`ParallelIterator::find_any`]).
    #[track_caller]
    fn position_any<F>(self, f: F) -> Option<usize>
    where
        F: Fn(Self::Item) -> bool + Sync,
    {
        let it = self.into_parts();
        let producer = &it.producer;
        it.search_any(Location::caller(), |r: Range<usize>, go_on| {
            r.clone()
                .zip(producer.items(r))
                .take_while(|_| go_on())
                .find_map(|(i, item)| f(item).then_some(i))
        })
    }

    /// Clears `target`, then fills it with the items in index order, reusing its allocation
    /// (rayon's `collect_into_vec`).
    #[track_caller]
    fn collect_into_vec(self, target: &mut Vec<Self::Item>)
    where
        Self::Item: Send,
    {
        target.clear();
        target.extend(self.into_parts().collect_vec(Location::caller()));
    }

    /// Clears both vectors, then fills them with the pairs' halves in index order (rayon's
    /// `unzip_into_vecs`).
    #[track_caller]
    fn unzip_into_vecs<A, B>(self, left: &mut Vec<A>, right: &mut Vec<B>)
    where
        Self: IndexedParallelIterator<Item = (A, B)>,
        A: Send,
        B: Send,
    {
        left.clear();
        right.clear();
        let pairs = self.into_parts().collect_vec(Location::caller());
        left.reserve(pairs.len());
        right.reserve(pairs.len());
        for (a, b) in pairs {
            left.push(a);
            right.push(b);
        }
    }

    /// The indices of the items for which `f` is true, in order (rayon's `positions`).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let at: Vec<usize> = [3, 8, 5, 6].par_iter().positions(|x| x % 2 == 0).collect();
    /// assert_eq!(at, [1, 3]);
    /// ```
    #[allow(clippy::type_complexity)]
    fn positions<F>(
        self,
        f: F,
    ) -> ParIter<
        FilterMap<Enumerate<Self::Producer>, impl Fn((usize, Self::Item)) -> Option<usize> + Sync>,
    >
    where
        F: Fn(Self::Item) -> bool + Sync,
    {
        self.enumerate()
            .filter_map(move |(i, item)| f(item).then_some(i))
    }

    /// [`zip`](IndexedParallelIterator::zip) for iterators of the same length (rayon's
    /// `zip_eq`).
    ///
    /// # Panics
    ///
    /// If the lengths differ, as rayon's: the call asserts that they are equal.
    #[allow(clippy::type_complexity)]
    #[track_caller]
    fn zip_eq<O>(
        self,
        other: O,
    ) -> ParIter<Zip<Self::Producer, <O::Iter as ParallelIterator>::Producer>>
    where
        O: IntoParallelIterator,
        O::Iter: IndexedParallelIterator,
    {
        let other = other.into_par_iter();
        let (a, b) = (self.len(), other.len());
        assert!(
            a == b,
            "zip_eq: the iterators' lengths differ ({a} and {b})"
        );
        self.zip(other)
    }

    /// Compares the items with `other`'s, index by index, as `Iterator::cmp` does (the first
    /// unequal pair decides, else the lengths).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    /// use std::cmp::Ordering;
    ///
    /// assert_eq!([1, 2, 3].par_iter().cmp(&[1, 2, 4]), Ordering::Less);
    /// assert!([1, 2].par_iter().lt(&[1, 2, 0]));
    /// assert!((0..5).into_par_iter().eq(vec![0, 1, 2, 3, 4]));
    /// ```
    #[track_caller]
    fn cmp<I>(self, other: I) -> CmpOrdering
    where
        I: IntoParallelIterator<Item = Self::Item>,
        I::Iter: IndexedParallelIterator,
        Self::Item: Ord,
    {
        let other = other.into_par_iter();
        let lengths = self.len().cmp(&other.len());
        self.zip(other)
            .map(|(a, b)| Ord::cmp(&a, &b))
            .find_first(|o| o.is_ne())
            .unwrap_or(lengths)
    }

    /// Compares the items with `other`'s, index by index, as `Iterator::partial_cmp` does.
    #[track_caller]
    fn partial_cmp<I>(self, other: I) -> Option<CmpOrdering>
    where
        I: IntoParallelIterator,
        I::Iter: IndexedParallelIterator,
        Self::Item: PartialOrd<I::Item>,
    {
        let other = other.into_par_iter();
        let lengths = self.len().cmp(&other.len());
        self.zip(other)
            .map(|(a, b)| PartialOrd::partial_cmp(&a, &b))
            .find_first(|o| *o != Some(CmpOrdering::Equal))
            .unwrap_or(Some(lengths))
    }

    /// Whether the items equal `other`'s, index by index, and the lengths are equal.
    #[track_caller]
    fn eq<I>(self, other: I) -> bool
    where
        I: IntoParallelIterator,
        I::Iter: IndexedParallelIterator,
        Self::Item: PartialEq<I::Item>,
    {
        let other = other.into_par_iter();
        self.len() == other.len() && self.zip(other).all(|(a, b)| a == b)
    }

    /// `!self.eq(other)`.
    #[track_caller]
    fn ne<I>(self, other: I) -> bool
    where
        I: IntoParallelIterator,
        I::Iter: IndexedParallelIterator,
        Self::Item: PartialEq<I::Item>,
    {
        !self.eq(other)
    }

    /// Whether the items are lexicographically less than `other`'s.
    #[track_caller]
    fn lt<I>(self, other: I) -> bool
    where
        I: IntoParallelIterator,
        I::Iter: IndexedParallelIterator,
        Self::Item: PartialOrd<I::Item>,
    {
        self.partial_cmp(other).is_some_and(CmpOrdering::is_lt)
    }

    /// Whether the items are lexicographically less than or equal to `other`'s.
    #[track_caller]
    fn le<I>(self, other: I) -> bool
    where
        I: IntoParallelIterator,
        I::Iter: IndexedParallelIterator,
        Self::Item: PartialOrd<I::Item>,
    {
        self.partial_cmp(other).is_some_and(CmpOrdering::is_le)
    }

    /// Whether the items are lexicographically greater than `other`'s.
    #[track_caller]
    fn gt<I>(self, other: I) -> bool
    where
        I: IntoParallelIterator,
        I::Iter: IndexedParallelIterator,
        Self::Item: PartialOrd<I::Item>,
    {
        self.partial_cmp(other).is_some_and(CmpOrdering::is_gt)
    }

    /// Whether the items are lexicographically greater than or equal to `other`'s.
    #[track_caller]
    fn ge<I>(self, other: I) -> bool
    where
        I: IntoParallelIterator,
        I::Iter: IndexedParallelIterator,
        Self::Item: PartialOrd<I::Item>,
    {
        self.partial_cmp(other).is_some_and(CmpOrdering::is_ge)
    }
}

impl<P: Producer> ParallelIterator for ParIter<P> {
    type Item = P::Item;
    type Producer = P;

    fn into_parts(self) -> ParIter<P> {
        self
    }
}

impl<P: Indexed> IndexedParallelIterator for ParIter<P> {
    fn as_parts(&self) -> &ParIter<P> {
        self
    }
}

/// Collections a parallel iterator can extend (`par_extend`): rayon's `ParallelExtend`, here
/// for every `Extend`, in index order.
pub trait ParallelExtend<T> {
    /// Adds the items of `par_iter`.
    #[track_caller]
    fn par_extend<I>(&mut self, par_iter: I)
    where
        I: IntoParallelIterator<Item = T>;
}

impl<T: Send, C: Extend<T>> ParallelExtend<T> for C {
    #[track_caller]
    fn par_extend<I>(&mut self, par_iter: I)
    where
        I: IntoParallelIterator<Item = T>,
    {
        let site = Location::caller();
        self.extend(par_iter.into_par_iter().into_parts().collect_vec(site));
    }
}

/// What [`ParallelIterator::try_reduce`] accepts as items: `Result<T, E>` and `Option<T>`
/// (rayon's bound is the standard library's unstable `Try`). Sealed.
pub trait Fallible: Sized + fallible::Sealed {
    /// The value of a success.
    type Ok;
    /// What a failure carries (`E`, or `()` for `None`).
    type Failure;
    /// The success's value, or the failure.
    fn branch(self) -> Result<Self::Ok, Self::Failure>;
    /// A success.
    fn from_ok(v: Self::Ok) -> Self;
    /// A failure.
    fn from_failure(f: Self::Failure) -> Self;
}

mod fallible {
    /// Only `Result` and `Option` are [`Fallible`](super::Fallible).
    pub trait Sealed {}
    impl<T, E> Sealed for Result<T, E> {}
    impl<T> Sealed for Option<T> {}
}

impl<T, E> Fallible for Result<T, E> {
    type Ok = T;
    type Failure = E;
    fn branch(self) -> Result<T, E> {
        self
    }
    fn from_ok(v: T) -> Self {
        Ok(v)
    }
    fn from_failure(e: E) -> Self {
        Err(e)
    }
}

impl<T> Fallible for Option<T> {
    type Ok = T;
    type Failure = ();
    fn branch(self) -> Result<T, ()> {
        self.ok_or(())
    }
    fn from_ok(v: T) -> Self {
        Some(v)
    }
    fn from_failure((): ()) -> Self {
        None
    }
}

/// Types that become a parallel iterator (rayon's `IntoParallelIterator`): ranges of integers
/// (up to 64 bits), `&[T]`, `&mut [T]`, `&Vec<T>`, `&mut Vec<T>`, `&[T; N]`, `&mut [T; N]`,
/// and parallel iterators themselves.
pub trait IntoParallelIterator {
    /// The parallel iterator.
    type Iter: ParallelIterator<Item = Self::Item>;
    /// Its item.
    type Item;

    /// The parallel iterator.
    fn into_par_iter(self) -> Self::Iter;
}

impl<I: ParallelIterator> IntoParallelIterator for I {
    type Iter = I;
    type Item = I::Item;

    fn into_par_iter(self) -> I {
        self
    }
}

/// The nested `Zip` producer of a tuple's iterators: `Zip<Zip<A, B>, C>` for `(A, B, C)`.
macro_rules! zipped {
    ($a:ty) => { $a };
    ($a:ty, $b:ty $(, $rest:ty)*) => { zipped!(Zip<$a, $b> $(, $rest)*) };
}

/// The item of a nested zip: `((A, B), C)` for `(A, B, C)`.
macro_rules! zipped_item {
    ($a:ty) => { $a };
    ($a:ty, $b:ty $(, $rest:ty)*) => { zipped_item!(($a, $b) $(, $rest)*) };
}

/// The pattern of a nested zip's item, `((a, b), c)` for `(a, b, c)`.
macro_rules! unzipped {
    ($a:ident) => { $a };
    ($a:ident, $b:ident $(, $rest:ident)*) => { unzipped!(@ ($a, $b) $(, $rest)*) };
    (@ $acc:tt) => { $acc };
    (@ $acc:tt, $next:ident $(, $rest:ident)*) => { unzipped!(@ ($acc, $next) $(, $rest)*) };
}

/// rayon's `MultiZip`: a tuple of indexed parallel iterators (or what turns into them) as one,
/// whose items are the tuples of theirs, as long as the shortest.
macro_rules! multizip {
    ($($t:ident $v:ident),+) => {
        /// The tuples of the iterators' items, in index order, as long as the shortest
        /// iterator (rayon's `MultiZip`).
        #[allow(clippy::type_complexity)]
        impl<$($t),+> IntoParallelIterator for ($($t,)+)
        where
            $($t: IntoParallelIterator, $t::Iter: IndexedParallelIterator,)+
        {
            type Iter = ParIter<
                Map<
                    zipped!($(<$t::Iter as ParallelIterator>::Producer),+),
                    fn(zipped_item!($($t::Item),+)) -> ($($t::Item,)+),
                >,
            >;
            type Item = ($($t::Item,)+);

            fn into_par_iter(self) -> Self::Iter {
                let ($($v,)+) = self;
                let flat: fn(zipped_item!($($t::Item),+)) -> ($($t::Item,)+) =
                    |unzipped!($($v),+)| ($($v,)+);
                multizip!(@zip $($v),+).map(flat)
            }
        }

        /// The tuples of references to the iterables' items (rayon's `MultiZip` by
        /// reference: `(a, b).par_iter()`).
        impl<'a, $($t),+> IntoParallelIterator for &'a ($($t,)+)
        where
            $(&'a $t: IntoParallelIterator,
              <&'a $t as IntoParallelIterator>::Iter: IndexedParallelIterator,)+
        {
            type Iter = <($(&'a $t,)+) as IntoParallelIterator>::Iter;
            type Item = <($(&'a $t,)+) as IntoParallelIterator>::Item;

            fn into_par_iter(self) -> Self::Iter {
                let ($($v,)+) = self;
                ($($v,)+).into_par_iter()
            }
        }

        /// The tuples of mutable references to the iterables' items (rayon's `MultiZip` by
        /// mutable reference: `(a, b).par_iter_mut()`).
        impl<'a, $($t),+> IntoParallelIterator for &'a mut ($($t,)+)
        where
            $(&'a mut $t: IntoParallelIterator,
              <&'a mut $t as IntoParallelIterator>::Iter: IndexedParallelIterator,)+
        {
            type Iter = <($(&'a mut $t,)+) as IntoParallelIterator>::Iter;
            type Item = <($(&'a mut $t,)+) as IntoParallelIterator>::Item;

            fn into_par_iter(self) -> Self::Iter {
                let ($($v,)+) = self;
                ($($v,)+).into_par_iter()
            }
        }
    };
    (@zip $a:ident $(, $rest:ident)*) => {
        $a.into_par_iter().into_parts()$(.zip($rest))*
    };
}

multizip!(A a, B b);
multizip!(A a, B b, C c);
multizip!(A a, B b, C c, D d);
multizip!(A a, B b, C c, D d, E e);
multizip!(A a, B b, C c, D d, E e, F f);
multizip!(A a, B b, C c, D d, E e, F f, G g);
multizip!(A a, B b, C c, D d, E e, F f, G g, H h);
multizip!(A a, B b, C c, D d, E e, F f, G g, H h, I i);
multizip!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j);
multizip!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k);
multizip!(A a, B b, C c, D d, E e, F f, G g, H h, I i, J j, K k, L l);

/// The values of the range: indexed for the integer types up to 64 bits, not indexed for
/// `u128` and `i128` (as rayon's), whose ranges may hold more values than `usize` counts. One
/// impl for every type ([`RangeItem`] picks the producer), so that `(0..5).into_par_iter()`
/// falls back to `i32` as std's ranges do.
impl<T: RangeItem> IntoParallelIterator for Range<T> {
    type Iter = ParIter<Ranged<T, T::Range>>;
    type Item = T;

    fn into_par_iter(self) -> Self::Iter {
        ParIter::new(Ranged::new(T::range(self)))
    }
}

/// The values of the range, both ends in (see `Range`'s impl).
impl<T: RangeItem> IntoParallelIterator for std::ops::RangeInclusive<T> {
    type Iter = ParIter<Ranged<T, T::Inclusive>>;
    type Item = T;

    fn into_par_iter(self) -> Self::Iter {
        ParIter::new(Ranged::new(T::inclusive(self)))
    }
}

/// The `char`s of the range, surrogates left out, indexed (rayon's).
impl IntoParallelIterator for Range<char> {
    type Iter = ParIter<CharRange>;
    type Item = char;

    fn into_par_iter(self) -> Self::Iter {
        ParIter::new(CharRange::new(self))
    }
}

/// The `char`s of the range, surrogates left out, indexed (rayon's).
impl IntoParallelIterator for std::ops::RangeInclusive<char> {
    type Iter = ParIter<CharRange>;
    type Item = char;

    fn into_par_iter(self) -> Self::Iter {
        ParIter::new(CharRange::new_inclusive(self))
    }
}

impl<'data, T: Sync + 'data, const N: usize> IntoParallelIterator for &'data [T; N] {
    type Iter = ParIter<Slice<'data, T>>;
    type Item = &'data T;

    fn into_par_iter(self) -> Self::Iter {
        ParIter::new(Slice::new(self))
    }
}

impl<'data, T: Sync + 'data> IntoParallelIterator for &'data [T] {
    type Iter = ParIter<Slice<'data, T>>;
    type Item = &'data T;

    fn into_par_iter(self) -> Self::Iter {
        ParIter::new(Slice::new(self))
    }
}

impl<'data, T: Sync + 'data> IntoParallelIterator for &'data Vec<T> {
    type Iter = ParIter<Slice<'data, T>>;
    type Item = &'data T;

    fn into_par_iter(self) -> Self::Iter {
        ParIter::new(Slice::new(self))
    }
}

/// A vector by value: each item moves to the thread that handles it (rayon's
/// `vec.into_par_iter()`).
///
/// ```
/// use umt_rt::prelude::*;
///
/// let names: Vec<String> = (0..100).map(|i| format!("file-{i}")).collect();
/// let lens: Vec<usize> = names.into_par_iter().map(|s| s.len()).collect();
/// assert_eq!(lens.iter().sum::<usize>(), 10 * 6 + 90 * 7);
/// ```
impl<T: Send> IntoParallelIterator for Vec<T> {
    type Iter = ParIter<VecProducer<T>>;
    type Item = T;

    fn into_par_iter(self) -> Self::Iter {
        ParIter::new(VecProducer::new(self))
    }
}

impl<'data, T: Send + 'data> IntoParallelIterator for &'data mut [T] {
    type Iter = ParIter<SliceMut<'data, T>>;
    type Item = &'data mut T;

    fn into_par_iter(self) -> Self::Iter {
        ParIter::new(SliceMut::new(self))
    }
}

impl<'data, T: Send + 'data> IntoParallelIterator for &'data mut Vec<T> {
    type Iter = ParIter<SliceMut<'data, T>>;
    type Item = &'data mut T;

    fn into_par_iter(self) -> Self::Iter {
        ParIter::new(SliceMut::new(self))
    }
}

impl<'data, T: Send + 'data, const N: usize> IntoParallelIterator for &'data mut [T; N] {
    type Iter = ParIter<SliceMut<'data, T>>;
    type Item = &'data mut T;

    fn into_par_iter(self) -> Self::Iter {
        ParIter::new(SliceMut::new(self))
    }
}

/// The standard collections without a slice inside (maps, sets, deques, heaps, lists,
/// `Option`, `Result`'s `Ok`), by value and by reference: their items are gathered into a vector on the calling
/// thread (one sequential pass, no copy of the items themselves), which the loop then hands
/// out in the collection's iteration order.
macro_rules! gathered {
    ($(impl<$($g:tt),*> for $t:ty => $item:ty where [$($bound:tt)*];)*) => {$(
        impl<$($g),*> IntoParallelIterator for $t
        where
            $($bound)*
        {
            type Iter = ParIter<VecProducer<$item>>;
            type Item = $item;

            fn into_par_iter(self) -> Self::Iter {
                ParIter::new(VecProducer::new(self.into_iter().collect()))
            }
        }
    )*};
}

gathered! {
    impl<K, V, S> for std::collections::HashMap<K, V, S> => (K, V) where [K: Send, V: Send];
    impl<'a, K, V, S> for &'a std::collections::HashMap<K, V, S> => (&'a K, &'a V)
        where [K: Sync, V: Sync];
    impl<'a, K, V, S> for &'a mut std::collections::HashMap<K, V, S> => (&'a K, &'a mut V)
        where [K: Sync, V: Send];
    impl<T, S> for std::collections::HashSet<T, S> => T where [T: Send];
    impl<'a, T, S> for &'a std::collections::HashSet<T, S> => &'a T where [T: Sync];
    impl<K, V> for std::collections::BTreeMap<K, V> => (K, V) where [K: Send, V: Send];
    impl<'a, K, V> for &'a std::collections::BTreeMap<K, V> => (&'a K, &'a V)
        where [K: Sync, V: Sync];
    impl<'a, K, V> for &'a mut std::collections::BTreeMap<K, V> => (&'a K, &'a mut V)
        where [K: Sync, V: Send];
    impl<T> for std::collections::BTreeSet<T> => T where [T: Send];
    impl<'a, T> for &'a std::collections::BTreeSet<T> => &'a T where [T: Sync];
    impl<T> for std::collections::VecDeque<T> => T where [T: Send];
    impl<'a, T> for &'a std::collections::VecDeque<T> => &'a T where [T: Sync];
    impl<'a, T> for &'a mut std::collections::VecDeque<T> => &'a mut T where [T: Send];
    impl<T> for std::collections::BinaryHeap<T> => T where [T: Send];
    impl<'a, T> for &'a std::collections::BinaryHeap<T> => &'a T where [T: Sync];
    impl<T> for std::collections::LinkedList<T> => T where [T: Send];
    impl<'a, T> for &'a std::collections::LinkedList<T> => &'a T where [T: Sync];
    impl<'a, T> for &'a mut std::collections::LinkedList<T> => &'a mut T where [T: Send];
    impl<T> for Option<T> => T where [T: Send];
    impl<'a, T> for &'a Option<T> => &'a T where [T: Sync];
    impl<'a, T> for &'a mut Option<T> => &'a mut T where [T: Send];
    impl<T, E> for Result<T, E> => T where [T: Send];
    impl<'a, T, E> for &'a Result<T, E> => &'a T where [T: Sync];
    impl<'a, T, E> for &'a mut Result<T, E> => &'a mut T where [T: Send];
}

/// `par_bridge()` on any sequential iterator whose items can move between threads (rayon's
/// `ParallelBridge`): a channel's receiver, a directory listing, lines of a reader. The
/// loop's participants take the next item in turn under a lock, so a body that blocks does
/// not hold the others up (a spare the monitor wakes for its core joins and takes items too).
/// The items' order is not kept.
///
/// ```
/// use std::sync::mpsc::channel;
/// use umt_rt::prelude::*;
///
/// let (tx, rx) = channel();
/// std::thread::spawn(move || (0..100u64).for_each(|i| tx.send(i).unwrap()));
/// let sum: u64 = rx.into_iter().par_bridge().map(|i| i * 2).sum();
/// assert_eq!(sum, 9900);
/// ```
pub trait ParallelBridge: Iterator + Send + Sized
where
    Self::Item: Send,
{
    /// This iterator's items, handled in parallel.
    fn par_bridge(self) -> ParIter<Bridge<Self>>;
}

impl<I> ParallelBridge for I
where
    I: Iterator + Send,
    I::Item: Send,
{
    fn par_bridge(self) -> ParIter<Bridge<Self>> {
        let places = crate::current_num_threads() * crate::MAX_WORKERS_PER_CORE;
        ParIter::new(Bridge::new(self, places))
    }
}

/// Parallel iterators over the parts of a string (rayon's `ParallelString`). The string is
/// cut on the calling thread, at `memchr`-like speed, into its characters, lines or pieces;
/// the loop then hands the pieces out, in order, to its participants (rayon also cuts in
/// parallel, which pays off only when the work per piece is smaller than finding it).
///
/// ```
/// use umt_rt::prelude::*;
///
/// let text = "alpha beta\ngamma\n\ndelta";
/// assert_eq!(text.par_lines().count(), 4);
/// assert_eq!(text.par_split_whitespace().map(str::len).sum::<usize>(), 19);
/// let fields: Vec<&str> = "a,b;c".par_split([',', ';']).collect();
/// assert_eq!(fields, ["a", "b", "c"]);
/// assert_eq!(text.par_chars().filter(|c| *c == 'a').count(), 6);
/// ```
pub trait ParallelString {
    /// The characters.
    fn par_chars(&self) -> ParIter<VecProducer<char>>;
    /// The characters with their byte offsets.
    fn par_char_indices(&self) -> ParIter<VecProducer<(usize, char)>>;
    /// The lines, as rayon's `par_lines` cuts them: `str::lines`'s, except that a bare `\r`
    /// at the very end is dropped too.
    fn par_lines(&self) -> ParIter<VecProducer<&str>>;
    /// The pieces between runs of whitespace, as `str::split_whitespace` cuts them.
    fn par_split_whitespace(&self) -> ParIter<VecProducer<&str>>;
    /// The pieces between separators: a `char`, a slice or array of them, or a predicate.
    fn par_split<P: SplitPattern>(&self, separator: P) -> ParIter<VecProducer<&str>>;
    /// The pieces, each ended by a separator (the last one too if the string ends with it),
    /// as `str::split_terminator` cuts them.
    fn par_split_terminator<P: SplitPattern>(&self, terminator: P) -> ParIter<VecProducer<&str>>;
    /// The pieces, each with the separator that ends it, as `str::split_inclusive` cuts them.
    fn par_split_inclusive<P: SplitPattern>(&self, separator: P) -> ParIter<VecProducer<&str>>;
    /// The pieces between runs of ASCII whitespace, as `str::split_ascii_whitespace` cuts
    /// them.
    fn par_split_ascii_whitespace(&self) -> ParIter<VecProducer<&str>>;
    /// The characters that match `pattern`, each as a `&str` (`str::matches`).
    fn par_matches<P: SplitPattern>(&self, pattern: P) -> ParIter<VecProducer<&str>>;
    /// The characters that match `pattern`, with their byte offsets (`str::match_indices`).
    fn par_match_indices<P: SplitPattern>(&self, pattern: P)
    -> ParIter<VecProducer<(usize, &str)>>;
    /// The bytes, read in place (indexed, as rayon's).
    fn par_bytes(&self) -> ParIter<Copied<Slice<'_, u8>>>;
    /// The UTF-16 code units (`str::encode_utf16`).
    fn par_encode_utf16(&self) -> ParIter<VecProducer<u16>>;
}

impl ParallelString for str {
    fn par_chars(&self) -> ParIter<VecProducer<char>> {
        ParIter::new(VecProducer::new(self.chars().collect()))
    }

    fn par_char_indices(&self) -> ParIter<VecProducer<(usize, char)>> {
        ParIter::new(VecProducer::new(self.char_indices().collect()))
    }

    fn par_lines(&self) -> ParIter<VecProducer<&str>> {
        // rayon's cut, not `str::lines`'s: a final bare `\r` goes too.
        let lines = self.split_terminator('\n');
        ParIter::new(VecProducer::new(
            lines.map(|l| l.strip_suffix('\r').unwrap_or(l)).collect(),
        ))
    }

    fn par_split_whitespace(&self) -> ParIter<VecProducer<&str>> {
        ParIter::new(VecProducer::new(self.split_whitespace().collect()))
    }

    fn par_split<P: SplitPattern>(&self, separator: P) -> ParIter<VecProducer<&str>> {
        ParIter::new(VecProducer::new(
            self.split(|c| separator.is_separator(c)).collect(),
        ))
    }

    fn par_split_terminator<P: SplitPattern>(&self, terminator: P) -> ParIter<VecProducer<&str>> {
        ParIter::new(VecProducer::new(
            self.split_terminator(|c| terminator.is_separator(c))
                .collect(),
        ))
    }

    fn par_split_inclusive<P: SplitPattern>(&self, separator: P) -> ParIter<VecProducer<&str>> {
        ParIter::new(VecProducer::new(
            self.split_inclusive(|c| separator.is_separator(c))
                .collect(),
        ))
    }

    fn par_split_ascii_whitespace(&self) -> ParIter<VecProducer<&str>> {
        ParIter::new(VecProducer::new(self.split_ascii_whitespace().collect()))
    }

    fn par_matches<P: SplitPattern>(&self, pattern: P) -> ParIter<VecProducer<&str>> {
        ParIter::new(VecProducer::new(
            self.matches(|c| pattern.is_separator(c)).collect(),
        ))
    }

    fn par_match_indices<P: SplitPattern>(
        &self,
        pattern: P,
    ) -> ParIter<VecProducer<(usize, &str)>> {
        ParIter::new(VecProducer::new(
            self.match_indices(|c| pattern.is_separator(c)).collect(),
        ))
    }

    fn par_bytes(&self) -> ParIter<Copied<Slice<'_, u8>>> {
        self.as_bytes().par_iter().copied()
    }

    fn par_encode_utf16(&self) -> ParIter<VecProducer<u16>> {
        ParIter::new(VecProducer::new(self.encode_utf16().collect()))
    }
}

/// What separates the pieces of [`ParallelString::par_split`] (and what
/// [`ParallelString::par_matches`] finds): a `char`, a slice or array of them, or a
/// `Fn(char) -> bool` (rayon's `Pattern`; the standard library's is unstable).
/// Sealed.
pub trait SplitPattern: split_pattern::Sealed {
    /// Whether `c` separates two pieces.
    fn is_separator(&self, c: char) -> bool;
}

mod split_pattern {
    /// Only the separators of [`SplitPattern`](super::SplitPattern)'s list.
    pub trait Sealed {}
    impl Sealed for char {}
    impl Sealed for &[char] {}
    impl<const N: usize> Sealed for [char; N] {}
    impl<F: Fn(char) -> bool> Sealed for F {}
}

impl SplitPattern for char {
    fn is_separator(&self, c: char) -> bool {
        c == *self
    }
}

impl SplitPattern for &[char] {
    fn is_separator(&self, c: char) -> bool {
        self.contains(&c)
    }
}

impl<const N: usize> SplitPattern for [char; N] {
    fn is_separator(&self, c: char) -> bool {
        self.contains(&c)
    }
}

impl<F: Fn(char) -> bool> SplitPattern for F {
    fn is_separator(&self, c: char) -> bool {
        self(c)
    }
}

/// `par_iter()` on anything whose shared borrow is an [`IntoParallelIterator`] (slices,
/// vectors, arrays): rayon's `IntoParallelRefIterator`.
pub trait IntoParallelRefIterator<'data> {
    /// The parallel iterator.
    type Iter: ParallelIterator<Item = Self::Item>;
    /// Its item (a shared reference).
    type Item: 'data;

    /// Each element, by reference.
    fn par_iter(&'data self) -> Self::Iter;
}

impl<'data, I: 'data + ?Sized> IntoParallelRefIterator<'data> for I
where
    &'data I: IntoParallelIterator,
{
    type Iter = <&'data I as IntoParallelIterator>::Iter;
    type Item = <&'data I as IntoParallelIterator>::Item;

    fn par_iter(&'data self) -> Self::Iter {
        self.into_par_iter()
    }
}

/// `par_iter_mut()` on anything whose mutable borrow is an [`IntoParallelIterator`]:
/// rayon's `IntoParallelRefMutIterator`.
pub trait IntoParallelRefMutIterator<'data> {
    /// The parallel iterator.
    type Iter: ParallelIterator<Item = Self::Item>;
    /// Its item (a mutable reference).
    type Item: 'data;

    /// Each element, by mutable reference.
    fn par_iter_mut(&'data mut self) -> Self::Iter;
}

impl<'data, I: 'data + ?Sized> IntoParallelRefMutIterator<'data> for I
where
    &'data mut I: IntoParallelIterator,
{
    type Iter = <&'data mut I as IntoParallelIterator>::Iter;
    type Item = <&'data mut I as IntoParallelIterator>::Item;

    fn par_iter_mut(&'data mut self) -> Self::Iter {
        self.into_par_iter()
    }
}

/// Moving a range of a collection's elements out into a parallel iterator (rayon's
/// `par_drain`).
pub trait ParallelDrainRange<Idx = usize> {
    /// The parallel iterator over the removed elements.
    type Iter: ParallelIterator<Item = Self::Item>;
    /// The elements.
    type Item: Send;

    /// Removes the elements of `range` (any `a..b`, `a..`, `..b`, `..`) and hands them out in
    /// order, as `Vec::drain` does; the elements after the range move down. The removed
    /// elements are moved into a buffer on the calling thread first (one move each), then
    /// handed out.
    ///
    /// # Panics
    ///
    /// If the range is out of bounds or decreasing, as `Vec::drain`.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let mut v: Vec<u32> = (0..10).collect();
    /// let moved: u32 = v.par_drain(2..5).sum();
    /// assert_eq!((moved, v), (9, vec![0, 1, 5, 6, 7, 8, 9]));
    /// ```
    fn par_drain<R: std::ops::RangeBounds<Idx>>(self, range: R) -> Self::Iter;
}

impl<T: Send> ParallelDrainRange for &mut Vec<T> {
    type Iter = ParIter<VecProducer<T>>;
    type Item = T;

    #[track_caller]
    fn par_drain<R: std::ops::RangeBounds<usize>>(self, range: R) -> ParIter<VecProducer<T>> {
        self.drain(range).collect::<Vec<T>>().into_par_iter()
    }
}

impl<T: Send> ParallelDrainRange for &mut std::collections::VecDeque<T> {
    type Iter = ParIter<VecProducer<T>>;
    type Item = T;

    #[track_caller]
    fn par_drain<R: std::ops::RangeBounds<usize>>(self, range: R) -> ParIter<VecProducer<T>> {
        self.drain(range).collect::<Vec<T>>().into_par_iter()
    }
}

/// Moving all of a collection's elements out into a parallel iterator, leaving it empty with
/// its allocation (rayon's `par_drain` of the maps, sets and heaps).
pub trait ParallelDrainFull {
    /// The parallel iterator over the removed elements.
    type Iter: ParallelIterator<Item = Self::Item>;
    /// The elements.
    type Item: Send;

    /// Removes every element and hands them out, in the collection's `drain` order. The
    /// elements are moved into a buffer on the calling thread first (one move each).
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use umt_rt::prelude::*;
    ///
    /// let mut ages: HashMap<&str, u32> = [("ann", 31), ("bob", 27)].into_iter().collect();
    /// let total: u32 = ages.par_drain().map(|(_, age)| age).sum();
    /// assert_eq!((total, ages.len()), (58, 0));
    /// ```
    fn par_drain(self) -> Self::Iter;
}

impl<K: Send, V: Send, S> ParallelDrainFull for &mut std::collections::HashMap<K, V, S> {
    type Iter = ParIter<VecProducer<(K, V)>>;
    type Item = (K, V);

    fn par_drain(self) -> ParIter<VecProducer<(K, V)>> {
        self.drain().collect::<Vec<_>>().into_par_iter()
    }
}

impl<T: Send, S> ParallelDrainFull for &mut std::collections::HashSet<T, S> {
    type Iter = ParIter<VecProducer<T>>;
    type Item = T;

    fn par_drain(self) -> ParIter<VecProducer<T>> {
        self.drain().collect::<Vec<_>>().into_par_iter()
    }
}

impl<T: Send> ParallelDrainFull for &mut std::collections::BinaryHeap<T> {
    type Iter = ParIter<VecProducer<T>>;
    type Item = T;

    fn par_drain(self) -> ParIter<VecProducer<T>> {
        self.drain().collect::<Vec<_>>().into_par_iter()
    }
}

/// The range is in bytes and must fall on `char` boundaries, as `String::drain`'s.
impl ParallelDrainRange for &mut String {
    type Iter = ParIter<VecProducer<char>>;
    type Item = char;

    #[track_caller]
    fn par_drain<R: std::ops::RangeBounds<usize>>(self, range: R) -> ParIter<VecProducer<char>> {
        self.drain(range).collect::<Vec<char>>().into_par_iter()
    }
}

/// Parallel iterators over parts of a shared slice (and so of a `Vec`, an array...).
pub trait ParallelSlice<T: Sync> {
    /// Non-overlapping sub-slices of `size` elements (the last may be shorter); `size` 0 is
    /// taken as 1.
    fn par_chunks(&self, size: usize) -> ParIter<Chunks<'_, T>>;

    /// Non-overlapping sub-slices of exactly `size` elements; the last `len % size` are left
    /// out. `size` 0 is taken as 1.
    fn par_chunks_exact(&self, size: usize) -> ParIter<ChunksExact<'_, T>>;

    /// Every run of `size` consecutive elements (`len - size + 1` of them; none when the slice
    /// is shorter). `size` 0 is taken as 1.
    fn par_windows(&self, size: usize) -> ParIter<Windows<'_, T>>;

    /// Every run of `N` consecutive elements as `&[T; N]` (rayon's `par_array_windows`;
    /// `len - N + 1` of them, none when the slice is shorter; `N` 0 gives one empty array per
    /// element).
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let rising = [1, 2, 4, 3, 5].par_array_windows().filter(|[a, b]| a < b).count();
    /// assert_eq!(rising, 3);
    /// ```
    fn par_array_windows<const N: usize>(&self) -> ParIter<ArrayWindows<'_, T, N>>;

    /// The sub-slices between the elements for which `separator` is true, as `slice::split`
    /// (rayon's `par_split`): the slice is cut on the calling thread, the pieces handed out
    /// in parallel.
    fn par_split<P>(&self, separator: P) -> ParIter<VecProducer<&[T]>>
    where
        P: FnMut(&T) -> bool;

    /// The runs of elements in which `same(a, b)` holds for each neighbouring pair, as
    /// `slice::chunk_by` (rayon's `par_chunk_by`): cut on the calling thread, handed out in
    /// parallel.
    fn par_chunk_by<F>(&self, same: F) -> ParIter<VecProducer<&[T]>>
    where
        F: FnMut(&T, &T) -> bool;

    /// The sub-slices each ended by an element for which `separator` is true (that element
    /// included), as `slice::split_inclusive` (rayon's `par_split_inclusive`).
    fn par_split_inclusive<P>(&self, separator: P) -> ParIter<VecProducer<&[T]>>
    where
        P: FnMut(&T) -> bool;

    /// Non-overlapping sub-slices of `size` elements from the end, as `slice::rchunks` (the
    /// last, the slice's start, may be shorter); `size` 0 is taken as 1.
    fn par_rchunks(&self, size: usize) -> ParIter<RChunks<'_, T>>;

    /// Non-overlapping sub-slices of exactly `size` elements from the end, as
    /// `slice::rchunks_exact`; the first `len % size` are left out. `size` 0 is taken as 1.
    fn par_rchunks_exact(&self, size: usize) -> ParIter<RChunksExact<'_, T>>;
}

impl<T: Sync> ParallelSlice<T> for [T] {
    fn par_chunks(&self, size: usize) -> ParIter<Chunks<'_, T>> {
        ParIter::new(Chunks::new(self, size))
    }

    fn par_chunks_exact(&self, size: usize) -> ParIter<ChunksExact<'_, T>> {
        ParIter::new(ChunksExact::new(self, size))
    }

    fn par_windows(&self, size: usize) -> ParIter<Windows<'_, T>> {
        ParIter::new(Windows::new(self, size))
    }

    fn par_array_windows<const N: usize>(&self) -> ParIter<ArrayWindows<'_, T, N>> {
        ParIter::new(ArrayWindows::new(self))
    }

    fn par_split<P>(&self, separator: P) -> ParIter<VecProducer<&[T]>>
    where
        P: FnMut(&T) -> bool,
    {
        ParIter::new(VecProducer::new(self.split(separator).collect()))
    }

    fn par_chunk_by<F>(&self, same: F) -> ParIter<VecProducer<&[T]>>
    where
        F: FnMut(&T, &T) -> bool,
    {
        ParIter::new(VecProducer::new(self.chunk_by(same).collect()))
    }

    fn par_split_inclusive<P>(&self, separator: P) -> ParIter<VecProducer<&[T]>>
    where
        P: FnMut(&T) -> bool,
    {
        ParIter::new(VecProducer::new(self.split_inclusive(separator).collect()))
    }

    fn par_rchunks(&self, size: usize) -> ParIter<RChunks<'_, T>> {
        ParIter::new(RChunks::new(self, size))
    }

    fn par_rchunks_exact(&self, size: usize) -> ParIter<RChunksExact<'_, T>> {
        ParIter::new(RChunksExact::new(self, size))
    }
}

/// Parallel iterators over parts of a mutable slice, and parallel sorts.
pub trait ParallelSliceMut<T: Send> {
    /// Non-overlapping mutable sub-slices of `size` elements (the last may be shorter);
    /// `size` 0 is taken as 1.
    fn par_chunks_mut(&mut self, size: usize) -> ParIter<ChunksMut<'_, T>>;

    /// The mutable sub-slices between the elements for which `separator` is true, as
    /// `slice::split_mut` (rayon's `par_split_mut`): cut on the calling thread, handed out in
    /// parallel.
    fn par_split_mut<P>(&mut self, separator: P) -> ParIter<VecProducer<&mut [T]>>
    where
        P: FnMut(&T) -> bool;

    /// The mutable sub-slices each ended by an element for which `separator` is true (that
    /// element included), as `slice::split_inclusive_mut` (rayon's
    /// `par_split_inclusive_mut`).
    fn par_split_inclusive_mut<P>(&mut self, separator: P) -> ParIter<VecProducer<&mut [T]>>
    where
        P: FnMut(&T) -> bool;

    /// The mutable runs of elements in which `same(a, b)` holds for each neighbouring pair,
    /// as `slice::chunk_by_mut` (rayon's `par_chunk_by_mut`): cut on the calling thread,
    /// handed out in parallel.
    fn par_chunk_by_mut<F>(&mut self, same: F) -> ParIter<VecProducer<&mut [T]>>
    where
        F: FnMut(&T, &T) -> bool;

    /// Non-overlapping mutable sub-slices of exactly `size` elements; the last `len % size`
    /// are left out. `size` 0 is taken as 1.
    fn par_chunks_exact_mut(&mut self, size: usize) -> ParIter<ChunksExactMut<'_, T>>;

    /// Non-overlapping mutable sub-slices of `size` elements from the end, as
    /// `slice::rchunks_mut`; `size` 0 is taken as 1.
    fn par_rchunks_mut(&mut self, size: usize) -> ParIter<RChunksMut<'_, T>>;

    /// Non-overlapping mutable sub-slices of exactly `size` elements from the end, as
    /// `slice::rchunks_exact_mut`; the first `len % size` are left out. `size` 0 is taken as 1.
    fn par_rchunks_exact_mut(&mut self, size: usize) -> ParIter<RChunksExactMut<'_, T>>;

    /// Sorts, keeping equal elements in order (a parallel merge sort).
    fn par_sort(&mut self)
    where
        T: Ord;

    /// [`ParallelSliceMut::par_sort`] with a comparison.
    fn par_sort_by<F>(&mut self, compare: F)
    where
        F: Fn(&T, &T) -> std::cmp::Ordering + Sync;

    /// [`ParallelSliceMut::par_sort`] by a key.
    fn par_sort_by_key<K: Ord, F>(&mut self, key: F)
    where
        F: Fn(&T) -> K + Sync;

    /// [`ParallelSliceMut::par_sort`] by a key computed once per element, in parallel, for
    /// keys that cost more than a comparison (rayon's `par_sort_by_cached_key`). Holds the
    /// keys and an index per element meanwhile.
    ///
    /// ```
    /// use umt_rt::prelude::*;
    ///
    /// let mut v = vec![-5i32, 4, 1, -3, 2];
    /// v.par_sort_by_cached_key(|x| x.to_string());
    /// assert_eq!(v, [-3, -5, 1, 2, 4]);
    /// ```
    fn par_sort_by_cached_key<K, F>(&mut self, key: F)
    where
        K: Ord + Send,
        F: Fn(&T) -> K + Sync;

    /// Sorts, equal elements in any order (a parallel merge sort with unstable leaves).
    fn par_sort_unstable(&mut self)
    where
        T: Ord;

    /// [`ParallelSliceMut::par_sort_unstable`] with a comparison.
    fn par_sort_unstable_by<F>(&mut self, compare: F)
    where
        F: Fn(&T, &T) -> std::cmp::Ordering + Sync;

    /// [`ParallelSliceMut::par_sort_unstable`] by a key.
    fn par_sort_unstable_by_key<K: Ord, F>(&mut self, key: F)
    where
        F: Fn(&T) -> K + Sync;
}

impl<T: Send> ParallelSliceMut<T> for [T] {
    fn par_chunks_mut(&mut self, size: usize) -> ParIter<ChunksMut<'_, T>> {
        ParIter::new(ChunksMut::new(self, size))
    }

    fn par_split_mut<P>(&mut self, separator: P) -> ParIter<VecProducer<&mut [T]>>
    where
        P: FnMut(&T) -> bool,
    {
        ParIter::new(VecProducer::new(self.split_mut(separator).collect()))
    }

    fn par_split_inclusive_mut<P>(&mut self, separator: P) -> ParIter<VecProducer<&mut [T]>>
    where
        P: FnMut(&T) -> bool,
    {
        ParIter::new(VecProducer::new(
            self.split_inclusive_mut(separator).collect(),
        ))
    }

    fn par_chunk_by_mut<F>(&mut self, same: F) -> ParIter<VecProducer<&mut [T]>>
    where
        F: FnMut(&T, &T) -> bool,
    {
        ParIter::new(VecProducer::new(self.chunk_by_mut(same).collect()))
    }

    fn par_chunks_exact_mut(&mut self, size: usize) -> ParIter<ChunksExactMut<'_, T>> {
        ParIter::new(ChunksExactMut::new(self, size))
    }

    fn par_rchunks_mut(&mut self, size: usize) -> ParIter<RChunksMut<'_, T>> {
        ParIter::new(RChunksMut::new(self, size))
    }

    fn par_rchunks_exact_mut(&mut self, size: usize) -> ParIter<RChunksExactMut<'_, T>> {
        ParIter::new(RChunksExactMut::new(self, size))
    }

    fn par_sort(&mut self)
    where
        T: Ord,
    {
        crate::sort::merge_sort(self, &T::cmp, true);
    }

    fn par_sort_by<F>(&mut self, compare: F)
    where
        F: Fn(&T, &T) -> std::cmp::Ordering + Sync,
    {
        crate::sort::merge_sort(self, &compare, true);
    }

    fn par_sort_by_key<K: Ord, F>(&mut self, key: F)
    where
        F: Fn(&T) -> K + Sync,
    {
        crate::sort::merge_sort(self, &|a: &T, b: &T| key(a).cmp(&key(b)), true);
    }

    fn par_sort_by_cached_key<K, F>(&mut self, key: F)
    where
        K: Ord + Send,
        F: Fn(&T) -> K + Sync,
    {
        let len = self.len();
        if len < 2 {
            return;
        }
        // (key, index) pairs are distinct, so an unstable sort of them keeps equal keys in
        // their elements' order.
        let mut keyed: Vec<(K, usize)> = self
            .par_iter_mut()
            .enumerate()
            .map(|(i, x)| (key(&*x), i))
            .collect();
        keyed.par_sort_unstable();
        // Position `i` takes the element first at `keyed[i].1`: a swap per position, where an
        // index below `i` was swapped away already and is followed to where it went (the
        // standard library's `sort_by_cached_key` does the same).
        let mut from: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
        for i in 0..len {
            let mut at = from[i];
            while at < i {
                at = from[at];
            }
            from[i] = at;
            self.swap(i, at);
        }
    }

    fn par_sort_unstable(&mut self)
    where
        T: Ord,
    {
        crate::sort::merge_sort(self, &T::cmp, false);
    }

    fn par_sort_unstable_by<F>(&mut self, compare: F)
    where
        F: Fn(&T, &T) -> std::cmp::Ordering + Sync,
    {
        crate::sort::merge_sort(self, &compare, false);
    }

    fn par_sort_unstable_by_key<K: Ord, F>(&mut self, key: F)
    where
        F: Fn(&T) -> K + Sync,
    {
        crate::sort::merge_sort(self, &|a: &T, b: &T| key(a).cmp(&key(b)), false);
    }
}

// The loops of `Runtime`: a range under a schedule, without writing the iterator.
impl crate::Runtime {
    /// Calls `body(i)` for every `i` in `range`, under the program's loop schedule
    /// (`UMT_SCHEDULE`, else [`Schedule::StaticSteal`](crate::Schedule::StaticSteal)).
    pub fn parallel_for<F>(&self, range: std::ops::Range<usize>, body: F)
    where
        F: Fn(usize) + Sync + Send,
    {
        self.install(|| range.into_par_iter().for_each(body));
    }

    /// Like [`Runtime::parallel_for`](crate::Runtime::parallel_for) in chunks of `chunk` iterations handed out one at a time
    /// ([`Schedule::Dynamic`](crate::Schedule::Dynamic)).
    pub fn parallel_for_chunked<F>(&self, range: std::ops::Range<usize>, chunk: usize, body: F)
    where
        F: Fn(usize) + Sync + Send,
    {
        self.parallel_for_with(range, crate::Schedule::Dynamic(chunk.max(1)), body);
    }

    /// Like [`Runtime::parallel_for`](crate::Runtime::parallel_for) under `schedule`.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use umt_rt::{Runtime, Schedule};
    ///
    /// let rt = Runtime::builder().monitor(umt_rt::BackendKind::Disabled).build().unwrap();
    /// let sum = AtomicUsize::new(0);
    /// rt.parallel_for_with(0..100, Schedule::Guided(4), |i| {
    ///     sum.fetch_add(i, Ordering::Relaxed);
    /// });
    /// assert_eq!(sum.into_inner(), 4950);
    /// ```
    pub fn parallel_for_with<F>(
        &self,
        range: std::ops::Range<usize>,
        schedule: crate::Schedule,
        body: F,
    ) where
        F: Fn(usize) + Sync + Send,
    {
        self.install(|| range.into_par_iter().schedule(schedule).for_each(body));
    }
}
