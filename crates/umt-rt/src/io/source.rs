//! Event sources of the application: a poll callback, and a group poll that tests many
//! requests at once (the paper's `group` callback; an MPI binding registers `MPI_Testsome`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::Deadline;
use super::per_core::{Counters, GroupPoll, IoCores};
use crate::latch::{Latch, Waiter};
use crate::registry::Registry;
use crate::sync::lock;
use crate::worker::with_current;

/// Something tasks wait for that only the application knows how to test.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use umt_rt::io::{EventSource, Source};
///
/// /// Waits until a counter reaches a value.
/// struct Counter(AtomicU64);
///
/// impl Source for Counter {
///     type Request = u64;
///     type Output = u64;
///     fn poll(&self, at_least: &mut u64) -> Option<u64> {
///         let now = self.0.load(Ordering::Acquire);
///         (now >= *at_least).then_some(now)
///     }
/// }
///
/// let counter = EventSource::new(Counter(AtomicU64::new(0)));
/// let rt = umt_rt::Runtime::builder().num_threads(2).build()?;
/// let seen = rt.install(|| {
///     umt_rt::join(
///         || counter.wait(3),
///         || for _ in 0..3 { counter.source().0.fetch_add(1, Ordering::Release); },
///     ).0
/// });
/// assert!(seen >= 3);
/// # Ok::<(), umt_rt::BuildError>(())
/// ```
pub trait Source: Send + Sync + 'static {
    /// What one task waits for (a request handle, a target value).
    type Request: Send + 'static;
    /// What the waiting task gets back.
    type Output: Send + 'static;

    /// Tests one request, without blocking: `Some` once it completed.
    fn poll(&self, request: &mut Self::Request) -> Option<Self::Output>;

    /// Tests all of `requests` at once (one system call or library call for all, where the
    /// source has one), and calls `done(index, output)` for each that completed. Each index at
    /// most once; indices out of range are ignored. The default polls them one by one.
    fn poll_group(
        &self,
        requests: &mut [Self::Request],
        done: &mut dyn FnMut(usize, Self::Output),
    ) {
        for (i, r) in requests.iter_mut().enumerate() {
            if let Some(out) = self.poll(r) {
                done(i, out);
            }
        }
    }
}

/// A [`Source`] tasks wait on ([`EventSource::wait`]). Each core's workers look at all the
/// requests waiting on it there with one [`Source::poll_group`] (aggregation), or, built with
/// [`EventSource::one_poll_per_request`], with one [`Source::poll`] each.
pub struct EventSource<S: Source> {
    source: Arc<S>,
    aggregate: bool,
    /// The group of each (runtime, core) where a task waited.
    groups: Mutex<Vec<CoreGroup<S>>>,
}

/// A group and the runtime and core it belongs to.
type CoreGroup<S> = (Weak<Registry>, usize, Arc<Group<S>>);

impl<S: Source> std::fmt::Debug for EventSource<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSource")
            .field("aggregate", &self.aggregate)
            .finish_non_exhaustive()
    }
}

/// The waiting requests of one source on one core.
struct Group<S: Source> {
    source: Arc<S>,
    aggregate: bool,
    state: Mutex<GroupState<S>>,
    /// In its core's list (under `state`'s lock when it changes).
    listed: AtomicBool,
}

struct GroupState<S: Source> {
    requests: Vec<S::Request>,
    slots: Vec<Arc<Slot<S::Output>>>,
}

/// Where a completed request's output lands, for its waiter.
struct Slot<O> {
    out: Mutex<Option<O>>,
    latch: Latch,
}

/// Longest sleep between two polls of a wait outside a runtime.
const OUTSIDE_BACKOFF_MAX: Duration = Duration::from_millis(1);

impl<S: Source> EventSource<S> {
    /// Waits on `source` with group polls (one call tests every request waiting on a core).
    pub fn new(source: S) -> Self {
        EventSource {
            source: Arc::new(source),
            aggregate: true,
            groups: Mutex::new(Vec::new()),
        }
    }

    /// Waits on `source` with one [`Source::poll`] per waiting request at each look: the way
    /// without aggregation, for comparison.
    pub fn one_poll_per_request(source: S) -> Self {
        EventSource {
            aggregate: false,
            ..EventSource::new(source)
        }
    }

    /// The source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// Waits until `request` completes and returns its output (steps W1–W6 of `io/README.md`).
    /// On a runtime's worker, other tasks run meanwhile and the core's workers test the
    /// request between them; outside, the caller polls it with growing sleeps.
    pub fn wait(&self, request: S::Request) -> S::Output {
        match self.wait_inner(request, None) {
            Ok(out) => out,
            Err(_) => unreachable!("umt-rt bug: a wait without a deadline expired"),
        }
    }

    /// [`EventSource::wait`] until `deadline`: the output if the request completed by then,
    /// else the request back, withdrawn from the core's polls, so that the caller can cancel
    /// it at its source (`MPI_Cancel`, say) or wait again. The request is tested at least once.
    /// A waiting worker wakes at the deadline; if it is running another task then (a wait
    /// runs the core's tasks meanwhile, as [`join`](crate::join) does), the call returns once
    /// that task returns.
    ///
    /// ```
    /// use std::time::Duration;
    /// use umt_rt::io::{Deadline, EventSource, Source};
    ///
    /// struct Never;
    /// impl Source for Never {
    ///     type Request = u32;
    ///     type Output = ();
    ///     fn poll(&self, _: &mut u32) -> Option<()> {
    ///         None
    ///     }
    /// }
    ///
    /// let never = EventSource::new(Never);
    /// let rt = umt_rt::Runtime::builder().num_threads(1).build()?;
    /// let back = rt.install(|| never.wait_until(7, Deadline::after(Duration::from_millis(5))));
    /// assert_eq!(back.unwrap_err().into_request(), 7);
    /// # Ok::<(), umt_rt::BuildError>(())
    /// ```
    pub fn wait_until(
        &self,
        request: S::Request,
        deadline: Deadline,
    ) -> Result<S::Output, Expired<S::Request>> {
        self.wait_inner(request, Some(deadline))
            .map_err(|request| Expired { request })
    }

    /// A wait, ended at `deadline` if any: `Err` gives the request back.
    fn wait_inner(
        &self,
        mut request: S::Request,
        deadline: Option<Deadline>,
    ) -> Result<S::Output, S::Request> {
        // A request already complete costs one test.
        if let Some(out) = self.source.poll(&mut request) {
            return Ok(out);
        }
        let expired = || deadline.is_some_and(|d| d.passed());
        let outside = with_current(|ctx| {
            let Some(ctx) = ctx else {
                return Err(request);
            };
            let reg = ctx.registry();
            let io = IoCores::of(reg);
            let core = io.core(ctx.core());
            let group = self.group(reg, ctx.core());
            let slot = Arc::new(Slot {
                out: Mutex::new(None),
                latch: Latch::new(Waiter::Worker(reg.clone(), ctx.index())),
            });
            // W1: the request joins the core's group, which joins the core's list if needed.
            let listed_now = {
                let mut st = lock(&group.state);
                st.requests.push(request);
                st.slots.push(slot.clone());
                !group.listed.swap(true, Ordering::AcqRel)
            };
            io.counters.waits.fetch_add(1, Ordering::Relaxed);
            let g: Arc<dyn GroupPoll> = group.clone();
            core.wait_source(g, listed_now);
            let _unwait = Unwait {
                core,
                group: &group,
                slot: &slot,
            };
            ctx.wait_io(
                &|| {
                    core.poll(reg);
                    slot.latch.is_set() || expired()
                },
                &|ctx| {
                    core.block(reg, ctx, deadline, &|| slot.latch.is_set() || expired());
                },
            );
            // W5a: a deadline came first; the request leaves its group unless a poll completed
            // it meanwhile (the poll stores the output before it sets the latch, under the
            // group's lock, so under that lock the request is either still in the group or
            // its output is in the slot).
            if let Some(request) = group.withdraw(&slot) {
                return Ok(Err(request));
            }
            Ok(Ok(lock(&slot.out).take()))
        });
        match outside {
            Ok(Ok(Some(out))) => Ok(out),
            Ok(Ok(None)) => {
                unreachable!("umt-rt bug: an event-source wait ended without an output")
            }
            Ok(Err(request)) => Err(request),
            Err(request) => self.wait_outside(request, deadline),
        }
    }

    fn wait_outside(
        &self,
        mut request: S::Request,
        deadline: Option<Deadline>,
    ) -> Result<S::Output, S::Request> {
        let mut sleep = Duration::from_micros(20);
        loop {
            if let Some(out) = self.source.poll(&mut request) {
                return Ok(out);
            }
            let left = deadline.map_or(sleep, |d| d.remaining());
            if left.is_zero() {
                return Err(request);
            }
            std::thread::sleep(sleep.min(left));
            sleep = (sleep * 2).min(OUTSIDE_BACKOFF_MAX);
        }
    }

    /// The group of `reg`'s `core`, made on first use; groups of dropped runtimes go.
    fn group(&self, reg: &Arc<Registry>, core: usize) -> Arc<Group<S>> {
        let mut groups = lock(&self.groups);
        groups.retain(|(r, _, _)| r.strong_count() > 0);
        if let Some((_, _, g)) = groups
            .iter()
            .find(|(r, c, _)| *c == core && std::ptr::eq(r.as_ptr(), Arc::as_ptr(reg)))
        {
            return g.clone();
        }
        let g = Arc::new(Group {
            source: self.source.clone(),
            aggregate: self.aggregate,
            state: Mutex::new(GroupState {
                requests: Vec::new(),
                slots: Vec::new(),
            }),
            listed: AtomicBool::new(false),
        });
        groups.push((Arc::downgrade(reg), core, g.clone()));
        g
    }
}

/// A request of [`EventSource::wait_until`] that had not completed by its deadline, given
/// back: it is no longer polled, so the caller may cancel it at its source or wait again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired<R> {
    request: R,
}

impl<R> Expired<R> {
    /// The request, to cancel or to wait on again.
    pub fn into_request(self) -> R {
        self.request
    }
}

impl<R> std::fmt::Display for Expired<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "the event did not come by the wait's deadline: the request is given back \
             (into_request) to cancel at its source or wait on again",
        )
    }
}

impl<R: std::fmt::Debug> std::error::Error for Expired<R> {}

/// Ends a source wait: counted off its core, and its request withdrawn if it never completed
/// (its waiter unwound).
struct Unwait<'a, S: Source> {
    core: &'a super::per_core::CoreIo,
    group: &'a Group<S>,
    slot: &'a Arc<Slot<S::Output>>,
}

impl<S: Source> Drop for Unwait<'_, S> {
    fn drop(&mut self) {
        self.group.withdraw(self.slot);
        self.core.unwait();
    }
}

impl<S: Source> Group<S> {
    /// Takes the request of `slot` out of the group, unless a poll completed it (its output is
    /// then in the slot: the poll stores it before it sets the latch, under the group's lock).
    fn withdraw(&self, slot: &Arc<Slot<S::Output>>) -> Option<S::Request> {
        if slot.latch.is_set() {
            return None;
        }
        let mut st = lock(&self.state);
        let i = st.slots.iter().position(|s| Arc::ptr_eq(s, slot))?;
        st.slots.swap_remove(i);
        Some(st.requests.swap_remove(i))
    }
}

impl<S: Source> GroupPoll for Group<S> {
    fn poll(&self, counters: &Counters) -> bool {
        let mut st = lock(&self.state);
        if st.requests.is_empty() {
            self.listed.store(false, Ordering::Release);
            return false;
        }
        let n = st.requests.len();
        let mut done: Vec<(usize, S::Output)> = Vec::new();
        if self.aggregate {
            counters.group_polls.fetch_add(1, Ordering::Relaxed);
            self.source
                .poll_group(&mut st.requests, &mut |i, out| done.push((i, out)));
        } else {
            counters
                .request_polls
                .fetch_add(n as u64, Ordering::Relaxed);
            for (i, r) in st.requests.iter_mut().enumerate() {
                if let Some(out) = self.source.poll(r) {
                    done.push((i, out));
                }
            }
        }
        // Highest index first, so that each swap_remove leaves the lower ones in place.
        done.sort_by_key(|d| std::cmp::Reverse(d.0));
        done.dedup_by_key(|d| d.0);
        for (i, out) in done {
            if i >= n {
                continue;
            }
            st.requests.swap_remove(i);
            let slot = st.slots.swap_remove(i);
            *lock(&slot.out) = Some(out);
            slot.latch.set();
        }
        true
    }

    fn listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }
}
