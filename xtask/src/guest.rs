//! `vm test` and `vm bench`: what runs inside the patched guest.

use std::fs;

use anyhow::{Context, Result, bail};

use crate::kernel::{self, Kernel};
use crate::vm::{self, GuestFile};
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

/// Lines of the guest console that report a kernel problem.
pub(crate) fn kernel_problems(console: &str) -> Vec<&str> {
    console
        .lines()
        .filter(|l| BAD_KERNEL_LINES.iter().any(|bad| l.contains(bad)))
        .collect()
}

fn patched_kernel(vm: &VmArgs) -> Result<(Kernel, Vec<GuestFile>)> {
    let k = match &vm.kernel {
        Some(_) => bail!("`vm test` and `vm bench` build their kernels; drop --kernel"),
        None => kernel::build(&BuildArgs {
            debug: vm.debug,
            rt: vm.rt,
            ..Default::default()
        })?,
    };
    let mut files = vm::workspace_payload()?;
    if let Some(st) = &k.selftest {
        files.push(GuestFile {
            src: st.clone(),
            dest: "/work/selftests/umt_test".into(),
            executable: false,
        });
    }
    Ok((k, files))
}

/// The guest script of `vm test`: a TAP stream of suites, each suite's own output nested
/// under `# `.
fn test_script(files: &[GuestFile], debug: bool) -> String {
    let limit = if debug {
        DEBUG_SUITE_TIMEOUT_S
    } else {
        SUITE_TIMEOUT_S
    };
    let mut suites: Vec<(String, String)> = vec![
        (
            "kernel selftests: tools/testing/selftests/umt".into(),
            format!("suite {limit} /work/selftests/umt_test"),
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
        if wanted && !HOST_ONLY_TESTS.contains(&name) {
            suites.push((
                format!("{name} (Kernel backend forced)"),
                // One UMT state per process: tests that each build a Kernel monitor or
                // runtime must not overlap.
                format!("suite {limit} {} --test-threads=1", f.dest),
            ));
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
    let (k, files) = patched_kernel(vm_args)?;
    // Lockdep makes the RT kernel slow too: the debug limits.
    let script = test_script(&files, vm_args.debug || vm_args.rt);
    let label = match (vm_args.debug, vm_args.rt) {
        (true, _) => "test-debug",
        (false, true) => "test-rt",
        (false, false) => "test",
    };
    let o = vm::boot(vm_args, &k.bzimage, &files, &script, label, true)?;
    let console = fs::read_to_string(&o.console).unwrap_or_default();
    let problems = kernel_problems(&console);
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
        return Ok(1);
    }
    Ok(if o.status == 0 { 0 } else { 1 })
}

/// Parses `pingpong: <ns> ns per round trip` lines.
pub(crate) fn pingpong_values(output: &str) -> Vec<f64> {
    output
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pingpong: "))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// `cargo xtask vm bench`: the ping-pong cost of unmonitored processes on the patched and
/// the unpatched kernel, boots alternating, then the backends compared in the patched guest.
pub(crate) fn bench(vm_args: &VmArgs, repeat: u32) -> Result<i32> {
    let (patched, files) = patched_kernel(vm_args)?;
    let stock = kernel::build(&BuildArgs {
        unpatched: true,
        debug: vm_args.debug,
        rt: vm_args.rt,
        ..Default::default()
    })?;
    let pingpong = "for i in 1 2 3; do pingpong --round-trips 20000; done\n";
    let mut on = Vec::new();
    let mut off = Vec::new();
    for r in 0..repeat.max(1) {
        for (k, sink, label) in [(&patched, &mut on, "patched"), (&stock, &mut off, "stock")] {
            let o = vm::boot(vm_args, &k.bzimage, &files, pingpong, "bench", false)?;
            let text = fs::read_to_string(&o.output).context("reading the guest output")?;
            let values = pingpong_values(&text);
            if o.status != 0 || values.is_empty() {
                bail!("ping-pong failed on the {label} kernel:\n{text}");
            }
            eprintln!("xtask: repeat {}: {label}: {values:?} ns", r + 1);
            sink.extend(values);
        }
    }
    let (m_on, m_off) = (median(&mut on), median(&mut off));
    println!(
        "ping-pong round trip, two unmonitored processes on one CPU (median of {} runs each):",
        on.len()
    );
    println!("  stock   kernel: {m_off:8.0} ns");
    println!("  patched kernel: {m_on:8.0} ns");
    println!("  overhead: {:+.2}%", (m_on / m_off - 1.0) * 100.0);
    // Small sizes: the guest may be emulated (TCG), where computing is several times slower.
    let compare = "umt-bench heat --size 1024 --block 128 --iters 8 --iof 2 --repeat 3 \
                   --runtimes baseline,umt-kernel,umt-perf --dir /scratch\n";
    let o = vm::boot(vm_args, &patched.bzimage, &files, compare, "bench", true)?;
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
    }

    #[test]
    fn pingpong_lines_parse() {
        let out = "x\npingpong: 1234.5 ns per round trip (20000 round trips)\npingpong: 99 ns\n";
        assert_eq!(pingpong_values(out), vec![1234.5, 99.0]);
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
        let s = test_script(&files, false);
        assert!(s.contains("echo \"1..3\""), "{s}");
        assert!(s.contains("suite 300 /work/tests/umt-rt-blocking --test-threads=1"));
        assert!(test_script(&files, true).contains("suite 1800 /work/tests/umt-rt-blocking"));
        assert!(s.contains("export UMT_TEST_BACKEND=kernel UMT_REQUIRE_MONITOR=kernel"));
        assert!(!s.contains("abi_kernel_patch"));
        assert!(!s.contains("umt-bench-lib"));
    }
}
