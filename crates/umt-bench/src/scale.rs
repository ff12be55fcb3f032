//! The cores sweep (`umt-bench scale`): the same workloads, with the same parameters, at 1, 2,
//! 4, ... N cores of the affinity mask, every runtime at each; written as JSON, a Markdown
//! table and an SVG plot of speedup against cores ([`crate::plot::scaling`]).

use std::fmt::Write as _;

use serde::Serialize;

use crate::report::Report;

/// The comparisons at one core count.
#[derive(Debug, Clone, Serialize)]
pub struct ScalePoint {
    /// Cores the runtimes ran on (the first of the affinity mask).
    pub cores: usize,
    /// One report per workload.
    pub reports: Vec<Report>,
}

/// 1, 2, 4, ... up to `n`, and `n` itself.
pub fn core_counts(n: usize) -> Vec<usize> {
    let mut out: Vec<usize> = std::iter::successors(Some(1usize), |k| k.checked_mul(2))
        .take_while(|&k| k < n)
        .collect();
    if n >= 1 {
        out.push(n);
    }
    out
}

/// Checks asked core counts against the `available` CPUs: each 1..=available, none twice,
/// ascending order (sorted here).
pub fn check_counts(mut asked: Vec<usize>, available: usize) -> Result<Vec<usize>, String> {
    asked.sort_unstable();
    if let Some(&bad) = asked.iter().find(|&&k| k == 0 || k > available) {
        return Err(format!(
            "--cores-list: {bad} cores, but this process may run on {available}: give 1 to \
             {available}"
        ));
    }
    if asked.windows(2).any(|w| w[0] == w[1]) {
        return Err("--cores-list: a core count is named twice".into());
    }
    if asked.is_empty() {
        return Err("--cores-list: name at least one core count".into());
    }
    Ok(asked)
}

/// The workloads of `points`, in the order of their first appearance.
pub fn workloads(points: &[ScalePoint]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in points.iter().flat_map(|p| &p.reports) {
        if !out.contains(&r.workload) {
            out.push(r.workload.clone());
        }
    }
    out
}

/// The runtimes of `points`, in the order of their first appearance.
pub fn runtimes(points: &[ScalePoint]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for run in points.iter().flat_map(|p| &p.reports).flat_map(|r| &r.runs) {
        if !out.contains(&run.runtime) {
            out.push(run.runtime.clone());
        }
    }
    out
}

/// The median seconds of `runtime` on `workload` at `cores`, if it ran.
pub fn seconds(points: &[ScalePoint], workload: &str, runtime: &str, cores: usize) -> Option<f64> {
    points
        .iter()
        .find(|p| p.cores == cores)?
        .reports
        .iter()
        .find(|r| r.workload == workload)?
        .runs
        .iter()
        .find(|r| r.runtime == runtime)
        .map(|r| r.median_seconds)
}

/// Speedup of `runtime` on `workload` at `cores` over the baseline runtime at the fewest
/// cores of the sweep (the same problem, so a line of slope 1 is perfect scaling).
pub fn speedup(points: &[ScalePoint], workload: &str, runtime: &str, cores: usize) -> Option<f64> {
    let first = points.iter().map(|p| p.cores).min()?;
    let reference = seconds(points, workload, "baseline", first)?;
    Some(reference / seconds(points, workload, runtime, cores)?)
}

/// The sweep as a Markdown table: per workload, a row per runtime, a column per core count,
/// each cell the median seconds and the speedup over baseline at the same cores.
pub fn markdown(points: &[ScalePoint]) -> String {
    let mut out = String::new();
    let counts: Vec<usize> = points.iter().map(|p| p.cores).collect();
    for w in workloads(points) {
        let _ = writeln!(out, "### {w}\n");
        let _ = write!(out, "| runtime |");
        for k in &counts {
            let _ = write!(out, " {k} cores |");
        }
        let _ = write!(out, "\n|---|");
        for _ in &counts {
            let _ = write!(out, "---|");
        }
        out.push('\n');
        for r in runtimes(points) {
            let _ = write!(out, "| {r} |");
            for &k in &counts {
                match (
                    seconds(points, &w, &r, k),
                    seconds(points, &w, "baseline", k),
                ) {
                    (Some(s), Some(b)) => {
                        let _ = write!(out, " {s:.3} s ({:.2}x) |", b / s);
                    }
                    (Some(s), None) => {
                        let _ = write!(out, " {s:.3} s |");
                    }
                    _ => {
                        let _ = write!(out, " - |");
                    }
                }
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out.push_str(
        "Cells: median seconds (speedup over baseline at the same core count). The parameters \
         are the same at every core count (see scale.json).\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::RunReport;

    #[test]
    fn counts_double_up_to_the_machine() {
        assert_eq!(core_counts(1), [1]);
        assert_eq!(core_counts(2), [1, 2]);
        assert_eq!(core_counts(16), [1, 2, 4, 8, 16]);
        assert_eq!(core_counts(12), [1, 2, 4, 8, 12]);
        assert_eq!(check_counts(vec![2, 1], 2).unwrap(), [1, 2]);
        assert!(
            check_counts(vec![3], 2)
                .unwrap_err()
                .contains("give 1 to 2")
        );
        assert!(check_counts(vec![1, 1], 2).unwrap_err().contains("twice"));
    }

    fn report(workload: &str, runs: &[(&str, f64)]) -> Report {
        Report {
            workload: workload.into(),
            params: serde_json::json!({}),
            fom_unit: "x".into(),
            compute_seconds: 1.0,
            compute_runs_seconds: vec![1.0],
            io_runs_seconds: vec![1.0],
            io_seconds: 1.0,
            bound_seconds: 1.0,
            tight_bound_seconds: 1.0,
            runs: runs
                .iter()
                .map(|&(name, s)| {
                    RunReport::new(
                        name,
                        &[crate::runner::Sample {
                            seconds: s,
                            cpu_utilisation: 1.0,
                            io_bytes: 0,
                            oversubscription_percent: 0.0,
                            disk_queue_depth: None,
                            activity: None,
                            cores: Vec::new(),
                            trace: None,
                        }],
                        1.0,
                        (1.0, 1.0),
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn the_table_and_speedups_come_from_the_medians() {
        let points = vec![
            ScalePoint {
                cores: 1,
                reports: vec![report("heat", &[("baseline", 4.0), ("umt-perf", 2.0)])],
            },
            ScalePoint {
                cores: 2,
                reports: vec![report("heat", &[("baseline", 2.0), ("umt-perf", 1.0)])],
            },
        ];
        assert_eq!(speedup(&points, "heat", "umt-perf", 2), Some(4.0));
        assert_eq!(speedup(&points, "heat", "baseline", 1), Some(1.0));
        let md = markdown(&points);
        assert!(
            md.contains("| umt-perf | 2.000 s (2.00x) | 1.000 s (2.00x) |"),
            "{md}"
        );
        assert!(md.contains("### heat"));
    }
}
