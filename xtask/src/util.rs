//! Small helpers: paths, running commands with their output in a log, hashing.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

/// The workspace root (the parent of `xtask/`).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// `target/xtask/<sub>`, created.
pub(crate) fn xtask_dir(sub: &str) -> Result<PathBuf> {
    let dir = workspace_root().join("target").join("xtask").join(sub);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Renders a command for messages.
pub(crate) fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd`, appending its output to `log`; on failure prints the log's tail.
pub(crate) fn run_logged(cmd: &mut Command, log: &Path) -> Result<()> {
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    writeln!(file, "\n$ {}", show(cmd))?;
    let status = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .status()
        .with_context(|| format!("starting {}", show(cmd)))?;
    if !status.success() {
        let tail = tail_of(log, 40);
        bail!(
            "`{}` failed ({status}); last lines of {}:\n{tail}",
            show(cmd),
            log.display()
        );
    }
    Ok(())
}

/// Runs `cmd` with inherited output; fails on a non-zero status.
pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("starting {}", show(cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({status})", show(cmd));
    }
    Ok(())
}

/// The last `n` lines of a text file ("" if it cannot be read).
pub(crate) fn tail_of(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `true` when `program` is on PATH.
pub(crate) fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Incremental SHA-256 over labelled inputs.
#[derive(Default, Clone)]
pub(crate) struct Hasher(Sha256);

impl Hasher {
    pub(crate) fn text(&mut self, label: &str, data: &str) {
        self.bytes(label, data.as_bytes());
    }

    pub(crate) fn bytes(&mut self, label: &str, data: &[u8]) {
        self.0.update((label.len() as u64).to_le_bytes());
        self.0.update(label.as_bytes());
        self.0.update((data.len() as u64).to_le_bytes());
        self.0.update(data);
    }

    pub(crate) fn file(&mut self, label: &str, path: &Path) -> Result<()> {
        let mut f = fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
        self.0.update(label.as_bytes());
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            self.0.update(&buf[..n]);
        }
        Ok(())
    }

    /// The digest so far, leaving the hasher usable.
    pub(crate) fn clone_finish(&self) -> String {
        self.clone().finish()
    }

    /// First 16 hex digits of the digest.
    pub(crate) fn finish(self) -> String {
        self.0
            .finalize()
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}
