//! `join`: run two closures, potentially in parallel.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use crate::job::StackJob;
use crate::latch::{JoinLatch, Probe};
use crate::worker::{WorkerCtx, with_current};

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
    with_current(|ctx| match ctx {
        Some(ctx) => join_on_worker(ctx, a, b),
        None => (a(), b()),
    })
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
    while result_b.is_none() && !job_b.latch().probe() {
        match ctx.pop_local() {
            // Nobody stole `b`: run it here, inline.
            // SAFETY: the job is out of the deque, and dropped unrun.
            Some(job) if job.is(&job_b) => result_b = unsafe { job_b.run_inline() },
            Some(job) => {
                ctx.execute(job);
            }
            None => ctx.wait_until(job_b.latch()),
        }
    }
    let result_b = result_b
        .or_else(|| job_b.into_result())
        .unwrap_or_else(|| Err(Box::new("join: b did not run")));
    match (result_a, result_b) {
        (Ok(ra), Ok(rb)) => (ra, rb),
        (Err(p), _) | (_, Err(p)) => resume_unwind(p),
    }
}
