//! `cargo xtask kernel build`: the patched Linux 6.12 kernel and its selftest binary.
//!
//! 1. Find the source: `--source PATH`, or Debian's `/usr/src/linux-source-6.12.tar.xz`
//!    (installed with apt when missing).
//! 2. Extract it under `target/xtask/kernel/src-<hash>` and apply `kernel-patch/*.patch` in
//!    order (a given tree is patched in place unless `kernel/sched/umt.c` shows the series is
//!    already there).
//! 3. Configure `tinyconfig` + `kernel.config` (+ `kernel-debug.config` or `kernel-rt.config`),
//!    check every line
//!    of the fragments survived `olddefconfig`, build `bzImage` and the uapi headers.
//! 4. Build `tools/testing/selftests/umt/umt_test` statically against those headers.
//!
//! The result is cached in `target/xtask/kernel/build-<hash>`, keyed by the source, the
//! series and the fragments; a second build with the same inputs does nothing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;

use anyhow::{Context, Result, bail};

use crate::BuildArgs;
use crate::util::{Hasher, have, run_logged, workspace_root, xtask_dir};

const DEBIAN_TARBALL: &str = "/usr/src/linux-source-6.12.tar.xz";
const DEBIAN_PACKAGE: &str = "linux-source-6.12";
const CONFIG: &str = include_str!("kernel.config");
const DEBUG_CONFIG: &str = include_str!("kernel-debug.config");
const RT_CONFIG: &str = include_str!("kernel-rt.config");
/// Bump to invalidate every cached build when the build steps change.
const RECIPE: &str = "umt-kernel-build-1";

/// A built kernel.
#[derive(Debug, Clone)]
pub(crate) struct Kernel {
    /// The bootable image.
    pub(crate) bzimage: PathBuf,
    /// The static selftest binary (patched kernels only).
    pub(crate) selftest: Option<PathBuf>,
}

/// The patch series, in order, without its cover letter (`0000-cover-letter.patch`, which
/// changes no file).
pub(crate) fn series() -> Result<Vec<PathBuf>> {
    let dir = workspace_root().join("kernel-patch");
    let mut patches: Vec<PathBuf> = fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "patch"))
        .filter(|p| p.file_name().is_none_or(|n| n != "0000-cover-letter.patch"))
        .collect();
    patches.sort();
    if patches.is_empty() {
        bail!("no *.patch in {}", dir.display());
    }
    Ok(patches)
}

fn ensure_debian_source() -> Result<PathBuf> {
    let tarball = PathBuf::from(DEBIAN_TARBALL);
    if tarball.exists() {
        return Ok(tarball);
    }
    if !nix_is_root() {
        bail!(
            "{DEBIAN_TARBALL} is missing; install it with `sudo apt-get install {DEBIAN_PACKAGE}`, \
             or pass --source PATH to a Linux 6.12 tree"
        );
    }
    eprintln!("xtask: installing {DEBIAN_PACKAGE} with apt-get");
    let install = |cmd: &mut Command| {
        cmd.env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    let args = ["install", "-y", "--no-install-recommends", DEBIAN_PACKAGE];
    if !install(Command::new("apt-get").args(args)) {
        install(Command::new("apt-get").arg("update"));
        if !install(Command::new("apt-get").args(args)) {
            bail!("`apt-get install {DEBIAN_PACKAGE}` failed; install it by hand or pass --source");
        }
    }
    if !tarball.exists() {
        bail!("{DEBIAN_PACKAGE} is installed but {DEBIAN_TARBALL} is not there");
    }
    Ok(tarball)
}

fn nix_is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn check_tools() -> Result<()> {
    let missing: Vec<&str> = ["make", "gcc", "flex", "bison", "bc", "tar", "patch", "perl"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if !missing.is_empty() {
        bail!(
            "missing build tools: {}; on Debian: `apt-get install build-essential flex bison \
             bc libelf-dev libssl-dev patch`",
            missing.join(" ")
        );
    }
    Ok(())
}

/// Settings a fragment asks for: `CONFIG_X=v` lines and `# CONFIG_X is not set` lines.
pub(crate) fn fragment_settings(fragment: &str) -> Vec<&str> {
    fragment
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.starts_with("CONFIG_") || (l.starts_with("# CONFIG_") && l.ends_with(" is not set"))
        })
        .collect()
}

fn apply_series(tree: &Path, log: &Path) -> Result<()> {
    for patch in series()? {
        run_logged(
            Command::new("patch")
                .args(["-p1", "--batch", "--forward", "--quiet", "-i"])
                .arg(&patch)
                .current_dir(tree),
            log,
        )
        .with_context(|| format!("applying {}", patch.display()))?;
    }
    Ok(())
}

fn jobs() -> usize {
    thread::available_parallelism().map_or(2, |n| n.get())
}

/// Builds (or finds cached) the kernel `args` describes.
pub(crate) fn build(args: &BuildArgs) -> Result<Kernel> {
    check_tools()?;
    let root = xtask_dir("kernel")?;
    let patched = !args.unpatched;

    // 1-2: the source tree.
    let mut h = Hasher::default();
    h.text("recipe", RECIPE);
    if patched {
        for p in series()? {
            h.file("patch", &p)?;
        }
    }
    let tree = match &args.source {
        Some(src) => {
            let src = src
                .canonicalize()
                .with_context(|| format!("--source {}", src.display()))?;
            if !src.join("Makefile").exists() || !src.join("kernel").is_dir() {
                bail!("--source {} is not a kernel tree", src.display());
            }
            if patched && !src.join("kernel/sched/umt.c").exists() {
                eprintln!("xtask: applying kernel-patch/ to {}", src.display());
                apply_series(&src, &root.join("patch.log"))?;
            }
            h.text("source", &src.to_string_lossy());
            src
        }
        None => {
            let tarball = ensure_debian_source()?;
            let meta = fs::metadata(&tarball)?;
            h.text("tarball", &format!("{}:{}", tarball.display(), meta.len()));
            if let Ok(m) = meta.modified() {
                h.text("mtime", &format!("{m:?}"));
            }
            let src_key = h.clone_finish();
            let dir = root.join(format!("src-{src_key}"));
            let tree = dir.join("linux-source-6.12");
            let stamp = dir.join(".ready");
            if !stamp.exists() {
                if dir.exists() {
                    fs::remove_dir_all(&dir)?;
                }
                fs::create_dir_all(&dir)?;
                let log = dir.join("prepare.log");
                eprintln!(
                    "xtask: extracting {} into {}",
                    tarball.display(),
                    dir.display()
                );
                run_logged(
                    Command::new("tar")
                        .arg("-xf")
                        .arg(&tarball)
                        .arg("-C")
                        .arg(&dir),
                    &log,
                )?;
                if patched {
                    eprintln!("xtask: applying kernel-patch/");
                    apply_series(&tree, &log)?;
                }
                fs::write(&stamp, "")?;
            }
            tree
        }
    };

    // 3: configure and build.
    h.text("config", CONFIG);
    if args.debug {
        h.text("debug-config", DEBUG_CONFIG);
    }
    if args.rt {
        h.text("rt-config", RT_CONFIG);
    }
    let key = h.finish();
    let variant = match (args.debug, args.rt) {
        (true, _) => "-debug",
        (false, true) => "-rt",
        (false, false) => "",
    };
    let flavour = format!("{}{variant}", if patched { "umt" } else { "stock" });
    let out = root.join(format!("build-{flavour}-{key}"));
    let bzimage = out.join("arch/x86/boot/bzImage");
    let selftest = patched.then(|| out.join("umt_test"));
    let stamp = out.join(".built");
    let kernel = Kernel {
        bzimage: bzimage.clone(),
        selftest: selftest.clone(),
    };
    if stamp.exists() && bzimage.exists() && args.source.is_none() {
        eprintln!("xtask: kernel up to date: {}", bzimage.display());
        return Ok(kernel);
    }
    fs::create_dir_all(&out)?;
    let log = out.join("build.log");
    let make = |extra: &[&str]| {
        let mut c = Command::new("make");
        c.arg("-C")
            .arg(&tree)
            .arg(format!("O={}", out.display()))
            .args(extra);
        c
    };
    eprintln!(
        "xtask: building the {flavour} kernel in {} (log: {})",
        out.display(),
        log.display()
    );
    let started = std::time::Instant::now();
    run_logged(&mut make(&["tinyconfig"]), &log)?;
    // The stock kernel has no CONFIG_UMT to ask for; the RT one another preemption model.
    let mut fragment: String = CONFIG
        .lines()
        .filter(|l| patched || !l.starts_with("CONFIG_UMT"))
        .filter(|l| {
            !args.rt
                || !(l.starts_with("CONFIG_PREEMPT_VOLUNTARY")
                    || l.starts_with("CONFIG_JUMP_LABEL"))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    if args.debug {
        fragment.push_str(DEBUG_CONFIG);
    }
    if args.rt {
        fragment.push_str(RT_CONFIG);
    }
    let config_path = out.join(".config");
    let mut config = fs::read_to_string(&config_path)?;
    config.push_str(&fragment);
    fs::write(&config_path, config)?;
    run_logged(&mut make(&["olddefconfig"]), &log)?;
    let config = fs::read_to_string(&config_path)?;
    let lost: Vec<&str> = fragment_settings(&fragment)
        .into_iter()
        .filter(|want| !config.lines().any(|l| l == *want))
        .collect();
    if !lost.is_empty() {
        bail!(
            "olddefconfig dropped {} (a dependency is missing from xtask/src/kernel*.config)",
            lost.join(", ")
        );
    }
    let j = format!("-j{}", jobs());
    run_logged(&mut make(&[&j, "bzImage"]), &log)?;
    run_logged(&mut make(&[&j, "headers"]), &log)?;

    // 4: the selftest.
    if let Some(selftest) = &selftest {
        let src = tree.join("tools/testing/selftests/umt/umt_test.c");
        run_logged(
            Command::new("gcc")
                .args(["-static", "-O2", "-Wall", "-Werror", "-pthread", "-isystem"])
                .arg(out.join("usr/include"))
                .arg("-I")
                .arg(tree.join("tools/testing/selftests"))
                .arg("-o")
                .arg(selftest)
                .arg(&src),
            &log,
        )
        .context("building the UMT selftest (is the static glibc, libc6-dev, installed?)")?;
    }
    fs::write(&stamp, "")?;
    eprintln!(
        "xtask: built {} in {:.0} s",
        bzimage.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(kernel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_parse() {
        let s =
            fragment_settings("# comment\nCONFIG_A=y\n# CONFIG_B is not set\n\nCONFIG_C=\"x\"\n");
        assert_eq!(s, ["CONFIG_A=y", "# CONFIG_B is not set", "CONFIG_C=\"x\""]);
        assert!(fragment_settings(CONFIG).contains(&"CONFIG_UMT=y"));
        assert!(fragment_settings(DEBUG_CONFIG).contains(&"CONFIG_KASAN=y"));
        assert!(fragment_settings(RT_CONFIG).contains(&"CONFIG_PREEMPT_RT=y"));
    }
}
