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
    if std::path::Path::new("/sys/kernel/umt/abi_version").exists() {
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
    let mut child = Command::new(&watch)
        .args(["--seconds", "600", "--dir"])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read the first line, then close the pipe, as `head -1` does.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert!(line.starts_with("backend:"), "{line}");
    drop(stdout);
    // It would run for 600 s if it missed the closed pipe; a hang fails the test by its
    // harness's timeout rather than by a time bound here.
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "data file left"
    );
}
