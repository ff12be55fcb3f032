//! What a deployer sets without touching the code: `UMT_NUM_THREADS` (or rayon's
//! `RAYON_NUM_THREADS`) and `UMT_BACKEND` shape
//! the default runtime (and the global one), explicit builder calls win, and a value that
//! cannot be used is said once and left out. Each case runs this binary again with the
//! variables set (tests of one process share its environment).

use std::process::Command;

use umt_rt::{BackendKind, Runtime};

/// The checks the child makes, by the value of `UMT_ENV_CHILD`.
fn child(case: &str) {
    let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = said.clone();
    umt_rt::set_warning_hook(move |line| sink.lock().unwrap().push(line.to_owned()));
    match case {
        "one-thread-off" => {
            let rt = Runtime::new().unwrap();
            assert_eq!(rt.cpus().len(), 1);
            assert_eq!(rt.backend(), BackendKind::Disabled);
            // The global runtime too, as rayon's RAYON_NUM_THREADS.
            assert_eq!(umt_rt::current_num_threads(), 1);
            // Explicit calls win (Auto asked for: whatever it finds here, even nothing).
            let all = umt_sys::cpu::process_cpus().unwrap().len();
            let rt = Runtime::builder()
                .num_threads(all)
                .monitor(BackendKind::Auto)
                .build()
                .unwrap();
            assert_eq!(rt.cpus().len(), all);
            assert_eq!(rt.selection().requested, BackendKind::Auto);
        }
        "rayon-var" => {
            // A deployment written for the rayon build of the program keeps its count.
            let rt = Runtime::new().unwrap();
            assert_eq!(rt.cpus().len(), 1);
            assert_eq!(umt_rt::current_num_threads(), 1);
            // rayon's `num_threads(0)` is that default too.
            let rt = Runtime::builder().num_threads(0).build().unwrap();
            assert_eq!(rt.cpus().len(), 1);
        }
        "unusable" => {
            let rt = Runtime::new().unwrap();
            let all = umt_sys::cpu::process_cpus().unwrap().len();
            assert_eq!(rt.cpus().len(), all);
            assert_eq!(rt.selection().requested, BackendKind::Auto);
            let lines = said.lock().unwrap();
            assert!(
                lines.iter().any(|l| l.contains("UMT_NUM_THREADS")),
                "{lines:?}"
            );
            assert!(lines.iter().any(|l| l.contains("UMT_BACKEND")), "{lines:?}");
            drop(lines);
            // rayon code that oversubscribes: with a monitor, every CPU, said once.
            if let Ok(rt) = Runtime::builder()
                .num_threads(all + 3)
                .monitor(BackendKind::Auto)
                .build()
            {
                assert_eq!(rt.cpus().len(), all);
                let lines = said.lock().unwrap();
                let asked = format!("num_threads({}), but", all + 3);
                let line = lines.iter().find(|l| l.contains(&asked));
                assert!(line.is_some_and(|l| !l.contains("  ")), "{lines:?}");
            }
        }
        "unavailable" => {
            // A backend this host cannot give: the runtimes still start, Auto's choice, and
            // the global one runs loops on its workers, not on the caller.
            let rt = Runtime::new().unwrap();
            assert_eq!(rt.selection().requested, BackendKind::Auto);
            assert!(umt_rt::spawn(umt_rt::current_thread_index).join().is_some());
            let said = said.lock().unwrap();
            assert!(
                said.iter().any(|l| l.contains("UMT_BACKEND=")
                    && l.contains("the monitor is chosen as for auto")),
                "{said:?}"
            );
        }
        other => panic!("unknown case {other}"),
    }
}

fn run(case: &str, vars: &[(&str, &str)]) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "environment_shapes_the_default_runtime",
        "--nocapture",
    ])
    .env("UMT_ENV_CHILD", case)
    .env_remove("UMT_NUM_THREADS")
    .env_remove("RAYON_NUM_THREADS")
    .env_remove("UMT_BACKEND");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{case}: {text}");
    assert!(text.contains("1 passed"), "{case}: {text}");
}

#[test]
fn environment_shapes_the_default_runtime() {
    if let Ok(case) = std::env::var("UMT_ENV_CHILD") {
        child(&case);
        return;
    }
    run(
        "one-thread-off",
        &[("UMT_NUM_THREADS", "1"), ("UMT_BACKEND", "off")],
    );
    run(
        "rayon-var",
        &[("RAYON_NUM_THREADS", "1"), ("UMT_BACKEND", "off")],
    );
    run(
        "unusable",
        &[("UMT_NUM_THREADS", "many"), ("UMT_BACKEND", "fastest")],
    );
    // A valid name of a backend this host lacks (the patched kernel's, most places).
    let lacking = [BackendKind::Kernel, BackendKind::Bpf, BackendKind::Perf]
        .into_iter()
        .find(|&b| umt_sys::Monitor::probe(b).is_err());
    match lacking {
        Some(b) => run("unavailable", &[("UMT_BACKEND", &b.to_string())]),
        None => eprintln!("every backend is available here: the fallback is not tried"),
    }
}
