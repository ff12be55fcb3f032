//! The Kernel backend: the UMT extension (`umt_enable`, `umt_thread_ctrl`, the UMT file with
//! its counter page, and a CPU file per CPU watched).
//!
//! In idle-only mode (the default) the ready counts are read from the counter page the kernel
//! keeps current ([`KernelBackend::ready`]), and a CPU's file wakes its waiter only when the
//! CPU runs out of ready threads while the waiter sleeps, as with the Bpf backend: the waiter
//! reads the file (which asks the kernel for the next signal) only right before it sleeps
//! (steps K1–K5 in `README.md`). In events mode (`UMT_KERNEL_MODE=events`, for measurements)
//! the files carry every event, which the drains apply.
//!
//! The CPU files are opened on demand, not one per possible CPU: that many descriptors could
//! pass `RLIMIT_NOFILE` on a large machine. A CPU's file is opened the first time something
//! needs it ([`KernelBackend::file`]): a wait on or drain of that CPU, the registration of a
//! thread that may run there, or a whole-monitor wait or drain that finds, in the page, a
//! monitored thread there. They live in a table indexed by CPU id, so finding one is an index.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags, EpollTimeout};

use crate::abi::{
    Events, SYS_UMT_ENABLE, SYS_UMT_THREAD_CTRL, UMT_FD_CLOEXEC, UMT_FD_NONBLOCK, UMT_IDLE_ONLY,
    UMT_IOC_CPU_FD, UMT_IOC_DISABLE, UMT_THREAD_MONITOR, UMT_THREAD_UNMONITOR, UmtArgs, UmtCounts,
};
use crate::backend::{BackendKind, Unavailable};
use crate::cpu::{self, CpuId};
use crate::error::{Error, Result};
use crate::event::{Cause, MonitorEvent};
use crate::monitor::ops::{Backend, Context, Held, Totals};
use crate::monitor::shared::{ReadOnlyLoad, Shared};

const FIX: &str = "boot the kernel built by `cargo xtask kernel build`, for instance with \
                   `cargo xtask vm run -- CMD`, or use the bpf or perf backend";

/// How the backend has the kernel signal the CPU files; chosen when it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `UMT_IDLE_ONLY` (the default): the ready counts are read live from the counter page,
    /// and a CPU's file is signalled only when its count drops to zero (v2's "ABI 2").
    IdleOnly,
    /// Without `UMT_IDLE_ONLY`: every block and unblock is signalled on the CPU files and
    /// applied by the drains (v2's "ABI 1"), to measure what idle-only signalling saves.
    Events,
}

/// The environment variable that chooses the [`Mode`]: `idle-only` or `events`.
const MODE_VAR: &str = "UMT_KERNEL_MODE";
/// Its older name, still read when `UMT_KERNEL_MODE` is unset: `1` means events mode.
const LEGACY_MODE_VAR: &str = "UMT_KERNEL_ABI";

impl Mode {
    /// The mode the environment asks for ([`Mode::parse`]).
    fn from_env() -> Result<Mode> {
        let var = |name| std::env::var(name).ok();
        Mode::parse(var(MODE_VAR).as_deref(), var(LEGACY_MODE_VAR).as_deref())
    }

    /// The mode `UMT_KERNEL_MODE` names (`mode`), else the one `UMT_KERNEL_ABI` does
    /// (`legacy`: `1` is events mode, as on v2 kernels), else idle-only.
    fn parse(mode: Option<&str>, legacy: Option<&str>) -> Result<Mode> {
        match mode.map(|m| m.trim().to_ascii_lowercase()).as_deref() {
            Some("idle-only") => Ok(Mode::IdleOnly),
            Some("events") => Ok(Mode::Events),
            None | Some("") => Ok(match legacy.map(str::trim) {
                Some("1") => Mode::Events,
                _ => Mode::IdleOnly,
            }),
            Some(_) => Err(Error::InvalidKernelMode {
                value: mode.unwrap_or_default().to_owned(),
            }),
        }
    }

    /// The `umt_enable` flags of this mode. The CPU files are non-blocking: a drain never
    /// sleeps in `read`; waits sleep in epoll.
    const fn flags(self) -> u64 {
        let files = UMT_FD_CLOEXEC | UMT_FD_NONBLOCK;
        match self {
            Mode::IdleOnly => files | UMT_IDLE_ONLY,
            Mode::Events => files,
        }
    }
}

/// The probe's argument: a [`UmtArgs`] with an unknown flag, and a non-zero field after it.
/// UMT v3 refuses it with `E2BIG` (a field it does not know is not zero) before it looks at
/// anything else, as every system call with an extensible struct does; a later version that
/// knows the field refuses the flag (`EINVAL`). Either way nothing is enabled.
#[repr(C)]
struct ProbeArgs {
    known: UmtArgs,
    unknown: u64,
}

static PROBE: ProbeArgs = ProbeArgs {
    known: UmtArgs::new(1 << 63),
    unknown: u64::MAX,
};

/// Checks that the running kernel has the UMT v3 extension.
///
/// There is no version file to read: the ABI is what `umt_enable` accepts. The system call
/// numbers are placeholders that mainline Linux may give to other calls, so before enabling
/// anything the backend asks a question that UMT v3 answers in its own way and without side
/// effects ([`ProbeArgs`]): `E2BIG`. (`EBUSY`, UMT enabled already, would say yes too.)
pub(crate) fn probe() -> std::result::Result<(), Unavailable> {
    // SAFETY: `PROBE` is a static, initialised struct of the size passed, which the kernel
    // only reads; UMT v3 refuses it before it does anything else.
    let ret = unsafe {
        libc::syscall(
            SYS_UMT_ENABLE,
            std::ptr::from_ref(&PROBE),
            std::mem::size_of::<ProbeArgs>(),
        )
    };
    probe_answer(if ret < 0 { Err(Errno::last()) } else { Ok(ret) })
}

/// Why `Auto` does not probe here: [`seccomp_filter`] of the calling thread's status.
pub(crate) fn auto_skip() -> Option<Unavailable> {
    let status = std::fs::read_to_string("/proc/thread-self/status")
        .or_else(|_| std::fs::read_to_string("/proc/self/status"))
        .ok()?;
    seccomp_filter(&status)
}

/// Why `Auto` does not probe: the calling thread runs under a seccomp filter (`status` is the
/// text of `/proc/thread-self/status`), whose action for a system call it does not know may
/// be to kill the process (systemd's `SystemCallFilter=`, a sandbox) rather than to fail it
/// with `EPERM` (a container's default profile). The probe calls a placeholder number, so
/// `Auto` skips it there; asking for the Kernel backend by name probes anyway.
fn seccomp_filter(status: &str) -> Option<Unavailable> {
    let mode = status
        .lines()
        .find_map(|line| line.strip_prefix("Seccomp:"))?
        .trim();
    (mode == "2").then(|| {
        Unavailable::new(
            BackendKind::Kernel,
            format!(
                "not probed: this thread runs under a seccomp filter, which may kill the process \
                 for calling system call {SYS_UMT_ENABLE}, a number mainline Linux has not \
                 given to umt_enable"
            ),
        )
        .with_fix(format!(
            "if the filter allows system calls {SYS_UMT_ENABLE} and {SYS_UMT_THREAD_CTRL}, \
             ask for the kernel backend by name (UMT_BACKEND=kernel with umt-rt)"
        ))
    })
}

/// What the probe's answer says about the kernel ([`probe`]).
fn probe_answer(
    answer: std::result::Result<libc::c_long, Errno>,
) -> std::result::Result<(), Unavailable> {
    match answer {
        Err(Errno::E2BIG | Errno::EBUSY) => Ok(()),
        Err(e) => Err(missing(e)),
        Ok(_) => Err(Unavailable::new(
            BackendKind::Kernel,
            format!(
                "system call {SYS_UMT_ENABLE} accepted a call that UMT v3's umt_enable refuses \
                 (a struct with an unknown non-zero field): it is not umt_enable on this \
                 kernel (mainline Linux may have given the number to another call)"
            ),
        )
        .with_fix(FIX)),
    }
}

/// Why the UMT system calls answered `errno`: no UMT v3 here.
fn missing(errno: Errno) -> Unavailable {
    let unavailable = |reason: String| Unavailable::new(BackendKind::Kernel, reason);
    match errno {
        Errno::ENOSYS => unavailable(format!(
            "this kernel has no UMT v3 extension: umt_enable (system call {SYS_UMT_ENABLE}) is \
             not implemented; a kernel with the v2 UMT patch counts as none, umt-sys speaks \
             only v3"
        ))
        .with_fix(FIX),
        Errno::EPERM => unavailable(format!(
            "umt_enable (system call {SYS_UMT_ENABLE}) was refused with EPERM: a seccomp \
             filter (a container's) may block system calls it does not know"
        ))
        .with_fix(format!(
            "allow system calls {SYS_UMT_ENABLE} and {SYS_UMT_THREAD_CTRL} in the seccomp \
             profile, or use the bpf or perf backend"
        )),
        e => unavailable(format!(
            "system call {SYS_UMT_ENABLE} answered {e} where UMT v3's umt_enable answers \
             E2BIG: it is not umt_enable on this kernel (mainline Linux may have given the \
             number to another call)"
        ))
        .with_fix(FIX),
    }
}

fn not_available(errno: Errno) -> Error {
    Error::Unavailable(missing(errno))
}

/// `umt_enable(args, sizeof(*args))`: the UMT file.
fn umt_enable(args: &UmtArgs) -> std::result::Result<OwnedFd, Errno> {
    // SAFETY: `args` is a live, initialised `struct umt_args` of the size passed, which the
    // kernel only reads; probe() found UMT v3's umt_enable under this number.
    let ret = unsafe {
        libc::syscall(
            SYS_UMT_ENABLE,
            std::ptr::from_ref(args),
            std::mem::size_of::<UmtArgs>(),
        )
    };
    if ret < 0 {
        return Err(Errno::last());
    }
    let fd = RawFd::try_from(ret).map_err(|_| Errno::EBADF)?;
    // SAFETY: umt_enable returns a new descriptor, the UMT file, which nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn umt_thread_ctrl(op: u32) -> std::result::Result<(), Errno> {
    // SAFETY: umt_thread_ctrl takes two integers and touches no user memory; the backend
    // exists only once probe() found UMT v3 under these numbers.
    let ret = unsafe { libc::syscall(SYS_UMT_THREAD_CTRL, op, 0u32) };
    if ret < 0 { Err(Errno::last()) } else { Ok(()) }
}

/// `ioctl(umt, UMT_IOC_CPU_FD, cpu)`: a new descriptor, the CPU file of `cpu`.
fn open_cpu_file(umt: &OwnedFd, cpu: CpuId) -> std::result::Result<OwnedFd, Errno> {
    let arg = libc::c_ulong::try_from(cpu).map_err(|_| Errno::EINVAL)?;
    // SAFETY: UMT_IOC_CPU_FD takes the CPU number by value and touches no user memory; `umt`
    // is the UMT file, open for the duration of the call.
    let ret = unsafe { libc::ioctl(umt.as_raw_fd(), UMT_IOC_CPU_FD as libc::Ioctl, arg) };
    if ret < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the ioctl returns a new descriptor, which nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(ret) })
}

/// The UMT file. Closing it does not disable UMT (the kernel keeps the process's state until
/// it is disabled, the process execs or exits): [`UmtFile::disable`] does, and dropping it
/// disables first, so that a backend that fails to open after `umt_enable` leaves UMT free.
struct UmtFile {
    fd: OwnedFd,
    /// Not disabled yet.
    enabled: bool,
}

impl UmtFile {
    /// `ioctl(UMT_IOC_DISABLE)`, once: no thread is monitored any more, and the CPU files see
    /// no new events (a read of an empty one returns 0, pollers get `EPOLLHUP`). A failure is
    /// ignored: the kernel refuses only when the file is not the calling process's current
    /// state (in a child after `fork`, whose copy of the monitor leaves its parent's UMT
    /// alone), and nothing could be done about it in a drop anyway.
    fn disable(&mut self) {
        if std::mem::take(&mut self.enabled) {
            // SAFETY: UMT_IOC_DISABLE takes a zero argument by value and touches no user
            // memory; `self.fd` is the UMT file, open until `self` drops.
            let _ = unsafe {
                libc::ioctl(
                    self.fd.as_raw_fd(),
                    UMT_IOC_DISABLE as libc::Ioctl,
                    0 as libc::c_ulong,
                )
            };
        }
    }
}

impl Drop for UmtFile {
    fn drop(&mut self) {
        self.disable();
    }
}

pub(crate) struct KernelBackend {
    /// The UMT file: its mapping is `page`, its ioctls open the CPU files and disable UMT.
    umt: UmtFile,
    mode: Mode,
    /// The counter page (one [`UmtCounts`] per possible CPU), mapped read-only (so read only
    /// through [`ReadOnlyLoad`]). Idle-only mode reads the counts from it; both modes find in
    /// it the CPUs where monitored threads ran.
    page: Shared<UmtCounts>,
    /// `files[cpu]`: the CPU file of `cpu`, opened on first use ([`KernelBackend::file`]),
    /// one slot per possible CPU.
    files: Box<[OnceLock<OwnedFd>]>,
    /// Held while a CPU file is opened, so that each CPU gets one file, put in `monitor_set`
    /// once.
    opening: Mutex<()>,
    /// The monitor's wait set (a second descriptor of it). Every CPU file opened goes in, so
    /// that `Monitor::wait`, `Monitor::as_fd` and the events-mode drain see it.
    monitor_set: Epoll,
    /// Its owner announced that it is shutting down (`Monitor::shut_down`).
    shutting_down: AtomicBool,
    /// Idle-only, per possible CPU: its `drops` when a drain of that CPU last looked (K3).
    seen_cpu: Box<[AtomicU64]>,
    /// Idle-only, per possible CPU: its `blocks`, `unblocks` and `drops` when the
    /// whole-monitor drain last looked (K5).
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
    /// Enables UMT for this process and maps its counter page. CPU files are opened later, as
    /// they are needed.
    pub(crate) fn open(possible_cpus: usize, epoll: &Epoll) -> Result<KernelBackend> {
        probe()?;
        let mode = Mode::from_env()?;
        let opened = match Self::enable(possible_cpus, epoll, mode) {
            // UMT is still enabled by a monitor of this process that is shutting down (its
            // last user is a leader waiting for a turn on its core): wait for it to go.
            Err(Error::KernelBusy) if SHUTTING_DOWN.wait_until_none(SHUTDOWN_WAIT) => {
                Self::enable(possible_cpus, epoll, mode)
            }
            other => other,
        };
        // Short of descriptors, the backend cannot run here (`Auto` moves on, as from the Perf
        // backend), rather than fail the monitor.
        opened.map_err(|e| match e {
            Error::OutOfFiles { what } => Error::Unavailable(
                Unavailable::new(
                    BackendKind::Kernel,
                    format!("out of file descriptors ({what} failed)"),
                )
                .with_fix("raise the limit with `ulimit -n`"),
            ),
            e => e,
        })
    }

    /// Idle-only: the ready count of `cpu`, from the counter page.
    pub(crate) fn ready(&self, cpu: usize) -> Option<i64> {
        (self.mode == Mode::IdleOnly)
            .then(|| self.page.get(cpu).map_or(0, |c| c.ready.load_acquire()))
    }

    /// Idle-only: the counter page's totals (events mode: the drains count, as they apply).
    pub(crate) fn totals(&self) -> Option<PageTotals> {
        if self.mode != Mode::IdleOnly {
            return None;
        }
        let page = &self.page;
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
    /// empty and signals it, so the wait that follows returns. Events mode: always `false`
    /// (every event signals the file; a wait returns while it holds any).
    pub(crate) fn arm_cpu(&self, cpu: usize) -> Result<bool> {
        let Some(seen) = self.seen_cpu.get(cpu) else {
            return Ok(false);
        };
        if self.mode != Mode::IdleOnly {
            return Ok(false);
        }
        let seen = seen.load(Ordering::SeqCst);
        if drops(&self.page, cpu) != seen {
            return Ok(true);
        }
        let Some(fd) = self.file(cpu)? else {
            return Ok(false);
        };
        consume(fd)?;
        // A drop between the look above and the read was consumed by the read, without a
        // signal: the kernel adds to `drops` before the word, so it shows here.
        Ok(drops(&self.page, cpu) != seen)
    }

    /// [`KernelBackend::arm_cpu`] for every CPU, against the whole-monitor drain's view: the
    /// files open (those of every CPU a registered thread may run on, and of every CPU the
    /// page shows one ran on) are read, and a drop on a CPU without one makes it return
    /// `true` as well.
    pub(crate) fn arm_all(&self) -> Result<bool> {
        if self.mode != Mode::IdleOnly {
            return Ok(false);
        }
        self.open_active()?;
        let seen = lock(&self.seen_all);
        let mut dropped = false;
        for (cpu, last) in seen.iter().enumerate() {
            let last = last[2];
            if drops(&self.page, cpu) != last {
                dropped = true;
                continue;
            }
            if let Some(fd) = self.file_if_open(cpu) {
                consume(fd)?;
                dropped |= drops(&self.page, cpu) != last;
            }
        }
        Ok(dropped)
    }

    /// Marks this backend as shutting down ([`Retiring`]); once.
    pub(crate) fn shut_down(&self) {
        if !self.shutting_down.swap(true, Ordering::AcqRel) {
            SHUTTING_DOWN.add(1);
        }
    }

    fn enable(possible_cpus: usize, epoll: &Epoll, mode: Mode) -> Result<KernelBackend> {
        let monitor_set = Epoll(
            epoll
                .0
                .try_clone()
                .map_err(|e| Error::os("dup(epoll)", e))?,
        );
        let flags = mode.flags();
        let fd = umt_enable(&UmtArgs::new(flags)).map_err(|e| match e {
            Errno::EBUSY => Error::KernelBusy,
            Errno::EINVAL => Error::Unavailable(
                Unavailable::new(
                    BackendKind::Kernel,
                    format!(
                        "the kernel refused umt_enable's flags {flags:#x} (EINVAL): its UMT is \
                         not the v3 ABI umt-sys speaks"
                    ),
                )
                .with_fix(FIX),
            ),
            e @ (Errno::ENOSYS | Errno::EPERM) => not_available(e),
            e => Error::os("umt_enable", e),
        })?;
        // From here on UMT is enabled: if anything below fails, dropping `umt` disables it.
        let umt = UmtFile { fd, enabled: true };
        let page = Shared::map(
            umt.fd.as_fd(),
            possible_cpus,
            false,
            "mmap(UMT counter page)",
        )?;
        Ok(KernelBackend {
            umt,
            mode,
            page,
            files: (0..possible_cpus).map(|_| OnceLock::new()).collect(),
            opening: Mutex::new(()),
            monitor_set,
            shutting_down: AtomicBool::new(false),
            seen_cpu: (0..possible_cpus).map(|_| AtomicU64::new(0)).collect(),
            seen_all: Mutex::new(vec![[0; 3]; possible_cpus]),
        })
    }

    /// The CPU file of `cpu`, opened on first use and put in the monitor's wait set (tagged
    /// with `cpu`); `None` for a CPU that is not possible. After the first call for `cpu`, an
    /// index and a load.
    fn file(&self, cpu: CpuId) -> Result<Option<&OwnedFd>> {
        let Some(slot) = self.files.get(cpu) else {
            return Ok(None);
        };
        if let Some(fd) = slot.get() {
            return Ok(Some(fd));
        }
        let _opening = lock(&self.opening);
        if let Some(fd) = slot.get() {
            return Ok(Some(fd));
        }
        let fd = match open_cpu_file(&self.umt.fd, cpu) {
            Ok(fd) => fd,
            // A hole in the possible CPUs (`0-3,8-11`): no thread runs there.
            Err(Errno::EINVAL) => return Ok(None),
            Err(e) => return Err(Error::os("ioctl(UMT_IOC_CPU_FD)", e)),
        };
        self.monitor_set
            .add(fd.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, cpu as u64))
            .map_err(|e| Error::os("epoll_ctl(ADD)", e))?;
        Ok(Some(slot.get_or_init(|| fd)))
    }

    /// The file of `cpu` if it is open already.
    fn file_if_open(&self, cpu: CpuId) -> Option<&OwnedFd> {
        self.files.get(cpu).and_then(OnceLock::get)
    }

    /// Opens the file of every CPU where the page shows that a monitored thread was counted
    /// (every thread's stay on a CPU starts with an unblock there) and that has none yet: a
    /// thread that left the CPUs it could run on when it registered. For the whole-monitor
    /// wait and drain, which must see every CPU with events.
    fn open_active(&self) -> Result<()> {
        for (cpu, slot) in self.files.iter().enumerate() {
            if slot.get().is_none()
                && self
                    .page
                    .get(cpu)
                    .is_some_and(|c| c.unblocks.load_relaxed() != 0)
            {
                self.file(cpu)?;
            }
        }
        Ok(())
    }

    /// Puts the file of `cpu` in `set` as well (see `Monitor::wait_cpu`), opening it if need
    /// be.
    pub(crate) fn watch_cpu(&self, cpu: usize, set: &Epoll) -> Result<()> {
        match self.file(cpu)? {
            Some(fd) => set
                .add(fd.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, cpu as u64))
                .map_err(|e| Error::os("epoll_ctl(ADD)", e)),
            None => Ok(()),
        }
    }

    /// Events mode: reads the file of `cpu` (opening it if need be), if it holds events, hands
    /// them out and returns how many it handed out. Idle-only (K3): the counts need no drain;
    /// notes `cpu`'s drops as seen and returns how many are new, without a system call (the
    /// file is read only before a wait, [`KernelBackend::arm_cpu`]).
    pub(crate) fn drain_cpu(
        &self,
        cpu: usize,
        sink: &mut dyn FnMut(MonitorEvent),
    ) -> Result<usize> {
        let Some(seen) = self.seen_cpu.get(cpu) else {
            return Ok(0);
        };
        if self.mode == Mode::Events {
            return match self.file(cpu)? {
                Some(fd) => read_file(fd, cpu, sink),
                None => Ok(0),
            };
        }
        let now = drops(&self.page, cpu);
        let old = seen.swap(now, Ordering::SeqCst);
        Ok(usize::try_from(now.wrapping_sub(old)).unwrap_or(usize::MAX))
    }

    /// Hands out what changed: events mode, the files that epoll reports readable; idle-only
    /// (K5), every CPU's blocks and unblocks since the last call, from the page, as `Counted`
    /// events.
    pub(crate) fn drain(&self, epoll: &Epoll, sink: &mut dyn FnMut(MonitorEvent)) -> Result<()> {
        if self.mode == Mode::IdleOnly {
            let mut seen = lock(&self.seen_all);
            for (cpu, last) in seen.iter_mut().enumerate() {
                let Some(c) = self.page.get(cpu) else {
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
        // A file put in the set now with events pending is reported by the wait below.
        self.open_active()?;
        let mut ready = [EpollEvent::empty(); 64];
        loop {
            let n = match epoll.wait(&mut ready, EpollTimeout::ZERO) {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(Error::os("epoll_wait", e)),
            };
            for ev in &ready[..n] {
                // The monitor's interrupt has a tag that no CPU has.
                let cpu = usize::try_from(ev.data()).unwrap_or(usize::MAX);
                if let Some(fd) = self.file_if_open(cpu) {
                    read_file(fd, cpu, sink)?;
                }
            }
            if n < ready.len() {
                return Ok(());
            }
        }
    }
}

/// Events mode: reads the file of `cpu` once (non-blocking) and hands out what it held;
/// returns how many events it handed out (0 or 1). A half that reads `u32::MAX` saturated:
/// counts were lost, which the monitor reports as an overflow.
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
        // Empty, or another drainer read it first; 0 bytes: UMT was disabled.
        Ok(_) | Err(Errno::EAGAIN) | Err(Errno::EINTR) => Ok(0),
        Err(e) => Err(Error::os("read(UMT CPU file)", e)),
    }
}

/// Idle-only: `cpu`'s drops to zero so far (0 for a CPU out of range).
fn drops(page: &Shared<UmtCounts>, cpu: usize) -> u64 {
    page.get(cpu).map_or(0, |c| c.drops.load_seq_cst())
}

/// Idle-only: reads and discards the word of a file (the drops it counts are in the page),
/// which asks the kernel for the next signal. Empty (`EAGAIN`) is the usual answer.
fn consume(fd: &OwnedFd) -> Result<()> {
    let mut word = [0u8; 8];
    match nix::unistd::read(fd, &mut word) {
        Ok(_) | Err(Errno::EAGAIN) | Err(Errno::EINTR) => Ok(()),
        Err(e) => Err(Error::os("read(UMT CPU file)", e)),
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
    /// nothing can restore from the events (in idle-only mode the counts, from the page, are
    /// unaffected): visible in the statistics. In idle-only mode the events only describe
    /// counts that are live already (`Counted`: the differences of the page's counters).
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
        self.mode == Mode::IdleOnly
    }

    /// The kernel emits the thread's unblock itself. First the files of the CPUs the thread
    /// may run on (one for a pinned thread) are opened, so that the monitor's wait set holds
    /// them before the kernel counts anything there.
    fn register(&self, _cx: &Context, _tid: i32) -> Result<()> {
        for cpu in cpu::thread_cpus()? {
            self.file(cpu)?;
        }
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

    /// Events mode: the file of the caller's CPU. Idle-only (K4): nothing; the counts are
    /// live, and the file is left to the waiter of the CPU.
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

    /// Events mode: the events read; idle-only (K3): the drops since the last look, from the
    /// page.
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

    /// Idle-only: from the page; events mode: as of the last drain.
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

    /// Idle-only: the page's; events mode: none (the drains count).
    fn totals(&self) -> Option<Totals> {
        self.totals().map(|t| Totals {
            blocks: t.blocks,
            unblocks: t.unblocks,
            migrations: 0,
            notes: t.signals,
            drops: t.drops,
            handoffs: 0,
        })
    }

    fn shut_down(&self) {
        self.shut_down()
    }
}

impl Drop for KernelBackend {
    fn drop(&mut self) {
        // Closing the descriptors would leave UMT enabled: disable it first, and only then let
        // a monitor waiting to open ([`Retiring`]) go on. The CPU files, the UMT file and the
        // page go when the fields drop, after this.
        self.umt.disable();
        if self.shutting_down.load(Ordering::Acquire) {
            SHUTTING_DOWN.add(-1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{UMT_ARGS_SIZE_VER0, UMT_SIGNAL_OVERSUB};

    #[test]
    fn a_kernel_without_umt_v3_is_named_with_its_fix() {
        for errno in [Errno::ENOSYS, Errno::EPERM, Errno::EINVAL, Errno::EFAULT] {
            let u = probe_answer(Err(errno)).unwrap_err();
            assert_eq!(u.backend, BackendKind::Kernel);
            assert!(u.reason.contains("471"), "{u}");
        }
        let u = probe_answer(Err(Errno::ENOSYS)).unwrap_err();
        assert!(u.reason.contains("no UMT v3 extension"), "{u}");
        assert!(u.reason.contains("v2"), "{u}");
        let fix = u.fix.unwrap();
        assert!(fix.contains("cargo xtask kernel build"), "{fix}");
        assert!(fix.contains("cargo xtask vm run"), "{fix}");
        let u = probe_answer(Err(Errno::EPERM)).unwrap_err();
        assert!(u.reason.contains("seccomp"), "{u}");
        assert!(u.fix.unwrap().contains("472"));
        // Another call under the number.
        let u = probe_answer(Err(Errno::EINVAL)).unwrap_err();
        assert!(u.reason.contains("not umt_enable"), "{u}");
        let u = probe_answer(Ok(3)).unwrap_err();
        assert!(u.reason.contains("not umt_enable"), "{u}");
    }

    #[test]
    fn auto_skips_the_probe_only_under_a_seccomp_filter() {
        let status = |mode: &str| {
            format!("Name:\tx\nNoNewPrivs:\t1\nSeccomp:\t{mode}\nSpeculation_Store_Bypass:\tx\n")
        };
        let u = seccomp_filter(&status("2")).expect("a filter");
        assert_eq!(u.backend, BackendKind::Kernel);
        assert!(u.reason.contains("seccomp"), "{u}");
        assert!(u.to_string().contains("UMT_BACKEND=kernel"), "{u}");
        // Strict mode cannot run threads anyway; no seccomp, or a kernel without the field.
        assert!(seccomp_filter(&status("0")).is_none());
        assert!(seccomp_filter(&status("1")).is_none());
        assert!(seccomp_filter("Name:\tx\n").is_none());
    }

    #[test]
    fn umt_v3_answers_the_probe_with_e2big() {
        assert!(probe_answer(Err(Errno::E2BIG)).is_ok());
        assert!(probe_answer(Err(Errno::EBUSY)).is_ok());
    }

    #[test]
    fn the_probe_cannot_enable_anything() {
        // Longer than what v3 knows, with a non-zero field past it: E2BIG.
        assert_eq!(std::mem::size_of::<ProbeArgs>(), 2 * UMT_ARGS_SIZE_VER0);
        assert_eq!(std::mem::offset_of!(ProbeArgs, unknown), UMT_ARGS_SIZE_VER0);
        assert_ne!(PROBE.unknown, 0);
        // A kernel that knows that field still refuses the flags.
        assert!(!PROBE.known.is_valid());
    }

    #[test]
    fn modes_map_to_the_flags_of_v2s_abi_versions() {
        // "ABI 2": counts from the page, a signal per drop to zero; no oversubscription
        // signals, which the backend would only read and discard.
        let idle = Mode::IdleOnly.flags();
        assert_eq!(idle, UMT_FD_CLOEXEC | UMT_FD_NONBLOCK | UMT_IDLE_ONLY);
        assert_eq!(idle & UMT_SIGNAL_OVERSUB, 0);
        // "ABI 1": every event.
        assert_eq!(Mode::Events.flags(), UMT_FD_CLOEXEC | UMT_FD_NONBLOCK);
        for mode in [Mode::IdleOnly, Mode::Events] {
            assert!(UmtArgs::new(mode.flags()).is_valid(), "{mode:?}");
        }
    }

    #[test]
    fn the_mode_comes_from_the_environment() {
        assert_eq!(Mode::parse(None, None).unwrap(), Mode::IdleOnly);
        assert_eq!(Mode::parse(Some("events"), None).unwrap(), Mode::Events);
        assert_eq!(
            Mode::parse(Some(" Idle-Only\n"), None).unwrap(),
            Mode::IdleOnly
        );
        // The old switch, as `cargo xtask vm test` and `vm bench` set it.
        assert_eq!(Mode::parse(None, Some("1")).unwrap(), Mode::Events);
        assert_eq!(Mode::parse(Some(""), Some("1")).unwrap(), Mode::Events);
        assert_eq!(Mode::parse(None, Some("2")).unwrap(), Mode::IdleOnly);
        // The new name wins.
        assert_eq!(
            Mode::parse(Some("idle-only"), Some("1")).unwrap(),
            Mode::IdleOnly
        );
        let e = Mode::parse(Some("abi1"), None).unwrap_err();
        assert!(matches!(e, Error::InvalidKernelMode { ref value } if value == "abi1"));
        let text = e.to_string();
        assert!(
            text.contains("events") && text.contains("idle-only"),
            "{text}"
        );
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
