//! Helpers shared by the integration tests.
//!
//! The rule for tests that need a monitor: they skip, saying why on stderr, where no event
//! source can run; with `UMT_REQUIRE_MONITOR=perf|kernel` (CI sets it) a missing one fails
//! them instead, so a run never passes without exercising the mechanism.

#![allow(dead_code)] // each test binary uses its own part

use umt_rt::{BackendKind, Runtime};

/// The backend the run must exercise: `UMT_REQUIRE_MONITOR=perf|kernel`, if set.
pub fn required_backend() -> Option<BackendKind> {
    std::env::var("UMT_REQUIRE_MONITOR")
        .ok()
        .and_then(|b| b.parse().ok())
}

/// The backend of the monitored runs: `UMT_TEST_BACKEND=kernel|perf|auto`, else the required
/// one, else auto; so the same tests run against the UMT kernel inside the patched guest.
pub fn monitored_backend() -> BackendKind {
    std::env::var("UMT_TEST_BACKEND")
        .ok()
        .and_then(|b| b.parse().ok())
        .or_else(required_backend)
        .unwrap_or(BackendKind::Auto)
}

/// `true` when `rt` runs without a monitor, so the calling test must skip: it said why. Fails
/// the test instead when a monitor is required.
pub fn skip_unmonitored(rt: &Runtime) -> bool {
    if rt.backend() != BackendKind::Disabled {
        return false;
    }
    if let Some(b) = required_backend() {
        panic!("UMT_REQUIRE_MONITOR={b}, but: {}", rt.selection());
    }
    eprintln!("skipped: no monitor here ({})", rt.selection());
    true
}

/// A runtime of one core (the process's last CPU) with the monitor on, or `None` (the test
/// skips, saying why) where none runs.
pub fn one_core_monitored() -> Option<Runtime> {
    let cpu = *umt_sys::cpu::process_cpus().unwrap().last().unwrap();
    let rt = Runtime::builder()
        .cores([cpu])
        .monitor(monitored_backend())
        .build()
        .unwrap();
    (!skip_unmonitored(&rt)).then_some(rt)
}

/// Asserts that blocks reached `rt`: as events its drains handed out (Kernel in events mode,
/// Perf), or in the live counts (Bpf, Kernel idle-only: they signal only a drop to zero, and a
/// polling leader never sleeps to be woken).
pub fn assert_blocks_seen(rt: &Runtime) {
    let st = rt.stats();
    let live = matches!(rt.backend(), BackendKind::Bpf | BackendKind::Kernel);
    assert!(
        st.monitor_events > 0 || (live && st.monitor.blocks > 0),
        "{st:#?}"
    );
}

/// The system call thread `tid` of this process sleeps in, from its `/proc` `syscall` file:
/// the kernel names the call only while the thread is off its run queue (asleep), and says
/// `running` otherwise (`None` then, or when the file cannot be read).
pub fn thread_syscall(tid: i32) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `rt`'s trace with the records of every task run since its stats said `tasks_before`:
/// `take_trace` waits at most 100 ms for the threads that hold records, and a thread may
/// hold them longer (a leader at `SCHED_IDLE`, or a worker preempted on its way to park, on a
/// loaded machine: once in the PREEMPT_RT guest), so this takes again, appending, until each
/// task counted has its end in the trace. Call it once the computation has returned.
pub fn whole_trace(rt: &Runtime, tasks_before: u64) -> umt_rt::Trace {
    use std::time::{Duration, Instant};
    let ends = |t: &umt_rt::Trace| {
        t.records()
            .iter()
            .filter(|r| r.kind == umt_rt::TraceKind::TaskEnd)
            .count() as u64
    };
    let mut trace = rt
        .take_trace()
        .expect("the runtime was built with trace(true)");
    let deadline = Instant::now() + Duration::from_secs(60);
    while ends(&trace) < rt.stats().tasks_run - tasks_before {
        assert!(
            Instant::now() < deadline,
            "after a minute the trace still lacks the ends of {} tasks",
            rt.stats().tasks_run - tasks_before - ends(&trace)
        );
        std::thread::sleep(Duration::from_millis(1));
        assert!(trace.append(rt.take_trace().expect("still tracing")));
    }
    trace
}

/// A panic payload that panics when dropped (`std::panic::panic_any(Bomb)`).
pub struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("a panic's payload panicked in its drop (on purpose)");
    }
}

/// A value whose drop panics with a [`Bomb`].
#[derive(Debug)]
pub struct PanicsWithABomb;

impl Drop for PanicsWithABomb {
    fn drop(&mut self) {
        std::panic::panic_any(Bomb);
    }
}

/// The process's first two CPUs, or `None` (the test skips, saying why) on one CPU.
pub fn two_cpus() -> Option<[umt_sys::CpuId; 2]> {
    let cpus = umt_sys::cpu::process_cpus().unwrap();
    if cpus.len() < 2 {
        eprintln!("skipped: needs two CPUs");
        return None;
    }
    Some([cpus[0], cpus[1]])
}
