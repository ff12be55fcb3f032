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

/// `data` compressed (flate2, fastest level; empty if the encoder failed).
fn pack(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = z.write_all(data);
    z.finish().unwrap_or_default()
}

/// Compressed size of `data`.
fn compress(data: &[u8]) -> u64 {
    pack(data).len() as u64
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
    /// Each round's CPIO (static partitions): the spread a difference must stand out of.
    pub cpio_us_runs: Vec<f64>,
    /// Heat's iterations per second.
    pub heat_iters_per_s: f64,
    /// Chunks compressed and archived per second.
    pub chunks_per_s: f64,
    /// Chunks the service was offered, and of those, handed back because no core was free
    /// for it (summed over the rounds).
    pub offered: u64,
    /// See `offered`.
    pub rejected: u64,
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
    /// Rounds of the static sweep (every other one in the reverse order of partitions).
    pub rounds: usize,
    /// DYON's periods asked for.
    pub periods: usize,
    /// Every static partition, arm by arm (arm `k` dedicates `k` cores).
    pub sweep: Vec<PartitionFigures>,
    /// The arm whose median CPIO was lowest.
    pub best_arm: usize,
    /// DYON's run as a whole.
    pub dyon: PartitionFigures,
    /// Periods DYON judged on each arm (a period without I/O, or where nothing ran, is not
    /// judged: `onload/README.md`, D3).
    pub pulls: Vec<u64>,
    /// DYON's mean reward of each arm: minus its CPIO over its judged periods together, in
    /// CPU seconds per 4 KiB block.
    pub means: Vec<f64>,
    /// The arm DYON judged most often (ties: the higher mean): where it settled (arm 0 if it
    /// judged no period).
    pub chosen_arm: usize,
    /// Share of the judged periods on `best_arm` (the paper, Fig. 3b: above 75 % once it
    /// has found the best of 10 partitions).
    pub share_on_best: f64,
    /// The chosen arm's static CPIO over the best arm's (1.0: the best).
    pub chosen_over_best: f64,
    /// DYON's own CPIO over its run, over the best static CPIO: what the moves cost or won.
    pub dyon_over_best: f64,
    /// The tolerance [`DyonReport::converged`] allows on `chosen_over_best`.
    pub tolerance: f64,
    /// DYON judged a period and settled on the best static partition, or on one whose static
    /// CPIO is within `tolerance` of the best's.
    pub converged: bool,
    /// Every static partition's median CPIO is within `tolerance` of the best's: the
    /// sweep cannot tell them apart, and `converged` says nothing.
    pub inconclusive: bool,
}

/// How far above the best static CPIO DYON's choice may be and still count as converged.
/// Our reading of the paper's tolerance: its 80 % partition was 10 % less efficient than its
/// best (in application performance), the smallest difference it calls out.
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
    /// The first write that failed.
    failed: std::sync::Mutex<Option<BenchError>>,
}

impl Archive {
    /// Compresses and archives `data`; `false` if the write failed (kept in `failed`).
    fn store(&self, data: &[u8]) -> bool {
        let packed = pack(data);
        let align = crate::io::DIRECT_ALIGN;
        let len = packed.len().div_ceil(align).max(1) * align;
        let mut buf = crate::io::AlignedBuf::new(len.min(ARCHIVE_SLOT as usize));
        let n = packed.len().min(buf.as_slice().len());
        buf.as_mut_slice()[..n].copy_from_slice(&packed[..n]);
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % ARCHIVE_SLOTS;
        match crate::io::write_buf(&self.file, &self.path, slot * ARCHIVE_SLOT, buf) {
            Ok(()) => true,
            Err(e) => {
                let mut first = self.failed.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert(e);
                false
            }
        }
    }

    /// The first failed write, if any.
    fn check(&self) -> Result<(), BenchError> {
        match self.failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Sets the runtime's partition back to idle time only when dropped (also on an error).
struct PartitionReset<'a>(&'a Runtime);

impl Drop for PartitionReset<'_> {
    fn drop(&mut self) {
        self.0.set_onload_partition(0);
    }
}

/// Heat back to back on `rt`, the service offered a chunk every `offer` through
/// [`Runtime::onload`], for at least `hold` (the heat run under way when it ends finishes):
/// the figures of that time. With `controller`, DYON runs during it and is stopped as the
/// last heat run ends (its bandit returned), so no idle period after it is judged.
fn hold_partition(
    rt: &Arc<Runtime>,
    p: &HeatParams,
    archive: &Arc<Archive>,
    data: &Arc<Vec<u8>>,
    offer: Duration,
    hold: Duration,
    controller: Option<umt_rt::onload::DyonBuilder>,
) -> Result<(PartitionFigures, Option<umt_rt::onload::Bandit>), BenchError> {
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let producer = {
        let (rt, stop, data, counts, archive) = (
            rt.clone(),
            stop.clone(),
            data.clone(),
            counts.clone(),
            archive.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                counts.offered.fetch_add(1, Ordering::Relaxed);
                let (d, c, a) = (data.clone(), counts.clone(), archive.clone());
                let job = move |_| {
                    if a.store(&d) {
                        c.done.fetch_add(1, Ordering::Relaxed);
                    }
                };
                if let Onload::Rejected(_) = rt.onload(job) {
                    counts.rejected.fetch_add(1, Ordering::Relaxed);
                }
                // Woken early at the end of the hold.
                std::thread::park_timeout(offer);
            }
        })
    };
    let before = runtime_progress(rt);
    let t = Instant::now();
    let mut dyon = controller.map(|c| c.start(rt));
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
    let bandit = dyon.as_mut().map(|d| {
        d.stop();
        d.bandit()
    });
    let seconds = t.elapsed().as_secs_f64();
    let done = counts.done.load(Ordering::Relaxed);
    let after = runtime_progress(rt);
    stop.store(true, Ordering::Relaxed);
    producer.thread().unpark();
    let _ = producer.join();
    result?;
    archive.check()?;
    let (cpu, blocks) = (after.0 - before.0, after.1 - before.1);
    let cpio_us = if blocks > 0.0 {
        cpu / blocks * 1e6
    } else {
        f64::INFINITY
    };
    Ok((
        PartitionFigures {
            dedicated_cores: Some(rt.onload_stats().dedicated_cores),
            cpio_us,
            cpio_us_runs: vec![cpio_us],
            heat_iters_per_s: iters as f64 / seconds,
            chunks_per_s: done as f64 / seconds,
            offered: counts.offered.load(Ordering::Relaxed),
            rejected: counts.rejected.load(Ordering::Relaxed),
            seconds,
        },
        bandit,
    ))
}

/// Whether a synced write into `dir` moves this thread's storage-write count: where it does
/// not (a memory file system, a kernel without task I/O accounting), CPIO has no I/O to
/// count and the experiment means nothing. An error if the write itself fails.
fn storage_writes_counted(
    dir: &std::path::Path,
    io: crate::io::IoMode,
) -> Result<bool, BenchError> {
    let me = umt_sys::cpu::current_tid();
    let Ok(before) = umt_sys::cpu::thread_io(me) else {
        return Ok(false);
    };
    let path = dir.join("probe");
    let wrote = crate::io::create_file(&path, io, 0).and_then(|f| {
        let mut buf = crate::io::AlignedBuf::new(1 << 16);
        buf.as_mut_slice().fill(0xa5);
        crate::io::write_buf(&f, &path, 0, buf)?;
        f.sync_all()
            .map_err(|e| BenchError::io("syncing", &path, e))
    });
    let _ = std::fs::remove_file(&path);
    wrote?;
    Ok(umt_sys::cpu::thread_io(me)
        .is_ok_and(|after| after.written_bytes >= before.written_bytes + (1 << 16)))
}

/// Seed 002's experiment on `rt` (see the module's docs): every static partition held
/// `hold_periods` periods, `rounds` times (every other round in the reverse order), then
/// DYON for `periods` periods; a chunk is offered every `offer_every` compression times;
/// the archive goes in a private directory in `p.dir`.
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
    let dir = crate::io::private_dir(&p.dir, "umt-dyon-")
        .map_err(|e| BenchError::io("creating a private directory in", &p.dir, e))?;
    if !storage_writes_counted(dir.path(), p.io)? {
        return Err(BenchError::InvalidParam(format!(
            "no storage I/O is counted for writes in {} (a memory file system, or a kernel \
             without task I/O accounting, CONFIG_TASK_IO_ACCOUNTING): CPIO has nothing to \
             divide by; give a --dir on a disk",
            p.dir.display()
        )));
    }
    let data = chunk();
    let t = Instant::now();
    for _ in 0..3 {
        std::hint::black_box(compress(&data));
    }
    let offer = (t.elapsed() / 3).mul_f64(offer_every);
    let path = dir.path().join("archive");
    let archive = Arc::new(Archive {
        file: crate::io::create_file(&path, p.io, ARCHIVE_SLOT * ARCHIVE_SLOTS)?,
        path,
        next: AtomicU64::new(0),
        failed: std::sync::Mutex::new(None),
    });
    let _reset = PartitionReset(rt);
    let arms = rt.cpus().len() + 1;
    // At most 100 000 periods of at most 600 s: no overflow.
    let hold = period * hold_periods as u32;
    let mut runs: Vec<Vec<PartitionFigures>> = vec![Vec::new(); arms];
    for round in 0..rounds {
        for k in 0..arms {
            let arm = if round % 2 == 0 { k } else { arms - 1 - k };
            rt.set_onload_partition(arm);
            let (f, _) = hold_partition(rt, p, &archive, &data, offer, hold, None)?;
            runs[arm].push(f);
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
            cpio_us_runs: r.iter().map(|f| f.cpio_us).collect(),
            heat_iters_per_s: median(r, &|f| f.heat_iters_per_s),
            chunks_per_s: median(r, &|f| f.chunks_per_s),
            offered: r.iter().map(|f| f.offered).sum(),
            rejected: r.iter().map(|f| f.rejected).sum(),
            seconds: r.iter().map(|f| f.seconds).sum(),
        })
        .collect();
    let best_arm = (0..arms)
        .min_by(|&a, &b| sweep[a].cpio_us.total_cmp(&sweep[b].cpio_us))
        .unwrap_or(0);
    let controller = umt_rt::onload::Dyon::builder()
        .steps(arms)
        .period(period)
        .metric(umt_rt::onload::Metric::RuntimeCpio);
    let (mut dyon, bandit) = hold_partition(
        rt,
        p,
        &archive,
        &data,
        offer,
        period * periods as u32,
        Some(controller),
    )?;
    dyon.dedicated_cores = None;
    let bandit = bandit.unwrap_or_else(|| umt_rt::onload::Bandit::new(arms, Default::default(), 0));
    let pulls = bandit.counts().to_vec();
    let means = bandit.means().to_vec();
    let chosen_arm = (0..arms)
        .max_by(|&a, &b| pulls[a].cmp(&pulls[b]).then(means[a].total_cmp(&means[b])))
        .unwrap_or(0);
    let best = sweep[best_arm].cpio_us;
    let chosen_over_best = sweep[chosen_arm].cpio_us / best;
    let judged_periods = pulls.iter().sum::<u64>();
    let judged = judged_periods.max(1) as f64;
    Ok(DyonReport {
        period_seconds: period.as_secs_f64(),
        hold_periods,
        rounds,
        periods,
        best_arm,
        chosen_arm,
        share_on_best: pulls[best_arm] as f64 / judged,
        chosen_over_best,
        dyon_over_best: dyon.cpio_us / best,
        tolerance: DYON_TOLERANCE,
        converged: judged_periods > 0 && chosen_over_best <= DYON_TOLERANCE,
        inconclusive: sweep.iter().all(|f| f.cpio_us / best <= DYON_TOLERANCE),
        means,
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
