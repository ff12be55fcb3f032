//! A future's turn on its worker: how long one poll of a runtime's future may go on doing I/O
//! that is ready at once before it lets the others run (cooperative scheduling, as tokio's
//! budget; Go preempts instead).
//!
//! A connection whose client always has its next request sent by the time the handler reads
//! again never sees `WouldBlock`, so its future never returns `Pending` and keeps its worker
//! from every other future. Steps:
//!
//! 1. **C1 — a turn begins.** A worker that polls a runtime's future (`async_task`, A3)
//!    starts a turn, in a thread-local: no operation tried yet. Its clock starts at the
//!    poll's first operation, so a poll that does no I/O (a channel's end, a timer) reads no
//!    clock: a read of the clock was 9 % of a poll that only passes a baton to another future
//!    (`--example wake_chain`).
//!    `block_on` polls with no turn: outside a worker it is the only future of its thread
//!    (called inside a runtime future's poll, what it polls does not yield either).
//! 2. **C2 — a turn is spent.** An I/O operation of `Async` (R10 of `async_io.rs`) asks
//!    [`spent`] before it tries. The answer is yes once [`TURN`] has gone by since the poll's
//!    first operation, except for that first operation (every poll makes progress, however
//!    long it ran or was preempted before it) and for the first write after a read (the
//!    answer to what was read goes out before the next request is taken: work begun finishes
//!    first). On a
//!    yes the future wakes itself and returns `Pending`, and the task goes to the back of the
//!    runtime's queue of woken futures (A2), behind those woken before it. Each operation
//!    tried is noted ([`tried`]).
//! 3. **C3 — a spent turn stays spent.** Later operations of the same poll are refused
//!    too, except one on each other descriptor and direction (up to [`MET`] keys, the refused
//!    one included): a `select` loop over two always-ready sockets returns `Pending`
//!    once each has been asked (a turn begun afresh at the second let it go on for ever, a
//!    review found), and a `join` polled in order still gives its second future an
//!    operation each poll while the first's socket is always ready (refusing every later
//!    operation starved it, the next review found). An executor nested in the poll, which
//!    polls again at once when woken, would spin on refusals: after [`REFUSALS`] in the
//!    spent turn the next operation begins a new turn, so it makes progress.
//!
//! Outside a runtime's poll (another executor's thread, a closure task) there is no turn and
//! nothing yields.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How long a poll of a runtime's future may go on finding its I/O ready before it yields.
/// A yield costs a requeue and a poll (a few microseconds: 3-5 % of `umt-bench serve`'s
/// throughput without blocking, at 74 us of work a request); short enough that, with tens of
/// busy connections per core, each waits for the others' turns rather than their whole runs
/// (a turn of 200 us or 1 ms gave a higher p99).
pub(crate) const TURN: Duration = Duration::from_micros(50);

/// C3: refusals in one spent turn after which a poll that goes on anyway gets a new turn (an
/// executor nested in it, polling again at once).
pub(crate) const REFUSALS: u8 = 64;

/// C3: the descriptors and directions a spent turn keeps track of, the refused one included:
/// each of the others may do one operation. Beyond them every operation is refused (a `join`
/// of more futures, or of futures that each read and write, polled in order: the last ones
/// wait while the first ones' sockets are always ready).
pub(crate) const MET: usize = 16;

/// What an operation does to its descriptor, for C2's exceptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    not(target_os = "linux"),
    expect(dead_code, reason = "only `async_io`, Linux's, asks")
)]
pub(crate) enum Op {
    /// Takes something in: a read, an accept, a wait for readability.
    Read,
    /// Sends something out.
    Write,
}

/// The current turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No operation tried yet: the next is the poll's first, and starts the turn's clock.
    Fresh,
    /// Operations tried since `began`, the first's time; `last` the latest (after a read, the
    /// next write is its answer).
    Trying { began: Instant, last: Op },
    /// Spent: operations are refused until the poll ends (C3); `refused` so far;
    /// `met`, the operations (their keys, 0 for none) refused or let through once since.
    Spent { refused: u8, met: [usize; MET] },
}

thread_local! {
    /// The turn of the current poll; `None` outside a runtime's poll.
    static TURN_NOW: Cell<Option<State>> = const { Cell::new(None) };
}

/// A turn in progress; dropping it restores what was there before (a poll nested in another).
pub(crate) struct Turn {
    before: Option<State>,
}

/// C1: begins a turn for a runtime's poll (`polls`) or, for `block_on`, none.
pub(crate) fn begin(polls: bool) -> Turn {
    let now = polls.then_some(State::Fresh);
    Turn {
        before: TURN_NOW.with(|t| t.replace(now)),
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        TURN_NOW.with(|t| t.set(self.before));
    }
}

/// C2 and C3: whether the current turn is spent before an operation `op` on the descriptor
/// and direction `key` (never 0), which then does not try; it stays spent for the rest of
/// the poll, for up to [`REFUSALS`] refusals, and lets each other key through once.
#[cfg_attr(
    not(target_os = "linux"),
    expect(dead_code, reason = "only `async_io`, Linux's, asks")
)]
pub(crate) fn spent(op: Op, key: usize) -> bool {
    TURN_NOW.with(|t| {
        let began = match (t.get(), op) {
            (None | Some(State::Fresh), _)
            | (Some(State::Trying { last: Op::Read, .. }), Op::Write) => return false,
            (Some(State::Spent { refused, mut met }), _) => {
                if !met.contains(&key)
                    && let Some(free) = met.iter_mut().find(|k| **k == 0)
                {
                    *free = key;
                    t.set(Some(State::Spent { refused, met }));
                    return false;
                }
                let again = refused < REFUSALS;
                t.set(Some(if again {
                    State::Spent {
                        refused: refused + 1,
                        met,
                    }
                } else {
                    State::Fresh
                }));
                return again;
            }
            (Some(State::Trying { began, .. }), _) => began,
        };
        if began.elapsed() < TURN {
            return false;
        }
        let mut met = [0; MET];
        met[0] = key;
        t.set(Some(State::Spent { refused: 1, met }));
        true
    })
}

/// C2: notes that an operation `op` was tried in the current turn.
#[cfg_attr(
    not(target_os = "linux"),
    expect(dead_code, reason = "only `async_io`, Linux's, asks")
)]
pub(crate) fn tried(op: Op) {
    TURN_NOW.with(|t| {
        let began = match t.get() {
            // A spent turn stays so: what it let through does not begin another.
            None | Some(State::Spent { .. }) => return,
            Some(State::Fresh) => Instant::now(),
            Some(State::Trying { began, .. }) => began,
        };
        t.set(Some(State::Trying { began, last: op }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Backdates the current turn's clock, so that it is spent.
    fn backdate() {
        TURN_NOW.with(|t| {
            let Some(State::Trying { last, .. }) = t.get() else {
                panic!("no clock runs before the turn's first operation");
            };
            let began = Instant::now().checked_sub(TURN * 2).unwrap();
            t.set(Some(State::Trying { began, last }));
        });
    }

    #[test]
    fn no_turn_outside_a_poll_and_a_spent_turn_refuses_the_rest_of_the_poll() {
        const A: usize = 8;
        const B: usize = 16;
        assert!(!spent(Op::Read, A), "no turn outside a poll");
        {
            let _turn = begin(true);
            TURN_NOW.with(|t| assert_eq!(t.get(), Some(State::Fresh), "no clock read yet"));
            assert!(!spent(Op::Read, A), "a poll's first operation tries");
            tried(Op::Read);
            backdate();
            assert!(!spent(Op::Write, A + 1), "the answer to a read goes out");
            tried(Op::Write);
            assert!(spent(Op::Write, A + 1), "a second write does not");
            assert!(spent(Op::Write, A + 1), "nor a third");
            assert!(!spent(Op::Read, B), "another descriptor's read tries once");
            tried(Op::Read);
            assert!(spent(Op::Read, B), "and only once");
            for other in 1..MET - 1 {
                assert!(!spent(Op::Read, B + other * 8), "each other key once");
            }
            assert!(spent(Op::Read, 1024), "beyond MET keys, none");
            let refused = TURN_NOW.with(|t| match t.get() {
                Some(State::Spent { refused, .. }) => refused,
                s => panic!("spent, not {s:?}"),
            });
            for _ in refused..REFUSALS {
                assert!(spent(Op::Read, A));
            }
            assert!(
                !spent(Op::Read, A),
                "after REFUSALS refusals a new turn begins (a nested executor)"
            );
            tried(Op::Read);
            TURN_NOW.with(|t| assert!(matches!(t.get(), Some(State::Trying { .. }))));
            {
                let _none = begin(false);
                TURN_NOW.with(|t| assert_eq!(t.get(), None, "block_on polls with no turn"));
                tried(Op::Read);
                assert!(!spent(Op::Read, A));
            }
            TURN_NOW.with(|t| assert!(t.get().is_some(), "the outer turn is back"));
        }
        TURN_NOW.with(|t| assert_eq!(t.get(), None));
    }
}
