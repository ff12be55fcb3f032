//! The private directory a run keeps its files in, and the sweep of the ones killed runs left.
//!
//! Every file `umt-bench` makes (checkpoints, snapshots, the `O_DIRECT` probe, the scan's
//! files) goes in a directory of its own inside `--dir`: `.umt-run-XXXXXX`, made with
//! `mkdtemp` semantics (a new random name, mode 700). Nobody else can plant a file or a link
//! in it, so the predictable names inside are safe even as root in `/tmp` (issue 30). The run
//! holds an exclusive `flock` on the directory as long as it lives; the kernel drops that lock
//! when the process ends, however it ends. So a directory whose lock anyone can take belongs
//! to a run that is over: SIGKILL or the OOM killer left it, and the next run sweeps it.
//!
//! Steps, and their races:
//!
//! 1. **R1 Sweep** ([`sweep`]): for each `.umt-run-*` entry of `--dir`, open it with
//!    `O_DIRECTORY | O_NOFOLLOW` (a link planted under that name is refused), keep it only if
//!    the caller owns it (root sweeps root's, a user their own: never another user's), take its
//!    lock without waiting, and if that succeeds and the directory holds something, remove it
//!    and all in it (`remove_dir_all`, which follows no link). A live run holds its lock: the
//!    try fails and the directory is left alone. Two sweepers: one gets the lock, the other
//!    passes. An empty directory is left alone even unlocked: it may be a run's between its
//!    make and its lock (R2). A run killed in that instant leaves an empty directory behind.
//! 2. **R2 Create** ([`RunDir::create`]): make the directory, open it, take its lock, waiting
//!    for it. A sweeper may hold that lock a moment (it found the new directory unlocked, like
//!    a dead run's), but it finds it empty and lets go without removing it: the run gets the
//!    lock next. Before the sweep skipped empty directories, sweepers removed new ones, and
//!    four MPI ranks starting at once in one `/tmp` failed in CI; a directory gone or
//!    unlinked by then (a sweeper of an older version) still makes the run try another.
//! 3. **R3 End** (drop, or the interrupt handler): remove the directory, then let go of the
//!    lock.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::error::BenchError;

/// The start of every run directory's name.
pub const PREFIX: &str = ".umt-run-";

/// A run's private directory: made, locked, swept later only once the run is over. Removed,
/// with everything in it, when dropped (and by the interrupt handler, see
/// [`crate::io::remove_files_on_interrupt`]).
#[derive(Debug)]
pub struct RunDir {
    /// Removed first when dropped (fields drop in order), while the lock is still held.
    dir: Option<tempfile::TempDir>,
    /// The directory's lock: a sweeper leaves the directory alone while it is held.
    _lock: Flock<File>,
}

impl RunDir {
    /// Sweeps `parent` of the directories of runs that are over (R1), then makes and locks a
    /// new one in it (R2).
    pub fn create(parent: &Path) -> Result<RunDir, BenchError> {
        sweep(parent);
        let mut last = None;
        for _ in 0..8 {
            let dir = crate::io::private_dir(parent, PREFIX).map_err(|e| {
                BenchError::io(
                    "creating a private directory for the run's files (give a --dir that \
                         exists and that you may write) in",
                    parent,
                    e,
                )
            })?;
            let file = match open_dir(dir.path()) {
                Ok(file) => file,
                // Removed before it could be opened (R2: a sweeper of an older version).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    last = Some(nix::errno::Errno::ENOENT);
                    continue;
                }
                Err(e) => return Err(BenchError::io("opening the run's directory", dir.path(), e)),
            };
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(lock) if lock.metadata().is_ok_and(|m| m.nlink() > 0) => {
                    let run = RunDir {
                        dir: Some(dir),
                        _lock: lock,
                    };
                    crate::io::track_run_dir(run.path(), true);
                    return Ok(run);
                }
                // Removed while the lock was awaited (R2: an older sweeper): try another.
                Ok(_) => last = Some(nix::errno::Errno::ENOENT),
                Err((_, e)) => last = Some(e),
            }
        }
        Err(BenchError::io(
            "locking a new run directory (another process keeps sweeping it) in",
            parent,
            std::io::Error::from(last.unwrap_or(nix::errno::Errno::EAGAIN)),
        ))
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new(""), |d| d.path())
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            crate::io::track_run_dir(dir.path(), false);
            let _ = dir.close();
        }
    }
}

/// Opens the directory at `path` for its lock, refusing a symbolic link.
fn open_dir(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
}

/// R1: removes the run directories in `parent` that the caller owns and whose run is over
/// (anyone can take their lock); returns their paths. Best effort: what cannot be read or
/// removed stays.
pub fn sweep(parent: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let me = nix::unistd::geteuid().as_raw();
    let mut swept = Vec::new();
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let path = entry.path();
        let Ok(file) = open_dir(&path) else {
            continue;
        };
        if !file.metadata().is_ok_and(|m| m.is_dir() && m.uid() == me) {
            continue;
        }
        let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else {
            continue; // a live run
        };
        // Empty: maybe a run's between its make and its lock (R2).
        let empty = std::fs::read_dir(&path).map_or(true, |mut d| d.next().is_none());
        if !empty && std::fs::remove_dir_all(&path).is_ok() {
            swept.push(path);
        }
        drop(lock);
    }
    swept
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live run's directory survives a sweep; once its run is over (the lock is gone with
    /// its owner), the next sweep removes it and what is in it.
    #[test]
    fn a_sweep_removes_only_the_directories_of_runs_that_are_over() {
        let parent = tempfile::tempdir().unwrap();
        let live = RunDir::create(parent.path()).unwrap();
        std::fs::write(live.path().join("checkpoint"), b"x").unwrap();
        assert!(sweep(parent.path()).is_empty());
        assert!(live.path().join("checkpoint").exists());
        // A run killed with SIGKILL: its directory stays, and no one holds its lock.
        let dead = tempfile::Builder::new()
            .prefix(PREFIX)
            .tempdir_in(parent.path())
            .unwrap()
            .keep();
        std::fs::write(dead.join("checkpoint"), b"x").unwrap();
        // An empty, unlocked one may be a run's between its make and its lock (R2): kept.
        let new = parent.path().join(format!("{PREFIX}new"));
        std::fs::create_dir(&new).unwrap();
        assert_eq!(sweep(parent.path()), std::slice::from_ref(&dead));
        assert!(new.exists());
        assert!(!dead.exists());
        assert!(live.path().exists());
        let path = live.path().to_path_buf();
        drop(live);
        assert!(!path.exists(), "a run removes its directory at its end");
    }

    /// A run's directory is mode 700 whatever the umask (tempfile's default is 777 less the
    /// umask: 755 under the usual 022, open to all under 000); the CLI test under `umask 000`
    /// is `the_next_run_sweeps_what_a_killed_run_left`.
    #[test]
    fn a_run_directory_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let run = RunDir::create(parent.path()).unwrap();
        let mode = std::fs::metadata(run.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    /// Runs that start together in one directory (MPI ranks on one host) sweep each other's
    /// new, still unlocked directories (R2): every one of them still gets a directory of its
    /// own, and none is left behind.
    #[test]
    fn runs_starting_together_each_get_a_directory() {
        let parent = tempfile::tempdir().unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let run = RunDir::create(parent.path()).unwrap();
                        assert!(run.path().is_dir());
                    }
                });
            }
        });
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
    }

    /// A link planted under a run directory's name is neither followed nor removed, nor is
    /// another user's run directory (as root: one owned by nobody), nor a directory of
    /// another name.
    #[test]
    fn a_sweep_follows_no_link_and_touches_nothing_else() {
        let parent = tempfile::tempdir().unwrap();
        let target = tempfile::tempdir().unwrap();
        std::fs::write(target.path().join("precious"), b"x").unwrap();
        let link = parent.path().join(format!("{PREFIX}planted"));
        std::os::unix::fs::symlink(target.path(), &link).unwrap();
        let other = parent.path().join("umt-run-not-ours");
        std::fs::create_dir(&other).unwrap();
        let users = parent.path().join(format!("{PREFIX}nobody"));
        std::fs::create_dir(&users).unwrap();
        std::fs::write(users.join("checkpoint"), b"x").unwrap();
        let root = nix::unistd::geteuid().is_root();
        if root {
            std::os::unix::fs::chown(&users, Some(65534), Some(65534)).unwrap();
        }
        let swept = sweep(parent.path());
        if root {
            assert!(swept.is_empty(), "{swept:?}");
            assert!(users.exists());
        } else {
            assert_eq!(swept, [users]);
        }
        assert!(target.path().join("precious").exists());
        assert!(link.symlink_metadata().is_ok());
        assert!(other.exists());
    }
}
