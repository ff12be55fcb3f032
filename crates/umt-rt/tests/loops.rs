//! Parallel loops overlap a blocked participant (issue 29): when a participant blocks in the
//! kernel and its loop still has chunks, the spare worker its core's leader wakes joins the
//! loop as one more participant (`iter/README.md`, D5). Under `static` nothing joins: each
//! participant owns its block.
//!
//! The tests use the first two CPUs of the affinity mask and assume no other program keeps
//! them busy (see `blocking.rs`); they run one at a time.

use std::io::{Read, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use umt_rt::prelude::*;
use umt_rt::{LeaderPolicy, Runtime};

mod common;
use common::{monitored_backend, skip_unmonitored, thread_syscall};

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A monitored runtime on the first two CPUs, or `None` (skipped, saying why).
fn two_core_runtime() -> Option<Runtime> {
    let cpus = umt_sys::cpu::process_cpus().unwrap();
    if cpus.len() < 2 {
        eprintln!("skipped: needs two CPUs");
        return None;
    }
    let backend = monitored_backend();
    let rt = Runtime::builder()
        .cores(cpus[..2].iter().copied())
        .monitor(backend)
        .leader_policy(LeaderPolicy::default_for(backend))
        .build()
        .unwrap();
    (!skip_unmonitored(&rt)).then_some(rt)
}

/// Where and by whom index `i` ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ran {
    cpu: usize,
    tid: i32,
}

const LEN: usize = 64;
/// How long anything waits before the test gives up (a failure, not a timing).
const PATIENCE: Duration = Duration::from_secs(60);

/// Index 0 blocks in `read` on a pipe the test thread writes only once the loop's offer was
/// taken (or, under `static`, once every index outside the blocked participant's block ran).
/// Returns what ran where, and whether a joiner ran on the blocked core while the reader was
/// blocked.
fn blocked_participant(schedule: Schedule) -> Option<(Vec<Option<Ran>>, Ran, bool)> {
    let rt = two_core_runtime()?;
    let (rx, mut tx) = std::io::pipe().unwrap();
    let ran: Vec<Mutex<Option<Ran>>> = (0..LEN).map(|_| Mutex::new(None)).collect();
    let visits: Vec<AtomicU8> = (0..LEN).map(|_| AtomicU8::new(0)).collect();
    let blocked_tid = AtomicI32::new(0);
    let blocked_cpu = AtomicUsize::new(usize::MAX);
    let read_done = AtomicBool::new(false);
    let joined = AtomicBool::new(false);
    let visited = AtomicUsize::new(0);
    // Threads that ran an index other than 0: the reader blocks only once another
    // participant runs, so that a thread on its core afterwards can only be a joiner (not a
    // spare that took a participant still queued there).
    let others: Mutex<Vec<i32>> = Mutex::new(Vec::new());
    let joinable = schedule != Schedule::Static;
    std::thread::scope(|s| {
        let looper = s.spawn(|| {
            rt.install(|| {
                (0..LEN).into_par_iter().schedule(schedule).for_each(|i| {
                    let me = Ran {
                        cpu: umt_sys::cpu::current_cpu().unwrap(),
                        tid: umt_sys::cpu::current_tid(),
                    };
                    visits[i].fetch_add(1, Ordering::SeqCst);
                    *ran[i].lock().unwrap() = Some(me);
                    if i != 0 {
                        others.lock().unwrap().push(me.tid);
                    }
                    if i == 0 {
                        // Runnable while it waits (no block, no spare): spins and yields.
                        let t = Instant::now();
                        while !others.lock().unwrap().iter().any(|&o| o != me.tid)
                            && t.elapsed() < PATIENCE
                        {
                            std::thread::yield_now();
                        }
                        blocked_cpu.store(me.cpu, Ordering::SeqCst);
                        blocked_tid.store(me.tid, Ordering::SeqCst);
                        let mut b = [0u8];
                        (&rx).read_exact(&mut b).unwrap();
                        read_done.store(true, Ordering::SeqCst);
                        return;
                    }
                    let blocked = blocked_cpu.load(Ordering::SeqCst);
                    if me.cpu == blocked && me.tid != blocked_tid.load(Ordering::SeqCst) {
                        // A joiner on the blocked core, while the reader still waits.
                        if !read_done.load(Ordering::SeqCst) {
                            joined.store(true, Ordering::SeqCst);
                        }
                    } else if joinable && me.cpu != blocked {
                        // The other core waits for a joiner on the blocked one, so that the
                        // loop cannot finish its chunks without one.
                        // Runnable while it waits, so its own core wakes no spare.
                        let t = Instant::now();
                        while !joined.load(Ordering::SeqCst) && t.elapsed() < PATIENCE {
                            std::thread::yield_now();
                        }
                    }
                    visited.fetch_add(1, Ordering::SeqCst);
                });
            })
        });
        // Release the reader once the loop was joined on its core (under `static`, once the
        // other participant's block is done), or after PATIENCE.
        let t = Instant::now();
        loop {
            let asleep = match blocked_tid.load(Ordering::SeqCst) {
                0 => false,
                tid => thread_syscall(tid) == Some(libc::SYS_read),
            };
            let released = if joinable {
                joined.load(Ordering::SeqCst)
            } else {
                visited.load(Ordering::SeqCst) >= LEN / 2
            };
            if (asleep && released) || t.elapsed() > PATIENCE {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        tx.write_all(b"x").unwrap();
        looper.join().unwrap();
    });
    for (i, v) in visits.iter().enumerate() {
        assert_eq!(v.load(Ordering::SeqCst), 1, "index {i} under {schedule}");
    }
    let ran: Vec<Option<Ran>> = ran.into_iter().map(|m| m.into_inner().unwrap()).collect();
    let reader = ran[0].unwrap();
    Some((ran, reader, joined.load(Ordering::SeqCst)))
}

/// Every schedule but `static`: the blocked participant's core runs the loop's other chunks
/// on another worker while the reader is blocked, and every index runs once.
#[test]
fn a_spare_joins_a_loop_whose_participant_blocked() {
    let _serial = serial();
    for schedule in [
        Schedule::StaticSteal,
        Schedule::Dynamic(1),
        Schedule::Guided(1),
        Schedule::Fac2,
        Schedule::Af,
    ] {
        let Some((ran, reader, joined)) = blocked_participant(schedule) else {
            return;
        };
        assert!(
            joined,
            "{schedule}: no index ran on CPU {} while its participant was blocked: {ran:?}",
            reader.cpu
        );
    }
}

/// D1 of `iter/README.md`: on a monitored runtime of one core, a loop that could be split
/// runs with one participant and its offer, not inline: when the participant blocks, the
/// core's spare joins it. Index 0 reads a pipe that only index 1 writes; the participant
/// takes index 0 first (`dynamic`, chunks of 1), so index 1 can only run on a joiner while
/// the participant is blocked. After PATIENCE the test writes the byte itself, and fails.
#[test]
fn on_one_core_a_spare_joins_a_loop_whose_only_participant_blocked() {
    let _serial = serial();
    let Some(rt) = common::one_core_monitored() else {
        return;
    };
    let (rx, tx) = std::io::pipe().unwrap();
    let (rx, tx) = (Mutex::new(rx), Mutex::new(tx));
    let byte = AtomicU8::new(0);
    std::thread::scope(|s| {
        let looper = s.spawn(|| {
            rt.install(|| {
                (0..2usize)
                    .into_par_iter()
                    .schedule(Schedule::Dynamic(1))
                    .for_each(|i| {
                        if i == 0 {
                            let mut b = [0u8; 1];
                            rx.lock().unwrap().read_exact(&mut b).unwrap();
                            byte.store(b[0], Ordering::SeqCst);
                        } else {
                            tx.lock().unwrap().write_all(b"j").unwrap();
                        }
                    })
            })
        });
        let t = Instant::now();
        while !looper.is_finished() && t.elapsed() < PATIENCE {
            std::thread::sleep(Duration::from_millis(1));
        }
        if !looper.is_finished() {
            tx.lock().unwrap().write_all(b"t").unwrap();
        }
        looper.join().unwrap();
    });
    assert_eq!(
        byte.load(Ordering::SeqCst),
        b'j',
        "index 1 did not run while index 0 was blocked: the test released the reader"
    );
}

/// `static`: each participant owns its block, so nothing joins the loop; the blocked
/// participant's block waits for it, and no other worker runs an index on its core.
#[test]
fn under_static_nothing_joins() {
    let _serial = serial();
    let Some((ran, reader, joined)) = blocked_participant(Schedule::Static) else {
        return;
    };
    assert!(!joined, "{ran:?}");
    let on_blocked_core_by_others = ran
        .iter()
        .flatten()
        .filter(|r| r.cpu == reader.cpu && r.tid != reader.tid)
        .count();
    assert_eq!(on_blocked_core_by_others, 0, "{ran:?}");
}

fn schedules() -> impl Strategy<Value = Schedule> {
    prop_oneof![
        Just(Schedule::Static),
        Just(Schedule::StaticSteal),
        (1usize..20).prop_map(Schedule::Dynamic),
        (1usize..20).prop_map(Schedule::Guided),
        Just(Schedule::Fac2),
        Just(Schedule::Af),
    ]
}

/// With bodies that really block (sleeps), so spares join and leave loops, every index is
/// still visited once and an ordered result is the sequential one. One runtime for all cases,
/// dropped at the end: with the Kernel backend a process has one UMT state at a time.
#[test]
fn every_index_runs_once_with_blocking_bodies() {
    let _serial = serial();
    let Some(rt) = two_core_runtime() else {
        return;
    };
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    });
    let strategy = (0usize..400, 3usize..40, schedules());
    runner
        .run(&strategy, |(len, every, s)| {
            let visits: Vec<AtomicU8> = (0..len).map(|_| AtomicU8::new(0)).collect();
            let got: Vec<usize> = rt.install(|| {
                (0..len)
                    .into_par_iter()
                    .schedule(s)
                    .map(|i| {
                        visits[i].fetch_add(1, Ordering::Relaxed);
                        if i % every == 0 {
                            std::thread::sleep(Duration::from_micros(100));
                        }
                        i * 3
                    })
                    .collect()
            });
            prop_assert!(visits.iter().all(|v| v.load(Ordering::Relaxed) == 1));
            prop_assert_eq!(got, (0..len).map(|i| i * 3).collect::<Vec<_>>());
            Ok(())
        })
        .unwrap();
}

/// `walk_tree` is walked by the loop's participants together, and a spare joins it too: the
/// root's children are A, B and C; expanding A or B blocks in `read` on a pipe that only C's
/// expansion writes. The two participants take A and B first (the stack hands out A, then
/// B, then C) and block; only a third thread, a spare woken on a blocked core that joins the
/// walk, can take C and release them. Without one the walk would wait for ever: the test
/// releases the pipes itself after `PATIENCE` and fails.
#[test]
fn a_spare_joins_a_tree_walk_whose_participants_blocked() {
    let _serial = serial();
    let Some(rt) = two_core_runtime() else {
        return;
    };
    let (rx_a, tx_a) = std::io::pipe().unwrap();
    let (rx_b, tx_b) = std::io::pipe().unwrap();
    let writers = Mutex::new(Some((tx_a, tx_b)));
    let release = || {
        let taken = writers.lock().unwrap().take();
        taken.map(|(mut a, mut b)| {
            a.write_all(b"x").unwrap();
            b.write_all(b"x").unwrap();
        })
    };
    // Who expanded each node (0 root, 1 A, 2 B, 3 C), and how often each was visited.
    let expanded_by: [AtomicI32; 4] = Default::default();
    let visits: [AtomicU8; 4] = Default::default();
    let released_by_c = AtomicBool::new(false);
    let kids = |n: &u8| -> Vec<u8> {
        expanded_by[usize::from(*n)].store(umt_sys::cpu::current_tid(), Ordering::SeqCst);
        let mut byte = [0u8];
        match n {
            0 => vec![1, 2, 3],
            1 => {
                (&rx_a).read_exact(&mut byte).unwrap();
                Vec::new()
            }
            2 => {
                (&rx_b).read_exact(&mut byte).unwrap();
                Vec::new()
            }
            _ => {
                if release().is_some() {
                    released_by_c.store(true, Ordering::SeqCst);
                }
                Vec::new()
            }
        }
    };
    std::thread::scope(|s| {
        let walker = s.spawn(|| {
            rt.install(|| {
                umt_rt::iter::walk_tree(0u8, kids).for_each(|n| {
                    visits[usize::from(n)].fetch_add(1, Ordering::SeqCst);
                })
            })
        });
        let t = Instant::now();
        while !walker.is_finished() && t.elapsed() < PATIENCE {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Gives up: unblocks A and B (no-op if C did).
        let _ = release();
        walker.join().unwrap();
    });
    assert!(
        released_by_c.load(Ordering::SeqCst),
        "C was not expanded while A and B were blocked: no spare joined the walk"
    );
    for (n, v) in visits.iter().enumerate() {
        assert_eq!(v.load(Ordering::SeqCst), 1, "node {n}");
    }
    let by: Vec<i32> = expanded_by
        .iter()
        .map(|t| t.load(Ordering::SeqCst))
        .collect();
    assert!(by[3] != by[1] && by[3] != by[2] && by[1] != by[2], "{by:?}");
}
