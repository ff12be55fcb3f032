//! The Bpf backend against the real kernel: per-CPU ready counts that match `/proc` and the
//! Perf backend through sleeps, reads, spinning, migrations and exits; only this process's
//! threads count; a wake-up when the only ready thread of a CPU blocks, and none while threads
//! only compute; without privilege, a clear reason and Auto falls through.
//!
//! They need CAP_BPF and CAP_PERFMON (root) and a build with clang: elsewhere they skip,
//! saying why, unless `UMT_REQUIRE_MONITOR=bpf`, which makes that a failure.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use umt_sys::{BackendKind, CpuId, Monitor, cpu};

/// One test at a time: each counts every block of its threads.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs test `name` of this binary, alone, through `cmd` (the binary, or a wrapper that runs
/// it, with what the child needs: a user, an environment variable): its status, and its
/// output, standard output then standard error.
fn run_test(
    mut cmd: std::process::Command,
    name: &str,
) -> std::io::Result<(std::process::ExitStatus, String)> {
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    // A binary just copied may be "busy" for a moment: another test's child, forked while
    // the copy was open for writing, holds that descriptor until it execs (ETXTBSY).
    let mut tries = 0;
    let out = loop {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => break r?,
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status, text))
}

fn required() -> bool {
    std::env::var("UMT_REQUIRE_MONITOR").is_ok_and(|b| b == "bpf")
}

/// The Bpf monitor, or `None` (the test skips, saying why).
fn bpf_monitor() -> Option<Monitor> {
    match Monitor::new(BackendKind::Bpf) {
        Ok(m) => Some(m),
        Err(e) if required() => panic!("UMT_REQUIRE_MONITOR=bpf, but: {e}"),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// The calling thread's voluntary context switches: the times it blocked.
fn voluntary_switches() -> u64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD).unwrap();
    usage.voluntary_context_switches() as u64
}

/// The state letter of thread `tid` of this process (`R`, `S`, `D`...).
fn thread_state(tid: i32) -> char {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1;
            after.trim_start().chars().next()
        })
        .unwrap_or('?')
}

/// Waits (up to 10 s) until `cond` holds; fails with `explain()` otherwise.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool, explain: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out: {what}\n{}",
            explain()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Expected ready counts: `per_cpu[c]` threads ready on CPU `c`.
fn expected(cpus: usize, on: &[CpuId]) -> Vec<i64> {
    let mut v = vec![0; cpus];
    for &c in on {
        v[c] += 1;
    }
    v
}

/// What the worker threads of [`counts_follow_proc_and_perf`] do next.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Phase {
    /// Read their pipe (blocked until the main thread writes).
    Read,
    /// Spin.
    Spin,
    /// Move to the next CPU while they spin: the odd ones pin themselves (they block while
    /// the kernel moves them, so this is a block and an unblock), the even ones are moved
    /// by the main thread while they run (a migration).
    Move,
    /// Exit: the even ones unregister first, the odd ones exit registered.
    Exit,
}

impl From<u8> for Phase {
    fn from(v: u8) -> Phase {
        [Phase::Read, Phase::Spin, Phase::Move, Phase::Exit][usize::from(v.min(3))]
    }
}

#[test]
fn counts_follow_proc_and_perf() {
    let _serial = serial();
    let Some(bpf) = bpf_monitor() else {
        return;
    };
    // The Perf backend watches the same threads where it can run, for a second opinion.
    let perf = Monitor::new(BackendKind::Perf).ok();
    let cpus = cpu::process_cpus().unwrap();
    let possible = cpu::possible_cpus().unwrap();
    let n = 4;
    let home: Vec<CpuId> = (0..n).map(|i| cpus[i % cpus.len()]).collect();
    let moved: Vec<CpuId> = (0..n).map(|i| cpus[(i + 1) % cpus.len()]).collect();
    // An atomic, not a mutex: spinners contending for a lock would block on it.
    let phase = std::sync::atomic::AtomicU8::new(Phase::Read as u8);
    let moved_count = AtomicUsize::new(0);
    let tids: Vec<_> = (0..n)
        .map(|_| std::sync::atomic::AtomicI32::new(0))
        .collect();
    let pipes: Vec<_> = (0..n).map(|_| std::io::pipe().unwrap()).collect();
    let (readers, mut writers): (Vec<_>, Vec<_>) = pipes.into_iter().unzip();
    let registered = Barrier::new(n + 1);
    let before = bpf.stats();

    let ready_of = |m: &Monitor| {
        if !m.counts_are_live() {
            m.drain().unwrap();
        }
        m.ready_counts()
    };
    let check = |what: &str, on: &[CpuId]| {
        let want = expected(possible, on);
        wait_until(
            &format!("bpf counts {what}"),
            || bpf.ready_counts() == want,
            || format!("want {want:?}, bpf {:?}", bpf.ready_counts()),
        );
        if let Some(p) = &perf {
            wait_until(
                &format!("perf counts {what}"),
                || ready_of(p) == want,
                || format!("want {want:?}, perf {:?}", p.ready_counts()),
            );
        }
    };

    std::thread::scope(|s| {
        for (i, mut rx) in readers.into_iter().enumerate() {
            let (bpf, perf, phase, registered) = (&bpf, &perf, &phase, &registered);
            let (home, moved, moved_count, tid) = (home[i], moved[i], &moved_count, &tids[i]);
            s.spawn(move || {
                cpu::pin_current_thread(home).unwrap();
                tid.store(cpu::current_tid(), Ordering::SeqCst);
                bpf.register_current_thread().unwrap();
                if let Some(p) = perf {
                    p.register_current_thread().unwrap();
                }
                registered.wait();
                let mut byte = [0u8; 1];
                rx.read_exact(&mut byte).unwrap();
                let mut did_move = false;
                loop {
                    let now = phase.load(Ordering::SeqCst);
                    match Phase::from(now) {
                        Phase::Read | Phase::Spin => std::hint::spin_loop(),
                        Phase::Move if !did_move => {
                            if i % 2 == 1 {
                                cpu::pin_current_thread(moved).unwrap();
                            }
                            did_move = true;
                            moved_count.fetch_add(1, Ordering::SeqCst);
                        }
                        Phase::Move => std::hint::spin_loop(),
                        Phase::Exit => break,
                    }
                }
                if i % 2 == 0 {
                    bpf.unregister_current_thread().unwrap();
                    if let Some(p) = perf {
                        p.unregister_current_thread().unwrap();
                    }
                }
            });
        }
        registered.wait();
        // Every thread blocked in its read: nothing is ready.
        wait_until(
            "every reader sleeps",
            || {
                tids.iter()
                    .all(|t| thread_state(t.load(Ordering::SeqCst)) == 'S')
            },
            String::new,
        );
        check("with every thread blocked", &[]);
        // Woken: each spins on its own CPU.
        phase.store(Phase::Spin as u8, Ordering::SeqCst);
        for w in &mut writers {
            w.write_all(b"x").unwrap();
        }
        check("with every thread spinning at home", &home);
        // Each moves to the next CPU while it runs.
        for (i, tid) in tids.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
            let mut set = nix::sched::CpuSet::new();
            set.set(moved[i]).unwrap();
            let pid = nix::unistd::Pid::from_raw(tid.load(Ordering::SeqCst));
            nix::sched::sched_setaffinity(pid, &set).unwrap();
        }
        phase.store(Phase::Move as u8, Ordering::SeqCst);
        wait_until(
            "every thread moved",
            || moved_count.load(Ordering::SeqCst) == n,
            String::new,
        );
        check("after the moves", &moved);
        phase.store(Phase::Exit as u8, Ordering::SeqCst);
    });
    // A scoped thread is joined once its closure returns, before the kernel runs its exit
    // (which may block, in `exit_mm` say): wait until each is past `do_exit`'s exit program,
    // i.e. a zombie or gone (`exit_notify` comes after the `sched_process_exit` tracepoint).
    wait_until(
        "every thread exited",
        || {
            tids.iter()
                .all(|t| matches!(thread_state(t.load(Ordering::SeqCst)), 'X' | 'Z' | '?'))
        },
        String::new,
    );
    // Half unregistered, half exited registered: nothing is left, anywhere.
    check("after every thread ended", &[]);
    let st = bpf.stats();
    assert_eq!(st.registered, 0, "{st:?}");
    // Every block was followed by an unblock.
    assert_eq!(
        st.blocks - before.blocks,
        st.unblocks - before.unblocks,
        "{st:?}"
    );
    assert!(st.blocks - before.blocks >= n as u64, "{st:?}");
    // The threads moved while running were migrations.
    assert!(st.migrations - before.migrations >= n as u64 / 2, "{st:?}");
}

#[test]
fn other_processes_change_nothing() {
    let _serial = serial();
    let Some(bpf) = bpf_monitor() else {
        return;
    };
    let cpus = cpu::process_cpus().unwrap();
    let possible = cpu::possible_cpus().unwrap();
    // Another process that blocks and wakes a few thousand times a second, on every CPU.
    let mut child = std::process::Command::new("sh")
        .args(["-c", "while :; do sleep 0.001; done"])
        .spawn()
        .unwrap();
    std::thread::scope(|s| {
        let (bpf, cpu0) = (&bpf, cpus[0]);
        let spinner = s.spawn(move || {
            cpu::pin_current_thread(cpu0).unwrap();
            let before = bpf.stats().blocks;
            let switches = voluntary_switches();
            bpf.register_current_thread().unwrap();
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(300) {
                std::hint::spin_loop();
            }
            let counts = bpf.ready_counts();
            bpf.unregister_current_thread().unwrap();
            // Only this thread's own blocks (a lock it slept on while registering) count.
            let own = voluntary_switches() - switches;
            (bpf.stats().blocks - before, own, counts)
        });
        let (blocks, own, counts) = spinner.join().unwrap();
        assert!(
            blocks <= own,
            "{blocks} blocks counted, this thread blocked {own} times"
        );
        assert_eq!(counts, expected(possible, &[cpus[0]]));
    });
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_wakeup_comes_only_when_the_last_ready_thread_of_a_cpu_blocks() {
    let _serial = serial();
    let Some(bpf) = bpf_monitor() else {
        return;
    };
    let c = *cpu::process_cpus().unwrap().last().unwrap();
    let (mut rx, tx) = std::io::pipe().unwrap();
    let waiter = cpu::current_tid();
    // `go_block`: rounds the waiter asked for; `may_block`: rounds in which the waiter was seen
    // asleep in its wait, so armed. Only then does the thread block: a drop that came before
    // the arm sends no record (the wait sees it in the counters and returns at once), and the
    // record is what this test is about.
    let (go_block, may_block) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Owned by this closure: if an assertion below fails, the writer closes and `done` is
        // set as it unwinds, before the scope joins the threads, whose read then fails and
        // whose loops end instead of waiting forever (the failure is reported, not a hang).
        let mut tx = tx;
        let _stop = SetOnDrop(&done);
        let (bpf, go_block, may_block, done) = (&bpf, &go_block, &may_block, &done);
        s.spawn(move || {
            cpu::pin_current_thread(c).unwrap();
            bpf.register_current_thread().unwrap();
            let mut rounds = 0;
            while !done.load(Ordering::SeqCst) {
                if may_block.load(Ordering::SeqCst) > rounds {
                    rounds += 1;
                    let mut b = [0u8; 1];
                    rx.read_exact(&mut b).unwrap();
                }
                std::hint::spin_loop();
            }
            bpf.unregister_current_thread().unwrap();
        });
        // Not registered, not pinned: its own sleeps count nowhere. After the waiter asks for a
        // round, the waiter's next sleep is the wait (it arms, then sleeps in epoll_wait).
        s.spawn(move || {
            let mut rounds = 0;
            while !done.load(Ordering::SeqCst) {
                if go_block.load(Ordering::SeqCst) > rounds && thread_state(waiter) == 'S' {
                    rounds += 1;
                    may_block.store(rounds, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        wait_until("the thread counts", || bpf.ready(c) == 1, String::new);
        bpf.drain_cpu(c).unwrap();
        // Computing only: every wait times out, and nothing is sent.
        for _ in 0..3 {
            assert!(!bpf.wait_cpu(c, Some(Duration::from_millis(50))).unwrap());
            bpf.drain_cpu(c).unwrap();
        }
        assert_eq!(bpf.stats().wakeups, 0, "{:?}", bpf.stats());
        for round in 1..=2u64 {
            // The only ready thread of `c` blocks while the waiter waits: it wakes, once.
            go_block.fetch_add(1, Ordering::SeqCst);
            assert!(bpf.wait_cpu(c, Some(Duration::from_secs(10))).unwrap());
            assert_eq!(may_block.load(Ordering::SeqCst), round as usize);
            assert_eq!(bpf.ready(c), 0);
            assert_eq!(bpf.drain_cpu(c).unwrap(), 1, "one wake-up record");
            assert_eq!(bpf.stats().wakeups, round);
            // Still blocked: nothing new, so the next wait sleeps to its timeout.
            assert!(!bpf.wait_cpu(c, Some(Duration::from_millis(50))).unwrap());
            tx.write_all(b"x").unwrap();
            wait_until("the thread runs again", || bpf.ready(c) == 1, String::new);
            bpf.drain_cpu(c).unwrap();
        }
    });
}

/// The time a CPU has more than one ready registered thread is kept by the programs, at the
/// context switches and wake-ups that change the count (`Monitor::oversubscribed`): none
/// while one thread computes there and the other is blocked, growing once the blocked one is
/// woken beside it, fixed again once it blocks again, and never more than the time that
/// passed.
#[test]
fn the_time_above_one_ready_thread_is_kept_in_the_kernel() {
    let _serial = serial();
    let Some(bpf) = bpf_monitor() else {
        return;
    };
    let began = Instant::now();
    let c = *cpu::process_cpus().unwrap().last().unwrap();
    let (mut wake_r, wake_w) = std::io::pipe().unwrap();
    let (mut again_r, again_w) = std::io::pipe().unwrap();
    let (first_may_stop, second_may_block, registered) = (
        AtomicBool::new(false),
        AtomicBool::new(false),
        AtomicBool::new(false),
    );
    std::thread::scope(|s| {
        // A failed assertion unwinds out of here: the flags set and the pipes' write ends
        // dropped (the blocked thread's reads then fail) let both threads end, so the test
        // fails rather than hangs.
        let (mut wake_w, mut again_w) = (wake_w, again_w);
        let _stop = SetOnDrop(&first_may_stop);
        let _unblock = SetOnDrop(&second_may_block);
        let (bpf, first_may_stop) = (&bpf, &first_may_stop);
        let (second_may_block, registered) = (&second_may_block, &registered);
        s.spawn(move || {
            cpu::pin_current_thread(c).unwrap();
            bpf.register_current_thread().unwrap();
            while !first_may_stop.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            bpf.unregister_current_thread().unwrap();
        });
        wait_until("one thread counts", || bpf.ready(c) == 1, String::new);
        if bpf.oversubscribed(c).is_none() {
            eprintln!("skipped: the kernel's clock cannot be read here (a time namespace)");
            return;
        }
        let over = || bpf.oversubscribed(c).unwrap_or_default();
        // A fall that made the count one may still be adding its time: two readings a
        // moment apart that agree.
        let settled = || loop {
            let first = over();
            std::thread::sleep(Duration::from_millis(1));
            if over() == first {
                break first;
            }
        };
        assert_eq!(settled(), Duration::ZERO, "one ready thread");
        let second = s.spawn(move || {
            cpu::pin_current_thread(c).unwrap();
            bpf.register_current_thread().unwrap();
            registered.store(true, Ordering::SeqCst);
            // Blocks: the programs count it out at the switch. (A read that fails is the
            // test unwinding: the write end is gone.)
            let mut byte = [0u8];
            let _ = wake_r.read_exact(&mut byte);
            while !second_may_block.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            let _ = again_r.read_exact(&mut byte);
            bpf.unregister_current_thread().unwrap();
        });
        wait_until(
            "the second thread blocks",
            || registered.load(Ordering::SeqCst) && bpf.ready(c) == 1,
            || format!("ready {}", bpf.ready(c)),
        );
        // One ready thread: nothing is added while the other stays blocked.
        let before = settled();
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(5));
            assert_eq!(over(), before, "the second thread is blocked");
        }
        wake_w.write_all(&[1]).unwrap();
        wait_until("the woken thread counts", || bpf.ready(c) == 2, String::new);
        wait_until(
            "the time above one grows",
            || over() > before,
            || format!("{:?}", over()),
        );
        second_may_block.store(true, Ordering::SeqCst);
        wait_until("it blocks again", || bpf.ready(c) == 1, String::new);
        let kept = settled();
        assert!(kept > before, "{kept:?} <= {before:?}");
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(5));
            assert_eq!(over(), kept, "the second thread is blocked again");
        }
        assert!(
            kept <= began.elapsed(),
            "{kept:?} above one in {:?}",
            began.elapsed()
        );
        again_w.write_all(&[1]).unwrap();
        second.join().unwrap();
    });
}

/// Sets its flag when dropped, unwinding included.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The child side of [`without_privilege_bpf_is_unavailable_and_auto_falls_through`].
fn unprivileged_checks() {
    let u = Monitor::probe(BackendKind::Bpf).expect_err("Bpf must not load without privilege");
    assert_eq!(u.backend, BackendKind::Bpf);
    let text = u.to_string();
    assert!(text.contains("setcap cap_bpf,cap_perfmon+ep"), "{text}");
    let m = Monitor::new(BackendKind::Auto).unwrap();
    assert_ne!(m.backend(), BackendKind::Bpf);
    let sel = m.selection();
    assert!(
        sel.rejected.iter().any(|r| r.backend == BackendKind::Bpf),
        "{sel}"
    );
    let e = Monitor::new(BackendKind::Bpf).unwrap_err();
    assert!(matches!(e, umt_sys::Error::Unavailable(_)), "{e:?}");
}

#[test]
fn without_privilege_bpf_is_unavailable_and_auto_falls_through() {
    if std::env::var_os("UMT_BPF_UNPRIVILEGED_CHILD").is_some() {
        unprivileged_checks();
        return;
    }
    let here = Monitor::probe(BackendKind::Bpf);
    if !nix::unistd::geteuid().is_root() {
        // Already unprivileged (unless granted the capabilities).
        if here
            .as_ref()
            .is_err_and(|u| u.reason.contains("not permitted"))
        {
            unprivileged_checks();
        }
        return;
    }
    if let Err(u) = here {
        // Not for lack of privilege (no BTF, no BPF in this kernel, a filter): nothing to
        // take away.
        if required() {
            panic!("UMT_REQUIRE_MONITOR=bpf, but: {u}");
        }
        eprintln!("skipped: {u}");
        return;
    }
    // As root: the same checks in a child running as nobody. The child runs this binary
    // through `/proc/self/exe` (the forked child's own, this executable), which the kernel
    // opens without walking its path: a checkout inside a folder nobody may enter (a home
    // directory of mode 700) runs it all the same.
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.env("UMT_BPF_UNPRIVILEGED_CHILD", "1")
        .uid(65534)
        .gid(65534);
    let (status, text) = match run_test(
        cmd,
        "without_privilege_bpf_is_unavailable_and_auto_falls_through",
    ) {
        Ok(out) => out,
        // The binary's own mode lets nobody not run it (built under `umask 077`).
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            eprintln!("skipped: nobody cannot run this test binary here: {e}");
            return;
        }
        Err(e) => panic!("running this test binary as nobody: {e}"),
    };
    if !status.success() && text.contains("Permission denied") && !text.contains("panicked") {
        eprintln!("skipped: nobody cannot run this test binary here: {text}");
        return;
    }
    assert!(status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

/// The check above from a checkout inside a folder nobody may enter (root's home, mode 700:
/// issue 30 found the test failing there): a copy of this binary in such a folder runs it,
/// and its child as nobody runs the checks instead of skipping them.
#[test]
fn the_unprivileged_checks_run_from_a_folder_nobody_may_enter() {
    use std::os::unix::fs::PermissionsExt;
    if std::env::var_os("UMT_BPF_UNPRIVILEGED_CHILD").is_some() || !nix::unistd::geteuid().is_root()
    {
        return;
    }
    if let Err(u) = Monitor::probe(BackendKind::Bpf) {
        if required() {
            panic!("UMT_REQUIRE_MONITOR=bpf, but: {u}");
        }
        eprintln!("skipped: {u}");
        return;
    }
    let private = tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .unwrap();
    let copy = private.path().join("bpf_backend");
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (status, text) = run_test(
        std::process::Command::new(&copy),
        "without_privilege_bpf_is_unavailable_and_auto_falls_through",
    )
    .unwrap();
    assert!(status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
    assert!(!text.contains("skipped"), "the checks did not run: {text}");
}

/// Lets the thread of [`namespaced_checks`] finish whatever happens, so that a failed check
/// ends the child process instead of leaving its scope waiting for a spinning thread.
struct Release<'a> {
    go: &'a AtomicBool,
    done: &'a AtomicBool,
    tx: std::io::PipeWriter,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.go.store(true, Ordering::SeqCst);
        let _ = self.tx.write_all(b"x");
        self.done.store(true, Ordering::SeqCst);
    }
}

/// The child side of [`counts_inside_a_pid_namespace`], run as the first process of a PID
/// namespace of its own: one thread's block and wake-up move its CPU's count, as outside.
fn namespaced_checks() {
    assert_eq!(
        std::process::id(),
        1,
        "not the first process of a new PID namespace"
    );
    let bpf = Monitor::new(BackendKind::Bpf).unwrap();
    let c = *cpu::process_cpus().unwrap().last().unwrap();
    let (mut rx, tx) = std::io::pipe().unwrap();
    let (go, done) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        let (bpf, go, done) = (&bpf, &go, &done);
        s.spawn(move || {
            cpu::pin_current_thread(c).unwrap();
            bpf.register_current_thread().unwrap();
            while !go.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            let mut b = [0u8; 1];
            rx.read_exact(&mut b).unwrap();
            while !done.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            bpf.unregister_current_thread().unwrap();
        });
        let mut release = Release { go, done, tx };
        let state = || format!("ready {:?}, {:?}", bpf.ready_counts(), bpf.stats());
        wait_until("the spinning thread counts", || bpf.ready(c) == 1, state);
        let before = bpf.stats();
        go.store(true, Ordering::SeqCst);
        wait_until("its block is counted", || bpf.ready(c) == 0, state);
        assert!(bpf.stats().blocks > before.blocks, "{}", state());
        release.tx.write_all(b"x").unwrap();
        wait_until("its wake-up is counted", || bpf.ready(c) == 1, state);
        assert!(bpf.stats().unblocks > before.unblocks, "{}", state());
    });
    assert_eq!(bpf.ready(c), 0, "unregistered: nothing left");
}

/// In a container the process's ids are not the kernel's: the programs find its threads
/// through its PID namespace (issue 30: they used to count nothing there, silently).
#[test]
fn counts_inside_a_pid_namespace() {
    if std::env::var_os("UMT_BPF_PIDNS_CHILD").is_some() {
        namespaced_checks();
        return;
    }
    let _serial = serial();
    if bpf_monitor().is_none() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    // `timeout`: a child that hangs fails this test instead of stopping the suite.
    let mut cmd = std::process::Command::new("timeout");
    cmd.args(["120", "unshare", "--pid", "--fork", "--mount-proc"])
        .arg(&exe)
        .env("UMT_BPF_PIDNS_CHILD", "1");
    let (status, text) = match run_test(cmd, "counts_inside_a_pid_namespace") {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipped: cannot run timeout and unshare (coreutils, util-linux): {e}");
            return;
        }
    };
    if !status.success() && text.starts_with("unshare:") {
        // No new namespaces here (a container without CAP_SYS_ADMIN).
        eprintln!("skipped: {text}");
        return;
    }
    assert!(status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

/// Short of file descriptors, opening the backend fails saying so and naming `ulimit -n`,
/// never a kernel too old (issue 30, item 10): the check before loading refuses each limit
/// too low to load, and the first limit it lets through opens (no step of the load then
/// fails for want of one, which would first show as a relocation error). Run in a child of its own: it lowers the
/// process's descriptor limit.
#[test]
fn out_of_descriptors_the_reason_names_the_limit() {
    if std::env::var_os("UMT_BPF_FEW_FDS_CHILD").is_some() {
        few_descriptors_checks();
        return;
    }
    let Some(m) = bpf_monitor() else { return };
    drop(m);
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.env("UMT_BPF_FEW_FDS_CHILD", "1");
    let (status, text) = run_test(cmd, "out_of_descriptors_the_reason_names_the_limit").unwrap();
    assert!(status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

/// The child's part: opens the backend with 0, 1, 2, ... descriptors free under the limit,
/// up to the first number that lets it open, and checks each refusal's reason.
fn few_descriptors_checks() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let open: Vec<u64> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .collect();
    let mut refused = 0;
    for free in 0..=256u64 {
        // The least limit with `free` numbers unused below it (new descriptors take the
        // lowest free numbers, holes included).
        let limit = (0..)
            .find(|&l| l - open.iter().filter(|&&fd| fd < l).count() as u64 >= free)
            .unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, limit, hard).unwrap();
        let opened = Monitor::new(BackendKind::Bpf);
        setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
        match opened {
            Ok(_) => {
                assert!(refused > 0, "opened with {free} descriptors free");
                eprintln!("refused {refused} times, then opened with {free} free");
                return;
            }
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("ulimit -n"), "with {free} free: {text}");
                assert!(!text.contains("5.18"), "with {free} free: {text}");
                refused += 1;
            }
        }
    }
    panic!("256 free descriptors did not let the backend open");
}
