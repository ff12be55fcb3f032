//! One source, two libraries: the same functions, written as a rayon user writes them, compiled
//! once against `rayon::prelude` and once against `umt_rt::prelude` (the import is the only
//! difference), must give the same results (issue 33: rayon code compiles unchanged). Where
//! rayon leaves the result open (`find_any`, `take_any`), both answers are checked for what
//! rayon promises.

macro_rules! same_source {
    ($name:ident, $krate:ident) => {
        mod $name {
            use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};

            use $krate::prelude::*;

            /// Generic code against the traits' bounds, as libraries written for rayon have.
            fn total<I: ParallelIterator<Item = u64>>(it: I) -> u64 {
                it.sum()
            }

            fn squares<I>(it: I) -> Vec<u64>
            where
                I: IndexedParallelIterator<Item = u64>,
            {
                it.map(|x| x * x).collect()
            }

            /// Every deterministic call, each answer formatted into one line.
            pub fn deterministic(v: &[u64], words: &str) -> Vec<String> {
                let mut out = Vec::new();
                let mut say = |what: &str, x: String| out.push(format!("{what}: {x}"));
                say("total", total(v.par_iter().copied()).to_string());
                say("squares", format!("{:?}", squares(v.par_iter().copied())));
                let rows: Vec<Vec<u64>> = v.chunks(3).map(<[u64]>::to_vec).collect();
                say(
                    "flatten",
                    format!(
                        "{:?}",
                        rows.clone().into_par_iter().flatten().collect::<Vec<_>>()
                    ),
                );
                say(
                    "flatten_iter",
                    format!("{:?}", rows.par_iter().flatten_iter().collect::<Vec<_>>()),
                );
                say(
                    "flat_map",
                    format!(
                        "{:?}",
                        v.par_iter()
                            .flat_map(|&x| (0..x % 3).into_par_iter())
                            .collect::<Vec<_>>()
                    ),
                );
                say(
                    "product",
                    (1..=12u64).into_par_iter().product::<u64>().to_string(),
                );
                say(
                    "try_reduce_with",
                    format!(
                        "{:?}",
                        v.par_iter()
                            .map(|&x| Some(x))
                            .try_reduce_with(|a, b| a.checked_add(b))
                    ),
                );
                say(
                    "try_fold",
                    format!(
                        "{:?}",
                        v.par_iter()
                            .try_fold(|| 0u64, |a, &x| a.checked_add(x))
                            .try_reduce(|| 0, |a, b| a.checked_add(b))
                    ),
                );
                say(
                    "try_for_each",
                    format!(
                        "{:?}",
                        v.par_iter()
                            .try_for_each(|&x| if x > 1_000_000 { Err(x) } else { Ok(()) })
                    ),
                );
                let mut into = vec![7u64; 3];
                v.par_iter().map(|x| x + 1).collect_into_vec(&mut into);
                say("collect_into_vec", format!("{into:?}"));
                let (mut l, mut r) = (Vec::new(), Vec::new());
                v.par_iter()
                    .map(|&x| (x, x % 2 == 0))
                    .unzip_into_vecs(&mut l, &mut r);
                say("unzip_into_vecs", format!("{l:?} {r:?}"));
                say(
                    "positions",
                    format!(
                        "{:?}",
                        v.par_iter().positions(|&x| x % 5 == 0).collect::<Vec<_>>()
                    ),
                );
                say(
                    "zip_eq",
                    format!(
                        "{:?}",
                        v.par_iter()
                            .zip_eq(v.par_iter().rev())
                            .map(|(a, b)| a ^ b)
                            .collect::<Vec<_>>()
                    ),
                );
                say(
                    "cmp",
                    format!("{:?}", v.par_iter().cmp(v[..v.len() / 2].par_iter())),
                );
                say("lt", v.par_iter().lt(v.par_iter().skip(1)).to_string());
                say("eq", v.par_iter().eq(v.par_iter()).to_string());
                say(
                    "interleave",
                    format!(
                        "{:?}",
                        v.par_iter()
                            .interleave(v[..3].par_iter())
                            .collect::<Vec<_>>()
                    ),
                );
                say(
                    "interleave_shortest",
                    format!(
                        "{:?}",
                        v.par_iter()
                            .interleave_shortest(v[..3].par_iter())
                            .collect::<Vec<_>>()
                    ),
                );
                say(
                    "chunks",
                    format!("{:?}", v.par_iter().chunks(4).collect::<Vec<_>>()),
                );
                say(
                    "fold_chunks",
                    format!(
                        "{:?}",
                        v.par_iter()
                            .fold_chunks(4, || 0, |a, x| a + x)
                            .collect::<Vec<_>>()
                    ),
                );
                say(
                    "par_rchunks",
                    format!("{:?}", v.par_rchunks(4).collect::<Vec<_>>()),
                );
                say(
                    "par_rchunks_exact",
                    format!("{:?}", v.par_rchunks_exact(4).collect::<Vec<_>>()),
                );
                say(
                    "par_chunk_by",
                    format!(
                        "{:?}",
                        v.par_chunk_by(|a, b| a % 2 == b % 2).collect::<Vec<_>>()
                    ),
                );
                say(
                    "par_split",
                    format!("{:?}", v.par_split(|x| x % 7 == 0).collect::<Vec<_>>()),
                );
                let mut m = v.to_vec();
                m.par_chunks_exact_mut(3).for_each(|c| c.reverse());
                m.par_rchunks_mut(5).for_each(|c| c[0] += 1);
                m.par_split_mut(|x| *x == 0).for_each(|c| c.sort());
                m.par_sort_by_cached_key(|x| x.to_string());
                say("mutated", format!("{m:?}"));
                let mut d = v.to_vec();
                say(
                    "par_drain",
                    format!("{:?} {d:?}", d.par_drain(1..4).collect::<Vec<_>>()),
                );
                let mut q: VecDeque<u64> = v.iter().copied().collect();
                say(
                    "deque par_drain",
                    format!("{}", q.par_drain(..).sum::<u64>()),
                );
                let mut h: HashMap<u64, u64> = v.iter().map(|&x| (x, x * 2)).collect();
                say(
                    "map par_drain",
                    format!("{} {}", h.par_drain().map(|(_, b)| b).sum::<u64>(), h.len()),
                );
                let mut s: HashSet<u64> = v.iter().copied().collect();
                say("set par_drain", format!("{}", s.par_drain().count()));
                let mut b: BinaryHeap<u64> = v.iter().copied().collect();
                say(
                    "heap par_drain",
                    format!("{}", b.par_drain().max().unwrap_or(0)),
                );
                say(
                    "words",
                    format!(
                        "{:?}",
                        words
                            .par_split_whitespace()
                            .map(str::len)
                            .collect::<Vec<_>>()
                    ),
                );
                say(
                    "find_first",
                    format!("{:?}", v.par_iter().find_first(|&&x| x > 50)),
                );
                say(
                    "min_by_key",
                    format!("{:?}", v.par_iter().min_by_key(|&&x| x % 17)),
                );
                say(
                    "while_some (all)",
                    format!("{:?}", v.par_iter().map(|&x| Some(x)).while_some().count()),
                );
                say(
                    "panic_fuse",
                    format!("{}", v.par_iter().panic_fuse().count()),
                );
                let (evens, odds): (Vec<u64>, Vec<u64>) = v.par_iter().partition(|&&x| x % 2 == 0);
                say("partition", format!("{evens:?} {odds:?}"));
                let mut out_fifo = Vec::new();
                let log = std::sync::Mutex::new(&mut out_fifo);
                $krate::scope_fifo(|s| {
                    for i in 0..4 {
                        let log = &log;
                        s.spawn_fifo(move |_| log.lock().unwrap().push(i));
                    }
                });
                out_fifo.sort();
                say("scope_fifo", format!("{out_fifo:?}"));
                let mut cells = [0u64; 4];
                $krate::in_place_scope(|s| {
                    for (i, c) in cells.iter_mut().enumerate() {
                        s.spawn(move |_| *c = i as u64 * 3);
                    }
                });
                say("in_place_scope", format!("{cells:?}"));
                out
            }

            /// The calls whose answer rayon leaves open: (find_any's, take_any's, skip_any's,
            /// find_map_any's).
            pub fn open(v: &[u64]) -> (Option<u64>, Vec<u64>, Vec<u64>, Option<u64>) {
                (
                    v.par_iter().copied().find_any(|x| x % 11 == 0),
                    v.par_iter()
                        .copied()
                        .filter(|x| x % 2 == 0)
                        .take_any(3)
                        .collect(),
                    v.par_iter().copied().skip_any(3).collect(),
                    v.par_iter()
                        .find_map_any(|&x| (x % 13 == 0).then_some(x * 10)),
                )
            }
        }
    };
}

same_source!(on_rayon, rayon);
same_source!(on_umt, umt_rt);

fn data() -> Vec<u64> {
    (0..200u64).map(|i| (i * 7919) % 101).collect()
}

#[test]
fn the_same_rayon_source_gives_the_same_answers_on_both() {
    let v = data();
    let words = "the same source on two runtimes, one import apart";
    let rt = umt_rt::Runtime::builder()
        .monitor(umt_rt::BackendKind::Disabled)
        .build()
        .unwrap();
    let on_umt = rt.install(|| on_umt::deterministic(&v, words));
    let on_rayon = on_rayon::deterministic(&v, words);
    assert_eq!(on_umt.len(), on_rayon.len());
    for (u, r) in on_umt.iter().zip(&on_rayon) {
        assert_eq!(u, r);
    }
}

#[test]
fn where_rayon_leaves_the_answer_open_both_keep_its_promise() {
    let v = data();
    let rt = umt_rt::Runtime::builder()
        .monitor(umt_rt::BackendKind::Disabled)
        .build()
        .unwrap();
    for (found, taken, skipped, mapped) in [rt.install(|| on_umt::open(&v)), on_rayon::open(&v)] {
        assert!(found.is_some_and(|x| x % 11 == 0 && v.contains(&x)));
        assert_eq!(taken.len(), 3);
        assert!(taken.iter().all(|x| x % 2 == 0 && v.contains(x)));
        assert_eq!(skipped.len(), v.len() - 3);
        assert!(mapped.is_some_and(|x| x % 130 == 0 && v.contains(&(x / 10))));
    }
}
