//! `scan`: a program written as a user would, outside this repository's paper workloads.
//! It reads many cold files (buffered, as `std::fs::read` does) and hashes each, with a CPU
//! cost per byte chosen so that hashing takes about as long as reading. Two front ends of the
//! same program:
//!
//! - [`Front::Iter`]: `files.par_iter().map(read_and_hash).reduce(..)` (umt-rt's prelude,
//!   rayon's), the loop a rayon user swaps the import of;
//! - [`Front::Tasks`]: a task per file in a scope (`s.spawn(..)`).
//!
//! The files are written once per comparison into a private directory (`mkdtemp`, mode 700)
//! inside `--dir`, and dropped from the page cache (`posix_fadvise(DONTNEED)`, which needs no
//! privilege) before every run, so each run reads them from the device. Every runner's digest
//! must equal the first one's.
//!
//! This file holds the program and its runs on umt-rt ([`run`], [`run_io`]); the peers' runs
//! are in their ports, built on [`timed`] or [`each_file`].

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::error::{BenchError, Errors};

/// Which way the program is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Front {
    /// A parallel iterator over the files.
    Iter,
    /// A task per file.
    Tasks,
}

impl Front {
    /// Its name in reports: the workload is `scan-iter` or `scan-tasks`.
    pub fn workload(self) -> &'static str {
        match self {
            Front::Iter => "scan-iter",
            Front::Tasks => "scan-tasks",
        }
    }
}

/// One scan.
#[derive(Debug, Clone)]
pub struct ScanParams {
    /// Files.
    pub files: usize,
    /// Size of each file, in MiB.
    pub file_mib: usize,
    /// Rounds of the hash per 8-byte word: the CPU cost per byte.
    pub rounds: u32,
    /// The directory in which the private directory of the files is made.
    pub dir: PathBuf,
}

/// Most files, and most MiB per file, a scan accepts: bounds checked before anything is
/// written or allocated.
pub const MAX_FILES: usize = 1 << 20;
/// See [`MAX_FILES`].
pub const MAX_FILE_MIB: usize = 1 << 12;
/// Most rounds per word.
pub const MAX_ROUNDS: u32 = 1 << 16;

impl ScanParams {
    /// Checks the sizes (before any file is written), saying what to pass instead.
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.files == 0 || self.files > MAX_FILES {
            return Err(BenchError::InvalidParam(format!(
                "--files {}: give 1 to {MAX_FILES}",
                self.files
            )));
        }
        if self.file_mib == 0 || self.file_mib > MAX_FILE_MIB {
            return Err(BenchError::InvalidParam(format!(
                "--file-mib {}: give 1 to {MAX_FILE_MIB}",
                self.file_mib
            )));
        }
        if self.rounds == 0 || self.rounds > MAX_ROUNDS {
            return Err(BenchError::InvalidParam(format!(
                "--rounds {}: give 1 to {MAX_ROUNDS}",
                self.rounds
            )));
        }
        Ok(())
    }

    /// Bytes read by one run.
    pub fn bytes(&self) -> u64 {
        ((self.files as u64) * (self.file_mib as u64)) << 20
    }
}

/// The files of a comparison, in a private directory removed with it.
#[derive(Debug)]
pub struct FileSet {
    dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    file_bytes: usize,
}

impl FileSet {
    /// Writes `p.files` files of `p.file_mib` MiB of pseudo-random bytes into a new private
    /// directory inside `p.dir` (made with `mkdtemp`, mode 700: nobody else can plant or
    /// swap a file there), each synced so that its pages are clean and can be dropped.
    pub fn create(p: &ScanParams) -> Result<FileSet, BenchError> {
        p.validate()?;
        crate::io::check_disk(&p.dir, p.bytes())?;
        let dir = crate::io::private_dir(&p.dir, "umt-scan-")
            .map_err(|e| BenchError::io("creating a private directory in", &p.dir, e))?;
        let file_bytes = p.file_mib << 20;
        let mut chunk = vec![0u8; 1 << 20];
        let mut paths = Vec::with_capacity(p.files);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..p.files {
            let path = dir.path().join(format!("{i:07}.dat"));
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| BenchError::io("creating", &path, e))?;
            for _ in 0..p.file_mib {
                for w in chunk.chunks_exact_mut(8) {
                    // xorshift64*: cheap bytes that no filesystem compresses away.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    w.copy_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
                }
                f.write_all(&chunk)
                    .map_err(|e| BenchError::io("writing", &path, e))?;
            }
            f.sync_all()
                .map_err(|e| BenchError::io("syncing", &path, e))?;
            paths.push(path);
        }
        Ok(FileSet {
            dir,
            paths,
            file_bytes,
        })
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The files.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The size of each file, in bytes.
    pub fn file_bytes(&self) -> usize {
        self.file_bytes
    }

    /// Drops the files' pages from the page cache, so the next run reads the device.
    pub fn drop_cache(&self) -> Result<(), BenchError> {
        (0..self.paths.len()).try_for_each(|i| self.drop_cache_of(i))
    }

    /// Drops file `i`'s pages from the page cache (out of range: nothing to do).
    pub fn drop_cache_of(&self, i: usize) -> Result<(), BenchError> {
        let Some(path) = self.paths.get(i) else {
            return Ok(());
        };
        let f = File::open(path).map_err(|e| BenchError::io("opening", path, e))?;
        // SAFETY: a plain system call on a descriptor `f` owns; no memory is passed.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if r != 0 {
            return Err(BenchError::io(
                "dropping from the page cache",
                path,
                std::io::Error::from_raw_os_error(r),
            ));
        }
        Ok(())
    }
}

/// The hash of `words` with `rounds` multiply-xor rounds per word: a dependency chain, so its
/// cost per byte is fixed by `rounds` and not vectorised away.
pub fn hash_words(words: impl Iterator<Item = u64>, rounds: u32) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for w in words {
        h ^= w;
        for _ in 0..rounds {
            h = (h ^ (h >> 29)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// [`hash_words`] of bytes (little-endian words; a tail shorter than a word is padded with
/// zeros).
pub fn hash_bytes(bytes: &[u8], rounds: u32) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let whole = words.by_ref().map(|w| {
        let mut a = [0u8; 8];
        a.copy_from_slice(w);
        u64::from_le_bytes(a)
    });
    let h = hash_words(whole, rounds);
    let tail = words.remainder();
    if tail.is_empty() {
        return h;
    }
    let mut a = [0u8; 8];
    a[..tail.len()].copy_from_slice(tail);
    hash_words(std::iter::once(h ^ u64::from_le_bytes(a)), rounds)
}

/// Reads file `path` whole (buffered) and hashes it.
pub fn read_and_hash(path: &Path, rounds: u32) -> Result<u64, BenchError> {
    let bytes = std::fs::read(path).map_err(|e| BenchError::io("reading", path, e))?;
    Ok(hash_bytes(&bytes, rounds))
}

/// [`read_and_hash`], with the read through umt-rt's scheduler-centric wait
/// ([`umt_rt::io::read_exact_at`]: the worker runs other tasks, or joins a running loop,
/// while the read is in flight on its core's io_uring). The umt-io runner's way.
pub fn read_and_hash_io(path: &Path, rounds: u32) -> Result<u64, BenchError> {
    let f = File::open(path).map_err(|e| BenchError::io("opening", path, e))?;
    let len = f
        .metadata()
        .map_err(|e| BenchError::io("reading the size of", path, e))?
        .len();
    let mut bytes = vec![0u8; len as usize];
    umt_rt::io::read_exact_at(&f, &mut bytes, 0)
        .map_err(|e| BenchError::io("reading", path, std::io::Error::other(e.to_string())))?;
    Ok(hash_bytes(&bytes, rounds))
}

/// File `i`'s share of a run's digest: its hash `h` weighted by `2i + 1`. The digest is the
/// (wrapping) sum of the shares, the same whatever order the files were hashed in.
pub fn weigh(i: usize, h: u64) -> u64 {
    h.wrapping_mul(2 * i as u64 + 1)
}

/// The digest of a scan of `set` at `rounds`, read and hashed file by file on the calling
/// thread: the reference every runner's digest must equal.
pub fn sequential_digest(set: &FileSet, rounds: u32) -> Result<u64, BenchError> {
    set.paths().iter().enumerate().try_fold(0u64, |d, (i, f)| {
        Ok(d.wrapping_add(weigh(i, read_and_hash(f, rounds)?)))
    })
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub struct ScanRun {
    /// Wall time of the scan.
    pub elapsed: Duration,
    /// Bytes read.
    pub bytes: u64,
    /// The digest of every file's hash (equal across runners).
    pub digest: u64,
}

/// One timed scan of `set`: drops the files from the page cache (outside the timed part),
/// then times `digest`, which reads and hashes every file and returns their digest (the sum of
/// [`weigh`]).
pub fn timed(
    set: &FileSet,
    p: &ScanParams,
    digest: impl FnOnce() -> Result<u64, BenchError>,
) -> Result<ScanRun, BenchError> {
    set.drop_cache()?;
    let start = Instant::now();
    let digest = digest()?;
    Ok(ScanRun {
        elapsed: start.elapsed(),
        bytes: p.bytes(),
        digest,
    })
}

/// How a runner reads and hashes one file: [`read_and_hash`] or [`read_and_hash_io`].
pub type Reader = fn(&Path, u32) -> Result<u64, BenchError>;

/// One timed scan of `set` whose files are read and hashed with `read` by `each`, which calls
/// its argument once for every file index of `0..files`, in any order, on any thread (a
/// runtime's parallel loop or its tasks).
pub fn each_file(
    set: &FileSet,
    p: &ScanParams,
    read: Reader,
    each: impl FnOnce(usize, &(dyn Fn(usize) + Sync)),
) -> Result<ScanRun, BenchError> {
    let paths = set.paths();
    timed(set, p, || {
        let digest = AtomicU64::new(0);
        let errors = Errors::default();
        let one = |i: usize| {
            errors.check(read(&paths[i], p.rounds).map(|h| {
                digest.fetch_add(weigh(i, h), Ordering::Relaxed);
            }))
        };
        each(paths.len(), &one);
        errors.first()?;
        Ok(digest.into_inner())
    })
}

/// One scan of `set` written as `front` on `rt`, each file read by [`read_and_hash`] (see
/// [`timed`]).
pub fn run(
    rt: &umt_rt::Runtime,
    set: &FileSet,
    p: &ScanParams,
    front: Front,
) -> Result<ScanRun, BenchError> {
    run_with(rt, set, p, front, read_and_hash)
}

/// [`run`], each file read by [`read_and_hash_io`] (through umt-rt's scheduler-centric wait):
/// the umt-io runner's way.
pub fn run_io(
    rt: &umt_rt::Runtime,
    set: &FileSet,
    p: &ScanParams,
    front: Front,
) -> Result<ScanRun, BenchError> {
    run_with(rt, set, p, front, read_and_hash_io)
}

/// One scan on `rt`, each file read by `read`: umt-rt's parallel loop or a task per file.
fn run_with(
    rt: &umt_rt::Runtime,
    set: &FileSet,
    p: &ScanParams,
    front: Front,
    read: Reader,
) -> Result<ScanRun, BenchError> {
    each_file(set, p, read, |n, one| match front {
        Front::Iter => rt.install(|| {
            use umt_rt::prelude::*;
            (0..n).into_par_iter().for_each(one);
        }),
        Front::Tasks => rt.scope(|s| {
            for i in 0..n {
                s.spawn(move |_| one(i));
            }
        }),
    })
}

/// The compute-only part of the bound: the longer of two figures, both of everything but the
/// device's wait.
///
/// 1. **The CPU floor.** Reading a file cold costs the kernel CPU (allocating page-cache pages,
///    submitting and completing the reads, copying out): on 2 cores as much as a third of the
///    hashing's. Every runner spends it, so every runner spends at least the CPU of reading
///    every file cold plus the CPU of hashing it, spread at best evenly over the cores. Both
///    are measured here as thread CPU time: the files read cold by one reader per core (the
///    fewest switches any runner makes; interrupts that land on an idle core are not charged,
///    so this is an underestimate, never an overestimate), and one file hashed (the least of
///    three tries) times the number of files.
/// 2. **The warm scan.** The same loop on `rt` with the files in the page cache (where they fit
///    in half the memory available; otherwise one file's bytes hashed once per file).
pub fn compute_only(
    rt: &umt_rt::Runtime,
    set: &FileSet,
    p: &ScanParams,
) -> Result<Duration, BenchError> {
    let paths = set.paths();
    let cpu_floor = cpu_floor(set, p)?;
    let bytes = std::fs::read(&paths[0]).map_err(|e| BenchError::io("reading", &paths[0], e))?;
    let rounds = p.rounds;
    let warm = crate::io::memory_available().is_some_and(|m| p.bytes() < m / 2);
    if warm {
        // The cold read above left what fits in the page cache; read the rest back.
        for path in paths {
            std::fs::read(path).map_err(|e| BenchError::io("reading", path, e))?;
        }
    }
    let start = Instant::now();
    let d = rt.install(|| {
        use umt_rt::prelude::*;
        (0..paths.len())
            .into_par_iter()
            .map(|i| {
                let h = if warm {
                    read_and_hash(&paths[i], rounds).unwrap_or(0)
                } else {
                    hash_bytes(&bytes, rounds)
                };
                weigh(i, h)
            })
            .reduce(|| 0, u64::wrapping_add)
    });
    std::hint::black_box(d);
    Ok(start.elapsed().max(cpu_floor))
}

/// Step 1 of [`compute_only`]: the CPU time of reading every file of `set` cold and hashing
/// it, over the cores of this process.
fn cpu_floor(set: &FileSet, p: &ScanParams) -> Result<Duration, BenchError> {
    let paths = set.paths();
    let cores = umt_sys::cpu::process_cpus().map_or(1, |c| c.len().max(1));
    let read_cpu = read_all(set, cores)?.cpu;
    let bytes = std::fs::read(&paths[0]).map_err(|e| BenchError::io("reading", &paths[0], e))?;
    let mut hash_cpu = Duration::MAX;
    for _ in 0..3 {
        let before = umt_sys::cpu::current_thread_cpu_time()?;
        std::hint::black_box(hash_bytes(std::hint::black_box(&bytes), p.rounds));
        hash_cpu = hash_cpu.min(umt_sys::cpu::current_thread_cpu_time()?.saturating_sub(before));
    }
    let files = u32::try_from(paths.len()).unwrap_or(u32::MAX);
    Ok((read_cpu + hash_cpu * files) / u32::try_from(cores).unwrap_or(u32::MAX))
}

/// Readers per core of the I/O-only runs on `cores` cores: from one (the baseline's) to
/// umt-rt's default cap of workers per core with live counts (16 to 63,
/// [`umt_rt::default_workers_per_core`]), the most a umt-rt runner has at once (rayon-8x has
/// 8).
pub fn readers_per_core(cores: usize) -> Vec<usize> {
    let mut v = vec![1, 4, 8, 16, umt_rt::default_workers_per_core(cores, true)];
    v.dedup();
    v
}

/// The I/O-only run of the bound: every file read cold, without hashing, at each concurrency
/// of [`readers_per_core`] in turn; the fastest. More readers are not always faster (32 on
/// 2 cores read slower than rayon-8x's 16 read and hashed here), so the bound is the device's
/// best over the concurrencies the runners reach, not one guess at it.
pub fn io_only(set: &FileSet) -> Result<Duration, BenchError> {
    let cores = umt_sys::cpu::process_cpus().map_or(1, |c| c.len().max(1));
    let mut best = Duration::MAX;
    for per_core in readers_per_core(cores) {
        best = best.min(read_all(set, per_core * cores)?.wall);
    }
    Ok(best)
}

/// What reading every file cold took.
#[derive(Debug)]
struct ColdRead {
    /// From the first reader's start to the last one's end.
    wall: Duration,
    /// The readers' CPU time together (user and kernel).
    cpu: Duration,
}

/// Reads every file of `set` cold with `threads` threads.
fn read_all(set: &FileSet, threads: usize) -> Result<ColdRead, BenchError> {
    set.drop_cache()?;
    let next = AtomicUsize::new(0);
    let cpu_nanos = AtomicU64::new(0);
    let errors = Errors::default();
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let before = umt_sys::cpu::current_thread_cpu_time();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = set.paths().get(i) else {
                        break;
                    };
                    errors.check(
                        std::fs::read(path)
                            .map(drop)
                            .map_err(|e| BenchError::io("reading", path, e)),
                    );
                }
                let spent = before
                    .and_then(|b| Ok(umt_sys::cpu::current_thread_cpu_time()?.saturating_sub(b)));
                errors.check(
                    spent
                        .map(|d| {
                            let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                            cpu_nanos.fetch_add(nanos, Ordering::Relaxed);
                        })
                        .map_err(BenchError::from),
                );
            });
        }
    });
    let wall = start.elapsed();
    errors.first().map(|()| ColdRead {
        wall,
        cpu: Duration::from_nanos(cpu_nanos.into_inner()),
    })
}

/// The rounds per word that make hashing the files on every core take about as long as
/// reading them cold (`io_only`), and that I/O time. Said on stderr by the caller.
pub fn calibrate(set: &FileSet, p: &ScanParams) -> Result<(u32, Duration), BenchError> {
    let io = io_only(set)?;
    let bytes = std::fs::read(&set.paths()[0])
        .map_err(|e| BenchError::io("reading", &set.paths()[0], e))?;
    let probe_rounds = 8;
    let start = Instant::now();
    std::hint::black_box(hash_bytes(&bytes, probe_rounds));
    let per_byte_round = start.elapsed().as_secs_f64() / (bytes.len() as f64 * probe_rounds as f64);
    let cores = umt_sys::cpu::process_cpus().map_or(1, |c| c.len().max(1)) as f64;
    let rounds = io.as_secs_f64() * cores / (p.bytes() as f64 * per_byte_round);
    Ok(((rounds.round() as u32).clamp(1, MAX_ROUNDS), io))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::Runner;

    #[test]
    fn hashes_agree_across_the_ways_the_bytes_arrive() {
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let words = bytes[..992]
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap()));
        assert_eq!(hash_bytes(&bytes[..992], 3), hash_words(words, 3));
        assert_ne!(hash_bytes(&bytes, 3), hash_bytes(&bytes, 4));
    }

    #[test]
    fn every_runner_and_front_end_gets_the_same_digest() {
        let p = ScanParams {
            files: 6,
            file_mib: 1,
            rounds: 1,
            dir: std::env::temp_dir(),
        };
        let set = FileSet::create(&p).unwrap();
        let want = sequential_digest(&set, 1).unwrap();
        for r in ["baseline", "rayon", "tokio", "io-uring", "umt-io"] {
            let r: Runner = r.parse().unwrap();
            if r.available().is_err() {
                continue;
            }
            let engine = r.engine().unwrap();
            for front in [Front::Iter, Front::Tasks] {
                let got = engine.scan(&set, &p, front).unwrap();
                assert_eq!(got.digest, want, "{r} {front:?}");
                assert_eq!(got.bytes, 6 << 20);
            }
        }
        let dir = set.dir().to_path_buf();
        assert!(dir.exists());
        drop(set);
        assert!(
            !dir.exists(),
            "the private directory is removed with the set"
        );
    }

    #[test]
    fn the_cpu_floor_counts_the_readers_and_the_hashing() {
        let p = ScanParams {
            files: 4,
            file_mib: 1,
            rounds: 20,
            dir: std::env::temp_dir(),
        };
        let set = FileSet::create(&p).unwrap();
        let read = read_all(&set, 3).unwrap();
        // Each reader's CPU time fits in its life, which fits in the timed span.
        assert!(read.cpu <= read.wall * 3, "{read:?}");
        // The floor counts the hashing of every file, spread over the cores.
        let floor = cpu_floor(&set, &p).unwrap();
        let cores = umt_sys::cpu::process_cpus().unwrap().len() as u32;
        let bytes = std::fs::read(&set.paths()[0]).unwrap();
        let mut one = Duration::MAX;
        for _ in 0..3 {
            let before = umt_sys::cpu::current_thread_cpu_time().unwrap();
            std::hint::black_box(hash_bytes(&bytes, p.rounds));
            one = one.min(umt_sys::cpu::current_thread_cpu_time().unwrap() - before);
        }
        // (rounds make the hashing many times the cold read's CPU; half of it, for noise)
        assert!(
            floor >= one * 4 / cores / 2,
            "floor {floor:?}, one file {one:?}"
        );
    }

    #[test]
    fn sizes_are_checked_before_anything_is_written() {
        let p = ScanParams {
            files: 0,
            file_mib: 1,
            rounds: 1,
            dir: std::env::temp_dir(),
        };
        assert!(p.validate().unwrap_err().to_string().contains("--files 0"));
        let p = ScanParams {
            files: 1,
            file_mib: MAX_FILE_MIB + 1,
            ..p
        };
        assert!(FileSet::create(&p).is_err());
    }

    /// The files live in a directory only their owner may enter (mode 700, whatever the
    /// umask gives).
    #[test]
    fn the_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let set = FileSet::create(&ScanParams {
            files: 1,
            file_mib: 1,
            rounds: 1,
            dir: parent.path().to_path_buf(),
        })
        .unwrap();
        let mode = std::fs::metadata(set.dir()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
