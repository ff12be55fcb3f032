//! The workloads on tokio, written the way a tokio user would: computation as tasks on the
//! multi-thread runtime (one worker per core), the blocking file I/O in `spawn_blocking`.
//!
//! Same kernels, same files, same results as the umt-rt versions (bit-identical).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::task::JoinSet;

use crate::fwi::{self, FwiParams, FwiRun, State};
use crate::heat::{Grid, HeatParams, HeatRun};
use crate::io::{AlignedBuf, BenchError, create_file, read_f64s_into, write_buf};

/// A multi-thread runtime with `workers` workers.
pub fn runtime(workers: usize) -> Result<tokio::runtime::Runtime, BenchError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .build()
        .map_err(|e| BenchError::Runtime(format!("tokio: {e}")))
}

type Errors = Arc<Mutex<Vec<BenchError>>>;

fn push(errors: &Errors, e: BenchError) {
    errors.lock().unwrap_or_else(|e| e.into_inner()).push(e);
}

fn first_error(errors: Errors) -> Result<(), BenchError> {
    match errors.lock().unwrap_or_else(|e| e.into_inner()).pop() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

async fn drain(set: &mut JoinSet<()>, errors: &Errors) {
    while let Some(r) = set.join_next().await {
        if let Err(e) = r {
            push(errors, BenchError::Runtime(format!("tokio task: {e}")));
        }
    }
}

/// Heat diffusion with checkpoints on `rt`.
pub fn heat(rt: &tokio::runtime::Runtime, p: &HeatParams) -> Result<HeatRun, BenchError> {
    p.validate()?;
    let grid = Arc::new(Grid::new(p));
    let nb = p.blocks();
    let files = Arc::new(crate::heat::create_checkpoints(p)?);
    let errors: Errors = Arc::default();
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
                            if let Err(e) = write_buf(file, path, offset, data) {
                                push(&errors, e);
                            }
                        });
                    }
                }
            }
        }
        drain(&mut io, &errors).await;
    });
    let elapsed = start.elapsed();
    first_error(errors)?;
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
    let path: Arc<PathBuf> = Arc::new(p.new_snapshot_path());
    let file = Arc::new(create_file(&path, p.io, p.snapshot_bytes())?);
    let snaps = p.snapshot_steps();
    let ny = p.ny;
    let slice_bytes = (p.slice_cells() * 8) as u64;
    let sums = Arc::new(Mutex::new(vec![0u64; snaps.len() * ny]));
    let errors: Errors = Arc::default();
    let verified = Arc::new(AtomicUsize::new(0));
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
            if let Some(k) = snaps.iter().position(|&x| x == t) {
                for y in 0..ny {
                    let buf = AlignedBuf::from_f64s(&st.v.read(y));
                    let (file, path, sums, errors) =
                        (file.clone(), path.clone(), sums.clone(), errors.clone());
                    io.spawn_blocking(move || {
                        let at = (k * ny + y) as u64 * slice_bytes;
                        let write = |b| write_buf(&file, &path, at, b);
                        if let Err(e) = fwi::write_snapshot(&sums, k * ny + y, buf, write) {
                            push(&errors, e);
                        }
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
            if let Some(k) = snaps.iter().position(|&x| x == t) {
                for y in 0..ny {
                    let (st, file, path, sums, errors, verified, cells) = (
                        st.clone(),
                        file.clone(),
                        path.clone(),
                        sums.clone(),
                        errors.clone(),
                        verified.clone(),
                        pa.slice_cells(),
                    );
                    io.spawn_blocking(move || {
                        let mut snap = vec![0.0; cells];
                        let at = (k * ny + y) as u64 * slice_bytes;
                        if let Err(e) = read_f64s_into(&file, &path, at, &mut snap) {
                            return push(&errors, e);
                        }
                        let want = sums.lock().unwrap_or_else(|e| e.into_inner())[k * ny + y];
                        if let Err(e) = fwi::verify(&snap, want, t, y) {
                            return push(&errors, e);
                        }
                        verified.fetch_add(1, Ordering::Relaxed);
                        fwi::image(&st, y, &snap);
                    });
                }
                // The next adjoint step overwrites the adjoint velocity the imaging reads.
                drain(&mut io, &errors).await;
            }
        }
    });
    let elapsed = start.elapsed();
    let _ = std::fs::remove_file(&*path);
    first_error(errors)?;
    Ok(FwiRun {
        elapsed,
        velocity: st.v.to_vec(),
        stress: st.s.to_vec(),
        image: st.image.to_vec(),
        snapshots_verified: verified.load(Ordering::Relaxed),
        io_bytes: 2 * p.snapshot_bytes(),
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
