//! A thread that exits while registered leaves its id to the kernel, which may give it to a
//! new thread before the monitor has seen the exit. The new thread is not the old one: it is
//! not registered, it registers as itself, and what the old one counted is gone (issue 30).
//!
//! Getting an id back on purpose takes `/proc/sys/kernel/ns_last_pid` (root): elsewhere these
//! tests skip, saying why.

use umt_sys::{BackendKind, CpuId, Monitor, cpu};

/// Asks the kernel to hand out `tid` to the next task it creates (when no one takes it
/// first); `false` without the privilege.
fn next_id_is(tid: i32) -> bool {
    std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", tid - 1)).is_ok()
}

/// The checks on one backend; the thread that gets the old id does them.
fn reuse(kind: BackendKind) {
    let m = match Monitor::new(kind) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("skipped {kind}: {e}");
            return;
        }
    };
    let c: CpuId = *cpu::process_cpus().unwrap().last().unwrap();
    // The old thread: registered on `c`, then gone without unregistering.
    let old = std::thread::scope(|s| {
        s.spawn(|| {
            cpu::pin_current_thread(c).unwrap();
            m.register_current_thread().unwrap();
            cpu::current_tid()
        })
        .join()
        .unwrap()
    });
    for _ in 0..50 {
        if !next_id_is(old) {
            eprintln!("skipped {kind}: cannot write /proc/sys/kernel/ns_last_pid (needs root)");
            return;
        }
        let checked = std::thread::scope(|s| {
            s.spawn(|| {
                if cpu::current_tid() != old {
                    return false; // another task took the id first: try again
                }
                cpu::pin_current_thread(c).unwrap();
                assert!(
                    !m.is_current_thread_registered(),
                    "{kind}: a new thread taken for the exited one that had its id"
                );
                m.register_current_thread()
                    .unwrap_or_else(|e| panic!("{kind}: registering a reused id: {e}"));
                assert!(m.is_current_thread_registered());
                assert_eq!(m.stats().registered, 1, "{kind}: {:?}", m.stats());
                m.settle_cpu(c).unwrap();
                assert_eq!(
                    m.ready(c),
                    1,
                    "{kind}: only the new thread counts on CPU {c}: {:?}",
                    m.ready_counts()
                );
                m.unregister_current_thread().unwrap();
                assert!(!m.is_current_thread_registered());
                true
            })
            .join()
            .unwrap()
        });
        if checked {
            m.drain().unwrap();
            assert!(
                m.ready_counts().iter().all(|&r| r == 0),
                "{kind}: {:?}",
                m.ready_counts()
            );
            assert_eq!(m.stats().registered, 0, "{kind}: {:?}", m.stats());
            return;
        }
    }
    eprintln!("skipped {kind}: other tasks kept taking thread id {old}");
}

/// One backend at a time: they share `ns_last_pid`.
#[test]
fn a_reused_thread_id_registers_as_a_new_thread() {
    for kind in [BackendKind::Perf, BackendKind::Bpf, BackendKind::Kernel] {
        reuse(kind);
    }
}
