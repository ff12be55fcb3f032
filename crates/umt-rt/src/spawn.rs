//! Detached tasks' handles: the `JoinHandle` to wait for a task (a closure from
//! `Runtime::spawn`, a future from `Runtime::spawn_async`), to abort it, or to await it.

use std::any::Any;
use std::future::Future;
use std::panic::resume_unwind;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};

use crate::latch::{Waiter, wait_until};

/// Waits for a task started with [`Runtime::spawn`](crate::Runtime::spawn) or
/// [`Runtime::spawn_async`](crate::Runtime::spawn_async).
///
/// [`JoinHandle::join`] blocks (a worker runs other tasks meanwhile); awaiting the handle
/// suspends an async task instead. A panic of the task is re-raised in whoever waits, and so is
/// a [`JoinError::Cancelled`] of an aborted task ([`JoinHandle::try_join`] returns both as
/// errors instead). Dropping the handle detaches the task: it still runs.
#[derive(Debug)]
pub struct JoinHandle<T> {
    state: Arc<JoinState<T>>,
}

/// Why a task gave no value ([`JoinHandle::try_join`]).
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The task panicked; the payload is what it panicked with (`resume_unwind` re-raises it).
    #[error("the task panicked")]
    Panicked(Box<dyn Any + Send + 'static>),
    /// The task was aborted ([`JoinHandle::abort`]) or its runtime shut down while the future
    /// waited; a closure that was already running finished, and its result was dropped.
    #[error("the task was cancelled (aborted, or its runtime shut down) before it gave a value")]
    Cancelled,
}

/// What a task ended with.
#[derive(Debug)]
pub(crate) enum Outcome<T> {
    /// Its value.
    Value(T),
    /// Its panic's payload.
    Panicked(Box<dyn Any + Send + 'static>),
    /// Aborted, or dropped at shutdown.
    Cancelled,
}

impl<T> From<std::thread::Result<T>> for Outcome<T> {
    fn from(r: std::thread::Result<T>) -> Self {
        match r {
            Ok(v) => Outcome::Value(v),
            Err(p) => Outcome::Panicked(p),
        }
    }
}

/// What aborting a running future takes: a wake-up, so that its next poll drops it.
pub(crate) trait Abort: Send + Sync {
    /// Asks the task to stop (the flag is already set in its [`JoinState`]).
    fn abort(self: Arc<Self>);

    /// A joiner is about to wait for the task: if nobody else will ever end it (its runtime's
    /// workers are gone and it waits, or sits in a queue nobody runs), end it here, in the
    /// joiner's frame (A5 of `README.md`).
    fn end_unserved(self: Arc<Self>);
}

/// How many runtimes are in their last shutdown step (A5 of `README.md`): while none is, a
/// joiner looks no further than this one load (no lock, no reference count moved per poll of
/// a handle).
pub(crate) static UNSERVED_RUNTIMES: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug)]
pub(crate) struct JoinState<T> {
    done: AtomicBool,
    aborted: AtomicBool,
    inner: Mutex<Inner<T>>,
}

struct Inner<T> {
    result: Option<Outcome<T>>,
    waiter: Option<Waiter>,
    waker: Option<Waker>,
    /// A future's task, to wake it when it is aborted.
    task: Option<Weak<dyn Abort>>,
}

impl<T> std::fmt::Debug for Inner<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("finished", &self.result.is_some())
            .field("waiter", &self.waiter)
            .finish_non_exhaustive()
    }
}

impl<T> JoinState<T> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(JoinState {
            done: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                result: None,
                waiter: None,
                waker: None,
                task: None,
            }),
        })
    }

    fn lock(&self) -> crate::sync::Counted<std::sync::MutexGuard<'_, Inner<T>>> {
        crate::sync::lock_std(&self.inner)
    }

    /// Names the future's task that [`JoinHandle::abort`] must wake.
    pub(crate) fn set_task(&self, task: Weak<dyn Abort>) {
        self.lock().task = Some(task);
    }

    /// Whether the task was asked to stop.
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// Stores the task's outcome (a value of an aborted task is dropped: `Cancelled`) and
    /// wakes whoever waits. The first outcome wins.
    pub(crate) fn complete(&self, outcome: Outcome<T>) {
        let outcome = match outcome {
            // Dropped here, before whoever waits is woken (a panic in its drop is dropped too:
            // the completing thread may be a worker between two tasks).
            Outcome::Value(v) if self.is_aborted() => {
                crate::diag::run_quietly(move || drop(v));
                Outcome::Cancelled
            }
            o => o,
        };
        let (waiter, waker) = {
            let mut inner = self.lock();
            if self.done.load(Ordering::Relaxed) {
                return;
            }
            inner.result = Some(outcome);
            inner.task = None;
            self.done.store(true, Ordering::Release);
            (inner.waiter.take(), inner.waker.take())
        };
        if let Some(w) = waiter {
            w.wake();
        }
        if let Some(w) = waker {
            wake_foreign(w);
        }
    }

    /// Whether the task has finished.
    fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

impl<T> Drop for JoinState<T> {
    /// A value nobody took is dropped by whoever lets the state go last: the handle's owner,
    /// a worker finishing a detached task, which must go on to its next task, or a thread that
    /// drops a future's last waker (the timer, the reactor, another executor). A panic in that
    /// drop is dropped too, as tokio drops its tasks' outputs.
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(result) = inner.result.take() {
            crate::diag::run_quietly(move || drop(result));
        }
    }
}

/// Wakes `w`, another executor's waker (or one of ours called from a thread that must go on:
/// the timer, the reactor, a worker between two tasks): a panic in it is not the caller's,
/// and is dropped.
pub(crate) fn wake_foreign(w: Waker) {
    crate::diag::run_quietly(move || w.wake());
}

impl<T> JoinHandle<T> {
    pub(crate) fn new(state: Arc<JoinState<T>>) -> Self {
        JoinHandle { state }
    }

    /// `true` once the task has finished (with a value, a panic, or cancelled).
    pub fn is_finished(&self) -> bool {
        self.state.is_done()
    }

    /// Asks the task to stop: a queued closure never runs, a running closure finishes and its
    /// result is dropped, a future is polled no more (one that waits is queued to be dropped,
    /// one being polled is dropped when that poll returns). Its handle then gives
    /// [`JoinError::Cancelled`]. Nothing happens to a finished task.
    ///
    /// ```
    /// let rt = umt_rt::Runtime::new()?;
    /// let h = rt.spawn_async(std::future::pending::<()>());
    /// h.abort();
    /// assert!(matches!(h.try_join(), Err(umt_rt::JoinError::Cancelled)));
    /// # Ok::<(), umt_rt::BuildError>(())
    /// ```
    pub fn abort(&self) {
        self.state.aborted.store(true, Ordering::Release);
        let task = self.state.lock().task.as_ref().and_then(Weak::upgrade);
        if let Some(task) = task {
            task.abort();
        }
    }

    /// Waits for the task and returns its result; re-raises its panic, and panics with
    /// [`JoinError::Cancelled`] if it was cancelled.
    pub fn join(self) -> T {
        match self.try_join() {
            Ok(v) => v,
            Err(JoinError::Panicked(p)) => resume_unwind(p),
            Err(e @ JoinError::Cancelled) => resume_unwind(Box::new(e)),
        }
    }

    /// Waits for the task and returns its result, or why there is none.
    pub fn try_join(self) -> Result<T, JoinError> {
        self.end_unserved();
        {
            let mut inner = self.state.lock();
            if !self.state.is_done() {
                inner.waiter = Some(Waiter::current());
            }
        }
        wait_until(&|| self.state.is_done());
        take_outcome(&self.state)
    }
}

fn take_outcome<T>(state: &JoinState<T>) -> Result<T, JoinError> {
    match state.lock().result.take() {
        Some(Outcome::Value(v)) => Ok(v),
        Some(Outcome::Panicked(p)) => Err(JoinError::Panicked(p)),
        // Taken already: only a handle polled again after it returned `Ready` gets here.
        Some(Outcome::Cancelled) | None => Err(JoinError::Cancelled),
    }
}

impl<T> JoinHandle<T> {
    /// The task's result as a future, or why there is none: what awaiting a tokio
    /// `JoinHandle` gives, where awaiting this handle itself re-raises a panic and panics on
    /// a cancelled task. The `async` counterpart of [`JoinHandle::try_join`].
    ///
    /// ```
    /// let rt = umt_rt::Runtime::new()?;
    /// let h = rt.spawn_async(std::future::pending::<()>());
    /// h.abort();
    /// let why = rt.block_on(async move { h.result().await });
    /// assert!(matches!(why, Err(umt_rt::JoinError::Cancelled)));
    /// # Ok::<(), umt_rt::BuildError>(())
    /// ```
    pub fn result(self) -> JoinResult<T> {
        JoinResult { handle: self }
    }

    /// Ready with the task's outcome once it is done; until then keeps `cx`'s waker.
    fn poll_outcome(&self, cx: &mut Context<'_>) -> Poll<Result<T, JoinError>> {
        self.end_unserved();
        {
            let mut inner = self.state.lock();
            if !self.state.is_done() {
                inner.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
        }
        Poll::Ready(take_outcome(&self.state))
    }
}

impl<T> JoinHandle<T> {
    /// A5: a future nobody will poll or end any more (its runtime in its last shutdown step)
    /// is ended by its joiner: a future's drop during that step that joins another waiting
    /// future would otherwise wait for the very step it runs in.
    fn end_unserved(&self) {
        if self.state.is_done() || UNSERVED_RUNTIMES.load(Ordering::SeqCst) == 0 {
            return;
        }
        let task = self.state.lock().task.as_ref().and_then(Weak::upgrade);
        if let Some(task) = task {
            task.end_unserved();
        }
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;

    /// Ready with the task's value; re-raises its panic, and panics with
    /// [`JoinError::Cancelled`] if it was cancelled ([`JoinHandle::result`] gives both as
    /// an error instead).
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        self.poll_outcome(cx).map(|outcome| match outcome {
            Ok(v) => v,
            Err(JoinError::Panicked(p)) => resume_unwind(p),
            Err(e @ JoinError::Cancelled) => resume_unwind(Box::new(e)),
        })
    }
}

/// The future [`JoinHandle::result`] returns: the task's value, or why there is none. Polled
/// again after it gave its result, it gives [`JoinError::Cancelled`].
#[must_use = "futures do nothing unless awaited"]
#[derive(Debug)]
pub struct JoinResult<T> {
    handle: JoinHandle<T>,
}

impl<T> Future for JoinResult<T> {
    type Output = Result<T, JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.handle.poll_outcome(cx)
    }
}
