//! umt-bench refuses what makes no sense before it allocates or runs, says why, and leaves no
//! file behind on any way out: an error, a write that fails, Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_umt-bench"))
}

fn run(args: &[&str]) -> (i32, String, String) {
    output(bench().args(args).output().expect("runs"))
}

fn output(out: Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh, empty directory on the disk, removed when dropped.
struct Dir(tempfile::TempDir);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("umt-refusals-{name}-"))
            .tempdir()
            .unwrap();
        Dir(dir)
    }

    fn path(&self) -> &str {
        self.0.path().to_str().unwrap()
    }

    /// Everything in it, at any depth (the runs' private directories too).
    fn files(&self) -> Vec<PathBuf> {
        walk(self.0.path())
    }

    /// The regular files in it, at any depth: checkpoints.
    fn checkpoints(&self) -> Vec<PathBuf> {
        self.files().into_iter().filter(|p| p.is_file()).collect()
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for path in std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
    {
        if path.is_dir() {
            all.extend(walk(&path));
        }
        all.push(path);
    }
    all
}

/// A small heat run in `dir`, with `extra` arguments.
fn small_heat<'a>(dir: &'a Dir, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "heat",
        "--size",
        "512",
        "--block",
        "128",
        "--iters",
        "4",
        "--iof",
        "2",
        "--repeat",
        "1",
        "--buffered",
        "--dir",
        dir.path(),
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn sizes_that_overflow_or_exceed_memory_are_refused_before_allocating() {
    let (code, _, err) = run(&["fwi", "--nz", "4294967296", "--nx", "4294967296"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("too large"), "{err}");
    let started = Instant::now();
    let (code, _, err) = run(&["heat", "--size", "1048576", "--block", "512"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("needs about") && err.contains("available"),
        "{err}"
    );
    // Refused at once: nothing was allocated (16 TiB would take the machine down).
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn counts_that_measure_nothing_are_refused_with_the_reason() {
    let dir = Dir::new("counts");
    for (args, reason) in [
        (vec!["--iters", "0"], "iters must be at least 1"),
        (vec!["--repeat", "0"], "--repeat must be at least 1"),
        (vec!["--runtimes", "baseline,baseline"], "named twice"),
        (
            vec!["--iters", "4", "--iof", "8"],
            "no checkpoint would be written",
        ),
    ] {
        let mut all = vec!["heat", "--buffered", "--dir", dir.path()];
        all.extend(args.iter().copied());
        let (code, out, err) = run(&all);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(reason), "{args:?}: {err}");
        assert!(
            !err.contains("calibrated"),
            "refused before calibrating: {err}"
        );
        assert!(out.is_empty(), "{out}");
    }
    let (code, _, err) = run(&["fwi", "--steps", "2", "--iof", "3", "--buffered"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no snapshot would be taken"), "{err}");
    // An option of runs across MPI ranks, on a run without --mpi, would change nothing.
    let (code, _, err) = run(&["heat", "--buffered", "--busy-mpi-recv"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("applies only with --mpi"), "{err}");
    assert!(dir.files().is_empty());
}

/// tmpfs accepts O_DIRECT since Linux 6.6, and its I/O is a memory copy: refused unless
/// asked for.
#[test]
fn a_directory_in_memory_is_refused_unless_allowed() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    let (code, _, err) = run(&["heat", "--dir", "/dev/shm", "--buffered"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("tmpfs") && err.contains("--allow-memory-dir"),
        "{err}"
    );
    let args = [
        "heat",
        "--size",
        "256",
        "--block",
        "64",
        "--iters",
        "2",
        "--iof",
        "1",
        "--repeat",
        "1",
        "--runtimes",
        "baseline",
        "--buffered",
        "--dir",
        "/dev/shm",
        "--allow-memory-dir",
    ];
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("baseline"), "{out}");
}

#[test]
fn an_unwritable_json_path_fails_before_the_runs() {
    let dir = Dir::new("json");
    let (code, out, err) = run(&small_heat(&dir, &["--json", "/nonexistent/umt/out.json"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/nonexistent/umt/out.json"), "{err}");
    assert!(out.is_empty(), "nothing ran: {out}");
}

/// A run whose files cannot be written (here: the file size limit, as a full disk would do)
/// fails with the error, and removes the files it had created.
#[test]
fn a_failed_write_leaves_no_file_behind() {
    let dir = Dir::new("full");
    // 1 MiB files at most, where a checkpoint takes 2 MiB; SIGXFSZ ignored, so the write or
    // the preallocation fails with EFBIG instead of killing the process.
    let script = format!(
        "trap '' XFSZ; ulimit -f 1024; exec {} {}",
        env!("CARGO_BIN_EXE_umt-bench"),
        small_heat(&dir, &["--runtimes", "baseline"]).join(" ")
    );
    let (code, _, err) = output(Command::new("sh").args(["-c", &script]).output().unwrap());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("File too large"), "{err}");
    assert!(dir.files().is_empty(), "left behind: {:?}", dir.files());
}

/// A long heat run in `dir`, to be killed by the test that starts it. It runs under
/// `umask 000` (through `sh`, which `exec`s it: the pid is umt-bench's), so that the private
/// directory's mode is umt-bench's doing.
fn long_heat(dir: &Dir) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "umask 000; exec \"$0\" \"$@\"",
        env!("CARGO_BIN_EXE_umt-bench"),
    ]);
    cmd.args([
        "heat",
        "--size",
        "1024",
        "--block",
        "256",
        "--iters",
        "400",
        "--iof",
        "2",
        "--repeat",
        "50",
        "--runtimes",
        "baseline",
        "--buffered",
        "--dir",
    ])
    .arg(dir.path());
    cmd
}

/// Ctrl-C (`SIGINT`), `SIGTERM` or `SIGHUP` in the middle of a run removes the checkpoint
/// files, the process says so and ends with status 128 + the signal's number, as a shell
/// reports a process the signal killed (issue 30: `SIGTERM` and `SIGHUP` ended with 130).
#[test]
fn a_signal_leaves_no_file_behind_and_exits_128_plus_its_number() {
    use nix::sys::signal::Signal;
    for (signal, name) in [
        (Signal::SIGINT, "SIGINT"),
        (Signal::SIGTERM, "SIGTERM"),
        (Signal::SIGHUP, "SIGHUP"),
    ] {
        let dir = Dir::new(&format!("signal-{name}"));
        let child = long_heat(&dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while dir.checkpoints().is_empty() {
            assert!(
                Instant::now() < deadline,
                "{name}: no checkpoint file appeared"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
        let (code, _, err) = output(child.wait_with_output().unwrap());
        assert_eq!(code, 128 + signal as i32, "{name}: {err}");
        assert!(err.contains(&format!("interrupted ({name})")), "{err}");
        assert!(
            dir.files().is_empty(),
            "{name}: left behind: {:?}",
            dir.files()
        );
    }
}

/// SIGKILL (or the OOM killer) leaves a run no chance to clean up: its private directory
/// stays, checkpoints and all, and the next run in the same `--dir` removes it, since the
/// lock it held died with it. A live run's directory is left alone (issue 30).
#[test]
fn the_next_run_sweeps_what_a_killed_run_left() {
    let dir = Dir::new("sigkill");
    let mut child = long_heat(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while dir.checkpoints().is_empty() {
        assert!(Instant::now() < deadline, "no checkpoint file appeared");
        std::thread::sleep(Duration::from_millis(5));
    }
    let private: Vec<PathBuf> = std::fs::read_dir(dir.0.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(private.len(), 1, "one private directory: {private:?}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&private[0]).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o700, "private even under umask 000");
    assert!(
        private[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(umt_bench::rundir::PREFIX),
        "{private:?}"
    );
    // A run beside the live one leaves its directory alone.
    let (code, _, err) = run(&small_heat(&dir, &["--runtimes", "baseline"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        child.try_wait().unwrap().is_none(),
        "the long run ended early"
    );
    assert!(private[0].is_dir(), "a live run's directory was swept");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(private[0].is_dir(), "SIGKILL cleans nothing up");
    let (code, _, err) = run(&small_heat(&dir, &["--runtimes", "baseline"]));
    assert_eq!(code, 0, "{err}");
    assert!(dir.files().is_empty(), "left behind: {:?}", dir.files());
}

#[test]
fn verify_checks_every_runner_against_the_sequential_reference() {
    let dir = Dir::new("verify");
    let json = dir.0.path().join("out.json");
    let mut args = small_heat(&dir, &["--runtimes", "baseline,rayon,tokio", "--verify"]);
    args.extend(["--json", json.to_str().unwrap()]);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("tokio"), "{out}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["params"]["verified"], true);
}

/// With few file descriptors, a umt-perf row is either exact (every worker monitored) or
/// refused with the reason: never shown while workers went unmonitored.
#[test]
fn few_descriptors_never_give_a_silently_degraded_row() {
    if umt_sys::Monitor::probe(umt_sys::BackendKind::Perf).is_err() {
        eprintln!("skipped: needs perf events");
        return;
    }
    let dir = Dir::new("fds");
    let mut refused = 0;
    for limit in [10, 12, 14, 16, 20, 30, 64] {
        let script = format!(
            "ulimit -n {limit}; exec {} {}",
            env!("CARGO_BIN_EXE_umt-bench"),
            small_heat(&dir, &["--runtimes", "umt-perf"]).join(" ")
        );
        let (code, out, err) = output(Command::new("sh").args(["-c", &script]).output().unwrap());
        match code {
            0 => assert!(out.contains("umt-perf"), "{limit}: {out}"),
            2 => {
                refused += 1;
                assert!(
                    err.contains("file descriptors") || err.contains("ulimit -n"),
                    "{limit}: {err}"
                );
            }
            _ => panic!("{limit}: exit {code}: {err}"),
        }
    }
    assert!(refused > 0, "some limit is too low for every worker");
    assert!(dir.files().is_empty());
}

/// A refused run leaves the results of an earlier one as they were (issue 30: `--json` was
/// truncated before the parameters were checked), and a run writes its JSON whole, by a
/// rename, with no file of its own left beside it.
#[test]
fn a_refused_run_leaves_an_earlier_json_as_it_was() {
    let dir = Dir::new("json-kept");
    let json = dir.0.path().join("out.json");
    std::fs::write(&json, "earlier results").unwrap();
    let path = json.to_str().unwrap();
    for refused in [
        &["--repeat", "0", "--json", path][..],
        &["--runtimes", "no-such-runtime", "--json", path][..],
    ] {
        let mut args = small_heat(&dir, &[]);
        args.retain(|a| *a != "--repeat" && *a != "1");
        args.extend_from_slice(refused);
        if !refused.contains(&"--repeat") {
            args.extend(["--repeat", "1"]);
        }
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{refused:?}: {err}");
        assert_eq!(
            std::fs::read_to_string(&json).unwrap(),
            "earlier results",
            "{refused:?}"
        );
    }
    let (code, _, err) = run(&small_heat(
        &dir,
        &["--runtimes", "baseline", "--json", path],
    ));
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["workload"], "heat");
    let names: Vec<String> = std::fs::read_dir(dir.0.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".umt-bench-"))
        .collect();
    assert!(names.is_empty(), "temporary files left: {names:?}");
}

/// Outputs that cannot be written are refused before anything runs, saying which flag: a
/// `--json` or `--plot` in a missing directory, a `--json` that is a directory, and `--json`
/// with `--mpi` (nothing writes the comparison across ranks as JSON).
#[test]
fn outputs_that_cannot_be_written_are_refused_before_the_run() {
    let dir = Dir::new("outputs");
    let missing = dir.0.path().join("no-such-dir").join("out");
    let missing = missing.to_str().unwrap();
    for (flag, value) in [
        ("--json", missing),
        ("--plot", missing),
        ("--json", dir.path()),
    ] {
        let (code, out, err) = run(&small_heat(&dir, &["--runtimes", "baseline", flag, value]));
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
        assert!(!out.contains("baseline"), "{flag} {value}: it ran: {out}");
    }
    let (code, _, err) = run(&[
        "onload",
        "--json",
        missing,
        "--buffered",
        "--dir",
        dir.path(),
    ]);
    assert_eq!(code, 2, "onload --json {missing}: {err}");
    assert!(err.contains("--json"), "onload --json {missing}: {err}");
    let json = dir.0.path().join("mpi.json");
    let (code, _, err) = run(&small_heat(
        &dir,
        &[
            "--runtimes",
            "baseline",
            "--mpi",
            "--json",
            json.to_str().unwrap(),
        ],
    ));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--mpi"), "{err}");
    assert!(!json.exists(), "an empty --json file was left");
}

/// Flags that size the work are bounded before anything is allocated or run (issue 30: a huge
/// `--iters` grew memory until the OOM killer, `--offer-every 1e300` panicked).
#[test]
fn huge_work_sizes_are_refused_before_the_run() {
    let dir = Dir::new("huge");
    let huge = "1000000000000";
    // (command, the flag that sizes the work, its value): each with the same tail.
    let cases = [
        ("heat", "--iters", huge),
        ("fwi", "--steps", huge),
        ("onload", "--iters", huge),
        ("onload", "--rounds", huge),
        ("onload", "--offer-every", "1e300"),
        ("onload", "--size", "1048576"),
        ("onload", "--periods", huge),
        ("onload", "--hold-periods", huge),
        ("onload", "--period-ms", "0"),
    ];
    let cases = cases.map(|(command, flag, value)| {
        let mut args = vec![command, flag, value, "--buffered", "--dir", dir.path()];
        if flag.contains("period") {
            args.push("--dyon");
        }
        if command != "onload" {
            args.extend(["--iof", "1", "--runtimes", "baseline"]);
        }
        if command == "heat" {
            args.extend(["--size", "512", "--block", "128"]);
        }
        args
    });
    for args in cases {
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("invalid parameter"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            dir.files().is_empty(),
            "{args:?}: left behind {:?}",
            dir.files()
        );
    }
}

/// `serve`'s sizes are bounded before any thread or buffer is made.
#[test]
fn serve_refuses_sizes_it_cannot_run() {
    let huge = "1000000000000";
    for args in [
        ["serve", "--clients", huge],
        ["serve", "--clients", "0"],
        ["serve", "--requests", huge],
        ["serve", "--rounds", huge],
        ["serve", "--block-us", huge],
        ["serve", "--cold-files", huge],
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("invalid parameter"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // Cold files in memory would block on nothing: refused before any is written.
    if std::path::Path::new("/dev/shm").is_dir() {
        let (code, _, err) = run(&["serve", "--dir", "/dev/shm"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("in memory"), "{err}");
    }
}

/// Which output's reader goes away.
enum Closed {
    Stdout,
    Stderr,
}

/// Runs `umt-bench args` with both outputs piped, the reader of `closed` dropped at once.
fn run_with_reader_gone(args: &[&str], closed: Closed) -> std::process::Output {
    let mut child = bench()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    match closed {
        Closed::Stdout => drop(child.stdout.take()),
        Closed::Stderr => drop(child.stderr.take()),
    }
    child.wait_with_output().unwrap()
}

/// `umt-bench ... | head`: a standard output closed before the tables are printed ends the
/// command quietly with 141 (128 + SIGPIPE, as a shell reports a process the signal ended),
/// never a panic (it was exit 101), after writing the files asked for, and leaving no
/// checkpoint behind (issue 30, item 4).
#[test]
fn a_closed_output_ends_quietly_after_the_files_are_written() {
    let dir = Dir::new("closed-output");
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("out.json");
    let plot = out.path().join("out.svg");
    let (json_s, plot_s) = (json.to_str().unwrap(), plot.to_str().unwrap());
    let args = small_heat(
        &dir,
        &["--runtimes", "baseline", "--json", json_s, "--plot", plot_s],
    );
    // The reader goes away before anything is printed (nothing is, before the run ends).
    let (code, _, err) = output(run_with_reader_gone(&args, Closed::Stdout));
    assert_eq!(code, 141, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["workload"], "heat");
    assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"));
    assert!(dir.files().is_empty(), "left behind: {:?}", dir.files());
}

/// `umt-bench ... 2>&-`-like: a standard error whose reader is gone loses its notes ("wrote
/// ..."), and the command still succeeds with its files written (`eprintln!` panicked there).
#[test]
fn a_closed_standard_error_loses_only_the_notes() {
    let dir = Dir::new("closed-stderr");
    let out = tempfile::tempdir().unwrap();
    let plot = out.path().join("out.svg");
    let args = small_heat(
        &dir,
        &["--runtimes", "baseline", "--plot", plot.to_str().unwrap()],
    );
    let done = run_with_reader_gone(&args, Closed::Stderr);
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert_eq!(done.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("baseline"), "{stdout}");
    assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"));
    assert!(dir.files().is_empty(), "left behind: {:?}", dir.files());
}

/// `onload --dyon` refuses a directory where writes reach no storage (CPIO would have nothing
/// to divide by), saying what to do; its flags need `--dyon`.
#[test]
fn dyon_refuses_a_memory_directory_and_its_flags_need_it() {
    let (code, _, err) = run(&["onload", "--period-ms", "100", "--buffered"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--dyon"), "{err}");
    let shm = std::path::Path::new("/dev/shm");
    let Ok(dir) = tempfile::tempdir_in(shm) else {
        eprintln!("skipped the memory directory: no /dev/shm here");
        return;
    };
    let (code, out, err) = run(&[
        "onload",
        "--dyon",
        "--size",
        "256",
        "--block",
        "64",
        "--iters",
        "2",
        "--buffered",
        "--allow-memory-dir",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("no storage I/O is counted") && err.contains("--dir on a disk"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
