//! Onload: work that runs only where the application leaves a core idle.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{monitored_backend, skip_unmonitored};
use umt_rt::onload::{Dyon, Metric, Strategy};
use umt_rt::{BackendKind, Onload, OnloadOptions, Runtime};

/// Sets its flag when dropped: a test that panics inside `std::thread::scope` still stops the
/// threads the scope waits for (else the failure would be a hang).
struct Release<'a>(&'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Keeps every core of `rt` busy with computing tasks (no blocking) until the returned guard
/// is dropped; returns once all of them run.
#[must_use]
fn occupy<'s, 'e: 's>(
    rt: &'e Runtime,
    stop: &'e AtomicBool,
    s: &'s std::thread::Scope<'s, 'e>,
) -> Release<'e> {
    let running = Arc::new(AtomicUsize::new(0));
    let n = rt.cpus().len();
    let r = running.clone();
    s.spawn(move || {
        rt.broadcast(|_| {
            r.fetch_add(1, Ordering::SeqCst);
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
    });
    let release = Release(stop);
    while running.load(Ordering::SeqCst) < n {
        std::thread::yield_now();
    }
    release
}

/// Two cores, no monitor: idleness is the pools' (no active worker).
fn two_cores() -> Runtime {
    Runtime::builder()
        .num_threads(2)
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap()
}

#[test]
fn an_idle_runtime_runs_onloaded_work_on_its_cores() {
    let rt = two_cores();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let cpus = rt.cpus().to_vec();
    // A deadline: the workers of a runtime just built may still look for work a moment.
    let wait = OnloadOptions::new().deadline(Duration::from_secs(30));
    let h = match rt.onload_with(&wait, move |ctx| {
        assert!(cpus.contains(&ctx.cpu));
        assert_eq!(umt_sys::cpu::current_cpu().unwrap(), ctx.cpu);
        r.fetch_add(1, Ordering::SeqCst);
    }) {
        Onload::Started(h) | Onload::Queued(h) => h,
        other => panic!("{other:?} on an idle runtime"),
    };
    assert!(h.wait().is_ok());
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    // Two cores at once: the closure runs once on each, told which part it is.
    let parts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let p = parts.clone();
    let opts = wait.clone().cores(2, 2);
    match rt.onload_with(&opts, move |ctx| {
        p.lock().unwrap().push((ctx.index, ctx.count, ctx.cpu))
    }) {
        Onload::Started(h) | Onload::Queued(h) => h.wait().ok().unwrap(),
        other => panic!("{other:?}"),
    }
    let mut parts = parts.lock().unwrap().clone();
    parts.sort();
    assert_eq!(parts.len(), 2);
    assert_eq!((parts[0].0, parts[1].0), (0, 1));
    assert!(parts.iter().all(|p| p.1 == 2));
    assert_ne!(parts[0].2, parts[1].2);
    // A panic in onloaded work comes back to the waiter.
    match rt.onload_with(&wait, |_| panic!("onloaded panic")) {
        Onload::Started(h) | Onload::Queued(h) => {
            let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.wait()));
            assert!(err.is_err());
        }
        other => panic!("{other:?}"),
    }
    let st = rt.onload_stats();
    assert_eq!(st.started + st.started_late, 3);
    assert_eq!(st.runs.iter().sum::<u64>(), 4);
}

#[test]
fn busy_cores_hand_the_work_back_unrun_and_deadlines_are_honoured() {
    let rt = two_cores();
    let ran = Arc::new(AtomicUsize::new(0));
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let busy = occupy(&rt, &stop, s);
        // Without a deadline: back at once, unrun, and callable by the submitter.
        for _ in 0..1000 {
            let r = ran.clone();
            match rt.onload(move |_| {
                r.fetch_add(1, Ordering::SeqCst);
            }) {
                Onload::Rejected(_f) => {}
                other => panic!("{other:?} while every core computes"),
            }
        }
        // With a deadline that passes while the cores stay busy: queued, then handed back.
        let r = ran.clone();
        let opts = OnloadOptions::new().deadline(Duration::from_millis(20));
        let t = Instant::now();
        match rt.onload_with(&opts, move |_| {
            r.fetch_add(1, Ordering::SeqCst);
        }) {
            Onload::Queued(h) => {
                let f = h.wait().expect_err("the cores stayed busy");
                assert!(t.elapsed() >= Duration::from_millis(20));
                f(umt_rt::OnloadContext {
                    index: 0,
                    count: 1,
                    cpu: 0,
                    dedicated: false,
                    ready_at_claim: 0,
                });
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            ran.load(Ordering::SeqCst),
            1,
            "only the returned closure ran"
        );
        // A long deadline: the cores become idle before it, and the work runs then.
        let r = ran.clone();
        let opts = OnloadOptions::new().deadline(Duration::from_secs(30));
        let h = match rt.onload_with(&opts, move |_| {
            r.fetch_add(1, Ordering::SeqCst);
        }) {
            Onload::Queued(h) => h,
            other => panic!("{other:?}"),
        };
        drop(busy);
        assert!(h.wait().is_ok());
    });
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    let st = rt.onload_stats();
    assert_eq!((st.started, st.rejected), (0, 1000));
    assert_eq!((st.started_late, st.expired), (1, 1));
}

/// Dedicated cores run onloaded work even while the application computes there.
#[test]
fn a_partition_dedicates_cores_to_onloaded_work() {
    let rt = two_cores();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let busy = occupy(&rt, &stop, s);
        rt.set_onload_partition(1);
        let last = *rt.cpus().last().unwrap();
        match rt.onload(move |ctx| {
            assert!(ctx.dedicated);
            assert_eq!(ctx.cpu, last);
        }) {
            Onload::Started(h) => h.wait().ok().unwrap(),
            other => panic!("{other:?} with a dedicated core"),
        }
        rt.set_onload_partition(0);
        assert!(matches!(rt.onload(|_| {}), Onload::Rejected(_)));
        drop(busy);
    });
    assert_eq!(rt.onload_stats().dedicated_cores, 0);
}

/// 10^5 submissions with deadlines from 0 to 200 us race with application tasks that block
/// (sleep) and compute: each one either ran (once) or came back (once), never both, never
/// lost; every run was on the core it claimed, which the application left idle.
#[test]
fn a_storm_of_submissions_is_never_lost_or_doubled() {
    let rt = Runtime::builder()
        .monitor(monitored_backend())
        .build()
        .unwrap();
    if skip_unmonitored(&rt) {
        return;
    }
    const N: usize = 100_000;
    let ran: Arc<Vec<AtomicU64>> = Arc::new((0..N).map(|_| AtomicU64::new(0)).collect());
    let wrong_core = Arc::new(AtomicUsize::new(0));
    let not_idle = Arc::new(AtomicUsize::new(0));
    let stop = AtomicBool::new(false);
    let mut returned = vec![0u8; N];
    std::thread::scope(|s| {
        let release = Release(&stop);
        // The application: tasks that sleep (block) and tasks that compute, until stopped.
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                rt.scope(|sc| {
                    for i in 0..8 {
                        sc.spawn(move |_| {
                            if i % 2 == 0 {
                                std::thread::sleep(Duration::from_micros(300));
                            } else {
                                let t = Instant::now();
                                while t.elapsed() < Duration::from_micros(300) {
                                    std::hint::spin_loop();
                                }
                            }
                        });
                    }
                });
            }
        });
        let mut handles = Vec::new();
        for (i, back) in returned.iter_mut().enumerate() {
            let (r, w, ni) = (ran.clone(), wrong_core.clone(), not_idle.clone());
            let f = move |ctx: umt_rt::OnloadContext| {
                r[i].fetch_add(1, Ordering::SeqCst);
                if umt_sys::cpu::current_cpu().ok() != Some(ctx.cpu) {
                    w.fetch_add(1, Ordering::SeqCst);
                }
                if ctx.ready_at_claim > 0 && !ctx.dedicated {
                    ni.fetch_add(1, Ordering::SeqCst);
                }
            };
            let opts = OnloadOptions::new().deadline(Duration::from_micros((i % 5) as u64 * 50));
            match rt.onload_with(&opts, f) {
                Onload::Started(h) | Onload::Queued(h) => handles.push(h),
                Onload::Rejected(_) => *back += 1,
            }
            if handles.len() > 256 {
                for h in handles.drain(..) {
                    // Err: the closure came back unrun (counted as expired).
                    let _ = h.wait();
                }
            }
        }
        for h in handles.drain(..) {
            let _ = h.wait();
        }
        drop(release);
    });
    let st = rt.onload_stats();
    let runs: u64 = ran.iter().map(|r| r.load(Ordering::SeqCst)).sum();
    assert!(
        ran.iter().all(|r| r.load(Ordering::SeqCst) <= 1),
        "a submission ran twice"
    );
    let rejected = returned.iter().filter(|&&b| b == 1).count() as u64;
    assert_eq!(rejected, st.rejected);
    // Every submission is accounted for exactly once.
    assert_eq!(
        st.started + st.started_late + st.rejected + st.expired,
        N as u64,
        "{st:?}"
    );
    assert_eq!(runs, st.started + st.started_late, "{st:?}");
    assert_eq!(st.runs.iter().sum::<u64>(), runs);
    assert_eq!(wrong_core.load(Ordering::SeqCst), 0);
    assert_eq!(not_idle.load(Ordering::SeqCst), 0);
    assert!(runs > 0, "the application's blocks left idle time: {st:?}");
}

/// A runtime of one core whose cap is three workers: DYON's spare-limit arms 1, 2 and 3.
fn one_core_up_to_three_workers() -> Arc<Runtime> {
    Arc::new(
        Runtime::builder()
            .cores(umt_sys::cpu::process_cpus().unwrap().into_iter().take(1))
            .max_workers_per_core(3)
            .build()
            .unwrap(),
    )
}

/// Waits until `dyon` has pulled `n` arms, for a minute at most (the assertions that follow
/// say what went wrong if it has not).
fn wait_for_pulls(dyon: &Dyon, n: u64) {
    let t = Instant::now();
    while dyon.bandit().pulls().0 < n && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// DYON moves the partition with the application's metric: with a reward that grows with
/// the dedicated share, it settles on 100 %.
#[test]
fn dyon_follows_its_metric() {
    let rt = two_cores();
    let rt = Arc::new(rt);
    let reader = Arc::downgrade(&rt);
    let metric = Metric::App(Arc::new(move || {
        reader
            .upgrade()
            .map_or(0.0, |rt| rt.onload_stats().dedicated_cores as f64)
    }));
    let dyon = Dyon::builder()
        .steps(3)
        .period(Duration::from_millis(2))
        .metric(metric)
        .strategy(Strategy::EpsilonGreedy { epsilon: 0.1 })
        .start(&rt);
    wait_for_pulls(&dyon, 200);
    let b = dyon.bandit();
    assert_eq!(b.best(), 2, "{:?} {:?}", b.counts(), b.means());
    drop(dyon);
    assert_eq!(rt.onload_stats().dedicated_cores, 0);
}

/// The same controller on the spare limit: with a reward that grows with the limit, it
/// settles on the cap, and stopping it restores the cap.
#[test]
fn dyon_adapts_the_spare_limit() {
    let rt = one_core_up_to_three_workers();
    let reader = Arc::downgrade(&rt);
    let metric = Metric::App(Arc::new(move || {
        reader.upgrade().map_or(0.0, |rt| rt.spare_limit() as f64)
    }));
    let dyon = Dyon::builder()
        .period(Duration::from_millis(2))
        .metric(metric)
        .strategy(Strategy::EpsilonGreedy { epsilon: 0.1 })
        .start_spare_limit(&rt);
    wait_for_pulls(&dyon, 200);
    let b = dyon.bandit();
    assert_eq!(b.counts().len(), 3, "the limits 1, 2 and the cap, 3");
    assert_eq!(b.best(), 2, "{:?} {:?}", b.counts(), b.means());
    drop(dyon);
    assert_eq!(rt.spare_limit(), 3);
}

/// A metric function that panics loses its reading, not the controller: it goes on choosing
/// (its first readings panicked), and stopping it still restores the cap (found in review:
/// the controller thread died, and the limit stayed where it was).
#[test]
fn dyon_goes_on_when_its_metric_panics() {
    let rt = one_core_up_to_three_workers();
    let reader = Arc::downgrade(&rt);
    let calls = AtomicUsize::new(0);
    let metric = Metric::App(Arc::new(move || {
        if calls.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
            panic!("the metric failed (on purpose)");
        }
        reader.upgrade().map_or(0.0, |rt| rt.spare_limit() as f64)
    }));
    let dyon = Dyon::builder()
        .period(Duration::from_millis(2))
        .metric(metric)
        .start_spare_limit(&rt);
    wait_for_pulls(&dyon, 20);
    assert!(dyon.bandit().pulls().0 >= 20, "the controller stopped");
    drop(dyon);
    assert_eq!(rt.spare_limit(), 3);
}

/// Dropping the runtime hands queued work back to its waiters, unrun.
#[test]
fn shutdown_hands_queued_work_back() {
    let rt = two_cores();
    let stop = Arc::new(AtomicBool::new(false));
    let running = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let (stop, running) = (stop.clone(), running.clone());
        rt.spawn_detached(move || {
            running.fetch_add(1, Ordering::SeqCst);
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
    }
    while running.load(Ordering::SeqCst) < 2 {
        std::thread::yield_now();
    }
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let opts = OnloadOptions::new().deadline(Duration::from_secs(60));
    let h = match rt.onload_with(&opts, move |_| r.store(true, Ordering::SeqCst)) {
        Onload::Queued(h) => h,
        other => panic!("{other:?} while both cores compute"),
    };
    // The computing tasks end a moment after the drop has begun (it waits for them).
    let releaser = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            stop.store(true, Ordering::SeqCst);
        })
    };
    drop(rt);
    releaser.join().unwrap();
    assert!(h.wait().is_err());
    assert!(!ran.load(Ordering::SeqCst));
}

/// Writes 1 MiB that does not compress to a new file in `dir` and syncs it: storage I/O
/// charged to the caller.
fn write_mib(dir: &std::path::Path, name: &str) {
    use std::io::Write;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let bytes: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut f = std::fs::File::create_new(dir.join(name)).unwrap();
    f.write_all(&bytes).unwrap();
    f.sync_all().unwrap();
}

/// The process's `write_bytes` (`/proc/self/io`), read apart from the code under test.
fn process_written() -> u64 {
    let text = std::fs::read_to_string("/proc/self/io").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The per-core counts DYON's default metric sums (seed 002's compute and I/O progress): a
/// task's storage I/O lands on its worker's core, an onloaded closure's CPU time and I/O on
/// its onload thread's core, and nothing on the other core.
#[test]
fn per_core_counts_charge_each_core_its_own_threads() {
    let rt = two_cores();
    let me = umt_sys::cpu::current_tid();
    if umt_sys::cpu::thread_io(me).is_err() {
        eprintln!("skipped: this kernel keeps no task I/O accounting");
        return;
    }
    if umt_sys::cpu::thread_sched(me).is_ok_and(|s| s.runqueue_wait.is_none()) {
        eprintln!("skipped: CPU time in whole ticks here (no schedstat), too coarse to compare");
        return;
    }
    // A directory next to the build's outputs: /tmp may be in memory, where writes reach no
    // storage.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let probe = process_written();
    write_mib(dir.path(), "probe");
    if process_written() < probe + (1 << 20) {
        eprintln!("skipped: this file system accounts no storage writes (a memory file system?)");
        return;
    }
    const MIB: u64 = 1 << 20;
    let before = rt.stats();
    let path = dir.path();
    rt.broadcast(|ctx| {
        if ctx.index() == 0 {
            write_mib(path, "task");
        }
    });
    let after = rt.stats();
    let written = |s: &umt_rt::CoreStats| s.io.map_or(0, |io| io.written_bytes);
    assert!(
        written(&after.cores[0]) >= written(&before.cores[0]) + MIB,
        "{:?} -> {:?}",
        before.cores[0].io,
        after.cores[0].io
    );
    assert_eq!(written(&after.cores[1]), written(&before.cores[1]));
    assert_eq!(after.cores[1].onload_io, None, "no onload yet");

    // An onloaded closure on the second core only: CPU time and I/O of its onload thread.
    let cpu1 = rt.cpus()[1];
    let spent = Arc::new(AtomicU64::new(0));
    let (path, s) = (dir.path().to_path_buf(), spent.clone());
    let job = move |_: umt_rt::OnloadContext| {
        let start = umt_sys::cpu::current_thread_cpu_time().unwrap();
        let mut x = 1u64;
        while umt_sys::cpu::current_thread_cpu_time().unwrap() - start < Duration::from_millis(5) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        write_mib(&path, "onloaded");
        let total = umt_sys::cpu::current_thread_cpu_time().unwrap();
        s.store(total.as_nanos() as u64, Ordering::SeqCst);
    };
    let opts = OnloadOptions::new()
        .cpus([cpu1])
        .deadline(Duration::from_secs(60));
    match rt.onload_with(&opts, job) {
        Onload::Started(h) | Onload::Queued(h) => {
            assert!(h.wait().is_ok(), "an idle runtime runs onloaded work")
        }
        Onload::Rejected(_) => panic!("a deadline queues, never rejects"),
    }
    // The kernel folds a running thread's CPU time in at its next tick or switch: the onload
    // thread may still run (on to its next wait) right after the closure, so wait for it.
    let spent = Duration::from_nanos(spent.load(Ordering::SeqCst));
    let guard = Instant::now();
    let last = loop {
        let last = rt.stats();
        if last.cores[1].onload_cpu_time >= spent {
            break last;
        }
        assert!(guard.elapsed() < Duration::from_secs(60), "{last:?}");
        std::thread::sleep(Duration::from_millis(1));
    };
    let c1 = &last.cores[1];
    assert!(
        c1.onload_io.map_or(0, |io| io.written_bytes) >= MIB,
        "{:?}",
        c1.onload_io
    );
    assert!(c1.total_io_bytes() >= MIB);
    // (The other core's onload thread started too, and ran a little of its own loop.)
    assert_eq!(last.cores[0].onload_io.map_or(0, |io| io.written_bytes), 0);
    assert_eq!(written(&last.cores[0]), written(&after.cores[0]));
}
