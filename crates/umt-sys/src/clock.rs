//! A monotonic clock cheap enough for a timestamp per task: the CPU's time-stamp counter
//! where the kernel itself trusts it, `CLOCK_MONOTONIC` (through [`Instant`]) elsewhere.
//!
//! 1. At creation, if the running kernel's clocksource is `tsc` (it checked that the counter
//!    is invariant and synchronised across CPUs), the clock reads the counter and
//!    `CLOCK_MONOTONIC` twice, 2 ms apart, and keeps the ratio as a 32.32 fixed-point
//!    multiplier of nanoseconds per cycle. Each reading of the counter lies between two of
//!    `CLOCK_MONOTONIC` taken at most `BRACKET` apart (the narrowest of up to 100 tries), and
//!    counts at their midpoint: a thread preempted between the two clocks' reads once skewed
//!    the ratio by 40 % (a PREEMPT_RT guest under emulation). No such pair: no counter.
//! 2. A read is then one `rdtsc` (about 9 ns in a VM here, against 22 ns for
//!    `clock_gettime`), a subtraction and a multiplication.
//! 3. Otherwise (another clocksource, another architecture) a read is `Instant::now()`.
//!
//! Times are nanoseconds since the clock was made. The calibration's error (at most one
//! bracket over 2 ms, 0.5 %; about 1e-5 on an idle machine) scales durations, never
//! reorders them.
//!
//! ```
//! let clock = umt_sys::clock::FastClock::new();
//! let a = clock.now_ns();
//! let b = clock.now_ns();
//! assert!(b >= a);
//! ```

use std::time::{Duration, Instant};

/// See the module docs.
#[derive(Debug, Clone)]
pub struct FastClock {
    source: Source,
}

#[derive(Debug, Clone, Copy)]
enum Source {
    /// Counter value at time zero, and nanoseconds per cycle in 32.32 fixed point.
    Tsc { start: u64, mult: u64 },
    /// Time zero.
    Std(Instant),
}

impl Default for FastClock {
    fn default() -> Self {
        FastClock::new()
    }
}

impl FastClock {
    /// A clock reading 0 now (calibrating for 2 ms where the counter is used).
    pub fn new() -> FastClock {
        let source = match tsc_mult() {
            Some((start, mult)) => Source::Tsc { start, mult },
            None => Source::Std(Instant::now()),
        };
        FastClock { source }
    }

    /// Whether reads use the time-stamp counter.
    pub fn uses_tsc(&self) -> bool {
        matches!(self.source, Source::Tsc { .. })
    }

    /// Nanoseconds since the clock was made.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match self.source {
            Source::Tsc { start, mult } => {
                let cycles = rdtsc().saturating_sub(start);
                ((u128::from(cycles) * u128::from(mult)) >> 32) as u64
            }
            Source::Std(origin) => origin.elapsed().as_nanos() as u64,
        }
    }
}

/// `(counter at time zero, ns per cycle in 32.32)` when the kernel's clocksource is the
/// counter.
fn tsc_mult() -> Option<(u64, u64)> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let source =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .ok()?;
    if source.trim() != "tsc" || !tsc_readable() {
        return None;
    }
    let (t0, c0) = paired()?;
    std::thread::sleep(Duration::from_millis(2));
    let (t1, c1) = paired()?;
    let ns = t1.duration_since(t0).as_nanos();
    let cycles = u128::from(c1.checked_sub(c0)?);
    if cycles == 0 {
        return None;
    }
    let mult = u64::try_from((ns << 32) / cycles).ok()?;
    Some((c0, mult))
}

/// The widest pair of `CLOCK_MONOTONIC` reads a counter reading may lie between.
const BRACKET: Duration = Duration::from_micros(10);

/// A counter reading and the `Instant` it stands for: the midpoint of the narrowest pair of
/// `Instant`s around it, out of up to 100 tries; `None` if no pair is within [`BRACKET`].
fn paired() -> Option<(Instant, u64)> {
    let mut best: Option<(Duration, Instant, u64)> = None;
    for _ in 0..100 {
        let before = Instant::now();
        let cycles = rdtsc();
        let after = Instant::now();
        let width = after.duration_since(before);
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, before + width / 2, cycles));
        }
        if width <= BRACKET / 10 {
            break;
        }
    }
    let (width, at, cycles) = best?;
    (width <= BRACKET).then_some((at, cycles))
}

/// Whether this process may execute `rdtsc`: not if it asked for a signal instead
/// (`prctl(PR_SET_TSC, PR_TSC_SIGSEGV)`).
#[cfg(target_os = "linux")]
fn tsc_readable() -> bool {
    let mut state: libc::c_int = 0;
    // SAFETY: PR_GET_TSC writes one int through the pointer, which points to `state`.
    let ret = unsafe { libc::prctl(libc::PR_GET_TSC, &mut state as *mut libc::c_int) };
    ret == 0 && state == libc::PR_TSC_ENABLE
}

/// Elsewhere, no `prctl` to ask: the clock keeps to `CLOCK_MONOTONIC`.
#[cfg(not(target_os = "linux"))]
fn tsc_readable() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` reads the time-stamp counter; every x86_64 CPU implements it, and user
    // space may execute it unless the process asked the kernel to trap it, which
    // `tsc_readable` checked before the clock chose the counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_follows_the_system_clock_and_never_goes_back() {
        let clock = FastClock::new();
        // Each fast read between two std reads: a preemption between them widens the bounds
        // instead of failing the test.
        let read = || {
            let before = Instant::now();
            let fast = clock.now_ns();
            (before, fast, Instant::now())
        };
        let (a_before, a, a_after) = read();
        let mut last = a;
        for _ in 0..100_000 {
            let now = clock.now_ns();
            assert!(now >= last);
            last = now;
        }
        std::thread::sleep(Duration::from_millis(50));
        let (b_before, b, b_after) = read();
        let fast = (b - a) as f64;
        let shortest = b_before.duration_since(a_after).as_nanos() as f64;
        let longest = b_after.duration_since(a_before).as_nanos() as f64;
        // Over 50 ms the fast clock's interval lies between the std reads around its ends,
        // give or take the calibration's error (at most 0.5 %), whichever source is used.
        assert!(
            fast >= shortest * 0.98 && fast <= longest * 1.02,
            "fast {fast} ns, std between {shortest} and {longest} ns, tsc {}",
            clock.uses_tsc()
        );
    }
}
