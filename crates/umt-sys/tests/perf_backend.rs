//! The Perf backend against the real kernel: exact events for blocking, none for preemption,
//! correct cores under migration, recovery from ring overflow, thread exit.

use std::io::{Read, Write};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use umt_sys::{BackendKind, Cause, CpuId, Error, Events, Monitor, MonitorEvent, cpu};

fn perf_monitor() -> Monitor {
    match Monitor::new(BackendKind::Perf) {
        Ok(m) => m,
        Err(e) => panic!("these tests need the perf backend: {e}"),
    }
}

/// The events of one thread, as (cpu, events, cause), in order.
fn events_of(all: &[MonitorEvent], tid: i32) -> Vec<(CpuId, Events, Cause)> {
    all.iter()
        .filter(|e| e.tid == Some(tid))
        .map(|e| (e.cpu, e.events, e.cause))
        .collect()
}

/// Waits until `tid` is asleep in the kernel (state S or D), so a wake-up is a real unblock.
fn wait_until_blocked(tid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        let state = stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap();
        if state == 'S' || state == 'D' {
            return;
        }
        assert!(Instant::now() < deadline, "thread {tid} never blocked");
        std::thread::yield_now();
    }
}

/// The first and last CPU of the affinity mask, when there are two or more.
fn two_cpus() -> Option<(CpuId, CpuId)> {
    let cpus = cpu::process_cpus().unwrap();
    (cpus.len() >= 2).then(|| (cpus[0], cpus[cpus.len() - 1]))
}

fn last_cpu() -> CpuId {
    *cpu::process_cpus().unwrap().last().unwrap()
}

#[test]
fn nanosleep_is_one_block_and_one_unblock_on_its_core() {
    let monitor = perf_monitor();
    let target = last_cpu();
    let tid = std::thread::scope(|s| {
        s.spawn(|| {
            cpu::pin_current_thread(target).unwrap();
            monitor.register_current_thread().unwrap();
            std::thread::sleep(Duration::from_millis(5));
            monitor.unregister_current_thread().unwrap();
            cpu::current_tid()
        })
        .join()
        .unwrap()
    });
    let all = monitor.drain().unwrap();
    assert_eq!(
        events_of(&all, tid),
        vec![
            (target, Events::UNBLOCK, Cause::Register),
            (target, Events::BLOCK, Cause::Switch),
            (target, Events::UNBLOCK, Cause::Switch),
            (target, Events::BLOCK, Cause::Unregister),
        ]
    );
    assert_eq!(monitor.ready_counts().iter().sum::<i64>(), 0);
}

/// Starts a thread pinned to `target` that registers with `monitor`, reads one byte from `rx`
/// and unregisters. Returns once it is blocked in the read, with its tid.
fn blocked_reader<'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    monitor: &'scope Monitor,
    target: CpuId,
    rx: std::io::PipeReader,
) -> (std::thread::ScopedJoinHandle<'scope, ()>, i32) {
    blocked_reader_then(s, monitor, target, rx, || {})
}

/// [`blocked_reader`], which runs `then` after the read, still registered, and returns what it
/// returns.
fn blocked_reader_then<'scope, T: Send + 'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    monitor: &'scope Monitor,
    target: CpuId,
    mut rx: std::io::PipeReader,
    then: impl FnOnce() -> T + Send + 'scope,
) -> (std::thread::ScopedJoinHandle<'scope, T>, i32) {
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let reader = s.spawn(move || {
        cpu::pin_current_thread(target).unwrap();
        monitor.register_current_thread().unwrap();
        tid_tx.send(cpu::current_tid()).unwrap();
        let mut b = [0u8; 1];
        rx.read_exact(&mut b).unwrap();
        let out = then();
        monitor.unregister_current_thread().unwrap();
        out
    });
    let tid = tid_rx.recv().unwrap();
    wait_until_blocked(tid);
    (reader, tid)
}

#[test]
fn pipe_read_is_one_block_and_one_unblock_and_wakes_the_poller() {
    let monitor = perf_monitor();
    let target = last_cpu();
    let (rx, mut tx) = std::io::pipe().unwrap();
    std::thread::scope(|s| {
        let (reader, tid) = blocked_reader(s, &monitor, target, rx);
        // The block is already in the ring: the monitor's fd is readable and the drain sees it.
        assert!(monitor.wait(Some(Duration::from_secs(10))).unwrap());
        let blocked = monitor.drain().unwrap();
        assert!(
            events_of(&blocked, tid).contains(&(target, Events::BLOCK, Cause::Switch)),
            "{blocked:?}"
        );
        assert_eq!(monitor.ready(target), 0, "the blocked reader is not ready");
        tx.write_all(b"x").unwrap();
        reader.join().unwrap();
        let rest = monitor.drain().unwrap();
        let mut seq = events_of(&blocked, tid);
        seq.extend(events_of(&rest, tid));
        // Whatever the drains split, the thread's whole history is exactly this.
        assert_eq!(
            seq,
            vec![
                (target, Events::UNBLOCK, Cause::Register),
                (target, Events::BLOCK, Cause::Switch),
                (target, Events::UNBLOCK, Cause::Switch),
                (target, Events::BLOCK, Cause::Unregister),
            ]
        );
    });
}

/// `wait_cpu` wakes for a block of a thread registered on that CPU, and only there.
#[test]
fn a_block_wakes_the_wait_set_of_its_core_only() {
    let Some((other, target)) = two_cpus() else {
        eprintln!("skipped: needs two CPUs");
        return;
    };
    let monitor = perf_monitor();
    let (rx, mut tx) = std::io::pipe().unwrap();
    // Both sets exist before the reader registers: the target's must still get its ring.
    for cpu in [other, target] {
        assert!(!monitor.wait_cpu(cpu, Some(Duration::ZERO)).unwrap());
    }
    std::thread::scope(|s| {
        let (reader, _) = blocked_reader(s, &monitor, target, rx);
        assert!(
            !monitor
                .wait_cpu(other, Some(Duration::from_millis(20)))
                .unwrap()
        );
        assert!(
            monitor
                .wait_cpu(target, Some(Duration::from_secs(10)))
                .unwrap()
        );
        monitor.drain().unwrap();
        assert_eq!(monitor.ready(target), 0, "the blocked reader is not ready");
        tx.write_all(b"x").unwrap();
        reader.join().unwrap();
    });
    match monitor.wait_cpu(usize::MAX, Some(Duration::ZERO)) {
        Err(e @ Error::NoSuchCpu { .. }) => {
            assert!(e.to_string().contains("CPU ids are 0.."), "{e}")
        }
        other => panic!("expected NoSuchCpu, got {other:?}"),
    }
}

fn involuntary_switches() -> i64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)
        .unwrap()
        .involuntary_context_switches() as i64
}

#[test]
fn preempted_cpu_bound_threads_yield_no_block() {
    let monitor = perf_monitor();
    let target = last_cpu();
    let start = Barrier::new(2);
    let tids: Vec<(i32, i64)> = std::thread::scope(|s| {
        let spinners: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    cpu::pin_current_thread(target).unwrap();
                    start.wait(); // may block: before registering
                    monitor.register_current_thread().unwrap();
                    let before = involuntary_switches();
                    let deadline = Instant::now() + Duration::from_secs(20);
                    // Two spinners share one core: the scheduler must preempt them.
                    while involuntary_switches() - before < 3 {
                        std::hint::black_box((0..1000).sum::<u64>());
                        assert!(Instant::now() < deadline, "never preempted");
                    }
                    let preempted = involuntary_switches() - before;
                    monitor.unregister_current_thread().unwrap();
                    (cpu::current_tid(), preempted)
                })
            })
            .collect();
        spinners.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all = monitor.drain().unwrap();
    for (tid, preempted) in tids {
        assert!(preempted >= 3);
        assert_eq!(
            events_of(&all, tid),
            vec![
                (target, Events::UNBLOCK, Cause::Register),
                (target, Events::BLOCK, Cause::Unregister),
            ],
            "thread {tid} was preempted {preempted} times and must show no switch event"
        );
    }
}

/// Runs `f` on a thread registered with a fresh monitor while pinned to the first of two CPUs,
/// `(a, b)`; checks that the counts return to 0 once it unregisters. Skipped with one CPU.
fn registered_on_a(f: impl FnOnce(&Monitor, CpuId, CpuId) + Send) {
    let Some((a, b)) = two_cpus() else {
        eprintln!("skipped: needs two CPUs in the affinity mask");
        return;
    };
    let monitor = perf_monitor();
    std::thread::scope(|s| {
        s.spawn(|| {
            cpu::pin_current_thread(a).unwrap();
            monitor.register_current_thread().unwrap();
            f(&monitor, a, b);
            monitor.unregister_current_thread().unwrap();
        });
    });
    assert_eq!(monitor.ready_counts().iter().sum::<i64>(), 0);
}

#[test]
fn affinity_change_moves_the_thread_to_its_new_core() {
    registered_on_a(|monitor, a, b| {
        monitor.drain().unwrap();
        assert_eq!((monitor.ready(a), monitor.ready(b)), (1, 0));
        cpu::pin_current_thread(b).unwrap();
        assert_eq!(cpu::current_cpu().unwrap(), b);
        monitor.drain().unwrap();
        assert_eq!((monitor.ready(a), monitor.ready(b)), (0, 1));
        // A block now is accounted on the new core.
        std::thread::sleep(Duration::from_millis(2));
        let evs = monitor.drain().unwrap();
        let tid = cpu::current_tid();
        assert!(
            events_of(&evs, tid).contains(&(b, Events::BLOCK, Cause::Switch)),
            "{evs:?}"
        );
        assert_eq!((monitor.ready(a), monitor.ready(b)), (0, 1));
    });
}

#[test]
fn a_runnable_thread_moved_by_another_is_compensated() {
    let Some((a, b)) = two_cpus() else {
        eprintln!("skipped: needs two CPUs in the affinity mask");
        return;
    };
    let monitor = perf_monitor();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let spinner = s.spawn(|| {
            cpu::pin_current_thread(a).unwrap();
            monitor.register_current_thread().unwrap();
            tid_tx.send(cpu::current_tid()).unwrap();
            // Spin (never block) until another thread has moved us to `b`.
            let deadline = Instant::now() + Duration::from_secs(20);
            while cpu::current_cpu().unwrap() != b {
                assert!(Instant::now() < deadline, "never moved");
                std::hint::spin_loop();
            }
            monitor.drain().unwrap();
            let counts = (monitor.ready(a), monitor.ready(b));
            monitor.unregister_current_thread().unwrap();
            counts
        });
        let tid = tid_rx.recv().unwrap();
        let mut to_b = nix::sched::CpuSet::new();
        to_b.set(b).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(tid), &to_b).unwrap();
        assert_eq!(spinner.join().unwrap(), (0, 1));
    });
    let stats = monitor.stats();
    assert!(stats.migrations >= 1, "{stats:?}");
    assert_eq!(monitor.ready_counts().iter().sum::<i64>(), 0);
}

#[test]
fn ring_overflow_is_detected_and_counts_resynchronised() {
    let monitor = Monitor::builder()
        .backend(BackendKind::Perf)
        .ring_pages(1)
        .build()
        .unwrap();
    let target = last_cpu();
    std::thread::scope(|s| {
        s.spawn(|| {
            cpu::pin_current_thread(target).unwrap();
            monitor.register_current_thread().unwrap();
            // Each sleep is two records of 32 bytes: 600 of them overflow a one-page ring.
            for _ in 0..600 {
                std::thread::sleep(Duration::from_micros(1));
            }
            monitor.drain().unwrap();
            let stats = monitor.stats();
            assert!(stats.overflows > 0, "{stats:?}");
            // Each overflow re-read the thread's state, even where that changed no count.
            assert!(stats.resyncs >= stats.overflows, "{stats:?}");
            // Running now, on `target`, and nowhere else.
            let mut want = vec![0; monitor.ready_counts().len()];
            want[target] = 1;
            assert_eq!(monitor.ready_counts(), want);
            monitor.unregister_current_thread().unwrap();
        });
    });
    assert_eq!(monitor.ready_counts().iter().sum::<i64>(), 0);
}

/// A thread registers (and mutes, if asked) then exits: the drain retires it.
fn exit_is_retired(mute: bool) {
    let monitor = perf_monitor();
    let tid = std::thread::scope(|s| {
        s.spawn(|| {
            monitor.register_current_thread().unwrap();
            if mute {
                monitor.mute_current_thread().unwrap();
            }
            cpu::current_tid()
        })
        .join()
        .unwrap()
    });
    // The kernel reports the exit on the event's descriptor; the drain retires the thread.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while monitor.stats().registered > 0 {
        monitor.wait(Some(Duration::from_millis(100))).unwrap();
        seen.extend(monitor.drain().unwrap());
        assert!(Instant::now() < deadline, "exit never noticed: {seen:?}");
    }
    assert_eq!(events_of(&seen, tid).last().map(|e| e.2), Some(Cause::Exit));
    assert_eq!(monitor.ready_counts().iter().sum::<i64>(), 0);
}

#[test]
fn a_thread_that_exits_registered_is_retired() {
    exit_is_retired(false);
}

#[test]
fn a_thread_that_exits_muted_is_retired() {
    exit_is_retired(true);
}

#[test]
fn registration_errors_are_typed() {
    let monitor = perf_monitor();
    let tid = cpu::current_tid();
    assert!(matches!(
        monitor.unregister_current_thread(),
        Err(Error::NotRegistered { tid: t }) if t == tid
    ));
    monitor.register_current_thread().unwrap();
    assert!(monitor.is_current_thread_registered());
    assert!(matches!(
        monitor.register_current_thread(),
        Err(Error::AlreadyRegistered { tid: t }) if t == tid
    ));
    assert_eq!(monitor.stats().registered, 1);
    monitor.unregister_current_thread().unwrap();
    assert_eq!(monitor.stats().registered, 0);
    assert!(matches!(
        Monitor::builder().ring_pages(3).build(),
        Err(Error::InvalidRingPages { pages: 3 })
    ));
}

#[test]
fn a_muted_thread_reports_no_switch_and_stays_ready() {
    let monitor = perf_monitor();
    let target = last_cpu();
    let (tid, during, after) = std::thread::scope(|s| {
        s.spawn(|| {
            cpu::pin_current_thread(target).unwrap();
            monitor.register_current_thread().unwrap();
            monitor.mute_current_thread().unwrap();
            monitor.mute_current_thread().unwrap(); // muting twice does nothing more
            // Blocks and yields while muted: none of them is reported.
            for _ in 0..20 {
                std::thread::sleep(Duration::from_micros(200));
                std::thread::yield_now();
            }
            let during = monitor.drain().unwrap();
            assert_eq!(monitor.ready(target), 1, "a muted thread counts as ready");
            monitor.unmute_current_thread().unwrap();
            monitor.unmute_current_thread().unwrap(); // and so does unmuting twice
            // Reported again once unmuted.
            std::thread::sleep(Duration::from_millis(2));
            let after = monitor.drain().unwrap();
            monitor.unregister_current_thread().unwrap();
            (cpu::current_tid(), during, after)
        })
        .join()
        .unwrap()
    });
    assert_eq!(
        events_of(&during, tid),
        vec![(target, Events::UNBLOCK, Cause::Register)]
    );
    assert_eq!(
        events_of(&after, tid),
        vec![
            (target, Events::BLOCK, Cause::Switch),
            (target, Events::UNBLOCK, Cause::Switch),
        ]
    );
    // The records dropped while muted are not mistaken for a ring overflow.
    let stats = monitor.stats();
    assert_eq!(
        (stats.lost_records, stats.overflows, stats.resyncs),
        (0, 0, 0),
        "{stats:?}"
    );
    assert_eq!(monitor.ready_counts().iter().sum::<i64>(), 0);
}

#[test]
fn a_thread_moved_while_muted_is_moved_when_it_unmutes() {
    registered_on_a(|monitor, a, b| {
        monitor.mute_current_thread().unwrap();
        cpu::pin_current_thread(b).unwrap();
        monitor.drain().unwrap();
        assert_eq!(
            (monitor.ready(a), monitor.ready(b)),
            (1, 0),
            "not seen while muted"
        );
        monitor.unmute_current_thread().unwrap();
        assert_eq!((monitor.ready(a), monitor.ready(b)), (0, 1));
        let evs = monitor.drain().unwrap();
        let tid = cpu::current_tid();
        assert!(
            events_of(&evs, tid).contains(&(b, Events::UNBLOCK, Cause::Migration)),
            "{evs:?}"
        );
        assert!(monitor.stats().migrations >= 1);
    });
}

#[test]
fn muting_needs_a_registration_with_this_monitor() {
    let monitor = perf_monitor();
    let other = perf_monitor();
    let tid = cpu::current_tid();
    assert!(matches!(
        monitor.mute_current_thread(),
        Err(Error::NotRegistered { tid: t }) if t == tid
    ));
    other.register_current_thread().unwrap();
    assert!(matches!(
        monitor.unmute_current_thread(),
        Err(Error::NotRegistered { .. })
    ));
    // A thread registered with two monitors mutes each on its own.
    monitor.register_current_thread().unwrap();
    monitor.mute_current_thread().unwrap();
    other.unregister_current_thread().unwrap();
    monitor.unmute_current_thread().unwrap();
    monitor.unregister_current_thread().unwrap();
    assert!(matches!(
        monitor.mute_current_thread(),
        Err(Error::NotRegistered { .. })
    ));
}

/// Without a signal per event, a block wakes no waiter, and the blocked thread itself finds
/// its block and unblock when it drains its own ring.
#[test]
fn an_unsignalled_monitor_is_drained_by_the_thread_itself() {
    let monitor = Monitor::builder()
        .backend(BackendKind::Perf)
        .signal_each_event(false)
        .build()
        .unwrap();
    let other = perf_monitor();
    let target = last_cpu();
    let (rx, mut tx) = std::io::pipe().unwrap();
    std::thread::scope(|s| {
        let (monitor, other) = (&monitor, &other);
        let (reader, _) = blocked_reader_then(s, monitor, target, rx, move || {
            // Back from the block: its own ring holds the block and the unblock.
            let n = monitor.drain_current_thread().unwrap();
            let after = (n, monitor.ready(target), monitor.stats());
            // Drained: nothing more until the next switch.
            assert_eq!(monitor.drain_current_thread().unwrap(), 0);
            // A thread registered elsewhere only is refused.
            (after, other.drain_current_thread())
        });
        // The block is in the ring, but nobody was woken for it.
        assert!(!monitor.wait(Some(Duration::from_millis(50))).unwrap());
        assert!(
            !monitor
                .wait_cpu(target, Some(Duration::from_millis(50)))
                .unwrap()
        );
        tx.write_all(b"x").unwrap();
        let ((n, ready, stats), refused) = reader.join().unwrap();
        assert_eq!(n, 2, "the block and the unblock");
        assert_eq!(ready, 1, "the reader is ready again on its core");
        assert_eq!((stats.blocks, stats.unblocks), (1, 1), "{stats:?}");
        assert!(matches!(refused, Err(Error::NotRegistered { .. })));
    });
    monitor.drain().unwrap();
    assert_eq!(monitor.ready_counts().iter().sum::<i64>(), 0);
}
