//! Directed handoff (`Builder::handoff` where the monitor signals, steps H1–H6 of
//! `README.md`, "Directed handoff"): a worker running a task steps aside, mid-task, for a
//! worker of its core that blocked inside a task and was just woken, and resumes once the core
//! is free again. This file holds the per-core state of the workers that stepped aside, the
//! park and the resume (both lock-free and async-signal-safe: the park runs in a signal
//! handler, which may have interrupted its thread anywhere), and the signal's installation.
//! The handler itself is the worker's (`worker.rs`): it knows which worker the thread is.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// How long a worker that stepped aside waits at most before it runs again whatever its core
/// does (H5): the kernel then shares the core between it and the returned worker, as without
/// the handoff. Bounds what a resume that never comes costs: a returned worker that spins on
/// a lock the parked one holds, without ever blocking, would otherwise wait forever.
pub(crate) const STEP_ASIDE_LIMIT: Duration = Duration::from_millis(4);

/// The signal the monitor sends a worker to step aside: `SIGURG`, as Go's runtime uses for its
/// asynchronous preemption, because programs rarely handle it and its default action is to
/// ignore it (a signal that arrives after the handler is gone does nothing).
pub(crate) const HANDOFF_SIGNAL: i32 = libc::SIGURG;

/// A worker's handoff word: it runs, or it stepped aside and waits to be resumed.
const RUNNING: u32 = 0;
const STEPPED_ASIDE: u32 = 1;

/// The directed handoff's state: per worker slot its word, per core how many of its workers
/// stepped aside and the counters for `Stats`.
#[derive(Debug)]
pub(crate) struct Handoffs {
    /// Whether the handoff is directed (the monitor signals; `Config::handoff_signal`).
    directed: bool,
    /// Per slot: `RUNNING` or `STEPPED_ASIDE`; the futex a stepped-aside worker waits on.
    words: Box<[AtomicU32]>,
    /// Slots per core (the cap): slot `i` belongs to core `i / cap`.
    cap: usize,
    /// Per core: its workers that stepped aside and were not resumed yet.
    aside: Box<[CachePadded<AtomicUsize>]>,
    /// Times a worker stepped aside (H3).
    pub(crate) parks: AtomicU64,
    /// Times a worker ran again because its wait reached [`STEP_ASIDE_LIMIT`] (H5).
    pub(crate) expired: AtomicU64,
    /// Times a leader resumed a worker because its core had no ready worker (H6).
    pub(crate) leader_resumes: AtomicU64,
}

impl Handoffs {
    /// No worker stepped aside.
    pub(crate) fn new(cores: usize, cap: usize, directed: bool) -> Handoffs {
        Handoffs {
            directed,
            words: (0..cores * cap).map(|_| AtomicU32::new(RUNNING)).collect(),
            cap,
            aside: (0..cores)
                .map(|_| CachePadded::new(AtomicUsize::new(0)))
                .collect(),
            parks: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            leader_resumes: AtomicU64::new(0),
        }
    }

    /// Whether the handoff is directed (the monitor signals a worker to step aside).
    #[inline]
    pub(crate) fn directed(&self) -> bool {
        self.directed
    }

    /// Workers of `core` that stepped aside and wait (one load).
    #[inline]
    pub(crate) fn aside(&self, core: usize) -> usize {
        self.aside
            .get(core)
            .map_or(0, |a| a.load(Ordering::Acquire))
    }

    /// H3–H5, run by worker `slot` of `core` in its signal handler: steps aside until resumed
    /// (H4) or until [`STEP_ASIDE_LIMIT`] passes (H5). Only atomics and futex calls: nothing
    /// here takes a lock or allocates.
    pub(crate) fn step_aside(&self, core: usize, slot: usize) {
        if !self.enter(core, slot) {
            return;
        }
        let word = &self.words[slot];
        let deadline = std::time::Instant::now() + STEP_ASIDE_LIMIT;
        while word.load(Ordering::Acquire) == STEPPED_ASIDE {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                self.expire(core, slot);
                break;
            }
            futex_wait(word, STEPPED_ASIDE, left);
        }
    }

    /// H3: worker `slot` of `core` steps aside: counted in the core's `aside` first, then its
    /// word, so the count never falls below the words a resumer can find (a resumer that
    /// sees the count before the word looks in vain, and looks again later). Returns `false`
    /// (and changes nothing) for an unknown slot or core, or a worker already aside.
    pub(crate) fn enter(&self, core: usize, slot: usize) -> bool {
        let (Some(word), Some(aside)) = (self.words.get(slot), self.aside.get(core)) else {
            return false;
        };
        aside.fetch_add(1, Ordering::AcqRel);
        if word
            .compare_exchange(RUNNING, STEPPED_ASIDE, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            aside.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        self.parks.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// H5: worker `slot` of `core` resumes itself at the limit, unless a resumer got there
    /// first (it then counted the core's `aside` down, and its wake-up finds nobody
    /// waiting). Returns whether this ended the step aside.
    pub(crate) fn expire(&self, core: usize, slot: usize) -> bool {
        let (Some(word), Some(aside)) = (self.words.get(slot), self.aside.get(core)) else {
            return false;
        };
        if word
            .compare_exchange(STEPPED_ASIDE, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        aside.fetch_sub(1, Ordering::AcqRel);
        self.expired.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Whether worker `slot` is aside now.
    #[cfg(all(test, loom))]
    fn is_aside(&self, slot: usize) -> bool {
        self.words[slot].load(Ordering::Acquire) == STEPPED_ASIDE
    }

    /// H6: resumes one worker of `core` that stepped aside; returns whether there was one.
    /// Lock-free, so the leader can call it before anything else it does (a worker may have
    /// stepped aside holding a lock the leader would take).
    pub(crate) fn resume_one(&self, core: usize) -> bool {
        if self.aside(core) == 0 {
            return false;
        }
        let first = core * self.cap;
        for word in self.words.iter().skip(first).take(self.cap) {
            if word
                .compare_exchange(STEPPED_ASIDE, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.aside[core].fetch_sub(1, Ordering::AcqRel);
                futex_wake(word);
                return true;
            }
        }
        false
    }

    /// Resumes every worker that stepped aside (shutdown).
    pub(crate) fn resume_all(&self) {
        for core in 0..self.aside.len() {
            while self.resume_one(core) {}
        }
    }
}

/// Waits while `word` holds `expected`, `timeout` at most (or until a signal).
#[cfg(all(target_os = "linux", not(loom)))]
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = rustix::thread::futex::Timespec {
        tv_sec: timeout.as_secs().try_into().unwrap_or(i64::MAX),
        tv_nsec: timeout.subsec_nanos().into(),
    };
    // EAGAIN (the word changed), ETIMEDOUT, EINTR: the caller looks at the word again.
    let _ = rustix::thread::futex::wait(
        word,
        rustix::thread::futex::Flags::PRIVATE,
        expected,
        Some(&ts),
    );
}

/// Wakes the thread waiting on `word`.
#[cfg(all(target_os = "linux", not(loom)))]
fn futex_wake(word: &AtomicU32) {
    let _ = rustix::thread::futex::wake(word, rustix::thread::futex::Flags::PRIVATE, 1);
}

/// Elsewhere the monitor never signals (only the Bpf backend on Linux does): nobody steps
/// aside, so nobody waits.
#[cfg(all(not(target_os = "linux"), not(loom)))]
fn futex_wait(_word: &AtomicU32, _expected: u32, timeout: Duration) {
    std::thread::sleep(timeout);
}

/// Elsewhere, and under loom (where the models drive the words themselves, `loom_tests`),
/// nobody sleeps on a word: nothing to wake.
#[cfg(any(not(target_os = "linux"), loom))]
fn futex_wake(_word: &AtomicU32) {}

#[cfg(loom)]
fn futex_wait(_word: &AtomicU32, _expected: u32, _timeout: Duration) {
    crate::sync::yield_now();
}

/// The handler's type: `SA_SIGINFO`, so that it can tell the monitor's signal (its value)
/// from the same signal sent by anybody else.
pub(crate) type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Whether `info` is the monitor's handoff signal: sent by the kernel (`SI_KERNEL`) with the
/// monitor's value, not by `kill` (`SI_USER`), `sigqueue` (`SI_QUEUE`) or a socket's
/// out-of-band data (`SI_KERNEL` without the value). Async-signal-safe.
#[cfg(target_os = "linux")]
pub(crate) fn from_monitor(info: *const libc::siginfo_t) -> bool {
    // SAFETY: the kernel passes a valid `siginfo_t` to an `SA_SIGINFO` handler; a null one
    // (never passed) is refused. `si_value` is read only for `SI_KERNEL`, whose sender (the
    // BPF kfunc) fills it.
    unsafe {
        let Some(info) = info.as_ref() else {
            return false;
        };
        info.si_code == libc::SI_KERNEL
            && info.si_value().sival_ptr as usize as u64 == u64::from(umt_sys::HANDOFF_SIGNAL_VALUE)
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn from_monitor(_info: *const libc::siginfo_t) -> bool {
    false
}

/// Installs `handler` for `signal` (H1); later runtimes find it installed and share it (it
/// finds the worker it interrupts through the thread, whatever its runtime). Refuses, with
/// the reason, where the program handles `signal` itself: its handler is left alone. Each
/// call looks at the current action, so a program that installed its own handler after an
/// earlier runtime keeps it. Installed, it stays for the process's life: a program that
/// installs its own handler later replaces it, and the handoff then signals that handler
/// (this signal's value says which ones are the monitor's, [`umt_sys::HANDOFF_SIGNAL_VALUE`]).
#[cfg(target_os = "linux")]
pub(crate) fn install(signal: i32, handler: Handler) -> Result<(), String> {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    // Two runtimes built at once install it once.
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _installing = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    let sig = Signal::try_from(signal).map_err(|e| format!("signal {signal}: {e}"))?;
    // SAFETY: `sigaction` is plain data, for which all zeroes is a valid value.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one into `current`, a valid, writable
    // `sigaction`.
    if unsafe { libc::sigaction(signal, std::ptr::null(), &mut current) } != 0 {
        return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
    }
    if current.sa_sigaction == handler as usize {
        return Ok(());
    }
    let action = SigAction::new(
        SigHandler::SigAction(handler),
        // Restart the system calls it interrupts; on the alternate stack if the thread has
        // one (a worker interrupted near the end of its stack).
        SaFlags::SA_SIGINFO | SaFlags::SA_RESTART | SaFlags::SA_ONSTACK,
        SigSet::empty(),
    );
    // SAFETY: `handler` is async-signal-safe (it loads a thread-local pointer and calls
    // `Handoffs::step_aside`: atomics and futex calls), and replaces only the default action:
    // the previous one is checked below and put back if it was the program's own.
    let previous = unsafe { sigaction(sig, &action) }.map_err(|e| format!("sigaction: {e}"))?;
    if !matches!(previous.handler(), SigHandler::SigDfl | SigHandler::SigIgn) {
        // SAFETY: puts back exactly what the program had installed.
        let _ = unsafe { sigaction(sig, &previous) };
        return Err(format!(
            "the program handles {sig} itself; the directed handoff needs that signal"
        ));
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn install(_signal: i32, _handler: Handler) -> Result<(), String> {
    Err("the directed handoff runs only on Linux".into())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_resume_ends_a_step_aside_and_counts_balance() {
        let h = std::sync::Arc::new(Handoffs::new(2, 3, true));
        assert!(!h.resume_one(1), "nobody aside");
        let parked = {
            let h = h.clone();
            std::thread::spawn(move || h.step_aside(1, 4))
        };
        // Until it stepped aside (counted at once), or already ran out its limit.
        while h.parks.load(Ordering::Acquire) == 0 && !parked.is_finished() {
            std::thread::yield_now();
        }
        assert_eq!(h.aside(0), 0);
        assert!(!h.resume_one(0), "core 0 has nobody aside");
        // On a busy machine the limit may come first: exactly one of the two ends the wait.
        let resumed = h.resume_one(1);
        parked.join().unwrap();
        assert_eq!(h.aside(1), 0);
        assert_eq!(h.parks.load(Ordering::Relaxed), 1);
        assert_eq!(u64::from(resumed) + h.expired.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_step_aside_nobody_resumes_ends_at_the_limit() {
        let h = Handoffs::new(1, 1, true);
        h.step_aside(0, 0);
        assert_eq!(h.aside(0), 0);
        assert_eq!(h.expired.load(Ordering::Relaxed), 1);
        assert!(!h.resume_one(0));
    }

    #[test]
    fn resume_all_leaves_nobody_aside() {
        let h = std::sync::Arc::new(Handoffs::new(2, 2, true));
        let parked: Vec<_> = [(0, 0), (0, 1), (1, 3)]
            .into_iter()
            .map(|(core, slot)| {
                let h = h.clone();
                std::thread::spawn(move || h.step_aside(core, slot))
            })
            .collect();
        while h.parks.load(Ordering::Acquire) < 3 && parked.iter().any(|p| !p.is_finished()) {
            std::thread::yield_now();
        }
        h.resume_all();
        for p in parked {
            p.join().unwrap();
        }
        assert_eq!((h.aside(0), h.aside(1)), (0, 0));
        assert_eq!(h.parks.load(Ordering::Relaxed), 3);
    }
}

/// The step-aside handshake under loom: a resume and the limit race for one step aside, and a
/// resume races the step aside itself; each ends with the count matching the words.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    #[test]
    fn loom_a_resume_and_the_limit_end_a_step_aside_once() {
        loom::model(|| {
            let h = Arc::new(Handoffs::new(1, 2, true));
            assert!(h.enter(0, 1));
            let resumer = {
                let h = h.clone();
                loom::thread::spawn(move || h.resume_one(0))
            };
            let expired = h.expire(0, 1);
            let resumed = resumer.join().unwrap();
            assert!(resumed != expired, "exactly one ends it");
            assert_eq!(h.aside(0), 0);
            assert!(!h.is_aside(1));
        });
    }

    #[test]
    fn loom_a_resume_finds_two_workers_stepping_aside() {
        loom::model(|| {
            let h = Arc::new(Handoffs::new(1, 2, true));
            let workers: Vec<_> = [0, 1]
                .into_iter()
                .map(|slot| {
                    let h = h.clone();
                    loom::thread::spawn(move || assert!(h.enter(0, slot)))
                })
                .collect();
            // The resumer keeps looking until it ended both (it may look before either is
            // counted, or between a count and its word).
            let mut resumed = 0;
            while resumed < 2 {
                if h.resume_one(0) {
                    resumed += 1;
                } else {
                    loom::thread::yield_now();
                }
            }
            for w in workers {
                w.join().unwrap();
            }
            assert_eq!(h.aside(0), 0);
            assert!(!h.is_aside(0) && !h.is_aside(1));
        });
    }
}
