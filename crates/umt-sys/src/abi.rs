//! The UMT user/kernel ABI: syscall numbers, flags and the event encoding.
//!
//! This module is the single source of truth on the user-space side. The kernel patch in
//! `kernel-patch/` carries the same values in `include/uapi/linux/umt.h` and in the x86_64
//! syscall table; the test `abi_matches_kernel_patch` fails if the two ever disagree.
//!
//! # The calls
//!
//! ```text
//! long umt_enable(int *fds, unsigned int nr_fds, unsigned int flags);
//! long umt_thread_ctrl(unsigned int op, unsigned int flags);
//! ```
//!
//! 1. `umt_enable(fds, nr_fds, flags)` creates one read-only file per *possible* CPU (in ABI
//!    version 1, an eventfd), stores them in the calling process and writes their descriptors
//!    to `fds[0..nr_cpu_ids]` (`fds[i]` reports CPU `i`). It returns the number of descriptors written. `nr_fds` smaller than
//!    the number of possible CPUs gives `EINVAL`; a second call while enabled gives `EBUSY`; a
//!    bad pointer gives `EFAULT`; an unknown flag gives `EINVAL`.
//! 2. `umt_enable(NULL, 0, UMT_DISABLE)` tears the process's UMT state down: every thread stops
//!    being monitored and the kernel drops its references to the eventfds (user space still
//!    closes its own descriptors). `EINVAL` if UMT was not enabled.
//! 3. `umt_thread_ctrl(UMT_THREAD_MONITOR, 0)` makes the calling thread monitored and counts it
//!    as one *unblock* on the CPU it runs on, so the user-space ready count of that CPU includes
//!    it from then on. `UMT_THREAD_UNMONITOR` counts one *block* there and stops monitoring.
//!    Both give `EINVAL` before `umt_enable`, for an unknown operation or non-zero flags, and
//!    `EALREADY` when the thread already is (or is not) monitored.
//! 4. New threads and processes start unmonitored; a thread stops being monitored (one block)
//!    when it exits; `exec` tears the process's state down.
//!
//! # The event word
//!
//! A `read(2)` of a per-CPU file returns a `u64` and resets it: the low 32 bits count the
//! block events of that CPU since the last read, the high 32 bits the unblock events. Each half
//! saturates at `u32::MAX` instead of carrying into the other: a half that reads `u32::MAX`
//! lost counts. See [`Events`]. The unblock is counted when the thread runs again, not when it
//! is woken.
//!
//! # ABI version 2: the counter page and idle-only signalling
//!
//! With [`UMT_COUNTER_PAGE`], `mmap` of any of the files (offset 0, `PROT_READ`, `MAP_SHARED`,
//! [`UMT_COUNTS_SIZE`] bytes per CPU rounded up to whole pages) maps an array of
//! [`UmtCounts`], one per CPU, that the kernel keeps current. With [`UMT_IDLE_ONLY`] a CPU's
//! word's low half counts the drops of its ready count to zero ([`UMT_SIGNAL_OVERSUB`] adds
//! rises to two, in the high half), and the file is signalled only when such a change finds the
//! word empty: at most once between two reads. Reading the file asks for the next signal, so a
//! runtime that reads the counts from the page and the file only right before it sleeps is
//! signalled only while it sleeps (the steps are in the monitor's `README.md`, "The Kernel
//! backend on ABI version 2"). The files of version 2 are not eventfds: they cannot be
//! written.
//!
//! # Detecting the extension
//!
//! Mainline Linux later assigned 463 and 464 to other system calls (`setxattrat` and
//! `getxattrat`, Linux 6.13), so calling them blind on an unknown kernel is unsafe. A kernel with
//! UMT publishes [`UMT_SYSFS_ABI_VERSION`]; user space issues the system calls only when that
//! file exists and holds [`UMT_ABI_VERSION`].

/// x86_64 system call number of `umt_enable` in the Linux 6.12 UMT patch.
pub const SYS_UMT_ENABLE: libc::c_long = 463;
/// x86_64 system call number of `umt_thread_ctrl` in the Linux 6.12 UMT patch.
pub const SYS_UMT_THREAD_CTRL: libc::c_long = 464;

/// `umt_enable` flag: the eventfds are created close-on-exec.
pub const UMT_FD_CLOEXEC: u32 = 0x1;
/// `umt_enable` flag: the eventfds are created non-blocking.
pub const UMT_FD_NONBLOCK: u32 = 0x2;
/// `umt_enable` flag (ABI 2): the files can be mapped, giving the [`UmtCounts`] of every CPU.
pub const UMT_COUNTER_PAGE: u32 = 0x4;
/// `umt_enable` flag (ABI 2, with [`UMT_COUNTER_PAGE`]): signal a CPU's file only when its
/// ready count drops to zero, and at most once between two reads of the file.
pub const UMT_IDLE_ONLY: u32 = 0x8;
/// `umt_enable` flag (ABI 2, with [`UMT_IDLE_ONLY`]): also when it rises to two.
pub const UMT_SIGNAL_OVERSUB: u32 = 0x10;
/// `umt_enable` flag: tear the process's UMT state down (with `fds == NULL`, `nr_fds == 0`).
pub const UMT_DISABLE: u32 = 0x8000_0000;

/// `umt_thread_ctrl` operation: start monitoring the calling thread.
pub const UMT_THREAD_MONITOR: u32 = 1;
/// `umt_thread_ctrl` operation: stop monitoring the calling thread.
pub const UMT_THREAD_UNMONITOR: u32 = 2;

/// Shift of the unblock count inside the 64-bit event word.
pub const UMT_EVENT_UNBLOCK_SHIFT: u32 = 32;
/// Mask of one count (block or unblock) inside the event word, after shifting.
pub const UMT_EVENT_COUNT_MASK: u64 = 0xffff_ffff;

/// Version of this ABI, as published by the kernel in [`UMT_SYSFS_ABI_VERSION`]. umt-sys also
/// speaks version 1 (no counter page, eventfds).
pub const UMT_ABI_VERSION: u32 = 2;

/// One CPU's counters in the counter page (`struct umt_counts`): 64 bytes, updated by the
/// kernel with atomic operations, read-only for user space.
///
/// The page is mapped `PROT_READ`: load its fields with `Ordering::Relaxed` only, and put a
/// `fence` beside the load where an ordering is needed. Rust promises that relaxed loads work
/// on read-only memory; a stronger load may be compiled as a read-modify-write, which faults.
#[repr(C)]
#[derive(Debug)]
pub struct UmtCounts {
    /// Monitored threads accounted on the CPU and not blocked (unblocks minus blocks).
    pub ready: std::sync::atomic::AtomicI64,
    /// Blocks counted on the CPU since `umt_enable`.
    pub blocks: std::sync::atomic::AtomicU64,
    /// Unblocks counted on the CPU since `umt_enable`.
    pub unblocks: std::sync::atomic::AtomicU64,
    /// Times the CPU's file was signalled (woke its waiters). With [`UMT_IDLE_ONLY`], at most
    /// once between two reads of the file: a drop while an earlier one is unread adds to the
    /// word without a new wake-up.
    pub signals: std::sync::atomic::AtomicU64,
    /// Times the ready count dropped to zero.
    pub drops: std::sync::atomic::AtomicU64,
    /// Times the ready count rose to two.
    pub rises: std::sync::atomic::AtomicU64,
    /// Zero.
    pub reserved: [u64; 2],
}

/// Bytes of the counters of one CPU in the counter page (`UMT_COUNTS_SIZE(1)`).
pub const UMT_COUNTS_SIZE: usize = std::mem::size_of::<UmtCounts>();

const _: () = assert!(UMT_COUNTS_SIZE == 64);
/// The sysfs file through which a UMT kernel announces itself.
pub const UMT_SYSFS_ABI_VERSION: &str = "/sys/kernel/umt/abi_version";

/// Block and unblock counts of one CPU, as carried by one eventfd read.
///
/// ```
/// use umt_sys::Events;
///
/// let word = (3u64 << 32) | 5; // 5 blocks, 3 unblocks since the last read
/// let ev = Events::decode(word);
/// assert_eq!(ev, Events { blocked: 5, unblocked: 3 });
/// assert_eq!(ev.ready_delta(), -2);
/// assert_eq!(ev.encode(), word);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Events {
    /// Monitored threads that blocked on this CPU.
    pub blocked: u32,
    /// Monitored threads that became runnable again on this CPU.
    pub unblocked: u32,
}

impl Events {
    /// One block event.
    pub const BLOCK: Events = Events {
        blocked: 1,
        unblocked: 0,
    };
    /// One unblock event.
    pub const UNBLOCK: Events = Events {
        blocked: 0,
        unblocked: 1,
    };

    /// Splits an eventfd word into its two counts.
    pub const fn decode(word: u64) -> Events {
        Events {
            blocked: (word & UMT_EVENT_COUNT_MASK) as u32,
            unblocked: ((word >> UMT_EVENT_UNBLOCK_SHIFT) & UMT_EVENT_COUNT_MASK) as u32,
        }
    }

    /// Packs the two counts into an eventfd word (the inverse of [`Events::decode`]).
    pub const fn encode(self) -> u64 {
        (self.blocked as u64) | ((self.unblocked as u64) << UMT_EVENT_UNBLOCK_SHIFT)
    }

    /// Change of the ready count this batch implies: unblocked minus blocked.
    pub const fn ready_delta(self) -> i64 {
        self.unblocked as i64 - self.blocked as i64
    }

    /// `true` when the batch holds no event.
    pub const fn is_empty(self) -> bool {
        self.blocked == 0 && self.unblocked == 0
    }

    /// Adds another batch, saturating each count as the kernel does.
    pub const fn saturating_add(self, other: Events) -> Events {
        Events {
            blocked: self.blocked.saturating_add(other.blocked),
            unblocked: self.unblocked.saturating_add(other.unblocked),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn decode_encode_roundtrip(word: u64) {
            prop_assert_eq!(Events::decode(word).encode(), word);
        }

        #[test]
        fn halves_are_independent(blocked: u32, unblocked: u32) {
            let ev = Events { blocked, unblocked };
            prop_assert_eq!(Events::decode(ev.encode()), ev);
            prop_assert_eq!(ev.ready_delta(), unblocked as i64 - blocked as i64);
        }

        #[test]
        fn saturating_add_never_carries(a: u32, b: u32, c: u32, d: u32) {
            let s = Events { blocked: a, unblocked: b }.saturating_add(Events { blocked: c, unblocked: d });
            prop_assert_eq!(s.blocked, a.saturating_add(c));
            prop_assert_eq!(s.unblocked, b.saturating_add(d));
        }
    }
}
