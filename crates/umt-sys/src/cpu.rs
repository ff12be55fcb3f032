//! CPU helpers: the process affinity mask, the possible CPUs, pinning the calling thread.

use std::fs;

use nix::sched::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
use nix::unistd::{Pid, getpid};

use crate::error::{Error, Result};

/// A logical CPU number, as the kernel numbers them (`/sys/devices/system/cpu/cpuN`).
pub type CpuId = usize;

/// The CPUs this process may run on: the affinity mask of its main thread, in ascending order.
pub fn process_cpus() -> Result<Vec<CpuId>> {
    mask_cpus(getpid())
}

/// The CPUs the calling thread may run on, in ascending order.
pub fn thread_cpus() -> Result<Vec<CpuId>> {
    mask_cpus(Pid::from_raw(0))
}

fn mask_cpus(pid: Pid) -> Result<Vec<CpuId>> {
    let set = sched_getaffinity(pid).map_err(|e| Error::os("sched_getaffinity", e))?;
    Ok((0..CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .collect())
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
        Err(_) => {
            let n = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_CONF)
                .map_err(|e| Error::os("sysconf(_SC_NPROCESSORS_CONF)", e))?
                .unwrap_or(1);
            Ok(usize::try_from(n).unwrap_or(1).max(1))
        }
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
pub fn current_cpu() -> Result<CpuId> {
    sched_getcpu().map_err(|e| Error::os("sched_getcpu", e))
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
pub fn pin_current_thread_to(cpus: &[CpuId]) -> Result<()> {
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
    match sched_setaffinity(Pid::from_raw(0), &set) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EINVAL) => Err(refused(first)),
        Err(e) => Err(Error::os("sched_setaffinity", e)),
    }
}

/// Moves the calling thread to the `SCHED_IDLE` policy: it then runs only on CPUs that have
/// nothing else to run, and never preempts a normal thread when it wakes. Unprivileged.
///
/// umt-rt's leader uses it so that its wake-ups cannot preempt a worker (which, with the perf
/// backend, would produce switch records that wake the leader again).
pub fn set_current_thread_idle_policy() -> Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param that outlives the call; pid 0 is the caller.
    let ret = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if ret == 0 {
        Ok(())
    } else {
        Err(Error::os(
            "sched_setscheduler(SCHED_IDLE)",
            std::io::Error::last_os_error(),
        ))
    }
}

/// The kernel thread id of the calling thread.
pub fn current_tid() -> i32 {
    nix::unistd::gettid().as_raw()
}

/// CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`).
pub fn current_thread_cpu_time() -> Result<std::time::Duration> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(std::time::Duration::from)
        .map_err(|e| Error::os("clock_gettime(CLOCK_THREAD_CPUTIME_ID)", e))
}

#[cfg(test)]
mod tests {
    use super::*;

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
