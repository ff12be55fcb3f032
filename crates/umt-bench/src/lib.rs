//! # umt-bench: the paper's applications on every runtime (in progress)
//!
//! The two applications of the UMT paper in native Rust, written once against [`umt_rt`] and
//! verified against sequential references:
//!
//! - [`heat`]: 2D Gauss-Seidel heat diffusion with periodic `O_DIRECT` checkpoints (IV-E);
//! - FWI mock-up (IV-D), the runners for other runtimes and the `compare` CLI come next.
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

pub mod heat;
pub mod io;
