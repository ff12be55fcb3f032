//! The `umt-bench` command line: bad input is explained, a small comparison produces the
//! table and the JSON document.

use std::process::Command;

fn umt_bench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_umt-bench"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn unusable_input_is_explained_not_panicked() {
    let (code, _, err) = umt_bench(&["heat", "--size", "100", "--block", "32", "--buffered"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not divide"), "{err}");
    let (code, _, err) = umt_bench(&["heat", "--iof", "0", "--buffered"]);
    assert_eq!(code, 2);
    assert!(err.contains("iof"), "{err}");
    let (code, _, err) = umt_bench(&["fwi", "--nz", "3", "--nx", "5"]);
    assert_eq!(code, 2);
    assert!(err.contains("multiple of"), "{err}");
    let (code, _, err) = umt_bench(&["heat", "--dir", "/nonexistent/umt", "--buffered"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/umt"), "{err}");
    let (code, _, err) = umt_bench(&["heat", "--runtimes", "rayon-3x"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown runtime"), "{err}");
    let (code, _, err) = umt_bench(&["heat", "--leader", "busy"]);
    assert_ne!(code, 0);
    assert!(err.contains("idle, normal or poll"), "{err}");
}

/// Every leader policy runs umt-perf to the end, and the JSON says which one ran.
#[test]
fn each_leader_policy_runs_and_is_recorded() {
    if let Err(why) = umt_sys::Monitor::probe(umt_sys::BackendKind::Perf) {
        // Skip where perf events cannot run, unless the run must exercise them.
        if std::env::var("UMT_REQUIRE_MONITOR").is_ok_and(|b| b == "perf") {
            panic!("UMT_REQUIRE_MONITOR=perf, but: {why}");
        }
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for leader in ["idle", "normal", "poll"] {
        let json = dir.path().join(format!("leader-{leader}.json"));
        let (code, out, err) = umt_bench(&[
            "heat",
            "--size",
            "256",
            "--block",
            "64",
            "--iters",
            "4",
            "--repeat",
            "1",
            "--runtimes",
            "umt-perf",
            "--leader",
            leader,
            "--buffered",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{leader}: {err}");
        assert!(out.contains("umt-perf"), "{out}");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        std::fs::remove_file(&json).unwrap();
        assert_eq!(doc["params"]["leader"], leader);
    }
}

/// FWI's smallest grid the tests run: 16 x 32 x 8 cells.
const SMALL_FWI: &[&str] = &["--nz", "16", "--nx", "32", "--ny", "8"];

#[test]
fn small_comparison_writes_table_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cli.json");
    let (code, out, err) = umt_bench(
        &[
            &["fwi"][..],
            SMALL_FWI,
            &[
                "--steps",
                "4",
                "--repeat",
                "2",
                "--runtimes",
                "baseline",
                "--buffered",
                "--json",
                json.to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("baseline"), "{out}");
    assert!(out.contains("kcells/s"), "{out}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert_eq!(doc["workload"], "fwi");
    assert!(doc["bound_seconds"].as_f64().unwrap() > 0.0);
    let run = &doc["runs"][0];
    assert_eq!(run["runtime"], "baseline");
    assert_eq!(run["seconds"].as_array().unwrap().len(), 2);
    assert_eq!(run["speedup_vs_baseline"], 1.0);
}

/// `--timeline` writes a picture and a Chrome trace per umt-rt runtime, `--plot` the
/// comparison, and the JSON carries the per-core figures and their variation.
#[test]
fn timeline_and_plot_are_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let json = dir.join("r.json");
    let plot = dir.join("cmp.svg");
    let (code, out, err) = umt_bench(&[
        "heat",
        "--size",
        "256",
        "--block",
        "64",
        "--iters",
        "4",
        "--iof",
        "2",
        "--repeat",
        "1",
        "--runtimes",
        "baseline,rayon",
        "--buffered",
        "--timeline",
        dir.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("oversub") && !out.contains("idle+work"),
        "{out}"
    );
    let svg = std::fs::read_to_string(dir.join("heat-baseline.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("core 0"),
        "{svg:.200}"
    );
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("heat-baseline.json")).unwrap())
            .unwrap();
    let cores = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .count();
    assert!(cores >= 1);
    // rayon is not umt-rt: no trace of it.
    assert!(!dir.join("heat-rayon.svg").exists());
    assert!(
        std::fs::read_to_string(&plot)
            .unwrap()
            .contains("speedup over baseline")
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let run = &doc["runs"][0];
    assert_eq!(run["cores"].as_array().unwrap().len(), cores);
    // Some core worked (not necessarily core 0: on a busy machine, or a run this small, one
    // core's worker may take every task).
    let cpu: f64 = run["cores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cpu_seconds"].as_f64().unwrap())
        .sum();
    assert!(cpu > 0.0, "{run}");
    assert!(run["cores"][0]["states"].as_array().unwrap().len() == 4);
    assert!(run["cores_cov"]["cpu_time"].as_f64().unwrap() >= 0.0);
    drop(tmp);
}

/// `scan` runs both front ends, writes a row per runtime for each, leaves no file behind in
/// `--dir`, and refuses sizes it cannot take before writing anything.
#[test]
fn scan_runs_both_front_ends_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("scan.json");
    let d = dir.path().to_str().unwrap();
    let (code, out, err) = umt_bench(&[
        "scan",
        "--files",
        "4",
        "--file-mib",
        "1",
        "--rounds",
        "1",
        "--repeat",
        "1",
        "--runtimes",
        "baseline,rayon-8x,tokio",
        "--dir",
        d,
        "--allow-memory-dir",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let reports: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let reports = reports.as_array().unwrap();
    assert_eq!(reports.len(), 2);
    for (r, front) in reports.iter().zip(["scan-iter", "scan-tasks"]) {
        assert_eq!(r["workload"], front);
        let names: Vec<&str> = r["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|run| run["runtime"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["baseline", "rayon-8x", "tokio"]);
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("scan.json")]);
    let (code, _, err) = umt_bench(&["scan", "--files", "0", "--dir", d, "--allow-memory-dir"]);
    assert_eq!(code, 2);
    assert!(err.contains("--files 0"), "{err}");
}

/// The scale tests' runtimes and heat's sizes: one repeat of a 128-cell grid, two iterations.
const SMALL_HEAT: &[&str] = &[
    "--runtimes",
    "baseline,rayon",
    "--repeat",
    "1",
    "--size",
    "128",
    "--block",
    "64",
    "--iof",
    "1",
    "--iters",
    "2",
];

/// `scale` runs every workload at each core count asked for, with the same parameters, and
/// writes the JSON, the Markdown table and the plot.
#[test]
fn scale_sweeps_the_cores_and_writes_its_three_files() {
    let out = tempfile::tempdir().unwrap();
    let cpus = umt_sys::cpu::process_cpus().unwrap();
    let counts = if cpus.len() >= 2 { "1,2" } else { "1" };
    let o = out.path().to_str().unwrap();
    let args = [
        &["scale", "--out", o, "--cores-list", counts][..],
        SMALL_HEAT,
        SMALL_FWI,
        &[
            "--steps",
            "2",
            "--files",
            "2",
            "--file-mib",
            "1",
            "--rounds",
            "1",
            "--buffered",
            "--dir",
            o,
            "--allow-memory-dir",
        ],
    ]
    .concat();
    let (code, stdout, err) = umt_bench(&args);
    assert_eq!(code, 0, "{stdout}{err}");
    let points: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("scale.json")).unwrap())
            .unwrap();
    let points = points.as_array().unwrap();
    assert_eq!(points.len(), counts.split(',').count());
    for p in points {
        let workloads: Vec<&str> = p["reports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["workload"].as_str().unwrap())
            .collect();
        assert_eq!(workloads, ["heat", "fwi", "scan-iter", "scan-tasks"]);
    }
    let md = std::fs::read_to_string(out.path().join("scale.md")).unwrap();
    assert!(
        md.contains("### scan-tasks") && md.contains("| rayon |"),
        "{md}"
    );
    let svg = std::fs::read_to_string(out.path().join("scale.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("heat"));
    // With its output closed (`| head`), the sweep still runs every count and writes its
    // files, then ends with 141 (it stopped after the first count).
    std::fs::remove_file(out.path().join("scale.json")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_umt-bench"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let closed = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&closed.stderr);
    assert_eq!(closed.status.code(), Some(141), "{err}");
    let points: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("scale.json")).unwrap())
            .unwrap();
    assert_eq!(points.as_array().unwrap().len(), counts.split(',').count());
    let (code, _, err) = umt_bench(&["scale", "--out", o, "--cores-list", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("give 1 to"), "{err}");
}

/// `scale --timeline` writes each traced runtime's timeline per core count (it took the
/// option and wrote nothing); `--json` and `--plot`, the single comparisons' outputs, are
/// refused instead of ignored.
#[test]
fn scale_writes_a_timeline_per_core_count_and_refuses_json_and_plot() {
    let out = tempfile::tempdir().unwrap();
    let o = out.path().to_str().unwrap();
    let tl = out.path().join("tl");
    let args = [
        &[
            "scale",
            "--out",
            o,
            "--cores-list",
            "1",
            "--workloads",
            "heat",
        ][..],
        SMALL_HEAT,
        &[
            "--buffered",
            "--dir",
            o,
            "--allow-memory-dir",
            "--timeline",
            tl.to_str().unwrap(),
        ],
    ]
    .concat();
    let (code, stdout, err) = umt_bench(&args);
    assert_eq!(code, 0, "{stdout}{err}");
    let mut names: Vec<String> = std::fs::read_dir(&tl)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    // rayon is not umt-rt, so it has no trace.
    assert_eq!(
        names,
        ["heat-baseline-1cores.json", "heat-baseline-1cores.svg"]
    );
    for flag in ["--json", "--plot"] {
        let (code, _, err) = umt_bench(&["scale", "--out", o, flag, "x"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(&format!("leave {flag} out")), "{err}");
    }
}

/// An explicit --iters bounds the calibrated period: the same command runs whatever the
/// calibration measures (it refused "iof 5 is more than iters 2" on some runs).
#[test]
fn an_explicit_length_bounds_the_calibrated_period() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for _ in 0..3 {
        let (code, out, err) = umt_bench(&[
            "heat",
            "--size",
            "512",
            "--block",
            "128",
            "--iters",
            "1",
            "--repeat",
            "1",
            "--runtimes",
            "baseline",
            "--buffered",
            "--dir",
            d,
            "--allow-memory-dir",
        ]);
        assert_eq!(code, 0, "{out}{err}");
    }
}

/// Every report of a verified comparison is consistent with its own samples: every runtime
/// asked for has a row, in order, with `repeat` samples; its median, speedup, figure of merit
/// and % of bound follow from them; the bound is the longer of the two bound parts, each the
/// fastest of its runs; and every run was checked against the sequential reference (issue 34,
/// item 4).
fn check_report(r: &serde_json::Value, runtimes: &[&str], repeat: usize) {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    let (compute, io) = (f(&r["compute_seconds"]), f(&r["io_seconds"]));
    let bound = f(&r["bound_seconds"]);
    assert!(compute > 0.0 && io >= 0.0, "{r}");
    assert!(close(bound, compute.max(io)), "{r}");
    // The bound's parts are the fastest of their runs, one per round.
    let runs_of = |k: &str| -> Vec<f64> { r[k].as_array().unwrap().iter().map(f).collect() };
    for (part, runs) in [
        (compute, runs_of("compute_runs_seconds")),
        (io, runs_of("io_runs_seconds")),
    ] {
        assert_eq!(runs.len(), repeat, "{r}");
        assert_eq!(
            part,
            runs.iter().copied().fold(f64::INFINITY, f64::min),
            "{r}"
        );
    }
    assert!(f(&r["tight_bound_seconds"]) >= bound * (1.0 - 1e-9), "{r}");
    assert_eq!(r["params"]["verified"], true, "{r}");
    assert_eq!(r["params"]["checked_runs"], runtimes.len() * repeat, "{r}");
    assert_eq!(r["params"]["repeat"], repeat);
    let runs = r["runs"].as_array().unwrap();
    let names: Vec<&str> = runs
        .iter()
        .map(|x| x["runtime"].as_str().unwrap())
        .collect();
    assert_eq!(names, runtimes);
    let base = f(&runs[0]["median_seconds"]);
    for run in runs {
        let mut s: Vec<f64> = run["seconds"].as_array().unwrap().iter().map(f).collect();
        assert_eq!(s.len(), repeat, "{run}");
        s.sort_by(f64::total_cmp);
        let med = f(&run["median_seconds"]);
        assert_eq!(med, s[s.len() / 2], "{run}");
        assert!(close(f(&run["speedup_vs_baseline"]), base / med), "{run}");
        assert!(
            close(f(&run["percent_of_bound"]), 100.0 * bound / med),
            "{run}"
        );
        assert!(f(&run["fom"]) > 0.0, "{run}");
    }
}

/// heat, FWI and scan, the three comparisons `compare` runs, end to end on small sizes with
/// `--verify`: the JSON of each is consistent (`check_report`).
#[test]
fn verified_comparisons_are_consistent_with_their_samples() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let runtimes = ["baseline", "rayon", "rayon-8x", "tokio"];
    let common = |json: &str| -> Vec<String> {
        [
            "--runtimes",
            &runtimes.join(","),
            "--repeat",
            "3",
            "--verify",
            "--buffered",
            "--dir",
            d,
            "--allow-memory-dir",
            "--json",
            json,
        ]
        .map(String::from)
        .to_vec()
    };
    let runs: [(&str, &[&str]); 3] = [
        (
            "heat",
            &[
                "--size", "128", "--block", "32", "--iters", "4", "--iof", "2",
            ],
        ),
        (
            "fwi",
            &[
                "--nz", "16", "--nx", "32", "--ny", "8", "--steps", "4", "--iof", "2",
            ],
        ),
        (
            "scan",
            &["--files", "6", "--file-mib", "1", "--rounds", "1"],
        ),
    ];
    for (workload, args) in runs {
        let json = dir.path().join(format!("{workload}.json"));
        let mut all: Vec<String> = vec![workload.into()];
        all.extend(args.iter().map(|a| a.to_string()));
        all.extend(common(json.to_str().unwrap()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let (code, out, err) = umt_bench(&all);
        assert_eq!(code, 0, "{workload}: {out}{err}");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let reports = doc.as_array().cloned().unwrap_or_else(|| vec![doc.clone()]);
        assert_eq!(reports.len(), if workload == "scan" { 2 } else { 1 });
        for r in &reports {
            check_report(r, &runtimes, 3);
        }
    }
}

/// `onload --dyon` (seed 002's experiment) end to end on small sizes: every static partition
/// of the cores is in the report, and its verdict follows from its own figures.
#[test]
fn dyon_experiment_reports_every_partition_and_a_consistent_verdict() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let json = dir.path().join("dyon.json");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let (code, out, err) = umt_bench(&[
        "onload",
        "--dyon",
        "--size",
        "256",
        "--block",
        "64",
        "--iters",
        "2",
        "--rounds",
        "1",
        "--period-ms",
        "20",
        "--hold-periods",
        "2",
        "--periods",
        "10",
        "--buffered",
        "--dir",
        work.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    // A target directory in memory: refused, saying so (`refusals.rs` checks the refusal).
    if code != 0
        && (err.contains("no storage I/O is counted") || err.contains("--allow-memory-dir"))
    {
        eprintln!("skipped: {err}");
        return;
    }
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("best static partition"), "{out}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let sweep = r["sweep"].as_array().unwrap();
    assert!(sweep.len() >= 2, "0 % and 100 % at least: {r}");
    // Every partition did I/O the runtime's counts saw: a finite CPIO, each round's too.
    let cpio = |arm: usize| sweep[arm]["cpio_us"].as_f64().unwrap();
    for (arm, f) in sweep.iter().enumerate() {
        assert_eq!(f["dedicated_cores"], arm as u64, "{r}");
        assert!(f["seconds"].as_f64().unwrap() > 0.0, "{r}");
        assert!(cpio(arm).is_finite() && cpio(arm) > 0.0, "{r}");
        assert_eq!(f["cpio_us_runs"].as_array().unwrap().len(), 1, "{r}");
    }
    assert!(r["dyon"]["dedicated_cores"].is_null(), "{r}");
    assert!(
        r["dyon"]["cpio_us"].as_f64().is_some_and(f64::is_finite),
        "{r}"
    );
    let best = r["best_arm"].as_u64().unwrap() as usize;
    assert!((0..sweep.len()).all(|a| cpio(best) <= cpio(a)), "{r}");
    let pulls: Vec<u64> = r["pulls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    assert_eq!(pulls.len(), sweep.len(), "{r}");
    // The controller judged periods, and only those of its own window (none after it).
    let judged: u64 = pulls.iter().sum();
    let window = r["dyon"]["seconds"].as_f64().unwrap() / r["period_seconds"].as_f64().unwrap();
    assert!(
        judged >= 1 && judged as f64 <= window + 2.0,
        "{judged} in {window}: {r}"
    );
    for (arm, m) in r["means"].as_array().unwrap().iter().enumerate() {
        assert!(pulls[arm] == 0 || m.as_f64().unwrap() <= 0.0, "{r}");
    }
    let chosen = r["chosen_arm"].as_u64().unwrap() as usize;
    assert!(pulls.iter().all(|&p| p <= pulls[chosen]), "{r}");
    let ratio = r["chosen_over_best"].as_f64().unwrap();
    assert!((ratio - cpio(chosen) / cpio(best)).abs() < 1e-9, "{r}");
    let tolerance = r["tolerance"].as_f64().unwrap();
    assert_eq!(r["converged"], ratio <= tolerance, "{r}");
    let share = r["share_on_best"].as_f64().unwrap();
    assert!(
        (share - pulls[best] as f64 / judged as f64).abs() < 1e-9,
        "{r}"
    );
    // The archive and heat's files went with the run.
    assert_eq!(std::fs::read_dir(&work).unwrap().count(), 0);
}
