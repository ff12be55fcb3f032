//! Detached tasks: `Runtime::spawn` and the `JoinHandle` to wait for them.

use std::future::Future;
use std::panic::resume_unwind;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::latch::{Waiter, wait_until};

/// Waits for a task started with [`Runtime::spawn`](crate::Runtime::spawn).
///
/// [`JoinHandle::join`] blocks (a worker runs other tasks meanwhile); awaiting the handle
/// suspends an async task instead. A panic of the task is re-raised in whoever waits.
/// Dropping the handle detaches the task: it still runs.
#[derive(Debug)]
pub struct JoinHandle<T> {
    state: Arc<JoinState<T>>,
}

#[derive(Debug)]
pub(crate) struct JoinState<T> {
    done: AtomicBool,
    inner: Mutex<Inner<T>>,
}

#[derive(Debug)]
struct Inner<T> {
    result: Option<std::thread::Result<T>>,
    waiter: Option<Waiter>,
    waker: Option<Waker>,
}

impl<T> JoinState<T> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(JoinState {
            done: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                result: None,
                waiter: None,
                waker: None,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<T>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores the task's outcome and wakes whoever waits.
    pub(crate) fn complete(&self, result: std::thread::Result<T>) {
        let (waiter, waker) = {
            let mut inner = self.lock();
            inner.result = Some(result);
            self.done.store(true, Ordering::Release);
            (inner.waiter.take(), inner.waker.take())
        };
        if let Some(w) = waiter {
            w.wake();
        }
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> JoinState<T> {
    /// Whether the task has finished.
    fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

impl<T> JoinHandle<T> {
    pub(crate) fn new(state: Arc<JoinState<T>>) -> Self {
        JoinHandle { state }
    }

    /// `true` once the task has finished.
    pub fn is_finished(&self) -> bool {
        self.state.is_done()
    }

    /// Waits for the task and returns its result; re-raises its panic.
    pub fn join(self) -> T {
        {
            let mut inner = self.state.lock();
            if !self.state.is_done() {
                inner.waiter = Some(Waiter::current());
            }
        }
        wait_until(&|| self.state.is_done());
        take_result(&self.state)
    }
}

fn take_result<T>(state: &JoinState<T>) -> T {
    match state.lock().result.take() {
        Some(Ok(v)) => v,
        Some(Err(p)) => resume_unwind(p),
        None => panic!("JoinHandle polled after completion"),
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        {
            let mut inner = self.state.lock();
            if !self.state.is_done() {
                inner.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
        }
        Poll::Ready(take_result(&self.state))
    }
}
