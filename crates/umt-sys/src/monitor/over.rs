//! Time above one: how long a CPU's ready count stays above one, kept in one signed word per
//! CPU that the Bpf programs and the process change at every crossing (`README.md`, "Time
//! above one", steps O1-O5). This file is the process's half (its own changes of a count, at
//! registration and unregistration, and the reading) and the model the programs' `add_ready`
//! follows.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Per CPU, the process's own changes under way (O5): a change bumps `begun` before it
/// touches the word and `ended` after, so a reader can tell a word it read while one was
/// under way (the process can be preempted there for as long as the scheduler likes; the
/// programs cannot, their changes are a few instructions).
#[derive(Default, Debug)]
pub(crate) struct Changes {
    begun: AtomicU64,
    ended: AtomicU64,
}

/// O1-O2: adds `delta` (+1 or -1) to `ready` and keeps `over`: a rise subtracts the clock
/// read before the fetch-and-add and adds it back if the count did not cross from one to
/// two; a fall that crossed from two to one adds the clock read after it. `clock` reads the
/// programs' clock (`bpf_ktime_get_ns`). `changes`: the process's changes of this CPU, which
/// this is one of (O5). Returns the count before the change.
pub(crate) fn add_ready(
    ready: &AtomicI64,
    over: &AtomicI64,
    changes: &Changes,
    delta: i64,
    clock: impl Fn() -> i64,
) -> i64 {
    changes.begun.fetch_add(1, Ordering::SeqCst);
    let old = if delta > 0 {
        let before = clock();
        over.fetch_sub(before, Ordering::SeqCst);
        let old = ready.fetch_add(delta, Ordering::SeqCst);
        if old != 1 {
            over.fetch_add(before, Ordering::SeqCst);
        }
        old
    } else {
        let old = ready.fetch_add(delta, Ordering::SeqCst);
        if old == 2 {
            over.fetch_add(clock(), Ordering::SeqCst);
        }
        old
    };
    changes.ended.fetch_add(1, Ordering::SeqCst);
    old
}

/// O4: the time above one that the word `over` says, `now` being the programs' clock, or
/// `None` when the word is caught in the middle of a rise with an episode open and must be
/// read again. A whole word is the sum of the ended episodes, minus the start of the one under
/// way if any; a rise under way holds one more minus a time, which with an episode open
/// leaves the word below minus `now` (every time in it is the clock since boot, the episodes'
/// sum far less): refused. With none open it reads as an episode begun when the rise read the
/// clock, a few instructions before (the programs'; the process's own changes are refused by
/// [`read`], O5). No change makes the word wrongly positive: every time it adds, it took away
/// before.
pub(crate) fn reading(over: i64, now: i64) -> Option<u64> {
    let v = if over < 0 {
        over.checked_add(now)?
    } else {
        over
    };
    u64::try_from(v).ok()
}

/// O4-O5 with retries: reads `over` until the reading is whole and no change of the process
/// was under way meanwhile (`changes`), else gives `last`, the last whole reading kept by the
/// caller, which it updates. Readings never go back.
pub(crate) fn read(
    over: &AtomicI64,
    changes: &Changes,
    last: &AtomicI64,
    clock: impl Fn() -> i64,
) -> u64 {
    for attempt in 0..1000 {
        // The clock first: a reader preempted after it errs low (an episode counted to a
        // moment before its end), which `last` hides; read after the word, it would count a
        // closed episode on to the late clock, and `last` would keep that.
        let now = clock();
        let ended = changes.ended.load(Ordering::SeqCst);
        let word = over.load(Ordering::SeqCst);
        // Every change begun by now had ended before the word was read: none was under way.
        let quiet = changes.begun.load(Ordering::SeqCst) == ended;
        if let Some(v) = reading(word, now).filter(|_| quiet) {
            let v = i64::try_from(v).unwrap_or(i64::MAX);
            return last.fetch_max(v, Ordering::SeqCst).max(v) as u64;
        }
        // A change of the process's own may wait for its thread to run again.
        if attempt >= 64 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    last.load(Ordering::SeqCst).max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One change of the count in the model, cut into the steps another CPU can come
    /// between.
    #[derive(Clone, Debug)]
    struct Op {
        rise: bool,
        /// Made by the process (O5: bumps `begun` first and `ended` last), not a program.
        process: bool,
        /// 0: not started (a process change has bumped `begun`); a rise: 1 after reading
        /// the clock and subtracting it, 2 after the fetch-and-add, 3 after its undo (if no
        /// crossing); a fall: 1 after the fetch-and-add, 2 after adding the clock.
        step: u8,
        read_at: i64,
        crossed: bool,
        /// Clock at the fetch-and-add: when the crossing really happened.
        fetch_at: i64,
    }

    impl Op {
        fn done(&self) -> bool {
            self.step == if self.rise { 3 } else { 2 }
        }
    }

    /// Every interleaving of changes (the programs' and the process's), their steps as
    /// separate moves, and a reading between any two, with a clock that moves on at each
    /// move: a reading `read` would accept is within the clock slop of the programs'
    /// changes (made or under way) of the exact time above one (measured at the
    /// fetch-and-adds), whatever the process's changes under way; with no change under way
    /// it is accepted; and a reading is refused only while a change is under way.
    #[test]
    fn readings_are_exact_up_to_the_clock_slop_in_every_interleaving() {
        proptest!(ProptestConfig::with_cases(3000), |(
            start in 0i64..3,
            script in proptest::collection::vec((0usize..5, any::<bool>(), any::<bool>(), 1i64..50), 1..150),
        )| {
            let boot = 1_000_000i64;
            let mut now = boot + 10;
            let mut ready = start;
            let mut over = 0i64;
            let (mut begun, mut ended) = (0u64, 0u64);
            // Exact time above one, up to the last crossing, and the open episode's start.
            let mut exact = 0i64;
            let mut open = (start > 1).then_some(boot);
            if start > 1 {
                over -= boot;
            }
            let mut slop = 0i64;
            let mut ops: Vec<Op> = Vec::new();
            for (who, rise, process, tick) in script {
                now += tick;
                if who >= ops.len() {
                    // Only fall where some thread is counted (falls not yet made included).
                    let falls = ops.iter().filter(|o| !o.rise && o.step == 0).count() as i64;
                    let rise = rise || ready - falls <= 0;
                    if process {
                        begun += 1;
                    }
                    ops.push(Op { rise, process, step: 0, read_at: 0, crossed: false, fetch_at: 0 });
                } else {
                    let op = &mut ops[who];
                    match (op.rise, op.step) {
                        (true, 0) => {
                            op.read_at = now;
                            over -= now;
                            op.step = 1;
                        }
                        (true, 1) => {
                            let old = ready;
                            ready += 1;
                            op.fetch_at = now;
                            op.step = 2;
                            op.crossed = old == 1;
                            if op.crossed {
                                open = Some(now);
                            }
                        }
                        (true, 2) => {
                            if op.crossed {
                                slop += op.fetch_at - op.read_at;
                            } else {
                                over += op.read_at;
                            }
                            op.step = 3;
                        }
                        (false, 0) => {
                            let old = ready;
                            ready -= 1;
                            op.read_at = now;
                            op.fetch_at = now;
                            op.step = 1;
                            op.crossed = old == 2;
                            if op.crossed {
                                exact += now - open.take().unwrap();
                            }
                        }
                        (false, 1) => {
                            if op.crossed {
                                over += now;
                                slop += now - op.fetch_at;
                            }
                            op.step = 2;
                        }
                        _ => {}
                    }
                    if op.done() && op.process {
                        ended += 1;
                    }
                }
                ops.retain(|o| !o.done());
                let truth = exact + open.map_or(0, |t| now - t);
                // What a program's change under way may add to the error: a rise, since
                // it read the clock; a fall, since its fetch-and-add.
                let pending: i64 = ops
                    .iter()
                    .filter(|o| !o.process && o.step > 0)
                    .map(|o| now - o.read_at)
                    .sum();
                let quiet = begun == ended;
                match reading(over, now).filter(|_| quiet) {
                    Some(v) => prop_assert!(
                        (v as i64 - truth).abs() <= slop + pending,
                        "reading {v} exact {truth} slop {slop} pending {pending}"
                    ),
                    None => prop_assert!(
                        ops.iter().any(|o| o.step > 0 || o.process),
                        "refused with no change under way: over {over} now {now}"
                    ),
                }
                if ops.is_empty() {
                    let v = reading(over, now).filter(|_| quiet);
                    prop_assert!(v.is_some(), "refused with nothing under way");
                    let v = v.unwrap() as i64;
                    prop_assert!((v - truth).abs() <= slop, "reading {v} exact {truth} slop {slop}");
                }
            }
        });
    }

    /// The process's half, on real atomics: the word after each change, and `read`.
    #[test]
    fn the_process_side_keeps_the_same_word() {
        let (ready, over, changes) = (AtomicI64::new(0), AtomicI64::new(0), Changes::default());
        let t = AtomicI64::new(100);
        let clock = || t.load(Ordering::SeqCst);
        let add = |delta| add_ready(&ready, &over, &changes, delta, clock);
        add(1);
        assert_eq!(over.load(Ordering::SeqCst), 0, "one ready: nothing");
        t.store(200, Ordering::SeqCst);
        add(1);
        assert_eq!(over.load(Ordering::SeqCst), -200, "open since 200");
        t.store(250, Ordering::SeqCst);
        add(1);
        assert_eq!(
            over.load(Ordering::SeqCst),
            -200,
            "a third thread crosses nothing"
        );
        add(-1);
        t.store(300, Ordering::SeqCst);
        let last = AtomicI64::new(0);
        assert_eq!(read(&over, &changes, &last, clock), 100, "open: 200..now");
        add(-1);
        assert_eq!(over.load(Ordering::SeqCst), 100, "closed: 200..300");
        t.store(900, Ordering::SeqCst);
        assert_eq!(
            read(&over, &changes, &last, clock),
            100,
            "stays while one is ready"
        );
        add(-1);
        add(-1);
        assert_eq!(ready.load(Ordering::SeqCst), -1);
        add(1);
        add(1);
        assert_eq!(over.load(Ordering::SeqCst), 100, "0 -> 1 crosses nothing");
    }

    /// A change of the process's own under way (its thread preempted in the middle) makes
    /// readings fall back to the last whole one, however long it lasts.
    #[test]
    fn a_reading_during_a_change_of_the_process_gives_the_last_whole_one() {
        let (over, changes, last) = (AtomicI64::new(0), Changes::default(), AtomicI64::new(40));
        // A rise from 0 to 1 half done: minus its time in the word.
        changes.begun.fetch_add(1, Ordering::SeqCst);
        over.fetch_sub(1_000, Ordering::SeqCst);
        assert_eq!(
            reading(over.load(Ordering::SeqCst), 1_500),
            Some(500),
            "looks whole"
        );
        assert_eq!(read(&over, &changes, &last, || 1_500), 40, "but is not");
        over.fetch_add(1_000, Ordering::SeqCst);
        changes.ended.fetch_add(1, Ordering::SeqCst);
        assert_eq!(read(&over, &changes, &last, || 1_600), 40, "never back");
    }

    #[test]
    fn a_word_caught_mid_rise_with_an_episode_open_is_refused() {
        // An episode open since 500 and a rise half done at 900: two minus terms.
        assert_eq!(reading(-500 - 900, 901), None);
        // A fall half done: the count is one, the word still open; the reading is right.
        assert_eq!(reading(-500, 901), Some(401));
        assert_eq!(reading(5_000, 901), Some(5_000));
    }
}
