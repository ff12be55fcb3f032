//! Lending a worker to a starved core: whose core a worker runs on, when a leader has moved it
//! (steps M1–M4 and their races in `README.md`, "Lending a worker to a starved core").
//!
//! The state here is one word per worker and the rule that makes it safe to change from two
//! threads: a leader lends (moves the worker to its own core), the worker alone takes itself
//! home. Moving the thread (its CPU affinity) is passed in, so that the handshake can be
//! model-checked (loom) with the affinity as a plain variable.

use crate::sync::{AtomicUsize, Mutex, Ordering};

/// [`Lend::to`] of a worker on its own core.
const HOME: usize = usize::MAX;
/// [`Lend::to`] of a worker that exits: it can no longer be lent.
const RETIRED: usize = usize::MAX - 1;

/// Where one worker is lent, if anywhere.
#[derive(Debug)]
pub(crate) struct Lend {
    /// [`HOME`], or the index of the core the worker is lent to.
    to: AtomicUsize,
    /// Held by a leader while it lends this worker (M2), so two leaders never interleave their
    /// moves of one thread. Only leaders take it, and only with `try_lock`: the worker never
    /// waits for a leader, which runs at `SCHED_IDLE` and may be preempted holding it.
    lending: Mutex<()>,
}

impl Default for Lend {
    fn default() -> Self {
        Lend {
            to: AtomicUsize::new(HOME),
            lending: Mutex::new(()),
        }
    }
}

impl Lend {
    /// The core the worker is lent to, or `None` if it is home.
    pub(crate) fn lent_to(&self) -> Option<usize> {
        match self.to.load(Ordering::Acquire) {
            HOME | RETIRED => None,
            to => Some(to),
        }
    }

    /// By the worker as it exits: no leader lends it from now on, and none is moving it
    /// (it waits for a lend in progress). A thread id is reused once its thread exits,
    /// possibly by another process: a lend that moved an exited worker's id could move that
    /// process's thread (when the runtime runs as root).
    pub(crate) fn retire(&self) {
        let _lending = crate::sync::lock(&self.lending);
        self.to.store(RETIRED, Ordering::Release);
    }

    /// M2, by the leader of core `to`: lends the worker to it. `move_to` moves the thread
    /// to that core (its affinity) and says whether it could; `move_home` moves it back.
    /// Returns whether the thread was moved: it was lent, although it may be home again by
    /// the time this returns (a moved worker can run its whole loan before the leader, at
    /// `SCHED_IDLE` on the core it just filled, runs again).
    ///
    /// The race with the worker's [`Lend::take_home`] (M4): the worker may take itself home
    /// between the mark and the move, and its own move home may land before this `move_to`.
    /// So after moving, the leader looks again: if the mark is gone, it moves the thread home
    /// itself. Either way the last move is home, and no other leader can lend the worker
    /// meanwhile (the lock), so the thread ends where its mark says.
    pub(crate) fn lend(
        &self,
        to: usize,
        move_to: impl FnOnce() -> bool,
        move_home: impl FnOnce(),
    ) -> bool {
        let Ok(_lending) = self.lending.try_lock() else {
            return false;
        };
        if self
            .to
            .compare_exchange(HOME, to, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        if !move_to() {
            // Not moved (the thread exited, or the core left the cpuset): unmark, unless the
            // worker already did.
            let _ = self
                .to
                .compare_exchange(to, HOME, Ordering::AcqRel, Ordering::Acquire);
            return false;
        }
        // The look after the move is a read-modify-write, not a load: each side writes (the
        // mark, or the thread's place) and then reads what the other wrote, and a load could
        // see the mark as it was before a move home that came before this move. An RMW reads
        // the mark's latest value: either it sees the worker's `take_home`, or that
        // `take_home` reads this RMW's value, so this move happened before the worker's move
        // home, which then comes last.
        if self
            .to
            .compare_exchange(to, to, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            move_home();
        }
        true
    }

    /// M4, by the worker itself: clears the mark; returns whether it was lent, in which case
    /// the worker moves itself home.
    pub(crate) fn take_home(&self) -> bool {
        self.to
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |to| {
                (to != HOME && to != RETIRED).then_some(HOME)
            })
            .is_ok()
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// M2 against M4: whatever the interleaving, once both are done the thread is on the
    /// core its mark names (lent, or home: the worker took itself home, and if its own move
    /// home landed before the leader's move, the leader moved it home again).
    #[test]
    fn loom_a_worker_ends_where_its_mark_says() {
        loom::model(|| {
            let lend = Arc::new(Lend::default());
            // Where the thread runs: HOME or the core it was moved to.
            let on = Arc::new(AtomicUsize::new(HOME));
            let leader = {
                let (lend, on) = (lend.clone(), on.clone());
                loom::thread::spawn(move || {
                    lend.lend(
                        1,
                        || {
                            on.store(1, Ordering::SeqCst);
                            true
                        },
                        || on.store(HOME, Ordering::SeqCst),
                    )
                })
            };
            if lend.take_home() {
                on.store(HOME, Ordering::SeqCst);
            }
            let _ = leader.join().unwrap();
            // The worker looks once more at its next scheduling point.
            let mark = lend.to.load(Ordering::SeqCst);
            let place = on.load(Ordering::SeqCst);
            assert_eq!(mark, place, "the thread is not where its mark says");
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_lend_is_refused_while_lent_and_undone_when_the_move_fails() {
        let lend = Lend::default();
        assert_eq!(lend.lent_to(), None);
        assert!(!lend.lend(1, || false, || {}));
        assert_eq!(lend.lent_to(), None, "a failed move leaves the worker home");
        assert!(lend.lend(1, || true, || panic!("not moved home")));
        assert_eq!(lend.lent_to(), Some(1));
        assert!(!lend.lend(2, || panic!("moved twice"), || {}));
        assert!(lend.take_home());
        assert!(!lend.take_home());
        assert_eq!(lend.lent_to(), None);
        lend.retire();
        assert!(!lend.lend(1, || panic!("an exited worker moved"), || {}));
        assert!(!lend.take_home());
        assert_eq!(lend.lent_to(), None);
    }
}
