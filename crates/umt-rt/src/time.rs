//! Timers for futures: [`sleep`], [`sleep_until`] and [`timeout`]. They work in any executor
//! (umt's, tokio's, [`block_on`](crate::block_on)): one timer thread per process, started at
//! the first timer that has to wait, keeps the deadlines in a heap and wakes each future when
//! its deadline passes. Its steps:
//!
//! 1. **T1 — register.** A [`Sleep`] polled before its deadline stores its waker under an id
//!    and pushes `(deadline, id)` on the heap; a later poll replaces the waker (a future moved
//!    to another task), and wakes the timer thread only when the new deadline is the
//!    earliest.
//! 2. **T2 — fire.** The timer thread pops every entry whose deadline passed, takes the waker
//!    stored under its id, and wakes it outside the lock; then sleeps on a condition variable
//!    until the earliest deadline left, or until a registration earlier than it.
//! 3. **T3 — drop.** A `Sleep` dropped before it fired removes its waker; its heap entry is
//!    skipped when popped (its id has no waker), or removed when dropped entries make up
//!    most of the heap.
//!
//! Races: a poll that registers just after the thread computed its timeout notifies the
//! condition variable under the lock, so the thread sees the earlier deadline (it waits with
//! the lock released atomically). A waker fired while its future is being polled again only
//! makes one more poll, which finds the deadline passed. If the timer thread cannot start
//! (said once), a `Sleep` blocks its poller in `std::thread::sleep` instead: on a worker of a
//! monitored runtime that is an ordinary block, and the core's spare runs the other tasks.
//!
//! ```
//! use std::time::Duration;
//! use umt_rt::time::{sleep, timeout};
//!
//! umt_rt::block_on(async {
//!     sleep(Duration::from_millis(1)).await;
//!     assert_eq!(timeout(Duration::from_secs(10), async { 7 }).await, Ok(7));
//!     let never = std::future::pending::<()>();
//!     assert!(timeout(Duration::from_millis(1), never).await.is_err());
//! });
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The timer thread's state.
#[derive(Default)]
struct Timers {
    /// Deadlines by time, each with its sleep's id; entries of dropped sleeps stay until popped.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    /// The waker of each registered sleep that has not fired or been dropped.
    wakers: HashMap<u64, Waker>,
    next_id: u64,
}

struct Driver {
    timers: Mutex<Timers>,
    changed: Condvar,
}

impl Driver {
    fn lock(&self) -> MutexGuard<'_, Timers> {
        self.timers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// T2: the timer thread.
    fn run(&self) {
        let mut timers = self.lock();
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            while let Some(&Reverse((at, id))) = timers.heap.peek() {
                if at > now {
                    break;
                }
                timers.heap.pop();
                if let Some(w) = timers.wakers.remove(&id) {
                    due.push(w);
                }
            }
            if !due.is_empty() {
                drop(timers);
                // Any executor's waker: its panic must not stop every timer.
                due.into_iter().for_each(crate::spawn::wake_foreign);
                timers = self.lock();
                continue;
            }
            timers = match timers.heap.peek() {
                Some(&Reverse((at, _))) => {
                    let wait = at.saturating_duration_since(now);
                    self.changed
                        .wait_timeout(timers, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => self.changed.wait(timers).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}

/// The process's timer thread, started on first use; `None` if it could not start.
fn driver() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Option<&'static Driver>> = OnceLock::new();
    *DRIVER.get_or_init(|| {
        let driver: &'static Driver = Box::leak(Box::new(Driver {
            timers: Mutex::new(Timers::default()),
            changed: Condvar::new(),
        }));
        match std::thread::Builder::new()
            .name("umt-timer".into())
            .spawn(move || driver.run())
        {
            Ok(_) => Some(driver),
            Err(e) => {
                crate::diag::emit(&format!(
                    "umt-rt: cannot start the timer thread ({e}): timers block the task \
                     that waits on them instead"
                ));
                None
            }
        }
    })
}

/// A future that is ready at its deadline ([`sleep`], [`sleep_until`]).
#[derive(Debug)]
#[must_use = "a sleep does nothing unless awaited"]
pub struct Sleep {
    deadline: Instant,
    /// Its id in the timer thread's table once registered (T1).
    id: Option<u64>,
}

impl Sleep {
    /// When it is ready.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether its deadline has passed.
    pub fn is_elapsed(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// A future ready `duration` from now.
pub fn sleep(duration: Duration) -> Sleep {
    let now = Instant::now();
    sleep_until(now.checked_add(duration).unwrap_or(now + FAR))
}

/// A future ready at `deadline` (at once if it has passed).
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep { deadline, id: None }
}

/// Beyond this a deadline counts as never (about 30 years: `Instant` cannot hold `MAX`).
const FAR: Duration = Duration::from_secs(1 << 30);

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        let Some(driver) = driver() else {
            // No timer thread: block until the deadline (see the module's docs).
            std::thread::sleep(self.deadline.saturating_duration_since(Instant::now()));
            return Poll::Ready(());
        };
        let _held = crate::sync::Held::new();
        let mut timers = driver.lock();
        let fresh = self.id.is_none();
        let id = match self.id {
            Some(id) => id,
            None => {
                let id = timers.next_id;
                timers.next_id += 1;
                let earliest = timers.heap.peek().is_none_or(|e| self.deadline < e.0.0);
                timers.heap.push(Reverse((self.deadline, id)));
                if earliest {
                    driver.changed.notify_one();
                }
                self.id = Some(id);
                id
            }
        };
        match timers.wakers.get_mut(&id) {
            Some(w) if w.will_wake(cx.waker()) => {}
            Some(w) => w.clone_from(cx.waker()),
            // Fired (only the timer thread takes a registered waker) between the deadline
            // check above and this lock: its deadline has passed.
            None if !fresh => return Poll::Ready(()),
            None => {
                timers.wakers.insert(id, cx.waker().clone());
            }
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    /// T3: a sleep that never fired leaves nothing to wake. When dropped sleeps make up most
    /// of the heap (a `timeout` per request that mostly finishes in time), it is rebuilt
    /// from the live entries.
    fn drop(&mut self) {
        let Some(id) = self.id else {
            return;
        };
        if let Some(driver) = driver() {
            let _held = crate::sync::Held::new();
            let mut timers = driver.lock();
            timers.wakers.remove(&id);
            if timers.heap.len() > 2 * timers.wakers.len() + 64 {
                let Timers { heap, wakers, .. } = &mut *timers;
                heap.retain(|e| wakers.contains_key(&e.0.1));
            }
        }
    }
}

/// The error of a [`timeout`] whose deadline passed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the deadline passed before the future was ready")]
pub struct Elapsed;

/// A future with a deadline ([`timeout`]).
#[derive(Debug)]
#[must_use = "a timeout does nothing unless awaited"]
pub struct Timeout<F> {
    future: Pin<Box<F>>,
    sleep: Sleep,
}

/// Runs `future` until it is ready or `duration` has passed, whichever comes first: `Ok` with
/// its output, or `Err(Elapsed)` (the future is then dropped with the `Timeout`).
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    Timeout {
        future: Box::pin(future),
        sleep: sleep(duration),
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(v) = self.future.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match Pin::new(&mut self.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wakers still registered with the timer thread.
    fn registered() -> usize {
        driver().map_or(0, |d| d.lock().wakers.len())
    }

    #[test]
    fn a_dropped_sleep_leaves_no_waker_and_a_fired_one_is_ready() {
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut long = sleep(Duration::from_secs(3600));
        assert!(Pin::new(&mut long).poll(&mut cx).is_pending());
        assert!(registered() >= 1);
        let before = registered();
        drop(long);
        assert_eq!(registered(), before - 1);
        let mut past = sleep_until(Instant::now());
        assert!(Pin::new(&mut past).poll(&mut cx).is_ready());
    }
}
