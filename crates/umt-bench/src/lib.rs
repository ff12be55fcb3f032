//! # umt-bench: the paper's applications on every runtime
//!
//! The two applications of the UMT paper in native Rust, written once against [`umt_rt`] and
//! verified against sequential references, and the harness that times them side by side:
//!
//! - [`heat`]: 2D Gauss-Seidel heat diffusion with periodic `O_DIRECT` checkpoints (IV-E);
//! - [`fwi`]: the FWI mock-up, 3D velocity/stress propagation whose forward phase writes
//!   snapshots and whose backward phase reads them back (IV-D);
//! - [`runner`]: the runtimes compared, one row each of its table (`baseline`, `umt-perf`,
//!   `umt-kernel`, `umt-bpf`, `rayon`, `rayon-2x`, `rayon-4x`, `rayon-8x`, `tokio`, `io-uring`,
//!   `umt-io`), and one timed run;
//! - [`port`]: what a runtime adapter provides ([`port::Port`], [`port::Engine`]); the ports are
//!   [`port_umt`] (umt-rt's own code; `umt-io` with its I/O through [`umt_rt::io`]),
//!   [`port_rayon`], [`port_tokio`], [`port_uring`];
//! - [`scan`]: many cold files read and hashed, a user's program;
//! - [`compare`]: every runner and the two bound runs, alternating, into a [`report::Report`];
//! - [`bound`]: the overlap bound and the tight bound from the two bound runs;
//! - [`calibrate`]: how often to checkpoint so that compute and I/O balance on this machine;
//! - [`report`]: medians, speedups, percent of the overlap bound, the table and the JSON;
//! - [`plot`]: pictures: per-core timelines of a traced run, the comparison's bars;
//! - [`service`]: a compression service beside heat, onloaded or spawned (seed 002);
//! - [`error`]: what can go wrong, and how a run's tasks report it;
//! - `dist` (feature `mpi`): heat and FWI across MPI ranks, with halo messages that block or that
//!   wait through [`umt_rt::io`].
//!
//! The `umt-bench` binary is the command line: `umt-bench heat|fwi|compare [...]`.
//!
//! ```
//! use umt_bench::heat::{self, HeatParams};
//! use umt_bench::io::IoMode;
//!
//! let rt = umt_rt::Runtime::new()?;
//! let p = HeatParams { n: 64, block: 32, iters: 4, iof: None, dir: std::env::temp_dir(), io: IoMode::Buffered };
//! let out = heat::run(&rt, &p)?;
//! assert_eq!(out.matrix, heat::sequential(&p, 4)); // bit-identical to a sequential sweep
//! println!("{:.3e} cells/s", out.cells_per_second(&p));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod bound;
pub mod calibrate;
pub mod compare;
#[cfg(feature = "mpi")]
pub mod dist;
pub mod error;
pub mod fwi;
pub mod heat;
pub mod io;
pub mod plot;
pub mod port;
pub mod port_rayon;
pub mod port_tokio;
pub mod port_umt;
pub mod port_uring;
pub mod report;
pub mod rundir;
pub mod runner;
pub mod scale;
pub mod scan;
pub mod serve;
pub mod service;

/// Helpers of the unit tests.
#[cfg(test)]
pub(crate) mod testutil {
    use crate::error::BenchError;
    use crate::fwi::{FwiParams, FwiRun};
    use crate::heat::{HeatParams, HeatRun};
    use crate::io::IoMode;

    /// Bit-for-bit equality of two result arrays.
    pub(crate) fn same(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    /// The temp dir, with O_DIRECT when it takes it.
    pub(crate) fn dir_and_mode() -> (std::path::PathBuf, IoMode) {
        let dir = std::env::temp_dir();
        let io = IoMode::for_dir(&dir);
        (dir, io)
    }

    /// A port's heat run is bit-identical to the sequential sweep, and so is every checkpoint.
    pub(crate) fn check_heat_port(run: impl Fn(&HeatParams) -> Result<HeatRun, BenchError>) {
        let (dir, io) = dir_and_mode();
        let p = HeatParams {
            n: 128,
            block: 32,
            iters: 5,
            iof: Some(2),
            dir,
            io,
        };
        let out = run(&p).unwrap();
        assert!(same(&out.matrix, &crate::heat::sequential(&p, 5)));
        assert_eq!(out.checkpoints.len(), 2);
        for (it, path) in &out.checkpoints {
            let raw = crate::io::read_f64s(path, 0, p.n * p.n).unwrap();
            let m = crate::heat::checkpoint_to_matrix(&p, &raw);
            assert!(
                same(&m, &crate::heat::sequential(&p, *it)),
                "checkpoint {it}"
            );
        }
    }

    /// A port's FWI run matches the sequential one and verified every snapshot.
    pub(crate) fn check_fwi_port(run: impl Fn(&FwiParams) -> Result<FwiRun, BenchError>) {
        let (dir, io) = dir_and_mode();
        let p = FwiParams {
            nz: 16,
            nx: 32,
            ny: 10,
            steps: 5,
            iof: 2,
            dir,
            io,
        };
        let out = run(&p).unwrap();
        let (v, s, img) = crate::fwi::sequential(&p);
        assert!(same(&out.velocity, &v) && same(&out.stress, &s) && same(&out.image, &img));
        assert_eq!(out.snapshots_verified, 2 * p.ny);
    }
}
