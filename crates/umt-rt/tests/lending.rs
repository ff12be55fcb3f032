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

use umt_rt::{JoinHandle, LeaderPolicy, Runtime};

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
    let Some((rt, c0, c1)) = lending_runtime() else {
        return;
    };
    let st = Arc::new(State::default());
    // Whatever happens (a failed wait panics), the readers and spinners are let go, and the
    // runtime's drop does not wait for them forever.
    let mut release = pipes(&st);
    let mut handles = Vec::new();
    wait_for(
        "both readers on core 0 and both spinners on core 1",
        || {
            release.q_once_readers_blocked();
            let filled =
                st.reading.load(Ordering::Acquire) >= 2 && st.spinners.load(Ordering::Acquire) >= 2;
            if !filled {
                st.queue_role(&rt, &mut handles, State::role, c0, c1);
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
    let Some((rt, c0, c1)) = lending_runtime() else {
        return;
    };
    let rt = Arc::new(rt);
    let st = Arc::new(State::default());
    let mut release = pipes(&st);
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
            release.q_once_readers_blocked();
            let filled =
                st.reading.load(Ordering::Acquire) >= 2 && st.extra.load(Ordering::Acquire);
            if !filled {
                st.queue_role(&rt, &mut handles, State::role_beside_call, c0, c1);
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

/// A `broadcast` call taken from its core's inbox by a worker whose core has another worker
/// back from a block runs anyway: before, the worker gave its core up at the call's start and
/// put the call on its deque, where a worker of the other core stole it and ran it on its
/// own CPU (about 1 call in 20 here, lending or not). A task on core 1
/// computes and sleeps by turns, so core 1's workers take turns (and yields, so that a call
/// never waits for it to end); every call must see its core's CPU. The runs stop at a count or a deadline, whichever comes first: the deadline
/// bounds the test on a slow machine and asserts nothing.
#[test]
fn broadcast_calls_run_on_their_cpu_while_their_core_changes_workers() {
    for lend in [false, true] {
        broadcast_beside_a_blocking_task(lend);
    }
}

fn broadcast_beside_a_blocking_task(lend: bool) {
    let Some((rt, _, c1)) = two_core_runtime(lend) else {
        return;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let placed = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    // Tasks until one lands on core 1: it computes 200 us and sleeps 200 us by turns.
    while !placed.load(Ordering::Acquire) {
        let (stop, placed) = (stop.clone(), placed.clone());
        handles.push(rt.spawn(move || {
            if umt_sys::cpu::current_cpu().ok() == Some(c1) && !placed.swap(true, Ordering::AcqRel)
            {
                while !stop.load(Ordering::Acquire) {
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(200) {
                        std::hint::spin_loop();
                    }
                    std::thread::sleep(Duration::from_micros(200));
                    // A call queued for core 1 waits for a worker of core 1: where the
                    // monitor misses this task's blocks (Perf, under load) no spare comes,
                    // and this task would keep it waiting for as long as it runs.
                    umt_rt::yield_now();
                }
            }
        }));
        std::thread::yield_now();
    }
    let away = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut first_away = None;
    for _ in 0..50_000 {
        if Instant::now() > deadline {
            break;
        }
        let calls = rt.broadcast(|ctx| {
            let on = umt_sys::cpu::current_cpu().ok();
            if on != Some(ctx.cpu()) {
                away.fetch_add(1, Ordering::Relaxed);
            }
            (ctx.index(), ctx.cpu(), on)
        });
        if first_away.is_none() && calls.iter().any(|&(_, cpu, on)| on != Some(cpu)) {
            first_away = Some(calls);
        }
    }
    stop.store(true, Ordering::Release);
    for h in handles {
        h.join();
    }
    assert_eq!(
        away.load(Ordering::Relaxed),
        0,
        "calls ran on another CPU (lending {lend}); the first: {first_away:?} (index, cpu, \
         ran on)\n{:#?}",
        rt.stats()
    );
}

/// A monitored runtime on the first two CPUs, two workers each at most, lending workers or
/// not, and those CPUs; `None` (saying why) where it cannot run.
fn two_core_runtime(lend: bool) -> Option<(Runtime, usize, usize)> {
    let cpus = umt_sys::cpu::process_cpus().unwrap();
    if cpus.len() < 2 {
        eprintln!("skipped: needs two CPUs");
        return None;
    }
    let (c0, c1) = (cpus[0], cpus[1]);
    let backend = monitored_backend();
    let rt = Runtime::builder()
        .cores([c0, c1])
        .max_workers_per_core(2)
        .monitor(backend)
        .leader_policy(LeaderPolicy::default_for(backend))
        .lend_workers(lend)
        .build()
        .unwrap();
    if skip_unmonitored(&rt) {
        return None;
    }
    Some((rt, c0, c1))
}

/// A runtime on the first two CPUs, two workers each at most, that lends workers, and those
/// CPUs; `None` (saying why) where it cannot run.
fn lending_runtime() -> Option<(Runtime, usize, usize)> {
    let (rt, c0, c1) = two_core_runtime(true)?;
    if !rt.lends_workers() {
        eprintln!(
            "skipped: the {} backend's counts are not live here, so nothing is lent",
            rt.backend()
        );
        return None;
    }
    Some((rt, c0, c1))
}

/// The pipes of core 0's two readers and of `q`: their read ends in `st`, their write ends
/// in the [`Release`] returned.
fn pipes(st: &Arc<State>) -> Release {
    let readers: Vec<_> = (0..2).map(|_| std::io::pipe().unwrap()).collect();
    let (q_rx, q_tx) = std::io::pipe().unwrap();
    for (i, (rx, _)) in readers.iter().enumerate() {
        *st.readers_rx[i].lock().unwrap() = Some(rx.try_clone().unwrap());
    }
    *st.q_rx.lock().unwrap() = Some(q_rx);
    Release {
        st: st.clone(),
        txs: readers
            .iter()
            .map(|(_, tx)| tx.try_clone().unwrap())
            .collect(),
        q: q_tx,
        q_written: false,
    }
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

    /// Spawns a task that takes a role (`role`), unless a few are queued already: the test
    /// keeps a few queued, not millions.
    fn queue_role(
        self: &Arc<Self>,
        rt: &Runtime,
        handles: &mut Vec<JoinHandle<()>>,
        role: fn(&State, usize, usize),
        c0: usize,
        c1: usize,
    ) {
        if self.outstanding.load(Ordering::Acquire) < 4 {
            self.outstanding.fetch_add(1, Ordering::AcqRel);
            let st = self.clone();
            handles.push(rt.spawn(move || {
                role(&st, c0, c1);
                st.outstanding.fetch_sub(1, Ordering::AcqRel);
            }));
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

impl Release {
    /// Writes `q` (core 1's blocker returns) once both readers of core 0 are blocked and core
    /// 1's other spinner runs: core 1 has two ready workers only then, and core 0 borrows
    /// only then.
    fn q_once_readers_blocked(&mut self) {
        if !self.q_written
            && self.st.extra.load(Ordering::Acquire)
            && self.st.blocked.load(Ordering::Acquire) >= 2
        {
            self.q.write_all(b"q").unwrap();
            self.q_written = true;
        }
    }
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
