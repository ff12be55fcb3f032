//! # umt-sys: the kernel interface of umt
//!
//! umt keeps every core busy while tasks block in the kernel. To do that its runtime must learn,
//! per core, when a worker thread blocks (an `O_DIRECT` write, a read, a page fault) and when it
//! runs again. This crate is the only part of umt that talks to the kernel about it:
//!
//! - [`abi`]: the User-Monitored Threads (UMT) ABI shared with the kernel patch in
//!   `kernel-patch/` (v3 of the series): syscall numbers, flags, ioctls, and the per-core event
//!   word ([`Events`]).
//! - [`Monitor`]: per-core block/unblock events and ready counts for the threads registered with
//!   it, from one of four backends that look the same to the caller:
//!   - **Kernel**: the UMT extension (counted by the scheduler: the ready counts in a page the
//!     process maps, and a read-only file per core watched, opened as needed, signalled only
//!     when the core runs out of ready threads);
//!   - **Bpf**: BPF programs on the scheduler's tracepoints keep the ready counts in memory
//!     this process maps, and wake a waiter only when its core runs out of ready threads
//!     ([`Monitor::counts_are_live`]); stock Linux >= 5.18 with BTF, CAP_BPF + CAP_PERFMON,
//!     and clang at build time (the `bpf` feature, on by default);
//!   - **Perf**: `perf_event_open` context-switch records, on any stock Linux >= 4.3 with
//!     `perf_event_paranoid <= 2`;
//!   - **Disabled**: no monitoring, the baseline.
//!
//!   [`BackendKind::Auto`] picks the first that works, and [`Monitor::selection`] tells why the
//!   others were rejected and how to fix that.
//! - [`cpu`]: the process affinity mask and thread pinning.
//! - [`uring`]: an io_uring that several threads share, for umt-rt's scheduler-centric I/O
//!   wait (one per core).
//!
//! The counter semantics and the drain protocol are described step by step in
//! `src/monitor/README.md`.
//!
//! ## Example
//!
//! A thread blocks in `read(2)` on a pipe; the monitor reports the block on the core it ran on,
//! and the unblock when the write wakes it.
//!
//! ```
//! use std::io::{Read, Write};
//! use std::time::Duration;
//! use umt_sys::{BackendKind, Monitor, cpu};
//!
//! let monitor = Monitor::new(BackendKind::Auto)?;
//! println!("{}", monitor.selection()); // e.g. "backend: perf (requested auto); kernel backend unavailable: ..."
//! let (mut rx, mut tx) = std::io::pipe().expect("pipe");
//! let (tid_tx, tid_rx) = std::sync::mpsc::channel();
//! std::thread::scope(|s| {
//!     let reader = s.spawn(|| -> Result<usize, umt_sys::Error> {
//!         cpu::pin_current_thread(cpu::process_cpus()?[0])?;
//!         monitor.register_current_thread()?;
//!         tid_tx.send(cpu::current_tid()).expect("send");
//!         let mut byte = [0u8; 1];
//!         rx.read_exact(&mut byte).expect("read"); // blocks until the write below
//!         monitor.unregister_current_thread()?;
//!         Ok(cpu::current_cpu()?)
//!     });
//!     // Write only once the reader sleeps in the read, however busy the machine is.
//!     let tid = tid_rx.recv().expect("the reader's id");
//!     while cpu::thread_runnable(tid)? {
//!         std::thread::sleep(Duration::from_millis(1));
//!     }
//!     tx.write_all(b"x").expect("write");
//!     reader.join().expect("reader")
//! })?;
//! let stats = monitor.stats();
//! if monitor.is_active() {
//!     monitor.drain()?;
//!     assert!(monitor.stats().blocks >= 1);
//! }
//! assert_eq!(monitor.ready_counts().iter().sum::<i64>(), 0); // nothing registered any more
//! # let _ = stats;
//! # Ok::<(), umt_sys::Error>(())
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// On another OS than Linux only the Disabled backend exists: the plumbing the others share
// (event parsing, ready-count tracking, the perf and BPF paths' helpers) is built but unused.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

pub mod abi;
mod backend;
pub mod clock;
pub mod cpu;
mod error;
mod event;
mod monitor;
mod ready;
#[cfg(target_os = "linux")]
pub mod uring;
#[cfg(not(target_os = "linux"))]
#[path = "uring_elsewhere.rs"]
pub mod uring;

pub use abi::Events;
pub use backend::{BackendKind, ParseBackendError, Selection, Unavailable};
pub use cpu::CpuId;
pub use error::{Error, Result};
pub use event::{Cause, MonitorEvent};
pub use monitor::{
    BPF_MAX_THREADS, DEFAULT_RING_PAGES, HANDOFF_ENABLED, HANDOFF_IN_TASK, HANDOFF_SIGNAL_VALUE,
    Handoff, HandoffFlags, Monitor, MonitorBuilder, MonitorStats,
};

/// The crate's `README.md`, whose examples run as doc tests (what crates.io shows compiles).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
