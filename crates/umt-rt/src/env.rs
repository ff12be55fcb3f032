//! What a deployer sets without touching the code, read by the builder for what the code left
//! unset: `UMT_NUM_THREADS` (as rayon's `RAYON_NUM_THREADS`, which is read when it is unset:
//! a deployment written for the rayon build of a program keeps its thread count),
//! `UMT_BACKEND`, and the cgroup CPU quota (`cpu.max`) of a container or a systemd unit.
//!
//! Explicit builder calls win over the environment; the environment wins over the quota. A
//! value that cannot be used is said once (the runtime's warning line) and left out, never an
//! error: a deployment does not fail to start over a typo in its environment.

use umt_sys::{BackendKind, CpuId};

use crate::diag::Warning;

/// Something to say once the runtime exists (its warnings are per runtime).
pub(crate) type Note = (Warning, String);

/// The variable that sets the number of cores, and its text: `UMT_NUM_THREADS`, else
/// rayon's `RAYON_NUM_THREADS` (set or empty counts as unset).
pub(crate) fn num_threads_var() -> Option<(&'static str, String)> {
    ["UMT_NUM_THREADS", "RAYON_NUM_THREADS"]
        .into_iter()
        .find_map(|name| {
            var(name)
                .filter(|v| !v.trim().is_empty())
                .map(|v| (name, v))
        })
}

/// The CPUs to run on when neither `Builder::cores` nor `Builder::num_threads` was called:
/// `num_threads` (the name and text of the variable that sets it, [`num_threads_var`]) of
/// the first `allowed`, else as many as the cgroup's CPU `quota` (in CPUs) rounds up to,
/// else all of `allowed`.
pub(crate) fn default_cpus(
    allowed: &[CpuId],
    num_threads: Option<(&str, &str)>,
    quota: Option<f64>,
    notes: &mut Vec<Note>,
) -> Vec<CpuId> {
    let name = num_threads.map_or("UMT_NUM_THREADS", |(name, _)| name);
    match num_threads
        .map(|(_, text)| text.trim())
        .filter(|v| !v.is_empty())
    {
        // 0 means "the default", as for rayon.
        Some("0") | None => {}
        Some(text) => match text.parse::<usize>() {
            Ok(n) if n > allowed.len() => {
                notes.push((
                    Warning::EnvNumThreads,
                    format!(
                        "{name}={n}, but this process may run on {}: runs on all of them",
                        cpus_text(allowed.len())
                    ),
                ));
                return allowed.to_vec();
            }
            Ok(n) => return allowed[..n].to_vec(),
            Err(_) => notes.push((
                Warning::EnvNumThreads,
                format!(
                    "{name}={text:?} ignored: not a number of threads (give a count, or 0 for \
                     one per CPU)"
                ),
            )),
        },
    }
    if let Some(quota) = quota {
        // At least one CPU; a fraction of one more is worth a worker (it runs part time).
        let n = (quota.ceil() as usize).max(1);
        if n < allowed.len() {
            notes.push((
                Warning::CpuQuota,
                format!(
                    "the cgroup's CPU quota (cpu.max, or cpu.cfs_quota_us) allows {quota:.2} CPUs of time: runs on {n} \
                     of the {} CPUs of the affinity mask, so that pinned workers do not wait for \
                     the quota (UMT_NUM_THREADS or Builder::num_threads choose another count)",
                    allowed.len()
                ),
            ));
            return allowed[..n].to_vec();
        }
    }
    allowed.to_vec()
}

/// The monitor backend when `Builder::monitor` was not called: `UMT_BACKEND` (the text of it,
/// `backend`: auto, kernel, bpf, perf or off), else `Auto`.
pub(crate) fn default_backend(backend: Option<&str>, notes: &mut Vec<Note>) -> BackendKind {
    match backend.map(str::trim).filter(|v| !v.is_empty()) {
        None => BackendKind::Auto,
        Some(text) => text.parse().unwrap_or_else(|e| {
            notes.push((
                Warning::EnvBackend,
                format!("UMT_BACKEND ignored: {e}; the monitor is chosen as for auto"),
            ));
            BackendKind::Auto
        }),
    }
}

/// "1 CPU", "4 CPUs".
pub(crate) fn cpus_text(n: usize) -> String {
    if n == 1 {
        "1 CPU".to_owned()
    } else {
        format!("{n} CPUs")
    }
}

/// The text of the environment variable `name`, if set (and valid UTF-8).
pub(crate) fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MASK: [CpuId; 4] = [0, 2, 4, 6];

    fn cpus(num_threads: Option<&str>, quota: Option<f64>) -> (Vec<CpuId>, Vec<Warning>) {
        let mut notes = Vec::new();
        let var = num_threads.map(|text| ("UMT_NUM_THREADS", text));
        let cpus = default_cpus(&MASK, var, quota, &mut notes);
        (cpus, notes.into_iter().map(|(w, _)| w).collect())
    }

    #[test]
    fn num_threads_takes_the_first_cpus_of_the_mask_and_wins_over_the_quota() {
        assert_eq!(cpus(Some("2"), Some(1.0)), (vec![0, 2], vec![]));
        assert_eq!(cpus(Some(" 3 "), None), (vec![0, 2, 4], vec![]));
        assert_eq!(
            cpus(Some("9"), None),
            (MASK.to_vec(), vec![Warning::EnvNumThreads])
        );
    }

    #[test]
    fn zero_empty_or_unreadable_num_threads_fall_back_to_the_quota_then_the_mask() {
        assert_eq!(cpus(Some("0"), None), (MASK.to_vec(), vec![]));
        assert_eq!(cpus(Some(""), None), (MASK.to_vec(), vec![]));
        assert_eq!(
            cpus(Some("two"), Some(2.0)),
            (vec![0, 2], vec![Warning::EnvNumThreads, Warning::CpuQuota])
        );
    }

    #[test]
    fn a_warning_names_the_variable_it_read() {
        let mut notes = Vec::new();
        let cpus = default_cpus(&MASK, Some(("RAYON_NUM_THREADS", "9")), None, &mut notes);
        assert_eq!(cpus, MASK.to_vec());
        assert!(
            notes[0]
                .1
                .starts_with("RAYON_NUM_THREADS=9, but this process may run on 4 CPUs"),
            "{}",
            notes[0].1
        );
        let cpus = default_cpus(
            &MASK[..1],
            Some(("RAYON_NUM_THREADS", "2")),
            None,
            &mut notes,
        );
        assert_eq!(cpus, vec![0]);
        assert!(notes[1].1.contains("may run on 1 CPU:"), "{}", notes[1].1);
    }

    #[test]
    fn a_quota_rounds_up_to_whole_cpus_and_is_said_only_when_it_binds() {
        assert_eq!(cpus(None, Some(1.5)), (vec![0, 2], vec![Warning::CpuQuota]));
        assert_eq!(cpus(None, Some(0.2)), (vec![0], vec![Warning::CpuQuota]));
        assert_eq!(cpus(None, Some(4.0)), (MASK.to_vec(), vec![]));
        assert_eq!(cpus(None, Some(64.0)), (MASK.to_vec(), vec![]));
        assert_eq!(cpus(None, None), (MASK.to_vec(), vec![]));
    }

    #[test]
    fn backend_reads_every_spelling_and_ignores_others_saying_so() {
        let mut notes = Vec::new();
        assert_eq!(default_backend(None, &mut notes), BackendKind::Auto);
        assert_eq!(
            default_backend(Some("off"), &mut notes),
            BackendKind::Disabled
        );
        assert_eq!(
            default_backend(Some(" Perf "), &mut notes),
            BackendKind::Perf
        );
        assert!(notes.is_empty());
        assert_eq!(default_backend(Some("fast"), &mut notes), BackendKind::Auto);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].1.contains("UMT_BACKEND"), "{}", notes[0].1);
    }
}
