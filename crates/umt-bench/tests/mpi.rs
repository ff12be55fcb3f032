//! Heat across MPI ranks (`umt-bench heat --mpi`, feature `mpi`), run under the system's
//! `mpirun`: every runner's bands are bit-identical to the sequential reference (`--verify`),
//! with 2 and 3 ranks, and an error on one rank ends every rank instead of a hang.
//!
//! Skipped, saying why, where `mpirun` is missing, unless `UMT_REQUIRE_MPI=1` (CI sets it).
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

fn small(runtimes: &str) -> Vec<String> {
    [
        "heat",
        "--mpi",
        "--size",
        "512",
        "--block",
        "64",
        "--iters",
        "6",
        "--iof",
        "2",
        "--repeat",
        "2",
        "--verify",
        "--buffered",
        "--allow-memory-dir",
        "--runtimes",
        runtimes,
    ]
    .map(String::from)
    .to_vec()
}

fn check(ranks: usize, runtimes: &str) {
    let args = small(runtimes);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(out) = mpirun(ranks, &args) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("heat across {ranks} ranks")),
        "{stdout}"
    );
    for r in runtimes.split(',') {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(r))
            .unwrap_or_else(|| panic!("no line for {r}:\n{stdout}"));
        // One figure of seconds in MPI per rank.
        assert_eq!(line.split_whitespace().count(), 3 + ranks, "{line}");
    }
}

#[test]
fn two_ranks_match_the_sequential_reference_on_every_runner() {
    check(2, "baseline,umt-perf,umt-io");
}

#[test]
fn three_ranks_match_the_sequential_reference() {
    check(3, "umt-io,baseline");
}

#[test]
fn an_error_ends_every_rank() {
    // 512 / 256 = 2 block rows cannot be shared by 3 ranks: each rank says so and MPI_Abort
    // ends the job, which would otherwise wait in a barrier forever.
    let Some(out) = mpirun(
        3,
        &[
            "heat",
            "--mpi",
            "--size",
            "512",
            "--block",
            "256",
            "--iters",
            "2",
            "--iof",
            "2",
            "--buffered",
            "--allow-memory-dir",
            "--runtimes",
            "baseline",
        ],
    ) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_ne!(out.status.code(), Some(124), "timed out: {stderr}");
    assert!(stderr.contains("cannot be shared by 3 ranks"), "{stderr}");
}
