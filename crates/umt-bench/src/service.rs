//! A service beside heat, three ways (seed 002's onload): none, onloaded
//! ([`umt_rt::Runtime::onload`], now or never), and spawned as ordinary tasks.
//!
//! While heat runs on umt-rt, a producer thread offers the service a 1 MiB chunk of
//! checkpoint-like data to compress (flate2, level 1) every `offer_every` compression times
//! (measured first). Onloaded chunks run only where heat leaves a core idle, or are rejected;
//! spawned chunks compete with heat's tasks. The ways alternate, `rounds` times, on one
//! runtime; the result gives heat's median time per way and what the service did.

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
