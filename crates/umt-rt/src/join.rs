//! `join`: run two closures, potentially in parallel.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use crate::job::Job;
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
    let latch = Latch::new(Waiter::Worker(ctx.registry().clone(), ctx.index()));
    let mut result_b: Option<std::thread::Result<RB>> = None;
    let tag = &latch as *const Latch as usize;
    let job_b = {
        let (latch, result_b) = (&latch, &mut result_b);
        move || {
            *result_b = Some(catch_unwind(AssertUnwindSafe(b)));
            latch.set();
        }
    };
    // SAFETY: this frame waits for `latch` below before returning or unwinding (a's panic is
    // caught), and the job sets the latch as its last action.
    let job_b = unsafe { Job::new_scoped(job_b, tag) };
    ctx.push(job_b);
    let result_a = catch_unwind(AssertUnwindSafe(a));
    while !latch.probe() {
        match ctx.pop_local() {
            // Nobody stole `b`: run it here.
            Some(job) if job.tag() == tag => job.run(),
            Some(job) => ctx.execute(job),
            None => ctx.wait_until(&latch),
        }
    }
    let result_b = result_b.unwrap_or_else(|| Err(Box::new("join: b did not run")));
    match (result_a, result_b) {
        (Ok(ra), Ok(rb)) => (ra, rb),
        (Err(p), _) | (_, Err(p)) => resume_unwind(p),
    }
}
