//! Executables as cargo builds them, read from its JSON messages, and `cargo xtask tests`.
//!
//! The guest's payload (`vm`) is the executables of a `cargo build`/`cargo test --no-run`.
//! `cargo xtask tests -p PKG` runs again the test executables that `cargo test --workspace`
//! built: `cargo test -p PKG` would build them a second time, because cargo unifies features
//! over the packages a command selects (umt-bench turns on umt-rt's `json` feature and features
//! of shared dependencies), so each selection has its own build of umt-rt and its tests. CI
//! runs the suites again on another monitor and under load with the first build.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::util::{show, workspace_root};

/// One executable cargo built.
#[derive(Debug)]
pub(crate) struct Built {
    /// Its package's name (`umt-rt`).
    pub(crate) package: String,
    /// The target's name (`lending` for `tests/lending.rs`, `umt_rt` for the library's tests).
    pub(crate) target: String,
    /// The executable.
    pub(crate) exe: PathBuf,
    /// A test harness (of `cargo test`), not a binary or an example.
    pub(crate) test: bool,
    /// Its package's folder, where cargo runs its tests.
    pub(crate) package_dir: PathBuf,
    /// Found up to date: not built by this command.
    pub(crate) fresh: bool,
}

/// Runs `cargo ARGS --message-format=json-render-diagnostics` in the workspace (diagnostics
/// on stderr as usual) and returns the executables it built or found fresh, in build order.
pub(crate) fn cargo_executables(args: &[&str]) -> Result<Vec<Built>> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(args)
        .arg("--message-format=json-render-diagnostics")
        .current_dir(workspace_root())
        .stderr(Stdio::inherit())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| show(&cmd))?;
    let reader = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut built = Vec::new();
    for msg in cargo_metadata::Message::parse_stream(reader) {
        let msg = match msg {
            Ok(msg) => msg,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e).with_context(|| format!("reading the output of `{}`", show(&cmd)));
            }
        };
        let cargo_metadata::Message::CompilerArtifact(a) = msg else {
            continue;
        };
        let Some(exe) = a.executable else { continue };
        let package_dir = a
            .manifest_path
            .parent()
            .map(|p| p.as_std_path().to_path_buf())
            .unwrap_or_else(workspace_root);
        built.push(Built {
            package: package_name(&a.package_id.repr),
            target: a.target.name.clone(),
            exe: exe.into_std_path_buf(),
            test: a.profile.test,
            package_dir,
            fresh: a.fresh,
        });
    }
    if !child.wait()?.success() {
        bail!("`{}` failed", show(&cmd));
    }
    Ok(built)
}

/// `path+file:///…/crates/umt-sys#0.1.0` or `umt-sys 0.1.0 (path+…)` → `umt-sys`.
fn package_name(repr: &str) -> String {
    if let Some((_, rest)) = repr.rsplit_once('/')
        && let Some((dir, fragment)) = rest.split_once('#')
    {
        // `#name@version` when the package name differs from its directory, else `#version`.
        return match fragment.split_once('@') {
            Some((name, _)) => name.to_string(),
            None => dir.to_string(),
        };
    }
    repr.split_whitespace().next().unwrap_or(repr).to_string()
}

/// The test executables of `built` that belong to `packages` and, when `targets` is not
/// empty, to one of those targets; in the order given.
fn select<'a>(built: &'a [Built], packages: &[String], targets: &[String]) -> Vec<&'a Built> {
    built
        .iter()
        .filter(|b| b.test && packages.contains(&b.package))
        .filter(|b| targets.is_empty() || targets.contains(&b.target))
        .collect()
}

/// Set (to anything but `0`) by CI: `cargo xtask tests` fails if it had to build a test
/// executable, which would mean its stage no longer reuses the workspace's build.
const REQUIRE_FRESH: &str = "XTASK_TESTS_REQUIRE_FRESH";

/// `cargo xtask tests -p PKG... [--test NAME...] [-- ARGS]`: builds what `cargo test
/// --workspace --no-run` builds (nothing, after a `cargo test --workspace`), then runs the
/// chosen packages' test executables one after another from their package's folder, as
/// `cargo test` does, with `args`; stops at the first that fails (exit status 101, as cargo).
pub(crate) fn run_tests(packages: &[String], targets: &[String], args: &[String]) -> Result<i32> {
    let built = cargo_executables(&["test", "--workspace", "--no-run"])?;
    let rebuilt: Vec<&str> = built
        .iter()
        .filter(|b| !b.fresh)
        .map(|b| b.target.as_str())
        .collect();
    if !rebuilt.is_empty() {
        eprintln!(
            "xtask: built {} test executables or examples first: {}",
            rebuilt.len(),
            rebuilt.join(", ")
        );
        if std::env::var_os(REQUIRE_FRESH).is_some_and(|v| v != "0") {
            bail!(
                "{REQUIRE_FRESH} is set and `cargo test --workspace --no-run` built them: run \
                 `cargo test --workspace` first, with the same environment (RUSTFLAGS, features)"
            );
        }
    }
    for p in packages {
        if !built.iter().any(|b| b.test && &b.package == p) {
            bail!("no test executable of a package named `{p}` in the workspace");
        }
    }
    let chosen = select(&built, packages, targets);
    for t in targets {
        if !chosen.iter().any(|b| &b.target == t) {
            bail!("no test target `{t}` in {}", packages.join(", "));
        }
    }
    for b in chosen {
        eprintln!(
            "     Running {} {} ({})",
            b.package,
            b.target,
            b.exe.display()
        );
        let mut cmd = Command::new(&b.exe);
        // xtask's own package variables (`cargo run` set them) are not the test's.
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| k.starts_with("CARGO_PKG_")) {
                cmd.env_remove(k);
            }
        }
        cmd.args(args)
            .current_dir(&b.package_dir)
            .env("CARGO_MANIFEST_DIR", &b.package_dir)
            .env("CARGO_MANIFEST_PATH", b.package_dir.join("Cargo.toml"))
            .env("CARGO_PKG_NAME", &b.package);
        let status = cmd.status().with_context(|| show(&cmd))?;
        if !status.success() {
            eprintln!(
                "xtask: {} test `{}` failed ({status}); rerun it with `{}`",
                b.package,
                b.target,
                show(&cmd)
            );
            return Ok(101);
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names() {
        assert_eq!(
            package_name("path+file:///work/main/crates/umt-sys#0.1.0"),
            "umt-sys"
        );
        assert_eq!(
            package_name("path+file:///work/main/benches#umt-benches@0.1.0"),
            "umt-benches"
        );
        assert_eq!(package_name("umt-rt 0.1.0 (path+file:///x)"), "umt-rt");
    }

    fn b(package: &str, target: &str, test: bool) -> Built {
        Built {
            package: package.into(),
            target: target.into(),
            exe: PathBuf::from(format!("/t/{target}")),
            test,
            package_dir: PathBuf::from("/p"),
            fresh: true,
        }
    }

    #[test]
    fn selection_keeps_the_packages_test_executables_in_order() {
        let built = [
            b("umt-sys", "umt_sys", true),
            b("umt-sys", "watch", false),
            b("umt-bench", "umt_bench", true),
            b("umt-rt", "lending", true),
            b("umt-sys", "bpf_backend", true),
        ];
        let names = |v: Vec<&Built>| v.iter().map(|b| b.target.clone()).collect::<Vec<_>>();
        let pkgs = ["umt-sys".to_string(), "umt-rt".to_string()];
        assert_eq!(
            names(select(&built, &pkgs, &[])),
            ["umt_sys", "lending", "bpf_backend"]
        );
        assert_eq!(
            names(select(&built, &pkgs[..1], &["bpf_backend".into()])),
            ["bpf_backend"]
        );
        assert!(select(&built, &["xtask".into()], &[]).is_empty());
    }
}
