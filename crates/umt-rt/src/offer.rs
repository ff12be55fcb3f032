//! Work offered outside the queues: a feature that has work a new participant could take (a
//! parallel loop with chunks not yet handed out) registers an offer while it runs, and the
//! core sees it as work through the same two questions it asks of its queues: "is there
//! any?" (the leader's L3, a worker about to park) and "give me some" (a worker's
//! `find_work`, after its deque, inbox, the woken futures, the injector and stealing). Steps
//! O1–O4 and their races in `README.md`, "Offers".
//!
//! An offer points into its owner's stack frame. The [`Gate`] makes that sound: a taker
//! enters before it looks and leaves after, and the owner closes the gate, which waits for
//! the takers inside, before its frame may go.

use crate::sync::{AtomicUsize, Ordering};

/// The entry of an offer: who is looking at it, and whether it is closed.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    /// [`CLOSED`] once closed, plus the takers inside.
    state: AtomicUsize,
}

/// The bit of [`Gate::state`] that says the gate is closed.
const CLOSED: usize = 1 << (usize::BITS - 1);

impl Gate {
    /// O2: enters, unless the gate is closed. Every successful `enter` must be followed by one
    /// [`Gate::leave`].
    pub(crate) fn enter(&self) -> bool {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            if s & CLOSED != 0 {
                return false;
            }
            match self
                .state
                .compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// O2: leaves after an `enter`.
    pub(crate) fn leave(&self) {
        self.state.fetch_sub(1, Ordering::Release);
    }

    /// O3: closes the gate and waits for the takers inside to leave. Afterwards nobody enters,
    /// and whatever a taker did inside (counting a job in its owner's scope) happened before
    /// this returns. A taker stays inside for a few instructions; one preempted there is
    /// waited for, yielding.
    pub(crate) fn close(&self) {
        let mut s = self.state.fetch_or(CLOSED, Ordering::AcqRel);
        while s & !CLOSED != 0 {
            crate::sync::yield_now();
            s = self.state.load(Ordering::Acquire);
        }
    }

    /// Whether the gate is closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.state.load(Ordering::Acquire) & CLOSED != 0
    }
}

#[cfg(not(loom))]
pub(crate) use list::{Offer, Offers};

#[cfg(not(loom))]
mod list {
    use std::sync::Arc;

    use arc_swap::ArcSwap;

    use crate::job::Job;
    use crate::sync::{AtomicUsize, Ordering};

    /// Work a feature offers to any worker of the runtime with nothing else to do.
    pub(crate) trait Offer: Send + Sync {
        /// Whether [`Offer::take`] may give a job now (a cheap look: the leader asks at each
        /// iteration, a worker before it parks). It must not enter the offer's gate: a leader
        /// at `SCHED_IDLE` preempted inside would hold up whoever closes it.
        fn has_work(&self) -> bool;
        /// A job for the calling worker (a new participant), or `None` if there is none.
        /// Workers only, never a leader (see `has_work`).
        fn take(&self) -> Option<Job>;
    }

    /// The offers of one runtime (O1). Readers take no lock: a leader at `SCHED_IDLE` looks
    /// at them, and one preempted while holding a lock would hold up every worker behind it
    /// (as it held up the Perf backend's drains, issue 37).
    #[derive(Default)]
    pub(crate) struct Offers {
        /// Offers listed: a look costs one load while there are none.
        count: AtomicUsize,
        list: ArcSwap<Vec<Arc<dyn Offer>>>,
    }

    impl Offers {
        /// O1: lists `offer` until [`Offers::remove`].
        pub(crate) fn add(&self, offer: Arc<dyn Offer>) {
            self.count.fetch_add(1, Ordering::AcqRel);
            self.list.rcu(|list| {
                let mut list = Vec::clone(list);
                list.push(offer.clone());
                list
            });
        }

        /// O4: takes `offer` off the list (nothing if it is not listed: only its owner adds
        /// and removes it, so that cannot change meanwhile).
        pub(crate) fn remove(&self, offer: &Arc<dyn Offer>) {
            if !self.list.load().iter().any(|o| Arc::ptr_eq(o, offer)) {
                return;
            }
            self.list.rcu(|list| {
                let mut list = Vec::clone(list);
                list.retain(|o| !Arc::ptr_eq(o, offer));
                list
            });
            self.count.fetch_sub(1, Ordering::AcqRel);
        }

        /// Whether any listed offer has work.
        pub(crate) fn has_work(&self) -> bool {
            self.count.load(Ordering::Acquire) > 0 && self.list.load().iter().any(|o| o.has_work())
        }

        /// A job from the newest listed offer that gives one (a loop nested in another's body
        /// must finish before its parent can).
        pub(crate) fn take(&self) -> Option<Job> {
            if self.count.load(Ordering::Acquire) == 0 {
                return None;
            }
            // Inside an offer's gate, whose owner waits for the takers by yielding: counted
            // as a runtime lock, so the taker does not step aside there (H3 of the directed
            // handoff) and hold the owner up until its 4 ms limit.
            let _held = crate::sync::Held::new();
            self.list.load().iter().rev().find_map(|o| o.take())
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::job::Job;

    struct Never;
    impl Offer for Never {
        fn has_work(&self) -> bool {
            true
        }
        fn take(&self) -> Option<Job> {
            None
        }
    }

    /// Listing and withdrawing keep the count in step, also for an offer withdrawn twice or
    /// never listed; a look with none listed finds no work.
    #[test]
    fn offers_are_listed_until_withdrawn() {
        let offers = Offers::default();
        assert!(!offers.has_work());
        let a: Arc<dyn Offer> = Arc::new(Never);
        let b: Arc<dyn Offer> = Arc::new(Never);
        offers.remove(&a);
        offers.add(a.clone());
        offers.add(b.clone());
        assert!(offers.has_work());
        assert!(offers.take().is_none());
        offers.remove(&a);
        offers.remove(&a);
        assert!(offers.has_work());
        offers.remove(&b);
        assert!(!offers.has_work());
        offers.add(a);
        assert!(offers.has_work());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicBool;

    /// O2/O3: a taker that got in did its work (here: counted a job) before `close` returns,
    /// and one that did not get in does nothing; so after `close` the owner sees every job
    /// a taker made.
    #[test]
    fn loom_a_taker_inside_is_waited_for_by_close() {
        loom::model(|| {
            let gate = Arc::new(Gate::default());
            let counted = Arc::new(AtomicBool::new(false));
            let taker = {
                let (gate, counted) = (gate.clone(), counted.clone());
                loom::thread::spawn(move || {
                    if gate.enter() {
                        counted.store(true, Ordering::Relaxed);
                        gate.leave();
                        true
                    } else {
                        false
                    }
                })
            };
            gate.close();
            let seen = counted.load(Ordering::Relaxed);
            assert!(gate.is_closed());
            let entered = taker.join().unwrap();
            assert_eq!(entered, seen, "a job counted after close returned, or lost");
            assert!(!gate.enter(), "a closed gate lets nobody in");
        });
    }
}
