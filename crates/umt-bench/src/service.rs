//! A service beside heat, three ways (seed 002's onload): none, onloaded
//! ([`umt_rt::Runtime::onload`], now or never), and spawned as ordinary tasks.
//!
//! While heat runs on umt-rt, a producer thread offers the service a 1 MiB chunk of
//! checkpoint-like data to compress (flate2, level 1) every `offer_every` compression times
//! (measured first). Onloaded chunks run only where heat leaves a core idle, or are rejected;
//! spawned chunks compete with heat's tasks. The ways alternate, `rounds` times, on one
//! runtime; the result gives heat's median time per way and what the service did.
//!
//! [`dyon`] runs seed 002's experiment instead: the service onloaded, compressing each chunk
//! and archiving it to a file, first under every static partition of the cores (0 to all
//! dedicated to it) in turn, then under DYON choosing the partition every period from the
//! runtime's own CPIO ([`umt_rt::onload::Metric::RuntimeCpio`]); the report says which
//! partition DYON settled on and how far the static CPIO of that partition is from the best.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use umt_rt::{Onload, Runtime};

use crate::error::BenchError;
use crate::heat::{self, HeatParams};

/// The three ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Way {
    /// Heat alone.
    None,
    /// Each chunk onloaded: idle cores only, else rejected.
    Onload,
    /// Each chunk spawned as an ordinary task.
    Spawned,
}

/// What one way gave.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WayReport {
    /// The way.
    pub way: Way,
    /// Heat's median wall time, in seconds.
    pub heat_seconds: f64,
    /// Heat's median time over the median of [`Way::None`].
    pub slowdown: f64,
    /// Chunks offered to the service.
    pub offered: u64,
    /// Chunks compressed.
    pub done: u64,
    /// Chunks handed back (onload only).
    pub rejected: u64,
}

/// The 1 MiB chunk: smooth doubles, like a heat grid, so compression has work to do.
fn chunk() -> Arc<Vec<u8>> {
    Arc::new(
        (0..(1u64 << 17))
            .flat_map(|i| ((i as f64 * 1e-3).sin() * 100.0).to_le_bytes())
            .collect(),
    )
}

/// Compressed size of `data` (flate2, fastest level).
fn compress(data: &[u8]) -> u64 {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = z.write_all(data);
    z.finish().map_or(0, |v| v.len() as u64)
}

#[derive(Default)]
struct Counts {
    offered: AtomicU64,
    done: AtomicU64,
    rejected: AtomicU64,
}

/// Most rounds [`compare`] accepts.
pub const MAX_ROUNDS: usize = 1000;
/// Longest offer period [`compare`] accepts, in compression times (beyond it the period
/// overflows a `Duration`, and the service offers nothing anyway).
pub const MAX_OFFER_EVERY: f64 = 1e6;

/// Runs heat `rounds` times per way on `rt`, the ways alternating, with a chunk offered
/// every `offer_every` compression times.
pub fn compare(
    rt: &Arc<Runtime>,
    p: &HeatParams,
    rounds: usize,
    offer_every: f64,
) -> Result<(Duration, Vec<WayReport>), BenchError> {
    if rounds == 0 || rounds > MAX_ROUNDS {
        return Err(BenchError::InvalidParam(format!(
            "--rounds {rounds}: give 1 to {MAX_ROUNDS}"
        )));
    }
    if !offer_every.is_finite() || offer_every <= 0.0 || offer_every > MAX_OFFER_EVERY {
        return Err(BenchError::InvalidParam(format!(
            "--offer-every {offer_every:e}: give a number of compression times above 0 and at \
             most {MAX_OFFER_EVERY} (that is already about never)"
        )));
    }
    let data = chunk();
    let t = Instant::now();
    for _ in 0..3 {
        std::hint::black_box(compress(&data));
    }
    let cost = t.elapsed() / 3;
    let period = cost.mul_f64(offer_every);
    let ways = [Way::None, Way::Onload, Way::Spawned];
    let counts: Vec<Arc<Counts>> = ways.iter().map(|_| Arc::default()).collect();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
    for _ in 0..rounds {
        for (k, &way) in ways.iter().enumerate() {
            let stop = Arc::new(AtomicBool::new(false));
            let producer = (way != Way::None).then(|| {
                let (rt, stop, data, c) =
                    (rt.clone(), stop.clone(), data.clone(), counts[k].clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        c.offered.fetch_add(1, Ordering::Relaxed);
                        let (d, c2) = (data.clone(), c.clone());
                        let job = move || {
                            std::hint::black_box(compress(&d));
                            c2.done.fetch_add(1, Ordering::Relaxed);
                        };
                        if way == Way::Onload {
                            if let Onload::Rejected(_) = rt.onload(move |_| job()) {
                                c.rejected.fetch_add(1, Ordering::Relaxed);
                            }
                        } else {
                            rt.spawn_detached(job);
                        }
                        std::thread::sleep(period);
                    }
                })
            });
            let out = heat::run(rt, p);
            stop.store(true, Ordering::Relaxed);
            if let Some(h) = producer {
                let _ = h.join();
            }
            times[k].push(out?.elapsed.as_secs_f64());
            // Spawned chunks not run yet would slow the next round: let them finish.
            rt.scope(|_| {});
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let base = crate::report::median(&times[0]);
    let reports = ways
        .iter()
        .enumerate()
        .map(|(k, &way)| {
            let m = crate::report::median(&times[k]);
            WayReport {
                way,
                heat_seconds: m,
                slowdown: m / base,
                offered: counts[k].offered.load(Ordering::Relaxed),
                done: counts[k].done.load(Ordering::Relaxed),
                rejected: counts[k].rejected.load(Ordering::Relaxed),
            }
        })
        .collect();
    Ok((cost, reports))
}

/// One partition's figures (or DYON's, over its whole run).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PartitionFigures {
    /// Cores dedicated to the service (`None` for DYON's run, which moved it).
    pub dedicated_cores: Option<usize>,
    /// CPIO of the runtime's threads: CPU microseconds per 4 KiB block of storage I/O (lower
    /// is better); the median over the rounds for a static partition.
    pub cpio_us: f64,
    /// Heat's iterations per second.
    pub heat_iters_per_s: f64,
    /// Chunks compressed and archived per second.
    pub chunks_per_s: f64,
    /// Wall time it held, in seconds (summed over the rounds).
    pub seconds: f64,
}

/// [`dyon`]'s result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DyonReport {
    /// DYON's period, in seconds; each static partition held `hold_periods` of them per round.
    pub period_seconds: f64,
    /// Periods a static partition held in each round.
    pub hold_periods: usize,
    /// Rounds of the static sweep.
    pub rounds: usize,
    /// DYON's periods.
    pub periods: usize,
    /// Every static partition, arm by arm (arm `k` dedicates `k` cores).
    pub sweep: Vec<PartitionFigures>,
    /// The arm whose median CPIO was lowest.
    pub best_arm: usize,
    /// DYON's run as a whole.
    pub dyon: PartitionFigures,
    /// Times DYON chose each arm.
    pub pulls: Vec<u64>,
    /// DYON's mean reward of each arm (minus its CPIO in seconds per block).
    pub means: Vec<f64>,
    /// The arm DYON chose most.
    pub chosen_arm: usize,
    /// The chosen arm's static CPIO over the best arm's (1.0: the best).
    pub chosen_over_best: f64,
    /// The tolerance [`DyonReport::converged`] allows on that ratio.
    pub tolerance: f64,
    /// DYON settled on the best static partition, or on one whose static CPIO is within
    /// `tolerance` of the best's.
    pub converged: bool,
}

/// How far above the best static CPIO DYON's choice may be and still count as converged:
/// the paper's 80 % partition was 10 % less efficient than its best, the smallest difference
/// it calls out between partitions.
pub const DYON_TOLERANCE: f64 = 1.10;

/// Most periods [`dyon`] accepts for `hold_periods` or `periods`.
pub const MAX_PERIODS: usize = 100_000;

/// CPU seconds and 4 KiB blocks of the runtime's threads so far.
fn runtime_progress(rt: &Runtime) -> (f64, f64) {
    let s = rt.stats();
    let cpu = s
        .cores
        .iter()
        .map(|c| c.total_cpu_time().as_secs_f64())
        .sum();
    let bytes: u64 = s.cores.iter().map(|c| c.total_io_bytes()).sum();
    (cpu, bytes as f64 / 4096.0)
}

/// Bytes a chunk's slot takes in the archive, and slots in it (the archive is rewritten in
/// a ring).
const ARCHIVE_SLOT: u64 = 1 << 20;
const ARCHIVE_SLOTS: u64 = 64;

/// The service of [`dyon`]: compresses a chunk and archives it into the next slot of the
/// archive (padded to the direct-I/O alignment, so it works on direct files too).
struct Archive {
    file: std::fs::File,
    path: std::path::PathBuf,
    next: AtomicU64,
    failed: AtomicBool,
}

impl Archive {
    fn store(&self, data: &[u8]) {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        let _ = z.write_all(data);
        let packed = z.finish().unwrap_or_default();
        let align = crate::io::DIRECT_ALIGN;
        let len = packed.len().div_ceil(align).max(1) * align;
        let mut buf = crate::io::AlignedBuf::new(len.min(ARCHIVE_SLOT as usize));
        let n = packed.len().min(buf.as_slice().len());
        buf.as_mut_slice()[..n].copy_from_slice(&packed[..n]);
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % ARCHIVE_SLOTS;
        if crate::io::write_buf(&self.file, &self.path, slot * ARCHIVE_SLOT, buf).is_err() {
            self.failed.store(true, Ordering::Relaxed);
        }
    }
}

/// Heat back to back on `rt`, the service offered a chunk every `offer` through
/// [`Runtime::onload`], for at least `hold` (the heat run under way when it ends finishes):
/// the figures of that time.
fn hold_partition(
    rt: &Arc<Runtime>,
    p: &HeatParams,
    archive: &Arc<Archive>,
    data: &Arc<Vec<u8>>,
    offer: Duration,
    hold: Duration,
) -> Result<PartitionFigures, BenchError> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let producer = {
        let (rt, stop, data, done, archive) = (
            rt.clone(),
            stop.clone(),
            data.clone(),
            done.clone(),
            archive.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (d, n, a) = (data.clone(), done.clone(), archive.clone());
                let _ = rt.onload(move |_| {
                    a.store(&d);
                    n.fetch_add(1, Ordering::Relaxed);
                });
                std::thread::sleep(offer);
            }
        })
    };
    let before = runtime_progress(rt);
    let t = Instant::now();
    let mut iters = 0usize;
    let mut result = Ok(());
    while t.elapsed() < hold {
        match heat::run(rt, p) {
            Ok(_) => iters += p.iters,
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    let seconds = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = producer.join();
    result?;
    let after = runtime_progress(rt);
    let (cpu, blocks) = (after.0 - before.0, after.1 - before.1);
    Ok(PartitionFigures {
        dedicated_cores: Some(rt.onload_stats().dedicated_cores),
        cpio_us: if blocks > 0.0 {
            cpu / blocks * 1e6
        } else {
            f64::INFINITY
        },
        heat_iters_per_s: iters as f64 / seconds,
        chunks_per_s: done.load(Ordering::Relaxed) as f64 / seconds,
        seconds,
    })
}

/// Seed 002's experiment on `rt` (see the module's docs): every static partition held
/// `hold_periods` periods, `rounds` times alternating, then DYON for `periods` periods; a
/// chunk is offered every `offer_every` compression times; the archive goes in `p.dir`.
pub fn dyon(
    rt: &Arc<Runtime>,
    p: &HeatParams,
    rounds: usize,
    offer_every: f64,
    period: Duration,
    hold_periods: usize,
    periods: usize,
) -> Result<DyonReport, BenchError> {
    let bad_count = |n: usize| n == 0 || n > MAX_PERIODS;
    if rounds == 0 || rounds > MAX_ROUNDS || bad_count(hold_periods) || bad_count(periods) {
        return Err(BenchError::InvalidParam(format!(
            "--rounds {rounds}, --hold-periods {hold_periods}, --periods {periods}: give \
             each at least 1 (rounds at most {MAX_ROUNDS}, periods at most {MAX_PERIODS})"
        )));
    }
    if !offer_every.is_finite() || offer_every <= 0.0 || offer_every > MAX_OFFER_EVERY {
        return Err(BenchError::InvalidParam(format!(
            "--offer-every {offer_every:e}: give a number above 0 and at most {MAX_OFFER_EVERY}"
        )));
    }
    if period < Duration::from_millis(1) || period > Duration::from_secs(600) {
        return Err(BenchError::InvalidParam(format!(
            "--period-ms {}: give 1 to 600000",
            period.as_millis()
        )));
    }
    let data = chunk();
    let t = Instant::now();
    for _ in 0..3 {
        std::hint::black_box(compress(&data));
    }
    let offer = (t.elapsed() / 3).mul_f64(offer_every);
    let dir = crate::io::private_dir(&p.dir, "umt-dyon-")
        .map_err(|e| BenchError::io("creating a private directory in", &p.dir, e))?;
    let path = dir.path().join("archive");
    let archive = Arc::new(Archive {
        file: crate::io::create_file(&path, p.io, ARCHIVE_SLOT * ARCHIVE_SLOTS)?,
        path,
        next: AtomicU64::new(0),
        failed: AtomicBool::new(false),
    });
    let cores = rt.cpus().len();
    let arms = cores + 1;
    let hold = period * hold_periods as u32;
    let mut runs: Vec<Vec<PartitionFigures>> = vec![Vec::new(); arms];
    for _ in 0..rounds {
        for (arm, r) in runs.iter_mut().enumerate() {
            rt.set_onload_partition(arm);
            r.push(hold_partition(rt, p, &archive, &data, offer, hold)?);
        }
    }
    rt.set_onload_partition(0);
    let median = |v: &[PartitionFigures], f: &dyn Fn(&PartitionFigures) -> f64| {
        crate::report::median(&v.iter().map(f).collect::<Vec<_>>())
    };
    let sweep: Vec<PartitionFigures> = runs
        .iter()
        .enumerate()
        .map(|(arm, r)| PartitionFigures {
            dedicated_cores: Some(arm),
            cpio_us: median(r, &|f| f.cpio_us),
            heat_iters_per_s: median(r, &|f| f.heat_iters_per_s),
            chunks_per_s: median(r, &|f| f.chunks_per_s),
            seconds: r.iter().map(|f| f.seconds).sum(),
        })
        .collect();
    let best_arm = (0..arms)
        .min_by(|&a, &b| sweep[a].cpio_us.total_cmp(&sweep[b].cpio_us))
        .unwrap_or(0);
    let controller = umt_rt::onload::Dyon::builder()
        .steps(arms)
        .period(period)
        .metric(umt_rt::onload::Metric::RuntimeCpio)
        .start(rt);
    let figures = hold_partition(rt, p, &archive, &data, offer, period * periods as u32);
    let bandit = controller.bandit();
    drop(controller);
    let mut dyon = figures?;
    dyon.dedicated_cores = None;
    if archive.failed.load(Ordering::Relaxed) {
        return Err(BenchError::InvalidParam(format!(
            "the service could not write its archive in {}: is the disk full?",
            p.dir.display()
        )));
    }
    let pulls = bandit.counts().to_vec();
    let chosen_arm = (0..arms).max_by_key(|&a| pulls[a]).unwrap_or(0);
    let chosen_over_best = sweep[chosen_arm].cpio_us / sweep[best_arm].cpio_us;
    Ok(DyonReport {
        period_seconds: period.as_secs_f64(),
        hold_periods,
        rounds,
        periods,
        best_arm,
        chosen_arm,
        chosen_over_best,
        tolerance: DYON_TOLERANCE,
        converged: chosen_over_best <= DYON_TOLERANCE,
        means: bandit.means().to_vec(),
        pulls,
        sweep,
        dyon,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::IoMode;

    #[test]
    fn every_way_runs_and_accounts_for_each_chunk() {
        let rt = Arc::new(Runtime::builder().num_threads(2).build().unwrap());
        let p = HeatParams {
            n: 256,
            block: 64,
            iters: 4,
            iof: Some(2),
            dir: std::env::temp_dir(),
            io: IoMode::Buffered,
        };
        let (_, r) = compare(&rt, &p, 1, 1.0).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].offered, 0);
        assert_eq!(r[0].slowdown, 1.0);
        // Onload: every chunk either ran or came back.
        let onload = &r[1];
        std::thread::sleep(Duration::from_millis(200));
        assert!(onload.done + onload.rejected <= onload.offered);
        assert!(compare(&rt, &p, 0, 1.0).is_err());
    }
}
