//! The workloads on rayon, written the way a rayon user would: the heat wavefront as one
//! parallel loop per anti-diagonal, FWI as one parallel loop per phase, and the I/O as
//! `scope.spawn`ed tasks on copies of the data, which block the pool threads that run them.
//!
//! Same kernels, same files, same results as the umt-rt versions (bit-identical). The scan
//! is the same program with rayon's prelude. Across ranks, the loops' tasks block in MPI.

use std::time::Instant;

use rayon::prelude::*;

use crate::error::{BenchError, Errors};
use crate::fwi::{self, FwiParams, FwiRun, Snapshots, State};
use crate::heat::{Grid, HeatParams, HeatRun};
use crate::io::{AlignedBuf, TempPath, create_file, read_f64s_into, write_buf};
use crate::port::{Comm, Engine, Port, RankEngine, UmtOptions, cores};
use crate::scan::{self, FileSet, Front, ScanParams, ScanRun};

/// rayon with `per_core` threads per core of this process (more than one: the usual cure for
/// blocking I/O, plain oversubscription).
#[derive(Debug)]
pub struct RayonPort {
    /// The runner's name.
    pub name: &'static str,
    /// Threads per core.
    pub per_core: usize,
}

impl Port for RayonPort {
    fn name(&self) -> &'static str {
        self.name
    }

    fn engine(&self, _: &UmtOptions) -> Result<Box<dyn Engine>, BenchError> {
        Ok(Box::new(RayonEngine(pool(self.per_core * cores())?)))
    }

    fn comm(&self) -> Option<Comm> {
        Some(Comm::Blocking)
    }
}

/// A pool of a [`RayonPort`].
#[derive(Debug)]
struct RayonEngine(rayon::ThreadPool);

impl Engine for RayonEngine {
    fn heat(&self, p: &HeatParams, _: &UmtOptions) -> Result<HeatRun, BenchError> {
        heat(&self.0, p)
    }

    fn fwi(&self, p: &FwiParams) -> Result<FwiRun, BenchError> {
        fwi(&self.0, p)
    }

    fn scan(&self, set: &FileSet, p: &ScanParams, front: Front) -> Result<ScanRun, BenchError> {
        scan(&self.0, set, p, front)
    }

    fn rank(&self) -> Option<RankEngine<'_>> {
        Some(RankEngine::Rayon(&self.0))
    }
}

/// A pool of `threads` threads.
pub fn pool(threads: usize) -> Result<rayon::ThreadPool, BenchError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("rayon-{i}"))
        .build()
        .map_err(|e| BenchError::Runtime(format!("rayon: {e}")))
}

/// Heat diffusion with checkpoints on `pool`.
pub fn heat(pool: &rayon::ThreadPool, p: &HeatParams) -> Result<HeatRun, BenchError> {
    p.validate()?;
    let grid = Grid::new(p);
    let nb = p.blocks();
    let files = crate::heat::create_checkpoints(p)?;
    let errors = Errors::default();
    let start = Instant::now();
    pool.install(|| {
        rayon::scope(|s| {
            let errors = &errors;
            for it in 1..=p.iters {
                // Blocks on one anti-diagonal are independent; diagonals go in order, so each
                // block sees its up/left neighbours new and its down/right ones old.
                for d in 0..2 * nb - 1 {
                    let lo = d.saturating_sub(nb - 1);
                    (lo..=d.min(nb - 1))
                        .into_par_iter()
                        .for_each(|bi| grid.update(bi, d - bi));
                }
                if let Some((_, path, file)) = files.iter().find(|(ci, _, _)| *ci == it) {
                    for bi in 0..nb {
                        for bj in 0..nb {
                            let (data, offset) = grid.block_copy(bi, bj);
                            s.spawn(move |_| errors.check(write_buf(file, path, offset, data)));
                        }
                    }
                }
            }
        })
    });
    let elapsed = start.elapsed();
    crate::heat::finish(elapsed, &grid, p, files, &errors)
}

/// The FWI mock-up on `pool`: snapshots written by spawned tasks during the forward phase (the
/// phase ends when they are done), read back by the parallel imaging loop.
pub fn fwi(pool: &rayon::ThreadPool, p: &FwiParams) -> Result<FwiRun, BenchError> {
    p.validate()?;
    let st = State::new(p);
    let (path, file) = TempPath::create(p.new_snapshot_path(), |path| {
        create_file(path, p.io, p.snapshot_bytes())
    })?;
    let snaps = Snapshots::new(p);
    let ny = p.ny;
    let errors = Errors::default();
    let start = Instant::now();
    pool.install(|| {
        rayon::scope(|s| {
            let (st, snaps, errors, file, path) = (&st, &snaps, &errors, &file, &path);
            for t in 1..=p.steps {
                (0..ny)
                    .into_par_iter()
                    .for_each(|y| fwi::update(&st.v, &st.s, y, p));
                (0..ny)
                    .into_par_iter()
                    .for_each(|y| fwi::update(&st.s, &st.v, y, p));
                if let Some(k) = snaps.at_step(t) {
                    for y in 0..ny {
                        let buf = AlignedBuf::from_f64s(&st.v.read(y));
                        s.spawn(move |_| {
                            let write = |at, b| write_buf(file, path, at, b);
                            errors.check(snaps.write(k, y, buf, write));
                        });
                    }
                }
            }
        });
        for t in (1..=p.steps).rev() {
            (0..ny)
                .into_par_iter()
                .for_each(|y| fwi::update(&st.av, &st.as_, y, p));
            (0..ny)
                .into_par_iter()
                .for_each(|y| fwi::update(&st.as_, &st.av, y, p));
            if let Some(k) = snaps.at_step(t) {
                (0..ny).into_par_iter().for_each(|y| {
                    let mut data = vec![0.0; snaps.cells()];
                    let done = read_f64s_into(&file, &path, snaps.offset(k, y), &mut data)
                        .and_then(|()| snaps.check_and_image(&st, (k, y, t), &data, true));
                    errors.check(done);
                });
            }
        }
    });
    let elapsed = start.elapsed();
    fwi::finish(elapsed, &st, &snaps, 2 * p.snapshot_bytes(), &errors)
}

/// One scan of `set` written as `front` on `pool`: rayon's parallel loop or a task per file.
pub fn scan(
    pool: &rayon::ThreadPool,
    set: &FileSet,
    p: &ScanParams,
    front: Front,
) -> Result<ScanRun, BenchError> {
    scan::each_file(set, p, scan::read_and_hash, |n, one| match front {
        Front::Iter => pool.install(|| (0..n).into_par_iter().for_each(one)),
        Front::Tasks => pool.scope(|s| {
            for i in 0..n {
                s.spawn(move |_| one(i));
            }
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{check_fwi_port, check_heat_port};

    #[test]
    fn rayon_heat_is_bit_identical() {
        check_heat_port(|p| heat(&pool(3)?, p));
    }

    #[test]
    fn rayon_fwi_is_bit_identical() {
        check_fwi_port(|p| fwi(&pool(3)?, p));
    }
}
