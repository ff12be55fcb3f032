//! The Bpf backend's directed handoff against the real kernel (`monitor/README.md`, "Directed
//! handoff", P1–P4): when a registered thread that blocked inside a task is woken onto a CPU
//! where another registered thread runs a task, that one, and only that one, gets the signal;
//! threads outside a task neither send nor get one; without the request, or on another
//! backend, the monitor says so.
//!
//! They need the Bpf backend (root, clang at build time) and Linux 6.13 or later (the
//! `bpf_send_signal_task` kfunc): elsewhere they skip, saying why, unless
//! `UMT_REQUIRE_MONITOR=bpf`, which makes a missing backend a failure.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use umt_sys::{
    BackendKind, HANDOFF_ENABLED, HANDOFF_IN_TASK, HANDOFF_SIGNAL_VALUE, Handoff, Monitor,
    MonitorBuilder, cpu,
};

/// One test at a time: the signal's handler is the process's.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The thread the signal should reach, and what reached whom.
static TARGET: AtomicI32 = AtomicI32::new(0);
static TO_TARGET: AtomicU64 = AtomicU64::new(0);
static TO_OTHERS: AtomicU64 = AtomicU64::new(0);
/// Signals whose `siginfo` was not the monitor's (`SI_KERNEL` with its value).
static NOT_TAGGED: AtomicU64 = AtomicU64::new(0);
static LAST_CODE: AtomicI32 = AtomicI32::new(0);
static LAST_VALUE: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; si_value is read
    // as the union it is (its pointer member, as the value was written).
    let (code, value) = unsafe {
        (
            (*info).si_code,
            (*info).si_value().sival_ptr as usize as u64,
        )
    };
    LAST_CODE.store(code, Ordering::Relaxed);
    LAST_VALUE.store(value, Ordering::Relaxed);
    if code != libc::SI_KERNEL || value != u64::from(HANDOFF_SIGNAL_VALUE) {
        NOT_TAGGED.fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    let me = unsafe { libc::gettid() };
    if me == TARGET.load(Ordering::Relaxed) {
        TO_TARGET.fetch_add(1, Ordering::Relaxed);
    } else {
        TO_OTHERS.fetch_add(1, Ordering::Relaxed);
    }
}

fn install() {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let action = SigAction::new(
        SigHandler::SigAction(on_signal),
        SaFlags::SA_SIGINFO | SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    // SAFETY: the handler only calls gettid and touches atomics.
    unsafe { sigaction(Signal::SIGURG, &action) }.expect("sigaction");
}

/// A Bpf monitor with the directed handoff, and this file's handler for its signal; or `None`
/// (the test skips, saying why).
fn handoff_monitor() -> Option<Monitor> {
    let built = MonitorBuilder::default()
        .backend(BackendKind::Bpf)
        .directed_handoff(libc::SIGURG)
        .build();
    let m = match built {
        Ok(m) => m,
        Err(e) if std::env::var("UMT_REQUIRE_MONITOR").is_ok_and(|b| b == "bpf") => {
            panic!("UMT_REQUIRE_MONITOR=bpf, but: {e}")
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            return None;
        }
    };
    match m.handoff() {
        Handoff::Active { signal } => {
            assert_eq!(signal, libc::SIGURG);
            install();
            Some(m)
        }
        other => {
            eprintln!("skipped: the directed handoff does not run here: {other:?}");
            None
        }
    }
}

/// Two registered threads on one CPU: one spins with `spinner_flags`, the other sleeps
/// `rounds` times with `sleeper_flags`. Returns the signals that reached the spinner, those
/// that reached anybody else, and the monitor's count of signals sent.
fn sleeper_beside_spinner(
    m: &Monitor,
    spinner_flags: u32,
    sleeper_flags: u32,
    rounds: usize,
) -> (u64, u64, u64) {
    let target_cpu = *cpu::process_cpus().unwrap().last().unwrap();
    TO_TARGET.store(0, Ordering::SeqCst);
    TO_OTHERS.store(0, Ordering::SeqCst);
    let sent_before = m.stats().handoff_signals;
    let stop = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            cpu::pin_current_thread(target_cpu).unwrap();
            TARGET.store(cpu::current_tid(), Ordering::SeqCst);
            m.register_current_thread().unwrap();
            let flags = m.handoff_flags().expect("registered, with the handoff");
            m.set_handoff_flags(flags, spinner_flags);
            started.store(true, Ordering::SeqCst);
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
            m.set_handoff_flags(flags, 0);
            m.unregister_current_thread().unwrap();
        });
        s.spawn(|| {
            cpu::pin_current_thread(target_cpu).unwrap();
            m.register_current_thread().unwrap();
            let flags = m.handoff_flags().expect("registered, with the handoff");
            m.set_handoff_flags(flags, sleeper_flags);
            while !started.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            for _ in 0..rounds {
                std::thread::sleep(Duration::from_micros(300));
            }
            stop.store(true, Ordering::SeqCst);
            m.unregister_current_thread().unwrap();
        });
    });
    (
        TO_TARGET.load(Ordering::SeqCst),
        TO_OTHERS.load(Ordering::SeqCst),
        m.stats().handoff_signals - sent_before,
    )
}

/// P4: each time the sleeper (in a task) is woken while the spinner (in a task) runs on its
/// CPU, the spinner gets the signal; nobody else ever does. Signals coalesce while one is
/// pending, so the spinner gets at most as many as were sent. On a busy machine another
/// program may hold the CPU at a wake-up (no signal that round): hence "at least one" over
/// many rounds.
#[test]
fn a_return_from_a_block_signals_the_thread_running_a_task_on_that_cpu() {
    let _serial = serial();
    let Some(m) = handoff_monitor() else {
        return;
    };
    let both = HANDOFF_ENABLED | HANDOFF_IN_TASK;
    let (to_spinner, to_others, sent) = sleeper_beside_spinner(&m, both, both, 100);
    assert!(to_spinner > 0, "sent {sent}, received {to_spinner}");
    assert!(to_spinner <= sent, "sent {sent}, received {to_spinner}");
    assert_eq!(to_others, 0, "sent {sent}");
    assert_eq!(
        NOT_TAGGED.load(Ordering::SeqCst),
        0,
        "the last one had si_code {} and value {:#x}",
        LAST_CODE.load(Ordering::SeqCst),
        LAST_VALUE.load(Ordering::SeqCst)
    );
}

/// P4's conditions: a sleeper outside a task sends nothing (a wake-up from a park between
/// tasks takes no core from anybody), and a spinner outside a task, or not taking part, gets
/// nothing.
#[test]
fn threads_outside_a_task_neither_send_nor_get_a_signal() {
    let _serial = serial();
    let Some(m) = handoff_monitor() else {
        return;
    };
    let both = HANDOFF_ENABLED | HANDOFF_IN_TASK;
    for (spinner, sleeper) in [
        (both, HANDOFF_ENABLED),
        (HANDOFF_ENABLED, both),
        (HANDOFF_IN_TASK, both),
        (0, both),
    ] {
        let got = sleeper_beside_spinner(&m, spinner, sleeper, 30);
        assert_eq!(
            got,
            (0, 0, 0),
            "spinner flags {spinner}, sleeper flags {sleeper}"
        );
    }
}

/// P1: not asked for, the handoff is off and no thread has flags; asked of a backend that
/// cannot run it, the monitor opens without it and says why.
#[test]
fn without_the_request_or_the_bpf_backend_the_handoff_is_off_and_says_why() {
    let _serial = serial();
    if let Ok(m) = Monitor::new(BackendKind::Bpf) {
        assert_eq!(m.handoff(), Handoff::Off);
        m.register_current_thread().unwrap();
        assert_eq!(m.handoff_flags(), None);
        m.unregister_current_thread().unwrap();
    }
    let m = MonitorBuilder::default()
        .backend(BackendKind::Disabled)
        .directed_handoff(libc::SIGURG)
        .build()
        .unwrap();
    match m.handoff() {
        Handoff::Unavailable(why) => assert!(why.contains("Bpf"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(m.handoff_flags(), None);
    assert_eq!(
        MonitorBuilder::default()
            .backend(BackendKind::Disabled)
            .build()
            .unwrap()
            .handoff(),
        Handoff::Off
    );
}
