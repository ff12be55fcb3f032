//! The starter thread: starts spare workers when the leader asks for them.
//!
//! A thread inherits its creator's scheduling policy, and the leader runs under `SCHED_IDLE`
//! ([`crate::LeaderPolicy::Idle`]), which an unprivileged thread can never leave again (the
//! kernel treats it as nice 20 and `RLIMIT_NICE` is 0 by default). Spare workers started by
//! the leader itself would therefore run at idle priority for good: while other processes
//! load the machine they barely get a CPU, and every worker waiting for a lock one of them
//! holds (an inode lock in a write, a dependency) waits with it. That stalled the heat
//! benchmark 20–60x under two `yes` hogs. So the leader only reserves the worker and sends its
//! slot here; this thread, started by the builder with the builder's policy, creates it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, channel};

use crate::registry::{Registry, STOP_STARTER, StartRequest, StartRequests};

/// Starts the starter thread. It exits at [`StartRequests::stop`], or once every clone of the
/// returned sender is dropped, after serving every request sent before.
pub(crate) fn start(reg: &Arc<Registry>) -> std::io::Result<StartRequests> {
    let (tx, rx) = channel();
    let handle = std::thread::Builder::new()
        .name("umt-starter".into())
        .spawn({
            let reg = reg.clone();
            move || serve(&reg, rx)
        })?;
    crate::sync::lock(&reg.threads).push(handle);
    Ok(StartRequests::new(tx))
}

fn serve(reg: &Arc<Registry>, requests: Receiver<StartRequest>) {
    for StartRequest {
        index,
        for_block_on,
    } in requests.iter().take_while(|&r| r != STOP_STARTER)
    {
        let core = reg.slots[index].core;
        match crate::worker::start(reg, index) {
            Ok(()) => {
                reg.counters.workers_created.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                reg.warnings.warn(crate::diag::Warning::SpareStart, || {
                    format!("cannot start a spare worker, a blocked core stays idle: {e}")
                });
                reg.pools.unreserve(core, index % reg.config.cap);
                // B4 of `README.md`: the worker parked in `block_on` for it runs the core's
                // tasks itself instead.
                if let Some((waiter, wait)) = for_block_on {
                    reg.slots[waiter]
                        .replacement_failed
                        .store(wait, Ordering::Release);
                    reg.notify(waiter);
                }
            }
        }
    }
}
