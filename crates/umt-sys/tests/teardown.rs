//! Teardown closes every descriptor the monitor opened. Alone in its binary so no other test
//! opens or closes descriptors while it counts.

use umt_sys::{BackendKind, Monitor};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn dropping_a_monitor_closes_every_fd() {
    for backend in [BackendKind::Auto, BackendKind::Perf, BackendKind::Disabled] {
        let before = open_fds();
        {
            let monitor = match Monitor::new(backend) {
                Ok(m) => m,
                // Where perf events are denied, the explicit Perf request fails (Auto falls
                // back). Only a run that requires the perf backend treats that as a failure.
                Err(e) if std::env::var("UMT_REQUIRE_MONITOR").is_ok_and(|b| b == "perf") => {
                    panic!("UMT_REQUIRE_MONITOR=perf, but: {e}")
                }
                Err(e) => {
                    eprintln!("skipped {backend}: {e}");
                    continue;
                }
            };
            std::thread::scope(|s| {
                for _ in 0..3 {
                    s.spawn(|| {
                        monitor.register_current_thread().unwrap();
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        monitor.unregister_current_thread().unwrap();
                    });
                }
                // One thread stays registered until the monitor is dropped.
                monitor.register_current_thread().unwrap();
            });
            monitor.drain().unwrap();
            if backend != BackendKind::Disabled {
                assert!(
                    open_fds() > before,
                    "{backend}: the monitor holds descriptors"
                );
            }
        }
        assert_eq!(open_fds(), before, "{backend}: descriptors leaked");
    }
}
