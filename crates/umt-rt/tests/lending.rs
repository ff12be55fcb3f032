//! Lending (`src/README.md`, "Lending a worker to a starved core"): a core whose workers are
//! all blocked, with no spare it may wake, gets a runnable worker of an oversubscribed core,
//! which runs its task there while the blocked workers are still blocked.
//!
//! The test uses the first two CPUs of the affinity mask. It asserts an order of events (the
//! borrowed worker ran on the starved core before any of that core's readers returned), never
//! a time; on a busy machine it only takes longer.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use umt_rt::{LeaderPolicy, Runtime};

mod common;
use common::{monitored_backend, skip_unmonitored};

/// How long anything waits before the test gives up (a failure, not a timing).
const PATIENCE: Duration = Duration::from_secs(120);

fn wait_for(what: &str, mut cond: impl FnMut() -> bool, state: impl Fn() -> String) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < PATIENCE,
            "gave up waiting ({PATIENCE:?}) for: {what}\n{}",
            state()
        );
        std::thread::yield_now();
    }
}

/// Core 0's two workers block in pipe reads (the cap is 2, so no spare is left for it); core
/// 1's two workers spin in tasks, so it has two ready workers. Core 0's leader lends one of
/// them: a spinner finds itself on core 0's CPU while both readers are still blocked.
#[test]
fn a_starved_core_borrows_a_runnable_worker_of_an_oversubscribed_one() {
    let cpus = umt_sys::cpu::process_cpus().unwrap();
    if cpus.len() < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    let (c0, c1) = (cpus[0], cpus[1]);
    let backend = monitored_backend();
    let rt = Runtime::builder()
        .cores([c0, c1])
        .max_workers_per_core(2)
        .monitor(backend)
        .leader_policy(LeaderPolicy::default_for(backend))
        .build()
        .unwrap();
    if skip_unmonitored(&rt) {
        return;
    }
    if !rt.lends_workers() {
        eprintln!(
            "skipped: the {} backend's counts are not live here, so nothing is lent",
            rt.backend()
        );
        return;
    }
    let st = Arc::new(State::default());
    let readers: Vec<_> = (0..2).map(|_| std::io::pipe().unwrap()).collect();
    let (q_rx, q_tx) = std::io::pipe().unwrap();
    for (i, (rx, _)) in readers.iter().enumerate() {
        *st.readers_rx[i].lock().unwrap() = Some(rx.try_clone().unwrap());
    }
    *st.q_rx.lock().unwrap() = Some(q_rx);
    // Whatever happens (a failed wait panics), the readers and spinners are let go, and the
    // runtime's drop does not wait for them forever.
    let mut release = Release {
        st: st.clone(),
        txs: readers
            .iter()
            .map(|(_, tx)| tx.try_clone().unwrap())
            .collect(),
        q: q_tx,
        q_written: false,
    };
    let mut handles = Vec::new();
    wait_for(
        "both readers on core 0 and both spinners on core 1",
        || {
            // Core 1's blocker returns only once both readers of core 0 are blocked, so that
            // core 1 has two ready workers only then, and core 0 borrows only then.
            if !release.q_written
                && st.extra.load(Ordering::Acquire)
                && st.blocked.load(Ordering::Acquire) >= 2
            {
                release.q.write_all(b"q").unwrap();
                release.q_written = true;
            }
            let filled =
                st.reading.load(Ordering::Acquire) >= 2 && st.spinners.load(Ordering::Acquire) >= 2;
            if !filled && st.outstanding.load(Ordering::Acquire) < 4 {
                st.outstanding.fetch_add(1, Ordering::AcqRel);
                let st = st.clone();
                handles.push(rt.spawn(move || {
                    st.role(c0, c1);
                    st.outstanding.fetch_sub(1, Ordering::AcqRel);
                }));
            }
            filled || st.lent_seen.load(Ordering::Acquire) > 0
        },
        || format!("{:#?}", rt.stats()),
    );
    wait_for(
        "a spinner of core 1 runs on core 0",
        || st.lent_seen.load(Ordering::Acquire) > 0,
        || format!("{:#?}", rt.stats()),
    );
    drop(release);
    for h in handles {
        h.join();
    }
    // M4: out of work, the lent worker parks, and goes home first.
    let tid = st.lent_tid.load(Ordering::Acquire);
    wait_for(
        "the lent worker goes back to core 1",
        || allowed_cpus(tid).as_deref() == Some(c1.to_string().as_str()),
        || format!("allowed: {:?}\n{:#?}", allowed_cpus(tid), rt.stats()),
    );
    let stats = rt.stats();
    assert!(stats.workers_lent >= 1, "{stats:#?}");
    assert_eq!(
        st.lent_seen.load(Ordering::Acquire),
        3,
        "a spinner ran on core 0 before both of its readers blocked, or after one returned \
         ({} blocked): {stats:#?}",
        st.blocked.load(Ordering::Acquire)
    );
}

/// M5: a `broadcast` call is never lent. Core 1's call blocks in a pipe read (so core 1
/// starts its spare, which takes a spinner's role), then spins; core 0's two workers block in
/// reads, so core 0's leader borrows a runnable worker of core 1: the spinner, never the
/// worker running the call, which sees core 1's CPU from its start to its end.
#[test]
fn a_broadcast_call_stays_on_its_core_while_another_core_borrows() {
    let cpus = umt_sys::cpu::process_cpus().unwrap();
    if cpus.len() < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    let (c0, c1) = (cpus[0], cpus[1]);
    let backend = monitored_backend();
    let rt = Arc::new(
        Runtime::builder()
            .cores([c0, c1])
            .max_workers_per_core(2)
            .monitor(backend)
            .leader_policy(LeaderPolicy::default_for(backend))
            .build()
            .unwrap(),
    );
    if skip_unmonitored(&rt) {
        return;
    }
    if !rt.lends_workers() {
        eprintln!(
            "skipped: the {} backend's counts are not live here, so nothing is lent",
            rt.backend()
        );
        return;
    }
    let st = Arc::new(State::default());
    let readers: Vec<_> = (0..2).map(|_| std::io::pipe().unwrap()).collect();
    let (q_rx, q_tx) = std::io::pipe().unwrap();
    for (i, (rx, _)) in readers.iter().enumerate() {
        *st.readers_rx[i].lock().unwrap() = Some(rx.try_clone().unwrap());
    }
    *st.q_rx.lock().unwrap() = Some(q_rx);
    let mut release = Release {
        st: st.clone(),
        txs: readers
            .iter()
            .map(|(_, tx)| tx.try_clone().unwrap())
            .collect(),
        q: q_tx,
        q_written: false,
    };
    // The caller of `broadcast` waits for both calls: another thread.
    let caller = {
        let (rt, st) = (rt.clone(), st.clone());
        std::thread::spawn(move || {
            rt.broadcast(|ctx| {
                if ctx.index() == 1 {
                    st.call(c1);
                }
                ctx.index()
            })
        })
    };
    wait_for(
        "core 1's call started",
        || st.call_started.load(Ordering::Acquire),
        || format!("{:#?}", rt.stats()),
    );
    // Core 1's call is blocked in its read: roles for core 0's readers and core 1's spare.
    let mut handles = Vec::new();
    wait_for(
        "a borrowed worker on core 0, or the call away from core 1",
        || {
            if !release.q_written
                && st.extra.load(Ordering::Acquire)
                && st.blocked.load(Ordering::Acquire) >= 2
            {
                release.q.write_all(b"q").unwrap();
                release.q_written = true;
            }
            let filled =
                st.reading.load(Ordering::Acquire) >= 2 && st.extra.load(Ordering::Acquire);
            if !filled && st.outstanding.load(Ordering::Acquire) < 4 {
                st.outstanding.fetch_add(1, Ordering::AcqRel);
                let st = st.clone();
                handles.push(rt.spawn(move || {
                    st.role_beside_call(c0, c1);
                    st.outstanding.fetch_sub(1, Ordering::AcqRel);
                }));
            }
            st.lent_seen.load(Ordering::Acquire) > 0 || st.call_away.load(Ordering::Acquire)
        },
        || format!("{:#?}", rt.stats()),
    );
    let away = st.call_away.load(Ordering::Acquire);
    drop(release);
    for h in handles {
        h.join();
    }
    let results = caller.join().unwrap();
    assert_eq!(results, [0, 1]);
    assert!(
        !away && !st.call_away.load(Ordering::Acquire),
        "core 1's broadcast call ran on another CPU: {:#?}",
        rt.stats()
    );
    assert!(rt.stats().workers_lent >= 1, "{:#?}", rt.stats());
}

/// The CPUs thread `tid` may run on (`Cpus_allowed_list` of its `/proc` status).
fn allowed_cpus(tid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
}

/// What the tasks of the test share.
#[derive(Default)]
struct State {
    readers_rx: [Mutex<Option<std::io::PipeReader>>; 2],
    q_rx: Mutex<Option<std::io::PipeReader>>,
    /// Readers on core 0 (blocked until the end), and how many blocked and returned.
    reading: AtomicUsize,
    blocked: AtomicUsize,
    returned: AtomicUsize,
    /// Core 1's blocker (it blocks so that core 1 starts its spare, then spins), and its
    /// other spinner.
    blocker: AtomicBool,
    extra: AtomicBool,
    spinners: AtomicUsize,
    stop: AtomicBool,
    /// Role tasks spawned and not yet finished: the test keeps a few queued, not millions.
    outstanding: AtomicUsize,
    /// Readers still blocked when a spinner of core 1 first ran on core 0, plus one (0: never).
    lent_seen: AtomicUsize,
    /// That spinner's thread.
    lent_tid: AtomicI32,
    /// A broadcast call started on core 1, and whether it ever ran on another CPU.
    call_started: AtomicBool,
    call_away: AtomicBool,
}

impl State {
    fn spin(&self, c0: usize) {
        self.spinners.fetch_add(1, Ordering::AcqRel);
        while !self.stop.load(Ordering::Acquire) {
            if umt_sys::cpu::current_cpu().ok() == Some(c0) {
                let still =
                    self.blocked.load(Ordering::Acquire) - self.returned.load(Ordering::Acquire);
                if self
                    .lent_seen
                    .compare_exchange(0, still + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    self.lent_tid
                        .store(umt_sys::cpu::current_tid(), Ordering::Release);
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Core 1's broadcast call: blocks in the read of `q`, then spins until the end, noting
    /// whether it ever runs off `c1`.
    fn call(&self, c1: usize) {
        let mut rx = self.q_rx.lock().unwrap().take().unwrap();
        let mut away = umt_sys::cpu::current_cpu().ok() != Some(c1);
        self.call_started.store(true, Ordering::Release);
        rx.read_exact(&mut [0u8; 1]).unwrap();
        while !self.stop.load(Ordering::Acquire) {
            away |= umt_sys::cpu::current_cpu().ok() != Some(c1);
            if away {
                self.call_away.store(true, Ordering::Release);
            }
            std::hint::spin_loop();
        }
    }

    /// Beside core 1's call: core 0's readers, and one spinner on core 1.
    fn role_beside_call(&self, c0: usize, c1: usize) {
        match umt_sys::cpu::current_cpu().ok() {
            Some(c) if c == c1 && !self.extra.swap(true, Ordering::AcqRel) => self.spin(c0),
            Some(c) if c == c0 => self.role(c0, usize::MAX),
            _ => {}
        }
    }

    /// A task takes the role its CPU still needs, or none.
    fn role(&self, c0: usize, c1: usize) {
        let mut b = [0u8; 1];
        match umt_sys::cpu::current_cpu().ok() {
            Some(c) if c == c0 => {
                let i = self.reading.fetch_add(1, Ordering::AcqRel);
                if i >= 2 {
                    self.reading.fetch_sub(1, Ordering::AcqRel);
                    return;
                }
                let mut rx = self.readers_rx[i].lock().unwrap().take().unwrap();
                self.blocked.fetch_add(1, Ordering::AcqRel);
                rx.read_exact(&mut b).unwrap();
                self.returned.fetch_add(1, Ordering::AcqRel);
            }
            Some(c) if c == c1 => {
                if !self.blocker.swap(true, Ordering::AcqRel) {
                    let mut rx = self.q_rx.lock().unwrap().take().unwrap();
                    rx.read_exact(&mut b).unwrap();
                    self.spin(c0);
                } else if !self.extra.swap(true, Ordering::AcqRel) {
                    self.spin(c0);
                }
            }
            _ => {}
        }
    }
}

/// Lets every reader and spinner go when dropped.
struct Release {
    st: Arc<State>,
    txs: Vec<std::io::PipeWriter>,
    q: std::io::PipeWriter,
    q_written: bool,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.st.stop.store(true, Ordering::Release);
        for tx in &mut self.txs {
            let _ = tx.write_all(b"r");
        }
        if !self.q_written {
            let _ = self.q.write_all(b"q");
        }
    }
}
