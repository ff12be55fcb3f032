//! Sources that are no collection: rayon's free functions `repeat`, `repeat_n`, `once`,
//! `empty`, `split` and the tree walks.
//!
//! `split` and the ordered tree walks (`walk_tree_prefix`, `walk_tree_postfix`) cut their data
//! (walk their tree) on the calling thread, then hand the pieces (nodes) out in parallel, as
//! the maps and sets are handled: the splitter and `children_of` run sequentially, the loop's
//! body in parallel. `walk_tree`, whose order is not fixed, is walked by the loop's
//! participants together (`TreeWalk`): `children_of` runs in parallel too.

use super::{ParIter, RepeatN, TreeWalk, VecProducer};

/// `n` clones of `item`, an indexed iterator (rayon's `repeat_n`).
///
/// ```
/// use umt_rt::prelude::*;
///
/// let v: Vec<(u32, &str)> = (0..3u32).into_par_iter().zip(umt_rt::iter::repeat_n("x", 5)).collect();
/// assert_eq!(v, [(0, "x"), (1, "x"), (2, "x")]);
/// ```
pub fn repeat_n<T: Clone + Send>(item: T, n: usize) -> ParIter<RepeatN<T>> {
    ParIter::new(RepeatN::new(item, n))
}

/// Clones of `item` without end (rayon's `repeat`): as many as `usize` counts. Cut it with
/// `take` or `zip` it with a finite iterator, or end it with a search (`find_any`, `any`,
/// `take_any`, `while_some`...), which stops the loop once decided; a loop that visits every
/// item (`for_each`, `count`) does not end, as with rayon.
///
/// ```
/// use umt_rt::prelude::*;
///
/// let v: Vec<u8> = umt_rt::iter::repeat(7u8).take(4).collect();
/// assert_eq!(v, [7; 4]);
/// let first = umt_rt::iter::repeat(3u8).enumerate().find_any(|&(i, _)| i == 10);
/// assert_eq!(first, Some((10, 3)));
/// ```
pub fn repeat<T: Clone + Send>(item: T) -> ParIter<RepeatN<T>> {
    repeat_n(item, usize::MAX)
}

/// One item (rayon's `once`).
pub fn once<T: Send>(item: T) -> ParIter<VecProducer<T>> {
    ParIter::new(VecProducer::new(vec![item]))
}

/// No item (rayon's `empty`).
pub fn empty<T: Send>() -> ParIter<VecProducer<T>> {
    ParIter::new(VecProducer::new(Vec::new()))
}

/// The pieces `splitter` cuts `data` into (rayon's `split`), left to right: `splitter`
/// returns the two halves of a piece, or the piece and `None` when it cannot be cut. The
/// pieces are cut, on the calling thread, in rounds that cut each piece once, until there
/// are at least 8 per core of the runtime or none can be cut, so a piece is a unit of work (rayon,
/// too, stops cutting once it has enough pieces for its threads).
///
/// ```
/// use umt_rt::prelude::*;
///
/// let halves = |r: std::ops::Range<u32>| {
///     if r.len() < 2 {
///         return (r, None);
///     }
///     let mid = r.start + (r.end - r.start) / 2;
///     (r.start..mid, Some(mid..r.end))
/// };
/// let sum: u32 = umt_rt::iter::split(0..1000u32, halves).map(|r| r.sum::<u32>()).sum();
/// assert_eq!(sum, 999 * 1000 / 2);
/// ```
pub fn split<D, S>(data: D, splitter: S) -> ParIter<VecProducer<D>>
where
    D: Send,
    S: Fn(D) -> (D, Option<D>) + Sync,
{
    let enough = super::FOLD_BLOCKS_PER_CORE * crate::current_num_threads();
    // Each piece with whether it may still be cut.
    let mut pieces = vec![(data, true)];
    while pieces.len() < enough && pieces.iter().any(|(_, more)| *more) {
        let mut next = Vec::with_capacity(2 * pieces.len());
        for (piece, more) in pieces {
            if !more {
                next.push((piece, more));
                continue;
            }
            match splitter(piece) {
                (left, Some(right)) => {
                    next.push((left, true));
                    next.push((right, true));
                }
                (whole, None) => next.push((whole, false)),
            }
        }
        pieces = next;
    }
    ParIter::new(VecProducer::new(
        pieces.into_iter().map(|(piece, _)| piece).collect(),
    ))
}

/// The nodes of the tree under `root`, each before its children, the children in the order
/// `children_of` gives them (rayon's `walk_tree_prefix`): depth first, on the calling thread,
/// then handed out in parallel in that order.
///
/// ```
/// use umt_rt::prelude::*;
///
/// // The binary tree of 1..16 in heap order.
/// let kids = |n: &u32| (2 * n..2 * n + 2).filter(|k| *k < 16).collect::<Vec<_>>();
/// let order: Vec<u32> = umt_rt::iter::walk_tree_prefix(1u32, kids).collect();
/// assert_eq!(&order[..5], [1, 2, 4, 8, 9]);
/// ```
pub fn walk_tree_prefix<S, B, I>(root: S, children_of: B) -> ParIter<VecProducer<S>>
where
    S: Send,
    B: Fn(&S) -> I + Send + Sync,
    I: IntoIterator<Item = S, IntoIter: DoubleEndedIterator>,
{
    let mut nodes = Vec::new();
    // The nodes still to visit, the next on top.
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        stack.extend(children_of(&node).into_iter().rev());
        nodes.push(node);
    }
    ParIter::new(VecProducer::new(nodes))
}

/// The nodes of the tree under `root`, each after its children, the children in the order
/// `children_of` gives them (rayon's `walk_tree_postfix`): depth first, on the calling
/// thread, then handed out in parallel in that order.
///
/// ```
/// use umt_rt::prelude::*;
///
/// let kids = |n: &u32| (2 * n..2 * n + 2).filter(|k| *k < 8).collect::<Vec<_>>();
/// let order: Vec<u32> = umt_rt::iter::walk_tree_postfix(1u32, kids).collect();
/// assert_eq!(order, [4, 5, 2, 6, 7, 3, 1]);
/// ```
pub fn walk_tree_postfix<S, B, I>(root: S, children_of: B) -> ParIter<VecProducer<S>>
where
    S: Send,
    B: Fn(&S) -> I + Send + Sync,
    I: IntoIterator<Item = S>,
{
    let mut nodes = Vec::new();
    // Each node with its children not yet visited; the node is done when they are.
    let mut stack = vec![(root, None::<I::IntoIter>)];
    while let Some((node, children)) = stack.last_mut() {
        let children = children.get_or_insert_with(|| children_of(node).into_iter());
        match children.next() {
            Some(child) => stack.push((child, None)),
            None => {
                if let Some((node, _)) = stack.pop() {
                    nodes.push(node);
                }
            }
        }
    }
    ParIter::new(VecProducer::new(nodes))
}

/// The nodes of the tree under `root`, in no fixed order (rayon's `walk_tree`), walked by
/// the loop's participants together: each takes a node, runs `children_of` on it (which may
/// block, say reading a directory: the monitor then lets a spare join the walk), offers the
/// children to the others and hands the node to the loop's body. A participant with no node
/// to take waits while others may still find some. A panic in `children_of` ends the walk
/// and reaches the caller. For a fixed order use [`walk_tree_prefix`] or
/// [`walk_tree_postfix`], which walk on the calling thread first.
///
/// ```
/// use umt_rt::prelude::*;
///
/// // The directories under a root, each listed by whichever participant takes it.
/// let kids = |n: &u32| (2 * n..2 * n + 2).filter(|k| *k < 64).collect::<Vec<_>>();
/// let mut nodes: Vec<u32> = umt_rt::iter::walk_tree(1u32, kids).collect();
/// nodes.sort();
/// assert_eq!(nodes, (1..64).collect::<Vec<_>>());
/// ```
pub fn walk_tree<S, B, I>(root: S, children_of: B) -> ParIter<TreeWalk<S, B>>
where
    S: Send,
    B: Fn(&S) -> I + Send + Sync,
    I: IntoIterator<Item = S, IntoIter: DoubleEndedIterator>,
{
    let places = crate::current_num_threads() * crate::MAX_WORKERS_PER_CORE;
    ParIter::new(TreeWalk::new(root, children_of, places))
}
