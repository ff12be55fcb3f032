//! `join`: run two closures, potentially in parallel. Its pieces live here together: the
//! second closure waits in the joining frame as a [`StackJob`], and a [`JoinLatch`] tells the
//! joiner when a thief has run it.

use std::cell::UnsafeCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::job::Job;
use crate::worker::{WorkerCtx, with_current};

/// Runs `a` and `b`, potentially in parallel, and returns both results. `b` is offered to
/// other workers while the caller runs `a`; if nobody took it, the caller runs it too. Outside
/// a worker, on the global runtime (`global.rs`: built on first use, or by
/// [`Builder::build_global`](crate::Builder::build_global)).
///
/// A panic in either is propagated after both have finished.
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    with_current(
        |ctx| match (ctx, ctx.is_none().then(crate::global::get).flatten()) {
            (Some(ctx), _) => join_on_worker(ctx, a, b),
            (None, Some(rt)) => rt.join(a, b),
            // The global runtime could not start (said on stderr).
            (None, None) => (a(), b()),
        },
    )
}

/// What [`join_context`]'s closures are told: rayon's `FnContext`.
#[derive(Debug, Clone, Copy)]
pub struct FnContext {
    migrated: bool,
}

impl FnContext {
    /// Whether the closure runs on another thread than the one that called
    /// [`join_context`]: the second one taken by another worker (stolen, or run by the
    /// core's spare), or both, when the call came from outside the runtime.
    pub fn migrated(&self) -> bool {
        self.migrated
    }
}

/// [`join`], with each closure told whether it runs on another thread than the caller
/// ([`FnContext::migrated`]): rayon's `join_context`, for code that splits further only
/// when its work was stolen.
///
/// ```
/// let rt = umt_rt::Runtime::builder().num_threads(1).build()?;
/// let (a, _) = rt.install(|| umt_rt::join_context(|cx| cx.migrated(), |_| ()));
/// assert!(!a, "the first closure runs on the worker that called join_context");
/// # Ok::<(), umt_rt::BuildError>(())
/// ```
pub fn join_context<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce(FnContext) -> RA + Send,
    B: FnOnce(FnContext) -> RB + Send,
    RA: Send,
    RB: Send,
{
    let caller = std::thread::current().id();
    let context = move || FnContext {
        migrated: std::thread::current().id() != caller,
    };
    join(move || a(context()), move || b(context()))
}

fn join_on_worker<A, B, RA, RB>(ctx: &WorkerCtx, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    let job_b = StackJob::new(b, JoinLatch::new(ctx.index()));
    // SAFETY: `job_b` stays in this frame, which returns (or unwinds: a's panic is caught)
    // only after the job was popped back here or its latch, set as the job's last action, was
    // seen set; whoever pops or steals the job runs it once.
    let job = unsafe { job_b.as_job() };
    ctx.push(job);
    let result_a = catch_unwind(AssertUnwindSafe(a));
    let mut result_b = None;
    while result_b.is_none() && !job_b.latch.is_set() {
        match ctx.pop_local() {
            // Nobody stole `b`: run it here, inline.
            // SAFETY: the job is out of the deque, and dropped unrun.
            Some(job) if job.is(&job_b) => result_b = unsafe { job_b.run_inline() },
            Some(job) => {
                ctx.execute(job);
            }
            None => ctx.wait_until(&|| job_b.latch.is_set()),
        }
    }
    let result_b = result_b
        .or_else(|| job_b.into_result())
        .unwrap_or_else(|| Err(Box::new("join: b did not run")));
    match (result_a, result_b) {
        (Ok(ra), Ok(rb)) => (ra, rb),
        // The other side goes before the panic is re-raised: dropped while it unwinds, a
        // drop that panics too (a value's, a second payload's) would abort the process.
        (Err(p), Ok(rb)) => {
            crate::diag::run_quietly(move || drop(rb));
            resume_unwind(p)
        }
        (Err(p), Err(q)) => {
            crate::diag::drop_panic(q);
            resume_unwind(p)
        }
        (Ok(ra), Err(p)) => {
            crate::diag::run_quietly(move || drop(ra));
            resume_unwind(p)
        }
    }
}

/// The latch of a `join`'s second closure. Only workers of the joiner's runtime run that job
/// (it sits in the joiner's deque), so the setter wakes the joiner through its own registry:
/// creating the latch touches no reference count, and dropping it is free.
#[derive(Debug)]
struct JoinLatch {
    set: AtomicBool,
    /// Slot index of the joining worker.
    owner: usize,
}

impl JoinLatch {
    fn new(owner: usize) -> Self {
        JoinLatch {
            set: AtomicBool::new(false),
            owner,
        }
    }

    /// Marks the latch set and wakes the joiner, unless the joiner set it itself. The joiner
    /// may free the latch as soon as it sees the flag: only a copy of `owner` is used after.
    fn set(&self) {
        let owner = self.owner;
        self.set.store(true, Ordering::Release);
        with_current(|ctx| {
            if let Some(ctx) = ctx
                && ctx.index() != owner
            {
                ctx.registry().notify(owner);
            }
        })
    }

    #[inline]
    fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }
}

/// The second closure of a `join`, waiting in the joining frame: run by a thief as a job, which
/// stores the result and sets the latch, or by the joiner itself, inline, when it pops the job
/// back (no latch, no result slot: the common case costs a push and a pop).
struct StackJob<F, R> {
    f: UnsafeCell<Option<F>>,
    result: UnsafeCell<Option<std::thread::Result<R>>>,
    /// Set once a job run finished (never by [`StackJob::run_inline`]).
    latch: JoinLatch,
}

impl<F: FnOnce() -> R + Send, R: Send> StackJob<F, R> {
    fn new(f: F, latch: JoinLatch) -> Self {
        StackJob {
            f: UnsafeCell::new(Some(f)),
            result: UnsafeCell::new(None),
            latch,
        }
    }

    /// A job that runs the closure in place (see [`Job::is`]).
    ///
    /// # Safety
    /// `self` must not move or be dropped while the job is queued or running: the caller waits
    /// for the latch, which the job sets as its last action, unless it pops the job back
    /// itself. The job must be run at most once.
    unsafe fn as_job(&self) -> Job {
        unsafe fn execute<F: FnOnce() -> R, R>(data: *const ()) {
            // SAFETY: `data` points to a live `StackJob<F, R>` (contract of `as_job`), and only
            // this one run touches its cells until the latch is set.
            let this = unsafe { &*(data as *const StackJob<F, R>) };
            // SAFETY: as above; the joiner reads `result` only after seeing the latch set.
            unsafe {
                if let Some(f) = (*this.f.get()).take() {
                    *this.result.get() = Some(catch_unwind(AssertUnwindSafe(f)));
                }
            }
            this.latch.set();
        }
        // SAFETY: the closure is `Send` (bound of this impl) and the frame outlives the job
        // (contract of `as_job`).
        unsafe { Job::from_raw(self as *const Self as *const (), execute::<F, R>) }
    }

    /// Runs the closure on the calling thread, catching a panic; `None` if a job run took it.
    ///
    /// # Safety
    /// The job of [`StackJob::as_job`] must not be queued or running: the caller popped it back
    /// (and drops it unrun) or never queued it.
    unsafe fn run_inline(&self) -> Option<std::thread::Result<R>> {
        // SAFETY: no job run can touch the cell (contract above), and only the joiner's thread
        // calls this.
        let f = unsafe { (*self.f.get()).take() }?;
        Some(catch_unwind(AssertUnwindSafe(f)))
    }

    /// The result a job run stored; call after seeing the latch set.
    fn into_result(self) -> Option<std::thread::Result<R>> {
        self.result.into_inner()
    }
}

// `Runtime::join`: the two closures run on this runtime.
impl crate::Runtime {
    /// Runs `a` and `b` in parallel on this runtime and returns both results.
    pub fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        self.install(|| crate::join(a, b))
    }
}

#[cfg(all(test, not(loom)))]
mod worker_tests {
    //! Worker behaviour seen through the task API (here, above both, so the test may use
    //! `join` and the `Runtime`).

    use std::time::{Duration, Instant};

    use umt_sys::BackendKind;

    use crate::Runtime;

    fn tree(depth: u32) -> u64 {
        if depth == 0 {
            return 1;
        }
        let (a, b) = crate::join(|| tree(depth - 1), || tree(depth - 1));
        a + b
    }

    /// Idle workers spin muted, then sleep unmuted: once every worker sleeps, each core's
    /// ready count is 0 again. A worker that slept still muted would stay counted as ready,
    /// and the leader would never refill its core when it blocked.
    #[test]
    fn muted_spinning_leaves_exact_ready_counts() {
        let rt = match Runtime::builder().monitor(BackendKind::Perf).build() {
            Ok(rt) => rt,
            // The rule of the integration tests (`tests/common`): skip, unless required.
            Err(e) if std::env::var("UMT_REQUIRE_MONITOR").is_ok_and(|b| b == "perf") => {
                panic!("UMT_REQUIRE_MONITOR=perf, but: {e}")
            }
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        for _ in 0..2000 {
            assert_eq!(rt.install(|| tree(6)), 64);
        }
        let reg = rt.registry();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            reg.monitor.drain().unwrap();
            let ready: Vec<i64> = reg
                .config
                .cpus
                .iter()
                .map(|&c| reg.monitor.ready(c))
                .collect();
            if ready.iter().all(|&r| r == 0) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "workers asleep, yet ready counts {ready:?}: {:?}",
                rt.stats()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // What the kernel dropped while workers were muted is not counted as lost. (A ring may
        // still overflow if the leaders are starved, under load: that is resynchronised.)
        let m = reg.monitor.stats();
        assert_eq!(m.lost_records, 0, "{m:?}");
    }
}
