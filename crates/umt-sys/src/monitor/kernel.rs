//! The Kernel backend: the UMT extension (`umt_enable`, `umt_thread_ctrl`, per-core files).
//!
//! With ABI version 2 it enables the counter page and idle-only signalling: the ready counts
//! are read from the page the kernel keeps current ([`KernelBackend::ready`]), and a core's
//! file wakes its waiter only when the core runs out of ready threads while the waiter sleeps,
//! as with the Bpf backend: the waiter reads the file (which asks the kernel for the next
//! signal) only right before it sleeps (steps K1–K5 in `README.md`). With version 1 the files
//! carry every event, which the drains apply.

use std::fs;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags, EpollTimeout};

use crate::abi::{
    Events, SYS_UMT_ENABLE, SYS_UMT_THREAD_CTRL, UMT_ABI_VERSION, UMT_COUNTER_PAGE, UMT_DISABLE,
    UMT_FD_CLOEXEC, UMT_FD_NONBLOCK, UMT_IDLE_ONLY, UMT_SYSFS_ABI_VERSION, UMT_THREAD_MONITOR,
    UMT_THREAD_UNMONITOR, UmtCounts,
};
use crate::backend::{BackendKind, Unavailable};
use crate::cpu;
use crate::error::{Error, Result};
use crate::event::{Cause, MonitorEvent};
use crate::monitor::ops::{Backend, Context, Held, Totals};
use crate::monitor::shared::{ReadOnlyLoad, Shared};

const FIX: &str = "boot the patched kernel from kernel-patch/ (`cargo xtask vm run -- CMD`), \
                   or use the perf backend";

/// Checks that the running kernel has the UMT extension with an ABI version umt-sys speaks (1
/// or 2), and returns it.
///
/// The system calls are only issued when the kernel announces itself in sysfs: mainline Linux
/// reuses 463 and 464 for other calls, so a blind call could do something else entirely.
pub(crate) fn probe() -> std::result::Result<u32, Unavailable> {
    check_abi_file(fs::read_to_string(UMT_SYSFS_ABI_VERSION))
}

pub(crate) fn check_abi_file(
    contents: std::io::Result<String>,
) -> std::result::Result<u32, Unavailable> {
    let unavailable = |reason: String| Unavailable::new(BackendKind::Kernel, reason);
    match contents {
        Ok(text) => match text.trim().parse::<u32>() {
            Ok(v @ 1..=UMT_ABI_VERSION) => Ok(v),
            Ok(v) => Err(unavailable(format!(
                "the kernel speaks UMT ABI version {v}, umt-sys speaks versions 1 to \
                 {UMT_ABI_VERSION}"
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
    /// `fds[cpu]` is the file of `cpu`.
    fds: Vec<OwnedFd>,
    /// Its owner announced that it is shutting down (`Monitor::shut_down`).
    shutting_down: AtomicBool,
    /// ABI 2: the counter page (one [`UmtCounts`] per possible CPU), mapped read-only (so read
    /// only through [`ReadOnlyLoad`]); the files then signal drops to zero only, once between
    /// two reads.
    page: Option<Shared<UmtCounts>>,
    /// ABI 2, per possible CPU: its `drops` when a drain of that CPU last looked (K3).
    seen_cpu: Box<[AtomicU64]>,
    /// ABI 2, per possible CPU: its `blocks`, `unblocks` and `drops` when the whole-monitor
    /// drain last looked (K5).
    seen_all: Mutex<Vec<[u64; 3]>>,
}

/// Sums over every CPU of the counter page, for [`crate::MonitorStats`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PageTotals {
    pub(crate) blocks: u64,
    pub(crate) unblocks: u64,
    pub(crate) signals: u64,
    pub(crate) drops: u64,
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
    /// Enables UMT for this process and puts every per-core file in `epoll`.
    pub(crate) fn open(possible_cpus: usize, epoll: &Epoll) -> Result<KernelBackend> {
        let version = probe()?;
        // For measurements: `UMT_KERNEL_ABI=1` uses a version-2 kernel as version 1 (every
        // event signalled, no counter page).
        let version = match std::env::var("UMT_KERNEL_ABI").as_deref() {
            Ok("1") => 1,
            _ => version,
        };
        match Self::enable(possible_cpus, epoll, version) {
            // UMT is still enabled by a monitor of this process that is shutting down (its
            // last user is a leader waiting for a turn on its core): wait for it to go.
            Err(Error::KernelBusy) if SHUTTING_DOWN.wait_until_none(SHUTDOWN_WAIT) => {
                Self::enable(possible_cpus, epoll, version)
            }
            other => other,
        }
    }

    /// ABI 2: the ready count of `cpu`, from the counter page.
    pub(crate) fn ready(&self, cpu: usize) -> Option<i64> {
        let page = self.page.as_ref()?;
        Some(page.get(cpu).map_or(0, |c| c.ready.load_acquire()))
    }

    /// ABI 2: the counter page's totals.
    pub(crate) fn totals(&self) -> Option<PageTotals> {
        let page = self.page.as_ref()?;
        let mut t = PageTotals::default();
        for c in (0..page.len()).filter_map(|cpu| page.get(cpu)) {
            t.blocks += c.blocks.load_relaxed();
            t.unblocks += c.unblocks.load_relaxed();
            t.signals += c.signals.load_relaxed();
            t.drops += c.drops.load_relaxed();
        }
        Some(t)
    }

    /// K2, before a wait on `cpu`'s file: `true` if `cpu` ran out of ready threads since its
    /// last drain, and the caller must not sleep. Otherwise the file has just been read, which
    /// asks the kernel to signal the next drop: a drop after the read finds the file's word
    /// empty and signals it, so the wait that follows returns. ABI 1: always `false` (every
    /// event signals the file; a wait returns while it holds any).
    pub(crate) fn arm_cpu(&self, cpu: usize) -> Result<bool> {
        let (Some(page), Some(fd)) = (self.page.as_ref(), self.fds.get(cpu)) else {
            return Ok(false);
        };
        let seen = self.seen_cpu[cpu].load(Ordering::SeqCst);
        if drops(page, cpu) != seen {
            return Ok(true);
        }
        consume(fd)?;
        // A drop between the look above and the read was consumed by the read, without a
        // signal: the kernel adds to `drops` before the word, so it shows here.
        Ok(drops(page, cpu) != seen)
    }

    /// [`KernelBackend::arm_cpu`] for every CPU, against the whole-monitor drain's view.
    pub(crate) fn arm_all(&self) -> Result<bool> {
        let Some(page) = self.page.as_ref() else {
            return Ok(false);
        };
        let seen = lock(&self.seen_all);
        let mut dropped = false;
        for (cpu, fd) in self.fds.iter().enumerate() {
            let last = seen.get(cpu).map_or(0, |s| s[2]);
            if drops(page, cpu) != last {
                dropped = true;
                continue;
            }
            consume(fd)?;
            dropped |= drops(page, cpu) != last;
        }
        Ok(dropped)
    }

    /// Marks this backend as shutting down ([`Retiring`]); once.
    pub(crate) fn shut_down(&self) {
        if !self.shutting_down.swap(true, Ordering::AcqRel) {
            SHUTTING_DOWN.add(1);
        }
    }

    fn enable(possible_cpus: usize, epoll: &Epoll, version: u32) -> Result<KernelBackend> {
        let mut raw = vec![-1 as libc::c_int; possible_cpus];
        let mut flags = UMT_FD_CLOEXEC | UMT_FD_NONBLOCK;
        if version >= 2 {
            flags |= UMT_COUNTER_PAGE | UMT_IDLE_ONLY;
        }
        // SAFETY: `raw` is a writable array of `possible_cpus` ints, which is what the call
        // expects; probe() made sure the running kernel implements umt_enable under this number.
        let ret = unsafe {
            libc::syscall(
                SYS_UMT_ENABLE,
                raw.as_mut_ptr(),
                possible_cpus as libc::c_uint,
                flags,
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
        let page = match fds.first() {
            Some(fd) if flags & UMT_COUNTER_PAGE != 0 => Some(Shared::map(
                fd.as_fd(),
                fds.len(),
                false,
                "mmap(umt counter page)",
            )?),
            _ => None,
        };
        let cpus = fds.len();
        let backend = KernelBackend {
            fds,
            shutting_down: AtomicBool::new(false),
            page,
            seen_cpu: (0..cpus).map(|_| AtomicU64::new(0)).collect(),
            seen_all: Mutex::new(vec![[0; 3]; cpus]),
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

    /// ABI 1: reads the file of `cpu`, if it holds events, hands them out and returns how many
    /// it handed out. ABI 2 (K3): the counts need no drain; notes `cpu`'s drops as seen and
    /// returns how many are new, without a system call (the file is read only before a wait,
    /// [`KernelBackend::arm_cpu`]).
    pub(crate) fn drain_cpu(
        &self,
        cpu: usize,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> Result<usize> {
        let Some(fd) = self.fds.get(cpu) else {
            return Ok(0);
        };
        let Some(page) = self.page.as_ref() else {
            return read_file(fd, cpu, sink);
        };
        let now = drops(page, cpu);
        let old = self.seen_cpu[cpu].swap(now, Ordering::SeqCst);
        Ok(usize::try_from(now.wrapping_sub(old)).unwrap_or(usize::MAX))
    }

    /// Hands out what changed: ABI 1, the files that epoll reports readable; ABI 2 (K5), every
    /// CPU's blocks and unblocks since the last call, from the page, as `Counted` events.
    pub(crate) fn drain(&self, epoll: &Epoll, sink: &mut dyn FnMut(MonitorEvent)) -> Result<()> {
        if let Some(page) = self.page.as_ref() {
            let mut seen = lock(&self.seen_all);
            for (cpu, last) in seen.iter_mut().enumerate() {
                let Some(c) = page.get(cpu) else {
                    continue;
                };
                let now = [
                    c.blocks.load_seq_cst(),
                    c.unblocks.load_seq_cst(),
                    c.drops.load_seq_cst(),
                ];
                if let Some(ev) = MonitorEvent::counted(cpu, [last[0], last[1]], [now[0], now[1]]) {
                    sink(ev);
                }
                *last = now;
            }
            return Ok(());
        }
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
                    read_file(fd, cpu, sink)?;
                }
            }
            if n < ready.len() {
                return Ok(());
            }
        }
    }
}

/// ABI 1: reads the file of `cpu` once (non-blocking) and hands out what it held; returns how
/// many events it handed out (0 or 1). A half that reads `u32::MAX` saturated: counts were
/// lost, which the monitor reports as an overflow.
fn read_file(fd: &OwnedFd, cpu: usize, sink: &mut dyn FnMut(MonitorEvent)) -> Result<usize> {
    let mut word = [0u8; 8];
    match nix::unistd::read(fd, &mut word) {
        Ok(8) => {
            let events = Events::decode(u64::from_ne_bytes(word));
            if events.is_empty() {
                return Ok(0);
            }
            sink(MonitorEvent {
                cpu,
                events,
                cause: Cause::Kernel,
                tid: None,
                time_ns: None,
            });
            Ok(1)
        }
        // Empty, or another drainer read it first.
        Ok(_) | Err(Errno::EAGAIN) | Err(Errno::EINTR) => Ok(0),
        Err(e) => Err(Error::os("read(umt file)", e)),
    }
}

/// ABI 2: `cpu`'s drops to zero so far (0 for a CPU out of range).
fn drops(page: &Shared<UmtCounts>, cpu: usize) -> u64 {
    page.get(cpu).map_or(0, |c| c.drops.load_seq_cst())
}

/// ABI 2: reads and discards the word of a file (the drops it counts are in the page), which
/// asks the kernel for the next signal. Empty (`EAGAIN`) is the usual answer.
fn consume(fd: &OwnedFd) -> Result<()> {
    let mut word = [0u8; 8];
    match nix::unistd::read(fd, &mut word) {
        Ok(_) | Err(Errno::EAGAIN) | Err(Errno::EINTR) => Ok(()),
        Err(e) => Err(Error::os("read(umt file)", e)),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether a word's half saturated (counts were lost since the last read).
pub(crate) fn saturated(events: Events) -> bool {
    events.blocked == u32::MAX || events.unblocked == u32::MAX
}

impl KernelBackend {
    /// Applies an event read from a file: a saturated half means counts were lost, which
    /// nothing can restore from the events (with the counter page the counts are unaffected):
    /// visible in the statistics. With the page the events only describe counts that are live
    /// already (`Counted`: the differences of the page's counters).
    fn apply(&self, cx: &Context, ev: MonitorEvent) {
        if saturated(ev.events) {
            cx.count_overflow();
        }
        if !self.counts_are_live() {
            cx.record(ev);
        }
    }
}

impl Backend for KernelBackend {
    fn counts_are_live(&self) -> bool {
        self.page.is_some()
    }

    /// The kernel emits the thread's unblock itself.
    fn register(&self, _cx: &Context, _tid: i32) -> Result<()> {
        umt_thread_ctrl(UMT_THREAD_MONITOR).map_err(|e| match e {
            Errno::ENOSYS => not_available(e),
            e => Error::os("umt_thread_ctrl(UMT_THREAD_MONITOR)", e),
        })
    }

    fn unregister(&self, _cx: &Context, _tid: i32) -> Result<()> {
        umt_thread_ctrl(UMT_THREAD_UNMONITOR)
            .map_err(|e| Error::os("umt_thread_ctrl(UMT_THREAD_UNMONITOR)", e))
    }

    fn drain(&self, cx: &Context, out: &mut dyn FnMut(MonitorEvent)) -> Result<()> {
        self.drain(&cx.epoll, &mut |ev| {
            self.apply(cx, ev);
            out(ev);
        })
    }

    /// ABI 1: the file of the caller's CPU. ABI 2 (K4): nothing; the counts are live, and the
    /// file is left to the waiter of the CPU.
    fn drain_current_thread(&self, cx: &Context) -> Result<usize> {
        if self.counts_are_live() {
            return Ok(0);
        }
        let mut n = 0;
        self.drain_cpu(cpu::current_cpu()?, &mut |ev| {
            self.apply(cx, ev);
            n += 1;
        })?;
        Ok(n)
    }

    /// ABI 1: the events read; ABI 2 (K3): the drops since the last look, from the page.
    fn drain_cpu(&self, cx: &Context, cpu: usize, _held: Held) -> Result<usize> {
        self.drain_cpu(cpu, &mut |ev| self.apply(cx, ev))
    }

    fn watch_cpu(&self, cpu: usize, set: &Epoll) -> Result<()> {
        self.watch_cpu(cpu, set)
    }

    fn arm_all(&self) -> Result<bool> {
        self.arm_all()
    }

    fn arm_cpu(&self, cpu: usize) -> Result<bool> {
        self.arm_cpu(cpu)
    }

    fn disarm_cpu(&self, _cpu: usize) {}

    /// ABI 2: from the page; ABI 1: as of the last drain.
    fn ready(&self, cx: &Context, cpu: usize) -> i64 {
        self.ready(cpu).unwrap_or_else(|| cx.counts.get(cpu))
    }

    fn ready_counts(&self, cx: &Context) -> Vec<i64> {
        if self.counts_are_live() {
            (0..cx.possible_cpus())
                .map(|c| Backend::ready(self, cx, c))
                .collect()
        } else {
            cx.counts.snapshot()
        }
    }

    /// ABI 2: the page's; ABI 1: none (the drains count).
    fn totals(&self) -> Option<Totals> {
        self.totals().map(|t| Totals {
            blocks: t.blocks,
            unblocks: t.unblocks,
            migrations: 0,
            notes: t.signals,
            drops: t.drops,
        })
    }

    fn shut_down(&self) {
        self.shut_down()
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
        assert_eq!(check_abi_file(Ok("1\n".into())).unwrap(), 1);
        assert_eq!(check_abi_file(Ok("2\n".into())).unwrap(), 2);
        let u = check_abi_file(Ok("3\n".into())).unwrap_err();
        assert!(u.reason.contains("version 3"), "{u}");
        assert!(check_abi_file(Ok("0".into())).is_err());
        assert!(check_abi_file(Ok("junk".into())).is_err());
    }

    #[test]
    fn a_saturated_half_is_seen() {
        assert!(!saturated(Events::decode(5 | (7 << 32))));
        assert!(saturated(Events::decode(u64::from(u32::MAX))));
        assert!(saturated(Events::decode(u64::from(u32::MAX) << 32)));
    }

    /// One step of the K2 model below: the waiter's, or a drop's in the kernel.
    #[derive(Clone, Copy)]
    enum Step {
        /// The waiter compares `drops` with what it saw (before and after its read).
        LookAtDrops,
        /// The waiter reads the file: takes the word, leaving it empty.
        ReadWord,
        /// The kernel counts a drop in the page.
        CountDrop,
        /// The kernel adds the drop to the word, signalling if it found it empty.
        BumpWord,
    }

    /// Runs one interleaving of the waiter's K2 with the kernel's drops, sequentially
    /// consistent (the kernel's and the waiter's atomics are fully ordered). Returns whether
    /// the waiter would sleep, whether its file is readable then (its wait returns at once),
    /// the drops, and the signals sent.
    fn run(order: &[Step]) -> (bool, bool, u64, u64) {
        let (mut drops, mut word, mut signals, mut looked, mut pending) = (0u64, 0u64, 0, 0, false);
        for step in order {
            match step {
                Step::LookAtDrops => {
                    pending |= drops != 0;
                    looked += 1;
                }
                Step::ReadWord => word = 0,
                Step::CountDrop => drops += 1,
                Step::BumpWord => {
                    signals += u64::from(word == 0);
                    word += 1;
                }
            }
        }
        assert_eq!(looked, 2);
        (!pending, word != 0, drops, signals)
    }

    /// Every interleaving of `waiter` with `drops` drops of `kernel` (each drop's steps in
    /// order, the drops one after another).
    fn interleavings(waiter: &[Step], kernel: &[Step], drops: usize) -> Vec<Vec<Step>> {
        let kernel: Vec<Step> = kernel
            .iter()
            .copied()
            .cycle()
            .take(kernel.len() * drops)
            .collect();
        let mut out = Vec::new();
        let n = waiter.len() + kernel.len();
        for mask in 0u32..(1 << n) {
            if mask.count_ones() as usize != waiter.len() {
                continue;
            }
            let (mut w, mut k) = (waiter.iter(), kernel.iter());
            out.push(
                (0..n)
                    .map(|i| {
                        if mask & (1 << i) != 0 {
                            w.next()
                        } else {
                            k.next()
                        }
                    })
                    .map(|s| *s.expect("the mask picks each side's length"))
                    .collect(),
            );
        }
        out
    }

    const WAITER: [Step; 3] = [Step::LookAtDrops, Step::ReadWord, Step::LookAtDrops];

    #[test]
    fn k2_loses_no_drop_and_signals_at_most_once_per_read() {
        for drops in 0..=3 {
            for order in interleavings(&WAITER, &[Step::CountDrop, Step::BumpWord], drops) {
                let (sleeps, readable, counted, signals) = run(&order);
                // A waiter that goes to sleep although a drop happened is woken at once: the
                // drop it did not see in `drops` left the word non-empty after its read.
                if sleeps && counted > 0 {
                    assert!(readable, "a drop was lost");
                }
                // The waiter read once: at most the first drop before and the first after the
                // read signal.
                assert!(signals <= 2 && signals <= counted);
            }
        }
    }

    #[test]
    fn k2_needs_the_page_counted_before_the_word() {
        // With the kernel's two steps the other way round, a drop can bump the word before the
        // read takes it and count itself in the page only after the second look: lost.
        let lost = interleavings(&WAITER, &[Step::BumpWord, Step::CountDrop], 1)
            .iter()
            .map(|order| run(order))
            .any(|(sleeps, readable, counted, _)| sleeps && counted > 0 && !readable);
        assert!(lost);
    }
}
