//! # umt-rt: the umt task runtime (in progress)
//!
//! The M:N work-stealing runtime with pinned workers, a leader thread and per-core idle pools
//! that keeps every core busy while tasks block in the kernel. It is built on
//! [`umt_sys::Monitor`]; its API lands with the runtime issue.
//!
//! ```
//! // Until the runtime lands, the monitor it will use is already available:
//! let monitor = umt_sys::Monitor::new(umt_sys::BackendKind::Auto)?;
//! println!("{}", monitor.selection());
//! # Ok::<(), umt_sys::Error>(())
//! ```
#![deny(missing_docs)]
