//! The workloads on tokio, written the way a tokio user would: computation as tasks on the
//! multi-thread runtime (one worker per core), the blocking file I/O in `spawn_blocking`.
//!
//! Same kernels, same files, same results as the umt-rt versions (bit-identical). It does not
//! run across MPI ranks.

use std::sync::Arc;
use std::time::Instant;

use tokio::task::JoinSet;

use crate::error::{BenchError, Errors};
use crate::fwi::{self, FwiParams, FwiRun, Snapshots, State};
use crate::heat::{Grid, HeatParams, HeatRun};
use crate::io::{AlignedBuf, TempPath, create_file, read_f64s_into, write_buf};
use crate::port::{Engine, Port, UmtOptions, cores};
use crate::scan::{self, FileSet, Front, ScanParams, ScanRun};

/// tokio's multi-thread runtime, one worker per core, for the computation; `spawn_blocking`
/// for the I/O.
#[derive(Debug)]
pub struct TokioPort {
    /// The runner's name.
    pub name: &'static str,
}

impl Port for TokioPort {
    fn name(&self) -> &'static str {
        self.name
    }

    fn engine(&self, _: &UmtOptions) -> Result<Box<dyn Engine>, BenchError> {
        Ok(Box::new(TokioEngine(runtime(cores())?)))
    }
}

/// A runtime of a [`TokioPort`].
#[derive(Debug)]
struct TokioEngine(tokio::runtime::Runtime);

impl Engine for TokioEngine {
    fn heat(&self, p: &HeatParams, _: &UmtOptions) -> Result<HeatRun, BenchError> {
        heat(&self.0, p)
    }

    fn fwi(&self, p: &FwiParams) -> Result<FwiRun, BenchError> {
        fwi(&self.0, p)
    }

    fn scan(&self, set: &FileSet, p: &ScanParams, _: Front) -> Result<ScanRun, BenchError> {
        scan(&self.0, set, p)
    }
}

/// A multi-thread runtime with `workers` workers.
pub fn runtime(workers: usize) -> Result<tokio::runtime::Runtime, BenchError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .build()
        .map_err(|e| BenchError::Runtime(format!("tokio: {e}")))
}

/// Waits for every task of `set`; a task that panicked or was cancelled is an error.
async fn drain(set: &mut JoinSet<()>, errors: &Errors) {
    while let Some(r) = set.join_next().await {
        if let Err(e) = r {
            errors.push(BenchError::Runtime(format!("tokio task: {e}")));
        }
    }
}

/// Heat diffusion with checkpoints on `rt`.
pub fn heat(rt: &tokio::runtime::Runtime, p: &HeatParams) -> Result<HeatRun, BenchError> {
    p.validate()?;
    let grid = Arc::new(Grid::new(p));
    let nb = p.blocks();
    let files = Arc::new(crate::heat::create_checkpoints(p)?);
    let errors = Arc::new(Errors::default());
    let start = Instant::now();
    rt.block_on(async {
        let mut io = JoinSet::new();
        for it in 1..=p.iters {
            for d in 0..2 * nb - 1 {
                let mut diag = JoinSet::new();
                for bi in d.saturating_sub(nb - 1)..=d.min(nb - 1) {
                    let g = grid.clone();
                    diag.spawn(async move { g.update(bi, d - bi) });
                }
                drain(&mut diag, &errors).await;
            }
            if let Some(k) = files.iter().position(|(ci, _, _)| *ci == it) {
                for bi in 0..nb {
                    for bj in 0..nb {
                        let (data, offset) = grid.block_copy(bi, bj);
                        let (files, errors) = (files.clone(), errors.clone());
                        io.spawn_blocking(move || {
                            let (_, path, file) = &files[k];
                            errors.check(write_buf(file, path, offset, data));
                        });
                    }
                }
            }
        }
        drain(&mut io, &errors).await;
    });
    let elapsed = start.elapsed();
    errors.first()?;
    let files = Arc::try_unwrap(files)
        .map_err(|_| BenchError::Runtime("tokio: a checkpoint task outlived the run".into()))?;
    Ok(HeatRun {
        elapsed,
        matrix: grid.to_matrix(),
        bytes_written: p.checkpoint_bytes() * files.len() as u64,
        checkpoints: files.into_iter().map(|(it, path, _)| (it, path)).collect(),
    })
}

/// The FWI mock-up on `rt`.
pub fn fwi(rt: &tokio::runtime::Runtime, p: &FwiParams) -> Result<FwiRun, BenchError> {
    p.validate()?;
    let st = Arc::new(State::new(p));
    let pa = Arc::new(p.clone());
    let (path, file) = TempPath::create(p.new_snapshot_path(), |path| {
        create_file(path, p.io, p.snapshot_bytes())
    })?;
    let (path, file) = (Arc::new(path), Arc::new(file));
    let snaps = Arc::new(Snapshots::new(p));
    let ny = p.ny;
    let errors = Arc::new(Errors::default());
    let start = Instant::now();
    rt.block_on(async {
        // One phase: `f(y)` for every slice, in parallel, then wait.
        async fn phase(ny: usize, errors: &Errors, f: impl Fn(usize) + Send + Sync + 'static) {
            let f = Arc::new(f);
            let mut set = JoinSet::new();
            for y in 0..ny {
                let f = f.clone();
                set.spawn(async move { f(y) });
            }
            drain(&mut set, errors).await;
        }
        let mut io = JoinSet::new();
        for t in 1..=pa.steps {
            let (s1, p1) = (st.clone(), pa.clone());
            phase(ny, &errors, move |y| fwi::update(&s1.v, &s1.s, y, &p1)).await;
            let (s1, p1) = (st.clone(), pa.clone());
            phase(ny, &errors, move |y| fwi::update(&s1.s, &s1.v, y, &p1)).await;
            if let Some(k) = snaps.at_step(t) {
                for y in 0..ny {
                    let buf = AlignedBuf::from_f64s(&st.v.read(y));
                    let (file, path) = (file.clone(), path.clone());
                    let (snaps, errors) = (snaps.clone(), errors.clone());
                    io.spawn_blocking(move || {
                        let write = |at, b| write_buf(&file, &path, at, b);
                        errors.check(snaps.write(k, y, buf, write));
                    });
                }
            }
        }
        drain(&mut io, &errors).await;
        for t in (1..=pa.steps).rev() {
            let (s1, p1) = (st.clone(), pa.clone());
            phase(ny, &errors, move |y| fwi::update(&s1.av, &s1.as_, y, &p1)).await;
            let (s1, p1) = (st.clone(), pa.clone());
            phase(ny, &errors, move |y| fwi::update(&s1.as_, &s1.av, y, &p1)).await;
            if let Some(k) = snaps.at_step(t) {
                for y in 0..ny {
                    let (st, file, path) = (st.clone(), file.clone(), path.clone());
                    let (snaps, errors) = (snaps.clone(), errors.clone());
                    io.spawn_blocking(move || {
                        let mut data = vec![0.0; snaps.cells()];
                        let done = read_f64s_into(&file, &path, snaps.offset(k, y), &mut data)
                            .and_then(|()| snaps.check_and_image(&st, (k, y, t), &data, true));
                        errors.check(done);
                    });
                }
                // The next adjoint step overwrites the adjoint velocity the imaging reads.
                drain(&mut io, &errors).await;
            }
        }
    });
    let elapsed = start.elapsed();
    fwi::finish(elapsed, &st, &snaps, 2 * p.snapshot_bytes(), &errors)
}

/// One scan of `set` on `rt`. tokio has no parallel loop: both front ends are a blocking task
/// per file, as a tokio user writes blocking reads (`spawn_blocking`), awaited together.
pub fn scan(
    rt: &tokio::runtime::Runtime,
    set: &FileSet,
    p: &ScanParams,
) -> Result<ScanRun, BenchError> {
    let rounds = p.rounds;
    scan::timed(set, p, || {
        rt.block_on(async {
            let mut handles = Vec::with_capacity(set.paths().len());
            for (i, path) in set.paths().iter().enumerate() {
                let path = path.clone();
                handles.push(tokio::task::spawn_blocking(move || {
                    scan::read_and_hash(&path, rounds).map(|h| scan::weigh(i, h))
                }));
            }
            let mut d = 0u64;
            for h in handles {
                let h = h
                    .await
                    .map_err(|e| BenchError::Runtime(format!("tokio: {e}")))??;
                d = d.wrapping_add(h);
            }
            Ok(d)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{check_fwi_port, check_heat_port};

    #[test]
    fn tokio_heat_is_bit_identical() {
        check_heat_port(|p| heat(&runtime(2)?, p));
    }

    #[test]
    fn tokio_fwi_is_bit_identical() {
        check_fwi_port(|p| fwi(&runtime(2)?, p));
    }
}
