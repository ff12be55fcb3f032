//! `join`: run two closures, potentially in parallel.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use crate::job::StackJob;
use crate::latch::{Latch, Probe, Waiter};
use crate::worker::WorkerCtx;

/// Runs `a` and `b`, potentially in parallel, and returns both results. `b` is offered to
/// other workers while the caller runs `a`; if nobody took it, the caller runs it too. Outside
/// a worker, both run on the calling thread, one after the other.
///
/// A panic in either is propagated after both have finished.
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    match WorkerCtx::current() {
        Some(ctx) => join_on_worker(&ctx, a, b),
        None => (a(), b()),
    }
}

fn join_on_worker<A, B, RA, RB>(ctx: &WorkerCtx, a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    // Only workers of this runtime run `b` (it sits in this worker's deque), so the latch can
    // wake us through the setter's own registry.
    let latch = Latch::new(Waiter::SameRuntime(ctx.index()));
    let mut result_b: Option<std::thread::Result<RB>> = None;
    let tag = &latch as *const Latch as usize;
    let job_b = {
        let (latch, result_b) = (&latch, &mut result_b);
        move || {
            *result_b = Some(catch_unwind(AssertUnwindSafe(b)));
            latch.set();
        }
    };
    let job_b = StackJob::new(job_b);
    // SAFETY: `job_b` stays in this frame, which waits for `latch` below before returning or
    // unwinding (a's panic is caught); the closure sets the latch as its last action, and the
    // job is run once, by whoever pops or steals it.
    ctx.push(unsafe { job_b.as_job(tag) });
    let result_a = catch_unwind(AssertUnwindSafe(a));
    while !latch.probe() {
        match ctx.pop_local() {
            // Nobody stole `b`: run it here.
            Some(job) if job.tag() == tag => job.run(),
            Some(job) => {
                ctx.execute(job);
            }
            None => ctx.wait_until(&latch),
        }
    }
    let result_b = result_b.unwrap_or_else(|| Err(Box::new("join: b did not run")));
    match (result_a, result_b) {
        (Ok(ra), Ok(rb)) => (ra, rb),
        (Err(p), _) | (_, Err(p)) => resume_unwind(p),
    }
}
