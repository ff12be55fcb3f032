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
