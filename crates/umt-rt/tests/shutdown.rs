//! Dropping a runtime leaves no thread and no descriptor behind, spare workers included.
//! Alone in its binary so nothing else starts threads or opens descriptors meanwhile.

use std::time::Duration;

use umt_rt::{BackendKind, LeaderPolicy, Runtime};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// The thread count once exited threads are gone: `join` returns when the kernel clears the
/// thread's id, a moment before it leaves `/proc/self/task`. A leaked thread never leaves, so
/// the caller's assertion still fails for it (after the 10 s bound).
fn threads_settled(target: usize) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n = threads();
        if n == target || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::yield_now();
    }
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn drop_joins_every_thread_and_closes_every_fd() {
    for (backend, policy) in [
        (BackendKind::Disabled, LeaderPolicy::Idle),
        (BackendKind::Auto, LeaderPolicy::Idle),
        (BackendKind::Auto, LeaderPolicy::Poll),
    ] {
        let (t0, f0) = (threads(), fds());
        {
            let rt = Runtime::builder()
                .monitor(backend)
                .leader_policy(policy)
                .build()
                .unwrap();
            // Blocking tasks make the leader start spare workers (monitor on).
            rt.scope(|s| {
                for i in 0..64 {
                    s.spawn(move |_| {
                        if i % 4 == 0 {
                            std::thread::sleep(Duration::from_millis(2));
                        } else {
                            std::hint::black_box((0..20_000u64).sum::<u64>());
                        }
                    });
                }
            });
            // Detached work still queued at drop is run before the threads exit.
            let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            for _ in 0..100 {
                let done = done.clone();
                drop(rt.spawn(move || {
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }));
            }
            let started = rt.stats().workers.len();
            assert!(threads() >= t0 + started, "{backend}: workers are threads");
            drop(rt);
            assert_eq!(
                done.load(std::sync::atomic::Ordering::SeqCst),
                100,
                "{backend}"
            );
        }
        assert_eq!(threads_settled(t0), t0, "{backend}: threads left behind");
        assert_eq!(fds(), f0, "{backend}: descriptors left open");
    }
}
