//! A scope's count of unfinished tasks (plus one for its body), and the mark by which the body
//! waits for its own 1 mid-scope (`Scope::wait`, steps W1–W3 in `README.md`). One word, so no
//! decrement can miss the mark. Loom-checked.

// Under loom only the model below uses it (the scope itself is not built there).
#![cfg_attr(loom, allow(dead_code))]

use crate::sync::{AtomicUsize, Ordering};

/// The body waits in `Scope::wait` (far above any count of tasks).
const WAITING: usize = 1 << (usize::BITS - 1);

/// What a task's completion must do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Completed<W> {
    /// It was the last one, the body's end included: set the scope's latch.
    Last,
    /// It left only the body, which waits: wake this (taken before the mark was cleared; the
    /// scope may be gone once it is).
    WakeBody(W),
    /// Nothing.
    Other,
}

/// Unfinished tasks plus one for the body, and [`WAITING`].
#[derive(Debug)]
pub(crate) struct ScopeCount(AtomicUsize);

impl ScopeCount {
    /// The body's 1.
    pub(crate) fn new() -> Self {
        ScopeCount(AtomicUsize::new(1))
    }

    /// A task (or the body's own end, for [`ScopeCount::complete`]) to wait for.
    pub(crate) fn add(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    /// Unfinished tasks, plus one while the body runs.
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed) & !WAITING
    }

    /// W2: one task (or the body) finished. `waiter` is called, before the mark is cleared,
    /// only when the body waits and this leaves it alone.
    pub(crate) fn complete<W>(&self, waiter: impl FnOnce() -> W) -> Completed<W> {
        let old = self.0.fetch_sub(1, Ordering::SeqCst);
        if old == 1 {
            Completed::Last
        } else if old == 2 | WAITING {
            let w = waiter();
            self.0.fetch_and(!WAITING, Ordering::SeqCst);
            Completed::WakeBody(w)
        } else {
            Completed::Other
        }
    }

    /// W1: the body marks that it waits; `true` when there is nothing to wait for (the mark
    /// is taken back at once). A nested wait finds the mark set and waits for the same.
    pub(crate) fn mark(&self) -> bool {
        if self.0.fetch_or(WAITING, Ordering::SeqCst) == 1 {
            // Nothing runs, and nothing can spawn.
            self.0.fetch_and(!WAITING, Ordering::SeqCst);
            return true;
        }
        false
    }

    /// W3: only the body is left and the task of W2 has cleared the mark (and touches the
    /// scope no more).
    pub(crate) fn body_alone(&self) -> bool {
        self.0.load(Ordering::SeqCst) == 1
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::AtomicBool;
    use loom::sync::Arc;

    /// W1–W3 with two tasks finishing while the body marks: if the body had to wait, exactly
    /// one completion asks to wake it (no lost wake-up, no second one), and that completion
    /// takes its waiter before the body can leave.
    #[test]
    fn loom_the_last_task_wakes_a_waiting_body_once_and_before_it_leaves() {
        loom::model(|| {
            let count = Arc::new(ScopeCount::new());
            count.add();
            count.add();
            let left = Arc::new(AtomicBool::new(false));
            let task = || {
                let (count, left) = (count.clone(), left.clone());
                loom::thread::spawn(move || {
                    count.complete(|| assert!(!left.load(Ordering::SeqCst), "the body left"))
                })
            };
            let (a, b) = (task(), task());
            let waited = !count.mark();
            if waited {
                while !count.body_alone() {
                    loom::thread::yield_now();
                }
            }
            left.store(true, Ordering::SeqCst);
            let done = [a.join().unwrap(), b.join().unwrap()];
            let wakes = done
                .iter()
                .filter(|d| **d == Completed::WakeBody(()))
                .count();
            assert_eq!(wakes, usize::from(waited));
            assert!(
                !done.contains(&Completed::Last),
                "the body's 1 is still counted"
            );
            assert_eq!(count.complete(|| ()), Completed::Last);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_body_alone_needs_no_wait_and_the_last_task_wakes_a_waiting_one() {
        let count = ScopeCount::new();
        assert!(count.mark());
        assert!(count.body_alone());
        count.add();
        count.add();
        assert!(!count.mark());
        assert_eq!(count.count(), 3);
        assert_eq!(count.complete(|| 7), Completed::Other);
        assert!(!count.body_alone());
        assert_eq!(count.complete(|| 7), Completed::WakeBody(7));
        assert!(count.body_alone());
        assert_eq!(count.complete(|| 7), Completed::Last);
    }
}
