//! The Kernel backend against a kernel with the UMT patch (`cargo xtask vm test` runs these
//! inside the patched guest with `UMT_TEST_BACKEND=kernel`, which makes them mandatory). On a
//! stock kernel they skip.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use umt_sys::{BackendKind, CpuId, Error, Monitor, cpu};

/// The Kernel monitor, or `None` (skip) when this kernel has no UMT and it was not forced
/// (`UMT_TEST_BACKEND=kernel` or `UMT_REQUIRE_MONITOR=kernel`).
fn kernel_monitor() -> Option<Monitor> {
    let forced = ["UMT_TEST_BACKEND", "UMT_REQUIRE_MONITOR"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|b| b == "kernel"));
    match Monitor::new(BackendKind::Kernel) {
        Ok(m) => Some(m),
        Err(e) if forced => panic!("UMT_TEST_BACKEND=kernel but: {e}"),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// How many of this process's descriptors are UMT files (`[umt]`) and CPU files
/// (`[umt-cpu]`).
fn umt_descriptors() -> (usize, usize) {
    let (mut umt, mut cpu) = (0, 0);
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        match std::fs::read_link(entry.path()) {
            Ok(target) if target.as_os_str() == "anon_inode:[umt]" => umt += 1,
            Ok(target) if target.as_os_str() == "anon_inode:[umt-cpu]" => cpu += 1,
            _ => {}
        }
    }
    (umt, cpu)
}

/// Drains until `done` holds; `false` after 20 s.
fn wait_for(m: &Monitor, done: impl Fn(&Monitor) -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        m.drain().unwrap();
        if done(m) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        m.wait(Some(Duration::from_millis(10))).unwrap();
    }
}

fn last_cpu() -> CpuId {
    *cpu::process_cpus().unwrap().last().unwrap()
}

// One test function: UMT is enabled once per process, so the steps share one Monitor at a
// time and must not run in parallel.
#[test]
fn kernel_backend_end_to_end() {
    let Some(monitor) = kernel_monitor() else {
        return;
    };
    assert_eq!(monitor.backend(), BackendKind::Kernel);
    let target = last_cpu();
    // One UMT file; CPU files are opened as they are needed, none yet.
    assert_eq!(umt_descriptors(), (1, 0));

    // 1. A blocked reader is seen while it sleeps, and counted ready again afterwards.
    let (mut rx, mut tx) = std::io::pipe().unwrap();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            cpu::pin_current_thread(target).unwrap();
            monitor.register_current_thread().unwrap();
            let mut b = [0u8; 1];
            rx.read_exact(&mut b).unwrap();
            monitor.unregister_current_thread().unwrap();
        });
        // The reader's monitor-unblock and its block may come in one read of its CPU file,
        // so wait for the block itself, with the core's count back at 0.
        let seen = wait_for(&monitor, |m| m.stats().blocks >= 1 && m.ready(target) == 0);
        tx.write_all(b"x").unwrap();
        // The reader's unblock is an event of its core: that core's wait set wakes.
        let woke = monitor
            .wait_cpu(target, Some(Duration::from_secs(10)))
            .unwrap();
        reader.join().unwrap();
        assert!(woke, "the wait set of CPU {target} missed the unblock");
        assert!(
            seen,
            "the reader's block never showed: {:?}",
            monitor.stats()
        );
    });
    monitor.drain().unwrap();
    assert!(
        monitor.ready_counts().iter().all(|&r| r == 0),
        "{:?}",
        monitor.ready_counts()
    );
    let stats = monitor.stats();
    assert!(
        stats.blocks >= 2 && stats.blocks == stats.unblocks,
        "{stats:?}"
    );
    // Only the reader's CPU, where it was pinned when it registered, has a file: the
    // whole-monitor waits and drains and the wait on that CPU share it.
    assert_eq!(umt_descriptors(), (1, 1), "CPU files for CPU {target} only");

    // 2. Registration errors come from user space, before the kernel is asked.
    monitor.register_current_thread().unwrap();
    assert!(matches!(
        monitor.register_current_thread(),
        Err(Error::AlreadyRegistered { .. })
    ));
    monitor.unregister_current_thread().unwrap();
    assert!(matches!(
        monitor.unregister_current_thread(),
        Err(Error::NotRegistered { .. })
    ));

    // 3. Busy threads that never block leave the count alone.
    std::thread::scope(|s| {
        s.spawn(|| {
            cpu::pin_current_thread(target).unwrap();
            monitor.register_current_thread().unwrap();
            let mut x = 0u64;
            for _ in 0..20_000_000u32 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
            monitor.drain().unwrap();
            assert_eq!(monitor.ready(target), 1);
            // Muting changes nothing here: the kernel never reports preemptions.
            monitor.mute_current_thread().unwrap();
            std::thread::yield_now();
            monitor.unmute_current_thread().unwrap();
            monitor.drain().unwrap();
            assert_eq!(monitor.ready(target), 1);
            std::thread::sleep(Duration::from_millis(2));
            if monitor.counts_are_live() {
                // Idle-only: the count is live, and the file is left to the core's waiter.
                assert_eq!(monitor.drain_current_thread().unwrap(), 0);
            } else {
                // A block drained by the thread itself, from its core's file.
                assert!(monitor.drain_current_thread().unwrap() >= 1);
            }
            assert_eq!(monitor.ready(target), 1);
            monitor.unregister_current_thread().unwrap();
        });
    });

    // 4. Idle-only: a waiter is signalled only while it sleeps (steps K2, K3).
    if monitor.counts_are_live() {
        only_a_sleeping_waiter_is_signalled(&monitor, target);
    }

    // 5. Dropping the monitor disables UMT (closing its files would not), so a new one can be
    // made, and closes every file.
    drop(monitor);
    assert_eq!(umt_descriptors(), (0, 0));
    let again = Monitor::new(BackendKind::Kernel).expect("UMT can be enabled again after drop");
    again.register_current_thread().unwrap();
    again.unregister_current_thread().unwrap();

    // 6. While it is alive, a second monitor finds UMT busy, and says so at once...
    assert!(matches!(
        Monitor::new(BackendKind::Kernel),
        Err(Error::KernelBusy)
    ));
    // ...unless the first is shutting down: then the second waits for it to go.
    again.shut_down().unwrap();
    let third = std::thread::scope(|s| {
        let opener = s.spawn(|| Monitor::new(BackendKind::Kernel));
        std::thread::sleep(Duration::from_millis(50));
        drop(again);
        opener.join().unwrap()
    });
    assert_eq!(
        third.expect("opened once the first was gone").backend(),
        BackendKind::Kernel
    );
}

/// Step 4 of the end-to-end test: the drops of a core whose waiter is awake wake nobody; the
/// waiter finds them in the counters, and a drop while it sleeps wakes it.
fn only_a_sleeping_waiter_is_signalled(monitor: &Monitor, target: CpuId) {
    // A 1 ms sleep does not switch out when its timer fires before the thread reaches
    // schedule() (CI's emulated guest): each nap sleeps until the page counted a block. Not
    // until a voluntary switch: on PREEMPT_RT the wait for a sleeping spinlock (reading
    // /proc, under a loaded host) is one, and UMT does not report it.
    let nap = || {
        let before = monitor.stats().blocks;
        let deadline = Instant::now() + Duration::from_secs(20);
        while monitor.stats().blocks == before {
            assert!(Instant::now() < deadline, "a 1 ms sleep never blocked");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    assert_eq!(monitor.ready(target), 0);
    // The waiter looks at the drops (K3); it reads the file only when it next waits (K2).
    monitor.drain_cpu(target).unwrap();
    let before = monitor.stats();
    std::thread::scope(|s| {
        s.spawn(|| {
            cpu::pin_current_thread(target).unwrap();
            monitor.register_current_thread().unwrap();
            for _ in 0..10 {
                nap();
            }
            monitor.unregister_current_thread().unwrap();
        });
    });
    // Ten naps (each at least one block) and the unregistration: eleven drops or more, while
    // nobody waited. The file was last read long ago (or never), so at most the first found
    // it empty.
    let awake = monitor.stats();
    let dropped = awake.drops - before.drops;
    assert!(dropped >= 11, "{before:?} -> {awake:?}");
    assert!(
        awake.wakeups - before.wakeups <= 1,
        "{before:?} -> {awake:?}"
    );
    // The waiter sees them without sleeping, and without a new signal.
    assert!(monitor.wait_cpu(target, Some(Duration::ZERO)).unwrap());
    assert_eq!(monitor.drain_cpu(target).unwrap() as u64, dropped);
    assert_eq!(monitor.stats().wakeups, awake.wakeups);
    // Nothing new: the wait reads the file (asking for the next signal) and times out.
    assert!(
        !monitor
            .wait_cpu(target, Some(Duration::from_millis(1)))
            .unwrap()
    );
    // A drop while it sleeps wakes it: exactly one signal. The drop must come after the
    // wait's read of the file (K2): one that races the read is signalled, then consumed by
    // the read, which leaves the file armed for the next drop (two signals, as the README's
    // first race says). So the thread blocks only once the waiter sleeps interruptibly
    // after it said it would wait, which it does only in the wait's sleep (a lock's wait on
    // PREEMPT_RT reads `D`, the page faults of the read too).
    let waiter = cpu::current_tid();
    let waiting = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            cpu::pin_current_thread(target).unwrap();
            // Not registered yet: these naps are nobody's drops.
            let deadline = Instant::now() + Duration::from_secs(20);
            while !(waiting.load(std::sync::atomic::Ordering::SeqCst) && sleeping(waiter)) {
                assert!(Instant::now() < deadline, "the waiter never slept");
                std::thread::sleep(Duration::from_millis(1));
            }
            monitor.register_current_thread().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            monitor.unregister_current_thread().unwrap();
        });
        waiting.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(
            monitor
                .wait_cpu(target, Some(Duration::from_secs(10)))
                .unwrap(),
            "the sleeping waiter missed the drop"
        );
    });
    let asleep = monitor.stats();
    assert_eq!(asleep.wakeups - awake.wakeups, 1, "{awake:?} -> {asleep:?}");
    assert!(monitor.drain_cpu(target).unwrap() >= 1);
}

/// Whether thread `tid` of this process sleeps interruptibly (state `S` in its `stat`).
fn sleeping(tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, after_name) = stat.rsplit_once(") ")?;
            after_name
                .split_whitespace()
                .next()
                .map(|state| state == "S")
        })
        .unwrap_or(false)
}
