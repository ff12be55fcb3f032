//! # umt-bench: the paper's applications on every runtime (in progress)
//!
//! Heat diffusion with checkpoints and the FWI mock-up, run side by side on umt-rt and on the
//! runtimes people would otherwise use. The applications and the `compare` command land with
//! the benchmark issue.
//!
//! ```
//! assert_eq!(umt_bench::WORKLOADS, ["heat", "fwi"]);
//! ```
#![deny(missing_docs)]

/// The workloads this crate will run.
pub const WORKLOADS: [&str; 2] = ["heat", "fwi"];
