//! The task API: scopes, join, spawn, install, parallel_for, yield, panics, bad input.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use umt_rt::{BackendKind, BuildError, LeaderPolicy, Runtime, Yield};

mod common;
use common::{Bomb, PanicsWithABomb};

fn runtimes() -> Vec<Runtime> {
    [BackendKind::Disabled, BackendKind::Auto]
        .into_iter()
        .map(|b| Runtime::builder().monitor(b).build().unwrap())
        .collect()
}

/// A runtime of one unmonitored worker: every task runs on it, in the runtime's order.
fn one_worker() -> Runtime {
    Runtime::builder()
        .num_threads(1)
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap()
}

fn fib(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = umt_rt::join(|| fib(n - 1), || fib(n - 2));
    a + b
}

#[test]
fn scope_tasks_borrow_and_nest() {
    for rt in runtimes() {
        let counter = AtomicUsize::new(0);
        let mut out = vec![0usize; 100];
        rt.scope(|s| {
            for (i, o) in out.iter_mut().enumerate() {
                let counter = &counter;
                s.spawn(move |s| {
                    *o = i * 2;
                    s.spawn(move |_| {
                        counter.fetch_add(1, Ordering::Relaxed);
                    });
                });
            }
        });
        assert_eq!(counter.load(Ordering::Relaxed), 100);
        assert!(out.iter().enumerate().all(|(i, &o)| o == i * 2));
    }
}

#[test]
fn nested_scope_inside_a_task_waits_for_its_own_tasks() {
    for rt in runtimes() {
        let done = AtomicUsize::new(0);
        rt.scope(|s| {
            s.spawn(|_| {
                umt_rt::scope(|inner| {
                    for _ in 0..10 {
                        inner.spawn(|_| {
                            done.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                });
                // The inner scope has waited for its ten tasks.
                assert_eq!(done.load(Ordering::Relaxed), 10);
            });
        });
    }
}

#[test]
fn outside_a_worker_there_is_no_current_worker() {
    // (The free join, scope and spawn run on the global runtime there: tests/global.rs, in
    // processes of their own, since a process has one.)
    assert_eq!(umt_rt::yield_now(), None);
    assert_eq!(umt_rt::current_cpu(), None);
    assert_eq!(umt_rt::current_thread_index(), None);
}

#[test]
fn num_threads_takes_the_first_cpus_of_the_mask() {
    let cpus = umt_sys::cpu::process_cpus().unwrap();
    let rt = one_worker();
    assert_eq!(rt.cpus(), &cpus[..1]);
    assert_eq!(rt.install(umt_rt::current_num_threads), 1);
    assert_eq!(rt.install(umt_rt::current_thread_index), Some(0));
    // rayon's `num_threads(0)`: the default (as if not called), the same CPUs as `new()`
    // (both read the same environment).
    let default = Runtime::builder().num_threads(0).build().unwrap();
    assert_eq!(default.cpus(), Runtime::new().unwrap().cpus());
    assert_eq!(default.current_num_threads(), default.cpus().len());
    // rayon's pool methods: this runtime's index only on its own workers.
    assert_eq!(rt.current_thread_index(), None);
    assert_eq!(rt.install(|| rt.current_thread_index()), Some(0));
    assert_eq!(rt.install(|| default.current_thread_index()), None);
    assert_eq!(rt.current_thread_has_pending_tasks(), None);
    let pending = rt.install(|| {
        let before = rt.current_thread_has_pending_tasks();
        // A join pushes its second half on the worker's own deque while the first runs.
        let (during, _) = umt_rt::join(|| rt.current_thread_has_pending_tasks(), || ());
        (before, during)
    });
    // One worker, no monitor: nobody else can take that half meanwhile.
    assert_eq!(pending, (Some(false), Some(true)));
    // More than the mask holds, as rayon code asks to oversubscribe: every CPU of it when a
    // monitor gives spares, an error without one.
    let e = Runtime::builder()
        .num_threads(cpus.len() + 6)
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap_err();
    assert!(
        matches!(e, umt_rt::BuildError::TooManyThreads { asked, available } if asked == cpus.len() + 6 && available == cpus.len()),
        "{e}"
    );
    match Runtime::builder()
        .num_threads(cpus.len() + 6)
        .monitor(BackendKind::Auto)
        .build()
    {
        Ok(rt) => {
            assert_ne!(rt.backend(), BackendKind::Disabled);
            assert_eq!(rt.cpus(), cpus);
        }
        Err(e) => assert!(
            matches!(e, umt_rt::BuildError::TooManyThreads { .. }),
            "{e}"
        ),
    }
    assert!(matches!(
        Runtime::builder().num_threads(1).cores([cpus[0]]).build(),
        Err(umt_rt::BuildError::CoresAndNumThreads)
    ));
}

#[test]
fn join_computes_recursively() {
    for rt in runtimes() {
        assert_eq!(rt.install(|| fib(22)), 17711);
        assert_eq!(rt.join(|| fib(10), || fib(11)), (55, 89));
    }
}

#[test]
fn spawn_returns_through_the_handle_and_as_a_future() {
    for rt in runtimes() {
        let h = rt.spawn(|| 6 * 7);
        assert_eq!(h.join(), 42);
        let hs: Vec<_> = (0..50).map(|i| rt.spawn(move || i * i)).collect();
        let sum: usize = hs.into_iter().map(|h| h.join()).sum();
        assert_eq!(sum, (0..50).map(|i| i * i).sum::<usize>());
        let fut = rt.spawn(|| String::from("async"));
        assert_eq!(futures_executor::block_on(fut), "async");
        // Joining from inside a worker runs other tasks meanwhile.
        let inner = rt.install(|| rt.spawn(|| fib(15)).join());
        assert_eq!(inner, 610);
    }
}

#[test]
fn install_runs_on_a_worker_of_the_runtime() {
    for rt in runtimes() {
        let cpu = rt.install(umt_rt::current_cpu).unwrap();
        assert!(rt.cpus().contains(&cpu));
        assert_eq!(rt.install(|| rt.install(|| 5)), 5);
        assert!(matches!(
            rt.install(umt_rt::yield_now),
            Some(Yield::Idle | Yield::Executed)
        ));
    }
}

/// `spawn_fifo` and a scope's `spawn_fifo` start their tasks in the order they were spawned:
/// on a one-core runtime, where one worker runs every task, the tasks spawned from a task (a
/// worker, whose plain `spawn` would run the newest first) and from outside run in order, and
/// the plain spawns from the same task come back newest first, beside them.
#[test]
fn fifo_spawns_start_in_the_order_they_were_spawned_on_one_core() {
    let rt = one_worker();
    let order = std::sync::Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let log = |tag: &'static str, i: usize| {
        let (order, tx) = (order.clone(), tx.clone());
        move || {
            order.lock().unwrap().push((tag, i));
            tx.send(()).unwrap();
        }
    };
    const N: usize = 40;
    rt.install(|| {
        for i in 0..N {
            rt.spawn_fifo(log("fifo", i));
        }
        for i in 0..N {
            rt.spawn_detached(log("lifo", i));
        }
    });
    for i in 0..N {
        rt.spawn_fifo(log("outside", i));
    }
    for _ in 0..3 * N {
        rx.recv().unwrap();
    }
    let order = order.lock().unwrap().clone();
    let of = |tag| -> Vec<usize> {
        order
            .iter()
            .filter(|(t, _)| *t == tag)
            .map(|&(_, i)| i)
            .collect()
    };
    assert_eq!(of("fifo"), (0..N).collect::<Vec<_>>(), "{order:?}");
    assert_eq!(of("outside"), (0..N).collect::<Vec<_>>(), "{order:?}");
    assert_eq!(of("lifo"), (0..N).rev().collect::<Vec<_>>(), "{order:?}");

    let started = Mutex::new(Vec::new());
    rt.install(|| {
        umt_rt::scope_fifo(|s| {
            for i in 0..N {
                let started = &started;
                s.spawn_fifo(move |_| started.lock().unwrap().push(i));
            }
        })
    });
    assert_eq!(started.into_inner().unwrap(), (0..N).collect::<Vec<_>>());
}

/// A `spawn_fifo` task that spawns many plain tasks keeps its worker's deque from emptying
/// for longer than a starved tick's span (`WorkerCtx::shared_first`), which then takes the
/// injector's first job or the deque's oldest: the fifo tasks still start in order.
#[test]
fn fifo_spawns_start_in_order_when_one_of_them_spawns_many_tasks() {
    let rt = one_worker();
    const N: usize = 40;
    let order = std::sync::Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    rt.install(|| {
        for i in 0..N {
            let (order, tx) = (order.clone(), tx.clone());
            rt.spawn_fifo(move || {
                order.lock().unwrap().push(i);
                if i == 0 {
                    for _ in 0..200 {
                        umt_rt::spawn_detached(|| std::hint::black_box(()));
                    }
                }
                tx.send(()).unwrap();
            });
        }
    });
    for _ in 0..N {
        rx.recv().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..N).collect::<Vec<_>>());
}

/// The taskyield, strictly:/// The taskyield, strictly: on a one-core runtime, a task queued behind the caller runs
/// inside `yield_now` (it could run nowhere else), and with nothing queued nothing runs.
#[test]
fn yield_now_runs_the_task_queued_behind_the_caller_on_one_core() {
    let rt = one_worker();
    rt.install(|| {
        let ran = std::sync::Arc::new(AtomicUsize::new(0));
        let seen = ran.clone();
        let h = rt.spawn(move || seen.fetch_add(1, Ordering::SeqCst));
        assert_eq!(
            ran.load(Ordering::SeqCst),
            0,
            "nothing else could run it yet"
        );
        assert_eq!(umt_rt::yield_now(), Some(Yield::Executed));
        assert_eq!(ran.load(Ordering::SeqCst), 1, "it ran inside yield_now");
        assert_eq!(umt_rt::yield_now(), Some(Yield::Idle));
        assert_eq!(h.join(), 0);
    });
}

#[test]
fn parallel_for_visits_each_index_once() {
    for rt in runtimes() {
        let hits: Vec<AtomicUsize> = (0..10_000).map(|_| AtomicUsize::new(0)).collect();
        rt.parallel_for(0..10_000, |i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        let seen = Mutex::new(Vec::new());
        rt.parallel_for_chunked(5..17, 4, |i| seen.lock().unwrap().push(i));
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        assert_eq!(seen, (5..17).collect::<Vec<_>>());
        rt.parallel_for(3..3, |_| unreachable!());
    }
}

#[test]
fn every_worker_waiting_does_not_deadlock() {
    for rt in runtimes() {
        // Deep nesting: every worker ends up waiting on a scope while tasks remain.
        fn nest(depth: usize, count: &AtomicUsize) {
            if depth == 0 {
                count.fetch_add(1, Ordering::Relaxed);
                return;
            }
            umt_rt::scope(|s| {
                for _ in 0..3 {
                    s.spawn(|_| nest(depth - 1, count));
                }
            });
        }
        let count = AtomicUsize::new(0);
        rt.install(|| nest(6, &count));
        assert_eq!(count.load(Ordering::Relaxed), 3usize.pow(6));
    }
}

#[test]
fn panics_propagate_to_the_waiter_and_the_runtime_keeps_working() {
    for rt in runtimes() {
        let ran = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            rt.scope(|s| {
                s.spawn(|_| panic!("task boom"));
                for _ in 0..10 {
                    s.spawn(|_| {
                        ran.fetch_add(1, Ordering::Relaxed);
                    });
                }
            })
        }));
        let msg = *r.unwrap_err().downcast::<&str>().unwrap();
        assert_eq!(msg, "task boom");
        assert_eq!(ran.load(Ordering::Relaxed), 10, "the other tasks still ran");

        let r = catch_unwind(AssertUnwindSafe(|| rt.join(|| 1, || panic!("join boom"))));
        assert!(r.is_err());
        let h = rt.spawn(|| -> u32 { panic!("spawn boom") });
        assert!(catch_unwind(AssertUnwindSafe(|| h.join())).is_err());
        assert!(catch_unwind(AssertUnwindSafe(|| rt.install(|| panic!("install boom")))).is_err());
        let body = catch_unwind(AssertUnwindSafe(|| rt.scope(|_| panic!("body boom"))));
        assert!(body.is_err());

        // Still usable.
        assert_eq!(rt.install(|| fib(12)), 144);
    }
}

/// `b` of a join runs as a job (not inline) while `a` panics: the panic waits for `b`. Then `b`
/// panics while run inline: its own panic comes back.
#[test]
fn join_panics_wait_for_the_other_side() {
    use std::sync::atomic::AtomicBool;
    for rt in runtimes() {
        let (started, done) = (AtomicBool::new(false), AtomicBool::new(false));
        let r = catch_unwind(AssertUnwindSafe(|| {
            rt.join(
                || {
                    // Runs `b` here as a job if no other worker has stolen it.
                    while !started.load(Ordering::Acquire) {
                        umt_rt::yield_now();
                    }
                    panic!("a boom")
                },
                || {
                    started.store(true, Ordering::Release);
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    done.store(true, Ordering::Release);
                },
            )
        }));
        assert_eq!(*r.unwrap_err().downcast::<&str>().unwrap(), "a boom");
        assert!(
            done.load(Ordering::Acquire),
            "b finished before a's panic returned"
        );

        let r = catch_unwind(AssertUnwindSafe(|| {
            rt.join(|| 1, || -> u32 { panic!("b boom") })
        }));
        assert_eq!(*r.unwrap_err().downcast::<&str>().unwrap(), "b boom");
    }
}

/// Only one panic of a `join` or a scope is re-raised; the other side (a second panic's
/// payload, or a value) is dropped before it, not while it unwinds, where a drop that panics
/// too aborts the process (found in review: `join` of two panics, one payload a [`Bomb`]).
#[test]
fn what_a_join_or_scope_does_not_re_raise_is_dropped_before_the_panic() {
    let rt = one_worker();
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.join(
            || std::panic::panic_any(1u32),
            || -> () { std::panic::panic_any(Bomb) },
        )
    }));
    assert_eq!(*r.unwrap_err().downcast::<u32>().unwrap(), 1);
    // The value of the side that did not panic.
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.join(|| PanicsWithABomb, || -> () { panic!("b boom") })
    }));
    assert_eq!(*r.unwrap_err().downcast::<&str>().unwrap(), "b boom");
    // A scope: its body's panic is re-raised, a task's later panic dropped first.
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.scope(|s| {
            s.spawn(|_| std::panic::panic_any(Bomb));
            s.wait().unwrap();
            panic!("body boom")
        })
    }));
    assert_eq!(*r.unwrap_err().downcast::<&str>().unwrap(), "body boom");
    // Its body's value, when a task panicked.
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.scope(|s| {
            s.spawn(|_| panic!("task boom"));
            PanicsWithABomb
        })
    }));
    assert_eq!(*r.unwrap_err().downcast::<&str>().unwrap(), "task boom");
    // A broadcast: the other cores' results, when one core's call panicked.
    let rt2 = Runtime::builder()
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt2.broadcast(|ctx| {
            if ctx.index() == 0 {
                panic!("core 0 boom")
            }
            PanicsWithABomb
        })
    }));
    assert_eq!(*r.unwrap_err().downcast::<&str>().unwrap(), "core 0 boom");
    assert_eq!(rt.install(|| fib(12)), 144);
}

/// A `thread_name` that panics, or gives a name the standard library refuses (a NUL byte),
/// gives the default name: the runtime builds and serves, and no starter of spares dies.
#[test]
fn a_bad_thread_name_gives_the_default_name() {
    for rt in [
        Runtime::builder()
            .num_threads(1)
            .monitor(BackendKind::Disabled)
            .thread_name(|_, _| "bad\0name".to_owned())
            .build()
            .unwrap(),
        Runtime::builder()
            .num_threads(1)
            .monitor(BackendKind::Disabled)
            .thread_name(|_, _| panic!("no name (on purpose)"))
            .build()
            .unwrap(),
    ] {
        let name = rt.install(|| std::thread::current().name().map(str::to_owned));
        assert!(name.is_some_and(|n| n.starts_with("umt-worker-")));
    }
}

/// An aborted closure that never started is dropped on the worker: a drop of what it captured
/// that panics leaves the worker serving (found in review: the worker died, and on one core
/// nothing ran again).
#[test]
fn an_aborted_closures_captures_that_panic_in_drop_leave_the_worker_serving() {
    let rt = one_worker();
    let (block_tx, block_rx) = std::sync::mpsc::channel::<()>();
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    drop(rt.spawn(move || {
        started_tx.send(()).unwrap();
        block_rx.recv().unwrap();
    }));
    started_rx.recv().unwrap();
    let bomb = PanicsWithABomb;
    let h = rt.spawn(move || {
        let _keep = &bomb;
    });
    h.abort();
    block_tx.send(()).unwrap();
    let (next_tx, next_rx) = std::sync::mpsc::channel();
    drop(rt.spawn(move || next_tx.send(()).unwrap()));
    assert!(
        next_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .is_ok(),
        "the worker died dropping an aborted closure"
    );
}

/// rayon's pool calls a rayon user reaches for, under their names (a user's trial).
#[test]
fn rayons_pool_calls_have_their_counterparts() {
    fn build(n: usize) -> Result<umt_rt::ThreadPool, umt_rt::ThreadPoolBuildError> {
        umt_rt::ThreadPoolBuilder::new()
            .num_threads(n)
            .monitor(BackendKind::Disabled)
            .build()
    }
    let pool = build(1).unwrap();
    assert_eq!(pool.current_num_threads(), 1);
    let cpus = umt_sys::cpu::process_cpus().unwrap();
    assert_eq!(umt_rt::max_num_threads(), cpus.len());
    // join_context: the first closure stays on the calling worker; called from outside a
    // runtime, both run on the global runtime's workers.
    let (a, b) = pool.install(|| umt_rt::join_context(|cx| cx.migrated(), |_| 7));
    assert_eq!((a, b), (false, 7));
    let (a, b) = umt_rt::join_context(|cx| cx.migrated(), |cx| cx.migrated());
    assert!(a && b);
    // yield_local: runs a task of the worker's own deque, none from elsewhere.
    assert_eq!(umt_rt::yield_local(), None);
    let ran = AtomicUsize::new(0);
    pool.install(|| {
        assert_eq!(umt_rt::yield_local(), Some(Yield::Idle));
        umt_rt::scope(|s| {
            s.spawn(|_| {
                ran.fetch_add(1, Ordering::SeqCst);
            });
            // One worker, no monitor: the task waits in this worker's deque.
            assert_eq!(umt_rt::yield_local(), Some(Yield::Executed));
            assert_eq!(ran.load(Ordering::SeqCst), 1);
        });
    });
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[test]
fn bad_configurations_are_typed_errors() {
    assert!(matches!(
        Runtime::builder().cores(Vec::new()).build(),
        Err(BuildError::NoCores)
    ));
    assert!(matches!(
        Runtime::builder().cores([100_000]).build(),
        Err(BuildError::CpuNotInMask { cpu: 100_000, .. })
    ));
    let cpu = umt_sys::cpu::process_cpus().unwrap()[0];
    assert!(matches!(
        Runtime::builder().cores([cpu, cpu]).build(),
        Err(BuildError::DuplicateCpu(c)) if c == cpu
    ));
    assert!(matches!(
        Runtime::builder().max_workers_per_core(0).build(),
        Err(BuildError::ZeroWorkersPerCore)
    ));
    assert!(matches!(
        Runtime::builder().max_workers_per_core(64).build(),
        Err(BuildError::TooManyWorkersPerCore(64))
    ));
    assert!(matches!(
        Runtime::builder()
            .scan_period(std::time::Duration::ZERO)
            .build(),
        Err(BuildError::ZeroScanPeriod)
    ));
    if umt_sys::Monitor::probe(BackendKind::Kernel).is_err() {
        let err = Runtime::builder()
            .monitor(BackendKind::Kernel)
            .build()
            .unwrap_err();
        assert!(matches!(
            err,
            BuildError::Monitor(umt_sys::Error::Unavailable(_))
        ));
        assert!(
            err.to_string().contains("kernel backend unavailable"),
            "{err}"
        );
    }
}

#[test]
fn stats_count_tasks() {
    for rt in runtimes() {
        rt.scope(|s| {
            for _ in 0..100 {
                s.spawn(|_| {});
            }
        });
        let st = rt.stats();
        // 100 tasks plus the scope body, which install runs as a job.
        assert_eq!(st.tasks_run, 101);
        assert_eq!(st.cores.len(), rt.cpus().len());
        assert_eq!(st.cores.iter().map(|c| c.tasks_run).sum::<u64>(), 101);
    }
}

#[test]
fn leader_policy_names_round_trip_and_bad_ones_are_explained() {
    for p in LeaderPolicy::ALL {
        assert_eq!(p.name().parse::<LeaderPolicy>(), Ok(p));
        assert_eq!(p.to_string().to_uppercase().parse::<LeaderPolicy>(), Ok(p));
    }
    let err = "busy".parse::<LeaderPolicy>().unwrap_err();
    assert!(err.to_string().contains("idle, normal or poll"), "{err}");
}

/// Unless told otherwise, a runtime's leaders poll with the perf backend and wait for the
/// signal otherwise; a policy asked for is kept whatever the backend.
#[test]
fn the_default_leader_policy_follows_the_backend() {
    for backend in [BackendKind::Disabled, BackendKind::Perf, BackendKind::Auto] {
        let Ok(rt) = Runtime::builder().monitor(backend).build() else {
            eprintln!("skipped: no {backend} backend here");
            continue;
        };
        assert_eq!(rt.leader_policy(), LeaderPolicy::default_for(rt.backend()));
        let expected = match rt.backend() {
            BackendKind::Perf => LeaderPolicy::Poll,
            _ => LeaderPolicy::Idle,
        };
        assert_eq!(rt.leader_policy(), expected);
        drop(rt);
        let rt = Runtime::builder()
            .monitor(backend)
            .leader_policy(LeaderPolicy::Normal)
            .build()
            .unwrap();
        assert_eq!(rt.leader_policy(), LeaderPolicy::Normal);
    }
}

#[test]
fn detached_tasks_run_once_and_their_panics_reach_the_handler() {
    let panics = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
    let rt = {
        let panics = panics.clone();
        Runtime::builder()
            .monitor(BackendKind::Disabled)
            .panic_handler(move |p| {
                let what = p.downcast_ref::<&str>().copied().unwrap_or("?");
                panics.lock().unwrap().push(what.to_string());
            })
            .build()
            .unwrap()
    };
    let ran = std::sync::Arc::new(AtomicUsize::new(0));
    for i in 0..100 {
        let ran = ran.clone();
        rt.spawn_detached(move || {
            ran.fetch_add(1, Ordering::SeqCst);
            if i % 25 == 0 {
                panic!("detached boom");
            }
        });
    }
    // Dropping the runtime runs every queued task first.
    drop(rt);
    assert_eq!(ran.load(Ordering::SeqCst), 100);
    assert_eq!(*panics.lock().unwrap(), vec!["detached boom"; 4]);
    // Without a handler: said on stderr, and the runtime goes on.
    let rt = Runtime::builder()
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap();
    rt.spawn_detached(|| panic!("nobody listens"));
    assert_eq!(rt.join(|| 1, || 2), (1, 2));
}

/// A panic handler that panics itself: its worker goes on (a user's trial: on one worker
/// without a monitor, the worker's thread ended and every later `install` hung).
#[test]
fn a_panic_handler_that_panics_leaves_its_worker_running() {
    let said = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = said.clone();
    umt_rt::set_warning_hook(move |line| sink.lock().unwrap().push(line.to_owned()));
    let handled = std::sync::Arc::new(AtomicUsize::new(0));
    let rt = {
        let handled = handled.clone();
        Runtime::builder()
            .num_threads(1)
            .monitor(BackendKind::Disabled)
            .panic_handler(move |_| {
                handled.fetch_add(1, Ordering::SeqCst);
                panic!("the handler itself panics");
            })
            .build()
            .unwrap()
    };
    let worker = rt.install(std::thread::current).id();
    for _ in 0..3 {
        rt.spawn_detached(|| panic!("first"));
        // Queued behind the panicking task on the one worker, and run by the same thread.
        assert_eq!(rt.install(|| std::thread::current().id()), worker);
    }
    assert_eq!(handled.load(Ordering::SeqCst), 3);
    drop(rt);
    let said = said.lock().unwrap();
    let lines = said
        .iter()
        .filter(|l| l.contains("the panic handler panicked"));
    assert_eq!(lines.count(), 1, "said once: {said:?}");
}

/// This thread's stack size, as the thread library set it up.
fn current_stack_size() -> usize {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    let mut size = 0;
    // SAFETY: `pthread_getattr_np` initialises `attr` for the calling thread (checked by its
    // return value) before it is read, and it is destroyed once.
    unsafe {
        assert_eq!(
            libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()),
            0
        );
        libc::pthread_attr_getstacksize(attr.as_ptr(), &mut size);
        libc::pthread_attr_destroy(attr.as_mut_ptr());
    }
    size
}

/// rayon's `ThreadPoolBuilder` shape: the start handler runs on every worker before its first
/// task and the exit handler on the same ones when the runtime goes; `stack_size` sizes their
/// stacks; a handler that panics costs no worker.
#[test]
fn handlers_run_on_every_worker_and_stack_size_applies() {
    use std::sync::Arc;
    let started = Arc::new(Mutex::new(Vec::new()));
    let exited = Arc::new(Mutex::new(Vec::new()));
    let (s, e) = (started.clone(), exited.clone());
    let rt = Runtime::builder()
        .monitor(BackendKind::Disabled)
        .stack_size(16 << 20)
        .start_handler(move |i| s.lock().unwrap().push(i))
        .exit_handler(move |i| e.lock().unwrap().push(i))
        .build()
        .unwrap();
    let cores = rt.cpus().len();
    let sizes = rt.broadcast(|_| current_stack_size());
    assert_eq!(sizes.len(), cores);
    assert!(sizes.iter().all(|&s| s >= 16 << 20), "{sizes:?}");
    drop(rt);
    let mut started = started.lock().unwrap().clone();
    let mut exited = exited.lock().unwrap().clone();
    started.sort_unstable();
    exited.sort_unstable();
    assert!(started.len() >= cores, "{started:?}");
    assert_eq!(started, exited);
    // A panicking start handler: every worker still runs tasks.
    let rt = Runtime::builder()
        .monitor(BackendKind::Disabled)
        .start_handler(|_| panic!("a start handler that fails"))
        .build()
        .unwrap();
    assert_eq!(rt.broadcast(|ctx| ctx.index()).len(), rt.cpus().len());
}

/// `Scope::wait`, the mid-scope taskwait: every task spawned so far, and what those spawned,
/// has finished when it returns; the body goes on in the same scope. Many rounds, the body
/// on a worker (`install`) and on a thread outside the runtime, with and without a monitor.
#[test]
fn scope_wait_finishes_every_task_spawned_so_far_then_the_scope_goes_on() {
    fn phases<'s>(s: &umt_rt::Scope<'s>, done: &'s AtomicUsize) {
        for round in 1..=3usize {
            for _ in 0..8 {
                s.spawn(move |t| {
                    done.fetch_add(1, Ordering::SeqCst);
                    // A task's children count too.
                    t.spawn(move |_| {
                        done.fetch_add(1, Ordering::SeqCst);
                    });
                });
            }
            s.wait().unwrap();
            assert_eq!(done.load(Ordering::SeqCst), round * 16);
        }
    }
    for rt in runtimes() {
        for _ in 0..100 {
            let done = AtomicUsize::new(0);
            rt.scope(|s| phases(s, &done));
            let done = AtomicUsize::new(0);
            rt.install(|| umt_rt::scope(|s| phases(s, &done)));
        }
        // Nothing spawned: returns at once.
        rt.scope(|s| s.wait().unwrap());
    }
}

/// A task of the scope, or another thread holding the body's handle, gets `NotTheBody`
/// instead of a wait that could be for itself.
#[test]
fn scope_wait_serves_the_body_only() {
    let rt = Runtime::builder()
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap();
    let refused = AtomicUsize::new(0);
    rt.scope(|s| {
        s.spawn(|t| {
            assert_eq!(t.wait(), Err(umt_rt::NotTheBody));
            refused.fetch_add(1, Ordering::SeqCst);
        });
        std::thread::scope(|threads| {
            threads.spawn(|| assert_eq!(s.wait(), Err(umt_rt::NotTheBody)));
        });
        s.wait().unwrap();
        assert_eq!(refused.load(Ordering::SeqCst), 1);
    });
}

/// The default cap of workers per core shares one budget among the cores, within 16 and 63,
/// with a backend that keeps live counts, and is 16 otherwise; a runtime built without a cap
/// takes its default, and an explicit cap wins.
#[test]
fn the_default_worker_cap_is_a_share_of_one_budget() {
    use umt_rt::{DEFAULT_WORKERS_IN_ALL, MAX_WORKERS_PER_CORE, default_workers_per_core};
    for cores in 0..=1024 {
        let cap = default_workers_per_core(cores, true);
        assert!((16..=MAX_WORKERS_PER_CORE).contains(&cap), "{cores}: {cap}");
        // More cores share the budget: no core's cap grows with them, and the runtime's
        // workers stay within the budget until the floor of 16 per core passes it.
        assert!(
            default_workers_per_core(cores + 1, true) <= cap,
            "{cores}: {cap}"
        );
        if cores > 0 {
            assert!(
                cap * cores <= DEFAULT_WORKERS_IN_ALL.max(16 * cores),
                "{cores}: {cap}"
            );
        }
        assert_eq!(default_workers_per_core(cores, false), 16);
    }
    assert_eq!(
        [1, 2, 4, 8, 16, 64].map(|n| default_workers_per_core(n, true)),
        [63, 63, 63, 32, 16, 16]
    );
    let cpu = umt_sys::cpu::process_cpus().unwrap()[0];
    let rt = Runtime::builder()
        .cores([cpu])
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap();
    assert_eq!((rt.spare_limit(), rt.max_workers_per_core()), (16, 16));
    let rt = Runtime::builder()
        .cores([cpu])
        .max_workers_per_core(5)
        .build()
        .unwrap();
    assert_eq!((rt.spare_limit(), rt.max_workers_per_core()), (5, 5));
    rt.set_spare_limit(2);
    assert_eq!((rt.spare_limit(), rt.max_workers_per_core()), (2, 5));
    if let Ok(rt) = Runtime::builder()
        .cores([cpu])
        .monitor(BackendKind::Bpf)
        .require_monitor(true)
        .build()
    {
        assert_eq!((rt.spare_limit(), rt.max_workers_per_core()), (63, 63));
    }
}
