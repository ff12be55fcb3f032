//! Stress: no task is lost or run twice, with blocking mixed in, monitor on and off.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use umt_rt::{BackendKind, LeaderPolicy, Runtime, Scope};

const TASKS: usize = 120_000;

mod common;
use common::{assert_blocks_seen, monitored_backend, skip_unmonitored};

#[repr(C, align(4096))]
struct Page([u8; 4096]);

/// A 64 KiB file opened for direct reads (buffered where the filesystem refuses O_DIRECT), in
/// a new directory of its own (removed with the returned guard): no predictable name in the
/// shared temporary directory, where another user could plant a link.
fn data_file() -> (File, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    File::create_new(&path)
        .and_then(|mut f| f.write_all(&[5u8; 1 << 16]))
        .unwrap();
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc_o_direct())
        .open(&path)
        .or_else(|_| File::open(&path))
        .unwrap();
    (f, dir)
}

fn libc_o_direct() -> i32 {
    nix::fcntl::OFlag::O_DIRECT.bits()
}

struct Work<'a> {
    runs: &'a [AtomicU8],
    blocked: &'a AtomicUsize,
    file: &'a File,
}

/// Task `i`: marks itself run; 1 in 97 sleeps, 1 in 89 reads 4 KiB with O_DIRECT, the rest
/// compute; every 1000th spawns its share of the next tasks, so spawning is spread out too.
fn task<'s>(s: &Scope<'s>, w: &'s Work<'s>, i: usize) {
    w.runs[i].fetch_add(1, Ordering::Relaxed);
    if i.is_multiple_of(97) {
        std::thread::sleep(Duration::from_micros(50));
        w.blocked.fetch_add(1, Ordering::Relaxed);
    } else if i.is_multiple_of(89) {
        let mut page = Page([0; 4096]);
        let n = w
            .file
            .read_at(&mut page.0, ((i % 16) * 4096) as u64)
            .unwrap();
        assert_eq!(n, 4096);
        assert!(page.0.iter().all(|&b| b == 5));
        w.blocked.fetch_add(1, Ordering::Relaxed);
    } else {
        std::hint::black_box((0..50u64).fold(i as u64, |a, x| a.wrapping_mul(31) ^ x));
    }
    if i.is_multiple_of(1000) {
        for j in (i + 1)..(i + 1000).min(w.runs.len()) {
            s.spawn(move |s| task(s, w, j));
        }
    }
}

fn run_all(rt: &Runtime) {
    let runs: Vec<AtomicU8> = (0..TASKS).map(|_| AtomicU8::new(0)).collect();
    let blocked = AtomicUsize::new(0);
    let (file, dir) = data_file();
    let w = Work {
        runs: &runs,
        blocked: &blocked,
        file: &file,
    };
    let w = &w;
    rt.scope(|s| {
        for i in (0..TASKS).step_by(1000) {
            s.spawn(move |s| task(s, w, i));
        }
    });
    drop(dir);
    let bad: Vec<(usize, u8)> = runs
        .iter()
        .map(|r| r.load(Ordering::Relaxed))
        .enumerate()
        .filter(|&(_, n)| n != 1)
        .take(10)
        .collect();
    assert!(bad.is_empty(), "tasks not run exactly once: {bad:?}");
    let expected_blocking = (0..TASKS).filter(|i| i % 97 == 0 || i % 89 == 0).count();
    assert_eq!(blocked.load(Ordering::Relaxed), expected_blocking);
    // One job for the scope body plus one per task.
    assert_eq!(rt.stats().tasks_run, TASKS as u64 + 1);
}

#[test]
fn every_task_runs_exactly_once_monitor_off() {
    run_all(
        &Runtime::builder()
            .monitor(BackendKind::Disabled)
            .build()
            .unwrap(),
    );
}

#[test]
fn every_task_runs_exactly_once_monitor_on() {
    let rt = Runtime::builder()
        .monitor(monitored_backend())
        .build()
        .unwrap();
    run_all(&rt);
    if !skip_unmonitored(&rt) {
        assert_blocks_seen(&rt);
    }
}

#[test]
fn every_task_runs_exactly_once_with_polling_leaders() {
    let rt = Runtime::builder()
        .monitor(monitored_backend())
        .leader_policy(LeaderPolicy::Poll)
        .build()
        .unwrap();
    run_all(&rt);
    // The events were seen, by the leaders or by the workers' own drains: under load the
    // SCHED_IDLE leaders hardly run, and the workers' drains are then all there is.
    if !skip_unmonitored(&rt) {
        assert_blocks_seen(&rt);
    }
}

#[test]
fn detached_spawns_under_stress_all_complete() {
    let rt = Runtime::builder()
        .monitor(monitored_backend())
        .build()
        .unwrap();
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..20_000)
        .map(|i| {
            let count = count.clone();
            rt.spawn(move || {
                if i % 500 == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
                count.fetch_add(1, Ordering::Relaxed);
                i
            })
        })
        .collect();
    let sum: usize = handles.into_iter().map(|h| h.join()).sum();
    assert_eq!(sum, (0..20_000).sum::<usize>());
    assert_eq!(count.load(Ordering::Relaxed), 20_000);
}

/// Rings too small for what happens: a task blocks thousands of times on a core that another
/// thread keeps busy, so its leader cannot drain and its one-page ring overflows. The counts
/// are resynchronised from `/proc`, and once every worker sleeps the core counts none ready.
#[test]
fn overflowed_rings_leave_exact_counts() {
    let cpu = *umt_sys::cpu::process_cpus().unwrap().last().unwrap();
    let rt = Runtime::builder()
        .cores([cpu])
        .monitor(monitored_backend())
        .leader_policy(LeaderPolicy::Poll)
        .ring_pages(1)
        .build()
        .unwrap();
    if skip_unmonitored(&rt) || rt.backend() != BackendKind::Perf {
        eprintln!("skipped: rings are the perf backend's");
        return;
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        // Keeps the core busy while the task blocks: the leader runs only when it idles.
        s.spawn(|| {
            umt_sys::cpu::pin_current_thread(cpu).unwrap();
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        // 3000 blocks, no scheduling point: 6000 records against a ring of 128.
        rt.install(|| {
            for _ in 0..3000 {
                std::thread::sleep(Duration::from_micros(1));
            }
        });
        stop.store(true, Ordering::Relaxed);
    });
    // Every worker sleeps in the pool now, and the core idles: its leader drains the full
    // ring, resynchronises the task's worker from `/proc`, and finds the core with none ready.
    // The kernel reports the records it dropped (a LOST record) only before the next record
    // that fits, once the ring has room: if the worker made none since, a task makes it
    // switch once more (found flaky in CI: an overflow counted, no loss reported yet).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let st = rt.stats();
        if st.cores[0].ready_workers == 0 && st.monitor.overflows > 0 && st.monitor.lost_records > 0
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{st:#?}");
        if st.monitor.overflows > 0 && st.monitor.lost_records == 0 {
            rt.install(|| std::thread::sleep(Duration::from_micros(1)));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let st = rt.stats();
    assert_eq!(st.cores[0].active_workers, 0, "{st:#?}");
    assert!(
        st.monitor.resyncs >= st.monitor.overflows,
        "{:?}",
        st.monitor
    );
    assert!(st.monitor.lost_records > 0, "{:?}", st.monitor);
}
