//! Parallel iterators, loop schedules, sorts and broadcast, each against a sequential
//! reference: every iterator and consumer, every schedule, empty / one-element / odd lengths,
//! panics in closures.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use proptest::prelude::*;
use umt_rt::prelude::*;
use umt_rt::{BackendKind, Runtime};

mod common;

/// A runtime of `threads` cores without a monitor (the tests that count items or steps).
fn unmonitored(threads: usize) -> Runtime {
    Runtime::builder()
        .num_threads(threads)
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap()
}

/// One runtime for the property tests (a runtime per case would dominate their time).
fn rt() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Runtime::builder()
            .monitor(BackendKind::Disabled)
            .build()
            .unwrap()
    })
}

fn schedules() -> impl Strategy<Value = Schedule> {
    prop_oneof![
        Just(Schedule::Static),
        Just(Schedule::StaticSteal),
        (1usize..50).prop_map(Schedule::Dynamic),
        (1usize..50).prop_map(Schedule::Guided),
        Just(Schedule::Fac2),
        Just(Schedule::Af),
        Just(Schedule::Auto),
    ]
}

const ALL: [Schedule; 8] = [
    Schedule::Static,
    Schedule::StaticSteal,
    Schedule::Dynamic(1),
    Schedule::Dynamic(7),
    Schedule::Guided(3),
    Schedule::Fac2,
    Schedule::Af,
    Schedule::Auto,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn consumers_match_the_sequential_reference(
        v in proptest::collection::vec(-1000i32..1000, 0..1500),
        s in schedules(),
    ) {
        rt().install(|| {
            let doubled: Vec<i64> = v.par_iter().schedule(s).map(|&x| 2 * x as i64).collect();
            assert_eq!(doubled, v.iter().map(|&x| 2 * x as i64).collect::<Vec<_>>());
            let list = v.par_iter().schedule(s).filter(|x| **x > 0).collect_vec_list();
            assert!(list.iter().all(|part| !part.is_empty()));
            let flat: Vec<&i32> = list.into_iter().flatten().collect();
            assert_eq!(flat, v.iter().filter(|x| **x > 0).collect::<Vec<_>>());
            let odd: Vec<&i32> = v.par_iter().schedule(s).filter(|x| *x % 2 != 0).collect();
            assert_eq!(odd, v.iter().filter(|x| *x % 2 != 0).collect::<Vec<_>>());
            let sum: i64 = v.par_iter().schedule(s).map(|&x| x as i64).sum();
            assert_eq!(sum, v.iter().map(|&x| x as i64).sum::<i64>());
            assert_eq!(
                v.par_iter().schedule(s).filter(|x| **x > 0).count(),
                v.iter().filter(|x| **x > 0).count()
            );
            // Concatenation: associative, not commutative, so the order shows.
            let concat = v.par_iter().schedule(s).map(|&x| vec![x]).reduce(Vec::new, |mut a, b| {
                a.extend(b);
                a
            });
            assert_eq!(concat, v);
            // Ties: the first minimum, the last maximum, as `Iterator`'s.
            let key = |x: &&i32| x.rem_euclid(7);
            assert_eq!(
                v.par_iter().schedule(s).min_by_key(key).map(|x| x as *const i32),
                v.iter().min_by_key(key).map(|x| x as *const i32)
            );
            assert_eq!(
                v.par_iter().schedule(s).max_by_key(key).map(|x| x as *const i32),
                v.iter().max_by_key(key).map(|x| x as *const i32)
            );
        });
    }

    /// The calls added for rayon users (issue 33), each against `Iterator`'s.
    #[test]
    fn more_adaptors_and_consumers_match_the_sequential_reference(
        v in proptest::collection::vec(-500i32..500, 0..1300),
        s in schedules(),
        target in -500i32..500,
    ) {
        rt().install(|| {
            let fm: Vec<i32> = v.par_iter().schedule(s).filter_map(|&x| (x % 3 == 0).then_some(x / 3)).collect();
            assert_eq!(fm, v.iter().filter_map(|&x| (x % 3 == 0).then_some(x / 3)).collect::<Vec<_>>());
            let flat: Vec<i32> = v.par_iter().schedule(s).flat_map_iter(|&x| [x; 2].into_iter().take((x & 1) as usize + 1)).collect();
            assert_eq!(flat, v.iter().flat_map(|&x| [x; 2].into_iter().take((x & 1) as usize + 1)).collect::<Vec<_>>());
            let seen = AtomicUsize::new(0);
            let copied: Vec<i32> = v.par_iter().schedule(s).inspect(|_| { seen.fetch_add(1, Ordering::Relaxed); }).copied().collect();
            assert_eq!(copied, v);
            assert_eq!(seen.load(Ordering::Relaxed), v.len());
            let cloned: Vec<i32> = v.par_iter().schedule(s).cloned().collect();
            assert_eq!(cloned, v);
            // Ties: the first minimum, the last maximum, as `Iterator`'s.
            let by = |a: &&i32, b: &&i32| a.rem_euclid(5).cmp(&b.rem_euclid(5));
            assert_eq!(
                v.par_iter().schedule(s).min_by(by).map(|x| x as *const i32),
                v.iter().min_by(by).map(|x| x as *const i32)
            );
            assert_eq!(
                v.par_iter().schedule(s).max_by(by).map(|x| x as *const i32),
                v.iter().max_by(by).map(|x| x as *const i32)
            );
            assert_eq!(v.par_iter().schedule(s).copied().min(), v.iter().copied().min());
            assert_eq!(v.par_iter().schedule(s).copied().max(), v.iter().copied().max());
            let concat = v.par_iter().schedule(s).map(|&x| vec![x]).reduce_with(|mut a, b| {
                a.extend(b);
                a
            });
            assert_eq!(concat.unwrap_or_default(), v);
            assert_eq!(v.par_iter().schedule(s).any(|&x| x == target), v.contains(&target));
            assert_eq!(v.par_iter().schedule(s).all(|&x| x != target), !v.contains(&target));
            let found = v.par_iter().schedule(s).find_any(|&&x| x == target);
            assert_eq!(found.is_some(), v.contains(&target));
            assert!(found.is_none_or(|&x| x == target));
            let at = v.par_iter().schedule(s).position_any(|&x| x == target);
            assert_eq!(at.is_some(), v.contains(&target));
            assert!(at.is_none_or(|i| v[i] == target));
            let tried = v.par_iter().schedule(s).try_for_each(|&x| if x == target { Err(x) } else { Ok(()) });
            assert_eq!(tried.is_err(), v.contains(&target));
            let sum = AtomicUsize::new(0);
            v.par_iter().schedule(s).for_each_init(Vec::new, |scratch: &mut Vec<i32>, &x| {
                scratch.push(x);
                sum.fetch_add(scratch.len(), Ordering::Relaxed);
            });
            assert!(sum.load(Ordering::Relaxed) >= v.len());
        });
    }

    /// `chain`, `skip`, `take`, `step_by`, `unzip` and `partition`, against `Iterator`'s.
    #[test]
    fn reshaping_calls_match_the_sequential_reference(
        v in proptest::collection::vec(any::<i16>(), 0..900),
        w in proptest::collection::vec(any::<i16>(), 0..300),
        n in 0usize..1000,
        step in 0usize..9,
        s in schedules(),
    ) {
        rt().install(|| {
            let chained: Vec<i16> = v.par_iter().schedule(s).chain(w.par_iter()).copied().collect();
            assert_eq!(chained, v.iter().chain(w.iter()).copied().collect::<Vec<_>>());
            let odd_then_all: Vec<i16> = v.par_iter().filter(|x| *x % 2 != 0).chain(&w).copied().collect();
            assert_eq!(odd_then_all, v.iter().filter(|x| *x % 2 != 0).chain(&w).copied().collect::<Vec<_>>());
            let skipped: Vec<&i16> = v.par_iter().schedule(s).skip(n).collect();
            assert_eq!(skipped, v.iter().skip(n).collect::<Vec<_>>());
            let taken: Vec<&i16> = v.par_iter().schedule(s).take(n).collect();
            assert_eq!(taken, v.iter().take(n).collect::<Vec<_>>());
            let stepped: Vec<(usize, &i16)> = v.par_iter().schedule(s).step_by(step).enumerate().collect();
            assert_eq!(stepped, v.iter().step_by(step.max(1)).enumerate().collect::<Vec<_>>());
            // A stepped side that ends first: `chain` and `interleave` ask it for empty
            // ranges at its end (they once pointed past the slice).
            let then_w: Vec<i16> =
                v.par_iter().schedule(s).step_by(step).chain(w.par_iter()).copied().with_max_len(7).collect();
            assert_eq!(then_w, v.iter().step_by(step.max(1)).chain(&w).copied().collect::<Vec<_>>());
            let woven: Vec<i16> =
                w.par_iter().schedule(s).step_by(step).interleave(v.par_iter()).copied().with_max_len(7).collect();
            let w_stepped: Vec<i16> = w.iter().step_by(step.max(1)).copied().collect();
            assert_eq!(woven, interleaved(&w_stepped, &v, false));
            let mut marked = v.clone();
            marked.par_iter_mut().schedule(s).skip(1).step_by(step).for_each(|x| *x = 0);
            let mut want = v.clone();
            want.iter_mut().skip(1).step_by(step.max(1)).for_each(|x| *x = 0);
            assert_eq!(marked, want);
            let (firsts, seconds): (Vec<i16>, Vec<usize>) =
                v.par_iter().schedule(s).enumerate().map(|(i, &x)| (x, i)).unzip();
            assert_eq!(firsts, v);
            assert_eq!(seconds, (0..v.len()).collect::<Vec<_>>());
            let (neg, rest): (Vec<i16>, Vec<i16>) = v.par_iter().schedule(s).copied().partition(|x| *x < 0);
            let want: (Vec<i16>, Vec<i16>) = v.iter().copied().partition(|x| *x < 0);
            assert_eq!((neg, rest), want);
            let side = |x: i16| {
                if x % 3 == 0 {
                    umt_rt::iter::Either::Left(x)
                } else {
                    umt_rt::iter::Either::Right(i32::from(x) * 2)
                }
            };
            let (threes, others): (Vec<i16>, Vec<i32>) =
                v.par_iter().schedule(s).copied().partition_map(side);
            assert_eq!(threes, v.iter().copied().filter(|x| x % 3 == 0).collect::<Vec<_>>());
            let want: Vec<i32> =
                v.iter().filter(|x| *x % 3 != 0).map(|x| i32::from(*x) * 2).collect();
            assert_eq!(others, want);
        });
    }

    /// `par_chunks_exact`, `par_windows`, `par_array_windows` and ranges of every integer
    /// type, against `std`'s.
    #[test]
    fn more_sources_match_the_sequential_reference(
        v in proptest::collection::vec(any::<u8>(), 0..700),
        size in 0usize..12,
        start in -300i64..300,
        len in 0i64..900,
        s in schedules(),
    ) {
        rt().install(|| {
            let size1 = size.max(1);
            let exact: Vec<&[u8]> = v.par_chunks_exact(size).schedule(s).collect();
            assert_eq!(exact, v.chunks_exact(size1).collect::<Vec<_>>());
            let windows: Vec<&[u8]> = v.par_windows(size).schedule(s).collect();
            assert_eq!(windows, v.windows(size1).collect::<Vec<_>>());
            // Arrays of a few fixed sizes, indexed (rev, enumerate) as windows are.
            let w3: Vec<(usize, &[u8; 3])> = v.par_array_windows::<3>().schedule(s).enumerate().rev().collect();
            let want3: Vec<(usize, &[u8; 3])> = v.windows(3).map(|w| w.try_into().unwrap()).enumerate().rev().collect();
            assert_eq!(w3, want3);
            let w1: Vec<&[u8; 1]> = v.par_array_windows().schedule(s).collect();
            assert_eq!(w1.len(), v.len());
            assert_eq!(v.par_array_windows::<0>().schedule(s).count(), v.len());
            let w9 = v.par_array_windows::<9>().schedule(s).map(|w| w.iter().map(|&b| u32::from(b)).sum::<u32>()).collect::<Vec<_>>();
            assert_eq!(w9, v.windows(9).map(|w| w.iter().map(|&b| u32::from(b)).sum::<u32>()).collect::<Vec<_>>());
            let r = start..start + len;
            let got: Vec<i64> = r.clone().into_par_iter().schedule(s).collect();
            assert_eq!(got, r.clone().collect::<Vec<_>>());
            let small = (start.clamp(-128, 127) as i8)..(start.clamp(-128, 127) as i8).saturating_add(len.min(100) as i8);
            let sum: i64 = small.clone().into_par_iter().schedule(s).map(i64::from).sum();
            assert_eq!(sum, small.map(i64::from).sum::<i64>());
            let unsigned = (len as u32)..(2 * len as u32);
            assert_eq!(unsigned.clone().into_par_iter().schedule(s).count(), unsigned.len());
            // An empty or reversed range has no items.
            let reversed = (start + len)..start;
            assert_eq!(reversed.clone().into_par_iter().schedule(s).count(), reversed.count());
            // Inclusive ranges, up to the type's maximum, and empty ones.
            let r = start..=start + len;
            let got: Vec<i64> = r.clone().into_par_iter().schedule(s).collect();
            assert_eq!(got, r.collect::<Vec<_>>());
            let top = (u8::MAX - (len.min(255) as u8))..=u8::MAX;
            let got: Vec<u8> = top.clone().into_par_iter().schedule(s).rev().collect();
            assert_eq!(got, top.rev().collect::<Vec<_>>());
            let all = i8::MIN..=i8::MAX;
            assert_eq!(all.clone().into_par_iter().schedule(s).count(), 256);
            let empty = (start + 1)..=start;
            assert_eq!(empty.into_par_iter().schedule(s).count(), 0);
            let mut spent = start..=start;
            spent.next();
            assert_eq!(spent.into_par_iter().schedule(s).count(), 0);
        });
    }

    #[test]
    fn adaptors_match_the_sequential_reference(
        v in proptest::collection::vec(any::<u16>(), 0..1200),
        w in proptest::collection::vec(any::<u16>(), 0..1200),
        chunk in 0usize..40,
        start in 0usize..100,
        s in schedules(),
    ) {
        rt().install(|| {
            let zipped: Vec<(usize, u32)> = v
                .par_iter()
                .zip(&w)
                .enumerate()
                .schedule(s)
                .map(|(i, (a, b))| (i, *a as u32 + *b as u32))
                .collect();
            let want: Vec<(usize, u32)> =
                v.iter().zip(&w).enumerate().map(|(i, (a, b))| (i, *a as u32 + *b as u32)).collect();
            assert_eq!(zipped, want);
            let sums: Vec<u64> = v
                .par_chunks(chunk)
                .schedule(s)
                .map(|c| c.iter().map(|&x| x as u64).sum())
                .collect();
            assert_eq!(sums, v.chunks(chunk.max(1)).map(|c| c.iter().map(|&x| x as u64).sum()).collect::<Vec<u64>>());
            let range: Vec<usize> = (start..start + v.len()).into_par_iter().schedule(s).collect();
            assert_eq!(range, (start..start + v.len()).collect::<Vec<_>>());
            let mut m = v.clone();
            m.par_iter_mut().schedule(s).for_each(|x| *x = x.wrapping_mul(3));
            assert_eq!(m, v.iter().map(|x| x.wrapping_mul(3)).collect::<Vec<_>>());
            let mut m = v.clone();
            m.par_chunks_mut(chunk).enumerate().schedule(s).for_each(|(i, c)| c.fill(i as u16));
            let mut want = v.clone();
            want.chunks_mut(chunk.max(1)).enumerate().for_each(|(i, c)| c.fill(i as u16));
            assert_eq!(m, want);
        });
    }

    #[test]
    fn sorts_match_the_standard_ones(
        v in proptest::collection::vec(0u32..50, 0..6000),
    ) {
        rt().install(|| {
            let mut want = v.clone();
            want.sort();
            let mut a = v.clone();
            a.par_sort_unstable();
            assert_eq!(a, want);
            let mut b = v.clone();
            b.par_sort();
            assert_eq!(b, want);
            // Stable: equal keys keep their order.
            let mut pairs: Vec<(u32, usize)> = v.iter().copied().zip(0..).collect();
            pairs.par_sort_by_key(|p| p.0);
            let mut want_pairs: Vec<(u32, usize)> = v.iter().copied().zip(0..).collect();
            want_pairs.sort_by_key(|p| p.0);
            assert_eq!(pairs, want_pairs);
        });
    }

    #[test]
    fn every_schedule_visits_every_index_exactly_once(
        len in 0usize..5000,
        s in schedules(),
    ) {
        let seen: Vec<AtomicU8> = (0..len).map(|_| AtomicU8::new(0)).collect();
        rt().parallel_for_with(0..len, s, |i| {
            seen[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(seen.iter().all(|c| c.load(Ordering::Relaxed) == 1));
    }
}

#[test]
fn large_sorts_match_the_standard_ones() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let v: Vec<u64> = (0..300_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .collect();
    let mut want = v.clone();
    want.sort_unstable();
    for input in [
        v.clone(),
        want.clone(),
        want.iter().rev().copied().collect(),
        vec![7; 300_000],
    ] {
        let mut want = input.clone();
        want.sort_unstable();
        let mut a = input.clone();
        rt().install(|| a.par_sort_unstable());
        assert_eq!(a, want);
        // Outside a runtime: on the global one.
        let mut b = input;
        b.par_sort();
        assert_eq!(b, want);
    }
}

/// A search over a range no loop could walk (`0..usize::MAX`) ends once it has decided, on
/// every schedule, on one core and on two, in pieces of any length: the loop stops handing
/// out chunks, not only skipping them (there are 2^48 pieces of 2^16). rayon's consumers end
/// such loops too. A regression hangs here.
#[test]
fn searches_over_a_range_no_loop_could_walk_end_once_decided() {
    for threads in [1, 2] {
        let rt = unmonitored(threads);
        for s in [
            Schedule::Static,
            Schedule::StaticSteal,
            Schedule::Dynamic(64),
            Schedule::Guided(8),
            Schedule::Fac2,
            Schedule::Af,
        ] {
            for max in [1 << 16, usize::MAX] {
                let all = || {
                    (0..usize::MAX)
                        .into_par_iter()
                        .schedule(s)
                        .with_max_len(max)
                };
                let at = format!("{s}, {threads} thread(s), max {max}");
                rt.install(|| {
                    assert!(all().any(|i| i == 1000), "{at}");
                    assert!(!all().all(|i| i < 5000), "{at}");
                    assert_eq!(all().find_any(|&i| i == 1000), Some(1000), "{at}");
                    assert_eq!(all().find_first(|&i| i % 1000 == 999), Some(999), "{at}");
                    assert_eq!(all().position_first(|i| i == 70_000), Some(70_000), "{at}");
                    assert_eq!(
                        all().try_for_each(|i| if i == 3000 { Err(i) } else { Ok(()) }),
                        Err(3000),
                        "{at}"
                    );
                    let sum = all()
                        .map(|i| (i != 3000).then_some(1u64))
                        .try_reduce(|| 0, |a, b| Some(a + b));
                    assert_eq!(sum, None, "{at}");
                    // A fold's blocks still give their identity when their base is full
                    // (without `with_max_len`: its bound on blocks would make 2^48 of them).
                    if max == usize::MAX {
                        let folds: Vec<u32> = all().take_any(0).fold(|| 7, |a, _| a).collect();
                        assert!(!folds.is_empty() && folds.iter().all(|&x| x == 7), "{at}");
                    }
                    let ten: Vec<usize> = all().filter(|i| i % 7 == 0).take_any(10).collect();
                    assert_eq!(ten.len(), 10, "{at}");
                    assert!(ten.iter().all(|i| i % 7 == 0), "{at}");
                    let some: Vec<usize> = all()
                        .map(|i| (i < 5000).then_some(i))
                        .while_some()
                        .collect();
                    assert!(some.iter().all(|&i| i < 5000), "{at}");
                    let small: Vec<usize> = all().take_any_while(|&i| i < 5000).collect();
                    assert!(small.iter().all(|&i| i < 5000), "{at}");
                });
            }
        }
    }
}

/// `any`, `find_any`, `position_any`, `try_for_each`, `find_map_any`, `try_for_each_init`,
/// `try_reduce_with`, `while_some` and `take_any` stop once decided: on one core, with no other
/// participant, the loop visits exactly the items up to the one that decides.
#[test]
fn short_circuiting_consumers_stop_once_decided() {
    let rt = unmonitored(1);
    let n = 100_000usize;
    for s in [
        Schedule::StaticSteal,
        Schedule::Dynamic(64),
        Schedule::Guided(8),
    ] {
        let visited = AtomicUsize::new(0);
        let count = |i: &usize| {
            visited.fetch_add(1, Ordering::Relaxed);
            *i == 1000
        };
        rt.install(|| {
            assert!((0..n).into_par_iter().schedule(s).any(|i| count(&i)));
            assert_eq!(visited.swap(0, Ordering::Relaxed), 1001, "{s}: any");
            assert_eq!(
                (0..n).into_par_iter().schedule(s).find_any(count),
                Some(1000)
            );
            assert_eq!(visited.swap(0, Ordering::Relaxed), 1001, "{s}: find_any");
            assert_eq!(
                (0..n)
                    .into_par_iter()
                    .schedule(s)
                    .position_any(|i| count(&i)),
                Some(1000)
            );
            assert_eq!(
                visited.swap(0, Ordering::Relaxed),
                1001,
                "{s}: position_any"
            );
            let r = (0..n)
                .into_par_iter()
                .schedule(s)
                .try_for_each(|i| if count(&i) { Err(i) } else { Ok(()) });
            assert_eq!(r, Err(1000));
            assert_eq!(
                visited.swap(0, Ordering::Relaxed),
                1001,
                "{s}: try_for_each"
            );
            let found = (0..n)
                .into_par_iter()
                .schedule(s)
                .find_map_any(|i| count(&i).then_some(i * 2));
            assert_eq!(found, Some(2000));
            assert_eq!(
                visited.swap(0, Ordering::Relaxed),
                1001,
                "{s}: find_map_any"
            );
            let r = (0..n)
                .into_par_iter()
                .schedule(s)
                .try_for_each_init(|| (), |(), i| if count(&i) { Err(i) } else { Ok(()) });
            assert_eq!(r, Err(1000));
            assert_eq!(
                visited.swap(0, Ordering::Relaxed),
                1001,
                "{s}: try_for_each_init"
            );
            let r = (0..n)
                .into_par_iter()
                .schedule(s)
                .map(|i| if count(&i) { None } else { Some(i) })
                .try_reduce_with(|a, b| Some(a.max(b)));
            assert_eq!(r, Some(None));
            assert_eq!(
                visited.swap(0, Ordering::Relaxed),
                1001,
                "{s}: try_reduce_with"
            );
            // One participant takes the chunks in index order: exactly the items before the
            // None pass.
            let before: Vec<usize> = (0..n)
                .into_par_iter()
                .schedule(s)
                .map(|i| (!count(&i)).then_some(i))
                .while_some()
                .collect();
            assert_eq!(before, (0..1000).collect::<Vec<_>>(), "{s}: while_some");
            assert_eq!(
                visited.swap(0, Ordering::Relaxed),
                1001,
                "{s}: while_some makes no item after the None"
            );
            let some: Vec<usize> = (0..n)
                .into_par_iter()
                .schedule(s)
                .inspect(|i| {
                    count(i);
                })
                .take_any(10)
                .collect();
            assert_eq!(some, (0..10).collect::<Vec<_>>(), "{s}: take_any");
            assert_eq!(
                visited.swap(0, Ordering::Relaxed),
                10,
                "{s}: take_any makes no item past the tenth"
            );
            // try_fold stops its block at the first failure (rayon's "stops processing the
            // local set of items"): on one core the fold cuts the loop into 8 blocks, and
            // each fails at its 1001st item; no item after that is made.
            let per_block = n / 8;
            let r: Vec<Option<usize>> = (0..n)
                .into_par_iter()
                .schedule(s)
                .inspect(|i| {
                    count(i);
                })
                .try_fold(|| 0usize, |a, i| (i % per_block != 1000).then_some(a + i))
                .collect();
            assert_eq!(r, vec![None; 8], "{s}: try_fold");
            assert_eq!(
                visited.swap(0, Ordering::Relaxed),
                8 * 1001,
                "{s}: try_fold makes no item after a block's failure"
            );
            // take_any_while stops the loop at the first false; skip_any_while stops asking.
            let before: Vec<usize> = (0..n)
                .into_par_iter()
                .schedule(s)
                .take_any_while(|i| !count(i))
                .collect();
            assert_eq!(before, (0..1000).collect::<Vec<_>>(), "{s}: take_any_while");
            assert_eq!(
                visited.swap(0, Ordering::Relaxed),
                1001,
                "{s}: take_any_while makes no item after the false"
            );
            let after: Vec<usize> = (0..n)
                .into_par_iter()
                .schedule(s)
                .skip_any_while(|i| !count(i))
                .collect();
            assert_eq!(after, (1000..n).collect::<Vec<_>>(), "{s}: skip_any_while");
            assert_eq!(
                visited.swap(0, Ordering::Relaxed),
                1001,
                "{s}: skip_any_while asks no item after the false"
            );
            // rev walks a part back in pieces (16 indices first): a search from the end
            // makes the first piece only, not the whole part.
            let found = (0..n)
                .into_par_iter()
                .schedule(s)
                .inspect(|i| {
                    count(i);
                })
                .rev()
                .find_first(|&i| i == n - 10);
            assert_eq!(found, Some(n - 10));
            assert_eq!(
                visited.swap(0, Ordering::Relaxed),
                16,
                "{s}: rev makes a piece at a time"
            );
        });
    }
}

#[test]
fn a_panic_in_a_closure_propagates_and_the_runtime_lives_on() {
    for s in ALL {
        let ran: Vec<AtomicU8> = (0..10_000).map(|_| AtomicU8::new(0)).collect();
        let r = catch_unwind(AssertUnwindSafe(|| {
            rt().install(|| {
                (0..10_000usize).into_par_iter().schedule(s).for_each(|i| {
                    ran[i].fetch_add(1, Ordering::Relaxed);
                    if i == 4321 {
                        panic!("boom at {i}");
                    }
                })
            })
        }));
        let p = r.expect_err("the panic propagates");
        assert_eq!(p.downcast_ref::<String>().unwrap(), "boom at 4321");
        // The panicking index ran; no index ran twice.
        assert_eq!(ran[4321].load(Ordering::Relaxed), 1);
        assert!(ran.iter().all(|c| c.load(Ordering::Relaxed) <= 1), "{s}");
        let sum: usize = rt().install(|| (0..1000usize).into_par_iter().schedule(s).sum());
        assert_eq!(sum, 499_500, "{s}");
    }
}

#[test]
fn loops_outside_a_runtime_use_the_global_one() {
    let names: Vec<String> = (0..64usize)
        .into_par_iter()
        .map(|_| std::thread::current().name().unwrap_or("").to_string())
        .collect();
    assert_eq!(names.len(), 64);
    if umt_rt::current_num_threads() > 1 {
        assert!(
            names.iter().all(|n| n.starts_with("umt-worker")),
            "{names:?}"
        );
    }
}

#[test]
fn nested_loops_complete() {
    let total: usize = rt().install(|| {
        (0..64usize)
            .into_par_iter()
            .map(|i| {
                (0..i)
                    .into_par_iter()
                    .schedule(Schedule::Dynamic(3))
                    .sum::<usize>()
            })
            .sum()
    });
    assert_eq!(
        total,
        (0..64usize).map(|i| (0..i).sum::<usize>()).sum::<usize>()
    );
}

#[test]
fn broadcast_calls_once_per_core_on_that_core() {
    let runtime = rt();
    let from_outside = runtime.broadcast(|ctx| {
        (
            ctx.index(),
            ctx.num_threads(),
            ctx.cpu(),
            umt_rt::current_cpu(),
        )
    });
    assert_eq!(from_outside.len(), runtime.cpus().len());
    for (i, (index, n, cpu, on)) in from_outside.into_iter().enumerate() {
        assert_eq!(index, i);
        assert_eq!(n, runtime.cpus().len());
        assert_eq!(cpu, runtime.cpus()[i]);
        assert_eq!(on, Some(cpu), "call {i} ran on a worker of its core");
        assert_eq!(umt_rt::current_thread_index(), None);
    }
    // From a worker, nested in a loop, many times: no call lost, none run twice.
    let calls = AtomicUsize::new(0);
    runtime.install(|| {
        (0..50usize).into_par_iter().for_each(|_| {
            let r = umt_rt::broadcast(|ctx| {
                calls.fetch_add(1, Ordering::Relaxed);
                (ctx.index(), umt_rt::current_thread_index())
            });
            for (i, (index, on)) in r.into_iter().enumerate() {
                assert_eq!((index, on), (i, Some(i)));
            }
        })
    });
    assert_eq!(calls.into_inner(), 50 * runtime.cpus().len());
}

#[test]
fn broadcast_reaches_a_core_whose_workers_are_all_parked() {
    let runtime = Runtime::builder()
        .monitor(common::monitored_backend())
        .build()
        .unwrap();
    for _ in 0..20 {
        // Let every worker park, then broadcast.
        std::thread::sleep(std::time::Duration::from_millis(5));
        let r = runtime.broadcast(|ctx| ctx.index());
        assert_eq!(r, (0..runtime.cpus().len()).collect::<Vec<_>>());
    }
}

#[test]
fn schedule_strings_round_trip_and_bad_ones_say_what_to_use() {
    for s in ALL {
        assert_eq!(s.to_string().parse::<Schedule>(), Ok(s));
    }
    let e = "guided,0".parse::<Schedule>().unwrap_err();
    assert!(e.to_string().contains("MIN_CHUNK at least 1"), "{e}");
}

/// `UMT_SCHEDULE` is read once per process: the case runs in a child process.
#[test]
fn the_environment_sets_the_program_schedule() {
    if std::env::var_os("UMT_ITER_CHILD").is_some() {
        assert_eq!(Schedule::program_default(), Schedule::Guided(64));
        let sum: usize = (0..1000usize).into_par_iter().sum();
        assert_eq!(sum, 499_500);
        return;
    }
    for (value, ok) in [("guided,64", true), ("nonsense", false)] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "the_environment_sets_the_program_schedule",
                "--nocapture",
            ])
            .env("UMT_ITER_CHILD", "1")
            .env("UMT_SCHEDULE", value)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.success(), ok, "{text}");
        if !ok {
            assert!(
                text.contains("UMT_SCHEDULE ignored: unknown loop schedule"),
                "{text}"
            );
        }
    }
}

#[test]
fn warnings_go_to_the_hook() {
    use std::sync::{Arc, Mutex};
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    umt_rt::set_warning_hook(move |l| sink.lock().unwrap().push(l.to_string()));
    // A detached panic on a runtime without a handler is a warning.
    let runtime = Runtime::builder()
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap();
    runtime.spawn_detached(|| panic!("for the hook"));
    drop(runtime);
    let lines = lines.lock().unwrap();
    assert!(
        lines.iter().any(|l| l.contains("for the hook")),
        "{lines:?}"
    );
}

/// Generic code written against rayon's trait bounds, with only the import swapped (issue 33).
mod written_for_rayon {
    use std::collections::HashMap;

    use umt_rt::prelude::*;

    fn plus_one_sum<I: ParallelIterator<Item = u64>>(it: I) -> u64 {
        it.map(|x| x + 1).sum()
    }

    fn numbered<I: IndexedParallelIterator<Item = u64>>(it: I) -> Vec<(usize, u64)> {
        it.enumerate().collect()
    }

    fn gathered<I: IntoParallelIterator<Item = u32>>(items: I) -> Vec<u32> {
        items.into_par_iter().collect()
    }

    fn largest<'a, C>(c: &'a C) -> Option<u64>
    where
        C: IntoParallelRefIterator<'a, Item = &'a u64> + ?Sized,
    {
        c.par_iter().copied().max()
    }

    fn doubled<'a, C>(c: &'a mut C)
    where
        C: IntoParallelRefMutIterator<'a, Item = &'a mut u64> + ?Sized,
    {
        c.par_iter_mut().for_each(|x| *x *= 2);
    }

    #[test]
    fn generic_code_over_the_traits_compiles_and_runs() {
        let mut v: Vec<u64> = (0..1000).collect();
        assert_eq!(plus_one_sum(v.par_iter().copied()), (1..=1000).sum::<u64>());
        assert_eq!(
            plus_one_sum((0..1000u64).into_par_iter()),
            (1..=1000).sum::<u64>()
        );
        assert_eq!(
            numbered((5..8u64).into_par_iter()),
            [(0, 5), (1, 6), (2, 7)]
        );
        assert_eq!(gathered(0..5u32), [0, 1, 2, 3, 4]);
        assert_eq!(
            gathered((0..5u32).into_par_iter().filter(|x| x % 2 == 0)),
            [0, 2, 4]
        );
        assert_eq!(largest(&v), Some(999));
        assert_eq!(largest(&v[..10]), Some(9));
        assert_eq!(largest(&[3u64, 9, 4]), Some(9));
        doubled(&mut v);
        doubled(&mut v[..1]);
        assert_eq!(v[..3], [0, 2, 4]);
        let mut a = [1u64, 2];
        doubled(&mut a);
        assert_eq!(a, [2, 4]);
    }

    #[test]
    fn collect_and_par_extend_fill_any_collection_in_order() {
        let ok: Result<Vec<u32>, String> = (0..100u32).into_par_iter().map(Ok).collect();
        assert_eq!(ok.unwrap(), (0..100).collect::<Vec<_>>());
        let err: Result<Vec<u32>, u32> = (0..100u32)
            .into_par_iter()
            .map(|x| if x == 42 { Err(x) } else { Ok(x) })
            .collect();
        assert_eq!(err, Err(42));
        // Several failures: the one with the lowest index, whichever part meets it first.
        let err: Result<Vec<u32>, u32> = (0..10_000u32)
            .into_par_iter()
            .map(|x| if x % 1000 == 999 { Err(x) } else { Ok(x) })
            .collect();
        assert_eq!(err, Err(999));
        let some: Option<Vec<u32>> = (0..10u32).into_par_iter().map(Some).collect();
        assert_eq!(some.map(|v| v.len()), Some(10));
        let squares: HashMap<u32, u32> = (0..50u32).into_par_iter().map(|x| (x, x * x)).collect();
        assert_eq!(squares[&7], 49);
        let text: String = ["a", "b", "c"].par_iter().copied().collect();
        assert_eq!(text, "abc");
        let mut v = vec![9u32];
        v.par_extend((0..5u32).into_par_iter().map(|x| x * 10));
        assert_eq!(v, [9, 0, 10, 20, 30, 40]);
        // rayon's other targets.
        let boxed: Box<[u32]> = (0..4u32).into_par_iter().collect();
        assert_eq!(&*boxed, [0, 1, 2, 3]);
        let shared: std::sync::Arc<[u32]> = (0..4u32).into_par_iter().rev().collect();
        assert_eq!(&*shared, [3, 2, 1, 0]);
        let heap: std::collections::BinaryHeap<u32> = (0..9u32).into_par_iter().collect();
        assert_eq!(heap.peek(), Some(&8));
        let boxed: Box<str> = ["a", "b"].par_iter().copied().collect();
        assert_eq!(&*boxed, "ab");
        let path: std::path::PathBuf = ["a", "b"].par_iter().collect();
        assert_eq!(path, std::path::Path::new("a/b"));
        let (a, b): (Vec<u32>, Vec<char>) = (0..3u32).into_par_iter().map(|x| (x, 'x')).collect();
        assert_eq!((a, b), (vec![0, 1, 2], vec!['x'; 3]));
        let cow: std::borrow::Cow<'_, str> = ["a", "b"].par_iter().copied().collect();
        assert_eq!(cow, "ab");
        let os: std::ffi::OsString = ["x", "y"].par_iter().map(std::ffi::OsStr::new).collect();
        assert_eq!(os, "xy");
        let () = (0..3u32).into_par_iter().map(|_| ()).collect();
        // A collection of the program's own that is no `FromIterator`, as for rayon.
        struct Total(u32);
        impl FromParallelIterator<u32> for Total {
            fn from_par_iter<I: IntoParallelIterator<Item = u32>>(it: I) -> Self {
                Total(it.into_par_iter().sum())
            }
        }
        assert_eq!((0..10u32).into_par_iter().collect::<Total>().0, 45);
    }
}

/// An item that counts its drops in `DROPS[id]`.
struct Counted<'a> {
    id: usize,
    drops: &'a [AtomicU8],
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, Ordering::Relaxed);
    }
}

fn counted(drops: &[AtomicU8]) -> Vec<Counted<'_>> {
    (0..drops.len()).map(|id| Counted { id, drops }).collect()
}

fn each_dropped_once(drops: &[AtomicU8]) {
    let bad: Vec<(usize, u8)> = drops
        .iter()
        .map(|d| d.load(Ordering::Relaxed))
        .enumerate()
        .filter(|&(_, n)| n != 1)
        .collect();
    assert!(bad.is_empty(), "items dropped other than once: {bad:?}");
}

proptest! {
    /// A vector by value: every item reaches the consumer once, in order where the consumer
    /// keeps order, and every item is dropped once, whether a consumer took it, an adaptor
    /// skipped it, a search stopped before it, or a closure panicked.
    #[test]
    fn a_vector_by_value_moves_each_item_once_and_drops_each_once(
        n in 0usize..300,
        skip in 0usize..50,
        take in 0usize..300,
        stop in 0usize..300,
        schedule in schedules(),
    ) {
        rt().install(|| {
            let drops: Vec<AtomicU8> = (0..n).map(|_| AtomicU8::new(0)).collect();
            let ids: Vec<usize> = counted(&drops)
                .into_par_iter()
                .schedule(schedule)
                .map(|c| c.id)
                .collect();
            prop_assert_eq!(ids, (0..n).collect::<Vec<_>>());
            each_dropped_once(&drops);

            let drops: Vec<AtomicU8> = (0..n).map(|_| AtomicU8::new(0)).collect();
            let kept: Vec<usize> = counted(&drops)
                .into_par_iter()
                .schedule(schedule)
                .skip(skip)
                .take(take)
                .map(|c| c.id)
                .collect();
            let want: Vec<usize> = (0..n).skip(skip).take(take).collect();
            prop_assert_eq!(kept, want);
            each_dropped_once(&drops);

            let drops: Vec<AtomicU8> = (0..n).map(|_| AtomicU8::new(0)).collect();
            let found = counted(&drops)
                .into_par_iter()
                .schedule(schedule)
                .find_any(|c| c.id == stop)
                .map(|c| c.id);
            prop_assert_eq!(found, (stop < n).then_some(stop));
            each_dropped_once(&drops);

            let drops: Vec<AtomicU8> = (0..n).map(|_| AtomicU8::new(0)).collect();
            let r = catch_unwind(AssertUnwindSafe(|| {
                counted(&drops)
                    .into_par_iter()
                    .schedule(schedule)
                    .for_each(|c| assert!(c.id != stop, "stop at {stop}"));
            }));
            prop_assert_eq!(r.is_err(), stop < n);
            each_dropped_once(&drops);
            Ok(())
        })?;
    }
}

proptest! {
    /// `fold` then `reduce`/`sum` gives the sequential fold, under every schedule; its
    /// accumulators come in index order (concatenated strings keep the order); `map_init`'s
    /// state is made at most once per item and each item is mapped once.
    #[test]
    fn fold_and_map_init_agree_with_sequential(
        n in 0usize..400,
        schedule in schedules(),
    ) {
        rt().install(|| {
            let sum = (0..n as u64)
                .into_par_iter()
                .schedule(schedule)
                .fold(|| 0u64, |a, i| a + i * i)
                .sum::<u64>();
            prop_assert_eq!(sum, (0..n as u64).map(|i| i * i).sum::<u64>());

            let text = (0..n)
                .into_par_iter()
                .schedule(schedule)
                .fold_with(String::new(), |mut s, i| {
                    s.push_str(&i.to_string());
                    s.push(',');
                    s
                })
                .reduce(String::new, |a, b| a + &b);
            let want: String = (0..n).map(|i| format!("{i},")).collect();
            prop_assert_eq!(text, want);

            let inits = AtomicUsize::new(0);
            let mapped: Vec<usize> = (0..n)
                .into_par_iter()
                .schedule(schedule)
                .map_init(
                    || {
                        inits.fetch_add(1, Ordering::Relaxed);
                        0usize
                    },
                    |seen, i| {
                        *seen += 1;
                        i * 2
                    },
                )
                .collect();
            prop_assert_eq!(mapped, (0..n).map(|i| i * 2).collect::<Vec<_>>());
            prop_assert!(inits.load(Ordering::Relaxed) <= n.max(1));

            let with: Vec<usize> = (0..n)
                .into_par_iter()
                .schedule(schedule)
                .map_with(10usize, |base, i| *base + i)
                .collect();
            prop_assert_eq!(with, (0..n).map(|i| 10 + i).collect::<Vec<_>>());
            Ok(())
        })?;
    }
}

proptest! {
    /// `find_first`/`find_last`, `find_map_first`/`find_map_last` and
    /// `position_first`/`position_last` give the sequential answer under every schedule, also
    /// behind a `filter` (items fewer than indices) and a `flat_map_iter` (more).
    #[test]
    fn first_and_last_searches_agree_with_sequential(
        v in proptest::collection::vec(0u8..20, 0..300),
        target in 0u8..20,
        schedule in schedules(),
    ) {
        rt().install(|| {
            let hit = |x: &&u8| **x == target;
            // Compared by address: which occurrence was found, not only its value.
            let at = |x: Option<&u8>| x.map(std::ptr::from_ref);
            prop_assert_eq!(
                at(v.par_iter().schedule(schedule).find_first(hit)),
                at(v.iter().find(hit))
            );
            prop_assert_eq!(
                at(v.par_iter().schedule(schedule).find_last(hit)),
                at(v.iter().rfind(hit))
            );
            prop_assert_eq!(
                v.par_iter().schedule(schedule).position_first(|x| *x == target),
                v.iter().position(|x| *x == target)
            );
            prop_assert_eq!(
                v.par_iter().schedule(schedule).position_last(|x| *x == target),
                v.iter().rposition(|x| *x == target)
            );
            let tagged = |(i, x): (usize, &u8)| (*x == target).then_some(i);
            prop_assert_eq!(
                v.par_iter().enumerate().schedule(schedule).find_map_first(tagged),
                v.iter().enumerate().find_map(tagged)
            );
            prop_assert_eq!(
                v.par_iter().enumerate().schedule(schedule).find_map_last(tagged),
                v.iter().enumerate().filter_map(tagged).next_back()
            );
            // Behind a filter and a flat_map_iter: the order of items, not indices.
            let odd = |x: &&u8| **x % 2 == 1;
            prop_assert_eq!(
                at(v.par_iter().schedule(schedule).filter(odd).find_first(hit)),
                at(v.iter().filter(odd).find(hit))
            );
            let twice = |(i, x): (usize, &u8)| [(i, u16::from(*x)), (i, u16::from(*x) + 100)];
            let near = |y: &(usize, u16)| y.1 == u16::from(target) + 100;
            prop_assert_eq!(
                v.par_iter().enumerate().schedule(schedule).flat_map_iter(twice).find_last(near),
                v.iter().enumerate().flat_map(twice).rfind(near)
            );
            prop_assert_eq!(
                v.par_iter().enumerate().schedule(schedule).flat_map_iter(twice).find_first(near),
                v.iter().enumerate().flat_map(twice).find(near)
            );
            Ok(())
        })?;
    }
}

proptest! {
    /// `try_reduce` agrees with the sequential `try_fold` for `Option` and `Result` items
    /// (failures from items and from the operation), `update` with `map`, `for_each_with`
    /// visits every item once.
    #[test]
    fn try_reduce_update_and_for_each_with_agree_with_sequential(
        v in proptest::collection::vec(proptest::option::weighted(0.98, 0u16..2000), 0..300),
        schedule in schedules(),
    ) {
        rt().install(|| {
            let par = v.par_iter().schedule(schedule).copied().try_reduce(|| 0u16, u16::checked_add);
            let seq = v.iter().try_fold(0u16, |a, x| x.and_then(|x| a.checked_add(x)));
            prop_assert_eq!(par, seq);

            let as_result = |x: &Option<u16>| x.ok_or("missing");
            let par: Result<u64, &str> = v
                .par_iter()
                .schedule(schedule)
                .map(as_result)
                .map(|r| r.map(u64::from))
                .try_reduce(|| 0, |a, b| Ok(a + b));
            let seq: Result<u64, &str> =
                v.iter().map(as_result).try_fold(0, |a, x| x.map(|x| a + u64::from(x)));
            prop_assert_eq!(par, seq);

            let bumped: Vec<Option<u16>> = v
                .par_iter()
                .schedule(schedule)
                .copied()
                .update(|x| *x = x.map(|x| x / 2))
                .collect();
            prop_assert_eq!(bumped, v.iter().map(|x| x.map(|x| x / 2)).collect::<Vec<_>>());

            let seen: Vec<AtomicU8> = (0..v.len()).map(|_| AtomicU8::new(0)).collect();
            let (tx, rx) = std::sync::mpsc::channel();
            (0..v.len())
                .into_par_iter()
                .schedule(schedule)
                .for_each_with(tx, |tx, i| {
                    seen[i].fetch_add(1, Ordering::Relaxed);
                    tx.send(i).expect("the receiver lives");
                });
            let mut got: Vec<usize> = rx.iter().collect();
            got.sort_unstable();
            prop_assert_eq!(got, (0..v.len()).collect::<Vec<_>>());
            prop_assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1));
            Ok(())
        })?;
    }
}

/// `rev` over parts longer than its largest piece (1 024 indices), under every schedule and
/// with chunks of any length: std's reversed order, each item once.
#[test]
fn rev_walks_long_parts_in_order() {
    for s in ALL {
        for len in [1023usize, 1024, 1025, 4097, 20_000] {
            for max in [usize::MAX, 1500, 7] {
                let got: Vec<usize> = rt().install(|| {
                    (0..len)
                        .into_par_iter()
                        .schedule(s)
                        .with_max_len(max)
                        .rev()
                        .collect()
                });
                assert_eq!(got, (0..len).rev().collect::<Vec<_>>(), "{s}, {len}, {max}");
            }
        }
    }
}

proptest! {
    /// `rev` gives std's reversed order on slices, ranges and owned vectors, through
    /// `enumerate`, `skip` and `zip`, and for searches; `flat_map` (nested parallel loops)
    /// gives std's `flat_map`.
    #[test]
    fn rev_and_flat_map_agree_with_sequential(
        v in proptest::collection::vec(any::<u16>(), 0..300),
        skip in 0usize..20,
        schedule in schedules(),
    ) {
        rt().install(|| {
            let got: Vec<u16> = v.par_iter().schedule(schedule).rev().copied().collect();
            prop_assert_eq!(got, v.iter().rev().copied().collect::<Vec<_>>());
            let got: Vec<(usize, u16)> =
                v.clone().into_par_iter().schedule(schedule).rev().enumerate().skip(skip).collect();
            let want: Vec<(usize, u16)> = v.iter().copied().rev().enumerate().skip(skip).collect();
            prop_assert_eq!(got, want);
            let n = v.len() as u32;
            let got: Vec<(u32, u16)> =
                (0..n).into_par_iter().schedule(schedule).rev().zip(v.par_iter().copied()).collect();
            prop_assert_eq!(got, (0..n).rev().zip(v.iter().copied()).collect::<Vec<_>>());
            let at = |x: Option<&u16>| x.map(std::ptr::from_ref);
            prop_assert_eq!(
                at(v.par_iter().schedule(schedule).rev().find_first(|x| **x % 7 == 0)),
                at(v.iter().rev().find(|x| **x % 7 == 0))
            );
            let got: Vec<u32> = v
                .par_iter()
                .schedule(schedule)
                .flat_map(|x| (0..u32::from(*x % 5)).into_par_iter().map(move |j| j * 10))
                .collect();
            let want: Vec<u32> =
                v.iter().flat_map(|x| (0..u32::from(*x % 5)).map(move |j| j * 10)).collect();
            prop_assert_eq!(got, want);
            Ok(())
        })?;
    }
}

proptest! {
    /// `par_bridge`: every item of the sequential source reaches the consumer once, under
    /// every schedule; a panic in the body reaches the caller and the runtime lives on.
    #[test]
    fn a_bridged_iterator_hands_each_item_out_once(
        n in 0usize..500,
        schedule in schedules(),
    ) {
        rt().install(|| {
            let mut got: Vec<usize> = (0..n).par_bridge().schedule(schedule).map(|i| i * 3).collect();
            got.sort_unstable();
            prop_assert_eq!(got, (0..n).map(|i| i * 3).collect::<Vec<_>>());
            let seen: Vec<AtomicU8> = (0..n).map(|_| AtomicU8::new(0)).collect();
            (0..n).filter(|i| i % 2 == 0).par_bridge().schedule(schedule).for_each(|i| {
                seen[i].fetch_add(1, Ordering::Relaxed);
            });
            for (i, s) in seen.iter().enumerate() {
                prop_assert_eq!(s.load(Ordering::Relaxed), u8::from(i % 2 == 0));
            }
            let r = catch_unwind(AssertUnwindSafe(|| {
                (0..n).par_bridge().schedule(schedule).for_each(|i| assert!(i != n / 2, "boom"));
            }));
            prop_assert_eq!(r.is_err(), n > 0);
            prop_assert_eq!((0..10u32).par_bridge().sum::<u32>(), 45);
            Ok(())
        })?;
    }
}

proptest! {
    /// The string iterators cut as `str`'s do, in order, multibyte characters included.
    #[test]
    fn string_iterators_cut_as_std_does(
        text in "[a-cé ,;\r\n\t]{0,200}",
        schedule in schedules(),
    ) {
        rt().install(|| {
            let s = text.as_str();
            prop_assert_eq!(s.par_chars().schedule(schedule).collect::<String>(), s);
            prop_assert_eq!(
                s.par_char_indices().schedule(schedule).collect::<Vec<_>>(),
                s.char_indices().collect::<Vec<_>>()
            );
            // rayon's lines: `str::lines`, except that a final bare `\r` goes too.
            prop_assert_eq!(
                s.par_lines().schedule(schedule).collect::<Vec<_>>(),
                s.split_terminator('\n')
                    .map(|l| l.strip_suffix('\r').unwrap_or(l))
                    .collect::<Vec<_>>()
            );
            if !s.ends_with('\r') {
                prop_assert_eq!(
                    s.par_lines().schedule(schedule).collect::<Vec<_>>(),
                    s.lines().collect::<Vec<_>>()
                );
            }
            prop_assert_eq!(
                s.par_split_whitespace().schedule(schedule).collect::<Vec<_>>(),
                s.split_whitespace().collect::<Vec<_>>()
            );
            prop_assert_eq!(
                s.par_split(',').schedule(schedule).collect::<Vec<_>>(),
                s.split(',').collect::<Vec<_>>()
            );
            prop_assert_eq!(
                s.par_split([',', ';']).collect::<Vec<_>>(),
                s.split([',', ';']).collect::<Vec<_>>()
            );
            prop_assert_eq!(
                s.par_split(|c: char| c == 'é').collect::<Vec<_>>(),
                s.split('é').collect::<Vec<_>>()
            );
            let seps: &[char] = &[' ', '\n'];
            prop_assert_eq!(
                s.par_split_terminator(seps).collect::<Vec<_>>(),
                s.split_terminator(seps).collect::<Vec<_>>()
            );
            prop_assert_eq!(
                s.par_split_inclusive(',').schedule(schedule).collect::<Vec<_>>(),
                s.split_inclusive(',').collect::<Vec<_>>()
            );
            prop_assert_eq!(
                s.par_split_ascii_whitespace().schedule(schedule).collect::<Vec<_>>(),
                s.split_ascii_whitespace().collect::<Vec<_>>()
            );
            prop_assert_eq!(
                s.par_matches(['a', 'é']).schedule(schedule).collect::<Vec<_>>(),
                s.matches(['a', 'é']).collect::<Vec<_>>()
            );
            prop_assert_eq!(
                s.par_match_indices('é').schedule(schedule).collect::<Vec<_>>(),
                s.match_indices('é').collect::<Vec<_>>()
            );
            prop_assert_eq!(
                s.par_bytes().schedule(schedule).rev().collect::<Vec<_>>(),
                s.bytes().rev().collect::<Vec<_>>()
            );
            prop_assert_eq!(
                s.par_encode_utf16().schedule(schedule).collect::<Vec<_>>(),
                s.encode_utf16().collect::<Vec<_>>()
            );
            Ok(())
        })?;
    }
}

proptest! {
    /// The standard collections by value, by reference and by mutable reference give their
    /// items in their own iteration order, each once.
    #[test]
    fn std_collections_iterate_in_their_own_order(
        v in proptest::collection::vec(any::<u16>(), 0..200),
    ) {
        use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, LinkedList, VecDeque};
        rt().install(|| {
            let map: HashMap<usize, u16> = v.iter().copied().enumerate().collect();
            let mut got: Vec<(usize, u16)> = map.clone().into_par_iter().collect();
            got.sort_unstable();
            prop_assert_eq!(got, v.iter().copied().enumerate().collect::<Vec<_>>());
            prop_assert_eq!(
                map.par_iter().map(|(_, x)| u64::from(*x)).sum::<u64>(),
                v.iter().map(|x| u64::from(*x)).sum::<u64>()
            );
            let mut bumped = map.clone();
            bumped.par_iter_mut().for_each(|(_, x)| *x = x.wrapping_add(1));
            prop_assert!(bumped.iter().all(|(k, x)| *x == v[*k].wrapping_add(1)));

            let tree: BTreeMap<u16, usize> = v.iter().copied().zip(0..).collect();
            prop_assert_eq!(
                tree.par_iter().map(|(k, i)| (*k, *i)).collect::<Vec<_>>(),
                tree.iter().map(|(k, i)| (*k, *i)).collect::<Vec<_>>()
            );
            let set: BTreeSet<u16> = v.iter().copied().collect();
            prop_assert_eq!(
                set.clone().into_par_iter().collect::<Vec<_>>(),
                set.iter().copied().collect::<Vec<_>>()
            );
            let hset: HashSet<u16> = v.iter().copied().collect();
            prop_assert_eq!(hset.par_iter().count(), hset.len());
            let deque: VecDeque<u16> = v.iter().copied().collect();
            prop_assert_eq!(deque.par_iter().copied().collect::<Vec<_>>(), v.clone());
            let heap: BinaryHeap<u16> = v.iter().copied().collect();
            prop_assert_eq!(heap.into_par_iter().map(u64::from).sum::<u64>(),
                v.iter().map(|x| u64::from(*x)).sum::<u64>());
            let list: LinkedList<u16> = v.iter().copied().collect();
            prop_assert_eq!(list.into_par_iter().collect::<Vec<_>>(), v.clone());
            prop_assert_eq!(v.first().copied().into_par_iter().collect::<Vec<_>>(),
                v.first().copied().into_iter().collect::<Vec<_>>());
            Ok(())
        })?;
    }
}

/// A `map_init` state that reports, when the part it was made for is done, how many items it
/// mapped: the length of one chunk the loop handed out.
struct PartLen<'a>(&'a std::sync::Mutex<Vec<usize>>, usize);

impl Drop for PartLen<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap().push(self.1);
    }
}

proptest! {
    /// `with_min_len` and `with_max_len` bound the chunks a loop hands out, under every
    /// schedule: none longer than `max(min, max)`, every item once and in order; one chunk
    /// when `min` covers the loop, one item per chunk under `with_max_len(1)`; before a
    /// `fold`, they bound its blocks.
    #[test]
    fn chunk_lengths_stay_within_min_and_max_len(
        n in 0usize..600,
        min in 1usize..80,
        max in 1usize..80,
        schedule in schedules(),
    ) {
        rt().install(|| {
            let parts = std::sync::Mutex::new(Vec::new());
            let got: Vec<usize> = (0..n)
                .into_par_iter()
                .schedule(schedule)
                .with_min_len(min)
                .with_max_len(max)
                .map_init(|| PartLen(&parts, 0), |p, i| {
                    p.1 += 1;
                    i
                })
                .collect();
            prop_assert_eq!(got, (0..n).collect::<Vec<_>>());
            let parts = parts.into_inner().unwrap();
            prop_assert_eq!(parts.iter().sum::<usize>(), n);
            prop_assert!(parts.iter().all(|&p| p <= min.max(max)), "{:?}", parts);

            let whole = std::sync::Mutex::new(Vec::new());
            (0..n).into_par_iter().schedule(schedule).with_min_len(n.max(1)).for_each_init(
                || PartLen(&whole, 0),
                |p, _| p.1 += 1,
            );
            prop_assert!(whole.into_inner().unwrap().len() <= 1);

            let ones = std::sync::Mutex::new(Vec::new());
            (0..n).into_par_iter().schedule(schedule).with_max_len(1).for_each_init(
                || PartLen(&ones, 0),
                |p, _| p.1 += 1,
            );
            // (An empty loop may still make one state, for no item.)
            let ones: Vec<usize> = ones.into_inner().unwrap().into_iter().filter(|&p| p > 0).collect();
            prop_assert!(ones.iter().all(|&p| p == 1) && ones.len() == n, "{:?}", ones);

            let blocks = (0..n)
                .into_par_iter()
                .with_max_len(max)
                .fold(|| 0usize, |k, _| k + 1)
                .collect::<Vec<_>>();
            prop_assert!(blocks.iter().all(|&k| k <= max), "{:?}", blocks);
            prop_assert_eq!(blocks.iter().sum::<usize>(), n);
            let blocks = (0..n)
                .into_par_iter()
                .with_min_len(min)
                .fold(|| 0usize, |k, _| k + 1)
                .collect::<Vec<_>>();
            prop_assert!(blocks.len() <= (n / min).max(1), "{:?}", blocks);
            prop_assert_eq!(blocks.iter().sum::<usize>(), n);
            Ok(())
        })?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The rayon calls added for code written against rayon (`flatten`, `flatten_iter`,
    /// `product`, `find_map_any`, `try_for_each_init`/`_with`, `try_reduce_with`,
    /// `try_fold`/`_with`, `take_any`, `skip_any`, `while_some`, `panic_fuse`,
    /// `fold_chunks`/`_with`,
    /// `collect_into_vec`, `unzip_into_vecs`, `positions`, `zip_eq`, the comparisons,
    /// `par_sort_by_cached_key`, `par_drain`) agree with the standard library's sequential
    /// counterparts, under every schedule, on empty, one-element and odd lengths.
    #[test]
    fn rayons_other_calls_agree_with_sequential(
        v in proptest::collection::vec(proptest::option::weighted(0.97, 0u16..3000), 0..300),
        w in proptest::collection::vec(0u16..4, 0..40),
        cut in (0usize..300, 0usize..300),
        schedule in schedules(),
    ) {
        rt().install(|| {
            let vals: Vec<u16> = v.iter().map(|x| x.unwrap_or(7)).collect();
            let rows: Vec<Vec<u16>> = vals.chunks(7).map(<[u16]>::to_vec).collect();
            let got: Vec<u16> = rows.clone().into_par_iter().schedule(schedule).flatten().collect();
            prop_assert_eq!(&got, &vals);
            let got: Vec<u16> = rows.par_iter().schedule(schedule).flatten_iter().copied().collect();
            prop_assert_eq!(&got, &vals);

            use std::num::Wrapping;
            let par: Wrapping<u32> =
                vals.par_iter().schedule(schedule).map(|&x| Wrapping(u32::from(x) | 1)).product();
            let seq: Wrapping<u32> = vals.iter().map(|&x| Wrapping(u32::from(x) | 1)).product();
            prop_assert_eq!(par, seq);

            let big = |x: &u16| (*x > 2500).then_some(u32::from(*x) * 2);
            match vals.par_iter().schedule(schedule).find_map_any(big) {
                Some(found) => prop_assert!(vals.iter().filter_map(big).any(|y| y == found)),
                None => prop_assert!(vals.iter().all(|x| big(x).is_none())),
            }

            let visits: Vec<AtomicU8> = (0..v.len()).map(|_| AtomicU8::new(0)).collect();
            let parts = AtomicUsize::new(0);
            let res = (0..v.len()).into_par_iter().schedule(schedule).try_for_each_init(
                || parts.fetch_add(1, Ordering::Relaxed),
                |_, i| {
                    visits[i].fetch_add(1, Ordering::Relaxed);
                    v[i].map(|_| ()).ok_or(i)
                },
            );
            match res {
                Ok(()) => prop_assert!(v.iter().all(Option::is_some)),
                Err(i) => prop_assert!(v[i].is_none()),
            }
            prop_assert!(visits.iter().all(|n| n.load(Ordering::Relaxed) <= 1));
            if v.iter().all(Option::is_some) {
                prop_assert!(visits.iter().all(|n| n.load(Ordering::Relaxed) == 1));
            }
            let (tx, rx) = std::sync::mpsc::channel();
            let sent = vals.par_iter().schedule(schedule).try_for_each_with(tx, |tx, &x| tx.send(x));
            prop_assert!(sent.is_ok());
            let mut got: Vec<u16> = rx.iter().collect();
            got.sort_unstable();
            let mut want = vals.clone();
            want.sort_unstable();
            prop_assert_eq!(got, want);

            let par = v.par_iter().schedule(schedule).copied().try_reduce_with(u16::checked_add);
            let seq = (!v.is_empty()).then(|| {
                v.iter().try_fold(0u16, |a, x| x.and_then(|x| a.checked_add(x)))
            });
            prop_assert_eq!(par, seq);

            let seq = v.iter().try_fold(0u16, |a, x| x.and_then(|x| a.checked_add(x)));
            let par = v
                .par_iter()
                .schedule(schedule)
                .try_fold(|| 0u16, |a, x| x.and_then(|x| a.checked_add(x)))
                .try_reduce(|| 0, u16::checked_add);
            prop_assert_eq!(par, seq);
            let par = v
                .par_iter()
                .schedule(schedule)
                .try_fold_with(0u16, |a, x| x.and_then(|x| a.checked_add(x)))
                .try_reduce(|| 0, u16::checked_add);
            prop_assert_eq!(par, seq);

            let mut into = vec![1u16; 5];
            vals.par_iter().schedule(schedule).copied().collect_into_vec(&mut into);
            prop_assert_eq!(&into, &vals);
            let (mut left, mut right) = (vec![9u16], Vec::new());
            vals.par_iter()
                .schedule(schedule)
                .map(|&x| (x, u32::from(x) + 1))
                .unzip_into_vecs(&mut left, &mut right);
            prop_assert_eq!(&left, &vals);
            prop_assert_eq!(right, vals.iter().map(|&x| u32::from(x) + 1).collect::<Vec<_>>());

            let got: Vec<usize> = v.par_iter().schedule(schedule).positions(Option::is_none).collect();
            let want: Vec<usize> =
                v.iter().enumerate().filter(|(_, x)| x.is_none()).map(|(i, _)| i).collect();
            prop_assert_eq!(got, want);

            let got: Vec<(u16, usize)> =
                vals.par_iter().schedule(schedule).copied().zip_eq(0..vals.len()).collect();
            prop_assert_eq!(got, vals.iter().copied().zip(0..vals.len()).collect::<Vec<_>>());
            let unequal = catch_unwind(AssertUnwindSafe(|| {
                vals.par_iter().zip_eq(0..vals.len() + 1).count()
            }));
            prop_assert!(unequal.is_err(), "zip_eq of unequal lengths panics");

            // The comparisons, against a slice that shares a prefix with `w`.
            let mut other = w.clone();
            other.truncate(cut.0 % (w.len() + 1));
            if cut.1 % 3 == 0 {
                other.push((cut.1 % 4) as u16);
            }
            let par = || w.par_iter().schedule(schedule);
            prop_assert_eq!(par().cmp(&other), w.iter().cmp(other.iter()));
            prop_assert_eq!(par().partial_cmp(&other), w.iter().partial_cmp(other.iter()));
            prop_assert_eq!(par().eq(&other), w.iter().eq(other.iter()));
            prop_assert_eq!(par().ne(&other), w.iter().ne(other.iter()));
            prop_assert_eq!(par().lt(&other), w.iter().lt(other.iter()));
            prop_assert_eq!(par().le(&other), w.iter().le(other.iter()));
            prop_assert_eq!(par().gt(&other), w.iter().gt(other.iter()));
            prop_assert_eq!(par().ge(&other), w.iter().ge(other.iter()));

            // Keys with many ties: the cached-key sort is stable, as std's.
            let keyed: Vec<(u16, usize)> = vals.iter().map(|&x| (x % 13, 0)).enumerate().map(|(i, (k, _))| (k, i)).collect();
            let mut got = keyed.clone();
            got.par_sort_by_cached_key(|&(k, _)| k.to_string());
            let mut want = keyed;
            want.sort_by_cached_key(|&(k, _)| k.to_string());
            prop_assert_eq!(got, want);

            // take_any and while_some stop making items: over 2^40 items, they end at once
            // (a few extra items at most, one per participant that was pulling one).
            let made = AtomicUsize::new(0);
            // (Under the default schedule: a fine one hands 2^40 items out in too many chunks
            // for the skipped ones to cost nothing.)
            let huge = || (0..1u64 << 40).into_par_iter().inspect(|_| {
                made.fetch_add(1, Ordering::Relaxed);
            });
            prop_assert_eq!(huge().take_any(10).count(), 10);
            prop_assert!(made.swap(0, Ordering::Relaxed) <= 10 + 64);
            let passed = huge().map(|x| (x < 5).then_some(x)).while_some().count();
            prop_assert!(passed <= 5 + 64);
            prop_assert!(made.load(Ordering::Relaxed) <= 6 + 64 * 2);
            // take_any / skip_any: how many, each a distinct item of the source.
            let n = cut.0 % 50;
            let evens = || (0..v.len()).into_par_iter().schedule(schedule).filter(|i| i % 2 == 0);
            let total = v.len().div_ceil(2);
            for (got, want) in [
                (evens().take_any(n).collect::<Vec<usize>>(), n.min(total)),
                (evens().skip_any(n).collect::<Vec<usize>>(), total.saturating_sub(n)),
            ] {
                prop_assert_eq!(got.len(), want);
                let mut sorted = got.clone();
                sorted.sort_unstable();
                sorted.dedup();
                prop_assert_eq!(sorted.len(), got.len());
                prop_assert!(got.iter().all(|i| i % 2 == 0 && *i < v.len()));
            }
            // while_some: without a None, everything; with one, never the None's place and no
            // item twice.
            let got: Vec<u16> = vals.par_iter().schedule(schedule).map(|&x| Some(x)).while_some().collect();
            prop_assert_eq!(&got, &vals);
            let got: Vec<usize> = v
                .par_iter()
                .enumerate()
                .schedule(schedule)
                .map(|(i, x)| x.map(|_| i))
                .while_some()
                .collect();
            prop_assert!(got.iter().all(|&i| v[i].is_some()));
            prop_assert!(got.windows(2).all(|w| w[0] < w[1]), "in index order, each once");
            let got: Vec<u16> = vals.par_iter().schedule(schedule).copied().panic_fuse().collect();
            prop_assert_eq!(&got, &vals);
            let k = cut.1 % 9;
            let got: Vec<u64> = vals
                .par_iter()
                .schedule(schedule)
                .fold_chunks(k, || 0u64, |a, &x| a * 2 + u64::from(x % 4))
                .collect();
            let want: Vec<u64> = vals
                .chunks(k.max(1))
                .map(|c| c.iter().fold(0u64, |a, &x| a * 2 + u64::from(x % 4)))
                .collect();
            prop_assert_eq!(got, want);
            let got: Vec<u64> = vals
                .par_iter()
                .schedule(schedule)
                .fold_chunks_with(k, 1u64, |a, &x| a + u64::from(x))
                .collect();
            let want: Vec<u64> =
                vals.chunks(k.max(1)).map(|c| c.iter().fold(1u64, |a, &x| a + u64::from(x))).collect();
            prop_assert_eq!(got, want);

            let (a, b) = (cut.0 % (vals.len() + 1), cut.1 % (vals.len() + 1));
            let range = a.min(b)..a.max(b);
            let mut deque: std::collections::VecDeque<u16> = vals.iter().copied().collect();
            let drained: Vec<u16> = deque.par_drain(range.clone()).collect();
            let mut want_deque: std::collections::VecDeque<u16> = vals.iter().copied().collect();
            prop_assert_eq!(drained, want_deque.drain(range.clone()).collect::<Vec<_>>());
            prop_assert_eq!(deque, want_deque);
            // The full drains: every element once, the collection left empty.
            let mut map: std::collections::HashMap<usize, u16> = vals.iter().copied().enumerate().collect();
            let mut pairs: Vec<(usize, u16)> = map.par_drain().collect();
            pairs.sort_unstable();
            prop_assert_eq!(pairs, vals.iter().copied().enumerate().collect::<Vec<_>>());
            prop_assert!(map.is_empty());
            let mut set: std::collections::HashSet<u16> = vals.iter().copied().collect();
            let mut got: Vec<u16> = set.par_drain().collect();
            got.sort_unstable();
            let mut want = vals.clone();
            want.sort_unstable();
            want.dedup();
            prop_assert_eq!(got, want);
            prop_assert!(set.is_empty());
            let mut heap: std::collections::BinaryHeap<u16> = vals.iter().copied().collect();
            let mut got: Vec<u16> = heap.par_drain().collect();
            got.sort_unstable();
            let mut want = vals.clone();
            want.sort_unstable();
            prop_assert_eq!(got, want);
            prop_assert!(heap.is_empty());
            let text: String = vals.iter().map(|&x| char::from(b'a' + (x % 26) as u8)).collect();
            let mut got_text = text.clone();
            let drained: String = got_text.par_drain(range.clone()).collect();
            let mut want_text = text;
            prop_assert_eq!(drained, want_text.drain(range.clone()).collect::<String>());
            prop_assert_eq!(got_text, want_text);
            let mut got = vals.clone();
            let drained: Vec<u16> = got.par_drain(range.clone()).collect();
            let mut want = vals.clone();
            let want_drained: Vec<u16> = want.drain(range).collect();
            prop_assert_eq!(drained, want_drained);
            prop_assert_eq!(got, want);
            Ok(())
        })?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The chunkings from the end and the exact mutable ones give std's sub-slices, in std's
    /// order, each element written once; `chunks` on an indexed iterator gives std's
    /// `chunks` of the items (`size` 0 taken as 1 everywhere).
    #[test]
    fn reverse_and_exact_chunkings_agree_with_std(
        v in proptest::collection::vec(any::<u16>(), 0..300),
        size in 0usize..9,
        schedule in schedules(),
    ) {
        rt().install(|| {
            let k = size.max(1);
            let got: Vec<&[u16]> = v.par_rchunks(size).schedule(schedule).collect();
            prop_assert_eq!(got, v.rchunks(k).collect::<Vec<_>>());
            let got: Vec<&[u16]> = v.par_rchunks_exact(size).schedule(schedule).collect();
            prop_assert_eq!(got, v.rchunks_exact(k).collect::<Vec<_>>());
            let got: Vec<Vec<u16>> = v.par_iter().schedule(schedule).copied().chunks(size).collect();
            prop_assert_eq!(got, v.chunks(k).map(<[u16]>::to_vec).collect::<Vec<_>>());

            // Each mutable chunking tags every element with its chunk's index (plus one, so
            // untouched elements stay 0), in parallel and then sequentially: the same tags.
            type Cut = fn(&mut [u32], usize) -> Vec<Vec<u32>>;
            let mut_cuts: [(&str, Cut, Cut); 3] = [
                (
                    "par_chunks_exact_mut",
                    |s, k| s.chunks_exact_mut(k).map(|c| c.to_vec()).collect(),
                    |s, k| s.par_chunks_exact_mut(k).map(|c| c.to_vec()).collect(),
                ),
                (
                    "par_rchunks_mut",
                    |s, k| s.rchunks_mut(k).map(|c| c.to_vec()).collect(),
                    |s, k| s.par_rchunks_mut(k).map(|c| c.to_vec()).collect(),
                ),
                (
                    "par_rchunks_exact_mut",
                    |s, k| s.rchunks_exact_mut(k).map(|c| c.to_vec()).collect(),
                    |s, k| s.par_rchunks_exact_mut(k).map(|c| c.to_vec()).collect(),
                ),
            ];
            for (name, seq_cut, par_cut) in mut_cuts {
                let mut a: Vec<u32> = v.iter().map(|&x| u32::from(x)).collect();
                let mut b = a.clone();
                prop_assert_eq!(par_cut(&mut a, k), seq_cut(&mut b, k), "{}", name);
            }
            let mut tagged = vec![0u32; v.len()];
            tagged
                .par_rchunks_mut(size)
                .schedule(schedule)
                .enumerate()
                .for_each(|(i, c)| c.iter_mut().for_each(|x| *x += i as u32 + 1));
            let mut want = vec![0u32; v.len()];
            for (i, c) in want.rchunks_mut(k).enumerate() {
                c.iter_mut().for_each(|x| *x += i as u32 + 1);
            }
            prop_assert_eq!(&tagged, &want);
            let mut tagged = vec![0u32; v.len()];
            tagged
                .par_chunks_exact_mut(size)
                .schedule(schedule)
                .enumerate()
                .for_each(|(i, c)| c.iter_mut().for_each(|x| *x += i as u32 + 1));
            let mut want = vec![0u32; v.len()];
            for (i, c) in want.chunks_exact_mut(k).enumerate() {
                c.iter_mut().for_each(|x| *x += i as u32 + 1);
            }
            prop_assert_eq!(tagged, want);
            Ok(())
        })?;
    }
}

/// A non-commutative sum and product: the items concatenated, so the order they were combined
/// in shows.
#[derive(Debug, PartialEq)]
struct Cat(Vec<u16>);

impl std::iter::Sum<u16> for Cat {
    fn sum<I: Iterator<Item = u16>>(items: I) -> Cat {
        Cat(items.collect())
    }
}

impl std::iter::Sum for Cat {
    fn sum<I: Iterator<Item = Cat>>(parts: I) -> Cat {
        Cat(parts.flat_map(|c| c.0).collect())
    }
}

impl std::iter::Product<u16> for Cat {
    fn product<I: Iterator<Item = u16>>(items: I) -> Cat {
        Cat(items.collect())
    }
}

impl std::iter::Product for Cat {
    fn product<I: Iterator<Item = Cat>>(parts: I) -> Cat {
        Cat(parts.flat_map(|c| c.0).collect())
    }
}

proptest! {
    /// `sum` and `product` combine the items in index order (only the grouping is open), as
    /// rayon's: a concatenation gives the sequence itself, under every schedule.
    #[test]
    fn sum_and_product_keep_the_items_order(
        v in proptest::collection::vec(any::<u16>(), 0..2000),
        schedule in schedules(),
    ) {
        rt().install(|| {
            let summed: Cat = v.par_iter().schedule(schedule).copied().sum();
            prop_assert_eq!(&summed.0, &v);
            let multiplied: Cat = v.par_iter().schedule(schedule).copied().product();
            prop_assert_eq!(&multiplied.0, &v);
            Ok(())
        })?;
    }
}

/// What `interleave` gives, sequentially: `a`'s and `b`'s items in turn, then the longer's rest.
fn interleaved<T: Clone>(a: &[T], b: &[T], shortest: bool) -> Vec<T> {
    let mut out = Vec::new();
    let (mut ia, mut ib) = (a.iter(), b.iter());
    loop {
        match ia.next() {
            Some(x) => out.push(x.clone()),
            None if shortest => return out,
            None => break,
        }
        match ib.next() {
            Some(y) => out.push(y.clone()),
            None if shortest => return out,
            None => break,
        }
    }
    out.extend(ia.cloned());
    out.extend(ib.cloned());
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// `interleave` and `interleave_shortest` give the sequential interleaving, through
    /// `enumerate` and `rev` too (each index of both sources is asked once); the slice splits
    /// give std's `split`, `chunk_by` and their `_mut` forms.
    #[test]
    fn interleave_and_slice_splits_agree_with_sequential(
        a in proptest::collection::vec(0u8..6, 0..200),
        b in proptest::collection::vec(0u8..6, 0..200),
        schedule in schedules(),
    ) {
        rt().install(|| {
            for shortest in [false, true] {
                let par = || {
                    let (x, y) = (a.par_iter().copied(), b.par_iter().copied());
                    if shortest {
                        x.interleave_shortest(y).schedule(schedule).collect::<Vec<u8>>()
                    } else {
                        x.interleave(y).schedule(schedule).collect::<Vec<u8>>()
                    }
                };
                prop_assert_eq!(par(), interleaved(&a, &b, shortest), "shortest {}", shortest);
            }
            let got: Vec<(usize, u8)> =
                a.par_iter().copied().interleave(b.par_iter().copied()).rev().enumerate().schedule(schedule).collect();
            let want: Vec<(usize, u8)> = interleaved(&a, &b, false).into_iter().rev().enumerate().collect();
            prop_assert_eq!(got, want);

            let is_zero = |x: &u8| *x == 0;
            let got: Vec<&[u8]> = a.par_split(is_zero).schedule(schedule).collect();
            prop_assert_eq!(got, a.split(is_zero).collect::<Vec<_>>());
            let same = |x: &u8, y: &u8| x / 2 == y / 2;
            let got: Vec<&[u8]> = a.par_chunk_by(same).schedule(schedule).collect();
            prop_assert_eq!(got, a.chunk_by(same).collect::<Vec<_>>());
            // The mutable pieces: each tagged with its length, once, as std's pieces are.
            let mut got = a.clone();
            got.par_split_mut(is_zero).schedule(schedule).for_each(|p| {
                let n = (p.len() % 20) as u8;
                p.iter_mut().for_each(|x| *x += 10 + n);
            });
            let mut want = a.clone();
            want.split_mut(is_zero).for_each(|p| {
                let n = (p.len() % 20) as u8;
                p.iter_mut().for_each(|x| *x += 10 + n);
            });
            prop_assert_eq!(&got, &want);
            let mut got = a.clone();
            got.par_chunk_by_mut(same).schedule(schedule).for_each(|p| p.reverse());
            let mut want = a.clone();
            want.chunk_by_mut(same).for_each(<[u8]>::reverse);
            prop_assert_eq!(got, want);
            let got: Vec<&[u8]> = a.par_split_inclusive(is_zero).schedule(schedule).collect();
            prop_assert_eq!(got, a.split_inclusive(is_zero).collect::<Vec<_>>());
            let mut got = a.clone();
            got.par_split_inclusive_mut(is_zero).schedule(schedule).for_each(|p| p.reverse());
            let mut want = a.clone();
            want.split_inclusive_mut(is_zero).for_each(<[u8]>::reverse);
            prop_assert_eq!(got, want);
            Ok(())
        })?;
    }
}

/// `step_by` over sources that check their ranges (slices, exact chunks, windows), chained
/// before a longer side, one item per part: every part of the longer side asks the stepped
/// side for an empty range at its end (found by a review: the slice's range check panicked).
#[test]
fn a_stepped_side_is_asked_for_empty_ranges_at_its_end() {
    let a = [1u32, 2, 3, 4, 5, 6, 7];
    let b: Vec<u32> = (10..20).collect();
    rt().install(|| {
        let v: Vec<u32> = a
            .par_iter()
            .step_by(2)
            .chain(b.par_iter())
            .copied()
            .with_max_len(1)
            .collect();
        assert_eq!(
            v,
            [1, 3, 5, 7].into_iter().chain(10..20).collect::<Vec<_>>()
        );
        let v: Vec<usize> = a
            .par_chunks_exact(2)
            .step_by(2)
            .map(|c| c.len())
            .chain(vec![9; 4])
            .with_max_len(1)
            .collect();
        assert_eq!(v, [2, 2, 9, 9, 9, 9]);
        let v: Vec<u32> = a
            .par_windows(3)
            .step_by(2)
            .map(|w| w[0])
            .chain(b.par_iter().copied())
            .with_max_len(1)
            .collect();
        assert_eq!(v, [1, 3, 5].into_iter().chain(10..20).collect::<Vec<_>>());
        let v: Vec<u32> = a
            .par_iter()
            .step_by(3)
            .interleave(b.par_iter())
            .copied()
            .with_max_len(1)
            .collect();
        assert_eq!(v, [1, 10, 4, 11, 7, 12, 13, 14, 15, 16, 17, 18, 19]);
    });
}

#[test]
fn chain_and_interleave_refuse_more_than_usize_max_items() {
    let whole = || (0..usize::MAX).into_par_iter();
    // Exactly usize::MAX fits.
    assert_eq!(
        (1..usize::MAX).into_par_iter().chain(0..1usize).len(),
        usize::MAX
    );
    assert_eq!(
        (1..usize::MAX).into_par_iter().interleave(0..1usize).len(),
        usize::MAX
    );
    for (name, make) in [
        (
            "chain",
            Box::new(|| drop(whole().chain(0..1usize))) as Box<dyn Fn()>,
        ),
        (
            "interleave",
            Box::new(|| drop(whole().interleave(0..1usize))),
        ),
    ] {
        let err = catch_unwind(AssertUnwindSafe(make)).expect_err(name);
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.starts_with(&format!("{name}: the two iterators have")),
            "{name}: {msg}"
        );
    }
}

/// The sources `repeat_n`, `repeat`, `once` and `empty`, under every schedule, with an item
/// that is `Send` but not `Sync` (rayon's bound).
#[test]
fn repeat_once_and_empty_give_rayons_items() {
    use std::cell::Cell;
    for s in ALL {
        rt().install(|| {
            for n in [0usize, 1, 7, 5000] {
                let v: Vec<Cell<u8>> = umt_rt::iter::repeat_n(Cell::new(3u8), n)
                    .schedule(s)
                    .collect();
                assert_eq!(v.len(), n, "{s}");
                assert!(v.iter().all(|c| c.get() == 3), "{s}");
            }
            let pairs: Vec<(usize, char)> = (0..100usize)
                .into_par_iter()
                .schedule(s)
                .zip(umt_rt::iter::repeat_n('z', 1000))
                .collect();
            assert_eq!(pairs, (0..100).map(|i| (i, 'z')).collect::<Vec<_>>(), "{s}");
            let pairs: Vec<(usize, char)> = (0..100usize)
                .into_par_iter()
                .schedule(s)
                .zip(umt_rt::iter::repeat('y'))
                .collect();
            assert_eq!(pairs, (0..100).map(|i| (i, 'y')).collect::<Vec<_>>(), "{s}");
            assert_eq!(
                umt_rt::iter::repeat(1u64)
                    .schedule(s)
                    .take(1000)
                    .sum::<u64>(),
                1000
            );
            // Endless, yet a search ends it once decided.
            assert_eq!(
                umt_rt::iter::repeat(2u8)
                    .schedule(s)
                    .enumerate()
                    .find_first(|&(i, _)| i == 5000),
                Some((5000, 2))
            );
            assert_eq!(
                umt_rt::iter::repeat(2u8)
                    .schedule(s)
                    .take_any(7)
                    .collect::<Vec<_>>(),
                [2; 7]
            );
            assert_eq!(umt_rt::iter::once(5u8).schedule(s).collect::<Vec<_>>(), [5]);
            assert_eq!(umt_rt::iter::empty::<u8>().schedule(s).count(), 0);
        });
    }
}

fn chars_near_edges() -> impl Strategy<Value = char> {
    prop_oneof![
        any::<char>(),
        prop::sample::select(vec![
            '\0',
            'a',
            '\u{D7FE}',
            '\u{D7FF}',
            '\u{E000}',
            '\u{E001}',
            char::MAX
        ]),
        (0xD700u32..0xE100).prop_filter_map("a scalar value", char::from_u32),
    ]
}

proptest! {
    /// `char` ranges give std's `char`s, surrogates left out, in order, from either end.
    #[test]
    fn char_ranges_give_stds_chars(
        a in chars_near_edges(),
        b in chars_near_edges(),
        schedule in schedules(),
    ) {
        // Ranges of at most 5 000 chars (std's iterator walks each).
        let b = char::from_u32(u32::from(b).min(u32::from(a).saturating_add(5000))).unwrap_or(b);
        rt().install(|| {
            let got: Vec<char> = (a..b).into_par_iter().schedule(schedule).collect();
            prop_assert_eq!(got, (a..b).collect::<Vec<_>>());
            let got: Vec<char> = (a..=b).into_par_iter().schedule(schedule).rev().collect();
            prop_assert_eq!(got, (a..=b).rev().collect::<Vec<_>>());
            prop_assert_eq!((a..=b).into_par_iter().len(), (a..=b).count());
            Ok(())
        })?;
    }
}

/// Every `char` once: all 1 112 064 scalar values.
#[test]
fn the_whole_char_range_holds_every_scalar_value() {
    let all = rt().install(|| {
        ('\0'..=char::MAX)
            .into_par_iter()
            .map(u32::from)
            .collect::<Vec<_>>()
    });
    assert_eq!(all.len(), 0x11_0000 - 0x800);
    assert!(all.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(
        rt().install(|| ('\0'..char::MAX).into_par_iter().count()),
        all.len() - 1
    );
}

/// An eight-tuple of bytes.
type Eight = (u8, u8, u8, u8, u8, u8, u8, u8);

/// Tuples of indexed iterators zip into one (rayon's `MultiZip`), as long as the shortest,
/// mutable parts included, tuples by reference and mutably too, under every schedule.
#[test]
fn tuples_of_iterators_zip_as_rayons_multizip() {
    for s in ALL {
        rt().install(|| {
            let a: Vec<u32> = (0..1000).collect();
            let mut b = vec![0u64; 900];
            (a.par_iter(), b.par_iter_mut(), 0..2000usize)
                .into_par_iter()
                .schedule(s)
                .for_each(|(x, y, i)| *y = u64::from(*x) * 2 + i as u64);
            assert!(b.iter().enumerate().all(|(i, y)| *y == 3 * i as u64), "{s}");
            let pairs: Vec<(&u32, &u64)> = (&a, &b).into_par_iter().schedule(s).collect();
            assert_eq!(pairs, a.iter().zip(&b).collect::<Vec<_>>(), "{s}");
            // A tuple by reference and mutably (rayon's `(a, b).par_iter()`).
            let mut both = (a.clone(), b.clone());
            let sums: Vec<u64> = both
                .par_iter()
                .schedule(s)
                .map(|(x, y)| u64::from(*x) + y)
                .collect();
            assert_eq!(
                sums,
                (0..900).map(|i| 4 * i as u64).collect::<Vec<_>>(),
                "{s}"
            );
            both.par_iter_mut()
                .schedule(s)
                .for_each(|(x, y)| *x = *y as u32);
            assert!(
                both.0[..900]
                    .iter()
                    .enumerate()
                    .all(|(i, x)| *x == 3 * i as u32),
                "{s}"
            );
            assert_eq!(both.0[950], 950, "{s}: past the shorter, untouched");
            let eight: Vec<Eight> = (
                0..3u8,
                1..9u8,
                2..9u8,
                3..9u8,
                4..9u8,
                5..9u8,
                6..9u8,
                7..9u8,
            )
                .into_par_iter()
                .schedule(s)
                .rev()
                .collect();
            assert_eq!(
                eight,
                [(1, 2, 3, 4, 5, 6, 7, 8), (0, 1, 2, 3, 4, 5, 6, 7)],
                "{s}"
            );
        });
    }
}

/// `Option` and `Result` as iterators of their one value (none for `None` and `Err`), by
/// value, by reference and mutably.
#[test]
fn options_and_results_iterate_their_value() {
    rt().install(|| {
        let mut some = Some(3u32);
        (&mut some).into_par_iter().for_each(|x| *x += 1);
        assert_eq!(some, Some(4));
        assert_eq!((&some).into_par_iter().copied().sum::<u32>(), 4);
        let mut ok: Result<u32, String> = Ok(5);
        (&mut ok).into_par_iter().for_each(|x| *x *= 2);
        assert_eq!((&ok).into_par_iter().copied().collect::<Vec<_>>(), [10]);
        assert_eq!(ok.into_par_iter().count(), 1);
        let err: Result<u32, String> = Err("no".into());
        assert_eq!(err.into_par_iter().count(), 0);
    });
}

/// A node's children in the test trees: 0 to 3 of them, from a hash of the node, none below
/// depth 6 (the depth is the node's low byte).
fn kids(node: &u64) -> Vec<u64> {
    let depth = node & 0xff;
    if depth >= 6 {
        return Vec::new();
    }
    let n = (node.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 61) % 4;
    (0..n)
        .map(|i| ((node >> 8) * 4 + i + 1) << 8 | (depth + 1))
        .collect()
}

fn prefix(node: u64, out: &mut Vec<u64>) {
    out.push(node);
    kids(&node).into_iter().for_each(|k| prefix(k, out));
}

fn postfix(node: u64, out: &mut Vec<u64>) {
    kids(&node).into_iter().for_each(|k| postfix(k, out));
    out.push(node);
}

proptest! {
    /// The tree walks visit every node once, in the recursive definition's order (`walk_tree`
    /// in some order); `split`
    /// covers its data once, in order, with pieces its splitter could not cut or enough of
    /// them.
    #[test]
    fn tree_walks_and_split_agree_with_recursion(
        root in 0u64..1_000_000,
        len in 0u32..5000,
        smallest in 1u32..300,
        schedule in schedules(),
    ) {
        let root = root << 8;
        rt().install(|| {
            let (mut pre, mut post) = (Vec::new(), Vec::new());
            prefix(root, &mut pre);
            postfix(root, &mut post);
            let got: Vec<u64> = umt_rt::iter::walk_tree_prefix(root, kids).schedule(schedule).collect();
            prop_assert_eq!(got, pre.clone());
            // `walk_tree` fixes no order: the same nodes, once each.
            let mut got: Vec<u64> = umt_rt::iter::walk_tree(root, kids).schedule(schedule).collect();
            got.sort_unstable();
            let mut want = pre;
            want.sort_unstable();
            prop_assert_eq!(got, want);
            let got: Vec<u64> = umt_rt::iter::walk_tree_postfix(root, kids).schedule(schedule).collect();
            prop_assert_eq!(got, post);

            let halves = |r: std::ops::Range<u32>| {
                if r.len() < 2 * smallest as usize {
                    return (r, None);
                }
                let mid = r.start + (r.end - r.start) / 2;
                (r.start..mid, Some(mid..r.end))
            };
            let pieces: Vec<std::ops::Range<u32>> =
                umt_rt::iter::split(0..len, halves).schedule(schedule).collect();
            let joined: Vec<u32> = pieces.iter().cloned().flatten().collect();
            prop_assert_eq!(joined, (0..len).collect::<Vec<_>>());
            let enough = 8 * umt_rt::current_num_threads();
            prop_assert!(
                pieces.len() >= enough || pieces.iter().all(|p| p.len() < 2 * smallest as usize),
                "{} pieces", pieces.len()
            );
            Ok(())
        })?;
    }
}

proptest! {
    /// `by_uniform_blocks` and `by_exponential_blocks` give std's answers, under any schedule:
    /// the blocks change when items are made, not which or in what order.
    #[test]
    fn blocks_in_turn_give_stds_answers(
        v in proptest::collection::vec(0u32..1000, 0..600),
        block in 0usize..40,
        s in schedules(),
        exponential in any::<bool>(),
    ) {
        let it = || {
            let it = v.par_iter().schedule(s);
            if exponential { it.by_exponential_blocks() } else { it.by_uniform_blocks(block) }
        };
        rt().install(|| {
            let all: Vec<u32> = it().map(|x| x * 2).collect();
            prop_assert_eq!(all, v.iter().map(|x| x * 2).collect::<Vec<_>>());
            prop_assert_eq!(it().map(|&x| u64::from(x)).sum::<u64>(), v.iter().map(|&x| u64::from(x)).sum::<u64>());
            prop_assert_eq!(it().find_first(|x| **x % 97 == 3), v.iter().find(|x| **x % 97 == 3));
            prop_assert_eq!(it().position_last(|x| *x % 89 == 1), v.iter().rposition(|x| *x % 89 == 1));
            prop_assert_eq!(it().filter(|x| **x > 500).count(), v.iter().filter(|x| **x > 500).count());
            let joined = it().map(|x| x.to_string()).reduce(String::new, |a, b| a + &b);
            prop_assert_eq!(joined, v.iter().map(|x| x.to_string()).collect::<String>());
            // A fold's blocks cut each block in turn: its parts, flattened, are the items.
            let parts: Vec<Vec<u32>> = it().fold(Vec::new, |mut p, x| { p.push(*x); p }).collect();
            prop_assert_eq!(parts.concat(), v.clone());
            let sum: Option<u64> = it().try_fold(|| 0u64, |a, x| a.checked_add(u64::from(*x))).try_reduce(|| 0, |a, b| a.checked_add(b));
            prop_assert_eq!(sum, Some(v.iter().map(|&x| u64::from(x)).sum::<u64>()));
            Ok(())
        })?;
    }
}

/// A search in blocks runs no block past the one that decides: over a range no loop could
/// walk, `find_first` and `any` make no item beyond the deciding block, on one core and two,
/// under every schedule.
#[test]
fn a_search_in_blocks_runs_no_block_past_the_deciding_one() {
    for threads in [1, 2] {
        let rt = unmonitored(threads);
        for s in ALL {
            let highest = AtomicUsize::new(0);
            let look = |i: usize| {
                highest.fetch_max(i, Ordering::Relaxed);
                i == 150
            };
            rt.install(|| {
                let hit = (0..usize::MAX)
                    .into_par_iter()
                    .schedule(s)
                    .by_uniform_blocks(100)
                    .find_first(|&i| look(i));
                assert_eq!(hit, Some(150), "{s}");
                assert!(
                    highest.swap(0, Ordering::Relaxed) < 200,
                    "{s}: past [100, 200)"
                );
                assert!(
                    (0..usize::MAX)
                        .into_par_iter()
                        .schedule(s)
                        .by_uniform_blocks(100)
                        .any(look),
                    "{s}"
                );
                assert!(
                    highest.swap(0, Ordering::Relaxed) < 200,
                    "{s}: any past [100, 200)"
                );
                // Blocks of `threads`, then twice as many each time: the one holding 150
                // ends at `end`.
                let (mut end, mut size) = (0, threads);
                while end <= 150 {
                    end += size;
                    size *= 2;
                }
                let hit = umt_rt::iter::repeat(())
                    .enumerate()
                    .schedule(s)
                    .by_exponential_blocks()
                    .find_first(|&(i, ())| look(i));
                assert_eq!(hit, Some((150, ())), "{s}");
                assert!(
                    highest.swap(0, Ordering::Relaxed) < end,
                    "{s}: past the exponential block ending at {end}"
                );
                // A fold in blocks stops too (its blocks cut each block in turn): rayon's
                // example of an endless fold searched.
                let m = (0..u64::MAX)
                    .into_par_iter()
                    .schedule(s)
                    .by_exponential_blocks()
                    .inspect(|&i| {
                        look(i as usize);
                    })
                    .fold(|| 0, u64::max)
                    .find_first(|m| *m >= 100);
                assert!(m.is_some_and(|m| (100..=160).contains(&m)), "{s}: {m:?}");
                assert!(
                    highest.swap(0, Ordering::Relaxed) < end,
                    "{s}: a fold past the blocks that decide"
                );
            });
        }
    }
}

/// Unsuffixed literals in a parallel range take their type as in std's: from what the loop
/// must give (rayon users write all of these), else `i32`. The 128-bit ranges add no second
/// impl for the compiler to choose between, and the item is the range's type itself, not a
/// producer's item the compiler cannot see through.
#[test]
fn a_range_of_plain_literals_takes_its_type_from_its_use() {
    fn takes(x: u64) -> u64 {
        x
    }
    let table = [5i32, 6, 7];
    // On this file's runtime, not the global one: inside the patched kernel's VM a global
    // runtime would hold the one Kernel monitor a process may have, which other tests need.
    rt().install(|| {
        let v = (0..5).into_par_iter().map(|x| x * 2).collect::<Vec<_>>();
        let w: Vec<i32> = v;
        assert_eq!(w, [0, 2, 4, 6, 8]);
        assert!((1..=3).into_par_iter().eq(vec![1, 2, 3]));
        assert_eq!((0..3).into_par_iter().map(|i| table[i]).sum::<i32>(), 18);
        (0..10).into_par_iter().for_each(|i| {
            let _: usize = i;
        });
        assert_eq!((0..10).into_par_iter().map(|i: usize| i).sum::<usize>(), 45);
        assert_eq!((0..10).into_par_iter().map(takes).sum::<u64>(), 45);
        let bytes: Vec<u8> = (0..=255).into_par_iter().collect();
        assert_eq!(bytes.len(), 256);
        assert_eq!(
            (1..=20).into_par_iter().product::<u64>(),
            2_432_902_008_176_640_000
        );
        assert_eq!((0..10).into_par_iter().max().map(|x: u32| x), Some(9));
        let pairs: Vec<(usize, u16)> = (0..3).into_par_iter().enumerate().collect();
        assert_eq!(pairs, [(0, 0), (1, 1), (2, 2)]);
        let squares = (0..10)
            .into_par_iter()
            .map(|x| x * x)
            .reduce(|| 0u64, |a, b| a + b);
        assert_eq!(squares, 285);
        let mut v = Vec::new();
        v.par_extend(0..10);
        let _: &Vec<usize> = &v;
        let back: Vec<u32> = (0..10).into_par_iter().rev().collect();
        assert_eq!(back[0], 9);
        assert_eq!((0..10).into_par_iter().find_first(|&x| x > 3u64), Some(4));
    });
}

/// Windows of a slice of `usize::MAX` zero-sized elements: counted without overflow.
#[test]
fn windows_of_the_longest_slice_are_counted() {
    let v = [(); usize::MAX];
    assert_eq!(v.par_windows(2).len(), usize::MAX - 1);
    assert_eq!(v.par_array_windows::<3>().len(), usize::MAX - 2);
    assert_eq!(v.par_windows(1).len(), usize::MAX);
}

proptest! {
    /// Ranges of `u128` and `i128` (rayon's, not indexed) give std's values in order,
    /// anywhere in the type's range, both kinds of range, under any schedule.
    #[test]
    fn ranges_of_128_bit_integers_give_stds_values(
        start in any::<i128>(),
        len in 0u32..800,
        s in schedules(),
    ) {
        let end = start.saturating_add(i128::from(len));
        let wide = start as u128;
        let wide_end = wide.saturating_add(u128::from(len));
        rt().install(|| {
            let got: Vec<i128> = (start..end).into_par_iter().schedule(s).collect();
            prop_assert_eq!(got, (start..end).collect::<Vec<_>>());
            let got: Vec<i128> = (start..=end).into_par_iter().schedule(s).collect();
            prop_assert_eq!(got, (start..=end).collect::<Vec<_>>());
            let got: Vec<u128> = (wide..wide_end).into_par_iter().schedule(s).collect();
            prop_assert_eq!(got, (wide..wide_end).collect::<Vec<_>>());
            let n = (wide..=wide_end).into_par_iter().schedule(s).filter(|x| x % 3 == 0).count();
            prop_assert_eq!(n, (wide..=wide_end).filter(|x| x % 3 == 0).count());
            Ok(())
        })?;
    }
}

/// A range of all 2^128 `u128` values (more than `usize` counts): a search near its start
/// ends, on every schedule.
#[test]
fn a_search_over_every_u128_value_ends_once_decided() {
    for s in ALL {
        rt().install(|| {
            let hit = (0..=u128::MAX)
                .into_par_iter()
                .schedule(s)
                .find_first(|&x| x > 1000);
            assert_eq!(hit, Some(1001), "{s}");
            let hit = (i128::MIN..=i128::MAX)
                .into_par_iter()
                .schedule(s)
                .find_first(|&x| x > i128::MIN + 9);
            assert_eq!(hit, Some(i128::MIN + 10), "{s}");
            // Unindexed as rayon's: other iterators chain after it.
            let hit = (0..=u128::MAX)
                .into_par_iter()
                .chain(umt_rt::iter::once(7))
                .schedule(s)
                .find_first(|&x| x > 1000);
            assert_eq!(hit, Some(1001), "{s}");
        });
    }
}

proptest! {
    /// `intersperse` puts one separator between each two items, in order, under any
    /// schedule; indexed (`rev`, `enumerate` after it), and over an endless `repeat`.
    #[test]
    fn intersperse_puts_one_separator_between_each_two_items(
        v in proptest::collection::vec(0u32..1000, 0..500),
        s in schedules(),
    ) {
        let mut want = Vec::new();
        for (i, x) in v.iter().enumerate() {
            if i > 0 {
                want.push(u32::MAX);
            }
            want.push(*x);
        }
        rt().install(|| {
            let got: Vec<u32> = v.par_iter().copied().schedule(s).intersperse(u32::MAX).collect();
            prop_assert_eq!(&got, &want);
            let back: Vec<(usize, u32)> =
                v.par_iter().copied().schedule(s).intersperse(u32::MAX).enumerate().rev().collect();
            prop_assert_eq!(back, want.iter().copied().enumerate().rev().collect::<Vec<_>>());
            let words: String = v.par_iter().map(|x| x.to_string()).schedule(s).intersperse(",".to_string()).collect();
            prop_assert_eq!(words, v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(","));
            Ok(())
        })?;
        let five: Vec<u8> = rt().install(|| umt_rt::iter::repeat(1u8).intersperse(0).take(5).collect());
        prop_assert_eq!(five, [1, 0, 1, 0, 1]);
    }
}

/// `walk_tree` on two cores, many times over: a random tree of a few thousand nodes whose
/// `children_of` sometimes yields the CPU (the participants interleave at every step), every
/// node visited exactly once (`walk_tree_prefix` in prefix order); a panic in `children_of` ends the walk, reaches the caller,
/// and the runtime runs the next walk.
#[test]
fn a_parallel_tree_walk_visits_every_node_once_and_passes_panics_on() {
    let rt = unmonitored(2);
    // Node `n`'s children: a hash of `n` says how many (0 to 4), below `limit`.
    let kids = |limit: u32| {
        move |n: &u32| -> Vec<u32> {
            let h = n.wrapping_mul(2_654_435_761).rotate_left(7);
            if h.is_multiple_of(5) {
                std::thread::yield_now();
            }
            (1..=h % 5)
                .map(|k| n * 4 + k)
                .filter(|c| *c < limit)
                .collect()
        }
    };
    for round in 0..200u32 {
        let limit = 500 + round * 37;
        let mut want = Vec::new();
        let mut stack = vec![1u32];
        while let Some(n) = stack.pop() {
            stack.extend(kids(limit)(&n).into_iter().rev());
            want.push(n);
        }
        if round % 10 == 0 {
            // The ordered walk, expanded in parallel too, lays the nodes out in prefix order.
            let prefix: Vec<u32> =
                rt.install(|| umt_rt::iter::walk_tree_prefix(1u32, kids(limit)).collect());
            assert_eq!(prefix, want, "round {round}");
        }
        want.sort_unstable();
        let seen: Vec<AtomicU8> = (0..limit * 4 + 5).map(|_| AtomicU8::new(0)).collect();
        rt.install(|| {
            umt_rt::iter::walk_tree(1u32, kids(limit)).for_each(|n| {
                seen[n as usize].fetch_add(1, Ordering::Relaxed);
            })
        });
        let got: Vec<u32> = (0..seen.len() as u32)
            .filter(|&n| seen[n as usize].load(Ordering::Relaxed) > 0)
            .collect();
        assert_eq!(got, want, "round {round}");
        assert!(
            seen.iter().all(|c| c.load(Ordering::Relaxed) <= 1),
            "round {round}"
        );
    }
    let failed = catch_unwind(AssertUnwindSafe(|| {
        rt.install(|| {
            umt_rt::iter::walk_tree(1u32, |n: &u32| {
                assert!(*n != 40, "children_of fails at 40");
                (n * 2..n * 2 + 2).filter(|c| *c < 200).collect::<Vec<_>>()
            })
            .count()
        })
    }));
    assert!(failed.is_err(), "the panic reached the caller");
    let count = rt.install(|| umt_rt::iter::walk_tree(1u32, kids(1000)).count());
    assert!(count > 1, "the runtime lives on");
}

/// A two-core runtime for the tests that may leave a thread behind: it lives on.
fn leaked_two_cores() -> &'static Runtime {
    Box::leak(Box::new(unmonitored(2)))
}

/// `f`'s result, run on a thread of its own; fails the test, naming `what`, if that does
/// not end within a minute (a failure, not a timing: a deadlock leaves the thread behind).
fn ends<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(f());
    });
    done.recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: did not end (deadlock)"))
}

/// A `children_of` that waits through the runtime does not deadlock the walk: a worker
/// waiting in `io::readable` runs other jobs, among them a still-queued part of the same
/// walk, which must not wait for the expansion below it on its own stack (step 5 of
/// `TreeWalk`; it hung every time before). Two cores, node 1's expansion waits for a pipe
/// another thread writes.
#[test]
fn a_tree_walk_whose_children_of_waits_through_the_runtime_ends() {
    let rt = leaked_two_cores();
    for round in 0..10 {
        let (rx, mut tx) = std::io::pipe().unwrap();
        let started = std::sync::Arc::new(std::sync::Barrier::new(2));
        let in_wait = started.clone();
        // Writes once node 1's expansion has begun, a little later, while it waits.
        std::thread::spawn(move || {
            started.wait();
            std::thread::sleep(std::time::Duration::from_millis(20));
            std::io::Write::write_all(&mut tx, b"x").unwrap();
        });
        let visits = ends(&format!("round {round}"), move || {
            let visits = AtomicUsize::new(0);
            rt.install(|| {
                umt_rt::iter::walk_tree(0u8, |n: &u8| -> Vec<u8> {
                    match n {
                        0 => vec![1, 2],
                        1 => {
                            in_wait.wait();
                            umt_rt::io::readable(&rx).unwrap();
                            Vec::new()
                        }
                        _ => Vec::new(),
                    }
                })
                .for_each(|_| {
                    visits.fetch_add(1, Ordering::SeqCst);
                })
            });
            visits.into_inner()
        });
        assert_eq!(visits, 3, "round {round}");
    }
}

/// Waits through the runtime (`io::readable`) for a pipe another thread writes after `us`
/// microseconds: a worker waiting there runs other jobs.
fn wait_through_the_runtime(us: u64) {
    let (rx, mut tx) = std::io::pipe().unwrap();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_micros(us));
        std::io::Write::write_all(&mut tx, b"x").unwrap();
    });
    umt_rt::io::readable(&rx).unwrap();
}

/// Walks whose `children_of` waits through the runtime, side by side (`join`, the ordered
/// walks, walks as the items of a parallel loop), on two cores: a worker waiting in one
/// walk's expansion runs a part of the other, which must not wait for a worker doing the
/// same the other way round (step 5 of `TreeWalk`: these hung, most in the first round).
#[test]
fn tree_walks_side_by_side_whose_children_of_wait_through_the_runtime_end() {
    let rt = leaked_two_cores();
    // Node `n`'s children `4n + 1 ..= 4n + 4` below 85 (three levels); the inner nodes wait.
    fn kids(n: &u32) -> Vec<u32> {
        if *n < 21 {
            wait_through_the_runtime(150);
        }
        (4 * n + 1..4 * n + 5).filter(|k| *k < 85).collect()
    }
    let mut prefix = Vec::new();
    let mut stack = vec![0u32];
    while let Some(n) = stack.pop() {
        stack.extend((4 * n + 1..4 * n + 5).filter(|k| *k < 85).rev());
        prefix.push(n);
    }
    for round in 0..10 {
        let (a, b, pre, post, in_loop) = ends(&format!("round {round}"), move || {
            rt.install(|| {
                let (a, b) = umt_rt::join(
                    || umt_rt::iter::walk_tree(0u32, kids).count(),
                    || umt_rt::iter::walk_tree(0u32, kids).count(),
                );
                let (pre, post) = umt_rt::join(
                    || umt_rt::iter::walk_tree_prefix(0u32, kids).collect::<Vec<_>>(),
                    || umt_rt::iter::walk_tree_postfix(0u32, kids).count(),
                );
                let in_loop: usize = (0..6u32)
                    .into_par_iter()
                    .map(|_| umt_rt::iter::walk_tree(0u32, kids).count())
                    .sum();
                (a, b, pre, post, in_loop)
            })
        });
        assert_eq!((a, b, post, in_loop), (85, 85, 85, 6 * 85), "round {round}");
        assert_eq!(pre, prefix, "round {round}");
    }
}
