//! A future's turn on its worker: how long one poll of a runtime's future may go on doing I/O
//! that is ready at once before it lets the others run (cooperative scheduling, as tokio's
//! budget; Go preempts instead).
//!
//! A connection whose client always has its next request sent by the time the handler reads
//! again never sees `WouldBlock`, so its future never returns `Pending` and keeps its worker
//! from every other future. Steps:
//!
//! 1. **C1 — a turn begins.** A worker that polls a runtime's future (`async_task`, A3)
//!    starts a turn: the time the poll began, in a thread-local. `block_on` polls with no
//!    turn: it is the only future of its thread.
//! 2. **C2 — a turn is spent.** An I/O operation of `Async` (R2 of `async_io.rs`) asks
//!    [`spent`] before it tries: once the poll has gone on for [`TURN`], the answer is yes,
//!    the future wakes itself and returns `Pending`, and the task goes to the back of the
//!    runtime's queue of woken futures (A2), behind those woken before it.
//! 3. **C3 — one yield per turn.** The first `yes` starts a new turn: a future that polls
//!    another after a `Pending` (`select`, `join`) or an executor nested in the poll (which
//!    polls again at once when woken) makes progress instead of spinning on spent turns.
//!
//! Outside a runtime's poll (another executor's thread, a closure task) there is no turn and
//! nothing yields.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How long a poll of a runtime's future may go on finding its I/O ready before it yields.
/// A yield costs a requeue and a poll (about a microsecond); short enough that, with tens of
/// busy connections per core, each waits for the others' turns rather than their whole runs.
pub(crate) const TURN: Duration = Duration::from_micros(50);

thread_local! {
    /// When the current turn began; `None` outside a runtime's poll.
    static BEGAN: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// A turn in progress; dropping it restores what was there before (a poll nested in another).
pub(crate) struct Turn {
    before: Option<Instant>,
}

/// C1: begins a turn for a runtime's poll (`polls`) or, for `block_on`, none.
pub(crate) fn begin(polls: bool) -> Turn {
    let now = polls.then(Instant::now);
    Turn {
        before: BEGAN.with(|b| b.replace(now)),
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        BEGAN.with(|b| b.set(self.before));
    }
}

/// C2 and C3: whether the current turn is spent; if so, a new one begins.
#[cfg_attr(
    not(target_os = "linux"),
    expect(dead_code, reason = "only `async_io`, Linux's, asks")
)]
pub(crate) fn spent() -> bool {
    BEGAN.with(|b| match b.get() {
        Some(t) => {
            let now = Instant::now();
            if now.saturating_duration_since(t) < TURN {
                return false;
            }
            b.set(Some(now));
            true
        }
        None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_turn_outside_a_poll_and_one_yield_per_turn() {
        assert!(!spent(), "no turn outside a poll");
        {
            let _turn = begin(true);
            assert!(!spent(), "a fresh turn is not spent");
            // Backdate the turn: it is spent once, then a new one begins (C3).
            BEGAN.with(|b| b.set(Instant::now().checked_sub(TURN * 2)));
            assert!(spent());
            assert!(!spent());
            {
                let _none = begin(false);
                BEGAN.with(|b| assert_eq!(b.get(), None, "block_on polls with no turn"));
                assert!(!spent());
            }
            BEGAN.with(|b| assert!(b.get().is_some(), "the outer turn is back"));
        }
        BEGAN.with(|b| assert_eq!(b.get(), None));
    }
}
