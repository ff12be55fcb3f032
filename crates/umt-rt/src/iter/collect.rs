//! `collect`'s targets: rayon's `FromParallelIterator`, here for every `FromIterator`.
//!
//! The items are gathered in index order into one `Vec` (`ParIter::collect_vec`), from which
//! the collection builds itself with its `FromIterator`. One blanket implementation, not
//! rayon's list of collections: every target of rayon's (`Vec`, `Box<[T]>`, `Arc<[T]>`,
//! `VecDeque`, `BinaryHeap`, the maps and sets, `String` and `Box<str>` from `char`s and
//! strings, `OsString`, `Cow`, `()`, pairs, `Result`, `Option`) is a `FromIterator`, and so are
//! the third-party collections that implement rayon's trait (`IndexMap`, `hashbrown`'s,
//! `DashMap`), which a program could not implement umt-rt's trait for (the orphan rule).
//!
//! The price: `collect` into `Result` (`Option`) cannot be told apart from any other target,
//! so the loop makes every item before the standard library's `collect` finds the first
//! failure, where rayon stops the loop at a failure. The answer is the same (the failure
//! with the lowest index, where rayon's is whichever a part met first); a loop that should
//! stop early says so with `try_for_each`, `try_reduce` or `while_some`.

use std::panic::Location;

use super::{IntoParallelIterator, ParallelIterator};

/// Collections a parallel iterator can be collected into (`collect`): rayon's
/// `FromParallelIterator`, here for every `FromIterator` (`Vec`, `String`, `HashMap`,
/// `Result<C, E>`, `Option<C>`, pairs, ...), in index order.
pub trait FromParallelIterator<T>: Sized {
    /// Collects the items of `par_iter`.
    #[track_caller]
    fn from_par_iter<I>(par_iter: I) -> Self
    where
        I: IntoParallelIterator<Item = T>;
}

impl<T: Send, C: FromIterator<T>> FromParallelIterator<T> for C {
    #[track_caller]
    fn from_par_iter<I>(par_iter: I) -> Self
    where
        I: IntoParallelIterator<Item = T>,
    {
        let site = Location::caller();
        par_iter
            .into_par_iter()
            .into_parts()
            .collect_vec(site)
            .into_iter()
            .collect()
    }
}
