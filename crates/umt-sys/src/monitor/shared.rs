//! A shared mapping of kernel memory as a slice of `T`: the Bpf backend's mmapable arrays and
//! the Kernel backend's counter page.

use std::num::NonZeroUsize;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering, fence};

use nix::errno::Errno;
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};

use crate::error::{Error, Result};

/// `len` values of `T` mapped from a descriptor, whole pages.
pub(crate) struct Shared<T> {
    ptr: NonNull<T>,
    len: usize,
    bytes: NonZeroUsize,
}

// SAFETY: the mapping is plain memory, shared with the kernel; `T` is made of atomics, so
// every access from any thread goes through atomic operations.
unsafe impl<T: Sync> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// Maps `len` values of `T` from `fd` (offset 0, shared), writable or read-only; `what`
    /// names it in errors.
    pub(crate) fn map(
        fd: BorrowedFd<'_>,
        len: usize,
        writable: bool,
        what: &'static str,
    ) -> Result<Self> {
        let page = crate::cpu::page_size();
        let bytes = (len * std::mem::size_of::<T>()).div_ceil(page) * page;
        let bytes = NonZeroUsize::new(bytes).ok_or_else(|| Error::os(what, Errno::EINVAL))?;
        let prot = if writable {
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
        } else {
            ProtFlags::PROT_READ
        };
        // SAFETY: a new shared mapping of `fd`, not overlapping anything (no address hint);
        // the kernel object behind `fd` is at least `bytes` long (a BPF array's value area or
        // the UMT counter page, both whole pages) and stays alive while mapped.
        let ptr = unsafe { mmap(None, bytes, prot, MapFlags::MAP_SHARED, fd, 0) }
            .map_err(|e| Error::os(what, e))?;
        Ok(Shared {
            ptr: ptr.cast(),
            len,
            bytes,
        })
    }

    /// The `i`-th value, if `i < len`.
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        // SAFETY: `i < len` values of `T` lie in the mapping, which lives as long as `self`;
        // the kernel zero-fills it and every `T` mapped here (atomics) is valid when zeroed.
        (i < self.len).then(|| unsafe { &*self.ptr.as_ptr().add(i) })
    }

    /// The number of values.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no reference into it outlives
        // `self`.
        let _ = unsafe { munmap(self.ptr.cast(), self.bytes.get()) };
    }
}

/// Loads from shared memory mapped read-only (the Kernel backend's counter page, `PROT_READ`).
///
/// Rust guarantees that relaxed atomic loads of at most 8 bytes work on read-only memory; an
/// acquire or sequentially consistent load may be compiled as a read-modify-write on some
/// targets (not x86-64 or aarch64 for these sizes, but the language does not promise it), which
/// would fault on a read-only page. So every load here is relaxed, and the ordering a caller
/// needs comes from fences beside it, which order at least as much as the stronger load would:
/// an acquire fence after the load makes it an acquire load; a sequentially consistent fence
/// before it orders it after everything the caller did before (its read of the CPU's file, a
/// system call, in the arm-then-check handshake of K2).
pub(crate) trait ReadOnlyLoad {
    /// The loaded value.
    type Value;
    /// A relaxed load (counters only summed for statistics).
    fn load_relaxed(&self) -> Self::Value;
    /// A load that later loads cannot pass: a relaxed load, then an acquire fence.
    fn load_acquire(&self) -> Self::Value {
        let v = self.load_relaxed();
        fence(Ordering::Acquire);
        v
    }
    /// A load ordered after every earlier access too: a sequentially consistent fence, then
    /// [`ReadOnlyLoad::load_acquire`].
    fn load_seq_cst(&self) -> Self::Value {
        fence(Ordering::SeqCst);
        self.load_acquire()
    }
}

impl ReadOnlyLoad for AtomicU64 {
    type Value = u64;
    fn load_relaxed(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
}

impl ReadOnlyLoad for AtomicI64 {
    type Value = i64;
    fn load_relaxed(&self) -> i64 {
        self.load(Ordering::Relaxed)
    }
}
