//! Producers: what makes a parallel iterator's items, by index. A producer covers an index
//! space `0..len` and makes a sequential iterator over any part of it; the loop driver asks
//! each index once (`Dispenser`'s guarantee, tested in `schedule.rs`). That guarantee is what
//! lets [`SliceMut`] and [`ChunksMut`] hand out `&mut` parts of one slice to several threads:
//! the crate's only unsafe split, here.

use std::marker::PhantomData;
use std::ops::{ControlFlow, Range};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::schedule::{ChunkLimits, InTurn};

mod sealed {
    /// Producers are made only by this crate.
    pub trait Sealed {}

    /// Proves a caller is this crate (nothing outside can name or build it).
    #[derive(Debug)]
    pub struct Token;
}

/// Makes a parallel iterator's items for any range of its indices. Sealed: the sources and
/// adaptors of this module are the producers.
pub trait Producer: Sync + sealed::Sealed {
    /// The item.
    type Item;
    /// A sequential iterator over part of the indices.
    type Iter<'p>: Iterator<Item = Self::Item>
    where
        Self: 'p;

    /// The number of indices.
    fn len(&self) -> usize;

    /// Whether there are no indices.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the loop wants no more items from this producer (a `take_any` has its count,
    /// a `while_some` has met a `None`, a `par_bridge` source ran dry): the driver then hands
    /// out no more chunks, so that a loop over a huge range ends once it is full.
    fn full(&self) -> bool {
        false
    }

    /// The items of `range`.
    ///
    /// # Safety
    /// Over the producer's life, each index is asked at most once (the mutable sources
    /// hand out `&mut` to it).
    #[doc(hidden)]
    unsafe fn iter(&self, range: Range<usize>, token: sealed::Token) -> Self::Iter<'_>;
}

/// Producers whose item `i` is the source's index `i` (no `filter` below): `enumerate` and
/// `zip` need them.
pub trait Indexed: Producer {}

/// The loop driver's access to a producer's items.
pub(crate) trait ProducerExt: Producer {
    /// The items of `range`. Called only by the folds that `iter/mod.rs` hands to the driver,
    /// with ranges from one `Dispenser` per loop run, which hands each index out once; a
    /// `ParIter` runs one loop (consumers take it by value).
    fn items(&self, range: Range<usize>) -> Self::Iter<'_> {
        // SAFETY: see above: each index of this producer is asked once.
        unsafe { self.iter(range, sealed::Token) }
    }
}

impl<P: Producer> ProducerExt for P {}

/// A range of integers as a producer (`into_par_iter` on `Range<T>` for every integer type up
/// to 64 bits).
#[derive(Debug, Clone)]
pub struct RangeProducer<T = usize> {
    range: Range<T>,
}

impl<T> RangeProducer<T> {
    pub(crate) fn new(range: Range<T>) -> Self {
        RangeProducer { range }
    }
}

/// The integer types a [`RangeProducer`] walks: their distance and offset in `usize`.
pub trait RangeInteger: Copy + PartialOrd + Send + Sync + sealed::Sealed
where
    Range<Self>: Iterator<Item = Self>,
{
    /// `end - start` (0 when `end <= start`), as a count of indices.
    #[doc(hidden)]
    fn distance(start: Self, end: Self) -> usize;
    /// `start + i`, for `i` at most [`RangeInteger::distance`] from `start`.
    #[doc(hidden)]
    fn offset(start: Self, i: usize) -> Self;
}

macro_rules! range_integer {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl RangeInteger for $t {
            fn distance(start: Self, end: Self) -> usize {
                // Every type here fits an i128, and a distance fits a usize on 64-bit targets.
                usize::try_from((end as i128 - start as i128).max(0)).unwrap_or(usize::MAX)
            }
            fn offset(start: Self, i: usize) -> Self {
                // In range: `i` is at most the distance to `end`, a value of the type.
                (start as i128 + i as i128) as $t
            }
        }
    )*};
}

range_integer!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

impl<T> sealed::Sealed for RangeProducer<T> {}
impl<T: RangeInteger> Indexed for RangeProducer<T> where Range<T>: Iterator<Item = T> {}

impl<T: RangeInteger> Producer for RangeProducer<T>
where
    Range<T>: Iterator<Item = T>,
{
    type Item = T;
    type Iter<'p>
        = Range<T>
    where
        Self: 'p;

    fn len(&self) -> usize {
        T::distance(self.range.start, self.range.end)
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Range<T> {
        T::offset(self.range.start, r.start)..T::offset(self.range.start, r.end)
    }
}

/// An inclusive range that yields nothing (one iterated to its end): the empty part of an
/// inclusive producer, which `a..=b` cannot write for every `a`.
fn exhausted<T>(at: T) -> std::ops::RangeInclusive<T>
where
    T: Clone,
    std::ops::RangeInclusive<T>: Iterator<Item = T>,
{
    let mut none = at.clone()..=at;
    let _ = none.next();
    none
}

/// An inclusive range of integers as a producer (`into_par_iter` on `RangeInclusive<T>`):
/// `start..=end` holds `end - start + 1` items, so it reaches the type's maximum, which a
/// `Range` cannot. (A 64-bit range of all 2^64 values counts one short of them: `usize`
/// counts the items.)
#[derive(Debug, Clone)]
pub struct RangeInclusiveProducer<T = usize> {
    start: T,
    len: usize,
}

impl<T: RangeInteger> RangeInclusiveProducer<T>
where
    Range<T>: Iterator<Item = T>,
{
    pub(crate) fn new(range: std::ops::RangeInclusive<T>) -> Self {
        let (start, end) = (*range.start(), *range.end());
        // An exhausted range (iterated to its end) is empty, as its iterator would be.
        let len = if range.is_empty() {
            0
        } else {
            T::distance(start, end).saturating_add(1)
        };
        RangeInclusiveProducer { start, len }
    }
}

impl<T> sealed::Sealed for RangeInclusiveProducer<T> {}
impl<T: RangeInteger> Indexed for RangeInclusiveProducer<T>
where
    Range<T>: Iterator<Item = T>,
    std::ops::RangeInclusive<T>: Iterator<Item = T>,
{
}

impl<T: RangeInteger> Producer for RangeInclusiveProducer<T>
where
    Range<T>: Iterator<Item = T>,
    std::ops::RangeInclusive<T>: Iterator<Item = T>,
{
    type Item = T;
    type Iter<'p>
        = std::ops::RangeInclusive<T>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.len
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        let first = T::offset(self.start, r.start);
        if r.is_empty() {
            return exhausted(first);
        }
        // `r.end - 1` is at most `len - 1`, the distance to `end`: in the type's range.
        first..=T::offset(self.start, r.end - 1)
    }
}

/// The 128-bit integer types a [`WideRange`] walks.
pub trait WideInteger: Copy + PartialOrd + Send + Sync + sealed::Sealed
where
    std::ops::RangeInclusive<Self>: Iterator<Item = Self>,
{
    /// `end - start`, for `start <= end`.
    #[doc(hidden)]
    fn span(start: Self, end: Self) -> u128;
    /// `start + k`, for `k` at most the span to a value of the type.
    #[doc(hidden)]
    fn add(start: Self, k: u128) -> Self;
}

macro_rules! wide_integer {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl WideInteger for $t {
            fn span(start: Self, end: Self) -> u128 {
                // Two's complement: the difference of two values of the type, as unsigned.
                end.wrapping_sub(start) as u128
            }
            fn add(start: Self, k: u128) -> Self {
                start.wrapping_add(k as $t)
            }
        }
    )*};
}

wide_integer!(u128, i128);

/// The most indices a [`WideRange`] has (2^48): plenty of pieces for any number of cores, and
/// far enough below `usize::MAX` that `chain` can add other iterators after one.
const WIDE_INDICES: u128 = 1 << 48;

/// A range of `u128` or `i128` as a producer (`into_par_iter` on `a..b` and `a..=b`), not
/// indexed, as rayon's: it may hold more items than `usize` counts, so each index stands for
/// `step` consecutive values (1 while the range has at most 2^48).
#[derive(Debug, Clone)]
pub struct WideRange<T> {
    start: T,
    /// The last value's offset from `start`; `None`: no values.
    last: Option<u128>,
    /// Values per index.
    step: u128,
}

impl<T: WideInteger> WideRange<T>
where
    std::ops::RangeInclusive<T>: Iterator<Item = T>,
{
    /// The values from `start` to `end`, both in, or none if `end < start`.
    fn between(start: T, end: Option<T>) -> Self {
        let last = end.filter(|e| start <= *e).map(|e| T::span(start, e));
        let step = last.map_or(1, |l| l / WIDE_INDICES + 1);
        WideRange { start, last, step }
    }

    pub(crate) fn new(range: Range<T>) -> Self {
        if range.start < range.end {
            let last = T::span(range.start, range.end) - 1;
            WideRange::between(range.start, Some(T::add(range.start, last)))
        } else {
            WideRange::between(range.start, None)
        }
    }

    pub(crate) fn new_inclusive(range: std::ops::RangeInclusive<T>) -> Self {
        // An exhausted range (iterated to its end) is empty, as its iterator would be.
        let end = (!range.is_empty()).then(|| *range.end());
        WideRange::between(*range.start(), end)
    }
}

impl<T> sealed::Sealed for WideRange<T> {}

impl<T: WideInteger> Producer for WideRange<T>
where
    std::ops::RangeInclusive<T>: Iterator<Item = T>,
{
    type Item = T;
    type Iter<'p>
        = std::ops::RangeInclusive<T>
    where
        Self: 'p;

    fn len(&self) -> usize {
        // At most `WIDE_INDICES` by the choice of `step`.
        self.last.map_or(0, |l| {
            usize::try_from(l / self.step + 1).unwrap_or(usize::MAX)
        })
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        let first = T::add(self.start, (r.start as u128).saturating_mul(self.step));
        match self.last {
            Some(last) if !r.is_empty() => {
                // Index `r.end - 1`'s last value, within the range.
                let end = ((r.end - 1) as u128 * self.step)
                    .saturating_add(self.step - 1)
                    .min(last);
                first..=T::add(self.start, end)
            }
            _ => exhausted(first),
        }
    }
}

/// The integer types whose ranges are parallel iterators (`into_par_iter` on `a..b` and
/// `a..=b`), and the producers that walk them: [`RangeProducer`] and
/// [`RangeInclusiveProducer`] (indexed) up to 64 bits, [`WideRange`] for `u128` and `i128`.
pub trait RangeItem: Sized + sealed::Sealed {
    /// The producer of `a..b`.
    type Range: Producer<Item = Self>;
    /// The producer of `a..=b`.
    type Inclusive: Producer<Item = Self>;
    /// `a..b`'s producer.
    #[doc(hidden)]
    fn range(r: Range<Self>) -> Self::Range;
    /// `a..=b`'s producer.
    #[doc(hidden)]
    fn inclusive(r: std::ops::RangeInclusive<Self>) -> Self::Inclusive;
}

macro_rules! range_item {
    ($range:ident, $inclusive:ident, $new:ident, $new_inclusive:ident; $($t:ty),*) => {$(
        impl RangeItem for $t {
            type Range = $range<$t>;
            type Inclusive = $inclusive<$t>;
            fn range(r: Range<Self>) -> Self::Range {
                $range::$new(r)
            }
            fn inclusive(r: std::ops::RangeInclusive<Self>) -> Self::Inclusive {
                $inclusive::$new_inclusive(r)
            }
        }
    )*};
}

range_item!(RangeProducer, RangeInclusiveProducer, new, new;
    u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);
range_item!(WideRange, WideRange, new, new_inclusive; u128, i128);

/// A range's producer `P` ([`RangeItem::Range`] or [`RangeItem::Inclusive`]) whose item is
/// `T` in so many words: with `T` still unknown (an unsuffixed literal), the compiler then
/// learns it from what the loop's result must be (`collect::<Vec<u64>>()`, `v[i]`), as with
/// std's ranges; through `P::Item` alone it could not, and fell back to `i32`. Indexed when
/// `P` is (every integer type up to 64 bits).
pub struct Ranged<T, P> {
    inner: P,
    _item: PhantomData<fn() -> T>,
}

impl<T, P: Clone> Clone for Ranged<T, P> {
    fn clone(&self) -> Self {
        Ranged::new(self.inner.clone())
    }
}

impl<T, P: std::fmt::Debug> std::fmt::Debug for Ranged<T, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<T, P> Ranged<T, P> {
    pub(crate) fn new(inner: P) -> Self {
        Ranged {
            inner,
            _item: PhantomData,
        }
    }
}

impl<T, P> sealed::Sealed for Ranged<T, P> {}
impl<T, P: Indexed<Item = T>> Indexed for Ranged<T, P> {}

impl<T, P: Producer<Item = T>> Producer for Ranged<T, P> {
    type Item = T;
    type Iter<'p>
        = P::Iter<'p>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.inner.len()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: forwarded with the caller's guarantee (the same indices).
        unsafe { self.inner.iter(r, token) }
    }
}

/// A range of `char`s as a producer (`into_par_iter` on `a..b` and `a..=b` of `char`): the
/// scalar values from `start`, the surrogates (`U+D800..=U+DFFF`, which are not `char`s)
/// left out, as `Range<char>`'s iterator leaves them.
#[derive(Debug, Clone)]
pub struct CharRange {
    /// `start`'s code point.
    start: u32,
    len: usize,
}

/// The surrogates' first code point and their number.
const SURROGATES: u32 = 0xD800;
const SURROGATE_COUNT: u32 = 0x800;

impl CharRange {
    /// The `char`s from `start` to `last`, both in, or none if `last < start`.
    fn between(start: char, last: Option<char>) -> Self {
        let len = match last {
            Some(last) if start <= last => {
                let span = u32::from(last) - u32::from(start) + 1;
                let skipped = if u32::from(start) < SURROGATES && u32::from(last) > SURROGATES {
                    SURROGATE_COUNT
                } else {
                    0
                };
                (span - skipped) as usize
            }
            _ => 0,
        };
        CharRange {
            start: start.into(),
            len,
        }
    }

    pub(crate) fn new(range: Range<char>) -> Self {
        // `end`'s predecessor: the code point before it, or the last one before the
        // surrogates.
        let end = u32::from(range.end);
        let last = match end {
            0 => None,
            e if e == SURROGATES + SURROGATE_COUNT => char::from_u32(SURROGATES - 1),
            e => char::from_u32(e - 1),
        };
        CharRange::between(range.start, last)
    }

    pub(crate) fn new_inclusive(range: std::ops::RangeInclusive<char>) -> Self {
        if range.is_empty() {
            return CharRange::between(*range.start(), None);
        }
        CharRange::between(*range.start(), Some(*range.end()))
    }

    /// The `char` at index `i` (at most `len - 1`).
    fn at(&self, i: usize) -> char {
        let mut cp = self.start + i as u32;
        if self.start < SURROGATES && cp >= SURROGATES {
            cp += SURROGATE_COUNT;
        }
        // Every index below `len` names a scalar value: the surrogates are stepped over.
        char::from_u32(cp).unwrap_or(char::MAX)
    }
}

impl sealed::Sealed for CharRange {}
impl Indexed for CharRange {}

impl Producer for CharRange {
    type Item = char;
    type Iter<'p> = std::ops::RangeInclusive<char>;

    fn len(&self) -> usize {
        self.len
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        let end = r.end.min(self.len);
        if r.start >= end {
            return exhausted('\0');
        }
        self.at(r.start)..=self.at(end - 1)
    }
}

/// `repeat` and `repeat_n`'s producer: `len` clones of one item. The item sits behind a lock
/// so that it need only be `Send` (rayon's bound): each part clones it once under the lock,
/// then clones that copy for its items.
#[derive(Debug)]
pub struct RepeatN<T> {
    item: std::sync::Mutex<T>,
    len: usize,
}

impl<T: Clone + Send> RepeatN<T> {
    pub(crate) fn new(item: T, len: usize) -> Self {
        RepeatN {
            item: std::sync::Mutex::new(item),
            len,
        }
    }
}

impl<T> sealed::Sealed for RepeatN<T> {}
impl<T: Clone + Send> Indexed for RepeatN<T> {}

impl<T: Clone + Send> Producer for RepeatN<T> {
    type Item = T;
    type Iter<'p>
        = std::iter::RepeatN<T>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.len
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        let n = r.end.min(self.len).saturating_sub(r.start);
        std::iter::repeat_n(crate::sync::lock_std(&self.item).clone(), n)
    }
}

/// A shared slice, element by element (`par_iter`).
#[derive(Debug, Clone)]
pub struct Slice<'data, T> {
    slice: &'data [T],
}

impl<'data, T: Sync> Slice<'data, T> {
    pub(crate) fn new(slice: &'data [T]) -> Self {
        Slice { slice }
    }
}

impl<T> sealed::Sealed for Slice<'_, T> {}
impl<T: Sync> Indexed for Slice<'_, T> {}

impl<'data, T: Sync> Producer for Slice<'data, T> {
    type Item = &'data T;
    type Iter<'p>
        = std::slice::Iter<'data, T>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.slice.len()
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        self.slice[r].iter()
    }
}

/// A vector, by value (`into_par_iter` on `Vec<T>`): each item is moved out once, to the
/// thread that asks for its index. Items no consumer asks for (a `take`, a `find_any` that
/// stopped early, a panic) are dropped with the producer; those of a part a thread began
/// but did not finish are dropped with that part's iterator.
#[derive(Debug)]
pub struct VecProducer<T> {
    ptr: *mut T,
    len: usize,
    cap: usize,
    /// The parts handed out so far: whatever lies outside them is dropped at the end.
    handed: std::sync::Mutex<Vec<Range<usize>>>,
    _own: PhantomData<T>,
}

// SAFETY: the producer owns the vector's items and moves each to one thread (see `iter`), as
// a `Vec<T>` sent to that thread would: `T: Send` is what that needs.
unsafe impl<T: Send> Send for VecProducer<T> {}
// SAFETY: as above; sharing the producer lets threads take disjoint parts, each part once.
unsafe impl<T: Send> Sync for VecProducer<T> {}

impl<T: Send> VecProducer<T> {
    pub(crate) fn new(v: Vec<T>) -> Self {
        let mut v = std::mem::ManuallyDrop::new(v);
        VecProducer {
            ptr: v.as_mut_ptr(),
            len: v.len(),
            cap: v.capacity(),
            handed: std::sync::Mutex::new(Vec::new()),
            _own: PhantomData,
        }
    }
}

impl<T> Drop for VecProducer<T> {
    fn drop(&mut self) {
        let mut handed = std::mem::take(
            self.handed
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        handed.sort_by_key(|r| r.start);
        let mut next = 0;
        let gaps = handed
            .iter()
            .map(|r| (r.start, r.end))
            .chain(std::iter::once((self.len, self.len)))
            .filter_map(|(start, end)| {
                let gap = next..start.max(next);
                next = next.max(end);
                (!gap.is_empty()).then_some(gap)
            })
            .collect::<Vec<_>>();
        drop(Unhanded {
            ptr: self.ptr,
            cap: self.cap,
            gaps: &gaps,
            next: 0,
        });
    }
}

/// What a [`VecProducer`] still owns at its end: the items of `gaps[next..]` (handed out in
/// no part), then the buffer. Dropping it drops them, and frees the buffer, even when an
/// item's drop panics: the remaining gaps are dropped while that panic unwinds (a second
/// panic then aborts, as in `Vec`'s own drop).
struct Unhanded<'g, T> {
    ptr: *mut T,
    cap: usize,
    gaps: &'g [Range<usize>],
    next: usize,
}

impl<T> Drop for Unhanded<'_, T> {
    fn drop(&mut self) {
        while let Some(gap) = self.gaps.get(self.next).cloned() {
            self.next += 1;
            // Drops what follows if this gap's drop panics (this call would stop there).
            let rest = Unhanded {
                ptr: self.ptr,
                cap: self.cap,
                gaps: self.gaps,
                next: self.next,
            };
            // SAFETY: no part handed out covers `gap`, so its items are still in the buffer,
            // initialised, and nobody else reads them; each gap is dropped once (`next` moved
            // past it first, and `rest` starts after it).
            unsafe {
                std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                    self.ptr.add(gap.start),
                    gap.len(),
                ));
            }
            std::mem::forget(rest);
        }
        // SAFETY: `ptr` and `cap` come from a `Vec<T>` the producer owned; its length is now
        // 0, every item having been moved out or dropped above. Reached once: by this value,
        // or by the `rest` of the gap whose drop panicked (which forgot nothing).
        drop(unsafe { Vec::from_raw_parts(self.ptr, 0, self.cap) });
    }
}

impl<T> sealed::Sealed for VecProducer<T> {}
impl<T: Send> Indexed for VecProducer<T> {}

impl<T: Send> Producer for VecProducer<T> {
    type Item = T;
    type Iter<'p>
        = VecPart<'p, T>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.len
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        let (start, end) = (r.start.min(self.len), r.end.min(self.len));
        let end = end.max(start);
        crate::sync::lock_std(&self.handed).push(start..end);
        VecPart {
            ptr: self.ptr,
            next: start,
            end,
            _producer: PhantomData,
        }
    }
}

/// The items of one part of a [`VecProducer`], moved out one by one; those not taken are
/// dropped with it.
#[derive(Debug)]
pub struct VecPart<'p, T> {
    ptr: *mut T,
    next: usize,
    end: usize,
    _producer: PhantomData<&'p VecProducer<T>>,
}

impl<T> Iterator for VecPart<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.next >= self.end {
            return None;
        }
        // SAFETY: this part was handed out once (contract of `Producer::iter`) and `next` is
        // within it: the item is initialised and read exactly once, here.
        let item = unsafe { self.ptr.add(self.next).read() };
        self.next += 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl<T> Drop for VecPart<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the items `next..end` of this part were not moved out, and only this part
        // may touch them.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.ptr.add(self.next),
                self.end - self.next,
            ));
        }
    }
}

/// A shared slice in sub-slices of `size` elements, cut as `S` says: [`Chunks`]
/// (`par_chunks`), [`ChunksExact`] (`par_chunks_exact`), [`Windows`] (`par_windows`).
#[derive(Debug)]
pub struct SubSlices<'data, T, S> {
    slice: &'data [T],
    size: usize,
    _split: PhantomData<S>,
}

impl<T, S> Clone for SubSlices<'_, T, S> {
    fn clone(&self) -> Self {
        SubSlices {
            slice: self.slice,
            size: self.size,
            _split: PhantomData,
        }
    }
}

impl<'data, T: Sync, S> SubSlices<'data, T, S> {
    /// `size` 0 is taken as 1.
    pub(crate) fn new(slice: &'data [T], size: usize) -> Self {
        SubSlices {
            slice,
            size: size.max(1),
            _split: PhantomData,
        }
    }
}

/// How [`SubSlices`] cuts a slice: how many sub-slices, and those of a range of them.
pub trait Split: Sync + sealed::Sealed {
    /// The sub-slices of part of the slice.
    type Iter<'data, T: 'data>: Iterator<Item = &'data [T]>;
    /// How many sub-slices of `size` a slice of `len` elements makes.
    #[doc(hidden)]
    fn count(len: usize, size: usize) -> usize;
    /// Sub-slices `r` of `slice`.
    #[doc(hidden)]
    fn cut<T>(slice: &[T], size: usize, r: Range<usize>) -> Self::Iter<'_, T>;
}

/// `par_chunks`: `size` elements each, the last maybe fewer.
#[derive(Debug, Clone, Copy)]
pub struct ByChunks;

/// `par_chunks_exact`: exactly `size` elements each; the remainder is left out
/// (`slice.chunks_exact(size).remainder()` has it).
#[derive(Debug, Clone, Copy)]
pub struct ByExactChunks;

/// `par_windows`: every run of `size` consecutive elements.
#[derive(Debug, Clone, Copy)]
pub struct ByWindows;

impl sealed::Sealed for ByChunks {}
impl sealed::Sealed for ByExactChunks {}
impl sealed::Sealed for ByWindows {}

/// `par_rchunks`: `size` elements each from the end, the last (the slice's start) maybe
/// fewer.
#[derive(Debug, Clone, Copy)]
pub struct ByRChunks;

/// `par_rchunks_exact`: exactly `size` elements each from the end; the first `len % size`
/// elements are left out.
#[derive(Debug, Clone, Copy)]
pub struct ByRExactChunks;

impl sealed::Sealed for ByRChunks {}
impl sealed::Sealed for ByRExactChunks {}

/// The cuts of [`Split`] into runs of `size` elements, which a mutable slice can be cut into
/// too ([`SubSlicesMut`]): the element range that chunks `r` cover, and those chunks of it.
pub trait SplitMut: Split {
    /// The mutable sub-slices of part of the slice.
    type IterMut<'data, T: 'data>: Iterator<Item = &'data mut [T]>;
    /// The elements that chunks `r` cover, in a slice of `len`: disjoint for disjoint `r`.
    #[doc(hidden)]
    fn elems(len: usize, size: usize, r: Range<usize>) -> Range<usize>;
    /// `part`, the elements of some chunks ([`SplitMut::elems`]), cut into them.
    #[doc(hidden)]
    fn cut_mut<T>(part: &mut [T], size: usize) -> Self::IterMut<'_, T>;
}

impl Split for ByChunks {
    type Iter<'data, T: 'data> = std::slice::Chunks<'data, T>;
    fn count(len: usize, size: usize) -> usize {
        len.div_ceil(size)
    }
    fn cut<T>(slice: &[T], size: usize, r: Range<usize>) -> Self::Iter<'_, T> {
        slice[Self::elems(slice.len(), size, r)].chunks(size)
    }
}

impl SplitMut for ByChunks {
    type IterMut<'data, T: 'data> = std::slice::ChunksMut<'data, T>;
    fn elems(len: usize, size: usize, r: Range<usize>) -> Range<usize> {
        r.start.saturating_mul(size).min(len)..r.end.saturating_mul(size).min(len)
    }
    fn cut_mut<T>(part: &mut [T], size: usize) -> Self::IterMut<'_, T> {
        part.chunks_mut(size)
    }
}

impl Split for ByExactChunks {
    type Iter<'data, T: 'data> = std::slice::ChunksExact<'data, T>;
    fn count(len: usize, size: usize) -> usize {
        len / size
    }
    fn cut<T>(slice: &[T], size: usize, r: Range<usize>) -> Self::Iter<'_, T> {
        slice[Self::elems(slice.len(), size, r)].chunks_exact(size)
    }
}

impl SplitMut for ByExactChunks {
    type IterMut<'data, T: 'data> = std::slice::ChunksExactMut<'data, T>;
    fn elems(_: usize, size: usize, r: Range<usize>) -> Range<usize> {
        r.start * size..r.end * size
    }
    fn cut_mut<T>(part: &mut [T], size: usize) -> Self::IterMut<'_, T> {
        part.chunks_exact_mut(size)
    }
}

impl Split for ByRChunks {
    type Iter<'data, T: 'data> = std::slice::RChunks<'data, T>;
    fn count(len: usize, size: usize) -> usize {
        len.div_ceil(size)
    }
    fn cut<T>(slice: &[T], size: usize, r: Range<usize>) -> Self::Iter<'_, T> {
        slice[Self::elems(slice.len(), size, r)].rchunks(size)
    }
}

impl SplitMut for ByRChunks {
    type IterMut<'data, T: 'data> = std::slice::RChunksMut<'data, T>;
    /// Chunk `i` ends `i * size` elements before the slice's end: the part's end is a chunk's
    /// end, so `rchunks` of it gives chunks `r` in order, the slice's first (short) chunk last.
    fn elems(len: usize, size: usize, r: Range<usize>) -> Range<usize> {
        let from_end = |chunks: usize| len.saturating_sub(chunks.saturating_mul(size));
        from_end(r.end)..from_end(r.start)
    }
    fn cut_mut<T>(part: &mut [T], size: usize) -> Self::IterMut<'_, T> {
        part.rchunks_mut(size)
    }
}

impl Split for ByRExactChunks {
    type Iter<'data, T: 'data> = std::slice::RChunksExact<'data, T>;
    fn count(len: usize, size: usize) -> usize {
        len / size
    }
    fn cut<T>(slice: &[T], size: usize, r: Range<usize>) -> Self::Iter<'_, T> {
        slice[Self::elems(slice.len(), size, r)].rchunks_exact(size)
    }
}

impl SplitMut for ByRExactChunks {
    type IterMut<'data, T: 'data> = std::slice::RChunksExactMut<'data, T>;
    fn elems(len: usize, size: usize, r: Range<usize>) -> Range<usize> {
        len - r.end * size..len - r.start * size
    }
    fn cut_mut<T>(part: &mut [T], size: usize) -> Self::IterMut<'_, T> {
        part.rchunks_exact_mut(size)
    }
}

impl Split for ByWindows {
    type Iter<'data, T: 'data> = std::slice::Windows<'data, T>;
    fn count(len: usize, size: usize) -> usize {
        // `len - size + 1` windows; written so that `len == usize::MAX` (a slice of
        // zero-sized elements) does not overflow. `size` is at least 1.
        len.saturating_sub(size - 1)
    }
    fn cut<T>(slice: &[T], size: usize, r: Range<usize>) -> Self::Iter<'_, T> {
        let end = if r.is_empty() {
            r.start
        } else {
            r.end + size - 1
        };
        slice[r.start..end].windows(size)
    }
}

/// `par_chunks`'s producer.
pub type Chunks<'data, T> = SubSlices<'data, T, ByChunks>;
/// `par_chunks_exact`'s producer.
pub type ChunksExact<'data, T> = SubSlices<'data, T, ByExactChunks>;
/// `par_windows`'s producer.
pub type Windows<'data, T> = SubSlices<'data, T, ByWindows>;
/// `par_rchunks`'s producer.
pub type RChunks<'data, T> = SubSlices<'data, T, ByRChunks>;
/// `par_rchunks_exact`'s producer.
pub type RChunksExact<'data, T> = SubSlices<'data, T, ByRExactChunks>;

impl<T, S> sealed::Sealed for SubSlices<'_, T, S> {}
impl<T: Sync, S: Split> Indexed for SubSlices<'_, T, S> {}

impl<'data, T: Sync, S: Split> Producer for SubSlices<'data, T, S> {
    type Item = &'data [T];
    type Iter<'p>
        = S::Iter<'data, T>
    where
        Self: 'p;

    fn len(&self) -> usize {
        S::count(self.slice.len(), self.size)
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        S::cut(self.slice, self.size, r)
    }
}

/// `par_array_windows`'s producer: every run of `N` consecutive elements (`N` 0 taken as 1
/// for the count: one empty array per element), as a reference to an array.
#[derive(Debug)]
pub struct ArrayWindows<'data, T, const N: usize> {
    slice: &'data [T],
}

impl<T, const N: usize> Clone for ArrayWindows<'_, T, N> {
    fn clone(&self) -> Self {
        ArrayWindows { slice: self.slice }
    }
}

impl<'data, T: Sync, const N: usize> ArrayWindows<'data, T, N> {
    pub(crate) fn new(slice: &'data [T]) -> Self {
        ArrayWindows { slice }
    }
}

impl<T, const N: usize> sealed::Sealed for ArrayWindows<'_, T, N> {}
impl<T: Sync, const N: usize> Indexed for ArrayWindows<'_, T, N> {}

impl<'data, T: Sync, const N: usize> Producer for ArrayWindows<'data, T, N> {
    type Item = &'data [T; N];
    type Iter<'p>
        = ArrayWindowsPart<'data, T, N>
    where
        Self: 'p;

    fn len(&self) -> usize {
        ByWindows::count(self.slice.len(), N.max(1))
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        ArrayWindowsPart {
            windows: ByWindows::cut(self.slice, N.max(1), r),
        }
    }
}

/// A part's windows as array references ([`ArrayWindows`]).
#[derive(Debug)]
pub struct ArrayWindowsPart<'data, T, const N: usize> {
    windows: std::slice::Windows<'data, T>,
}

impl<'data, T, const N: usize> Iterator for ArrayWindowsPart<'data, T, N> {
    type Item = &'data [T; N];

    fn next(&mut self) -> Option<&'data [T; N]> {
        // Each window holds `N.max(1)` elements: its first `N` always exist.
        self.windows.next()?.first_chunk()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.windows.size_hint()
    }
}

/// A mutable slice, element by element (`par_iter_mut`).
#[derive(Debug)]
pub struct SliceMut<'data, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'data mut [T]>,
}

// SAFETY: the producer stands for a `&'data mut [T]`, which is `Send` and `Sync` when `T` is
// `Send` (only `&mut T` to distinct elements leave it: see `iter`).
unsafe impl<T: Send> Send for SliceMut<'_, T> {}
// SAFETY: as above; sharing the producer lets threads ask for disjoint parts.
unsafe impl<T: Send> Sync for SliceMut<'_, T> {}

impl<'data, T: Send> SliceMut<'data, T> {
    pub(crate) fn new(slice: &'data mut [T]) -> Self {
        SliceMut {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            _borrow: PhantomData,
        }
    }
}

/// The mutable sub-slice `r` (clamped to `len`) of the slice at `ptr`.
///
/// # Safety
/// `ptr..ptr + len` is a live `&'data mut [T]` that nothing else uses meanwhile, and no two
/// calls ask overlapping ranges.
unsafe fn sub_slice_mut<'data, T>(ptr: *mut T, len: usize, r: Range<usize>) -> &'data mut [T] {
    let (start, end) = (r.start.min(len), r.end.min(len));
    // SAFETY: `start..end` lies within the slice (clamped); the range is asked once, so this is
    // the only reference to these elements (contract above).
    unsafe { std::slice::from_raw_parts_mut(ptr.add(start), end.saturating_sub(start)) }
}

impl<T> sealed::Sealed for SliceMut<'_, T> {}
impl<T: Send> Indexed for SliceMut<'_, T> {}

impl<'data, T: Send> Producer for SliceMut<'data, T> {
    type Item = &'data mut T;
    type Iter<'p>
        = std::slice::IterMut<'data, T>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.len
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: the producer holds the slice's unique borrow for 'data, and each index is
        // asked once (contract of `Producer::iter`).
        unsafe { sub_slice_mut(self.ptr, self.len, r) }.iter_mut()
    }
}

/// A mutable slice in sub-slices of `size` elements, cut as `S` says: [`ChunksMut`]
/// (`par_chunks_mut`), [`ChunksExactMut`], [`RChunksMut`], [`RChunksExactMut`].
#[derive(Debug)]
pub struct SubSlicesMut<'data, T, S> {
    slice: SliceMut<'data, T>,
    size: usize,
    _split: PhantomData<S>,
}

impl<'data, T: Send, S> SubSlicesMut<'data, T, S> {
    /// `size` 0 is taken as 1.
    pub(crate) fn new(slice: &'data mut [T], size: usize) -> Self {
        SubSlicesMut {
            slice: SliceMut::new(slice),
            size: size.max(1),
            _split: PhantomData,
        }
    }
}

/// `par_chunks_mut`'s producer.
pub type ChunksMut<'data, T> = SubSlicesMut<'data, T, ByChunks>;
/// `par_chunks_exact_mut`'s producer.
pub type ChunksExactMut<'data, T> = SubSlicesMut<'data, T, ByExactChunks>;
/// `par_rchunks_mut`'s producer.
pub type RChunksMut<'data, T> = SubSlicesMut<'data, T, ByRChunks>;
/// `par_rchunks_exact_mut`'s producer.
pub type RChunksExactMut<'data, T> = SubSlicesMut<'data, T, ByRExactChunks>;

impl<T, S> sealed::Sealed for SubSlicesMut<'_, T, S> {}
impl<T: Send, S: SplitMut> Indexed for SubSlicesMut<'_, T, S> {}

impl<'data, T: Send, S: SplitMut> Producer for SubSlicesMut<'data, T, S> {
    type Item = &'data mut [T];
    type Iter<'p>
        = S::IterMut<'data, T>
    where
        Self: 'p;

    fn len(&self) -> usize {
        S::count(self.slice.len, self.size)
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        let elems = S::elems(self.slice.len, self.size, r);
        // SAFETY: chunk ranges asked once map to element ranges asked once (disjoint `r`s
        // give disjoint `elems`, contract of `SplitMut::elems` and of `Producer::iter`),
        // within the unique borrow the producer holds.
        S::cut_mut(
            unsafe { sub_slice_mut(self.slice.ptr, self.slice.len, elems) },
            self.size,
        )
    }
}

/// `chunks`' producer on an indexed iterator: the base's items gathered `size` at a time into
/// vectors (the last maybe shorter).
#[derive(Debug, Clone)]
pub struct ItemChunks<P> {
    base: P,
    size: usize,
}

impl<P> ItemChunks<P> {
    /// `size` 0 is taken as 1.
    pub(crate) fn new(base: P, size: usize) -> Self {
        ItemChunks {
            base,
            size: size.max(1),
        }
    }
}

impl<P> sealed::Sealed for ItemChunks<P> {}
impl<P: Indexed> Indexed for ItemChunks<P> {}

impl<P: Indexed> Producer for ItemChunks<P> {
    type Item = Vec<P::Item>;
    type Iter<'p>
        = Gathered<P::Iter<'p>>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len().div_ceil(self.size)
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        let n = self.base.len();
        let at = |chunk: usize| chunk.saturating_mul(self.size).min(n);
        let elems = at(r.start)..at(r.end);
        Gathered {
            // SAFETY: forwarded with the caller's guarantee (disjoint chunk ranges cover
            // disjoint item ranges).
            items: unsafe { self.base.iter(elems, token) },
            size: self.size,
        }
    }
}

/// A sequential iterator's items, `size` at a time ([`ItemChunks`]).
#[derive(Debug)]
pub struct Gathered<I> {
    items: I,
    size: usize,
}

impl<I: Iterator> Iterator for Gathered<I> {
    type Item = Vec<I::Item>;

    fn next(&mut self) -> Option<Vec<I::Item>> {
        let chunk: Vec<I::Item> = self.items.by_ref().take(self.size).collect();
        (!chunk.is_empty()).then_some(chunk)
    }
}

/// `take_any`'s producer: the base's items, from any part, until `n` have passed; from then on
/// each part stops before making another, and the producer is `full` (no more chunks).
#[derive(Debug)]
pub struct TakeAny<P> {
    base: P,
    n: usize,
    taken: AtomicUsize,
}

impl<P> TakeAny<P> {
    pub(crate) fn new(base: P, n: usize) -> Self {
        TakeAny {
            base,
            n,
            taken: AtomicUsize::new(0),
        }
    }
}

impl<P> sealed::Sealed for TakeAny<P> {}

impl<P: Producer> Producer for TakeAny<P> {
    type Item = P::Item;
    type Iter<'p>
        = TakeAnyIter<'p, P::Iter<'p>>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len()
    }

    fn full(&self) -> bool {
        self.taken.load(Ordering::Relaxed) >= self.n || self.base.full()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        TakeAnyIter {
            // SAFETY: forwarded with the caller's guarantee (the same indices).
            items: unsafe { self.base.iter(r, token) },
            taken: &self.taken,
            n: self.n,
        }
    }
}

/// A part's items while the loop's count of taken items is below `n` ([`TakeAny`]).
#[derive(Debug)]
pub struct TakeAnyIter<'a, I> {
    items: I,
    taken: &'a AtomicUsize,
    n: usize,
}

impl<I: Iterator> Iterator for TakeAnyIter<'_, I> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        if self.taken.load(Ordering::Relaxed) >= self.n {
            return None;
        }
        let item = self.items.next()?;
        (self.taken.fetch_add(1, Ordering::Relaxed) < self.n).then_some(item)
    }
}

/// `while_some`'s producer: the values of the base's `Some` items until some part meets a
/// `None`; from then on each part stops before making another item.
#[derive(Debug)]
pub struct WhileSome<P> {
    base: P,
    ended: AtomicBool,
}

impl<P> WhileSome<P> {
    pub(crate) fn new(base: P) -> Self {
        WhileSome {
            base,
            ended: AtomicBool::new(false),
        }
    }
}

impl<P> sealed::Sealed for WhileSome<P> {}

impl<T, P: Producer<Item = Option<T>>> Producer for WhileSome<P> {
    type Item = T;
    type Iter<'p>
        = WhileSomeIter<'p, P::Iter<'p>>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len()
    }

    fn full(&self) -> bool {
        self.ended.load(Ordering::Relaxed) || self.base.full()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        WhileSomeIter {
            // SAFETY: forwarded with the caller's guarantee (the same indices).
            items: unsafe { self.base.iter(r, token) },
            ended: &self.ended,
        }
    }
}

/// A part's `Some` values until the loop has met a `None` ([`WhileSome`]).
#[derive(Debug)]
pub struct WhileSomeIter<'a, I> {
    items: I,
    ended: &'a AtomicBool,
}

impl<T, I: Iterator<Item = Option<T>>> Iterator for WhileSomeIter<'_, I> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.ended.load(Ordering::Relaxed) {
            return None;
        }
        let item = self.items.next()?;
        if item.is_none() {
            self.ended.store(true, Ordering::Relaxed);
        }
        item
    }
}

/// `map`'s producer.
#[derive(Debug, Clone)]
pub struct Map<P, F> {
    base: P,
    f: F,
}

impl<P, F> Map<P, F> {
    pub(crate) fn new(base: P, f: F) -> Self {
        Map { base, f }
    }
}

impl<P, F> sealed::Sealed for Map<P, F> {}
impl<P: Indexed, F: Fn(P::Item) -> R + Sync, R> Indexed for Map<P, F> {}

impl<P: Producer, F: Fn(P::Item) -> R + Sync, R> Producer for Map<P, F> {
    type Item = R;
    type Iter<'p>
        = std::iter::Map<P::Iter<'p>, &'p F>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len()
    }

    fn full(&self) -> bool {
        self.base.full()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.base.iter(r, token) }.map(&self.f)
    }
}

/// `map_init`'s producer: each part of the loop (a chunk a thread takes) makes its own state
/// with `init`, and maps its items with it.
#[derive(Debug, Clone)]
pub struct MapInit<P, INIT, F> {
    base: P,
    init: INIT,
    f: F,
}

impl<P, INIT, F> MapInit<P, INIT, F> {
    pub(crate) fn new(base: P, init: INIT, f: F) -> Self {
        MapInit { base, init, f }
    }
}

impl<P, INIT, F> sealed::Sealed for MapInit<P, INIT, F> {}
impl<P, INIT, F, T, R> Indexed for MapInit<P, INIT, F>
where
    P: Indexed,
    INIT: Fn() -> T + Sync,
    F: Fn(&mut T, P::Item) -> R + Sync,
{
}

impl<P, INIT, F, T, R> Producer for MapInit<P, INIT, F>
where
    P: Producer,
    INIT: Fn() -> T + Sync,
    F: Fn(&mut T, P::Item) -> R + Sync,
{
    type Item = R;
    type Iter<'p>
        = MapInitPart<'p, P::Iter<'p>, T, F>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len()
    }

    fn full(&self) -> bool {
        self.base.full()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        MapInitPart {
            // SAFETY: forwarded with the caller's guarantee.
            base: unsafe { self.base.iter(r, token) },
            state: (self.init)(),
            f: &self.f,
        }
    }
}

/// One part of a [`MapInit`]: its items, mapped with its own state.
#[derive(Debug)]
pub struct MapInitPart<'p, I, T, F> {
    base: I,
    state: T,
    f: &'p F,
}

impl<I: Iterator, T, F: Fn(&mut T, I::Item) -> R, R> Iterator for MapInitPart<'_, I, T, F> {
    type Item = R;

    fn next(&mut self) -> Option<R> {
        let item = self.base.next()?;
        Some((self.f)(&mut self.state, item))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.base.size_hint()
    }
}

/// `fold`'s producer: the base's indices cut into `blocks` blocks of about equal length; item
/// `b` is the fold of block `b`'s items, from `identity()`. Lazy, as rayon's: the loop that
/// consumes the accumulators is the one that folds them.
#[derive(Debug, Clone)]
pub struct FoldBlocks<P, ID, F> {
    base: P,
    identity: ID,
    fold: F,
    blocks: usize,
    /// The loop's blocks in turn, each cut into this many of the fold's blocks.
    staged: Option<(InTurn, usize)>,
}

impl<P: Producer, ID, F> FoldBlocks<P, ID, F> {
    /// `blocks` is brought within `limits` (blocks of at least `min` and at most `max` of the
    /// base's items, `min` winning) and clamped to the base's length (at least one block, so
    /// that an empty loop still folds to `identity()`). A loop run in turns (`in_turn`)
    /// instead has [`InTurn::fold_blocks`] blocks in each of its turns' blocks (the limits
    /// are not applied then): no fold block spans two turns.
    pub(crate) fn new(
        base: P,
        identity: ID,
        fold: F,
        blocks: usize,
        limits: ChunkLimits,
        in_turn: Option<InTurn>,
    ) -> Self {
        let len = base.len();
        let (blocks, staged) = match in_turn {
            Some(t) => {
                let each = t.fold_blocks(blocks);
                (t.count(len).saturating_mul(each), Some((t, each)))
            }
            None => {
                let blocks = blocks
                    .max(len.div_ceil(limits.max.max(1)))
                    .min(len / limits.min.max(1))
                    .clamp(1, len.max(1));
                (blocks, None)
            }
        };
        FoldBlocks {
            base,
            identity,
            fold,
            blocks,
            staged,
        }
    }

    /// The base's indices of block `b`.
    fn block(&self, b: usize) -> Range<usize> {
        let len = self.base.len();
        let (within, count, first) = match self.staged {
            Some((t, each)) => (t.block(b / each, len), each, b / each * each),
            None => (0..len, self.blocks, 0),
        };
        let at =
            |k: usize| within.start + (within.len() as u128 * k as u128 / count as u128) as usize;
        at(b - first)..at(b - first + 1)
    }
}

impl<P, ID, F> sealed::Sealed for FoldBlocks<P, ID, F> {}

impl<P, ID, F, T> Producer for FoldBlocks<P, ID, F>
where
    P: Producer,
    ID: Fn() -> T + Sync,
    F: Fn(T, P::Item) -> T + Sync,
{
    type Item = T;
    type Iter<'p>
        = FoldBlocksPart<'p, P, ID, F>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.blocks
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        let end = r.end.min(self.blocks);
        FoldBlocksPart {
            producer: self,
            next: r.start.min(end),
            end,
        }
    }
}

/// The accumulators of some blocks of a [`FoldBlocks`], each folded when it is asked for.
#[derive(Debug)]
pub struct FoldBlocksPart<'p, P, ID, F> {
    producer: &'p FoldBlocks<P, ID, F>,
    next: usize,
    end: usize,
}

impl<P, ID, F, T> Iterator for FoldBlocksPart<'_, P, ID, F>
where
    P: Producer,
    ID: Fn() -> T + Sync,
    F: Fn(T, P::Item) -> T + Sync,
{
    type Item = T;

    fn next(&mut self) -> Option<T> {
        let p = self.producer;
        let items = self.next_block()?;
        Some(items.fold((p.identity)(), &p.fold))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl<'p, P: Producer, ID, F> FoldBlocksPart<'p, P, ID, F> {
    /// The base's items of the next block, or `None` past the last.
    fn next_block(&mut self) -> Option<P::Iter<'p>> {
        if self.next >= self.end {
            return None;
        }
        let p = self.producer;
        let block = p.block(self.next);
        self.next += 1;
        // SAFETY: blocks are disjoint ranges of the base's indices, and block `next` is asked
        // once: this part covers blocks `next..end`, which its caller asked once (contract of
        // `Producer::iter`), and `next` only moves forward.
        Some(unsafe { p.base.iter(block, sealed::Token) })
    }
}

/// `try_fold`'s producer: [`FoldBlocks`] whose fold step may break. Item `b` folds block `b`
/// from `identity()` until a step gives `Break`, whose value it is: no item of the block
/// after that one is made (rayon's `try_fold` stops "the local set of items" at its first
/// failure). The blocks after it fold as usual.
#[derive(Debug, Clone)]
pub struct TryFoldBlocks<P, ID, F>(FoldBlocks<P, ID, F>);

impl<P: Producer, ID, F> TryFoldBlocks<P, ID, F> {
    /// As [`FoldBlocks::new`].
    pub(crate) fn new(
        base: P,
        identity: ID,
        step: F,
        blocks: usize,
        limits: ChunkLimits,
        in_turn: Option<InTurn>,
    ) -> Self {
        TryFoldBlocks(FoldBlocks::new(
            base, identity, step, blocks, limits, in_turn,
        ))
    }
}

impl<P, ID, F> sealed::Sealed for TryFoldBlocks<P, ID, F> {}

impl<P, ID, F, R> Producer for TryFoldBlocks<P, ID, F>
where
    P: Producer,
    ID: Fn() -> R + Sync,
    F: Fn(R, P::Item) -> ControlFlow<R, R> + Sync,
{
    type Item = R;
    type Iter<'p>
        = TryFoldBlocksPart<'p, P, ID, F>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.0.blocks
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        let end = r.end.min(self.0.blocks);
        TryFoldBlocksPart(FoldBlocksPart {
            producer: &self.0,
            next: r.start.min(end),
            end,
        })
    }
}

/// The results of some blocks of a [`TryFoldBlocks`], each folded when it is asked for.
#[derive(Debug)]
pub struct TryFoldBlocksPart<'p, P, ID, F>(FoldBlocksPart<'p, P, ID, F>);

impl<P, ID, F, R> Iterator for TryFoldBlocksPart<'_, P, ID, F>
where
    P: Producer,
    ID: Fn() -> R + Sync,
    F: Fn(R, P::Item) -> ControlFlow<R, R> + Sync,
{
    type Item = R;

    fn next(&mut self) -> Option<R> {
        let p = self.0.producer;
        let mut items = self.0.next_block()?;
        let (ControlFlow::Continue(r) | ControlFlow::Break(r)) =
            items.try_fold((p.identity)(), &p.fold);
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.0.end - self.0.next;
        (n, Some(n))
    }
}

/// `filter`'s producer.
#[derive(Debug, Clone)]
pub struct Filter<P, F> {
    base: P,
    f: F,
}

impl<P, F> Filter<P, F> {
    pub(crate) fn new(base: P, f: F) -> Self {
        Filter { base, f }
    }
}

impl<P, F> sealed::Sealed for Filter<P, F> {}

impl<P: Producer, F: Fn(&P::Item) -> bool + Sync> Producer for Filter<P, F> {
    type Item = P::Item;
    type Iter<'p>
        = std::iter::Filter<P::Iter<'p>, &'p F>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len()
    }

    fn full(&self) -> bool {
        self.base.full()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.base.iter(r, token) }.filter(&self.f)
    }
}

/// `filter_map`'s producer.
#[derive(Debug, Clone)]
pub struct FilterMap<P, F> {
    base: P,
    f: F,
}

impl<P, F> FilterMap<P, F> {
    pub(crate) fn new(base: P, f: F) -> Self {
        FilterMap { base, f }
    }
}

impl<P, F> sealed::Sealed for FilterMap<P, F> {}

impl<P: Producer, F: Fn(P::Item) -> Option<R> + Sync, R> Producer for FilterMap<P, F> {
    type Item = R;
    type Iter<'p>
        = std::iter::FilterMap<P::Iter<'p>, &'p F>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len()
    }

    fn full(&self) -> bool {
        self.base.full()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.base.iter(r, token) }.filter_map(&self.f)
    }
}

/// `flat_map_iter`'s producer: each item becomes a sequential iterator, run where the item is.
#[derive(Debug, Clone)]
pub struct FlatMapIter<P, F> {
    base: P,
    f: F,
}

impl<P, F> FlatMapIter<P, F> {
    pub(crate) fn new(base: P, f: F) -> Self {
        FlatMapIter { base, f }
    }
}

impl<P, F> sealed::Sealed for FlatMapIter<P, F> {}

impl<P: Producer, F: Fn(P::Item) -> U + Sync, U: IntoIterator> Producer for FlatMapIter<P, F> {
    type Item = U::Item;
    type Iter<'p>
        = std::iter::FlatMap<P::Iter<'p>, U, &'p F>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len()
    }

    fn full(&self) -> bool {
        self.base.full()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.base.iter(r, token) }.flat_map(&self.f)
    }
}

/// `inspect`'s producer.
#[derive(Debug, Clone)]
pub struct Inspect<P, F> {
    base: P,
    f: F,
}

impl<P, F> Inspect<P, F> {
    pub(crate) fn new(base: P, f: F) -> Self {
        Inspect { base, f }
    }
}

impl<P, F> sealed::Sealed for Inspect<P, F> {}
impl<P: Indexed, F: Fn(&P::Item) + Sync> Indexed for Inspect<P, F> {}

impl<P: Producer, F: Fn(&P::Item) + Sync> Producer for Inspect<P, F> {
    type Item = P::Item;
    type Iter<'p>
        = std::iter::Inspect<P::Iter<'p>, &'p F>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len()
    }

    fn full(&self) -> bool {
        self.base.full()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.base.iter(r, token) }.inspect(&self.f)
    }
}

/// `copied`'s producer: items by reference, copied.
#[derive(Debug, Clone)]
pub struct Copied<P> {
    base: P,
}

impl<P> Copied<P> {
    pub(crate) fn new(base: P) -> Self {
        Copied { base }
    }
}

impl<P> sealed::Sealed for Copied<P> {}
impl<'a, T: Copy + 'a, P: Indexed<Item = &'a T>> Indexed for Copied<P> {}

impl<'a, T: Copy + 'a, P: Producer<Item = &'a T>> Producer for Copied<P> {
    type Item = T;
    type Iter<'p>
        = std::iter::Copied<P::Iter<'p>>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len()
    }

    fn full(&self) -> bool {
        self.base.full()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.base.iter(r, token) }.copied()
    }
}

/// `cloned`'s producer: items by reference, cloned.
#[derive(Debug, Clone)]
pub struct Cloned<P> {
    base: P,
}

impl<P> Cloned<P> {
    pub(crate) fn new(base: P) -> Self {
        Cloned { base }
    }
}

impl<P> sealed::Sealed for Cloned<P> {}
impl<'a, T: Clone + 'a, P: Indexed<Item = &'a T>> Indexed for Cloned<P> {}

impl<'a, T: Clone + 'a, P: Producer<Item = &'a T>> Producer for Cloned<P> {
    type Item = T;
    type Iter<'p>
        = std::iter::Cloned<P::Iter<'p>>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len()
    }

    fn full(&self) -> bool {
        self.base.full()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.base.iter(r, token) }.cloned()
    }
}

/// `enumerate`'s producer.
#[derive(Debug, Clone)]
pub struct Enumerate<P> {
    base: P,
}

impl<P> Enumerate<P> {
    pub(crate) fn new(base: P) -> Self {
        Enumerate { base }
    }
}

impl<P> sealed::Sealed for Enumerate<P> {}
impl<P: Indexed> Indexed for Enumerate<P> {}

impl<P: Indexed> Producer for Enumerate<P> {
    type Item = (usize, P::Item);
    type Iter<'p>
        = std::iter::Zip<Range<usize>, P::Iter<'p>>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: forwarded with the caller's guarantee.
        r.clone().zip(unsafe { self.base.iter(r, token) })
    }
}

/// `zip`'s producer.
#[derive(Debug, Clone)]
pub struct Zip<A, B> {
    a: A,
    b: B,
}

impl<A, B> Zip<A, B> {
    pub(crate) fn new(a: A, b: B) -> Self {
        Zip { a, b }
    }
}

impl<A, B> sealed::Sealed for Zip<A, B> {}
impl<A: Indexed, B: Indexed> Indexed for Zip<A, B> {}

impl<A: Indexed, B: Indexed> Producer for Zip<A, B> {
    type Item = (A::Item, B::Item);
    type Iter<'p>
        = std::iter::Zip<A::Iter<'p>, B::Iter<'p>>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.a.len().min(self.b.len())
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: forwarded with the caller's guarantee (`r` lies within both: `len` is the
        // shorter's); `Token` is a proof, not a resource, so the second is made here.
        unsafe {
            self.a
                .iter(r.clone(), token)
                .zip(self.b.iter(r, sealed::Token))
        }
    }
}

/// `interleave`'s producer: `a`'s and `b`'s items in turn, `a`'s first, then the rest of the
/// longer one. Index `2k` is `a`'s `k` and `2k + 1` is `b`'s `k` while both have items
/// (below twice the shorter's length `m`); index `2m + j` is the longer's `m + j`.
#[derive(Debug, Clone)]
pub struct Interleave<A, B> {
    a: A,
    b: B,
}

impl<A: Producer, B: Producer> Interleave<A, B> {
    /// Panics if the two lengths' sum overflows `usize` (as rayon's).
    #[track_caller]
    pub(crate) fn new(a: A, b: B) -> Self {
        total_len("interleave", &a, &b);
        Interleave { a, b }
    }
}

/// `a`'s and `b`'s lengths added; panics, naming `call`, if that overflows `usize`: no
/// index could reach the items past it.
#[track_caller]
fn total_len(call: &str, a: &impl Producer, b: &impl Producer) -> usize {
    match a.len().checked_add(b.len()) {
        Some(n) => n,
        None => panic!(
            "{call}: the two iterators have {} and {} indices, more than usize::MAX together",
            a.len(),
            b.len()
        ),
    }
}

impl<A, B> sealed::Sealed for Interleave<A, B> {}
impl<A: Indexed, B: Indexed<Item = A::Item>> Indexed for Interleave<A, B> {}

impl<A: Indexed, B: Indexed<Item = A::Item>> Producer for Interleave<A, B> {
    type Item = A::Item;
    type Iter<'p>
        = std::iter::Chain<
        Alternate<A::Iter<'p>, B::Iter<'p>>,
        either::Either<A::Iter<'p>, B::Iter<'p>>,
    >
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.a.len() + self.b.len()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        let (la, lb) = (self.a.len(), self.b.len());
        let m = la.min(lb);
        // The alternating indices of `r` (below `2m`): the even ones are `a`'s, the odd `b`'s.
        let end = r.end.min(2 * m);
        let start = r.start.min(end);
        let in_a = start.div_ceil(2)..end.div_ceil(2);
        let in_b = start / 2..end / 2;
        // The rest of `r` (from `2m`): the longer's from `m`.
        let rest = r.start.max(2 * m) - m..r.end.max(2 * m) - m;
        // SAFETY: forwarded with the caller's guarantee: each index of the interleaving is
        // one index of `a` or of `b` (the alternating part takes `a`'s and `b`'s below `m`,
        // the rest the longer's from `m`), so disjoint `r`s ask disjoint indices of each.
        unsafe {
            let alternate = Alternate {
                a: self.a.iter(in_a, token),
                b: self.b.iter(in_b, sealed::Token),
                a_next: start.is_multiple_of(2),
            };
            let rest = if la > lb {
                either::Either::Left(self.a.iter(rest, sealed::Token))
            } else {
                either::Either::Right(self.b.iter(rest, sealed::Token))
            };
            alternate.chain(rest)
        }
    }
}

/// Two sequential iterators' items in turn ([`Interleave`]).
#[derive(Debug)]
pub struct Alternate<A, B> {
    a: A,
    b: B,
    a_next: bool,
}

impl<A: Iterator, B: Iterator<Item = A::Item>> Iterator for Alternate<A, B> {
    type Item = A::Item;

    fn next(&mut self) -> Option<A::Item> {
        let item = if self.a_next {
            self.a.next()
        } else {
            self.b.next()
        };
        self.a_next = !self.a_next;
        item
    }
}

/// `chain`'s producer: `a`'s indices, then `b`'s.
#[derive(Debug, Clone)]
pub struct Chain<A, B> {
    a: A,
    b: B,
}

impl<A: Producer, B: Producer> Chain<A, B> {
    /// Panics if the two lengths' sum overflows `usize` (as rayon's).
    #[track_caller]
    pub(crate) fn new(a: A, b: B) -> Self {
        total_len("chain", &a, &b);
        Chain { a, b }
    }
}

impl<A, B> sealed::Sealed for Chain<A, B> {}
impl<A: Indexed, B: Indexed<Item = A::Item>> Indexed for Chain<A, B> {}

impl<A: Producer, B: Producer<Item = A::Item>> Producer for Chain<A, B> {
    type Item = A::Item;
    type Iter<'p>
        = std::iter::Chain<A::Iter<'p>, B::Iter<'p>>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.a.len() + self.b.len()
    }

    fn full(&self) -> bool {
        self.a.full() && self.b.full()
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        let n = self.a.len();
        let in_a = r.start.min(n)..r.end.min(n);
        let in_b = r.start.max(n) - n..r.end.max(n) - n;
        // SAFETY: forwarded with the caller's guarantee: index `i` of the chain is `a`'s `i`
        // or `b`'s `i - n`, one of them, once.
        unsafe {
            self.a
                .iter(in_a, token)
                .chain(self.b.iter(in_b, sealed::Token))
        }
    }
}

/// `skip`'s and `take`'s producer: indices `start..end` of the base, renumbered from 0.
#[derive(Debug, Clone)]
pub struct Window<P> {
    base: P,
    start: usize,
    end: usize,
}

impl<P: Producer> Window<P> {
    /// The base's indices from `skip` on, at most `take` of them.
    pub(crate) fn new(base: P, skip: usize, take: usize) -> Self {
        let start = skip.min(base.len());
        let end = start + take.min(base.len() - start);
        Window { base, start, end }
    }
}

impl<P> sealed::Sealed for Window<P> {}
impl<P: Indexed> Indexed for Window<P> {}

impl<P: Indexed> Producer for Window<P> {
    type Item = P::Item;
    type Iter<'p>
        = P::Iter<'p>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.end - self.start
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: forwarded with the caller's guarantee (a shift is one to one).
        unsafe {
            self.base
                .iter(self.start + r.start..self.start + r.end, token)
        }
    }
}

/// `par_bridge`'s producer: a sequential iterator shared by the loop's participants, each
/// taking the next item under a lock until the source runs dry. Its indices are only places
/// for participants to stand (several per core, so that a spare that joins the loop finds
/// one): how many items each yields depends on who takes them first, and their order is not
/// kept, as with rayon's.
#[derive(Debug)]
pub struct Bridge<I> {
    source: std::sync::Mutex<I>,
    dry: std::sync::atomic::AtomicBool,
    places: usize,
}

impl<I> Bridge<I> {
    pub(crate) fn new(source: I, places: usize) -> Self {
        Bridge {
            source: std::sync::Mutex::new(source),
            dry: std::sync::atomic::AtomicBool::new(false),
            places: places.max(1),
        }
    }
}

impl<I> sealed::Sealed for Bridge<I> {}

impl<I> Producer for Bridge<I>
where
    I: Iterator + Send,
    I::Item: Send,
{
    type Item = I::Item;
    type Iter<'p>
        = BridgePart<'p, I>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.places
    }

    fn full(&self) -> bool {
        self.dry.load(std::sync::atomic::Ordering::Acquire)
    }

    unsafe fn iter(&self, _: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        BridgePart { bridge: self }
    }
}

/// A participant's pull from a [`Bridge`]: the source's next items, until it runs dry.
#[derive(Debug)]
pub struct BridgePart<'p, I> {
    bridge: &'p Bridge<I>,
}

impl<I: Iterator> Iterator for BridgePart<'_, I> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        use std::sync::atomic::Ordering;
        if self.bridge.dry.load(Ordering::Acquire) {
            return None;
        }
        // Counted (`sync::Held`) while the source's `next` runs: a participant that stepped
        // aside there would hold up every other one.
        let item = crate::sync::lock_std(&self.bridge.source).next();
        if item.is_none() {
            self.bridge.dry.store(true, Ordering::Release);
        }
        item
    }
}

/// `walk_tree`'s producer: the tree is walked by the loop's participants together. Each
/// takes a node from a shared stack, runs `children_of` on it (outside the lock: it may read
/// a directory, block, run a loop of its own), pushes the children and yields the node; a
/// participant that finds the stack empty while others are still expanding nodes waits for
/// their children. As with [`Bridge`], the indices are only places for participants to
/// stand, and the order of the nodes is not fixed (rayon's `walk_tree` fixes none either).
///
/// Steps and races (`sources.rs`' `walk_tree` names them for users):
/// 1. Take: under the lock, pop a node and count it as expanding; with none, wait on `more`
///    while any node is expanding; with none expanding either, the walk is over.
/// 2. Expand: `children_of` runs with no lock held; its children are gathered into a `Vec`
///    there too (a lazy iterator may do the work).
/// 3. Finish: under the lock, push the children, uncount the node, and wake the waiters when
///    there are children to take or the walk is over. A waiter rechecks under the lock, so a
///    wake-up that comes before it waits is not lost (the count changes under the lock).
/// 4. A panic in `children_of` (or in gathering the children) finishes the node as failed:
///    every part stops at its next take, and the loop re-raises the panic.
/// 5. Race with itself: `children_of` may wait through the runtime (an `io` wait, a nested
///    loop's scope, a `join`), and a worker that waits runs other jobs, among them another
///    part of this walk or of another walk (a participant still queued, a joiner). That part
///    must not wait in step 1: for this walk it would wait for the node being expanded lower
///    on its own stack, for another walk a worker doing the same the other way round waits
///    for it (two walks side by side, walks inside a parallel loop: they hung). So a thread
///    expanding a node of any walk (`EXPANDING`) does not wait in a take: its part ends, and
///    the expansion below goes on once the nested job returns. Its participant then uses up
///    the walk's remaining places, each ending at once, and closes its offer: the walk goes
///    on with the parts already in it, and no spare joins it any more.
pub struct TreeWalk<S, B> {
    children_of: B,
    state: std::sync::Mutex<Walk<S>>,
    more: std::sync::Condvar,
    /// Set once the walk is over or failed: the loop hands out no more places (`full`).
    over: std::sync::atomic::AtomicBool,
    places: usize,
}

/// What [`TreeWalk`] shares under its lock.
struct Walk<S> {
    /// Nodes not yet taken, the next on top.
    stack: Vec<S>,
    /// Nodes taken whose children are not pushed yet.
    expanding: usize,
    failed: bool,
}

impl<S, B> std::fmt::Debug for TreeWalk<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeWalk")
            .field("places", &self.places)
            .finish_non_exhaustive()
    }
}

impl<S, B> TreeWalk<S, B> {
    pub(crate) fn new(root: S, children_of: B, places: usize) -> Self {
        TreeWalk {
            children_of,
            state: std::sync::Mutex::new(Walk {
                stack: vec![root],
                expanding: 0,
                failed: false,
            }),
            more: std::sync::Condvar::new(),
            over: std::sync::atomic::AtomicBool::new(false),
            places: places.max(1),
        }
    }

    /// Step 1: the next node to expand, waiting while others may still push some; `None`
    /// once the walk is over or failed, or, rather than wait, when this thread is expanding
    /// a node of any walk lower on its stack (step 5).
    fn take(&self) -> Option<S> {
        use std::sync::PoisonError;
        let nested = EXPANDING.get() > 0;
        // Counted as a runtime lock while held or waited for (`sync::Held`).
        let _held = crate::sync::Held::new();
        let mut walk = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if walk.failed {
                return None;
            }
            if let Some(node) = walk.stack.pop() {
                walk.expanding += 1;
                return Some(node);
            }
            if walk.expanding == 0 {
                self.over.store(true, std::sync::atomic::Ordering::Relaxed);
                return None;
            }
            if nested {
                return None;
            }
            walk = self.more.wait(walk).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Step 3 (and 4 when `failed`): a taken node's children pushed.
    fn finish(&self, children: Vec<S>, failed: bool) {
        let _held = crate::sync::Held::new();
        let mut walk = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        walk.expanding -= 1;
        walk.failed |= failed;
        let pushed = !children.is_empty();
        // Reversed: the first child on top, taken next (depth first, as the prefix walk).
        walk.stack.extend(children.into_iter().rev());
        let over = walk.failed || (walk.expanding == 0 && walk.stack.is_empty());
        drop(walk);
        if over {
            self.over.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if pushed || over {
            self.more.notify_all();
        }
    }
}

thread_local! {
    /// How many nodes, of any walk, this thread is expanding (nested in one another, step 5).
    static EXPANDING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A node being expanded on this thread (steps 2 and 5): listed on [`EXPANDING`] while it
/// lives; finished as failed if dropped before [`Expanding::done`] (step 4).
struct Expanding<'w, S, B> {
    walk: &'w TreeWalk<S, B>,
    done: bool,
}

impl<'w, S, B> Expanding<'w, S, B> {
    fn new(walk: &'w TreeWalk<S, B>) -> Self {
        EXPANDING.set(EXPANDING.get() + 1);
        Expanding { walk, done: false }
    }

    /// Step 3: the children pushed.
    fn done(mut self, children: Vec<S>) {
        self.done = true;
        EXPANDING.set(EXPANDING.get() - 1);
        self.walk.finish(children, false);
    }
}

impl<S, B> Drop for Expanding<'_, S, B> {
    fn drop(&mut self) {
        if !self.done {
            EXPANDING.set(EXPANDING.get() - 1);
            self.walk.finish(Vec::new(), true);
        }
    }
}

impl<S, B> sealed::Sealed for TreeWalk<S, B> {}

impl<S, B, I> Producer for TreeWalk<S, B>
where
    S: Send,
    B: Fn(&S) -> I + Sync,
    I: IntoIterator<Item = S>,
{
    type Item = S;
    type Iter<'p>
        = TreeWalkPart<'p, S, B>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.places
    }

    fn full(&self) -> bool {
        self.over.load(std::sync::atomic::Ordering::Relaxed)
    }

    unsafe fn iter(&self, _: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        TreeWalkPart { walk: self }
    }
}

/// A participant's share of a [`TreeWalk`]: nodes it took and expanded, until the walk is
/// over.
#[derive(Debug)]
pub struct TreeWalkPart<'p, S, B> {
    walk: &'p TreeWalk<S, B>,
}

impl<S, B, I> Iterator for TreeWalkPart<'_, S, B>
where
    B: Fn(&S) -> I,
    I: IntoIterator<Item = S>,
{
    type Item = S;

    fn next(&mut self) -> Option<S> {
        let node = self.walk.take()?;
        let expanding = Expanding::new(self.walk);
        let children: Vec<S> = (self.walk.children_of)(&node).into_iter().collect();
        expanding.done(children);
        Some(node)
    }
}

/// `rev`'s producer: index `i` is the base's `len - 1 - i`. A part walks the base's matching
/// part backwards in pieces: each piece is made forwards (the base's iterators need not run
/// backwards) and held while its items are handed out last first. Pieces start at 16 indices
/// and double up to 1 024 (`REV_PIECE`), so a part holds at most 1 024 items, and a consumer
/// that stops early (`find_first`, `take_any`, `any`) makes at most about twice the items it
/// looks at, plus 16.
#[derive(Debug, Clone)]
pub struct Rev<P> {
    base: P,
}

/// The most indices a [`Rev`] part makes at once, and the first piece's.
const REV_PIECE: usize = 1024;
const REV_FIRST_PIECE: usize = 16;

impl<P> Rev<P> {
    pub(crate) fn new(base: P) -> Self {
        Rev { base }
    }
}

impl<P> sealed::Sealed for Rev<P> {}
impl<P: Indexed> Indexed for Rev<P> {}

impl<P: Indexed> Producer for Rev<P> {
    type Item = P::Item;
    type Iter<'p>
        = RevPart<'p, P>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len()
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        let len = self.base.len();
        let (start, end) = (r.start.min(len), r.end.min(len));
        RevPart {
            base: &self.base,
            left: len - end.max(start)..len - start,
            piece: Vec::new(),
            next_piece: REV_FIRST_PIECE,
        }
    }
}

/// A part of a [`Rev`]: the base's indices `left` not yet made, and the items of the piece
/// made last, handed out from its end.
#[derive(Debug)]
pub struct RevPart<'p, P: Producer> {
    base: &'p P,
    left: Range<usize>,
    piece: Vec<P::Item>,
    /// The length of the next piece.
    next_piece: usize,
}

impl<P: Indexed> Iterator for RevPart<'_, P> {
    type Item = P::Item;

    fn next(&mut self) -> Option<P::Item> {
        if self.piece.is_empty() && !self.left.is_empty() {
            let from = self.left.end - self.left.len().min(self.next_piece);
            let piece = from..self.left.end;
            self.left.end = from;
            self.next_piece = (2 * self.next_piece).min(REV_PIECE);
            // SAFETY: the part's range mirrors the one its caller asked once (contract of
            // `Producer::iter`; the mirror images of disjoint ranges are disjoint), and its
            // pieces are disjoint: `left` only shrinks from its end.
            self.piece
                .extend(unsafe { self.base.iter(piece, sealed::Token) });
        }
        self.piece.pop()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // An indexed base makes one item per index.
        let n = self.piece.len() + self.left.len();
        (n, Some(n))
    }
}

/// `step_by`'s producer: the base's indices `0, step, 2 * step, ...`.
#[derive(Debug, Clone)]
pub struct StepBy<P> {
    base: P,
    step: usize,
}

impl<P> StepBy<P> {
    /// `step` 0 is taken as 1.
    pub(crate) fn new(base: P, step: usize) -> Self {
        StepBy {
            base,
            step: step.max(1),
        }
    }
}

impl<P> sealed::Sealed for StepBy<P> {}
impl<P: Indexed> Indexed for StepBy<P> {}

impl<P: Indexed> Producer for StepBy<P> {
    type Item = P::Item;
    type Iter<'p>
        = std::iter::StepBy<P::Iter<'p>>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.base.len().div_ceil(self.step)
    }

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // The base's indices from the first kept one to just past the last: the ones between
        // are made and dropped, each still asked once (the ranges of the chunks do not overlap).
        // An empty `r` may sit at this producer's end (a `chain` or `interleave` asks its
        // shorter side for `len..len`), past which `r.start * step` would point.
        let start = r.start.saturating_mul(self.step).min(self.base.len());
        let end = if r.is_empty() {
            start
        } else {
            ((r.end - 1) * self.step + 1).min(self.base.len())
        };
        // SAFETY: forwarded with the caller's guarantee (disjoint `r`s give disjoint ranges).
        unsafe { self.base.iter(start..end, token) }.step_by(self.step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts its drops; the one made with `panics` panics in its drop.
    struct Counted {
        drops: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        panics: bool,
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.drops.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if self.panics {
                panic!("an item's drop panicked (on purpose)");
            }
        }
    }

    /// A vector's items that no part took are dropped at the producer's end, every one, in
    /// every gap, even when one of them panics in its drop (found by a review: the gaps after
    /// the panicking one, and the buffer, were leaked).
    #[test]
    fn a_panicking_items_drop_leaves_no_other_item_undropped() {
        let drops = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let items = (0..20)
            .map(|i| Counted {
                drops: drops.clone(),
                panics: i == 1,
            })
            .collect();
        let p = VecProducer::new(items);
        // SAFETY: one part, taken once; its items are moved out and dropped here.
        drop(unsafe { p.iter(5..10, sealed::Token) }.collect::<Vec<_>>());
        assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 5);
        // Gaps 0..5 (item 1 panics) and 10..20.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(p)));
        assert!(r.is_err(), "the item's panic reaches the producer's owner");
        assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), 20);
    }

    /// Step 5 of [`TreeWalk`]: a part of a walk that runs nested in an expansion of the same
    /// walk (a job run by a worker waiting inside `children_of`) does not wait for the nodes
    /// still to come, which that expansion would push: its part ends (without step 5 this
    /// test waits for ever). Out of the nesting, the walk goes on.
    #[test]
    fn a_tree_walk_part_nested_in_an_expansion_does_not_wait_for_it() {
        let kids = |n: &u32| if *n == 0 { vec![1, 2] } else { Vec::new() };
        let walk = TreeWalk::new(0u32, kids, 4);
        assert_eq!(walk.take(), Some(0));
        let expanding = Expanding::new(&walk);
        assert_eq!(walk.take(), None, "nested in the root's expansion");
        assert!(!walk.full(), "the walk is not over");
        expanding.done(vec![1, 2]);
        assert_eq!(walk.take(), Some(1));
        Expanding::new(&walk).done(Vec::new());
        assert_eq!(walk.take(), Some(2));
        Expanding::new(&walk).done(Vec::new());
        assert_eq!(walk.take(), None);
        assert!(walk.full(), "over");
    }

    /// The ends of index range `r`'s values, or `None` if it has none.
    fn ends<T: WideInteger>(p: &WideRange<T>, r: Range<usize>) -> Option<(T, T)>
    where
        std::ops::RangeInclusive<T>: Iterator<Item = T>,
    {
        // SAFETY: the ranges are only looked at, never iterated twice.
        let part = unsafe { p.iter(r, sealed::Token) };
        (!part.is_empty()).then(|| (*part.start(), *part.end()))
    }

    /// A 128-bit range wider than `usize` counts: 2^48 indices whose values follow one
    /// another without a gap or an overlap, from the range's first value to its last.
    #[test]
    fn a_wide_range_covers_every_value_once_in_at_most_2_pow_48_indices() {
        let all = WideRange::new_inclusive(0..=u128::MAX);
        let n = all.len();
        assert_eq!(n, 1 << 48);
        assert_eq!(ends(&all, 0..1).map(|e| e.0), Some(0));
        assert_eq!(ends(&all, n - 1..n).map(|e| e.1), Some(u128::MAX));
        for i in [0, 1, 7, n / 2, n - 2] {
            let (_, a) = ends(&all, i..i + 1).unwrap();
            let (b, _) = ends(&all, i + 1..i + 2).unwrap();
            assert_eq!(a + 1, b, "index {i}");
        }
        let signed = WideRange::new(i128::MIN..i128::MAX);
        let n = signed.len();
        assert_eq!(ends(&signed, 0..n), Some((i128::MIN, i128::MAX - 1)));
        let (_, a) = ends(&signed, 0..n / 2).unwrap();
        let (b, _) = ends(&signed, n / 2..n).unwrap();
        assert_eq!(a + 1, b);
        // Ranges that fit: one value per index.
        let small = WideRange::new(-5i128..5);
        assert_eq!(small.len(), 10);
        assert_eq!(ends(&small, 3..5), Some((-2, -1)));
        assert_eq!(ends(&small, 4..4), None);
        assert_eq!(WideRange::new(5u128..5).len(), 0);
        let (six, five) = (6u128, 5u128);
        assert_eq!(WideRange::new(six..five).len(), 0);
        assert_eq!(WideRange::new_inclusive(six..=five).len(), 0);
        assert_eq!(WideRange::new_inclusive(u128::MAX..=u128::MAX).len(), 1);
    }
}
