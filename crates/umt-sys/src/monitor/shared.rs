//! A shared mapping of kernel memory as a slice of `T`: the Bpf backend's mmapable arrays and
//! the Kernel backend's counter page (ABI 2).

use std::num::NonZeroUsize;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;

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
