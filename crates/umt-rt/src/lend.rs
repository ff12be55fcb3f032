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
/// [`Lend::to`] of a worker moving itself home: no leader lends it until it is there.
const GOING_HOME: usize = usize::MAX - 2;
/// [`Lend::to`] of a worker, home, that runs a call bound to its core's CPU (a `broadcast`
/// call, M5): no leader lends it until the call returns.
const STAYING: usize = usize::MAX - 3;

/// Where one worker is lent, if anywhere.
#[derive(Debug)]
pub(crate) struct Lend {
    /// [`HOME`], [`GOING_HOME`], [`STAYING`], [`RETIRED`], or the index of the core the
    /// worker is lent to.
    to: AtomicUsize,
    /// Held by a leader while it lends this worker (M2), so two leaders never interleave their
    /// moves of one thread. Leaders take it with `try_lock` only; the worker takes it as it
    /// exits ([`Lend::retire`]) and before a call bound to its core ([`Lend::stay`]), never
    /// across a task.
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

/// A core index or one of the states above.
fn lent(to: usize) -> Option<usize> {
    (to < STAYING).then_some(to)
}

impl Lend {
    /// Whether a leader may lend the worker now: home, not staying (M5), not on its way
    /// home nor exiting. A look before [`Lend::lend`], which decides under its lock.
    pub(crate) fn lendable(&self) -> bool {
        self.to.load(Ordering::Acquire) == HOME
    }

    /// The core the worker is lent to, or `None` if it is not lent (home, staying, on its way
    /// home, or exiting).
    pub(crate) fn lent_to(&self) -> Option<usize> {
        lent(self.to.load(Ordering::Acquire))
    }

    /// By the worker as it exits: no leader lends it from now on, and none is moving it
    /// (it waits for a lend in progress, a few system calls). A thread id is reused once its
    /// thread exits, possibly by another process: a lend that moved an exited worker's id
    /// could move that process's thread (when the runtime runs as root).
    pub(crate) fn retire(&self) {
        let _lending = crate::sync::lock(&self.lending);
        self.to.store(RETIRED, Ordering::Release);
    }

    /// M2, by the leader of core `to`: lends the worker to it. `move_to` moves the thread
    /// to that core (its affinity) and says whether it could; `move_home` moves it back.
    /// `guests` counts the workers lent to core `to`: one more while this mark is set (the
    /// one who clears the mark takes it back). Returns whether the thread was moved: it was
    /// lent, although it may be home again by the time this returns (a moved worker can run
    /// its whole loan before the leader, at `SCHED_IDLE` on the core it just filled, runs
    /// again).
    ///
    /// The race with the worker's [`Lend::take_home`] (M4): the worker may take itself home
    /// between the mark and the move, and its own move home may land before this `move_to`.
    /// So after moving, the leader looks again: if the mark is gone, it moves the thread home
    /// itself. Either way the last move is home; no other leader can lend the worker meanwhile
    /// (the lock, and [`GOING_HOME`] until the worker's own move home is done), so the thread
    /// ends where its mark says.
    pub(crate) fn lend(
        &self,
        to: usize,
        guests: &AtomicUsize,
        move_to: impl FnOnce() -> bool,
        move_home: impl FnOnce(),
    ) -> bool {
        let Ok(_lending) = self.lending.try_lock() else {
            return false;
        };
        // Counted before the mark: whoever clears the mark takes the count back, and the
        // worker may clear it at once.
        guests.fetch_add(1, Ordering::AcqRel);
        if self
            .to
            .compare_exchange(HOME, to, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            guests.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        if !move_to() {
            // Not moved (the thread exited, or the core left the cpuset): unmark, unless the
            // worker already did.
            if self
                .to
                .compare_exchange(to, HOME, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                guests.fetch_sub(1, Ordering::AcqRel);
            }
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

    /// M4, by the worker itself: if it is lent, marks it going home and returns the core it
    /// was lent to; the worker then moves itself home, takes back that core's guest count
    /// and calls [`Lend::arrived`].
    pub(crate) fn take_home(&self) -> Option<usize> {
        self.to
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |to| {
                lent(to).map(|_| GOING_HOME)
            })
            .ok()
    }

    /// M4, by the worker once its move home is done: leaders may lend it again.
    pub(crate) fn arrived(&self) {
        let _ = self
            .to
            .compare_exchange(GOING_HOME, HOME, Ordering::AcqRel, Ordering::Acquire);
    }

    /// M5, by the worker, before a call bound to its core's CPU: if it is home, no leader
    /// lends it until [`Lend::unstay`], and it is on its own core. False if it is lent (or
    /// exiting): it goes home (M4) and tries again. A leader's mark (M2) and this are both a
    /// compare-and-swap from [`HOME`], so one of them fails.
    ///
    /// Under the [`Lend::lending`] lock: a lend in progress may have marked the worker lent
    /// and seen it go home, but not yet moved it back (M2's look after the move); the lock
    /// waits for that move, so the thread is where its mark says. A few system calls, but
    /// by a leader at `SCHED_IDLE`, which a busy core may keep waiting (`README.md`).
    pub(crate) fn stay(&self) -> bool {
        let _lending = crate::sync::lock(&self.lending);
        self.to
            .compare_exchange(HOME, STAYING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether the worker stays (M5): only the worker itself marks it so.
    pub(crate) fn staying(&self) -> bool {
        self.to.load(Ordering::Acquire) == STAYING
    }

    /// M5, by the worker once the call returned: leaders may lend it again.
    pub(crate) fn unstay(&self) {
        let _ = self
            .to
            .compare_exchange(STAYING, HOME, Ordering::AcqRel, Ordering::Acquire);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// M2 against M4, with a second leader (as on a machine of three cores or more):
    /// whatever the interleaving, once all are done the thread is where its mark says (lent
    /// to a core, or home), and the guest counts match the marks.
    #[test]
    fn loom_a_worker_ends_where_its_mark_says() {
        loom::model(|| {
            let lend = Arc::new(Lend::default());
            // Where the thread runs: HOME or the core it was moved to.
            let on = Arc::new(AtomicUsize::new(HOME));
            let guests: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
            let leader = |core: usize| {
                let (lend, on, guests) = (lend.clone(), on.clone(), guests.clone());
                loom::thread::spawn(move || {
                    lend.lend(
                        core,
                        &guests[core],
                        || {
                            on.store(core, Ordering::SeqCst);
                            true
                        },
                        || on.store(HOME, Ordering::SeqCst),
                    );
                })
            };
            let (a, b) = (leader(1), leader(2));
            if let Some(to) = lend.take_home() {
                on.store(HOME, Ordering::SeqCst);
                guests[to].fetch_sub(1, Ordering::SeqCst);
                lend.arrived();
            }
            a.join().unwrap();
            b.join().unwrap();
            let mark = lend.to.load(Ordering::SeqCst);
            let place = on.load(Ordering::SeqCst);
            assert_eq!(mark, place, "the thread is not where its mark says");
            for core in [1, 2] {
                let want = usize::from(mark == core);
                assert_eq!(
                    guests[core].load(Ordering::SeqCst),
                    want,
                    "guests of {core}"
                );
            }
        });
    }

    /// M5 against M2: a worker that stays runs its call on its own core, whatever a leader
    /// lending it meanwhile does, and no guest count is left behind.
    #[test]
    fn loom_a_worker_that_stays_runs_home() {
        loom::model(|| {
            let lend = Arc::new(Lend::default());
            let on = Arc::new(AtomicUsize::new(HOME));
            let guests = Arc::new(AtomicUsize::new(0));
            let leader = {
                let (lend, on, guests) = (lend.clone(), on.clone(), guests.clone());
                loom::thread::spawn(move || {
                    lend.lend(
                        1,
                        &guests,
                        || {
                            on.store(1, Ordering::SeqCst);
                            true
                        },
                        || on.store(HOME, Ordering::SeqCst),
                    );
                })
            };
            loop {
                if lend.take_home().is_some() {
                    on.store(HOME, Ordering::SeqCst);
                    guests.fetch_sub(1, Ordering::SeqCst);
                    lend.arrived();
                }
                if lend.stay() {
                    break;
                }
                loom::thread::yield_now();
            }
            assert_eq!(on.load(Ordering::SeqCst), HOME, "the call starts away");
            leader.join().unwrap();
            assert_eq!(on.load(Ordering::SeqCst), HOME, "moved during the call");
            lend.unstay();
            assert_eq!(lend.to.load(Ordering::SeqCst), HOME);
            assert_eq!(guests.load(Ordering::SeqCst), 0);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_lend_is_refused_while_lent_and_undone_when_the_move_fails() {
        let lend = Lend::default();
        let guests = AtomicUsize::new(0);
        assert_eq!(lend.lent_to(), None);
        assert!(!lend.lend(1, &guests, || false, || {}));
        assert_eq!(lend.lent_to(), None, "a failed move leaves the worker home");
        assert_eq!(guests.load(Ordering::Relaxed), 0);
        assert!(lend.lend(1, &guests, || true, || panic!("not moved home")));
        assert_eq!(lend.lent_to(), Some(1));
        assert_eq!(guests.load(Ordering::Relaxed), 1);
        assert!(!lend.lend(2, &guests, || panic!("moved twice"), || {}));
        assert_eq!(lend.take_home(), Some(1));
        assert_eq!(lend.lent_to(), None);
        assert!(
            !lend.lend(2, &guests, || panic!("lent on its way home"), || {}),
            "no lend before the worker is home"
        );
        lend.arrived();
        assert_eq!(lend.take_home(), None);
        // M5: a worker that stays is not lent, and is lent again once it stops staying.
        assert!(!lend.staying());
        assert!(lend.stay());
        assert!(
            lend.staying(),
            "a nested call finds the mark (WorkerCtx::staying)"
        );
        assert!(!lend.lend(1, &guests, || panic!("lent while it stays"), || {}));
        assert_eq!(lend.take_home(), None, "a worker that stays is home");
        assert_eq!(lend.lent_to(), None);
        lend.unstay();
        assert!(!lend.staying());
        assert!(lend.lend(1, &guests, || true, || panic!("not moved home")));
        assert!(!lend.stay(), "a lent worker goes home before it stays");
        assert!(!lend.staying());
        assert_eq!(lend.take_home(), Some(1));
        lend.arrived();
        assert!(lend.stay());
        lend.unstay();
        assert_eq!(lend.take_home(), None);
        lend.retire();
        assert!(!lend.lend(1, &guests, || panic!("an exited worker moved"), || {}));
        assert_eq!(lend.take_home(), None);
        assert_eq!(lend.lent_to(), None);
    }
}
