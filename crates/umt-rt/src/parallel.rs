//! Loops over ranges.

use std::ops::Range;

use crate::scope::Scope;

/// Splits `range` into `chunks` contiguous pieces of near-equal length (the static schedule),
/// in order. Fewer pieces when the range is shorter.
pub(crate) fn static_chunks(range: Range<usize>, chunks: usize) -> Vec<Range<usize>> {
    let len = range.end.saturating_sub(range.start);
    let chunks = chunks.clamp(1, len.max(1));
    let (base, extra) = (len / chunks, len % chunks);
    let mut start = range.start;
    (0..chunks)
        .map(|i| {
            let end = start + base + usize::from(i < extra);
            let r = start..end;
            start = end;
            r
        })
        .filter(|r| !r.is_empty())
        .collect()
}

/// Runs `body(i)` for every `i` of `range`, one task per static chunk, in `scope`.
pub(crate) fn spawn_static<'scope, F>(
    scope: &Scope<'scope>,
    range: Range<usize>,
    chunks: usize,
    body: &'scope F,
) where
    F: Fn(usize) + Sync,
{
    for chunk in static_chunks(range, chunks) {
        scope.spawn(move |_| chunk.for_each(body));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn static_chunks_cover_the_range_once_in_order(start in 0usize..1000, len in 0usize..1000, chunks in 1usize..64) {
            let parts = static_chunks(start..start + len, chunks);
            let flat: Vec<usize> = parts.iter().cloned().flatten().collect();
            prop_assert_eq!(flat, (start..start + len).collect::<Vec<_>>());
            prop_assert!(parts.len() <= chunks);
            if let (Some(min), Some(max)) = (parts.iter().map(|r| r.len()).min(), parts.iter().map(|r| r.len()).max()) {
                prop_assert!(max - min <= 1);
            }
        }
    }
}
