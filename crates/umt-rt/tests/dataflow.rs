//! Dataflow dependencies: random access patterns give the same result as running the tasks in
//! spawn order, one at a time.

use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use umt_rt::{Access, BackendKind, Runtime};

const KEYS: usize = 6;

#[derive(Debug, Clone)]
struct TaskSpec {
    reads: Vec<usize>,
    writes: Vec<usize>,
}

fn task_spec() -> impl Strategy<Value = TaskSpec> {
    (
        proptest::collection::vec(0..KEYS, 0..3),
        proptest::collection::vec(0..KEYS, 0..3),
    )
        .prop_map(|(reads, writes)| TaskSpec { reads, writes })
}

/// What task `id` does: read its keys, mix them, write the mix to its write keys. Any missed
/// ordering (reading too early or too late, writes swapped) changes the final values.
fn step(
    id: usize,
    spec: &TaskSpec,
    read: impl Fn(usize) -> u64,
    write: impl Fn(usize, u64),
) -> u64 {
    let mut acc = id as u64 + 1;
    for &k in spec.reads.iter().chain(&spec.writes) {
        acc = acc.wrapping_mul(0x100_0000_01b3) ^ read(k);
    }
    for &k in &spec.writes {
        write(k, acc.rotate_left(k as u32));
    }
    acc
}

fn sequential(specs: &[TaskSpec]) -> (Vec<u64>, Vec<u64>) {
    let vals = std::cell::RefCell::new(vec![0u64; KEYS]);
    let outs = specs
        .iter()
        .enumerate()
        .map(|(id, s)| step(id, s, |k| vals.borrow()[k], |k, v| vals.borrow_mut()[k] = v))
        .collect();
    (vals.into_inner(), outs)
}

fn parallel(rt: &Runtime, specs: &[TaskSpec]) -> (Vec<u64>, Vec<u64>) {
    let vals: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    let outs: Vec<AtomicU64> = specs.iter().map(|_| AtomicU64::new(0)).collect();
    rt.scope(|s| {
        for (id, spec) in specs.iter().enumerate() {
            let accesses = spec
                .reads
                .iter()
                .map(|&k| Access::read(k))
                .chain(spec.writes.iter().map(|&k| Access::write(k)));
            let (vals, outs) = (&vals, &outs);
            s.spawn_with(accesses, move |_| {
                // A little work so that independent tasks overlap.
                std::hint::black_box((0..200u64).sum::<u64>());
                let out = step(
                    id,
                    spec,
                    |k| vals[k].load(Ordering::Relaxed),
                    |k, v| vals[k].store(v, Ordering::Relaxed),
                );
                outs[id].store(out, Ordering::Relaxed);
            });
        }
    });
    (
        vals.iter().map(|v| v.load(Ordering::Relaxed)).collect(),
        outs.iter().map(|v| v.load(Ordering::Relaxed)).collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn matches_the_sequential_reference(specs in proptest::collection::vec(task_spec(), 1..60)) {
        let rt = Runtime::builder().monitor(BackendKind::Disabled).build().unwrap();
        prop_assert_eq!(parallel(&rt, &specs), sequential(&specs));
    }
}

#[test]
fn a_wavefront_runs_in_dependency_order_with_the_monitor_on() {
    // The heat pattern: block (i, j) of sweep t reads its four neighbours and writes itself.
    let rt = Runtime::new().unwrap();
    let n = 8;
    let specs: Vec<TaskSpec> = (0..3)
        .flat_map(|_| (0..n * n).map(move |b| (b / n, b % n)))
        .map(|(i, j)| {
            let mut reads = Vec::new();
            if i > 0 {
                reads.push(((i - 1) * n + j) % KEYS);
            }
            if j > 0 {
                reads.push((i * n + j - 1) % KEYS);
            }
            TaskSpec {
                reads,
                writes: vec![(i * n + j) % KEYS],
            }
        })
        .collect();
    assert_eq!(parallel(&rt, &specs), sequential(&specs));
}

/// A task that panics leaves its data partial: the tasks that read or write it afterwards
/// (directly, or through another cancelled task; spawned before or after it finished) are
/// cancelled, not run. Independent tasks run. The scope re-raises the panic, and the stats
/// count the cancelled tasks.
#[test]
fn dependents_of_a_panicked_task_are_cancelled() {
    for backend in [BackendKind::Disabled, BackendKind::Auto] {
        let rt = Runtime::builder().monitor(backend).build().unwrap();
        let ran = std::sync::Mutex::new(Vec::new());
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let rt = &rt;
            rt.scope(|s| {
                let ran = &ran;
                let log = move |name: &'static str| ran.lock().unwrap().push(name);
                s.spawn_with([Access::write("a")], |_| panic!("the writer of a fails"));
                s.spawn_with([Access::read("a")], move |_| log("reads a"));
                s.spawn_with([Access::read("a"), Access::write("b")], move |_| {
                    log("a to b")
                });
                s.spawn_with([Access::read("b")], move |_| log("reads b"));
                s.spawn_with([Access::write("c")], move |_| log("writes c"));
                s.spawn(move |s| {
                    // Spawned once the four tasks above finished (run or cancelled), so after
                    // the writer of `a` panicked: cancelled too.
                    while rt.stats().tasks_cancelled as usize + ran.lock().unwrap().len() < 4 {
                        umt_rt::yield_now(); // runs the others meanwhile, on one core too
                    }
                    s.spawn_with([Access::read("a")], move |_| log("reads a late"));
                });
            })
        }));
        let panic = result.expect_err("the scope re-raises the task's panic");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"the writer of a fails"));
        assert_eq!(ran.into_inner().unwrap(), ["writes c"], "{backend}");
        assert_eq!(rt.stats().tasks_cancelled, 4, "{backend}");
    }
}
