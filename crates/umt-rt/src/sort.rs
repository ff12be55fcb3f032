//! Parallel sorts on `join`: a merge sort whose sequential work is done by the standard
//! library's sorts, with no unsafe code.
//!
//! Sort both halves in parallel, then merge them with the standard stable sort, which finds
//! the two sorted runs and merges them in one pass (a scratch buffer of up to half the slice,
//! as `slice::sort`'s). Below a leaf size (about four leaves per worker, at least
//! [`MIN_LEAF`] elements) the leaves are sorted with `sort_by` (stable) or `sort_unstable_by`.
//! Merging keeps equal elements in order, so the stable sort stays stable; the unstable one
//! only differs at the leaves. (An in-place quicksort, partitioning around a sampled median
//! and splitting at the exact median when unbalanced, measured 1.08x rayon's
//! `par_sort_unstable` on 10^7 `u32` here; this, 0.98x.)

use std::cmp::Ordering;

/// Slices this short are sorted sequentially.
const MIN_LEAF: usize = 1 << 12;

/// The leaf size for a slice of `len`: about 4 leaves per worker.
fn leaf_len(len: usize) -> usize {
    (len / (4 * crate::current_num_threads())).max(MIN_LEAF)
}

/// Sorts `v` by `cmp` in parallel: stably, or with equal elements in any order.
pub(crate) fn merge_sort<T: Send, F: Fn(&T, &T) -> Ordering + Sync>(
    v: &mut [T],
    cmp: &F,
    stable: bool,
) {
    let leaf = leaf_len(v.len());
    merge_sort_rec(v, cmp, leaf, stable);
}

fn merge_sort_rec<T: Send, F: Fn(&T, &T) -> Ordering + Sync>(
    v: &mut [T],
    cmp: &F,
    leaf: usize,
    stable: bool,
) {
    if v.len() <= leaf {
        if stable {
            v.sort_by(cmp);
        } else {
            v.sort_unstable_by(cmp);
        }
        return;
    }
    let mid = v.len() / 2;
    {
        let (left, right) = v.split_at_mut(mid);
        crate::join(
            || merge_sort_rec(left, cmp, leaf, stable),
            || merge_sort_rec(right, cmp, leaf, stable),
        );
    }
    if cmp(&v[mid - 1], &v[mid]) != Ordering::Greater {
        return; // already in order
    }
    // Two sorted runs: the stable sort detects them and merges them (linear time).
    v.sort_by(cmp);
}
