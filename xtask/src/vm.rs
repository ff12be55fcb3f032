//! Booting a kernel in QEMU with an initramfs that runs one command.
//!
//! 1. Stage a root: static busybox, `/init`, the payload files (binaries are copied without
//!    debug info, with the shared libraries `ldd` lists), `/work/cmd.sh`.
//! 2. Pack it with `cpio -H newc | gzip`.
//! 3. Boot QEMU: console (`ttyS0`, kernel log) to `console.log`, the command's output
//!    (`ttyS1`) to `output.log`, which is streamed to our stdout while the guest runs; an ext4
//!    scratch disk on virtio-blk is mounted at `/scratch` and is the guest's `TMPDIR`
//!    (on tmpfs, which accepts `O_DIRECT` since Linux 6.6, I/O is a memory copy that never blocks).
//! 4. `/init` runs the command, prints `UMT-XTASK-EXIT=<status>` and powers off (ACPI).
//! 5. A guest that powers off with no status reports the kernel's first crash report; one
//!    that died before `/init` ran (none of the payload ran) is booted once more.
//!
//! KVM is used when a probe boot under KVM reaches `/init` within a timeout; otherwise TCG.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use crate::VmArgs;
use crate::built::cargo_executables;
use crate::util::{have, run, run_logged, show, xtask_dir};

const EXIT_MARKER: &str = "UMT-XTASK-EXIT=";
const PROBE_MARKER: &str = "UMT-XTASK-PROBE-OK";
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);
const SCRATCH_MIB: u64 = 6144;

/// QEMU accelerator choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accel {
    /// KVM when a probe boot works, else TCG.
    Auto,
    /// Hardware virtualisation.
    Kvm,
    /// Software emulation.
    Tcg,
}

impl FromStr for Accel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Accel::Auto),
            "kvm" => Ok(Accel::Kvm),
            "tcg" => Ok(Accel::Tcg),
            _ => Err(format!("unknown accelerator {s:?} (auto, kvm or tcg)")),
        }
    }
}

/// How TCG runs the vCPUs (`-accel tcg,thread=...`).
///
/// Multi-threaded TCG runs each vCPU on a host thread, but it does not always make one vCPU's
/// write to kernel text visible to another by the time the kernel's sync IPIs return: the
/// guest kernel then runs the stale `int3` of a static-key patch after the patch finished and
/// dies (`Oops: int3` in `sched_clock_stable` and in `__schedule`, two CI runs). Single-threaded
/// TCG runs every vCPU on one host thread, in turn, and has no such window: `vm test` uses it
/// (35 s against 36 s in the guest for the patched kernel, 71 s against 57 s for PREEMPT_RT).
/// Benchmarks need the vCPUs to run in parallel, so `vm run` and `vm bench` keep multi.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TcgThreads {
    /// Every vCPU on one host thread.
    Single,
    /// One host thread per vCPU.
    Multi,
}

/// A file to put in the guest.
#[derive(Debug, Clone)]
pub(crate) struct GuestFile {
    /// Host path.
    pub(crate) src: PathBuf,
    /// Absolute guest path.
    pub(crate) dest: String,
    /// An ELF executable: strip debug info and bring its shared libraries.
    pub(crate) executable: bool,
}

/// What one boot ran.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Exit status of the command in the guest.
    pub(crate) status: i32,
    /// The guest's console (kernel log).
    pub(crate) console: PathBuf,
    /// The command's output.
    pub(crate) output: PathBuf,
    /// Wall time of the boot.
    pub(crate) elapsed: Duration,
}

const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /scratch /sbin /usr/bin /usr/sbin /root
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
# The memory controller, for the selftest of the counters' charge (issue 32).
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
export PATH=/work/bin:/bin:/sbin:/usr/bin:/usr/sbin HOME=/root TMPDIR=/tmp TERM=dumb
case " $(cat /proc/cmdline) " in
*" umt.probe "*) echo UMT-XTASK-PROBE-OK; poweroff -f ;;
esac
if [ -b /dev/vda ] && mount -t ext4 /dev/vda /scratch; then
	export TMPDIR=/scratch
fi
stty -F /dev/ttyS1 raw -echo 2>/dev/null
cd /work
sh /work/cmd.sh > /dev/ttyS1 2>&1
rc=$?
echo "UMT-XTASK-EXIT=$rc" > /dev/ttyS1
echo "UMT-XTASK-EXIT=$rc"
sync
poweroff -f
"#;

/// Busybox's shell runs its own applets before searching PATH (so `watch` would be busybox's):
/// shell functions come first, so each workspace binary gets one.
const PREAMBLE: &str = r#"for f in /work/bin/*; do
	n=${f##*/}
	case "$n" in *[!A-Za-z0-9_]*) continue ;; esac
	[ -x "$f" ] && eval "$n() { $f \"\$@\"; }"
done
"#;

fn busybox() -> Result<PathBuf> {
    for p in ["/bin/busybox", "/usr/bin/busybox"] {
        let path = PathBuf::from(p);
        // A static binary has no shared libraries for ldd to list.
        if path.exists() && shared_libs(&path).is_ok_and(|libs| libs.is_empty()) {
            return Ok(path);
        }
    }
    bail!("a static busybox is needed for the guest: `apt-get install busybox-static`")
}

fn shared_libs(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .with_context(|| format!("ldd {}", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, rhs)) => rhs.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    Ok(libs)
}

fn place(root: &Path, dest: &str) -> Result<PathBuf> {
    let rel = dest.trim_start_matches('/');
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    Ok(path)
}

/// Stages and packs an initramfs; returns its path.
fn initramfs(dir: &Path, files: &[GuestFile], script: &str) -> Result<PathBuf> {
    let root = dir.join("root");
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    fs::create_dir_all(root.join("bin"))?;
    fs::copy(busybox()?, root.join("bin/busybox"))?;
    write_exec(&root.join("init"), INIT)?;
    write_exec(&root.join("work/cmd.sh"), &format!("{PREAMBLE}{script}"))?;
    let mut libs = Vec::new();
    for f in files {
        let dest = place(&root, &f.dest)?;
        if f.executable {
            run(Command::new("strip")
                .arg("--strip-debug")
                .arg("-o")
                .arg(&dest)
                .arg(&f.src))?;
            libs.extend(shared_libs(&f.src)?);
        } else {
            fs::copy(&f.src, &dest).with_context(|| format!("copying {}", f.src.display()))?;
        }
    }
    libs.sort();
    libs.dedup();
    for lib in libs {
        let dest = place(&root, &lib.to_string_lossy())?;
        fs::copy(&lib, &dest).with_context(|| format!("copying {}", lib.display()))?;
    }
    let image = dir.join("initramfs.cpio.gz");
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "find . | cpio --quiet -o -H newc | gzip -1 > '{}'",
            image.display()
        ))
        .current_dir(&root)
        .status()?;
    if !status.success() {
        bail!("packing the initramfs failed (are cpio and gzip installed?)");
    }
    Ok(image)
}

fn write_exec(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(path, text)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

fn scratch_disk(dir: &Path) -> Result<PathBuf> {
    let img = dir.join("scratch.img");
    let _ = fs::remove_file(&img);
    let f = fs::File::create(&img)?;
    f.set_len(SCRATCH_MIB << 20)?;
    drop(f);
    run_logged(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1"])
            .arg(&img),
        &dir.join("mkfs.log"),
    )
    .context("making the scratch disk (is e2fsprogs installed?)")?;
    Ok(img)
}

struct Boot<'a> {
    kernel: &'a Path,
    initrd: &'a Path,
    disk: Option<&'a Path>,
    cpus: u32,
    mem: u32,
    accel: Accel,
    tcg_threads: TcgThreads,
    append: &'a str,
    dir: &'a Path,
    timeout: Duration,
    stream: bool,
}

fn qemu(b: &Boot<'_>) -> Result<Outcome> {
    if !have("qemu-system-x86_64") {
        bail!("qemu-system-x86_64 is missing: `apt-get install qemu-system-x86`");
    }
    let console = b.dir.join("console.log");
    let out = b.dir.join("output.log");
    let qlog = b.dir.join("qemu.log");
    for p in [&console, &out] {
        fs::write(p, "")?;
    }
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args([
        "-nodefaults",
        "-display",
        "none",
        "-no-reboot",
        "-monitor",
        "none",
    ])
    .args(["-m", &b.mem.to_string(), "-smp", &b.cpus.to_string()]);
    match b.accel {
        Accel::Kvm => cmd.args(["-accel", "kvm", "-cpu", "host"]),
        _ => match b.tcg_threads {
            TcgThreads::Single => cmd.args(["-accel", "tcg,thread=single", "-cpu", "max"]),
            TcgThreads::Multi => cmd.args(["-accel", "tcg,thread=multi", "-cpu", "max"]),
        },
    };
    cmd.arg("-kernel")
        .arg(b.kernel)
        .arg("-initrd")
        .arg(b.initrd)
        .args(["-append", b.append])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-chardev")
        .arg(format!("file,id=out,path={}", out.display()))
        .args(["-serial", "chardev:out"]);
    if let Some(disk) = b.disk {
        cmd.arg("-drive").arg(format!(
            "file={},if=virtio,format=raw,cache=none",
            disk.display()
        ));
    }
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(&qlog)?)
        .stderr(fs::File::create(b.dir.join("qemu.err"))?)
        .spawn()
        .with_context(|| format!("starting {}", show(&cmd)))?;
    let mut streamed = 0u64;
    let mut stdout = std::io::stdout();
    let status = loop {
        if b.stream {
            streamed = stream_new(&out, streamed, &mut stdout)?;
        }
        if let Some(st) = child.try_wait()? {
            break Some(st);
        }
        if started.elapsed() > b.timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if b.stream {
        stream_new(&out, streamed, &mut stdout)?;
    }
    let elapsed = started.elapsed();
    let Some(status) = status else {
        bail!(
            "the guest did not finish within {} s (console: {})",
            b.timeout.as_secs(),
            console.display()
        );
    };
    if !status.success() {
        let err = fs::read_to_string(b.dir.join("qemu.err")).unwrap_or_default();
        bail!("qemu failed ({status}): {}", err.trim());
    }
    let text = fs::read_to_string(&console).unwrap_or_default();
    let code = text
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix(EXIT_MARKER))
        .and_then(|v| v.trim().parse::<i32>().ok());
    let status = match code {
        Some(c) => c,
        None if text.contains(PROBE_MARKER) => 0,
        None => {
            return Err(GuestDied {
                reached_init: text.contains(INIT_STARTED),
                report: crash_report(&text),
            }
            .into());
        }
    };
    Ok(Outcome {
        status,
        console,
        output: out,
        elapsed,
    })
}

fn stream_new(path: &Path, from: u64, sink: &mut impl Write) -> Result<u64> {
    let mut f = fs::File::open(path)?;
    let len = f.metadata()?.len();
    if len <= from {
        return Ok(from);
    }
    f.seek(SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    f.take(len - from).read_to_end(&mut buf)?;
    sink.write_all(&buf)?;
    sink.flush()?;
    Ok(len)
}

/// The guest's kernel command line. `tsc=reliable` turns off the clocksource watchdog: under
/// TCG on a loaded host it can find the TSC skewed and mark it unstable mid-run, which patches
/// kernel text (the `sched_clock` static key) at a random moment; multi-threaded TCG may then
/// crash the guest (see [`TcgThreads`]). The TSC of a TCG guest is the host's clock.
const APPEND: &str = "console=ttyS0 panic=-1 oops=panic rdinit=/init tsc=reliable";

/// What the kernel prints as it starts `/init`: a console without it died while booting.
const INIT_STARTED: &str = "Run /init as init process";

/// The guest's kernel died (panic, or a power-off with no status): no `UMT-XTASK-EXIT` line.
#[derive(Debug)]
struct GuestDied {
    /// The kernel had started `/init`, so the payload may have run.
    reached_init: bool,
    /// The first kernel report and the console's last lines.
    report: String,
}

impl std::fmt::Display for GuestDied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let when = if self.reached_init {
            "while it ran the command"
        } else {
            "while booting, before /init"
        };
        write!(
            f,
            "the guest's kernel died {when} (no status reported); console:\n{}",
            self.report
        )
    }
}

impl std::error::Error for GuestDied {}

/// The first kernel report in `console` (from its first line on, up to 40 lines) and the last
/// 15 lines: a panic's last lines are often a second CPU's report, not the first failure.
fn crash_report(console: &str) -> String {
    const FIRST: &[&str] = &[
        "BUG: ",
        "WARNING: ",
        "Oops: ",
        "Kernel panic",
        "------------[ cut here",
    ];
    let lines: Vec<&str> = console.lines().collect();
    let tail_from = lines.len().saturating_sub(15);
    let first = lines
        .iter()
        .position(|l| FIRST.iter().any(|p| l.contains(p)));
    match first {
        Some(i) if i + 40 < tail_from => format!(
            "{}\n[...]\n{}",
            lines[i..i + 40].join("\n"),
            lines[tail_from..].join("\n")
        ),
        Some(i) => lines[i..].join("\n"),
        None => lines[lines.len().saturating_sub(30)..].join("\n"),
    }
}

/// The accelerator `auto` settled on in this run of xtask (`vm bench` boots many times).
static PROBED: std::sync::OnceLock<Accel> = std::sync::OnceLock::new();

fn choose_accel(requested: Accel, kernel: &Path) -> Result<Accel> {
    match requested {
        Accel::Tcg => return Ok(Accel::Tcg),
        Accel::Kvm => return Ok(Accel::Kvm),
        Accel::Auto => {}
    }
    if let Some(a) = PROBED.get() {
        return Ok(*a);
    }
    let a = probe_accel(kernel)?;
    Ok(*PROBED.get_or_init(|| a))
}

/// KVM if `/dev/kvm` opens and a probe boot under KVM reaches `/init` in time, else TCG.
fn probe_accel(kernel: &Path) -> Result<Accel> {
    if fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        return Ok(Accel::Tcg);
    }
    let dir = xtask_dir("vm/kvm-probe")?;
    let initrd = initramfs(&dir, &[], "true\n")?;
    let boot = Boot {
        kernel,
        initrd: &initrd,
        disk: None,
        cpus: 2,
        mem: 512,
        accel: Accel::Kvm,
        tcg_threads: TcgThreads::Multi,
        append: &format!("{APPEND} umt.probe"),
        dir: &dir,
        timeout: PROBE_TIMEOUT,
        stream: false,
    };
    match qemu(&boot) {
        Ok(o) if fs::read_to_string(&o.console).is_ok_and(|c| c.contains(PROBE_MARKER)) => {
            eprintln!("xtask: KVM works, using it");
            Ok(Accel::Kvm)
        }
        Ok(_) | Err(_) => {
            eprintln!(
                "xtask: a KVM guest did not boot within {} s here; using TCG (software emulation)",
                PROBE_TIMEOUT.as_secs()
            );
            Ok(Accel::Tcg)
        }
    }
}

/// Boots `kernel` with `files` and runs `script` (a `sh` script, run in `/work`).
pub(crate) fn boot(
    vm: &VmArgs,
    kernel: &Path,
    files: &[GuestFile],
    script: &str,
    label: &str,
    stream: bool,
) -> Result<Outcome> {
    let dir = xtask_dir(&format!("vm/{label}"))?;
    let accel = choose_accel(vm.accel, kernel)?;
    let initrd = initramfs(&dir, files, script)?;
    let disk = scratch_disk(&dir)?;
    let append = APPEND.to_string();
    let boot = Boot {
        kernel,
        initrd: &initrd,
        disk: Some(&disk),
        cpus: vm.cpus,
        mem: vm.mem,
        accel,
        tcg_threads: vm.tcg_threads.unwrap_or(TcgThreads::Multi),
        append: &append,
        dir: &dir,
        timeout: Duration::from_secs(vm.timeout),
        stream,
    };
    let mut outcome = qemu(&boot);
    if let Err(e) = &outcome
        && e.downcast_ref::<GuestDied>()
            .is_some_and(|d| !d.reached_init)
    {
        // A kernel that died before `/init` ran none of the payload: TCG has crashed a boot
        // (see `APPEND`), so boot once more; a kernel bug in the boot path fails twice.
        eprintln!("xtask: {e}\nxtask: booting once more");
        scratch_disk(&dir)?;
        outcome = qemu(&boot);
    }
    let _ = fs::remove_file(&disk);
    outcome
}

/// The kernel `vm` asks for: `--kernel`, or the patched build.
pub(crate) fn kernel_for(vm: &VmArgs) -> Result<PathBuf> {
    match &vm.kernel {
        Some(k) if k.exists() => Ok(k.clone()),
        Some(k) => Err(anyhow!("--kernel {} does not exist", k.display())),
        None => Ok(crate::kernel::build(&crate::BuildArgs {
            debug: vm.debug,
            rt: vm.rt,
            ..Default::default()
        })?
        .bzimage),
    }
}

/// Which packages a guest gets: the workspace, or what `vm test` runs (umt-sys, umt-rt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Payload {
    /// Every package but xtask (`vm run`, `vm bench`).
    Workspace,
    /// umt-sys and umt-rt: their test executables and examples (`vm test`); no umt-bench,
    /// whose release build (tokio, plotters, its tests) the tests do not use.
    Libraries,
}

/// The release binaries, examples and test executables of `payload`, built for the guest.
pub(crate) fn workspace_payload(payload: Payload) -> Result<Vec<GuestFile>> {
    let selection: &[&str] = match payload {
        Payload::Workspace => &["--workspace", "--exclude", "xtask"],
        // With umt-rt's `json` feature, as the workspace builds it (its trace export tests).
        Payload::Libraries => &["-p", "umt-sys", "-p", "umt-rt", "--features", "umt-rt/json"],
    };
    let mut files = Vec::new();
    for args in [
        &["build", "--release", "--bins", "--examples"][..],
        &["test", "--release", "--no-run"][..],
    ] {
        let args: Vec<&str> = args.iter().chain(selection).copied().collect();
        for b in cargo_executables(&args)? {
            let dest = if b.test {
                format!("/work/tests/{}-{}", b.package, b.target)
            } else {
                format!("/work/bin/{}", b.target)
            };
            files.push(GuestFile {
                src: b.exe,
                dest,
                executable: true,
            });
        }
    }
    files.sort_by(|a, b| a.dest.cmp(&b.dest));
    files.dedup_by(|a, b| a.dest == b.dest);
    Ok(files)
}

/// `cargo xtask vm run -- CMD`.
pub(crate) fn run_command(vm: &VmArgs, extra: &[PathBuf], cmd: &[String]) -> Result<i32> {
    let kernel = kernel_for(vm)?;
    let mut files = workspace_payload(Payload::Workspace)?;
    for src in extra {
        let name = src
            .file_name()
            .ok_or_else(|| anyhow!("--file {}: not a file name", src.display()))?;
        if !src.is_file() {
            bail!("--file {}: no such file", src.display());
        }
        files.push(GuestFile {
            src: src.clone(),
            dest: format!("/work/bin/{}", name.to_string_lossy()),
            executable: true,
        });
    }
    let script = format!("{}\n", shell_join(cmd));
    let o = boot(vm, &kernel, &files, &script, "run", true)?;
    eprintln!(
        "xtask: guest exited with {} after {:.1} s (console log: {})",
        o.status,
        o.elapsed.as_secs_f64(),
        o.console.display()
    );
    Ok(o.status)
}

/// Quotes words for `sh` (a single word is passed through, so `-- 'a && b'` works).
fn shell_join(words: &[String]) -> String {
    if words.len() == 1 {
        return words[0].clone();
    }
    words
        .iter()
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_report_starts_at_the_first_kernel_report() {
        let mut console: Vec<String> = (0..100).map(|i| format!("boot line {i}")).collect();
        console.push("Oops: int3: 0000 [#1] SMP".into());
        console.extend((0..60).map(|i| format!("first trace {i}")));
        console.push("Oops: int3: 0000 [#2] SMP".into());
        console.extend((0..5).map(|i| format!("second trace {i}")));
        let report = crash_report(&console.join("\n"));
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines[0], "Oops: int3: 0000 [#1] SMP");
        assert!(lines.contains(&"[...]"));
        assert_eq!(lines.last(), Some(&"second trace 4"));
        assert!(lines.len() <= 40 + 1 + 15);
        // A short console is shown whole from the report on; none at all: its last lines.
        assert_eq!(
            crash_report("a\nKernel panic - x\nb"),
            "Kernel panic - x\nb"
        );
        assert_eq!(crash_report("a\nb"), "a\nb");
    }

    #[test]
    fn a_kernel_that_died_says_whether_it_reached_init() {
        let booting = GuestDied {
            reached_init: false,
            report: "Oops".into(),
        };
        assert!(booting.to_string().contains("before /init"));
        let running = GuestDied {
            reached_init: true,
            report: "Oops".into(),
        };
        assert!(running.to_string().contains("while it ran the command"));
    }

    #[test]
    fn shell_quoting() {
        let w = |v: &[&str]| shell_join(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(w(&["echo hi && true"]), "echo hi && true");
        assert_eq!(w(&["echo", "a b", "it's"]), r"echo 'a b' 'it'\''s'");
    }

    #[test]
    fn accel_parses() {
        assert_eq!("tcg".parse::<Accel>(), Ok(Accel::Tcg));
        assert!("xen".parse::<Accel>().is_err());
    }
}
