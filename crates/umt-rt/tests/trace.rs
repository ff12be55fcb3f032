//! The trace recorder and the per-core figures of `Stats`, on real runs.

use std::time::Duration;

use umt_rt::{BackendKind, CoreState, Runtime, TraceKind, TraceThread};

mod common;
use common::whole_trace;

fn spin(us: u64) {
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_micros(us) {
        std::hint::spin_loop();
    }
}

/// A runtime of `threads` cores without a monitor, tracing.
fn traced_unmonitored(threads: usize) -> Runtime {
    Runtime::builder()
        .num_threads(threads)
        .monitor(BackendKind::Disabled)
        .trace(true)
        .build()
        .unwrap()
}

#[test]
fn off_by_default() {
    let rt = Runtime::builder()
        .num_threads(1)
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap();
    rt.join(|| 1, || 2);
    assert!(rt.take_trace().is_none());
}

#[test]
fn every_task_is_recorded_once_with_nesting_balanced_per_thread() {
    let rt = traced_unmonitored(2);
    for _ in 0..3 {
        rt.scope(|s| {
            for i in 0..500 {
                s.spawn(move |_| {
                    // Some tasks nest a join, which runs tasks inside tasks.
                    if i % 7 == 0 {
                        umt_rt::join(|| spin(5), || spin(5));
                    }
                });
            }
        });
    }
    let trace = whole_trace(&rt, 0);
    assert!(!trace.monitored());
    let ran = rt.stats().tasks_run;
    let count = |kind| trace.records().iter().filter(|r| r.kind == kind).count() as u64;
    assert_eq!(count(TraceKind::TaskStart), ran);
    assert_eq!(count(TraceKind::TaskEnd), ran);
    // Per thread, ends never outnumber starts at any point: the nesting is well formed.
    let mut depth = std::collections::HashMap::new();
    for r in trace.records() {
        let d: &mut i64 = depth.entry(r.thread).or_default();
        match r.kind {
            TraceKind::TaskStart => *d += 1,
            TraceKind::TaskEnd => *d -= 1,
            _ => {}
        }
        assert!(*d >= 0, "{r:?}");
    }
    assert!(depth.values().all(|&d| d == 0));
    assert!(
        trace
            .records()
            .windows(2)
            .all(|w| w[0].time_ns <= w[1].time_ns)
    );
    // Without a monitor: only work and idleness, adding up to the trace's length per core.
    for a in trace.accounting() {
        assert_eq!(a.blocked + a.oversubscribed, Duration::ZERO);
        assert_eq!(
            a.total(),
            Duration::from_nanos(trace.end_ns() - trace.start_ns())
        );
    }
    let tasks: u64 = trace.accounting().iter().map(|a| a.tasks).sum();
    assert_eq!(tasks, ran);
    // A second take holds only what happened since.
    rt.join(|| spin(10), || spin(10));
    let next = whole_trace(&rt, ran);
    let starts = next
        .records()
        .iter()
        .filter(|r| r.kind == TraceKind::TaskStart)
        .count() as u64;
    assert_eq!(starts, rt.stats().tasks_run - ran);
    // The new tasks all began after the first trace's last record. Records from before it
    // may still come now (a worker that woke, found nothing and parked only after the first
    // take had every task's end, our reading of a failure in the PREEMPT_RT guest): never a
    // task's, and appending them keeps the joined trace in order.
    for r in next.records() {
        if r.time_ns < trace.end_ns() {
            assert!(
                !matches!(r.kind, TraceKind::TaskStart | TraceKind::TaskEnd),
                "a task's record of the first take came with the second: {r:?}"
            );
        }
    }
    let mut joined = trace.clone();
    assert!(joined.append(next));
    assert_eq!(
        joined
            .records()
            .iter()
            .filter(|r| r.kind == TraceKind::TaskEnd)
            .count() as u64,
        rt.stats().tasks_run
    );
    assert!(
        joined
            .records()
            .windows(2)
            .all(|w| w[0].time_ns <= w[1].time_ns)
    );
}

#[test]
fn a_busy_core_is_in_the_application_state() {
    let rt = Runtime::builder()
        .num_threads(1)
        .monitor(BackendKind::Disabled)
        .trace(true)
        .build()
        .unwrap();
    rt.scope(|s| s.spawn(|_| spin(20_000)));
    let trace = whole_trace(&rt, 0);
    let spans = trace.spans(0);
    // The task's 20 ms are one application span (under load the worker may also have
    // waited longer than that to start, idle, so it need not be the longest span).
    assert!(
        spans
            .iter()
            .any(|s| s.state == CoreState::Application && s.end_ns - s.start_ns >= 20_000_000),
        "{spans:#?}"
    );
    assert!(
        trace
            .records()
            .iter()
            .all(|r| matches!(r.thread, TraceThread::Worker(_)))
    );
}

#[test]
fn stats_carry_the_kernels_per_core_figures() {
    let rt = Runtime::builder()
        .num_threads(2)
        .monitor(BackendKind::Disabled)
        .build()
        .unwrap();
    rt.broadcast(|_| spin(60_000));
    let st = rt.stats();
    assert_eq!(st.cores.len(), 2);
    for c in &st.cores {
        // Each core's worker spun for 60 ms of wall time, running or runnable throughout:
        // with schedstat, its CPU time and run-queue wait cover them; from `stat` (no
        // schedstat), CPU time comes in sampled clock ticks, and only its presence is sure.
        match c.runqueue_wait {
            Some(wait) => assert!(c.cpu_time + wait >= Duration::from_millis(55), "{c:?}"),
            None => assert!(c.cpu_time > Duration::ZERO, "{c:?}"),
        }
        assert!(
            c.cpu_time + c.idle_time >= st.elapsed.min(c.cpu_time),
            "{c:?}"
        );
        // The core's switches are its workers' (a worker that never slept nor was preempted
        // may have none: the patched TCG guest showed it).
        let of_workers: u64 = st
            .workers
            .iter()
            .filter(|w| w.cpu == c.cpu)
            .filter_map(|w| w.sched.as_ref())
            .map(|s| s.voluntary_switches + s.involuntary_switches)
            .sum::<u64>();
        assert_eq!(
            c.voluntary_switches + c.involuntary_switches,
            of_workers,
            "{c:?}"
        );
    }
    assert!(st.workers.iter().all(|w| w.sched.is_some()));
    let cov = st.cov(|c| c.cpu_time.as_secs_f64());
    assert!(cov.is_finite() && cov >= 0.0);
    assert_eq!(
        umt_rt::advanced::coefficient_of_variation(&[2.0, 2.0, 2.0]),
        0.0
    );
    assert!((umt_rt::advanced::coefficient_of_variation(&[1.0, 3.0]) - 0.5).abs() < 1e-12);
    assert_eq!(umt_rt::advanced::coefficient_of_variation(&[]), 0.0);
}

/// A parallel loop's participants sample the core's ready count between chunks: one
/// `Chunk` record per chunk they ask for, the last (refused: the loop is handed out) included.
/// Checked with the participant count left free, as the run decides it.
#[test]
fn a_loop_samples_the_ready_count_between_chunks() {
    let rt = traced_unmonitored(2);
    const LEN: usize = 300;
    rt.install(|| {
        use umt_rt::prelude::*;
        (0..LEN)
            .into_par_iter()
            .schedule(umt_rt::Schedule::Dynamic(1))
            .for_each(|_| spin(2));
    });
    let trace = whole_trace(&rt, 0);
    let chunks = trace
        .records()
        .iter()
        .filter(|r| r.kind == TraceKind::Chunk)
        .count();
    // Each participant asks once more than it gets: the two the loop starts with, and any
    // worker that joined it (D5: an idle worker takes a running loop's offer, one each at
    // most, since a joiner without a monitor stays until the loop is handed out).
    assert!((LEN + 2..=LEN + 4).contains(&chunks), "{chunks} samples");
}
