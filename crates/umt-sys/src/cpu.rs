//! CPU helpers: the process affinity mask, the possible CPUs, pinning the calling thread.

use std::fs;
use std::path::Path;

use crate::error::{Error, Result};

#[cfg(target_os = "linux")]
use nix::sched::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
#[cfg(target_os = "linux")]
use nix::unistd::{Pid, getpid};

/// A logical CPU number, as the kernel numbers them (`/sys/devices/system/cpu/cpuN`).
pub type CpuId = usize;

/// The CPUs this process may run on: the affinity mask of its main thread, in ascending order.
///
/// On another OS (no affinity masks): every CPU it reports (`available_parallelism`).
pub fn process_cpus() -> Result<Vec<CpuId>> {
    #[cfg(target_os = "linux")]
    return mask_cpus(getpid());
    #[cfg(not(target_os = "linux"))]
    return portable::all_cpus();
}

/// The CPUs the calling thread may run on, in ascending order.
pub fn thread_cpus() -> Result<Vec<CpuId>> {
    #[cfg(target_os = "linux")]
    return mask_cpus(Pid::from_raw(0));
    #[cfg(not(target_os = "linux"))]
    return portable::all_cpus();
}

#[cfg(target_os = "linux")]
fn mask_cpus(pid: Pid) -> Result<Vec<CpuId>> {
    let set = sched_getaffinity(pid).map_err(|e| Error::os("sched_getaffinity", e))?;
    Ok((0..CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .collect())
}

/// How much CPU time the process's cgroup may use, in CPUs (a quota of 150 ms per 100 ms
/// period is 1.5): cgroup v2's `cpu.max`, or cgroup v1's `cpu.cfs_quota_us` and
/// `cpu.cfs_period_us`, the lowest along the path from the process's cgroup to the root of
/// the hierarchy (a container's limit sits on its own cgroup or above). `None` when no limit
/// applies, or when the hierarchy is not mounted at `/sys/fs/cgroup` (v2) or
/// `/sys/fs/cgroup/cpu` (v1).
///
/// A quota limits time, not CPUs: a process allowed 2 CPUs' worth may still run on all 16 of
/// its affinity mask, each for an eighth of the time, and its pinned workers then wait for the
/// quota instead of running. umt-rt's default core count takes it into account.
pub fn cgroup_cpu_limit() -> Option<f64> {
    let cgroup = fs::read_to_string("/proc/self/cgroup").ok()?;
    cgroup_cpu_limit_in(Path::new("/sys/fs/cgroup"), &cgroup)
}

/// [`cgroup_cpu_limit`] for the text of `/proc/self/cgroup`, `proc_cgroup`, with the cgroup
/// hierarchies mounted under `root` (v2 at `root`, v1's cpu controller at `root/cpu`).
pub fn cgroup_cpu_limit_in(root: &Path, proc_cgroup: &str) -> Option<f64> {
    // Lines `ID:CONTROLLERS:PATH`: v2 is `0::PATH`; v1's cpu controller is a line whose
    // controllers include `cpu`. Both may be there (a hybrid mount): the lower limit counts.
    let mut limit: Option<f64> = None;
    for line in proc_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let found = if id == "0" && controllers.is_empty() {
            lowest_along(root, path.trim(), |dir| {
                read_number_pair(&dir.join("cpu.max"), &dir.join("cpu.max"))
            })
        } else if controllers.split(',').any(|c| c == "cpu") {
            lowest_along(&root.join("cpu"), path.trim(), |dir| {
                read_number_pair(
                    &dir.join("cpu.cfs_quota_us"),
                    &dir.join("cpu.cfs_period_us"),
                )
            })
        } else {
            None
        };
        if let Some(cpus) = found {
            limit = Some(limit.map_or(cpus, |l| l.min(cpus)));
        }
    }
    limit
}

/// The lowest of `read(dir)` for the directories from `root/path` up to `root`. A path
/// outside the process's cgroup namespace shows as `/..`: its files are not visible here.
fn lowest_along(root: &Path, path: &str, read: impl Fn(&Path) -> Option<f64>) -> Option<f64> {
    if path.split('/').any(|part| part == "..") {
        return None;
    }
    let mut dir = root.join(path.trim_start_matches('/'));
    let mut limit: Option<f64> = None;
    loop {
        if let Some(cpus) = read(&dir) {
            limit = Some(limit.map_or(cpus, |l| l.min(cpus)));
        }
        if dir == root || !dir.pop() || !dir.starts_with(root) {
            return limit;
        }
    }
}

/// A quota over a period, in CPUs: from one file holding both (v2's `cpu.max`) or from two
/// (v1). `None` for no limit (`max`, `-1`) or text it cannot read.
fn read_number_pair(quota_file: &Path, period_file: &Path) -> Option<f64> {
    let quota = fs::read_to_string(quota_file).ok()?;
    if quota_file == period_file {
        return parse_cpu_max(&quota);
    }
    let period = fs::read_to_string(period_file).ok()?;
    parse_cpu_max(&format!("{} {}", quota.trim(), period.trim()))
}

/// The CPUs' worth of time a `cpu.max` file allows: `QUOTA PERIOD` in microseconds, or `None`
/// for `max PERIOD` (no limit; v1 writes `-1`) and for text it cannot read.
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut parts = text.split_whitespace();
    let quota: u64 = parts.next()?.parse().ok()?;
    let period: u64 = parts.next()?.parse().ok()?;
    (period > 0).then(|| quota as f64 / period as f64)
}

/// The number of CPU ids the kernel may ever use (`nr_cpu_ids`): one more than the highest
/// id in `/sys/devices/system/cpu/possible`. Per-CPU tables are sized by it.
pub fn possible_cpus() -> Result<usize> {
    match fs::read_to_string("/sys/devices/system/cpu/possible") {
        Ok(text) => parse_cpu_list(&text)
            .and_then(|cpus| cpus.last().map(|&max| max + 1))
            .ok_or_else(|| {
                Error::os(
                    "parsing /sys/devices/system/cpu/possible",
                    std::io::Error::new(std::io::ErrorKind::InvalidData, text.trim().to_owned()),
                )
            }),
        // No sysfs (a bare container, an early initramfs): fall back to the configured count.
        #[cfg(target_os = "linux")]
        Err(_) => {
            let n = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_CONF)
                .map_err(|e| Error::os("sysconf(_SC_NPROCESSORS_CONF)", e))?
                .unwrap_or(1);
            Ok(usize::try_from(n).unwrap_or(1).max(1))
        }
        #[cfg(not(target_os = "linux"))]
        Err(_) => Ok(portable::all_cpus()?.len()),
    }
}

/// The CPUs online now (`/sys/devices/system/cpu/online`), ascending; without sysfs, the
/// process's affinity mask.
pub fn online_cpus() -> Result<Vec<CpuId>> {
    match fs::read_to_string("/sys/devices/system/cpu/online") {
        Ok(text) => parse_cpu_list(&text).ok_or_else(|| {
            Error::os(
                "parsing /sys/devices/system/cpu/online",
                std::io::Error::new(std::io::ErrorKind::InvalidData, text.trim().to_owned()),
            )
        }),
        Err(_) => process_cpus(),
    }
}

/// The size of a memory page in bytes.
pub(crate) fn page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(4096)
}

/// Parses a kernel CPU list such as `0-3,8,10-11` into ascending CPU ids.
pub fn parse_cpu_list(text: &str) -> Option<Vec<CpuId>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi): (CpuId, CpuId) = (lo.parse().ok()?, hi.parse().ok()?);
                if lo > hi {
                    return None;
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// The CPU the calling thread is running on right now (it may move at any time unless pinned).
///
/// On another OS: an error saying so (no such call).
pub fn current_cpu() -> Result<CpuId> {
    #[cfg(target_os = "linux")]
    return sched_getcpu().map_err(|e| Error::os("sched_getcpu", e));
    #[cfg(not(target_os = "linux"))]
    return Err(portable::unsupported("sched_getcpu"));
}

/// Pins the calling thread to `cpu`.
///
/// Returns [`Error::CpuNotInMask`] when the kernel refuses `cpu` (offline, not in the
/// process's cpuset, or beyond the CPUs the kernel knows).
pub fn pin_current_thread(cpu: CpuId) -> Result<()> {
    pin_current_thread_to(&[cpu])
}

/// Restricts the calling thread to the given CPUs.
///
/// Linux has no process-wide mask, only per-thread ones bounded by the process's cpuset, so the
/// kernel decides: a set with no CPU the thread may use gives [`Error::CpuNotInMask`] naming
/// the first CPU and, as the allowed list, the main thread's mask.
///
/// On another OS (no affinity masks) the thread is not pinned: a set with a CPU among
/// [`process_cpus`] is accepted and nothing else happens; one without is refused as on Linux.
pub fn pin_current_thread_to(cpus: &[CpuId]) -> Result<()> {
    #[cfg(target_os = "linux")]
    return set_affinity(Pid::from_raw(0), cpus);
    #[cfg(not(target_os = "linux"))]
    return portable::accept_cpus(cpus);
}

/// Restricts thread `tid` (0: the caller) to `cpus`; the errors of
/// [`pin_current_thread_to`].
#[cfg(target_os = "linux")]
fn set_affinity(tid: Pid, cpus: &[CpuId]) -> Result<()> {
    let refused = |cpu: CpuId| -> Error {
        match process_cpus() {
            Ok(allowed) => Error::CpuNotInMask { cpu, allowed },
            Err(e) => e,
        }
    };
    let Some(&first) = cpus.first() else {
        return Err(refused(usize::MAX));
    };
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu).map_err(|_| refused(cpu))?;
    }
    match sched_setaffinity(tid, &set) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EINVAL) => Err(refused(first)),
        Err(e) => Err(Error::os("sched_setaffinity", e)),
    }
}

/// Pins the thread `tid` of this process to `cpu` (the kernel moves it there before this
/// returns if it is runnable, or when it next wakes).
///
/// The caller must know that the thread is alive: a thread id is reused once its thread
/// exits, possibly by another process (which root could then move).
///
/// Returns [`Error::CpuNotInMask`] when the kernel refuses `cpu`, and an error naming
/// `sched_setaffinity` when no thread has that id (`ESRCH`).
pub fn pin_thread(tid: i32, cpu: CpuId) -> Result<()> {
    #[cfg(target_os = "linux")]
    return set_affinity(Pid::from_raw(tid), &[cpu]);
    #[cfg(not(target_os = "linux"))]
    return {
        let _ = tid;
        portable::accept_cpus(&[cpu])
    };
}

/// Whether the thread `tid` of this process is running or waiting for a CPU (state `R` in
/// `/proc/self/task/<tid>/stat`), rather than sleeping or blocked; an error if it has exited
/// or `/proc` is not mounted.
pub fn thread_runnable(tid: i32) -> Result<bool> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .map_err(|e| Error::os("reading /proc/self/task/<tid>/stat", e))?;
    parse_stat_state(&text).map(|s| s == 'R').ok_or_else(|| {
        Error::os(
            "parsing /proc/self/task/<tid>/stat",
            std::io::Error::from(std::io::ErrorKind::InvalidData),
        )
    })
}

/// The state letter of a `stat` file: the first field after the command name, which may hold
/// spaces and parentheses (so after its last `)`).
fn parse_stat_state(text: &str) -> Option<char> {
    text[text.rfind(')')? + 1..].trim_start().chars().next()
}

/// Moves the calling thread to the `SCHED_IDLE` policy: it then runs only on CPUs that have
/// nothing else to run, and never preempts a normal thread when it wakes. Unprivileged.
///
/// umt-rt's leader uses it so that its wake-ups cannot preempt a worker (which, with the perf
/// backend, would produce switch records that wake the leader again).
///
/// On another OS (no `SCHED_IDLE`): an error saying so; umt-rt starts no leaders there.
pub fn set_current_thread_idle_policy() -> Result<()> {
    #[cfg(target_os = "linux")]
    return set_current_thread_policy(libc::SCHED_IDLE, "sched_setscheduler(SCHED_IDLE)");
    #[cfg(not(target_os = "linux"))]
    return Err(portable::unsupported("sched_setscheduler(SCHED_IDLE)"));
}

/// Moves the calling thread back to the normal policy (`SCHED_OTHER`): the opposite of
/// [`set_current_thread_idle_policy`]. Leaving `SCHED_IDLE` needs the right to the thread's
/// nice value (the kernel's `can_nice`): `CAP_SYS_NICE`, or an `RLIMIT_NICE` of at least
/// `20 - nice`. With the default limit of 0 an unprivileged thread gets `EPERM` (checked:
/// `sched_setscheduler(SCHED_OTHER)` after `SCHED_IDLE`, as `nobody`, Linux 6.18).
pub fn set_current_thread_normal_policy() -> Result<()> {
    #[cfg(target_os = "linux")]
    return set_current_thread_policy(libc::SCHED_OTHER, "sched_setscheduler(SCHED_OTHER)");
    // Threads start in the normal policy, and nothing here leaves it.
    #[cfg(not(target_os = "linux"))]
    return Ok(());
}

#[cfg(target_os = "linux")]
fn set_current_thread_policy(policy: libc::c_int, what: &'static str) -> Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param that outlives the call; pid 0 is the caller.
    let ret = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if ret == 0 {
        Ok(())
    } else {
        Err(Error::os(what, std::io::Error::last_os_error()))
    }
}

/// The kernel thread id of the calling thread.
///
/// On another OS: a number unique to the thread within this process (from 1, in the order
/// the threads first ask), standing in for it.
pub fn current_tid() -> i32 {
    #[cfg(target_os = "linux")]
    return nix::unistd::gettid().as_raw();
    #[cfg(not(target_os = "linux"))]
    return portable::thread_number();
}

/// What the CPU helpers do where Linux's calls do not exist: no affinity masks, no scheduling
/// policies, no kernel thread ids.
#[cfg(not(target_os = "linux"))]
mod portable {
    use super::CpuId;
    use crate::error::{Error, Result};

    /// Every CPU this OS reports, `0..available_parallelism`.
    pub(super) fn all_cpus() -> Result<Vec<CpuId>> {
        let n = std::thread::available_parallelism()
            .map_err(|e| Error::os("available_parallelism", e))?;
        Ok((0..n.get()).collect())
    }

    /// Accepts `cpus` if one of them is among [`all_cpus`], as Linux does with a mask (there
    /// is nothing to pin them with); refuses naming the first otherwise.
    pub(super) fn accept_cpus(cpus: &[CpuId]) -> Result<()> {
        let allowed = all_cpus()?;
        if cpus.iter().any(|c| allowed.contains(c)) {
            return Ok(());
        }
        Err(Error::CpuNotInMask {
            cpu: cpus.first().copied().unwrap_or(usize::MAX),
            allowed,
        })
    }

    /// The error of a call this OS does not have.
    pub(super) fn unsupported(what: &'static str) -> Error {
        Error::os(
            what,
            std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "only Linux has it; umt runs here as a plain work-stealing pool",
            ),
        )
    }

    /// A number for the calling thread, unique in this process.
    pub(super) fn thread_number() -> i32 {
        use std::sync::atomic::{AtomicI32, Ordering};
        static NEXT: AtomicI32 = AtomicI32::new(1);
        thread_local! {
            static MINE: i32 = NEXT.fetch_add(1, Ordering::Relaxed);
        }
        MINE.with(|n| *n)
    }
}

/// CPU time the whole process has used so far, all threads (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn process_cpu_time() -> Result<std::time::Duration> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map(std::time::Duration::from)
        .map_err(|e| Error::os("clock_gettime(CLOCK_PROCESS_CPUTIME_ID)", e))
}

/// CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`).
pub fn current_thread_cpu_time() -> Result<std::time::Duration> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(std::time::Duration::from)
        .map_err(|e| Error::os("clock_gettime(CLOCK_THREAD_CPUTIME_ID)", e))
}

/// What the scheduler did with one thread of this process, from `/proc/self/task/<tid>/`:
/// exact figures kept by the kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadSched {
    /// Time it ran on a CPU (to the nanosecond from `schedstat`; in clock ticks from `stat`
    /// on a kernel without `CONFIG_SCHED_INFO`).
    pub cpu_time: std::time::Duration,
    /// Time it waited on a run queue, runnable but not running: with one thread per core
    /// pinned, the time another thread of the core held it (oversubscription). `None` on a
    /// kernel without `CONFIG_SCHED_INFO` (no `schedstat` file).
    pub runqueue_wait: Option<std::time::Duration>,
    /// Times it gave up its CPU by blocking (I/O, a lock, a futex, parking).
    pub voluntary_switches: u64,
    /// Times it was preempted while runnable.
    pub involuntary_switches: u64,
}

/// [`ThreadSched`] of the thread `tid` of this process; an error if it has exited (or
/// `/proc` is not mounted).
pub fn thread_sched(tid: i32) -> Result<ThreadSched> {
    let read = |file: &str| std::fs::read_to_string(format!("/proc/self/task/{tid}/{file}"));
    let os = |e| Error::os("reading /proc/self/task/<tid>/{schedstat,stat,status}", e);
    let bad = || {
        Error::os(
            "parsing /proc/self/task/<tid>/{schedstat,stat}",
            std::io::Error::from(std::io::ErrorKind::InvalidData),
        )
    };
    let (cpu_time, runqueue_wait) = match read("schedstat") {
        Ok(text) => {
            let (run, wait) = parse_schedstat(&text).ok_or_else(bad)?;
            (run, Some(wait))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
                .ok()
                .flatten()
                .filter(|&t| t > 0)
                .unwrap_or(100) as u64;
            let ticks = parse_stat_cpu_ticks(&read("stat").map_err(os)?).ok_or_else(bad)?;
            (
                std::time::Duration::from_nanos(ticks.saturating_mul(1_000_000_000 / tick)),
                None,
            )
        }
        Err(e) => return Err(os(e)),
    };
    let status = read("status").map_err(os)?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    Ok(ThreadSched {
        cpu_time,
        runqueue_wait,
        voluntary_switches: field("voluntary_ctxt_switches"),
        involuntary_switches: field("nonvoluntary_ctxt_switches"),
    })
}

/// The storage I/O one thread of this process caused, from `/proc/self/task/<tid>/io`
/// (the kernel's task I/O accounting): bytes it made the kernel fetch from storage and bytes
/// it sent (or dirtied, for buffered writes) towards storage. Reads served by the page cache
/// count nothing; this is the "I/O blocks" of seed 002's CPIO.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadIo {
    /// Bytes read from storage on its behalf (`read_bytes`).
    pub read_bytes: u64,
    /// Bytes written, or dirtied in the page cache to be written, by it (`write_bytes`).
    pub written_bytes: u64,
}

impl ThreadIo {
    /// Both directions together.
    pub fn total(&self) -> u64 {
        self.read_bytes.saturating_add(self.written_bytes)
    }
}

impl std::ops::Add for ThreadIo {
    type Output = ThreadIo;
    fn add(self, o: ThreadIo) -> ThreadIo {
        ThreadIo {
            read_bytes: self.read_bytes.saturating_add(o.read_bytes),
            written_bytes: self.written_bytes.saturating_add(o.written_bytes),
        }
    }
}

impl std::iter::Sum for ThreadIo {
    fn sum<I: Iterator<Item = ThreadIo>>(iter: I) -> ThreadIo {
        iter.fold(ThreadIo::default(), |a, b| a + b)
    }
}

/// [`ThreadIo`] of the thread `tid` of this process. An error if the thread has exited, or
/// if the kernel keeps no I/O accounting (`CONFIG_TASK_IO_ACCOUNTING` off: no `io` file).
pub fn thread_io(tid: i32) -> Result<ThreadIo> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/io")).map_err(|e| {
        Error::os(
            "reading /proc/self/task/<tid>/io (a kernel without CONFIG_TASK_IO_ACCOUNTING has \
             none)",
            e,
        )
    })?;
    parse_task_io(&text).ok_or_else(|| {
        Error::os(
            "parsing /proc/self/task/<tid>/io",
            std::io::Error::from(std::io::ErrorKind::InvalidData),
        )
    })
}

/// `read_bytes` and `write_bytes` of an `io` file.
fn parse_task_io(text: &str) -> Option<ThreadIo> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some(ThreadIo {
        read_bytes: field("read_bytes")?,
        written_bytes: field("write_bytes")?,
    })
}

/// The first two fields of a `schedstat` file: nanoseconds on a CPU, nanoseconds waiting on
/// a run queue.
fn parse_schedstat(text: &str) -> Option<(std::time::Duration, std::time::Duration)> {
    let mut f = text.split_whitespace().map(|v| v.parse::<u64>());
    let run = f.next()?.ok()?;
    let wait = f.next()?.ok()?;
    Some((
        std::time::Duration::from_nanos(run),
        std::time::Duration::from_nanos(wait),
    ))
}

/// `utime + stime` (clock ticks) of a `stat` file: fields 14 and 15, counted after the
/// command name, which may hold spaces and parentheses (so from its last `)`).
fn parse_stat_cpu_ticks(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {

    #[test]
    fn task_io_reads_the_storage_fields_only() {
        let text = "rchar: 100\nwchar: 200\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\n\
                    write_bytes: 8192\ncancelled_write_bytes: 0\n";
        assert_eq!(
            super::parse_task_io(text),
            Some(super::ThreadIo {
                read_bytes: 4096,
                written_bytes: 8192
            })
        );
        assert_eq!(super::parse_task_io("rchar: 1\n"), None);
        let tid = super::current_tid();
        if let Ok(io) = super::thread_io(tid) {
            assert_eq!(io.total(), io.read_bytes + io.written_bytes);
        }
        assert!(super::thread_io(-1).is_err());
    }

    #[test]
    fn cpu_max_reads_a_quota_as_cpus_and_max_as_none() {
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(1.5));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(parse_cpu_max("100 0"), None);
    }

    /// The lowest limit along the path counts: a container's limit on a parent cgroup bounds
    /// a child cgroup without one; the root's file counts too (a container's own root).
    #[test]
    fn the_lowest_cpu_max_along_the_path_counts() {
        let root = tempfile::tempdir().unwrap();
        let leaf = root.path().join("system.slice/app.service");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(root.path().join("system.slice/cpu.max"), "200000 100000\n").unwrap();
        std::fs::write(leaf.join("cpu.max"), "max 100000\n").unwrap();
        let proc_cgroup = "0::/system.slice/app.service\n";
        assert_eq!(cgroup_cpu_limit_in(root.path(), proc_cgroup), Some(2.0));
        std::fs::write(root.path().join("cpu.max"), "50000 100000\n").unwrap();
        assert_eq!(cgroup_cpu_limit_in(root.path(), proc_cgroup), Some(0.5));
        // A path outside the namespace: no answer.
        assert_eq!(cgroup_cpu_limit_in(root.path(), "0::/../other\n"), None);
        // No file anywhere: no limit.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(cgroup_cpu_limit_in(empty.path(), "0::/\n"), None);
    }

    /// cgroup v1 (older container hosts): the cpu controller's quota and period files, and
    /// on a hybrid mount the lower of the two hierarchies.
    #[test]
    fn cgroup_v1_quota_and_period_count_too() {
        let root = tempfile::tempdir().unwrap();
        let docker = root.path().join("cpu/docker/abc");
        std::fs::create_dir_all(&docker).unwrap();
        std::fs::write(docker.join("cpu.cfs_quota_us"), "300000\n").unwrap();
        std::fs::write(docker.join("cpu.cfs_period_us"), "100000\n").unwrap();
        std::fs::write(root.path().join("cpu/cpu.cfs_quota_us"), "-1\n").unwrap();
        std::fs::write(root.path().join("cpu/cpu.cfs_period_us"), "100000\n").unwrap();
        let v1 = "4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n";
        assert_eq!(cgroup_cpu_limit_in(root.path(), v1), Some(3.0));
        std::fs::write(root.path().join("cpu.max"), "100000 100000\n").unwrap();
        assert_eq!(cgroup_cpu_limit_in(root.path(), v1), Some(1.0));
        assert_eq!(parse_cpu_max("-1 100000"), None);
    }
    use super::*;

    #[test]
    fn stat_state_parses_after_the_last_parenthesis() {
        assert_eq!(parse_stat_state("12 (a) b) R 1 2 3"), Some('R'));
        assert_eq!(parse_stat_state("12 (sleepy) S 1"), Some('S'));
        assert_eq!(parse_stat_state("12 (x)"), None);
        assert_eq!(parse_stat_state("garbage"), None);
    }

    /// A thread that spins is runnable, one asleep in `park` is not; another thread can be
    /// pinned.
    #[test]
    fn another_thread_is_seen_runnable_and_pinned() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
        let (tid, go) = (
            Arc::new(AtomicI32::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let t = {
            let (tid, go) = (tid.clone(), go.clone());
            std::thread::spawn(move || {
                tid.store(current_tid(), Ordering::Release);
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                std::thread::park();
                current_cpu().ok()
            })
        };
        while tid.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        let tid = tid.load(Ordering::Acquire);
        assert!(
            thread_runnable(tid).unwrap(),
            "a spinning thread is runnable"
        );
        let cpu = thread_cpus().unwrap()[0];
        pin_thread(tid, cpu).unwrap();
        go.store(true, Ordering::Release);
        // Parked (state S) once it stops being runnable; a spurious wake-up runs it again.
        while thread_runnable(tid).unwrap_or(false) {
            std::thread::yield_now();
        }
        t.thread().unpark();
        assert_eq!(
            t.join().unwrap(),
            Some(cpu),
            "the pinned thread ran on its new CPU"
        );
        // (Not pinned again, nor looked at: its id may already name another thread.)
    }

    #[test]
    fn schedstat_parses() {
        assert_eq!(
            parse_schedstat("1500 20 7\n"),
            Some((
                std::time::Duration::from_nanos(1500),
                std::time::Duration::from_nanos(20)
            ))
        );
        assert_eq!(parse_schedstat("x 1 2"), None);
        assert_eq!(parse_schedstat("5"), None);
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(10));
        assert_eq!(parse_stat_cpu_ticks("42 (x) S 1"), None);
    }

    #[test]
    fn own_thread_sched_is_read() {
        let before = thread_sched(current_tid()).unwrap();
        // Without schedstat the CPU time moves in clock ticks: work until it moves.
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while thread_sched(current_tid()).unwrap().cpu_time == before.cpu_time
            && start.elapsed() < std::time::Duration::from_secs(20)
        {
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
        // A sleep switches out voluntarily unless its timer fired before the thread got to
        // schedule (a slow guest under emulation): sleep until one of them does.
        let mut after = thread_sched(current_tid()).unwrap();
        let start = std::time::Instant::now();
        while after.voluntary_switches == before.voluntary_switches
            && start.elapsed() < std::time::Duration::from_secs(20)
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
            after = thread_sched(current_tid()).unwrap();
        }
        assert!(after.cpu_time > before.cpu_time);
        assert!(after.voluntary_switches > before.voluntary_switches);
        assert!(thread_sched(i32::MAX).is_err());
    }

    #[test]
    fn thread_cpu_time_grows_with_work() {
        let before = current_thread_cpu_time().unwrap();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(current_thread_cpu_time().unwrap() > before);
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3\n"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_cpu_list("0,2,4-5"), Some(vec![0, 2, 4, 5]));
        assert_eq!(parse_cpu_list("7"), Some(vec![7]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn process_mask_is_within_possible_cpus() {
        let cpus = process_cpus().unwrap();
        assert!(!cpus.is_empty());
        assert!(*cpus.last().unwrap() < possible_cpus().unwrap());
    }

    #[test]
    fn pinning_outside_the_mask_is_a_typed_error() {
        let bad = possible_cpus().unwrap() + 100;
        match pin_current_thread(bad) {
            Err(Error::CpuNotInMask { cpu, allowed }) => {
                assert_eq!(cpu, bad);
                assert_eq!(allowed, process_cpus().unwrap());
            }
            other => panic!("expected CpuNotInMask, got {other:?}"),
        }
        assert!(matches!(
            pin_current_thread_to(&[]),
            Err(Error::CpuNotInMask { .. })
        ));
        // Beyond what a CPU set can even hold.
        assert!(matches!(
            pin_current_thread(1 << 20),
            Err(Error::CpuNotInMask { cpu, .. }) if cpu == 1 << 20
        ));
    }

    #[test]
    fn idle_policy_applies_to_the_calling_thread_only() {
        std::thread::spawn(|| {
            set_current_thread_idle_policy().unwrap();
            // SAFETY: querying the caller's policy has no preconditions.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_IDLE);
        })
        .join()
        .unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
    }

    #[test]
    fn pinning_moves_the_thread() {
        std::thread::spawn(|| {
            for cpu in process_cpus().unwrap() {
                pin_current_thread(cpu).unwrap();
                assert_eq!(current_cpu().unwrap(), cpu);
                assert_eq!(thread_cpus().unwrap(), vec![cpu]);
            }
        })
        .join()
        .unwrap();
    }
}
