//! The UMT user/kernel ABI: syscall numbers, flags, ioctls and the event encoding.
//!
//! This module is the single source of truth on the user-space side. The kernel patch in
//! `kernel-patch/` carries the same values in `include/uapi/linux/umt.h` and in the x86_64
//! syscall table; the test `abi_matches_kernel_patch` fails if the two ever disagree. This is
//! the ABI of v3 of the series; umt-sys no longer speaks v2's (one descriptor per possible CPU
//! from `umt_enable`, the `abi_version` file in sysfs, system calls 463 and 464).
//!
//! # The calls
//!
//! ```text
//! int umt_enable(struct umt_args *args, size_t size);
//! long umt_thread_ctrl(unsigned int op, unsigned int flags);
//! ```
//!
//! 1. `umt_enable(&args, sizeof(args))` ([`UmtArgs`], [`UMT_ARGS_SIZE_VER0`] bytes) enables
//!    UMT for the calling process and returns one descriptor, the *UMT file*. The struct is
//!    extensible as `clone3`'s: a larger one is accepted when the part this kernel does not
//!    know is zero, and refused with `E2BIG` otherwise. An unknown or inconsistent flag gives
//!    `EINVAL`, a second call while enabled `EBUSY`, and a kernel without UMT v3 `ENOSYS`
//!    (a kernel with the v2 patch too: its calls had other numbers).
//! 2. The UMT file: `mmap` maps the counter page (below); `ioctl(fd, UMT_IOC_CPU_FD, cpu)`
//!    ([`UMT_IOC_CPU_FD`], the CPU number passed by value) returns a new descriptor, the *CPU
//!    file* of `cpu` (`EINVAL` for a CPU that is not possible), so a process opens only the
//!    files of the CPUs it watches; `ioctl(fd, UMT_IOC_DISABLE, 0)` ([`UMT_IOC_DISABLE`])
//!    tears the process's UMT state down: no thread is monitored any more, a read of a CPU
//!    file whose word is empty returns 0 (end of file) and `poll` reports `EPOLLHUP`. Closing
//!    the descriptors does *not* disable UMT; exec and the exit of the last thread do.
//! 3. `umt_thread_ctrl(UMT_THREAD_MONITOR, 0)` makes the calling thread monitored and counts it
//!    as one *unblock* on the CPU it runs on, so the user-space ready count of that CPU includes
//!    it from then on. `UMT_THREAD_UNMONITOR` counts one *block* there and stops monitoring.
//!    Both give `EINVAL` before `umt_enable`, for an unknown operation or non-zero flags, and
//!    `EALREADY` when the thread already is (or is not) monitored.
//! 4. New threads and processes start unmonitored; a thread stops being monitored (one block)
//!    when it exits.
//!
//! # The event word
//!
//! A `read(2)` of a CPU file returns a `u64` and resets it: the low 32 bits count the block
//! events of that CPU since the last read, the high 32 bits the unblock events. Each half
//! saturates at `u32::MAX` instead of carrying into the other: a half that reads `u32::MAX`
//! lost counts. See [`Events`]. The unblock is counted when the thread runs again, not when it
//! is woken. Every CPU file of one CPU reads the same word. The files are read-only, and not
//! eventfds.
//!
//! # The counter page and idle-only signalling
//!
//! `mmap` of the UMT file (offset 0, `PROT_READ`, `MAP_SHARED`, [`UMT_COUNTS_SIZE`] bytes per
//! possible CPU rounded up to whole pages) maps an array of [`UmtCounts`], one per CPU, that
//! the kernel keeps current, whatever the flags. With [`UMT_IDLE_ONLY`] a CPU's word's low
//! half counts the drops of its ready count to zero ([`UMT_SIGNAL_OVERSUB`] adds rises to two,
//! in the high half), and the file is signalled only when such a change finds the word empty:
//! at most once between two reads. Reading the file asks for the next signal, so a runtime
//! that reads the counts from the page and the file only right before it sleeps is signalled
//! only while it sleeps (the steps are in the monitor's `README.md`, "The Kernel backend").
//!
//! # Detecting the extension
//!
//! There is no version file: the ABI is what `umt_enable` accepts. The system call numbers
//! are placeholders of the patch series until it is merged, and mainline Linux may give them
//! to other calls (it gave 463 and 464, v2's numbers, to `setxattrat` and `getxattrat` in
//! 6.13). So umt-sys first asks `umt_enable` something that UMT refuses without side effects
//! (a struct with a non-zero tail, which UMT v3, like every extensible-struct call, answers
//! with `E2BIG`), and enables UMT only after that answer.

/// x86_64 system call number of `umt_enable` in v3 of the UMT patch series: a placeholder
/// until the series is merged (mainline may assign the call another number, and this one to
/// another call).
pub const SYS_UMT_ENABLE: libc::c_long = 471;
/// x86_64 system call number of `umt_thread_ctrl` in v3 of the UMT patch series: a
/// placeholder, as [`SYS_UMT_ENABLE`].
pub const SYS_UMT_THREAD_CTRL: libc::c_long = 472;

/// The arguments of `umt_enable` (`struct umt_args`), whose size the call takes beside it.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UmtArgs {
    /// `UMT_*` flags: [`UMT_FD_CLOEXEC`], [`UMT_FD_NONBLOCK`], [`UMT_IDLE_ONLY`],
    /// [`UMT_SIGNAL_OVERSUB`].
    pub flags: u64,
}

/// Size of the first published [`UmtArgs`]: the least `umt_enable` accepts.
pub const UMT_ARGS_SIZE_VER0: usize = 8;

const _: () = assert!(std::mem::size_of::<UmtArgs>() == UMT_ARGS_SIZE_VER0);

/// `umt_enable` flag: the UMT file and the CPU files are created close-on-exec.
pub const UMT_FD_CLOEXEC: u64 = 0x1;
/// `umt_enable` flag: the CPU files are created non-blocking.
pub const UMT_FD_NONBLOCK: u64 = 0x2;
/// `umt_enable` flag: signal a CPU's file only when its ready count drops to zero, and at most
/// once between two reads of the file (without it, every block and unblock is signalled).
pub const UMT_IDLE_ONLY: u64 = 0x4;
/// `umt_enable` flag (with [`UMT_IDLE_ONLY`] only): also when it rises to two.
pub const UMT_SIGNAL_OVERSUB: u64 = 0x8;
/// Every `umt_enable` flag of this ABI; the kernel refuses any other bit with `EINVAL`.
pub const UMT_ENABLE_FLAGS: u64 =
    UMT_FD_CLOEXEC | UMT_FD_NONBLOCK | UMT_IDLE_ONLY | UMT_SIGNAL_OVERSUB;

impl UmtArgs {
    /// The arguments for `flags`.
    pub const fn new(flags: u64) -> UmtArgs {
        UmtArgs { flags }
    }

    /// Whether the kernel accepts these flags: no unknown bit, and [`UMT_SIGNAL_OVERSUB`] only
    /// with [`UMT_IDLE_ONLY`].
    pub const fn is_valid(self) -> bool {
        self.flags & !UMT_ENABLE_FLAGS == 0
            && (self.flags & UMT_SIGNAL_OVERSUB == 0 || self.flags & UMT_IDLE_ONLY != 0)
    }
}

/// Type (magic number) of the UMT file's ioctls.
pub const UMT_IOC_MAGIC: u8 = 0xb5;
/// ioctl of the UMT file: a new descriptor for the CPU file of the CPU passed as the argument,
/// by value (`_IO(UMT_IOC_MAGIC, 1)`).
pub const UMT_IOC_CPU_FD: u32 = ioc_none(UMT_IOC_MAGIC, 1);
/// ioctl of the UMT file: tear the process's UMT state down; the argument is 0
/// (`_IO(UMT_IOC_MAGIC, 2)`).
pub const UMT_IOC_DISABLE: u32 = ioc_none(UMT_IOC_MAGIC, 2);

/// `_IO(ty, nr)`: an ioctl number without argument data, in the encoding of x86_64 and
/// aarch64 (no direction bits, size 0).
pub const fn ioc_none(ty: u8, nr: u8) -> u32 {
    ((ty as u32) << 8) | nr as u32
}

/// `umt_thread_ctrl` operation: start monitoring the calling thread.
pub const UMT_THREAD_MONITOR: u32 = 1;
/// `umt_thread_ctrl` operation: stop monitoring the calling thread.
pub const UMT_THREAD_UNMONITOR: u32 = 2;

/// Shift of the unblock count inside the 64-bit event word.
pub const UMT_EVENT_UNBLOCK_SHIFT: u32 = 32;
/// Mask of one count (block or unblock) inside the event word, after shifting.
pub const UMT_EVENT_COUNT_MASK: u64 = 0xffff_ffff;

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
    /// Times the CPU's word was signalled, whether a reader slept on its file or not. With
    /// [`UMT_IDLE_ONLY`], at most once between two reads of the file: a drop while an earlier
    /// one is unread adds to the word without a new signal.
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

/// Block and unblock counts of one CPU, as carried by one read of its CPU file.
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

    /// Splits an event word into its two counts.
    pub const fn decode(word: u64) -> Events {
        Events {
            blocked: (word & UMT_EVENT_COUNT_MASK) as u32,
            unblocked: ((word >> UMT_EVENT_UNBLOCK_SHIFT) & UMT_EVENT_COUNT_MASK) as u32,
        }
    }

    /// Packs the two counts into an event word (the inverse of [`Events::decode`]).
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

    #[test]
    fn umt_args_is_the_kernel_struct() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(size_of::<UmtArgs>(), UMT_ARGS_SIZE_VER0);
        // `__aligned_u64`: 8-byte aligned on every target, i386 included.
        assert_eq!(align_of::<UmtArgs>(), 8);
        assert_eq!(offset_of!(UmtArgs, flags), 0);
        assert_eq!(UmtArgs::new(UMT_FD_CLOEXEC | UMT_IDLE_ONLY).flags, 0x5);
        assert_eq!(UmtArgs::default().flags, 0);
    }

    #[test]
    fn flags_are_distinct_bits_and_checked_as_the_kernel_does() {
        let flags = [
            UMT_FD_CLOEXEC,
            UMT_FD_NONBLOCK,
            UMT_IDLE_ONLY,
            UMT_SIGNAL_OVERSUB,
        ];
        assert_eq!(flags, [1, 2, 4, 8]);
        assert_eq!(flags.iter().fold(0, |a, f| a | f), UMT_ENABLE_FLAGS);
        assert!(UmtArgs::new(0).is_valid());
        assert!(UmtArgs::new(UMT_ENABLE_FLAGS).is_valid());
        assert!(UmtArgs::new(UMT_FD_CLOEXEC | UMT_FD_NONBLOCK | UMT_IDLE_ONLY).is_valid());
        // Oversubscription signals exist only in idle-only mode.
        assert!(!UmtArgs::new(UMT_SIGNAL_OVERSUB).is_valid());
        // Unknown bits, among them v2's UMT_DISABLE (bit 31) and UMT_COUNTER_PAGE (0x4 then,
        // now UMT_IDLE_ONLY; its 0x10, v2's UMT_SIGNAL_OVERSUB, is unknown now).
        assert!(!UmtArgs::new(1 << 31).is_valid());
        assert!(!UmtArgs::new(0x10).is_valid());
        assert!(!UmtArgs::new(1 << 63).is_valid());
    }

    #[test]
    fn ioctl_numbers_are_io_of_the_magic() {
        // _IO(type, nr) = _IOC(_IOC_NONE, type, nr, 0): direction 0, size 0 on x86_64 and
        // aarch64.
        assert_eq!(UMT_IOC_CPU_FD, 0xb501);
        assert_eq!(UMT_IOC_DISABLE, 0xb502);
        assert_eq!(ioc_none(0xff, 0xff), 0xffff);
    }

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
