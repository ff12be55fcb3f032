//! Heat and FWI across MPI ranks (`umt-bench heat|fwi --mpi`, feature `mpi`), run under the
//! system's `mpirun`: every runner's bands and slabs are bit-identical to the sequential
//! reference (`--verify`), with 2 and 3 ranks, on one host and on two "hosts" (network
//! namespaces joined by a veth pair, the halo over TCP), and an error on one rank ends every
//! rank instead of a hang.
//!
//! Skipped, saying why, where `mpirun` is missing, unless `UMT_REQUIRE_MPI=1` (CI sets it).
//! The two-hosts test needs root and `ip` (iproute2) for the namespaces; without them it runs
//! both ranks on this host, saying why, unless `UMT_REQUIRE_MPI=1`, when it fails.
#![cfg(feature = "mpi")]

use std::process::{Command, Output};
use std::time::Duration;

/// `mpirun` with the flags a test needs: as root (CI), more ranks than cores if asked.
fn mpirun(ranks: usize, args: &[&str]) -> Option<Output> {
    let have = Command::new("mpirun").arg("--version").output().is_ok();
    if !have {
        assert!(
            std::env::var_os("UMT_REQUIRE_MPI").is_none(),
            "UMT_REQUIRE_MPI is set but mpirun is missing: install openmpi-bin"
        );
        eprintln!("skipped: no mpirun here (Debian: apt install openmpi-bin libopenmpi-dev)");
        return None;
    }
    let mut cmd = Command::new("timeout");
    cmd.arg(Duration::from_secs(240).as_secs().to_string())
        .arg("mpirun")
        .args(["--oversubscribe", "-np", &ranks.to_string()])
        .arg(env!("CARGO_BIN_EXE_umt-bench"))
        .args(args)
        // Open MPI refuses root unless told (CI runs as root).
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    Some(cmd.output().expect("run mpirun"))
}

/// A small run of `workload` (heat or fwi) on `runtimes`, verified.
fn small_of(workload: &str, runtimes: &str) -> Vec<String> {
    let size: &[&str] = match workload {
        "heat" => &["--size", "512", "--block", "64", "--iters", "6"],
        // 16 Y-slices: 4 per rank with 4 ranks, the stencil's radius; slices of 4 KiB.
        _ => &["--nz", "16", "--nx", "32", "--ny", "16", "--steps", "6"],
    };
    [workload, "--mpi"]
        .iter()
        .chain(size)
        .chain(&[
            "--iof",
            "2",
            "--repeat",
            "2",
            "--verify",
            "--buffered",
            "--allow-memory-dir",
            "--runtimes",
            runtimes,
        ])
        .map(|s| s.to_string())
        .collect()
}

fn check(ranks: usize, runtimes: &str) {
    check_of("heat", ranks, runtimes);
}

/// How the table says `runtime` received: the monitored umt-rt runners test and sleep
/// (unless `busy`), umt-io waits through umt_rt::io, the others block in MPI_Recv.
fn receives(runtime: &str, busy: bool) -> &'static str {
    match runtime {
        "umt-perf" | "umt-bpf" | "umt-kernel" if !busy => "test+sleep",
        "umt-io" => "umt_rt::io",
        _ => "MPI_Recv",
    }
}

fn check_of(workload: &str, ranks: usize, runtimes: &str) {
    check_with(workload, ranks, runtimes, &[]);
}

fn check_with(workload: &str, ranks: usize, runtimes: &str, extra: &[&str]) {
    let args = small_of(workload, runtimes);
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    let busy = extra.contains(&"--busy-mpi-recv");
    let Some(out) = mpirun(ranks, &args) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("{workload} across {ranks} ranks")),
        "{stdout}"
    );
    for r in runtimes.split(',') {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(r))
            .unwrap_or_else(|| panic!("no line for {r}:\n{stdout}"));
        // How it received, then one figure of seconds in MPI per rank.
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.len(), 4 + ranks, "{line}");
        assert_eq!(words[3], receives(r, busy), "{line}");
    }
}

/// `--busy-mpi-recv` gives the monitored runners MPI_Recv back, with the same results.
#[test]
fn busy_receives_match_the_sequential_reference() {
    check_with("heat", 2, "baseline,umt-perf", &["--busy-mpi-recv"]);
}

#[test]
fn two_ranks_match_the_sequential_reference_on_every_runner() {
    check(2, "baseline,umt-perf,umt-io,io-uring,rayon,rayon-4x");
}

#[test]
fn three_ranks_match_the_sequential_reference() {
    check(3, "umt-io,baseline");
}

/// FWI's halo goes both ways in every half step: with one worker per rank blocked in
/// `MPI_Recv` (baseline), a receive before the rank's own sends would deadlock. Its slices of
/// 4 KiB are over Open MPI's shared-memory eager limit, so a send completes only once its
/// receive is posted: a send task that waited for that deadlocked umt-io (fixed: sends return
/// once posted).
#[test]
fn fwi_on_two_ranks_matches_the_sequential_reference_on_every_runner() {
    check_of("fwi", 2, "baseline,umt-perf,umt-io,io-uring,rayon,rayon-4x");
}

/// Three ranks: the middle one exchanges with both neighbours.
#[test]
fn fwi_on_three_ranks_matches_the_sequential_reference() {
    check_of("fwi", 3, "umt-io,baseline");
}

/// `--timeline DIR` under `--mpi`: each rank writes its cores' picture and trace for every
/// umt-rt runner (rayon has none).
#[test]
fn each_rank_writes_its_timeline() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let mut args = small_of("fwi", "umt-perf,rayon");
    args.extend(["--timeline".to_string(), dir.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(out) = mpirun(2, &args) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for rank in 0..2 {
        for ext in ["svg", "json"] {
            let f = dir.join(format!("fwi-umt-perf-rank{rank}.{ext}"));
            let len = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
            assert!(len > 0, "{} missing or empty\n{stderr}", f.display());
        }
        assert!(!dir.join(format!("fwi-rayon-rank{rank}.svg")).exists());
    }
    drop(tmp);
}

/// A run of `ranks` ranks that one rank's error must end, on every rank, saying `why`.
fn fails_everywhere(ranks: usize, args: &[&str], why: &str) {
    let common = [
        "--iof",
        "2",
        "--buffered",
        "--allow-memory-dir",
        "--runtimes",
        "baseline",
    ];
    let args: Vec<&str> = args.iter().chain(&common).copied().collect();
    let Some(out) = mpirun(ranks, &args) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_ne!(out.status.code(), Some(124), "timed out: {stderr}");
    assert!(stderr.contains(why), "{stderr}");
}

/// Four ranks on this machine's two cores (oversubscribed): two middle ranks.
#[test]
fn four_ranks_match_the_sequential_reference() {
    check(4, "umt-io,umt-perf");
    check_of("fwi", 4, "umt-io,umt-perf");
}

#[test]
fn too_few_slices_for_the_ranks_are_explained() {
    let args = [
        "fwi", "--mpi", "--nz", "16", "--nx", "32", "--ny", "8", "--steps", "2",
    ];
    fails_everywhere(3, &args, "--ny 12 or more");
}

#[test]
fn an_error_ends_every_rank() {
    // 512 / 256 = 2 block rows cannot be shared by 3 ranks: each rank says so and MPI_Abort
    // ends the job, which would otherwise wait in a barrier forever.
    let args = [
        "heat", "--mpi", "--size", "512", "--block", "256", "--iters", "2",
    ];
    fails_everywhere(3, &args, "cannot be shared by 3 ranks");
}

/// Two network namespaces joined by a veth pair, with addresses of a private range inside
/// them only; removed on drop (removing a namespace removes its end of the pair).
struct TwoHosts {
    ns: [String; 2],
    ifaces: [String; 2],
    subnet: String,
}

impl TwoHosts {
    /// Makes them, or says why it cannot (not root, no `ip`, no network namespaces).
    fn new() -> Result<TwoHosts, String> {
        let id = std::process::id();
        let h = TwoHosts {
            ns: [format!("umt-mpi-{id}-a"), format!("umt-mpi-{id}-b")],
            ifaces: [
                format!("umtv{}a", id % 100_000),
                format!("umtv{}b", id % 100_000),
            ],
            subnet: format!("10.213.{}", id % 250),
        };
        let ip = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("ip")
                .args(args)
                .output()
                .map_err(|e| format!("ip: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "ip {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        let (a, b) = (&h.ns[0], &h.ns[1]);
        let (va, vb) = (&h.ifaces[0], &h.ifaces[1]);
        ip(&["netns", "add", a])?;
        ip(&["netns", "add", b])?;
        ip(&["link", "add", va, "type", "veth", "peer", "name", vb])?;
        ip(&["link", "set", va, "netns", a])?;
        ip(&["link", "set", vb, "netns", b])?;
        for (k, (ns, v)) in [(a, va), (b, vb)].into_iter().enumerate() {
            let addr = format!("{}.{}/24", h.subnet, k + 1);
            ip(&["-n", ns, "addr", "add", &addr, "dev", v])?;
            ip(&["-n", ns, "link", "set", v, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(h)
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// Two ranks, one per namespace: mpirun and rank 0 in the first, rank 1 started in the
/// second; PMIx and the MPI traffic (TCP only, no shared memory) cross the veth pair. Where
/// namespaces cannot be made, says why and runs the two ranks on this host instead, unless
/// `UMT_REQUIRE_MPI` is set (CI): then it fails, so that one host never passes for two.
#[test]
fn two_hosts_joined_by_a_network_match_the_reference() {
    let hosts = match TwoHosts::new() {
        Ok(h) => h,
        Err(why) => {
            assert!(
                std::env::var_os("UMT_REQUIRE_MPI").is_none(),
                "UMT_REQUIRE_MPI is set but two network namespaces cannot be made here: {why}"
            );
            eprintln!("no network namespaces here ({why}): two ranks on this host instead");
            return check(2, "baseline,umt-io");
        }
    };
    if Command::new("mpirun").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("UMT_REQUIRE_MPI").is_none(),
            "mpirun is missing"
        );
        eprintln!("skipped: no mpirun here");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_umt-bench");
    let net = format!("{}.0/24", hosts.subnet);
    for workload in ["heat", "fwi"] {
        let args = small_of(workload, "baseline,umt-perf,umt-io");
        let out = Command::new("timeout")
            .args(["240", "ip", "netns", "exec", &hosts.ns[0], "mpirun"])
            .args(["--oversubscribe", "--mca", "btl", "tcp,self"])
            .args(["--mca", "btl_tcp_if_include", &net])
            .args(["--mca", "oob_tcp_if_include", &hosts.ifaces[0]])
            .args(["-np", "1", bin])
            .args(&args)
            .args([":", "-np", "1", "ip", "netns", "exec", &hosts.ns[1], bin])
            .args(&args)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            // The ranks reach mpirun's PMIx server over the veth pair, not its loopback.
            .env("PMIX_MCA_ptl_tcp_if_include", &hosts.ifaces[0])
            .env("PMIX_MCA_ptl_tcp_remote_connections", "1")
            .output()
            .expect("run mpirun");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(
            stdout.contains(&format!("{workload} across 2 ranks")),
            "{stdout}"
        );
        for r in ["baseline", "umt-perf", "umt-io"] {
            assert!(stdout.lines().any(|l| l.starts_with(r)), "{r}: {stdout}");
        }
    }
    // The halos crossed the veth pair: heat's alone, 3 runtimes x 2 repeats x 6 iterations x
    // 8 block columns of 64 values, down (and but the last iteration up), at least.
    let sent = Command::new("ip")
        .args(["netns", "exec", &hosts.ns[1], "cat"])
        .arg(format!(
            "/sys/class/net/{}/statistics/tx_bytes",
            hosts.ifaces[1]
        ))
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    let halo_bytes = 3 * 2 * 5 * 8 * 64 * 8;
    assert!(
        sent >= halo_bytes,
        "{sent} bytes left rank 1's host, < {halo_bytes}"
    );
}
