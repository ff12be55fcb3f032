//! Few file descriptors: the runtime says what it cannot do instead of degrading in silence.
//! Alone in its binary, since it lowers the process's descriptor limit; its tests run one at
//! a time, since they share that limit.

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use umt_rt::{BackendKind, BuildError, LeaderPolicy, Runtime};

mod common;
use common::required_backend;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The descriptors open now.
fn open_fds() -> Vec<u64> {
    let listed: Vec<u64> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    // The listing's own descriptor is closed by now.
    listed
        .into_iter()
        .filter(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok())
        .collect()
}

/// Runs `f` with at most `spare` descriptors to open beyond those open now. The limit bounds
/// descriptor numbers and new descriptors take the lowest free ones: it is one more than the
/// `spare`-th free number.
fn with_spare_fds<R>(spare: u64, f: impl FnOnce() -> R) -> R {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let open = open_fds();
    let limit = (0..)
        .filter(|n| !open.contains(n))
        .nth(spare as usize - 1)
        .unwrap()
        + 1;
    setrlimit(Resource::RLIMIT_NOFILE, limit, hard).unwrap();
    let out = f();
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    out
}

#[test]
fn a_runtime_short_of_descriptors_says_what_it_cannot_do() {
    let _serial = serial();
    if umt_sys::Monitor::probe(BackendKind::Perf).is_err()
        || umt_sys::cpu::process_cpus().unwrap().len() < 2
    {
        assert_ne!(
            required_backend(),
            Some(BackendKind::Perf),
            "perf events are required"
        );
        eprintln!("skipped: needs perf events and two CPUs");
        return;
    }
    // 1. The monitor needs two descriptors (its epoll and its eventfd) and the perf probe a
    // third: with two, Auto falls back to no monitor. That is visible: the runtime runs
    // unmonitored, says so, and with `require_monitor` refuses to build.
    let fallback = with_spare_fds(2, || Runtime::builder().monitor(BackendKind::Auto).build());

    let rt = fallback.unwrap();
    assert_eq!(rt.backend(), BackendKind::Disabled);
    assert!(
        rt.selection().to_string().contains("file descriptors"),
        "{}",
        rt.selection()
    );
    drop(rt);
    let required = with_spare_fds(2, || {
        Runtime::builder()
            .monitor(BackendKind::Auto)
            .require_monitor(true)
            .build()
    });
    match required {
        Err(e @ BuildError::MonitorRequired(_)) => {
            let text = e.to_string();
            assert!(text.contains("file descriptors"), "{text}");
            assert!(text.contains("ulimit -n"), "the fix is named: {text}");
        }
        other => panic!("expected MonitorRequired, got {other:?}"),
    }

    // 2. The monitor takes two descriptors (its epoll, its eventfd); a worker two more (its
    // ring's perf event, then its CPU's wait set), and gives back the first if the second
    // fails. Polling leaders open none. Five are one short for both workers, whichever order
    // they open them in: exactly one runs unmonitored, and the stats say so.
    let two_cpus = umt_sys::cpu::process_cpus().unwrap()[..2].to_vec();
    let rt = with_spare_fds(5, || {
        let rt = Runtime::builder()
            .cores(two_cpus)
            .monitor(BackendKind::Perf)
            .leader_policy(LeaderPolicy::Poll)
            .max_workers_per_core(1)
            .build()
            .unwrap();
        // Both initial workers have started (and tried to register) once both ran a task.
        let barrier = std::sync::Barrier::new(2);
        rt.scope(|s| {
            let barrier = &barrier;
            for _ in 0..2 {
                s.spawn(move |_| {
                    barrier.wait();
                });
            }
        });
        rt
    });
    let st = rt.stats();
    assert_eq!(st.workers.len(), 2, "{st:#?}");
    assert_eq!(st.monitored_workers, 1, "{st:#?}");
    assert_eq!(st.workers.iter().filter(|w| w.monitored).count(), 1);
    assert_eq!(st.monitor.registered, 1, "{st:#?}");
}

/// The child of [`a_fallback_is_said_on_stderr_once`]: builds two runtimes that fall back.
#[test]
fn child_builds_a_runtime_without_a_monitor() {
    let _serial = serial();
    if std::env::var("UMT_LIMITS_CHILD").is_err() {
        return; // only as the child
    }
    for _ in 0..2 {
        let rt = with_spare_fds(2, || Runtime::builder().monitor(BackendKind::Auto).build());
        assert_eq!(rt.unwrap().backend(), BackendKind::Disabled);
    }
}

/// A runtime that falls back to no monitor says so on stderr, once per runtime, with the
/// reason and the fix (the application installed no `tracing` subscriber).
#[test]
fn a_fallback_is_said_on_stderr_once() {
    let _serial = serial();
    if umt_sys::Monitor::probe(BackendKind::Perf).is_err() {
        eprintln!("skipped: needs perf events");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_builds_a_runtime_without_a_monitor",
            "--nocapture",
        ])
        .env("UMT_LIMITS_CHILD", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("umt-rt: runs without a monitor"))
        .collect();
    assert_eq!(said.len(), 2, "one line per runtime: {err}");
    assert!(said[0].contains("ulimit -n"), "{}", said[0]);
    assert!(said[0].contains("require_monitor"), "{}", said[0]);
}
