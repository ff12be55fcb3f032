//! The global runtime: what the free functions ([`join`](crate::join),
//! [`scope`](crate::scope), [`spawn`](crate::spawn)) run on when called outside a runtime's
//! worker, as rayon's global pool. Built on first use with the defaults (every CPU of the
//! process, the monitor on: [`BackendKind::Auto`](crate::BackendKind::Auto)), or configured
//! once, before that, with [`Builder::build_global`](crate::Builder::build_global). It lives
//! until the process exits.
//!
//! It holds the process's monitor like any runtime: with the Kernel backend, which a process
//! has once, a runtime built later falls back to another backend (`Auto`) or fails
//! (`Kernel`). A program that builds its own runtime with the Kernel backend should make it
//! the global one with `build_global`, or call the free functions only inside it.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::builder::BuildError;
use crate::registry::Registry;
use crate::runtime::Runtime;
use crate::worker::with_current;

/// `None` inside: the default build failed (said once on stderr); the free functions then run
/// on the calling thread.
static GLOBAL: OnceLock<Option<Runtime>> = OnceLock::new();

/// F3: the global runtime of a child of `fork` whose parent had one, built in the child
/// with the defaults on first use there (the parent's threads are not in the child); a
/// child of that child builds its own again. Leaked, as [`GLOBAL`] lives for the process: a
/// pointer and not a lock, because a child's copy of a lock another thread of its parent
/// held would stay locked.
static FORKED: AtomicPtr<Forked> = AtomicPtr::new(std::ptr::null_mut());

/// One process's global runtime, made in a `fork` child.
struct Forked {
    /// The process it was made in.
    made: crate::fork::ForkMark,
    runtime: Option<Runtime>,
}

/// The global runtime with the defaults, or `None` (said once on stderr).
fn build_default() -> Option<Runtime> {
    match Runtime::builder().build() {
        Ok(rt) => Some(rt),
        Err(e) => {
            crate::diag::emit(&format!(
                "the global runtime could not start ({e}): join, scope and spawn outside a \
                 runtime run on the calling thread"
            ));
            None
        }
    }
}

/// 1 + the fork generation ([`crate::fork::generation`]) of the process that began to build
/// [`GLOBAL`], 0 before: a `fork` during that build leaves the child's copy of the `OnceLock`
/// being built by a thread the child does not have, and `get_or_init` would wait for it for
/// ever.
static BUILD_BEGAN: AtomicU64 = AtomicU64::new(0);

/// The global runtime, built with the defaults on first use (in this process: a `fork`
/// child builds its own, F3).
pub(crate) fn get() -> Option<&'static Runtime> {
    let global = match GLOBAL.get() {
        Some(global) => global.as_ref(),
        None => {
            if began_elsewhere() {
                return forked_global();
            }
            // Before the `OnceLock` is marked as being built: a fork between the two would
            // leave a child that waits for ever.
            mark_build();
            GLOBAL.get_or_init(build_default).as_ref()
        }
    };
    match global {
        Some(rt) if rt.registry().forked() => forked_global(),
        _ => global,
    }
}

/// Whether a build of [`GLOBAL`] began in an ancestor of this `fork` child ([`BUILD_BEGAN`]):
/// the child's copy of the `OnceLock` may be marked as being built by a thread it lacks.
fn began_elsewhere() -> bool {
    let began = BUILD_BEGAN.load(Ordering::Acquire);
    began != 0 && crate::fork::generation().is_some_and(|now| now + 1 != began)
}

/// Says that this process begins to build [`GLOBAL`] (or may: a build found done or under
/// way marks it too, harmlessly).
fn mark_build() {
    if let Some(now) = crate::fork::generation() {
        BUILD_BEGAN.store(now + 1, Ordering::Release);
    }
}

/// F3: the global runtime of this `fork` child, made on first use.
fn forked_global() -> Option<&'static Runtime> {
    let seen = FORKED.load(Ordering::Acquire);
    // SAFETY: a non-null pointer in FORKED is a leaked `Forked`, never freed.
    if let Some(f) = unsafe { seen.as_ref() }
        && !f.made.is_copy()
    {
        return f.runtime.as_ref();
    }
    let made = Box::into_raw(Box::new(Forked {
        made: crate::fork::ForkMark::here(),
        runtime: build_default(),
    }));
    match FORKED.compare_exchange(seen, made, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: ours, leaked from here on (the one it replaced is the parent's, also
        // leaked: its runtime's threads are not in this process).
        Ok(_) => unsafe { (*made).runtime.as_ref() },
        Err(_) => {
            // Another thread of this child made one first: ours goes (its threads are
            // joined), theirs is the one.
            // SAFETY: `made` was never shared.
            drop(unsafe { Box::from_raw(made) });
            forked_global()
        }
    }
}

/// The runtime the free functions use: the calling worker's, else the global one (`None`:
/// the global runtime could not start).
pub(crate) fn current_or_global() -> Option<Arc<Registry>> {
    with_current(|ctx| ctx.map(|ctx| ctx.registry().clone()))
        .or_else(|| get().map(|rt| rt.registry().clone()))
}

/// Whether the global runtime exists already (built, or its build attempted).
pub(crate) fn is_set() -> bool {
    // A build that began in an ancestor counts as done: `set` would wait for it for ever.
    GLOBAL.get().is_some() || began_elsewhere()
}

/// Makes `rt` the global runtime, unless there is one already.
pub(crate) fn set(rt: Runtime) -> Result<(), BuildError> {
    if began_elsewhere() {
        return Err(BuildError::GlobalAlreadyBuilt);
    }
    mark_build();
    let mut slot = Some(rt);
    GLOBAL.get_or_init(|| slot.take());
    match slot {
        // Ours was not taken: dropping it stops its threads.
        Some(_) => Err(BuildError::GlobalAlreadyBuilt),
        None => Ok(()),
    }
}
