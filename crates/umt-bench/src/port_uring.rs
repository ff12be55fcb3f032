//! The `io-uring` runner: computation on the baseline umt-rt runtime (monitor off), I/O
//! submitted asynchronously through one io_uring instead of blocking a worker.
//!
//! Checkpoint and snapshot writes copy the data into an aligned buffer and submit it; the
//! task returns at once. Snapshot reads are started ahead: the reads of a backward snapshot
//! step are submitted before that step's computation, and the imaging task of each slice
//! waits for its own read only then. A run ends when every submitted operation has completed.
//! The workloads' task graphs are the umt-rt ones (`heat::run_with`, `fwi::run_with`): this
//! file only plugs its I/O into them. The scan keeps its reads in flight from the calling
//! thread ([`scan()`]). Across ranks, its tasks block in MPI and submit their disk I/O.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use io_uring::{IoUring, opcode, types};
use umt_rt::{BackendKind, Runtime};

use crate::error::BenchError;
use crate::fwi::{self, FwiParams, FwiRun};
use crate::heat::{HeatParams, HeatRun};
use crate::io::AlignedBuf;
use crate::port::{Comm, DiskWait, Engine, Port, UmtOptions};
use crate::scan::{self, FileSet, Front, ScanParams, ScanRun};

/// The baseline runtime (monitor off) for the computation, the I/O submitted through
/// io_uring.
#[derive(Debug)]
pub struct UringPort {
    /// The runner's name.
    pub name: &'static str,
}

impl Port for UringPort {
    fn name(&self) -> &'static str {
        self.name
    }

    fn available(&self) -> Result<(), String> {
        Uring::new().map(|_| ()).map_err(|e| e.to_string())
    }

    fn engine(&self, umt: &UmtOptions) -> Result<Box<dyn Engine>, BenchError> {
        let rt = umt.runtime(self.name, BackendKind::Disabled)?;
        Ok(Box::new(UringEngine(rt)))
    }

    fn comm(&self) -> Option<Comm> {
        Some(Comm::Blocking)
    }

    fn disk(&self) -> DiskWait {
        DiskWait::Uring
    }
}

/// A runtime of a [`UringPort`].
#[derive(Debug)]
struct UringEngine(Runtime);

impl Engine for UringEngine {
    fn heat(&self, p: &HeatParams, _: &UmtOptions) -> Result<HeatRun, BenchError> {
        heat(&self.0, p)
    }

    fn fwi(&self, p: &FwiParams) -> Result<FwiRun, BenchError> {
        fwi(&self.0, p)
    }

    fn scan(&self, set: &FileSet, p: &ScanParams, _: Front) -> Result<ScanRun, BenchError> {
        scan(&self.0, set, p)
    }

    fn runtime(&self) -> Option<&Runtime> {
        Some(&self.0)
    }
}

/// Submission queue depth.
const ENTRIES: u32 = 256;

struct Inner {
    ring: IoUring,
    /// Buffers of operations in flight, by user data; they must live until completion.
    inflight: HashMap<u64, (AlignedBuf, PathBuf, &'static str)>,
    /// Completed reads not yet claimed.
    done: HashMap<u64, AlignedBuf>,
    next: u64,
    errors: Vec<BenchError>,
}

/// One io_uring shared by the tasks of a run.
pub struct Uring {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Uring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Uring")
    }
}

impl Inner {
    /// Moves completions out of the queue: writes are retired, reads kept for their owner.
    fn reap(&mut self) {
        let completed: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (id, res) in completed {
            let Some((buf, path, what)) = self.inflight.remove(&id) else {
                continue;
            };
            let want = buf.as_slice().len();
            if res < 0 {
                let e = std::io::Error::from_raw_os_error(-res);
                self.errors.push(BenchError::io(what, &path, e));
            } else if res as usize != want {
                let e = std::io::Error::other(format!("short {what}: {res} of {want} bytes"));
                self.errors.push(BenchError::io(what, &path, e));
            } else if what == "reading" {
                self.done.insert(id, buf);
            }
        }
    }

    fn push(
        &mut self,
        entry: io_uring::squeue::Entry,
        buf: AlignedBuf,
        path: &Path,
        what: &'static str,
    ) -> Result<u64, BenchError> {
        let id = self.next;
        self.next += 1;
        let entry = entry.user_data(id);
        loop {
            // SAFETY: the entry points into `buf`'s heap storage, which moves into `inflight`
            // below and stays there, unmoved and alive, until `reap` sees its completion.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                break;
            }
            // Queue full: hand it to the kernel and retire what finished.
            self.ring
                .submit_and_wait(1)
                .map_err(|e| BenchError::io(what, path, e))?;
            self.reap();
        }
        self.inflight.insert(id, (buf, path.to_path_buf(), what));
        self.ring
            .submit()
            .map_err(|e| BenchError::io(what, path, e))?;
        self.reap();
        Ok(id)
    }
}

impl Uring {
    /// A ring, or the reason there is none (io_uring disabled by sysctl or seccomp, say).
    pub fn new() -> Result<Uring, BenchError> {
        let ring = IoUring::new(ENTRIES).map_err(|e| {
            BenchError::Runtime(format!(
                "io-uring: {e} (is io_uring disabled, kernel.io_uring_disabled?)"
            ))
        })?;
        Ok(Uring {
            inner: Mutex::new(Inner {
                ring,
                inflight: HashMap::new(),
                done: HashMap::new(),
                next: 0,
                errors: Vec::new(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Submits a write of `buf` at `offset`; returns without waiting (the ring keeps `buf`
    /// until the write completes).
    pub fn write(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        buf: AlignedBuf,
    ) -> Result<(), BenchError> {
        let bytes = buf.as_slice();
        let entry = opcode::Write::new(
            types::Fd(file.as_raw_fd()),
            bytes.as_ptr(),
            bytes.len() as u32,
        )
        .offset(offset)
        .build();
        self.lock().push(entry, buf, path, "writing").map(|_| ())
    }

    /// Submits a read of `count` values at `offset`; claim it with [`Uring::wait_read`].
    pub fn read(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        count: usize,
    ) -> Result<u64, BenchError> {
        let mut buf = AlignedBuf::new(count * 8);
        let bytes = buf.as_mut_slice();
        let entry = opcode::Read::new(
            types::Fd(file.as_raw_fd()),
            bytes.as_mut_ptr(),
            bytes.len() as u32,
        )
        .offset(offset)
        .build();
        self.lock().push(entry, buf, path, "reading")
    }

    /// Waits for read `id` and returns its values. It waits holding the ring's lock, so other
    /// tasks' submissions wait too: reads are prefetched so that this rarely waits at all.
    pub fn wait_read(&self, id: u64, out: &mut [f64]) -> Result<(), BenchError> {
        let mut inner = self.lock();
        loop {
            inner.reap();
            if let Some(buf) = inner.done.remove(&id) {
                buf.copy_to_f64s(out);
                return Ok(());
            }
            if !inner.inflight.contains_key(&id) {
                return Err(inner.errors.pop().unwrap_or_else(|| {
                    BenchError::Runtime(format!("io-uring: read {id} vanished"))
                }));
            }
            inner
                .ring
                .submit_and_wait(1)
                .map_err(|e| BenchError::Runtime(format!("io-uring: {e}")))?;
        }
    }

    /// Waits until nothing is in flight; returns the first error of any operation.
    pub fn wait_all(&self) -> Result<(), BenchError> {
        let mut inner = self.lock();
        loop {
            inner.reap();
            if inner.inflight.is_empty() {
                break;
            }
            inner
                .ring
                .submit_and_wait(1)
                .map_err(|e| BenchError::Runtime(format!("io-uring: {e}")))?;
        }
        match inner.errors.pop() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Uring {
    /// Waits for every operation still in flight (a run that unwinds leaves some): the kernel
    /// reads or writes their buffers until they complete, and a dropped buffer goes back to
    /// the pool that every runner reuses. If the ring cannot wait, the buffers are leaked
    /// rather than reused.
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        while !inner.inflight.is_empty() {
            if inner.ring.submit_and_wait(1).is_err() {
                for (_, (buf, _, _)) in inner.inflight.drain() {
                    std::mem::forget(buf);
                }
                return;
            }
            inner.reap();
        }
    }
}

/// Heat diffusion on `rt` (the baseline runtime) with checkpoint writes through io_uring: the
/// same tasks as [`crate::heat::run`], except that each block is copied out and the write task
/// only submits the copy. The write outlives its task, so it cannot read the grid in place:
/// the block's next update could change it under the write.
pub fn heat(rt: &Runtime, p: &HeatParams) -> Result<HeatRun, BenchError> {
    let uring = Uring::new()?;
    let write = |file: &File, path: &Path, offset, data| uring.write(file, path, offset, data);
    crate::heat::run_with(rt, p, crate::heat::Checkpoints::Staged(&write), || {
        uring.wait_all()
    })
}

/// Snapshot I/O through one io_uring: writes are submitted and return at once, reads are
/// started ahead (a snapshot's reads before the adjoint step that images it) and claimed by
/// the imaging tasks.
pub(crate) struct UringSnapshots<'a> {
    uring: &'a Uring,
    /// Reads started ahead, by file offset, not yet claimed.
    ahead: Mutex<HashMap<u64, u64>>,
}

impl fwi::SnapshotIo for UringSnapshots<'_> {
    fn write(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        buf: AlignedBuf,
    ) -> Result<(), BenchError> {
        self.uring.write(file, path, offset, buf)
    }

    fn reads_ahead(&self) -> bool {
        true
    }

    fn read_ahead(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        cells: usize,
    ) -> Result<(), BenchError> {
        let id = self.uring.read(file, path, offset, cells)?;
        self.ahead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(offset, id);
        Ok(())
    }

    fn read(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        out: &mut [f64],
    ) -> Result<(), BenchError> {
        let ahead = self
            .ahead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&offset);
        let id = match ahead {
            Some(id) => id,
            // Its read-ahead failed (and was reported): read it now.
            None => self.uring.read(file, path, offset, out.len())?,
        };
        self.uring.wait_read(id, out)
    }

    fn flush(&self) -> Result<(), BenchError> {
        self.uring.wait_all()
    }
}

/// The FWI mock-up on `rt` (the baseline runtime) with snapshot I/O through io_uring: the
/// same task graph as [`crate::fwi::run`], with writes submitted and reads started ahead.
pub fn fwi(rt: &Runtime, p: &FwiParams) -> Result<FwiRun, BenchError> {
    fwi::run_with(rt, p, fwi::Part::All, &UringSnapshots::new(&Uring::new()?))
}

impl<'a> UringSnapshots<'a> {
    /// Snapshot I/O through `uring`.
    pub(crate) fn new(uring: &'a Uring) -> UringSnapshots<'a> {
        UringSnapshots {
            uring,
            ahead: Mutex::new(HashMap::new()),
        }
    }
}

/// One scan of `set` on `rt` (the baseline runtime): the calling thread keeps `4 x cores`
/// reads in flight through one io_uring and hands each file, once read, to a hashing task
/// (both front ends alike: the reads are the program's I/O loop, the hashes its tasks).
pub fn scan(rt: &Runtime, set: &FileSet, p: &ScanParams) -> Result<ScanRun, BenchError> {
    scan::timed(set, p, || scan_files(rt, set, p))
}

/// The digest of [`scan()`]'s run.
fn scan_files(rt: &Runtime, set: &FileSet, p: &ScanParams) -> Result<u64, BenchError> {
    let uring = Uring::new()?;
    let window = 4 * rt.cpus().len();
    let words = set.file_bytes() / 8;
    let files: Vec<File> = set
        .paths()
        .iter()
        .map(|path| File::open(path).map_err(|e| BenchError::io("opening", path, e)))
        .collect::<Result<_, _>>()?;
    let digest = AtomicU64::new(0);
    let hashed = AtomicUsize::new(0);
    let rounds = p.rounds;
    rt.scope(|s| -> Result<(), BenchError> {
        let mut ids = VecDeque::new();
        let mut submitted = 0;
        for i in 0..files.len() {
            while submitted < files.len() && submitted < i + window {
                // Memory stays bounded: no more than two windows read and not yet hashed.
                // This loop runs on a worker, so it hashes while it waits: on one core the
                // hashing tasks have no other worker to run on.
                while submitted >= hashed.load(Ordering::Acquire) + 2 * window {
                    if umt_rt::yield_now() != Some(umt_rt::Yield::Executed) {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
                let path = &set.paths()[submitted];
                ids.push_back(uring.read(&files[submitted], path, 0, words)?);
                submitted += 1;
            }
            let id = ids.pop_front().ok_or_else(|| {
                BenchError::Runtime("io-uring: a read was never submitted".into())
            })?;
            let mut values = vec![0f64; words];
            uring.wait_read(id, &mut values)?;
            let (digest, hashed) = (&digest, &hashed);
            s.spawn(move |_| {
                let h = scan::hash_words(values.iter().map(|v| v.to_bits()), rounds);
                digest.fetch_add(scan::weigh(i, h), Ordering::Relaxed);
                hashed.fetch_add(1, Ordering::Release);
            });
        }
        Ok(())
    })?;
    Ok(digest.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{check_fwi_port, check_heat_port};

    fn baseline() -> Runtime {
        Runtime::builder()
            .monitor(umt_rt::BackendKind::Disabled)
            .build()
            .unwrap()
    }

    /// On one core the reading loop and the hashing tasks share the one worker: the loop,
    /// held at two windows ahead, hashes while it waits instead of waiting forever (it did:
    /// `umt-bench scale` hung at 1 core).
    #[test]
    fn a_scan_on_one_core_hashes_while_the_reads_wait() {
        if let Err(e) = Uring::new() {
            eprintln!("skipped: {e}");
            return;
        }
        let p = ScanParams {
            files: 24, // more than two windows of 4 reads
            file_mib: 1,
            rounds: 1,
            dir: std::env::temp_dir(),
        };
        let set = FileSet::create(&p).unwrap();
        let want = scan::sequential_digest(&set, 1).unwrap();
        let first = umt_sys::cpu::process_cpus().unwrap()[0];
        let rt = Runtime::builder()
            .monitor(umt_rt::BackendKind::Disabled)
            .cores([first])
            .build()
            .unwrap();
        assert_eq!(scan(&rt, &set, &p).unwrap().digest, want);
    }

    #[test]
    fn uring_heat_is_bit_identical_and_checkpoints_read_back() {
        if let Err(e) = Uring::new() {
            eprintln!("skipped: {e}");
            return;
        }
        check_heat_port(|p| heat(&baseline(), p));
    }

    /// A run that unwinds while its writes are in flight (a task panicked): dropping the ring
    /// waits for them, so no buffer goes back to the pool while the kernel still reads it, and
    /// every write the ring accepted is on disk when the run's panic reaches the caller.
    #[test]
    fn a_run_that_panics_waits_for_its_writes_in_flight() {
        if let Err(e) = Uring::new() {
            eprintln!("skipped: {e}");
            return;
        }
        let (dir, io) = crate::testutil::dir_and_mode();
        let path = dir.join(format!("umt-uring-unwind-{}.bin", std::process::id()));
        const BLOCKS: usize = 64;
        const VALUES: usize = 1 << 19; // 4 MiB per write: 256 MiB in flight, for about 0.2 s
        let file = crate::io::create_file(&path, io, (BLOCKS * VALUES * 8) as u64).unwrap();
        let rt = baseline();
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let uring = Uring::new().unwrap();
            rt.scope(|s| {
                let (uring, file, path) = (&uring, &file, &path);
                for i in 0..BLOCKS {
                    s.spawn(move |_| {
                        let buf = AlignedBuf::from_f64s(&vec![i as f64; VALUES]);
                        uring
                            .write(file, path, (i * VALUES * 8) as u64, buf)
                            .unwrap();
                    });
                }
                s.spawn(|_| panic!("a task fails mid-run"));
            });
        }));
        assert!(unwound.is_err(), "the task's panic reaches the caller");
        // Whatever the run's buffers went back to the pool, the next buffers of that size
        // reuse: scribble over them at once. A write still in flight would put this on disk.
        let reused: Vec<AlignedBuf> = (0..BLOCKS)
            .map(|_| AlignedBuf::from_f64s(&vec![-1.0; VALUES]))
            .collect();
        for i in 0..BLOCKS {
            let back = crate::io::read_f64s(&path, (i * VALUES * 8) as u64, VALUES).unwrap();
            assert!(
                back.iter().all(|&x| x == i as f64),
                "write {i} was not complete"
            );
        }
        drop(reused);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn uring_fwi_is_bit_identical() {
        if let Err(e) = Uring::new() {
            eprintln!("skipped: {e}");
            return;
        }
        check_fwi_port(|p| fwi(&baseline(), p));
    }
}
