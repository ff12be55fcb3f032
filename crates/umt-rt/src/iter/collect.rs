//! `collect`'s targets: rayon's `FromParallelIterator` and its implementations for the
//! standard library's collections, `Result` and `Option` (which stop the loop at the first
//! failure, as rayon's do), pairs (`unzip` and `partition_map` as one `collect`) and `Cow`.
//!
//! The collections gather the items in index order into one `Vec` (`ParIter::collect_vec`)
//! and build themselves from it with their `FromIterator`. A type of the program's own
//! implements the trait as it would rayon's, usually through `collect::<Vec<_>>()`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, LinkedList, VecDeque};
use std::ffi::{OsStr, OsString};
use std::hash::{BuildHasher, Hash};
use std::panic::Location;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use super::{Either, IntoParallelIterator, ParallelIterator};

/// Collections a parallel iterator can be collected into (`collect`): rayon's
/// `FromParallelIterator`, for the same types (`Vec`, `VecDeque`, `String`, `HashMap`,
/// `Result<C, E>`, `Option<C>`, pairs, ...), items in index order.
pub trait FromParallelIterator<T>: Sized {
    /// Collects the items of `par_iter`.
    #[track_caller]
    fn from_par_iter<I>(par_iter: I) -> Self
    where
        I: IntoParallelIterator<Item = T>;
}

/// The items of `par_iter` in index order, collected by `C`'s `FromIterator`.
fn in_order<C, I>(par_iter: I, site: &'static Location<'static>) -> C
where
    I: IntoParallelIterator,
    I::Item: Send,
    C: FromIterator<I::Item>,
{
    par_iter
        .into_par_iter()
        .into_parts()
        .collect_vec(site)
        .into_iter()
        .collect()
}

/// `FromParallelIterator` through `FromIterator`, for the collections rayon has it for.
macro_rules! through_from_iterator {
    ($( impl[$($g:tt)*] for $c:ty, item $t:ty $(, where [$($w:tt)+])? ;)*) => {$(
        impl<$($g)*> FromParallelIterator<$t> for $c
        where
            $t: Send,
            $($($w)+)?
        {
            #[track_caller]
            fn from_par_iter<I>(par_iter: I) -> Self
            where
                I: IntoParallelIterator<Item = $t>,
            {
                in_order(par_iter, Location::caller())
            }
        }
    )*};
}

through_from_iterator! {
    impl[T] for Vec<T>, item T;
    impl[T] for Box<[T]>, item T;
    impl[T] for Rc<[T]>, item T;
    impl[T] for Arc<[T]>, item T;
    impl[T] for VecDeque<T>, item T;
    impl[T] for LinkedList<T>, item T;
    impl[T] for BinaryHeap<T>, item T, where [T: Ord];
    impl[T] for BTreeSet<T>, item T, where [T: Ord];
    impl[T, S] for HashSet<T, S>, item T, where [T: Eq + Hash, S: BuildHasher + Default];
    impl[K, V] for BTreeMap<K, V>, item (K, V), where [K: Ord];
    impl[K, V, S] for HashMap<K, V, S>, item (K, V), where [K: Eq + Hash, S: BuildHasher + Default];
    impl[] for String, item char;
    impl[] for String, item String;
    impl[] for String, item Box<str>;
    impl[] for OsString, item OsString;
    impl[] for (), item ();
    impl['a] for String, item &'a str;
    impl['a] for String, item &'a char;
    impl['a] for String, item Cow<'a, str>;
    impl['a] for OsString, item &'a OsStr;
    impl['a] for OsString, item Cow<'a, OsStr>;
}

impl<'a, C, T> FromParallelIterator<T> for Cow<'a, C>
where
    C: ToOwned<Owned: FromParallelIterator<T>> + ?Sized,
    T: Send,
{
    /// The owned form, collected.
    #[track_caller]
    fn from_par_iter<I>(par_iter: I) -> Self
    where
        I: IntoParallelIterator<Item = T>,
    {
        Cow::Owned(C::Owned::from_par_iter(par_iter))
    }
}

/// Keeps the first failure a part meets (rayon's: which one, when several parts fail at
/// once, is not fixed).
struct FirstFailure<E>(Mutex<Option<E>>);

impl<E> FirstFailure<E> {
    fn new() -> Self {
        FirstFailure(Mutex::new(None))
    }

    fn keep(&self, e: E) {
        crate::sync::lock_std(&self.0).get_or_insert(e);
    }

    fn into_inner(self) -> Option<E> {
        self.0.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

impl<C, T, E> FromParallelIterator<Result<T, E>> for Result<C, E>
where
    C: FromParallelIterator<T>,
    T: Send,
    E: Send,
{
    /// `Ok` of the values if every item is `Ok`, or an `Err` the loop met. The loop stops at
    /// the first `Err` (`while_some`): no part makes another item, so a loop that fails early
    /// does little work, and the values collected so far are dropped.
    #[track_caller]
    fn from_par_iter<I>(par_iter: I) -> Self
    where
        I: IntoParallelIterator<Item = Result<T, E>>,
    {
        let failure = FirstFailure::new();
        let values: C = par_iter
            .into_par_iter()
            .map(|item| item.map_err(|e| failure.keep(e)).ok())
            .while_some()
            .collect();
        match failure.into_inner() {
            Some(e) => Err(e),
            None => Ok(values),
        }
    }
}

impl<C, T> FromParallelIterator<Option<T>> for Option<C>
where
    C: FromParallelIterator<T>,
    T: Send,
{
    /// `Some` of the values if every item is `Some`, else `None`; the loop stops at the first
    /// `None` (`while_some`), as for `Result`.
    #[track_caller]
    fn from_par_iter<I>(par_iter: I) -> Self
    where
        I: IntoParallelIterator<Item = Option<T>>,
    {
        let failure = FirstFailure::new();
        let values: C = par_iter
            .into_par_iter()
            .map(|item| {
                if item.is_none() {
                    failure.keep(());
                }
                item
            })
            .while_some()
            .collect();
        failure.into_inner().is_none().then_some(values)
    }
}

impl<A, B, FromA, FromB> FromParallelIterator<(A, B)> for (FromA, FromB)
where
    A: Send,
    B: Send,
    FromA: Default + Extend<A>,
    FromB: Default + Extend<B>,
{
    /// Both halves of the pairs, in index order (`unzip` as one `collect`).
    #[track_caller]
    fn from_par_iter<I>(par_iter: I) -> Self
    where
        I: IntoParallelIterator<Item = (A, B)>,
    {
        par_iter.into_par_iter().unzip()
    }
}

impl<L, R, A, B> FromParallelIterator<Either<L, R>> for (A, B)
where
    L: Send,
    R: Send,
    A: Default + Extend<L>,
    B: Default + Extend<R>,
{
    /// The `Left` values and the `Right` ones, each in index order (`partition_map` as one
    /// `collect`).
    #[track_caller]
    fn from_par_iter<I>(par_iter: I) -> Self
    where
        I: IntoParallelIterator<Item = Either<L, R>>,
    {
        par_iter.into_par_iter().partition_map(|item| item)
    }
}
