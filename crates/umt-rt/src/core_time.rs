//! Per-core time accounting: how long each core had more than one ready worker (the price UMT
//! pays), as the leaders and workers see it after each drain.
//!
//! (It also estimated how long a core had no ready worker while work was queued. That
//! estimate was charged until the leader's next drain, and with live counts (Bpf, Kernel
//! idle-only) a leader is woken only by drops to zero, so a core a spare kept busy counted as idle
//! until then: 35-49 % "idle with work" on cores 98 % busy. Removed (issue 29); the trace's
//! per-core states are exact, `Builder::trace`.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Per-core time accounting, kept by the core's leader. The state a leader sees after its
/// drain holds until its next drain (the core's workers drain their own events too, when
/// leaders poll: their changes are seen at the leader's next drain).
pub(crate) struct CoreTime {
    /// Since when the core has had which ready count. A std mutex: the leaders are not part
    /// of the loom model.
    state: std::sync::Mutex<(Instant, i64)>,
    /// Nanoseconds with more than one ready worker.
    pub(crate) oversubscribed_ns: AtomicU64,
}

impl CoreTime {
    pub(crate) fn new() -> Self {
        CoreTime {
            state: std::sync::Mutex::new((Instant::now(), 1)),
            oversubscribed_ns: AtomicU64::new(0),
        }
    }

    /// A drain at `now` left the core with `ready` ready workers: the previous state lasted
    /// until `now`.
    pub(crate) fn observe(&self, now: Instant, ready: i64) {
        // A worker holding it must not step aside (H3 of the directed handoff): the leader's
        // drain takes it.
        let _held = crate::sync::Held::new();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (since, was_ready) = *state;
        // Two leaders may observe out of order: a later `now` was already accounted.
        let Some(dt) = now.checked_duration_since(since) else {
            return;
        };
        let dt = dt.as_nanos() as u64;
        if was_ready > 1 {
            self.oversubscribed_ns.fetch_add(dt, Ordering::Relaxed);
        }
        *state = (now, ready);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Each state is charged for the time until the next observation; an observation older
    /// than the last one changes nothing.
    #[test]
    fn core_time_charges_each_state_until_the_next_drain() {
        let t = CoreTime::new();
        let t0 = lock_state(&t).0;
        let ms = Duration::from_millis;
        t.observe(t0 + ms(1), 2); // (ready 1 until +1: nothing charged)
        t.observe(t0 + ms(4), 0); // oversubscribed for 3 ms
        t.observe(t0 + ms(3), 3); // late: ignored
        t.observe(t0 + ms(9), 2); // idle for 5 ms: nothing charged
        t.observe(t0 + ms(10), 1); // oversubscribed for 1 ms
        assert_eq!(t.oversubscribed_ns.load(Ordering::Relaxed), 4_000_000);
    }

    fn lock_state(t: &CoreTime) -> std::sync::MutexGuard<'_, (Instant, i64)> {
        t.state.lock().unwrap()
    }
}
