//! A service beside heat, three ways (seed 002's onload, measured in one run with the ways
//! alternating):
//!
//! ```text
//! cargo run --release -p umt-benches --example onload_service -- [rounds]
//! ```
//!
//! While heat runs (umt-rt, monitor `Auto`, O_DIRECT checkpoints), a producer thread offers
//! the service a 1 MiB chunk of checkpoint-like data to compress (flate2, level 1) every 4
//! compression times (measured first): a quarter of a core's worth of work on offer.
//! - `none`: no service (heat alone);
//! - `onload`: each chunk submitted with `Runtime::onload` (now or never): it runs only where
//!   heat leaves a core idle, or is rejected;
//! - `spawned`: each chunk spawned as an ordinary task (`Runtime::spawn_detached`), which
//!   competes with heat's tasks.
//!
//! Reports heat's median time per way, its ratio to `none`, and what the service did.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use umt_bench::heat::{self, HeatParams};
use umt_bench::io::IoMode;
use umt_rt::{BackendKind, Onload, Runtime};

/// 1 MiB of data shaped like a heat grid (smooth doubles), so compression has work to do.
fn chunk() -> Arc<Vec<u8>> {
    let v: Vec<u8> = (0..(1 << 17))
        .flat_map(|i: u64| ((i as f64 * 1e-3).sin() * 100.0).to_le_bytes())
        .collect();
    Arc::new(v)
}

fn compress(data: &[u8]) -> u64 {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = z.write_all(data);
    z.finish().map_or(0, |v| v.len() as u64)
}

#[derive(Default)]
struct Service {
    offered: AtomicU64,
    done: AtomicU64,
    rejected: AtomicU64,
    out_bytes: AtomicU64,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Way {
    None,
    Onload,
    Spawned,
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let rt = Arc::new(
        Runtime::builder()
            .monitor(BackendKind::Auto)
            .build()
            .expect("a runtime"),
    );
    let dir = std::env::temp_dir();
    let io = if umt_bench::io::probe_direct(&dir).is_ok() {
        IoMode::Direct
    } else {
        IoMode::Buffered
    };
    let p = HeatParams {
        n: 4096,
        block: 512,
        iters: 10,
        iof: Some(1),
        dir,
        io,
    };
    let data = chunk();
    let t = Instant::now();
    for _ in 0..5 {
        std::hint::black_box(compress(&data));
    }
    let cost = t.elapsed() / 5;
    let period = cost * 4;
    let ways = [Way::None, Way::Onload, Way::Spawned];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); ways.len()];
    let services: Vec<Arc<Service>> = ways.iter().map(|_| Arc::default()).collect();
    println!(
        "backend {:?}, {} cores, heat {}^2, {} iterations, a checkpoint each ({io:?}); a \
         chunk compresses in {:.1} ms, one offered every {:.1} ms",
        rt.backend(),
        rt.cpus().len(),
        p.n,
        p.iters,
        cost.as_secs_f64() * 1e3,
        period.as_secs_f64() * 1e3
    );
    for _ in 0..rounds {
        for (k, &way) in ways.iter().enumerate() {
            let stop = Arc::new(AtomicBool::new(false));
            let producer = (way != Way::None).then(|| {
                let (rt, stop, data, svc) =
                    (rt.clone(), stop.clone(), data.clone(), services[k].clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        svc.offered.fetch_add(1, Ordering::Relaxed);
                        let (d, s) = (data.clone(), svc.clone());
                        let job = move || {
                            s.out_bytes.fetch_add(compress(&d), Ordering::Relaxed);
                            s.done.fetch_add(1, Ordering::Relaxed);
                        };
                        match way {
                            Way::Onload => {
                                if let Onload::Rejected(_) = rt.onload(move |_| job()) {
                                    svc.rejected.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            _ => rt.spawn_detached(job),
                        }
                        std::thread::sleep(period);
                    }
                })
            });
            let t = Instant::now();
            let out = heat::run(&rt, &p).expect("heat");
            times[k].push(t.elapsed());
            drop(out);
            stop.store(true, Ordering::Relaxed);
            if let Some(h) = producer {
                let _ = h.join();
            }
            // Spawned chunks not run yet would slow the next round: let them finish.
            rt.scope(|_| {});
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Let the last onloaded and spawned work finish before counting.
    std::thread::sleep(Duration::from_millis(500));
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let base = median(&mut times[0].clone());
    for (k, way) in ways.iter().enumerate() {
        let m = median(&mut times[k]);
        let s = &services[k];
        println!(
            "{:<8} heat {:>8.1} ms  {:.3}x of none   service: {} chunks offered, {} compressed, \
             {} rejected ({:.1} MiB out)",
            format!("{way:?}").to_lowercase(),
            m.as_secs_f64() * 1e3,
            m.as_secs_f64() / base.as_secs_f64(),
            s.offered.load(Ordering::Relaxed),
            s.done.load(Ordering::Relaxed),
            s.rejected.load(Ordering::Relaxed),
            s.out_bytes.load(Ordering::Relaxed) as f64 / (1 << 20) as f64
        );
    }
    let st = rt.onload_stats();
    println!(
        "onload: {} started, {} rejected, runs per core {:?}",
        st.started, st.rejected, st.runs
    );
}
