//! Pictures, drawn with plotters into SVG:
//! - [`timeline`]: the UMT paper's per-core timeline (its Fig. 3 and 5) of a traced run: one
//!   row per core, time on x, a colour per [`CoreState`];
//! - [`comparison`]: the speedup over baseline and the percent of the tight bound of every
//!   runtime of one or more reports, side by side.
//!
//! Each picture is drawn into a new file beside its path and renamed over it
//! ([`crate::io::replace_atomically`]): a reader sees the old picture or the whole new one, and
//! a failed drawing leaves the old one.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use umt_rt::{CoreState, Trace};

use crate::error::BenchError;
use crate::report::Report;

/// The colour of each state; idle is the background.
fn colour(state: CoreState) -> RGBColor {
    match state {
        CoreState::Application => RGBColor(46, 139, 87),
        CoreState::Blocked => RGBColor(220, 60, 50),
        CoreState::Oversubscribed => RGBColor(240, 170, 30),
        CoreState::Idle => RGBColor(235, 235, 235),
    }
}

fn plot_error(path: &Path) -> impl Fn(String) -> BenchError + '_ {
    move |why| BenchError::Plot {
        path: path.to_path_buf(),
        why,
    }
}

/// Labels of the rows or columns `0..n` at their middles (`k + 0.5`), nothing elsewhere.
fn middle_label(v: f64, name: impl Fn(usize) -> String) -> String {
    let k = v.floor();
    if (v - k - 0.5).abs() < 1e-6 && k >= 0.0 {
        name(k as usize)
    } else {
        String::new()
    }
}

/// Draws `trace` as an SVG timeline into `path`: a row per core, a bar per stretch in each
/// [`CoreState`] but idle (the background), milliseconds from the trace's start on x.
pub fn timeline(trace: &Trace, title: &str, path: &Path) -> Result<(), BenchError> {
    crate::io::replace_atomically(path, |tmp| draw_timeline(trace, title, path, tmp))
}

/// A traced run's two pictures, each written atomically: `STEM.svg` ([`timeline`], titled
/// `title`) and `STEM.json` (the Chrome trace, for <https://ui.perfetto.dev>); returns their
/// paths.
pub fn timeline_files(
    trace: &Trace,
    title: &str,
    stem: &Path,
) -> Result<(std::path::PathBuf, std::path::PathBuf), BenchError> {
    let svg = stem.with_extension("svg");
    timeline(trace, title, &svg)?;
    let chrome = stem.with_extension("json");
    crate::io::write_atomically(&chrome, trace.to_chrome_json().as_bytes())?;
    Ok((svg, chrome))
}

/// [`timeline`], drawn into `tmp` (errors name `path`, the file the user asked for).
fn draw_timeline(trace: &Trace, title: &str, path: &Path, tmp: &Path) -> Result<(), BenchError> {
    let err = plot_error(path);
    let cores = trace.cpus().len();
    let t0 = trace.start_ns();
    let ms = |ns: u64| ns.saturating_sub(t0) as f64 / 1e6;
    let end = ms(trace.end_ns()).max(1e-3);
    let height = (90 + 40 * cores.max(1)) as u32;
    let root = SVGBackend::new(tmp, (1200, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let title = if trace.monitored() {
        title.to_string()
    } else {
        format!("{title} (no monitor: a task blocked in the kernel shows as application)")
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(110)
        .build_cartesian_2d(0f64..end, 0f64..cores as f64)
        .map_err(|e| err(e.to_string()))?;
    let cpus = trace.cpus().to_vec();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("time (ms)")
        .y_labels(2 * cores + 1)
        .y_label_formatter(&|y| middle_label(*y, |k| format!("core {k} (CPU {})", cpus[k])))
        .draw()
        .map_err(|e| err(e.to_string()))?;
    chart
        .draw_series((0..cores).map(|core| {
            let y = core as f64;
            Rectangle::new(
                [(0.0, y + 0.1), (end, y + 0.9)],
                colour(CoreState::Idle).filled(),
            )
        }))
        .map_err(|e| err(e.to_string()))?
        .label(CoreState::Idle.name())
        .legend(|(x, y)| {
            Rectangle::new(
                [(x, y - 5), (x + 12, y + 5)],
                colour(CoreState::Idle).filled(),
            )
        });
    for state in [
        CoreState::Application,
        CoreState::Blocked,
        CoreState::Oversubscribed,
    ] {
        let bars: Vec<Rectangle<(f64, f64)>> = (0..cores)
            .flat_map(|core| {
                let y = core as f64;
                trace
                    .spans(core)
                    .into_iter()
                    .filter(move |s| s.state == state)
                    .map(move |s| {
                        Rectangle::new(
                            [(ms(s.start_ns), y + 0.1), (ms(s.end_ns), y + 0.9)],
                            colour(state).filled(),
                        )
                    })
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| err(e.to_string()))?
            .label(state.name())
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour(state).filled())
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(e.to_string()))?;
    root.present().map_err(|e| err(e.to_string()))
}

/// The colour of the `k`-th workload's bars.
fn workload_colour(k: usize) -> RGBColor {
    [
        RGBColor(52, 101, 164),
        RGBColor(204, 102, 0),
        RGBColor(115, 80, 160),
        RGBColor(60, 150, 150),
    ][k % 4]
}

/// Draws, into `path`, two bar charts side by side: every runtime's speedup over baseline
/// and its percent of the tight bound, a bar per report (workload) for each runtime.
pub fn comparison(reports: &[Report], path: &Path) -> Result<(), BenchError> {
    crate::io::replace_atomically(path, |tmp| draw_comparison(reports, path, tmp))
}

/// [`comparison`], drawn into `tmp` (errors name `path`, the file the user asked for).
fn draw_comparison(reports: &[Report], path: &Path, tmp: &Path) -> Result<(), BenchError> {
    let err = plot_error(path);
    let mut runtimes: Vec<String> = Vec::new();
    for r in reports.iter().flat_map(|r| &r.runs) {
        if !runtimes.contains(&r.runtime) {
            runtimes.push(r.runtime.clone());
        }
    }
    let root = SVGBackend::new(tmp, (1400, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let panels = root.split_evenly((1, 2));
    // A group per report (workload): its value for each runtime that ran it.
    let groups = |value: &dyn Fn(&crate::report::RunReport) -> f64| -> Vec<Group> {
        reports
            .iter()
            .map(|rep| {
                let values = rep
                    .runs
                    .iter()
                    .filter_map(|r| {
                        Some((runtimes.iter().position(|n| *n == r.runtime)?, value(r)))
                    })
                    .collect();
                (rep.workload.clone(), values)
            })
            .collect()
    };
    let speedup = groups(&|r| r.speedup_vs_baseline.unwrap_or(f64::NAN));
    let tight = groups(&|r| r.percent_of_tight_bound);
    bars(
        &panels[0],
        &speedup,
        &runtimes,
        "speedup over baseline",
        Some(1.0),
        SeriesLabelPosition::UpperLeft,
    )
    .map_err(&err)?;
    bars(
        &panels[1],
        &tight,
        &runtimes,
        "% of the tight bound",
        Some(100.0),
        SeriesLabelPosition::UpperLeft,
    )
    .map_err(&err)?;
    root.present().map_err(|e| err(e.to_string()))
}

/// A legend entry's bars: its label and a value per column (by column index).
type Group = (String, Vec<(usize, f64)>);

/// One bar-chart panel: for each column, a bar per group of its value (non-finite values are
/// left out), and a dashed line at `reference` if there is one.
fn bars(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    groups: &[Group],
    columns: &[String],
    title: &str,
    reference: Option<f64>,
    legend: SeriesLabelPosition,
) -> Result<(), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let top = groups
        .iter()
        .flat_map(|g| &g.1)
        .map(|v| v.1)
        .filter(|v| v.is_finite())
        .fold(reference.unwrap_or(1.0), f64::max)
        * 1.15;
    let n = columns.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, 0f64..top)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * n + 1)
        .x_label_formatter(&|x| middle_label(*x, |k| columns.get(k).cloned().unwrap_or_default()))
        .draw()
        .map_err(|x| e(&x))?;
    let width = 0.8 / groups.len().max(1) as f64;
    for (w, (label, values)) in groups.iter().enumerate() {
        let c = workload_colour(w);
        let series: Vec<Rectangle<(f64, f64)>> = values
            .iter()
            .filter(|(_, v)| v.is_finite())
            .map(|&(k, v)| {
                let x0 = k as f64 + 0.1 + w as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.95, v)], c.filled())
            })
            .collect();
        chart
            .draw_series(series)
            .map_err(|x| e(&x))?
            .label(label.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    if let Some(r) = reference {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, r), (n as f64, r)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(|x| e(&x))?;
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))
}

/// Draws, into `path`, the cores sweep: one panel per workload, cores on x, the speedup over
/// the baseline runtime at the fewest cores on y, a line per runtime, and the dashed line of
/// perfect scaling of the baseline.
pub fn scaling(points: &[crate::scale::ScalePoint], path: &Path) -> Result<(), BenchError> {
    crate::io::replace_atomically(path, |tmp| draw_scaling(points, path, tmp))
}

/// [`scaling`], drawn into `tmp` (errors name `path`, the file the user asked for).
fn draw_scaling(
    points: &[crate::scale::ScalePoint],
    path: &Path,
    tmp: &Path,
) -> Result<(), BenchError> {
    use crate::scale::{runtimes, speedup, workloads};
    let err = plot_error(path);
    let workloads = workloads(points);
    let runtimes = runtimes(points);
    let counts: Vec<usize> = points.iter().map(|p| p.cores).collect();
    let (first, last) = match (counts.iter().min(), counts.iter().max()) {
        (Some(&a), Some(&b)) => (a as f64, b as f64),
        _ => return Err(err("no core count to draw".into())),
    };
    let root = SVGBackend::new(tmp, (480 * workloads.len().max(1) as u32, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let panels = root.split_evenly((1, workloads.len().max(1)));
    for (w, area) in workloads.iter().zip(&panels) {
        let top = runtimes
            .iter()
            .flat_map(|r| counts.iter().filter_map(|&k| speedup(points, w, r, k)))
            .filter(|v| v.is_finite())
            .fold(last / first, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(w, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(first..last.max(first + 1.0), 0f64..top)
            .map_err(|e| err(e.to_string()))?;
        chart
            .configure_mesh()
            .x_labels((last - first) as usize + 1)
            .x_label_formatter(&|x| {
                if (x - x.round()).abs() < 1e-6 {
                    format!("{}", x.round())
                } else {
                    String::new()
                }
            })
            .x_desc("cores")
            .y_desc("speedup over baseline at the fewest cores")
            .draw()
            .map_err(|e| err(e.to_string()))?;
        chart
            .draw_series(DashedLineSeries::new(
                [(first, 1.0), (last, last / first)],
                6,
                4,
                BLACK.mix(0.5).into(),
            ))
            .map_err(|e| err(e.to_string()))?
            .label("perfect scaling of baseline")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.mix(0.5)));
        for (k, r) in runtimes.iter().enumerate() {
            let colour = Palette99::pick(k).to_rgba();
            let line: Vec<(f64, f64)> = counts
                .iter()
                .filter_map(|&c| speedup(points, w, r, c).map(|s| (c as f64, s)))
                .collect();
            chart
                .draw_series(LineSeries::new(line.clone(), colour.stroke_width(2)))
                .map_err(|e| err(e.to_string()))?
                .label(r.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour));
            chart
                .draw_series(line.into_iter().map(|p| Circle::new(p, 3, colour.filled())))
                .map_err(|e| err(e.to_string()))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(e.to_string()))?;
    }
    root.present().map_err(|e| err(e.to_string()))
}

/// Draws, into `path`, the service benchmark: requests per second and p99 latency, a bar per
/// scenario for each server.
pub fn serve(scenarios: &[crate::serve::ServeScenario], path: &Path) -> Result<(), BenchError> {
    crate::io::replace_atomically(path, |tmp| draw_serve(scenarios, path, tmp))
}

/// [`serve`], drawn into `tmp` (errors name `path`, the file the user asked for).
fn draw_serve(
    scenarios: &[crate::serve::ServeScenario],
    path: &Path,
    tmp: &Path,
) -> Result<(), BenchError> {
    let err = plot_error(path);
    let root = SVGBackend::new(tmp, (1400, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let panels = root.split_evenly((1, 2));
    let servers: Vec<String> = crate::serve::Server::ALL
        .iter()
        .map(|s| s.name().to_string())
        .collect();
    // A group per scenario: its value for each server, in `Server::ALL` order.
    let groups = |value: &dyn Fn(&crate::serve::ServeRun) -> f64| -> Vec<Group> {
        scenarios
            .iter()
            .map(|sc| {
                (
                    sc.scenario.clone(),
                    sc.runs.iter().map(value).enumerate().collect(),
                )
            })
            .collect()
    };
    // An open loop sends the same load to every server: its left panel is the tail of the
    // requests that do not block instead of a throughput that is the rate for all.
    let open = scenarios.iter().any(|sc| sc.params.rate.is_some());
    let (left, left_label) = if open {
        (
            groups(&|r| r.p99_others_us),
            "p99 of the requests that do not block (us)",
        )
    } else {
        (groups(&|r| r.throughput), "requests per second")
    };
    let p99 = groups(&|r| r.p99_us);
    bars(
        &panels[0],
        &left,
        &servers,
        left_label,
        None,
        SeriesLabelPosition::UpperRight,
    )
    .map_err(&err)?;
    bars(
        &panels[1],
        &p99,
        &servers,
        "p99 latency (us)",
        None,
        SeriesLabelPosition::UpperRight,
    )
    .map_err(&err)?;
    root.present().map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    use umt_rt::{TraceKind, TraceRecord, TraceThread};

    use super::*;

    /// Renders an SVG file with a real renderer (resvg), as a viewer would.
    fn render(path: &Path) -> resvg::tiny_skia::Pixmap {
        let data = std::fs::read(path).unwrap();
        let tree = resvg::usvg::Tree::from_data(&data, &resvg::usvg::Options::default()).unwrap();
        let size = tree.size().to_int_size();
        let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
        resvg::render(
            &tree,
            resvg::tiny_skia::Transform::default(),
            &mut pixmap.as_mut(),
        );
        pixmap
    }

    /// Pixels of exactly `c`.
    fn count(p: &resvg::tiny_skia::Pixmap, c: RGBColor) -> usize {
        p.pixels()
            .iter()
            .filter(|px| (px.red(), px.green(), px.blue(), px.alpha()) == (c.0, c.1, c.2, 255))
            .count()
    }

    #[test]
    fn a_timeline_shows_each_cores_states_in_their_colours() {
        let rec = |time_ns, core, kind, ready| TraceRecord {
            time_ns,
            core,
            thread: TraceThread::Worker(core),
            kind,
            ready,
        };
        // Core 0 works, blocks for half the time, works; core 1 is oversubscribed a while.
        let trace = umt_rt::advanced::trace_from_records(
            vec![0, 1],
            true,
            vec![
                rec(0, 0, TraceKind::TaskStart, 1),
                rec(2_000_000, 0, TraceKind::Drained, 0),
                rec(6_000_000, 0, TraceKind::Drained, 1),
                rec(8_000_000, 0, TraceKind::TaskEnd, 1),
                rec(1_000_000, 1, TraceKind::TaskStart, 1),
                rec(3_000_000, 1, TraceKind::Drained, 2),
                rec(4_000_000, 1, TraceKind::Drained, 1),
                rec(5_000_000, 1, TraceKind::TaskEnd, 1),
            ],
            8_000_000,
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("timeline.svg");
        timeline(&trace, "test", &path).unwrap();
        let p = render(&path);
        let (work, blocked, over, idle) = (
            count(&p, colour(CoreState::Application)),
            count(&p, colour(CoreState::Blocked)),
            count(&p, colour(CoreState::Oversubscribed)),
            count(&p, colour(CoreState::Idle)),
        );
        // Core 0 is blocked 4 of 8 ms, core 1 oversubscribed 1 ms: the areas follow.
        assert!(work > 1000 && blocked > 1000 && over > 100 && idle > 1000);
        assert!(blocked > 3 * over, "{blocked} {over}");
        drop(dir);
    }

    #[test]
    fn the_serve_plot_shows_the_others_tail_in_an_open_loop() {
        use crate::serve::{Blocking, ServeParams, ServeRun, ServeScenario, Server};
        let scenario = |rate| ServeScenario {
            scenario: "1 in 10 blocks".into(),
            params: ServeParams {
                clients: 2,
                requests: 10,
                block_every: 10,
                blocking: Blocking::Sleep(std::time::Duration::from_millis(1)),
                work: 1,
                cores: 2,
                rate,
                drive_io: true,
                handoff: false,
                clients_first: false,
            },
            runs: Server::ALL
                .iter()
                .enumerate()
                .map(|(k, &server)| ServeRun {
                    server,
                    throughput: 1000.0 * (k + 1) as f64,
                    p50_us: 100.0,
                    p99_us: 2000.0,
                    p999_us: 3000.0,
                    p99_others_us: 500.0 * (k + 1) as f64,
                    p99_late_us: rate.map(|_| 10.0),
                    monitor: None,
                })
                .collect(),
        };
        let dir = tempfile::tempdir().unwrap();
        for (rate, left) in [
            (None, "requests per second"),
            (Some(1000.0), "p99 of the requests that do not block"),
        ] {
            let path = dir.path().join("serve.svg");
            serve(&[scenario(rate)], &path).unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.contains(left), "{rate:?}: no {left:?}");
            // An open loop's throughput is its rate for every server: not drawn.
            assert_eq!(text.contains("requests per second"), rate.is_none());
            assert!(text.contains("p99 latency (us)"));
            assert!(render(&path).pixels().iter().any(|px| px.red() < 200));
        }
    }

    #[test]
    fn the_comparison_draws_a_bar_per_runtime_and_workload() {
        use crate::runner::Sample;
        let sample = |seconds| Sample {
            seconds,
            cpu_utilisation: 0.5,
            io_bytes: 1,
            oversubscription_percent: 0.0,
            disk_queue_depth: None,
            activity: None,
            cores: Vec::new(),
            trace: None,
        };
        let report = |workload: &str, t: f64| {
            Report {
                workload: workload.into(),
                params: serde_json::Value::Null,
                fom_unit: "x".into(),
                compute_seconds: 1.0,
                compute_runs_seconds: vec![1.0],
                io_runs_seconds: vec![1.0],
                io_seconds: 1.0,
                bound_seconds: 1.0,
                tight_bound_seconds: 1.2,
                runs: vec![
                    crate::report::RunReport::new("baseline", &[sample(2.0)], 1.0, (1.0, 1.2)),
                    crate::report::RunReport::new("umt-perf", &[sample(t)], 1.0, (1.0, 1.2)),
                ],
            }
            .with_speedups()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cmp.svg");
        comparison(&[report("heat", 1.5), report("fwi", 1.25)], &path).unwrap();
        let p = render(&path);
        assert!(count(&p, workload_colour(0)) > 1000);
        assert!(count(&p, workload_colour(1)) > 1000);
        // Drawn beside its path: a missing directory fails before any drawing.
        let e = comparison(&[], Path::new("/nonexistent/dir/x.svg")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/dir"), "{e}");
        // Drawn into a temporary file renamed over the path: none is left beside it.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != "cmp.svg")
            .collect();
        assert!(left.is_empty(), "{left:?}");
        drop(dir);
    }
}
