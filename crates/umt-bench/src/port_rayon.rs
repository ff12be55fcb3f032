//! The workloads on rayon, written the way a rayon user would: the heat wavefront as one
//! parallel loop per anti-diagonal, FWI as one parallel loop per phase, and the I/O as
//! `scope.spawn`ed tasks on copies of the data, which block the pool threads that run them.
//!
//! Same kernels, same files, same results as the umt-rt versions (bit-identical).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rayon::prelude::*;

use crate::fwi::{self, FwiParams, FwiRun, State, checksum};
use crate::heat::{Grid, HeatParams, HeatRun};
use crate::io::{BenchError, create_file, read_f64s_into, write_f64s};

/// A pool of `threads` threads.
pub fn pool(threads: usize) -> Result<rayon::ThreadPool, BenchError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("rayon-{i}"))
        .build()
        .map_err(|e| BenchError::Runtime(format!("rayon: {e}")))
}

fn first_error(errors: Mutex<Vec<BenchError>>) -> Result<(), BenchError> {
    match errors.into_inner().unwrap_or_else(|e| e.into_inner()).pop() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Heat diffusion with checkpoints on `pool`.
pub fn heat(pool: &rayon::ThreadPool, p: &HeatParams) -> Result<HeatRun, BenchError> {
    p.validate()?;
    let grid = Grid::new(p);
    let nb = p.blocks();
    let files = p
        .checkpoint_iters()
        .into_iter()
        .map(|it| {
            let path = p.new_checkpoint_path(it);
            create_file(&path, p.io).map(|f| (it, path, f))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let errors = Mutex::new(Vec::new());
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
                            s.spawn(move |_| {
                                if let Err(e) = write_f64s(file, path, offset, &data) {
                                    errors.lock().unwrap_or_else(|e| e.into_inner()).push(e);
                                }
                            });
                        }
                    }
                }
            }
        })
    });
    let elapsed = start.elapsed();
    first_error(errors)?;
    Ok(HeatRun {
        elapsed,
        matrix: grid.to_matrix(),
        bytes_written: p.checkpoint_bytes() * files.len() as u64,
        checkpoints: files.into_iter().map(|(it, path, _)| (it, path)).collect(),
    })
}

/// The FWI mock-up on `pool`: snapshots written by spawned tasks during the forward phase (the
/// phase ends when they are done), read back by the parallel imaging loop.
pub fn fwi(pool: &rayon::ThreadPool, p: &FwiParams) -> Result<FwiRun, BenchError> {
    p.validate()?;
    let st = State::new(p);
    let path = p.dir.join(format!(
        "umt-fwi-{}-{}.snap",
        std::process::id(),
        fwi::RUN_ID.fetch_add(1, Ordering::Relaxed)
    ));
    let file = create_file(&path, p.io)?;
    let snaps = p.snapshot_steps();
    let ny = p.ny;
    let slice_bytes = (p.slice_cells() * 8) as u64;
    let sums = Mutex::new(vec![0u64; snaps.len() * ny]);
    let errors = Mutex::new(Vec::new());
    let verified = AtomicUsize::new(0);
    let fail = |e: BenchError| errors.lock().unwrap_or_else(|e| e.into_inner()).push(e);
    let start = Instant::now();
    pool.install(|| {
        rayon::scope(|s| {
            let (st, sums, fail, file, path) = (&st, &sums, &fail, &file, &path);
            for t in 1..=p.steps {
                (0..ny)
                    .into_par_iter()
                    .for_each(|y| fwi::update(&st.v, &st.s, y, p));
                (0..ny)
                    .into_par_iter()
                    .for_each(|y| fwi::update(&st.s, &st.v, y, p));
                if let Some(k) = snaps.iter().position(|&x| x == t) {
                    for y in 0..ny {
                        let data = st.v.read(y).clone();
                        s.spawn(move |_| {
                            let at = (k * ny + y) as u64 * slice_bytes;
                            match write_f64s(file, path, at, &data) {
                                Ok(()) => {
                                    sums.lock().unwrap_or_else(|e| e.into_inner())[k * ny + y] =
                                        checksum(&data)
                                }
                                Err(e) => fail(e),
                            }
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
            if let Some(k) = snaps.iter().position(|&x| x == t) {
                (0..ny).into_par_iter().for_each(|y| {
                    let mut snap = vec![0.0; p.slice_cells()];
                    let at = (k * ny + y) as u64 * slice_bytes;
                    if let Err(e) = read_f64s_into(&file, &path, at, &mut snap) {
                        return fail(e);
                    }
                    let want = sums.lock().unwrap_or_else(|e| e.into_inner())[k * ny + y];
                    if checksum(&snap) != want {
                        return fail(BenchError::Corrupt(format!(
                            "snapshot of step {t}, slice {y}: checksum mismatch"
                        )));
                    }
                    verified.fetch_add(1, Ordering::Relaxed);
                    let av = st.av.read(y);
                    let mut img = st.image.write(y);
                    for ((i, s), a) in img.iter_mut().zip(&snap).zip(av.iter()) {
                        *i += s * a;
                    }
                });
            }
        }
    });
    let elapsed = start.elapsed();
    let _ = std::fs::remove_file(&path);
    first_error(errors)?;
    Ok(FwiRun {
        elapsed,
        velocity: st.v.to_vec(),
        stress: st.s.to_vec(),
        image: st.image.to_vec(),
        snapshots_verified: verified.into_inner(),
        io_bytes: 2 * p.snapshot_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::IoMode;

    fn same(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    #[test]
    fn rayon_heat_is_bit_identical() {
        let p = HeatParams {
            n: 128,
            block: 32,
            iters: 5,
            iof: Some(2),
            dir: std::env::temp_dir(),
            io: IoMode::Buffered,
        };
        let out = heat(&pool(3).unwrap(), &p).unwrap();
        assert!(same(&out.matrix, &crate::heat::sequential(&p, 5)));
        for (it, path) in &out.checkpoints {
            let raw = crate::io::read_f64s(path, 0, p.n * p.n).unwrap();
            let m = crate::heat::checkpoint_to_matrix(&p, &raw);
            assert!(same(&m, &crate::heat::sequential(&p, *it)));
            std::fs::remove_file(path).unwrap();
        }
    }

    #[test]
    fn rayon_fwi_is_bit_identical() {
        let p = FwiParams {
            nz: 16,
            nx: 32,
            ny: 10,
            steps: 5,
            iof: 2,
            dir: std::env::temp_dir(),
            io: IoMode::Buffered,
        };
        let out = fwi(&pool(3).unwrap(), &p).unwrap();
        let (v, s, img) = crate::fwi::sequential(&p);
        assert!(same(&out.velocity, &v) && same(&out.stress, &s) && same(&out.image, &img));
        assert_eq!(out.snapshots_verified, 2 * p.ny);
    }
}
