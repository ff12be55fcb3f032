//! Heat diffusion (paper IV-E): 2D Gauss-Seidel, in-place 5-point update on an `n x n` grid
//! split into `b x b` blocks, with periodic checkpoints of the whole grid.
//!
//! One task per block per iteration reads its four neighbour blocks and writes its own. Spawned
//! in the order a sequential blocked sweep visits them, the dataflow dependencies give exactly
//! the sequential result: a wavefront inside each iteration, and consecutive iterations
//! pipelining behind it. Every `iof` iterations, one task per block copies it out (reading the
//! block) and a second task writes the copy into that checkpoint's file, so the next iteration
//! waits for the copy, not for the disk.
//!
//! The top edge is held at 1.0 (the heat source), the other edges at 0.0.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use umt_rt::{Access, Runtime};

use crate::error::{BenchError, Errors};
use crate::io::{AlignedBuf, DIRECT_ALIGN, IoMode, TempPath, create_file};

/// Dependency tag of a block's checkpoint staging copy.
const STAGE: u8 = 1;

/// A block's copy and its offset in the checkpoint file, between the copy and the write.
type Staged = std::sync::Mutex<Option<(AlignedBuf, u64)>>;

/// Temperature of the top edge.
pub const TOP: f64 = 1.0;

/// Most iterations a heat run (and steps an FWI run) accepts, checked before anything is
/// allocated: about an hour of the smallest grid's iterations on one core, and a list of
/// checkpoints that fits in memory.
pub const MAX_STEPS: usize = 1 << 20;

/// The parameters of one heat run.
#[derive(Debug, Clone, PartialEq)]
pub struct HeatParams {
    /// Cells per side (a multiple of `block`).
    pub n: usize,
    /// Cells per block side.
    pub block: usize,
    /// Gauss-Seidel iterations.
    pub iters: usize,
    /// A checkpoint after every `iof` iterations (`None`: no checkpoints).
    pub iof: Option<usize>,
    /// Directory for checkpoint files.
    pub dir: PathBuf,
    /// How checkpoints are written.
    pub io: IoMode,
}

impl HeatParams {
    /// Checks the parameters; the error says which one is wrong and why.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::InvalidParam(m));
        if self.block == 0 || self.n == 0 {
            return bad(format!(
                "size {} and block {} must be positive",
                self.n, self.block
            ));
        }
        if !self.n.is_multiple_of(self.block) {
            return bad(format!(
                "block {} does not divide the grid size {}: pick a divisor",
                self.block, self.n
            ));
        }
        if self.iters == 0 {
            return bad("iters must be at least 1: a run of no iteration measures nothing".into());
        }
        if self.iters > MAX_STEPS {
            return bad(format!(
                "iters {}: at most {MAX_STEPS} (a run that long measures nothing more, and its \
                 list of checkpoints would not fit in memory); give fewer",
                self.iters
            ));
        }
        if self.iof == Some(0) {
            return bad("iof must be at least 1 (or no checkpoints)".into());
        }
        if let Some(iof) = self.iof
            && iof > self.iters
        {
            return bad(format!(
                "iof {iof} is more than iters {}: no checkpoint would be written; use an iof of \
                 at most {0}",
                self.iters
            ));
        }
        if self.memory_bytes().is_none() {
            return bad(format!(
                "a {0}x{0} grid is too large for this machine to address: use a smaller size",
                self.n
            ));
        }
        if self.io == IoMode::Direct && !(self.block * self.block * 8).is_multiple_of(DIRECT_ALIGN)
        {
            return bad(format!(
                "a {0}x{0} block is {1} bytes, not a multiple of {DIRECT_ALIGN} as O_DIRECT \
                 needs: use a block size that is a multiple of 32",
                self.block,
                self.block * self.block * 8
            ));
        }
        Ok(())
    }

    /// Bytes of memory a run needs, about: the grid and one checkpoint's copies (the staged
    /// writers copy blocks out), counted with no overflow (`None` when it does not fit a u64).
    pub fn memory_bytes(&self) -> Option<u64> {
        let n = u64::try_from(self.n).ok()?;
        n.checked_mul(n)?.checked_mul(8)?.checked_mul(2)
    }

    /// Blocks per side.
    pub fn blocks(&self) -> usize {
        self.n / self.block
    }

    /// Iterations after which a checkpoint is written (1-based iteration counts).
    pub fn checkpoint_iters(&self) -> Vec<usize> {
        match self.iof {
            Some(iof) => (1..=self.iters).filter(|i| i.is_multiple_of(iof)).collect(),
            None => Vec::new(),
        }
    }

    /// A fresh path for the checkpoint of iteration `iter`: unique per call, so that runs in
    /// parallel (tests, several runtimes) never share a file.
    pub fn new_checkpoint_path(&self, iter: usize) -> PathBuf {
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.dir
            .join(format!("umt-heat-{}-{seq}-{iter}.ckpt", std::process::id()))
    }

    /// Bytes one checkpoint writes.
    pub fn checkpoint_bytes(&self) -> u64 {
        (self.n * self.n * 8) as u64
    }
}

/// The edges of a block's neighbours that its update reads.
pub(crate) struct Halo {
    pub(crate) up: Vec<f64>,
    pub(crate) down: Vec<f64>,
    pub(crate) left: Vec<f64>,
    pub(crate) right: Vec<f64>,
}

/// Updates one block in place (row-major), given its neighbours' facing edges: the up and left
/// ones already hold this iteration's values, the down and right ones the previous iteration's,
/// exactly as in a sequential sweep.
pub(crate) fn update_block(cells: &mut [f64], b: usize, h: &Halo) {
    for i in 0..b {
        for j in 0..b {
            let up = if i == 0 {
                h.up[j]
            } else {
                cells[(i - 1) * b + j]
            };
            let down = if i + 1 == b {
                h.down[j]
            } else {
                cells[(i + 1) * b + j]
            };
            let left = if j == 0 {
                h.left[i]
            } else {
                cells[i * b + j - 1]
            };
            let right = if j + 1 == b {
                h.right[i]
            } else {
                cells[i * b + j + 1]
            };
            cells[i * b + j] = 0.25 * (up + down + left + right);
        }
    }
}

/// The grid as blocks, each behind its own lock. The dependencies already order every access,
/// so the locks never wait; they make the sharing safe without `unsafe`. Each block lives in
/// an aligned buffer, so that a checkpoint can write it with `O_DIRECT` as it is.
#[derive(Debug)]
pub struct Grid {
    nb: usize,
    b: usize,
    blocks: Vec<RwLock<AlignedBuf>>,
}

impl Grid {
    /// A grid at 0.0 everywhere (the edges are implicit).
    pub fn new(p: &HeatParams) -> Grid {
        let (nb, b) = (p.blocks(), p.block);
        Grid {
            nb,
            b,
            blocks: (0..nb * nb)
                .map(|_| RwLock::new(AlignedBuf::zeroed_f64s(b * b)))
                .collect(),
        }
    }

    fn read(&self, bi: usize, bj: usize) -> std::sync::RwLockReadGuard<'_, AlignedBuf> {
        self.blocks[bi * self.nb + bj]
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Gathers the halo of block `(bi, bj)` from its neighbours (or the fixed edges).
    fn halo(&self, bi: usize, bj: usize) -> Halo {
        let (b, nb) = (self.b, self.nb);
        let row = |bi: usize, bj: usize, i: usize| {
            self.read(bi, bj).as_f64s()[i * b..(i + 1) * b].to_vec()
        };
        let col = |bi: usize, bj: usize, j: usize| {
            let blk = self.read(bi, bj);
            let blk = blk.as_f64s();
            (0..b).map(|i| blk[i * b + j]).collect()
        };
        Halo {
            up: if bi == 0 {
                vec![TOP; b]
            } else {
                row(bi - 1, bj, b - 1)
            },
            down: if bi + 1 == nb {
                vec![0.0; b]
            } else {
                row(bi + 1, bj, 0)
            },
            left: if bj == 0 {
                vec![0.0; b]
            } else {
                col(bi, bj - 1, b - 1)
            },
            right: if bj + 1 == nb {
                vec![0.0; b]
            } else {
                col(bi, bj + 1, 0)
            },
        }
    }

    /// One Gauss-Seidel update of block `(bi, bj)`.
    pub fn update(&self, bi: usize, bj: usize) {
        let halo = self.halo(bi, bj);
        let mut cells = self.blocks[bi * self.nb + bj]
            .write()
            .unwrap_or_else(|e| e.into_inner());
        update_block(cells.as_f64s_mut(), self.b, &halo);
    }

    /// The whole grid, row-major.
    pub fn to_matrix(&self) -> Vec<f64> {
        let (b, nb) = (self.b, self.nb);
        let n = b * nb;
        let mut m = vec![0.0; n * n];
        for bi in 0..nb {
            for bj in 0..nb {
                let blk = self.read(bi, bj);
                let blk = blk.as_f64s();
                for i in 0..b {
                    let at = (bi * b + i) * n + bj * b;
                    m[at..at + b].copy_from_slice(&blk[i * b..(i + 1) * b]);
                }
            }
        }
        m
    }

    /// Byte offset of block `(bi, bj)` in a checkpoint file (block-major layout).
    fn offset(&self, bi: usize, bj: usize) -> u64 {
        ((bi * self.nb + bj) * self.b * self.b * 8) as u64
    }

    /// A staged copy of block `(bi, bj)` and its byte offset in a checkpoint file, for a
    /// write that may outlive the task that starts it.
    pub(crate) fn block_copy(&self, bi: usize, bj: usize) -> (AlignedBuf, u64) {
        let copy = AlignedBuf::from_f64s(self.read(bi, bj).as_f64s());
        (copy, self.offset(bi, bj))
    }

    /// Writes block `(bi, bj)` at its place in a checkpoint file, straight from the grid:
    /// the caller must keep the block unchanged until this returns (a read access does). With
    /// `waiting`, through umt-rt's scheduler-centric wait ([`umt_rt::io`]) instead of a
    /// blocking `pwrite`.
    fn write_block(
        &self,
        bi: usize,
        bj: usize,
        file: &File,
        path: &Path,
        waiting: bool,
    ) -> Result<(), BenchError> {
        let (block, offset) = (self.read(bi, bj), self.offset(bi, bj));
        if waiting {
            umt_rt::io::write_all_at(file, block.as_slice(), offset)
                .map_err(|e| BenchError::wait("writing", path, e))
        } else {
            crate::io::write_bytes(file, path, offset, block.as_slice())
        }
    }
}

/// The grid after `iters` iterations of a sequential blocked sweep: the reference.
pub fn sequential(p: &HeatParams, iters: usize) -> Vec<f64> {
    let grid = Grid::new(p);
    for _ in 0..iters {
        for bi in 0..p.blocks() {
            for bj in 0..p.blocks() {
                grid.update(bi, bj);
            }
        }
    }
    grid.to_matrix()
}

/// Converts a block-major checkpoint (as written) to a row-major matrix.
pub fn checkpoint_to_matrix(p: &HeatParams, block_major: &[f64]) -> Vec<f64> {
    let (b, nb, n) = (p.block, p.blocks(), p.n);
    let mut m = vec![0.0; n * n];
    for blk in 0..nb * nb {
        let (bi, bj) = (blk / nb, blk % nb);
        for i in 0..b {
            let src = blk * b * b + i * b;
            let dst = (bi * b + i) * n + bj * b;
            m[dst..dst + b].copy_from_slice(&block_major[src..src + b]);
        }
    }
    m
}

/// The accesses of block `(bi, bj)`'s update: itself written, its four neighbours read.
pub(crate) fn block_deps(bi: usize, bj: usize, nb: usize) -> Vec<Access> {
    let mut deps = vec![Access::write((bi, bj))];
    if bi > 0 {
        deps.push(Access::read((bi - 1, bj)));
    }
    if bi + 1 < nb {
        deps.push(Access::read((bi + 1, bj)));
    }
    if bj > 0 {
        deps.push(Access::read((bi, bj - 1)));
    }
    if bj + 1 < nb {
        deps.push(Access::read((bi, bj + 1)));
    }
    deps
}

/// A checkpoint file, created for writing: (iteration, path, file). The path removes the
/// file when dropped.
pub(crate) type Checkpoint = (usize, TempPath, File);

/// Creates the checkpoint files of a run.
pub(crate) fn create_checkpoints(p: &HeatParams) -> Result<Vec<Checkpoint>, BenchError> {
    p.checkpoint_iters()
        .into_iter()
        .map(|it| {
            let (path, file) = TempPath::create(p.new_checkpoint_path(it), |path| {
                create_file(path, p.io, p.checkpoint_bytes())
            })?;
            Ok((it, path, file))
        })
        .collect()
}

/// Ends a run: the first error any task reported, else what the run produced.
pub(crate) fn finish(
    elapsed: Duration,
    grid: &Grid,
    p: &HeatParams,
    files: Vec<Checkpoint>,
    errors: &Errors,
) -> Result<HeatRun, BenchError> {
    errors.first()?;
    Ok(HeatRun {
        elapsed,
        matrix: grid.to_matrix(),
        bytes_written: p.checkpoint_bytes() * files.len() as u64,
        checkpoints: files.into_iter().map(|(it, path, _)| (it, path)).collect(),
    })
}

/// What a run produced.
#[derive(Debug)]
pub struct HeatRun {
    /// Wall time of the whole run (computation and checkpoints).
    pub elapsed: Duration,
    /// The final grid, row-major.
    pub matrix: Vec<f64>,
    /// Checkpoint files written, with their iteration. Each is removed when its path is
    /// dropped.
    pub checkpoints: Vec<(usize, TempPath)>,
    /// Bytes written to checkpoints.
    pub bytes_written: u64,
}

impl HeatRun {
    /// Cells updated per second (the figure of merit).
    pub fn cells_per_second(&self, p: &HeatParams) -> f64 {
        (p.n * p.n * p.iters) as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs heat diffusion on `rt`: one task per block per iteration, and at each checkpoint one
/// task per block that writes it in place, straight from the grid.
pub fn run(rt: &Runtime, p: &HeatParams) -> Result<HeatRun, BenchError> {
    run_with(rt, p, Checkpoints::InPlace, || Ok(()))
}

/// [`run`], with each checkpoint block copied out by one task and written from the copy by a
/// second (blocking) one, as the io-uring runner does: the block's next update waits for the
/// copy, not for the disk, at the price of the copy. On 2 cores, where heat is compute-bound,
/// the copy costs more than it frees (measured about 5 % slower than [`run`]).
pub fn run_staged(rt: &Runtime, p: &HeatParams) -> Result<HeatRun, BenchError> {
    let write =
        |file: &File, path: &Path, offset, buf| crate::io::write_buf(file, path, offset, buf);
    run_with(rt, p, Checkpoints::Staged(&write), || Ok(()))
}

/// [`run`], with each checkpoint block written in place through umt-rt's scheduler-centric
/// wait ([`umt_rt::io`]) instead of a blocking `pwrite`: the umt-io runner.
pub fn run_io(rt: &Runtime, p: &HeatParams) -> Result<HeatRun, BenchError> {
    run_with(rt, p, Checkpoints::InPlaceWaiting, || Ok(()))
}

/// A checkpoint writer for staged blocks: `(file, path, byte offset, staged block)`.
pub(crate) type WriteFn<'a> =
    dyn Fn(&File, &Path, u64, AlignedBuf) -> Result<(), BenchError> + Sync + 'a;

/// How a run writes its checkpoints.
pub(crate) enum Checkpoints<'a> {
    /// The paper's scheme: a task reading the block writes it straight from the grid, so the
    /// block's next update waits for the write. A runtime that keeps its cores busy while a
    /// worker blocks needs nothing more, and pays no copy.
    InPlace,
    /// As `InPlace`, the write through [`umt_rt::io`]: the writing task's worker runs other
    /// tasks while the write is in flight, and blocks only when nothing else can run.
    InPlaceWaiting,
    /// A task copies the block out (holding it only for the copy), and a second task hands the
    /// copy to the writer, which may return before the write completes (io_uring does).
    Staged(&'a WriteFn<'a>),
}

/// [`run`] with another way to write checkpoints, and `drain`, called after the last task and
/// timed, to wait for writes still in flight.
pub(crate) fn run_with(
    rt: &Runtime,
    p: &HeatParams,
    checkpoints: Checkpoints<'_>,
    drain: impl FnOnce() -> Result<(), BenchError>,
) -> Result<HeatRun, BenchError> {
    p.validate()?;
    let grid = Grid::new(p);
    let nb = p.blocks();
    let files = create_checkpoints(p)?;
    let errors = Errors::default();
    let staging: Vec<Staged> = match checkpoints {
        Checkpoints::Staged(_) => (0..nb * nb).map(|_| std::sync::Mutex::new(None)).collect(),
        Checkpoints::InPlace | Checkpoints::InPlaceWaiting => Vec::new(),
    };
    let start = Instant::now();
    rt.scope(|s| {
        let (grid, errors, staging, checkpoints) = (&grid, &errors, &staging, &checkpoints);
        let mut next_ckpt = files.iter().peekable();
        for it in 1..=p.iters {
            for bi in 0..nb {
                for bj in 0..nb {
                    s.spawn_with(block_deps(bi, bj, nb), move |_| grid.update(bi, bj));
                }
            }
            let Some((_, path, file)) = next_ckpt.next_if(|(ci, _, _)| *ci == it) else {
                continue;
            };
            for bi in 0..nb {
                for bj in 0..nb {
                    match checkpoints {
                        Checkpoints::InPlace => {
                            s.spawn_with([Access::read((bi, bj))], move |_| {
                                errors.check(grid.write_block(bi, bj, file, path, false));
                            });
                        }
                        Checkpoints::InPlaceWaiting => {
                            s.spawn_with([Access::read((bi, bj))], move |_| {
                                errors.check(grid.write_block(bi, bj, file, path, true));
                            });
                        }
                        Checkpoints::Staged(write) => {
                            let slot = &staging[bi * nb + bj];
                            let key = (STAGE, bi, bj);
                            s.spawn_with([Access::read((bi, bj)), Access::write(key)], move |_| {
                                *slot.lock().unwrap_or_else(|e| e.into_inner()) =
                                    Some(grid.block_copy(bi, bj));
                            });
                            s.spawn_with([Access::read(key)], move |_| {
                                let staged = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
                                if let Some((data, offset)) = staged {
                                    errors.check(write(file, path, offset, data));
                                }
                            });
                        }
                    }
                }
            }
        }
    });
    let drained = drain();
    let elapsed = start.elapsed();
    drained?;
    finish(elapsed, &grid, p, files, &errors)
}

/// Writes the checkpoints of `p` without computing (the I/O-only run of the overlap bound):
/// the same files, I/O mode and write calls as [`run`], of the initial grid.
pub fn io_only(rt: &Runtime, p: &HeatParams) -> Result<HeatRun, BenchError> {
    p.validate()?;
    let grid = Grid::new(p);
    let nb = p.blocks();
    let files = create_checkpoints(p)?;
    let errors = Errors::default();
    let start = Instant::now();
    rt.scope(|s| {
        let (grid, errors) = (&grid, &errors);
        for (_, path, file) in &files {
            for bi in 0..nb {
                for bj in 0..nb {
                    s.spawn(move |_| errors.check(grid.write_block(bi, bj, file, path, false)));
                }
            }
        }
    });
    let elapsed = start.elapsed();
    finish(elapsed, &grid, p, files, &errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(n: usize, block: usize, iters: usize, iof: Option<usize>) -> HeatParams {
        let (dir, io) = crate::testutil::dir_and_mode();
        HeatParams {
            n,
            block,
            iters,
            iof,
            dir,
            io,
        }
    }

    #[test]
    fn bad_parameters_are_explained() {
        let p = params(100, 32, 1, None);
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .contains("does not divide")
        );
        let p = params(64, 32, 1, Some(0));
        assert!(p.validate().unwrap_err().to_string().contains("iof"));
        let p = params(64, 32, 0, None);
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .contains("iters must be")
        );
        let p = params(64, 32, 4, Some(5));
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("no checkpoint would be written"), "{e}");
        let p = params(1 << 40, 1 << 20, 1, None);
        let e = p.validate().unwrap_err().to_string();
        assert!(e.contains("too large"), "{e}");
        let mut p = params(60, 20, 1, None);
        p.io = IoMode::Direct;
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .contains("multiple of 32")
        );
    }

    #[test]
    fn heat_flows_from_the_top_edge() {
        let p = params(64, 32, 5, None);
        let m = sequential(&p, 5);
        assert!(m[0] > m[63 * 64], "top row warmer than bottom row");
        assert!(m.iter().all(|&x| (0.0..=TOP).contains(&x)));
    }

    /// The umt-io runner: checkpoints written through `umt_rt::io` on a monitored runtime
    /// (or the blocking fallback without one) are bit-identical and read back.
    #[test]
    fn waiting_run_is_bit_identical_and_checkpoints_read_back() {
        let rt = Runtime::new().unwrap();
        crate::testutil::check_heat_port(|p| run_io(&rt, p));
        assert!(rt.io_stats().waits + rt.io_stats().fallback_waits > 0);
    }

    #[test]
    fn staged_run_is_bit_identical() {
        let rt = Runtime::new().unwrap();
        crate::testutil::check_heat_port(|p| run_staged(&rt, p));
    }

    #[test]
    fn parallel_run_is_bit_identical_and_checkpoints_read_back() {
        let rt = Runtime::new().unwrap();
        let p = params(128, 32, 6, Some(2));
        let out = run(&rt, &p).unwrap();
        let reference = sequential(&p, p.iters);
        assert!(
            out.matrix
                .iter()
                .zip(&reference)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        assert_eq!(out.checkpoints.len(), 3);
        for (it, path) in &out.checkpoints {
            let raw = crate::io::read_f64s(path, 0, p.n * p.n).unwrap();
            let m = checkpoint_to_matrix(&p, &raw);
            let want = sequential(&p, *it);
            assert!(
                m.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "checkpoint of iteration {it} differs from the grid at that iteration"
            );
        }
        assert_eq!(out.bytes_written, 3 * 128 * 128 * 8);
    }
}
