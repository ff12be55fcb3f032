//! # umt-bench: the paper's applications on every runtime
//!
//! The two applications of the UMT paper in native Rust, written once against [`umt_rt`] and
//! verified against sequential references, and the harness that times them side by side:
//!
//! - [`heat`]: 2D Gauss-Seidel heat diffusion with periodic `O_DIRECT` checkpoints (IV-E);
//! - [`fwi`]: the FWI mock-up, 3D velocity/stress propagation whose forward phase writes
//!   snapshots and whose backward phase reads them back (IV-D);
//! - [`runner`]: the runtimes compared (`baseline`, `umt-perf`, `umt-kernel`, `rayon`,
//!   `rayon-2x`, `tokio`, `io-uring`; the ports are [`port_rayon`], [`port_tokio`],
//!   [`port_uring`]) and one timed run;
//! - [`report`]: medians, speedups, percent of the overlap bound, the table and the JSON.
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

pub mod fwi;
pub mod heat;
pub mod io;
pub mod port_rayon;
pub mod port_tokio;
pub mod port_uring;
pub mod report;
pub mod runner;
