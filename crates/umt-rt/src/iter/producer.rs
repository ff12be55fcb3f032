//! Producers: what makes a parallel iterator's items, by index. A producer covers an index
//! space `0..len` and makes a sequential iterator over any part of it; the loop driver asks
//! each index once (`Dispenser`'s guarantee, tested in `schedule.rs`). That guarantee is what
//! lets [`SliceMut`] and [`ChunksMut`] hand out `&mut` parts of one slice to several threads:
//! the crate's only unsafe split, here.

use std::marker::PhantomData;
use std::ops::Range;

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

/// `0..n` as a producer (`Range<usize>::into_par_iter`).
#[derive(Debug, Clone)]
pub struct RangeProducer {
    range: Range<usize>,
}

impl RangeProducer {
    pub(crate) fn new(range: Range<usize>) -> Self {
        RangeProducer { range }
    }
}

impl sealed::Sealed for RangeProducer {}
impl Indexed for RangeProducer {}

impl Producer for RangeProducer {
    type Item = usize;
    type Iter<'p> = Range<usize>;

    fn len(&self) -> usize {
        self.range.end.saturating_sub(self.range.start)
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Range<usize> {
        self.range.start + r.start..self.range.start + r.end
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

/// A shared slice in sub-slices of a fixed size (`par_chunks`).
#[derive(Debug, Clone)]
pub struct Chunks<'data, T> {
    slice: &'data [T],
    size: usize,
}

impl<'data, T: Sync> Chunks<'data, T> {
    pub(crate) fn new(slice: &'data [T], size: usize) -> Self {
        Chunks {
            slice,
            size: size.max(1),
        }
    }
}

impl<T> sealed::Sealed for Chunks<'_, T> {}
impl<T: Sync> Indexed for Chunks<'_, T> {}

impl<'data, T: Sync> Producer for Chunks<'data, T> {
    type Item = &'data [T];
    type Iter<'p>
        = std::slice::Chunks<'data, T>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.slice.len().div_ceil(self.size)
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        let n = self.slice.len();
        let (start, end) = ((r.start * self.size).min(n), (r.end * self.size).min(n));
        self.slice[start..end].chunks(self.size)
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

/// A mutable slice in sub-slices of a fixed size (`par_chunks_mut`).
#[derive(Debug)]
pub struct ChunksMut<'data, T> {
    slice: SliceMut<'data, T>,
    size: usize,
}

impl<'data, T: Send> ChunksMut<'data, T> {
    pub(crate) fn new(slice: &'data mut [T], size: usize) -> Self {
        ChunksMut {
            slice: SliceMut::new(slice),
            size: size.max(1),
        }
    }
}

impl<T> sealed::Sealed for ChunksMut<'_, T> {}
impl<T: Send> Indexed for ChunksMut<'_, T> {}

impl<'data, T: Send> Producer for ChunksMut<'data, T> {
    type Item = &'data mut [T];
    type Iter<'p>
        = std::slice::ChunksMut<'data, T>
    where
        Self: 'p;

    fn len(&self) -> usize {
        self.slice.len.div_ceil(self.size)
    }

    unsafe fn iter(&self, r: Range<usize>, _: sealed::Token) -> Self::Iter<'_> {
        let elems = r.start.saturating_mul(self.size)..r.end.saturating_mul(self.size);
        // SAFETY: chunk ranges asked once map to element ranges asked once (contract of
        // `Producer::iter`), within the unique borrow the producer holds.
        unsafe { sub_slice_mut(self.slice.ptr, self.slice.len, elems) }.chunks_mut(self.size)
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

    unsafe fn iter(&self, r: Range<usize>, token: sealed::Token) -> Self::Iter<'_> {
        // SAFETY: forwarded with the caller's guarantee.
        unsafe { self.base.iter(r, token) }.map(&self.f)
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
