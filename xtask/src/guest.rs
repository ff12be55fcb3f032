//! `vm test` and `vm bench`: what runs inside the patched guest.

use std::fs;

use anyhow::{Context, Result, bail};

use crate::kernel::{self, Kernel};
use crate::vm::{self, GuestFile, Payload};
use crate::{BuildArgs, VmArgs};

/// Kernel log lines that fail `vm test`: lockdep, KASAN, BUG, WARN, RCU and panics.
const BAD_KERNEL_LINES: &[&str] = &[
    "BUG: ",
    "WARNING: ",
    "KASAN: ",
    "possible circular locking dependency",
    "possible recursive locking detected",
    "inconsistent lock state",
    "suspicious RCU usage",
    "INFO: task ",
    "Oops: ",
    "Kernel panic",
    "UBSAN: ",
];

/// Seconds one suite may take in the guest before it counts as hung: on the plain kernel
/// under TCG every suite takes under a minute; the debug kernel (KASAN, lockdep) is ~20x slower.
const SUITE_TIMEOUT_S: u32 = 300;
const DEBUG_SUITE_TIMEOUT_S: u32 = 1800;

/// `suite LIMIT CMD...`: runs CMD; if it is still running after LIMIT seconds, prints what
/// each of its threads is doing (state, wait channel, kernel stack: what a hang report needs)
/// and kills it. A plain `timeout` would say nothing about where it hung.
const SUITE_FN: &str = r#"suite() {
	limit=$1; shift
	"$@" &
	p=$!
	(
		n=0
		while [ $n -lt "$limit" ]; do
			sleep 1
			kill -0 $p 2>/dev/null || exit 0
			n=$((n + 1))
		done
		echo "HUNG: $1 still running after $limit s; its threads:"
		for t in /proc/$p/task/*; do
			echo "thread $(cat $t/comm) $(grep State: $t/status) wchan $(cat $t/wchan) syscall $(cat $t/syscall)"
			sed 's/^/    /' $t/stack
		done
		kill -9 $p
	) &
	w=$!
	wait $p
	r=$?
	kill $w 2>/dev/null
	return $r
}
"#;

/// Test executables that check host-side sources rather than kernel behaviour.
const HOST_ONLY_TESTS: &[&str] = &["umt-sys-abi_kernel_patch"];

/// Suites `vm test --rt` leaves out: the Perf backend's own tests expect the switch records
/// of a non-RT kernel (on PREEMPT_RT a nanosleep's record and the ring's fill differ); the
/// series under test does not touch perf.
const NOT_ON_RT: &[&str] = &["umt-sys-perf_backend"];

/// Lines of the guest console that report a kernel problem, but for the known upstream
/// ones ([`known_upstream`]).
pub(crate) fn kernel_problems(console: &str) -> Vec<&str> {
    let lines: Vec<&str> = console.lines().collect();
    (0..lines.len())
        .filter(|&i| counts_as_problem(&lines[i..]))
        .map(|i| lines[i])
        .collect()
}

/// Whether the first of `from` starts a kernel report that fails `vm test`.
fn counts_as_problem(from: &[&str]) -> bool {
    from.first().is_some_and(|l| counts_as_problem_line(l)) && known_upstream(from).is_none()
}

/// Whether `line` is one of [`BAD_KERNEL_LINES`].
fn counts_as_problem_line(line: &str) -> bool {
    BAD_KERNEL_LINES.iter().any(|bad| line.contains(bad))
}

/// The first report [`kernel_problems`] counts, from its first line through its trace's end
/// (`---[ end trace`), at most [`REPORT_LINES`] lines: what a CI log needs to name the code
/// path, where the console file stays on the machine that ran it.
pub(crate) fn first_problem_report(console: &str) -> Option<String> {
    let lines: Vec<&str> = console.lines().collect();
    let start = (0..lines.len()).find(|&i| counts_as_problem(&lines[i..]))?;
    let rest = &lines[start..lines.len().min(start + REPORT_LINES)];
    let end = rest
        .iter()
        .position(|l| l.contains("---[ end trace"))
        .map_or(rest.len(), |e| e + 1);
    Some(rest[..end].join("\n"))
}

/// Lines [`first_problem_report`] prints at most: a lockdep report with its stacks fits.
const REPORT_LINES: usize = 80;

/// Whether the report that starts `report` (its first line, then what the kernel printed
/// after it) is a known problem of the upstream kernel outside the UMT series, and which.
///
/// - Linux 6.12's io-wq on PREEMPT_RT: `io_get_next_work()` calls `wake_up(&wq->hash->wait)`
///   (a wait queue, whose lock sleeps on RT) under `raw_spin_lock(&acct->lock)`, so an io_uring
///   worker (`iou-wrk-*`) that finds hashed work stalled reports "sleeping function called
///   from invalid context" holding `&acct->lock` and `&hash->wait`. umt-rt's I/O tests
///   trigger it through buffered file writes on the ring; no UMT code is on its stack.
/// - Linux 6.12's `put_task_struct()` on PREEMPT_RT: a task that drops the last reference to
///   another task while it is itself blocked on an rt_mutex (`pi_blocked_on` set: the
///   priority-inheritance chain walk of `task_blocks_on_rt_mutex()` drops its reference to a
///   lock owner that has exited and been reaped meanwhile) frees it in place, and the free
///   takes sleeping spinlocks, which lockdep reports as a WARNING at `rt_spin_lock`'s
///   `lockdep_assert(!current->pi_blocked_on)`. Fixed upstream after 6.12 ("sched: Do not
///   call __put_task_struct() on rt if pi_blocked_on is set", 2025: the free is deferred to
///   RCU). The PI-futex selftests, whose threads block on PI mutexes and exit, can trigger
///   it; the UMT hooks only count, and are not on its stack. Not counted only with
///   `__put_task_struct` and the chain walk on the report's own call trace, and no UMT frame.
pub(crate) fn known_upstream(report: &[&str]) -> Option<&'static str> {
    let first = report.first()?;
    let after = &report[1..report.len().min(8)];
    let has = |s: &str| after.iter().any(|l| l.contains(s));
    if first.contains("BUG: sleeping function called from invalid context")
        && has("name: iou-wrk-")
        && has("(&acct->lock)")
        && has("(&hash->wait)")
    {
        return Some("io-wq wakes a sleeping wait queue under a raw spinlock (6.12, PREEMPT_RT)");
    }
    // The whole report: its call trace comes after the registers.
    let trace = &report[1..report.len().min(REPORT_LINES)];
    let trace = trace
        .iter()
        .position(|l| l.contains("---[ end trace") || counts_as_problem_line(l))
        .map_or(trace, |end| &trace[..end]);
    // Its frames: what follows "Call Trace:" (the header names the task, `umt_test` too).
    let frames = trace
        .iter()
        .position(|l| l.contains("Call Trace:"))
        .map_or(&[][..], |at| &trace[at + 1..]);
    let frame = |s: &str| frames.iter().any(|l| l.contains(s));
    (first.contains("WARNING: ")
        && first.contains("kernel/locking/spinlock_rt.c")
        && first.contains("rt_spin_lock")
        && frame("__put_task_struct")
        && (frame("rt_mutex_adjust_prio_chain") || frame("task_blocks_on_rt_mutex"))
        && !frame("umt"))
    .then_some(
        "put_task_struct frees a task while blocked on an rt_mutex (6.12, PREEMPT_RT; \
         fixed upstream by deferring it)",
    )
}

fn patched_kernel(vm: &VmArgs, payload: Payload) -> Result<(Kernel, Vec<GuestFile>)> {
    let k = match &vm.kernel {
        Some(_) => bail!("`vm test` and `vm bench` build their kernels; drop --kernel"),
        None => kernel::build(&BuildArgs {
            debug: vm.debug,
            rt: vm.rt,
            ..Default::default()
        })?,
    };
    let mut files = vm::workspace_payload(payload)?;
    if let Some(st) = &k.selftest {
        files.push(GuestFile {
            src: st.clone(),
            dest: "/work/selftests/umt_test".into(),
            executable: false,
        });
    }
    Ok((k, files))
}

/// Suites that also run with the Kernel backend in events mode (`UMT_KERNEL_MODE=events`:
/// every block and unblock signalled on the CPU files, not only the drops that find a file
/// empty), the mode umt-sys keeps for measurements. Not umt-rt's timing scenarios: in events
/// mode a `stats()` can miss the events another drainer has read and not yet applied (seen
/// once in 30 runs of `umt-rt-blocking` in the PREEMPT_RT guest).
const EVENTS_MODE_TESTS: [&str; 1] = ["umt-sys-kernel_backend"];

/// The guest script of `vm test`: a TAP stream of suites, each suite's own output nested
/// under `# `.
fn test_script(files: &[GuestFile], debug: bool, rt: bool) -> String {
    let limit = if debug || rt {
        DEBUG_SUITE_TIMEOUT_S
    } else {
        SUITE_TIMEOUT_S
    };
    let mut suites: Vec<(String, String)> = vec![
        (
            // Every selftest runs in the guest, none skips (the memory cgroup one needs the
            // controller the guest's init mounts): a skip fails the suite.
            "kernel selftests: tools/testing/selftests/umt (none skipped)".into(),
            format!(
                "suite {limit} /work/selftests/umt_test > /tmp/selftests.txt 2>&1; r=$?; \
                 cat /tmp/selftests.txt; [ $r -eq 0 ] && ! grep -q '# SKIP' /tmp/selftests.txt"
            ),
        ),
        (
            // UMT stays enabled from here on (see `crates/umt-sys/examples/hold.rs`): the
            // suites' monitors no longer flip the kernel's static key, whose text patching
            // raced with other vCPUs under TCG. The selftests above test the flips.
            "umt-sys hold example keeps UMT enabled for the suites".into(),
            "/work/bin/hold > /tmp/hold.txt 2>&1 & sleep 1; cat /tmp/hold.txt; \
             grep -q '^hold: UMT enabled' /tmp/hold.txt"
                .into(),
        ),
        (
            "umt-sys watch example selects the Kernel backend".into(),
            "timeout 300 /work/bin/watch --seconds 1 > /tmp/watch.txt 2>&1; r=$?; head -n 20 /tmp/watch.txt; \
             head -n 1 /tmp/watch.txt | grep -q '^backend: kernel' && [ $r -eq 0 ]"
                .into(),
        ),
    ];
    for f in files {
        let Some(name) = f.dest.strip_prefix("/work/tests/") else {
            continue;
        };
        let wanted = name.starts_with("umt-sys-") || name.starts_with("umt-rt-");
        if wanted && !HOST_ONLY_TESTS.contains(&name) && !(rt && NOT_ON_RT.contains(&name)) {
            suites.push((
                format!("{name} (Kernel backend forced)"),
                // One UMT state per process: tests that each build a Kernel monitor or
                // runtime must not overlap.
                format!("suite {limit} {} --test-threads=1", f.dest),
            ));
            if EVENTS_MODE_TESTS.contains(&name) {
                suites.push((
                    format!("{name} (Kernel backend forced, events mode)"),
                    format!(
                        "export UMT_KERNEL_MODE=events; suite {limit} {} --test-threads=1",
                        f.dest
                    ),
                ));
            }
        }
    }
    let mut s = String::from(SUITE_FN);
    s.push_str(
        "set -o pipefail\nexport UMT_TEST_BACKEND=kernel UMT_REQUIRE_MONITOR=kernel\nfail=0\necho 'TAP version 13'\necho \"1..",
    );
    s.push_str(&format!("{}\"\n", suites.len()));
    s.push_str("echo \"# kernel $(uname -r), $(nproc) CPUs\"\n");
    for (i, (name, cmd)) in suites.iter().enumerate() {
        let n = i + 1;
        s.push_str(&format!(
            "( {cmd} ) 2>&1 | sed 's/^/# /'\nif [ $? -eq 0 ]; then echo 'ok {n} - {name}'; \
             else echo 'not ok {n} - {name}'; fail=1; fi\n"
        ));
    }
    s.push_str("exit $fail\n");
    s
}

/// `cargo xtask vm test`.
pub(crate) fn test(vm_args: &VmArgs) -> Result<i32> {
    let mut vm_args = vm_args.clone();
    vm_args.tcg_threads.get_or_insert(vm::TcgThreads::Single);
    let vm_args = &vm_args;
    let (k, files) = patched_kernel(vm_args, Payload::Libraries)?;
    // Lockdep makes the RT kernel slow too: the debug limits.
    let script = test_script(&files, vm_args.debug, vm_args.rt);
    let label = match (vm_args.debug, vm_args.rt) {
        (true, _) => "test-debug",
        (false, true) => "test-rt",
        (false, false) => "test",
    };
    let o = vm::boot(vm_args, &k.bzimage, &files, &script, label, true)?;
    let console = fs::read_to_string(&o.console).unwrap_or_default();
    let problems = kernel_problems(&console);
    let lines: Vec<&str> = console.lines().collect();
    for (i, why) in (0..lines.len()).filter_map(|i| known_upstream(&lines[i..]).map(|w| (i, w))) {
        eprintln!(
            "xtask: known upstream kernel report, not counted: {why}: {}",
            lines[i]
        );
    }
    eprintln!(
        "xtask: guest finished in {:.0} s with status {} (console: {})",
        o.elapsed.as_secs_f64(),
        o.status,
        o.console.display()
    );
    if !problems.is_empty() {
        eprintln!("xtask: the kernel reported problems:");
        for p in &problems {
            eprintln!("  {p}");
        }
        if let Some(report) = first_problem_report(&console) {
            eprintln!("xtask: the first of them in full:\n{report}");
        }
        return Ok(1);
    }
    Ok(if o.status == 0 { 0 } else { 1 })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// Values of `<what>: <number> ...` lines, by the section (`== name` lines) they are in.
pub(crate) fn bench_values(output: &str, what: &str) -> Vec<(String, f64)> {
    let mut section = String::new();
    let prefix = format!("{what}: ");
    output
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            if let Some(name) = l.strip_prefix("== ") {
                section = name.to_string();
                return None;
            }
            let v = l
                .strip_prefix(&prefix)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some((section.clone(), v))
        })
        .collect()
}

/// One umt-bench run of a runtime, as its table row and activity line print it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunFigures {
    /// The section (`== name` line) it is in.
    pub(crate) section: String,
    /// Median seconds (the table row).
    pub(crate) seconds: f64,
    /// Signals per core and second (the activity line's first figure).
    pub(crate) signals: f64,
}

/// The runs of `runtime` in `umt-bench`'s output: its table row's seconds and its activity
/// line's signals, by section.
pub(crate) fn run_figures(output: &str, runtime: &str) -> Vec<RunFigures> {
    let mut section = String::new();
    let mut seconds = f64::NAN;
    let activity = format!("{runtime}, per core per second: ");
    let mut out = Vec::new();
    for l in output.lines().map(str::trim) {
        if let Some(name) = l.strip_prefix("== ") {
            section = name.to_string();
        } else if let Some(rest) = l.strip_prefix(&activity) {
            if let Some(signals) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) {
                out.push(RunFigures {
                    section: section.clone(),
                    seconds,
                    signals,
                });
            }
        } else if let Some(rest) = l.strip_prefix(runtime)
            && rest.starts_with(' ')
            && let Some(v) = rest.split_whitespace().next().and_then(|v| v.parse().ok())
        {
            seconds = v;
        }
    }
    out
}

/// The configurations of part 2 of `vm bench`: name, environment, extra heat options.
const SIGNAL_CONFIGS: [(&str, &str, &str); 3] = [
    (
        "events mode: every event signalled, idle leaders",
        "UMT_KERNEL_MODE=events ",
        "",
    ),
    ("idle-only mode, idle leaders (the default)", "", ""),
    ("idle-only mode, polling leaders", "", " --leader poll"),
];

/// `cargo xtask vm bench`, in three parts:
/// 1. what UMT costs processes that do not use it: a pipe ping-pong and a hackbench-like
///    stress on the stock kernel, the patched one, and the patched one while another process
///    holds UMT enabled (the hooks on), boots alternating, `repeat` boots of each;
/// 2. the signals heat delivers to the runtime per core and second, events mode (every
///    event) against idle-only mode (with idle and with polling leaders), `repeat` rounds
///    alternating in one boot, medians;
/// 3. the backends compared on heat in the patched guest, beside the peers a user would pick
///    instead (io-uring, rayon, rayon with 4 threads per core).
pub(crate) fn bench(vm_args: &VmArgs, repeat: u32) -> Result<i32> {
    let (patched, files) = patched_kernel(vm_args, Payload::Workspace)?;
    let stock = kernel::build(&BuildArgs {
        unpatched: true,
        debug: vm_args.debug,
        rt: vm_args.rt,
        ..Default::default()
    })?;
    let runs =
        "for i in 1 2 3; do pingpong --round-trips 20000; hackbench --groups 4 --loops 50; done\n";
    let off = format!("echo '== off'\n{runs}");
    let on =
        format!("echo '== on'\npingpong --hold-umt 3600 & sleep 1\n{runs}kill %1 2>/dev/null\n");
    let mut values: Vec<(String, String, f64)> = Vec::new();
    for r in 0..repeat.max(1) {
        for (k, label, script) in [
            (&patched, "patched", format!("{off}{on}")),
            (&stock, "stock", off.clone()),
        ] {
            let o = vm::boot(vm_args, &k.bzimage, &files, &script, "bench", false)?;
            let text = fs::read_to_string(&o.output).context("reading the guest output")?;
            let mut got = 0;
            for what in ["pingpong", "hackbench"] {
                for (section, v) in bench_values(&text, what) {
                    let name = match (label, section.as_str()) {
                        ("stock", _) => "stock".to_string(),
                        (_, "on") => "patched, UMT on in another process".to_string(),
                        _ => "patched, UMT unused".to_string(),
                    };
                    values.push((what.to_string(), name, v));
                    got += 1;
                }
            }
            if o.status != 0 || got == 0 {
                bail!("the bench failed on the {label} kernel:\n{text}");
            }
            eprintln!("xtask: repeat {}: {label}: {got} values", r + 1);
        }
    }
    for (what, unit) in [
        ("pingpong", "ns per round trip"),
        ("hackbench", "ms per run"),
    ] {
        let med = |name: &str| {
            let mut v: Vec<f64> = values
                .iter()
                .filter(|(w, n, _)| w == what && n == name)
                .map(|x| x.2)
                .collect();
            (median(&mut v), v.len())
        };
        let (base, n) = med("stock");
        println!("{what} ({unit}, median of {n} runs, boots alternating):");
        println!("  {:<38} {base:10.1}", "stock");
        for name in ["patched, UMT unused", "patched, UMT on in another process"] {
            let (m, _) = med(name);
            println!("  {name:<38} {m:10.1}   {:+.1}%", (m / base - 1.0) * 100.0);
        }
    }
    // Small sizes: the guest may be emulated (TCG), where computing is several times slower.
    let heat = "umt-bench heat --size 1024 --block 128 --iters 8 --iof 2 --repeat 3 --dir /scratch";
    let mut signals = String::new();
    for _ in 0..repeat.max(1) {
        for (i, (_, env, extra)) in SIGNAL_CONFIGS.iter().enumerate() {
            signals.push_str(&format!(
                "echo '== {i}'\n{env}{heat}{extra} --runtimes umt-kernel\n"
            ));
        }
    }
    let o = vm::boot(vm_args, &patched.bzimage, &files, &signals, "bench", true)?;
    let text = fs::read_to_string(&o.output).context("reading the guest output")?;
    let runs = run_figures(&text, "umt-kernel");
    println!(
        "heat on umt-kernel in one boot, {} rounds alternating, medians: signals to the \
         runtime per core and second, and seconds",
        repeat.max(1)
    );
    let mut first = None;
    for (i, (name, _, _)) in SIGNAL_CONFIGS.iter().enumerate() {
        let of = |f: fn(&RunFigures) -> f64| {
            let mut v: Vec<f64> = runs
                .iter()
                .filter(|r| r.section == i.to_string())
                .map(f)
                .collect();
            (median(&mut v), v.len())
        };
        let ((sig, n), (secs, _)) = (of(|r| r.signals), of(|r| r.seconds));
        let base = *first.get_or_insert(sig);
        // Below one signal per core and second the ratio says nothing.
        let fewer = if sig >= 1.0 {
            format!("{:5.1}x fewer", base / sig)
        } else {
            format!("under 1: >{base:.0}x")
        };
        println!("  {name:<48} {sig:8.0} signals ({fewer})  {secs:.3} s  [{n} runs]");
    }
    let compare =
        format!("{heat} --runtimes baseline,umt-kernel,umt-perf,io-uring,rayon,rayon-4x\n");
    let o = vm::boot(vm_args, &patched.bzimage, &files, &compare, "bench", true)?;
    Ok(o.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_problems_are_found() {
        let log = "[    0.1] Lock dependency validator: Copyright (c) 2006 Red Hat\n\
                   [    1.0] WARNING: CPU: 1 PID: 5 at kernel/sched/umt.c:80\n\
                   [    1.1] BUG: KASAN: slab-use-after-free in umt_count\n\
                   [    2.0] ok\n";
        let p = kernel_problems(log);
        assert_eq!(p.len(), 2);
        assert!(kernel_problems("[ 0.0] KernelAddressSanitizer initialized\n").is_empty());
        // The io-wq report seen in the PREEMPT_RT guest is known; the same BUG from another
        // task, or without io-wq's locks, is not.
        let iowq = "BUG: sleeping function called from invalid context at kernel/locking/spinlock_rt.c:48\n\
                    in_atomic(): 1, irqs_disabled(): 0, non_block: 0, pid: 977, name: iou-wrk-968\n\
                    preempt_count: 1, expected: 0\n\
                    RCU nest depth: 0, expected: 0\n\
                    2 locks held by iou-wrk-968/977:\n\
                    \x20#0: ff11 (&acct->lock){+.+.}-{2:2}, at: io_worker_handle_work+0x1be/0x417\n\
                    \x20#1: ff11 (&hash->wait){+.+.}-{2:2}, at: __wake_up_common_lock+0x1e/0x4d\n";
        assert!(kernel_problems(iowq).is_empty());
        assert!(!kernel_problems(&iowq.replace("iou-wrk-968\n", "umt-worker-0\n")).is_empty());
        assert!(!kernel_problems(&iowq.replace("(&hash->wait)", "(&umt->lock)")).is_empty());
    }

    /// The report of 6.12's `put_task_struct()` on PREEMPT_RT, as lockdep prints it.
    const PUT_TASK: &str = "------------[ cut here ]------------\n\
        WARNING: CPU: 3 PID: 643 at kernel/locking/spinlock_rt.c:40 rt_spin_lock+0x5f/0x104\n\
        Modules linked in:\n\
        CPU: 3 UID: 0 PID: 643 Comm: umt_test Not tainted 6.12.117-umt #1\n\
        RIP: 0010:rt_spin_lock+0x5f/0x104\n\
        RSP: 0018:ffffc90000e3bc50 EFLAGS: 00010286\n\
        RAX: 0000000000000000 RBX: ffff888100a1c000 RCX: 0000000000000000\n\
        Call Trace:\n <TASK>\n ? __warn+0x8c/0x180\n rt_spin_lock+0x5f/0x104\n\
        \x20free_unref_page+0x94/0x114\n vfree+0x30/0x40\n put_task_stack+0x60/0x6c\n\
        \x20__put_task_struct+0x4c/0xd4\n rt_mutex_adjust_prio_chain+0x1a0/0x370\n\
        \x20task_blocks_on_rt_mutex+0x188/0x1b4\n futex_lock_pi+0x1f0/0x3c0\n </TASK>\n\
        ---[ end trace 0000000000000000 ]---\n";

    #[test]
    fn a_put_task_struct_under_pi_blocked_on_is_known_only_with_its_frame() {
        assert!(kernel_problems(PUT_TASK).is_empty(), "{PUT_TASK}");
        assert!(first_problem_report(PUT_TASK).is_none());
        // The same WARNING from another path counts.
        let other = PUT_TASK.replace("__put_task_struct", "umt_count");
        assert_eq!(kernel_problems(&other).len(), 1);
        // So does one whose frame is only in the next report's trace.
        let cut = PUT_TASK.replace(" __put_task_struct+0x4c/0xd4\n", "");
        let two = format!("{cut}{PUT_TASK}");
        assert_eq!(kernel_problems(&two).len(), 1, "{two}");
        assert!(
            first_problem_report(&two)
                .unwrap()
                .starts_with("WARNING: CPU: 3")
        );
        // Nor without the chain walk, or with a UMT frame on the stack.
        let no_walk = PUT_TASK
            .replace("rt_mutex_adjust_prio_chain", "do_exit")
            .replace("task_blocks_on_rt_mutex", "do_group_exit");
        assert_eq!(kernel_problems(&no_walk).len(), 1);
        let umt = PUT_TASK.replace("futex_lock_pi+", "__umt_sched_block+");
        assert_eq!(kernel_problems(&umt).len(), 1);
        // And a WARNING elsewhere with the frame.
        let elsewhere =
            PUT_TASK.replace("kernel/locking/spinlock_rt.c:40", "kernel/sched/umt.c:80");
        assert_eq!(kernel_problems(&elsewhere).len(), 1);
    }

    #[test]
    fn the_first_counted_report_is_printed_through_its_trace() {
        let log = "boot\n------------[ cut here ]------------\n\
                   WARNING: CPU: 3 PID: 643 at kernel/locking/spinlock_rt.c:40 rt_spin_lock+0x5f/0x104\n\
                   Call Trace:\n <TASK>\n futex_lock_pi+0x1/0x2\n </TASK>\n\
                   ---[ end trace 0000000000000000 ]---\nafter\nWARNING: CPU: 1 second\n";
        let r = first_problem_report(log).unwrap();
        assert!(r.starts_with("WARNING: CPU: 3 PID: 643"));
        assert!(r.contains("futex_lock_pi"));
        assert!(r.ends_with("---[ end trace 0000000000000000 ]---"));
        assert_eq!(first_problem_report("boot\nok\n"), None);
        // Without its end, a report is cut at the limit.
        let long = format!("BUG: x\n{}", "line\n".repeat(200));
        assert_eq!(
            first_problem_report(&long).unwrap().lines().count(),
            REPORT_LINES
        );
    }

    #[test]
    fn bench_lines_parse() {
        let out = "x\n== off\npingpong: 1234.5 ns per round trip (20000 round trips)\n\
                   hackbench: 12.5 ms (4 groups)\n== on\npingpong: 99 ns\n";
        assert_eq!(
            bench_values(out, "pingpong"),
            vec![("off".into(), 1234.5), ("on".into(), 99.0)]
        );
        assert_eq!(bench_values(out, "hackbench"), vec![("off".into(), 12.5)]);
        let heat = "== 0\nruntime  median s\numt-kernel       0.243     3.45e7\n\
                    umt-kernel, per core: variation\n\
                    umt-kernel, per core per second: 699 signals, 143 monitor events\n\
                    == 1\numt-kernel       0.231     3.63e7\n\
                    umt-kernel, per core per second: 73 signals (313 drops to zero), 314\n\
                    umt-perf         0.5\numt-perf, per core per second: 9 signals\n";
        let runs = run_figures(heat, "umt-kernel");
        assert_eq!(
            runs,
            vec![
                RunFigures {
                    section: "0".into(),
                    seconds: 0.243,
                    signals: 699.0
                },
                RunFigures {
                    section: "1".into(),
                    seconds: 0.231,
                    signals: 73.0
                },
            ]
        );
    }

    #[test]
    fn script_lists_suites() {
        let files = vec![
            GuestFile {
                src: "/x".into(),
                dest: "/work/tests/umt-rt-blocking".into(),
                executable: true,
            },
            GuestFile {
                src: "/x".into(),
                dest: "/work/tests/umt-sys-abi_kernel_patch".into(),
                executable: true,
            },
            GuestFile {
                src: "/x".into(),
                dest: "/work/tests/umt-bench-lib".into(),
                executable: true,
            },
        ];
        let s = test_script(&files, false, false);
        assert!(s.contains("echo \"1..4\""), "{s}");
        // UMT is held on only after the selftests, which test the static key's flips.
        let (selftests, hold) = (s.find("/work/selftests/umt_test"), s.find("/work/bin/hold"));
        assert!(selftests.is_some() && hold > selftests, "{s}");
        assert!(s.contains("suite 300 /work/tests/umt-rt-blocking --test-threads=1"));
        assert!(
            test_script(&files, true, false).contains("suite 1800 /work/tests/umt-rt-blocking")
        );
        let kernel = GuestFile {
            src: "/x".into(),
            dest: "/work/tests/umt-sys-kernel_backend".into(),
            executable: true,
        };
        let s = test_script(&[kernel], false, false);
        assert!(s.contains(
            "export UMT_KERNEL_MODE=events; suite 300 /work/tests/umt-sys-kernel_backend"
        ));
        let perf = GuestFile {
            src: "/x".into(),
            dest: "/work/tests/umt-sys-perf_backend".into(),
            executable: true,
        };
        let with_perf = [files.clone(), vec![perf]].concat();
        assert!(test_script(&with_perf, false, false).contains("umt-sys-perf_backend"));
        let rt = test_script(&with_perf, false, true);
        assert!(!rt.contains("umt-sys-perf_backend"), "{rt}");
        assert!(rt.contains("suite 1800 /work/tests/umt-rt-blocking"));
        assert!(s.contains("export UMT_TEST_BACKEND=kernel UMT_REQUIRE_MONITOR=kernel"));
        assert!(!s.contains("abi_kernel_patch"));
        assert!(!s.contains("umt-bench-lib"));
    }
}
