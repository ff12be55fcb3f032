//! Opening a thread's context-switch event, and explaining why the kernel refused it.

use std::io;

use nix::errno::Errno;
use perf_event::events::Software;
use perf_event::{Builder, Clock, SampleFlag, Sampler};

use crate::backend::{BackendKind, Unavailable};
use crate::cpu;

pub(super) fn open_sampler(
    tid: i32,
    ring_bytes: usize,
    wakeup_bytes: usize,
) -> io::Result<Sampler> {
    let mut b = Builder::new(Software::DUMMY);
    b.observe_pid(tid)
        .any_cpu()
        .exclude_kernel(true)
        .exclude_hv(true)
        .context_switch(true)
        .sample_id_all(true)
        .sample(SampleFlag::TID | SampleFlag::TIME | SampleFlag::CPU)
        .wakeup_watermark(wakeup_bytes)
        .clockid(Clock::MONOTONIC)
        .enabled(true);
    b.build()?.sampled(ring_bytes)
}

/// Checks that this process may open context-switch events on its own threads.
pub(crate) fn probe() -> std::result::Result<(), Unavailable> {
    match open_sampler(cpu::current_tid(), page_size(), 1) {
        Ok(_) => Ok(()),
        Err(e) => Err(classify_open_error(
            e.raw_os_error().unwrap_or(0),
            read_paranoid(),
        )),
    }
}

pub(super) use crate::cpu::page_size;

pub(super) fn read_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Explains a `perf_event_open` failure, with the fix spelled out.
pub(crate) fn classify_open_error(errno: i32, paranoid: Option<i32>) -> Unavailable {
    let u = |reason: String| Unavailable::new(BackendKind::Perf, reason);
    match Errno::from_raw(errno) {
        Errno::EACCES | Errno::EPERM => match paranoid {
            Some(p) if p > 2 => u(format!("perf_event_paranoid is {p}")).with_fix(
                "run `sysctl kernel.perf_event_paranoid=2` as root, or give the program CAP_PERFMON",
            ),
            _ => u(format!(
                "perf_event_open denied (seccomp or a container policy; perf_event_paranoid is {})",
                paranoid.map_or_else(|| "unknown".to_owned(), |p| p.to_string())
            ))
            .with_fix(
                "allow perf_event_open in the seccomp profile (for Docker: \
                 --security-opt seccomp=unconfined or --cap-add PERFMON)",
            ),
        },
        Errno::ENOSYS => u("perf_event_open is not implemented by this kernel".to_owned())
            .with_fix("use a kernel built with CONFIG_PERF_EVENTS=y"),
        Errno::ENOENT | Errno::EOPNOTSUPP | Errno::EINVAL | Errno::E2BIG => u(format!(
            "this kernel cannot report context switches to user space ({})",
            Errno::from_raw(errno).desc()
        ))
        .with_fix("use Linux 4.3 or newer"),
        Errno::EMFILE | Errno::ENFILE => u("out of file descriptors".to_owned())
            .with_fix("raise the limit with `ulimit -n`"),
        other => u(format!("perf_event_open failed: {}", other.desc())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paranoid_3_says_how_to_fix_it() {
        let u = classify_open_error(libc::EACCES, Some(3));
        assert_eq!(u.backend, BackendKind::Perf);
        assert_eq!(u.reason, "perf_event_paranoid is 3");
        assert!(
            u.fix
                .unwrap()
                .contains("sysctl kernel.perf_event_paranoid=2")
        );
    }

    #[test]
    fn denied_at_low_paranoid_is_seccomp() {
        let u = classify_open_error(libc::EPERM, Some(2));
        assert!(u.reason.contains("seccomp"), "{u}");
        assert!(u.fix.unwrap().contains("seccomp"));
    }

    #[test]
    fn missing_support_is_explained() {
        assert!(
            classify_open_error(libc::ENOSYS, None)
                .fix
                .unwrap()
                .contains("CONFIG_PERF_EVENTS")
        );
        assert!(
            classify_open_error(libc::EINVAL, Some(2))
                .fix
                .unwrap()
                .contains("4.3")
        );
    }
}
