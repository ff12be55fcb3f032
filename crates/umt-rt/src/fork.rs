//! Whether the calling process is a child of `fork` of the one that made something: a
//! runtime (whose threads a child does not have: a child has only the thread that called
//! `fork`), or the I/O reactor (whose epoll set and eventfd a child shares with its parent).
//!
//! The child handler of `pthread_atfork` counts the forks this process image descends
//! through, so the question costs a load. A child made without the handlers (a raw `clone`,
//! glibc's `_Fork`) is not counted: [`ForkMark::pid_differs`] asks the kernel instead, for
//! the checks that must hold whatever made the child.

use std::sync::atomic::{AtomicU64, Ordering};

/// Children of `fork` this process image is (the child handler adds one in each).
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_fork() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// [`REGISTERED`]: nobody has tried yet.
const UNTRIED: u64 = 0;
/// [`REGISTERED`]: the handler is registered.
const YES: u64 = 1;
/// [`REGISTERED`]: `pthread_atfork` failed.
const NO: u64 = 2;
/// [`REGISTERED`], in its low two bits: a thread of the process whose id is in the bits
/// above is registering it.
const BUSY: u64 = 3;

/// Whether [`count_fork`] is registered ([`UNTRIED`], [`YES`], [`NO`], or [`BUSY`] with the
/// registering process's id). Not a `OnceLock`: a child forked while a thread of its parent
/// registered would inherit a lock that no thread of its own ever releases, and wait for ever
/// at its first question.
static REGISTERED: AtomicU64 = AtomicU64::new(UNTRIED);

/// Registers [`count_fork`] once; whether it is registered (`pthread_atfork` fails only out of
/// memory, and then [`ForkMark::is_copy`] asks for the process id instead).
fn counted() -> bool {
    claim(&REGISTERED, std::process::id(), || {
        // SAFETY: a child handler that only adds to an atomic, which is async-signal-safe, as
        // a handler that runs in the child of a multithreaded process must be; no other
        // handler (registered twice at worst: see `claim`). It stays registered for the life
        // of the process, as the static it reads.
        unsafe { libc::pthread_atfork(None, None, Some(count_fork)) == 0 }
    })
}

/// How many times a caller yields while another thread of its process registers, before it
/// registers too (a registration takes microseconds; a registering thread preempted, or a
/// state that a `fork` copied into a process that reuses the registering one's id, would
/// otherwise be waited for ever).
const PATIENCE: u32 = 10_000;

/// One registration per process through `state`: the first caller of process `pid` runs
/// `register`, and the others wait for its answer, yielding. A registration under way in
/// another process is one a `fork` copied mid-way, whose thread the child does not have: the
/// child takes it over, as does a caller whose wait outlasts [`PATIENCE`]. Registering twice
/// only counts each later fork twice, which no reader minds (they compare counts for change).
fn claim(state: &AtomicU64, pid: u32, register: impl FnOnce() -> bool) -> bool {
    let busy = (u64::from(pid) << 2) | BUSY;
    let mut waits = 0;
    let mut seen = state.load(Ordering::Acquire);
    loop {
        match seen {
            YES => return true,
            NO => return false,
            s if s == busy && waits < PATIENCE => {
                waits += 1;
                std::thread::yield_now();
                seen = state.load(Ordering::Acquire);
            }
            // Untried, copied by a fork mid-way, or waited for long enough.
            _ => match state.compare_exchange(seen, busy, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => seen = now,
            },
        }
    }
    let ok = register();
    state.store(if ok { YES } else { NO }, Ordering::Release);
    ok
}

/// The forks this process image descends through, if the handler that counts them is
/// registered (it is from the first call on).
pub(crate) fn generation() -> Option<u64> {
    counted().then(|| FORKS.load(Ordering::Relaxed))
}

/// Which process made something: compare with [`ForkMark::is_copy`] later.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ForkMark {
    /// The process id then.
    pid: u32,
    /// [`FORKS`] then, if the handler that counts them is registered.
    forks: Option<u64>,
}

impl ForkMark {
    /// The calling process, now. The handler is registered before the count is read: a fork
    /// after this returns is counted.
    pub(crate) fn here() -> ForkMark {
        ForkMark {
            pid: std::process::id(),
            forks: generation(),
        }
    }

    /// Whether the calling process is a child (of a child ...) of the one that made the mark,
    /// by a `fork` that ran the handlers; by the process id where the handler could not be
    /// registered. The child handler ran in the calling thread, the only one a child has,
    /// before its `fork` returned: a relaxed load sees it.
    pub(crate) fn is_copy(&self) -> bool {
        match self.forks {
            Some(forks) => FORKS.load(Ordering::Relaxed) != forks,
            None => self.pid_differs(),
        }
    }

    /// Whether the calling process is another than the one that made the mark, whatever made
    /// it (a system call).
    pub(crate) fn pid_differs(&self) -> bool {
        self.pid != std::process::id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registration runs once; a caller that finds it under way in its own process waits
    /// for its answer, but not for ever; one that finds it under way in another (a fork
    /// copied it) takes it over.
    #[test]
    fn the_handler_is_registered_once_and_a_copied_registration_is_taken_over() {
        let state = AtomicU64::new(UNTRIED);
        let runs = std::cell::Cell::new(0);
        let register = || {
            runs.set(runs.get() + 1);
            true
        };
        assert!(claim(&state, 7, register));
        assert!(claim(&state, 7, register));
        assert_eq!(runs.get(), 1);
        // Copied by a fork into process 8: the child registers its own.
        state.store((7 << 2) | BUSY, Ordering::Relaxed);
        assert!(claim(&state, 8, register));
        assert_eq!(runs.get(), 2);
        assert_eq!(state.load(Ordering::Relaxed), YES);
        // Under way in this process for longer than any registration takes: registered again
        // rather than waited for ever.
        state.store((8 << 2) | BUSY, Ordering::Relaxed);
        assert!(claim(&state, 8, register));
        assert_eq!(runs.get(), 3);
        // Under way in this process: the others wait for its answer.
        state.store((8 << 2) | BUSY, Ordering::Relaxed);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| claim(&state, 8, || unreachable!("registered twice")));
            state.store(YES, Ordering::Release);
            assert!(waiter.join().unwrap());
        });
        let failed = AtomicU64::new(UNTRIED);
        assert!(!claim(&failed, 7, || false));
        assert!(!claim(&failed, 7, || unreachable!("tried twice")));
    }

    /// A child of `fork` sees the parent's mark as a copy; the parent does not.
    #[test]
    fn a_fork_child_sees_the_parents_mark_as_a_copy() {
        let mark = ForkMark::here();
        assert!(!mark.is_copy() && !mark.pid_differs());
        // SAFETY: the child only loads atomics and calls getpid, and leaves with `_exit`,
        // which runs no handler.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let seen = mark.is_copy() && mark.pid_differs() && !ForkMark::here().is_copy();
            // SAFETY: ends the child at once, as a child of a multithreaded process must.
            unsafe { libc::_exit(if seen { 0 } else { 1 }) };
        }
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        assert_eq!(
            status,
            nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 0),
            "the child did not see the mark as its parent's"
        );
        assert!(!mark.is_copy());
    }
}
