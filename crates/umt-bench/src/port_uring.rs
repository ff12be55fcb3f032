//! The `io-uring` runner: computation on the baseline umt-rt runtime (monitor off), I/O
//! submitted asynchronously through one io_uring instead of blocking a worker.
//!
//! Checkpoint and snapshot writes copy the data into an aligned buffer and submit it; the
//! task returns at once. Snapshot reads are prefetched: the reads of a backward snapshot step
//! are submitted before that step's computation, and the imaging task of each slice waits for
//! its own read only then. A run ends when every submitted operation has completed.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use io_uring::{IoUring, opcode, types};
use umt_rt::{Access, Runtime};

use crate::fwi::{self, AS, AV, FwiParams, FwiRun, IMG, S, State, V};
use crate::heat::{HeatParams, HeatRun};
use crate::io::{AlignedBuf, BenchError, create_file};

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

fn io_error(what: &'static str, path: &Path, source: std::io::Error) -> BenchError {
    BenchError::Io {
        what,
        path: path.to_path_buf(),
        source,
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
                self.errors.push(io_error(what, &path, e));
            } else if res as usize != want {
                let e = std::io::Error::other(format!("short {what}: {res} of {want} bytes"));
                self.errors.push(io_error(what, &path, e));
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
                .map_err(|e| io_error(what, path, e))?;
            self.reap();
        }
        self.inflight.insert(id, (buf, path.to_path_buf(), what));
        self.ring.submit().map_err(|e| io_error(what, path, e))?;
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

/// Dependency key of a snapshot step's prefetch (the others are `fwi`'s).
const PREFETCH: u8 = 5;

/// The FWI mock-up on `rt` (the baseline runtime) with snapshot I/O through io_uring.
pub fn fwi(rt: &Runtime, p: &FwiParams) -> Result<FwiRun, BenchError> {
    p.validate()?;
    let uring = Uring::new()?;
    let st = State::new(p);
    let path = p.new_snapshot_path();
    let file = create_file(&path, p.io, p.snapshot_bytes())?;
    let snaps = p.snapshot_steps();
    let ny = p.ny;
    let cells = p.slice_cells();
    let slice_bytes = (cells * 8) as u64;
    let sums = Mutex::new(vec![0u64; snaps.len() * ny]);
    let reads: Mutex<HashMap<(usize, usize), u64>> = Mutex::new(HashMap::new());
    let errors = Mutex::new(Vec::new());
    let verified = AtomicUsize::new(0);
    let fail = |e: BenchError| errors.lock().unwrap_or_else(|e| e.into_inner()).push(e);
    let start = Instant::now();
    // Forward: writes go out as they are submitted.
    rt.scope(|sc| {
        let (st, sums, fail, uring, file, path) = (&st, &sums, &fail, &uring, &file, &path);
        for t in 1..=p.steps {
            fwi::spawn_step(sc, (V, &st.v), (S, &st.s), p);
            if let Some(k) = snaps.iter().position(|&x| x == t) {
                for y in 0..ny {
                    sc.spawn_with([Access::read((V, y))], move |_| {
                        let buf = AlignedBuf::from_f64s(&st.v.read(y));
                        let at = (k * ny + y) as u64 * slice_bytes;
                        let write = |b| uring.write(file, path, at, b);
                        if let Err(e) = fwi::write_snapshot(sums, k * ny + y, buf, write) {
                            fail(e);
                        }
                    });
                }
            }
        }
    });
    // The snapshots must be on disk before they are read back.
    let flushed = uring.wait_all();
    rt.scope(|sc| {
        let (st, sums, fail, uring, file, path, reads, verified) =
            (&st, &sums, &fail, &uring, &file, &path, &reads, &verified);
        for t in (1..=p.steps).rev() {
            let snap = snaps.iter().position(|&x| x == t);
            if let Some(k) = snap {
                // Prefetch this step's snapshot while its adjoint step computes.
                sc.spawn_with([Access::write((PREFETCH, k))], move |_| {
                    for y in 0..ny {
                        let at = (k * ny + y) as u64 * slice_bytes;
                        match uring.read(file, path, at, cells) {
                            Ok(id) => {
                                reads
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .insert((k, y), id);
                            }
                            Err(e) => fail(e),
                        }
                    }
                });
            }
            fwi::spawn_step(sc, (AV, &st.av), (AS, &st.as_), p);
            if let Some(k) = snap {
                for y in 0..ny {
                    let deps = [
                        Access::read((AV, y)),
                        Access::write((IMG, y)),
                        Access::read((PREFETCH, k)),
                    ];
                    sc.spawn_with(deps, move |_| {
                        let Some(id) = reads
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&(k, y))
                        else {
                            return; // its submission failed and was reported
                        };
                        let mut data = vec![0.0; cells];
                        if let Err(e) = uring.wait_read(id, &mut data) {
                            return fail(e);
                        }
                        let want = sums.lock().unwrap_or_else(|e| e.into_inner())[k * ny + y];
                        if let Err(e) = fwi::verify(&data, want, t, y) {
                            return fail(e);
                        }
                        verified.fetch_add(1, Ordering::Relaxed);
                        fwi::image(st, y, &data);
                    });
                }
            }
        }
    });
    let waited = uring.wait_all();
    let elapsed = start.elapsed();
    let run = fwi::finish(
        elapsed,
        &st,
        &path,
        verified.into_inner(),
        2 * p.snapshot_bytes(),
        errors,
    );
    flushed?;
    waited?;
    run
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

    #[test]
    fn uring_heat_is_bit_identical_and_checkpoints_read_back() {
        if let Err(e) = Uring::new() {
            eprintln!("skipped: {e}");
            return;
        }
        check_heat_port(|p| heat(&baseline(), p));
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
