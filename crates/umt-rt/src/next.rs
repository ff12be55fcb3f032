//! A worker's next job: the future its running job woke, which it runs as soon as that job
//! returns, and when another worker may take it instead (N1–N4 of `README.md`, "A woken
//! future runs next").
//!
//! Go's scheduler calls this slot `runnext`, tokio its LIFO slot. A future woken on a worker
//! used to go on that worker's deque, from which an idle worker of another core stole it at
//! once, nanoseconds before its own worker would have run it: two futures that wake each
//! other (a channel and its reader, a lock handed on) then ran on alternate cores, every pass
//! a miss in the other core's caches (`--example wake_chain`: 2.3x tokio's time a pass with
//! one pair). Here the owner takes the job when its current one returns; another worker of
//! the same core takes it at once (it runs only while the owner does not: the owner blocked,
//! surrendered or was preempted); a worker of another core only once it has seen the same
//! job sit there for [`AGED`], as Go's thieves wait 3 us before they take `runnext`.

use std::cell::Cell;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::job::Job;

/// How long a worker of another core lets a job sit in a next slot before it takes it: longer
/// than what a poll that woke a future usually has left to run, far shorter than a
/// spare's wake-up.
pub(crate) const AGED: Duration = Duration::from_micros(5);

/// How long a worker that last saw another core's next job not yet [`AGED`] parks before it
/// looks again (N3): nobody wakes it for that job. A job whose owner runs on for long waits
/// about this much longer; a pair of futures passing a baton on one worker costs each idle
/// worker a wake-up this often.
pub(crate) const RECHECK: Duration = Duration::from_millis(1);

/// One worker's next job (N1). Filled by its owner only; emptied by the owner or a thief,
/// whoever claims it first. No lock: the owner fills it and takes it back once per wake-up.
///
/// `state` is the number of the last put, shifted left once, with the low bit set while
/// that put's job waits. The job's two words are written by the owner only while the slot
/// is empty, before the `Release` store that sets the bit; whoever takes it reads them after
/// an `Acquire` load that saw the bit, then clears the bit with a compare-exchange from
/// exactly that value. A put number is never reused, so the exchange fails for a reader
/// whose words may be those of a later put (read while the owner wrote them), and it
/// discards them.
#[derive(Default)]
pub(crate) struct NextSlot {
    state: AtomicU64,
    data: AtomicPtr<()>,
    execute: AtomicUsize,
}

/// The low bit of [`NextSlot`]'s state: a job waits.
const FULL: u64 = 1;

impl NextSlot {
    /// N1: the owner places `job`; returns the job it displaces, which the owner queues as
    /// any other (tokio's LIFO slot does the same: the newest wake runs next). Only the owner
    /// may call it.
    pub(crate) fn put(&self, job: Job) -> Option<Job> {
        let older = self.take();
        // Empty now (only the owner fills it): the words are nobody's until the store below.
        // `Acquire`, as in `take`: a thief's exchange that emptied it (`Release`) comes before
        // the writes below, so that thief's reads of the words cannot see them.
        let puts = self.state.load(Ordering::Acquire) >> 1;
        let (data, execute) = job.into_raw();
        self.data.store(data as *mut (), Ordering::Relaxed);
        self.execute.store(execute as usize, Ordering::Relaxed);
        self.state
            .store((puts.wrapping_add(1) << 1) | FULL, Ordering::Release);
        older
    }

    /// N2: the owner takes its next job, if any. Only the owner fills the slot, so a look
    /// that reads it empty is right (a thief may have emptied it since the owner's last
    /// put).
    #[inline]
    pub(crate) fn take(&self) -> Option<Job> {
        if self.state.load(Ordering::Acquire) & FULL == 0 {
            return None;
        }
        self.steal(None)
    }

    /// N3: what a thief sees without claiming: the number of the put whose job waits, if one
    /// does.
    pub(crate) fn peek(&self) -> Option<u64> {
        let state = self.state.load(Ordering::Acquire);
        (state & FULL != 0).then_some(state >> 1)
    }

    /// N3: a thief takes the job of put number `put` (from [`NextSlot::peek`]), if it is
    /// still there; `None` takes whatever is there.
    pub(crate) fn steal(&self, put: Option<u64>) -> Option<Job> {
        loop {
            let state = self.state.load(Ordering::Acquire);
            if state & FULL == 0 || put.is_some_and(|p| p != state >> 1) {
                return None;
            }
            let data = self.data.load(Ordering::Relaxed);
            let execute = self.execute.load(Ordering::Relaxed);
            if self
                .state
                .compare_exchange(state, state & !FULL, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // SAFETY: the exchange from `state` succeeded, so no put came between the
                // load of `state` (whose `Acquire` saw the words of its put) and the reads of
                // the words: they are the job that put stored, taken once (the bit is clear
                // now), and `execute` is the function pointer `into_raw` gave for it.
                return Some(unsafe {
                    Job::from_raw(
                        data as *const (),
                        std::mem::transmute::<usize, unsafe fn(*const ())>(execute),
                    )
                });
            }
        }
    }
}

/// N3: a thief's memory of the next jobs it saw waiting in other workers' slots, one per slot,
/// to tell one that stayed [`AGED`] from a new one (one memory for all slots never aged a
/// job: two young jobs in two slots each reset it, found in review). Kept by each worker for
/// itself.
#[derive(Debug)]
pub(crate) struct Sightings {
    seen: Box<[Seen]>,
}

/// The put number a worker last saw in one slot, and when it first saw it.
type Seen = Cell<Option<(u64, Instant)>>;

impl Sightings {
    /// Sightings of `slots` slots, none seen yet.
    pub(crate) fn new(slots: usize) -> Sightings {
        Sightings {
            seen: (0..slots).map(|_| Cell::new(None)).collect(),
        }
    }

    /// Whether the job of put number `put` in slot `slot` has been seen waiting for
    /// [`AGED`]; remembers it when it is new.
    pub(crate) fn aged(&self, slot: usize, put: u64, now: impl FnOnce() -> Instant) -> bool {
        let Some(seen) = self.seen.get(slot) else {
            return false;
        };
        match seen.get() {
            Some((p, at)) if p == put => now().saturating_duration_since(at) >= AGED,
            _ => {
                seen.set(Some((put, now())));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    fn counting_job(runs: &Arc<AtomicUsize>) -> Job {
        let runs = runs.clone();
        Job::new(move || {
            runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
    }

    #[test]
    fn a_put_displaces_the_older_job_and_each_job_is_taken_once() {
        let runs = Arc::new(AtomicUsize::new(0));
        let slot = NextSlot::default();
        assert!(slot.take().is_none());
        assert!(slot.put(counting_job(&runs)).is_none());
        let old = slot
            .put(counting_job(&runs))
            .expect("the first job comes back");
        old.run();
        assert!(slot.peek().is_some());
        let put = slot.peek().expect("a job waits");
        assert!(slot.steal(Some(put + 1)).is_none(), "not the job seen");
        slot.steal(Some(put)).expect("the job seen").run();
        assert!(slot.take().is_none());
        assert!(slot.steal(None).is_none());
        assert!(slot.peek().is_none());
        assert_eq!(runs.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    /// The owner puts and takes while two thieves steal, with and without a put number:
    /// every job runs exactly once (none lost, none taken twice).
    #[test]
    fn an_owner_and_two_thieves_take_every_job_once() {
        const JOBS: usize = 200_000;
        let runs: Arc<Vec<AtomicUsize>> =
            Arc::new((0..JOBS).map(|_| AtomicUsize::new(0)).collect());
        let slot = Arc::new(NextSlot::default());
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thieves: Vec<_> = (0..2)
            .map(|t| {
                let (slot, done) = (slot.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut stolen = 0usize;
                    while !done.load(std::sync::atomic::Ordering::Acquire) {
                        let job = match (t, slot.peek()) {
                            (0, Some(put)) => slot.steal(Some(put)),
                            (_, Some(_)) => slot.steal(None),
                            (_, None) => None,
                        };
                        if let Some(job) = job {
                            job.run();
                            stolen += 1;
                        }
                    }
                    stolen
                })
            })
            .collect();
        let job = |k: usize| {
            let runs = runs.clone();
            Job::new(move || {
                runs[k].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
        };
        for k in 0..JOBS {
            if let Some(older) = slot.put(job(k)) {
                older.run();
            }
            if k % 3 == 0
                && let Some(mine) = slot.take()
            {
                mine.run();
            }
        }
        if let Some(last) = slot.take() {
            last.run();
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        for t in thieves {
            t.join().unwrap();
        }
        assert!(slot.take().is_none());
        for (k, r) in runs.iter().enumerate() {
            assert_eq!(r.load(std::sync::atomic::Ordering::Relaxed), 1, "job {k}");
        }
    }

    #[test]
    fn a_sighting_ages_only_for_the_same_job_of_the_same_slot() {
        let t0 = Instant::now();
        let s = Sightings::new(5);
        assert!(!s.aged(3, 7, || t0), "first seen");
        assert!(!s.aged(3, 7, || t0 + AGED / 2));
        assert!(s.aged(3, 7, || t0 + AGED));
        assert!(!s.aged(3, 8, || t0 + AGED * 2), "a new put starts again");
        assert!(
            !s.aged(4, 8, || t0 + AGED * 4),
            "another slot starts on its own"
        );
        assert!(s.aged(3, 8, || t0 + AGED * 4), "slot 3's sighting stays");
        assert!(s.aged(4, 8, || t0 + AGED * 5));
        assert!(!s.aged(9, 1, || t0), "no such slot");
    }
}
