//! The global runtime: the free `join`, `scope` and `spawn` run on it outside a runtime,
//! built on first use with the defaults or once by `Builder::build_global`. A process has one,
//! so each case runs in a process of its own (this binary re-executed).

use std::sync::Mutex;

use umt_rt::{BuildError, Runtime};

mod common;
use common::monitored_backend;

/// The name of the calling thread.
fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_string()
}

/// Runs the test `name` of this binary alone in a child process with `UMT_GLOBAL_CHILD` set.
fn in_child(name: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("UMT_GLOBAL_CHILD", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}

fn is_child() -> bool {
    std::env::var_os("UMT_GLOBAL_CHILD").is_some()
}

/// Asserts that the free functions run their work on workers of the global runtime.
fn free_functions_run_on_workers() {
    assert_eq!(umt_rt::current_thread_index(), None);
    let (a, b) = umt_rt::join(thread_name, umt_rt::current_thread_index);
    assert!(a.starts_with("umt-worker"), "{a}");
    assert!(b.is_some_and(|i| i < umt_rt::current_num_threads()));
    let names = Mutex::new(Vec::new());
    let body_thread = umt_rt::scope(|s| {
        for _ in 0..8 {
            s.spawn(|_| names.lock().unwrap().push(thread_name()));
        }
        thread_name()
    });
    // The body on the calling thread, the tasks on the workers.
    assert_eq!(body_thread, thread_name());
    let names = names.into_inner().unwrap();
    assert_eq!(names.len(), 8);
    assert!(
        names.iter().all(|n| n.starts_with("umt-worker")),
        "{names:?}"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    umt_rt::spawn_detached(move || tx.send(thread_name()).unwrap());
    let name = rx.recv().unwrap();
    assert!(name.starts_with("umt-worker"), "{name}");
    let h = umt_rt::spawn(|| (thread_name(), 6 * 7));
    let (name, v) = h.join();
    assert_eq!(v, 42);
    assert!(name.starts_with("umt-worker"), "{name}");
    // A panic in a task reaches the waiter, and the global runtime lives on.
    let r = std::panic::catch_unwind(|| umt_rt::join(|| 1, || panic!("boom")));
    assert!(r.is_err());
    assert_eq!(umt_rt::join(|| 1, || 2), (1, 2));
}

#[test]
fn free_functions_build_the_global_runtime_on_first_use() {
    if !is_child() {
        return in_child("free_functions_build_the_global_runtime_on_first_use");
    }
    free_functions_run_on_workers();
    // The defaults: every CPU of the process.
    let cpus = umt_sys::cpu::process_cpus().unwrap().len();
    assert_eq!(umt_rt::current_num_threads(), cpus);
    // Too late to configure it.
    let e = Runtime::builder().build_global().unwrap_err();
    assert!(matches!(e, BuildError::GlobalAlreadyBuilt), "{e}");
    assert!(e.to_string().contains("once"), "{e}");
}

#[test]
fn build_global_configures_it_once() {
    if !is_child() {
        return in_child("build_global_configures_it_once");
    }
    Runtime::builder()
        .num_threads(1)
        .monitor(monitored_backend())
        .thread_name(|cpu, k| format!("umt-worker-global-{cpu}.{k}"))
        .build_global()
        .unwrap();
    assert_eq!(umt_rt::current_num_threads(), 1);
    assert_eq!(umt_rt::join(umt_rt::current_thread_index, || 0).0, Some(0));
    assert!(
        umt_rt::join(thread_name, || ())
            .0
            .starts_with("umt-worker-global")
    );
    free_functions_run_on_workers();
    let e = Runtime::builder()
        .num_threads(1)
        .build_global()
        .unwrap_err();
    assert!(matches!(e, BuildError::GlobalAlreadyBuilt), "{e}");
}
