//! Heat across MPI ranks: each rank owns a band of block rows; the rows along a band's edges
//! travel as one message per block column and direction per iteration.
//!
//! The sweep is the sequential one (block rows top to bottom, each left to right): a block's
//! update reads this iteration's row above and the previous iteration's row below. So, per
//! iteration `t` and block column `bj`, rank `r`:
//! 1. receives from `r - 1` the last row of its band's block `(r0 - 1, bj)` at `t` (tag
//!    `2 bj + 1`), and, from `t = 2`, from `r + 1` the first row of block `(r1, bj)` at `t - 1`
//!    (tag `2 bj`): tasks that write the ghost rows;
//! 2. updates its blocks (the first and last block rows read the ghost rows);
//! 3. sends the last row of `(r1 - 1, bj)` down and, but in the last iteration, the first row
//!    of `(r0, bj)` up.
//!
//! The receives of iteration `t` depend on every send of iteration `t - 1` having started
//! (dataflow keys `SENT`): a rank waiting in a receive has already posted every message its
//! neighbours need before they can send the one it waits for, so the exchange cannot
//! deadlock even with one worker per rank blocked in `MPI_Recv`. Sends never block the task:
//! they copy the row and post an `MPI_Isend` ([`Link::send`]).

use std::fs::File;
use std::path::Path;
use std::sync::RwLock;
use std::time::Instant;

use mpi::collective::CommunicatorCollectives;
use umt_rt::{Access, Runtime};

use super::{Cluster, Disk, DistRun, Link, RankEngine, RankRunner, RankedRun, Runs};
use crate::error::{BenchError, Errors};
use crate::heat::{Halo, HeatParams, TOP, block_deps, update_block};
use crate::io::{AlignedBuf, TempPath, create_file};

/// Dataflow keys beside the blocks' `(bi, bj)`.
const GHOST_UP: u64 = 1 << 40;
const GHOST_DOWN: u64 = 2 << 40;
const SENT: u64 = 3 << 40;

/// The block rows `[r0, r1)` of `rank` among `size` ranks, for `nb` block rows.
pub fn band(nb: usize, size: usize, rank: usize) -> (usize, usize) {
    (rank * nb / size, (rank + 1) * nb / size)
}

/// This rank's blocks and the rows next to its band.
struct Band {
    nb: usize,
    b: usize,
    r0: usize,
    r1: usize,
    blocks: Vec<RwLock<AlignedBuf>>,
    /// Per block column: the row above the band (from the rank above, this iteration).
    ghost_up: Vec<RwLock<Vec<f64>>>,
    /// Per block column: the row below the band (from the rank below, last iteration).
    ghost_down: Vec<RwLock<Vec<f64>>>,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

impl Band {
    fn new(p: &HeatParams, r0: usize, r1: usize) -> Band {
        let (nb, b) = (p.blocks(), p.block);
        Band {
            nb,
            b,
            r0,
            r1,
            blocks: (0..(r1 - r0) * nb)
                .map(|_| RwLock::new(AlignedBuf::zeroed_f64s(b * b)))
                .collect(),
            ghost_up: (0..nb).map(|_| RwLock::new(vec![0.0; b])).collect(),
            // The grid starts at 0.0: the first iteration reads that from below.
            ghost_down: (0..nb).map(|_| RwLock::new(vec![0.0; b])).collect(),
        }
    }

    fn block(&self, bi: usize, bj: usize) -> &RwLock<AlignedBuf> {
        &self.blocks[(bi - self.r0) * self.nb + bj]
    }

    fn row(&self, bi: usize, bj: usize, i: usize) -> Vec<f64> {
        let b = self.b;
        read(self.block(bi, bj)).as_f64s()[i * b..(i + 1) * b].to_vec()
    }

    fn halo(&self, bi: usize, bj: usize) -> Halo {
        let (b, nb) = (self.b, self.nb);
        let col = |bj: usize, j: usize| {
            let blk = read(self.block(bi, bj));
            let blk = blk.as_f64s();
            (0..b).map(|i| blk[i * b + j]).collect()
        };
        Halo {
            up: if bi == 0 {
                vec![TOP; b]
            } else if bi == self.r0 {
                read(&self.ghost_up[bj]).clone()
            } else {
                self.row(bi - 1, bj, b - 1)
            },
            down: if bi + 1 == nb {
                vec![0.0; b]
            } else if bi + 1 == self.r1 {
                read(&self.ghost_down[bj]).clone()
            } else {
                self.row(bi + 1, bj, 0)
            },
            left: if bj == 0 {
                vec![0.0; b]
            } else {
                col(bj - 1, b - 1)
            },
            right: if bj + 1 == nb {
                vec![0.0; b]
            } else {
                col(bj + 1, 0)
            },
        }
    }

    fn update(&self, bi: usize, bj: usize) {
        let halo = self.halo(bi, bj);
        update_block(write(self.block(bi, bj)).as_f64s_mut(), self.b, &halo);
    }

    /// The band's cells, row-major (the rows `r0 * b .. r1 * b` of the whole grid).
    fn rows(&self) -> Vec<f64> {
        let (b, nb) = (self.b, self.nb);
        let n = b * nb;
        let mut m = vec![0.0; (self.r1 - self.r0) * b * n];
        for bi in self.r0..self.r1 {
            for bj in 0..nb {
                let blk = read(self.block(bi, bj));
                let blk = blk.as_f64s();
                for i in 0..b {
                    let at = ((bi - self.r0) * b + i) * n + bj * b;
                    m[at..at + b].copy_from_slice(&blk[i * b..(i + 1) * b]);
                }
            }
        }
        m
    }

    /// Byte offset of block `(bi, bj)` in this rank's checkpoint file (its blocks,
    /// block-major).
    fn offset(&self, bi: usize, bj: usize) -> u64 {
        (((bi - self.r0) * self.nb + bj) * self.b * self.b * 8) as u64
    }

    /// Bytes of one checkpoint of the band.
    fn bytes(&self) -> u64 {
        ((self.r1 - self.r0) * self.nb * self.b * self.b * 8) as u64
    }

    /// Writes block `(bi, bj)` to this rank's checkpoint file, as `disk` says: a blocking
    /// `pwrite` of the block in place, a wait through [`umt_rt::io`] (umt-io), or a copy
    /// submitted to the ring (the write outlives the task, so it cannot read the block in
    /// place).
    fn write_block(
        &self,
        (bi, bj): (usize, usize),
        (file, path): (&File, &Path),
        disk: Disk<'_>,
    ) -> Result<(), BenchError> {
        let off = self.offset(bi, bj);
        let block = read(self.block(bi, bj));
        match disk {
            Disk::Blocking => crate::io::write_bytes(file, path, off, block.as_slice()),
            Disk::Waiting => umt_rt::io::write_all_at(file, block.as_slice(), off)
                .map_err(|e| BenchError::wait("writing", path, e)),
            Disk::Uring(ring) => {
                let copy = AlignedBuf::from_f64s(block.as_f64s());
                drop(block);
                ring.write(file, path, off, copy)
            }
        }
    }
}

/// Tag of a row sent up (the first row of a band) for block column `bj`.
fn tag_up(bj: usize) -> i32 {
    (2 * bj) as i32
}

/// Tag of a row sent down (the last row of a band).
fn tag_down(bj: usize) -> i32 {
    (2 * bj + 1) as i32
}

/// What a rank's run needs besides its runner: its band, its checkpoint files, its link.
struct RankRun<'a> {
    p: &'a HeatParams,
    band: Band,
    files: Vec<(usize, TempPath, File)>,
    link: Link,
    errors: Errors,
    /// The neighbour ranks, if any.
    up: Option<i32>,
    down: Option<i32>,
}

/// Runs heat as rank `cluster.rank()` of `cluster.size()` on `rr`; every rank calls it with
/// the same parameters. Checkpoints go to one file per rank and checkpoint.
pub fn run(rr: &RankRunner<'_>, cluster: &Cluster, p: &HeatParams) -> Result<DistRun, BenchError> {
    p.validate()?;
    let (rank, size) = (cluster.rank() as usize, cluster.size() as usize);
    let nb = p.blocks();
    if nb < size {
        return Err(BenchError::InvalidParam(format!(
            "{nb} block rows cannot be shared by {size} ranks: use a smaller block or fewer \
             ranks"
        )));
    }
    let (r0, r1) = band(nb, size, rank);
    let band = Band::new(p, r0, r1);
    let files: Vec<(usize, TempPath, File)> = p
        .checkpoint_iters()
        .into_iter()
        .map(|it| {
            let (path, file) = TempPath::create(p.new_checkpoint_path(it), |path| {
                create_file(path, p.io, band.bytes())
            })?;
            Ok((it, path, file))
        })
        .collect::<Result<_, BenchError>>()?;
    let run = RankRun {
        p,
        band,
        files,
        link: Link::new(cluster, rr.comm),
        errors: Errors::default(),
        up: (rank > 0).then(|| rank as i32 - 1),
        down: (rank + 1 < size).then(|| rank as i32 + 1),
    };
    cluster.world().barrier();
    let start = Instant::now();
    match rr.engine {
        RankEngine::Tasks(rt) => run.tasks(rt, rr.disk),
        RankEngine::Rayon(pool) => run.rayon(pool),
    }
    if let Disk::Uring(ring) = rr.disk {
        run.errors.check(ring.wait_all());
    }
    run.link.finish();
    cluster.world().barrier();
    let elapsed = start.elapsed();
    run.errors.first()?;
    Ok(DistRun {
        elapsed,
        checksum: crate::fwi::checksum(&run.band.rows()),
        seconds_in_mpi: run.link.seconds_in_mpi(),
    })
}

impl RankRun<'_> {
    /// The checkpoint of iteration `t`, if it takes one.
    fn checkpoint(&self, t: usize) -> Option<(&File, &Path)> {
        self.files
            .iter()
            .find(|(ci, _, _)| *ci == t)
            .map(|(_, path, file)| (file, &**path))
    }

    /// The iterations as umt-rt tasks with dataflow dependencies (the module's steps).
    fn tasks(&self, rt: &Runtime, disk: Disk<'_>) {
        let (p, band, link, errors) = (self.p, &self.band, &self.link, &self.errors);
        let (nb, b, r0, r1) = (band.nb, band.b, band.r0, band.r1);
        rt.scope(|s| {
            for t in 1..=p.iters {
                // 1. The ghost rows, once every send of the previous iteration started.
                let sent_before: Vec<Access> = if t >= 2 {
                    (0..2 * nb)
                        .map(|k| Access::read((SENT, (t - 1) % 2, k)))
                        .collect()
                } else {
                    Vec::new()
                };
                for bj in 0..nb {
                    if let Some(up) = self.up {
                        let mut deps = sent_before.clone();
                        deps.push(Access::write((GHOST_UP, bj)));
                        s.spawn_with(deps, move |_| {
                            link.recv(up, tag_down(bj), &mut write(&band.ghost_up[bj]));
                        });
                    }
                    if let Some(down) = self.down.filter(|_| t >= 2) {
                        let mut deps = sent_before.clone();
                        deps.push(Access::write((GHOST_DOWN, bj)));
                        s.spawn_with(deps, move |_| {
                            link.recv(down, tag_up(bj), &mut write(&band.ghost_down[bj]));
                        });
                    }
                }
                // 2. The band's blocks.
                for bi in r0..r1 {
                    for bj in 0..nb {
                        let mut deps = block_deps(bi, bj, nb);
                        if self.up.is_some() && bi == r0 {
                            deps.push(Access::read((GHOST_UP, bj)));
                        }
                        if self.down.is_some() && bi + 1 == r1 {
                            deps.push(Access::read((GHOST_DOWN, bj)));
                        }
                        s.spawn_with(deps, move |_| band.update(bi, bj));
                    }
                }
                // 3. The band's edge rows to the neighbours.
                for bj in 0..nb {
                    if let Some(down) = self.down {
                        let deps = [Access::read((r1 - 1, bj)), Access::write((SENT, t % 2, bj))];
                        s.spawn_with(deps, move |_| {
                            link.send(down, tag_down(bj), &band.row(r1 - 1, bj, b - 1));
                        });
                    }
                    // The rank above reads this row in its next iteration: none after the last
                    // (an unreceived message would be matched by the next run's receive).
                    if let Some(up) = self.up.filter(|_| t < p.iters) {
                        let deps = [
                            Access::read((r0, bj)),
                            Access::write((SENT, t % 2, nb + bj)),
                        ];
                        s.spawn_with(deps, move |_| {
                            link.send(up, tag_up(bj), &band.row(r0, bj, 0));
                        });
                    }
                }
                // Checkpoint: each block of the band, once this iteration updated it.
                if let Some(ckpt) = self.checkpoint(t) {
                    for bi in r0..r1 {
                        for bj in 0..nb {
                            s.spawn_with([Access::read((bi, bj))], move |_| {
                                errors.check(band.write_block((bi, bj), ckpt, disk));
                            });
                        }
                    }
                }
            }
        });
    }

    /// The iterations as a rayon program would run them: the ghost rows received on the
    /// calling thread (blocking in MPI), the band's wavefront as one parallel loop per
    /// anti-diagonal, the edge rows sent, the checkpoint as spawned tasks writing copies.
    fn rayon(&self, pool: &rayon::ThreadPool) {
        use rayon::prelude::*;
        let (p, band, link, errors) = (self.p, &self.band, &self.link, &self.errors);
        let (nb, b, r0, r1) = (band.nb, band.b, band.r0, band.r1);
        let rows = r1 - r0;
        pool.install(|| {
            rayon::scope(|s| {
                for t in 1..=p.iters {
                    for bj in 0..nb {
                        if let Some(up) = self.up {
                            link.recv(up, tag_down(bj), &mut write(&band.ghost_up[bj]));
                        }
                        if let Some(down) = self.down.filter(|_| t >= 2) {
                            link.recv(down, tag_up(bj), &mut write(&band.ghost_down[bj]));
                        }
                    }
                    for d in 0..rows + nb - 1 {
                        let lo = d.saturating_sub(nb - 1);
                        (lo..=d.min(rows - 1))
                            .into_par_iter()
                            .for_each(|i| band.update(r0 + i, d - i));
                    }
                    for bj in 0..nb {
                        if let Some(down) = self.down {
                            link.send(down, tag_down(bj), &band.row(r1 - 1, bj, b - 1));
                        }
                        if let Some(up) = self.up.filter(|_| t < p.iters) {
                            link.send(up, tag_up(bj), &band.row(r0, bj, 0));
                        }
                    }
                    if let Some(ckpt) = self.checkpoint(t) {
                        for bi in r0..r1 {
                            for bj in 0..nb {
                                let off = band.offset(bi, bj);
                                let copy =
                                    AlignedBuf::from_f64s(read(band.block(bi, bj)).as_f64s());
                                s.spawn(move |_| {
                                    errors.check(crate::io::write_buf(ckpt.0, ckpt.1, off, copy));
                                });
                            }
                        }
                    }
                }
            });
        });
    }
}

/// The checksums every rank's band should have: those of the sequential reference's rows.
pub fn reference_checksums(p: &HeatParams, size: usize) -> Vec<u64> {
    let m = crate::heat::sequential(p, p.iters);
    let (n, b, nb) = (p.n, p.block, p.blocks());
    (0..size)
        .map(|r| {
            let (r0, r1) = band(nb, size, r);
            crate::fwi::checksum(&m[r0 * b * n..r1 * b * n])
        })
        .collect()
}

/// Runs heat across the ranks as `how` says (runners alternating); with
/// `verify`, checks every run's bands against the sequential reference. Every rank calls it;
/// rank 0 gets the results, the others `None`.
pub fn compare(
    cluster: &Cluster,
    p: &HeatParams,
    how: &Runs<'_>,
    verify: bool,
) -> Result<Option<Vec<RankedRun>>, BenchError> {
    let size = cluster.size() as usize;
    let reference = (verify && cluster.rank() == 0).then(|| reference_checksums(p, size));
    super::compare(cluster, how, reference, |rr| run(rr, cluster, p))
}

/// The table rank 0 prints.
pub fn table(p: &HeatParams, ranks: usize, runs: &[RankedRun]) -> String {
    let title = format!(
        "heat across {ranks} ranks: {0}x{0} cells, block {1}, {2} iterations, a checkpoint \
         every {3} ({4:?}); medians",
        p.n,
        p.block,
        p.iters,
        p.iof.map_or("-".to_string(), |i| i.to_string()),
        p.io
    );
    super::table(&title, runs)
}
