//! Backend selection on this machine: the Kernel backend is refused cleanly on a stock kernel,
//! Auto falls back and says why.

use umt_sys::{BackendKind, Error, Monitor};

fn kernel_has_umt() -> bool {
    Monitor::probe(BackendKind::Kernel).is_ok()
}

#[test]
fn kernel_backend_on_a_stock_kernel_is_not_available() {
    if kernel_has_umt() {
        eprintln!("skipped: this kernel has UMT");
        return;
    }
    match Monitor::new(BackendKind::Kernel) {
        Err(Error::Unavailable(u)) => {
            assert_eq!(u.backend, BackendKind::Kernel);
            assert!(u.fix.is_some(), "the error must say what to do: {u}");
            let text = Error::Unavailable(u).to_string();
            assert!(text.starts_with("kernel backend unavailable"), "{text}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn auto_explains_every_rejection() {
    let monitor = Monitor::new(BackendKind::Auto).unwrap();
    let sel = monitor.selection();
    assert_eq!(sel.requested, BackendKind::Auto);
    assert_ne!(sel.chosen, BackendKind::Auto);
    let expected_rejections: &[BackendKind] = match sel.chosen {
        BackendKind::Kernel => &[],
        BackendKind::Bpf => &[BackendKind::Kernel],
        BackendKind::Perf => &[BackendKind::Kernel, BackendKind::Bpf],
        _ => &[BackendKind::Kernel, BackendKind::Bpf, BackendKind::Perf],
    };
    let rejected: Vec<_> = sel.rejected.iter().map(|u| u.backend).collect();
    assert_eq!(rejected, expected_rejections);
    let shown = sel.to_string();
    assert!(
        shown.starts_with(&format!("backend: {}", sel.chosen)),
        "{shown}"
    );
    // Each backend's probe agrees with the selection.
    if !kernel_has_umt() {
        assert_ne!(sel.chosen, BackendKind::Kernel);
    }
    let bpf = Monitor::probe(BackendKind::Bpf).is_ok();
    assert_eq!(sel.chosen == BackendKind::Bpf, !kernel_has_umt() && bpf);
    assert_eq!(
        sel.chosen == BackendKind::Perf,
        !kernel_has_umt() && !bpf && Monitor::probe(BackendKind::Perf).is_ok()
    );
}

#[test]
fn disabled_backend_registers_but_reports_nothing() {
    let monitor = Monitor::new(BackendKind::Disabled).unwrap();
    assert!(!monitor.is_active());
    monitor.register_current_thread().unwrap();
    monitor.mute_current_thread().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    monitor.unmute_current_thread().unwrap();
    assert!(monitor.drain().unwrap().is_empty());
    assert!(monitor.ready_counts().iter().all(|&c| c == 0));
    assert!(!monitor.wait(Some(std::time::Duration::ZERO)).unwrap());
    monitor.unregister_current_thread().unwrap();
}

#[test]
fn a_sub_millisecond_wait_still_waits() {
    // epoll counts milliseconds; 100 us must not become a zero timeout (a busy loop for the
    // leader with a short scan period). A lower bound: load can only make it longer.
    let monitor = Monitor::new(BackendKind::Disabled).unwrap();
    let start = std::time::Instant::now();
    assert!(
        !monitor
            .wait(Some(std::time::Duration::from_micros(100)))
            .unwrap()
    );
    assert!(start.elapsed() >= std::time::Duration::from_micros(100));
}

#[test]
fn backend_names_parse() {
    for (text, kind) in [
        ("auto", BackendKind::Auto),
        ("kernel", BackendKind::Kernel),
        ("perf", BackendKind::Perf),
        ("bpf", BackendKind::Bpf),
        ("off", BackendKind::Disabled),
        ("Disabled", BackendKind::Disabled),
    ] {
        assert_eq!(text.parse::<BackendKind>().unwrap(), kind);
    }
    let err = "fast".parse::<BackendKind>().unwrap_err();
    assert!(err.to_string().contains("auto, kernel, bpf, perf or off"));
}

/// Once the monitor is shutting down, every wait on it returns at once, those of the CPU wait sets
/// made before and after alike, and drains still work.
#[test]
fn waits_return_at_once_once_shutting_down() {
    let monitor = Monitor::new(BackendKind::Auto).unwrap();
    let cpu = umt_sys::cpu::process_cpus().unwrap()[0];
    assert!(
        !monitor
            .wait_cpu(cpu, Some(std::time::Duration::ZERO))
            .unwrap()
    );
    monitor.shut_down().unwrap();
    let long = Some(std::time::Duration::from_secs(3600));
    assert!(monitor.wait(long).unwrap());
    assert!(monitor.wait_cpu(cpu, long).unwrap(), "a set made before");
    let last = *umt_sys::cpu::process_cpus().unwrap().last().unwrap();
    assert!(monitor.wait_cpu(last, long).unwrap(), "a set made after");
    monitor.shut_down().unwrap();
    assert!(monitor.wait(long).unwrap());
    assert!(monitor.drain().unwrap().is_empty());
}
