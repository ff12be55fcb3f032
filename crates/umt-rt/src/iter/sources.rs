//! Sources that are no collection: rayon's free functions `repeat`, `repeat_n`, `once`,
//! `empty`, `split` and the tree walks.
//!
//! `split` cuts its data on the calling thread, then hands the pieces out in parallel, as the
//! maps and sets are handled: the splitter runs sequentially, the loop's body in parallel.
//! The tree walks are walked by a loop's participants together (`TreeWalk`): `children_of`
//! runs in parallel too; the ordered ones (`walk_tree_prefix`, `walk_tree_postfix`) then lay
//! the nodes out in their order and hand them out in it.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{ParIter, ParallelIterator, RepeatN, TreeWalk, VecProducer};

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
/// `children_of` gives them (rayon's `walk_tree_prefix`). The tree is walked in parallel, as
/// [`walk_tree`] walks it (`children_of` runs on the loop's participants, and a spare joins
/// one blocked in it), then the nodes are laid out in prefix order on the calling thread and
/// handed out in parallel in that order.
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
    ParIter::new(VecProducer::new(walk_in_order(root, children_of, false)))
}

/// The nodes of the tree under `root`, each after its children, the children in the order
/// `children_of` gives them (rayon's `walk_tree_postfix`): walked in parallel, laid out and
/// handed out as [`walk_tree_prefix`]'s.
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
    ParIter::new(VecProducer::new(walk_in_order(root, children_of, true)))
}

/// A node of [`walk_in_order`]'s walk: its number, its children's first number and count
/// (set when it is expanded), the node.
type Numbered<S> = (usize, Cell<(usize, usize)>, S);

/// The nodes of the tree under `root` in prefix (or `postfix`) order. The tree is walked by
/// [`walk_tree`], each node numbered: the root 0, a node's children the next free numbers,
/// one after another (`first..first + count`, taken with one `fetch_add`), so the numbers
/// are `0..n` and each node's children are a run of them. The order is then laid out on the
/// calling thread from the numbers alone (two words per node), and the nodes moved into it.
fn walk_in_order<S, B, I>(root: S, children_of: B, postfix: bool) -> Vec<S>
where
    S: Send,
    B: Fn(&S) -> I + Send + Sync,
    I: IntoIterator<Item = S>,
{
    let next = AtomicUsize::new(1);
    let numbered = |node: &Numbered<S>| -> Vec<Numbered<S>> {
        let kids: Vec<S> = children_of(&node.2).into_iter().collect();
        let first = next.fetch_add(kids.len(), Ordering::Relaxed);
        node.1.set((first, kids.len()));
        kids.into_iter()
            .enumerate()
            .map(|(i, kid)| (first + i, Cell::new((0, 0)), kid))
            .collect()
    };
    let found: Vec<(usize, (usize, usize), S)> = walk_tree((0, Cell::new((0, 0)), root), numbered)
        .map(|(number, kids, node)| (number, kids.get(), node))
        .collect();
    let mut nodes: Vec<Option<S>> = (0..found.len()).map(|_| None).collect();
    let mut kids = vec![(0, 0); found.len()];
    for (number, run, node) in found {
        nodes[number] = Some(node);
        kids[number] = run;
    }
    let mut order = Vec::with_capacity(nodes.len());
    // Depth first; `true`: the node's children are on the stack above it already.
    let mut stack = vec![(0, false)];
    while let Some((number, expanded)) = stack.pop() {
        if expanded || !postfix {
            order.push(number);
        }
        if expanded {
            continue;
        }
        if postfix {
            stack.push((number, true));
        }
        let (first, count) = kids[number];
        stack.extend((first..first + count).rev().map(|kid| (kid, false)));
    }
    order
        .into_iter()
        .filter_map(|number| nodes[number].take())
        .collect()
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
