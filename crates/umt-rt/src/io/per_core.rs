//! A core's waits: its ring, its waiting tasks, the blocker and the standby waiters, its event
//! sources; the look at them (steps W2, W5) and the block (W4).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use umt_sys::clock::FastClock;
use umt_sys::uring::Ring;

use super::{DEADLINE_TAG, Deadline, IoStats, Op};
use crate::blocker::BlockerRole;
use crate::diag::Warning;
use crate::registry::{Extension, Feature, Hooks, Registry};
use crate::sync::lock;
use crate::worker::{WorkerCtx, with_current};

/// Entries of a core's ring.
const RING_ENTRIES: u32 = 256;
/// Longest block of a core's blocker (step W4), a safety net only: with a monitor, new work
/// reaches the core through the leader, which sees the block; without one, a blocked waiter
/// leaves new work to other cores, as a blocking system call would.
const BLOCK_LIMIT: Duration = Duration::from_millis(50);
/// Longest sleep between two group polls of a blocker whose core waits on event sources.
const GROUP_BACKOFF_MAX: Duration = Duration::from_millis(1);

/// The waits of all cores of a runtime.
pub(crate) struct IoCores {
    cores: Box<[CachePadded<CoreIo>]>,
    pub(crate) counters: Counters,
    clock: FastClock,
    interval_ns: u64,
}

/// What [`IoStats`] reports.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) waits: AtomicU64,
    pub(crate) completions: AtomicU64,
    pub(crate) polls: AtomicU64,
    pub(crate) blocks: AtomicU64,
    pub(crate) group_polls: AtomicU64,
    pub(crate) request_polls: AtomicU64,
    pub(crate) fallback_waits: AtomicU64,
}

/// A group of waiting requests of one event source on one core (`source.rs`).
pub(crate) trait GroupPoll: Send + Sync {
    /// Tests the waiting requests and completes those that are done. Returns `false` (and
    /// marks itself unlisted) when none waits: the core then drops it from its list.
    fn poll(&self, counters: &Counters) -> bool;
    /// Whether the group is in its core's list (a waiter may list it again after `poll`
    /// returned `false`).
    fn listed(&self) -> bool;
}

/// One core's waits.
pub(crate) struct CoreIo {
    /// Made by the first ring wait of the core; `None`: io_uring is unavailable.
    ring: OnceLock<Option<Ring>>,
    /// Tasks of this core waiting (ring and sources): scheduling points look only if any.
    waits: AtomicUsize,
    /// Of those, ring operations not yet reaped by their waiter.
    ring_waits: AtomicUsize,
    /// When the last look started (the clock's nanoseconds).
    last_poll: AtomicU64,
    /// Which worker of this core blocks in the kernel for the core's waits, and who stands
    /// by (W4).
    blocker: BlockerRole,
    /// Event-source groups with waiting requests on this core.
    groups: Mutex<Vec<Arc<dyn GroupPoll>>>,
    groups_len: AtomicUsize,
    /// The blocker's current sleep between group polls (nanoseconds).
    backoff_ns: AtomicU64,
}

impl IoCores {
    fn new(cores: usize, interval: Duration) -> IoCores {
        IoCores {
            cores: (0..cores)
                .map(|_| {
                    CachePadded::new(CoreIo {
                        ring: OnceLock::new(),
                        waits: AtomicUsize::new(0),
                        ring_waits: AtomicUsize::new(0),
                        last_poll: AtomicU64::new(0),
                        blocker: BlockerRole::new(),
                        groups: Mutex::new(Vec::new()),
                        groups_len: AtomicUsize::new(0),
                        backoff_ns: AtomicU64::new(0),
                    })
                })
                .collect(),
            counters: Counters::default(),
            clock: FastClock::new(),
            interval_ns: interval.as_nanos().min(u64::MAX as u128) as u64,
        }
    }

    /// The waits of `reg`, made on first use.
    pub(crate) fn of(reg: &Registry) -> &IoCores {
        reg.extension_or_init(|| IoCores::new(reg.cores(), reg.config.io_poll_interval))
    }

    pub(crate) fn core(&self, core: usize) -> &CoreIo {
        &self.cores[core]
    }

    pub(crate) fn stats(&self) -> IoStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IoStats {
            waits: get(&c.waits),
            completions: get(&c.completions),
            polls: get(&c.polls),
            blocks: get(&c.blocks),
            group_polls: get(&c.group_polls),
            request_polls: get(&c.request_polls),
            fallback_waits: get(&c.fallback_waits),
        }
    }
}

impl Extension for IoCores {
    const FEATURE: Feature = Feature::Io;
}

impl Hooks for IoCores {
    /// Step W2 at a scheduling point of any task of `core` (`WorkerCtx::execute`, through
    /// `Registry::sched_point`): a look at the core's waits if some task waits and the last
    /// look is old enough.
    #[inline]
    fn sched_point(&self, reg: &Registry, core: usize) {
        self.cores[core].poll(reg);
    }
}

/// Counts a wait that blocks its caller in a system call instead (W6).
pub(crate) fn fallback() {
    with_current(|ctx| {
        if let Some(io) = ctx.and_then(|c| c.registry().extension::<IoCores>()) {
            io.counters.fallback_waits.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// Removes a ring wait from its core's counts when its waiter is done with it; if the waiter
/// leaves early (a task it ran unwound), first waits, blocking, until the kernel is done with
/// the operation's memory.
pub(crate) struct RingWait<'a> {
    reg: &'a Registry,
    core: &'a CoreIo,
    op: &'a Op,
}

impl Drop for RingWait<'_> {
    fn drop(&mut self) {
        while !self.op.latch.is_set() {
            if let Some(ring) = self.core.ring.get().and_then(Option::as_ref) {
                let _ = ring.wait(Some(Duration::from_millis(10)));
            }
            self.core.poll_now(self.reg);
        }
        self.core.ring_waits.fetch_sub(1, Ordering::Release);
        self.core.waits.fetch_sub(1, Ordering::Release);
    }
}

impl CoreIo {
    /// The core's ring, made on first use; `None` (said once) where io_uring is unavailable.
    pub(crate) fn ring(&self, reg: &Registry) -> Option<&Ring> {
        self.ring
            .get_or_init(|| match Ring::new(RING_ENTRIES) {
                Ok(ring) => Some(ring),
                Err(e) => {
                    reg.warnings.warn(Warning::Io, || {
                        format!(
                            "I/O waits block their worker in the system call instead of \
                             letting the scheduler choose: {e}"
                        )
                    });
                    None
                }
            })
            .as_ref()
    }

    /// Step W1: counts a ring wait of this core until the returned guard drops.
    pub(crate) fn register<'a>(&'a self, reg: &'a Registry, op: &'a Op) -> RingWait<'a> {
        self.waits.fetch_add(1, Ordering::AcqRel);
        self.ring_waits.fetch_add(1, Ordering::AcqRel);
        IoCores::of(reg)
            .counters
            .waits
            .fetch_add(1, Ordering::Relaxed);
        RingWait {
            reg,
            core: self,
            op,
        }
    }

    /// Counts a source wait of this core; [`CoreIo::unwait`] ends it.
    pub(crate) fn wait_source(&self, group: Arc<dyn GroupPoll>, newly_listed: bool) {
        self.waits.fetch_add(1, Ordering::AcqRel);
        if newly_listed {
            let mut groups = lock(&self.groups);
            groups.push(group);
            self.groups_len.store(groups.len(), Ordering::Release);
        }
    }

    pub(crate) fn unwait(&self) {
        self.waits.fetch_sub(1, Ordering::Release);
    }

    /// Step W2: a look at the core's waits, if any and if the last one is older than the
    /// runtime's poll interval (one look per interval, whichever worker of the core wins it).
    #[inline]
    pub(crate) fn poll(&self, reg: &Registry) {
        if self.waits.load(Ordering::Acquire) == 0 {
            return;
        }
        let io = IoCores::of(reg);
        let now = io.clock.now_ns();
        let last = self.last_poll.load(Ordering::Relaxed);
        if now.wrapping_sub(last) < io.interval_ns
            || self
                .last_poll
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        self.poll_now(reg);
    }

    /// Steps W3 and W5: hands queued requests to the kernel, reaps every completion of the
    /// ring (one pass serves all the core's waiters), and group-polls every event source with
    /// waiting requests.
    pub(crate) fn poll_now(&self, reg: &Registry) {
        let io = IoCores::of(reg);
        io.counters.polls.fetch_add(1, Ordering::Relaxed);
        if let Some(ring) = self.ring.get().and_then(Option::as_ref) {
            // A failed submission stays queued for the next look (EAGAIN, EBUSY).
            let _ = ring.submit();
            ring.reap(|data, result| {
                // SAFETY: every entry pushed on this ring carries the address of an `Op` (with
                // `DEADLINE_TAG` for its deadline's entry) whose waiter keeps it alive until
                // its latch is set (`RingWait`), which takes all of its completions, and `reap`
                // hands each completion out once, so the `Op` is alive here. It may be freed as
                // soon as the last one sets its latch, after which it is not touched.
                let op = unsafe { &*((data & !DEADLINE_TAG) as *const Op) };
                if data & DEADLINE_TAG != 0 {
                    op.settle();
                } else {
                    io.counters.completions.fetch_add(1, Ordering::Relaxed);
                    op.complete(result);
                }
            });
        }
        if self.groups_len.load(Ordering::Acquire) == 0 {
            return;
        }
        let groups: Vec<Arc<dyn GroupPoll>> = lock(&self.groups).clone();
        let mut stale = false;
        for g in &groups {
            stale |= !g.poll(&io.counters);
        }
        if stale {
            // A group marked itself unlisted under its own lock; one that a waiter listed
            // again meanwhile is not pushed twice (it found itself still here).
            let mut list = lock(&self.groups);
            list.retain(|g| g.listed());
            self.groups_len.store(list.len(), Ordering::Release);
        }
    }

    /// Step W4, for a worker of this core whose wait found nothing else to run: the first
    /// becomes the core's blocker and blocks in the kernel (the ring's wait, or a sleep between
    /// group polls) until something completes, then looks; the others park until the blocker
    /// completes their wait or leaves.
    ///
    /// A waiter with a `deadline` (a source wait's: a ring wait's deadline is a completion of
    /// the ring itself) blocks or stands by no longer than until it.
    pub(crate) fn block(
        &self,
        reg: &Registry,
        ctx: &WorkerCtx,
        deadline: Option<Deadline>,
        done: &dyn Fn() -> bool,
    ) {
        if self.blocker.try_take() {
            if !done() {
                let io = IoCores::of(reg);
                io.counters.blocks.fetch_add(1, Ordering::Relaxed);
                let timeout = if self.groups_len.load(Ordering::Acquire) > 0 {
                    let b = self
                        .backoff_ns
                        .load(Ordering::Relaxed)
                        .max(io.interval_ns)
                        .max(1_000);
                    self.backoff_ns.store(
                        (2 * b).min(GROUP_BACKOFF_MAX.as_nanos() as u64),
                        Ordering::Relaxed,
                    );
                    Duration::from_nanos(b).min(BLOCK_LIMIT)
                } else {
                    BLOCK_LIMIT
                };
                let timeout = deadline.map_or(timeout, |d| timeout.min(d.remaining()));
                let ring = self.ring.get().and_then(Option::as_ref);
                match ring {
                    Some(ring) if self.ring_waits.load(Ordering::Acquire) > 0 => {
                        let _ = ring.wait(Some(timeout));
                    }
                    _ => std::thread::sleep(timeout),
                }
                self.last_poll.store(io.clock.now_ns(), Ordering::Relaxed);
                let before = io.counters.completions.load(Ordering::Relaxed);
                self.poll_now(reg);
                if io.counters.completions.load(Ordering::Relaxed) != before {
                    self.backoff_ns.store(0, Ordering::Relaxed);
                }
            }
            // Hand over: every standby waiter looks again, one becomes the blocker.
            self.blocker.release(|w| reg.notify(w));
        } else {
            // A standby waiter with a deadline wakes at it: the blocker may sleep longer (up
            // to `BLOCK_LIMIT` in a ring wait), and nothing else would wake this one.
            self.blocker.stand_by(ctx.index(), done, || match deadline {
                Some(d) => ctx.park_notified_until(d.instant()),
                None => ctx.park_notified(),
            });
        }
    }
}
