//! Checkpoint files: `O_DIRECT` writes from aligned buffers, with a buffered fallback.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::BenchError;

/// Alignment of direct I/O buffers, offsets and lengths.
pub const DIRECT_ALIGN: usize = 4096;

/// How checkpoint files are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// `O_DIRECT`: bypass the page cache, every write goes to the device (the paper's setup).
    Direct,
    /// Through the page cache.
    Buffered,
}

impl IoMode {
    /// `Direct` when `dir` takes `O_DIRECT` files (see [`probe_direct`]), else `Buffered`.
    pub fn for_dir(dir: &Path) -> IoMode {
        if probe_direct(dir).is_ok() {
            IoMode::Direct
        } else {
            IoMode::Buffered
        }
    }
}

/// What the benchmark created and has not removed yet, for the interrupt handler.
struct Live {
    /// Files (see [`TempPath`]).
    files: Vec<PathBuf>,
    /// Run directories (see [`crate::rundir::RunDir`]).
    dirs: Vec<PathBuf>,
    /// The process is stopping: no file is created any more.
    stopping: bool,
}

static LIVE: std::sync::Mutex<Live> = std::sync::Mutex::new(Live {
    files: Vec::new(),
    dirs: Vec::new(),
    stopping: false,
});

/// Adds (`live`) or removes a run directory from those the interrupt handler removes.
pub(crate) fn track_run_dir(path: &Path, live: bool) {
    let mut all = lock_live();
    all.dirs.retain(|d| d != path);
    if live {
        all.dirs.push(path.to_path_buf());
    }
}

/// A file a run creates (a checkpoint, a snapshot): removed when this is dropped, on every
/// way out of the run (its end, an error, a panic), and by [`remove_files_on_interrupt`]'s
/// handler if the process is stopped first. A full disk stays full no longer than the run.
#[derive(Debug)]
pub struct TempPath(PathBuf);

impl TempPath {
    /// Creates the file at `path` with `create`, and takes charge of it. Creation and the
    /// interrupt handler exclude each other, so no file is created after the handler's
    /// clean-up; once it started, this fails.
    pub fn create<T>(
        path: PathBuf,
        create: impl FnOnce(&Path) -> Result<T, BenchError>,
    ) -> Result<(TempPath, T), BenchError> {
        let mut live = lock_live();
        if live.stopping {
            return Err(BenchError::Runtime("interrupted".into()));
        }
        live.files.push(path.clone());
        let guard = TempPath(path);
        // On failure, `guard` removes what `create` may have left, once the lock is free.
        match create(&guard) {
            Ok(made) => Ok((guard, made)),
            Err(e) => {
                drop(live);
                Err(e)
            }
        }
    }
}

impl std::ops::Deref for TempPath {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let mut live = lock_live();
        if let Some(i) = live.files.iter().position(|p| *p == self.0) {
            live.files.swap_remove(i);
        }
    }
}

fn lock_live() -> std::sync::MutexGuard<'static, Live> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// On `SIGINT` (Ctrl-C), `SIGTERM` or `SIGHUP`, removes every file and run directory the
/// runs created and not yet removed, says so on stderr, and ends the process with status 128 + the signal's number
/// (130, 143, 129), as a shell reports a process the signal killed. For the command line;
/// call it once.
pub fn remove_files_on_interrupt() -> Result<(), BenchError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    use std::io::Write;
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(|e| {
            BenchError::Runtime(format!("cannot handle SIGINT, SIGTERM and SIGHUP: {e}"))
        })?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                // Held until the process ends: no file is created after this clean-up.
                let mut live = lock_live();
                live.stopping = true;
                for path in live.files.drain(..) {
                    let _ = std::fs::remove_file(path);
                }
                // Their locks go with the process, just after.
                for dir in live.dirs.drain(..) {
                    let _ = std::fs::remove_dir_all(dir);
                }
                let name = match sig {
                    SIGINT => "SIGINT",
                    SIGTERM => "SIGTERM",
                    _ => "SIGHUP",
                };
                // Not `eprintln!`: a closed stderr must not turn the exit into a panic.
                let _ = writeln!(
                    std::io::stderr(),
                    "umt-bench: interrupted ({name}); the files of the run were removed"
                );
                std::process::exit(128 + sig);
            }
        })
        .map_err(|e| BenchError::Runtime(format!("cannot start the signal thread: {e}")))?;
    Ok(())
}

/// The directory a file named `path` goes in (`.` for a bare name).
fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Checks, before a run, that an output named by `flag` (`--json`, `--plot`) can be written
/// at `path` when the run ends: not a directory, and its directory takes a new file (one is
/// made there and removed at once). `path` itself is left as it is: a refused or failed run
/// never truncates the results of an earlier one.
pub fn check_writable(flag: &str, path: &Path) -> Result<(), BenchError> {
    if path.is_dir() {
        return Err(BenchError::InvalidParam(format!(
            "{flag} {}: that is a directory; give a file name",
            path.display()
        )));
    }
    let dir = parent_dir(path);
    tempfile::Builder::new()
        .prefix(".umt-bench-")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| {
            BenchError::InvalidParam(format!(
                "{flag} {}: cannot write a file in {}: {e}; give a path in a directory that \
                 exists and that you may write",
                path.display(),
                dir.display()
            ))
        })
}

/// Set once the standard output is found closed ([`say`]).
static OUTPUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to the standard output and flushes it. A closed output (`EPIPE`: the reader
/// went away, `umt-bench ... | head`) is never a panic, as `println!` gives, nor an error that
/// stops the command: it is noted ([`output_closed`]), this and every later call write
/// nothing, and the command goes on to write its files; `main` then ends with 141.
pub fn say(text: std::fmt::Arguments<'_>) -> Result<(), BenchError> {
    use std::io::Write;
    if output_closed() {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_fmt(text).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            OUTPUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        r => r.map_err(|e| BenchError::io("writing to", Path::new("the standard output"), e)),
    }
}

/// Writes `text` to standard error, as `eprint!` does, except that a closed standard error
/// (its reader gone) is no panic: the note is dropped. [`note!`](crate::note) calls it.
pub fn note(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_fmt(text);
}

/// `eprintln!` that never panics: a note to standard error, dropped if it is closed
/// ([`io::note`](crate::io::note)).
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::io::note(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Whether [`say`] found the standard output closed.
pub fn output_closed() -> bool {
    OUTPUT_CLOSED.load(Ordering::Relaxed)
}

/// Makes a new directory in `parent` named `prefix` and random characters, with `mkdtemp`
/// semantics: a name nobody held before, mode 700 whatever the umask (tempfile's default,
/// 777 less the umask, would let others in under `umask 0`), removed with all in it when the
/// returned guard drops. Nobody else can plant a file or a link in it.
pub fn private_dir(parent: &Path, prefix: &str) -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(parent)
}

/// Writes `bytes` to `path` atomically (see [`replace_atomically`]).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), BenchError> {
    replace_atomically(path, |tmp| {
        std::fs::write(tmp, bytes).map_err(|e| BenchError::io("writing", path, e))
    })
}

/// Makes `path` anew atomically: `write` fills a new temporary file in the same directory
/// (`O_EXCL`, mode 600 while it is written) through its path, which then takes the old
/// file's mode (644 for a new one), is synced and renamed over `path`. A reader sees the old
/// file or the whole new one, and a failure leaves the old one. A link at `path` is replaced,
/// not written through.
pub fn replace_atomically(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    let dir = parent_dir(path);
    let tmp = tempfile::Builder::new()
        .prefix(".umt-bench-")
        .tempfile_in(dir)
        .map_err(|e| BenchError::io("writing a file in", dir, e))?;
    write(tmp.path())?;
    // The mode a plain write would give: the old file's, or 644 for a new one (the temporary
    // file is made 600).
    let mode = std::fs::metadata(path).map_or(0o644, |m| {
        std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777
    });
    tmp.as_file()
        .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
        .map_err(|e| BenchError::io("writing", path, e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| BenchError::io("writing", path, e))?;
    tmp.persist(path)
        .map_err(|e| BenchError::io("writing", path, e.error))?;
    Ok(())
}

/// Bytes of memory this machine can give now without swapping (`MemAvailable`), if known.
pub fn memory_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Refuses a run that needs more memory than the machine has available, before it allocates.
pub fn check_memory(what: &str, needed: u64) -> Result<(), BenchError> {
    match memory_available() {
        Some(available) if needed > available => Err(BenchError::InvalidParam(format!(
            "{what} needs about {} of memory, and this machine has {} available: make it smaller",
            human_bytes(needed),
            human_bytes(available)
        ))),
        _ => Ok(()),
    }
}

/// Refuses to write `needed` bytes into `dir` when its filesystem has less free space than
/// that (plus a tenth, for the filesystem's own), before anything is written.
pub fn check_disk(dir: &Path, needed: u64) -> Result<(), BenchError> {
    let st = nix::sys::statvfs::statvfs(dir)
        .map_err(|e| BenchError::io("looking at the free space of", dir, e.into()))?;
    let free = (st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64);
    if needed.saturating_add(needed / 10) > free {
        return Err(BenchError::InvalidParam(format!(
            "{} has {} free and the run writes {}: use a --dir with more space, or fewer or \
             smaller files",
            dir.display(),
            human_bytes(free),
            human_bytes(needed)
        )));
    }
    Ok(())
}

/// `bytes` in the largest binary unit that keeps it at least 1.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The name of the memory-backed filesystem `dir` is on (tmpfs, ramfs), if it is on one: I/O
/// there is a memory copy, and a comparison of how runtimes overlap I/O means nothing.
pub fn memory_filesystem(dir: &Path) -> Option<&'static str> {
    use nix::sys::statfs::{FsType, TMPFS_MAGIC, statfs};
    // Neither nix nor libc name ramfs's magic number (`include/uapi/linux/magic.h`).
    let ramfs = FsType(0x8584_58f6);
    let fs = statfs(dir).ok()?.filesystem_type();
    if fs == TMPFS_MAGIC {
        Some("tmpfs")
    } else if fs == ramfs {
        Some("ramfs")
    } else {
        None
    }
}

/// A buffer of `len` bytes whose start is aligned to [`DIRECT_ALIGN`], built without `unsafe`
/// by over-allocating and slicing at the first aligned address.
///
/// Dropped buffers go back to a process-wide pool and the next buffer of the same size reuses
/// their memory: checkpoints write the same sizes over and over, and fresh memory costs a
/// page fault per page and, when it is unmapped again, a TLB shootdown on every CPU running
/// the process. Every runner shares this code, so all pay the same for their I/O.
#[derive(Debug)]
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

/// Storage of dropped buffers and its total size in bytes.
static RECYCLED: std::sync::Mutex<(Vec<Vec<u8>>, usize)> = std::sync::Mutex::new((Vec::new(), 0));

/// Most bytes the pool keeps (more are freed).
const RECYCLE_LIMIT: usize = 1 << 30;

impl AlignedBuf {
    /// A buffer of `len` bytes with unspecified contents (zeroes when fresh, old data when
    /// reused): every user overwrites it whole.
    pub fn new(len: usize) -> Self {
        let size = len + DIRECT_ALIGN;
        let reused = {
            let mut pool = RECYCLED.lock().unwrap_or_else(|e| e.into_inner());
            let found = pool.0.iter().position(|s| s.len() == size);
            found.map(|i| {
                pool.1 -= size;
                pool.0.swap_remove(i)
            })
        };
        let storage = reused.unwrap_or_else(|| vec![0u8; size]);
        let start = storage.as_ptr().align_offset(DIRECT_ALIGN);
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    /// The aligned bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    /// A buffer of `n` values, all 0.0, every page already touched (see
    /// [`prefaulted_zeros`]).
    pub fn zeroed_f64s(n: usize) -> Self {
        let mut buf = AlignedBuf::new(n * 8);
        buf.as_mut_slice().fill(0);
        buf
    }

    /// A buffer holding `values` in native byte order.
    pub fn from_f64s(values: &[f64]) -> Self {
        let mut buf = AlignedBuf::new(values.len() * 8);
        buf.as_f64s_mut().copy_from_slice(values);
        buf
    }

    /// Decodes the buffer into `out` (as many values as both hold).
    pub fn copy_to_f64s(&self, out: &mut [f64]) {
        let values = self.as_f64s();
        let n = values.len().min(out.len());
        out[..n].copy_from_slice(&values[..n]);
    }

    /// The buffer as values (its whole 8-byte words: every buffer of values has only those).
    pub fn as_f64s(&self) -> &[f64] {
        // The start is aligned to DIRECT_ALIGN, so no byte falls before the values.
        bytemuck::pod_align_to::<u8, f64>(self.as_slice()).1
    }

    /// The buffer as values, writable (see [`AlignedBuf::as_f64s`]).
    pub fn as_f64s_mut(&mut self) -> &mut [f64] {
        bytemuck::pod_align_to_mut::<u8, f64>(self.as_mut_slice()).1
    }

    /// The aligned bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let storage = std::mem::take(&mut self.storage);
        let mut pool = RECYCLED.lock().unwrap_or_else(|e| e.into_inner());
        if pool.1 + storage.len() <= RECYCLE_LIMIT {
            pool.1 += storage.len();
            pool.0.push(storage);
        }
    }
}

/// `n` zeroes in memory that is already mapped. `vec![0.0; n]` gets lazily mapped zero pages
/// from `calloc`, so the first timed write to each page would take a copy-on-write fault and a
/// TLB flush on every CPU of the process: the volumes are built with this instead.
pub fn prefaulted_zeros(n: usize) -> Vec<f64> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, 0.0);
    v
}

/// Creates a new checkpoint file for writing in `mode`, with `len` bytes allocated.
///
/// `O_CREAT | O_EXCL | O_NOFOLLOW`: it never opens what is already at `path`, so a file or a
/// symbolic link another user planted there (the names are predictable, and the default
/// directory is shared) makes the run fail, saying so, instead of overwriting the target as
/// root (issue 30).
///
/// Checkpointing codes preallocate their files, and so does every runner here. On ext4 this
/// matters for the comparison: a direct write into blocks the file does not have yet takes the
/// inode lock exclusively and holds it until the write completes, so concurrent writes to one
/// file queue one behind the other. Into allocated blocks within the file size they share the
/// lock and reach the device together. A filesystem that cannot preallocate (`EOPNOTSUPP`) gets
/// a file of size 0, written as before.
pub fn create_file(path: &Path, mode: IoMode, len: u64) -> Result<File, BenchError> {
    let mut opts = OpenOptions::new();
    opts.write(true).read(true).create_new(true);
    let direct = if mode == IoMode::Direct {
        libc::O_DIRECT
    } else {
        0
    };
    opts.custom_flags(direct | libc::O_NOFOLLOW);
    let file = opts
        .open(path)
        .map_err(|source| match (mode, source.raw_os_error()) {
            (IoMode::Direct, Some(libc::EINVAL)) => BenchError::NoDirectIo {
                dir: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
                source,
            },
            (_, Some(libc::EEXIST)) => BenchError::io(
                "creating (something is already there, perhaps another user's file or link: \
                 remove it, or use a --dir only you can write to)",
                path,
                source,
            ),
            _ => BenchError::io("creating", path, source),
        })?;
    let io_error = |source: std::io::Error| BenchError::io("preallocating", path, source);
    let len = i64::try_from(len).map_err(|_| {
        io_error(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{len} bytes is more than a file can hold"),
        ))
    })?;
    if len > 0 {
        match nix::fcntl::fallocate(&file, nix::fcntl::FallocateFlags::empty(), 0, len) {
            Ok(()) | Err(nix::errno::Errno::EOPNOTSUPP) => {}
            Err(e) => return Err(io_error(e.into())),
        }
    }
    Ok(file)
}

/// Checks that `dir` accepts `O_DIRECT` files (creates and removes a probe file).
pub fn probe_direct(dir: &Path) -> Result<(), BenchError> {
    let path = dir.join(format!(".umt-direct-probe-{}", std::process::id()));
    // Removed unless it was there before (`O_EXCL` refused it): that is not this probe's to
    // remove. A filesystem without `O_DIRECT` may make the file before it refuses the flag.
    let f = create_file(&path, IoMode::Direct, 0);
    if !matches!(&f, Err(BenchError::Io { source, .. }) if source.raw_os_error() == Some(libc::EEXIST))
    {
        let _ = std::fs::remove_file(&path);
    }
    let f = f?;
    let buf = AlignedBuf::new(DIRECT_ALIGN);
    f.write_all_at(buf.as_slice(), 0)
        .map_err(|source| BenchError::NoDirectIo {
            dir: dir.to_path_buf(),
            source,
        })
}

/// Writes a staged buffer at byte `offset` of `file` (see [`write_bytes`]); the buffer is
/// recycled afterwards.
pub fn write_buf(file: &File, path: &Path, offset: u64, buf: AlignedBuf) -> Result<(), BenchError> {
    write_bytes(file, path, offset, buf.as_slice())
}

/// Writes `bytes` at byte `offset` of `file`. For direct files, `bytes` must start at an
/// address aligned to [`DIRECT_ALIGN`] (an [`AlignedBuf`]'s do), and its length and `offset`
/// must be multiples of it.
pub fn write_bytes(file: &File, path: &Path, offset: u64, bytes: &[u8]) -> Result<(), BenchError> {
    file.write_all_at(bytes, offset)
        .map_err(|source| BenchError::io("writing", path, source))
}

/// Reads `out.len()` values at byte `offset` of `file` through an aligned buffer (the
/// counterpart of [`write_buf`], usable on direct files).
pub fn read_f64s_into(
    file: &File,
    path: &Path,
    offset: u64,
    out: &mut [f64],
) -> Result<(), BenchError> {
    let mut buf = AlignedBuf::new(out.len() * 8);
    file.read_exact_at(buf.as_mut_slice(), offset)
        .map_err(|source| BenchError::io("reading", path, source))?;
    buf.copy_to_f64s(out);
    Ok(())
}

/// Reads `count` values at byte `offset` (buffered: for verification).
pub fn read_f64s(path: &Path, offset: u64, count: usize) -> Result<Vec<f64>, BenchError> {
    let f = File::open(path).map_err(|source| BenchError::io("opening", path, source))?;
    let mut bytes = vec![0u8; count * 8];
    f.read_exact_at(&mut bytes, offset)
        .map_err(|source| BenchError::io("reading", path, source))?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| f64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
        .collect())
}

#[cfg(test)]
mod tests {

    /// A link planted where a checkpoint will be made is refused, and its target untouched.
    #[test]
    fn a_planted_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let planted = dir.path().join("umt-heat-1-0-1.ckpt");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let e = create_file(&planted, IoMode::Buffered, 4096).unwrap_err();
        assert!(e.to_string().contains("already there"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        std::fs::write(dir.path().join("plain"), b"x").unwrap();
        assert!(create_file(&dir.path().join("plain"), IoMode::Buffered, 0).is_err());
        assert!(create_file(&dir.path().join("new"), IoMode::Buffered, 0).is_ok());
    }

    use super::*;

    #[test]
    fn aligned_buffers_are_aligned() {
        for len in [0, 8, 4096, 100_000] {
            let mut b = AlignedBuf::new(len);
            assert_eq!(b.as_slice().as_ptr() as usize % DIRECT_ALIGN, 0);
            assert_eq!(b.as_mut_slice().len(), len);
            assert_eq!(b.as_f64s().len(), len / 8);
        }
    }

    #[test]
    fn values_roundtrip_through_buffers() {
        let vals: Vec<f64> = (0..1000).map(|i| i as f64 / 3.0).collect();
        let b = AlignedBuf::from_f64s(&vals);
        assert_eq!(b.as_f64s(), &vals[..]);
        let mut out = vec![0.0; 1000];
        b.copy_to_f64s(&mut out);
        assert_eq!(out, vals);
        drop(b);
        // A recycled buffer of the same size comes back zeroed when asked.
        assert!(
            AlignedBuf::zeroed_f64s(1000)
                .as_f64s()
                .iter()
                .all(|&x| x == 0.0)
        );
    }

    /// `/dev/shm` is tmpfs, which Linux 6.6 and later accept `O_DIRECT` on: it must be named
    /// as memory, whatever `O_DIRECT` does there.
    #[test]
    fn tmpfs_is_recognised_as_memory() {
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            return;
        }
        assert_eq!(memory_filesystem(shm), Some("tmpfs"));
        assert_eq!(
            memory_filesystem(&std::env::temp_dir()),
            None,
            "/tmp is on a disk here"
        );
    }

    /// An output written atomically has the mode a plain write would give it: 644 when new,
    /// the old file's otherwise (its temporary file is 600).
    #[test]
    fn an_atomic_write_keeps_the_mode_a_plain_write_gives() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        write_atomically(&path, b"1").unwrap();
        assert_eq!(mode(&path), 0o644);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomically(&path, b"2").unwrap();
        assert_eq!(mode(&path), 0o640);
        assert_eq!(std::fs::read(&path).unwrap(), b"2");
    }

    #[test]
    fn files_of_a_run_are_removed_with_their_guard() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guard.bin");
        let (guard, _file) =
            TempPath::create(path.clone(), |p| create_file(p, IoMode::Buffered, 4096)).unwrap();
        assert!(path.exists());
        assert!(lock_live().files.contains(&path));
        drop(guard);
        assert!(!path.exists());
        assert!(!lock_live().files.contains(&path));
        // A creation that fails leaves nothing either.
        let failed = TempPath::create(path.clone(), |p| {
            create_file(p, IoMode::Buffered, 0)?;
            Err::<(), _>(BenchError::Runtime("preallocation failed".into()))
        });
        assert!(failed.is_err());
        assert!(!path.exists());
    }

    #[test]
    fn memory_needs_are_checked_and_said_in_units() {
        assert_eq!(human_bytes(512), "512.0 B");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        assert!(check_memory("a small run", 1 << 20).is_ok());
        let e = check_memory("heat --size 1048576", u64::MAX)
            .unwrap_err()
            .to_string();
        assert!(e.contains("heat --size 1048576 needs about"), "{e}");
        assert!(e.contains("available"), "{e}");
    }

    #[test]
    fn values_roundtrip_through_a_direct_file() {
        let dir = std::env::temp_dir();
        let mode = IoMode::for_dir(&dir);
        let path = dir.join(format!("umt-io-test-{}.bin", std::process::id()));
        let f = create_file(&path, mode, 0).unwrap();
        let vals: Vec<f64> = (0..1024).map(|i| i as f64 * 0.5).collect();
        write_buf(&f, &path, 8192, AlignedBuf::from_f64s(&vals)).unwrap();
        assert_eq!(read_f64s(&path, 8192, 1024).unwrap(), vals);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn files_are_created_preallocated_and_never_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prealloc.bin");
        let len = 3 * DIRECT_ALIGN as u64;
        let f = create_file(&path, IoMode::Buffered, len).unwrap();
        let got = f.metadata().unwrap().len();
        // A filesystem without fallocate leaves the file empty; every other one sizes it.
        assert!(got == len || got == 0, "size {got}");
        drop(f);
        // A checkpoint is always a new file: an existing one is refused, not truncated.
        assert!(create_file(&path, IoMode::Buffered, 0).is_err());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), got);
    }
}
