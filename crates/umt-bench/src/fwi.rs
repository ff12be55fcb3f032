//! FWI mock-up (paper IV-D): a staggered velocity/stress wave propagation on 3D volumes, with
//! snapshots written during the forward phase and read back during the backward phase.
//!
//! Volumes are `nz x nx x ny`, stored as `ny` contiguous Y-slices of `nz * nx` cells. Each
//! time step runs one velocity task per slice (reading the stress slices within radius 4, the
//! stencil of FWI codes, and writing its velocity slice), then one stress task per slice (the
//! same on the velocity). Every `iof` steps, one task per slice copies the velocity slice out
//! and another writes the copy into the snapshot file (`O_DIRECT`). The backward phase walks
//! time in reverse on adjoint volumes and, at each snapshot step, reads the snapshot slice back
//! and adds its product with the adjoint velocity into the image.
//!
//! Every runner on umt-rt runs the same task graph (`run_with`) and plugs its I/O into it
//! (`SnapshotIo`); the rayon and tokio ports write their own loops but share the snapshot
//! bookkeeping (`Snapshots`).
//!
//! Verified: every snapshot slice read back has the checksum it was written with, and the
//! final volumes and the image are bit-identical to [`sequential`].

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use umt_rt::{Access, Runtime, Scope};

use crate::error::{BenchError, Errors};
use crate::io::{
    AlignedBuf, DIRECT_ALIGN, IoMode, TempPath, create_file, read_f64s_into, write_buf,
};

/// Stencil radius in Y.
pub const RADIUS: usize = 4;
/// 8th-order staggered-grid coefficients.
const C: [f64; RADIUS] = [1.196_289_1, -0.079_752_6, 0.009_570_3, -0.000_697_5];
/// Time step (stable for these coefficients and unit spacing).
const DT: f64 = 0.05;

/// The parameters of one FWI run.
#[derive(Debug, Clone, PartialEq)]
pub struct FwiParams {
    /// Cells along Z.
    pub nz: usize,
    /// Cells along X.
    pub nx: usize,
    /// Y-slices.
    pub ny: usize,
    /// Time steps of each phase.
    pub steps: usize,
    /// Snapshot every `iof` steps.
    pub iof: usize,
    /// Directory of the snapshot file.
    pub dir: PathBuf,
    /// Direct or buffered I/O.
    pub io: IoMode,
}

impl FwiParams {
    /// Checks the parameters; the error says what to change.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::InvalidParam(m));
        if self.nz == 0 || self.nx == 0 || self.ny == 0 || self.steps == 0 {
            return bad("the volume and the step count must be non-zero".into());
        }
        if self.iof == 0 {
            return bad("iof must be at least 1".into());
        }
        if self.steps > crate::heat::MAX_STEPS {
            return bad(format!(
                "steps {}: at most {} (a run that long measures nothing more, and its list of \
                 snapshots would not fit in memory); give fewer",
                self.steps,
                crate::heat::MAX_STEPS
            ));
        }
        if self.iof > self.steps {
            return bad(format!(
                "iof {} is more than steps {}: no snapshot would be taken; use an iof of at \
                 most {1}",
                self.iof, self.steps
            ));
        }
        if self.memory_bytes().is_none() {
            return bad(format!(
                "a volume of {} x {} x {} cells is too large for this machine to address: use \
                 a smaller one",
                self.nz, self.nx, self.ny
            ));
        }
        if self.io == IoMode::Direct && !(self.slice_cells() * 8).is_multiple_of(DIRECT_ALIGN) {
            return bad(format!(
                "a Y-slice of {} x {} cells is not a multiple of {DIRECT_ALIGN} bytes, as O_DIRECT \
                 needs: make nz * nx a multiple of {}",
                self.nz,
                self.nx,
                DIRECT_ALIGN / 8
            ));
        }
        Ok(())
    }

    /// A fresh path for a run's snapshot file: unique per call, so that runs in parallel never
    /// share one.
    pub fn new_snapshot_path(&self) -> PathBuf {
        let seq = RUN_ID.fetch_add(1, Ordering::Relaxed);
        self.dir
            .join(format!("umt-fwi-{}-{seq}.snap", std::process::id()))
    }

    /// Bytes of memory a run needs, about: five volumes (velocity, stress, their adjoints, the
    /// image) and a sixth of staged copies, counted with no overflow (`None` when it does not
    /// fit a u64, or the snapshot file's size does not).
    pub fn memory_bytes(&self) -> Option<u64> {
        let cells = [self.nz, self.nx, self.ny]
            .into_iter()
            .try_fold(1u64, |acc, n| acc.checked_mul(u64::try_from(n).ok()?))?;
        let volume = cells.checked_mul(8)?;
        // The snapshot file: every snapshot of every slice.
        volume.checked_mul(u64::try_from(self.steps / self.iof.max(1)).ok()?)?;
        usize::try_from(volume).ok()?;
        volume.checked_mul(6)
    }

    /// Cells of one Y-slice.
    pub fn slice_cells(&self) -> usize {
        self.nz * self.nx
    }

    /// Steps that take a snapshot.
    pub fn snapshot_steps(&self) -> Vec<usize> {
        (1..=self.steps).filter(|t| t % self.iof == 0).collect()
    }

    /// Bytes of all snapshots (written once, read once).
    pub fn snapshot_bytes(&self) -> u64 {
        (self.snapshot_steps().len() * self.ny * self.slice_cells() * 8) as u64
    }

    /// Cell updates of a whole run (both phases, velocity and stress), for the figure of merit.
    pub fn cell_updates(&self) -> f64 {
        (4 * self.slice_cells() * self.ny * self.steps) as f64
    }
}

/// FNV-1a over the bits of the values: the checksum of a snapshot slice.
pub fn checksum(values: &[f64]) -> u64 {
    fnv1a(values.iter().map(|v| v.to_bits()))
}

fn fnv1a(words: impl Iterator<Item = u64>) -> u64 {
    words.fold(0xcbf2_9ce4_8422_2325u64, |h, w| {
        (h ^ w).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// [`checksum`] of the values a staged buffer holds (native byte order).
fn checksum_bytes(bytes: &[u8]) -> u64 {
    fnv1a(
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]))),
    )
}

/// One volume as Y-slices behind locks (the dependencies order all accesses; the locks make
/// the sharing safe without `unsafe` and never wait).
#[derive(Debug)]
pub(crate) struct Volume {
    slices: Vec<RwLock<Vec<f64>>>,
}

impl Volume {
    pub(crate) fn new(p: &FwiParams) -> Volume {
        Volume {
            slices: (0..p.ny)
                .map(|_| RwLock::new(crate::io::prefaulted_zeros(p.slice_cells())))
                .collect(),
        }
    }

    pub(crate) fn read(&self, y: usize) -> std::sync::RwLockReadGuard<'_, Vec<f64>> {
        self.slices[y].read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn write(&self, y: usize) -> std::sync::RwLockWriteGuard<'_, Vec<f64>> {
        self.slices[y].write().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn to_vec(&self) -> Vec<f64> {
        (0..self.slices.len())
            .flat_map(|y| self.read(y).clone())
            .collect()
    }
}

/// `out[y] += DT * (d/dy of src + d/dx of src[y])`, the radius-4 stencil in Y and a
/// second-order one inside the slice. Slices beyond the volume count as zero.
fn stencil(out: &mut [f64], src: &Volume, y: usize, p: &FwiParams) {
    DY_SCRATCH.with_borrow_mut(|dy| stencil_with(out, src, y, p, dy));
}

thread_local! {
    /// The Y-derivative of the slice being updated, reused by every update on this thread: a
    /// fresh `vec![0.0; n]` per update would map zero pages and take a write fault (with a TLB
    /// flush on every CPU of the process) on each of its pages.
    static DY_SCRATCH: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn stencil_with(out: &mut [f64], src: &Volume, y: usize, p: &FwiParams, dy: &mut Vec<f64>) {
    let (ny, nx) = (p.ny, p.nx);
    dy.clear();
    dy.resize(p.slice_cells(), 0.0);
    for (k, c) in C.iter().enumerate() {
        let ahead = (y + k + 1 < ny).then(|| src.read(y + k + 1));
        let behind = (y > k).then(|| src.read(y - k - 1));
        for (i, d) in dy.iter_mut().enumerate() {
            let a = ahead.as_ref().map_or(0.0, |s| s[i]);
            let b = behind.as_ref().map_or(0.0, |s| s[i]);
            *d += c * (a - b);
        }
    }
    let own = src.read(y);
    for (i, o) in out.iter_mut().enumerate() {
        let x = i % nx;
        let right = if x + 1 < nx { own[i + 1] } else { 0.0 };
        let left = if x > 0 { own[i - 1] } else { 0.0 };
        *o += DT * (dy[i] + 0.5 * (right - left));
    }
}

/// Updates slice `y` of `dst` in place from `src` (two different volumes).
pub(crate) fn update(dst: &Volume, src: &Volume, y: usize, p: &FwiParams) {
    stencil(&mut dst.write(y), src, y, p);
}

/// The Y-slices a slice's update reads.
pub(crate) fn neighbours(y: usize, ny: usize) -> std::ops::Range<usize> {
    y.saturating_sub(RADIUS)..(y + RADIUS + 1).min(ny)
}

/// Dependency keys: (volume, slice).
pub(crate) const V: u8 = 0;
pub(crate) const S: u8 = 1;
pub(crate) const AV: u8 = 2;
pub(crate) const AS: u8 = 3;
pub(crate) const IMG: u8 = 4;
/// A snapshot slice on disk: written before it is read back.
const SNAP: u8 = 5;
/// A velocity slice's staging copy, between the copy and the write.
const STAGE: u8 = 6;
/// A snapshot whose reads were started ahead.
pub(crate) const AHEAD: u8 = 7;

/// Spawns one time step of a staggered pair: one task per slice updating `vel` from the
/// `str_` slices around it (keys `vel_key`, `str_key`), then one per slice updating `str_` from
/// `vel`. The dependencies order it after the previous step and before the next.
pub(crate) fn spawn_step<'s>(
    sc: &Scope<'s>,
    (vel_key, vel): (u8, &'s Volume),
    (str_key, str_): (u8, &'s Volume),
    p: &'s FwiParams,
) {
    for (key, dst, src_key, src) in [(vel_key, vel, str_key, str_), (str_key, str_, vel_key, vel)] {
        for y in 0..p.ny {
            let deps = std::iter::once(Access::write((key, y)))
                .chain(neighbours(y, p.ny).map(move |n| Access::read((src_key, n))));
            sc.spawn_with(deps, move |_| update(dst, src, y, p));
        }
    }
}

pub(crate) struct State {
    pub(crate) v: Volume,
    pub(crate) s: Volume,
    pub(crate) av: Volume,
    pub(crate) as_: Volume,
    pub(crate) image: Volume,
}

impl State {
    pub(crate) fn new(p: &FwiParams) -> State {
        State::with_sources(p, Some(p.ny / 2), Some(p.ny / 4))
    }

    /// Zero volumes but for the source's stress slice and the receiver's adjoint velocity
    /// slice, where given (volume indices: a rank places those its slices hold).
    pub(crate) fn with_sources(
        p: &FwiParams,
        source: Option<usize>,
        receiver: Option<usize>,
    ) -> State {
        let st = State {
            v: Volume::new(p),
            s: Volume::new(p),
            av: Volume::new(p),
            as_: Volume::new(p),
            image: Volume::new(p),
        };
        let centre = p.slice_cells() / 2;
        if let Some(y) = source {
            st.s.write(y)[centre] = 1.0;
        }
        if let Some(y) = receiver {
            st.av.write(y)[centre] = 1.0;
        }
        st
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct FwiRun {
    /// Wall time of both phases.
    pub elapsed: Duration,
    /// Final forward velocity, slice after slice.
    pub velocity: Vec<f64>,
    /// Final forward stress.
    pub stress: Vec<f64>,
    /// The image (sum over snapshot steps of snapshot times adjoint velocity).
    pub image: Vec<f64>,
    /// Snapshot slices written and verified on read-back.
    pub snapshots_verified: usize,
    /// Bytes written plus bytes read.
    pub io_bytes: u64,
}

impl FwiRun {
    /// Kilo-cells updated per second (the figure of merit).
    pub fn kilo_cells_per_second(&self, p: &FwiParams) -> f64 {
        p.cell_updates() / 1000.0 / self.elapsed.as_secs_f64()
    }
}

/// Ends a run: the first error any task reported, else what the run produced. (The snapshot
/// file goes with its path.)
pub(crate) fn finish(
    elapsed: Duration,
    st: &State,
    snaps: &Snapshots,
    io_bytes: u64,
    errors: &Errors,
) -> Result<FwiRun, BenchError> {
    errors.first()?;
    Ok(FwiRun {
        elapsed,
        velocity: st.v.to_vec(),
        stress: st.s.to_vec(),
        image: st.image.to_vec(),
        snapshots_verified: snaps.verified(),
        io_bytes,
    })
}

static RUN_ID: AtomicUsize = AtomicUsize::new(0);

/// A run's snapshot bookkeeping, the same for every runner: where each slice goes in the
/// snapshot file, the checksum it was written with, and how many were read back and verified.
#[derive(Debug)]
pub(crate) struct Snapshots {
    ny: usize,
    /// The volume index of the first slice snapshot (0, or the first owned slice of a rank's
    /// volume with ghost slices).
    first: usize,
    cells: usize,
    /// The steps that take a snapshot, in order: snapshot `k` is taken at `steps[k]`.
    steps: Vec<usize>,
    /// Checksum of each slice written, by [`Snapshots::index`].
    sums: Mutex<Vec<u64>>,
    /// Slices read back and verified.
    verified: AtomicUsize,
}

impl Snapshots {
    pub(crate) fn new(p: &FwiParams) -> Snapshots {
        Snapshots::of_slices(p, 0)
    }

    /// The snapshots of `p.ny` slices that are slices `first..first + p.ny` of the volumes:
    /// every method takes volume indices.
    pub(crate) fn of_slices(p: &FwiParams, first: usize) -> Snapshots {
        let steps = p.snapshot_steps();
        Snapshots {
            ny: p.ny,
            first,
            cells: p.slice_cells(),
            sums: Mutex::new(vec![0; steps.len() * p.ny]),
            steps,
            verified: AtomicUsize::new(0),
        }
    }

    /// The snapshot taken at step `t`, if any.
    pub(crate) fn at_step(&self, t: usize) -> Option<usize> {
        self.steps.iter().position(|&s| s == t)
    }

    /// Index of slice `y` of snapshot `k` among all snapshot slices (file order).
    pub(crate) fn index(&self, k: usize, y: usize) -> usize {
        k * self.ny + (y - self.first)
    }

    /// Byte offset of slice `y` of snapshot `k` in the snapshot file.
    pub(crate) fn offset(&self, k: usize, y: usize) -> u64 {
        (self.index(k, y) * self.cells * 8) as u64
    }

    /// Cells of one slice.
    pub(crate) fn cells(&self) -> usize {
        self.cells
    }

    /// Records the checksum of slice `y` of snapshot `k`, staged in `buf`, and hands it to
    /// `write` with its offset.
    pub(crate) fn write(
        &self,
        k: usize,
        y: usize,
        buf: AlignedBuf,
        write: impl FnOnce(u64, AlignedBuf) -> Result<(), BenchError>,
    ) -> Result<(), BenchError> {
        let sum = checksum_bytes(buf.as_slice());
        self.sums.lock().unwrap_or_else(|e| e.into_inner())[self.index(k, y)] = sum;
        write(self.offset(k, y), buf)
    }

    /// Slice `y` of snapshot `k` (taken at step `t`) is back from disk in `data`: checks it
    /// against the checksum it was written with, counts it, and with `image` adds its product
    /// with the adjoint velocity into the image (the imaging condition).
    pub(crate) fn check_and_image(
        &self,
        st: &State,
        (k, y, t): (usize, usize, usize),
        data: &[f64],
        image: bool,
    ) -> Result<(), BenchError> {
        let want = self.sums.lock().unwrap_or_else(|e| e.into_inner())[self.index(k, y)];
        let got = checksum(data);
        if got != want {
            return Err(BenchError::Corrupt(format!(
                "snapshot of step {t}, slice {y} read back with checksum {got:#x}, written \
                 with {want:#x}"
            )));
        }
        self.verified.fetch_add(1, Ordering::Relaxed);
        if image {
            let av = st.av.read(y);
            let mut img = st.image.write(y);
            for ((i, s), a) in img.iter_mut().zip(data).zip(av.iter()) {
                *i += s * a;
            }
        }
        Ok(())
    }

    /// Slices read back and verified so far.
    pub(crate) fn verified(&self) -> usize {
        self.verified.load(Ordering::Relaxed)
    }
}

/// How a run on umt-rt moves its snapshot slices: the seam a runner plugs its I/O into, so
/// that every runner on umt-rt runs the same task graph ([`run_with`]).
pub(crate) trait SnapshotIo: Sync {
    /// Writes `buf` at byte `offset`. May return before the data is on disk (then
    /// [`SnapshotIo::flush`] waits for it).
    fn write(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        buf: AlignedBuf,
    ) -> Result<(), BenchError>;

    /// Whether reads are started ahead of need ([`SnapshotIo::read_ahead`]).
    fn reads_ahead(&self) -> bool {
        false
    }

    /// Starts reading `cells` values at byte `offset`, for a later [`SnapshotIo::read`] of
    /// the same offset. Called for every slice of a snapshot by one task, spawned before the
    /// adjoint step that images it, once every write is on disk ([`SnapshotIo::flush`]).
    fn read_ahead(
        &self,
        _file: &File,
        _path: &Path,
        _offset: u64,
        _cells: usize,
    ) -> Result<(), BenchError> {
        Ok(())
    }

    /// Reads `out.len()` values at byte `offset` (the read started ahead, if there is one).
    fn read(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        out: &mut [f64],
    ) -> Result<(), BenchError>;

    /// Waits until every write submitted so far is on disk.
    fn flush(&self) -> Result<(), BenchError> {
        Ok(())
    }
}

/// The paper's I/O: each task reads or writes with a blocking call, so its worker waits in
/// the kernel (and umt's monitor gives the core to another worker meanwhile).
#[derive(Debug)]
pub(crate) struct Blocking;

impl SnapshotIo for Blocking {
    fn write(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        buf: AlignedBuf,
    ) -> Result<(), BenchError> {
        write_buf(file, path, offset, buf)
    }

    fn read(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        out: &mut [f64],
    ) -> Result<(), BenchError> {
        read_f64s_into(file, path, offset, out)
    }
}

/// Snapshot I/O through umt-rt's scheduler-centric wait ([`umt_rt::io`]): the task's worker
/// runs other tasks while its read or write is in flight (the umt-io runner).
#[derive(Debug)]
pub(crate) struct Waiting;

impl SnapshotIo for Waiting {
    fn write(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        buf: AlignedBuf,
    ) -> Result<(), BenchError> {
        umt_rt::io::write_all_at(file, buf.as_slice(), offset)
            .map_err(|e| BenchError::wait("writing", path, e))
    }

    fn read(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        out: &mut [f64],
    ) -> Result<(), BenchError> {
        let mut buf = AlignedBuf::new(out.len() * 8);
        umt_rt::io::read_exact_at(file, buf.as_mut_slice(), offset)
            .map_err(|e| BenchError::wait("reading", path, e))?;
        buf.copy_to_f64s(out);
        Ok(())
    }
}

/// Which parts of the workload to run: everything, or the compute or the I/O alone (the two
/// runs of the overlap bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Computation and snapshots.
    All,
    /// Computation only: no snapshot is written or read (the image stays zero).
    ComputeOnly,
    /// Snapshot writes and reads only, of the initial velocity.
    IoOnly,
}

/// The snapshot tasks of a run, the same whether the volumes are whole (one process) or a
/// rank's slab (`dist::fwi`): slice indices are the volumes'.
#[derive(Clone, Copy)]
pub(crate) struct SnapshotTasks<'a> {
    pub(crate) st: &'a State,
    pub(crate) snaps: &'a Snapshots,
    pub(crate) errors: &'a Errors,
    pub(crate) file: &'a File,
    pub(crate) path: &'a Path,
    pub(crate) io: &'a dyn SnapshotIo,
}

impl<'a> SnapshotTasks<'a> {
    /// Slice `y` of snapshot `k`: one task copies the velocity slice out to `slot` (holding
    /// the slice only for the copy), a second one writes the copy, so the next step need not
    /// wait for the disk.
    pub(crate) fn spawn_write(
        self,
        sc: &Scope<'a>,
        slot: &'a Mutex<Option<AlignedBuf>>,
        k: usize,
        y: usize,
    ) {
        let SnapshotTasks { st, snaps, .. } = self;
        sc.spawn_with(
            [Access::read((V, y)), Access::write((STAGE, y))],
            move |_| {
                *slot.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(AlignedBuf::from_f64s(&st.v.read(y)));
            },
        );
        let deps = [
            Access::read((STAGE, y)),
            Access::write((SNAP, snaps.index(k, y))),
        ];
        sc.spawn_with(deps, move |_| {
            if let Some(buf) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let write = |at, b| self.io.write(self.file, self.path, at, b);
                self.errors.check(snaps.write(k, y, buf, write));
            }
        });
    }

    /// Snapshot `k`'s slices `ys`: one task starts their reads (for an `io` that reads ahead;
    /// the read tasks then depend on `(AHEAD, k)`).
    pub(crate) fn spawn_read_ahead(self, sc: &Scope<'a>, k: usize, ys: std::ops::Range<usize>) {
        let (snaps, cells) = (self.snaps, self.snaps.cells());
        sc.spawn_with([Access::write((AHEAD, k))], move |_| {
            for y in ys {
                let offset = snaps.offset(k, y);
                (self.errors).check(self.io.read_ahead(self.file, self.path, offset, cells));
            }
        });
    }

    /// Slice `y` of snapshot `k`, taken at step `t`: a task reads it back, verifies it and,
    /// with `image`, images it; after `extra` too, if given.
    pub(crate) fn spawn_read(
        self,
        sc: &Scope<'a>,
        (k, y, t): (usize, usize, usize),
        image: bool,
        extra: Option<Access>,
    ) {
        let (snaps, cells) = (self.snaps, self.snaps.cells());
        let deps = [
            Access::read((AV, y)),
            Access::write((IMG, y)),
            Access::read((SNAP, snaps.index(k, y))),
        ]
        .into_iter()
        .chain(extra);
        sc.spawn_with(deps, move |_| {
            let mut data = vec![0.0; cells];
            let done = (self.io)
                .read(self.file, self.path, snaps.offset(k, y), &mut data)
                .and_then(|()| snaps.check_and_image(self.st, (k, y, t), &data, image));
            self.errors.check(done);
        });
    }
}

/// What the tasks of one [`run_with`] share.
struct Graph<'a> {
    p: &'a FwiParams,
    st: &'a State,
    snaps: &'a Snapshots,
    errors: &'a Errors,
    /// The snapshot file; `None` when no snapshot is taken (compute only).
    file: Option<&'a File>,
    path: &'a Path,
    /// Per slice, its staged copy between the copy task and the write task.
    staging: &'a [Mutex<Option<AlignedBuf>>],
    io: &'a dyn SnapshotIo,
    /// Whether the volumes are computed (not for the I/O-only run).
    compute: bool,
}

impl<'a> Graph<'a> {
    fn snapshot_tasks(&self, file: &'a File) -> SnapshotTasks<'a> {
        SnapshotTasks {
            st: self.st,
            snaps: self.snaps,
            errors: self.errors,
            file,
            path: self.path,
            io: self.io,
        }
    }

    /// The forward phase: the steps, and the snapshots they take.
    fn forward(&self, sc: &Scope<'a>) {
        let Graph { p, st, snaps, .. } = *self;
        for t in 1..=p.steps {
            if self.compute {
                spawn_step(sc, (V, &st.v), (S, &st.s), p);
            }
            let Some((file, k)) = self.file.zip(snaps.at_step(t)) else {
                continue;
            };
            let tasks = self.snapshot_tasks(file);
            for (y, slot) in self.staging.iter().enumerate() {
                tasks.spawn_write(sc, slot, k, y);
            }
        }
    }

    /// The backward phase: reverse time on the adjoint volumes, reading the snapshots back.
    fn backward(&self, sc: &Scope<'a>) {
        let Graph {
            p,
            st,
            snaps,
            io,
            compute,
            ..
        } = *self;
        let ny = p.ny;
        for t in (1..=p.steps).rev() {
            let snap = self.file.zip(snaps.at_step(t));
            if let Some((file, k)) = snap
                && io.reads_ahead()
            {
                self.snapshot_tasks(file).spawn_read_ahead(sc, k, 0..ny);
            }
            if compute {
                spawn_step(sc, (AV, &st.av), (AS, &st.as_), p);
            }
            let Some((file, k)) = snap else { continue };
            let tasks = self.snapshot_tasks(file);
            let ahead = io.reads_ahead().then_some(Access::read((AHEAD, k)));
            for y in 0..ny {
                tasks.spawn_read(sc, (k, y, t), compute, ahead);
            }
        }
    }
}

/// Runs the workload on `rt`, with blocking snapshot I/O.
pub fn run(rt: &Runtime, p: &FwiParams, part: Part) -> Result<FwiRun, BenchError> {
    run_with(rt, p, part, &Blocking)
}

/// Runs the workload on `rt`, its snapshot I/O through umt-rt's scheduler-centric wait.
pub fn run_io(rt: &Runtime, p: &FwiParams, part: Part) -> Result<FwiRun, BenchError> {
    run_with(rt, p, part, &Waiting)
}

/// Runs the workload on `rt`, its snapshots moved by `io`.
///
/// Forward, every `iof` steps, one task per slice copies the velocity slice out (holding it
/// only for the copy) and a second one writes the copy, so the next step need not wait for
/// the disk. Backward, at each snapshot step, one task per slice reads its slice back,
/// verifies it and images it. With an `io` that reads ahead, the backward phase starts once
/// every snapshot is on disk; one task per snapshot then starts its reads before the adjoint
/// step that needs them, and the imaging tasks only claim them.
pub(crate) fn run_with(
    rt: &Runtime,
    p: &FwiParams,
    part: Part,
    io: &dyn SnapshotIo,
) -> Result<FwiRun, BenchError> {
    p.validate()?;
    let st = State::new(p);
    let (path, file) = match part {
        Part::ComputeOnly => (None, None),
        _ => {
            let (path, file) = TempPath::create(p.new_snapshot_path(), |path| {
                create_file(path, p.io, p.snapshot_bytes())
            })?;
            (Some(path), Some(file))
        }
    };
    let snaps = Snapshots::new(p);
    let errors = Errors::default();
    let compute = part != Part::IoOnly;
    let staging: Vec<Mutex<Option<AlignedBuf>>> = (0..p.ny).map(|_| Mutex::new(None)).collect();
    let graph = Graph {
        p,
        st: &st,
        snaps: &snaps,
        errors: &errors,
        file: file.as_ref(),
        // Read only with a file, which comes with its path.
        path: path.as_deref().unwrap_or(Path::new("")),
        staging: &staging,
        io,
        compute,
    };
    let start = Instant::now();
    if io.reads_ahead() {
        // Reads started ahead must not pass the writes: the forward phase ends when every
        // snapshot is on disk, waited for by this thread rather than by a worker.
        rt.scope(|sc| graph.forward(sc));
        errors.check(io.flush());
        rt.scope(|sc| graph.backward(sc));
    } else {
        rt.scope(|sc| {
            graph.forward(sc);
            graph.backward(sc);
        });
    }
    errors.check(io.flush());
    let elapsed = start.elapsed();
    let io_bytes = if file.is_some() {
        2 * p.snapshot_bytes()
    } else {
        0
    };
    finish(elapsed, &st, &snaps, io_bytes, &errors)
}

/// The sequential reference: the same updates in program order, snapshots kept in memory.
/// Returns (velocity, stress, image).
pub fn sequential(p: &FwiParams) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let st = State::new(p);
    let mut snaps = Vec::new();
    for t in 1..=p.steps {
        for y in 0..p.ny {
            update(&st.v, &st.s, y, p);
        }
        for y in 0..p.ny {
            update(&st.s, &st.v, y, p);
        }
        if t % p.iof == 0 {
            snaps.push(st.v.to_vec());
        }
    }
    for t in (1..=p.steps).rev() {
        for y in 0..p.ny {
            update(&st.av, &st.as_, y, p);
        }
        for y in 0..p.ny {
            update(&st.as_, &st.av, y, p);
        }
        if t % p.iof == 0 {
            let snap = &snaps[t / p.iof - 1];
            let n = p.slice_cells();
            for y in 0..p.ny {
                let av = st.av.read(y);
                let mut img = st.image.write(y);
                for (i, v) in img.iter_mut().enumerate() {
                    *v += snap[y * n + i] * av[i];
                }
            }
        }
    }
    (st.v.to_vec(), st.s.to_vec(), st.image.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::same;

    fn params(steps: usize, iof: usize) -> FwiParams {
        let (dir, io) = crate::testutil::dir_and_mode();
        FwiParams {
            nz: 16,
            nx: 32,
            ny: 12,
            steps,
            iof,
            dir,
            io,
        }
    }

    /// The umt-io runner: snapshots written and read through `umt_rt::io`.
    #[test]
    fn waiting_run_is_bit_identical() {
        let rt = Runtime::new().unwrap();
        crate::testutil::check_fwi_port(|p| run_io(&rt, p, Part::All));
        assert!(rt.io_stats().waits + rt.io_stats().fallback_waits > 0);
    }

    #[test]
    fn bad_parameters_are_explained() {
        let mut p = params(4, 0);
        assert!(p.validate().unwrap_err().to_string().contains("iof"));
        p.iof = 5;
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("no snapshot would be taken"), "{e}");
        p.iof = 1;
        (p.nz, p.nx) = (1 << 32, 1 << 32);
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("too large"), "{e}");
        (p.nz, p.nx) = (16, 32);
        p.iof = 1;
        p.nz = 3;
        p.io = IoMode::Direct;
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .contains("multiple of")
        );
    }

    #[test]
    fn parallel_run_matches_sequential_and_snapshots_verify() {
        let rt = Runtime::new().unwrap();
        let p = params(6, 2);
        let out = run(&rt, &p, Part::All).unwrap();
        let (v, s, img) = sequential(&p);
        assert!(same(&out.velocity, &v), "velocity differs");
        assert!(same(&out.stress, &s), "stress differs");
        assert!(same(&out.image, &img), "image differs");
        assert!(
            img.iter().any(|&x| x != 0.0),
            "the image is not trivially zero"
        );
        assert_eq!(out.snapshots_verified, 3 * p.ny);
        assert_eq!(out.io_bytes, 2 * 3 * 12 * 16 * 32 * 8);
    }

    #[test]
    fn bound_parts_run_alone() {
        let rt = Runtime::new().unwrap();
        let p = params(4, 1);
        let c = run(&rt, &p, Part::ComputeOnly).unwrap();
        assert_eq!((c.snapshots_verified, c.io_bytes), (0, 0));
        let (v, _, _) = sequential(&p);
        assert!(same(&c.velocity, &v));
        let io = run(&rt, &p, Part::IoOnly).unwrap();
        assert_eq!(io.snapshots_verified, 4 * p.ny);
        assert!(io.velocity.iter().all(|&x| x == 0.0));
    }

    #[test]
    fn checksums_see_single_bit_flips() {
        let a = [1.0f64, 2.0, 3.0];
        let mut b = a;
        b[1] = f64::from_bits(b[1].to_bits() ^ 1);
        assert_ne!(checksum(&a), checksum(&b));
        let buf = AlignedBuf::from_f64s(&a);
        assert_eq!(checksum_bytes(buf.as_slice()), checksum(&a));
    }
}
