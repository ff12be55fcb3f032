//! The state of a future's task: who queues it after a wake-up, and who ends it (steps A2–A5
//! of `README.md`). One word, so that a wake-up during a poll is never lost and a task is never
//! queued twice. Loom-checked.

// Under loom only the model below uses it (the tasks themselves are not built there).
#![cfg_attr(loom, allow(dead_code))]

use crate::sync::{AtomicU8, Ordering};

/// Waiting for a wake-up, in no queue.
const IDLE: u8 = 0;
/// In a queue, or about to be pushed by whoever set this state.
const SCHEDULED: u8 = 1;
/// Being polled.
const RUNNING: u8 = 2;
/// Woken while being polled: its poller queues it again.
const NOTIFIED: u8 = 3;
/// Finished or cancelled.
const DONE: u8 = 4;

/// What the end of a `Pending` poll leaves to its poller.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AfterPoll {
    /// The task waits: the next wake-up queues it.
    Wait,
    /// It was woken during the poll: the poller queues it (it is `SCHEDULED` again).
    Queue,
    /// It was ended meanwhile: nothing. (No step ends a `RUNNING` task today; kept so that
    /// the poller never requeues an ended one if one does.)
    Ended,
}

/// One future's state.
#[derive(Debug)]
pub(crate) struct TaskState(AtomicU8);

impl TaskState {
    /// A new task, about to be queued by its spawner (A1).
    pub(crate) fn scheduled() -> Self {
        TaskState(AtomicU8::new(SCHEDULED))
    }

    /// A2: a wake-up. `true` when the caller must queue the task (it was waiting); a running
    /// task is marked for its poller, a queued, marked or ended one needs nothing.
    pub(crate) fn wake(&self) -> bool {
        let mut now = self.0.load(Ordering::Acquire);
        loop {
            let next = match now {
                IDLE => SCHEDULED,
                RUNNING => NOTIFIED,
                _ => return false,
            };
            match self
                .0
                .compare_exchange(now, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return next == SCHEDULED,
                Err(seen) => now = seen,
            }
        }
    }

    /// A3: the worker that took the task's job starts a poll; `false` if the task was ended
    /// while it sat in the queue.
    pub(crate) fn start_poll(&self) -> bool {
        self.0
            .compare_exchange(SCHEDULED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// A3: the poll returned `Pending`.
    pub(crate) fn pending(&self) -> AfterPoll {
        // SeqCst (a locked instruction on x86 either way): the poller reads the shutdown phase
        // next, and a shutdown that raised it then claims this word (A5): one of the two sees
        // the other.
        match self
            .0
            .compare_exchange(RUNNING, IDLE, Ordering::SeqCst, Ordering::Acquire)
        {
            Ok(_) => AfterPoll::Wait,
            Err(NOTIFIED) => {
                // Only the poller leaves NOTIFIED (wakers and shutdown do not touch it).
                self.0.store(SCHEDULED, Ordering::SeqCst);
                AfterPoll::Queue
            }
            Err(_) => AfterPoll::Ended,
        }
    }

    /// A4/A5: ends a task that waits (or, with `queued_too`, one that sits in a queue);
    /// `true` if this call did, and so owns the end.
    pub(crate) fn cancel_idle(&self, queued_too: bool) -> bool {
        // SeqCst: paired with the phase, see `pending`.
        let claim = |from| {
            self.0
                .compare_exchange(from, DONE, Ordering::SeqCst, Ordering::Acquire)
                .is_ok()
        };
        claim(IDLE) || (queued_too && claim(SCHEDULED))
    }

    /// A4: the owner of the task's state (its poller, or whoever queued or claimed it) ends it.
    pub(crate) fn end(&self) {
        self.0.store(DONE, Ordering::Release);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::AtomicUsize;
    use loom::sync::Arc;

    /// A2/A3: a poll that returns `Pending` while two wakers wake the task: it ends queued
    /// exactly once (by a waker or by its poller), never twice and never left waiting, and
    /// the queued task can then be polled.
    #[test]
    fn loom_a_wake_during_a_poll_queues_the_task_exactly_once() {
        loom::model(|| {
            let state = Arc::new(TaskState::scheduled());
            let queued = Arc::new(AtomicUsize::new(0));
            assert!(state.start_poll());
            let wakers: Vec<_> = (0..2)
                .map(|_| {
                    let (state, queued) = (state.clone(), queued.clone());
                    loom::thread::spawn(move || {
                        if state.wake() {
                            queued.fetch_add(1, Ordering::SeqCst);
                        }
                    })
                })
                .collect();
            if state.pending() == AfterPoll::Queue {
                queued.fetch_add(1, Ordering::SeqCst);
            }
            for w in wakers {
                w.join().unwrap();
            }
            // Both wakers woke after the poll began: the task is queued once, never twice,
            // and never left waiting.
            assert_eq!(queued.load(Ordering::SeqCst), 1);
            assert!(state.start_poll(), "the queued task can be polled");
        });
    }

    /// A5: shutdown cancels a waiting task while a waker wakes it: exactly one of them owns
    /// what follows (the waker queues it, or shutdown ends it).
    #[test]
    fn loom_shutdown_and_a_wake_race_for_a_waiting_task_once() {
        loom::model(|| {
            let state = Arc::new(TaskState::scheduled());
            assert!(state.start_poll());
            assert_eq!(state.pending(), AfterPoll::Wait);
            let waker = {
                let state = state.clone();
                loom::thread::spawn(move || state.wake())
            };
            let cancelled = state.cancel_idle(false);
            let queued = waker.join().unwrap();
            assert!(cancelled ^ queued);
        });
    }

    /// A5, the last shutdown step: a poll ends `Pending` while a joiner aborts the task (a
    /// wake) and claims it to end it itself; the poller, finding the step begun, claims it
    /// too (waiting or requeued). Exactly one of them ends it, never both (found in review:
    /// the poller ended a requeued task without a claim, and so did the joiner).
    #[test]
    fn loom_a_poller_and_a_joiner_in_the_last_step_end_the_task_once() {
        loom::model(|| {
            let state = Arc::new(TaskState::scheduled());
            assert!(state.start_poll());
            let joiner = {
                let state = state.clone();
                loom::thread::spawn(move || {
                    state.wake();
                    state.cancel_idle(true)
                })
            };
            let poller = match state.pending() {
                AfterPoll::Wait | AfterPoll::Queue => state.cancel_idle(true),
                AfterPoll::Ended => false,
            };
            let joiner = joiner.join().unwrap();
            assert!(poller ^ joiner, "ended by both, or by neither");
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn each_step_goes_where_the_protocol_says() {
        let s = TaskState::scheduled();
        assert!(!s.wake(), "a queued task needs no second queueing");
        assert!(s.start_poll());
        assert!(!s.wake(), "a running task is marked, not queued");
        assert_eq!(s.pending(), AfterPoll::Queue);
        assert!(s.start_poll());
        assert_eq!(s.pending(), AfterPoll::Wait);
        assert!(s.wake());
        assert!(
            !s.cancel_idle(false),
            "queued: only shutdown's second call ends it"
        );
        assert!(s.cancel_idle(true));
        assert!(!s.start_poll(), "ended in the queue: the job does nothing");
        assert!(!s.wake());
    }
}
