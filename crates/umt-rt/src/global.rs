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

use std::sync::{Arc, OnceLock};

use crate::builder::BuildError;
use crate::registry::Registry;
use crate::runtime::Runtime;
use crate::worker::with_current;

/// `None` inside: the default build failed (said once on stderr); the free functions then run
/// on the calling thread.
static GLOBAL: OnceLock<Option<Runtime>> = OnceLock::new();

/// The global runtime, built with the defaults on first use.
pub(crate) fn get() -> Option<&'static Runtime> {
    GLOBAL
        .get_or_init(|| match Runtime::builder().build() {
            Ok(rt) => Some(rt),
            Err(e) => {
                crate::diag::emit(&format!(
                    "the global runtime could not start ({e}): join, scope and spawn outside a \
                     runtime run on the calling thread"
                ));
                None
            }
        })
        .as_ref()
}

/// The runtime the free functions use: the calling worker's, else the global one (`None`:
/// the global runtime could not start).
pub(crate) fn current_or_global() -> Option<Arc<Registry>> {
    with_current(|ctx| ctx.map(|ctx| ctx.registry().clone()))
        .or_else(|| get().map(|rt| rt.registry().clone()))
}

/// Whether the global runtime exists already (built, or its build attempted).
pub(crate) fn is_set() -> bool {
    GLOBAL.get().is_some()
}

/// Makes `rt` the global runtime, unless there is one already.
pub(crate) fn set(rt: Runtime) -> Result<(), BuildError> {
    let mut slot = Some(rt);
    GLOBAL.get_or_init(|| slot.take());
    match slot {
        // Ours was not taken: dropping it stops its threads.
        Some(_) => Err(BuildError::GlobalAlreadyBuilt),
        None => Ok(()),
    }
}
