//! An io_uring instance that several threads share: one pushes and submits, one blocks for
//! completions, one reaps, each at any time.
//!
//! umt-rt keeps one per core for its scheduler-centric wait (`umt_rt::io`): the workers of a
//! core queue requests into it, reap it at scheduling points, and the one with nothing else to
//! run blocks in it. This type owns the sharing rules; what an entry points to is the caller's.
//!
//! ```no_run
//! use umt_sys::uring::{Ring, opcode};
//! let ring = Ring::new(64)?;
//! let nop = opcode::Nop::new().build().user_data(7);
//! // SAFETY: a NOP points to no memory.
//! assert!(unsafe { ring.push(&nop) });
//! ring.wait(None)?;
//! ring.reap(|user_data, result| assert_eq!((user_data, result), (7, 0)));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use io_uring::IoUring;
use io_uring::squeue::Flags;
use io_uring::types::{TimeoutFlags, Timespec};

pub use io_uring::squeue::Entry;
pub use io_uring::{opcode, types};

/// `struct io_uring_getevents_arg` of the kernel's UAPI, the argument of an
/// `io_uring_enter` with `IORING_ENTER_EXT_ARG` (here: only a timeout).
#[repr(C)]
struct GeteventsArg {
    sigmask: u64,
    sigmask_sz: u32,
    min_wait_usec: u32,
    ts: u64,
}

/// `IORING_ENTER_GETEVENTS` and `IORING_ENTER_EXT_ARG` of the kernel's UAPI.
const ENTER_GETEVENTS: u32 = 1;
const ENTER_EXT_ARG: u32 = 1 << 3;

/// A point in time for [`Ring::push_until`], on `CLOCK_MONOTONIC` (the clock of `Instant`).
#[derive(Debug, Clone, Copy)]
pub struct RingDeadline(Timespec);

impl RingDeadline {
    /// The deadline `at` (one already past cancels the entry as soon as it is submitted).
    pub fn at(at: Instant) -> RingDeadline {
        let left = at.saturating_duration_since(Instant::now());
        let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map(Duration::from)
            .unwrap_or_default();
        let when = now.saturating_add(left);
        RingDeadline(
            Timespec::new()
                .sec(when.as_secs())
                .nsec(when.subsec_nanos()),
        )
    }
}

/// A shared io_uring. Every method takes `&self`.
pub struct Ring {
    ring: IoUring,
    /// Held while the submission queue's tail moves (pushers and the submit call).
    sq: Mutex<()>,
    /// Held while completions are taken.
    cq: Mutex<()>,
    /// Entries pushed and not yet handed to the kernel.
    unsubmitted: AtomicU32,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("unsubmitted", &self.unsubmitted.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Ring {
    /// A ring with room for `entries` queued requests. Fails where io_uring is missing or
    /// disabled (`kernel.io_uring_disabled`, a seccomp filter): the error says which.
    pub fn new(entries: u32) -> io::Result<Ring> {
        let ring = IoUring::new(entries.max(1)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "io_uring_setup: {e} (is io_uring disabled? see sysctl \
                     kernel.io_uring_disabled, or a seccomp filter of the container)"
                ),
            )
        })?;
        Ok(Ring {
            ring,
            sq: Mutex::new(()),
            cq: Mutex::new(()),
            unsubmitted: AtomicU32::new(0),
        })
    }

    /// Queues `entry` without a system call; it goes to the kernel at the next
    /// [`Ring::submit`] or [`Ring::wait`]. Returns `false` when the queue is full (submit, reap,
    /// and push again).
    ///
    /// # Safety
    ///
    /// Whatever `entry` points to (buffers, file descriptors, timespecs) must stay valid, and
    /// unmoved, until its completion has been taken by [`Ring::reap`].
    pub unsafe fn push(&self, entry: &Entry) -> bool {
        let _sq = self.sq.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the `sq` lock makes this thread the only one moving the submission queue's
        // tail; the kernel reads entries only up to the tail `sync` publishes. What the entry
        // points to is the caller's promise (see above).
        let pushed = unsafe {
            let mut sq = self.ring.submission_shared();
            let ok = sq.push(entry).is_ok();
            sq.sync();
            ok
        };
        if pushed {
            self.unsubmitted.fetch_add(1, Ordering::Release);
        }
        pushed
    }

    /// Queues `entry` with a deadline: if it has not completed by then, the kernel cancels it
    /// (an `IORING_OP_LINK_TIMEOUT` linked to it), and it completes with `-ECANCELED`. An
    /// operation the kernel can no longer cancel (a file read already at the device) completes
    /// as usual. The deadline has a completion of its own, with `timeout_data` as its user
    /// data (`-ETIME` if it fired, `-ECANCELED` if the entry completed first, or an error):
    /// the entry's deadline is over only once both completions are reaped, for until then the
    /// kernel may still cancel, by user data, whatever carries the entry's. Returns `false`
    /// when the queue has no room for both entries.
    ///
    /// # Safety
    ///
    /// As for [`Ring::push`], for `entry`'s memory and for `deadline`, until both completions
    /// have been reaped.
    pub unsafe fn push_until(
        &self,
        entry: &Entry,
        deadline: &RingDeadline,
        timeout_data: u64,
    ) -> bool {
        let linked = entry.clone().flags(Flags::IO_LINK);
        let timeout = opcode::LinkTimeout::new(&deadline.0)
            .flags(TimeoutFlags::ABS)
            .build()
            .user_data(timeout_data);
        let _sq = self.sq.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: as in `push`; both entries go in or neither, next to each other, and every
        // submission hands the kernel the whole queue under the `sq` lock (`submit`, and
        // `wait` through it), so the link is never cut between two submissions.
        let pushed = unsafe {
            let mut sq = self.ring.submission_shared();
            let ok = sq.push_multiple(&[linked, timeout]).is_ok();
            sq.sync();
            ok
        };
        if pushed {
            self.unsubmitted.fetch_add(2, Ordering::Release);
        }
        pushed
    }

    /// Entries queued and not yet handed to the kernel.
    pub fn unsubmitted(&self) -> u32 {
        self.unsubmitted.load(Ordering::Acquire)
    }

    /// Hands the queued entries to the kernel (one `io_uring_enter`, none if nothing is queued).
    pub fn submit(&self) -> io::Result<usize> {
        if self.unsubmitted() == 0 {
            return Ok(0);
        }
        let _sq = self.sq.lock().unwrap_or_else(PoisonError::into_inner);
        let n = self.unsubmitted.swap(0, Ordering::AcqRel);
        if n == 0 {
            return Ok(0);
        }
        match self.ring.submit() {
            Ok(k) => Ok(k),
            Err(e) => {
                // Still queued: the next call submits them.
                self.unsubmitted.fetch_add(n, Ordering::Release);
                Err(e)
            }
        }
    }

    /// Submits what is queued and blocks the calling thread until a completion is waiting,
    /// `timeout` passed, or a signal arrived (all three return `Ok`). Several threads may wait
    /// at once; none holds a lock while it sleeps.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<()> {
        // Everything queued goes through `submit`, under the `sq` lock: an enter that counted
        // the queue and then submitted could take the first half of a pair another thread
        // pushed meanwhile (`push_until`), cutting its link.
        self.submit()?;
        if self.has_completions() {
            return Ok(());
        }
        let submitter = self.ring.submitter();
        let result = match timeout {
            Some(t) => {
                let ts = Timespec::new().sec(t.as_secs()).nsec(t.subsec_nanos());
                let arg = GeteventsArg {
                    sigmask: 0,
                    sigmask_sz: 0,
                    min_wait_usec: 0,
                    ts: &ts as *const Timespec as u64,
                };
                // SAFETY: `arg` is the kernel's `io_uring_getevents_arg` layout, with no signal
                // mask and a timespec (`io-uring`'s `Timespec` is the kernel's
                // `__kernel_timespec`) that outlives the call; nothing is submitted.
                unsafe { submitter.enter(0, 1, ENTER_GETEVENTS | ENTER_EXT_ARG, Some(&arg)) }
            }
            // SAFETY: no argument; nothing is submitted.
            None => unsafe { submitter.enter::<libc::sigset_t>(0, 1, ENTER_GETEVENTS, None) },
        };
        match result {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether a completion waits to be reaped (two loads, no lock, no system call).
    pub fn has_completions(&self) -> bool {
        // SAFETY: a shared view of the completion queue only reads its head and tail here; the
        // head moves only under the `cq` lock (`reap`), the tail only in the kernel.
        let cq = unsafe { self.ring.completion_shared() };
        let waiting = !cq.is_empty();
        // Not dropped: a view stores its head back when dropped, and this one's may be stale
        // by then (a reaper moved on), which would hand the same completions out again.
        std::mem::forget(cq);
        waiting
    }

    /// Takes every waiting completion and calls `f(user_data, result)` for each, in order;
    /// returns how many. One thread reaps at a time; a second caller returns 0 at once.
    pub fn reap(&self, mut f: impl FnMut(u64, i32)) -> usize {
        let Ok(_cq) = self.cq.try_lock() else {
            return 0;
        };
        let mut n = 0;
        loop {
            // SAFETY: the `cq` lock makes this thread the only one moving the completion
            // queue's head; dropping the view publishes the new head to the kernel.
            let batch: Vec<(u64, i32)> = unsafe { self.ring.completion_shared() }
                .map(|c| (c.user_data(), c.result()))
                .collect();
            if batch.is_empty() {
                return n;
            }
            n += batch.len();
            for (data, res) in batch {
                f(data, res);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn nops_complete_once_each_through_any_thread() {
        let Ok(ring) = Ring::new(8) else {
            eprintln!("skipped: no io_uring here");
            return;
        };
        let mut seen = Vec::new();
        for round in 0..4u64 {
            // More than the queue holds: a full queue says so.
            let mut pushed = 0;
            for i in 0..16u64 {
                let e = opcode::Nop::new().build().user_data(round * 100 + i);
                // SAFETY: a NOP points to no memory.
                if unsafe { ring.push(&e) } {
                    pushed += 1;
                } else {
                    ring.submit().unwrap();
                    ring.reap(|d, r| seen.push((d, r)));
                    // SAFETY: as above.
                    assert!(unsafe { ring.push(&e) });
                    pushed += 1;
                }
            }
            assert_eq!(pushed, 16);
            while seen.len() < (round as usize + 1) * 16 {
                std::thread::scope(|s| {
                    s.spawn(|| ring.wait(Some(Duration::from_millis(100))).unwrap());
                });
                ring.reap(|d, r| seen.push((d, r)));
            }
        }
        seen.sort_unstable();
        let want: Vec<(u64, i32)> = (0..4u64)
            .flat_map(|r| (0..16).map(move |i| (r * 100 + i, 0)))
            .collect();
        assert_eq!(seen, want);
    }

    /// A thread that only checks for completions while another reaps must not hand any out
    /// twice (a dropped view of the queue once wrote a stale head back, and the reaper saw
    /// old completions again: a use after free of their waiters' state in umt-rt).
    #[test]
    fn checking_while_reaping_hands_each_completion_out_once() {
        let Ok(ring) = Ring::new(64) else {
            return;
        };
        const N: u64 = 200_000;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut seen = vec![0u8; N as usize];
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::black_box(ring.has_completions());
                }
            });
            let mut next = 0;
            let mut reaped = 0;
            while reaped < N {
                while next < N {
                    let e = opcode::Nop::new().build().user_data(next);
                    // SAFETY: a NOP points to no memory.
                    if !unsafe { ring.push(&e) } {
                        break;
                    }
                    next += 1;
                }
                ring.submit().unwrap();
                reaped += ring.reap(|d, _| seen[d as usize] += 1) as u64;
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(seen.iter().all(|&n| n == 1));
    }

    /// A poll that nothing satisfies ends at its deadline, cancelled; one that is satisfied
    /// first completes as usual. Either way the deadline's own completion comes too.
    #[test]
    fn an_entry_with_a_deadline_is_cancelled_at_it_and_the_deadline_completes_too() {
        let Ok(ring) = Ring::new(8) else {
            return;
        };
        let (reader, writer) = std::io::pipe().unwrap();
        use std::os::fd::AsRawFd;
        let poll = opcode::PollAdd::new(types::Fd(reader.as_raw_fd()), libc::POLLIN as u32)
            .build()
            .user_data(1);
        let start = Instant::now();
        let deadline = RingDeadline::at(start + Duration::from_millis(5));
        let both = |seen: &mut Vec<(u64, i32)>| {
            while seen.len() < 2 {
                ring.wait(Some(Duration::from_millis(100))).unwrap();
                ring.reap(|d, r| seen.push((d, r)));
            }
            seen.sort_unstable();
        };
        // SAFETY: the pipe and the deadline outlive both completions, reaped below.
        assert!(unsafe { ring.push_until(&poll, &deadline, 11) });
        let mut seen = Vec::new();
        both(&mut seen);
        assert!(Instant::now() >= start + Duration::from_millis(5));
        assert_eq!(seen, [(1, -libc::ECANCELED), (11, -libc::ETIME)]);

        // Readable before a deadline far away: POLLIN, and the deadline is cancelled.
        (&writer).write_all(b"x").unwrap();
        let deadline = RingDeadline::at(Instant::now() + Duration::from_secs(600));
        let poll = poll.user_data(2);
        // SAFETY: as above.
        assert!(unsafe { ring.push_until(&poll, &deadline, 12) });
        seen.clear();
        both(&mut seen);
        assert_eq!(seen, [(2, libc::POLLIN as i32), (12, -libc::ECANCELED)]);
        assert_eq!(ring.unsubmitted(), 0);
        assert!(!ring.has_completions());
    }

    #[test]
    fn a_wait_with_nothing_in_flight_times_out() {
        let Ok(ring) = Ring::new(4) else {
            return;
        };
        ring.wait(Some(Duration::from_millis(1))).unwrap();
        assert_eq!(ring.reap(|_, _| {}), 0);
    }
}
