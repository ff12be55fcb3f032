//! Criterion benchmarks of umt live in this crate's `benches/` directory (`cargo bench -p
//! umt-benches`). The runtime and application benchmarks land with their issues.
#![deny(missing_docs)]
