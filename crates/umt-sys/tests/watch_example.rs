//! The `watch` example, as a user runs it: a backend that cannot run is explained (the
//! message and its fix), not dumped in `Debug` form.

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/examples/watch`, which `cargo test` builds beside this test's binary
/// (`target/<profile>/deps/`). `None` when it was not built (a `cargo test --test` run) or
/// the tests run elsewhere (the xtask guest).
fn watch_example() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("examples").join("watch");
    path.is_file().then_some(path)
}

#[test]
fn an_unavailable_backend_is_explained() {
    let Some(watch) = watch_example() else {
        eprintln!("skipped: the watch example was not built (`cargo test` builds it)");
        return;
    };
    if umt_sys::Monitor::probe(umt_sys::BackendKind::Kernel).is_ok() {
        eprintln!("skipped: this kernel has the UMT extension, so the Kernel backend runs");
        return;
    }
    let out = Command::new(&watch)
        .args(["--backend", "kernel", "--seconds", "0.1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("watch: kernel backend unavailable"),
        "{err}"
    );
    assert!(
        err.contains("cargo xtask vm run"),
        "the fix is named: {err}"
    );
    assert!(
        !err.contains("Unavailable {") && !err.contains("Some("),
        "not the Debug form: {err}"
    );
}

/// `watch | head -2`: once its reader goes away, the example stops its threads and exits
/// successfully, leaving no data file, instead of panicking on the closed pipe and waiting
/// forever for the threads it never stopped (issue 30, item 3).
#[test]
fn a_closed_output_ends_the_watch() {
    let Some(watch) = watch_example() else {
        eprintln!("skipped: the watch example was not built (`cargo test` builds it)");
        return;
    };
    if umt_sys::Monitor::probe(umt_sys::BackendKind::Auto).is_err() {
        eprintln!("skipped: no monitor here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Under `umask 000`, so that the private directory's mode 700 is the example's doing.
    let mut child = Command::new("sh")
        .args(["-c", "umask 000; exec \"$0\" \"$@\""])
        .arg(&watch)
        .args(["--seconds", "600", "--dir"])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read up to the line that names the data file, then close the pipe, as `head` does.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    assert!(first.starts_with("backend:"), "{first}");
    let data = loop {
        let mut line = String::new();
        assert_ne!(
            std::io::BufRead::read_line(&mut stdout, &mut line).unwrap(),
            0,
            "no reader line"
        );
        if let Some(rest) = line.strip_prefix("reader: ") {
            break PathBuf::from(rest.split(" (").next().unwrap());
        }
    };
    let private = data.parent().unwrap();
    assert_eq!(private.parent(), Some(dir.path()));
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(private).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700, "the data file's directory is private");
    drop(stdout);
    // It would run for 600 s if it missed the closed pipe: wait at most 120 s, so that a
    // regression fails here instead of hanging the suite.
    let status = wait_at_most(&mut child, 120);
    assert!(status.success(), "{status}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "data file left"
    );
}

/// `--seconds` that no deadline can be computed from (negative, zero, NaN, beyond a day) is
/// refused with exit 2 and a message, never a panic.
#[test]
fn a_duration_out_of_range_is_refused() {
    let Some(watch) = watch_example() else {
        eprintln!("skipped: the watch example was not built (`cargo test` builds it)");
        return;
    };
    for bad in ["-1", "0", "NaN", "1e300", "inf", "x"] {
        let out = Command::new(&watch)
            .args(["--backend", "off"])
            .arg(format!("--seconds={bad}"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--seconds {bad}: {err}");
        assert!(err.contains("--seconds"), "--seconds {bad}: {err}");
        assert!(!err.contains("panicked"), "--seconds {bad}: {err}");
    }
}

/// Waits for `child`, killing it and failing after `secs` seconds.
fn wait_at_most(child: &mut std::process::Child, secs: u64) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {secs} s: the closed output was missed");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
