//! The runtime targets as ratios measured in one run, runtimes alternating (A B C A B C ...)
//! so that machine drift hits all alike:
//!
//! ```text
//! cargo run --release -p umt-benches --example ratios -- [repeats]
//! ```
//!
//! - spawn-and-run of empty tasks in a scope, and a tree of joins: umt-rt against rayon;
//! - a compute-only workload: monitor on against off (the monitor must cost nothing);
//! - a blocking mix: monitor on against off and rayon.
//!
//! The monitored runtime runs twice: with leaders that wait for the monitor's signal
//! (`LeaderPolicy::Idle`), and with polling leaders (`LeaderPolicy::Poll`, whose workers also
//! drain their own events at every scheduling point; the default with the perf backend).

use std::hint::black_box;
use std::time::Duration;

use umt_benches::{alternate, burn, rayon_pool, tree_rayon, tree_umt, unmonitored};
use umt_rt::{BackendKind, LeaderPolicy, Runtime};

/// What the monitored runtime did since `before`.
fn activity(rt: &Runtime, before: &umt_rt::Stats) -> String {
    let now = rt.stats();
    format!(
        "    ({}: {} leader wake-ups, {} spares created, {} surrenders, {} monitor events)",
        now.backend,
        now.leader_wakeups - before.leader_wakeups,
        now.workers_created - before.workers_created,
        now.surrenders - before.surrenders,
        now.monitor_events - before.monitor_events
    )
}

fn report(title: &str, names: &[&str], med: &[Duration], base: usize) {
    println!("{title}");
    for (n, m) in names.iter().zip(med) {
        println!(
            "  {n:<14} {:>10.1} us   {:.3}x {}",
            m.as_secs_f64() * 1e6,
            m.as_secs_f64() / med[base].as_secs_f64(),
            names[base]
        );
    }
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(30);
    let off = unmonitored();
    let on = Runtime::builder()
        .monitor(BackendKind::Auto)
        .leader_policy(LeaderPolicy::Idle)
        .build()
        .expect("runtime");
    let poll = Runtime::builder()
        .monitor(BackendKind::Auto)
        .leader_policy(LeaderPolicy::Poll)
        .build()
        .expect("runtime");
    let poll_name = format!("umt-{}-poll", poll.backend());
    let off2 = unmonitored();
    let on_name = format!("umt-{}-idle", on.backend());
    let cores = on.cpus().len();
    let ry = rayon_pool(cores);
    println!(
        "{cores} cores, monitor {}, {rounds} alternating rounds\n",
        on.selection()
    );

    let spawn_umt = |rt: &Runtime| {
        rt.scope(|s| {
            for i in 0..1000u64 {
                s.spawn(move |_| {
                    black_box(i);
                });
            }
        })
    };
    let names = [
        "umt-disabled",
        on_name.as_str(),
        "rayon",
        poll_name.as_str(),
    ];
    let med = alternate(
        rounds,
        20,
        &mut [
            (names[0], &mut || spawn_umt(&off)),
            (names[1], &mut || spawn_umt(&on)),
            (names[2], &mut || {
                ry.scope(|s| {
                    for i in 0..1000u64 {
                        s.spawn(move |_| {
                            black_box(i);
                        });
                    }
                })
            }),
            (names[3], &mut || spawn_umt(&poll)),
        ],
    );
    report(
        "spawn-and-run, 1000 empty tasks in a scope (target: umt within 1.5x of rayon)",
        &names,
        &med,
        2,
    );

    let med = alternate(
        rounds,
        20,
        &mut [
            (names[0], &mut || {
                off.install(|| tree_umt(12));
            }),
            (names[1], &mut || {
                on.install(|| tree_umt(12));
            }),
            (names[2], &mut || {
                ry.install(|| tree_rayon(12));
            }),
            (names[3], &mut || {
                poll.install(|| tree_umt(12));
            }),
        ],
    );
    report(
        "join, a tree of 4096 leaves (target: umt within 1.5x of rayon)",
        &names,
        &med,
        2,
    );

    // Short scopes (~3.4 ms) show the per-scope cost of waking parked workers through the
    // monitor; long ones (~34 ms) the steady-state cost.
    for tasks in [256usize, 2560] {
        let compute = |rt: &Runtime| {
            rt.scope(|s| {
                for _ in 0..tasks {
                    s.spawn(|_| {
                        black_box(burn(20_000));
                    });
                }
            })
        };
        let before = on.stats();
        let med = alternate(
            if tasks > 1000 { rounds.min(15) } else { rounds },
            3,
            &mut [
                (names[0], &mut || compute(&off)),
                (names[1], &mut || compute(&on)),
                ("control-off", &mut || compute(&off2)),
                (names[3], &mut || compute(&poll)),
            ],
        );
        report(
            &format!("compute only, {tasks} tasks of ~50 us (target: monitor on within 1% of off)"),
            &[names[0], names[1], "control-off", names[3]],
            &med,
            0,
        );
        println!("{}", activity(&on, &before));
    }

    let mix = |i: usize| {
        if i.is_multiple_of(2) {
            std::thread::sleep(Duration::from_millis(1));
        } else {
            black_box(burn(400_000));
        }
    };
    let before = on.stats();
    let med = alternate(
        rounds.min(15),
        1,
        &mut [
            (names[0], &mut || {
                off.scope(|s| (0..64).for_each(|i| s.spawn(move |_| mix(i))))
            }),
            (names[1], &mut || {
                on.scope(|s| (0..64).for_each(|i| s.spawn(move |_| mix(i))))
            }),
            (names[2], &mut || {
                ry.scope(|s| (0..64).for_each(|i| s.spawn(move |_| mix(i))))
            }),
            (names[3], &mut || {
                poll.scope(|s| (0..64).for_each(|i| s.spawn(move |_| mix(i))))
            }),
        ],
    );
    report(
        "blocking mix, 32 x 1 ms sleeps + 32 x ~1 ms compute",
        &names,
        &med,
        0,
    );
    println!("{}", activity(&on, &before));
}
