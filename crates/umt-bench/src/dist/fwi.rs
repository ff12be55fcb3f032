//! FWI across MPI ranks: each rank owns a slab of Y-slices of every volume and runs it on its
//! own umt-rt runtime; the slices within the stencil's radius of a slab's faces travel as
//! messages before every half step, one message per slice, as FWI codes exchange their halo
//! planes.
//!
//! A rank's volumes hold its `n` slices and `RADIUS` ghost slices on each side (volume
//! indices `RADIUS..RADIUS + n` are its own). Ghost slices past the volume's ends stay zero, as
//! the sequential reference counts slices beyond the volume. Each time step of either phase is
//! two *exchanges*, each followed by a half step:
//! 1. exchange the stress (adjoint stress backward): send the first `RADIUS` own slices up and
//!    the last `RADIUS` down, receive the ghost slices from both neighbours;
//! 2. update the own velocity slices (each reads the stress within the radius, ghosts
//!    included);
//! 3. exchange the velocity, then 4. update the own stress slices;
//! 5. forward, at a snapshot step, copy each own velocity slice out and write it to this
//!    rank's snapshot file; backward, read it back, verify its checksum and image it.
//!
//! Unlike heat's sweep, both directions carry data of the same half step, so a blocking
//! receive that ran before the rank's own sends could wait for a neighbour blocked in the
//! mirror receive. The receives of an exchange therefore depend on every send of the same
//! exchange having started (dataflow keys `SENT`): a rank waiting in a receive has posted all
//! its neighbours need for theirs, and the exchanges cannot deadlock, even with one worker per
//! rank blocked in `MPI_Recv`. Sends never block a task on its neighbour, as in heat.
//!
//! Verified: every snapshot slice read back has its checksum (per rank), and each rank's own
//! slices of the final velocity, stress and image are bit-identical to the sequential
//! reference's ([`reference_checksums`]).

use std::iter::once;
use std::sync::Mutex;
use std::time::Instant;

use mpi::collective::CommunicatorCollectives;
use umt_rt::{Access, Runtime, Scope};

use super::{Cluster, Disk, DistRun, Link, RankEngine, RankRunner, RankedRun, Runs};
use crate::error::{BenchError, Errors};
use crate::fwi::{
    AHEAD, AS, AV, Blocking, FwiParams, RADIUS, S, SnapshotIo, SnapshotTasks, Snapshots, State, V,
    Volume, Waiting, neighbours, update,
};
use crate::io::{AlignedBuf, TempPath, create_file};
use crate::port_uring::UringSnapshots;

/// Dataflow key of the sends of an exchange, `(SENT, exchange % 2, message)`, beside the
/// volumes' `(key, slice)` and the snapshots' (`fwi`'s keys).
const SENT: u8 = 8;

/// The Y-slices `[y0, y1)` of `rank` among `size` ranks.
pub fn slab(ny: usize, size: usize, rank: usize) -> (usize, usize) {
    (rank * ny / size, (rank + 1) * ny / size)
}

/// Direction of a message: towards the rank below (`rank - 1`) or above.
#[derive(Clone, Copy)]
enum Dir {
    Up = 0,
    Down = 1,
}

/// The tag of message `k` (of `RADIUS`) of volume `key`, going `dir`, in an exchange of
/// parity `par`: unique among the messages two ranks may have in flight at once.
fn tag(key: u8, par: usize, dir: Dir, k: usize) -> i32 {
    (((usize::from(key) * 2 + par) * 2 + dir as usize) * RADIUS + k) as i32
}

/// What the tasks of one rank's run share.
struct Slab<'a> {
    /// The rank's volume: its `n` slices and the ghosts (`ny = n + 2 RADIUS`).
    gp: &'a FwiParams,
    n: usize,
    /// The volumes, the snapshots and their file, errors, and how the file is read and written.
    snap: SnapshotTasks<'a>,
    link: &'a Link,
    /// Per own slice, its staged copy between the copy task and the write task.
    staging: &'a [Mutex<Option<AlignedBuf>>],
    /// The neighbour ranks, if any.
    up: Option<i32>,
    down: Option<i32>,
}

impl<'a> Slab<'a> {
    /// The own slices' volume indices.
    fn own(&self) -> std::ops::Range<usize> {
        RADIUS..RADIUS + self.n
    }

    /// The messages of an exchange out of this rank: to whom, going which way, and the first
    /// of the `RADIUS` own slices they carry (the first ones up, the last ones down).
    fn outgoing(&self) -> [(Option<i32>, Dir, usize); 2] {
        [(self.up, Dir::Up, RADIUS), (self.down, Dir::Down, self.n)]
    }

    /// The messages of an exchange into this rank: from whom, going which way, and the first
    /// ghost slice they fill (the rank above sends its last slices down, the one below its
    /// first up).
    fn incoming(&self) -> [(Option<i32>, Dir, usize); 2] {
        [
            (self.up, Dir::Down, 0),
            (self.down, Dir::Up, RADIUS + self.n),
        ]
    }

    /// Exchange number `e` of volume `key`: the own edge slices out, the ghosts in (steps 1
    /// and 3).
    fn exchange(&self, sc: &Scope<'a>, (key, vol): (u8, &'a Volume), e: usize) {
        let (link, par) = (self.link, e % 2);
        for (to, dir, first) in self.outgoing() {
            let Some(to) = to else { continue };
            for k in 0..RADIUS {
                let y = first + k;
                let deps = [
                    Access::read((key, y)),
                    Access::write((SENT, par, dir as usize * RADIUS + k)),
                ];
                sc.spawn_with(deps, move |_| {
                    link.send(to, tag(key, par, dir, k), &vol.read(y));
                });
            }
        }
        // Once every send of this exchange started (see the module's notes).
        let sent: Vec<Access> = (0..2 * RADIUS)
            .map(|m| Access::read((SENT, par, m)))
            .collect();
        for (from, dir, first) in self.incoming() {
            let Some(from) = from else { continue };
            for k in 0..RADIUS {
                let y = first + k;
                let deps = sent.iter().cloned().chain(once(Access::write((key, y))));
                sc.spawn_with(deps, move |_| {
                    link.recv(from, tag(key, par, dir, k), &mut vol.write(y));
                });
            }
        }
    }

    /// Updates the own slices of `dst` from `src` (steps 2 and 4).
    fn half_step(&self, sc: &Scope<'a>, (dk, dst): (u8, &'a Volume), (sk, src): (u8, &'a Volume)) {
        let gp = self.gp;
        for y in self.own() {
            let deps = once(Access::write((dk, y)))
                .chain(neighbours(y, gp.ny).map(move |m| Access::read((sk, m))));
            sc.spawn_with(deps, move |_| update(dst, src, y, gp));
        }
    }

    /// Both phases as umt-rt tasks. With an `io` that reads ahead, the backward phase starts
    /// once every snapshot is on disk (as in the one-process graph).
    fn tasks(&self, rt: &Runtime) {
        let mut e = 0;
        if self.snap.io.reads_ahead() {
            rt.scope(|sc| self.forward(sc, &mut e));
            self.snap.errors.check(self.snap.io.flush());
            rt.scope(|sc| self.backward(sc, &mut e));
        } else {
            rt.scope(|sc| {
                self.forward(sc, &mut e);
                self.backward(sc, &mut e);
            });
        }
    }

    /// Exchange `e` of volume `key` on the calling thread: the sends posted, then the
    /// receives waited for (rayon's way).
    fn exchange_now(&self, (key, vol): (u8, &Volume), e: usize) {
        let (link, par) = (self.link, e % 2);
        for (to, dir, first) in self.outgoing() {
            if let Some(to) = to {
                for k in 0..RADIUS {
                    link.send(to, tag(key, par, dir, k), &vol.read(first + k));
                }
            }
        }
        for (from, dir, first) in self.incoming() {
            if let Some(from) = from {
                for k in 0..RADIUS {
                    link.recv(from, tag(key, par, dir, k), &mut vol.write(first + k));
                }
            }
        }
    }

    /// Both phases as a rayon program would run them: each exchange on the calling thread
    /// (blocking in MPI), each half step one parallel loop over the own slices, the snapshot
    /// writes spawned on copies (the forward phase ends when they are done), the read-backs
    /// a parallel loop.
    fn rayon(&self, pool: &rayon::ThreadPool) {
        use rayon::prelude::*;
        let SnapshotTasks {
            st,
            snaps,
            errors,
            file,
            path,
            io,
        } = self.snap;
        let gp = self.gp;
        // Exchange `e`, then a parallel loop, for each half step of a time step.
        let step = |(vk, v): (u8, &Volume), (sk, s): (u8, &Volume), e: &mut usize| {
            for (ex, (dst, src)) in [((sk, s), (v, s)), ((vk, v), (s, v))] {
                self.exchange_now(ex, *e);
                *e += 1;
                self.own()
                    .into_par_iter()
                    .for_each(|y| update(dst, src, y, gp));
            }
        };
        let mut e = 0;
        pool.install(|| {
            rayon::scope(|sc| {
                for t in 1..=gp.steps {
                    step((V, &st.v), (S, &st.s), &mut e);
                    let Some(k) = snaps.at_step(t) else { continue };
                    for y in self.own() {
                        let buf = AlignedBuf::from_f64s(&st.v.read(y));
                        sc.spawn(move |_| {
                            let write = |at, b| io.write(file, path, at, b);
                            errors.check(snaps.write(k, y, buf, write));
                        });
                    }
                }
            });
            for t in (1..=gp.steps).rev() {
                step((AV, &st.av), (AS, &st.as_), &mut e);
                let Some(k) = snaps.at_step(t) else { continue };
                self.own().into_par_iter().for_each(|y| {
                    let mut data = vec![0.0; snaps.cells()];
                    let done = io
                        .read(file, path, snaps.offset(k, y), &mut data)
                        .and_then(|()| snaps.check_and_image(st, (k, y, t), &data, true));
                    errors.check(done);
                });
            }
        });
    }

    /// One time step as tasks: exchange the stress `(sk, s)`, update the velocity `(vk, v)`
    /// from it, exchange the velocity, update the stress (steps 1–4); `e` counts exchanges.
    fn step(
        &self,
        sc: &Scope<'a>,
        (vk, v): (u8, &'a Volume),
        (sk, s): (u8, &'a Volume),
        e: &mut usize,
    ) {
        self.exchange(sc, (sk, s), *e);
        self.half_step(sc, (vk, v), (sk, s));
        self.exchange(sc, (vk, v), *e + 1);
        self.half_step(sc, (sk, s), (vk, v));
        *e += 2;
    }

    /// The forward phase; `e` counts the exchanges.
    fn forward(&self, sc: &Scope<'a>, e: &mut usize) {
        let st = self.snap.st;
        for t in 1..=self.gp.steps {
            self.step(sc, (V, &st.v), (S, &st.s), e);
            let Some(k) = self.snap.snaps.at_step(t) else {
                continue;
            };
            for y in self.own() {
                self.snap.spawn_write(sc, &self.staging[y - RADIUS], k, y);
            }
        }
    }

    /// The backward phase, on the adjoint volumes.
    fn backward(&self, sc: &Scope<'a>, e: &mut usize) {
        let st = self.snap.st;
        for t in (1..=self.gp.steps).rev() {
            self.step(sc, (AV, &st.av), (AS, &st.as_), e);
            let Some(k) = self.snap.snaps.at_step(t) else {
                continue;
            };
            let ahead = self
                .snap
                .io
                .reads_ahead()
                .then_some(Access::read((AHEAD, k)));
            if ahead.is_some() {
                self.snap.spawn_read_ahead(sc, k, self.own());
            }
            for y in self.own() {
                self.snap.spawn_read(sc, (k, y, t), true, ahead);
            }
        }
    }
}

/// The rank's slab of `p`, checked: every rank needs `RADIUS` slices, its neighbours' halo.
fn checked_slab(p: &FwiParams, size: usize, rank: usize) -> Result<(usize, usize), BenchError> {
    p.validate()?;
    if p.ny / size < RADIUS {
        return Err(BenchError::InvalidParam(format!(
            "{} Y-slices cannot be shared by {size} ranks with the stencil's {RADIUS} each: use \
             --ny {} or more, or fewer ranks",
            p.ny,
            RADIUS * size
        )));
    }
    Ok(slab(p.ny, size, rank))
}

/// Runs FWI (both phases) as rank `cluster.rank()` of `cluster.size()` on `rr`; every rank
/// calls it with the same parameters. Snapshots go to one file per rank. The checksum is that
/// of the rank's own slices of the final velocity, stress and image, in that order.
pub fn run(rr: &RankRunner<'_>, cluster: &Cluster, p: &FwiParams) -> Result<DistRun, BenchError> {
    let (rank, size) = (cluster.rank() as usize, cluster.size() as usize);
    let (y0, y1) = checked_slab(p, size, rank)?;
    let n = y1 - y0;
    let gp = FwiParams {
        ny: n + 2 * RADIUS,
        ..p.clone()
    };
    let own = FwiParams { ny: n, ..p.clone() };
    // The source and the receiver, on the rank whose slab holds them.
    let local = |y: usize| (y0..y1).contains(&y).then(|| y - y0 + RADIUS);
    let st = State::with_sources(&gp, local(p.ny / 2), local(p.ny / 4));
    let snaps = Snapshots::of_slices(&own, RADIUS);
    let (path, file) = TempPath::create(own.new_snapshot_path(), |path| {
        create_file(path, p.io, own.snapshot_bytes())
    })?;
    let uring_io = match rr.disk {
        Disk::Uring(ring) => Some(UringSnapshots::new(ring)),
        _ => None,
    };
    let io: &dyn SnapshotIo = match (rr.disk, &uring_io) {
        (Disk::Waiting, _) => &Waiting,
        (_, Some(u)) => u,
        _ => &Blocking,
    };
    let link = Link::new(cluster, rr.comm);
    let errors = Errors::default();
    let staging: Vec<Mutex<Option<AlignedBuf>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let slab = Slab {
        gp: &gp,
        n,
        snap: SnapshotTasks {
            st: &st,
            snaps: &snaps,
            errors: &errors,
            file: &file,
            path: &path,
            io,
        },
        link: &link,
        staging: &staging,
        up: (rank > 0).then(|| rank as i32 - 1),
        down: (rank + 1 < size).then(|| rank as i32 + 1),
    };
    cluster.world().barrier();
    let start = Instant::now();
    match rr.engine {
        RankEngine::Tasks(rt) => slab.tasks(rt),
        RankEngine::Rayon(pool) => slab.rayon(pool),
    }
    errors.check(io.flush());
    link.finish();
    cluster.world().barrier();
    let elapsed = start.elapsed();
    errors.first()?;
    let want = own.snapshot_steps().len() * n;
    if snaps.verified() != want {
        return Err(BenchError::Corrupt(format!(
            "rank {rank} verified {} snapshot slices of {want}",
            snaps.verified()
        )));
    }
    let own_slices =
        |v: &Volume| -> Vec<f64> { slab.own().flat_map(|y| v.read(y).clone()).collect() };
    let mut all = own_slices(&st.v);
    all.extend(own_slices(&st.s));
    all.extend(own_slices(&st.image));
    Ok(DistRun {
        elapsed,
        checksum: crate::fwi::checksum(&all),
        seconds_in_mpi: link.seconds_in_mpi(),
    })
}

/// The checksums every rank's slab should have: those of the sequential reference's slices.
pub fn reference_checksums(p: &FwiParams, size: usize) -> Vec<u64> {
    let (v, s, img) = crate::fwi::sequential(p);
    let cells = p.slice_cells();
    (0..size)
        .map(|r| {
            let (y0, y1) = slab(p.ny, size, r);
            let part = |m: &[f64]| m[y0 * cells..y1 * cells].to_vec();
            let mut all = part(&v);
            all.extend(part(&s));
            all.extend(part(&img));
            crate::fwi::checksum(&all)
        })
        .collect()
}

/// Runs FWI across the ranks as `how` says (runners alternating); with
/// `verify`, checks every run's slabs against the sequential reference. Every rank calls it;
/// rank 0 gets the results, the others `None`.
pub fn compare(
    cluster: &Cluster,
    p: &FwiParams,
    how: &Runs<'_>,
    verify: bool,
) -> Result<Option<Vec<RankedRun>>, BenchError> {
    let size = cluster.size() as usize;
    // Every rank checks its slab before any message: all fail alike, none waits for another.
    checked_slab(p, size, cluster.rank() as usize)?;
    let reference = (verify && cluster.rank() == 0).then(|| reference_checksums(p, size));
    super::compare(cluster, how, reference, |rr| run(rr, cluster, p))
}

/// The table rank 0 prints.
pub fn table(p: &FwiParams, ranks: usize, runs: &[RankedRun]) -> String {
    let title = format!(
        "fwi across {ranks} ranks: {} x {} x {} cells, {} steps per phase, a snapshot every {} \
         ({:?}); medians",
        p.nz, p.nx, p.ny, p.steps, p.iof, p.io
    );
    super::table(&title, runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slabs_cover_the_volume_once() {
        for size in 1..6 {
            let mut next = 0;
            for r in 0..size {
                let (y0, y1) = slab(23, size, r);
                assert_eq!(y0, next);
                assert!(y1 > y0);
                next = y1;
            }
            assert_eq!(next, 23);
        }
    }

    #[test]
    fn tags_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for key in [S, V, AS, AV] {
            for par in 0..2 {
                for dir in [Dir::Up, Dir::Down] {
                    for k in 0..RADIUS {
                        assert!(seen.insert(tag(key, par, dir, k)));
                    }
                }
            }
        }
    }
}
