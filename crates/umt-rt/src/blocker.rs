//! The blocker role of a core's I/O waits (`io/README.md`, step W4): at most one waiting
//! worker of a core blocks in the kernel for the core's waits; the others stand by, parked,
//! until the blocker completes their wait (their latch notifies them) or gives the role up
//! (it notifies every standby waiter, and one takes the role). Loom-checked below: no standby
//! waiter sleeps through a hand-over.

use crate::sync::{AtomicBool, Mutex, Ordering, lock};

/// A core's blocker flag and its standby waiters.
#[derive(Debug, Default)]
pub(crate) struct BlockerRole {
    /// A worker of the core has the role.
    taken: AtomicBool,
    /// Waiting workers (slot indices) parked while another has the role.
    standby: Mutex<Vec<usize>>,
}

impl BlockerRole {
    pub(crate) fn new() -> Self {
        BlockerRole {
            taken: AtomicBool::new(false),
            standby: Mutex::new(Vec::new()),
        }
    }

    /// Takes the role; `false` if another worker has it.
    pub(crate) fn try_take(&self) -> bool {
        self.taken
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Gives the role up, then calls `notify` for every standby waiter: each looks again, and
    /// one takes the role. The flag is cleared before the list is read, and a waiter reads the
    /// flag after it joined the list (under the same lock): one of the two sees the other.
    pub(crate) fn release(&self, notify: impl Fn(usize)) {
        self.taken.store(false, Ordering::SeqCst);
        for &w in lock(&self.standby).iter() {
            notify(w);
        }
    }

    /// Stands by as worker `me` while another has the role: joins the list and parks
    /// (`park()`, which returns on a notification) unless the role was given up meanwhile or
    /// `done()`. Returns when the caller should look again.
    pub(crate) fn stand_by(&self, me: usize, done: &dyn Fn() -> bool, park: impl FnOnce()) {
        lock(&self.standby).push(me);
        if self.taken.load(Ordering::SeqCst) && !done() {
            park();
        }
        let mut standby = lock(&self.standby);
        if let Some(i) = standby.iter().position(|&w| w == me) {
            standby.swap_remove(i);
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use std::sync::Arc;

    use super::*;
    use crate::pool::Notifier;

    /// Two waiters of one core, each of whose events only the blocker's own look delivers
    /// (the harshest case: a standby waiter's event comes only once it holds the role): both
    /// finish whatever the interleaving. A lost hand-over leaves one parked forever, which
    /// loom reports as a deadlock.
    #[test]
    fn no_standby_waiter_sleeps_through_a_hand_over() {
        loom::model(|| {
            let role = Arc::new(BlockerRole::new());
            let done = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
            let notifiers: Arc<Mutex<Vec<Option<Arc<Notifier>>>>> =
                Arc::new(Mutex::new(vec![None, None]));
            let handles: Vec<_> = (0..2)
                .map(|me| {
                    let (role, done, notifiers) = (role.clone(), done.clone(), notifiers.clone());
                    loom::thread::spawn(move || {
                        let n = Arc::new(Notifier::new(loom::thread::current()));
                        lock(&notifiers)[me] = Some(n.clone());
                        let notify = |w: usize| {
                            // A waiter not yet registered has not parked either.
                            if let Some(n) = lock(&notifiers)[w].clone() {
                                n.notify();
                            }
                        };
                        while !done[me].load(Ordering::SeqCst) {
                            if role.try_take() {
                                // The block, then the look: it delivers this waiter's event.
                                done[me].store(true, Ordering::SeqCst);
                                role.release(notify);
                            } else {
                                role.stand_by(me, &|| done[me].load(Ordering::SeqCst), || n.wait());
                            }
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert!(lock(&role.standby).is_empty());
        });
    }
}
