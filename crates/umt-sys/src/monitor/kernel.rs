//! The Kernel backend: the UMT extension (`umt_enable`, `umt_thread_ctrl`, per-core eventfds).

use std::fs;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags, EpollTimeout};

use crate::abi::{
    Events, SYS_UMT_ENABLE, SYS_UMT_THREAD_CTRL, UMT_ABI_VERSION, UMT_DISABLE, UMT_FD_CLOEXEC,
    UMT_FD_NONBLOCK, UMT_SYSFS_ABI_VERSION, UMT_THREAD_MONITOR, UMT_THREAD_UNMONITOR,
};
use crate::backend::{BackendKind, Unavailable};
use crate::error::{Error, Result};
use crate::event::{Cause, MonitorEvent};

const FIX: &str = "boot the patched kernel from kernel-patch/ (`cargo xtask vm run -- CMD`), \
                   or use the perf backend";

/// Checks that the running kernel has the UMT extension with our ABI version.
///
/// The system calls are only issued when the kernel announces itself in sysfs: mainline Linux
/// reuses 463 and 464 for other calls, so a blind call could do something else entirely.
pub(crate) fn probe() -> std::result::Result<(), Unavailable> {
    check_abi_file(fs::read_to_string(UMT_SYSFS_ABI_VERSION))
}

pub(crate) fn check_abi_file(
    contents: std::io::Result<String>,
) -> std::result::Result<(), Unavailable> {
    let unavailable = |reason: String| Unavailable::new(BackendKind::Kernel, reason);
    match contents {
        Ok(text) => match text.trim().parse::<u32>() {
            Ok(UMT_ABI_VERSION) => Ok(()),
            Ok(v) => Err(unavailable(format!(
                "the kernel speaks UMT ABI version {v}, umt-sys speaks version {UMT_ABI_VERSION}"
            ))
            .with_fix("use the umt-sys release that matches the kernel patch")),
            Err(_) => Err(unavailable(format!(
                "{UMT_SYSFS_ABI_VERSION} holds {:?}, not an ABI version",
                text.trim()
            ))),
        },
        Err(_) => Err(unavailable(format!(
            "this kernel has no UMT extension ({UMT_SYSFS_ABI_VERSION} is missing)"
        ))
        .with_fix(FIX)),
    }
}

fn umt_thread_ctrl(op: u32) -> std::result::Result<(), Errno> {
    // SAFETY: umt_thread_ctrl takes two integers and touches no user memory; probe() made sure
    // the running kernel implements it under this number.
    let ret = unsafe { libc::syscall(SYS_UMT_THREAD_CTRL, op, 0u32) };
    if ret < 0 { Err(Errno::last()) } else { Ok(()) }
}

fn not_available(errno: Errno) -> Error {
    Error::Unavailable(
        Unavailable::new(
            BackendKind::Kernel,
            format!("the UMT system calls failed ({})", errno.desc()),
        )
        .with_fix(FIX),
    )
}

pub(crate) struct KernelBackend {
    /// `fds[cpu]` is the eventfd of `cpu`.
    fds: Vec<OwnedFd>,
    /// Its owner announced that it is shutting down (`Monitor::shut_down`).
    shutting_down: AtomicBool,
}

/// How long opening a Kernel backend waits for a monitor of this process that is shutting
/// down to go, before it reports [`Error::KernelBusy`].
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// The Kernel-backend monitors of this process that are shutting down but not dropped yet.
static SHUTTING_DOWN: Retiring = Retiring {
    count: Mutex::new(0),
    gone: Condvar::new(),
};

/// A count of monitors shutting down, and a way to wait until there are none. UMT is enabled
/// once per process, so a runtime built right after another was dropped must wait for the
/// old monitor, which a leader thread may hold a moment longer (umt-rt's `Drop`).
struct Retiring {
    count: Mutex<usize>,
    gone: Condvar,
}

impl Retiring {
    fn add(&self, n: isize) {
        let mut count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        *count = count.saturating_add_signed(n);
        if *count == 0 {
            self.gone.notify_all();
        }
    }

    /// Waits up to `timeout` until no monitor is shutting down; `false` if there was none to
    /// wait for, or it did not go in time.
    fn wait_until_none(&self, timeout: Duration) -> bool {
        let count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        if *count == 0 {
            return false;
        }
        let (count, _) = self
            .gone
            .wait_timeout_while(count, timeout, |n| *n > 0)
            .unwrap_or_else(|p| p.into_inner());
        *count == 0
    }
}

impl KernelBackend {
    /// Enables UMT for this process and puts every per-core eventfd in `epoll`.
    pub(crate) fn open(possible_cpus: usize, epoll: &Epoll) -> Result<KernelBackend> {
        probe()?;
        match Self::enable(possible_cpus, epoll) {
            // UMT is still enabled by a monitor of this process that is shutting down (its
            // last user is a leader waiting for a turn on its core): wait for it to go.
            Err(Error::KernelBusy) if SHUTTING_DOWN.wait_until_none(SHUTDOWN_WAIT) => {
                Self::enable(possible_cpus, epoll)
            }
            other => other,
        }
    }

    /// Marks this backend as shutting down ([`Retiring`]); once.
    pub(crate) fn shut_down(&self) {
        if !self.shutting_down.swap(true, Ordering::AcqRel) {
            SHUTTING_DOWN.add(1);
        }
    }

    fn enable(possible_cpus: usize, epoll: &Epoll) -> Result<KernelBackend> {
        let mut raw = vec![-1 as libc::c_int; possible_cpus];
        // SAFETY: `raw` is a writable array of `possible_cpus` ints, which is what the call
        // expects; probe() made sure the running kernel implements umt_enable under this number.
        let ret = unsafe {
            libc::syscall(
                SYS_UMT_ENABLE,
                raw.as_mut_ptr(),
                possible_cpus as libc::c_uint,
                UMT_FD_CLOEXEC | UMT_FD_NONBLOCK,
            )
        };
        if ret < 0 {
            return Err(match Errno::last() {
                Errno::EBUSY => Error::KernelBusy,
                e @ (Errno::ENOSYS | Errno::EPERM) => not_available(e),
                e => Error::os("umt_enable", e),
            });
        }
        let written = usize::try_from(ret).unwrap_or(0).min(possible_cpus);
        let fds: Vec<OwnedFd> = raw[..written]
            .iter()
            // SAFETY: the kernel just created these descriptors for us; nothing else owns them.
            .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
            .collect();
        let backend = KernelBackend {
            fds,
            shutting_down: AtomicBool::new(false),
        };
        for (cpu, fd) in backend.fds.iter().enumerate() {
            epoll
                .add(fd.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, cpu as u64))
                .map_err(|e| Error::os("epoll_ctl(ADD)", e))?;
        }
        Ok(backend)
    }

    /// Puts the eventfd of `cpu` in `set` as well (see `Monitor::wait_cpu`).
    pub(crate) fn watch_cpu(&self, cpu: usize, set: &Epoll) -> Result<()> {
        match self.fds.get(cpu) {
            Some(fd) => set
                .add(fd.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, cpu as u64))
                .map_err(|e| Error::os("epoll_ctl(ADD)", e)),
            None => Ok(()),
        }
    }

    pub(crate) fn register(&self) -> Result<()> {
        umt_thread_ctrl(UMT_THREAD_MONITOR).map_err(|e| match e {
            Errno::ENOSYS => not_available(e),
            e => Error::os("umt_thread_ctrl(UMT_THREAD_MONITOR)", e),
        })
    }

    pub(crate) fn unregister(&self) -> Result<()> {
        umt_thread_ctrl(UMT_THREAD_UNMONITOR)
            .map_err(|e| Error::os("umt_thread_ctrl(UMT_THREAD_UNMONITOR)", e))
    }

    /// Reads the eventfd of `cpu`, if it holds events (see `Monitor::drain_current_thread`).
    pub(crate) fn drain_cpu(&self, cpu: usize, sink: &mut dyn FnMut(MonitorEvent)) -> Result<()> {
        let Some(fd) = self.fds.get(cpu) else {
            return Ok(());
        };
        read_eventfd(fd, cpu, sink)
    }

    /// Reads the eventfds that epoll reports readable.
    pub(crate) fn drain(&self, epoll: &Epoll, sink: &mut dyn FnMut(MonitorEvent)) -> Result<()> {
        let mut ready = [EpollEvent::empty(); 64];
        loop {
            let n = match epoll.wait(&mut ready, EpollTimeout::ZERO) {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(Error::os("epoll_wait", e)),
            };
            for ev in &ready[..n] {
                let cpu = ev.data() as usize;
                if let Some(fd) = self.fds.get(cpu) {
                    read_eventfd(fd, cpu, sink)?;
                }
            }
            if n < ready.len() {
                return Ok(());
            }
        }
    }
}

/// Reads the eventfd of `cpu` once (non-blocking) and hands out what it held.
fn read_eventfd(fd: &OwnedFd, cpu: usize, sink: &mut dyn FnMut(MonitorEvent)) -> Result<()> {
    let mut word = [0u8; 8];
    match nix::unistd::read(fd, &mut word) {
        Ok(8) => {
            let events = Events::decode(u64::from_ne_bytes(word));
            if !events.is_empty() {
                sink(MonitorEvent {
                    cpu,
                    events,
                    cause: Cause::Kernel,
                    tid: None,
                    time_ns: None,
                });
            }
            Ok(())
        }
        // Empty, or another drainer read it first.
        Ok(_) | Err(Errno::EAGAIN) | Err(Errno::EINTR) => Ok(()),
        Err(e) => Err(Error::os("read(umt eventfd)", e)),
    }
}

impl Drop for KernelBackend {
    fn drop(&mut self) {
        // SAFETY: with UMT_DISABLE the call takes no user memory (NULL, 0); the kernel
        // implements it, since open() succeeded.
        unsafe {
            libc::syscall(
                SYS_UMT_ENABLE,
                std::ptr::null_mut::<libc::c_int>(),
                0 as libc::c_uint,
                UMT_DISABLE,
            );
        }
        // The descriptors close when `fds` drops.
        if self.shutting_down.load(Ordering::Acquire) {
            SHUTTING_DOWN.add(-1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_sysfs_file_means_no_umt() {
        let u = check_abi_file(Err(std::io::ErrorKind::NotFound.into())).unwrap_err();
        assert_eq!(u.backend, BackendKind::Kernel);
        assert!(u.reason.contains("no UMT extension"), "{u}");
        assert!(u.fix.unwrap().contains("cargo xtask vm run"));
    }

    #[test]
    fn abi_version_is_checked() {
        assert!(check_abi_file(Ok("1\n".into())).is_ok());
        let u = check_abi_file(Ok("2\n".into())).unwrap_err();
        assert!(u.reason.contains("version 2"), "{u}");
        assert!(check_abi_file(Ok("junk".into())).is_err());
    }
}
